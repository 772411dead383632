//! The tokio side: the worker's task, its timers and its cancellation
//! token; the loop itself is [`lease_driver::Driver::run`].

use std::time::Instant;

use lease_core::{OptionsError, Token};
use lease_driver::{Driver, Pairs};
use redis::aio::ConnectionLike;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use crate::RedisRs;

/// Options of one worker: the group ([`lease_core::Options`]) and an optional
/// [`CancellationToken`].
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
pub type Options = lease_driver::Options<CancellationToken>;

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
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    let token = Token::new(rand::random());
    let (driver, pairs) = Driver::new(&options.lease, token, Instant::now(), "redis-rs")?;
    let cancelled = options.cancel.unwrap_or_default().cancelled_owned();
    let sleep_until = |at: Instant| tokio::time::sleep_until(at.into());
    let run = driver.run(RedisRs(connection), Instant::now, sleep_until, cancelled);
    Ok(pairs.with_guard(AbortOnDropHandle::new(tokio::spawn(run))))
}

/// The pair stream of one worker (see [`Pair`](crate::Pair)), returned by [`discover`]: a
/// `futures::Stream` (and `FusedStream`) with [`Pairs::name`].
///
/// It ends after cancellation (having yielded the idle pair if a lease was
/// held). Dropping it stops the worker at once.
pub type Discover = Pairs<AbortOnDropHandle<()>>;
