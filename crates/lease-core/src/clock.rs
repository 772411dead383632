//! Estimates of the server clock and of the round trip, from the worker's own
//! registrations (rules 8, 9 and 10 of docs/protocol.md).

/// Offset between the server clock and the local clock, in microseconds:
/// `server = local + offset`. Estimated from the midpoint of send and receive,
/// preferring samples with a short round trip (their midpoint is tighter).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SkewEstimate {
    sample: Option<Sample>,
}

#[derive(Clone, Copy, Debug)]
struct Sample {
    offset: i64,
    rtt: i64,
    taken_at: i64,
}

impl SkewEstimate {
    /// The current offset, if any reply has been seen.
    pub(crate) fn offset(&self) -> Option<i64> {
        self.sample.map(|s| s.offset)
    }

    /// How far the offset may be from the truth: half the round trip of its
    /// sample (0 before the first one).
    pub(crate) fn uncertainty(&self) -> i64 {
        self.sample.map_or(0, |s| s.rtt / 2)
    }

    /// Checks a reply executed at server time `server` for a request sent at
    /// local `sent` and received at local `received`, then takes it into the
    /// estimate (rule 10: a skew change of more than `tolerance`, the gap,
    /// means the server clock jumped). Returns the jump (the estimated
    /// change in microseconds, positive = ahead) if there was one.
    ///
    /// The change is the new sample's offset (midpoint of send and receive)
    /// minus the stored one; each is uncertain by half its round trip, so the
    /// true change lies within `u = (rtt_old + rtt_new) / 2` of it. When the
    /// samples are precise enough to tell (`u < tolerance / 2`), a jump is any
    /// change that *may* exceed the tolerance (`|change| + u > tolerance`):
    /// every step larger than the gap is caught, and no reply without a step
    /// is taken for one (its change is at most `u`). Only samples too slow to
    /// tell fall back to flagging what *must* exceed it (`|change| - u >
    /// tolerance`), which is all an imprecise sample can say.
    pub(crate) fn observe(
        &mut self,
        sent: i64,
        received: i64,
        server: i64,
        tolerance: i64,
        max_age: i64,
    ) -> Option<i64> {
        let rtt = (received - sent).max(0);
        let offset = server - (sent + rtt / 2);
        let jump = match self.sample {
            None => None,
            Some(old) => {
                let change = offset - old.offset;
                let u = (old.rtt + rtt) / 2;
                let jumped = if 2 * u < tolerance {
                    change.abs() + u > tolerance
                } else {
                    change.abs() - u > tolerance
                };
                jumped.then_some(change)
            }
        };
        let replace = match (self.sample, jump) {
            (None, _) | (_, Some(_)) => true,
            // A tighter sample, or the old one has gone stale (drift).
            (Some(old), _) => rtt <= old.rtt.saturating_mul(2) || received - old.taken_at > max_age,
        };
        if replace {
            self.sample = Some(Sample {
                offset,
                rtt,
                taken_at: received,
            });
        }
        jump
    }
}

/// Smoothed round-trip time and its variation (RFC 6298), giving an adaptive
/// per-request timeout of `srtt + 4 * rttvar`.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RttEstimate {
    srtt: Option<i64>,
    rttvar: i64,
}

impl RttEstimate {
    pub(crate) fn observe(&mut self, rtt: i64) {
        let rtt = rtt.max(0);
        match self.srtt {
            None => {
                self.srtt = Some(rtt);
                self.rttvar = rtt / 2;
            }
            Some(srtt) => {
                self.rttvar = (3 * self.rttvar + (srtt - rtt).abs()) / 4;
                self.srtt = Some((7 * srtt + rtt) / 8);
            }
        }
    }

    /// `srtt + 4 * rttvar`, or `initial` before the first sample.
    pub(crate) fn timeout(&self, initial: i64) -> i64 {
        match self.srtt {
            None => initial,
            Some(srtt) => srtt + 4 * self.rttvar,
        }
    }

    /// The smoothed round trip, if measured.
    #[cfg(test)]
    pub(crate) fn srtt(&self) -> Option<i64> {
        self.srtt
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_sample_sets_the_midpoint_offset() {
        let mut s = SkewEstimate::default();
        assert_eq!(s.observe(100, 300, 10_200, 50, 1_000_000), None);
        assert_eq!(s.offset(), Some(10_000));
    }

    #[test]
    fn slow_round_trip_is_not_a_jump_but_a_step_is() {
        let mut s = SkewEstimate::default();
        s.observe(0, 10, 1_005, 50, 1_000_000);
        // Executed late in a 5 ms round trip: still within [send, receive].
        assert_eq!(s.observe(1_000, 6_000, 6_900, 50, 1_000_000), None);
        // Server time far ahead of anything the round trip allows.
        assert!(matches!(
            s.observe(10_000, 10_010, 12_000, 50, 1_000_000),
            Some(by) if by > 0
        ));
        // Backwards.
        assert!(matches!(
            s.observe(20_000, 20_010, 15_000, 50, 1_000_000),
            Some(by) if by < 0
        ));
    }

    #[test]
    fn a_slow_first_sample_does_not_make_the_next_fast_reply_a_jump() {
        let mut s = SkewEstimate::default();
        // True offset 10_000. A 100 ms round trip that executed 99.5 ms after
        // the send: the midpoint estimate reads 49.5 ms high.
        s.observe(0, 100_000, 10_000 + 99_500, 45_000, 10_000_000);
        // A fast reply now must not look like a 4.5 ms backwards jump.
        assert_eq!(
            s.observe(200_000, 201_000, 10_000 + 200_500, 45_000, 10_000_000),
            None
        );
        assert_eq!(s.offset(), Some(10_000));
    }

    #[test]
    fn a_step_just_over_the_gap_is_caught_whatever_the_round_trips() {
        // Gap 45 ms; both samples with 10 ms round trips (u = 10 ms). The old
        // rule accepted a step up to the gap plus about one and a half round
        // trips; a step of 46 ms must be caught, forward and back.
        for step in [46_000, -46_000] {
            let mut s = SkewEstimate::default();
            s.observe(0, 10_000, 1_005_000, 45_000, 10_000_000);
            let check = s.observe(100_000, 110_000, 1_105_000 + step, 45_000, 10_000_000);
            assert!(matches!(check, Some(by) if by == step), "{step}: {check:?}");
        }
        // Without a step, a reply that executed at either end of its round
        // trip is consistent.
        let mut s = SkewEstimate::default();
        s.observe(0, 10_000, 1_005_000, 45_000, 10_000_000);
        for exec in [100_000, 110_000] {
            assert_eq!(
                s.observe(100_000, 110_000, 1_000_000 + exec, 45_000, 10_000_000),
                None
            );
        }
    }

    #[test]
    fn rto_follows_rfc6298() {
        let mut r = RttEstimate::default();
        assert_eq!(r.timeout(500), 500);
        r.observe(100);
        assert_eq!(r.timeout(500), 100 + 4 * 50);
        r.observe(100);
        assert_eq!(r.srtt(), Some(100));
        assert_eq!(r.timeout(500), 100 + 4 * 37);
    }
}
