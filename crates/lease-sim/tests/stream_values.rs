//! The stream's promise (rule 11 of docs/protocol.md, and the `Lease`
//! docs): a worker's loop is handed a new value only when the set of tasks
//! it holds changes. Renewals, parts that hold no task the others do not
//! already hold, and replies that certify what is held yield nothing.
//!
//! Judged by task membership alone, independently of the core's own
//! bookkeeping: each `Held` value's task set is listed over the ids
//! `0..4096` with `Part::contains` on its parts (valid or not: the set the
//! value names), and no two consecutive `Held` values of one worker may
//! name the same set. Randomized runs with churn and every fault the
//! guarantee covers, deterministic seeds, both handovers.

use lease_core::{Assignment, Event, Handover, Lease};
use lease_sim::{Faults, Observed, RunConfig, WorkerId, random_run};
use std::collections::HashMap;

/// The task universe the sets are compared over.
const IDS: u64 = 4096;

/// The ids of `0..IDS` in one of the value's parts.
fn task_set(lease: &Lease) -> Vec<bool> {
    (0..IDS)
        .map(|id| {
            lease
                .parts()
                .iter()
                .any(|p| p.part().contains(lease.mapping(), id))
        })
        .collect()
}

/// What the loops of one run received, per worker.
#[derive(Default)]
struct Counts {
    held: usize,
    /// `Held` values that directly followed another `Held` value.
    held_after_held: usize,
    /// Consecutive `Held` values with the same task set, as
    /// `(seed, worker, instant in µs)`.
    repeats: Vec<(u64, WorkerId, u128)>,
}

fn judge(seed: u64, observed: &[Observed]) -> Counts {
    let mut counts = Counts::default();
    let mut previous: HashMap<WorkerId, Vec<bool>> = HashMap::new();
    for o in observed {
        let Event::Assignment(a) = &o.event else {
            continue;
        };
        match a {
            Assignment::Held(lease) => {
                counts.held += 1;
                let set = task_set(lease);
                if let Some(before) = previous.get(&o.worker) {
                    counts.held_after_held += 1;
                    if *before == set {
                        counts.repeats.push((seed, o.worker, o.at.as_micros()));
                    }
                }
                previous.insert(o.worker, set);
            }
            Assignment::Idle(_) => {
                previous.remove(&o.worker);
            }
        }
    }
    counts
}

/// 150 runs of 5 workers over 60 intervals with churn (joins, cancels,
/// crashes, stalls) and every fault the guarantee covers, default options
/// but the handover.
fn runs(handover: Handover) -> Counts {
    let mut total = Counts::default();
    for seed in 0..150 {
        let cfg = RunConfig {
            handover,
            faults: Faults {
                within_guarantee: true,
                ..Faults::default()
            },
            ..RunConfig::new(seed, 5, 60)
        };
        let report = random_run(&cfg).expect("valid options");
        assert!(report.summary.is_ok(), "seed {seed}: {}", report.summary);
        let c = judge(seed, &report.observed);
        total.held += c.held;
        total.held_after_held += c.held_after_held;
        total.repeats.extend(c.repeats);
    }
    total
}

/// Task sets (the default): a join or a departure changes a worker's set
/// step by step (parts granted, parts drained), so `Held` follows `Held`
/// often, and never with the same tasks.
#[test]
fn no_two_consecutive_held_values_have_the_same_task_set_under_task_sets() {
    let c = runs(Handover::TaskSets);
    assert!(
        c.repeats.is_empty(),
        "{} of {} Held-after-Held values repeat the task set, first (seed, worker, µs): {:?}",
        c.repeats.len(),
        c.held_after_held,
        &c.repeats[..c.repeats.len().min(5)]
    );
    // Not vacuous: the runs hand over step by step.
    assert!(
        c.held_after_held > 200,
        "only {} Held-after-Held values in {} Held values",
        c.held_after_held,
        c.held
    );
}

/// Whole pairs: every change of the pair goes through an idle value, so
/// consecutive `Held` values would only be repeats; there are none.
#[test]
fn no_two_consecutive_held_values_have_the_same_task_set_under_whole_pairs() {
    let c = runs(Handover::WholePairs);
    assert!(
        c.repeats.is_empty(),
        "{} Held values repeat the previous one's task set, first (seed, worker, µs): {:?}",
        c.repeats.len(),
        &c.repeats[..c.repeats.len().min(5)]
    );
    assert!(c.held > 500, "only {} Held values", c.held);
}
