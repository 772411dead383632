//! What the user's loop did with its leases: a [`TaskRecorder`] the loop
//! calls when it starts and finishes each task, and [`check_tasks`], which
//! judges the result per task.
//!
//! ```text
//! {"worker":"w1","event":"start","task":7,"token":12,"at_us":1250000}
//! {"worker":"w1","event":"finish","task":7,"token":12,"accepted":true,"at_us":1260000}
//! {"event":"fault","kind":"restart","at_us":5000000}
//! ```
//!
//! `start` is written before the task's work begins, `finish` when it ended,
//! with `accepted` telling whether the task's result was kept (a fencing
//! store rejects a write carrying a token older than the newest it has seen
//! for the task: `accepted: false`). `at_us` is microseconds since the
//! recorder was created, on the clock it was given: the clock of the adapter
//! that issued the leases, so that paused or simulated time is the time of
//! the history.
//!
//! The checker knows nothing of the protocol: for each task it finds
//!
//! - **double processing**: two accepted runs of one task that overlap in
//!   time, by two workers or by one worker under two leases (runs are
//!   half-open, `[start, finish)`);
//! - **stale tokens**: an accepted run whose token is not newer than the
//!   token of an accepted run of the same task by another worker that
//!   finished before it, or older than any accepted run's token;
//! - **anomalies**: a finish without its start, or a second start of a
//!   task the same worker is still running under the same token.
//!
//! A run that never finishes (its worker crashed) is counted, not judged.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use serde::{Deserialize, Serialize};

/// One line of a task history.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "lowercase")]
pub enum TaskRecord {
    /// A worker started processing a task under a lease.
    Start {
        /// The worker's name.
        worker: String,
        /// The task's id.
        task: u64,
        /// The fencing token of the lease it processes the task under.
        token: u64,
        /// When the work began.
        at_us: u64,
    },
    /// A worker finished processing a task.
    Finish {
        /// The worker's name.
        worker: String,
        /// The task's id.
        task: u64,
        /// The fencing token it processed the task under.
        token: u64,
        /// Whether the result was kept (`false`: the fencing store rejected
        /// the token as stale).
        accepted: bool,
        /// When the work ended.
        at_us: u64,
    },
    /// A fault the test injected.
    Fault {
        /// What kind of fault (`"crash"`, `"restart"`, ...).
        kind: String,
        /// Free-form detail (the worker it hit, the duration).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
        /// When it was injected.
        at_us: u64,
    },
}

impl TaskRecord {
    /// The line's instant.
    pub fn at_us(&self) -> u64 {
        match self {
            TaskRecord::Start { at_us, .. }
            | TaskRecord::Finish { at_us, .. }
            | TaskRecord::Fault { at_us, .. } => *at_us,
        }
    }

    /// The line's JSON text, without the newline; fields in a fixed order,
    /// so that a history is byte-for-byte reproducible.
    pub fn to_line(&self) -> String {
        // Serializing strings, integers and booleans into memory cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Parses one line (surrounding whitespace allowed).
    pub fn from_line(line: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(line.trim())
    }
}

type Now = Arc<dyn Fn() -> Instant + Send + Sync>;

/// Records what a worker loop does, for [`check_tasks`]. Cloning is cheap;
/// clones write to the same history, so one recorder serves every worker of
/// a run.
///
/// ```
/// use std::time::Instant;
/// use lease_history::work::{TaskRecorder, check_tasks};
///
/// let recorder = TaskRecorder::new(Instant::now);
/// recorder.start("w0", 7, 12);
/// recorder.finish("w0", 7, 12, true);
/// assert!(check_tasks(&recorder.records()).is_ok());
/// ```
#[derive(Clone)]
pub struct TaskRecorder {
    now: Now,
    origin: Instant,
    records: Arc<Mutex<Vec<TaskRecord>>>,
}

impl fmt::Debug for TaskRecorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskRecorder")
            .field("records", &self.lock().len())
            .finish_non_exhaustive()
    }
}

impl TaskRecorder {
    /// A recorder reading time from `now` (the clock of the adapter that
    /// issues the leases: `|| tokio::time::Instant::now().into_std()` for
    /// lease-redis and lease-fred); `at_us` counts from this call.
    pub fn new(now: impl Fn() -> Instant + Send + Sync + 'static) -> Self {
        let origin = now();
        Self {
            now: Arc::new(now),
            origin,
            records: Arc::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Vec<TaskRecord>> {
        self.records.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn at_us(&self) -> u64 {
        let elapsed = (self.now)().saturating_duration_since(self.origin);
        u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX)
    }

    /// `worker` starts processing `task` under the lease with `token`.
    pub fn start(&self, worker: &str, task: u64, token: u64) {
        let at_us = self.at_us();
        self.lock().push(TaskRecord::Start {
            worker: worker.to_owned(),
            task,
            token,
            at_us,
        });
    }

    /// `worker` finished `task`; `accepted` is whether its result was kept.
    pub fn finish(&self, worker: &str, task: u64, token: u64, accepted: bool) {
        let at_us = self.at_us();
        self.lock().push(TaskRecord::Finish {
            worker: worker.to_owned(),
            task,
            token,
            accepted,
            at_us,
        });
    }

    /// A fault injected now.
    pub fn fault(&self, kind: &str, detail: Option<String>) {
        let at_us = self.at_us();
        self.lock().push(TaskRecord::Fault {
            kind: kind.to_owned(),
            detail,
            at_us,
        });
    }

    /// A fault injected at `at` (an instant on the recorder's clock), for
    /// tests that script faults from outside the clock's context.
    pub fn fault_at(&self, kind: &str, detail: Option<String>, at: Instant) {
        let elapsed = at.saturating_duration_since(self.origin);
        let at_us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        self.lock().push(TaskRecord::Fault {
            kind: kind.to_owned(),
            detail,
            at_us,
        });
    }

    /// Every line so far, in the order they were recorded.
    pub fn records(&self) -> Vec<TaskRecord> {
        self.lock().clone()
    }

    /// The history as JSON lines, each ending with a newline.
    pub fn to_jsonl(&self) -> String {
        let mut text = String::new();
        for record in self.lock().iter() {
            text.push_str(&record.to_line());
            text.push('\n');
        }
        text
    }
}

/// One problem [`check_tasks`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TaskViolation {
    /// Two accepted runs of `task` overlap in time.
    DoubleProcessing {
        /// The task.
        task: u64,
        /// The earlier run: worker, token, start and finish.
        first: Run,
        /// The later run.
        second: Run,
    },
    /// An accepted run of `task` carried a token that was not newer than
    /// one already accepted (`newest`).
    StaleToken {
        /// The task.
        task: u64,
        /// The run whose stale token was accepted.
        run: Run,
        /// The newest token accepted for the task before it.
        newest: u64,
    },
    /// A line that does not fit: what is wrong, and the line.
    Anomaly {
        /// What is wrong.
        what: &'static str,
        /// The line.
        line: TaskRecord,
    },
}

impl fmt::Display for TaskViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TaskViolation::DoubleProcessing {
                task,
                first,
                second,
            } => write!(
                f,
                "task {task} processed by two workers at once: {first} and {second}"
            ),
            TaskViolation::StaleToken { task, run, newest } => {
                write!(
                    f,
                    "task {task}: stale token accepted: {run}, newest was {newest}"
                )
            }
            TaskViolation::Anomaly { what, line } => write!(f, "{what}: {}", line.to_line()),
        }
    }
}

/// One accepted run of a task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Run {
    /// The worker.
    pub worker: String,
    /// The token it ran under.
    pub token: u64,
    /// When it started.
    pub start_us: u64,
    /// When it finished.
    pub finish_us: u64,
}

impl fmt::Display for Run {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} token {} [{}, {}) us",
            self.worker, self.token, self.start_us, self.finish_us
        )
    }
}

/// The verdict of [`check_tasks`]; `Display`s as one line,
/// `tasks: ok ...` or `tasks: VIOLATION ...`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskSummary {
    /// `start` lines.
    pub starts: u64,
    /// Runs finished and accepted.
    pub accepted: u64,
    /// Runs finished and rejected (stale token, fenced off).
    pub rejected: u64,
    /// Runs never finished (their worker crashed, or the history ended).
    pub unfinished: u64,
    /// Distinct tasks with an accepted run.
    pub tasks: u64,
    /// `fault` lines.
    pub faults: u64,
    /// Every problem, in the order found (by task, then time).
    pub violations: Vec<TaskViolation>,
}

impl TaskSummary {
    /// No double processing, no stale token accepted, no anomaly.
    pub fn is_ok(&self) -> bool {
        self.violations.is_empty()
    }
}

impl fmt::Display for TaskSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verdict = if self.is_ok() { "ok" } else { "VIOLATION" };
        let double = self
            .violations
            .iter()
            .filter(|v| matches!(v, TaskViolation::DoubleProcessing { .. }))
            .count();
        let stale = self
            .violations
            .iter()
            .filter(|v| matches!(v, TaskViolation::StaleToken { .. }))
            .count();
        write!(
            f,
            "tasks: {verdict} double={double} stale={stale} anomalies={} starts={} accepted={} rejected={} unfinished={} tasks={} faults={}",
            self.violations.len() - double - stale,
            self.starts,
            self.accepted,
            self.rejected,
            self.unfinished,
            self.tasks,
            self.faults,
        )
    }
}

/// Judges a task history (see the [module docs](self)). Lines are taken in
/// time order (a stable sort by `at_us`, so lines with one instant keep
/// their order).
pub fn check_tasks(records: &[TaskRecord]) -> TaskSummary {
    let mut lines: Vec<&TaskRecord> = records.iter().collect();
    lines.sort_by_key(|r| r.at_us());
    let mut summary = TaskSummary::default();
    // Open runs by (worker, task, token): their start.
    let mut open: HashMap<(&str, u64, u64), u64> = HashMap::new();
    // Accepted runs per task, in finishing order.
    let mut runs: BTreeMap<u64, Vec<Run>> = BTreeMap::new();
    for line in lines {
        match line {
            TaskRecord::Start {
                worker,
                task,
                token,
                at_us,
            } => {
                summary.starts += 1;
                if open.insert((worker, *task, *token), *at_us).is_some() {
                    summary.violations.push(TaskViolation::Anomaly {
                        what: "a start while the same worker runs the task",
                        line: line.clone(),
                    });
                }
            }
            TaskRecord::Finish {
                worker,
                task,
                token,
                accepted,
                at_us,
            } => {
                let Some(start_us) = open.remove(&(worker.as_str(), *task, *token)) else {
                    summary.violations.push(TaskViolation::Anomaly {
                        what: "a finish without its start",
                        line: line.clone(),
                    });
                    continue;
                };
                if *accepted {
                    summary.accepted += 1;
                    runs.entry(*task).or_default().push(Run {
                        worker: worker.clone(),
                        token: *token,
                        start_us,
                        finish_us: *at_us,
                    });
                } else {
                    summary.rejected += 1;
                }
            }
            TaskRecord::Fault { .. } => summary.faults += 1,
        }
    }
    summary.unfinished = open.len() as u64;
    summary.tasks = runs.len() as u64;
    for (&task, runs) in &runs {
        judge_task(task, runs, &mut summary.violations);
    }
    summary
}

/// The accepted runs of one task, in finishing order.
fn judge_task(task: u64, runs: &[Run], violations: &mut Vec<TaskViolation>) {
    // Double processing: overlapping runs. Sorted by start, each run is
    // compared with the runs before it.
    let mut by_start: Vec<&Run> = runs.iter().collect();
    by_start.sort_by_key(|r| (r.start_us, r.finish_us));
    for (x, second) in by_start.iter().enumerate() {
        for first in &by_start[..x] {
            let overlaps = first.finish_us > second.start_us && second.finish_us > first.start_us;
            if overlaps {
                violations.push(TaskViolation::DoubleProcessing {
                    task,
                    first: (*first).clone(),
                    second: (*second).clone(),
                });
            }
        }
    }
    // Stale tokens, in the order the results were kept.
    let mut newest: Option<&Run> = None;
    for run in runs {
        if let Some(prev) = newest {
            let stale =
                run.token < prev.token || (run.token == prev.token && run.worker != prev.worker);
            if stale {
                violations.push(TaskViolation::StaleToken {
                    task,
                    run: run.clone(),
                    newest: prev.token,
                });
                continue;
            }
        }
        newest = Some(run);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(w: &str, task: u64, token: u64, at_us: u64) -> TaskRecord {
        TaskRecord::Start {
            worker: w.into(),
            task,
            token,
            at_us,
        }
    }

    fn finish(w: &str, task: u64, token: u64, accepted: bool, at_us: u64) -> TaskRecord {
        TaskRecord::Finish {
            worker: w.into(),
            task,
            token,
            accepted,
            at_us,
        }
    }

    #[test]
    fn lines_have_a_fixed_text_and_round_trip() {
        let cases = [
            (
                start("w1", 7, 12, 5),
                r#"{"event":"start","worker":"w1","task":7,"token":12,"at_us":5}"#,
            ),
            (
                finish("w1", 7, 12, false, 6),
                r#"{"event":"finish","worker":"w1","task":7,"token":12,"accepted":false,"at_us":6}"#,
            ),
            (
                TaskRecord::Fault {
                    kind: "restart".into(),
                    detail: None,
                    at_us: 8,
                },
                r#"{"event":"fault","kind":"restart","at_us":8}"#,
            ),
        ];
        for (record, line) in cases {
            assert_eq!(record.to_line(), line);
            assert_eq!(TaskRecord::from_line(line).unwrap(), record);
        }
        assert!(TaskRecord::from_line(r#"{"event":"start","task":"x"}"#).is_err());
    }

    #[test]
    fn handovers_back_to_back_and_fenced_off_runs_are_fine() {
        let records = [
            start("a", 1, 10, 0),
            finish("a", 1, 10, true, 100),
            start("b", 1, 12, 100),
            finish("b", 1, 12, true, 200),
            // a stalled holder's late run, fenced off by the store
            start("a", 1, 10, 150),
            finish("a", 1, 10, false, 300),
            // a crash mid-task: never finished
            start("b", 2, 12, 250),
        ];
        let s = check_tasks(&records);
        assert!(s.is_ok(), "{s}");
        assert_eq!(
            (s.starts, s.accepted, s.rejected, s.unfinished, s.tasks),
            (4, 2, 1, 1, 1)
        );
        assert_eq!(
            s.to_string(),
            "tasks: ok double=0 stale=0 anomalies=0 starts=4 accepted=2 rejected=1 unfinished=1 tasks=1 faults=0"
        );
    }

    #[test]
    fn overlapping_accepted_runs_are_double_processing() {
        let records = [
            start("a", 1, 10, 0),
            start("b", 1, 12, 50),
            finish("b", 1, 12, true, 60),
            finish("a", 1, 10, true, 100),
        ];
        let s = check_tasks(&records);
        assert!(!s.is_ok());
        assert!(matches!(
            &s.violations[0],
            TaskViolation::DoubleProcessing { task: 1, first, second }
                if first.worker == "a" && second.worker == "b"
        ));
        // a's older token was accepted after b's newer one
        assert!(matches!(
            &s.violations[1],
            TaskViolation::StaleToken {
                task: 1,
                newest: 12,
                ..
            }
        ));
        assert!(
            s.to_string()
                .starts_with("tasks: VIOLATION double=1 stale=1 ")
        );
    }

    #[test]
    fn one_worker_repeating_a_task_is_fine_but_not_under_two_leases_at_once() {
        let records = [
            start("a", 1, 10, 0),
            finish("a", 1, 10, true, 10),
            start("a", 1, 10, 20),
            finish("a", 1, 10, true, 30),
        ];
        assert!(check_tasks(&records).is_ok());
        let records = [
            start("a", 1, 10, 0),
            start("a", 1, 12, 5),
            finish("a", 1, 10, true, 10),
            finish("a", 1, 12, true, 15),
        ];
        let s = check_tasks(&records);
        assert!(matches!(
            s.violations.as_slice(),
            [TaskViolation::DoubleProcessing { task: 1, .. }]
        ));
    }

    #[test]
    fn lines_that_do_not_fit_are_anomalies() {
        let records = [
            finish("a", 1, 10, true, 10),
            start("b", 2, 3, 20),
            start("b", 2, 3, 30),
            finish("b", 2, 4, true, 40),
            finish("b", 2, 3, true, 50),
        ];
        let s = check_tasks(&records);
        let anomalies: Vec<_> = s
            .violations
            .iter()
            .filter_map(|v| match v {
                TaskViolation::Anomaly { what, .. } => Some(*what),
                _ => None,
            })
            .collect();
        assert_eq!(
            anomalies,
            [
                "a finish without its start",
                "a start while the same worker runs the task",
                "a finish without its start",
            ]
        );
    }
}
