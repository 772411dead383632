//! The lease in force: what a worker holds, until when, and with which
//! fencing token (DESIGN section 3, rules 6 and 7; section 4).

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::ownership::{Mapping, Slot};

/// The clock a [`Lease`] answers [`Lease::is_valid`] on: the clock of the
/// adapter that issued it (tokio's for lease-redis and lease-fred, so paused
/// or simulated time drives it; the one given to lease-smol), or
/// [`Instant::now`] when none was given.
///
/// ```
/// use std::time::{Duration, Instant};
/// use lease_core::Clock;
///
/// let t0 = Instant::now();
/// let frozen = Clock::new(move || t0 + Duration::from_secs(100));
/// assert_eq!(frozen.now(), t0 + Duration::from_secs(100));
/// ```
#[derive(Clone)]
pub struct Clock(Option<Arc<dyn Fn() -> Instant + Send + Sync>>);

impl Clock {
    /// A clock read through `now`.
    pub fn new(now: impl Fn() -> Instant + Send + Sync + 'static) -> Self {
        Self(Some(Arc::new(now)))
    }

    /// The operating system's monotonic clock, [`Instant::now`].
    pub fn system() -> Self {
        Self(None)
    }

    /// The current instant on this clock.
    pub fn now(&self) -> Instant {
        match &self.0 {
            Some(now) => now(),
            None => Instant::now(),
        }
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::system()
    }
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Clock(given)"
        } else {
            "Clock(system)"
        })
    }
}

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
    /// The issuing adapter's clock, for [`Lease::is_valid`].
    now: Clock,
    /// Local microseconds at which the lease ends.
    deadline: AtomicI64,
    /// The interval of the registration that last granted or renewed it.
    renewed: AtomicU64,
}

/// An exclusive lease on a pair `(i, n)`: while it is valid, no other worker
/// of the group holds `i`, and every holder uses the same `n`.
///
/// Cloning is cheap; clones share the deadline, which renewals extend and a
/// release ends. Check [`Lease::owns`] (or [`Lease::is_valid`]) before each
/// task.
#[derive(Clone, Debug)]
pub struct Lease {
    slot: Slot,
    token: u64,
    mapping: Mapping,
    cell: Arc<Cell>,
}

impl PartialEq for Lease {
    fn eq(&self, other: &Self) -> bool {
        self.slot == other.slot && self.token == other.token
    }
}

impl Eq for Lease {}

impl Lease {
    pub(crate) fn new(
        slot: Slot,
        token: u64,
        mapping: Mapping,
        clock: LocalClock,
        now: Clock,
        deadline: i64,
    ) -> Self {
        Self {
            slot,
            token,
            mapping,
            cell: Arc::new(Cell {
                clock,
                now,
                deadline: AtomicI64::new(deadline),
                renewed: AtomicU64::new(token),
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

    /// The interval number of the registration that last granted or renewed
    /// this lease (at least [`Lease::token`]). By rule 6 of docs/protocol.md
    /// the lease ends before the server clock reads the end of the interval
    /// after it, `(renewed_in() + 2)·L`; history checkers use it to check
    /// that bound.
    pub fn renewed_in(&self) -> u64 {
        self.cell.renewed.load(Ordering::Acquire)
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

    /// [`Lease::is_valid_at`] the current instant of the issuing adapter's
    /// [`Clock`] (tokio's clock for lease-redis and lease-fred, so it follows
    /// paused or simulated time). The state machine itself never calls it.
    pub fn is_valid(&self) -> bool {
        self.is_valid_at(self.cell.now.now())
    }

    /// The group's task mapping (one of its recorded rules).
    pub fn mapping(&self) -> Mapping {
        self.mapping
    }

    /// Whether this lease covers task `id` under the group's mapping, and is
    /// valid now: the check to make before each task.
    ///
    /// ```
    /// # use std::time::{Duration, Instant};
    /// # use lease_core::{Options, Token, Worker};
    /// # fn lease() -> Option<lease_core::Lease> { None }
    /// if let Some(lease) = lease() {
    ///     let mine: Vec<u64> = (0..100).filter(|&id| lease.owns(id)).collect();
    /// }
    /// ```
    pub fn owns(&self, id: u64) -> bool {
        self.covers(id) && self.is_valid()
    }

    /// Whether this lease covers the byte key `key` under the group's
    /// mapping, and is valid now.
    pub fn owns_key(&self, key: &[u8]) -> bool {
        self.mapping.owner_of_key(key, self.slot.n()) == self.slot.i() && self.is_valid()
    }

    /// Whether task `id` is in this lease's task set, whether or not the
    /// lease is still valid.
    pub fn covers(&self, id: u64) -> bool {
        self.mapping.owner(id, self.slot.n()) == self.slot.i()
    }

    pub(crate) fn deadline_micros(&self) -> i64 {
        self.cell.deadline.load(Ordering::Acquire)
    }

    /// Renewal: a registration executed in `interval` certified the same
    /// pair (or part) again, until `deadline`.
    pub(crate) fn renew(&self, deadline: i64, interval: u64) {
        self.cell.renewed.fetch_max(interval, Ordering::AcqRel);
        self.extend_to(deadline);
    }

    /// Moves the deadline forward (never backwards).
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
        let lease = Lease::new(
            Slot::new(1, 3).unwrap(),
            42,
            Mapping::Modulo,
            clock,
            Clock::system(),
            1_000,
        );
        let held = lease.clone();
        assert!(held.is_valid_at(t0 + Duration::from_micros(999)));
        assert!(!held.is_valid_at(t0 + Duration::from_micros(1_000)));
        assert_eq!(held.renewed_in(), 42);
        lease.renew(5_000, 44);
        assert_eq!(held.renewed_in(), 44);
        assert!(held.is_valid_at(t0 + Duration::from_micros(4_999)));
        lease.extend_to(2_000); // never moves backwards on renewal
        assert_eq!(held.deadline(), t0 + Duration::from_micros(5_000));
        lease.end_at(3_000);
        assert!(!held.is_valid_at(t0 + Duration::from_micros(3_000)));
        assert_eq!((held.i(), held.n(), held.token()), (1, 3, 42));
        assert!(!held.is_leader());
    }

    #[test]
    fn validity_is_read_on_the_issuing_clock() {
        let t0 = Instant::now();
        let late = Clock::new(move || t0 + Duration::from_secs(100));
        let lease = Lease::new(
            Slot::new(1, 3).unwrap(),
            42,
            Mapping::Modulo,
            LocalClock::new(t0),
            late,
            60_000_000,
        );
        // 100 virtual seconds after the start, a 60 s lease is over, whatever
        // the system clock says.
        assert!(!lease.is_valid());
        assert!(lease.is_valid_at(t0));
        assert!(!lease.owns(4));
        assert!(lease.covers(4) && !lease.covers(5));
    }
}
