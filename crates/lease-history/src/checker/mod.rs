//! The checker: an independent judge of a history (the format is in
//! docs/history-format.md; what it must hold, in docs/protocol.md). It knows
//! the record format and nothing of the protocol's implementation.
//!
//! It rebuilds every worker's holding intervals from the `own` and `release`
//! lines and checks, knowing nothing of the protocol:
//!
//! - **exclusivity**: at every instant, all held pairs have the same `n` and
//!   distinct `i`; a worker never holds two pairs itself;
//! - **fencing**: two different workers' holdings that share a task have
//!   tokens at least 2 apart, ordered as the holdings start in time;
//! - **interval ends**: every lease and part ends by `(m+2)L` on the server
//!   clock, `m` the interval it was last granted or renewed in, when the
//!   history carries `clock` lines and `renewed` fields
//!   ([`IntervalEndViolation`]);
//! - **coverage**: the share of time during which, for some `n`, every slot
//!   `0..n` is held by exactly one worker and nothing else is held;
//! - **stand-downs**, **join-to-own** delays and counts of each kind of line;
//! - for a history with task sets (an `own` that names a mapping):
//!   **exclusivity and coverage per task, fencing per part**
//!   ([`TaskSummary`]); task-set holdings are judged per task only, since
//!   during an incremental handover parts of two `n` are held at once.
//!
//! # How the history is read
//!
//! The records are taken in time order: sorted stably by `at_us`, so lines
//! with the same instant keep their order (a worker's release before its
//! next own). An `own` opens a holding `[at, ..)` for its worker; that
//! worker's next `release` closes it at the release's `at_us`, the instant
//! the lease really ended, and so does its next `own` (a task set replaces
//! the holding). Holdings are half-open, so a handover (a release at `t` and
//! another worker's own at `t`) is no overlap. A holding still open at the
//! end lasts until the end of the history: the latest `at_us`, or a later
//! end passed to [`check`] or [`Checker::new`]. A `leave` ends nothing: a
//! graceful leaver keeps serving its parts after the cancel, each until its
//! own end, and a writer that ends a crashed worker's lease writes its
//! `release`.
//!
//! Pass the records in the order they were written ([`read_history`]
//! keeps it), or in any order that keeps each worker's lines in the order
//! it wrote them: a `release` written after its worker's `own` with an
//! earlier instant is an anomaly only the order written can show (a
//! [`History`](crate::History) is sorted by instant and hides it).
//!
//! Lines that do not fit (a release with nothing held, a release of another
//! pair than the one held, a release before its own, a pair with `i >= n`,
//! renewal intervals that do not fit) are [`Anomaly`]s and make the result
//! fail as violations do.
//!
//! # Layout
//!
//! One concern per module: `holdings` rebuilds the holdings from the lines,
//! `sweep` checks exclusivity and measures coverage, `fencing` checks the
//! tokens, `per_task` does all three per task for task sets, `interval_end`
//! holds every lease to its interval's end, `summary` puts it all in one
//! value and one line.
//!
//! # Cost
//!
//! Reconstruction is one pass; exclusivity and coverage are one sweep over the
//! sorted interval boundaries; the whole check is `O(E log E)` in the number
//! of records, plus `O(E·K)` for fencing where `K` is the number of distinct
//! group sizes `n` in the run (a handful), and `O(E·C)` for interval ends
//! where `C` is the number of `clock` lines (one plus the server clock's
//! steps). Violation counts are exact; the lists keep the first
//! [`MAX_REPORTED`] of each kind.
//!
//! [`read_history`]: crate::read_history

mod fencing;
mod holdings;
mod interval_end;
mod per_task;
mod summary;
mod sweep;
#[cfg(test)]
mod tests;

pub use fencing::FencingViolation;
pub use holdings::{Anomaly, AnomalyKind, Holding, HoldingEnd};
pub use interval_end::IntervalEndViolation;
pub use per_task::{TaskCoverage, TaskFencingViolation, TaskSummary, TaskViolation, task_moves};
pub use summary::{JoinStats, JoinToOwn, StandDowns, Summary, percentile};
pub use sweep::{Coverage, Violation, ViolationKind};

use crate::record::Record;

/// The most violations, fencing violations and anomalies kept in each list
/// (counts are always exact).
pub const MAX_REPORTED: usize = 1000;

/// An exact count and the first [`MAX_REPORTED`] items.
#[derive(Clone, Debug)]
pub(crate) struct Capped<T> {
    pub(crate) count: u64,
    pub(crate) items: Vec<T>,
}

impl<T> Default for Capped<T> {
    fn default() -> Self {
        Self {
            count: 0,
            items: Vec::new(),
        }
    }
}

impl<T> Capped<T> {
    pub(crate) fn push(&mut self, item: T) {
        self.count += 1;
        if self.items.len() < MAX_REPORTED {
            self.items.push(item);
        }
    }
}

/// Checks `records`, in the order they were written (they are sorted stably
/// by `at_us` first; see "How the history is read" above for why the order
/// written matters). Holdings never released last until `end_us`, or until
/// the latest record if that is later or `end_us` is `None`.
///
/// For a [`History`](crate::History), pass `history.records()`.
pub fn check(records: &[Record], end_us: Option<u64>) -> Summary {
    Checker::new(records, end_us).summary()
}

/// The reconstructed holdings of a history and everything checked on them.
#[derive(Clone, Debug)]
pub struct Checker {
    rebuilt: holdings::Reconstruction,
    sweep: sweep::Sweep,
    fencing: Capped<FencingViolation>,
    interval_ends: interval_end::IntervalEnds,
    tasks: Option<TaskSummary>,
    start_us: u64,
    end_us: u64,
}

impl Checker {
    /// Checks `records`, in the order they were written (they are sorted
    /// stably by `at_us` first). Holdings never released last until
    /// `end_us`, or until the latest record if that is later or `end_us` is
    /// `None`. The run spans the lines of its workers and faults: `clock`
    /// lines describe the server clock and neither start nor end it.
    pub fn new(records: &[Record], end_us: Option<u64>) -> Self {
        let lines = holdings::lines(records);
        let mut events = lines
            .iter()
            .filter(|l| !matches!(l.record, Record::Clock { .. }))
            .map(|l| l.at_us);
        let start_us = events.next().unwrap_or(0);
        let last = events.next_back().unwrap_or(start_us);
        let end_us = end_us.map_or(last, |e| e.max(last));

        let rebuilt = holdings::reconstruct(&lines, end_us);
        let mut violations = Capped::default();
        for &(old, new) in &rebuilt.replaced {
            let (first, second) = (&rebuilt.holdings[old], &rebuilt.holdings[new]);
            violations.push(Violation {
                kind: ViolationKind::OwnWithoutRelease,
                first: first.clone(),
                second: second.clone(),
                start_us: second.start_us,
                overlap_us: 0,
            });
        }
        let mut sweep = sweep::sweep(&rebuilt.holdings, violations);
        sweep.violations.items.sort_by_key(|v| v.start_us);
        let fencing = fencing::check(&rebuilt.holdings, &rebuilt.holder);
        let interval_ends = interval_end::check(&lines, &rebuilt.holdings);
        let tasks = rebuilt.mapping.map(|mapping| {
            per_task::check(
                &rebuilt.holdings,
                &rebuilt.holder,
                mapping,
                start_us,
                end_us,
            )
        });
        Checker {
            rebuilt,
            sweep,
            fencing,
            interval_ends,
            tasks,
            start_us,
            end_us,
        }
    }

    /// Every holding, in order of start.
    pub fn holdings(&self) -> &[Holding] {
        &self.rebuilt.holdings
    }

    /// The instant of the first record (0 for an empty history).
    pub fn start_us(&self) -> u64 {
        self.start_us
    }

    /// The end of the history: the latest record, or the end passed in.
    pub fn end_us(&self) -> u64 {
        self.end_us
    }

    /// Exclusivity violations, exact count.
    pub fn violation_count(&self) -> u64 {
        self.sweep.violations.count
    }

    /// The first [`MAX_REPORTED`] exclusivity violations, by start.
    pub fn violations(&self) -> &[Violation] {
        &self.sweep.violations.items
    }

    /// Fencing violations, exact count.
    pub fn fencing_count(&self) -> u64 {
        self.fencing.count
    }

    /// The first [`MAX_REPORTED`] fencing violations, by the later
    /// holding's start.
    pub fn fencing_violations(&self) -> &[FencingViolation] {
        &self.fencing.items
    }

    /// Leases and parts held past the end of the interval after their last
    /// renewal, exact count.
    pub fn interval_end_count(&self) -> u64 {
        self.interval_ends.violations.count
    }

    /// The first [`MAX_REPORTED`] of them, by holding start.
    pub fn interval_end_violations(&self) -> &[IntervalEndViolation] {
        &self.interval_ends.violations.items
    }

    /// How many leases and parts were checked against their interval's end
    /// (those whose ending line carries a renewal interval, with a `clock`
    /// line before their end and no backward step of the server clock since
    /// their interval began).
    pub fn interval_ends_checked(&self) -> u64 {
        self.interval_ends.checked
    }

    /// How many leases and parts carried a renewal interval but could not
    /// be checked (no `clock` line before their end, or a backward step of
    /// the server clock since their interval began).
    pub fn interval_ends_voided(&self) -> u64 {
        self.interval_ends.voided
    }

    /// Inconsistent lines, exact count.
    pub fn anomaly_count(&self) -> u64 {
        self.rebuilt.anomalies.count
    }

    /// The first [`MAX_REPORTED`] inconsistent lines, in time order.
    pub fn anomalies(&self) -> &[Anomaly] {
        &self.rebuilt.anomalies.items
    }

    /// The spans `[from, to)` of full coverage, sorted, disjoint and not
    /// touching.
    pub fn covered_spans(&self) -> &[(u64, u64)] {
        &self.sweep.covered
    }

    /// Coverage over the whole run, `[start_us, end_us)`.
    pub fn coverage(&self) -> Coverage {
        self.coverage_in(self.start_us, self.end_us)
    }

    /// Coverage over `[from_us, to_us)` (empty if `to_us <= from_us`).
    pub fn coverage_in(&self, from_us: u64, to_us: u64) -> Coverage {
        self.sweep.coverage_in(from_us, to_us)
    }

    /// The per-task checks, for a history that names a mapping (task sets);
    /// `None` for a history of whole pairs only.
    pub fn tasks(&self) -> Option<&TaskSummary> {
        self.tasks.as_ref()
    }

    /// Releases followed by a re-own by the same worker.
    pub fn stand_downs(&self) -> &StandDowns {
        &self.rebuilt.stand_downs
    }

    /// Every `join`, in time order, with the worker's first own after it.
    pub fn join_to_own(&self) -> &[JoinToOwn] {
        &self.rebuilt.joins
    }

    /// Everything above in one value.
    pub fn summary(&self) -> Summary {
        let counts = self.rebuilt.counts;
        Summary {
            violation_count: self.violation_count(),
            violations: self.violations().to_vec(),
            fencing_count: self.fencing_count(),
            fencing: self.fencing_violations().to_vec(),
            anomaly_count: self.anomaly_count(),
            anomalies: self.anomalies().to_vec(),
            interval_end_count: self.interval_end_count(),
            interval_ends: self.interval_end_violations().to_vec(),
            interval_ends_checked: self.interval_ends.checked,
            interval_ends_voided: self.interval_ends.voided,
            coverage: self.coverage(),
            stand_downs: self.rebuilt.stand_downs.clone(),
            join_to_own: JoinStats::from_joins(&self.rebuilt.joins),
            owns: counts.owns,
            releases: counts.releases,
            faults: counts.faults,
            joins: self.rebuilt.joins.len() as u64,
            leaves: counts.leaves,
            clocks: counts.clocks,
            tasks: self.tasks.clone(),
        }
    }
}
