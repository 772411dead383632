//! # lease-redis
//!
//! Exclusive `(i, n)` leases for a group of workers that split one task
//! source by `task.id % n == i`, coordinated through Redis with
//! [redis-rs](https://docs.rs/redis) on tokio. This crate is the I/O loop
//! only: the protocol lives in [`lease_core`].
//!
//! [`discover`] takes a connection and [`Options`] and returns a stream of
//! pairs ([`Pair`]): the idle pair (`None`) first, then a value each time the
//! pair in force changes. While you hold a [`Lease`], no other worker of the
//! group holds its `i`, and every holder uses the same `n`.
//!
//! ```no_run
//! use std::time::Duration;
//! use futures::StreamExt;
//! use lease_redis::{Options, discover};
//!
//! # async fn drain() {}
//! # fn consume(_owns: impl Fn(u64) -> bool) {}
//! #[tokio::main(flavor = "current_thread")]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let client = redis::Client::open("redis://127.0.0.1:6379/")?;
//!     let redis = client.get_multiplexed_async_connection().await?;
//!     let options = Options::new("mail-sender", Duration::from_secs(5));
//!
//!     let mut pairs = discover(redis, options)?;
//!     while let Some(pair) = pairs.next().await {
//!         drain().await; // stop taking new work, finish what is in flight
//!
//!         let Some(lease) = pair else { continue }; // idle: stay stopped
//!
//!         let (i, n) = (u64::from(lease.i()), u64::from(lease.n()));
//!         // Check the lease before each task: it may run out while a
//!         // stalled process was not looking.
//!         consume(move |task_id| lease.is_valid() && task_id % n == i);
//!     }
//!     Ok(())
//! }
//! ```
//!
//! # Ending
//!
//! Cancel the [`CancellationToken`] given with [`Options::with_cancel`] to
//! stand down: the stream yields the idle pair once if a lease is held, then
//! ends, so the loop body drains exactly where it already handles losing a
//! lease (see `examples/mail_sender.rs` for `SIGTERM`). Dropping the stream
//! stops the worker at once; draining is then up to you. Either way the
//! worker stays counted in the interval it last registered in, so its slot
//! goes unowned for up to about one interval, exactly as after a crash.
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
//! Registration failures never reach the stream: a failed, rejected or hung
//! request is reported to the state machine, which retries within the
//! interval; if no registration succeeds in time the lease runs out and the
//! stream yields the idle pair.
//!
//! # Diagnostics
//!
//! `tracing` events with target `lease`, as listed in [`lease_core::diag`]:
//! this crate adds `discover started` (registry `redis-rs`), `script loaded`
//! and `pair handed to the loop`. No field carries a URL or a password.
//! With the `metrics` feature, the `metrics` module describes the metrics
//! recorded through the `metrics` facade.
#![forbid(unsafe_code)]

mod driver;
#[cfg(feature = "metrics")]
pub mod metrics;
#[cfg(not(feature = "metrics"))]
mod metrics;

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use futures::Stream;
use futures::stream::FusedStream;
use lease_core::{Token, Worker, diag};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

pub use lease_core::{Lease, Mode, OptionsError, Slot};

/// One item of the pair stream: `Some(lease)` while a pair is held (its
/// [`Lease::i`], [`Lease::n`], fencing [`Lease::token`] and
/// [`Lease::is_valid`]), `None` for the idle pair (hold nothing).
///
/// The stream starts with `None`, then yields only when the pair in force
/// changes, and never coalesces a release away: between two different
/// leases there is always a `None`.
pub type Pair = Option<Lease>;

/// Options of one worker: the group ([`lease_core::Options`]) and an optional
/// cancellation token.
///
/// ```
/// use std::time::Duration;
/// use lease_redis::{Mode, Options};
/// use tokio_util::sync::CancellationToken;
///
/// let stop = CancellationToken::new();
/// let options = Options::new("mail-sender", Duration::from_secs(5))
///     .with_gap(0.2)
///     .with_prefix("prod:")
///     .with_mode(Mode::Arrival)
///     .with_cancel(stop.clone());
/// assert_eq!(options.lease.gap, 0.2);
/// ```
#[derive(Clone, Debug)]
pub struct Options {
    /// Group name, interval, gap, key prefix and counting mode, validated by
    /// [`discover`].
    pub lease: lease_core::Options,
    /// Cancelling this token stands the worker down: the stream yields the
    /// idle pair once if a lease is held, then ends.
    pub cancel: Option<CancellationToken>,
}

impl Options {
    /// Options for group `name` with interval `interval`, every other option
    /// at its default (gap 0.15, no prefix, [`Mode::Ranked`], no
    /// cancellation token).
    pub fn new(name: impl Into<String>, interval: Duration) -> Self {
        lease_core::Options::new(name, interval).into()
    }

    /// Sets the gap fraction (strictly between 0 and 0.5).
    pub fn with_gap(mut self, gap: f64) -> Self {
        self.lease.gap = gap;
        self
    }

    /// Sets the key prefix, for namespacing.
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.lease.prefix = prefix.into();
        self
    }

    /// Sets the counting mode.
    pub fn with_mode(mut self, mode: Mode) -> Self {
        self.lease.mode = mode;
        self
    }

    /// Sets the cancellation token.
    pub fn with_cancel(mut self, cancel: CancellationToken) -> Self {
        self.cancel = Some(cancel);
        self
    }
}

impl From<lease_core::Options> for Options {
    fn from(lease: lease_core::Options) -> Self {
        Self {
            lease,
            cancel: None,
        }
    }
}

/// Starts a worker of the group named in `options` on `connection` and
/// returns its pair stream.
///
/// The worker runs in a tokio task of its own, so it keeps registering (and
/// renewing its lease) while the loop body is busy; dropping the returned
/// [`Discover`] aborts it. Invalid options are rejected here, with the first
/// problem found.
///
/// # Panics
///
/// If called outside a tokio runtime (like [`tokio::spawn`]).
pub fn discover<C>(connection: C, options: Options) -> Result<Discover, OptionsError>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    let worker = Worker::new(&options.lease, Token::new(rand::random()), Instant::now())?;
    let o = &options.lease;
    diag::discover_started(&o.name, o.interval, o.gap, &o.prefix, "redis-rs");
    let name: Arc<str> = Arc::from(o.name.as_str());
    let (tx, rx) = mpsc::unbounded_channel();
    let task = tokio::spawn(driver::run(connection, worker, options.cancel, tx));
    Ok(Discover {
        rx,
        name,
        done: false,
        _task: AbortOnDropHandle::new(task),
    })
}

/// The pair stream of one worker (see [`Pair`]), returned by [`discover`].
///
/// It ends after cancellation (having yielded the idle pair if a lease was
/// held). Dropping it stops the worker at once.
#[derive(Debug)]
pub struct Discover {
    rx: mpsc::UnboundedReceiver<Pair>,
    name: Arc<str>,
    done: bool,
    _task: AbortOnDropHandle<()>,
}

impl Discover {
    /// The group name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Stream for Discover {
    type Item = Pair;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Pair>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        let item = ready!(this.rx.poll_recv(cx));
        match &item {
            Some(pair) => diag::pair_handed_to_the_loop(&this.name, pair.as_ref().map(Lease::slot)),
            None => this.done = true,
        }
        Poll::Ready(item)
    }
}

impl FusedStream for Discover {
    fn is_terminated(&self) -> bool {
        self.done
    }
}
