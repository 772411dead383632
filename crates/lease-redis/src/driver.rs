//! The tokio side: the worker's task, its timers and its cancellation
//! token; the loop itself is [`lease_driver::Driver::run`].

use std::time::Instant;

use lease_core::{Clock, OptionsError};
use lease_driver::{Assignments, CONNECT_TIMEOUT, ConnectError, Driver, random_identity};
use redis::aio::ConnectionLike;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use crate::{RedisRs, Shared};

/// Options of one worker ([`lease_core::Options`], whose builder methods
/// and defaults they are), with tokio's [`CancellationToken`] to stand it
/// down.
///
/// ```
/// use std::time::Duration;
/// use lease_redis::{CancellationToken, Handover, Options};
///
/// let stop = CancellationToken::new();
/// let options = Options::new("mail-sender", Duration::from_secs(5))
///     .with_gap(0.2)
///     .with_prefix("prod:")
///     .with_handover(Handover::WholePairs)
///     .with_cancel(stop.clone());
/// assert_eq!(options.gap, 0.2);
/// ```
pub type Options = lease_core::Options<CancellationToken>;

/// Starts a worker of the group named in `options` on `connection` and
/// returns its stream of [`Assignment`](crate::Assignment)s.
///
/// The worker runs in a tokio task of its own, so it keeps registering (and
/// renewing its lease) while the loop body is busy; dropping the returned
/// [`Discover`] aborts it. Invalid options are rejected here, with the first
/// problem found. Time is tokio's clock (`tokio::time::Instant`), so paused
/// time (`tokio::time::pause`, `#[tokio::test(start_paused = true)]`) and
/// simulators that drive it drive the worker, and every lease answers
/// `is_valid()` on it.
///
/// # Panics
///
/// If called outside a tokio runtime (like [`tokio::spawn`]).
pub fn discover<C>(connection: C, options: Options) -> Result<Discover, OptionsError>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    let identity = options.identity.unwrap_or_else(random_identity);
    let clock = Clock::new(|| tokio::time::Instant::now().into_std());
    let (driver, stream) = Driver::new(&options, identity, clock, "redis-rs")?;
    let cancelled = options.cancel.unwrap_or_default().cancelled_owned();
    let sleep_until = |at: Instant| tokio::time::sleep_until(at.into());
    let run = driver.run(RedisRs(connection), sleep_until, cancelled);
    Ok(stream.with_guard(AbortOnDropHandle::new(tokio::spawn(run))))
}

/// The stream of one worker (see [`Assignment`](crate::Assignment)),
/// returned by [`discover`]: a `futures::Stream` (and `FusedStream`) with
/// [`Assignments::name`].
///
/// It ends after cancellation (having yielded the idle value if a lease was
/// held). Dropping it stops the worker at once.
pub type Discover = Assignments<AbortOnDropHandle<()>>;

/// Connects to the Redis at `url` with a [`ConnectionManager`], which
/// reconnects by itself after a restart, and with no response timeout of
/// its own (the worker times each registration out itself), wrapped in
/// [`Shared`] so that every worker started on it or a clone of it shares
/// one server check (one `INFO`). A server that
/// does not answer within [`CONNECT_TIMEOUT`], or a URL that is not one, is
/// an error that names the address (with any password replaced by `***`).
///
/// ```no_run
/// # async fn f() -> Result<(), lease_redis::ConnectError> {
/// let redis = lease_redis::connect("redis://127.0.0.1:6379/").await?;
/// # drop(redis);
/// # Ok(())
/// # }
/// ```
pub async fn connect(url: &str) -> Result<Shared<ConnectionManager>, ConnectError> {
    let client = redis::Client::open(url).map_err(|e| ConnectError::new(url, e))?;
    let config = ConnectionManagerConfig::new()
        .set_response_timeout(None)
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        // A refused first connection is reported with its reason, not retried
        // for long; later reconnects retry again at every request.
        .set_number_of_retries(2);
    match tokio::time::timeout(
        CONNECT_TIMEOUT,
        ConnectionManager::new_with_config(client, config),
    )
    .await
    {
        Ok(Ok(manager)) => Ok(Shared::new(manager)),
        Ok(Err(e)) => Err(ConnectError::new(url, e)),
        Err(_) => Err(ConnectError::timed_out(url)),
    }
}
