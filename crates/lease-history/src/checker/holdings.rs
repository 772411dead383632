//! Reconstruction: the holdings of each worker, rebuilt from its `own`,
//! `release`, `join` and `leave` lines, with the lines that do not fit
//! ([`Anomaly`]), the stand-downs and the join-to-own delays.
//!
//! An `own` opens a holding `[at, ..)` for its worker; that worker's next
//! `release` closes it at the release's `at_us`, the instant the lease really
//! ended, and so does its next `own` (a task set replaces the holding; a
//! whole pair owned without a release is a violation). A holding still open
//! at the end lasts until the end of the history. A `leave` ends nothing: a
//! graceful leaver serves its parts until each one's end after the cancel
//! (rule 16 of docs/protocol.md), and a writer that ends a crashed worker's
//! lease on its behalf writes the `release`.
//!
//! A `release` written after its worker's `own` but with an earlier instant
//! (the loop was handed a lease whose end had passed) would, read in time
//! order, come before that `own` and leave the holding open forever; it is an
//! [`AnomalyKind::ReleaseBeforeOwn`] and ends the holding at the `own`.

use std::collections::HashMap;
use std::fmt;

use super::Capped;
use super::summary::{JoinToOwn, StandDowns};
use crate::record::{Mapping, Part, Record, Renewed};

/// How a holding ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HoldingEnd {
    /// By a `release` line.
    Released,
    /// By an `own` of the same worker without a release in between: an
    /// [`ViolationKind::OwnWithoutRelease`](super::ViolationKind) for a whole
    /// pair, the next holding of a task set (an `own` with parts replaces
    /// the worker's holding).
    Replaced,
    /// Still held when the history ended.
    EndOfHistory,
}

/// One worker holding one pair over `[start_us, end_us)`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Holding {
    /// The worker.
    pub worker: String,
    /// The index `i`.
    pub i: u32,
    /// The group size `n`.
    pub n: u32,
    /// The fencing token of the `own` line.
    pub token: u64,
    /// When the `own` was written.
    pub start_us: u64,
    /// When the holding ended (exclusive).
    pub end_us: u64,
    /// What ended it.
    pub end: HoldingEnd,
    /// The parts of a task-set holding (empty for a whole pair).
    pub parts: Vec<Part>,
    /// The `renewed` field of the line that ended it, when it carried one
    /// that fits the holding (one interval for a whole pair, one per part
    /// for a task set).
    pub renewed: Option<Renewed>,
}

impl Holding {
    /// Whether this is a task-set holding (an `own` with parts), checked per
    /// task rather than as a whole pair.
    pub fn is_task_set(&self) -> bool {
        !self.parts.is_empty()
    }

    /// The length of the holding in microseconds.
    pub fn len_us(&self) -> u64 {
        self.end_us - self.start_us
    }

    /// Whether the checker counts the two pairs as sharing a task: the same
    /// pair, or any two pairs with different `n`. The whole-pair check
    /// treats every change of `n` as a conflict: under the plain modulo split,
    /// `(i, n)` and `(i', n')` share a task id whenever `i ≡ i' (mod gcd(n,
    /// n'))`, and under a consistent mapping (jump hash) any two may.
    pub fn shares_task_with(&self, other: &Holding) -> bool {
        self.n != other.n || self.i == other.i
    }
}

impl fmt::Display for Holding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({}, {}) token {} [{}, {}) us",
            self.worker, self.i, self.n, self.token, self.start_us, self.end_us
        )
    }
}

/// What is wrong with an inconsistent line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AnomalyKind {
    /// A `release` while the worker held nothing.
    ReleaseWithoutOwn,
    /// A `release` of another pair than the one held (the held one is ended
    /// anyway).
    ReleaseMismatch {
        /// The index held.
        held_i: u32,
        /// The group size held.
        held_n: u32,
    },
    /// An `own` with `n == 0` or `i >= n`.
    InvalidPair,
    /// An `own` that names another mapping than the history's first.
    MappingMismatch {
        /// The history's mapping.
        expected: Mapping,
    },
    /// An `own` with parts but no mapping (the consistent one is assumed).
    PartsWithoutMapping,
    /// A `release` written after its worker's `own` with an earlier instant
    /// than it: the lease had ended before the loop received it. The
    /// holding is ended at the `own` (it lasts nothing).
    ReleaseBeforeOwn {
        /// The instant of the `own` it follows.
        own_us: u64,
    },
    /// A `renewed` field that does not fit the holding the line ends (a
    /// number for a task set, an array for a whole pair, or another count
    /// than the parts); it is ignored.
    RenewedMismatch,
}

/// A line that does not fit the worker's sequence of holdings.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Anomaly {
    /// What is wrong.
    pub kind: AnomalyKind,
    /// The worker of the line.
    pub worker: String,
    /// The line's `i`.
    pub i: u32,
    /// The line's `n`.
    pub n: u32,
    /// The line's `at_us`.
    pub at_us: u64,
}

impl fmt::Display for Anomaly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            AnomalyKind::ReleaseWithoutOwn => "release without own".to_string(),
            AnomalyKind::ReleaseMismatch { held_i, held_n } => {
                format!("release of another pair than ({held_i}, {held_n})")
            }
            AnomalyKind::InvalidPair => "invalid pair".to_string(),
            AnomalyKind::MappingMismatch { expected } => {
                format!("another mapping than {}", expected.as_str())
            }
            AnomalyKind::PartsWithoutMapping => "parts without a mapping".to_string(),
            AnomalyKind::ReleaseBeforeOwn { own_us } => {
                format!("release written after the own at {own_us} us with an earlier instant")
            }
            AnomalyKind::RenewedMismatch => "renewal intervals that do not fit".to_string(),
        };
        write!(
            f,
            "{what}: {} ({}, {}) at {} us",
            self.worker, self.i, self.n, self.at_us
        )
    }
}

/// How many lines of each kind a history had.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub(crate) owns: u64,
    pub(crate) releases: u64,
    pub(crate) faults: u64,
    pub(crate) leaves: u64,
    pub(crate) clocks: u64,
}

/// Everything one pass over the records in time order finds.
#[derive(Clone, Debug, Default)]
pub(crate) struct Reconstruction {
    /// Every holding, in order of start.
    pub(crate) holdings: Vec<Holding>,
    /// The worker (a dense id) of each holding, parallel to `holdings`.
    pub(crate) holder: Vec<usize>,
    /// Owns without a release in between: (the holding still held, the new
    /// one), by index.
    pub(crate) replaced: Vec<(usize, usize)>,
    pub(crate) anomalies: Capped<Anomaly>,
    pub(crate) stand_downs: StandDowns,
    pub(crate) joins: Vec<JoinToOwn>,
    pub(crate) counts: Counts,
    /// The mapping of the history's task sets: the first `own` that names
    /// one (the consistent one if parts come without).
    pub(crate) mapping: Option<Mapping>,
}

/// One line as the checker reads it: at `at_us`, which is the line's own
/// instant except for a [`AnomalyKind::ReleaseBeforeOwn`].
#[derive(Clone, Copy)]
pub(crate) struct Line<'a> {
    pub(crate) at_us: u64,
    /// For a release moved to its `own`'s instant: that instant.
    pub(crate) before_own: Option<u64>,
    pub(crate) record: &'a Record,
}

/// The lines of `records` (in the order they were written) in time order:
/// a `release` written after its worker's `own` with an earlier instant is
/// moved to that `own`'s instant, after it; then the lines are sorted
/// stably by instant, so lines with one instant keep their file order.
pub(crate) fn lines(records: &[Record]) -> Vec<Line<'_>> {
    let mut last_own: HashMap<&str, u64> = HashMap::new();
    let mut out: Vec<Line<'_>> = records
        .iter()
        .map(|record| {
            let at_us = record.at_us();
            let plain = Line {
                at_us,
                before_own: None,
                record,
            };
            match record {
                Record::Own { worker, .. } => {
                    last_own.insert(worker, at_us);
                    plain
                }
                Record::Release { worker, .. } => match last_own.remove(worker.as_str()) {
                    Some(own_us) if own_us > at_us => Line {
                        at_us: own_us,
                        before_own: Some(own_us),
                        record,
                    },
                    _ => plain,
                },
                _ => plain,
            }
        })
        .collect();
    out.sort_by_key(|l| l.at_us);
    out
}

#[derive(Default)]
struct WorkerState {
    /// The holding open, by index.
    open: Option<usize>,
    last_release: Option<u64>,
    pending_join: Option<usize>,
    /// A `leave` came since the last `join`: a release then is no
    /// stand-down.
    left: bool,
}

impl Reconstruction {
    fn anomaly(&mut self, kind: AnomalyKind, worker: &str, i: u32, n: u32, at_us: u64) {
        self.anomalies.push(Anomaly {
            kind,
            worker: worker.to_string(),
            i,
            n,
            at_us,
        });
    }

    /// Ends holding `index` at `at` by a line whose `renewed` field is
    /// `renewed` (kept if it fits the holding, an anomaly if not); the line
    /// is `worker`'s, with `(i, n)`, written at `line_us`.
    #[allow(clippy::too_many_arguments)]
    fn close(
        &mut self,
        index: usize,
        at: u64,
        end: HoldingEnd,
        renewed: Option<&Renewed>,
        worker: &str,
        (i, n): (u32, u32),
        line_us: u64,
    ) {
        let h = &mut self.holdings[index];
        h.end_us = at.max(h.start_us);
        h.end = end;
        let Some(renewed) = renewed else { return };
        let fits = match renewed {
            Renewed::Pair(_) => h.parts.is_empty(),
            Renewed::Parts(each) => !h.parts.is_empty() && each.len() == h.parts.len(),
        };
        if fits {
            h.renewed = Some(renewed.clone());
        } else {
            self.anomaly(AnomalyKind::RenewedMismatch, worker, i, n, line_us);
        }
    }

    /// Notes the mapping an `own` names: the first one is the history's,
    /// another one is an anomaly, and so are parts without one.
    fn note_mapping(
        &mut self,
        mapping: Option<Mapping>,
        has_parts: bool,
        worker: &str,
        i: u32,
        n: u32,
        at_us: u64,
    ) {
        let mapping = match (mapping, has_parts) {
            (Some(m), _) => m,
            (None, true) => {
                self.anomaly(AnomalyKind::PartsWithoutMapping, worker, i, n, at_us);
                Mapping::Consistent
            }
            (None, false) => return,
        };
        match self.mapping {
            None => self.mapping = Some(mapping),
            Some(expected) if expected != mapping => {
                self.anomaly(
                    AnomalyKind::MappingMismatch { expected },
                    worker,
                    i,
                    n,
                    at_us,
                );
            }
            Some(_) => {}
        }
    }

    /// Counts a release followed by an own of the same worker.
    fn stand_down(&mut self, worker: &str, idle: u64) {
        let sd = &mut self.stand_downs;
        sd.count += 1;
        sd.total_idle_us += idle;
        sd.max_idle_us = sd.max_idle_us.max(idle);
        *sd.per_worker_idle_us.entry(worker.to_string()).or_default() += idle;
    }
}

/// One pass over `lines`, which are in time order ([`lines`]): holdings,
/// anomalies, stand-downs, joins and counts. Holdings still open at the end
/// last until `end_us`.
pub(crate) fn reconstruct(lines: &[Line<'_>], end_us: u64) -> Reconstruction {
    let mut replay = Replay::default();
    for line in lines {
        let Some(worker) = line.record.worker() else {
            match line.record {
                Record::Clock { .. } => replay.out.counts.clocks += 1,
                _ => replay.out.counts.faults += 1,
            }
            continue;
        };
        let w = replay.worker_index(worker);
        match line.record {
            Record::Own {
                i,
                n,
                token,
                mapping,
                held,
                renewed,
                ..
            } => {
                let own = Own {
                    pair: (*i, *n),
                    token: *token,
                    mapping: *mapping,
                    parts: held.clone().unwrap_or_default(),
                    renewed: renewed.as_ref(),
                };
                replay.own(w, worker, line.at_us, own);
            }
            Record::Release {
                i,
                n,
                renewed,
                at_us: written_us,
                ..
            } => {
                let release = Release {
                    pair: (*i, *n),
                    written_us: *written_us,
                    renewed: renewed.as_ref(),
                    before_own: line.before_own,
                };
                replay.release(w, worker, line.at_us, release);
            }
            Record::Join { .. } => replay.join(w, worker, line.at_us),
            Record::Leave { .. } => replay.leave(w),
            Record::Fault { .. } => replay.out.counts.faults += 1,
            Record::Clock { .. } => replay.out.counts.clocks += 1,
        }
    }
    replay.finish(end_us)
}

/// An own line's fields, as the replay needs them.
struct Own<'r> {
    pair: (u32, u32),
    token: u64,
    mapping: Option<Mapping>,
    parts: Vec<Part>,
    renewed: Option<&'r Renewed>,
}

/// A release line's fields, as the replay needs them.
struct Release<'r> {
    pair: (u32, u32),
    /// The instant the line was written (its own `at_us`; the line's place
    /// in time order may differ, see [`Line::before_own`]).
    written_us: u64,
    renewed: Option<&'r Renewed>,
    before_own: Option<u64>,
}

/// The state of [`reconstruct`]'s pass: what it has found so far and, per
/// worker, what that worker holds and did last.
#[derive(Default)]
struct Replay<'a> {
    out: Reconstruction,
    ids: HashMap<&'a str, usize>,
    states: Vec<WorkerState>,
}

impl<'a> Replay<'a> {
    /// The index of `worker`'s state, made on its first line.
    fn worker_index(&mut self, worker: &'a str) -> usize {
        let states = &mut self.states;
        *self.ids.entry(worker).or_insert_with(|| {
            states.push(WorkerState::default());
            states.len() - 1
        })
    }

    /// An own line: a new holding, which replaces the worker's open one (a
    /// task set) or follows its release (a stand-down ends).
    fn own(&mut self, w: usize, worker: &str, at_us: u64, own: Own<'_>) {
        let out = &mut self.out;
        let (i, n) = own.pair;
        out.counts.owns += 1;
        if n == 0 || i >= n {
            out.anomaly(AnomalyKind::InvalidPair, worker, i, n, at_us);
        }
        out.note_mapping(own.mapping, !own.parts.is_empty(), worker, i, n, at_us);
        let index = out.holdings.len();
        let state = &mut self.states[w];
        let replaced = state.open.take().map(|open| {
            // A task set replaces the worker's holding; a whole pair must
            // have been released first.
            if own.parts.is_empty() {
                out.replaced.push((open, index));
            }
            out.close(
                open,
                at_us,
                HoldingEnd::Replaced,
                own.renewed,
                worker,
                (i, n),
                at_us,
            );
        });
        if replaced.is_some() {
            state.last_release = None;
        } else if let Some(released) = state.last_release.take() {
            out.stand_down(worker, at_us - released);
        }
        if let Some(j) = state.pending_join.take() {
            out.joins[j].own_us = Some(at_us);
        }
        state.open = Some(index);
        out.holdings.push(Holding {
            worker: worker.to_string(),
            i,
            n,
            token: own.token,
            start_us: at_us,
            end_us: u64::MAX,
            end: HoldingEnd::EndOfHistory,
            parts: own.parts,
            renewed: None,
        });
        out.holder.push(w);
    }

    /// A release line: it closes the worker's open holding, which must be
    /// of the same pair.
    fn release(&mut self, w: usize, worker: &str, at_us: u64, release: Release<'_>) {
        let out = &mut self.out;
        let (i, n) = release.pair;
        out.counts.releases += 1;
        if let Some(own_us) = release.before_own {
            out.anomaly(
                AnomalyKind::ReleaseBeforeOwn { own_us },
                worker,
                i,
                n,
                release.written_us,
            );
        }
        let state = &mut self.states[w];
        let Some(open) = state.open.take() else {
            out.anomaly(AnomalyKind::ReleaseWithoutOwn, worker, i, n, at_us);
            return;
        };
        let held = &out.holdings[open];
        let (held_i, held_n) = (held.i, held.n);
        if (held_i, held_n) != (i, n) {
            out.anomaly(
                AnomalyKind::ReleaseMismatch { held_i, held_n },
                worker,
                i,
                n,
                at_us,
            );
        }
        if !state.left {
            state.last_release = Some(at_us);
        }
        out.close(
            open,
            at_us,
            HoldingEnd::Released,
            release.renewed,
            worker,
            (i, n),
            release.written_us,
        );
    }

    /// A join line: the time to the worker's next own is measured.
    fn join(&mut self, w: usize, worker: &str, at_us: u64) {
        let state = &mut self.states[w];
        state.last_release = None;
        state.left = false;
        state.pending_join = Some(self.out.joins.len());
        self.out.joins.push(JoinToOwn {
            worker: worker.to_string(),
            join_us: at_us,
            own_us: None,
        });
    }

    /// A leave line: what follows is not a stand-down.
    fn leave(&mut self, w: usize) {
        self.out.counts.leaves += 1;
        let state = &mut self.states[w];
        state.last_release = None;
        state.pending_join = None;
        state.left = true;
    }

    /// Holdings still open last until `end_us`.
    fn finish(mut self, end_us: u64) -> Reconstruction {
        for state in &mut self.states {
            if let Some(open) = state.open.take() {
                let h = &mut self.out.holdings[open];
                h.end_us = end_us.max(h.start_us);
                h.end = HoldingEnd::EndOfHistory;
            }
        }
        self.out
    }
}
