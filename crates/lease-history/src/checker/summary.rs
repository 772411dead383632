//! The summary: everything the checker found, in one value and one line.

use std::collections::BTreeMap;
use std::fmt;

use super::{Anomaly, Coverage, FencingViolation, IntervalEndViolation, TaskSummary, Violation};

/// Releases followed by a re-own by the same worker.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StandDowns {
    /// How many releases were followed by an own of the same worker (with no
    /// leave or join in between).
    pub count: u64,
    /// The idle time between those releases and their next owns, summed.
    pub total_idle_us: u64,
    /// The longest such idle time.
    pub max_idle_us: u64,
    /// `total_idle_us` per worker (workers with at least one stand-down).
    pub per_worker_idle_us: BTreeMap<String, u64>,
}

/// One `join` and the worker's first `own` after it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct JoinToOwn {
    /// The worker.
    pub worker: String,
    /// When it joined.
    pub join_us: u64,
    /// Its first own after the join, if any before it left or rejoined.
    pub own_us: Option<u64>,
}

impl JoinToOwn {
    /// Time from join to first own.
    pub fn delay_us(&self) -> Option<u64> {
        self.own_us.map(|o| o - self.join_us)
    }
}

/// Distribution of join-to-own delays.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct JoinStats {
    /// Number of joins.
    pub joins: u64,
    /// Joins that never led to an own.
    pub never_owned: u64,
    /// Median delay (nearest rank), over joins that led to an own.
    pub p50_us: Option<u64>,
    /// 90th percentile delay (nearest rank).
    pub p90_us: Option<u64>,
    /// Longest delay.
    pub max_us: Option<u64>,
}

impl JoinStats {
    pub(crate) fn from_joins(joins: &[JoinToOwn]) -> Self {
        let mut delays: Vec<u64> = joins.iter().filter_map(JoinToOwn::delay_us).collect();
        delays.sort_unstable();
        Self {
            joins: joins.len() as u64,
            never_owned: (joins.len() - delays.len()) as u64,
            p50_us: percentile(&delays, 50),
            p90_us: percentile(&delays, 90),
            max_us: delays.last().copied(),
        }
    }
}

/// Nearest-rank percentile `pct` (0 to 100) of `sorted` values; `None` if
/// there are none.
pub fn percentile(sorted: &[u64], pct: usize) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (pct * sorted.len()).div_ceil(100).max(1);
    sorted.get(rank - 1).copied()
}

/// Everything the checker found, in one value; [`fmt::Display`] prints one
/// line starting with `checker: ok` or `checker: VIOLATION`.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    /// Exclusivity violations (overlaps and owns without release), exact.
    pub violation_count: u64,
    /// The first [`MAX_REPORTED`](crate::checker::MAX_REPORTED) of them, in time order.
    pub violations: Vec<Violation>,
    /// Fencing violations, exact (one per offending later holding).
    pub fencing_count: u64,
    /// The first [`MAX_REPORTED`](crate::checker::MAX_REPORTED) of them.
    pub fencing: Vec<FencingViolation>,
    /// Inconsistent lines, exact.
    pub anomaly_count: u64,
    /// The first [`MAX_REPORTED`](crate::checker::MAX_REPORTED) of them.
    pub anomalies: Vec<Anomaly>,
    /// Leases and parts held past `(m+2)L`, `m` their last renewal's
    /// interval (unstepped server time), exact.
    pub interval_end_count: u64,
    /// The first [`MAX_REPORTED`](crate::checker::MAX_REPORTED) of them.
    pub interval_ends: Vec<IntervalEndViolation>,
    /// Leases and parts checked against their interval's end.
    pub interval_ends_checked: u64,
    /// Leases and parts with a renewal interval that could not be checked
    /// (no `clock` line before their end, or a backward step of the server
    /// clock since their interval began).
    pub interval_ends_voided: u64,
    /// Coverage over the whole run (first record to end).
    pub coverage: Coverage,
    /// Per-worker stand-downs.
    pub stand_downs: StandDowns,
    /// Join-to-own delays.
    pub join_to_own: JoinStats,
    /// Number of `own` lines.
    pub owns: u64,
    /// Number of `release` lines.
    pub releases: u64,
    /// Number of `fault` lines.
    pub faults: u64,
    /// Number of `join` lines.
    pub joins: u64,
    /// Number of `leave` lines.
    pub leaves: u64,
    /// Number of `clock` lines.
    pub clocks: u64,
    /// The per-task checks of a history with task sets; `None` for whole
    /// pairs only.
    pub tasks: Option<TaskSummary>,
}

impl Summary {
    /// No exclusivity, fencing or interval-end violation and no anomaly.
    pub fn is_ok(&self) -> bool {
        self.violation_count == 0
            && self.fencing_count == 0
            && self.anomaly_count == 0
            && self.interval_end_count == 0
            && self.tasks.as_ref().is_none_or(TaskSummary::is_ok)
    }
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

struct OptMs(Option<u64>);

impl fmt::Display for OptMs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(us) => write!(f, "{:.1}", ms(us)),
            None => f.write_str("-"),
        }
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "checker: {} violations={} fencing={} anomalies={} interval_ends={} coverage={:.4} \
             uncovered_ms={:.1} owns={} releases={} faults={} joins={} leaves={} standdowns={} \
             standdown_idle_ms={:.1} join_to_own_p50_ms={} join_to_own_p90_ms={} \
             join_to_own_max_ms={} never_owned={} ends_checked={} ends_voided={}",
            if self.is_ok() { "ok" } else { "VIOLATION" },
            self.violation_count,
            self.fencing_count,
            self.anomaly_count,
            self.interval_end_count,
            self.coverage.fraction(),
            ms(self.coverage.uncovered_us),
            self.owns,
            self.releases,
            self.faults,
            self.joins,
            self.leaves,
            self.stand_downs.count,
            ms(self.stand_downs.total_idle_us),
            OptMs(self.join_to_own.p50_us),
            OptMs(self.join_to_own.p90_us),
            OptMs(self.join_to_own.max_us),
            self.join_to_own.never_owned,
            self.interval_ends_checked,
            self.interval_ends_voided,
        )?;
        if let Some(t) = &self.tasks {
            write!(
                f,
                " task_violations={} task_fencing={} task_coverage={:.4}",
                t.violation_count, t.fencing_count, t.coverage
            )?;
        }
        Ok(())
    }
}
