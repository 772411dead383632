//! The checker on made-up histories: what it must accept, what it must
//! report (its negative controls), and its figures by hand.

use super::*;
use crate::{History, LeaveHow};

fn own(w: &str, i: u32, n: u32, token: u64, at: u64) -> Record {
    Record::own(w, i, n, token, at)
}

fn rel(w: &str, i: u32, n: u32, at: u64) -> Record {
    Record::release(w, i, n, at)
}

fn checker(records: Vec<Record>) -> Checker {
    Checker::new(&records, None)
}

#[test]
fn two_workers_partitioning_two_slots_are_ok_and_covered() {
    let c = checker(vec![
        own("a", 0, 2, 10, 100),
        own("b", 1, 2, 10, 100),
        rel("a", 0, 2, 1000),
        rel("b", 1, 2, 1000),
    ]);
    let s = c.summary();
    assert!(s.is_ok(), "{s}");
    assert_eq!(
        (s.violation_count, s.fencing_count, s.anomaly_count),
        (0, 0, 0)
    );
    let cov = c.coverage_in(100, 1000);
    assert_eq!((cov.covered_us, cov.uncovered_us), (900, 0));
    assert_eq!(cov.fraction(), 1.0);
    assert_eq!(s.coverage, cov);
    assert_eq!(c.covered_spans(), &[(100, 1000)]);
    // A window reaching outside the run is uncovered there.
    let wide = c.coverage_in(0, 1100);
    assert_eq!((wide.covered_us, wide.uncovered_us), (900, 200));
    assert_eq!((s.owns, s.releases), (2, 2));
    assert!(
        s.to_string()
            .starts_with("checker: ok violations=0 fencing=0 ")
    );
}

#[test]
fn same_slot_overlap_is_a_violation_with_its_length() {
    let c = checker(vec![
        own("a", 0, 2, 10, 100),
        own("b", 0, 2, 12, 300),
        rel("a", 0, 2, 500),
        rel("b", 0, 2, 900),
    ]);
    assert_eq!(c.violation_count(), 1);
    let v = &c.violations()[0];
    assert_eq!(v.kind, ViolationKind::SameSlot);
    assert_eq!(
        (v.first.worker.as_str(), v.second.worker.as_str()),
        ("a", "b")
    );
    assert_eq!((v.start_us, v.overlap_us), (300, 200));
    assert_eq!(c.fencing_count(), 0);
    let s = c.summary();
    assert!(!s.is_ok());
    assert!(
        s.to_string()
            .starts_with("checker: VIOLATION violations=1 "),
        "{s}"
    );
    // The overlap is not coverage: two holders of one slot, none of 1.
    assert_eq!(c.coverage().covered_us, 0);
}

#[test]
fn overlap_across_different_n_is_a_violation() {
    let c = checker(vec![
        own("a", 0, 2, 10, 0),
        own("b", 2, 3, 12, 400),
        rel("a", 0, 2, 500),
        rel("b", 2, 3, 800),
    ]);
    assert_eq!(c.violation_count(), 1);
    let v = &c.violations()[0];
    assert_eq!(v.kind, ViolationKind::MixedN);
    assert_eq!((v.start_us, v.overlap_us), (400, 100));
    assert_eq!((v.first.n, v.second.n), (2, 3));
}

#[test]
fn overlap_counts_are_exact_for_many_holders() {
    // Three holders of one slot at once: three overlapping pairs.
    let c = checker(vec![
        own("a", 0, 1, 1, 0),
        own("b", 0, 1, 3, 10),
        own("c", 0, 1, 5, 20),
        rel("a", 0, 1, 100),
        rel("b", 0, 1, 100),
        rel("c", 0, 1, 100),
    ]);
    assert_eq!(c.violation_count(), 3);
    let lens: Vec<_> = c.violations().iter().map(|v| v.overlap_us).collect();
    assert_eq!(lens, vec![90, 80, 80]);
}

#[test]
fn back_to_back_handover_is_not_a_violation() {
    for records in [
        vec![
            own("a", 0, 1, 10, 0),
            rel("a", 0, 1, 500),
            own("b", 0, 1, 12, 500),
            rel("b", 0, 1, 900),
        ],
        // Same instant, the other way round in the file.
        vec![
            own("a", 0, 1, 10, 0),
            own("b", 0, 1, 12, 500),
            rel("a", 0, 1, 500),
            rel("b", 0, 1, 900),
        ],
    ] {
        let c = checker(records);
        let s = c.summary();
        assert!(s.is_ok(), "{s}");
        assert_eq!(s.coverage.covered_us, 900);
        assert_eq!(c.covered_spans(), &[(0, 900)]);
    }
}

#[test]
fn late_written_release_with_earlier_instant_is_paired_by_time() {
    // a stalled: its lease ended at 500 (its deadline) but it only wrote
    // the release after b had already taken the slot at 600.
    let c = checker(vec![
        own("a", 0, 1, 10, 0),
        own("b", 0, 1, 12, 600),
        rel("a", 0, 1, 500),
        rel("b", 0, 1, 1000),
    ]);
    let s = c.summary();
    assert!(s.is_ok(), "{s}");
    assert_eq!(c.holdings()[0].end_us, 500);
    assert_eq!(c.holdings()[0].end, HoldingEnd::Released);
    assert_eq!((s.coverage.covered_us, s.coverage.uncovered_us), (900, 100));
    assert_eq!(s.coverage.fraction(), 0.9);
    assert_eq!(c.covered_spans(), &[(0, 500), (600, 1000)]);
    assert_eq!(s.stand_downs.count, 0);

    // Had the release really come at its line's place (after b's own), the
    // holdings would overlap: the instant, not the file order, decides.
    let c = checker(vec![
        own("a", 0, 1, 10, 0),
        own("b", 0, 1, 12, 600),
        rel("a", 0, 1, 700),
        rel("b", 0, 1, 1000),
    ]);
    assert_eq!(c.violation_count(), 1);
    assert_eq!(c.violations()[0].overlap_us, 100);
}

#[test]
fn fencing_tokens_must_be_two_apart_and_ordered() {
    let run = |t1: u64, t2: u64| {
        checker(vec![
            own("a", 0, 1, t1, 0),
            rel("a", 0, 1, 100),
            own("b", 0, 1, t2, 100),
            rel("b", 0, 1, 200),
        ])
    };
    let c = run(10, 11);
    assert_eq!(c.fencing_count(), 1);
    let f = &c.fencing_violations()[0];
    assert_eq!((f.earlier.token, f.later.token), (10, 11));
    assert_eq!(
        (f.earlier.worker.as_str(), f.later.worker.as_str()),
        ("a", "b")
    );
    assert_eq!(c.violation_count(), 0);
    assert!(!c.summary().is_ok());
    assert!(c.summary().to_string().contains(" fencing=1 "));

    assert_eq!(run(10, 12).fencing_count(), 0);
    assert!(run(10, 12).summary().is_ok());
    assert_eq!(run(10, 10).fencing_count(), 1);
    assert_eq!(
        run(20, 12).fencing_count(),
        1,
        "a later lease with a smaller token"
    );

    // Different n always shares a task.
    let c = checker(vec![
        own("a", 0, 2, 10, 0),
        rel("a", 0, 2, 100),
        own("b", 1, 3, 11, 100),
        rel("b", 1, 3, 200),
    ]);
    assert_eq!(c.fencing_count(), 1);
    // Same n, different i: no shared task, no constraint.
    let c = checker(vec![
        own("a", 0, 2, 10, 0),
        rel("a", 0, 2, 100),
        own("b", 1, 2, 10, 100),
        rel("b", 1, 2, 200),
    ]);
    assert_eq!(c.fencing_count(), 0);
    // The same worker may go on with the next token.
    let c = checker(vec![
        own("a", 0, 1, 10, 0),
        rel("a", 0, 1, 100),
        own("a", 0, 1, 11, 150),
        rel("a", 0, 1, 200),
    ]);
    assert_eq!(c.fencing_count(), 0);
    // The check is against the largest earlier token of another worker,
    // even when a third worker's lease came in between.
    let c = checker(vec![
        own("a", 0, 1, 30, 0),
        rel("a", 0, 1, 100),
        own("b", 0, 2, 40, 100),
        rel("b", 0, 2, 200),
        own("a", 0, 1, 41, 200),
        rel("a", 0, 1, 300),
    ]);
    assert_eq!(c.fencing_count(), 1);
    assert_eq!(c.fencing_violations()[0].earlier.worker, "b");
}

#[test]
fn coverage_stand_downs_and_join_to_own_by_hand() {
    // a, b hold n=2 until 1000/1200; c joins at 900; all three re-own
    // on n=3 at 2000, 2100, 2050; c ends first at 2800.
    let history = History::new(vec![
        Record::join("a", 0),
        Record::join("b", 0),
        own("a", 0, 2, 5, 0),
        own("b", 1, 2, 5, 0),
        Record::join("c", 900),
        rel("a", 0, 2, 1000),
        Record::fault("restart", 1100),
        rel("b", 1, 2, 1200),
        own("a", 0, 3, 9, 2000),
        own("c", 2, 3, 9, 2050),
        own("b", 1, 3, 9, 2100),
        Record::join("d", 2500),
        rel("c", 2, 3, 2800),
        rel("a", 0, 3, 3000),
        rel("b", 1, 3, 3000),
    ]);
    let c = Checker::new(history.records(), None);
    let s = c.summary();
    assert!(s.is_ok(), "{s}");
    // Full: [0, 1000) on n=2, [2100, 2800) on n=3.
    assert_eq!(c.covered_spans(), &[(0, 1000), (2100, 2800)]);
    assert_eq!((s.coverage.from_us, s.coverage.to_us), (0, 3000));
    assert_eq!(
        (s.coverage.covered_us, s.coverage.uncovered_us),
        (1700, 1300)
    );
    let w = c.coverage_in(500, 2500);
    assert_eq!((w.covered_us, w.uncovered_us), (900, 1100));
    assert_eq!(w.fraction(), 0.45);
    assert_eq!(c.coverage_in(1000, 2100).covered_us, 0);
    assert_eq!(c.coverage_in(2500, 2500).fraction(), 1.0);

    assert_eq!(s.stand_downs.count, 2);
    assert_eq!(s.stand_downs.total_idle_us, 1000 + 900);
    assert_eq!(s.stand_downs.max_idle_us, 1000);
    assert_eq!(s.stand_downs.per_worker_idle_us["a"], 1000);
    assert_eq!(s.stand_downs.per_worker_idle_us["b"], 900);

    let delays: Vec<_> = c
        .join_to_own()
        .iter()
        .map(|j| (j.worker.as_str(), j.delay_us()))
        .collect();
    assert_eq!(
        delays,
        vec![
            ("a", Some(0)),
            ("b", Some(0)),
            ("c", Some(1150)),
            ("d", None)
        ]
    );
    assert_eq!(
        s.join_to_own,
        JoinStats {
            joins: 4,
            never_owned: 1,
            p50_us: Some(0),
            p90_us: Some(1150),
            max_us: Some(1150),
        }
    );
    assert_eq!(
        (s.owns, s.releases, s.faults, s.joins, s.leaves),
        (5, 5, 1, 4, 0)
    );
    assert_eq!(
        s.to_string(),
        "checker: ok violations=0 fencing=0 anomalies=0 interval_ends=0 coverage=0.5667 \
         uncovered_ms=1.3 owns=5 releases=5 faults=1 joins=4 leaves=0 standdowns=2 \
         standdown_idle_ms=1.9 join_to_own_p50_ms=0.0 join_to_own_p90_ms=1.1 \
         join_to_own_max_ms=1.1 never_owned=1 ends_checked=0 ends_voided=0"
    );
}

#[test]
fn unreleased_holding_lasts_until_the_end() {
    let history = vec![own("a", 0, 1, 1, 100), Record::fault("stall", 400)];
    let c = Checker::new(&history, None);
    assert_eq!(c.holdings()[0].end_us, 400);
    assert_eq!(c.holdings()[0].end, HoldingEnd::EndOfHistory);
    assert_eq!(c.coverage().covered_us, 300);
    let c = Checker::new(&history, Some(1000));
    assert_eq!(c.holdings()[0].end_us, 1000);
    assert_eq!(c.coverage().covered_us, 900);
    assert_eq!(c.coverage().uncovered_us, 0);
    // An earlier end than the last record does not cut the history.
    assert_eq!(Checker::new(&history, Some(200)).end_us(), 400);
    // An empty history is ok and trivially covered.
    let empty = check(&[], None);
    assert!(empty.is_ok());
    assert_eq!(empty.coverage.fraction(), 1.0);
}

#[test]
fn own_without_release_is_a_violation() {
    let c = checker(vec![
        own("a", 0, 2, 1, 0),
        own("a", 1, 2, 1, 100),
        rel("a", 1, 2, 200),
    ]);
    assert_eq!(c.violation_count(), 1);
    let v = &c.violations()[0];
    assert_eq!(v.kind, ViolationKind::OwnWithoutRelease);
    assert_eq!(
        (v.first.i, v.first.end_us, v.first.end),
        (0, 100, HoldingEnd::Replaced)
    );
    assert_eq!((v.second.i, v.start_us), (1, 100));
    assert_eq!(c.anomaly_count(), 0);
}

#[test]
fn inconsistent_lines_are_anomalies() {
    let c = checker(vec![
        rel("a", 0, 1, 10),
        own("b", 0, 2, 1, 20),
        rel("b", 1, 2, 30),
        own("c", 3, 3, 5, 40),
        rel("c", 3, 3, 50),
    ]);
    let kinds: Vec<_> = c.anomalies().iter().map(|a| a.kind).collect();
    assert_eq!(
        kinds,
        vec![
            AnomalyKind::ReleaseWithoutOwn,
            AnomalyKind::ReleaseMismatch {
                held_i: 0,
                held_n: 2
            },
            AnomalyKind::InvalidPair,
        ]
    );
    // The mismatched release still ends b's holding.
    assert_eq!(c.holdings()[0].end_us, 30);
    let s = c.summary();
    assert_eq!(s.anomaly_count, 3);
    assert!(!s.is_ok());
    assert!(
        s.to_string()
            .starts_with("checker: VIOLATION violations=0 fencing=0 anomalies=3"),
        "{s}"
    );
}

/// A `leave` ends nothing (a graceful leaver serves its lease after the
/// cancel); the `release` that ends the lease counts, and a holding that
/// no line ends is held to the end of the history.
#[test]
fn a_leave_ends_nothing_the_release_does() {
    let base = vec![
        Record::join("a", 0),
        own("a", 0, 1, 1, 0),
        Record::leave("a", LeaveHow::Crash, 100),
        own("b", 0, 1, 3, 200),
        rel("b", 0, 1, 400),
    ];
    // Nothing says when a's lease ended: it is held to the end, over b's.
    let c = checker(base.clone());
    assert_eq!(
        (c.holdings()[0].end_us, c.holdings()[0].end),
        (400, HoldingEnd::EndOfHistory)
    );
    assert_eq!(c.violation_count(), 1);
    assert_eq!(c.summary().leaves, 1);

    // The writer ended the crashed worker's lease at its deadline, after
    // the leave line: that instant counts.
    let mut ended = base.clone();
    ended.push(rel("a", 0, 1, 150));
    let c = checker(ended.clone());
    assert!(c.summary().is_ok(), "{}", c.summary());
    assert_eq!(
        (c.holdings()[0].end_us, c.holdings()[0].end),
        (150, HoldingEnd::Released)
    );
    let mut late = base;
    late.push(rel("a", 0, 1, 250));
    let c = checker(late);
    assert_eq!(c.holdings()[0].end_us, 250);
    assert_eq!(c.violation_count(), 1);
    assert_eq!(c.violations()[0].overlap_us, 50);

    // A rejoin: the release after the leave is no stand-down.
    let mut rejoin = ended;
    rejoin.push(Record::join("a", 500));
    rejoin.push(own("a", 0, 1, 5, 600));
    rejoin.push(rel("a", 0, 1, 700));
    let c = checker(rejoin);
    assert!(c.summary().is_ok(), "{}", c.summary());
    assert_eq!(c.stand_downs().count, 0);
    assert_eq!(c.join_to_own()[1].delay_us(), Some(100));
}

#[test]
fn large_history_checks_quickly() {
    // 5 workers rotate through 5 slots for 20,000 intervals: 200,000
    // records, every handover back to back.
    let (workers, intervals, len) = (5u32, 20_000u64, 1_000u64);
    let mut records = Vec::new();
    for k in 0..intervals {
        for w in 0..workers {
            let i = (w + k as u32) % workers;
            let name = format!("w{w}");
            records.push(own(&name, i, workers, 2 * k, k * len));
            records.push(rel(&name, i, workers, (k + 1) * len));
        }
    }
    let history = History::new(records);
    let s = check(history.records(), None);
    assert!(s.is_ok(), "{s}");
    assert_eq!(s.coverage.fraction(), 1.0);
    assert_eq!(s.owns, u64::from(workers) * intervals);
    assert_eq!(s.stand_downs.count, u64::from(workers) * (intervals - 1));
    assert_eq!(s.stand_downs.total_idle_us, 0);
}
