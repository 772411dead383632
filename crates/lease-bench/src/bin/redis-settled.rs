//! Real Redis on loopback: the shortest interval at which 16 workers stay
//! settled (zero pair changes, zero expiries) for 1,000 intervals, sweeping
//! down from 300 ms; and round trips per worker per interval (target:
//! exactly one).
//!
//! Each interval gets a fresh `redis-server` (lease-testkit, a free port;
//! never the system's 6379). The workers are `lease_redis::discover`
//! streams, one multiplexed connection each, in one process. Once all 16
//! hold distinct slots of `n = 16`, the command statistics are reset and the
//! group is watched for the given number of intervals: every stream item is
//! a pair change; expiries and stand-downs come from the adapter's metrics;
//! `EVALSHA` (and `EVAL`) calls from `INFO commandstats`.
//!
//! Usage: `redis-settled [--intervals N] [--workers N] [--mode ranked|arrival] [MS ...]`
//! (default: 1,000 intervals, 16 workers, ranked, 300 200 100 75 50).

use lease_bench::Classic as _;
use std::time::{Duration, Instant};

use futures::StreamExt;
use lease_bench::redis::{Totals, command_stats, reset_stats, server_version};
use lease_bench::{Table, header, load_average, percentile};
use lease_core::Mode;
use lease_testkit::RedisServer;
use tokio::sync::mpsc;

struct Row {
    settle: Duration,
    changes: u64,
    expiries: u64,
    stand_downs: u64,
    round_trips: f64,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    settled_at_end: bool,
    load: (f64, f64),
    /// The longest a 5 ms timer of this process woke up late: how long the
    /// process went without CPU (scheduling on the shared machine).
    late_ms: f64,
}

type Item = (usize, Option<(u32, u32)>);

fn settled(latest: &[Option<(u32, u32)>]) -> bool {
    let n = latest.len() as u32;
    let mut seen: Vec<u32> = latest
        .iter()
        .filter_map(|p| p.filter(|&(_, m)| m == n).map(|(i, _)| i))
        .collect();
    seen.sort_unstable();
    seen.dedup();
    seen.len() == latest.len()
}

async fn run(server: &RedisServer, l: Duration, workers: usize, intervals: u32, mode: Mode) -> Row {
    let totals = Totals::global();
    let load_before = load_average();
    let client = redis::Client::open(server.url()).expect("url");
    let name = format!("settled-{}", l.as_millis());
    let (tx, mut rx) = mpsc::unbounded_channel::<Item>();
    let mut tasks = Vec::new();
    for w in 0..workers {
        let conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("connect");
        let options =
            lease_redis::Options::from(lease_core::Options::new(name.as_str(), l).classic(mode));
        let mut pairs = lease_redis::discover(conn, options).expect("valid options");
        let tx = tx.clone();
        tasks.push(tokio::spawn(async move {
            while let Some(p) = pairs.next().await {
                let _ = tx.send((w, p.lease().and_then(|l| l.pair()).map(|p| (p.i(), p.n()))));
            }
        }));
    }
    let start = Instant::now();
    let mut latest = vec![None; workers];
    while !settled(&latest) {
        match tokio::time::timeout_at((start + l * 30).into(), rx.recv()).await {
            Ok(Some((w, p))) => latest[w] = p,
            _ => break,
        }
    }
    let settle = start.elapsed();
    // Let the last grants' registrations complete, then start counting.
    tokio::time::sleep(l * 2).await;
    while let Ok((w, p)) = rx.try_recv() {
        latest[w] = p;
    }
    let late = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let watch = {
        let late = late.clone();
        tokio::spawn(async move {
            loop {
                let due = Instant::now() + Duration::from_millis(5);
                tokio::time::sleep_until(due.into()).await;
                let us = Instant::now().saturating_duration_since(due).as_micros() as u64;
                late.fetch_max(us, std::sync::atomic::Ordering::Relaxed);
            }
        })
    };
    reset_stats(server);
    let before = totals.snapshot();
    totals.take_latencies();
    let until = Instant::now() + l * intervals;
    let mut changes = 0;
    while let Ok(Some((w, p))) = tokio::time::timeout_at(until.into(), rx.recv()).await {
        latest[w] = p;
        changes += 1;
    }
    let (evalsha, _) = command_stats(server, "evalsha");
    let (eval, _) = command_stats(server, "eval");
    let after = totals.snapshot().since(&before);
    let lat = totals.take_latencies();
    for t in tasks {
        t.abort();
    }
    watch.abort();
    let ms = |p: usize| percentile(&lat, p).unwrap_or(f64::NAN) * 1000.0;
    Row {
        settle,
        changes,
        expiries: after.expiries,
        stand_downs: after.stand_downs,
        round_trips: (evalsha + eval) as f64 / (workers as f64 * f64::from(intervals)),
        p50_ms: ms(50),
        p99_ms: ms(99),
        max_ms: ms(100),
        settled_at_end: settled(&latest),
        load: (load_before, load_average()),
        late_ms: late.load(std::sync::atomic::Ordering::Relaxed) as f64 / 1000.0,
    }
}

fn main() {
    let mut intervals = 1000u32;
    let mut workers = 16usize;
    let mut mode = Mode::Ranked;
    let mut sweep: Vec<u64> = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--intervals" => {
                intervals = args
                    .next()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(intervals)
            }
            "--workers" => workers = args.next().and_then(|s| s.parse().ok()).unwrap_or(workers),
            "--mode" => mode = args.next().and_then(|s| s.parse().ok()).unwrap_or(mode),
            ms => sweep.push(ms.parse().expect("an interval in milliseconds")),
        }
    }
    if sweep.is_empty() {
        sweep = vec![300, 200, 100, 75, 50];
    }
    header(
        &format!("Real Redis: {workers} workers settled for {intervals} intervals ({mode})"),
        "scripts/bench-redis.sh settled",
    );
    let rt = lease_bench::redis::runtime(2);
    let mut table = Table::new(&[
        "L",
        "settled after",
        "pair changes",
        "expiries",
        "stand-downs",
        "round trips per worker per interval",
        "registration p50 / p99 / max",
        "settled at the end",
        "machine load average (start, end)",
        "longest timer lateness of this process",
    ]);
    let mut version = String::new();
    for ms in sweep {
        let server = RedisServer::start().expect("redis-server starts");
        version = server_version(&server);
        let l = Duration::from_millis(ms);
        let r = rt.block_on(run(&server, l, workers, intervals, mode));
        eprintln!(
            "L = {ms} ms done: {} changes, {} expiries",
            r.changes, r.expiries
        );
        table.row([
            format!("{ms} ms"),
            format!("{:.1} L", r.settle.as_secs_f64() / l.as_secs_f64()),
            r.changes.to_string(),
            r.expiries.to_string(),
            r.stand_downs.to_string(),
            format!("{:.4}", r.round_trips),
            format!("{:.2} / {:.2} / {:.2} ms", r.p50_ms, r.p99_ms, r.max_ms),
            if r.settled_at_end { "yes" } else { "no" }.to_owned(),
            format!("{:.1}, {:.1}", r.load.0, r.load.1),
            format!("{:.1} ms", r.late_ms),
        ]);
    }
    table.print();
    println!(
        "redis-server {version} on loopback, one multiplexed connection per worker, tokio with 2 worker threads.\n"
    );
}
