//! A scenario's history as plain data, judged by the one checker of
//! `lease-history`, so that the judgement can be tested on made-up
//! histories too.

use std::collections::BTreeMap;
use std::time::Instant;

use lease_history::{Record, Summary};

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

/// The history of each team in the format of docs/history-format.md: an `own` and
/// a `release` per hold, workers named `w<number>`, instants in microseconds
/// since the earliest start.
pub fn records(holds: &[Hold]) -> BTreeMap<usize, Vec<Record>> {
    let Some(t0) = holds.iter().map(|h| h.start).min() else {
        return BTreeMap::new();
    };
    let us =
        |t: Instant| u64::try_from(t.saturating_duration_since(t0).as_micros()).unwrap_or(u64::MAX);
    let mut teams: BTreeMap<usize, Vec<Record>> = BTreeMap::new();
    for h in holds {
        let worker = format!("w{}", h.worker);
        let records = teams.entry(h.team).or_default();
        records.push(Record::own(&worker, h.i, h.n, h.token, us(h.start)));
        records.push(Record::release(&worker, h.i, h.n, us(h.end.max(h.start))));
    }
    teams
}

/// The checker's verdict on every team that is not ok (exclusivity, fencing
/// or an inconsistent line), by team.
pub fn violations(holds: &[Hold]) -> Vec<(usize, Summary)> {
    records(holds)
        .into_iter()
        .map(|(team, records)| (team, lease_history::check(&records, None)))
        .filter(|(_, summary)| !summary.is_ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The judgement finds what it must find (so that the scenarios can fail).
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
        let count = |holds: &[Hold]| {
            violations(holds)
                .iter()
                .map(|(_, s)| s.violation_count + s.fencing_count + s.anomaly_count)
                .sum::<u64>()
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
        assert_eq!(count(&same_slot), 1);
        // Different n, overlapping, even with distinct i.
        let different_n = [hold(0, 0, 2, 10, 0, 100), hold(1, 1, 3, 12, 50, 200)];
        assert_eq!(count(&different_n), 1);
        // Distinct slots of one n may overlap.
        let distinct = [hold(0, 0, 2, 10, 0, 100), hold(1, 1, 2, 10, 0, 100)];
        assert!(violations(&distinct).is_empty());
        // Other groups are independent.
        let mut other = hold(1, 0, 2, 10, 0, 100);
        other.team = 1;
        assert!(violations(&[hold(0, 0, 2, 10, 0, 100), other]).is_empty());
        // Fencing tokens: one apart, or out of order.
        let close = [hold(0, 0, 2, 10, 0, 100), hold(1, 0, 2, 11, 150, 200)];
        assert_eq!(count(&close), 1);
        let backwards = [hold(0, 0, 2, 20, 0, 100), hold(1, 0, 2, 12, 150, 200)];
        assert_eq!(count(&backwards), 1);
        // The records are per team, in the format of docs/history-format.md.
        let teams = records(&[hold(3, 0, 1, 7, 0, 5), other]);
        assert_eq!(teams.len(), 2);
        assert_eq!(
            teams[&0][0].to_line(),
            r#"{"worker":"w3","event":"own","i":0,"n":1,"token":7,"at_us":0}"#
        );
        assert_eq!(
            teams[&0][1].to_line(),
            r#"{"worker":"w3","event":"release","i":0,"n":1,"at_us":5000}"#
        );
    }
}
