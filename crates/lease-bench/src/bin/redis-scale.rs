//! Real Redis on loopback: one process driving 10,000 groups (one worker
//! each) over one multiplexed connection at `L = 1 s`, per counting mode:
//! expiries, this process's CPU share, registration round trip p50/p99,
//! Redis CPU per registration (`INFO commandstats`, and the whole server
//! process) and Redis memory per group.
//!
//! Usage: `redis-scale [--groups N[,N..]] [--intervals N] [--interval-ms MS]`
//! (default 10,000 groups, 60 intervals of 1,000 ms).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use lease_bench::redis::{
    Totals, command_stats, info_field, reset_stats, server_pid, server_version,
};
use lease_bench::{Table, cpu_time, header, load_average, percentile};
use lease_core::Mode;
use lease_testkit::RedisServer;

#[derive(Default)]
struct Counts {
    /// Stream items (pair changes), all groups.
    items: AtomicU64,
    /// Groups whose worker holds a lease now.
    holding: AtomicU64,
}

struct Row {
    settle: Duration,
    changes: u64,
    expiries: u64,
    stand_downs: u64,
    round_trips: f64,
    rate: f64,
    client_cpu: f64,
    redis_cpu: f64,
    usec_per_call: f64,
    redis_us_per_registration: f64,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    bytes_per_group: f64,
    load: (f64, f64),
    /// Groups whose worker held no lease at the end of the window.
    idle_at_end: u64,
}

async fn run(server: &RedisServer, groups: usize, l: Duration, intervals: u32, mode: Mode) -> Row {
    let totals = Totals::global();
    let memory_before = info_field(server, "memory", "used_memory").unwrap_or(0.0);
    let client = redis::Client::open(server.url()).expect("url");
    let conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let counts = Arc::new(Counts::default());
    let mut tasks = Vec::with_capacity(groups);
    for g in 0..groups {
        let options = lease_redis::Options::from(
            lease_core::Options::new(format!("scale-{g}"), l).with_mode(mode),
        );
        let mut pairs = lease_redis::discover(conn.clone(), options).expect("valid options");
        let counts = counts.clone();
        tasks.push(tokio::spawn(async move {
            while let Some(p) = pairs.next().await {
                counts.items.fetch_add(1, Ordering::Relaxed);
                if p.lease().is_some() {
                    counts.holding.fetch_add(1, Ordering::Relaxed);
                } else {
                    // The opening idle pair does not decrement.
                    let _ =
                        counts
                            .holding
                            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |h| {
                                h.checked_sub(1)
                            });
                }
            }
        }));
    }
    let start = Instant::now();
    while (counts.holding.load(Ordering::Relaxed) as usize) < groups && start.elapsed() < l * 20 {
        tokio::time::sleep(l / 20).await;
    }
    let settle = start.elapsed();
    tokio::time::sleep(l * 3).await;

    reset_stats(server);
    let pid = server_pid(server);
    let before = totals.snapshot();
    totals.take_latencies();
    let items = counts.items.load(Ordering::Relaxed);
    let load_before = load_average();
    let (cpu0, redis0, t0) = (cpu_time("self"), cpu_time(&pid), Instant::now());
    tokio::time::sleep(l * intervals).await;
    let (cpu1, redis1, wall) = (cpu_time("self"), cpu_time(&pid), t0.elapsed());
    let (evalsha, usec) = command_stats(server, "evalsha");
    let (eval, eval_usec) = command_stats(server, "eval");
    let after = totals.snapshot().since(&before);
    let changes = counts.items.load(Ordering::Relaxed) - items;
    let memory_after = info_field(server, "memory", "used_memory").unwrap_or(0.0);
    let idle_at_end = groups as u64 - counts.holding.load(Ordering::Relaxed).min(groups as u64);
    let lat = totals.take_latencies();
    for t in tasks {
        t.abort();
    }
    let calls = evalsha + eval;
    let ms = |p: usize| percentile(&lat, p).unwrap_or(f64::NAN) * 1000.0;
    Row {
        settle,
        changes,
        expiries: after.expiries,
        stand_downs: after.stand_downs,
        round_trips: calls as f64 / (groups as f64 * f64::from(intervals)),
        rate: calls as f64 / wall.as_secs_f64(),
        client_cpu: (cpu1 - cpu0).as_secs_f64() / wall.as_secs_f64(),
        redis_cpu: (redis1 - redis0).as_secs_f64() / wall.as_secs_f64(),
        usec_per_call: (usec + eval_usec) as f64 / calls.max(1) as f64,
        redis_us_per_registration: (redis1 - redis0).as_secs_f64() * 1e6 / calls.max(1) as f64,
        p50_ms: ms(50),
        p99_ms: ms(99),
        max_ms: ms(100),
        bytes_per_group: (memory_after - memory_before) / groups as f64,
        load: (load_before, load_average()),
        idle_at_end,
    }
}

fn main() {
    let mut sizes = vec![10_000usize];
    let mut intervals = 60u32;
    let mut interval_ms = 1000u64;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--groups" {
            let list = args.next().unwrap_or_default();
            sizes = list.split(',').filter_map(|s| s.parse().ok()).collect();
            continue;
        }
        let v = args.next().and_then(|s| s.parse::<u64>().ok());
        match (a.as_str(), v) {
            ("--intervals", Some(v)) => intervals = v as u32,
            ("--interval-ms", Some(v)) => interval_ms = v,
            _ => {
                eprintln!(
                    "usage: redis-scale [--groups N[,N..]] [--intervals N] [--interval-ms MS]"
                );
                std::process::exit(2);
            }
        }
    }
    let l = Duration::from_millis(interval_ms);
    header(
        &format!(
            "Real Redis: one process, many groups over one connection, L = {interval_ms} ms, {intervals} intervals"
        ),
        "scripts/bench-redis.sh scale",
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut table = Table::new(&[
        "groups",
        "mode",
        "all owning after",
        "groups idle at the end",
        "pair changes",
        "expiries",
        "stand-downs",
        "registrations/s",
        "round trips per worker per interval",
        "registration p50 / p99 / max",
        "this process's CPU (share of one core)",
        "redis-server CPU (share of one core)",
        "Redis CPU per registration: script (commandstats) / whole server",
        "Redis memory per group",
        "machine load average (start, end)",
    ]);
    let mut version = String::new();
    for (groups, mode) in sizes
        .iter()
        .flat_map(|&g| [(g, Mode::Ranked), (g, Mode::Arrival)])
    {
        let server = RedisServer::start().expect("redis-server starts");
        version = server_version(&server);
        let r = rt.block_on(run(&server, groups, l, intervals, mode));
        eprintln!("{groups} {mode} done: {} expiries", r.expiries);
        table.row([
            groups.to_string(),
            mode.to_string(),
            if r.settle >= l * 20 {
                "not within 20 L".to_owned()
            } else {
                format!("{:.1} L", r.settle.as_secs_f64() / l.as_secs_f64())
            },
            r.idle_at_end.to_string(),
            r.changes.to_string(),
            r.expiries.to_string(),
            r.stand_downs.to_string(),
            format!("{:.0}", r.rate),
            format!("{:.4}", r.round_trips),
            format!("{:.1} / {:.1} / {:.1} ms", r.p50_ms, r.p99_ms, r.max_ms),
            format!("{:.0} %", r.client_cpu * 100.0),
            format!("{:.0} %", r.redis_cpu * 100.0),
            format!(
                "{:.1} µs / {:.1} µs",
                r.usec_per_call, r.redis_us_per_registration
            ),
            format!("{:.0} B", r.bytes_per_group),
            format!("{:.1}, {:.1}", r.load.0, r.load.1),
        ]);
    }
    table.print();
    println!(
        "redis-server {version} on loopback; one worker per group; tokio with 2 worker threads.\n"
    );
}
