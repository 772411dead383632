//! # lease-core
//!
//! The whole `lease` protocol as a sans-IO state machine: a group of workers
//! that split one task source by `task.id % n == i` gets `i` and `n` as an
//! **exclusive lease**, worked out from small per-interval keys in Redis.
//! While one worker holds `i`, no other worker of the group holds it, even
//! while the group grows, shrinks, stalls or loses its Redis.
//!
//! This crate does no I/O and reads no clock: time is an argument, the
//! randomness a [`Token`] passed in (drawn by the driver, or
//! [`Token::seeded`] for runs that replay). It holds everything the adapters share:
//! option validation ([`Options`]), the Lua scripts ([`Script`]), reply
//! parsing ([`Reply`]), the [`Worker`] state machine, diagnostics ([`diag`]),
//! and ownership helpers ([`ownership`]). The adapters' I/O loop, written
//! once on `std` futures, lives beside it in the `lease-driver` crate, so
//! this one stays free of async code.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use lease_core::{Event, Options, Token, Worker};
//!
//! let t0 = Instant::now();
//! let options = Options::new("mail-sender", Duration::from_secs(5));
//! let mut worker = Worker::new(&options, Token::seeded(7, 0), t0).unwrap();
//! // The opening idle value, then a registration due at once.
//! assert!(matches!(worker.poll_event(), Some(Event::Assignment(a)) if a.is_idle()));
//! worker.handle_timeout(t0);
//! let t = worker.poll_transmit().unwrap();
//! assert_eq!(t.keys[0], "{mail-sender}:1"); // the newcomer's clock probe
//! ```
//!
//! The driver loop is documented on [`Worker`]; `docs/protocol.md` explains
//! each rule and why the lease is exclusive.
#![forbid(unsafe_code)]

mod clock;
pub mod diag;
mod event;
mod lease;
mod options;
pub mod ownership;
mod reply;
mod rules;
mod script;
pub mod server;
mod tasks;
mod worker;

pub use event::{Assignment, Event, Idle, IdleReason};
pub use lease::{Clock, Lease};
pub use options::{
    DEFAULT_GAP, HandoverMode, MAX_INTERVAL, MAX_NAME_LEN, MAX_PREFIX_LEN, Mode, Options,
    OptionsError,
};
pub use ownership::Slot;
pub use reply::{Counted, MAX_SERVER_SECONDS, Reply, ReplyError, ServerMicros};
pub use rules::{GroupRules, Refusal};
pub use script::{Script, interval_key, rules_key};
pub use server::{ServerInfo, ServerKind, UnsupportedServer, Version, check_server};
pub use tasks::{Part, TaskDelta, TaskLease, Tasks};
pub use worker::{RequestId, Token, Transmit, Worker};
