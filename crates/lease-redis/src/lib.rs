//! # lease-redis
//!
//! Exclusive leases for a group of workers that share one task source,
//! coordinated through Redis with [redis-rs](https://docs.rs/redis) on
//! tokio. This crate is the I/O loop
//! only: the protocol lives in [`lease_core`].
//!
//! [`discover`] takes a connection and [`Options`] and returns a stream of
//! [`Assignment`]s: an idle value first, then a value each time what the
//! worker holds changes. While a task is in a [`Lease`] that is still valid
//! ([`Lease::owns`]), no other worker of the group holds it. By default
//! ([`Handover::TaskSets`]) a change of the group moves only the tasks that
//! change owner; with [`Handover::WholePairs`] the lease is one whole pair
//! `(i, n)` ([`Lease::pair`]) for task sources that split by
//! `task.id % n == i` themselves. An idle value says why nothing is held
//! ([`IdleReason`]: handed over, expired, cancelled, server clock, refused)
//! and since when.
//!
//! ```no_run
//! use std::time::Duration;
//! use lease_redis::redis::aio::ConnectionManager;
//! use lease_redis::{Assignment, Options, StreamExt, discover};
//!
//! # async fn drain() {}
//! # fn consume(_owns: impl Fn(u64) -> bool) {}
//! #[tokio::main(flavor = "current_thread")]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let client = lease_redis::redis::Client::open("redis://127.0.0.1:6379/")?;
//!     let redis = ConnectionManager::new(client).await?; // reconnects after a restart
//!     let options = Options::new("mail-sender", Duration::from_secs(5));
//!
//!     let mut assignments = discover(redis, options)?;
//!     while let Some(assignment) = assignments.next().await {
//!         drain().await; // stop taking new work, finish what is in flight
//!         match assignment {
//!             // Check before each task: the lease may run out while a
//!             // stalled process was not looking.
//!             Assignment::Held(lease) => consume(move |task_id| lease.owns(task_id)),
//!             Assignment::Idle(idle) => eprintln!("idle: {}", idle.reason),
//!         }
//!     }
//!     Ok(())
//! }
//! ```
//!
//! # Ending
//!
//! Cancel the [`CancellationToken`]
//! given with [`Options::with_cancel`] to stand down, and the loop body
//! drains exactly where it already handles losing a lease (see
//! `examples/mail_sender.rs` for `SIGTERM`). By default (graceful leave,
//! rule 16 of docs/protocol.md) the worker takes itself out of the group,
//! keeps serving what it holds until its deadline minus the drain budget,
//! yields the idle value and ends, and the survivors take its tasks over
//! about an interval sooner than after a crash. Dropping the stream stops
//! the worker at once (draining is then up to you); then, or with
//! `with_graceful_leave(false)`, the worker stays counted in the interval
//! it last registered in, so its tasks go unowned for up to about one
//! interval, exactly as after a crash.
//!
//! # Connections
//!
//! Any clonable [`redis::aio::ConnectionLike`] works: a
//! [`redis::aio::MultiplexedConnection`], a `ConnectionManager` (which also
//! reconnects after a Redis restart) or the cluster async connection. Every
//! key of a group shares the hash tag `{name}`, so it lives in one cluster
//! slot. Registrations are sent as `EVALSHA`; on `NOSCRIPT` the adapter falls
//! back to `EVAL` with the source (which loads the script, routed by key in a
//! cluster) and logs `script loaded`.
//!
//! The core times each registration out itself (an adaptive timeout, and the
//! lease deadline); a response timeout on the connection only abandons
//! requests earlier. redis-rs connections come with one of their own
//! (`AsyncConnectionConfig::set_response_timeout`): with intervals of a
//! second or more, or many groups sharing one connection, set it to at
//! least the interval (or none), so that queued registrations are not given
//! up while their lease budget still runs.
//!
//! Registration failures never reach the stream: a failed, rejected or hung
//! request is reported to the state machine, which retries within the
//! interval; if no registration succeeds in time the lease runs out and the
//! stream yields the idle value.
//!
//! # Diagnostics
//!
//! `tracing` events with target `lease`, as listed in [`lease_core::diag`]:
//! this crate adds `discover started` (registry `redis-rs`), `script loaded`
//! and `pair handed to the loop`. No field carries a URL or a password.
//! With the `metrics` feature, the `metrics` module describes the metrics
//! recorded through the `metrics` facade.
//!
//! # Features
//!
//! * `tokio` (default): the tokio driver ([`discover`]). Without it, this
//!   crate is only [`RedisRs`], the runtime-agnostic redis-rs side of a
//!   registration, which `lease-smol` shares.
//! * `metrics`: record metrics (see the `metrics` module).
//! * `tls`: `rediss://` URLs, through redis-rs's `tokio-rustls-comp` (rustls
//!   with the ring provider; no OpenSSL). The server's certificate is checked
//!   against `SSL_CERT_FILE` if set, else the system's trust store;
//!   `tls::client` takes a CA file too. See "TLS" below.
//! * `tls-client`: only the `tls` module, without the tokio driver (what
//!   `lease-smol`'s `tls` feature uses).
//!
//! # TLS
//!
//! With the `tls` feature, a `rediss://` URL is all it takes:
//!
//! ```toml
//! lease-redis = { version = "0.1", features = ["tls"] }
//! ```
//!
//! ```no_run
//! # #[cfg(feature = "tls")]
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use lease_redis::redis::aio::ConnectionManager;
//! use lease_redis::tls::{self, Trust};
//! use lease_redis::{Options, discover};
//!
//! // A private CA: SSL_CERT_FILE=/etc/lease/redis-ca.pem in the environment,
//! // or the file given here; neither: the system's trust store.
//! let trust = Trust::resolve(None);
//! let client = tls::client("rediss://:password@redis.internal:6380/", &trust)?;
//! let redis = ConnectionManager::new(client).await?;
//! let assignments = discover(redis, Options::new("mail-sender", Duration::from_secs(5)))?;
//! # drop(assignments);
//! # Ok(())
//! # }
//! ```
#![forbid(unsafe_code)]

#[cfg(feature = "tokio")]
mod driver;
mod redis_rs;
mod shared;
#[cfg(feature = "tls-client")]
pub mod tls;

#[cfg(feature = "tokio")]
pub use driver::{Discover, Options, connect, discover};
#[cfg(feature = "tokio")]
pub use futures_util::StreamExt;
pub use lease_driver::ConnectError;
pub use lease_driver::api::*;
#[cfg(feature = "metrics")]
pub use lease_driver::metrics;
/// redis-rs, re-exported so that one dependency line is enough.
pub use redis;
pub use redis_rs::RedisRs;
pub use shared::Shared;
#[cfg(feature = "tokio")]
pub use tokio_util::sync::CancellationToken;
