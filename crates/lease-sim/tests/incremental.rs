//! Rule 13, incremental handover: every property in the simulator is judged
//! per task by the history checker (task-set `own` lines), and each of the
//! rule's three load-bearing conditions has a negative control the checker
//! must catch (research `bad-arrival`, `bad-k1only`, `bad-skip`).

use lease_core::{HandoverMode, Mode, Options};
use lease_history::Summary;
use lease_sim::{Faults, RunConfig, random_run};

fn run(seed: u64, handover: HandoverMode, customize: fn(Options) -> Options) -> Summary {
    let cfg = RunConfig {
        mode: Mode::Ranked,
        handover,
        faults: Faults {
            within_guarantee: true,
            ..Faults::default()
        },
        customize,
        ..RunConfig::new(seed, 5, 120)
    };
    random_run(&cfg).expect("valid options").summary
}

fn violated(s: &Summary) -> bool {
    !s.is_ok() || s.tasks.as_ref().is_some_and(|t| !t.is_ok())
}

/// Every fault the guarantee covers, churn, both handover modes: no task is
/// ever held by two workers, and per-task fencing holds. Incremental runs
/// are judged per task (their histories name the mapping).
#[test]
fn no_task_is_ever_held_twice_in_either_mode() {
    for seed in 0..60 {
        let s = run(seed, HandoverMode::Incremental, std::convert::identity);
        let tasks = s.tasks.as_ref().expect("incremental histories have task sets");
        assert!(s.is_ok() && tasks.is_ok(), "incremental seed {seed}: {s}");
        assert!(tasks.coverage > 0.3, "seed {seed}: coverage {}", tasks.coverage);
        let s = run(seed, HandoverMode::Whole, std::convert::identity);
        assert!(s.is_ok(), "whole seed {seed}: {s}");
    }
}

/// How many of `seeds` the checker flags with `customize`.
fn caught(seeds: std::ops::Range<u64>, customize: fn(Options) -> Options) -> usize {
    seeds
        .filter(|&seed| violated(&run(seed, HandoverMode::Incremental, customize)))
        .count()
}

/// `bad-k1only`: granting `T(p(k-1))` alone, without the intersection with
/// `T(p(k-2))`, overlaps another worker on most runs with churn.
#[test]
fn granting_the_newest_pair_alone_is_caught() {
    let n = caught(0..20, |mut o| {
        o.sabotage_grant_newest_pair_only = true;
        o
    });
    assert!(n >= 5, "bad-k1only caught in only {n}/20 runs");
}

/// `bad-arrival`: a deadline anchored at the reply's arrival outlives the
/// `(k+2)L` bound when the reply is slow, and a kept part is then served
/// past it.
#[test]
fn a_deadline_from_the_arrival_is_caught() {
    let n = caught(0..60, |mut o| {
        o.sabotage_deadline_from_arrival = true;
        o
    });
    assert!(n >= 1, "bad-arrival never caught in 60 runs");
}

/// `bad-skip`: `p(k-2)` from the previous processed reply even when that
/// reply was not from `k-1` (a missed interval in between).
#[test]
fn a_pair_from_an_older_reply_is_caught() {
    let n = caught(0..60, |mut o| {
        o.sabotage_pair_from_any_previous_reply = true;
        o
    });
    assert!(n >= 1, "bad-skip never caught in 60 runs");
}
