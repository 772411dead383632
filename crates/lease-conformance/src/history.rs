//! The exclusivity checker, on plain data so that it can be tested on made-up
//! histories too.

use std::fmt;
use std::time::Instant;

/// One lease as a worker's loop saw it: from the instant the pair was handed
/// to the loop until it really ended (the instant the worker was handed
/// something else, or the lease's deadline, whichever is earlier).
#[derive(Clone, Copy, Debug)]
pub struct Hold {
    /// Which group (groups are independent of each other).
    pub team: usize,
    /// Which worker.
    pub worker: usize,
    /// The pair.
    pub i: u32,
    /// The pair.
    pub n: u32,
    /// The fencing token.
    pub token: u64,
    /// Handed to the loop.
    pub start: Instant,
    /// Ended.
    pub end: Instant,
}

/// Two holds that broke the guarantee.
#[derive(Clone, Debug)]
pub struct Violation {
    /// What was wrong.
    pub what: &'static str,
    /// The first hold.
    pub a: Hold,
    /// The second hold.
    pub b: Hold,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let show = |h: &Hold, f: &mut fmt::Formatter<'_>| {
            write!(
                f,
                "worker {} held ({}, {}) token {} for {:?}",
                h.worker,
                h.i,
                h.n,
                h.token,
                h.end.saturating_duration_since(h.start)
            )
        };
        write!(f, "{}: ", self.what)?;
        show(&self.a, f)?;
        write!(f, "; ")?;
        show(&self.b, f)?;
        let gap = if self.a.end <= self.b.start {
            format!("b starts {:?} after a ends", self.b.start - self.a.end)
        } else if self.b.end <= self.a.start {
            format!("a starts {:?} after b ends", self.a.start - self.b.end)
        } else {
            let overlap = self.a.end.min(self.b.end) - self.a.start.max(self.b.start);
            format!("they overlap for {overlap:?}")
        };
        write!(f, " ({gap})")
    }
}

/// Two pairs share a task when they are the same slot, or have different
/// `n` (DESIGN section 6 counts every pair of different `n` as conflicting).
fn share_a_task(a: &Hold, b: &Hold) -> bool {
    a.n != b.n || a.i == b.i
}

/// Every violation of the exclusive lease among `holds`:
///
/// * two workers of one group holding conflicting pairs at a common instant;
/// * fencing tokens of conflicting leases of two workers that are not at
///   least 2 apart and ordered as the leases are in time (DESIGN section 4).
pub fn violations(holds: &[Hold]) -> Vec<Violation> {
    let mut out = Vec::new();
    for (x, a) in holds.iter().enumerate() {
        for b in &holds[x + 1..] {
            if a.team != b.team || a.worker == b.worker || !share_a_task(a, b) {
                continue;
            }
            if a.start < b.end && b.start < a.end {
                out.push(Violation {
                    what: "two workers held conflicting pairs at once",
                    a: *a,
                    b: *b,
                });
                continue;
            }
            let (first, second) = if a.end <= b.start { (a, b) } else { (b, a) };
            if second.token < first.token + 2 {
                out.push(Violation {
                    what: "fencing tokens are not ordered at least 2 apart",
                    a: *first,
                    b: *second,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The checker finds what it must find (so that the scenarios can fail).
    #[test]
    fn the_checker_finds_violations() {
        let t0 = Instant::now();
        let ms = |m: u64| t0 + Duration::from_millis(m);
        let hold = |worker, i, n, token, start, end| Hold {
            team: 0,
            worker,
            i,
            n,
            token,
            start: ms(start),
            end: ms(end),
        };
        // A clean history: a stand-down between n = 2 and n = 3.
        let clean = [
            hold(0, 0, 2, 10, 0, 100),
            hold(1, 1, 2, 10, 0, 100),
            hold(0, 0, 3, 12, 150, 300),
            hold(1, 1, 3, 12, 150, 300),
            hold(2, 2, 3, 13, 160, 300),
        ];
        assert!(violations(&clean).is_empty(), "{:?}", violations(&clean));
        // Same slot, overlapping.
        let same_slot = [hold(0, 1, 3, 10, 0, 100), hold(1, 1, 3, 12, 99, 200)];
        assert_eq!(violations(&same_slot).len(), 1);
        // Different n, overlapping, even with distinct i.
        let different_n = [hold(0, 0, 2, 10, 0, 100), hold(1, 1, 3, 12, 50, 200)];
        assert_eq!(violations(&different_n).len(), 1);
        // Distinct slots of one n may overlap.
        let distinct = [hold(0, 0, 2, 10, 0, 100), hold(1, 1, 2, 10, 0, 100)];
        assert!(violations(&distinct).is_empty());
        // One worker's consecutive leases never conflict with each other.
        let own = [hold(0, 0, 2, 10, 0, 100), hold(0, 1, 3, 10, 50, 200)];
        assert!(violations(&own).is_empty());
        // Other groups are independent.
        let mut other = hold(1, 0, 2, 10, 0, 100);
        other.team = 1;
        assert!(violations(&[hold(0, 0, 2, 10, 0, 100), other]).is_empty());
        // Fencing tokens: one apart, or out of order.
        let close = [hold(0, 0, 2, 10, 0, 100), hold(1, 0, 2, 11, 150, 200)];
        assert_eq!(violations(&close).len(), 1);
        let backwards = [hold(0, 0, 2, 20, 0, 100), hold(1, 0, 2, 12, 150, 200)];
        assert_eq!(violations(&backwards).len(), 1);
    }
}
