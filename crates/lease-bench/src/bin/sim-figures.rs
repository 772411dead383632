//! The simulator figures of docs/benchmarks.md: `Ranked` against `Arrival`
//! (the original protocol), in one run, with the same seeds, in the regimes
//! described there (ideal, round trips, lossy, jitter).
//!
//! Per regime, mode and seed, three runs of the simulator (interval 1 s of
//! virtual time, horizon 40 intervals, workers joining at random instants of
//! the first interval):
//!
//! - **settled**: no churn; the share of `[10 L, 40 L)` during which every
//!   slot `0..n` is held by exactly one worker (`Checker::coverage_in`).
//! - **join**: a newcomer starts at `15 L + U(0, 1) L`. *join→own* is the
//!   time to its first lease; *group idle* the mean time each old worker
//!   holds nothing in the 6 intervals after the join; *uncovered* the time
//!   without full coverage in those 6 intervals; *idx chg* whether some old
//!   worker's first lease on the new `n` has another index than the one it
//!   held before the join (no lease on the new `n` before the end of the run
//!   counts as changed).
//! - **leave**: one settled worker is cancelled at `15 L + U(0, 1) L`;
//!   *survivors idle* and *uncovered* over the 6 intervals after it.
//!
//! With `--handover`, the handover figures instead (kept leases, rule
//! 14), ideal regime, n0 = 5 and 16, task coverage: the
//! time-averaged share of the 1,024 tasks `0..1024` held by exactly one
//! worker under the group's mapping (modulo):
//!
//! - **join window**: a newcomer starts at `15 L + U(0, 1) L`; task coverage
//!   over `[join, join + 6 L)`.
//! - **leave**: the worker holding `i = n0 / 2` is cancelled at
//!   `15 L + U(0, 1) L`; *departed uncovered* is the integral over
//!   `[cancel, cancel + 6 L)` of the departed's tasks (those of its pair at
//!   the cancel) held by nobody, divided by their number (a draining leaver
//!   counts as a holder); *window coverage* the task coverage over that
//!   window.
//!
//! With `--scenarios`, the scenario table: per scenario (one join, one departure by cancel and by crash of the
//! worker at position `n0 / 2`, a rolling restart 4 L apart, one missed
//! registration), ideal and lossy regimes, n0 = 5 and 16, the window's task
//! coverage, the task owner changes over it divided by the 1,024 tasks
//! (idle gaps ignored), and the checker's findings, for the default
//! options (`Options::new`: task sets under jump hash), whole pairs under
//! modulo (`Handover::WholePairs`, the rest default) and Arrival. `--regime
//! SUBSTRING` before it keeps the scenarios whose name has it.
//!
//! With `--drain-budgets`, the same scenarios under the default options at
//! drain budgets `b = 0`, `G/2`, `L/10` and `G`, side by side: the window's
//! task coverage and the *quiet time* of every task handed over (from its
//! old holder's last value with it to its new holder's grant: the loop's
//! time to stop it before anyone else may start it); then one join with a
//! forward server-clock step of `0.9 G` (within the guarantee) at one of 30
//! instants after it, the shortest quiet time found.
//!
//! With `--members`, rule 18's figures beside the anonymous defaults: one
//! member restarted (graceful cancel, the new process at once or `0.5 L`
//! later; crash, the new process at once), one crash without a new process
//! and one missed registration, with the scenario table's seeds, windows
//! and definitions, and per restart the member's tasks' uncovered time and
//! lease gap, whether the new process returned to the member's index and
//! whether every other worker kept its own (module `members`).
//!
//! Usage: `sim-figures [--seeds N] [--regime SUBSTRING] [--per-seed] [--handover | --scenarios | --drain-budgets | --members]`.

// In a folder of its own: a file beside this one would be another binary.
#[path = "sim-figures/members.rs"]
mod members;
#[path = "sim-figures/scenarios.rs"]
mod scenarios;

use lease_bench::Classic as _;
use std::time::Duration;

use lease_bench::{SplitMix, Table, header, mean, percentile};
use lease_core::ownership::Mapping;
use lease_core::{Mode, Options, Pair};
use lease_history::checker::{Holding, TaskCoverage};
use lease_history::tasks::TaskSet;
use lease_history::{Checker, Record};
use lease_sim::{Action, Network, Sim, SimConfig, WorkerId};

const L: Duration = Duration::from_secs(1);
const HORIZON: u32 = 40;
const EVENT_AT: u32 = 15;
const WINDOW: u32 = 6;
const SETTLED_FROM: u32 = 10;
const FIRST_SEED: u64 = 1000;

#[derive(Clone)]
struct Regime {
    name: String,
    gap: f64,
    n0: usize,
    network: Network,
}

fn regimes() -> Vec<Regime> {
    let spacing = |g: f64, n: usize| L.mul_f64((1.0 - 2.0 * g) / n as f64);
    let r = |name: &str, gap: f64, n0: usize, network: Network| Regime {
        name: name.to_owned(),
        gap,
        n0,
        network,
    };
    vec![
        r("ideal", 0.15, 5, Network::ideal(L)),
        r("ideal", 0.15, 16, Network::ideal(L)),
        r(
            "rtt≈G/2",
            0.15,
            5,
            Network::round_trip(L.mul_f64(0.15 / 2.0)),
        ),
        r(
            "rtt≈G/2",
            0.25,
            5,
            Network::round_trip(L.mul_f64(0.25 / 2.0)),
        ),
        r("rtt≈0.4 L", 0.15, 5, Network::round_trip(L.mul_f64(0.4))),
        r("lossy", 0.15, 5, Network::lossy(L)),
        r("lossy", 0.25, 5, Network::lossy(L)),
        r(
            "jitter U(0,s)",
            0.15,
            16,
            Network::jittery(L, spacing(0.15, 16)),
        ),
        r(
            "jitter U(0,2s)",
            0.15,
            16,
            Network::jittery(L, spacing(0.15, 16) * 2),
        ),
        r(
            "jitter U(0,2s)",
            0.25,
            16,
            Network::jittery(L, spacing(0.25, 16) * 2),
        ),
    ]
}

/// What one seed gave in one regime and mode.
#[derive(Clone, Debug, Default)]
struct Outcome {
    settled: f64,
    join_to_own: Option<f64>,
    idx_changed: bool,
    group_idle_join: f64,
    uncovered_join: f64,
    survivors_idle_leave: f64,
    uncovered_leave: f64,
    violations: u64,
}

fn us(d: Duration) -> u64 {
    d.as_micros() as u64
}

fn in_l(us: u64) -> f64 {
    us as f64 / L.as_micros() as f64
}

/// A group of `n0` workers joining at random instants of the first interval.
/// The join instants and every scenario choice come from `scenario`, which
/// is seeded alike in both modes.
fn start(seed: u64, mode: Mode, r: &Regime, scenario: &mut SplitMix) -> (Sim, Vec<WorkerId>) {
    let options = Options::new("g", L).with_gap(r.gap).classic(mode);
    let mut cfg = SimConfig::new(seed, options);
    cfg.network = r.network.clone();
    let mut sim = Sim::new(cfg).expect("valid options");
    let ws = (0..r.n0)
        .map(|_| sim.schedule_join(L.mul_f64(scenario.unit())))
        .collect();
    (sim, ws)
}

/// Time `worker` held no lease in `[from, to)`.
fn idle_in(checker: &Checker, worker: WorkerId, from: u64, to: u64) -> u64 {
    let name = worker.to_string();
    let held: u64 = checker
        .holdings()
        .iter()
        .filter(|h| h.worker == name)
        .map(|h| h.end_us.min(to).saturating_sub(h.start_us.max(from)))
        .sum();
    (to - from).saturating_sub(held)
}

fn faults(checker: &Checker) -> u64 {
    checker.violation_count() + checker.fencing_count() + checker.anomaly_count()
}

fn run_seed(seed: u64, mode: Mode, r: &Regime) -> Outcome {
    let mut out = Outcome::default();
    let window = us(L * WINDOW);

    // Settled: no churn.
    let mut scenario = SplitMix::new(seed);
    let (mut sim, _) = start(seed, mode, r, &mut scenario);
    sim.run_until(L * HORIZON);
    let checker = Checker::new(&sim.closed_history(), Some(us(sim.now())));
    out.settled = checker
        .coverage_in(us(L * SETTLED_FROM), us(L * HORIZON))
        .fraction();
    out.violations += faults(&checker);

    // A join.
    let mut scenario = SplitMix::new(seed ^ 1);
    let (mut sim, ws) = start(seed, mode, r, &mut scenario);
    let t = L * EVENT_AT + L.mul_f64(scenario.unit());
    sim.run_until(t);
    let before: Vec<Option<Pair>> = ws
        .iter()
        .map(|&w| {
            sim.lease(w)
                .and_then(|l| l.pair())
                .or_else(|| last_own(&sim, w))
        })
        .collect();
    let newcomer = sim.schedule_join(t);
    sim.run_until(L * HORIZON);
    let history = sim.closed_history();
    let checker = Checker::new(&history, Some(us(sim.now())));
    let (from, to) = (us(t), us(t) + window);
    out.join_to_own = checker
        .join_to_own()
        .iter()
        .find(|j| j.worker == newcomer.to_string())
        .and_then(|j| j.delay_us())
        .map(in_l);
    let new_n = r.n0 as u32 + 1;
    let end = us(sim.now());
    out.idx_changed = ws.iter().zip(&before).any(|(&w, before)| {
        let after = first_own(&history, w, from, end, new_n);
        before.map(|s| s.i()) != after || after.is_none()
    });
    let idle: Vec<f64> = ws
        .iter()
        .map(|&w| in_l(idle_in(&checker, w, from, to)))
        .collect();
    out.group_idle_join = mean(&idle);
    out.uncovered_join = in_l(checker.coverage_in(from, to).uncovered_us);
    out.violations += faults(&checker);

    // A departure (cancellation) of one settled worker.
    let mut scenario = SplitMix::new(seed ^ 2);
    let (mut sim, mut ws) = start(seed, mode, r, &mut scenario);
    let t = L * EVENT_AT + L.mul_f64(scenario.unit());
    let gone = ws.remove((scenario.next_u64() % r.n0 as u64) as usize);
    sim.run_until(t);
    sim.act(Action::Cancel(gone));
    sim.run_until(t + L * (WINDOW + 1));
    let checker = Checker::new(&sim.closed_history(), Some(us(sim.now())));
    let (from, to) = (us(t), us(t) + window);
    let idle: Vec<f64> = ws
        .iter()
        .map(|&w| in_l(idle_in(&checker, w, from, to)))
        .collect();
    out.survivors_idle_leave = mean(&idle);
    out.uncovered_leave = in_l(checker.coverage_in(from, to).uncovered_us);
    out.violations += faults(&checker);
    out
}

/// The pair of `w`'s latest `own` line.
fn last_own(sim: &Sim, w: WorkerId) -> Option<Pair> {
    let name = w.to_string();
    sim.history().iter().rev().find_map(|r| match r {
        Record::Own { worker, i, n, .. } if *worker == name => Pair::new(*i, *n),
        _ => None,
    })
}

/// The index of `w`'s first lease on group size `n` granted in `[from, to]`.
fn first_own(history: &[Record], w: WorkerId, from: u64, to: u64, n: u32) -> Option<u32> {
    let name = w.to_string();
    history.iter().find_map(|r| match r {
        Record::Own {
            worker,
            i,
            n: m,
            at_us,
            ..
        } if *worker == name && *m == n && (from..=to).contains(at_us) => Some(*i),
        _ => None,
    })
}

struct Cell {
    regime: Regime,
    mode: Mode,
    outcomes: Vec<(u64, Outcome)>,
}

fn fmt_l(x: Option<f64>) -> String {
    match x {
        Some(v) if v.is_finite() => format!("{v:.2}"),
        _ => "never".to_owned(),
    }
}

/// Over `[from, to)`: the time-averaged share of `tasks` held by exactly one
/// holding (under `mapping`; a task-set holding holds the union of its
/// parts), and per task the mean time (in L) it was held by nobody.
fn task_cover(
    holdings: &[Holding],
    mapping: Mapping,
    tasks: &TaskSet,
    from: u64,
    to: u64,
) -> (f64, f64) {
    if to <= from || tasks.is_empty() {
        return (0.0, 0.0);
    }
    let cover = TaskCoverage::of(holdings, judge(mapping), tasks, from, to);
    (
        cover.fraction_in(from, to),
        cover.unheld_us_in(from, to) / L.as_micros() as f64,
    )
}

/// lease-core's mapping as the history names it.
fn judge(mapping: Mapping) -> lease_history::Mapping {
    match mapping {
        Mapping::Consistent => lease_history::Mapping::Consistent,
        _ => lease_history::Mapping::Modulo,
    }
}

/// One row of the handover figures: a name and the options of every
/// worker of the group (interval `L`, group `g`).
#[derive(Clone, Copy)]
struct Variant {
    name: &'static str,
    options: fn() -> Options,
    /// Rule 18: worker `j` registers under member name `m{j}`, and a
    /// replacement under its predecessor's.
    members: bool,
}

impl Variant {
    fn options(&self) -> Options {
        (self.options)()
    }

    fn mapping(&self) -> Mapping {
        self.options().mapping()
    }
}

/// The gap `G` at the default `g = 0.15` and `L = 1 s`.
const G: Duration = Duration::from_millis(150);

/// The options of the original protocol's comparisons: whole pairs, no
/// graceful leave (Ranked), or Arrival.
fn classic(mode: Mode) -> Options {
    Options::new("g", L).classic(mode)
}

/// A group of `n0` settled workers, options by `v`.
fn start_variant(
    seed: u64,
    v: Variant,
    n0: usize,
    network: Network,
    scenario: &mut SplitMix,
) -> (Sim, Vec<WorkerId>) {
    let mut cfg = SimConfig::new(seed, v.options());
    cfg.network = network;
    let mut sim = Sim::new(cfg).expect("valid options");
    let ws = (0..n0)
        .map(|j| join_as(&mut sim, v, j, L.mul_f64(scenario.unit())))
        .collect();
    (sim, ws)
}

/// Schedules a worker at `at`: under member name `m{j}` if `v` uses names.
fn join_as(sim: &mut Sim, v: Variant, j: usize, at: Duration) -> WorkerId {
    if !v.members {
        return sim.schedule_join(at);
    }
    let o = v
        .options()
        .with_member(&format!("m{j}"))
        .expect("a valid name");
    sim.schedule_join_with(at, o).expect("valid options")
}

/// The join window's task coverage for one seed, and the checker's findings.
fn join_window(seed: u64, v: Variant, n0: usize) -> (f64, u64) {
    let mut scenario = SplitMix::new(seed ^ 1);
    let (mut sim, _) = start_variant(seed, v, n0, Network::ideal(L), &mut scenario);
    let t = L * EVENT_AT + L.mul_f64(scenario.unit());
    sim.run_until(t);
    sim.schedule_join(t);
    sim.run_until(t + L * (WINDOW + 1));
    let checker = Checker::new(&sim.closed_history(), Some(us(sim.now())));
    let (cover, _) = task_cover(
        checker.holdings(),
        v.mapping(),
        &TaskSet::all(),
        us(t),
        us(t + L * WINDOW),
    );
    (cover, faults(&checker))
}

/// One seed of the leave scenario: the departed's tasks' uncovered time
/// (in L), the window's task coverage, and the checker's findings.
fn leave_window(seed: u64, v: Variant, n0: usize) -> (f64, f64, u64) {
    let mut scenario = SplitMix::new(seed ^ 2);
    let (mut sim, ws) = start_variant(seed, v, n0, Network::ideal(L), &mut scenario);
    let t = L * EVENT_AT + L.mul_f64(scenario.unit());
    sim.run_until(t);
    let target = n0 as u32 / 2;
    let Some((gone, lease)) = ws.iter().find_map(|&w| {
        sim.lease(w)
            .and_then(|l| l.pair())
            .filter(|p| p.i() == target)
            .map(|p| (w, p))
    }) else {
        return (f64::NAN, f64::NAN, 0);
    };
    sim.act(Action::Cancel(gone));
    sim.run_until(t + L * (WINDOW + 1));
    let checker = Checker::new(&sim.closed_history(), Some(us(sim.now())));
    let (from, to) = (us(t), us(t + L * WINDOW));
    let mine = TaskSet::pair(judge(v.mapping()), lease.i(), lease.n());
    let (_, uncovered) = task_cover(checker.holdings(), v.mapping(), &mine, from, to);
    let (cover, _) = task_cover(checker.holdings(), v.mapping(), &TaskSet::all(), from, to);
    (uncovered, cover, faults(&checker))
}

/// The cells of the scenario tables, in their row order: both regimes
/// (ideal and lossy), each with a group of `n0` = 5 and 16.
fn cells() -> impl Iterator<Item = (&'static str, Network, usize)> {
    [("ideal", Network::ideal(L)), ("lossy", Network::lossy(L))]
        .into_iter()
        .flat_map(|(regime, network)| [5usize, 16].map(move |n0| (regime, network.clone(), n0)))
}

/// [`over_seeds`], keeping the runs that reached their event (`f` answers
/// `None` for a seed whose group never settled).
fn completed_runs<T: Send>(seeds: u64, f: impl Fn(u64) -> Option<T> + Sync) -> Vec<T> {
    over_seeds(seeds, f).into_iter().flatten().collect()
}

/// Runs `f` over the seeds on two threads.
fn over_seeds<T: Send>(seeds: u64, f: impl Fn(u64) -> T + Sync) -> Vec<T> {
    std::thread::scope(|s| {
        let f = &f;
        let handles: Vec<_> = (0..2u64)
            .map(|t| {
                s.spawn(move || {
                    (FIRST_SEED + t..FIRST_SEED + seeds)
                        .step_by(2)
                        .map(f)
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("a simulation panicked"))
            .collect()
    })
}

fn leave_figures(seeds: u64) {
    let variants = [
        Variant {
            name: "ranked, graceful leave, b = G",
            options: || {
                classic(Mode::Ranked)
                    .with_graceful_leave(true)
                    .with_drain_budget(G)
            },
            members: false,
        },
        Variant {
            name: "ranked, graceful leave, b = 0",
            options: || {
                classic(Mode::Ranked)
                    .with_graceful_leave(true)
                    .with_drain_budget(Duration::ZERO)
            },
            members: false,
        },
        Variant {
            name: "ranked, plain cancel (kept leases, b = G)",
            options: || classic(Mode::Ranked).with_drain_budget(G),
            members: false,
        },
        Variant {
            name: "arrival (the original)",
            options: || classic(Mode::Arrival),
            members: false,
        },
    ];
    let mut table = Table::new(&[
        "variant",
        "n0",
        "departed uncovered (mean)",
        "max",
        "window task coverage (mean)",
        "worst seed",
        "runs",
        "violations",
    ]);
    for n0 in [5usize, 16] {
        for v in variants {
            let runs: Vec<(f64, f64, u64)> = over_seeds(seeds, |seed| leave_window(seed, v, n0))
                .into_iter()
                .filter(|r| r.0.is_finite())
                .collect();
            let uncov: Vec<f64> = runs.iter().map(|r| r.0).collect();
            let cover: Vec<f64> = runs.iter().map(|r| r.1).collect();
            table.row([
                v.name.to_owned(),
                n0.to_string(),
                format!("{:.2}", mean(&uncov)),
                format!("{:.2}", uncov.iter().copied().fold(0.0, f64::max)),
                format!("{:.3}", mean(&cover)),
                format!("{:.3}", cover.iter().copied().fold(1.0, f64::min)),
                runs.len().to_string(),
                runs.iter().map(|r| r.2).sum::<u64>().to_string(),
            ]);
        }
    }
    table.print();
    println!(
        "Departed uncovered in L: per task of the departed's pair, time held by nobody in the 6 L after the cancel.\n"
    );
}

/// The worker holding task `id` now, if one does.
fn holder_of(sim: &Sim, ws: &[WorkerId], id: u64) -> Option<WorkerId> {
    ws.iter().copied().find(|&w| sim.holds_task(w, id))
}

fn handover_figures(seeds: u64) {
    header(
        &format!("Simulator: handover figures, ideal regime ({seeds} seeds per cell)"),
        "scripts/bench-sim.sh --handover",
    );
    let variants = [
        Variant {
            name: "ranked, kept leases, b = G",
            options: || classic(Mode::Ranked).with_drain_budget(G),
            members: false,
        },
        Variant {
            name: "ranked, kept leases, b = 0",
            options: || classic(Mode::Ranked).with_drain_budget(Duration::ZERO),
            members: false,
        },
        Variant {
            name: "arrival (the original)",
            options: || classic(Mode::Arrival),
            members: false,
        },
    ];
    let mut table = Table::new(&[
        "variant",
        "n0",
        "join window task coverage (mean)",
        "worst seed",
        "violations",
    ]);
    for n0 in [5usize, 16] {
        for v in variants {
            let runs: Vec<(f64, u64)> = over_seeds(seeds, |seed| join_window(seed, v, n0));
            let covers: Vec<f64> = runs.iter().map(|r| r.0).collect();
            table.row([
                v.name.to_owned(),
                n0.to_string(),
                format!("{:.3}", mean(&covers)),
                format!("{:.3}", covers.iter().copied().fold(1.0, f64::min)),
                runs.iter().map(|r| r.1).sum::<u64>().to_string(),
            ]);
        }
    }
    table.print();
    println!(
        "Task coverage: share of tasks 0..1024 held by exactly one worker (modulo mapping).\n"
    );
    leave_figures(seeds);
}

fn main() {
    let mut seeds = 50u64;
    let mut filter = String::new();
    let mut per_seed = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--seeds" => seeds = args.next().and_then(|s| s.parse().ok()).unwrap_or(seeds),
            "--regime" => filter = args.next().unwrap_or_default(),
            "--per-seed" => per_seed = true,
            "--handover" => {
                handover_figures(seeds);
                return;
            }
            "--drain-budgets" => {
                header(
                    &format!(
                        "Simulator: the drain budget under the default options ({seeds} seeds per cell)"
                    ),
                    "scripts/bench-sim.sh --drain-budgets",
                );
                scenarios::drain_budget_figures(seeds, &filter);
                return;
            }
            "--members" => {
                header(
                    &format!(
                        "Simulator: member names, restarts and crashes ({seeds} seeds per cell)"
                    ),
                    "scripts/bench-sim.sh --members",
                );
                members::member_figures(seeds, &filter);
                return;
            }
            "--scenarios" => {
                header(
                    &format!("Simulator: handover scenarios ({seeds} seeds per cell)"),
                    "scripts/bench-sim.sh --scenarios",
                );
                scenarios::scenario_figures(seeds, &filter);
                return;
            }
            other => {
                eprintln!("unknown argument {other}");
                std::process::exit(2);
            }
        }
    }
    header(
        &format!("Simulator: Ranked against Arrival, same seeds ({seeds} per cell)"),
        "scripts/bench-sim.sh",
    );
    let started = std::time::Instant::now();
    let jobs: Vec<(Regime, Mode)> = regimes()
        .into_iter()
        .filter(|r| r.name.contains(&filter))
        .flat_map(|r| [(r.clone(), Mode::Ranked), (r, Mode::Arrival)])
        .collect();
    // Two threads: the machines these run on have two cores.
    let threads = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .min(2);
    let cells: Vec<Cell> = jobs
        .into_iter()
        .map(|(regime, mode)| {
            let outcomes = std::thread::scope(|s| {
                let handles: Vec<_> = (0..threads as u64)
                    .map(|t| {
                        let regime = &regime;
                        s.spawn(move || {
                            (FIRST_SEED + t..FIRST_SEED + seeds)
                                .step_by(threads)
                                .map(|seed| (seed, run_seed(seed, mode, regime)))
                                .collect::<Vec<_>>()
                        })
                    })
                    .collect();
                let mut all: Vec<(u64, Outcome)> = handles
                    .into_iter()
                    .flat_map(|h| h.join().expect("a simulation panicked"))
                    .collect();
                all.sort_by_key(|(seed, _)| *seed);
                all
            });
            Cell {
                regime,
                mode,
                outcomes,
            }
        })
        .collect();

    let mut table = Table::new(&[
        "regime",
        "g",
        "n0",
        "mode",
        "join→own p50",
        "p90",
        "group idle after join",
        "uncovered after join",
        "idx chg",
        "survivors idle after leave",
        "uncovered after leave",
        "settled (mean)",
        "settled (worst seed)",
        "violations",
    ]);
    for c in &cells {
        let o: Vec<&Outcome> = c.outcomes.iter().map(|(_, o)| o).collect();
        let mut j2o: Vec<f64> = o
            .iter()
            .map(|o| o.join_to_own.unwrap_or(f64::INFINITY))
            .collect();
        j2o.sort_by(f64::total_cmp);
        let avg = |f: fn(&Outcome) -> f64| mean(&o.iter().map(|x| f(x)).collect::<Vec<_>>());
        let worst = o.iter().map(|x| x.settled).fold(1.0, f64::min);
        let changed = o.iter().filter(|x| x.idx_changed).count() as f64 / o.len() as f64;
        table.row([
            c.regime.name.clone(),
            format!("{:.2}", c.regime.gap),
            c.regime.n0.to_string(),
            c.mode.to_string(),
            fmt_l(percentile(&j2o, 50)),
            fmt_l(percentile(&j2o, 90)),
            format!("{:.2}", avg(|x| x.group_idle_join)),
            format!("{:.2}", avg(|x| x.uncovered_join)),
            format!("{changed:.2}"),
            format!("{:.2}", avg(|x| x.survivors_idle_leave)),
            format!("{:.2}", avg(|x| x.uncovered_leave)),
            format!("{:.3}", avg(|x| x.settled)),
            format!("{worst:.3}"),
            o.iter().map(|x| x.violations).sum::<u64>().to_string(),
        ]);
    }
    table.print();
    println!(
        "Times in intervals L. {} runs of 40 L (or 22 L) each, {:.1} s wall time.\n",
        cells.iter().map(|c| c.outcomes.len() * 3).sum::<usize>(),
        started.elapsed().as_secs_f64()
    );

    if per_seed {
        for c in &cells {
            println!(
                "### {} g={} n0={} {}\n",
                c.regime.name, c.regime.gap, c.regime.n0, c.mode
            );
            let mut t = Table::new(&[
                "seed",
                "settled",
                "join→own",
                "idx chg",
                "group idle (join)",
                "survivors idle (leave)",
            ]);
            for (seed, o) in &c.outcomes {
                t.row([
                    seed.to_string(),
                    format!("{:.3}", o.settled),
                    fmt_l(o.join_to_own),
                    o.idx_changed.to_string(),
                    format!("{:.2}", o.group_idle_join),
                    format!("{:.2}", o.survivors_idle_leave),
                ]);
            }
            t.print();
        }
    }
}
