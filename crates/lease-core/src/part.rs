//! The pieces a lease is made of (rule 13 of docs/protocol.md): a [`Part`]
//! is `T(i, n) ∩ T(pi, pn)`, the tasks of one pair under the newer group
//! size and of another under the older one, and a [`TaskDelta`] is what
//! changed between two values of the stream.
//!
//! A whole pair is the part of two equal pairs. During a handover a worker
//! holds tasks of two group sizes at once, so a part is never a way to
//! split tasks by `task.id % n == i`; ask [`crate::Lease::owns`].

use std::fmt;

use crate::ownership::{Mapping, Pair};
use crate::pushdown::{self, Buckets, PushdownError};

/// One part of a task set: the tasks `t` with `owner(t, n) = i` under the
/// newer pair and `owner(t, pn) = pi` under the older one (all of `T(i, n)`
/// when the two pairs are equal), under the group's mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Part {
    newer: Pair,
    older: Pair,
}

impl Part {
    pub(crate) fn new(newer: Pair, older: Pair) -> Self {
        Self { newer, older }
    }

    /// All of one pair's tasks.
    pub(crate) fn whole(pair: Pair) -> Self {
        Self::new(pair, pair)
    }

    /// The newer pair.
    pub(crate) fn newer(&self) -> Pair {
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

    /// The pair, when the part is all of one pair's tasks.
    pub fn pair(&self) -> Option<Pair> {
        (self.newer == self.older).then_some(self.newer)
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

    /// The pairs ordered by group size: (smaller, larger).
    fn by_size(&self) -> (Pair, Pair) {
        if self.newer.n() <= self.older.n() {
            (self.newer, self.older)
        } else {
            (self.older, self.newer)
        }
    }

    /// Whether no task id at all can be in the part under `mapping`. Under
    /// the consistent mapping (jump hash) an id's owner only ever moves to
    /// the newest index as `n` grows, so `T(i, n) ∩ T(pi, pn)` with `n <=
    /// pn` is non-empty exactly when `i == pi`, or `pi >= n` (the id moved
    /// to `pi` after `n`); under modulo exactly when `i ≡ pi (mod gcd(n,
    /// pn))` (Chinese remainders).
    pub fn is_empty(&self, mapping: Mapping) -> bool {
        let (small, large) = self.by_size();
        match mapping {
            Mapping::Consistent => !(small.i() == large.i() || large.i() >= small.n()),
            Mapping::Modulo => {
                let g = gcd(small.n(), large.n());
                small.i() % g != large.i() % g
            }
        }
    }

    /// The same tasks, described canonically: under jump hash `T(i, n) ∩
    /// T(i, m)` with `i < m <= n` is all of `T(i, n)` (an id owned by
    /// `i < m` at `n` never moved after `m`, so it was owned by `i` at `m`
    /// too), so such a part becomes the whole pair `(i, n)`. Two parts with
    /// one canonical form hold the same tasks, so a grant of one renews the
    /// other.
    pub(crate) fn canonical(&self, mapping: Mapping) -> Self {
        let (small, large) = self.by_size();
        match mapping {
            // The pair (0, 1) holds every task: the part is the other pair.
            _ if small.n() == 1 => Self::whole(large),
            Mapping::Consistent if small.i() == large.i() && large.i() < small.n() => {
                Self::whole(large)
            }
            _ => *self,
        }
    }

    /// Whether every task of `self` is in `other` (both canonical), decided
    /// from the mapping's structure: a sufficient test (it may miss a
    /// containment that only a union of parts shows), used to tell whether a
    /// change of parts changes the task set.
    pub(crate) fn within(&self, other: &Part, mapping: Mapping) -> bool {
        // Everything is within the pair (0, 1), which holds every task.
        if self == other || other.pair().is_some_and(|p| p.n() == 1) {
            return true;
        }
        // A part is inside each of its two pairs' sets; a whole pair (i, n)
        // is inside the whole pair (i, m) for i < m <= n under jump hash.
        let whole_within = |inner: Pair, outer: Pair| {
            inner == outer
                || (mapping == Mapping::Consistent
                    && inner.i() == outer.i()
                    && inner.i() < outer.n()
                    && outer.n() <= inner.n())
        };
        match other.pair() {
            Some(outer) => whole_within(self.newer, outer) || whole_within(self.older, outer),
            None => false,
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
        match self.pair() {
            Some(pair) => write!(f, "{pair}"),
            None => write!(f, "{}∩{}", self.newer, self.older),
        }
    }
}

/// The parts of `parts` that no other part of it contains (by
/// [`Part::within`], after [`Part::canonical`]), sorted: two holdings with
/// the same maximal parts hold the same tasks.
pub(crate) fn maximal(parts: impl IntoIterator<Item = Part>, mapping: Mapping) -> Vec<Part> {
    let mut all: Vec<Part> = parts.into_iter().map(|p| p.canonical(mapping)).collect();
    all.sort_unstable();
    all.dedup();
    let keep: Vec<Part> = all
        .iter()
        .filter(|p| {
            !all.iter()
                .any(|q| q != *p && p.within(q, mapping) && !q.within(p, mapping))
        })
        .copied()
        .collect();
    keep
}

/// Whether the parts `T(newer) ∩ T(q, m)`, `q` in `older`, make all of
/// `T(newer)` under `mapping`: under jump hash exactly when `older` has
/// every position of size `m` whose tasks meet `T(newer)` ([`Part::is_empty`]:
/// `i` itself and those at or beyond `n` when the group shrank, all of them
/// when `i` is at or beyond `m`). Rule 19: a worker's own part and its
/// inherited ones are then granted as the whole pair. Under modulo never
/// (the union of such parts is a whole pair only in cases rule 19 does not
/// produce).
pub(crate) fn covers_whole(
    newer: Pair,
    m: u32,
    older: impl Fn(u32) -> bool,
    mapping: Mapping,
) -> bool {
    let (i, n) = (newer.i(), newer.n());
    match mapping {
        Mapping::Modulo => false,
        Mapping::Consistent if i >= m => (0..m).all(older),
        Mapping::Consistent if n < m => older(i) && (n..m).all(older),
        // n >= m > i: T(i, n) is inside T(i, m) alone.
        Mapping::Consistent => older(i),
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
    /// The two values' parts as given, for [`TaskDelta::buckets`]: the
    /// filtering above keeps the delta's ids but not which buckets each
    /// value holds whole.
    of: Vec<Part>,
    from: Vec<Part>,
}

impl TaskDelta {
    pub(crate) fn new(mapping: Mapping, added: &[Part], minus: &[Part]) -> Self {
        let (of, from) = (added.to_vec(), minus.to_vec());
        let added: Vec<Part> = added
            .iter()
            .filter(|p| !minus.iter().any(|m| p.within(m, mapping)))
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
            of,
            from,
        }
    }

    /// The change as buckets of `count` (see [`crate::pushdown`]): the
    /// buckets the one value holds and the other does not, so that a worker
    /// that serves [`crate::Lease::buckets`] goes from one value's set to
    /// the next by adding the granted buckets and dropping the released
    /// ones.
    ///
    /// ```
    /// # fn f(lease: lease_core::Lease) -> Result<(), lease_core::pushdown::PushdownError> {
    /// let start = lease.granted().buckets(1024)?; // claim these
    /// let stop = lease.released().buckets(1024)?; // and let these go
    /// # Ok(()) }
    /// ```
    pub fn buckets(&self, count: u32) -> Result<Buckets, PushdownError> {
        let of = pushdown::held(self.mapping, &self.of, count)?;
        let from = pushdown::held(self.mapping, &self.from, count)?;
        Ok(of.minus(&from))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn part(i: u32, n: u32, pi: u32, pn: u32) -> Part {
        Part::new(Pair::new(i, n).unwrap(), Pair::new(pi, pn).unwrap())
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

    /// A canonical form holds exactly the part's tasks, and `within` never
    /// claims a containment the ids contradict: every pair of parts up to
    /// n = 6, over ids 0..20_000.
    #[test]
    fn canonical_forms_and_containment_agree_with_the_ids() {
        let m = Mapping::Consistent;
        let mut parts = Vec::new();
        for n in 1..=6 {
            for pn in 1..=6 {
                for i in 0..n {
                    for pi in 0..pn {
                        let p = part(i, n, pi, pn);
                        if !p.is_empty(m) {
                            parts.push(p);
                        }
                    }
                }
            }
        }
        let ids =
            |p: &Part| -> Vec<u64> { (0..20_000u64).filter(|&id| p.contains(m, id)).collect() };
        for p in &parts {
            assert_eq!(ids(&p.canonical(m)), ids(p), "{p}");
        }
        for p in &parts {
            let (cp, pi) = (p.canonical(m), ids(p));
            for q in &parts {
                let cq = q.canonical(m);
                if cp.within(&cq, m) {
                    let qi = ids(q);
                    assert!(
                        pi.iter().all(|id| qi.binary_search(id).is_ok()),
                        "{p} within {q}"
                    );
                }
            }
        }
        // The join's case: T(1,4) is inside T(1,3), so {T(1,3), T(1,4)}
        // holds the tasks of T(1,3) alone.
        assert_eq!(
            maximal([part(1, 3, 1, 3), part(1, 4, 1, 3)], m),
            vec![part(1, 3, 1, 3)]
        );
        assert_eq!(
            maximal([part(1, 4, 1, 3)], m),
            maximal([part(1, 4, 1, 4)], m)
        );
        // A group of one growing: T(0,1) holds every task, so its part with
        // (3, 5) is the whole pair (3, 5), and (3, 5) is within (0, 1).
        for mapping in [Mapping::Consistent, Mapping::Modulo] {
            assert_eq!(
                part(3, 5, 0, 1).canonical(mapping),
                part(3, 5, 3, 5),
                "{mapping:?}"
            );
            assert_eq!(
                maximal([part(0, 1, 0, 1), part(3, 5, 0, 1)], mapping),
                vec![part(0, 1, 0, 1)],
                "{mapping:?}"
            );
        }
    }

    /// Rule 19: a worker's own part and its inherited parts of one pair
    /// make the whole pair exactly when they cover every older position
    /// that meets it (checked against the ids).
    #[test]
    fn parts_of_one_pair_over_every_meeting_position_cover_the_whole_pair() {
        let m = Mapping::Consistent;
        let pair = |i, n| Pair::new(i, n).unwrap();
        for (n, pn) in [(3, 5), (4, 5), (5, 4), (2, 6), (4, 4), (6, 2)] {
            for i in 0..n {
                let meets: Vec<u32> = (0..pn)
                    .filter(|&q| !part(i, n, q, pn).is_empty(m))
                    .collect();
                assert!(covers_whole(pair(i, n), pn, |q| meets.contains(&q), m));
                let union = |id: u64| meets.iter().any(|&q| part(i, n, q, pn).contains(m, id));
                assert!((0..20_000).all(|id| union(id) == (m.owner(id, n) == i)));
                // Leaving any one out: not the whole pair, and some id shows it.
                for &gone in &meets {
                    let rest = |q: u32| q != gone && meets.contains(&q);
                    assert!(
                        !covers_whole(pair(i, n), pn, rest, m),
                        "{i}/{n} without {gone}/{pn}"
                    );
                    let missing =
                        (0..20_000).any(|id| m.owner(id, n) == i && m.owner(id, pn) == gone);
                    assert!(missing);
                }
            }
        }
        assert!(!covers_whole(pair(1, 4), 5, |_| true, Mapping::Modulo));
    }

    #[test]
    fn deltas_are_set_differences() {
        let m = Mapping::Consistent;
        let old = [part(1, 3, 1, 3)];
        let new = [part(1, 4, 1, 3)];
        let granted = TaskDelta::new(m, &new, &old);
        let released = TaskDelta::new(m, &old, &new);
        // T(1,4) ⊆ T(1,3) under jump: nothing granted, T(1,3) \ T(1,4) released.
        assert!(granted.is_empty());
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
