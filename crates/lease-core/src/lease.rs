//! The lease in force: what a worker holds, until when, and with which
//! fencing token (DESIGN section 3, rules 6 and 7; section 4).

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use crate::ownership::Slot;

/// The local clock of one worker: microseconds since the instant the worker
/// was created. Everything inside the state machine is in these units, so
/// arithmetic is plain integers; [`Instant`]s exist only at the interface.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LocalClock {
    origin: Instant,
}

impl LocalClock {
    pub(crate) fn new(origin: Instant) -> Self {
        Self { origin }
    }

    /// `now` in microseconds since the origin (instants before it count as
    /// 0; beyond about 73,000 years it saturates, so that adding intervals to
    /// it never overflows).
    pub(crate) fn micros(&self, now: Instant) -> i64 {
        const MAX: i64 = i64::MAX / 4;
        i64::try_from(now.saturating_duration_since(self.origin).as_micros())
            .unwrap_or(MAX)
            .min(MAX)
    }

    /// The instant `us` microseconds after the origin.
    pub(crate) fn instant(&self, us: i64) -> Instant {
        self.origin + Duration::from_micros(u64::try_from(us).unwrap_or(0))
    }
}

/// Shared between the worker and every clone of a [`Lease`] it handed out,
/// so the holder can ask "still valid now?" without a round trip to the
/// state machine. Renewal moves the deadline forward; release pulls it back.
#[derive(Debug)]
struct Cell {
    clock: LocalClock,
    /// Local microseconds at which the lease ends.
    deadline: AtomicI64,
}

/// An exclusive lease on a pair `(i, n)`: while it is valid, no other worker
/// of the group holds `i`, and every holder uses the same `n`.
///
/// Cloning is cheap; clones share the deadline, which renewals extend and a
/// release ends. Check [`Lease::is_valid_at`] before each task.
#[derive(Clone, Debug)]
pub struct Lease {
    slot: Slot,
    token: u64,
    cell: Arc<Cell>,
}

impl PartialEq for Lease {
    fn eq(&self, other: &Self) -> bool {
        self.slot == other.slot && self.token == other.token
    }
}

impl Eq for Lease {}

impl Lease {
    pub(crate) fn new(slot: Slot, token: u64, clock: LocalClock, deadline: i64) -> Self {
        Self {
            slot,
            token,
            cell: Arc::new(Cell {
                clock,
                deadline: AtomicI64::new(deadline),
            }),
        }
    }

    /// This worker's index `i`.
    pub fn i(&self) -> u32 {
        self.slot.i()
    }

    /// The group size `n`.
    pub fn n(&self) -> u32 {
        self.slot.n()
    }

    /// The pair `(i, n)`.
    pub fn slot(&self) -> Slot {
        self.slot
    }

    /// The fencing token: the interval number of the registration that
    /// granted this lease. Two different workers' leases that cover a common
    /// task have tokens at least 2 apart, ordered as the leases are in time,
    /// so a store that keeps the newest token per task can reject a stale
    /// holder's writes.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// Slot 0 is an exclusive leader: at most one worker of the group holds
    /// it at any instant.
    pub fn is_leader(&self) -> bool {
        self.slot.is_leader()
    }

    /// The instant the lease ends unless a renewal extends it first.
    pub fn deadline(&self) -> Instant {
        self.cell
            .clock
            .instant(self.cell.deadline.load(Ordering::Acquire))
    }

    /// Whether the lease still holds at `now`. This is the check to make
    /// before each task: it is true only while the worker is guaranteed
    /// exclusive, even if the process stalled and no timer has fired.
    pub fn is_valid_at(&self, now: Instant) -> bool {
        self.cell.clock.micros(now) < self.cell.deadline.load(Ordering::Acquire)
    }

    /// [`Lease::is_valid_at`] the current instant. The one convenience in
    /// this crate that reads a clock (`Instant::now`), for holders that check
    /// before each task; the state machine itself never calls it.
    pub fn is_valid(&self) -> bool {
        self.is_valid_at(Instant::now())
    }

    pub(crate) fn deadline_micros(&self) -> i64 {
        self.cell.deadline.load(Ordering::Acquire)
    }

    /// Renewal: a later registration certified the same pair again.
    pub(crate) fn extend_to(&self, deadline: i64) {
        self.cell.deadline.fetch_max(deadline, Ordering::AcqRel);
    }

    /// Release at local time `at`: never later than the current deadline.
    pub(crate) fn end_at(&self, at: i64) {
        self.cell.deadline.fetch_min(at, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_renewal_and_release() {
        let t0 = Instant::now();
        let clock = LocalClock::new(t0);
        let lease = Lease::new(Slot::new(1, 3).unwrap(), 42, clock, 1_000);
        let held = lease.clone();
        assert!(held.is_valid_at(t0 + Duration::from_micros(999)));
        assert!(!held.is_valid_at(t0 + Duration::from_micros(1_000)));
        lease.extend_to(5_000);
        assert!(held.is_valid_at(t0 + Duration::from_micros(4_999)));
        lease.extend_to(2_000); // never moves backwards on renewal
        assert_eq!(held.deadline(), t0 + Duration::from_micros(5_000));
        lease.end_at(3_000);
        assert!(!held.is_valid_at(t0 + Duration::from_micros(3_000)));
        assert_eq!((held.i(), held.n(), held.token()), (1, 3, 42));
        assert!(!held.is_leader());
    }
}
