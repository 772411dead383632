//! # lease-example
//!
//! A production-style worker on [`lease_redis::discover`], written once and
//! run unchanged in two worlds:
//!
//! - against a real Redis by this crate's binary (`cargo run -p
//!   lease-example`, see `src/main.rs`);
//! - in deterministic tests under paused tokio time on the simulated Redis
//!   of `lease-sim` (`tests/simulated.rs`), with a crash, a stall and a Redis
//!   restart, judged by `lease_history::work::check_tasks`.
//!
//! [`work`] is the loop a service runs: it takes each [`Assignment`] of the
//! stream between tasks (so the task in flight is finished before a new pair
//! is adopted: the drain), starts a task only while its lease stays valid for
//! the task's budget, processes the tasks it owns, and commits each result to
//! a [`ResultStore`] with the lease's fencing token. It calls a
//! [`TaskRecorder`] when it starts and finishes each task; in production the
//! record is the service's audit log, in a test it is the history the checker
//! judges. Nothing in it knows which world it runs in: time is tokio's clock
//! (the adapter's), the connection and the store are given.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::{FutureExt as _, Stream, StreamExt as _};
use lease_history::work::TaskRecorder;
use lease_redis::redis::aio::ConnectionLike;
use lease_redis::{Assignment, CancellationToken, Lease, Options, OptionsError, discover};

/// How the worker processes its tasks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Work {
    /// The task ids the group splits: `0..tasks`.
    pub tasks: u64,
    /// How long one task takes; a task is started only if the lease is still
    /// valid this long from now.
    pub task_time: Duration,
}

impl Default for Work {
    fn default() -> Self {
        Self {
            tasks: 240,
            task_time: Duration::from_millis(10),
        }
    }
}

/// Where the worker commits its results, fenced: a write carrying a token
/// older than the newest the store has seen for the task is rejected.
pub trait ResultStore: Send + Sync {
    /// Commits the result of `task` processed under `token`; `true` if it was
    /// kept, `false` if the token was stale.
    fn commit(&self, task: u64, token: u64) -> impl Future<Output = bool> + Send;
}

/// An in-memory fenced [`ResultStore`]: the newest token per task. Cloning is
/// cheap; clones are the same store.
#[derive(Clone, Debug, Default)]
pub struct MemoryStore(Arc<Mutex<HashMap<u64, u64>>>);

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// The newest token committed for `task`.
    pub fn newest(&self, task: u64) -> Option<u64> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&task)
            .copied()
    }
}

impl ResultStore for MemoryStore {
    fn commit(&self, task: u64, token: u64) -> impl Future<Output = bool> + Send {
        let mut newest = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = newest.entry(task).or_insert(token);
        let kept = token >= *entry;
        if kept {
            *entry = token;
        }
        std::future::ready(kept)
    }
}

/// The worker loop: runs until `assignments` ends (after cancellation).
/// See the [crate docs](crate).
pub async fn work<S, R>(
    name: String,
    mut assignments: S,
    store: R,
    recorder: TaskRecorder,
    config: Work,
) where
    S: Stream<Item = Assignment> + Unpin,
    R: ResultStore,
{
    let mut lease: Option<Lease> = None;
    let mut cursor = 0;
    loop {
        // A change is taken only here, between tasks: the task in flight has
        // been finished (the drain). Holding nothing, wait for the next one.
        let change = match &lease {
            Some(_) => assignments.next().now_or_never(),
            None => Some(assignments.next().await),
        };
        match change {
            Some(None) => return,
            Some(Some(assignment)) => {
                lease = assignment.lease().cloned();
                continue;
            }
            None => {}
        }
        let Some(held) = &lease else { continue };
        // Start only what can finish while the lease holds; otherwise wait
        // for a renewal (or the idle value) a task's time at most.
        if !held.is_valid_at(now() + config.task_time) {
            tokio::select! {
                next = assignments.next() => match next {
                    None => return,
                    Some(assignment) => lease = assignment.lease().cloned(),
                },
                () = tokio::time::sleep(config.task_time) => {}
            }
            continue;
        }
        let Some(task) = next_owned(held, &mut cursor, config.tasks) else {
            // This pair covers none of the tasks: wait for a change.
            lease = None;
            continue;
        };
        // The fencing token of the part that holds this task.
        let Some(token) = held.token_for(task) else {
            continue;
        };
        recorder.start(&name, task, token);
        tokio::time::sleep(config.task_time).await; // the work itself
        let kept = store.commit(task, token).await;
        recorder.finish(&name, task, token, kept);
    }
}

/// The next task id from `cursor` on that `lease` covers.
fn next_owned(lease: &Lease, cursor: &mut u64, tasks: u64) -> Option<u64> {
    for _ in 0..tasks {
        let task = *cursor;
        *cursor = (*cursor + 1) % tasks;
        // Only a task whose part still holds: a part can end before the
        // rest of the lease.
        if lease
            .parts()
            .iter()
            .any(|p| p.covers(task) && p.is_valid_at(now()))
        {
            return Some(task);
        }
    }
    None
}

/// tokio's clock, the clock lease-redis issues its leases on.
fn now() -> std::time::Instant {
    tokio::time::Instant::now().into_std()
}

/// A [`TaskRecorder`] on tokio's clock, the clock of lease-redis's leases.
pub fn recorder() -> TaskRecorder {
    TaskRecorder::new(now)
}

/// What the binary runs: `workers` workers of `group` in this process on
/// `redis`, each running [`work`] into one [`MemoryStore`], for `duration`;
/// then they are cancelled and drained. Returns the task history.
pub async fn run_group<C>(
    redis: C,
    group: Options,
    workers: u32,
    duration: Duration,
) -> Result<TaskRecorder, OptionsError>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    let stop = CancellationToken::new();
    let store = MemoryStore::new();
    let recorder = recorder();
    let mut running = Vec::new();
    for w in 0..workers {
        let options = group.clone().with_cancel(stop.clone());
        let assignments = discover(redis.clone(), options)?;
        running.push(tokio::spawn(work(
            format!("w{w}"),
            assignments,
            store.clone(),
            recorder.clone(),
            Work::default(),
        )));
    }
    tokio::time::sleep(duration).await;
    stop.cancel();
    for worker in running {
        // A worker's task ends only by returning: the loop does not panic.
        let _ = worker.await;
    }
    Ok(recorder)
}
