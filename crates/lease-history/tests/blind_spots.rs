//! Crafted histories for the checker's blind spots: each is a violation or
//! an anomaly that a checker reading the lines less carefully lets through
//! (a leaver's gap, the largest token of several parts, a release before
//! its own, a lease held past its interval's end).

use lease_history::checker::{AnomalyKind, Checker, HoldingEnd};
use lease_history::tasks::TaskSet;
use lease_history::{LeaveHow, Mapping, Part, Record, Renewed, check};

const C: Mapping = Mapping::Consistent;

fn own(w: &str, parts: Vec<Part>, at: u64) -> Record {
    Record::own_task_set(w, C, parts, at).expect("at least one part")
}

/// w0 held `T(0, 2)` with token 10 and, since the group grew to 3, also
/// `T(0, 3) ∩ T(0, 2)` with token 12; it is cancelled at 1000 (graceful
/// leave, rule 16) and keeps serving both parts until each one's end: the
/// old part until 2000 (its `own` of the rest is written then), the new
/// one until 3000. w2 takes `T(2, 3)` at 1200, while w0 still holds the
/// old part, which shares tasks with it.
fn leaver_overlapped_in_its_gap() -> Vec<Record> {
    let old = Part::whole(0, 2, 10);
    let new = Part::intersection(0, 3, 0, 2, 12);
    vec![
        own("w0", vec![old, new], 0),
        Record::leave("w0", LeaveHow::Cancel, 1_000),
        own("w2", vec![Part::whole(2, 3, 12)], 1_200),
        own("w0", vec![new], 2_000),
        Record::release("w2", 2, 3, 2_000),
        Record::release("w0", 0, 3, 3_000),
    ]
}

#[test]
fn a_graceful_leaver_holds_each_part_until_its_own_end_after_the_cancel() {
    let c = Checker::new(&leaver_overlapped_in_its_gap(), None);
    // The leaver's first holding runs to its next own, not to the leave.
    let first = &c.holdings()[0];
    assert_eq!(
        (first.worker.as_str(), first.end_us, first.end),
        ("w0", 2_000, HoldingEnd::Replaced)
    );
    let t = c.tasks().expect("a task-set history");
    assert_eq!(t.violation_count, 1, "{:?}", t.violations);
    let v = &t.violations[0];
    assert_eq!(
        (v.first.worker.as_str(), v.second.worker.as_str()),
        ("w0", "w2")
    );
    let shared = TaskSet::pair(C, 0, 2).common(&TaskSet::pair(C, 2, 3));
    assert!(shared > 0);
    assert_eq!((v.shared, v.start_us, v.overlap_us), (shared, 1_200, 800));
    assert!(!c.summary().is_ok());

    // The same history with w2 arriving once the old part has ended is
    // clean: the leave itself is no violation.
    let mut records = leaver_overlapped_in_its_gap();
    records[2] = own("w2", vec![Part::whole(2, 3, 12)], 2_000);
    records[4] = Record::release("w2", 2, 3, 3_000);
    let s = check(&records, None);
    assert!(s.is_ok(), "{s}");
}

/// B held `T(2, 3)` with token 9; A then holds `T(2, 3)` in two parts,
/// `T(2, 3) ∩ T(0, 2)` with token 10 and all of `T(2, 3)` with token 12.
/// The part with token 10 is a lease of its own, and 10 < 9 + 2.
#[test]
fn every_part_is_fenced_not_only_the_largest_token_of_a_task() {
    let records = vec![
        own("B", vec![Part::whole(2, 3, 9)], 0),
        Record::release("B", 2, 3, 1_000),
        own(
            "A",
            vec![Part::intersection(2, 3, 0, 2, 10), Part::whole(2, 3, 12)],
            1_000,
        ),
        Record::release("A", 2, 3, 2_000),
    ];
    let t = check(&records, None).tasks.expect("a task-set history");
    assert_eq!(t.violation_count, 0);
    assert_eq!(t.fencing_count, 1, "{:?}", t.fencing);
    let f = &t.fencing[0];
    assert_eq!((f.earlier_token, f.later_token), (9, 10));
    assert_eq!(
        (f.earlier.worker.as_str(), f.later.worker.as_str()),
        ("B", "A")
    );
    assert!(TaskSet::part(C, &Part::intersection(2, 3, 0, 2, 10)).contains(f.task as usize));

    // With the smaller part at 11 every part is 2 above B's token.
    let mut fenced = records;
    fenced[2] = own(
        "A",
        vec![Part::intersection(2, 3, 0, 2, 11), Part::whole(2, 3, 12)],
        1_000,
    );
    assert!(check(&fenced, None).is_ok());
}

/// w0's loop received a pair at 1000 whose lease had ended at 900: its
/// `release`, written after the `own`, carries 900. Read in time order the
/// release would come first and the holding would never end, overlapping
/// w1 from 2000 on.
#[test]
fn a_release_written_with_an_instant_before_its_own_is_an_anomaly() {
    let whole = vec![
        Record::own("w0", 0, 1, 10, 0),
        Record::release("w0", 0, 1, 500),
        Record::own("w0", 0, 1, 11, 1_000),
        Record::release("w0", 0, 1, 900),
        Record::own("w1", 0, 1, 13, 2_000),
        Record::release("w1", 0, 1, 3_000),
    ];
    let c = Checker::new(&whole, None);
    let s = c.summary();
    assert_eq!(s.violation_count, 0, "{s}");
    assert_eq!(s.anomaly_count, 1, "{s}");
    let a = &c.anomalies()[0];
    assert_eq!(a.kind, AnomalyKind::ReleaseBeforeOwn { own_us: 1_000 });
    assert_eq!((a.worker.as_str(), a.at_us), ("w0", 900));
    // The late holding lasts nothing.
    let late = &c.holdings()[1];
    assert_eq!(
        (late.start_us, late.end_us, late.end),
        (1_000, 1_000, HoldingEnd::Released)
    );
    assert!(!s.is_ok());
    assert!(s.to_string().contains(" anomalies=1 "), "{s}");

    // The same with task sets: the late own replaces the holding, and the
    // release before it ends the late holding at the own.
    let parts = vec![
        own("w0", vec![Part::whole(0, 1, 10)], 0),
        own("w0", vec![Part::whole(0, 1, 11)], 1_000),
        Record::release("w0", 0, 1, 900),
        own("w1", vec![Part::whole(0, 1, 13)], 2_000),
        Record::release("w1", 0, 1, 3_000),
    ];
    let c = Checker::new(&parts, None);
    let s = c.summary();
    assert_eq!(s.tasks.as_ref().map(|t| t.violation_count), Some(0), "{s}");
    assert_eq!(
        c.anomalies().iter().map(|a| a.kind).collect::<Vec<_>>(),
        vec![AnomalyKind::ReleaseBeforeOwn { own_us: 1_000 }]
    );
    assert_eq!(c.holdings()[1].len_us(), 0);
    assert!(!s.is_ok());

    // A release written late with an instant after its own (a stalled
    // worker writes its deadline) is no anomaly.
    let stalled = vec![
        Record::own("w0", 0, 1, 10, 0),
        Record::own("w1", 0, 1, 12, 600),
        Record::release("w0", 0, 1, 500),
        Record::release("w1", 0, 1, 1_000),
    ];
    assert!(check(&stalled, None).is_ok());
}

/// `L` = 1 s; the server clock reads `10 L` at the history's instant 0.
const L: u64 = 1_000_000;

fn clock_at(server_us: u64, at_us: u64) -> Record {
    Record::clock(L, server_us, at_us)
}

/// A lease last renewed in interval 12 ends by server time `14 L`, here
/// history instant `4 L`: on it is fine, one microsecond later is a
/// violation of its own kind.
#[test]
fn a_lease_held_past_the_end_of_the_interval_after_its_renewal_is_a_violation() {
    let run = |end: u64, renewed: u64| {
        check(
            &[
                clock_at(10 * L, 0),
                Record::own("w0", 0, 1, 11, 2 * L),
                Record::release("w0", 0, 1, end).with_renewed(Renewed::Pair(renewed)),
            ],
            None,
        )
    };
    let on_time = run(4 * L, 12);
    assert!(on_time.is_ok(), "{on_time}");
    assert_eq!(on_time.interval_ends_checked, 1);
    let late = run(4 * L + 1, 12);
    assert_eq!(late.interval_end_count, 1, "{late}");
    assert_eq!((late.violation_count, late.anomaly_count), (0, 0));
    let v = &late.interval_ends[0];
    assert_eq!(
        (v.renewed, v.limit_server_us(), v.late_us()),
        (12, 14 * L, 1)
    );
    assert_eq!(v.part, None);
    assert!(!late.is_ok());
    assert!(late.to_string().contains(" interval_ends=1 "), "{late}");
    // A renewal in 13 moves the limit to 15 L.
    assert!(run(4 * L + 1, 13).is_ok());
    // Without a clock line nothing is checked, and nothing is voided.
    let blind = check(
        &[
            Record::own("w0", 0, 1, 11, 2 * L),
            Record::release("w0", 0, 1, 9 * L).with_renewed(Renewed::Pair(12)),
        ],
        None,
    );
    assert!(blind.is_ok());
    assert_eq!(
        (blind.interval_ends_checked, blind.interval_ends_voided),
        (0, 1)
    );
}

/// A forward step of the server clock after interval 12 began lets a lease
/// from 12 outlive `14 L` on the stepped clock by up to the step; one
/// before it does not (the lease's deadline was taken after it), and a
/// backward step voids the check.
#[test]
fn forward_steps_since_the_interval_began_are_allowed_and_backward_ones_void_the_check() {
    let step = 75_000; // G / 2 at g = 0.15
    let lease = |end: u64| {
        [
            Record::own("w0", 0, 1, 11, 2 * L),
            Record::release("w0", 0, 1, end).with_renewed(Renewed::Pair(12)),
        ]
    };
    // The step at 3 L (server 13 L): the end at 3.95 L reads 14.025 L.
    let mut after = vec![clock_at(10 * L, 0), clock_at(13 * L + step, 3 * L)];
    after.extend(lease(4 * L - 50_000));
    let s = check(&after, None);
    assert!(s.is_ok(), "{s}");
    assert_eq!(s.interval_ends_checked, 1);
    // Up to 4 L (server 14.075 L, 14 L unstepped) it may be held; a
    // microsecond more is late.
    let mut until = after.clone();
    until[3] = Record::release("w0", 0, 1, 4 * L).with_renewed(Renewed::Pair(12));
    assert!(check(&until, None).is_ok());
    let mut beyond = after.clone();
    beyond[3] = Record::release("w0", 0, 1, 4 * L + 1).with_renewed(Renewed::Pair(12));
    let s = check(&beyond, None);
    assert_eq!(s.interval_end_count, 1, "{s}");
    assert_eq!(s.interval_ends[0].steps_us, step);
    assert_eq!(s.interval_ends[0].late_us(), 1);

    // The step at 1 L (server 11 L), before interval 12 began: not allowed.
    let mut before = vec![clock_at(10 * L, 0), clock_at(11 * L + step, L)];
    before.extend(lease(4 * L - 50_000));
    let s = check(&before, None);
    assert_eq!(s.interval_end_count, 1, "{s}");
    assert_eq!(
        (s.interval_ends[0].steps_us, s.interval_ends[0].late_us()),
        (0, 25_000)
    );

    // A step back at 3 L: interval numbers repeat, the check is void.
    let mut back = vec![clock_at(10 * L, 0), clock_at(12 * L, 3 * L)];
    back.extend(lease(5 * L));
    let s = check(&back, None);
    assert!(s.is_ok(), "{s}");
    assert_eq!((s.interval_ends_checked, s.interval_ends_voided), (0, 1));
}

/// Task sets: a replacing `own` carries the renewal intervals of the
/// holding it ends, a `release` those of the last one, one per part; each
/// part is judged against its own interval.
#[test]
fn each_part_is_judged_against_the_end_of_its_own_interval() {
    let old = Part::whole(0, 2, 10);
    let new = Part::intersection(0, 3, 0, 2, 12);
    let records = |old_renewed: u64| {
        vec![
            clock_at(10 * L, 0),
            own("w0", vec![old, new], L),
            // The old part ran out at 2.5 L; it was last renewed in
            // `old_renewed`.
            own("w0", vec![new], 2 * L + L / 2).with_renewed(Renewed::Parts(vec![old_renewed, 12])),
            Record::release("w0", 0, 3, 3 * L).with_renewed(Renewed::Parts(vec![13])),
        ]
    };
    let s = check(&records(11), None);
    assert!(s.is_ok(), "{s}");
    assert_eq!(s.interval_ends_checked, 3);
    // Renewed in 10, the old part had to end by 12 L (history 2 L).
    let s = check(&records(10), None);
    assert_eq!(s.interval_end_count, 1, "{s}");
    let v = &s.interval_ends[0];
    assert_eq!((v.part, v.renewed, v.late_us()), (Some(old), 10, L / 2));
    assert!(!s.is_ok());

    // Renewal intervals that do not fit the holding they end.
    let mut wrong = records(11);
    wrong[3] = Record::release("w0", 0, 3, 3 * L).with_renewed(Renewed::Parts(vec![13, 13]));
    wrong.push(Record::own("w1", 0, 1, 20, 4 * L));
    wrong.push(Record::release("w1", 0, 1, 5 * L).with_renewed(Renewed::Parts(vec![20])));
    let c = Checker::new(&wrong, None);
    assert_eq!(
        c.anomalies().iter().map(|a| a.kind).collect::<Vec<_>>(),
        vec![AnomalyKind::RenewedMismatch, AnomalyKind::RenewedMismatch]
    );
    assert!(!c.summary().is_ok());
}
