//! Per task: exclusivity, fencing and coverage of task-set histories
//! (incremental handover, DESIGN section 6).
//!
//! When the history names a mapping, every holding is a set of tasks of
//! `0..TASKS`: a whole pair `(i, n)` is `T(i, n)`, a task-set holding the
//! union of its parts. Then:
//!
//! - **exclusivity per task**: at every instant at most one worker holds a
//!   task;
//! - **fencing per task**: two workers' holdings that share a task have
//!   tokens at least 2 apart for it, ordered as the holdings start in time
//!   (each part carries its own token);
//! - **task coverage**: the share of time-weighted tasks held by exactly one
//!   worker.

use std::collections::HashMap;
use std::fmt;

use super::fencing::Top2;
use super::holdings::Holding;
use super::{Capped, MAX_REPORTED};

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
/// apart, or out of time order.
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
    /// The later holding's token for it.
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
    /// The first [`MAX_REPORTED`] of them, by start.
    pub violations: Vec<TaskViolation>,
    /// Task fencing violations, exact (one per offending later holding).
    pub fencing_count: u64,
    /// The first [`MAX_REPORTED`] of them.
    pub fencing: Vec<TaskFencingViolation>,
    /// The share of time-weighted tasks held by exactly one worker, over the
    /// whole run; 1.0 for an empty run.
    pub coverage: f64,
}

impl TaskSummary {
    /// No task overlap and no task fencing violation.
    pub fn is_ok(&self) -> bool {
        self.violation_count == 0 && self.fencing_count == 0
    }
}

/// One holding's tasks, with the token it holds each with.
struct Held {
    set: TaskSet,
    tokens: Vec<(usize, u64)>,
}

/// The tasks of `h` under `mapping`: `T(i, n)` for a whole pair, the union
/// of its parts (each task with the largest token of a part that has it).
/// `sets` remembers the task set of every part seen (keyed without its
/// token): a run repeats a few parts in thousands of holdings.
fn held(h: &Holding, mapping: Mapping, sets: &mut HashMap<[u32; 4], TaskSet>) -> Held {
    let mut set_of = |i: u32, n: u32, pi: u32, pn: u32| {
        *sets
            .entry([i, n, pi, pn])
            .or_insert_with(|| TaskSet::part(mapping, &Part::intersection(i, n, pi, pn, 0)))
    };
    if h.parts.is_empty() {
        let set = set_of(h.i, h.n, h.i, h.n);
        let tokens = set.iter().map(|t| (t, h.token)).collect();
        return Held { set, tokens };
    }
    let mut tokens = vec![None::<u64>; TASKS];
    let mut set = TaskSet::default();
    for part in &h.parts {
        let tasks = set_of(part.i, part.n, part.pi, part.pn);
        for t in tasks.iter() {
            let token = tokens[t].get_or_insert(part.token);
            *token = (*token).max(part.token);
        }
        set = set.union(&tasks);
    }
    let tokens = tokens
        .into_iter()
        .enumerate()
        .filter_map(|(t, token)| token.map(|k| (t, k)))
        .collect();
    Held { set, tokens }
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
    let (violations, coverage) = sweep(holdings, holder, &held, start_us, end_us);
    let fencing = fencing(holdings, holder, &held);
    TaskSummary {
        mapping,
        violation_count: violations.count,
        violations: violations.items,
        fencing_count: fencing.count,
        fencing: fencing.items,
        coverage,
    }
}

/// Exclusivity and coverage: one sweep over the holdings' boundaries (ends
/// before starts at one instant, so a handover is no overlap).
fn sweep(
    holdings: &[Holding],
    holder: &[usize],
    held: &[Held],
    start_us: u64,
    end_us: u64,
) -> (Capped<TaskViolation>, f64) {
    let mut bounds: Vec<(u64, bool, usize)> = Vec::with_capacity(2 * holdings.len());
    for (k, h) in holdings.iter().enumerate() {
        if h.end_us > h.start_us {
            bounds.push((h.start_us, true, k));
            bounds.push((h.end_us, false, k));
        }
    }
    bounds.sort_unstable();
    let mut violations = Capped::default();
    let mut active: Vec<usize> = Vec::new();
    let mut holders = vec![0u32; TASKS];
    let mut exactly_one: u64 = 0;
    // Task-microseconds held by exactly one worker.
    let mut covered: u128 = 0;
    let mut last = start_us;
    for (t, is_start, k) in bounds {
        covered += u128::from(exactly_one) * u128::from(t - last);
        last = t;
        if is_start {
            for &other in &active {
                let shared = held[other].set.common(&held[k].set);
                if shared > 0 && holder[other] != holder[k] {
                    let (first, second) = (&holdings[other], &holdings[k]);
                    let overlap_us = first.end_us.min(second.end_us) - second.start_us;
                    if violations.items.len() < MAX_REPORTED {
                        violations.items.push(TaskViolation {
                            first: first.clone(),
                            second: second.clone(),
                            shared,
                            start_us: second.start_us,
                            overlap_us,
                        });
                    }
                    violations.count += 1;
                }
            }
            active.push(k);
            for task in held[k].set.iter() {
                holders[task] += 1;
                match holders[task] {
                    1 => exactly_one += 1,
                    2 => exactly_one -= 1,
                    _ => {}
                }
            }
        } else {
            active.retain(|&a| a != k);
            for task in held[k].set.iter() {
                holders[task] -= 1;
                match holders[task] {
                    0 => exactly_one -= 1,
                    1 => exactly_one += 1,
                    _ => {}
                }
            }
        }
    }
    let span = u128::from(end_us.saturating_sub(start_us)) * TASKS as u128;
    let coverage = if span == 0 {
        1.0
    } else {
        covered as f64 / span as f64
    };
    (violations, coverage)
}

/// In order of start (then token), each holding's token for each of its
/// tasks must be at least 2 above the best earlier token of another worker
/// for that task.
fn fencing(holdings: &[Holding], holder: &[usize], held: &[Held]) -> Capped<TaskFencingViolation> {
    let mut out = Capped::default();
    let mut order: Vec<usize> = (0..holdings.len()).collect();
    order.sort_by_key(|&k| (holdings[k].start_us, holdings[k].token));
    let mut per_task = vec![Top2::default(); TASKS];
    for k in order {
        let w = holder[k];
        let offending = held[k].tokens.iter().find_map(|&(task, token)| {
            let (best, earlier, _) = per_task[task].best_except(w)?;
            (token < best.saturating_add(2)).then_some((task, token, best, earlier))
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
        for &(task, token) in &held[k].tokens {
            per_task[task].insert((token, k, w));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::checker::{Checker, check};
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
