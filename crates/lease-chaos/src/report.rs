//! What a run found: the checker's verdict on the history, the fencing
//! sink's counts, and per kind of fault the stand-downs, stale writes,
//! uncovered time and recovery time in the fault's window.
//!
//! A fault's **window** runs from its injection to the next fault's (the last
//! one's to the start of the shutdown). Faults are injected one at a time,
//! the next only once the group has been fully covered again for two
//! intervals (or after 15 intervals without), so a window holds one fault
//! and the group's answer to it.
//!
//! - **stand-downs**: holdings that ended by a release inside the window;
//! - **stale**: writes the sink rejected as stale inside the window;
//! - **recovery**: from the end of the fault (the injection for an
//!   instantaneous one; the wake-up, the lifting, the rejoin, the last
//!   replacement for the others) to the start of the full coverage that
//!   lasts to the end of the window: 0 if the group was covered from the
//!   fault's end on, *unrecovered* if the window ends uncovered.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use lease_history::checker::{Checker, Coverage, HoldingEnd, Summary, percentile};

/// The coverage the report reads: per task for a task-set history (an
/// incremental run: the share of tasks held by exactly one worker, and the
/// spans during which every task was), of whole pairs otherwise. Both come
/// from the checker (`TaskSummary::timeline` for tasks).
pub(crate) struct Cover<'a> {
    checker: &'a Checker,
    task_spans: Option<Vec<(u64, u64)>>,
}

impl<'a> Cover<'a> {
    pub(crate) fn new(checker: &'a Checker) -> Self {
        Self {
            checker,
            task_spans: checker.tasks().map(|t| t.timeline.covered_spans()),
        }
    }

    /// Coverage over `[from_us, to_us)`; for tasks, `uncovered_us` is the
    /// task-time held by nobody or by two, divided by the number of tasks.
    pub(crate) fn coverage_in(&self, from_us: u64, to_us: u64) -> Coverage {
        match self.checker.tasks() {
            Some(t) => t.timeline.coverage_in(from_us, to_us),
            None => self.checker.coverage_in(from_us, to_us),
        }
    }

    /// The spans of full coverage (every task, or every slot of some `n`).
    pub(crate) fn spans(&self) -> &[(u64, u64)] {
        match &self.task_spans {
            Some(spans) => spans,
            None => self.checker.covered_spans(),
        }
    }
}

use crate::faults::FaultKind;
use lease_chaos::sink::SinkStats;

/// One injected fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FaultRun {
    pub(crate) kind: FaultKind,
    /// The injection, in history microseconds.
    pub(crate) start_us: u64,
    /// When its effect ended (a stall's wake-up, the rejoin after a crash,
    /// ...); the injection for instantaneous faults.
    pub(crate) end_us: u64,
}

/// Everything measured for one kind of fault.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct KindStats {
    pub(crate) count: u64,
    pub(crate) standdowns: u64,
    pub(crate) stale: u64,
    pub(crate) uncovered_us: u64,
    /// Recovery times of the windows that recovered, sorted.
    pub(crate) recoveries_us: Vec<u64>,
    pub(crate) unrecovered: u64,
}

impl KindStats {
    fn add(&mut self, other: &KindStats) {
        self.count += other.count;
        self.standdowns += other.standdowns;
        self.stale += other.stale;
        self.uncovered_us += other.uncovered_us;
        self.recoveries_us.extend(&other.recoveries_us);
        self.recoveries_us.sort_unstable();
        self.unrecovered += other.unrecovered;
    }

    /// Median recovery (nearest rank).
    pub(crate) fn recovery_p50_us(&self) -> Option<u64> {
        percentile(&self.recoveries_us, 50)
    }

    /// Longest recovery.
    pub(crate) fn recovery_max_us(&self) -> Option<u64> {
        self.recoveries_us.last().copied()
    }
}

/// The time from `from_us` to the start of the full coverage that lasts
/// until `to_us`: 0 if `[from_us, to_us)` is covered throughout, `None` if
/// the instant just before `to_us` is not covered. `spans` are the
/// checker's covered spans (sorted, disjoint).
pub(crate) fn recovery_us(spans: &[(u64, u64)], from_us: u64, to_us: u64) -> Option<u64> {
    if to_us <= from_us {
        return Some(0);
    }
    let last = to_us - 1;
    let k = spans.partition_point(|&(start, _)| start <= last);
    let &(start, end) = spans.get(k.checked_sub(1)?)?;
    if end <= last {
        return None;
    }
    Some(start.saturating_sub(from_us))
}

/// Per kind of fault, the stats of every window (see the module
/// documentation). `stale_us` are the sink's stale rejections (any order);
/// `until_us` ends the last window.
pub(crate) fn per_kind(
    checker: &Checker,
    faults: &[FaultRun],
    stale_us: &[u64],
    until_us: u64,
) -> BTreeMap<FaultKind, KindStats> {
    let mut released: Vec<u64> = checker
        .holdings()
        .iter()
        .filter(|h| h.end == HoldingEnd::Released)
        .map(|h| h.end_us)
        .collect();
    released.sort_unstable();
    let mut stale: Vec<u64> = stale_us.to_vec();
    stale.sort_unstable();
    let count_in = |sorted: &[u64], a: u64, b: u64| {
        (sorted.partition_point(|&t| t < b) - sorted.partition_point(|&t| t < a)) as u64
    };
    let cover = Cover::new(checker);
    let mut faults: Vec<&FaultRun> = faults.iter().collect();
    faults.sort_by_key(|f| f.start_us);
    let mut out: BTreeMap<FaultKind, KindStats> = BTreeMap::new();
    for (k, fault) in faults.iter().enumerate() {
        let a = fault.start_us;
        let b = faults
            .get(k + 1)
            .map_or(until_us, |next| next.start_us)
            .max(a);
        let stats = out.entry(fault.kind).or_default();
        stats.count += 1;
        stats.standdowns += count_in(&released, a, b);
        stats.stale += count_in(&stale, a, b);
        stats.uncovered_us += cover.coverage_in(a, b).uncovered_us;
        match recovery_us(cover.spans(), fault.end_us.clamp(a, b), b) {
            Some(r) => stats.recoveries_us.push(r),
            None => stats.unrecovered += 1,
        }
    }
    for stats in out.values_mut() {
        stats.recoveries_us.sort_unstable();
    }
    out
}

/// What one step of the server clock did, over its window (until the next
/// fault, or the end).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ClockStepStats {
    /// When the step was made (history microseconds).
    pub(crate) at_us: u64,
    /// Its size, in microseconds (negative: back).
    pub(crate) step_us: i64,
    /// The server clock's offset after it.
    pub(crate) offset_us: i64,
    /// Leases that ended because their worker saw the clock move.
    pub(crate) detected: u64,
    /// Leases that ended in the window, for any reason.
    pub(crate) standdowns: u64,
    /// From the step until the group was fully covered again for good.
    pub(crate) recovery_us: Option<u64>,
    /// Exclusivity violations that started in the window.
    pub(crate) violations: u64,
    /// Fencing violations whose later holding started in the window.
    pub(crate) fencing: u64,
}

/// The stats of each clock step: `steps` are `(fault index, step, offset)`,
/// `clock_standdowns_us` when leases ended on a server-clock stand-down.
pub(crate) fn clock_steps(
    checker: &Checker,
    faults: &[FaultRun],
    steps: &[(usize, i64, i64)],
    clock_standdowns_us: &[u64],
    until_us: u64,
) -> Vec<ClockStepStats> {
    let released: Vec<u64> = checker
        .holdings()
        .iter()
        .filter(|h| h.end == HoldingEnd::Released)
        .map(|h| h.end_us)
        .collect();
    let in_window = |t: u64, a: u64, b: u64| a <= t && t < b;
    let cover = Cover::new(checker);
    steps
        .iter()
        .map(|&(f, step_us, offset_us)| {
            let a = faults[f].start_us;
            let b = faults
                .iter()
                .map(|g| g.start_us)
                .filter(|&s| s > a)
                .min()
                .unwrap_or(until_us)
                .max(a);
            let count = |ts: &mut dyn Iterator<Item = u64>| {
                ts.filter(|&t| in_window(t, a, b)).count() as u64
            };
            ClockStepStats {
                at_us: a,
                step_us,
                offset_us,
                detected: count(&mut clock_standdowns_us.iter().copied()),
                standdowns: count(&mut released.iter().copied()),
                recovery_us: recovery_us(cover.spans(), a, b),
                violations: count(&mut checker.violations().iter().map(|v| v.start_us)),
                fencing: count(
                    &mut checker
                        .fencing_violations()
                        .iter()
                        .map(|v| v.later.start_us),
                ),
            }
        })
        .collect()
}

/// One failover (of a primary, or in a cluster) as the controller did it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct FailoverRun {
    /// Its fault's index.
    pub(crate) fault: usize,
    /// How long the replication was cut before the promotion (lossy,
    /// split), or the slot held migrating (reshard), in microseconds.
    pub(crate) cut_us: u64,
    /// Bytes of the replication stream the promoted node never got: what
    /// the old primary took after the cut (0 for a coordinated failover).
    pub(crate) lost_bytes: Option<u64>,
    /// Writes the two nodes refused with `NOREPLICAS`
    /// (`--min-replicas-to-write`) from this failover to the next one (or
    /// the end).
    pub(crate) refused: Option<u64>,
    /// Both nodes' `NOREPLICAS` count when it began.
    pub(crate) refused_before: u64,
    /// The promoted node's replication offset at a split's promotion.
    pub(crate) promoted_offset: u64,
    /// Keys moved (a reshard).
    pub(crate) keys_moved: Option<usize>,
    /// How long the controller's part took (FAILOVER, the switch, the
    /// migration), in microseconds.
    pub(crate) took_us: u64,
}

/// What one failover did, over its window (until the next fault, or the
/// end).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FailoverStats {
    pub(crate) kind: FaultKind,
    pub(crate) at_us: u64,
    pub(crate) run: FailoverRun,
    /// Leases that ended in the window.
    pub(crate) standdowns: u64,
    /// From the fault's end (the promotion, the end of the split, the
    /// migration's end) until the group was fully covered again for good.
    pub(crate) recovery_us: Option<u64>,
    /// Exclusivity violations that started in the window.
    pub(crate) violations: u64,
    /// Fencing violations whose later holding started in the window.
    pub(crate) fencing: u64,
}

/// The stats of each failover.
pub(crate) fn failovers(
    checker: &Checker,
    faults: &[FaultRun],
    runs: &[FailoverRun],
    until_us: u64,
) -> Vec<FailoverStats> {
    let released: Vec<u64> = checker
        .holdings()
        .iter()
        .filter(|h| h.end == HoldingEnd::Released)
        .map(|h| h.end_us)
        .collect();
    let in_window = |t: u64, a: u64, b: u64| a <= t && t < b;
    runs.iter()
        .filter_map(|run| {
            let fault = faults.get(run.fault)?;
            let a = fault.start_us;
            let b = faults
                .iter()
                .map(|f| f.start_us)
                .filter(|&s| s > a)
                .min()
                .unwrap_or(until_us)
                .max(a);
            let count = |ts: &mut dyn Iterator<Item = u64>| {
                ts.filter(|&t| in_window(t, a, b)).count() as u64
            };
            Some(FailoverStats {
                kind: fault.kind,
                at_us: a,
                run: run.clone(),
                standdowns: count(&mut released.iter().copied()),
                recovery_us: recovery_us(checker.covered_spans(), fault.end_us.clamp(a, b), b),
                violations: count(&mut checker.violations().iter().map(|v| v.start_us)),
                fencing: count(
                    &mut checker
                        .fencing_violations()
                        .iter()
                        .map(|v| v.later.start_us),
                ),
            })
        })
        .collect()
}

/// How the run was set up, for the report.
#[derive(Clone, Debug)]
pub(crate) struct Setup {
    pub(crate) adapter: &'static str,
    pub(crate) mode: String,
    pub(crate) workers: usize,
    pub(crate) interval_ms: u64,
    pub(crate) seconds: f64,
    pub(crate) seed: u64,
    pub(crate) faults: String,
}

/// The whole result of a run.
#[derive(Clone, Debug)]
pub(crate) struct Report {
    pub(crate) setup: Setup,
    /// The checker's verdict on the history.
    pub(crate) summary: Summary,
    /// Coverage from the moment the group first settled to the shutdown
    /// (per task in an incremental run, see [`Cover`]).
    pub(crate) steady: Coverage,
    pub(crate) sink: SinkStats,
    pub(crate) kinds: BTreeMap<FaultKind, KindStats>,
    /// Worker failures and other notes, printed before the summary.
    pub(crate) notes: Vec<String>,
    /// Sink violations, already rendered with worker names.
    pub(crate) sink_violations: Vec<String>,
    /// Proxy connections accepted, and connections reset by faults.
    pub(crate) proxy: (u64, u64),
    /// Stalls between a task's check and its write longer than any lease
    /// runs: each should come back as a stale write (unless nobody wrote the
    /// task meanwhile).
    pub(crate) long_mid_stalls: u64,
    /// Each step of the server clock (`--faults clock`).
    pub(crate) clock_steps: Vec<ClockStepStats>,
    /// Each failover, split or reshard.
    pub(crate) failovers: Vec<FailoverStats>,
}

fn ms(us: u64) -> String {
    format!("{:.1}", us as f64 / 1000.0)
}

fn opt_ms(us: Option<u64>) -> String {
    us.map_or_else(|| "-".to_owned(), ms)
}

impl Report {
    /// No violation of any kind.
    pub(crate) fn is_ok(&self) -> bool {
        self.summary.is_ok() && self.sink.is_ok()
    }

    /// The totals over every kind of fault.
    fn total(&self) -> KindStats {
        let mut total = KindStats::default();
        for stats in self.kinds.values() {
            total.add(stats);
        }
        total
    }

    /// The full report; its last line is [`Report::last_line`].
    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        for note in &self.notes {
            let _ = writeln!(out, "note: {note}");
        }
        if !self.kinds.is_empty() {
            let _ = writeln!(
                out,
                "{:<10} {:>6} {:>11} {:>6} {:>13} {:>16} {:>16} {:>12}",
                "fault",
                "count",
                "stand-downs",
                "stale",
                "uncovered_ms",
                "recovery_p50_ms",
                "recovery_max_ms",
                "unrecovered"
            );
            let total = self.total();
            let rows = self
                .kinds
                .iter()
                .map(|(k, s)| (k.as_str(), s))
                .chain(std::iter::once(("total", &total)));
            for (name, s) in rows {
                let _ = writeln!(
                    out,
                    "{:<10} {:>6} {:>11} {:>6} {:>13} {:>16} {:>16} {:>12}",
                    name,
                    s.count,
                    s.standdowns,
                    s.stale,
                    ms(s.uncovered_us),
                    opt_ms(s.recovery_p50_us()),
                    opt_ms(s.recovery_max_us()),
                    s.unrecovered
                );
            }
        }
        if !self.clock_steps.is_empty() {
            let _ = writeln!(
                out,
                "{:>10} {:>9} {:>10} {:>9} {:>11} {:>12} {:>10} {:>7}",
                "clock at_s",
                "step_ms",
                "offset_ms",
                "detected",
                "stand-downs",
                "recovery_ms",
                "violations",
                "fencing"
            );
            for c in &self.clock_steps {
                let _ = writeln!(
                    out,
                    "{:>10.3} {:>+9.1} {:>+10.1} {:>9} {:>11} {:>12} {:>10} {:>7}",
                    c.at_us as f64 / 1e6,
                    c.step_us as f64 / 1000.0,
                    c.offset_us as f64 / 1000.0,
                    c.detected,
                    c.standdowns,
                    opt_ms(c.recovery_us),
                    c.violations,
                    c.fencing
                );
            }
        }
        if !self.failovers.is_empty() {
            let _ = writeln!(
                out,
                "{:>10} {:<16} {:>7} {:>10} {:>8} {:>5} {:>7} {:>11} {:>12} {:>10} {:>7}",
                "at_s",
                "failover",
                "cut_ms",
                "lost_bytes",
                "refused",
                "keys",
                "took_ms",
                "stand-downs",
                "recovery_ms",
                "violations",
                "fencing"
            );
            let opt = |v: Option<u64>| v.map_or_else(|| "-".to_owned(), |v| v.to_string());
            for f in &self.failovers {
                let _ = writeln!(
                    out,
                    "{:>10.3} {:<16} {:>7} {:>10} {:>8} {:>5} {:>7} {:>11} {:>12} {:>10} {:>7}",
                    f.at_us as f64 / 1e6,
                    f.kind.as_str(),
                    ms(f.run.cut_us),
                    opt(f.run.lost_bytes),
                    opt(f.run.refused),
                    opt(f.run.keys_moved.map(|k| k as u64)),
                    ms(f.run.took_us),
                    f.standdowns,
                    opt_ms(f.recovery_us),
                    f.violations,
                    f.fencing
                );
            }
        }
        for v in self.summary.violations.iter().take(20) {
            let _ = writeln!(out, "violation: {v}");
        }
        for v in self.summary.fencing.iter().take(20) {
            let _ = writeln!(out, "violation: {v}");
        }
        for a in self.summary.anomalies.iter().take(20) {
            let _ = writeln!(out, "anomaly: {a}");
        }
        for v in self.sink_violations.iter().take(20) {
            let _ = writeln!(out, "sink violation: {v}");
        }
        let _ = writeln!(out, "{}", self.summary);
        let _ = writeln!(
            out,
            "sink: writes={} stale_rejected={} stale_after_stall={} long_mid_task_stalls={} late_accepted={} double_writes={} stale_while_valid={}",
            self.sink.accepted,
            self.sink.stale.len(),
            self.sink.stale_after_stall,
            self.long_mid_stalls,
            self.sink.late_accepted,
            self.sink.double_writes,
            self.sink.stale_while_valid
        );
        let _ = writeln!(
            out,
            "proxy: connections={} resets={}",
            self.proxy.0, self.proxy.1
        );
        out.push_str(&self.last_line());
        out.push('\n');
        out
    }

    /// The one-line summary printed last.
    pub(crate) fn last_line(&self) -> String {
        let s = &self.setup;
        let total = self.total();
        let per_fault: Vec<String> = self
            .kinds
            .iter()
            .map(|(k, st)| {
                format!(
                    "{}:n={},sd={},stale={},rec_ms={}/{}{}",
                    k,
                    st.count,
                    st.standdowns,
                    st.stale,
                    opt_ms(st.recovery_p50_us()),
                    opt_ms(st.recovery_max_us()),
                    if st.unrecovered > 0 {
                        format!(",unrecovered={}", st.unrecovered)
                    } else {
                        String::new()
                    }
                )
            })
            .collect();
        format!(
            "chaos: {} adapter={} mode={} workers={} interval_ms={} seconds={:.1} seed={} faults={} \
             violations={} fencing={} anomalies={} double_writes={} stale_while_valid={} \
             coverage={:.4} coverage_steady={:.4} writes={} stale_rejected={} injected={} \
             standdowns={} recovery_p50_ms={} recovery_max_ms={} unrecovered={} per_fault=[{}]",
            if self.is_ok() { "ok" } else { "VIOLATION" },
            s.adapter,
            s.mode,
            s.workers,
            s.interval_ms,
            s.seconds,
            s.seed,
            s.faults,
            self.summary.violation_count,
            self.summary.fencing_count,
            self.summary.anomaly_count,
            self.sink.double_writes,
            self.sink.stale_while_valid,
            // Per task in an incremental run (see `Cover`).
            self.summary
                .tasks
                .as_ref()
                .map_or(self.summary.coverage.fraction(), |t| t.coverage),
            self.steady.fraction(),
            self.sink.accepted,
            self.sink.stale.len(),
            total.count,
            total.standdowns,
            opt_ms(total.recovery_p50_us()),
            opt_ms(total.recovery_max_us()),
            total.unrecovered,
            per_fault.join(" ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lease_history::Record;

    #[test]
    fn recovery_is_the_start_of_the_last_covered_span() {
        let spans = [(0, 100), (150, 300), (400, 1000)];
        assert_eq!(recovery_us(&spans, 50, 90), Some(0)); // covered throughout
        assert_eq!(recovery_us(&spans, 50, 200), Some(100)); // back at 150
        assert_eq!(recovery_us(&spans, 50, 600), Some(350)); // back at 400
        assert_eq!(recovery_us(&spans, 50, 350), None); // ends uncovered
        assert_eq!(recovery_us(&spans, 450, 500), Some(0));
        assert_eq!(recovery_us(&[], 0, 10), None);
        assert_eq!(recovery_us(&spans, 10, 10), Some(0));
    }

    #[test]
    fn windows_run_from_one_fault_to_the_next() {
        // One worker holds (0, 1) from 0; a restart at 1000 makes it stand
        // down at 1200 and own again at 1500; a flush at 3000 costs nothing.
        let records = vec![
            Record::join("w0", 0),
            Record::own("w0", 0, 1, 10, 0),
            Record::fault("restart", 1000),
            Record::release("w0", 0, 1, 1200),
            Record::own("w0", 0, 1, 14, 1500),
            Record::fault("flush", 3000),
        ];
        let checker = Checker::new(&records, Some(4000));
        let faults = [
            FaultRun {
                kind: FaultKind::Restart,
                start_us: 1000,
                end_us: 1000,
            },
            FaultRun {
                kind: FaultKind::Flush,
                start_us: 3000,
                end_us: 3000,
            },
        ];
        let kinds = per_kind(&checker, &faults, &[1300, 3500], 4000);
        let restart = &kinds[&FaultKind::Restart];
        assert_eq!(
            (restart.count, restart.standdowns, restart.stale),
            (1, 1, 1)
        );
        assert_eq!(restart.uncovered_us, 300);
        assert_eq!(restart.recoveries_us, vec![500]);
        let flush = &kinds[&FaultKind::Flush];
        assert_eq!(
            (flush.standdowns, flush.stale, flush.uncovered_us),
            (0, 1, 0)
        );
        assert_eq!(flush.recoveries_us, vec![0]);
    }

    /// An incremental run: coverage and recovery come from the task sets.
    /// Two workers hold the halves of n = 2; w1 crashes at 1000 and its
    /// tasks wait until w0 holds all of n = 1 at 1600.
    #[test]
    fn task_set_runs_recover_on_task_coverage() {
        use lease_history::{Mapping, Part};
        let own = |w: &str, i, n, token, at| {
            Record::own_parts(
                w,
                i,
                n,
                token,
                Mapping::Consistent,
                vec![Part::whole(i, n, token)],
                at,
            )
        };
        let records = vec![
            own("w0", 0, 2, 10, 0),
            own("w1", 1, 2, 10, 0),
            Record::fault("crash", 1000),
            Record::release("w1", 1, 2, 1000),
            own("w0", 0, 1, 13, 1600),
        ];
        let checker = Checker::new(&records, Some(3000));
        assert!(checker.tasks().is_some());
        // Whole pairs: a task-set history is never "fully covered".
        assert!(checker.covered_spans().is_empty());
        let faults = [FaultRun {
            kind: FaultKind::Crash,
            start_us: 1000,
            end_us: 1000,
        }];
        let kinds = per_kind(&checker, &faults, &[], 3000);
        let crash = &kinds[&FaultKind::Crash];
        assert_eq!(crash.recoveries_us, vec![600]);
        assert_eq!(crash.unrecovered, 0);
        let half = lease_history::tasks::TaskSet::pair(Mapping::Consistent, 1, 2).len();
        let lost = 600 * u64::from(half) / lease_history::tasks::TASKS as u64;
        assert!(
            crash.uncovered_us.abs_diff(lost) <= 1,
            "{} vs {lost}",
            crash.uncovered_us
        );
        let cover = Cover::new(&checker);
        assert_eq!(cover.spans(), &[(0, 1000), (1600, 3000)]);
    }
}
