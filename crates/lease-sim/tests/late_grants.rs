//! A lease is never handed to the loop after its drain end (rule 14): the
//! runs in which a large gap (and so a large default drain budget) let a
//! slow reply grant a part whose drain end had already passed. The loop was
//! then handed work it had to give up at once, and the history carried a
//! release written after the own it ended with an earlier instant: the
//! checker's `ReleaseBeforeOwn` anomaly (docs/history-format.md).
//!
//! The cases are `lease sim --faults --handover task-sets --intervals 120`
//! runs (the seed, workers and gap below), found by sweeping gaps beyond the
//! default; the negative control switches the rule off and the same runs
//! fail again.

use lease_core::NegativeControl;
use lease_core::{Handover, Options};
use lease_sim::{Faults, Network, RunConfig, random_run};

/// `(seed, workers, gap)` of runs that handed out late grants without the
/// rule (found again for protocol revision 3, rule 19: the first five of
/// seeds 900,000 to 900,160 at 9 and 26 workers, gaps 0.34 and 0.4, in
/// which the negative control is caught).
const CASES: [(u64, usize, f64); 5] = [
    (900_005, 26, 0.34),
    (900_008, 26, 0.4),
    (900_010, 26, 0.34),
    (900_011, 9, 0.4),
    (900_012, 9, 0.4),
];

fn run(seed: u64, workers: usize, gap: f64, customize: fn(Options) -> Options) -> bool {
    let cfg = RunConfig {
        gap,
        faults: Faults {
            within_guarantee: true,
            ..Faults::default()
        },
        network: Network::default(),
        handover: Handover::TaskSets,
        customize,
        ..RunConfig::new(seed, workers, 120)
    };
    let report = random_run(&cfg).expect("valid options");
    let s = &report.summary;
    let tasks = s.tasks.as_ref().expect("a task-set history");
    let clean = s.is_ok() && tasks.violation_count == 0 && tasks.fencing_count == 0;
    if !clean {
        eprintln!("seed {seed} workers {workers} gap {gap}: {s}");
    }
    clean
}

fn late(o: Options) -> Options {
    Options {
        negative_control: Some(NegativeControl::GrantPastDrainEnd),
        ..o
    }
}

#[test]
fn no_lease_is_handed_out_past_its_drain_end_at_large_gaps() {
    for (seed, workers, gap) in CASES {
        assert!(run(seed, workers, gap, std::convert::identity));
    }
}

/// The negative control: granting past the drain end again (and draining
/// from an instant before the reply that drains) breaks the same runs.
#[test]
fn granting_past_the_drain_end_is_caught_by_the_checker() {
    let caught = CASES
        .iter()
        .filter(|&&(seed, workers, gap)| !run(seed, workers, gap, late))
        .count();
    assert!(caught >= 3, "only {caught} of {} runs caught", CASES.len());
}
