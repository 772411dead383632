//! Test harness that runs real `redis-server` processes for the integration
//! tests of the Redis adapters.
//!
//! Everything here is synchronous (`std::process`, redis-rs's sync client,
//! `tempfile`), so tests of tokio, smol or async-std adapters can all use
//! it; no runtime is pulled in. What no crate gives is here: a restart on
//! the same port, `CLIENT PAUSE`, the check that a port is served by the
//! process we started (its pid), a watchdog that kills a server its test
//! process left behind, and a real cluster.
//!
//! * [`RedisServer`]: one `redis-server` child on a free port of
//!   `127.0.0.1`, without persistence, in its own temporary directory; it can
//!   be [stopped](RedisServer::stop), [restarted](RedisServer::restart)
//!   (same port, data lost) and [paused](RedisServer::pause). Killed on drop.
//! * [`TestRedis`]: the server a test should use. With `REDIS_URL` set it is
//!   that external server (control operations then fail with
//!   [`Unsupported`](std::io::ErrorKind::Unsupported), see
//!   [`can_control`](TestRedis::can_control)); otherwise a local
//!   [`RedisServer`]. [`TestRedis::shared`] gives one per test binary.
//! * [`RedisCluster`]: a real Redis Cluster of master-only nodes, or with
//!   replicas ([`RedisCluster::start_with_replicas`]).
//! * [`ReplicatedRedis`]: a primary and a replica, with Redis's coordinated
//!   `FAILOVER`, an unplanned promotion and a rejoin; any [`RedisServer`]
//!   can [replicate](RedisServer::replicate_from), be
//!   [promoted](RedisServer::promote) and report its
//!   [replication state](RedisServer::replication).
//! * [`RedisSentinel`]: Sentinel (`redis-server --sentinel`) watching a
//!   primary, with `SENTINEL FAILOVER`.
//! * [`TlsRedis`]: a server that also listens for TLS (`--tls-port`), with
//!   a private CA the test makes itself (rcgen).
//! * [`PostgresServer`]: a private PostgreSQL (`initdb` and `postgres` from
//!   Debian's package) on a free port, for tests of task sources that
//!   select a lease's rows themselves; never the system's server.
//! * [`command`]: one admin command (`SCRIPT FLUSH`, `CLIENT KILL`, `INFO`,
//!   …) on a redis-rs [`Connection`](redis::Connection) from `connect()`;
//!   every `command` method returns a redis-rs [`Value`](redis::Value).
//! * [`unique_name`] and [`test_interval`] for naming and timing tests.
//!
//! `redis-server` and `redis-cli` are taken from `PATH` unless
//! `REDIS_SERVER_BIN` / `REDIS_CLI_BIN` name them.
//!
//! # Example
//!
//! ```no_run
//! use lease_testkit::{RedisServer, TestRedis, unique_name};
//! use redis::Value;
//! use std::time::Duration;
//!
//! # fn main() -> std::io::Result<()> {
//! // Most tests: the shared server (or REDIS_URL), isolated by name.
//! let redis = TestRedis::shared();
//! let group = unique_name("workers");
//! let client_url = redis.url(); // hand this to the adapter under test
//! redis.command(&["SET", &format!("{group}:probe"), "1"])?;
//! # let _ = client_url;
//!
//! // Fault-injection tests: an own server.
//! let mut server = RedisServer::start()?;
//! server.command(&["SET", "k", "v"])?;
//! server.restart()?; // same port, empty again
//! assert_eq!(server.command(&["GET", "k"])?, Value::Nil);
//! server.pause(Duration::from_millis(200))?; // CLIENT PAUSE 200 ALL
//! # Ok(())
//! # }
//! ```

mod cluster;
mod cluster_ops;
mod fake_clock;
#[cfg(unix)]
mod postgres;
mod replica;
mod sentinel;
mod server;
mod test_redis;
mod tls;
mod util;

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use cluster::RedisCluster;
#[cfg(unix)]
pub use postgres::PostgresServer;
pub use replica::{REPLICATION_TIMEOUT, ReplicatedRedis, Replication};
pub use sentinel::RedisSentinel;
pub use server::RedisServer;
pub use test_redis::TestRedis;
pub use tls::TlsRedis;
pub use util::command;

/// Default of [`test_interval`].
pub const DEFAULT_TEST_INTERVAL: Duration = Duration::from_millis(300);

/// A name unique per process and call, for lease groups, keys, etc.:
/// `<prefix>-<pid>-<run>-<n>`, where `<run>` is derived from the process
/// start time (so runs against a long-lived external server do not collide
/// even if a pid is reused) and `<n>` counts calls.
///
/// The result never contains `{`, `}` (no accidental cluster hash tags),
/// whitespace or control characters: such characters in `prefix` are
/// replaced by `_`.
pub fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    static RUN: OnceLock<String> = OnceLock::new();
    let run = RUN.get_or_init(|| {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        base36(u64::try_from(nanos % 36u128.pow(6)).unwrap_or_default())
    });
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let prefix: String = prefix
        .chars()
        .map(|c| {
            if matches!(c, '{' | '}') || c.is_whitespace() || c.is_control() {
                '_'
            } else {
                c
            }
        })
        .collect();
    format!("{prefix}-{}-{run}-{n}", std::process::id())
}

fn base36(mut n: u64) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
}

/// The lease interval tests should use: `TEST_INTERVAL` (milliseconds) or
/// [`DEFAULT_TEST_INTERVAL`] (300 ms).
///
/// # Panics
///
/// If `TEST_INTERVAL` is set to anything but a positive integer.
pub fn test_interval() -> Duration {
    match std::env::var("TEST_INTERVAL") {
        Ok(value) => parse_interval(&value),
        Err(std::env::VarError::NotPresent) => DEFAULT_TEST_INTERVAL,
        Err(e) => panic!("TEST_INTERVAL: {e}"),
    }
}

fn parse_interval(value: &str) -> Duration {
    let value = value.trim();
    if value.is_empty() {
        return DEFAULT_TEST_INTERVAL;
    }
    match value.parse::<u64>() {
        Ok(ms) if ms > 0 => Duration::from_millis(ms),
        _ => {
            panic!("TEST_INTERVAL must be a positive integer number of milliseconds, got {value:?}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn unique_names_are_unique_and_clean() {
        let names: HashSet<String> = (0..1000).map(|_| unique_name("a {b}\tc")).collect();
        assert_eq!(names.len(), 1000);
        for name in &names {
            assert!(name.starts_with("a__b__c-"), "{name}");
            assert!(
                !name.contains(['{', '}']) && !name.contains(char::is_whitespace),
                "{name}"
            );
            assert!(
                name.contains(&format!("-{}-", std::process::id())),
                "{name}"
            );
        }
    }

    #[test]
    fn unique_names_differ_across_threads() {
        let names: Vec<String> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| s.spawn(|| (0..100).map(|_| unique_name("t")).collect::<Vec<_>>()))
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap())
                .collect()
        });
        assert_eq!(names.iter().collect::<HashSet<_>>().len(), 800);
    }

    #[test]
    fn base36_encodes() {
        assert_eq!(base36(0), "0");
        assert_eq!(base36(35), "z");
        assert_eq!(base36(36), "10");
    }

    #[test]
    fn interval_parsing() {
        assert_eq!(parse_interval("150"), Duration::from_millis(150));
        assert_eq!(parse_interval(" 20 "), Duration::from_millis(20));
        assert_eq!(parse_interval(""), DEFAULT_TEST_INTERVAL);
    }

    #[test]
    #[should_panic(expected = "TEST_INTERVAL must be a positive integer")]
    fn interval_rejects_garbage() {
        parse_interval("0.5s");
    }

    #[test]
    #[should_panic(expected = "TEST_INTERVAL must be a positive integer")]
    fn interval_rejects_zero() {
        parse_interval("0");
    }
}
