//! What the real-Redis benchmarks share: a `metrics` recorder that counts
//! what `lease-redis` reports (expiries, stand-downs, registration round
//! trips), and reads of the server's `INFO`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use lease_redis::metrics::{EXPIRIES, REGISTRATION_SECONDS, STAND_DOWNS};
use lease_testkit::RedisServer;
use metrics::{
    Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};

/// Totals over every worker of the process (labels are ignored).
#[derive(Debug, Default)]
pub struct Totals {
    expiries: Arc<AtomicU64>,
    stand_downs: Arc<AtomicU64>,
    latencies: Arc<Latencies>,
}

/// Every answered registration's round trip, in seconds.
#[derive(Debug, Default)]
struct Latencies(Mutex<Vec<f64>>);

impl HistogramFn for Latencies {
    fn record(&self, value: f64) {
        if let Ok(mut v) = self.0.lock() {
            v.push(value);
        }
    }
}

/// A snapshot of [`Totals`].
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Leases that ran out without a renewal.
    pub expiries: u64,
    /// Leases given back for any reason.
    pub stand_downs: u64,
    /// Answered registrations.
    pub answered: u64,
}

impl Totals {
    /// The process-wide recorder, installed on first use.
    pub fn global() -> &'static Totals {
        static TOTALS: OnceLock<&'static Totals> = OnceLock::new();
        TOTALS.get_or_init(|| {
            let totals: &'static Totals = Box::leak(Box::default());
            metrics::set_global_recorder(Forward(totals)).expect("no other recorder");
            totals
        })
    }

    /// The counts so far.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            expiries: self.expiries.load(Ordering::Relaxed),
            stand_downs: self.stand_downs.load(Ordering::Relaxed),
            answered: self.latencies.0.lock().map_or(0, |v| v.len() as u64),
        }
    }

    /// Takes the round trips recorded so far (and forgets them), sorted.
    pub fn take_latencies(&self) -> Vec<f64> {
        let mut v = self
            .latencies
            .0
            .lock()
            .map(|mut v| std::mem::take(&mut *v))
            .unwrap_or_default();
        v.sort_by(f64::total_cmp);
        v
    }
}

impl Snapshot {
    /// What happened between `earlier` and `self` (answered is not
    /// meaningful after [`Totals::take_latencies`]).
    pub fn since(&self, earlier: &Snapshot) -> Snapshot {
        Snapshot {
            expiries: self.expiries - earlier.expiries,
            stand_downs: self.stand_downs - earlier.stand_downs,
            answered: self.answered.saturating_sub(earlier.answered),
        }
    }
}

struct Forward(&'static Totals);

impl Recorder for Forward {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        match key.name() {
            EXPIRIES => Counter::from_arc(self.0.expiries.clone()),
            STAND_DOWNS => Counter::from_arc(self.0.stand_downs.clone()),
            _ => Counter::noop(),
        }
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        if key.name() == REGISTRATION_SECONDS {
            Histogram::from_arc(self.0.latencies.clone())
        } else {
            Histogram::noop()
        }
    }
}

/// One section of `INFO`, as `field -> value` text.
pub fn info(server: &RedisServer, section: &str) -> Vec<(String, String)> {
    let text = server
        .command(&["INFO", section])
        .ok()
        .and_then(|v| redis::from_redis_value::<String>(v).ok())
        .unwrap_or_default();
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.trim().to_owned()))
        .collect()
}

/// A numeric field of an `INFO` section.
pub fn info_field(server: &RedisServer, section: &str, field: &str) -> Option<f64> {
    info(server, section)
        .into_iter()
        .find(|(k, _)| k == field)
        .and_then(|(_, v)| v.parse().ok())
}

/// Calls and CPU microseconds of one command in `INFO commandstats`
/// (`cmdstat_evalsha:calls=..,usec=..,usec_per_call=..`); both zero if it
/// never ran since the last `CONFIG RESETSTAT`.
pub fn command_stats(server: &RedisServer, command: &str) -> (u64, u64) {
    let want = format!("cmdstat_{command}");
    info(server, "commandstats")
        .into_iter()
        .find(|(k, _)| *k == want)
        .map_or((0, 0), |(_, v)| {
            let get = |name: &str| {
                v.split(',')
                    .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0)
            };
            (get("calls"), get("usec"))
        })
}

/// `CONFIG RESETSTAT`: command statistics start again from zero.
pub fn reset_stats(server: &RedisServer) {
    let _ = server.command(&["CONFIG", "RESETSTAT"]);
}

/// The `redis-server` version and its process id.
pub fn server_version(server: &RedisServer) -> String {
    info(server, "server")
        .into_iter()
        .find(|(k, _)| k == "redis_version")
        .map_or_else(|| "unknown".to_owned(), |(_, v)| v)
}

/// The server's process id, for reading its CPU time.
pub fn server_pid(server: &RedisServer) -> String {
    info(server, "server")
        .into_iter()
        .find(|(k, _)| k == "process_id")
        .map_or_else(String::new, |(_, v)| v)
}

/// The tokio runtime every real-Redis benchmark runs its workers on: a
/// multi-threaded one with `threads` worker threads (at least one), as a
/// service would run them.
pub fn runtime(threads: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_all()
        .build()
        .expect("a tokio runtime starts")
}
