//! # lease-sim
//!
//! A deterministic simulator for [`lease_core`]: a virtual clock, a simulated
//! Redis that runs the semantics of both registration scripts and of the
//! leave script ([`SimStore`]), a
//! network with latency, loss and duplicates ([`Network`]), workers with
//! offset and drifting local clocks that join, leave, crash, stall and
//! cancel, and server faults (restarts, pauses, clock steps, lost writes).
//! Every worker is a [`lease_core::Worker`] driven through the same interface
//! the adapters use.
//!
//! A run writes a history in the format of docs/history-format.md
//! ([`lease_history::Record`]) and the independent checker of
//! [`lease_history`] judges it ([`Sim::check`]): exclusivity at every
//! instant, fencing order, coverage, join-to-own and stand-down times. The
//! simulator only produces histories; the judge lives in its own crate, so
//! chaos runs, the conformance suite and your own tests are judged by the
//! same code without depending on the simulator.
//!
//! The command-line runner of randomized runs is `lease sim` (crate
//! `lease-cli`).
//!
//! [`closed_set_positions`] gives every member's position in a closed
//! Ranked set read from Redis (`ZRANGE key 0 -1 WITHSCORES`), computed by
//! the store's own code (`lease inspect` shows them).
//!
//! # The simulated Redis behind the real clients
//!
//! With a client feature, the same store runs behind the real adapters, so a
//! production worker loop on `lease_redis::discover` or `lease_fred::discover`
//! runs unchanged in a deterministic test: `SimRedis` (feature `tokio`, which
//! each client feature enables) is a server on tokio's clock with scripted
//! faults, and each feature adds one way to reach it:
//!
//! - `redis-rs`: `SimRedis::connection`, a `redis::aio::ConnectionLike`;
//! - `fred`: `SimRedis::fred_mocks`, a `fred::mocks::Mocks`;
//! - `turmoil`: `lease_sim::turmoil::serve`, a Redis host speaking RESP on
//!   turmoil's TCP, and redis-rs connections to it.
//!
//! `docs/testing-with-lease-sim.md` builds an example crate file by file,
//! whose worker runs in all three and on a real Redis.
//! Downstream projects can also use [`Sim`] to test their own worker logic
//! against the state machine directly, without any async runtime.
//!
//! ```
//! use std::time::Duration;
//! use lease_core::Options;
//! use lease_sim::{Action, Sim, SimConfig};
//!
//! let mut sim = Sim::new(SimConfig::new(1, Options::new("g", Duration::from_millis(200)))).unwrap();
//! let a = sim.join_now();
//! let b = sim.join_now();
//! sim.run_for(Duration::from_secs(2));
//! sim.act(Action::Crash(a));
//! sim.run_for(Duration::from_secs(2));
//! let lease = sim.lease(b).expect("the survivor owns the whole group again");
//! assert_eq!(lease.pair().map(|p| (p.i(), p.n())), Some((0, 1)));
//! assert!(sim.check().is_ok());
//! ```
#![forbid(unsafe_code)]

#[cfg(feature = "fred")]
mod fred;
mod net;
#[cfg(feature = "redis-rs")]
mod redis_rs;
mod run;
#[cfg(feature = "tokio")]
pub mod server;
mod store;
/// The simulated Redis as a turmoil host (feature `turmoil`).
#[cfg(feature = "turmoil")]
pub mod turmoil {
    pub use crate::turmoil_host::{TurmoilConnection, connect, serve, serve_on};
}
#[cfg(feature = "turmoil")]
mod turmoil_host;
mod world;

#[cfg(feature = "fred")]
pub use fred::FredMocks;
pub use net::{LocalClock, Network};
#[cfg(feature = "redis-rs")]
pub use redis_rs::SimConnection;
pub use run::{Faults, RunConfig, RunReport, random_run};
#[cfg(feature = "tokio")]
pub use server::{RedisFaults, ServerStats, SimRedis, SimRedisConfig};
pub use store::{
    ClosedEntry, EntryKind, LeaveSabotage, Peek, SimStore, StoreError, closed_set_positions,
};
pub use world::{Action, Clocks, Mishap, Observed, Sim, SimConfig, Stats, WorkerId};
