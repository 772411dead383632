//! The scripted run the example's tests and its benchmark share: three
//! workers of one group on one simulated Redis for 25 virtual seconds, with
//! a crash, a stall and a Redis restart, each worker running the example's
//! [`work`] (or the negative control) on the client chosen.
#![allow(dead_code, unreachable_pub)] // each user takes what it needs

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt as _;
use lease_example::{MemoryStore, ResultStore, Work, recorder, work};
use lease_history::work::{TaskRecorder, TaskSummary, check_tasks};
use lease_redis::{Assignment, CancellationToken, Identity, Options};
use lease_sim::{RedisFaults, SimRedis, SimRedisConfig};
use tokio::time::{Instant, sleep_until};

/// Which client the workers use to reach the simulated Redis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Client {
    /// `lease_redis::discover` on `SimConnection` (redis-rs).
    RedisRs,
    /// `lease_fred::discover` on fred with `SimRedis::fred_mocks`.
    Fred,
}

/// A worker's stream of assignments on `client`.
async fn connect(
    client: Client,
    redis: &SimRedis,
    name: &str,
    options: Options,
) -> futures_util::stream::BoxStream<'static, Assignment> {
    match client {
        Client::RedisRs => lease_redis::discover(redis.connection(name), options)
            .unwrap()
            .boxed(),
        Client::Fred => {
            use lease_fred::fred::prelude::*;
            let config = Config {
                mocks: Some(Arc::new(redis.fred_mocks(name))),
                ..Config::default()
            };
            let fred = Builder::from_config(config).build().unwrap();
            fred.init().await.unwrap();
            lease_fred::discover(fred, options).unwrap().boxed()
        }
    }
}

pub const L: Duration = Duration::from_millis(500);

/// How long w1 stalls: long enough for another worker to take its tasks
/// over and commit some of them, so that w1's late commit is fenced off.
pub const STALL: Duration = Duration::from_millis(3000);

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
pub enum Loop {
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
/// at 6 s, w1 stalls (its connection and its commits) for 6 L at 11 s, Redis
/// restarts at 16 s (down for L), its clock steps 30 ms forward at 20 s,
/// then every worker is cancelled at 25 s.
/// Returns the task history as JSON lines and its verdict.
pub async fn scenario(
    seed: u64,
    which: Loop,
    client: Client,
    faults: RedisFaults,
) -> (String, TaskSummary) {
    let t0 = Instant::now();
    let redis = SimRedis::new(SimRedisConfig::new(seed).with_faults(faults));
    let recorder = recorder();
    let store = MemoryStore::new();
    let stop = CancellationToken::new();
    let group = Options::new("invoices", L);
    let work_options = Work::default();
    let stall_at = t0 + Duration::from_secs(11);
    let mut workers = Vec::new();
    for w in 0..3u64 {
        let name = format!("w{w}");
        let options = group
            .clone()
            .with_cancel(stop.clone())
            .with_identity(Identity::seeded(seed, w));
        let assignments = connect(client, &redis, &name, options).await;
        let store = Stalling {
            inner: store.clone(),
            from: if w == 1 { stall_at } else { t0 },
            until: if w == 1 { stall_at + STALL } else { t0 },
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
    redis.stall("w1", STALL);
    recorder.fault("stall", Some("w1 for 6 L".into()));
    sleep_until(t0 + Duration::from_secs(16)).await;
    redis.restart(L);
    recorder.fault("restart", Some("down for L".into()));
    // A forward step of the server's clock within the guarantee (below G/2,
    // G = 0.15 L = 75 ms).
    sleep_until(t0 + Duration::from_secs(20)).await;
    redis.step_clock(30_000);
    recorder.fault("clock-step", Some("+30 ms".into()));
    sleep_until(t0 + Duration::from_secs(25)).await;
    stop.cancel();
    for worker in workers.drain(1..) {
        worker.await.unwrap();
    }
    assert!(redis.stats().restarts == 1 && redis.stats().executed > 100);
    let history = recorder.to_jsonl();
    (history, check_tasks(&recorder.records()))
}

pub fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

pub fn some_faults() -> RedisFaults {
    RedisFaults {
        latency: Duration::from_millis(2),
        jitter: Duration::from_millis(3),
        lose_requests: 0.01,
        lose_replies: 0.01,
        duplicates: 0.01,
    }
}

/// The same run under turmoil: Redis is the host `redis` (the simulated
/// Redis speaking RESP, `lease_sim::turmoil::serve`), each worker a client
/// host of its own reaching it over turmoil's TCP with a real redis-rs
/// multiplexed connection (`TurmoilConnection`, which reconnects). w0's host
/// crashes at 6 s; w1's link to Redis is held for 6 L at 11 s (and its
/// commits stall); the Redis host crashes at 16 s and is bounced (restarted
/// empty) L later; every worker is cancelled at 25 s.
pub fn turmoil_scenario(seed: u64, which: Loop, faults: RedisFaults) -> (String, TaskSummary) {
    let mut sim = turmoil::Builder::new()
        .simulation_duration(Duration::from_secs(60))
        .rng_seed(seed)
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(3))
        .build();
    let config = SimRedisConfig::new(seed).with_faults(faults);
    sim.host("redis", move || {
        lease_sim::turmoil::serve(6379, config.clone())
    });
    let origin = std::time::Instant::now();
    let recorder = TaskRecorder::new(move || origin + turmoil::sim_elapsed().unwrap_or_default());
    let store = MemoryStore::new();
    let stop = CancellationToken::new();
    let group = Options::new("invoices", L);
    let faults_recorder = recorder.clone();
    let stopper = stop.clone();
    let worker = move |w: u64| {
        let name = format!("w{w}");
        let (recorder, store, stop, group) =
            (recorder.clone(), store.clone(), stop.clone(), group.clone());
        async move {
            let t0 = Instant::now();
            let redis = lease_sim::turmoil::TurmoilConnection::new("redis:6379", L);
            let options = group
                .with_cancel(stop)
                .with_identity(Identity::seeded(seed, w));
            let assignments = lease_redis::discover(redis, options)?;
            let stall_at = t0 + Duration::from_secs(11);
            let store = Stalling {
                inner: store,
                from: if w == 1 { stall_at } else { t0 },
                until: if w == 1 { stall_at + STALL } else { t0 },
            };
            let work_options = Work::default();
            match which {
                Loop::Example => work(name, assignments, store, recorder, work_options).await,
                Loop::SkipsDrain => {
                    skips_drain(name, assignments, store, recorder, work_options).await
                }
            }
            Ok(())
        }
    };
    // turmoil crashes hosts, not clients: w0 is a host (never bounced).
    let first = worker.clone();
    sim.host("w0", move || first(0));
    sim.client("w1", worker(1));
    sim.client("w2", worker(2));
    let run_until = |sim: &mut turmoil::Sim<'_>, t: Duration| {
        while sim.elapsed() < t {
            sim.step().unwrap();
        }
    };
    let fault = |sim: &turmoil::Sim<'_>, kind: &str, detail: &str| {
        faults_recorder.fault_at(kind, Some(detail.into()), origin + sim.elapsed());
    };
    run_until(&mut sim, Duration::from_secs(6));
    sim.crash("w0");
    fault(&sim, "crash", "w0");
    run_until(&mut sim, Duration::from_secs(11));
    sim.hold("w1", "redis");
    fault(&sim, "stall", "w1 for 6 L");
    run_until(&mut sim, Duration::from_secs(11) + STALL);
    sim.release("w1", "redis");
    run_until(&mut sim, Duration::from_secs(16));
    sim.crash("redis");
    fault(&sim, "restart", "down for L");
    run_until(&mut sim, Duration::from_secs(16) + L);
    sim.bounce("redis");
    run_until(&mut sim, Duration::from_secs(25));
    stopper.cancel();
    sim.run().unwrap();
    let records = faults_recorder.records();
    (faults_recorder.to_jsonl(), check_tasks(&records))
}
