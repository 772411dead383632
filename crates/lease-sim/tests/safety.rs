//! Safety properties: exclusivity and fencing order hold for arbitrary seeds,
//! group sizes, latencies up to and beyond the gap, and fault mixes, in both
//! counting modes and (Ranked) both handover modes, incremental histories
//! judged per task, with every option drawn over its whole valid range: the
//! gap over (0, 0.5), the drain budget over [0, L] (rule 14), the
//! spread over [0, max_spread] (rule 8), graceful leave on and off (rule 16,
//! Ranked), each with its default too. The scenario's cancels take the leave
//! path when graceful leave is on.
//!
//! The cases are the same on every run unless `LEASE_SEARCH` asks for new
//! ones (`common::search`, CONTRIBUTING.md).

mod common;

use std::time::Duration;

use lease_core::{Handover, Mode, Options};
use lease_sim::{Faults, Network, RunConfig, random_run};
use proptest::prelude::*;

const L: Duration = Duration::from_secs(1);

fn mode() -> impl Strategy<Value = Mode> {
    prop_oneof![Just(Mode::Ranked), Just(Mode::Arrival)]
}

/// The gap fraction over the whole open range (0, 0.5), with its ends
/// (`G` down to a microsecond, and up to `L/2` less 0.1 ms) drawn often.
fn gap() -> impl Strategy<Value = f64> {
    prop_oneof![
        6 => 0.01..0.49f64,
        1 => 1e-6..0.01f64,
        1 => 0.49..0.4999f64,
    ]
}

/// The drain budget over its whole valid range `[0, L]`, its two ends,
/// and the default (`None`, the gap).
fn drain_budget(gap: f64) -> impl Strategy<Value = Option<Duration>> {
    let max = Options::<()>::new("sim", L)
        .with_gap(gap)
        .max_drain_budget()
        .as_micros() as u64;
    prop_oneof![
        1 => Just(None),
        1 => Just(Some(Duration::ZERO)),
        1 => Just(Some(Duration::from_micros(max))),
        3 => (0..=max).prop_map(|us| Some(Duration::from_micros(us))),
    ]
}

/// The spread over its whole valid range `[0, max_spread]`, its two ends,
/// and the default (`None`, the early spread).
fn spread(gap: f64) -> impl Strategy<Value = Option<f64>> {
    let max = Options::<()>::new("sim", L).with_gap(gap).max_spread();
    prop_oneof![
        1 => Just(None),
        1 => Just(Some(0.0)),
        1 => Just(Some(max)),
        3 => (0.0..=max).prop_map(Some),
    ]
}

/// Latency as a multiple of the gap `G`, from far below to well beyond it,
/// with spikes and loss.
fn network(gap: f64) -> impl Strategy<Value = Network> {
    (
        0.0..3.0f64,
        0.0..0.1f64,
        0.0..0.05f64,
        0.0..0.05f64,
        0.0..0.05f64,
    )
        .prop_map(move |(rtt_in_g, spikes, fast_error, lost, duplicate)| {
            let g = L.mul_f64(gap);
            Network {
                spike_probability: spikes,
                spike_max: Duration::from_millis(600),
                fast_error,
                lost_request: lost,
                lost_reply: lost,
                duplicate,
                ..Network::round_trip(g.mul_f64(rtt_in_g))
            }
        })
}

/// A run with every option drawn over its range; graceful leave and
/// incremental handover only in Ranked mode (Arrival refuses both).
fn config() -> impl Strategy<Value = RunConfig> {
    (
        (any::<u64>(), 1usize..=32, gap(), mode()),
        (any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>()),
    )
        .prop_flat_map(
            |((seed, workers, gap, mode), (faults, incremental, leave, members))| {
                let ranked = mode == Mode::Ranked;
                // Rule 13 (Ranked only): judged per task by the checker.
                let handover = if incremental && ranked {
                    Handover::TaskSets
                } else {
                    Handover::WholePairs
                };
                (network(gap), drain_budget(gap), spread(gap)).prop_map(
                    move |(network, drain_budget, spread)| RunConfig {
                        seed,
                        workers,
                        intervals: 80,
                        mode,
                        interval: L,
                        gap,
                        faults: Faults {
                            within_guarantee: faults,
                            ..Faults::default()
                        },
                        churn: true,
                        network,
                        handover,
                        drain_budget,
                        spread,
                        graceful_leave: leave && ranked,
                        // Rule 18: member names and member restarts.
                        members: members && ranked,
                        customize: std::convert::identity,
                    },
                )
            },
        )
}

/// Plays `cfg` and checks the verdict: no violation, no fencing violation,
/// no anomaly, per pair and (incremental) per task.
fn exclusive_and_fenced(cfg: &RunConfig) -> Result<(), TestCaseError> {
    let report = random_run(cfg).expect("valid options");
    let s = &report.summary;
    // `lease sim` replays the run's options, not its network (it starts
    // from `Network::default()`): `random_run` on the shrunk `RunConfig`
    // that proptest prints replays it exactly.
    let flags = format!(
        "--seed {} --workers {} --intervals {} --mode {} --handover {} --gap {}{}{}{}{}",
        cfg.seed,
        cfg.workers,
        cfg.intervals,
        cfg.mode,
        cfg.handover,
        cfg.gap,
        // The flag takes whole milliseconds; the drawn budget is in the
        // message's `RunConfig` too.
        cfg.drain_budget.map_or(String::new(), |b| format!(
            " --drain-budget-ms {}",
            b.as_millis()
        )),
        cfg.spread
            .map_or(String::new(), |s| format!(" --spread {s}")),
        if cfg.graceful_leave || cfg.mode != Mode::Ranked {
            ""
        } else {
            " --no-graceful-leave"
        },
        if cfg.faults.within_guarantee {
            " --faults"
        } else {
            ""
        },
    );
    prop_assert!(
        s.is_ok(),
        "{s}\nrun: {flags}\ndrain budget: {:?}, network: {:?}",
        cfg.drain_budget,
        cfg.network
    );
    prop_assert_eq!(s.violation_count, 0);
    prop_assert_eq!(s.fencing_count, 0);
    prop_assert_eq!(s.anomaly_count, 0);
    if cfg.handover == Handover::TaskSets && s.owns > 0 {
        let tasks = s.tasks.as_ref().expect("task-set history");
        prop_assert_eq!(tasks.violation_count, 0);
        prop_assert_eq!(tasks.fencing_count, 0);
    }
    Ok(())
}

proptest! {
    #![proptest_config(common::search::config("no_two_workers_hold_one_slot", 192))]

    #[test]
    fn no_two_workers_hold_one_slot_and_tokens_are_fenced_over_every_options_range(
        cfg in config(),
    ) {
        exclusive_and_fenced(&cfg)?;
    }
}

proptest! {
    #![proptest_config(common::search::config("the_widest_spread", 96))]

    /// The widest schedule spread (`Options::max_spread`, rule 8) changes only
    /// when in the band a Ranked worker fires: every run stays exclusive and
    /// fenced, under the same faults, latencies, churn and other options.
    #[test]
    fn the_widest_spread_keeps_every_run_exclusive_and_fenced(cfg in config()) {
        let widest = Options::<()>::new("sim", L).with_gap(cfg.gap).max_spread();
        let cfg = RunConfig { mode: Mode::Ranked, spread: Some(widest), ..cfg };
        exclusive_and_fenced(&cfg)?;
    }
}

proptest! {
    #![proptest_config(common::search::config("graceful_leave_with_incremental_handover", 80))]

    /// Graceful leave (rule 16) with incremental handover (rule 13): a
    /// cancelled worker removes itself and serves its parts to their drain
    /// ends while the survivors take its tasks over part by part; no task is
    /// ever held twice, and tokens stay fenced per task.
    #[test]
    fn graceful_leave_with_incremental_handover_keeps_every_task_exclusive_and_fenced(
        cfg in config(),
    ) {
        let cfg = RunConfig {
            mode: Mode::Ranked,
            handover: Handover::TaskSets,
            graceful_leave: true,
            ..cfg
        };
        exclusive_and_fenced(&cfg)?;
    }
}

/// An incremental run in which nobody ever holds anything (round trips far
/// beyond a large gap) has no per-task summary: there is nothing to judge
/// per task, and the properties must not take that for a failure. Main's
/// property asked for the summary unconditionally, and a random draw of it
/// (this run, shrunk by proptest) failed there on nothing.
#[test]
fn an_incremental_run_that_never_holds_passes_without_a_task_summary() {
    let cfg = RunConfig {
        gap: 0.417_529_993_048_197_4,
        network: Network {
            latency: Duration::from_nanos(184_252_443),
            jitter: Duration::ZERO,
            tail_mean: Duration::from_nanos(429_922_366),
            spike_probability: 0.043_588_535_170_286_16,
            spike_max: Duration::from_millis(600),
            fast_error: 0.0,
            lost_request: 0.0,
            lost_reply: 0.0,
            duplicate: 0.0,
        },
        handover: Handover::TaskSets,
        graceful_leave: false,
        ..RunConfig::new(1_456_395_429, 6, 80)
    };
    let report = random_run(&cfg).expect("valid options");
    assert_eq!(report.summary.owns, 0, "{}", report.summary);
    assert!(report.summary.tasks.is_none());
    exclusive_and_fenced(&cfg).expect("a run that holds nothing is exclusive");
}

/// The scenario's cancels take the leave path when graceful leave is on:
/// leave scripts execute (and none without it), so the properties above
/// exercise rule 16 and not only the plain cancel.
#[test]
fn the_scenarios_cancels_run_the_leave_script_with_graceful_leave() {
    let leaves = |graceful_leave: bool| -> u64 {
        (1..=4u64)
            .map(|seed| {
                let cfg = RunConfig {
                    handover: Handover::TaskSets,
                    graceful_leave,
                    faults: Faults {
                        within_guarantee: true,
                        ..Faults::default()
                    },
                    ..RunConfig::new(seed, 5, 80)
                };
                let report = random_run(&cfg).expect("valid options");
                assert!(report.summary.is_ok(), "seed {seed}: {}", report.summary);
                report.stats.leaves
            })
            .sum()
    };
    let with = leaves(true);
    assert!(with >= 4, "only {with} leave scripts in 4 runs");
    assert_eq!(leaves(false), 0);
}

/// The checker is live: a failover that loses acknowledged writes in two
/// consecutive intervals is outside the guarantee, and over enough seeds it
/// does break exclusivity. If this ever finds nothing, the runs above prove
/// nothing. (Forward clock steps beyond the gap cannot serve here: rule 10
/// catches every step larger than the gap that a worker's own round trips
/// can see, and 200 seeds of them break nothing in either mode.)
#[test]
fn lost_writes_in_two_intervals_are_caught_by_the_checker() {
    let violating = (1..=10u64)
        .filter(|&seed| {
            let cfg = RunConfig {
                mode: Mode::Arrival,
                faults: Faults {
                    lost_writes: true,
                    ..Faults::default()
                },
                ..RunConfig::new(seed, 5, 300)
            };
            !random_run(&cfg).expect("valid").summary.is_ok()
        })
        .count();
    // Seed 7 violates (docs/protocol.md, "Limits"); found with the runner.
    assert!(violating > 0, "no violation found outside the guarantee");
}
