//! What the state machine tells its driver (rule 11 of docs/protocol.md).

use std::fmt;
use std::time::Instant;

use crate::lease::Lease;
use crate::member::MemberInUse;
use crate::rules::Refusal;
use crate::server::UnsupportedServer;

/// An output of [`crate::Worker::poll_event`].
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// What the worker may work on changed: the next value of the stream.
    Assignment(Assignment),
    /// The worker was cancelled and has stood down; no more output follows.
    Stopped,
}

/// What a worker may work on now: the value of an adapter's stream.
///
/// The stream starts with [`Assignment::Idle`] (reason
/// [`IdleReason::Started`]), then yields a value each time the set of tasks
/// the worker may work on changes. A loop has two arms:
///
/// ```
/// # fn work(_: u64) {}
/// # fn f(assignment: lease_core::Assignment) {
/// use lease_core::Assignment;
/// match assignment {
///     // Check before each task: the lease may run out while a stalled
///     // process was not looking.
///     Assignment::Held(lease) => (0..100).filter(|&id| lease.owns(id)).for_each(work),
///     Assignment::Idle(idle) => eprintln!("idle: {}", idle.reason),
/// }
/// # }
/// ```
///
/// Releases are never coalesced away: when what is held ends, an idle value
/// says why and when. Under whole pairs there is always an idle value
/// between two different pairs; under task sets a value can follow another
/// directly, with what it [`Lease::granted`] and [`Lease::released`]. A
/// refused registration (the group's rules differ) yields an idle value too,
/// once, even if the worker held nothing.
#[derive(Clone, Debug, PartialEq)]
pub enum Assignment {
    /// Hold nothing.
    Idle(Idle),
    /// Hold this lease; check [`Lease::owns`] before each task.
    Held(Lease),
}

impl Assignment {
    /// The lease, if one is held.
    pub fn lease(&self) -> Option<&Lease> {
        match self {
            Assignment::Held(lease) => Some(lease),
            Assignment::Idle(_) => None,
        }
    }

    /// The lease, if one is held, by value.
    pub fn into_lease(self) -> Option<Lease> {
        match self {
            Assignment::Held(lease) => Some(lease),
            Assignment::Idle(_) => None,
        }
    }

    /// Whether task `id` is held now.
    pub fn owns(&self, id: u64) -> bool {
        self.lease().is_some_and(|l| l.owns(id))
    }

    /// Whether nothing is held.
    pub fn is_idle(&self) -> bool {
        matches!(self, Assignment::Idle(_))
    }
}

/// An idle value: nothing is held, why, and since when.
#[derive(Clone, Debug, PartialEq)]
pub struct Idle {
    /// Why nothing is held.
    pub reason: IdleReason,
    /// When that began: the instant the previous lease really ended (its
    /// deadline if it ran out, even if the worker only noticed later), or the
    /// instant the worker started or was refused.
    pub since: Instant,
    /// The lease that ended, if this idle value follows one (its parts and
    /// fencing tokens; it is no longer valid).
    pub ended: Option<Lease>,
}

impl Idle {
    /// Whether this idle value ends a holding.
    pub fn ends_holding(&self) -> bool {
        self.ended.is_some()
    }
}

/// Why a worker holds nothing: the stand-down reasons a user tells apart,
/// the way Kafka users tell a revoked partition from a lost one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum IdleReason {
    /// The worker has just started and holds nothing yet.
    Started,
    /// The group changed (a join, a departure, a missed registration): the
    /// newest closed interval implied another pair than the one before, or
    /// none, so the lease was handed over. Nobody else holds its tasks before
    /// its deadline. In `Ranked` mode the lease was kept and served until its
    /// deadline minus the drain budget (rule 14, [`crate::Ranked::drain_budget`]),
    /// and this value comes at that instant; `Arrival` releases at the reply.
    HandedOver,
    /// No renewal arrived before the deadline (Redis unreachable, too slow,
    /// or this process stalled).
    Expired,
    /// The worker was cancelled.
    Cancelled,
    /// The server clock went backwards or jumped by more than the gap: the
    /// worker stood down rather than trust it.
    ServerClock,
    /// The group's recorded rules differ from this worker's: its
    /// registrations are refused and write nothing until the record agrees or
    /// expires.
    Refused(Refusal),
    /// This worker's member name (rule 18) is held by another process (a
    /// misconfigured deploy, or a new pod started before the old one
    /// stopped): its registrations hold nothing until the other process has
    /// not registered for two intervals.
    MemberInUse(MemberInUse),
    /// The server is known to break the guarantee, or to refuse every
    /// registration (checked once from `INFO` when the worker starts,
    /// [`crate::check_server`]): the worker registers nothing and its
    /// stream ends after this value.
    UnsupportedServer(UnsupportedServer),
}

impl IdleReason {
    /// A short lowercase name, for logs, metrics and histories: `started`,
    /// `handed-over`, `expired`, `cancelled`, `server-clock`, `refused`, `member-in-use` or
    /// `unsupported-server`.
    pub fn as_str(&self) -> &'static str {
        match self {
            IdleReason::Started => "started",
            IdleReason::HandedOver => "handed-over",
            IdleReason::Expired => "expired",
            IdleReason::Cancelled => "cancelled",
            IdleReason::ServerClock => "server-clock",
            IdleReason::Refused(_) => "refused",
            IdleReason::MemberInUse(_) => "member-in-use",
            IdleReason::UnsupportedServer(_) => "unsupported-server",
        }
    }
}

impl fmt::Display for IdleReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdleReason::Refused(refusal) => write!(f, "refused: {refusal}"),
            IdleReason::MemberInUse(why) => write!(f, "member in use: {why}"),
            IdleReason::UnsupportedServer(why) => write!(f, "unsupported server: {why}"),
            other => f.write_str(other.as_str()),
        }
    }
}
