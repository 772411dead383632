//! Real Redis on loopback: one group of N workers in one process, all on
//! one `lease_redis::connect` connection (one server check for all), with
//! the start spread on and the widest Ranked spread, at `L = 1 s`:
//!
//! 1. a cold start: the time until every worker holds, in L;
//! 2. `--intervals` settled intervals: lease changes, expiries, Redis CPU per
//!    registration (`INFO commandstats`, usec / calls of the script) and the
//!    registration round trip p99;
//! 3. a quarter of the workers replaced at once (N/4 cancelled, N/4 new
//!    started), then one crash (a holding worker's stream dropped): over
//!    `[event, event + 6 L)` the window task coverage (the tasks `0..1024`
//!    held by exactly one worker, time-weighted, lease-history's
//!    `TaskCoverage` over the holdings the streams reported, computed by
//!    [`lease_bench::coverage`] as `sim-big-group` computes the simulator's),
//!    the Redis CPU per registration of the costliest interval of the six,
//!    and p99.
//!
//! A holding starts when a stream yields a lease and ends when it yields the
//! next value, or when the worker is crashed (it stops working then, though
//! Redis still counts its registration until it runs out).
//!
//! Usage: `redis-big-group [--workers N[,N..]] [--intervals N] [--interval-ms MS]
//! [--start-spread on|off]` (default 1,000, 5,000 and 10,000 workers, 60
//! intervals of 1,000 ms, the start spread on: off sends every worker's
//! clock probe at once).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::StreamExt;
use lease_bench::coverage::Holdings;
use lease_bench::redis::{Totals, command_stats, reset_stats, server_version};
use lease_bench::{Table, header, load_average, percentile};
use lease_history::checker::HoldingEnd;
use lease_redis::CancellationToken;
use lease_testkit::RedisServer;

/// Intervals watched after each event.
const WINDOW: u32 = 6;

/// What the workers' streams reported, as holdings for lease-history, on
/// the wall clock from `t0`.
struct Log {
    t0: Instant,
    holdings: Holdings,
}

impl Log {
    fn new(t0: Instant) -> Self {
        Self {
            t0,
            holdings: Holdings::new(),
        }
    }

    fn us(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.t0).as_micros() as u64
    }

    /// A value of worker `w`'s stream at `at`.
    fn yielded(&mut self, w: usize, at: Instant, lease: Option<&lease_core::Lease>) {
        let at_us = self.us(at);
        self.holdings.yielded(w, at_us, lease);
    }
}

type Shared = Arc<Mutex<Log>>;

fn lock(log: &Shared) -> std::sync::MutexGuard<'_, Log> {
    log.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A running worker: dropping `task` crashes it, cancelling `cancel` makes
/// it leave.
struct Running {
    task: tokio::task::JoinHandle<()>,
    cancel: CancellationToken,
}

fn spawn(
    conn: &lease_redis::Shared<lease_redis::redis::aio::ConnectionManager>,
    w: usize,
    l: Duration,
    start_spread: bool,
    log: &Shared,
) -> Running {
    let o: lease_core::Options = lease_core::Options::new("big", l).with_start_spread(start_spread);
    let widest = o.max_spread();
    let cancel = CancellationToken::new();
    let options: lease_redis::Options = o
        .with_spread(widest)
        .with_cancel_type()
        .with_cancel(cancel.clone());
    let mut pairs = lease_redis::discover(conn.clone(), options).expect("valid options");
    let log = log.clone();
    let task = tokio::spawn(async move {
        while let Some(a) = pairs.next().await {
            lock(&log).yielded(w, Instant::now(), a.lease());
        }
    });
    Running { task, cancel }
}

/// One phase's figures.
#[derive(Default)]
struct Phase {
    changes: u64,
    expiries: u64,
    /// Script usec per call: the whole phase (settled) or its costliest
    /// interval (after an event).
    usec_per_call: f64,
    p99_ms: f64,
    coverage: Option<f64>,
    /// Per task, the mean time held by nobody, in L.
    unheld_l: f64,
    load: f64,
}

/// Watches `count` intervals from now: with `each`, the script's cost is
/// read per interval and the costliest kept; otherwise over the whole span.
async fn watch(server: &RedisServer, log: &Shared, l: Duration, count: u32, each: bool) -> Phase {
    let totals = Totals::global();
    let before = totals.snapshot();
    totals.take_latencies();
    let changes = lock(log).holdings.changes();
    let cost = || {
        let (calls, usec) = command_stats(server, "evalsha");
        let (ecalls, eusec) = command_stats(server, "eval");
        (usec + eusec) as f64 / (calls + ecalls).max(1) as f64
    };
    let mut usec_per_call: f64 = 0.0;
    let spans = if each { count } else { 1 };
    let mut each_interval = Vec::new();
    for _ in 0..spans {
        reset_stats(server);
        tokio::time::sleep(l * (count / spans)).await;
        let c = cost();
        each_interval.push(format!("{c:.1}"));
        usec_per_call = usec_per_call.max(c);
    }
    if each {
        eprintln!(
            "  Redis µs per registration, interval by interval: {}",
            each_interval.join(", ")
        );
    }
    let lat = totals.take_latencies();
    Phase {
        changes: lock(log).holdings.changes() - changes,
        expiries: totals.snapshot().since(&before).expiries,
        usec_per_call,
        p99_ms: percentile(&lat, 99).unwrap_or(f64::NAN) * 1000.0,
        coverage: None,
        unheld_l: 0.0,
        load: load_average(),
    }
}

fn cover(log: &Shared, from: Instant, l: Duration, phase: &mut Phase) {
    let log = lock(log);
    let (a, b) = (log.us(from), log.us(from + l * WINDOW));
    let w = log.holdings.window(a, b, l);
    phase.coverage = Some(w.coverage);
    phase.unheld_l = w.unheld_l;
}

/// One size: the cold start (in L; or how many held after 30 L) and the settled, replaced and crash phases.
async fn run(
    server: &RedisServer,
    n: usize,
    l: Duration,
    intervals: u32,
    start_spread: bool,
) -> (Result<f64, usize>, [Phase; 3]) {
    let conn = lease_redis::connect(server.url()).await.expect("connect");
    let t0 = Instant::now();
    let log: Shared = Arc::new(Mutex::new(Log::new(t0)));
    let mut workers: Vec<Running> = (0..n)
        .map(|w| spawn(&conn, w, l, start_spread, &log))
        .collect();
    while lock(&log).holdings.holding() < n && t0.elapsed() < l * 30 {
        tokio::time::sleep(l / 50).await;
    }
    let holding = lock(&log).holdings.holding();
    let cold = (holding >= n).then(|| t0.elapsed().as_secs_f64() / l.as_secs_f64());
    tokio::time::sleep(l * 3).await;
    let settled = watch(server, &log, l, intervals, false).await;

    let replaced_at = Instant::now();
    for w in &workers[..n / 4] {
        w.cancel.cancel();
    }
    workers.extend((n..n + n / 4).map(|w| spawn(&conn, w, l, start_spread, &log)));
    let mut replaced = watch(server, &log, l, WINDOW, true).await;

    let crashed_at = Instant::now();
    let victim = lock(&log).holdings.covering_worker();
    if let Some(w) = victim {
        workers[w].task.abort();
        let mut log = lock(&log);
        let at_us = log.us(crashed_at);
        log.holdings.close(w, at_us, HoldingEnd::Released);
    }
    let mut crash = watch(server, &log, l, WINDOW, true).await;
    cover(&log, replaced_at, l, &mut replaced);
    cover(&log, crashed_at, l, &mut crash);
    for w in workers {
        w.task.abort();
    }
    (cold.ok_or(holding), [settled, replaced, crash])
}

fn main() {
    let mut sizes = vec![1_000usize, 5_000, 10_000];
    let mut intervals = 60u32;
    let mut interval_ms = 1000u64;
    let mut start_spread = true;
    let mut args = std::env::args().skip(1);
    let usage = || -> ! {
        eprintln!(
            "usage: redis-big-group [--workers N[,N..]] [--intervals N] [--interval-ms MS] [--start-spread on|off]"
        );
        std::process::exit(2);
    };
    while let Some(a) = args.next() {
        let v = args.next().unwrap_or_else(|| usage());
        match a.as_str() {
            "--workers" => sizes = lease_bench::counts(&v).unwrap_or_else(|| usage()),
            "--intervals" => intervals = v.parse().unwrap_or_else(|_| usage()),
            "--interval-ms" => interval_ms = v.parse().unwrap_or_else(|_| usage()),
            "--start-spread" => {
                start_spread = lease_bench::on_off(&v).unwrap_or_else(|| usage());
            }
            _ => usage(),
        }
    }
    let l = Duration::from_millis(interval_ms);
    // The recorder before any worker, whose metrics handles are taken at start.
    Totals::global();
    header(
        &format!("Real Redis: one group of N workers over one connection, L = {interval_ms} ms"),
        "scripts/bench-redis.sh big",
    );
    let rt = lease_bench::redis::runtime(2);
    let mut table = Table::new(&[
        "workers",
        "phase",
        "all holding after",
        "lease changes",
        "expiries",
        "window task coverage [event, event + 6 L)",
        "unheld per task",
        "Redis µs per registration (commandstats)",
        "ratio to settled",
        "registration p99",
        "load average at the end",
    ]);
    let mut version = String::new();
    for &n in &sizes {
        let server = RedisServer::start().expect("redis-server starts");
        version = server_version(&server);
        let (cold, phases) = rt.block_on(run(&server, n, l, intervals, start_spread));
        eprintln!("{n} workers done");
        let settled_cost = phases[0].usec_per_call;
        let names = [
            format!("settled, {intervals} L"),
            format!("{} replaced at once", n / 4),
            "one crash".to_owned(),
        ];
        for (k, (p, name)) in phases.iter().zip(names).enumerate() {
            table.row([
                n.to_string(),
                name,
                match (k, cold) {
                    (0, Ok(c)) => format!("{c:.2} L"),
                    (0, Err(h)) => format!("not within 30 L ({h} holding)"),
                    _ => String::new(),
                },
                p.changes.to_string(),
                p.expiries.to_string(),
                p.coverage.map_or_else(String::new, |c| format!("{c:.4}")),
                p.coverage
                    .map_or_else(String::new, |_| format!("{:.3} L", p.unheld_l)),
                format!("{:.1} µs", p.usec_per_call),
                format!("{:.2}", p.usec_per_call / settled_cost),
                format!("{:.1} ms", p.p99_ms),
                format!("{:.2}", p.load),
            ]);
        }
    }
    table.print();
    println!(
        "redis-server {version} on loopback; one group, one lease_redis::connect connection, tokio with 2 worker threads; start spread {}, widest Ranked spread; after an event the Redis cost is its costliest interval of {WINDOW}.\n",
        if start_spread { "on" } else { "off" }
    );
}
