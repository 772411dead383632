//! The example's worker, unchanged, under paused tokio time on the simulated
//! Redis (`lease_sim::SimConnection`): three workers for 25 virtual seconds
//! with a crash, a stall and a Redis restart, judged per task by
//! `lease_history::tasks::check_tasks`; a loop that skips its drain is caught;
//! two runs with one seed give byte-identical histories.

use std::future::Future;
use std::time::Duration;

use futures_util::StreamExt as _;
use lease_example::{MemoryStore, ResultStore, Work, recorder, work};
use lease_history::tasks::{TaskRecorder, TaskSummary, TaskViolation, check_tasks};
use lease_redis::{Assignment, CancellationToken, GroupOptions, Options, Token, discover};
use lease_sim::{RedisFaults, SimRedis, SimRedisConfig};
use tokio::time::{Instant, sleep_until};

const L: Duration = Duration::from_millis(500);

/// A store that freezes one worker's commits during a window, as a process
/// stall would (the commit waits, then lands with its old token).
#[derive(Clone)]
struct Stalling {
    inner: MemoryStore,
    from: Instant,
    until: Instant,
}

impl ResultStore for Stalling {
    fn commit(&self, task: u64, token: u64) -> impl Future<Output = bool> + Send {
        let (inner, from, until) = (self.inner.clone(), self.from, self.until);
        async move {
            let now = Instant::now();
            if from <= now && now < until {
                sleep_until(until).await;
            }
            inner.commit(task, token).await
        }
    }
}

/// Which loop the workers run.
#[derive(Clone, Copy)]
enum Loop {
    /// The example's [`work`], unchanged.
    Example,
    /// A negative control: on each lease it starts processing the tasks
    /// the lease covers, round and round, and on a change it starts again
    /// for the new lease without stopping the work of the old one: it never
    /// drains.
    SkipsDrain,
}

/// The negative control's loop.
async fn skips_drain<S, R>(
    name: String,
    mut assignments: S,
    store: R,
    recorder: TaskRecorder,
    work: Work,
) where
    S: futures_util::Stream<Item = Assignment> + Unpin,
    R: ResultStore + Clone + 'static,
{
    let mut running = tokio::task::JoinSet::new();
    while let Some(assignment) = assignments.next().await {
        let Assignment::Held(lease) = assignment else {
            continue; // the drain would be here: `running.abort_all()`
        };
        let (name, store, recorder) = (name.clone(), store.clone(), recorder.clone());
        running.spawn(async move {
            loop {
                for task in (0..work.tasks).filter(|&t| lease.covers(t)) {
                    recorder.start(&name, task, lease.token());
                    tokio::time::sleep(work.task_time).await;
                    let kept = store.commit(task, lease.token()).await;
                    recorder.finish(&name, task, lease.token(), kept);
                }
            }
        });
    }
}

/// Three workers for 25 virtual seconds on one simulated Redis: w0 crashes
/// at 6 s, w1 stalls (its connection and its commits) for 3 L at 11 s, Redis
/// restarts at 16 s (down for L), then every worker is cancelled at 25 s.
/// Returns the task history as JSON lines and its verdict.
async fn scenario(seed: u64, which: Loop, faults: RedisFaults) -> (String, TaskSummary) {
    let t0 = Instant::now();
    let redis = SimRedis::new(SimRedisConfig::new(seed).with_faults(faults));
    let recorder = recorder();
    let store = MemoryStore::new();
    let stop = CancellationToken::new();
    let group = GroupOptions::new("invoices", L);
    let work_options = Work::default();
    let stall_at = t0 + Duration::from_secs(11);
    let mut workers = Vec::new();
    for w in 0..3u64 {
        let name = format!("w{w}");
        let options = Options::from(group.clone())
            .with_cancel(stop.clone())
            .with_token(Token::seeded(seed, w));
        let assignments = discover(redis.connection(&name), options).unwrap();
        let store = Stalling {
            inner: store.clone(),
            from: if w == 1 { stall_at } else { t0 },
            until: if w == 1 { stall_at + 3 * L } else { t0 },
        };
        let recorder = recorder.clone();
        workers.push(tokio::spawn(async move {
            match which {
                Loop::Example => work(name, assignments, store, recorder, work_options).await,
                Loop::SkipsDrain => {
                    skips_drain(name, assignments, store, recorder, work_options).await
                }
            }
        }));
    }
    sleep_until(t0 + Duration::from_secs(6)).await;
    workers[0].abort();
    recorder.fault("crash", Some("w0".into()));
    sleep_until(stall_at).await;
    redis.stall("w1", 3 * L);
    recorder.fault("stall", Some("w1 for 3 L".into()));
    sleep_until(t0 + Duration::from_secs(16)).await;
    redis.restart(L);
    recorder.fault("restart", Some("down for L".into()));
    sleep_until(t0 + Duration::from_secs(25)).await;
    stop.cancel();
    for worker in workers.drain(1..) {
        worker.await.unwrap();
    }
    assert!(redis.stats().restarts == 1 && redis.stats().executed > 100);
    let history = recorder.to_jsonl();
    (history, check_tasks(&recorder.records()))
}

fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

fn some_faults() -> RedisFaults {
    RedisFaults {
        latency: Duration::from_millis(2),
        jitter: Duration::from_millis(3),
        lose_requests: 0.01,
        lose_replies: 0.01,
        duplicates: 0.01,
    }
}

#[tokio::test(start_paused = true)]
async fn the_example_worker_survives_a_crash_a_stall_and_a_restart() {
    let (history, summary) = scenario(7, Loop::Example, some_faults()).await;
    assert!(summary.is_ok(), "{summary}\n{:?}", summary.violations);
    // The work went on: every task was processed, again and again.
    assert_eq!(summary.tasks, Work::default().tasks, "{summary}");
    assert!(summary.accepted > 1500, "{summary}");
    // w0's crash left its task unfinished; w1's stalled commit was fenced off.
    assert!(summary.unfinished <= 1, "{summary}");
    assert_eq!(summary.faults, 3);
    assert!(history.contains(r#""worker":"w2""#));
    eprintln!("{summary}");
}

#[test]
fn a_loop_that_skips_its_drain_is_caught() {
    let (_, summary) = paused_runtime().block_on(scenario(7, Loop::SkipsDrain, some_faults()));
    let double = summary
        .violations
        .iter()
        .filter(|v| matches!(v, TaskViolation::DoubleProcessing { .. }))
        .count();
    assert!(double > 0, "{summary}");
    eprintln!("{summary}");
}

#[test]
fn two_runs_with_one_seed_give_byte_identical_histories() {
    let run = || {
        paused_runtime()
            .block_on(scenario(11, Loop::Example, some_faults()))
            .0
    };
    let (a, b) = (run(), run());
    assert!(a.lines().count() > 1000);
    assert_eq!(a, b);
    let other = paused_runtime()
        .block_on(scenario(12, Loop::Example, some_faults()))
        .0;
    assert_ne!(a, other, "the seed changes the run");
}
