//! Reconstruction: the holdings of each worker, rebuilt from its `own`,
//! `release`, `join` and `leave` lines, with the lines that do not fit
//! ([`Anomaly`]), the stand-downs and the join-to-own delays.
//!
//! An `own` opens a holding `[at, ..)` for its worker; that worker's next
//! `release` closes it at the release's `at_us`, the instant the lease really
//! ended. A holding still open at the end lasts until the end of the history.
//! A `leave` ends its worker's holding at the leave's instant, unless the
//! worker's `release` follows before its next `own` or `join`, in which case
//! the release's instant counts (a simulator may write a crashed worker's
//! lease deadline as its release).

use std::collections::HashMap;
use std::fmt;

use super::Capped;
use super::summary::{JoinToOwn, StandDowns};
use crate::record::Record;

/// How a holding ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HoldingEnd {
    /// By a `release` line.
    Released,
    /// By its worker's `leave` line.
    Left,
    /// By an `own` of the same worker without a release in between (an
    /// [`ViolationKind::OwnWithoutRelease`](super::ViolationKind::OwnWithoutRelease)).
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
}

impl Holding {
    /// The length of the holding in microseconds.
    pub fn len_us(&self) -> u64 {
        self.end_us - self.start_us
    }

    /// Whether the checker counts the two pairs as sharing a task: the same
    /// pair, or any two pairs with different `n`. DESIGN section 6 treats
    /// every change of `n` as a conflict: under the plain modulo split,
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
}

/// A holding still open during reconstruction.
struct Open {
    index: usize,
    left_at: Option<u64>,
}

#[derive(Default)]
struct WorkerState {
    open: Option<Open>,
    last_release: Option<u64>,
    pending_join: Option<usize>,
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

    fn close(&mut self, open: Open, at: u64, end: HoldingEnd) {
        let h = &mut self.holdings[open.index];
        h.end_us = at.max(h.start_us);
        h.end = end;
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

/// One pass over `records`, which are in time order: holdings, anomalies,
/// stand-downs, joins and counts. Holdings still open at the end last until
/// `end_us`.
pub(crate) fn reconstruct(records: &[&Record], end_us: u64) -> Reconstruction {
    let mut out = Reconstruction::default();
    let mut ids: HashMap<&str, usize> = HashMap::new();
    let mut states: Vec<WorkerState> = Vec::new();
    for record in records {
        let Some(worker) = record.worker() else {
            out.counts.faults += 1;
            continue;
        };
        let w = *ids.entry(worker).or_insert_with(|| {
            states.push(WorkerState::default());
            states.len() - 1
        });
        match **record {
            Record::Own {
                i, n, token, at_us, ..
            } => {
                out.counts.owns += 1;
                if n == 0 || i >= n {
                    out.anomaly(AnomalyKind::InvalidPair, worker, i, n, at_us);
                }
                let index = out.holdings.len();
                if let Some(open) = states[w].open.take() {
                    match open.left_at {
                        Some(left) => out.close(open, left, HoldingEnd::Left),
                        None => {
                            out.replaced.push((open.index, index));
                            out.close(open, at_us, HoldingEnd::Replaced);
                        }
                    }
                }
                let state = &mut states[w];
                if let Some(released) = state.last_release.take() {
                    out.stand_down(worker, at_us - released);
                }
                if let Some(j) = state.pending_join.take() {
                    out.joins[j].own_us = Some(at_us);
                }
                state.open = Some(Open {
                    index,
                    left_at: None,
                });
                out.holdings.push(Holding {
                    worker: worker.to_string(),
                    i,
                    n,
                    token,
                    start_us: at_us,
                    end_us: u64::MAX,
                    end: HoldingEnd::EndOfHistory,
                });
                out.holder.push(w);
            }
            Record::Release { i, n, at_us, .. } => {
                out.counts.releases += 1;
                match states[w].open.take() {
                    Some(open) => {
                        let held = &out.holdings[open.index];
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
                        if open.left_at.is_none() {
                            states[w].last_release = Some(at_us);
                        }
                        out.close(open, at_us, HoldingEnd::Released);
                    }
                    None => out.anomaly(AnomalyKind::ReleaseWithoutOwn, worker, i, n, at_us),
                }
            }
            Record::Join { at_us, .. } => {
                let state = &mut states[w];
                if let Some(open) = state.open.take_if(|o| o.left_at.is_some()) {
                    let left = open.left_at.unwrap_or(at_us);
                    out.close(open, left, HoldingEnd::Left);
                }
                let state = &mut states[w];
                state.last_release = None;
                state.pending_join = Some(out.joins.len());
                out.joins.push(JoinToOwn {
                    worker: worker.to_string(),
                    join_us: at_us,
                    own_us: None,
                });
            }
            Record::Leave { at_us, .. } => {
                out.counts.leaves += 1;
                let state = &mut states[w];
                if let Some(open) = &mut state.open {
                    open.left_at.get_or_insert(at_us);
                }
                state.last_release = None;
                state.pending_join = None;
            }
            Record::Fault { .. } => out.counts.faults += 1,
        }
    }
    for state in &mut states {
        if let Some(open) = state.open.take() {
            match open.left_at {
                Some(left) => out.close(open, left, HoldingEnd::Left),
                None => out.close(open, end_us, HoldingEnd::EndOfHistory),
            }
        }
    }
    out
}
