//! Real Redis on loopback: one process driving 10,000 groups (one worker
//! each) over one multiplexed connection at `L = 1 s`, per counting mode:
//! the time until every group owns and the script calls per group in the
//! third and fourth intervals after the start (the start-up's round trips),
//! expiries,
//! this process's CPU share, registration round trip p50/p99,
//! Redis CPU per registration (`INFO commandstats`, and the whole server
//! process) and Redis memory per group.
//!
//! Usage: `redis-scale [--groups N[,N..]] [--intervals N] [--interval-ms MS]
//! [--adapters redis,fred,smol] [--modes ranked,arrival] [--connections N]
//! [--response-timeout-ms MS] [--spread default|widest|S] [--threads N]
//! [--smol-executor own|global] [--pipeline-buffer N] [--start-spread on|off]`
//! (default 10,000 groups, 60 intervals of
//! 1,000 ms, lease-redis, both modes, one connection, redis-rs's response
//! timeout set to the interval as lease-redis's docs advise; 0 = none;
//! the default Ranked spread, `widest` for `Options::max_spread`).
//! Each adapter runs its workers on `--threads` threads (default 2): tokio's
//! multi-thread runtime with that many workers (lease-redis, lease-fred), a
//! `smol::Executor` run by that many threads (lease-smol with `--smol-executor
//! own`, the default), or smol's global executor (`--smol-executor global`:
//! `lease_smol::discover`, on the executor that runs redis-rs's connection
//! task; its threads are `SMOL_THREADS`, default 1). Groups are dealt
//! round-robin over the
//! connections.

use lease_bench::Classic as _;
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
    /// Script calls per group in `[2 L, 3 L)` and `[3 L, 4 L)` after the
    /// start.
    start_up: [f64; 2],
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

/// Which adapter drives the workers.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Adapter {
    Redis,
    Fred,
    Smol,
}

impl Adapter {
    fn name(self) -> &'static str {
        match self {
            Adapter::Redis => "lease-redis",
            Adapter::Fred => "lease-fred",
            Adapter::Smol => "lease-smol",
        }
    }
}

/// How a run is set up.
#[derive(Clone, Copy, Debug)]
struct Setup {
    adapter: Adapter,
    groups: usize,
    l: Duration,
    intervals: u32,
    mode: Mode,
    connections: usize,
    /// redis-rs's response timeout; `None`: none.
    response_timeout: Option<Duration>,
    /// The Ranked schedule's spread.
    spread: Spread,
    /// Threads the workers run on.
    threads: usize,
    /// lease-smol: workers on smol's global executor (`lease_smol::discover`).
    smol_global: bool,
    /// redis-rs's pipeline buffer (requests queued for the connection's
    /// task); `None`: redis-rs's default, 50.
    pipeline_buffer: Option<usize>,
    /// `Options::with_start_spread`: first registrations spread over an
    /// interval.
    start_spread: bool,
}

/// Which Ranked spread the workers use.
#[derive(Clone, Copy, Debug)]
enum Spread {
    Default,
    Widest,
    Fixed(f64),
}

impl Spread {
    fn apply(self, o: lease_core::Options) -> lease_core::Options {
        match self {
            Spread::Default => o,
            Spread::Widest => {
                let widest = o.max_spread();
                o.with_spread(widest)
            }
            Spread::Fixed(s) => o.with_spread(s),
        }
    }

    fn describe(self) -> String {
        match self {
            Spread::Default => "default".to_owned(),
            Spread::Widest => "widest".to_owned(),
            Spread::Fixed(s) => format!("{s} L"),
        }
    }
}

/// The executor lease-smol's workers run on, run by `threads` threads (the
/// first call's).
fn smol_executor(threads: usize) -> &'static smol::Executor<'static> {
    static EX: std::sync::OnceLock<&'static smol::Executor<'static>> = std::sync::OnceLock::new();
    EX.get_or_init(|| {
        let ex: &'static smol::Executor<'static> = Box::leak(Box::default());
        for _ in 0..threads {
            std::thread::spawn(move || smol::block_on(ex.run(std::future::pending::<()>())));
        }
        ex
    })
}

/// Counts what one worker's stream yields.
async fn consume(
    mut pairs: impl futures::Stream<Item = lease_core::Assignment> + Unpin,
    counts: Arc<Counts>,
) {
    while let Some(p) = pairs.next().await {
        counts.items.fetch_add(1, Ordering::Relaxed);
        if p.lease().is_some() {
            counts.holding.fetch_add(1, Ordering::Relaxed);
        } else {
            // The opening idle pair does not decrement.
            let _ = counts
                .holding
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |h| h.checked_sub(1));
        }
    }
}

/// Starts every group's worker; dropping the returned value stops them.
async fn start(server: &RedisServer, s: Setup, counts: &Arc<Counts>) -> Box<dyn std::any::Any> {
    let options = |g: usize| {
        s.spread.apply(
            lease_core::Options::new(format!("scale-{g}"), s.l)
                .classic(s.mode)
                .with_start_spread(s.start_spread),
        )
    };
    let mut config = redis::AsyncConnectionConfig::new().set_response_timeout(s.response_timeout);
    if let Some(size) = s.pipeline_buffer {
        config = config.set_pipeline_buffer_size(size);
    }
    let client = redis::Client::open(server.url()).expect("url");
    match s.adapter {
        Adapter::Redis => {
            let mut conns = Vec::new();
            for _ in 0..s.connections {
                let c = client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await
                    .expect("connect");
                conns.push(c);
            }
            let mut tasks = Vec::with_capacity(s.groups);
            for g in 0..s.groups {
                let conn = conns[g % conns.len()].clone();
                let pairs = lease_redis::discover(conn, options(g).with_cancel_type())
                    .expect("valid options");
                tasks.push(tokio_util_abort(tokio::spawn(consume(
                    pairs,
                    counts.clone(),
                ))));
            }
            Box::new(tasks)
        }
        Adapter::Fred => {
            use fred::prelude::*;
            let mut clients = Vec::new();
            for _ in 0..s.connections {
                let config = Config::from_url(server.url()).expect("url");
                let c = Builder::from_config(config).build().expect("client");
                c.init().await.expect("connect");
                clients.push(c);
            }
            let mut tasks = Vec::with_capacity(s.groups);
            for g in 0..s.groups {
                let c = clients[g % clients.len()].clone();
                let pairs =
                    lease_fred::discover(c, options(g).with_cancel_type()).expect("valid options");
                tasks.push(tokio_util_abort(tokio::spawn(consume(
                    pairs,
                    counts.clone(),
                ))));
            }
            Box::new((tasks, clients))
        }
        Adapter::Smol => {
            // Connections made outside tokio, so that redis-rs runs them on smol.
            let (n, config2) = (s.connections, config.clone());
            let conns = std::thread::spawn(move || {
                smol::block_on(async {
                    let mut conns = Vec::new();
                    for _ in 0..n {
                        let c = client
                            .get_multiplexed_async_connection_with_config(&config2)
                            .await
                            .expect("connect");
                        conns.push(c);
                    }
                    conns
                })
            })
            .join()
            .expect("connects");
            let mut tasks = Vec::with_capacity(s.groups);
            for g in 0..s.groups {
                let conn = conns[g % conns.len()].clone();
                let task = if s.smol_global {
                    let pairs = lease_smol::discover(conn, options(g).with_cancel_type())
                        .expect("valid options");
                    smol::spawn(consume(pairs, counts.clone()))
                } else {
                    let ex = smol_executor(s.threads);
                    let pairs =
                        lease_smol::discover_with(conn, options(g).with_cancel_type(), |w| {
                            ex.spawn(w).detach();
                        })
                        .expect("valid options");
                    ex.spawn(consume(pairs, counts.clone()))
                };
                tasks.push(task);
            }
            Box::new(tasks)
        }
    }
}

/// Aborts the task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn tokio_util_abort(h: tokio::task::JoinHandle<()>) -> AbortOnDrop {
    AbortOnDrop(h)
}

async fn run(server: &RedisServer, s: Setup) -> Row {
    let Setup {
        groups,
        l,
        intervals,
        ..
    } = s;
    let totals = Totals::global();
    let memory_before = info_field(server, "memory", "used_memory").unwrap_or(0.0);
    let counts = Arc::new(Counts::default());
    let tasks = start(server, s, &counts).await;
    let start = Instant::now();
    let calls_now = || {
        let (a, _) = command_stats(server, "evalsha");
        let (b, _) = command_stats(server, "eval");
        a + b
    };
    // Until every group owns, and at least until the calls of the third
    // and fourth intervals are counted (the start-up's round trips).
    let mut settle = None;
    let mut marks: Vec<u64> = Vec::with_capacity(3);
    loop {
        let e = start.elapsed();
        if settle.is_none() && counts.holding.load(Ordering::Relaxed) as usize >= groups {
            settle = Some(e);
        }
        if marks.len() < 3 && e >= l * (2 + marks.len() as u32) {
            marks.push(calls_now());
        }
        if (settle.is_some() && marks.len() == 3) || e >= l * 20 {
            break;
        }
        tokio::time::sleep(l / 20).await;
    }
    let per_group = |i: usize| match (marks.get(i), marks.get(i + 1)) {
        (Some(a), Some(b)) => (b - a) as f64 / groups as f64,
        _ => f64::NAN,
    };
    let start_up = [per_group(0), per_group(1)];
    let settle = settle.unwrap_or(l * 20);
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
    drop(tasks);
    let calls = evalsha + eval;
    let ms = |p: usize| percentile(&lat, p).unwrap_or(f64::NAN) * 1000.0;
    Row {
        settle,
        start_up,
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
    let mut adapters = vec![Adapter::Redis];
    let mut modes = vec![Mode::Ranked, Mode::Arrival];
    let mut connections = 1usize;
    let mut threads = 2usize;
    let mut smol_global = false;
    let mut pipeline_buffer = None;
    let mut response_timeout_ms: Option<u64> = None;
    let mut spread = Spread::Default;
    let mut start_spread = false;
    let mut args = std::env::args().skip(1);
    let usage = || -> ! {
        eprintln!(
            "usage: redis-scale [--groups N[,N..]] [--intervals N] [--interval-ms MS] [--adapters redis,fred,smol] [--modes ranked,arrival] [--connections N] [--response-timeout-ms MS] [--spread default|widest|S] [--threads N] [--smol-executor own|global] [--pipeline-buffer N] [--start-spread on|off]"
        );
        std::process::exit(2);
    };
    while let Some(a) = args.next() {
        let v = args.next().unwrap_or_default();
        let list = || v.split(',').map(str::to_owned).collect::<Vec<_>>();
        match a.as_str() {
            "--groups" => sizes = list().iter().filter_map(|s| s.parse().ok()).collect(),
            "--adapters" => {
                adapters = list()
                    .iter()
                    .map(|a| match a.as_str() {
                        "redis" => Adapter::Redis,
                        "fred" => Adapter::Fred,
                        "smol" => Adapter::Smol,
                        _ => usage(),
                    })
                    .collect();
            }
            "--modes" => {
                modes = list()
                    .iter()
                    .map(|m| match m.as_str() {
                        "ranked" => Mode::Ranked,
                        "arrival" => Mode::Arrival,
                        _ => usage(),
                    })
                    .collect();
            }
            "--intervals" => intervals = v.parse().unwrap_or_else(|_| usage()),
            "--interval-ms" => interval_ms = v.parse().unwrap_or_else(|_| usage()),
            "--connections" => connections = v.parse().unwrap_or_else(|_| usage()),
            "--threads" => threads = v.parse().unwrap_or_else(|_| usage()),
            "--pipeline-buffer" => pipeline_buffer = Some(v.parse().unwrap_or_else(|_| usage())),
            "--smol-executor" => {
                smol_global = match v.as_str() {
                    "own" => false,
                    "global" => true,
                    _ => usage(),
                };
            }
            "--spread" => {
                spread = match v.as_str() {
                    "default" => Spread::Default,
                    "widest" => Spread::Widest,
                    x => Spread::Fixed(x.parse().unwrap_or_else(|_| usage())),
                };
            }
            "--start-spread" => {
                start_spread = match v.as_str() {
                    "on" => true,
                    "off" => false,
                    _ => usage(),
                };
            }
            "--response-timeout-ms" => {
                response_timeout_ms = Some(v.parse().unwrap_or_else(|_| usage()));
            }
            _ => usage(),
        }
    }
    let connections = connections.max(1);
    let l = Duration::from_millis(interval_ms);
    let response_timeout = match response_timeout_ms {
        None => Some(l),
        Some(0) => None,
        Some(ms) => Some(Duration::from_millis(ms)),
    };
    header(
        &format!(
            "Real Redis: one process, many groups over {connections} connection(s), L = {interval_ms} ms, {intervals} intervals"
        ),
        "scripts/bench-redis.sh scale",
    );
    let rt = lease_bench::redis::runtime(threads);
    let mut table = Table::new(&[
        "adapter",
        "groups",
        "mode",
        "all owning after",
        "round trips per worker in [2 L, 3 L) / [3 L, 4 L)",
        "groups idle at the end",
        "pair changes",
        "expiries",
        "stand-downs",
        "registrations/s",
        "round trips per worker per interval",
        "registration p50 / p99 / max",
        "this process's CPU (share of one core)",
        "this process's CPU per registration",
        "redis-server CPU (share of one core)",
        "Redis CPU per registration: script (commandstats) / whole server",
        "Redis memory per group",
        "machine load average (start, end)",
    ]);
    let mut version = String::new();
    for &adapter in &adapters {
        for &groups in &sizes {
            for &mode in &modes {
                let server = RedisServer::start().expect("redis-server starts");
                version = server_version(&server);
                let setup = Setup {
                    adapter,
                    groups,
                    l,
                    intervals,
                    mode,
                    connections,
                    response_timeout,
                    spread,
                    threads: threads.max(1),
                    smol_global,
                    pipeline_buffer,
                    start_spread,
                };
                let r = rt.block_on(run(&server, setup));
                eprintln!(
                    "{} {groups} {mode} done: {} expiries",
                    adapter.name(),
                    r.expiries
                );
                table.row([
                    adapter.name().to_owned(),
                    groups.to_string(),
                    mode.to_string(),
                    if r.settle >= l * 20 {
                        "not within 20 L".to_owned()
                    } else {
                        format!("{:.1} L", r.settle.as_secs_f64() / l.as_secs_f64())
                    },
                    format!("{:.3} / {:.3}", r.start_up[0], r.start_up[1]),
                    r.idle_at_end.to_string(),
                    r.changes.to_string(),
                    r.expiries.to_string(),
                    r.stand_downs.to_string(),
                    format!("{:.0}", r.rate),
                    format!("{:.4}", r.round_trips),
                    format!("{:.1} / {:.1} / {:.1} ms", r.p50_ms, r.p99_ms, r.max_ms),
                    format!("{:.0} %", r.client_cpu * 100.0),
                    format!("{:.1} µs", r.client_cpu * 1e6 / r.rate.max(1.0)),
                    format!("{:.0} %", r.redis_cpu * 100.0),
                    format!(
                        "{:.1} µs / {:.1} µs",
                        r.usec_per_call, r.redis_us_per_registration
                    ),
                    format!("{:.0} B", r.bytes_per_group),
                    format!("{:.1}, {:.1}", r.load.0, r.load.1),
                ]);
            }
        }
    }
    table.print();
    let timeout = match response_timeout {
        Some(t) => format!("{} ms", t.as_millis()),
        None => "none".to_owned(),
    };
    let smol = if smol_global {
        format!(
            "lease-smol on smol's global executor (SMOL_THREADS={})",
            std::env::var("SMOL_THREADS").unwrap_or_else(|_| "unset: 1".to_owned())
        )
    } else {
        format!("lease-smol on an executor of {threads} thread(s)")
    };
    println!(
        "redis-server {version} on loopback; one worker per group; {connections} connection(s) per adapter; tokio workers on {threads} thread(s); {smol}; redis-rs response timeout {timeout}; Ranked spread {}.\n",
        spread.describe()
    );
}
