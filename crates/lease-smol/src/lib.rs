//! # lease-smol
//!
//! Exclusive leases for a group of workers that share one task source,
//! coordinated through Redis with [redis-rs](https://docs.rs/redis)
//! (`smol-comp`) on
//! [smol](https://docs.rs/smol). This crate is the client and runtime
//! binding only: the protocol and the adapter loop live in [`lease_core`]
//! ([`lease_driver`]), the redis-rs side is `lease-redis`'s
//! ([`lease_redis::RedisRs`], without its tokio driver).
//!
//! **For async-std users too.** async-std is discontinued upstream
//! (RUSTSEC-2025-0052 recommends smol) and redis-rs 1.x no longer supports
//! it, so there is no async-std adapter: use this one. Its futures run on
//! any executor, async-std's included (both are built on `async-io`), and
//! its public API has no runtime types: [`CancelToken`] is this crate's own.
//! Start workers with [`discover`] (they run on smol's global executor,
//! which runs beside async-std's) or with [`discover_with`] and
//! `async_std::task::spawn`. The conformance suite runs both ways.
//! [`discover`] is also the cheaper of the two for many workers: redis-rs
//! runs its connection task on smol's global executor, so replies reach
//! workers there without crossing executors (docs/benchmarks.md, "The
//! quiet run": 39.1 against 41.6 µs of CPU per registration on 2 threads).
//!
//! [`discover`] takes a connection and [`Options`] and returns a stream of
//! [`Assignment`]s: an idle value first, then a value each time what the
//! worker holds changes. While a task is in a [`Lease`] that is still valid
//! ([`Lease::owns`]), no other worker of the group holds it. By default
//! ([`Handover::TaskSets`]) a change of the group moves only the tasks that
//! change owner; with [`Handover::WholePairs`] the lease is one whole pair
//! `(i, n)` ([`Lease::pair`]) for task sources that split by
//! `task.id % n == i` themselves. An idle value says why nothing is held
//! ([`IdleReason`]) and since when.
//!
//! ```no_run
//! use std::time::Duration;
//! use lease_smol::redis::aio::ConnectionManager;
//! use lease_smol::{Assignment, CancelToken, Options, StreamExt, discover};
//!
//! # async fn drain() {}
//! # fn consume(_owns: impl Fn(u64) -> bool) {}
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     smol::block_on(async {
//!         let client = lease_smol::redis::Client::open("redis://127.0.0.1:6379/")?;
//!         let redis = ConnectionManager::new(client).await?; // reconnects after a restart
//!         let stop = CancelToken::new(); // stop.cancel() stands the worker down
//!         let options = Options::new("mail-sender", Duration::from_secs(5)).with_cancel(stop);
//!
//!         let mut assignments = discover(redis, options)?;
//!         while let Some(assignment) = assignments.next().await {
//!             drain().await; // stop taking new work, finish what is in flight
//!             match assignment {
//!                 Assignment::Held(lease) => consume(move |task_id| lease.owns(task_id)),
//!                 Assignment::Idle(idle) => eprintln!("idle: {}", idle.reason),
//!             }
//!         }
//!         Ok(())
//!     })
//! }
//! ```
//!
//! On async-std, the same loop inside `async_std::task::block_on`, with
//! `discover_with(redis, options, |worker| { async_std::task::spawn(worker); })`
//! to run the worker on async-std's executor.
//!
//! # Ending
//!
//! Cancel the [`CancelToken`] given with [`Options::with_cancel`] to stand
//! down. By default (graceful leave, rule 16 of docs/protocol.md) the worker
//! takes itself out of the group, keeps serving what it holds until its
//! deadline minus the drain budget, yields the idle value and ends, and the
//! survivors take its tasks over about an interval sooner than after a
//! crash. Dropping the stream stops the worker at once, on any executor; then, or with
//! `with_graceful_leave(false)`, the worker stays counted in the interval it
//! last registered in, so its tasks go unowned for up to about one
//! interval, exactly as after a crash.
//!
//! # Time
//!
//! [`discover`] and [`discover_with`] run the worker on the system clock and
//! smol's timer ([`SmolClock`]). [`discover_with_time`] takes a [`Time`] of
//! your own (a clock and a timer on it): the worker reads only that clock,
//! and every lease answers `is_valid()` on it, so a test with virtual or
//! stepped time drives it.
//!
//! # Connections
//!
//! Any clonable [`redis::aio::ConnectionLike`]: a
//! [`redis::aio::MultiplexedConnection`], a `ConnectionManager` (which also
//! reconnects after a Redis restart) or the cluster async connection, made
//! with redis-rs's `smol-comp` feature. If redis-rs is compiled with
//! `tokio-comp` as well (another crate of your build asks for it), it picks
//! the runtime by whether a tokio runtime is current, so smol outside tokio.
//! Every key of a group shares the hash tag `{name}`, so it lives in one
//! cluster slot. Registrations are sent as `EVALSHA`; on `NOSCRIPT` the
//! driver falls back to `EVAL` with the source and logs `script loaded`.
//!
//! Registration failures never reach the stream: a failed, rejected or hung
//! request is reported to the state machine, which retries within the
//! interval; if no registration succeeds in time the lease runs out and the
//! stream yields the idle value.
//!
//! # Diagnostics
//!
//! `tracing` events with target `lease`, as listed in [`lease_core::diag`],
//! with registry `redis-rs/smol`. No field carries a URL or a password. With
//! the `metrics` feature the driver records the metrics of
//! [`lease_driver::metrics`].
//!
//! # TLS
//!
//! With the `tls` feature (redis-rs's `smol-rustls-comp`: rustls on the ring
//! provider, no OpenSSL), `rediss://` URLs connect over TLS, trusting
//! `SSL_CERT_FILE` if set, else the system's trust store; [`tls::client`]
//! takes a CA file:
//!
//! ```no_run
//! # #[cfg(feature = "tls")]
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! use std::path::Path;
//! use lease_smol::redis::aio::ConnectionManager;
//! use lease_smol::tls::{self, Trust};
//!
//! let trust = Trust::resolve(Some(Path::new("/etc/lease/redis-ca.pem")));
//! let client = tls::client("rediss://redis.internal:6380/", &trust)?;
//! let redis = ConnectionManager::new(client).await?;
//! # drop(redis);
//! # Ok(())
//! # }
//! ```
#![forbid(unsafe_code)]

mod cancel;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use futures::future::{AbortHandle, Abortable};
use lease_core::Clock;
use lease_driver::{Assignments, Driver};
use lease_redis::RedisRs;
use redis::aio::ConnectionLike;

pub use cancel::CancelToken;
pub use futures::StreamExt;
pub use lease_driver::ConnectError;
pub use lease_driver::api::*;
/// A connection whose clones share one server check (what [`connect`]
/// returns; lease-redis's).
pub use lease_redis::Shared;
/// `rediss://` clients trusting a CA file, `SSL_CERT_FILE` or the system's
/// store (feature `tls`; shared with lease-redis).
#[cfg(feature = "tls")]
pub use lease_redis::tls;
/// redis-rs, re-exported so that one dependency line is enough.
pub use redis;

/// Options of one worker ([`lease_core::Options`], whose builder methods
/// and defaults they are), with this crate's [`CancelToken`] to stand it
/// down.
///
/// ```
/// use std::time::Duration;
/// use lease_smol::{CancelToken, Options};
///
/// let stop = CancelToken::new();
/// let options = Options::new("mail-sender", Duration::from_secs(5)).with_cancel(stop.clone());
/// assert!(options.cancel.is_some());
/// ```
pub type Options = lease_core::Options<CancelToken>;

/// The future of a worker's whole run (its registrations, timers and pair
/// stream), to spawn on an executor ([`discover_with`]). Not the state
/// machine: that is [`lease_core::Worker`], which this future drives.
pub type WorkerFuture = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// Starts a worker of the group named in `options` on `connection` and
/// returns its pair stream. The worker runs on smol's global executor
/// (`smol::spawn`), from any executor; see [`discover_with`] to choose.
///
/// Invalid options are rejected here, with the first problem found.
pub fn discover<C>(connection: C, options: Options) -> Result<Discover, OptionsError>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    discover_with(connection, options, |worker| smol::spawn(worker).detach())
}

/// Like [`discover`], but hands the worker to `spawn`, which must run it to
/// completion on some executor (for example `async_std::task::spawn`, or a
/// `smol::Executor` of your own). Dropping the returned [`Discover`] ends the
/// worker at its next poll.
pub fn discover_with<C>(
    connection: C,
    options: Options,
    spawn: impl FnOnce(WorkerFuture),
) -> Result<Discover, OptionsError>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    discover_with_time(connection, options, spawn, SmolClock)
}

/// Like [`discover_with`], with the worker's clock and timer given: every
/// instant the worker reads, every timer it sets and every lease's
/// `is_valid()` are on `time`, so a test with a clock of its own (virtual,
/// stepped, offset) drives the worker. [`discover`] and [`discover_with`]
/// use [`SmolClock`].
///
/// ```
/// use std::time::Instant;
/// use lease_smol::{SmolClock, Time};
///
/// let before = Instant::now();
/// assert!(SmolClock.now() >= before);
/// ```
pub fn discover_with_time<C, T>(
    connection: C,
    options: Options,
    spawn: impl FnOnce(WorkerFuture),
    time: T,
) -> Result<Discover, OptionsError>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
    T: Time,
{
    let identity = options
        .identity
        .unwrap_or_else(lease_driver::random_identity);
    let time = Arc::new(time);
    let now = time.clone();
    let clock = Clock::new(move || now.now());
    let (driver, stream) = Driver::new(&options, identity, clock, "redis-rs/smol")?;
    let cancel = options.cancel.unwrap_or_default();
    let cancelled = async move { cancel.cancelled().await };
    let sleep_until = move |at: Instant| time.sleep_until(at);
    let run = driver.run(RedisRs(connection), sleep_until, cancelled);
    let (abort, registration) = AbortHandle::new_pair();
    let run = Abortable::new(run, registration);
    spawn(Box::pin(async move {
        let _aborted = run.await;
    }));
    Ok(stream.with_guard(AbortOnDrop(abort)))
}

/// The clock and timer a worker runs on ([`discover_with_time`]).
pub trait Time: Send + Sync + 'static {
    /// The current instant.
    fn now(&self) -> Instant;

    /// A future that completes at `at` on this clock (at once if `at` has
    /// passed).
    fn sleep_until(&self, at: Instant) -> impl Future<Output = ()> + Send + use<Self>;
}

/// The operating system's monotonic clock and smol's timer
/// (`smol::Timer::at`): what [`discover`] and [`discover_with`] use.
#[derive(Clone, Copy, Debug, Default)]
pub struct SmolClock;

impl Time for SmolClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn sleep_until(&self, at: Instant) -> impl Future<Output = ()> + Send + use<> {
        let timer = smol::Timer::at(at);
        async move {
            timer.await;
        }
    }
}

/// The stream of one worker (see [`Assignment`]), returned by [`discover`]:
/// a `futures::Stream` (and `FusedStream`) with [`Assignments::name`].
///
/// It ends after cancellation (having yielded the idle value if a lease was
/// held). Dropping it stops the worker at once.
pub type Discover = Assignments<AbortOnDrop>;

/// Ends the worker's run when the stream is dropped.
#[derive(Debug)]
pub struct AbortOnDrop(AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Connects to the Redis at `url` with a redis-rs `ConnectionManager` on
/// smol, which reconnects by itself after a restart, with no response
/// timeout of its own (the worker times each registration out itself),
/// wrapped in [`Shared`] so that every worker started on it or a
/// clone of it shares one server check (one `INFO`). A
/// server that does not answer within [`lease_driver::CONNECT_TIMEOUT`], or
/// a URL that is not one, is an error that names the address (with any
/// password replaced by `***`).
pub async fn connect(url: &str) -> Result<Shared<redis::aio::ConnectionManager>, ConnectError> {
    let client = redis::Client::open(url).map_err(|e| ConnectError::new(url, e))?;
    let within = lease_driver::CONNECT_TIMEOUT;
    let config = redis::aio::ConnectionManagerConfig::new()
        .set_response_timeout(None)
        .set_connection_timeout(Some(within))
        .set_number_of_retries(2);
    let manager = redis::aio::ConnectionManager::new_with_config(client, config);
    let timer = async {
        smol::Timer::after(within).await;
    };
    match futures::future::select(Box::pin(manager), Box::pin(timer)).await {
        futures::future::Either::Left((Ok(m), _)) => Ok(Shared::new(m)),
        futures::future::Either::Left((Err(e), _)) => Err(ConnectError::new(url, e)),
        futures::future::Either::Right(_) => Err(ConnectError::timed_out(url)),
    }
}
