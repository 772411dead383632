//! What an incremental worker holds (DESIGN section 3, rule 13): a task set,
//! the union of parts `T(i, n) ∩ T(pi, pn)`, each held with its own fencing
//! token and deadline, and what was granted and released since the previous
//! value (DESIGN section 4, the deltas quorum's design calls
//! onAssigned/onReleased).
//!
//! None of these types offers a pair to split tasks by: during a handover
//! the worker holds tasks of two group sizes at once, and a loop that wrote
//! the original's `task.id % n == i` would overlap another worker. Ask
//! [`Tasks::owns`] (or [`Tasks::owns_key`]) before each task.

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use crate::lease::Lease;
use crate::ownership::{Mapping, Slot};

/// One part of a task set: the tasks `t` with `owner(t, n) = i` under the
/// newer pair and `owner(t, pn) = pi` under the older one (all of `T(i, n)`
/// when the two pairs are equal), under the group's mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Part {
    newer: Slot,
    older: Slot,
}

impl Part {
    pub(crate) fn new(newer: Slot, older: Slot) -> Self {
        Self { newer, older }
    }

    /// The newer pair (internal: never shown to users).
    pub(crate) fn newer(&self) -> Slot {
        self.newer
    }

    /// Whether task `id` is in this part under `mapping`.
    pub fn contains(&self, mapping: Mapping, id: u64) -> bool {
        self.newer.owns(mapping, id) && self.older.owns(mapping, id)
    }

    /// Whether the byte key `key` is in this part under `mapping`.
    pub fn contains_key(&self, mapping: Mapping, key: &[u8]) -> bool {
        mapping.owner_of_key(key, self.newer.n()) == self.newer.i()
            && mapping.owner_of_key(key, self.older.n()) == self.older.i()
    }

    /// Whether the part is all of one pair's tasks (the two pairs are equal).
    pub fn is_whole(&self) -> bool {
        self.newer == self.older
    }

    /// `[i, n, pi, pn]`: the part's description, for logs and histories
    /// (docs/history-format.md). **Not a way to split tasks**: use
    /// [`Part::contains`].
    pub fn describe(&self) -> [u32; 4] {
        [
            self.newer.i(),
            self.newer.n(),
            self.older.i(),
            self.older.n(),
        ]
    }

    /// Whether no task id at all can be in the part under `mapping`. Under
    /// the consistent mapping (jump hash) an id's owner only ever moves to
    /// the newest index as `n` grows, so `T(i, n) ∩ T(pi, pn)` with `n <=
    /// pn` is non-empty exactly when `i == pi`, or `pi >= n` (the id moved
    /// to `pi` after `n`); under modulo exactly when `i ≡ pi (mod gcd(n,
    /// pn))` (Chinese remainders).
    pub fn is_empty(&self, mapping: Mapping) -> bool {
        let (small, large) = if self.newer.n() <= self.older.n() {
            (self.newer, self.older)
        } else {
            (self.older, self.newer)
        };
        match mapping {
            Mapping::Consistent => !(small.i() == large.i() || large.i() >= small.n()),
            Mapping::Modulo => {
                let g = gcd(small.n(), large.n());
                small.i() % g != large.i() % g
            }
        }
    }
}

fn gcd(mut a: u32, mut b: u32) -> u32 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a.max(1)
}

impl fmt::Display for Part {
    /// `i/n` for a whole part, `i/n∩pi/pn` otherwise.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_whole() {
            write!(f, "{}", self.newer)
        } else {
            write!(f, "{}∩{}", self.newer, self.older)
        }
    }
}

/// One held part: a [`Part`] with its fencing token and deadline. Clones
/// share the deadline, which renewals extend and a release ends.
#[derive(Clone, Debug)]
pub struct TaskLease {
    part: Part,
    /// The deadline, token and clock; its pair is the part's newer one and
    /// is never shown.
    inner: Lease,
}

impl PartialEq for TaskLease {
    fn eq(&self, other: &Self) -> bool {
        self.part == other.part && self.inner.token() == other.inner.token()
    }
}

impl Eq for TaskLease {}

impl TaskLease {
    pub(crate) fn new(part: Part, inner: Lease) -> Self {
        Self { part, inner }
    }

    pub(crate) fn inner(&self) -> &Lease {
        &self.inner
    }

    /// The part held.
    pub fn part(&self) -> Part {
        self.part
    }

    /// The fencing token: the interval number of the registration that
    /// granted this part. Two different workers' parts that share a task
    /// have tokens at least 2 apart, ordered as they are held in time.
    pub fn token(&self) -> u64 {
        self.inner.token()
    }

    /// The interval number of the registration that last granted or renewed
    /// this part (at least [`TaskLease::token`]): it ends before the server
    /// clock reads `(renewed_in() + 2)·L` (rule 6 of docs/protocol.md).
    pub fn renewed_in(&self) -> u64 {
        self.inner.renewed_in()
    }

    /// The instant the part ends unless a renewal extends it first.
    pub fn deadline(&self) -> Instant {
        self.inner.deadline()
    }

    /// Whether the part still holds at `now`.
    pub fn is_valid_at(&self, now: Instant) -> bool {
        self.inner.is_valid_at(now)
    }

    /// Whether the part still holds now, on the issuing adapter's clock.
    pub fn is_valid(&self) -> bool {
        self.inner.is_valid()
    }

    /// Whether task `id` is in the part, valid or not.
    pub fn covers(&self, id: u64) -> bool {
        self.part.contains(self.inner.mapping(), id)
    }
}

/// A set of tasks that changed between two values: the tasks in the union
/// of `added`'s parts and in none of `minus`'s. Membership is exact; the
/// set is listed only over a universe the caller supplies
/// ([`TaskDelta::select`]), since task ids are any `u64`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct TaskDelta {
    mapping: Mapping,
    added: Vec<Part>,
    minus: Vec<Part>,
}

impl TaskDelta {
    pub(crate) fn new(mapping: Mapping, added: &[Part], minus: &[Part]) -> Self {
        let added: Vec<Part> = added
            .iter()
            .filter(|p| !minus.contains(p))
            .copied()
            .collect();
        let minus = if added.is_empty() {
            Vec::new()
        } else {
            minus.to_vec()
        };
        Self {
            mapping,
            added,
            minus,
        }
    }

    /// Whether task `id` is in the delta.
    pub fn contains(&self, id: u64) -> bool {
        self.added.iter().any(|p| p.contains(self.mapping, id))
            && !self.minus.iter().any(|p| p.contains(self.mapping, id))
    }

    /// Whether the byte key `key` is in the delta.
    pub fn contains_key(&self, key: &[u8]) -> bool {
        self.added.iter().any(|p| p.contains_key(self.mapping, key))
            && !self.minus.iter().any(|p| p.contains_key(self.mapping, key))
    }

    /// Whether the delta certainly has no task (it may also be empty over
    /// the caller's universe when this is false).
    pub fn is_empty(&self) -> bool {
        self.added.iter().all(|p| p.is_empty(self.mapping))
    }

    /// The ids of `universe` in the delta, in its order.
    pub fn select<I: IntoIterator<Item = u64>>(&self, universe: I) -> impl Iterator<Item = u64> {
        let this = self.clone();
        universe.into_iter().filter(move |&id| this.contains(id))
    }
}

/// What an incremental worker holds (rule 13): the union of its parts, each
/// held until its own deadline.
///
/// A value comes each time the set of parts changes (a part granted, or a
/// part ended: drained, expired or released), with the tasks granted and
/// released since the previous value; a renewal extends a part's deadline
/// in every clone and yields nothing. Check [`Tasks::owns`] before each task.
#[derive(Clone, Debug, PartialEq)]
pub struct Tasks(Arc<Inner>);

/// A [`Tasks`] value's contents, shared by its clones.
#[derive(Debug, PartialEq)]
struct Inner {
    leases: Vec<TaskLease>,
    granted: TaskDelta,
    released: TaskDelta,
    since: Instant,
}

impl Tasks {
    pub(crate) fn new(
        leases: Vec<TaskLease>,
        previous: &[Part],
        mapping: Mapping,
        since: Instant,
    ) -> Self {
        let parts: Vec<Part> = leases.iter().map(TaskLease::part).collect();
        Self(Arc::new(Inner {
            granted: TaskDelta::new(mapping, &parts, previous),
            released: TaskDelta::new(mapping, previous, &parts),
            leases,
            since,
        }))
    }

    /// The parts held, oldest grant first.
    pub fn leases(&self) -> &[TaskLease] {
        &self.0.leases
    }

    /// The group's task mapping.
    pub fn mapping(&self) -> Mapping {
        self.0
            .leases
            .first()
            .map_or(Mapping::Consistent, |l| l.inner.mapping())
    }

    /// The newest part (the largest token): its newer pair is the newest
    /// pair the worker was certified, which histories name.
    pub fn newest(&self) -> Option<&TaskLease> {
        self.0.leases.iter().max_by_key(|l| l.token())
    }

    /// Each part as `(i, n, pi, pn, token)`, oldest grant first: the `held`
    /// field of a history's `own` line (docs/history-format.md). **Not a way to
    /// split tasks**: use [`Tasks::owns`].
    pub fn history_parts(&self) -> Vec<(u32, u32, u32, u32, u64)> {
        self.0
            .leases
            .iter()
            .map(|l| {
                let [i, n, pi, pn] = l.part.describe();
                (i, n, pi, pn, l.token())
            })
            .collect()
    }

    /// Whether task `id` is held now: in a part that is still valid.
    pub fn owns(&self, id: u64) -> bool {
        self.0.leases.iter().any(|l| l.covers(id) && l.is_valid())
    }

    /// Whether the byte key `key` is held now.
    pub fn owns_key(&self, key: &[u8]) -> bool {
        self.0
            .leases
            .iter()
            .any(|l| l.part.contains_key(l.inner.mapping(), key) && l.is_valid())
    }

    /// Whether task `id` is in one of the parts, valid or not.
    pub fn covers(&self, id: u64) -> bool {
        self.0.leases.iter().any(|l| l.covers(id))
    }

    /// The fencing token to write task `id` with, if it is held now: the
    /// largest token of a valid part that has it.
    pub fn token_for(&self, id: u64) -> Option<u64> {
        self.0
            .leases
            .iter()
            .filter(|l| l.covers(id) && l.is_valid())
            .map(TaskLease::token)
            .max()
    }

    /// The newest token of any part.
    pub fn token(&self) -> u64 {
        self.newest().map_or(0, TaskLease::token)
    }

    /// The latest deadline of any part: nothing is held after it unless a
    /// renewal extends it.
    pub fn deadline(&self) -> Option<Instant> {
        self.0.leases.iter().map(TaskLease::deadline).max()
    }

    /// Whether any part is still valid now.
    pub fn is_valid(&self) -> bool {
        self.0.leases.iter().any(TaskLease::is_valid)
    }

    /// The tasks held now that the previous value did not hold: start them.
    pub fn granted(&self) -> &TaskDelta {
        &self.0.granted
    }

    /// The tasks the previous value held that this one does not: they were
    /// handed over; stop them (another worker may start them once the part
    /// that had them has passed its deadline).
    pub fn released(&self) -> &TaskDelta {
        &self.0.released
    }

    /// The instant this holding began: the grant, or the instant a part
    /// really ended (its deadline, or its drain's end, even if the worker
    /// only noticed later).
    pub fn since(&self) -> Instant {
        self.0.since
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(i: u32, n: u32, pi: u32, pn: u32) -> Part {
        Part::new(Slot::new(i, n).unwrap(), Slot::new(pi, pn).unwrap())
    }

    /// The structural emptiness test agrees with the ids 0..20_000 for
    /// every pair of pairs up to n = 7, under both mappings.
    #[test]
    fn emptiness_is_exact_on_a_large_universe() {
        for mapping in [Mapping::Consistent, Mapping::Modulo] {
            for n in 1..=7 {
                for pn in 1..=7 {
                    for i in 0..n {
                        for pi in 0..pn {
                            let p = part(i, n, pi, pn);
                            let any = (0..20_000u64).any(|id| p.contains(mapping, id));
                            assert_eq!(p.is_empty(mapping), !any, "{mapping} {p}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn deltas_are_set_differences() {
        let m = Mapping::Consistent;
        let old = [part(1, 3, 1, 3)];
        let new = [part(1, 4, 1, 3)];
        let granted = TaskDelta::new(m, &new, &old);
        let released = TaskDelta::new(m, &old, &new);
        // T(1,4) ⊆ T(1,3) under jump: nothing granted, T(1,3) \ T(1,4) released.
        assert!(granted.select(0..1000).next().is_none());
        let gone: Vec<u64> = released.select(0..1000).collect();
        assert!(!gone.is_empty());
        assert!(
            gone.iter()
                .all(|&id| m.owner(id, 4) == 3 && m.owner(id, 3) == 1)
        );
        assert_eq!(part(2, 3, 2, 3).to_string(), "2/3");
        assert_eq!(part(1, 4, 1, 3).describe(), [1, 4, 1, 3]);
    }
}
