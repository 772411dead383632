//! Per task: exclusivity, fencing and coverage of task-set histories
//! (incremental handover, rule 13 of docs/protocol.md; the format is in
//! docs/history-format.md).
//!
//! When the history names a mapping, every holding is a set of tasks of
//! `0..TASKS`: a whole pair `(i, n)` is `T(i, n)`, a task-set holding the
//! union of its parts. Then:
//!
//! - **exclusivity per task**: at every instant at most one worker holds a
//!   task;
//! - **fencing per part**: every part that holds a task has a token at
//!   least 2 above every token another worker held that task with before
//!   (each part is a lease of its own, with its own token: a worker that
//!   holds a task in two parts holds it under both tokens, so the smaller
//!   one is judged too, not only the largest);
//! - **task coverage**: the share of time-weighted tasks held by exactly one
//!   worker.

use std::collections::HashMap;
use std::fmt;

use super::Capped;
use super::fencing::Top2;
use super::holdings::Holding;
use super::sweep::Coverage;

use crate::record::{Mapping, Part};
use crate::tasks::{TASKS, TaskSet};

/// Two workers' holdings that held a task at once.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TaskViolation {
    /// The holding that started first.
    pub first: Holding,
    /// The holding that started second.
    pub second: Holding,
    /// How many tasks both held.
    pub shared: u32,
    /// Where the overlap starts (the second holding's start).
    pub start_us: u64,
    /// How long they overlap.
    pub overlap_us: u64,
}

impl fmt::Display for TaskViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "task overlap at {} us for {} us on {} tasks: {} vs {}",
            self.start_us, self.overlap_us, self.shared, self.first, self.second
        )
    }
}

/// A task held by two workers one after the other with tokens less than 2
/// apart, or out of time order: the later holding has a part holding the
/// task with a token less than 2 above the earlier one's.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TaskFencingViolation {
    /// The earlier holding: the one with the largest token for the task
    /// among the earlier holdings of other workers.
    pub earlier: Holding,
    /// The later holding.
    pub later: Holding,
    /// The first task at fault.
    pub task: u32,
    /// The earlier holding's token for it.
    pub earlier_token: u64,
    /// The token of the later holding's part at fault.
    pub later_token: u64,
}

impl fmt::Display for TaskFencingViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "task fencing: task {} token {} after {} ({} then {})",
            self.task, self.later_token, self.earlier_token, self.earlier, self.later
        )
    }
}

/// What the per-task checks found.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskSummary {
    /// The history's mapping.
    pub mapping: Mapping,
    /// Task overlaps between two workers' holdings, exact.
    pub violation_count: u64,
    /// The first [`MAX_REPORTED`](super::MAX_REPORTED) of them, by start.
    pub violations: Vec<TaskViolation>,
    /// Task fencing violations, exact (one per offending later holding).
    pub fencing_count: u64,
    /// The first [`MAX_REPORTED`](super::MAX_REPORTED) of them.
    pub fencing: Vec<TaskFencingViolation>,
    /// The share of time-weighted tasks held by exactly one worker, over the
    /// whole run; 1.0 for an empty run.
    pub coverage: f64,
    /// The task coverage over time, for windows of the run
    /// ([`TaskCoverage::fraction_in`], [`TaskCoverage::covered_spans`]).
    pub timeline: TaskCoverage,
}

impl TaskSummary {
    /// No task overlap and no task fencing violation.
    pub fn is_ok(&self) -> bool {
        self.violation_count == 0 && self.fencing_count == 0
    }
}

/// One holding's tasks, and each part's tasks with its token.
struct Held {
    set: TaskSet,
    parts: Vec<(TaskSet, u64)>,
}

/// The tasks of `h` under `mapping`: `T(i, n)` for a whole pair, the union
/// of its parts. `sets` remembers the task set of every part seen (keyed
/// without its token): a run repeats a few parts in thousands of holdings.
fn held(h: &Holding, mapping: Mapping, sets: &mut HashMap<[u32; 4], TaskSet>) -> Held {
    let mut set_of = |i: u32, n: u32, pi: u32, pn: u32| {
        *sets
            .entry([i, n, pi, pn])
            .or_insert_with(|| TaskSet::part(mapping, &Part::intersection(i, n, pi, pn, 0)))
    };
    if h.parts.is_empty() {
        let set = set_of(h.i, h.n, h.i, h.n);
        return Held {
            set,
            parts: vec![(set, h.token)],
        };
    }
    let mut set = TaskSet::default();
    let mut parts = Vec::with_capacity(h.parts.len());
    for part in &h.parts {
        let tasks = set_of(part.i, part.n, part.pi, part.pn);
        set = set.union(&tasks);
        parts.push((tasks, part.token));
    }
    Held { set, parts }
}

/// Checks every holding per task; `holder[k]` is the worker of
/// `holdings[k]`; the run is `[start_us, end_us)`.
pub(crate) fn check(
    holdings: &[Holding],
    holder: &[usize],
    mapping: Mapping,
    start_us: u64,
    end_us: u64,
) -> TaskSummary {
    let mut sets = HashMap::new();
    let held: Vec<Held> = holdings
        .iter()
        .map(|h| held(h, mapping, &mut sets))
        .collect();
    let mut violations = Capped::default();
    let steps = sweep(
        holdings,
        holder,
        &held,
        &TaskSet::all(),
        Some(&mut violations),
    );
    let timeline = TaskCoverage {
        steps,
        tasks: TASKS as u32,
        start_us,
        end_us,
    };
    let fencing = fencing(holdings, holder, &held);
    TaskSummary {
        mapping,
        violation_count: violations.count,
        violations: violations.items,
        fencing_count: fencing.count,
        fencing: fencing.items,
        coverage: timeline.fraction_in(start_us, end_us),
        timeline,
    }
}

/// The per-task coverage of a run over time: how many tasks of a chosen set
/// are held by exactly one worker, and how many by nobody, from each
/// boundary of a holding on. The checker keeps one over all tasks
/// ([`TaskSummary::timeline`]); [`TaskCoverage::of`] makes one for any
/// holdings, mapping and subset of tasks (whole pairs included: a whole
/// pair `(i, n)` holds `T(i, n)` under the mapping given).
#[derive(Clone, Debug, PartialEq)]
pub struct TaskCoverage {
    /// `(from_us, exactly one, nobody)`, by instant from 0; each lasts
    /// until the next (the last until `end_us`).
    steps: Vec<(u64, u32, u32)>,
    tasks: u32,
    start_us: u64,
    end_us: u64,
}

impl TaskCoverage {
    /// The coverage over `[start_us, end_us)` of the tasks in `tasks`, by
    /// `holdings` read under `mapping`.
    pub fn of(
        holdings: &[Holding],
        mapping: Mapping,
        tasks: &TaskSet,
        start_us: u64,
        end_us: u64,
    ) -> Self {
        let mut sets = HashMap::new();
        let held: Vec<Held> = holdings
            .iter()
            .map(|h| held(h, mapping, &mut sets))
            .collect();
        let holder: Vec<usize> = (0..holdings.len()).collect();
        let steps = sweep(holdings, &holder, &held, tasks, None);
        Self {
            steps,
            tasks: tasks.len(),
            start_us,
            end_us,
        }
    }

    /// The `(exactly one, nobody)` task-microseconds over `[from_us, to_us)`,
    /// clipped to the run.
    fn integrals(&self, from_us: u64, to_us: u64) -> (u128, u128) {
        let (from, to) = (from_us.max(self.start_us), to_us.min(self.end_us));
        let (mut once, mut nobody) = (0u128, 0u128);
        for (k, &(at, one, none)) in self.steps.iter().enumerate() {
            let until = self.steps.get(k + 1).map_or(self.end_us, |s| s.0);
            let (a, b) = (at.max(from), until.min(to));
            if b > a {
                once += u128::from(one) * u128::from(b - a);
                nobody += u128::from(none) * u128::from(b - a);
            }
        }
        (once, nobody)
    }

    /// The share of time-weighted tasks held by exactly one worker over
    /// `[from_us, to_us)` (1.0 for an empty window or no tasks).
    pub fn fraction_in(&self, from_us: u64, to_us: u64) -> f64 {
        let span = u128::from(to_us.saturating_sub(from_us)) * u128::from(self.tasks);
        if span == 0 {
            return 1.0;
        }
        self.integrals(from_us, to_us).0 as f64 / span as f64
    }

    /// Task coverage over `[from_us, to_us)` as a [`Coverage`]:
    /// `covered_us` is the task-microseconds held by exactly one worker
    /// divided by the number of tasks (the window's length times
    /// [`TaskCoverage::fraction_in`]), so a whole-pair report can show it.
    pub fn coverage_in(&self, from_us: u64, to_us: u64) -> Coverage {
        let len = to_us.saturating_sub(from_us);
        let covered_us = if self.tasks == 0 {
            len
        } else {
            let once = self.integrals(from_us, to_us).0 / u128::from(self.tasks);
            u64::try_from(once).unwrap_or(len).min(len)
        };
        Coverage {
            from_us,
            to_us: from_us + len,
            covered_us,
            uncovered_us: len - covered_us,
        }
    }

    /// Per task, the mean time in microseconds it was held by nobody over
    /// `[from_us, to_us)` (0 with no tasks).
    pub fn unheld_us_in(&self, from_us: u64, to_us: u64) -> f64 {
        if self.tasks == 0 {
            return 0.0;
        }
        self.integrals(from_us, to_us).1 as f64 / f64::from(self.tasks)
    }

    /// The spans `[from, to)` during which every task is held by exactly
    /// one worker (sorted, disjoint, not touching), within the run.
    pub fn covered_spans(&self) -> Vec<(u64, u64)> {
        let mut out: Vec<(u64, u64)> = Vec::new();
        for (k, &(at, one, _)) in self.steps.iter().enumerate() {
            let until = self.steps.get(k + 1).map_or(self.end_us, |s| s.0);
            let (a, b) = (at.max(self.start_us), until.min(self.end_us));
            if one != self.tasks || b <= a {
                continue;
            }
            match out.last_mut() {
                Some(last) if last.1 == a => last.1 = b,
                _ => out.push((a, b)),
            }
        }
        out
    }
}

/// Task owner changes over `[from_us, to_us)`: per task, each holding that
/// starts in the window by another worker than the task's previous holder
/// (idle gaps ignored: a task handed from A to B counts once, however long
/// nobody held it between). The previous holder may come from before the
/// window. `holdings` are read under `mapping`.
pub fn task_moves(holdings: &[Holding], mapping: Mapping, from_us: u64, to_us: u64) -> u64 {
    let mut sets = HashMap::new();
    let mut order: Vec<&Holding> = holdings
        .iter()
        .filter(|h| h.end_us > h.start_us && h.start_us < to_us)
        .collect();
    order.sort_by_key(|h| h.start_us);
    let mut last: Vec<Option<&str>> = vec![None; TASKS];
    let mut moves = 0;
    for h in order {
        let set = held(h, mapping, &mut sets).set;
        for t in set.iter() {
            let prev = last[t].replace(h.worker.as_str());
            if h.start_us >= from_us && prev.is_some_and(|p| p != h.worker) {
                moves += 1;
            }
        }
    }
    moves
}

/// Exclusivity and coverage: one sweep over the holdings' boundaries (ends
/// before starts at one instant, so a handover is no overlap). Returns the
/// coverage steps of the tasks in `of`; task overlaps between different
/// holders go to `violations` when given.
fn sweep(
    holdings: &[Holding],
    holder: &[usize],
    held: &[Held],
    of: &TaskSet,
    mut violations: Option<&mut Capped<TaskViolation>>,
) -> Vec<(u64, u32, u32)> {
    let mut bounds: Vec<(u64, bool, usize)> = Vec::with_capacity(2 * holdings.len());
    for (k, h) in holdings.iter().enumerate() {
        if h.end_us > h.start_us {
            bounds.push((h.start_us, true, k));
            bounds.push((h.end_us, false, k));
        }
    }
    bounds.sort_unstable();
    let mut active: Vec<usize> = Vec::new();
    let mut holders = vec![0u32; TASKS];
    let mut exactly_one: u32 = 0;
    let mut nobody: u32 = of.len();
    let mut steps: Vec<(u64, u32, u32)> = vec![(0, exactly_one, nobody)];
    for (t, is_start, k) in bounds {
        if is_start {
            if let Some(violations) = violations.as_deref_mut() {
                for &other in &active {
                    let shared = held[other].set.common(&held[k].set);
                    if shared > 0 && holder[other] != holder[k] {
                        let (first, second) = (&holdings[other], &holdings[k]);
                        let overlap_us = first.end_us.min(second.end_us) - second.start_us;
                        violations.push(TaskViolation {
                            first: first.clone(),
                            second: second.clone(),
                            shared,
                            start_us: second.start_us,
                            overlap_us,
                        });
                    }
                }
            }
            active.push(k);
        } else {
            active.retain(|&a| a != k);
        }
        for task in held[k].set.iter().filter(|&task| of.contains(task)) {
            let before = holders[task];
            holders[task] = if is_start { before + 1 } else { before - 1 };
            match (before, holders[task]) {
                (0, 1) => {
                    exactly_one += 1;
                    nobody -= 1;
                }
                (1, 0) => {
                    exactly_one -= 1;
                    nobody += 1;
                }
                (1, 2) => exactly_one -= 1,
                (2, 1) => exactly_one += 1,
                _ => {}
            }
        }
        match steps.last_mut() {
            Some(last) if last.0 == t => (last.1, last.2) = (exactly_one, nobody),
            _ => steps.push((t, exactly_one, nobody)),
        }
    }
    steps
}

/// In order of start (then token), each part of each holding must hold
/// each of its tasks with a token at least 2 above the best earlier token of
/// another worker for that task.
fn fencing(holdings: &[Holding], holder: &[usize], held: &[Held]) -> Capped<TaskFencingViolation> {
    let mut out = Capped::default();
    let mut order: Vec<usize> = (0..holdings.len()).collect();
    order.sort_by_key(|&k| (holdings[k].start_us, holdings[k].token));
    let mut per_task = vec![Top2::default(); TASKS];
    for k in order {
        let w = holder[k];
        let offending = held[k].parts.iter().find_map(|(tasks, token)| {
            tasks.iter().find_map(|task| {
                let (best, earlier, _) = per_task[task].best_except(w)?;
                (*token < best.saturating_add(2)).then_some((task, *token, best, earlier))
            })
        });
        if let Some((task, later_token, earlier_token, earlier)) = offending {
            out.push(TaskFencingViolation {
                earlier: holdings[earlier].clone(),
                later: holdings[k].clone(),
                task: u32::try_from(task).unwrap_or(u32::MAX),
                earlier_token,
                later_token,
            });
        }
        for (tasks, token) in &held[k].parts {
            for task in tasks.iter() {
                per_task[task].insert((*token, k, w));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::checker::{Checker, TaskCoverage, check, task_moves};
    use crate::record::{Mapping, Part, Record};
    use crate::tasks::TaskSet;

    const C: Mapping = Mapping::Consistent;

    fn own(w: &str, i: u32, n: u32, token: u64, parts: Vec<Part>, at: u64) -> Record {
        Record::own_parts(w, i, n, token, C, parts, at)
    }

    /// n = 2 grows to 3 under the jump mapping, incrementally: the settled
    /// workers keep `T(i, 3) ∩ T(i, 2)` (all of `T(i, 3)`), the newcomer
    /// takes `T(2, 3)` once they let go of it.
    fn handover(w2_from: u64, w2_token: u64) -> Vec<Record> {
        vec![
            own("w0", 0, 2, 10, vec![Part::whole(0, 2, 10)], 0),
            own("w1", 1, 2, 10, vec![Part::whole(1, 2, 10)], 0),
            own(
                "w0",
                0,
                3,
                12,
                vec![Part::intersection(0, 3, 0, 2, 12)],
                1_000,
            ),
            own(
                "w1",
                1,
                3,
                12,
                vec![Part::intersection(1, 3, 1, 2, 12)],
                1_000,
            ),
            own(
                "w2",
                2,
                3,
                w2_token,
                vec![Part::whole(2, 3, w2_token)],
                w2_from,
            ),
            Record::release("w0", 0, 3, 3_000),
            Record::release("w1", 1, 3, 3_000),
            Record::release("w2", 2, 3, 3_000),
        ]
    }

    #[test]
    fn an_incremental_handover_is_exclusive_per_task_and_fully_covered() {
        let c = Checker::new(&handover(1_000, 12), None);
        let s = c.summary();
        assert!(s.is_ok(), "{s}");
        let t = c.tasks().expect("a task-set history");
        assert_eq!((t.violation_count, t.fencing_count), (0, 0));
        assert_eq!(t.coverage, 1.0);
        // Replacing its own holding is no violation, and no stand-down.
        assert_eq!((s.violation_count, s.stand_downs.count), (0, 0));
        assert!(
            s.to_string()
                .ends_with(" task_violations=0 task_fencing=0 task_coverage=1.0000"),
            "{s}"
        );
        // The newcomer late by 500 us: those tasks were held by nobody.
        let late = check(&handover(1_500, 12), None).tasks.unwrap();
        let moved = TaskSet::pair(C, 2, 3).len() as f64 / crate::tasks::TASKS as f64;
        let expected = 1.0 - moved * 500.0 / 3_000.0;
        assert!(
            (late.coverage - expected).abs() < 1e-9,
            "{} vs {expected}",
            late.coverage
        );
        assert!(late.is_ok());
    }

    /// The coverage over time: windows, full-coverage spans, a subset of
    /// the tasks, and the owner changes of the handover.
    #[test]
    fn task_coverage_in_windows_and_task_moves() {
        let c = Checker::new(&handover(1_500, 12), None);
        let t = c.tasks().unwrap();
        let moved = TaskSet::pair(C, 2, 3);
        let share = moved.len() as f64 / crate::tasks::TASKS as f64;
        // [1000, 1500): the newcomer's tasks are held by nobody.
        assert!((t.timeline.fraction_in(1_000, 1_500) - (1.0 - share)).abs() < 1e-9);
        assert_eq!(t.timeline.fraction_in(1_500, 3_000), 1.0);
        assert_eq!(t.timeline.fraction_in(0, 1_000), 1.0);
        assert_eq!(t.timeline.covered_spans(), vec![(0, 1_000), (1_500, 3_000)]);
        assert!((t.timeline.fraction_in(0, 3_000) - t.coverage).abs() < 1e-12);
        let w = t.timeline.coverage_in(1_000, 2_000);
        let lost = (share * 500.0) as u64;
        assert!(w.uncovered_us.abs_diff(lost) <= 1, "{w:?} vs {lost}");
        assert_eq!(w.covered_us + w.uncovered_us, 1_000);
        // Only the newcomer's tasks, under the history's mapping.
        let only = TaskCoverage::of(c.holdings(), C, &moved, 0, 3_000);
        assert!((only.fraction_in(1_000, 1_500)).abs() < 1e-12);
        assert!((only.unheld_us_in(0, 3_000) - 500.0).abs() < 1e-9);
        // Each of them changed hands once (w0 or w1 to w2); nothing else.
        assert_eq!(
            task_moves(c.holdings(), C, 0, 3_000),
            u64::from(moved.len())
        );
        assert_eq!(task_moves(c.holdings(), C, 1_600, 3_000), 0);
        // Whole pairs read under the modulo mapping.
        let whole = vec![
            Record::own("w0", 0, 1, 1, 0),
            Record::release("w0", 0, 1, 100),
            Record::own("w1", 0, 2, 3, 200),
            Record::own("w2", 1, 2, 3, 200),
            Record::release("w1", 0, 2, 400),
            Record::release("w2", 1, 2, 400),
        ];
        let c = Checker::new(&whole, None);
        let m = TaskCoverage::of(c.holdings(), Mapping::Modulo, &TaskSet::all(), 0, 400);
        assert!((m.fraction_in(0, 400) - 0.75).abs() < 1e-12);
        assert_eq!(m.covered_spans(), vec![(0, 100), (200, 400)]);
        assert_eq!(
            task_moves(c.holdings(), Mapping::Modulo, 0, 400),
            crate::tasks::TASKS as u64
        );
    }

    /// Negative control: w0 keeps all of `T(0, 2)` (a part it should have
    /// let go of) while w2 already holds `T(2, 3)`, some of which is w0's.
    #[test]
    fn a_part_kept_too_long_is_a_task_overlap() {
        let mut records = handover(1_000, 12);
        records[2] = own("w0", 0, 3, 12, vec![Part::whole(0, 2, 12)], 1_000);
        let c = Checker::new(&records, None);
        let t = c.tasks().unwrap();
        assert_eq!(t.violation_count, 1, "{:?}", t.violations);
        let v = &t.violations[0];
        assert_eq!(
            (v.first.worker.as_str(), v.second.worker.as_str()),
            ("w0", "w2")
        );
        let lost = TaskSet::pair(C, 0, 2).common(&TaskSet::pair(C, 2, 3));
        assert_eq!((v.shared, v.start_us, v.overlap_us), (lost, 1_000, 2_000));
        assert!(!c.summary().is_ok());
        assert!(c.summary().to_string().contains(" task_violations=1 "));
    }

    /// Negative control: the newcomer's token is only 1 above the token the
    /// tasks were held with before.
    #[test]
    fn a_task_token_less_than_two_above_is_a_fencing_violation() {
        let c = Checker::new(&handover(1_000, 11), None);
        let t = c.tasks().unwrap();
        assert_eq!(t.violation_count, 0);
        assert_eq!(t.fencing_count, 1, "{:?}", t.fencing);
        let f = &t.fencing[0];
        assert_eq!((f.earlier_token, f.later_token), (10, 11));
        assert_eq!(f.later.worker, "w2");
        assert!(TaskSet::pair(C, 2, 3).contains(f.task as usize));
        assert!(!c.summary().is_ok());
    }

    /// Negative control: a whole pair of another `n` held across a task
    /// set's tasks is caught per task too, and a line naming another
    /// mapping is an anomaly.
    #[test]
    fn whole_pairs_and_other_mappings_are_judged_against_task_sets() {
        let records = vec![
            own("w0", 0, 2, 10, vec![Part::whole(0, 2, 10)], 0),
            Record::own("w1", 0, 3, 12, 500),
            Record::release("w0", 0, 2, 1_000),
            Record::release("w1", 0, 3, 1_000),
        ];
        let t = check(&records, None).tasks.unwrap();
        // T(0, 3) is inside T(0, 2) under the jump mapping.
        assert_eq!(t.violation_count, 1);
        assert_eq!(t.violations[0].shared, TaskSet::pair(C, 0, 3).len());
        let mixed = vec![
            own("w0", 0, 1, 1, vec![Part::whole(0, 1, 1)], 0),
            Record::own_parts(
                "w1",
                0,
                1,
                3,
                Mapping::Modulo,
                vec![Part::whole(0, 1, 3)],
                10,
            ),
        ];
        let s = check(&mixed, None);
        assert_eq!(s.anomaly_count, 1, "{s}");
        assert!(!s.is_ok());
    }
}
