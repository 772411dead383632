//! The simulator's version of `redis-big-group`: one group of N workers
//! (default 1,000, 5,000 and 10,000) in lease-sim's deterministic world, in
//! virtual time, with the options the real run uses (`L = 1 s`, task sets,
//! the start spread on, the widest Ranked spread), so the real run's figures
//! can be held against what the protocol gives when nothing but the
//! protocol is at work: no client sharing two cores with Redis, no script
//! waiting for a core. Each seed runs the real run's phases:
//!
//! 1. a cold start, every worker started at virtual time 0: the time until
//!    every worker holds, in L (the first instant all hold, where the real
//!    run looks every `L / 50`; not within 30 L counts as a failure);
//! 2. 3 L more, then `--intervals` settled intervals: lease changes (values
//!    handed to the loops that began or ended a holding) and expiries (idle
//!    values with reason `Expired`, what `lease_expiries_total` counts);
//! 3. a quarter of the workers replaced at once (the first N/4 cancelled,
//!    N/4 new ones started at the same instant), then 6 L later one crash
//!    (the first worker whose holding covers one of the tasks `0..1024`
//!    stops; its holding ends at the crash, though the store counts its
//!    registration until it runs out): over `[event, event + 6 L)` the
//!    window task coverage of the tasks `0..1024` and the mean time per task
//!    held by nobody, computed by [`lease_bench::coverage`] exactly as
//!    `redis-big-group` computes the real run's.
//!
//! The network is the simulator's quiet local one (0.2 ms each way, 0.1 ms
//! jitter: loopback without a queue at the server); `--networks` adds the
//! ideal and lossy regimes of the other simulator tables. Seeds run on
//! `--threads` threads (default 2, the cores of the machines these run on);
//! each row gives the mean over the seeds and the worst seed.
//!
//! Usage: `sim-big-group [--seeds N] [--workers N[,N..]] [--intervals N]
//! [--networks] [--threads N] [--start-spread on|off]` (default 5 seeds,
//! 1,000, 5,000 and 10,000 workers, 60 intervals, the start spread on: off
//! sends every worker's clock probe at once, as without
//! `Options::with_start_spread`).

use std::time::{Duration, Instant};

use lease_bench::coverage::{Holdings, Window};
use lease_bench::{Table, header, mean};
use lease_core::{Assignment, Event, IdleReason, Options};
use lease_history::checker::HoldingEnd;
use lease_sim::{Action, Network, Sim, SimConfig, WorkerId};

/// The interval, as in the real run.
const L: Duration = Duration::from_secs(1);
/// Intervals watched after each event.
const WINDOW: u32 = 6;
/// How long a cold start may take before it counts as failed, in L.
const COLD_LIMIT: u32 = 30;
/// The first seed; seed `s` of a size is `FIRST_SEED + s`, the same for
/// every size and network, so a row is reproduced by its seeds alone.
const FIRST_SEED: u64 = 1000;

fn us(d: Duration) -> u64 {
    d.as_micros() as u64
}

fn in_l(d: Duration) -> f64 {
    d.as_secs_f64() / L.as_secs_f64()
}

/// The options of every worker: those `redis-big-group` gives
/// `lease_redis::discover` (its cancel type aside, which only the adapter
/// reads), with the start spread as `--start-spread` says.
fn options(start_spread: bool) -> Options {
    let o = Options::new("big", L).with_start_spread(start_spread);
    let widest = o.max_spread();
    o.with_spread(widest)
}

/// One phase's figures.
#[derive(Clone, Copy, Debug, Default)]
struct Phase {
    changes: u64,
    expiries: u64,
    /// After an event: the window's coverage.
    window: Option<Window>,
}

/// What one seed gave.
#[derive(Clone, Debug)]
struct Outcome {
    /// The cold start in L, or how many held after [`COLD_LIMIT`] L.
    cold: Result<f64, usize>,
    /// Settled, a quarter replaced, one crash.
    phases: [Phase; 3],
    /// Wall-clock time of the seed.
    wall: Duration,
}

/// A simulated group and what its workers' loops were handed.
struct Group {
    sim: Sim,
    log: Holdings,
    expiries: u64,
    /// Workers that must hold for the cold start to end.
    n: usize,
    /// The first instant all `n` held.
    cold: Option<Duration>,
}

impl Group {
    /// Hands every event the loops received since the last call to the log,
    /// as the real run's streams hand their values to its log.
    fn feed(&mut self) {
        for o in self.sim.drain_observed() {
            let Event::Assignment(a) = o.event else {
                continue;
            };
            if let Assignment::Idle(idle) = &a
                && matches!(idle.reason, IdleReason::Expired)
            {
                self.expiries += 1;
            }
            self.log.yielded(o.worker.0, us(o.at), a.lease());
            if self.cold.is_none() && self.log.holding() >= self.n {
                self.cold = Some(o.at);
            }
        }
    }

    fn run_until(&mut self, t: Duration) {
        // In steps of L / 50, so the events waiting to be read stay few.
        let step = L / 50;
        while self.sim.now() < t {
            let next = (self.sim.now() + step).min(t);
            self.sim.run_until(next);
            self.feed();
        }
    }

    /// Runs `count` intervals and counts what changed in them.
    fn watch(&mut self, count: u32) -> Phase {
        let (changes, expiries) = (self.log.changes(), self.expiries);
        let end = self.sim.now() + L * count;
        self.run_until(end);
        Phase {
            changes: self.log.changes() - changes,
            expiries: self.expiries - expiries,
            window: None,
        }
    }

    fn window(&self, from: Duration) -> Window {
        self.log.window(us(from), us(from + L * WINDOW), L)
    }
}

/// One seed of one size on one network.
fn run(seed: u64, n: usize, network: &Network, intervals: u32, start_spread: bool) -> Outcome {
    let started = Instant::now();
    let mut cfg = SimConfig::new(seed, options(start_spread));
    cfg.network = network.clone();
    let mut g = Group {
        sim: Sim::new(cfg).expect("valid options"),
        log: Holdings::new(),
        expiries: 0,
        n,
        cold: None,
    };
    for _ in 0..n {
        g.sim.schedule_join(Duration::ZERO);
    }
    let step = L / 50;
    while g.cold.is_none() && g.sim.now() < L * COLD_LIMIT {
        g.run_until(g.sim.now() + step);
    }
    let cold = g.cold.map(in_l).ok_or(g.log.holding());
    g.run_until(g.sim.now() + L * 3);
    let settled = g.watch(intervals);

    let replaced_at = g.sim.now();
    for w in 0..n / 4 {
        g.sim.act(Action::Cancel(WorkerId(w)));
    }
    for w in n..n + n / 4 {
        let id = g.sim.schedule_join(replaced_at);
        // Log numbers are worker ids: the simulator hands them out in order.
        assert_eq!(id, WorkerId(w));
    }
    let mut replaced = g.watch(WINDOW);

    let crashed_at = g.sim.now();
    if let Some(w) = g.log.covering_worker() {
        g.sim.act(Action::Crash(WorkerId(w)));
        g.log.close(w, us(crashed_at), HoldingEnd::Released);
    }
    let mut crash = g.watch(WINDOW);
    replaced.window = Some(g.window(replaced_at));
    crash.window = Some(g.window(crashed_at));
    Outcome {
        cold,
        phases: [settled, replaced, crash],
        wall: started.elapsed(),
    }
}

/// Runs `f` over seeds `0..seeds` on `threads` threads, in seed order.
fn over_seeds<T: Send>(seeds: u64, threads: u64, f: impl Fn(u64) -> T + Sync) -> Vec<T> {
    std::thread::scope(|s| {
        let f = &f;
        let handles: Vec<_> = (0..threads.max(1))
            .map(|t| {
                s.spawn(move || {
                    (t..seeds)
                        .step_by(threads.max(1) as usize)
                        .map(|k| (k, f(FIRST_SEED + k)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut all: Vec<(u64, T)> = handles
            .into_iter()
            .flat_map(|h| h.join().expect("a simulation panicked"))
            .collect();
        all.sort_by_key(|(k, _)| *k);
        all.into_iter().map(|(_, t)| t).collect()
    })
}

/// Mean and largest of the values, as `mean unit (max)`.
fn mean_max(xs: &[f64], digits: usize, unit: &str) -> String {
    let max = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{:.digits$}{unit} ({max:.digits$})", mean(xs))
}

/// The rows of one size on one network.
fn rows(table: &mut Table, n: usize, network: &str, intervals: u32, runs: &[Outcome]) {
    let seeds = runs.len();
    let colds: Vec<f64> = runs.iter().filter_map(|r| r.cold.ok()).collect();
    let failed = seeds - colds.len();
    let cold = match (colds.is_empty(), failed) {
        (true, _) => format!("not within {COLD_LIMIT} L"),
        (false, 0) => mean_max(&colds, 2, " L"),
        (false, f) => format!(
            "{}; {f} seeds not within {COLD_LIMIT} L",
            mean_max(&colds, 2, " L")
        ),
    };
    let wall = mean(
        &runs
            .iter()
            .map(|r| r.wall.as_secs_f64())
            .collect::<Vec<_>>(),
    );
    let names = [
        format!("settled, {intervals} L"),
        format!("{} replaced at once", n / 4),
        "one crash".to_owned(),
    ];
    for (k, name) in names.into_iter().enumerate() {
        let phase: Vec<Phase> = runs.iter().map(|r| r.phases[k]).collect();
        let changes: Vec<f64> = phase.iter().map(|p| p.changes as f64).collect();
        let windows: Vec<Window> = phase.iter().filter_map(|p| p.window).collect();
        let covers: Vec<f64> = windows.iter().map(|w| w.coverage).collect();
        let unheld: Vec<f64> = windows.iter().map(|w| w.unheld_l).collect();
        table.row([
            n.to_string(),
            network.to_owned(),
            name,
            if k == 0 { cold.clone() } else { String::new() },
            mean_max(&changes, 0, ""),
            phase.iter().map(|p| p.expiries).sum::<u64>().to_string(),
            if covers.is_empty() {
                String::new()
            } else {
                let worst = covers.iter().copied().fold(1.0, f64::min);
                format!("{:.4} ({worst:.4})", mean(&covers))
            },
            if unheld.is_empty() {
                String::new()
            } else {
                format!("{:.3} L", mean(&unheld))
            },
            seeds.to_string(),
            if k == 0 {
                format!("{wall:.1} s")
            } else {
                String::new()
            },
        ]);
    }
}

fn main() {
    let mut sizes = vec![1_000usize, 5_000, 10_000];
    let mut seeds = 5u64;
    let mut intervals = 60u32;
    let mut threads = 2u64;
    let mut all_networks = false;
    let mut start_spread = true;
    let mut args = std::env::args().skip(1);
    let usage = || -> ! {
        eprintln!(
            "usage: sim-big-group [--seeds N] [--workers N[,N..]] [--intervals N] [--networks] [--threads N] [--start-spread on|off]"
        );
        std::process::exit(2);
    };
    while let Some(a) = args.next() {
        if a == "--networks" {
            all_networks = true;
            continue;
        }
        let v = args.next().unwrap_or_else(|| usage());
        match a.as_str() {
            "--workers" => sizes = lease_bench::counts(&v).unwrap_or_else(|| usage()),
            "--seeds" => seeds = v.parse().unwrap_or_else(|_| usage()),
            "--intervals" => intervals = v.parse().unwrap_or_else(|_| usage()),
            "--threads" => threads = v.parse().unwrap_or_else(|_| usage()),
            "--start-spread" => start_spread = lease_bench::on_off(&v).unwrap_or_else(|| usage()),
            _ => usage(),
        }
    }
    let mut networks = vec![("local", Network::default())];
    if all_networks {
        networks.extend([("ideal", Network::ideal(L)), ("lossy", Network::lossy(L))]);
    }
    header(
        &format!("Simulator: one group of N workers, L = 1 s ({seeds} seeds per row)"),
        "scripts/bench-sim.sh --big",
    );
    let mut table = Table::new(&[
        "workers",
        "network",
        "phase",
        "all holding after (mean (max))",
        "lease changes (mean (max))",
        "expiries (all seeds)",
        "window task coverage [event, event + 6 L) (mean (worst seed))",
        "unheld per task",
        "seeds",
        "wall time per seed",
    ]);
    for &n in &sizes {
        for (name, network) in &networks {
            let started = Instant::now();
            let runs = over_seeds(seeds, threads, |seed| {
                run(seed, n, network, intervals, start_spread)
            });
            eprintln!(
                "{n} workers, {name} network: {seeds} seeds in {:.1} s",
                started.elapsed().as_secs_f64()
            );
            rows(&mut table, n, name, intervals, &runs);
        }
    }
    table.print();
    println!(
        "Virtual time; seeds {FIRST_SEED}..; one group, task sets, start spread {}, widest Ranked spread, every worker started at 0; the simulator's store executes every script at once (no queue at the server). Network local: 0.2 ms each way + U(0, 0.1 ms); ideal: 2 ms each way; lossy: 10 ms each way, 5 % fast errors, 2.5 % lost requests, 2.5 % lost replies. Coverage as redis-big-group's (lease_bench::coverage).\n",
        if start_spread { "on" } else { "off" }
    );
}
