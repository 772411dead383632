//! The sweep: exclusivity and coverage in one pass over the sorted
//! boundaries of the holdings.
//!
//! At every instant all held pairs must have the same `n` and distinct `i`;
//! the group is *covered* while, for some `n`, every slot `0..n` is held by
//! exactly one holding and nothing else is held.

use std::collections::{BTreeSet, HashMap};
use std::fmt;

use super::holdings::Holding;
use super::{Capped, MAX_REPORTED};

/// What kind of exclusivity violation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ViolationKind {
    /// Two workers held the same pair at once.
    SameSlot,
    /// Two workers held pairs with different `n` at once.
    MixedN,
    /// A worker received a pair while it still held another (no release in
    /// between).
    OwnWithoutRelease,
}

impl ViolationKind {
    /// A short name.
    pub fn as_str(self) -> &'static str {
        match self {
            ViolationKind::SameSlot => "same-slot",
            ViolationKind::MixedN => "mixed-n",
            ViolationKind::OwnWithoutRelease => "own-without-release",
        }
    }
}

/// Two holdings that must not have overlapped.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Violation {
    /// What was violated.
    pub kind: ViolationKind,
    /// The holding that started first (for `OwnWithoutRelease`, the one
    /// still held).
    pub first: Holding,
    /// The holding that started second.
    pub second: Holding,
    /// Where the overlap starts (the second holding's start).
    pub start_us: u64,
    /// How long they overlap; 0 for `OwnWithoutRelease`, whose first holding
    /// is cut at the second's start.
    pub overlap_us: u64,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} at {} us for {} us: {} vs {}",
            self.kind.as_str(),
            self.start_us,
            self.overlap_us,
            self.first,
            self.second
        )
    }
}

/// Coverage of a window `[from_us, to_us)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Coverage {
    /// Start of the window.
    pub from_us: u64,
    /// End of the window (exclusive).
    pub to_us: u64,
    /// Time during which some `n` was completely partitioned: every slot
    /// `0..n` held by exactly one worker, nothing else held.
    pub covered_us: u64,
    /// The rest of the window: the group's stand-down time.
    pub uncovered_us: u64,
}

impl Coverage {
    /// `covered_us` as a share of the window; 1.0 for an empty window.
    pub fn fraction(&self) -> f64 {
        let len = self.to_us.saturating_sub(self.from_us);
        if len == 0 {
            1.0
        } else {
            self.covered_us as f64 / len as f64
        }
    }
}

/// What the sweep found.
#[derive(Clone, Debug, Default)]
pub(crate) struct Sweep {
    pub(crate) violations: Capped<Violation>,
    /// Disjoint, sorted, merged spans of full coverage.
    pub(crate) covered: Vec<(u64, u64)>,
    /// `covered_before[k]` = total length of `covered[..k]`.
    pub(crate) covered_before: Vec<u64>,
}

/// Exclusivity and coverage: one sweep over the sorted boundaries of the
/// holdings of positive length (ends before starts at the same instant, so
/// half-open intervals that touch do not overlap). The violations found are
/// added to `violations`.
pub(crate) fn sweep(holdings: &[Holding], violations: Capped<Violation>) -> Sweep {
    let mut out = Sweep {
        violations,
        ..Sweep::default()
    };
    let mut bounds: Vec<(u64, bool, usize)> = Vec::with_capacity(2 * holdings.len());
    // Task sets are checked per task (`tasks`), not as whole pairs.
    for (k, h) in holdings.iter().enumerate() {
        if h.end_us > h.start_us && !h.is_task_set() {
            bounds.push((h.start_us, true, k));
            bounds.push((h.end_us, false, k));
        }
    }
    bounds.sort_unstable();

    let mut live = Live::default();
    let mut covered_since: Option<u64> = None;
    let mut k = 0;
    while k < bounds.len() {
        let t = bounds[k].0;
        while k < bounds.len() && bounds[k].0 == t {
            let (_, is_start, idx) = bounds[k];
            k += 1;
            if is_start {
                live.conflicts(holdings, idx, &mut out.violations);
                live.start(&holdings[idx], idx);
            } else {
                live.end(&holdings[idx], idx);
            }
        }
        match (live.full(), covered_since) {
            (true, None) => covered_since = Some(t),
            (false, Some(since)) => {
                out.push_covered(since, t);
                covered_since = None;
            }
            _ => {}
        }
    }
    // Every holding has ended by the last boundary, so nothing is still
    // covered here.
    debug_assert!(covered_since.is_none());
    let mut total = 0;
    out.covered_before = out
        .covered
        .iter()
        .map(|&(a, b)| {
            let before = total;
            total += b - a;
            before
        })
        .collect();
    out.covered_before.push(total);
    out
}

/// The holdings alive at one instant of the sweep.
#[derive(Default)]
struct Live {
    /// Active holdings as (n, i, index), for listing conflicts in order.
    active: BTreeSet<(u32, u32, usize)>,
    per_n: HashMap<u32, u64>,
    per_slot: HashMap<(u32, u32), u64>,
    /// Per n: how many slots i < n are held by exactly one holding.
    exactly_one: HashMap<u32, u64>,
}

impl Live {
    fn start(&mut self, h: &Holding, idx: usize) {
        let (i, n) = (h.i, h.n);
        self.active.insert((n, i, idx));
        *self.per_n.entry(n).or_default() += 1;
        let count = self.per_slot.entry((n, i)).or_default();
        *count += 1;
        if i < n {
            let one = self.exactly_one.entry(n).or_default();
            match *count {
                1 => *one += 1,
                2 => *one -= 1,
                _ => {}
            }
        }
    }

    fn end(&mut self, h: &Holding, idx: usize) {
        let (i, n) = (h.i, h.n);
        self.active.remove(&(n, i, idx));
        *self.per_n.entry(n).or_default() -= 1;
        let count = self.per_slot.entry((n, i)).or_default();
        *count -= 1;
        if i < n {
            let one = self.exactly_one.entry(n).or_default();
            match *count {
                0 => *one -= 1,
                1 => *one += 1,
                _ => {}
            }
        }
    }

    /// Whether some `n` is completely partitioned and nothing else is held.
    fn full(&self) -> bool {
        let total = self.active.len() as u64;
        total > 0
            && u32::try_from(total)
                .ok()
                .and_then(|n| self.exactly_one.get(&n))
                .is_some_and(|&one| one == total)
    }

    /// Counts, and lists up to the cap, the active holdings that conflict
    /// with holding `idx`, which starts now.
    fn conflicts(&self, holdings: &[Holding], idx: usize, violations: &mut Capped<Violation>) {
        let (i, n) = (holdings[idx].i, holdings[idx].n);
        let other_n = self.active.len() as u64 - self.per_n.get(&n).copied().unwrap_or(0);
        let same = self.per_slot.get(&(n, i)).copied().unwrap_or(0);
        if other_n + same == 0 {
            return;
        }
        violations.count += other_n + same;
        let room = MAX_REPORTED.saturating_sub(violations.items.len());
        let active = &self.active;
        let others = active
            .range(..(n, 0, 0))
            .chain(active.range((n, i, 0)..=(n, i, usize::MAX)))
            .chain(
                active
                    .range((n.saturating_add(1), 0, 0)..)
                    .filter(|_| n < u32::MAX),
            )
            .take(room)
            .map(|&(_, _, other)| other);
        for other in others {
            let (first, second) = (&holdings[other], &holdings[idx]);
            let kind = if first.n == second.n {
                ViolationKind::SameSlot
            } else {
                ViolationKind::MixedN
            };
            violations.items.push(Violation {
                kind,
                first: first.clone(),
                second: second.clone(),
                start_us: second.start_us,
                overlap_us: first.end_us.min(second.end_us) - second.start_us,
            });
        }
    }
}

impl Sweep {
    fn push_covered(&mut self, from: u64, to: u64) {
        if to <= from {
            return;
        }
        match self.covered.last_mut() {
            Some(last) if last.1 == from => last.1 = to,
            _ => self.covered.push((from, to)),
        }
    }

    /// Coverage over `[from_us, to_us)` (empty if `to_us <= from_us`).
    pub(crate) fn coverage_in(&self, from_us: u64, to_us: u64) -> Coverage {
        let to_us = to_us.max(from_us);
        let covered_us = self.covered_until(to_us) - self.covered_until(from_us);
        Coverage {
            from_us,
            to_us,
            covered_us,
            uncovered_us: to_us - from_us - covered_us,
        }
    }

    /// Total covered time before instant `t`.
    fn covered_until(&self, t: u64) -> u64 {
        // Spans that start before t.
        let k = self.covered.partition_point(|&(a, _)| a < t);
        if k == 0 {
            return 0;
        }
        let (a, b) = self.covered[k - 1];
        self.covered_before[k - 1] + b.min(t) - a
    }
}
