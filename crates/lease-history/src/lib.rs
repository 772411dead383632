//! # lease-history
//!
//! The judge of a lease run, for every kind of run: the simulator's, a chaos
//! run against a real Redis, the conformance suite's, the demo's.
//!
//! - [`Record`] is one line of a history, written by a [`HistoryWriter`]
//!   and read by [`read_history`]; a [`History`] is the records in time
//!   order. The format, every record and field and what the checker judges
//!   from each, is documented in `docs/history-format.md` in the
//!   repository.
//! - The [`checker`] rebuilds every worker's holdings from the lines and
//!   checks exclusivity, fencing (per part for task sets) and that every
//!   lease ends by the end of the interval after its last renewal, and
//!   measures coverage, stand-downs and join-to-own delays. It knows the record format and nothing else: no
//!   lease-core, no simulator, so it is an independent oracle.
//! - [`work`] judges what a worker loop did with its leases: a
//!   [`TaskRecorder`](work::TaskRecorder) the loop calls when it starts and
//!   finishes each task, and [`check_tasks`](work::check_tasks) (no task
//!   processed by two workers at once, no stale token accepted).
//! - The [`timeline`] draws a history as an SVG picture of what the checker
//!   judged.
//! - [`tasks`] is the task universe of task-set histories (incremental
//!   handover) and the mappings, written again here (not taken from
//!   lease-core) so that the judge stays independent.
//!
//! ```
//! use lease_history::{Record, check};
//!
//! let records = vec![
//!     Record::own("w0", 0, 2, 10, 0),
//!     Record::own("w1", 1, 2, 10, 0),
//!     Record::release("w0", 0, 2, 1_000),
//!     Record::own("w1", 0, 2, 12, 1_000), // a handover, back to back
//! ];
//! let summary = check(&records, Some(2_000));
//! assert!(!summary.is_ok(), "w1 received a pair while it still held one");
//! assert!(summary.to_string().starts_with("checker: VIOLATION violations=1 "));
//! ```
#![forbid(unsafe_code)]

pub mod checker;
mod log;
mod record;
pub mod tasks;
pub mod timeline;
pub mod work;

pub use checker::{Checker, Summary, check};
pub use log::{History, HistoryError, HistoryWriter, read_history};
pub use record::{
    LeaveHow, Mapping, Part, PartEnd, Record, ReleaseReason, Renewed, UnknownReleaseReason,
};
