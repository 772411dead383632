//! What a worker holds: the [`Lease`] the stream yields, made of parts
//! ([`PartLease`]), each with its own deadline and fencing token (rules 6,
//! 7, 13 and 14 of docs/protocol.md).

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::ownership::{Mapping, Pair};
use crate::part::{Part, TaskDelta};
use crate::pushdown::{self, Buckets, PushdownError};

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

/// Shared between the worker and every clone of a [`PartLease`] it handed
/// out, so the holder can ask "still valid now?" without a round trip to the
/// state machine. Renewal moves the deadline forward; release pulls it back.
#[derive(Debug)]
struct Cell {
    clock: LocalClock,
    /// The issuing adapter's clock, for [`PartLease::is_valid`].
    now: Clock,
    /// Local microseconds at which the part ends.
    deadline: AtomicI64,
    /// The interval of the registration that last granted or renewed it.
    renewed: AtomicU64,
}

/// One held part: a [`Part`] with its fencing token and its deadline. Clones
/// share the deadline, which renewals extend and a release ends.
#[derive(Clone, Debug)]
pub struct PartLease {
    part: Part,
    token: u64,
    mapping: Mapping,
    cell: Arc<Cell>,
}

impl PartialEq for PartLease {
    fn eq(&self, other: &Self) -> bool {
        self.part == other.part && self.token == other.token
    }
}

impl Eq for PartLease {}

impl PartLease {
    pub(crate) fn new(
        part: Part,
        token: u64,
        mapping: Mapping,
        clock: LocalClock,
        now: Clock,
        deadline: i64,
    ) -> Self {
        Self {
            part,
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

    /// The part held.
    pub fn part(&self) -> Part {
        self.part
    }

    /// Whether task `id` is in the part, valid or not.
    pub fn covers(&self, id: u64) -> bool {
        self.part.contains(self.mapping, id)
    }

    /// The buckets of `count` this part holds (see [`crate::pushdown`]):
    /// with its [`PartLease::token`], what a task source needs to claim and
    /// fence this part's tasks on its own.
    pub fn buckets(&self, count: u32) -> Result<Buckets, PushdownError> {
        pushdown::held(self.mapping, &[self.part], count)
    }

    /// The fencing token: the interval number of the registration that
    /// granted this part. Two different workers' parts that share a task
    /// have tokens at least 2 apart, ordered as they are held in time, so a
    /// store that keeps the newest token per task can reject a stale
    /// holder's writes.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The interval number of the registration that last granted or renewed
    /// this part (at least [`PartLease::token`]). By rule 6 of
    /// docs/protocol.md it ends before the server clock reads the end of the
    /// interval after that one, `(renewed_in() + 2)·L`; history checkers use
    /// it to check that bound.
    pub fn renewed_in(&self) -> u64 {
        self.cell.renewed.load(Ordering::Acquire)
    }

    /// The instant the part ends unless a renewal extends it first.
    pub fn deadline(&self) -> Instant {
        self.cell.clock.instant(self.deadline_micros())
    }

    /// Whether the part still holds at `now`: true only while no other
    /// worker can hold its tasks, even if the process stalled and no timer
    /// has fired.
    pub fn is_valid_at(&self, now: Instant) -> bool {
        self.cell.clock.micros(now) < self.deadline_micros()
    }

    /// [`PartLease::is_valid_at`] the current instant of the issuing
    /// adapter's [`Clock`].
    pub fn is_valid(&self) -> bool {
        self.is_valid_at(self.cell.now.now())
    }

    pub(crate) fn deadline_micros(&self) -> i64 {
        self.cell.deadline.load(Ordering::Acquire)
    }

    /// Renewal: a registration executed in `interval` certified the same
    /// part again, until `deadline`.
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

/// What a worker may work on: while a task is in the lease and the lease is
/// valid, no other worker of the group holds that task.
///
/// A lease is one or more parts ([`PartLease`]), each with its own fencing
/// token and deadline: one whole pair `(i, n)` when the group is settled
/// ([`Lease::pair`]), several during a handover under task sets. The
/// stream yields a new value only when the set of tasks changes; renewals
/// extend the parts' deadlines in every clone and yield nothing. Ask
/// [`Lease::owns`] before each task: it is false once the lease ran out,
/// even if the process stalled and no value arrived since.
///
/// Cloning is cheap.
#[derive(Clone, Debug)]
pub struct Lease(Arc<Value>);

#[derive(Debug)]
struct Value {
    parts: Vec<PartLease>,
    mapping: Mapping,
    granted: TaskDelta,
    released: TaskDelta,
    since: Instant,
}

impl PartialEq for Lease {
    fn eq(&self, other: &Self) -> bool {
        self.0.parts == other.0.parts
    }
}

impl Eq for Lease {}

impl Lease {
    /// A value holding `parts`, with the deltas against the previous value's
    /// parts.
    pub(crate) fn new(
        parts: Vec<PartLease>,
        previous: &[Part],
        mapping: Mapping,
        since: Instant,
    ) -> Self {
        let now: Vec<Part> = parts.iter().map(PartLease::part).collect();
        Self(Arc::new(Value {
            granted: TaskDelta::new(mapping, &now, previous),
            released: TaskDelta::new(mapping, previous, &now),
            parts,
            mapping,
            since,
        }))
    }

    /// Whether task `id` is held now: in a part that is still valid. The
    /// check to make before each task.
    ///
    /// ```
    /// # fn lease() -> Option<lease_core::Lease> { None }
    /// if let Some(lease) = lease() {
    ///     let mine: Vec<u64> = (0..100).filter(|&id| lease.owns(id)).collect();
    /// }
    /// ```
    pub fn owns(&self, id: u64) -> bool {
        self.0
            .parts
            .iter()
            .any(|p| p.part.contains(self.0.mapping, id) && p.is_valid())
    }

    /// Whether the byte key `key` is held now.
    pub fn owns_key(&self, key: &[u8]) -> bool {
        self.0
            .parts
            .iter()
            .any(|p| p.part.contains_key(self.0.mapping, key) && p.is_valid())
    }

    /// Whether task `id` is in one of the parts, valid or not.
    pub fn covers(&self, id: u64) -> bool {
        self.0
            .parts
            .iter()
            .any(|p| p.part.contains(self.0.mapping, id))
    }

    /// The buckets of `count` this value holds, for a task source to select
    /// the lease's tasks itself: `id % count` in [`Buckets::owned`], or the
    /// PostgreSQL condition of [`Buckets::postgres`]. See
    /// [`crate::pushdown`] for what a bucket set guarantees under each
    /// mapping, and what every worker of the group must then do (under
    /// task sets: decide ownership by bucket, with the same `count`).
    ///
    /// Like [`Lease::covers`] it is about this value's parts, valid or not:
    /// run the query while [`Lease::is_valid`], and stop using a row at the
    /// deadline of the part that holds it.
    ///
    /// ```
    /// # fn f(lease: lease_core::Lease) -> Result<(), lease_core::pushdown::PushdownError> {
    /// let mine = lease.buckets(1024)?;
    /// let cond = mine.postgres("jobs.id", 1)?;
    /// let query = format!("SELECT id FROM jobs WHERE {}", cond.sql());
    /// // client.query(&query, &[&cond.count(), &cond.buckets()])
    /// # let _ = query; Ok(()) }
    /// ```
    pub fn buckets(&self, count: u32) -> Result<Buckets, PushdownError> {
        let parts: Vec<Part> = self.0.parts.iter().map(PartLease::part).collect();
        pushdown::held(self.0.mapping, &parts, count)
    }

    /// The fencing token to write task `id` with, if it is held now: the
    /// token of the newest valid part that has it.
    pub fn token_for(&self, id: u64) -> Option<u64> {
        self.0
            .parts
            .iter()
            .filter(|p| p.part.contains(self.0.mapping, id) && p.is_valid())
            .map(PartLease::token)
            .max()
    }

    /// The newest token of any part: for a whole pair, its fencing token.
    pub fn token(&self) -> u64 {
        self.0.parts.iter().map(PartLease::token).max().unwrap_or(0)
    }

    /// `Some(pair)` when the lease is one whole pair `(i, n)`: every task
    /// `t` with `mapping().owner(t, n) == i`. Under [`Mapping::Modulo`]
    /// ([`crate::Handover::WholePairs`]) that is `t % n == i`, a predicate a
    /// task source can evaluate itself. `None` during a handover, when the
    /// lease holds parts of two group sizes.
    pub fn pair(&self) -> Option<Pair> {
        match self.0.parts.as_slice() {
            [only] => only.part.pair(),
            _ => None,
        }
    }

    /// Whether this lease is the group's leader: it holds all of slot 0's
    /// tasks under both pairs of a part, which at most one worker of the
    /// group can at any instant.
    pub fn is_leader(&self) -> bool {
        self.0.parts.iter().any(|p| {
            let [i, _, pi, _] = p.part.describe();
            i == 0 && pi == 0
        })
    }

    /// The parts held, oldest grant first.
    pub fn parts(&self) -> &[PartLease] {
        &self.0.parts
    }

    /// Each part as `(i, n, pi, pn, token)`, oldest grant first: the `held`
    /// field of a history's `own` line (docs/history-format.md). **Not a
    /// way to split tasks**: use [`Lease::owns`].
    pub fn history_parts(&self) -> Vec<(u32, u32, u32, u32, u64)> {
        self.0
            .parts
            .iter()
            .map(|l| {
                let [i, n, pi, pn] = l.part.describe();
                (i, n, pi, pn, l.token)
            })
            .collect()
    }

    /// The newest pair the worker was certified (the newer pair of its
    /// newest part), for logs and histories.
    pub fn newest_pair(&self) -> Option<Pair> {
        self.0
            .parts
            .iter()
            .max_by_key(|p| p.token)
            .map(|p| p.part.newer())
    }

    /// The group's task mapping.
    pub fn mapping(&self) -> Mapping {
        self.0.mapping
    }

    /// The latest deadline of any part: nothing is held after it unless a
    /// renewal extends it.
    pub fn deadline(&self) -> Instant {
        self.0
            .parts
            .iter()
            .map(PartLease::deadline)
            .max()
            .unwrap_or(self.0.since)
    }

    /// Whether any part is still valid at `now`.
    pub fn is_valid_at(&self, now: Instant) -> bool {
        self.0.parts.iter().any(|p| p.is_valid_at(now))
    }

    /// Whether any part is still valid now, on the issuing adapter's clock.
    pub fn is_valid(&self) -> bool {
        self.0.parts.iter().any(PartLease::is_valid)
    }

    /// The tasks held now that the previous value did not hold: start them.
    pub fn granted(&self) -> &TaskDelta {
        &self.0.granted
    }

    /// The tasks the previous value held that this one does not: they were
    /// handed over; stop them (nobody else starts them before the part that
    /// had them has passed its deadline).
    pub fn released(&self) -> &TaskDelta {
        &self.0.released
    }

    /// The instant this value began: the grant, or the instant a part
    /// really ended (its deadline, or its drain's end, even if the worker
    /// only noticed later).
    pub fn since(&self) -> Instant {
        self.0.since
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(i: u32, n: u32) -> Pair {
        Pair::new(i, n).unwrap()
    }

    #[test]
    fn clones_share_renewal_and_release() {
        let t0 = Instant::now();
        let clock = LocalClock::new(t0);
        let part = PartLease::new(
            Part::whole(pair(1, 3)),
            42,
            Mapping::Modulo,
            clock,
            Clock::system(),
            1_000,
        );
        let lease = Lease::new(vec![part.clone()], &[], Mapping::Modulo, t0);
        let held = lease.clone();
        assert!(held.is_valid_at(t0 + Duration::from_micros(999)));
        assert!(!held.is_valid_at(t0 + Duration::from_micros(1_000)));
        assert_eq!(part.renewed_in(), 42);
        part.renew(5_000, 44);
        assert_eq!(held.parts()[0].renewed_in(), 44);
        assert!(held.is_valid_at(t0 + Duration::from_micros(4_999)));
        part.extend_to(2_000); // never moves backwards on renewal
        assert_eq!(held.deadline(), t0 + Duration::from_micros(5_000));
        part.end_at(3_000);
        assert!(!held.is_valid_at(t0 + Duration::from_micros(3_000)));
        assert_eq!((held.pair(), held.token()), (Some(pair(1, 3)), 42));
        assert!(!held.is_leader());
        assert!(held.covers(4) && !held.covers(5));
    }

    #[test]
    fn validity_is_read_on_the_issuing_clock() {
        let t0 = Instant::now();
        let late = Clock::new(move || t0 + Duration::from_secs(100));
        let part = PartLease::new(
            Part::whole(pair(1, 3)),
            42,
            Mapping::Modulo,
            LocalClock::new(t0),
            late,
            60_000_000,
        );
        let lease = Lease::new(vec![part], &[], Mapping::Modulo, t0);
        // 100 virtual seconds after the start, a 60 s lease is over, whatever
        // the system clock says.
        assert!(!lease.is_valid());
        assert!(lease.is_valid_at(t0));
        assert!(!lease.owns(4));
        assert_eq!(lease.token_for(4), None);
    }

    #[test]
    fn a_handover_lease_has_no_pair_and_fences_per_part() {
        let t0 = Instant::now();
        let m = Mapping::Consistent;
        let clock = LocalClock::new(t0);
        let later = Clock::new(move || t0);
        let old = PartLease::new(
            Part::whole(pair(1, 3)),
            10,
            m,
            clock,
            later.clone(),
            1_000_000,
        );
        let new = PartLease::new(
            Part::new(pair(1, 4), pair(1, 3)),
            12,
            m,
            clock,
            later,
            1_000_000,
        );
        let lease = Lease::new(vec![old, new], &[], m, t0);
        assert_eq!(lease.pair(), None);
        let kept = (0..1000).find(|&id| m.owner(id, 4) == 1).unwrap();
        let moved = (0..1000)
            .find(|&id| m.owner(id, 3) == 1 && m.owner(id, 4) == 3)
            .unwrap();
        assert_eq!(lease.token_for(kept), Some(12));
        assert_eq!(lease.token_for(moved), Some(10));
        assert!(lease.owns(moved) && lease.owns(kept));
    }

    /// The deltas' buckets are the differences of the two values' bucket
    /// sets, under both mappings, so serving `old - released + granted`
    /// serves exactly the new value's buckets.
    #[test]
    fn delta_buckets_are_differences_of_the_values_bucket_sets() {
        let t0 = Instant::now();
        let clock = LocalClock::new(t0);
        let cases = [
            (
                Mapping::Consistent,
                vec![Part::whole(pair(1, 3))],
                vec![Part::whole(pair(1, 3)), Part::new(pair(1, 2), pair(2, 3))],
            ),
            (
                Mapping::Consistent,
                vec![Part::whole(pair(2, 3))],
                vec![Part::new(pair(2, 4), pair(2, 3))],
            ),
            (
                Mapping::Modulo,
                vec![Part::whole(pair(1, 4))],
                vec![Part::whole(pair(1, 2))],
            ),
        ];
        for (m, old, new) in cases {
            let lease_of = |parts: &[Part], previous: &[Part]| {
                let held = parts
                    .iter()
                    .map(|&p| PartLease::new(p, 5, m, clock, Clock::system(), 1_000))
                    .collect();
                Lease::new(held, previous, m, t0)
            };
            let before = lease_of(&old, &[]);
            let after = lease_of(&new, &old);
            for count in [64, 1024] {
                let (b0, b1) = (
                    before.buckets(count).unwrap(),
                    after.buckets(count).unwrap(),
                );
                assert_eq!(after.granted().buckets(count).unwrap(), b1.minus(&b0));
                assert_eq!(after.released().buckets(count).unwrap(), b0.minus(&b1));
                let mut served: Vec<u32> = b0
                    .minus(&after.released().buckets(count).unwrap())
                    .owned()
                    .iter()
                    .chain(after.granted().buckets(count).unwrap().owned())
                    .copied()
                    .collect();
                served.sort_unstable();
                assert_eq!(served, b1.owned(), "{m} {count}");
                for (i, p) in after.parts().iter().enumerate() {
                    let own = p.buckets(count).unwrap();
                    assert!(own.owned().iter().all(|b| b1.contains(*b)), "part {i}");
                }
            }
        }
    }
}
