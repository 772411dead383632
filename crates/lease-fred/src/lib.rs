//! # lease-fred
//!
//! Exclusive leases for a group of workers that share one task source,
//! coordinated through Redis with [fred](https://docs.rs/fred) 10 on
//! tokio. This crate is the client and
//! runtime binding only: the protocol and the adapter loop live in
//! [`lease_core`] ([`lease_driver`]).
//!
//! [`discover`] takes an initialized fred client and [`Options`] and returns
//! a stream of [`Assignment`]s: an idle value first, then a value each time
//! the set of tasks the worker holds changes. While a task is in a
//! [`Lease`] that is still valid ([`Lease::owns`]), no other worker of the
//! group holds it. By default
//! ([`Handover::TaskSets`]) a change of the group moves only the tasks that
//! change owner; with [`Handover::WholePairs`] the lease is one whole pair
//! `(i, n)` ([`Lease::pair`]) for task sources that split by
//! `task.id % n == i` themselves. An idle value says why nothing is held
//! ([`IdleReason`]) and since when.
//!
//! ```no_run
//! use std::time::Duration;
//! use lease_fred::fred::prelude::*;
//! use lease_fred::{Assignment, Options, StreamExt, discover};
//!
//! # async fn drain() {}
//! # fn consume(_owns: impl Fn(u64) -> bool) {}
//! #[tokio::main(flavor = "current_thread")]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let config = Config::from_url("redis://127.0.0.1:6379/")?;
//!     let client = Builder::from_config(config)
//!         .set_policy(ReconnectPolicy::new_constant(0, 100)) // reconnect forever
//!         .build()?;
//!     client.init().await?;
//!     let options = Options::new("mail-sender", Duration::from_secs(5));
//!
//!     let mut assignments = discover(client, options)?;
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
//! given with [`Options::with_cancel`] to stand
//! down. By default (graceful leave, rule 16 of docs/protocol.md) the worker
//! takes itself out of the group, keeps serving what it holds until its
//! deadline minus the drain budget, yields the idle value and ends, and the
//! survivors take its tasks over about an interval sooner than after a
//! crash. Dropping the stream stops the worker at once; then, or with
//! `with_graceful_leave(false)`, the worker stays counted in the interval it
//! last registered in, so its tasks go unowned for up to about one
//! interval, exactly as after a crash.
//!
//! # Clients
//!
//! Any fred client with the script commands ([`LuaInterface`]): a
//! [`Client`](fred::clients::Client) (centralized, clustered or sentinel
//! config) or a [`Pool`](fred::clients::Pool), initialized, with a
//! [`ReconnectPolicy`](fred::types::config::ReconnectPolicy) if the worker
//! should outlive a Redis restart (fred's default is not to reconnect).
//! Every key of a group shares the hash tag `{name}`, so fred routes all of
//! a group's commands to one cluster node. Registrations are sent as
//! `EVALSHA`; on `NOSCRIPT` the driver falls back to `EVAL` with the source
//! and logs `script loaded`. Replies are taken strictly: anything but an
//! array of integers is rejected.
//!
//! Registration failures never reach the stream: a failed, rejected or hung
//! request is reported to the state machine, which retries within the
//! interval; if no registration succeeds in time the lease runs out and the
//! stream yields the idle value.
//!
//! # fred re-sends commands: what that does to each mode
//!
//! fred re-sends a command that was in flight when its connection dropped
//! (up to [`ConnectionConfig::max_command_attempts`] times, 3 by default),
//! without telling the caller. Redis may have executed the first copy (only
//! the reply was lost), so a registration can run twice (the test
//! `fred_resends_a_command_in_flight_when_its_connection_drops` shows it).
//!
//! * [`Mode::Ranked`] (the default): harmless. A re-sent registration
//!   carries the same token for the same interval, and a repeat of a token
//!   in one interval changes nothing (the sorted set already has it, with
//!   its carried score): the reply is the one the first copy would have
//!   given. The test `resend_costs_no_stand_down_in_ranked_mode` loses the
//!   reply of an executed registration of a settled group and shows that no
//!   worker stands down.
//! * [`Mode::Arrival`] (the original): each copy is an `INCR`, so the worker
//!   is counted twice in that interval: it keeps the later index, the
//!   earlier one becomes a ghost that nobody holds, and the interval's count
//!   is `n + 1`. The exclusive lease holds (positions stay distinct), but
//!   the pair each worker's next reply implies has `n + 1` and disagrees
//!   with the one before, and the reply after that disagrees again: the
//!   whole group stands down, as after any retry in the original protocol.
//!   `resend_stands_the_group_down_in_arrival_mode` measures about three
//!   intervals from the first worker's stand-down to the last one's new
//!   lease. If that matters, use `Ranked` mode.
//!
//! # Diagnostics
//!
//! `tracing` events with target `lease`, as listed in [`lease_core::diag`],
//! with registry `fred`. No field carries a URL or a password. With the
//! `metrics` feature the driver records the metrics of [`lease_driver::metrics`].
//!
//! # TLS
//!
//! With the `tls` feature (fred's `enable-rustls-ring`: rustls with the ring
//! provider, no OpenSSL), a `rediss://` URL connects over TLS and checks the
//! server's certificate against `SSL_CERT_FILE` if set, else the system's
//! trust store (fred's `TlsConnector::default_rustls`). For a CA file given
//! in code, [`tls::config`] builds fred's `TlsConfig` from it:
//!
//! ```toml
//! lease-fred = { version = "0.1", features = ["tls"] }
//! ```
//!
//! ```no_run
//! # #[cfg(feature = "tls")]
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! use std::path::Path;
//! use lease_fred::fred::prelude::*;
//! use lease_fred::tls::{self, Trust};
//!
//! let mut config = Config::from_url("rediss://:password@redis.internal:6380/")?;
//! // A private CA; `Trust::resolve(None)` is SSL_CERT_FILE, else the system.
//! config.tls = Some(tls::config(&Trust::resolve(Some(Path::new("/etc/lease/redis-ca.pem"))))?);
//! let client = Builder::from_config(config).build()?;
//! client.init().await?;
//! # Ok(())
//! # }
//! ```
//!
//! [`ConnectionConfig::max_command_attempts`]: fred::types::config::ConnectionConfig::max_command_attempts
#![forbid(unsafe_code)]

/// `rediss://` with fred (feature `tls`): the trusted CAs, as fred's
/// `TlsConfig`.
#[cfg(feature = "tls")]
pub mod tls {
    pub use lease_tls::{TlsError, Trust};

    /// fred's TLS configuration trusting `trust` (a CA file, `SSL_CERT_FILE`
    /// or the system's store: [`Trust::resolve`]), on rustls's ring
    /// provider; set it as `Config::tls`.
    pub fn config(trust: &Trust) -> Result<fred::types::config::TlsConfig, TlsError> {
        let connector = fred::types::config::TlsConnector::from(trust.client_config()?);
        Ok(connector.into())
    }
}

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use fred::interfaces::LuaInterface;
use fred::types::Value;
use lease_core::Clock;
use lease_driver::{Assignments, Command, Connection, Driver, Integers, Verb};
use tokio::sync::OnceCell;
use tokio_util::task::AbortOnDropHandle;

/// fred, re-exported so that one dependency line is enough.
pub use fred;
pub use futures_util::StreamExt;
pub use lease_driver::ConnectError;
pub use lease_driver::api::*;
pub use tokio_util::sync::CancellationToken;

/// Options of one worker ([`lease_core::Options`], whose builder methods
/// and defaults they are), with tokio's [`CancellationToken`] to stand it
/// down.
///
/// ```
/// use std::time::Duration;
/// use lease_fred::{CancellationToken, Options};
///
/// let stop = CancellationToken::new();
/// let options = Options::new("mail-sender", Duration::from_secs(5)).with_cancel(stop.clone());
/// assert!(options.cancel.is_some());
/// ```
pub type Options = lease_core::Options<CancellationToken>;

/// Starts a worker of the group named in `options` on `client` (already
/// initialized) and returns its pair stream.
///
/// The worker runs in a tokio task of its own, so it keeps registering (and
/// renewing its lease) while the loop body is busy; dropping the returned
/// [`Discover`] aborts it. Invalid options are rejected here, with the first
/// problem found.
///
/// # Panics
///
/// If called outside a tokio runtime (like [`tokio::spawn`]).
pub fn discover<C>(client: C, options: Options) -> Result<Discover, OptionsError>
where
    C: LuaInterface + Send + Sync + 'static,
{
    let identity = options
        .identity
        .unwrap_or_else(lease_driver::random_identity);
    let clock = Clock::new(|| tokio::time::Instant::now().into_std());
    let (driver, stream) = Driver::new(&options, identity, clock, "fred")?;
    let cancelled = options.cancel.unwrap_or_default().cancelled_owned();
    let sleep_until = |at: Instant| tokio::time::sleep_until(at.into());
    let kept = shared_info(fred::interfaces::ClientLike::id(&client));
    let run = driver.run(Fred(client, kept), sleep_until, cancelled);
    Ok(stream.with_guard(AbortOnDropHandle::new(tokio::spawn(run))))
}

/// The stream of one worker (see [`Assignment`]), returned by [`discover`]:
/// a `futures::Stream` (and `FusedStream`) with [`Assignments::name`].
///
/// It ends after cancellation (having yielded the idle value if a lease was
/// held). Dropping it stops the worker at once. Time is tokio's clock, so
/// paused time drives the worker, and every lease answers `is_valid()` on it.
pub type Discover = Assignments<AbortOnDropHandle<()>>;

/// A fred client as the driver uses it: `EVALSHA`/`EVAL` through fred's
/// script interface, the reply taken as a [`Value`]; with the answer to
/// `INFO` its client's workers share.
struct Fred<C>(C, Arc<KeptInfo>);

/// One client's answer to `INFO`, once asked (`None`: it was not text).
type KeptInfo = OnceCell<Option<String>>;

impl<C: LuaInterface + Send + Sync> Connection for Fred<C> {
    type Error = fred::error::Error;

    fn run<'c>(
        &'c self,
        command: Command<'_>,
    ) -> impl Future<Output = Result<Option<Integers>, Self::Error>> + Send + use<'c, C> {
        let (script, keys, args) = (command.script, command.keys, command.args);
        // fred's own types, built once: no copy of ours is kept.
        let keys: Vec<fred::types::Key> = keys.iter().map(|k| fred::types::Key::from(*k)).collect();
        let args: Vec<Value> = args.iter().map(|a| Value::from(a.as_str())).collect();
        let verb = command.verb;
        async move {
            let reply: Value = match verb {
                Verb::EvalSha => self.0.evalsha(script, keys, args).await?,
                Verb::Eval => self.0.eval(script, keys, args).await?,
            };
            // Strictly integers: fred's own conversion would parse strings.
            let Value::Array(items) = reply else {
                return Ok(None);
            };
            Ok(Integers::collect(items, |v| {
                if let Value::Integer(i) = v {
                    Some(i)
                } else {
                    None
                }
            }))
        }
    }

    fn is_noscript(error: &Self::Error) -> bool {
        error.details().starts_with("NOSCRIPT")
    }

    /// `INFO` once per fred client: clones of a client share its id, and
    /// every worker started on one of them shares the first successful
    /// answer ([`shared_info`]); those asked while it is in flight wait for
    /// it, and an error is not kept.
    fn server_info(&self) -> impl Future<Output = Result<Option<String>, Self::Error>> + Send {
        let info = fred::types::CustomCommand::new_static(
            lease_core::server::INFO_COMMAND,
            fred::types::ClusterHash::Random,
            false,
        );
        async move {
            let text = self
                .1
                .get_or_try_init(|| async {
                    let reply: Value = self.0.custom(info, Vec::<Value>::new()).await?;
                    Ok::<_, Self::Error>(match reply {
                        Value::String(text) => Some(text.to_string()),
                        Value::Bytes(bytes) => String::from_utf8(bytes.to_vec()).ok(),
                        _ => None,
                    })
                })
                .await?;
            Ok(text.clone())
        }
    }
}

/// The kept answer to `INFO` of the fred client with `id`: one cell per
/// client while any worker on it runs (each holds it; the map holds it
/// weakly, and drops dead entries as it grows).
fn shared_info(id: &str) -> Arc<KeptInfo> {
    static KEPT: Mutex<Option<HashMap<String, Weak<KeptInfo>>>> = Mutex::new(None);
    let mut kept = KEPT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let kept = kept.get_or_insert_with(HashMap::new);
    if let Some(cell) = kept.get(id).and_then(Weak::upgrade) {
        return cell;
    }
    if kept.len() >= 64 {
        kept.retain(|_, cell| cell.strong_count() > 0);
    }
    let cell = Arc::new(OnceCell::new());
    kept.insert(id.to_owned(), Arc::downgrade(&cell));
    cell
}

/// Connects to the Redis at `url`: a fred client that reconnects forever
/// after a restart, initialized. A server that does not answer within
/// [`lease_driver::CONNECT_TIMEOUT`], or a URL that is not one, is an error
/// that names the address (with any password replaced by `***`).
///
/// ```no_run
/// # async fn f() -> Result<(), lease_fred::ConnectError> {
/// let client = lease_fred::connect("redis://127.0.0.1:6379/").await?;
/// # drop(client);
/// # Ok(())
/// # }
/// ```
pub async fn connect(url: &str) -> Result<fred::clients::Client, ConnectError> {
    use fred::prelude::{ClientLike, Config, ReconnectPolicy};
    let config = Config::from_url(url).map_err(|e| ConnectError::new(url, e))?;
    let client = fred::types::Builder::from_config(config)
        .set_policy(ReconnectPolicy::new_constant(0, 100))
        .build()
        .map_err(|e| ConnectError::new(url, e))?;
    let within = lease_driver::CONNECT_TIMEOUT;
    // `init` waits for the first connection; with a reconnect policy a
    // refused connection is retried, so the timeout is what reports it.
    match tokio::time::timeout(within, client.init()).await {
        Ok(Ok(_task)) => Ok(client),
        Ok(Err(e)) => Err(ConnectError::new(url, e)),
        Err(_) => {
            let _ = client.quit().await;
            Err(ConnectError::timed_out(url))
        }
    }
}
