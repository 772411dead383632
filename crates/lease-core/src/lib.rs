//! # lease-core
//!
//! The whole `lease` protocol as a sans-IO state machine: a group of workers
//! that share one task source gets an **exclusive lease** for each worker,
//! worked out from small per-interval keys in Redis. While one worker holds
//! a task, no other worker of the group holds it, even while the group
//! grows, shrinks, stalls or loses its Redis.
//!
//! This crate does no I/O and reads no clock: time is an argument, the
//! randomness an [`Identity`] passed in (drawn by the driver, or
//! [`Identity::seeded`] for runs that replay). It holds everything the
//! adapters share: option validation ([`Options`]), the Lua scripts
//! ([`Script`]), reply parsing ([`Reply`]), the [`Worker`] state machine,
//! diagnostics ([`diag`]), ownership helpers ([`ownership`]), and push-down
//! predicates that let a task source select a lease's tasks itself
//! ([`pushdown`]: buckets and a PostgreSQL condition). The
//! adapters' I/O loop, written once on `std` futures, lives beside it in the
//! `lease-driver` crate, so this one stays free of async code.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use lease_core::{Event, Identity, Options, Worker};
//!
//! let t0 = Instant::now();
//! let options: Options = Options::new("mail-sender", Duration::from_secs(5));
//! let mut worker = Worker::new(&options, Identity::seeded(7, 0), t0).unwrap();
//! // The opening idle value, then a registration due at once.
//! assert!(matches!(worker.poll_event(), Some(Event::Assignment(a)) if a.is_idle()));
//! worker.handle_timeout(t0);
//! let t = worker.poll_transmit().unwrap();
//! assert_eq!(t.keys[0], "{mail-sender}:1"); // the newcomer's clock probe
//! ```
//!
//! The driver loop is documented on [`Worker`]; `docs/protocol.md` explains
//! each rule and why the lease is exclusive.
//!
//! # Features
//!
//! * `negative-controls`: `Options::negative_control`, a deliberately
//!   broken rule for the simulator's negative controls. Never enable it in a
//!   product: it exists so that tests can show the checker catches each
//!   rule's absence.
#![forbid(unsafe_code)]

mod clock;
pub mod diag;
mod event;
mod lease;
mod member;
mod options;
pub mod ownership;
mod part;
pub mod pushdown;
mod reply;
mod rules;
mod script;
pub mod server;
mod worker;

pub use event::{Assignment, Event, Idle, IdleReason};
pub use lease::{Clock, Lease, PartLease};
pub use member::{MAX_MEMBER_LEN, Member, MemberError, MemberInUse};
#[cfg(feature = "negative-controls")]
pub use options::NegativeControl;
pub use options::{
    Counting, DEFAULT_GAP, Handover, MAX_INTERVAL, MAX_NAME_LEN, MAX_PREFIX_LEN, Mode, Options,
    OptionsError, Ranked,
};
pub use ownership::{Mapping, Pair};
pub use part::{Part, TaskDelta};
pub use reply::{
    Counted, MAX_INHERITED, MAX_SERVER_SECONDS, Older, Reply, ReplyError, ServerMicros,
};
pub use rules::{GroupRules, Refusal};
pub use script::{Script, fillers_key, interval_key, members_key, rules_key};
pub use server::{ServerInfo, ServerKind, UnsupportedServer, Version, check_server};
pub use worker::{Identity, KEY_COUNT, RequestId, Transmit, Worker};
