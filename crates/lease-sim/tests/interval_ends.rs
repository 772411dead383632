//! Rule 6 in the history: every lease and part ends by `(m+2)L` on the
//! server clock, `m` the interval of the registration that last granted or
//! renewed it (step 1 of "Why it is exclusive" in docs/protocol.md). The
//! simulator writes the server clock (`clock` lines at the start and after
//! every step) and each ended holding's renewal intervals, and the checker
//! holds every lease to that bound, allowing the forward steps the history
//! records (docs/history-format.md).

use lease_core::NegativeControl;
use lease_core::{Handover, Mode, Options};
use lease_history::Summary;
use lease_sim::{Faults, RunConfig, random_run};

fn run(seed: u64, mode: Mode, handover: Handover, customize: fn(Options) -> Options) -> Summary {
    let cfg = RunConfig {
        mode,
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

fn graceful(o: Options) -> Options {
    o.with_graceful_leave(true)
}

fn from_arrival(o: Options) -> Options {
    Options {
        negative_control: Some(NegativeControl::DeadlineFromArrival),
        ..o
    }
}

/// Every fault the guarantee covers (forward server-clock steps below the
/// gap among them), churn, graceful leavers serving their parts after the
/// cancel: every lease and part is checked against its interval's end, and
/// none outlives it. Each history has clock lines, so nothing is voided.
#[test]
fn every_lease_and_part_ends_by_the_end_of_the_interval_after_its_renewal() {
    let modes = [
        (Mode::Ranked, Handover::TaskSets, graceful as fn(_) -> _),
        (Mode::Ranked, Handover::WholePairs, graceful),
        (Mode::Arrival, Handover::WholePairs, std::convert::identity),
    ];
    for (mode, handover, customize) in modes {
        for seed in 0..20 {
            let s = run(seed, mode, handover, customize);
            let tasks_ok = s.tasks.as_ref().is_none_or(|t| t.is_ok());
            assert!(s.is_ok() && tasks_ok, "{mode} {handover} seed {seed}: {s}");
            assert!(
                s.interval_ends_checked > 0 && s.interval_ends_voided == 0,
                "{mode} {handover} seed {seed}: {s}"
            );
        }
    }
}

/// Negative control (`NegativeControl::DeadlineFromArrival`): a deadline anchored at the
/// reply's arrival outlives `(m+2)L` whenever the reply was slow. An
/// overlap with the next holder shows it only when that holder comes in
/// time (2 of these 20 runs in each handover mode); the interval-end check
/// sees it on almost every run (19 and 18 of 20 when this was written).
#[test]
fn a_deadline_from_the_arrival_is_caught_at_the_interval_end() {
    for handover in [Handover::TaskSets, Handover::WholePairs] {
        let caught = (0..20)
            .filter(|&seed| run(seed, Mode::Ranked, handover, from_arrival).interval_end_count > 0)
            .count();
        assert!(caught >= 10, "{handover}: caught in only {caught}/20 runs");
    }
}
