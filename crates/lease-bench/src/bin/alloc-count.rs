//! Heap allocations per registration in steady state (the target is 0), counted by a `#[global_allocator]` wrapper around the system
//! allocator.
//!
//! A [`Worker`](lease_core::Worker) of a settled group of 5 (slot 2) is
//! driven by hand ([`lease_bench::steady`]): after a warm-up, every
//! registration is `handle_timeout` (the timer fires), `poll_transmit`,
//! `handle_reply` (the renewal), `poll_event` (nothing), `poll_timeout`.
//! Only those calls are counted; building the synthetic reply is not.
//!
//! With `--adapters`, it counts instead every allocation of the process
//! per registration through each adapter's whole path (driver, client,
//! runtime) against a real `redis-server` that lease-testkit starts: a
//! settled group of workers per adapter, counted over a window of steady
//! state, divided by the registrations Redis ran (`INFO commandstats`).
//! The driver's own share (driver, core and the runtime's timers) is
//! counted the same way with a connection that answers at once and
//! allocates nothing.
//!
//! Usage: `alloc-count [REGISTRATIONS]` (default 100,000), or
//! `alloc-count --adapters [GROUPS]` (default 200 groups at `L = 100 ms`).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lease_bench::steady::{EXEC, RTT, Steady};
use lease_bench::{Table, header};
use lease_core::Mode;

/// Counts allocations (`alloc`, `alloc_zeroed`, `realloc`) and their bytes,
/// then defers to the system allocator.
struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

// The only `unsafe` in the workspace (which forbids it elsewhere): implementing
// `GlobalAlloc` is an unsafe trait by definition. Every method only counts
// and forwards its arguments unchanged to `System`, which upholds the
// contract the caller already promised.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: forwarded unchanged; the caller upholds `alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(new_size as u64, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations and bytes of one kind of call, summed.
#[derive(Default, Clone, Copy)]
struct Count {
    allocs: u64,
    bytes: u64,
}

fn counted<T>(into: &mut Count, f: impl FnOnce() -> T) -> T {
    let (a, b) = (
        ALLOCS.load(Ordering::Relaxed),
        BYTES.load(Ordering::Relaxed),
    );
    let out = f();
    into.allocs += ALLOCS.load(Ordering::Relaxed) - a;
    into.bytes += BYTES.load(Ordering::Relaxed) - b;
    out
}

const CALLS: [&str; 5] = [
    "handle_timeout",
    "poll_transmit",
    "handle_reply",
    "poll_event",
    "poll_timeout",
];

fn measure(mode: Mode, registrations: u64) -> [Count; 5] {
    let mut s = Steady::new(mode, Duration::from_millis(100), 2, 5);
    for _ in 0..1_000 {
        s.register();
    }
    let mut c = [Count::default(); 5];
    let mut reply = Vec::with_capacity(8);
    let mut events = 0;
    for _ in 0..registrations {
        // The timer fires: first the one due next, until a transmit is ready.
        let sent = loop {
            let at = counted(&mut c[4], || s.worker.poll_timeout()).expect("a timer");
            counted(&mut c[0], || s.worker.handle_timeout(at));
            if let Some(sent) = counted(&mut c[1], || s.take(at)) {
                break sent;
            }
        };
        s.reply_into(&sent, sent.at + EXEC, &mut reply);
        counted(&mut c[2], || {
            s.worker.handle_reply(sent.at + RTT, sent.id, &reply)
        })
        .expect("a well-formed reply");
        events += counted(&mut c[3], || s.drain());
    }
    assert_eq!(events, 0, "{mode}: steady state emits no events");
    c
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("--adapters") {
        let groups = std::env::args()
            .nth(2)
            .and_then(|a| a.parse().ok())
            .unwrap_or(200);
        adapters::main(groups);
        return;
    }
    let registrations: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    // The counter itself works: one allocation of 16 bytes is seen.
    let mut check = Count::default();
    std::hint::black_box(counted(&mut check, || Vec::<u8>::with_capacity(16)));
    assert_eq!((check.allocs, check.bytes), (1, 16), "the allocator counts");
    header(
        "Core: heap allocations per registration in steady state",
        "scripts/bench-core.sh",
    );
    let mut table = Table::new(&[
        "mode",
        "registrations",
        "allocations per registration",
        "bytes per registration",
        "by call (allocations in total)",
    ]);
    for mode in [Mode::Ranked, Mode::Arrival] {
        let c = measure(mode, registrations);
        let allocs: u64 = c.iter().map(|x| x.allocs).sum();
        let bytes: u64 = c.iter().map(|x| x.bytes).sum();
        let by_call = CALLS
            .iter()
            .zip(&c)
            .map(|(name, x)| format!("{name} {}", x.allocs))
            .collect::<Vec<_>>()
            .join(", ");
        table.row([
            mode.to_string(),
            registrations.to_string(),
            format!("{:.3}", allocs as f64 / registrations as f64),
            format!("{:.1}", bytes as f64 / registrations as f64),
            by_call,
        ]);
    }
    table.print();
    println!(
        "After a warm-up of 1,000 registrations; interval 100 ms, slot 2 of 5, replies after {} µs.\n",
        RTT.as_micros()
    );
}

/// Allocations per registration through each adapter's whole path.
mod adapters {
    use std::future::Future;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{Duration, Instant};

    use futures::StreamExt;
    use lease_bench::redis::command_stats;
    use lease_bench::{Table, header, load_average};
    use lease_core::{Clock, Identity, Mode};
    use lease_driver::{Command, Connection, Driver, Integers};
    use lease_testkit::RedisServer;

    use super::{ALLOCS, BYTES};

    const L: Duration = Duration::from_millis(100);
    /// Steady state is counted over this many intervals, after a warm-up.
    const WINDOW: u32 = 30;
    const WARM_UP: u32 = 20;

    fn options(g: usize) -> lease_core::Options {
        use lease_bench::Classic as _;
        lease_core::Options::new(format!("alloc-{g}"), L).classic(Mode::Ranked)
    }

    /// Allocations and bytes in a window, and the registrations in it.
    struct Window {
        allocs: u64,
        bytes: u64,
        registrations: u64,
    }

    fn counters() -> (u64, u64) {
        (
            ALLOCS.load(Ordering::Relaxed),
            BYTES.load(Ordering::Relaxed),
        )
    }

    /// Counts allocations while `wait` sleeps the window, with
    /// `registrations` read before and after.
    fn window(registrations: impl Fn() -> u64, sleep: impl Fn(Duration)) -> Window {
        sleep(L * WARM_UP);
        let r0 = registrations();
        let (a0, b0) = counters();
        sleep(L * WINDOW);
        let (a1, b1) = counters();
        let r1 = registrations();
        Window {
            allocs: a1 - a0,
            bytes: b1 - b0,
            registrations: r1 - r0,
        }
    }

    fn evalsha(server: &RedisServer) -> u64 {
        command_stats(server, "evalsha").0 + command_stats(server, "eval").0
    }

    /// Answers every registration at once, counted alone in the interval it
    /// names, on the local clock taken as the server's; allocates nothing.
    struct Null {
        t0: Instant,
        calls: Arc<AtomicU64>,
    }

    impl Connection for Null {
        type Error = &'static str;

        fn run<'c>(
            &'c self,
            command: Command<'_>,
        ) -> impl Future<Output = Result<Option<Integers>, &'static str>> + Send + use<'c> {
            self.calls.fetch_add(1, Ordering::Relaxed);
            let server = 1_700_000_000_000_000 + self.t0.elapsed().as_micros() as i64;
            let l = L.as_micros() as i64;
            let k = server / l;
            let named: Option<i64> = command.keys[0]
                .rsplit(':')
                .next()
                .and_then(|k| k.parse().ok());
            let (sec, usec) = (server / 1_000_000, server % 1_000_000);
            let reply = if named == Some(k) {
                Integers::collect([1, k, sec, usec, 0, 1], Some)
            } else {
                Integers::collect([0, k, sec, usec], Some)
            };
            std::future::ready(Ok(reply))
        }

        fn is_noscript(_: &&'static str) -> bool {
            false
        }
    }

    fn null_driver(groups: usize) -> Window {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let calls = Arc::new(AtomicU64::new(0));
        let t0 = Instant::now();
        let mut keep = Vec::new();
        rt.block_on(async {
            for g in 0..groups {
                let clock = Clock::new(|| tokio::time::Instant::now().into_std());
                let (driver, stream) =
                    Driver::new(&options(g), Identity::seeded(7, g as u64), clock, "null")
                        .expect("valid");
                let conn = Null {
                    t0,
                    calls: calls.clone(),
                };
                let sleep = |at: Instant| tokio::time::sleep_until(at.into());
                keep.push((
                    tokio::spawn(driver.run(conn, sleep, std::future::pending::<()>())),
                    stream,
                ));
            }
        });
        let w = window(
            || calls.load(Ordering::Relaxed),
            |d| rt.block_on(async { tokio::time::sleep(d).await }),
        );
        for (task, _) in &keep {
            task.abort();
        }
        w
    }

    fn redis(server: &RedisServer, groups: usize) -> Window {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let streams = rt.block_on(async {
            let client = redis::Client::open(server.url()).expect("url");
            let config = redis::AsyncConnectionConfig::new().set_response_timeout(Some(L * 10));
            let conn = client
                .get_multiplexed_async_connection_with_config(&config)
                .await
                .expect("connect");
            (0..groups)
                .map(|g| {
                    lease_redis::discover(conn.clone(), options(g).with_cancel_type())
                        .expect("valid")
                })
                .collect()
        });
        drained_on_tokio(&rt, server, streams)
    }

    fn fred(server: &RedisServer, groups: usize) -> Window {
        use fred::prelude::*;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let streams = rt.block_on(async {
            let config = Config::from_url(server.url()).expect("url");
            let client = Builder::from_config(config).build().expect("client");
            client.init().await.expect("connect");
            (0..groups)
                .map(|g| {
                    lease_fred::discover(client.clone(), options(g).with_cancel_type())
                        .expect("valid")
                })
                .collect()
        });
        drained_on_tokio(&rt, server, streams)
    }

    /// Drains every worker's stream on `rt`, counts the window, then stops
    /// the drains (dropping a stream stops its worker).
    fn drained_on_tokio<S>(
        rt: &tokio::runtime::Runtime,
        server: &RedisServer,
        streams: Vec<S>,
    ) -> Window
    where
        S: futures::Stream + Unpin + Send + 'static,
        S::Item: Send,
    {
        let drains: Vec<_> = streams
            .into_iter()
            .map(|mut s| rt.spawn(async move { while s.next().await.is_some() {} }))
            .collect();
        let w = window(
            || evalsha(server),
            |d| rt.block_on(async { tokio::time::sleep(d).await }),
        );
        for d in drains {
            d.abort();
        }
        w
    }

    fn smol(server: &RedisServer, groups: usize) -> Window {
        let ex = Arc::new(smol::Executor::new());
        let url = server.url();
        let (stop, stopped) = smol::channel::bounded::<()>(1);
        let runner = {
            let ex = ex.clone();
            std::thread::spawn(move || smol::block_on(ex.run(async { stopped.recv().await.ok() })))
        };
        let streams = smol::block_on(async {
            let client = redis::Client::open(url).expect("url");
            let config = redis::AsyncConnectionConfig::new().set_response_timeout(Some(L * 10));
            let conn = client
                .get_multiplexed_async_connection_with_config(&config)
                .await
                .expect("connect");
            let mut streams = Vec::new();
            for g in 0..groups {
                let ex2 = ex.clone();
                let mut s = lease_smol::discover_with(
                    conn.clone(),
                    options(g).with_cancel_type(),
                    move |w| {
                        ex2.spawn(w).detach();
                    },
                )
                .expect("valid");
                streams.push(ex.spawn(async move { while s.next().await.is_some() {} }));
            }
            streams
        });
        let w = window(|| evalsha(server), std::thread::sleep);
        drop(streams);
        let _ = stop.send_blocking(());
        let _ = runner.join();
        w
    }

    pub(super) fn main(groups: usize) {
        header(
            "Adapter path: heap allocations per registration against a real redis-server",
            "scripts/bench-redis.sh alloc",
        );
        let mut table = Table::new(&[
            "path",
            "registrations counted",
            "allocations per registration",
            "bytes per registration",
            "machine load average",
        ]);
        let mut row = |name: &str, w: Window| {
            let r = w.registrations.max(1) as f64;
            table.row([
                name.to_owned(),
                w.registrations.to_string(),
                format!("{:.3}", w.allocs as f64 / r),
                format!("{:.0}", w.bytes as f64 / r),
                format!("{:.1}", load_average()),
            ]);
        };
        row(
            "driver + core + tokio timers (a connection that allocates nothing)",
            null_driver(groups),
        );
        for (name, f) in [
            (
                "lease-redis (redis-rs multiplexed, tokio current-thread)",
                redis as fn(&RedisServer, usize) -> Window,
            ),
            ("lease-fred (fred client, tokio current-thread)", fred),
            ("lease-smol (redis-rs multiplexed, smol executor)", smol),
        ] {
            let server = RedisServer::start().expect("redis-server starts");
            row(name, f(&server, groups));
        }
        table.print();
        println!(
            "{groups} groups of one worker, Ranked, L = {} ms; counted over {WINDOW} intervals after {WARM_UP}; no metrics recorder installed.\n",
            L.as_millis()
        );
    }
}
