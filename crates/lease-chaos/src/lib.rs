//! # lease-chaos
//!
//! Fault injection on a real Redis, as a library for any test and as the
//! `lease-chaos` binary (`docs/reliability.md`):
//!
//! - [`proxy`]: the one fault proxy: per-link latency, blackholes, connection
//!   resets and lost replies, in front of a Redis server. fred's own test of
//!   a lost reply uses it too.
//! - [`harness`]: the one real-worker harness: real adapter workers
//!   (`lease-redis`, `lease-fred`, `lease-smol`), each on a thread and an
//!   executor of its own, that can be stalled, crashed and cancelled, with
//!   the history (docs/history-format.md) recorded as it happens. The chaos run
//!   and `lease-demo --redis` drive their workers with it.
//! - [`sink`]: the fencing store the workers write their tasks to.
//!
//! The history is judged by `lease-history`.
#![forbid(unsafe_code)]

pub mod harness;
pub mod proxy;
pub mod sink;
