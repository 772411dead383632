//! docs/operations.md, "Upgrading a running group": a rolling deploy from
//! the old defaults (Ranked whole pairs under modulo, a cancel that does not
//! leave) to the new ones (`Options::new`: task sets under jump hash,
//! graceful leave). The mapping is a recorded group rule (rule 12 of
//! docs/protocol.md), so the new workers are refused until the last old one
//! has left and the rules record has expired (`3 L` after its last
//! registration).
//!
//! A settled group of 16 old workers (interval 1 s of virtual time, ideal
//! network, joined in the first interval); from `t0 = 15 L + U(0, 1) L`
//! worker `j` (join order) is cancelled at `t0 + 4 j L` and its
//! replacement starts at `t0 + 4 (j + 1) L`, as the next one leaves. Paths:
//!
//! - **direct**: the replacements run the new defaults.
//! - **two steps**: the replacements run the new version with
//!   `Handover::WholePairs` (graceful leave, the rest default): the same
//!   rules, so nobody is refused. Then, at `t1 = t0 + 70 L` (6 L after the last replacement started), the whole group
//!   is stopped (cancelled at once) and 16 workers with the new defaults are
//!   started at the same instant.
//!
//! Per path and window: the task coverage (the share of the 1,024 tasks
//! `0..1024` held by exactly one worker, time-averaged, each holding read
//! under its own mapping: whole pairs under modulo, task sets under jump
//! hash), the uncovered time per task (`(1 − coverage) × window`), the
//! longest span during which no worker held anything, the largest share of
//! the tasks one worker held at once, and the checker's findings.
//!
//! Usage: `sim-upgrade [--seeds N]` (default 20; seeds 1000..).

use std::time::Duration;

use lease_bench::{Classic as _, SplitMix, Table, header, mean};
use lease_core::{Handover, Mode, Options};
use lease_history::checker::{Holding, TaskCoverage};
use lease_history::tasks::{TASKS, TaskSet};
use lease_history::{Checker, Mapping};
use lease_sim::{Action, Network, Sim, SimConfig};

const L: Duration = Duration::from_secs(1);
const WORKERS: u32 = 16;
const SPACING: u32 = 4;
const EVENT_AT: u32 = 15;
/// The window after the last replacement starts, and after the stop.
const AFTER: u32 = 10;
/// How long the whole-pair group runs after its last replacement started,
/// before the stop.
const SETTLE: u32 = 6;
const FIRST_SEED: u64 = 1000;

fn us(d: Duration) -> u64 {
    d.as_micros() as u64
}

fn in_l(us: u64) -> f64 {
    us as f64 / L.as_micros() as f64
}

/// The old defaults: whole pairs under modulo, a cancel that releases at
/// once and does not leave.
fn old() -> Options {
    Options::new("g", L).classic(Mode::Ranked)
}

/// What one window of one seed gave.
#[derive(Clone, Copy, Debug, Default)]
struct Window {
    coverage: f64,
    uncovered: f64,
    longest_empty: f64,
    largest_share: f64,
    /// Whole-pair and task-set holdings overlapped in time (the refusal
    /// failed), which would make the split coverage wrong.
    mixed: bool,
    faults: u64,
}

/// The tasks of `h`: whole pairs are modulo (the old rules and the
/// whole-pair new version), task sets jump hash (the new defaults).
fn tasks_of(h: &Holding) -> TaskSet {
    if h.parts.is_empty() {
        TaskSet::pair(Mapping::Modulo, h.i, h.n)
    } else {
        h.parts.iter().fold(TaskSet::default(), |s, p| {
            s.union(&TaskSet::part(Mapping::Consistent, p))
        })
    }
}

fn window(checker: &Checker, from: u64, to: u64) -> Window {
    let holdings: Vec<Holding> = checker
        .holdings()
        .iter()
        .filter(|h| h.end_us > h.start_us)
        .cloned()
        .collect();
    let (pairs, sets): (Vec<Holding>, Vec<Holding>) =
        holdings.iter().cloned().partition(|h| h.parts.is_empty());
    let last_pair = pairs.iter().map(|h| h.end_us).max().unwrap_or(0);
    let first_set = sets.iter().map(|h| h.start_us).min().unwrap_or(u64::MAX);
    // The two kinds never overlap in time (the refusal), so the share held
    // by exactly one worker is the sum of each kind's share.
    let all = TaskSet::all();
    let coverage = TaskCoverage::of(&pairs, Mapping::Modulo, &all, from, to).fraction_in(from, to)
        + TaskCoverage::of(&sets, Mapping::Consistent, &all, from, to).fraction_in(from, to);
    // Spans with nothing held: gaps in the union of all holdings.
    let mut spans: Vec<(u64, u64)> = holdings
        .iter()
        .map(|h| (h.start_us.max(from), h.end_us.min(to)))
        .filter(|(a, b)| b > a)
        .collect();
    spans.sort_unstable();
    let (mut reach, mut longest) = (from, 0);
    for (a, b) in spans {
        longest = longest.max(a.saturating_sub(reach));
        reach = reach.max(b);
    }
    longest = longest.max(to.saturating_sub(reach));
    let largest = holdings
        .iter()
        .filter(|h| h.start_us < to && h.end_us > from)
        .map(|h| tasks_of(h).len())
        .max()
        .unwrap_or(0);
    Window {
        coverage,
        uncovered: (1.0 - coverage) * in_l(to - from),
        longest_empty: in_l(longest),
        largest_share: f64::from(largest) / TASKS as f64,
        mixed: last_pair > first_set,
        faults: checker.violation_count() + checker.fencing_count() + checker.anomaly_count(),
    }
}

/// A settled group of old workers and the instant the deploy starts.
fn group(seed: u64) -> (Sim, Vec<lease_sim::WorkerId>, Duration) {
    let mut draw = SplitMix::new(seed ^ 3);
    let mut cfg = SimConfig::new(seed, old());
    cfg.network = Network::ideal(L);
    let mut sim = Sim::new(cfg).expect("valid options");
    let ws = (0..WORKERS)
        .map(|_| sim.schedule_join(L.mul_f64(draw.unit())))
        .collect();
    let t0 = L * EVENT_AT + L.mul_f64(draw.unit());
    (sim, ws, t0)
}

/// Replaces every worker of `ws` one by one, `SPACING` intervals apart,
/// by a worker with `new` options; returns the replacements.
fn roll(
    sim: &mut Sim,
    ws: &[lease_sim::WorkerId],
    t0: Duration,
    new: fn() -> Options,
) -> Vec<lease_sim::WorkerId> {
    ws.iter()
        .enumerate()
        .map(|(j, &w)| {
            let j = j as u32;
            sim.schedule(t0 + L * (SPACING * j), Action::Cancel(w));
            sim.schedule_join_with(t0 + L * (SPACING * (j + 1)), new())
                .expect("valid options")
        })
        .collect()
}

/// A rolling deploy of old workers to workers with `new` options.
fn rolling(seed: u64, new: fn() -> Options) -> Window {
    let (mut sim, ws, t0) = group(seed);
    roll(&mut sim, &ws, t0, new);
    let end = t0 + L * (SPACING * WORKERS + AFTER);
    sim.run_until(end);
    let checker = Checker::new(&sim.closed_history(), Some(us(sim.now())));
    window(&checker, us(t0), us(end))
}

/// Cancels every worker of `ws` at `t` and starts as many with the new
/// defaults then; the window `[t, t + AFTER L)`.
fn stop_and_start(sim: &mut Sim, ws: &[lease_sim::WorkerId], t: Duration) -> Window {
    sim.run_until(t);
    for &w in ws {
        sim.act(Action::Cancel(w));
    }
    for _ in ws {
        sim.schedule_join_with(t, Options::new("g", L))
            .expect("valid options");
    }
    let end = t + L * AFTER;
    sim.run_until(end);
    let checker = Checker::new(&sim.closed_history(), Some(us(sim.now())));
    window(&checker, us(t), us(end))
}

/// The old group stopped at once and restarted on the new defaults.
fn stop_old(seed: u64) -> Window {
    let (mut sim, ws, t0) = group(seed);
    stop_and_start(&mut sim, &ws, t0)
}

/// The two-step path: old to the new version on whole pairs, rolling; then
/// a stop-and-start onto the new defaults. Returns both windows.
fn two_steps(seed: u64) -> (Window, Window) {
    let (mut sim, ws, t0) = group(seed);
    let whole = roll(&mut sim, &ws, t0, || {
        Options::new("g", L).with_handover(Handover::WholePairs)
    });
    let t1 = t0 + L * (SPACING * WORKERS + SETTLE);
    sim.run_until(t1);
    let checker = Checker::new(&sim.closed_history(), Some(us(sim.now())));
    let first = window(&checker, us(t0), us(t1));
    (first, stop_and_start(&mut sim, &whole, t1))
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

fn row(table: &mut Table, path: &str, span: &str, ws: &[Window]) {
    let col = |f: fn(&Window) -> f64| ws.iter().map(f).collect::<Vec<f64>>();
    let max = |v: Vec<f64>| v.into_iter().fold(0.0, f64::max);
    let cover = col(|w| w.coverage);
    table.row([
        path.to_owned(),
        span.to_owned(),
        format!(
            "{:.3} ({:.3})",
            mean(&cover),
            cover.iter().copied().fold(1.0, f64::min)
        ),
        format!(
            "{:.2} ({:.2})",
            mean(&col(|w| w.uncovered)),
            max(col(|w| w.uncovered))
        ),
        format!(
            "{:.2} ({:.2})",
            mean(&col(|w| w.longest_empty)),
            max(col(|w| w.longest_empty))
        ),
        format!("{:.3}", max(col(|w| w.largest_share))),
        ws.len().to_string(),
        ws.iter().map(|w| w.faults).sum::<u64>().to_string(),
        ws.iter().filter(|w| w.mixed).count().to_string(),
    ]);
}

fn main() {
    let mut seeds = 20u64;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--seeds" => seeds = args.next().and_then(|s| s.parse().ok()).unwrap_or(seeds),
            other => {
                eprintln!("unknown argument {other}; usage: sim-upgrade [--seeds N]");
                std::process::exit(2);
            }
        }
    }
    header(
        &format!(
            "Simulator: upgrading a running group to the new defaults ({seeds} seeds per row)"
        ),
        "cargo run --release -p lease-bench --bin sim-upgrade",
    );
    let baseline: Vec<Window> = over_seeds(seeds, |seed| rolling(seed, old));
    let direct: Vec<Window> = over_seeds(seeds, |seed| rolling(seed, || Options::new("g", L)));
    let stop: Vec<Window> = over_seeds(seeds, stop_old);
    let (first, second): (Vec<Window>, Vec<Window>) =
        over_seeds(seeds, two_steps).into_iter().unzip();
    let mut table = Table::new(&[
        "path",
        "window",
        "task coverage, mean (worst)",
        "uncovered per task, L, mean (max)",
        "longest span with nothing held, L, mean (max)",
        "largest share one worker held",
        "runs",
        "violations",
        "pairs and sets overlapped",
    ]);
    let roll_span = format!("[t0, t0 + {} L)", SPACING * WORKERS + AFTER);
    row(
        &mut table,
        "any deploy before: old → old, rolling",
        &roll_span,
        &baseline,
    );
    row(
        &mut table,
        "direct: old → defaults, rolling",
        &roll_span,
        &direct,
    );
    let after = format!("[t0, t0 + {AFTER} L)");
    row(&mut table, "stop all old, start defaults", &after, &stop);
    let step_span = format!("[t0, t0 + {} L)", SPACING * WORKERS + SETTLE);
    row(
        &mut table,
        "two steps, 1: old → whole pairs, rolling",
        &step_span,
        &first,
    );
    row(
        &mut table,
        "two steps, 2: stop all, start defaults",
        &format!("[t1, t1 + {AFTER} L)"),
        &second,
    );
    table.print();
    println!(
        "{WORKERS} workers replaced one by one {SPACING} L apart from t0 = 15 L + U(0,1) L; \
         t1 = t0 + {} L. Coverage reads whole pairs under modulo and task sets under jump hash.\n",
        SPACING * WORKERS + SETTLE
    );
}
