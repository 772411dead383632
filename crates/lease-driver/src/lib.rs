//! # lease-driver
//!
//! The I/O loop every `lease` adapter shares, on top of the sans-IO
//! [`lease_core::Worker`]: runtime-agnostic (`std` futures only, no async
//! runtime in its dependency tree), so that an adapter is only its Redis client
//! ([`Connection`]), its runtime's clock and timers, its task and its
//! cancellation token.
//!
//! [`Driver`] is the adapter loop of [`Worker`](lease_core::Worker), written once, on `std`
//! futures only: it sends each registration (`EVALSHA`, `EVAL` after
//! `NOSCRIPT`: rule 2) through the adapter's connection, times it out on the
//! adapter's timer, feeds the outcome back, records [`metrics`],
//! and hands each [`Assignment`](api::Assignment) to the stream ([`Assignments`]) until it is
//! cancelled or the stream is dropped. The options are
//! [`lease_core::Options`] with the adapter's cancellation type. An adapter,
//! whole:
//!
//! ```text
//! pub type Options = lease_core::Options<MyCancelToken>;
//!
//! pub type Discover = Assignments<MyTaskHandle>; // dropping it must stop the task
//!
//! pub fn discover(conn: MyClient, options: Options) -> Result<Discover, OptionsError> {
//!     let clock = Clock::new(my_runtime_now);
//!     let identity = options.identity.unwrap_or_else(random_identity);
//!     let (driver, stream) = Driver::new(&options, identity, clock, "my-client")?;
//!     let cancelled = /* a future that completes when options.cancel is cancelled */;
//!     let task = spawn(driver.run(MyConnection(conn), sleep_until, cancelled));
//!     Ok(stream.with_guard(task))
//! }
//! ```
//!
//! Nothing here does I/O or reads a clock: commands go through the
//! [`Connection`], and time comes from the adapter's clock and timers.
#![forbid(unsafe_code)]

use lease_core::Identity;

mod connect;
mod connection;
mod driver;
mod judged;
pub mod metrics;
mod stream;
#[cfg(test)]
mod tests;

pub use connect::{CONNECT_TIMEOUT, ConnectError};
pub use connection::{Command, Connection, Integers, Verb};

/// Every type a user's loop and options name, which each adapter re-exports
/// (`pub use lease_driver::api::*`) so that one dependency line is enough.
pub mod api {
    #[cfg(feature = "stream")]
    pub use futures_core::Stream;
    /// Push-down predicates: a lease's buckets and their PostgreSQL
    /// condition ([`Lease::buckets`]).
    pub use lease_core::pushdown;
    pub use lease_core::{
        Assignment, Counting, GroupRules, Handover, Identity, Idle, IdleReason, Lease, Mapping,
        Mode, OptionsError, Pair, Part, PartLease, Ranked, Refusal, TaskDelta,
    };
}
pub use driver::{Driver, MAX_IN_FLIGHT};
pub use stream::Assignments;

/// A fresh worker identity drawn from the operating system's random source:
/// what every adapter uses for each start unless the options give one
/// ([`lease_core::Options::with_identity`]).
///
/// # Panics
///
/// If the operating system has no random source to give (which `getrandom`
/// reports only on platforms without one).
pub fn random_identity() -> Identity {
    let mut bits = [0u8; 16];
    getrandom::fill(&mut bits).expect("the operating system's random source");
    Identity::from_bits_same_worker_if_reused(u128::from_le_bytes(bits))
}
