//! What the state machine tells its driver (DESIGN section 3, rule 11).

use std::time::Instant;

use crate::lease::Lease;
use crate::ownership::Slot;

/// An output of [`crate::Worker::poll_event`].
///
/// The pair stream is the sequence of [`Event::Pair`] values: it starts with
/// the idle pair, then changes only when the pair in force changes, and a
/// release is never coalesced away: between two different leases there is
/// always an idle pair. [`Event::Released`] is the delta beside it: what was
/// given back, when, and why.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// The pair in force changed: `Some` is a newly granted lease, `None` the
    /// idle pair (hold nothing).
    Pair(Option<Lease>),
    /// A held lease ended. Always followed by `Pair(None)`.
    Released(Released),
    /// The worker was cancelled and has stood down; no more output follows.
    Stopped,
}

/// A lease that ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Released {
    /// The pair given back.
    pub slot: Slot,
    /// The fencing token it carried.
    pub token: u64,
    /// The instant the lease really ended: its deadline if it ran out (even
    /// if the worker only noticed later), otherwise the instant of the input
    /// that ended it.
    pub at: Instant,
    /// Why it ended.
    pub reason: ReleaseReason,
}

/// Why a lease ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReleaseReason {
    /// The pair implied by the newest closed interval differs from the one
    /// before it (membership changed), or none is implied.
    Disagreed,
    /// No renewal arrived before the deadline.
    Expired,
    /// The server clock went backwards or jumped by more than the gap.
    ServerClock,
    /// The worker was cancelled.
    Cancelled,
}

impl ReleaseReason {
    /// A short lowercase name, for logs and histories.
    pub fn as_str(self) -> &'static str {
        match self {
            ReleaseReason::Disagreed => "disagreed",
            ReleaseReason::Expired => "expired",
            ReleaseReason::ServerClock => "server-clock",
            ReleaseReason::Cancelled => "cancelled",
        }
    }
}
