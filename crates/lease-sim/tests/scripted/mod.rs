//! The run the client tests share (`discover_on_sim_redis`, `fred_mocks`):
//! three workers of one adapter on the simulated Redis under paused tokio
//! time for 25 virtual seconds, w0 crashing at 6 s, w1 stalled for 3 L at
//! 11 s, Redis restarted at 16 s; what the loops received is the history.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{Stream, StreamExt as _};
use lease_core::{Assignment, Lease};
use lease_history::{LeaveHow, Record, Summary, check};
use lease_sim::SimRedis;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until};

/// The interval of the run.
pub(crate) const L: Duration = Duration::from_millis(500);

/// What every loop received, shared between the loops.
pub(crate) type History = Arc<Mutex<Lines>>;

/// The history's lines, and the lease each loop holds now (to end a
/// crashed worker's lease on its behalf: a `leave` ends nothing).
#[derive(Default)]
pub(crate) struct Lines {
    pub(crate) records: Vec<Record>,
    held: HashMap<String, Lease>,
}

fn micros(t0: Instant, at: std::time::Instant) -> u64 {
    at.saturating_duration_since(t0.into_std()).as_micros() as u64
}

/// The whole pair of a lease (these runs use whole pairs).
pub(crate) fn pair(lease: &Lease) -> (u32, u32) {
    lease.pair().map(|p| (p.i(), p.n())).expect("a whole pair")
}

/// Runs worker `name`'s loop: it records what the stream yields.
pub(crate) fn record<S>(
    name: String,
    mut stream: S,
    history: &History,
    t0: Instant,
) -> JoinHandle<()>
where
    S: Stream<Item = Assignment> + Unpin + Send + 'static,
{
    let history = history.clone();
    history.lock().unwrap().records.push(Record::join(&name, 0));
    tokio::spawn(async move {
        while let Some(assignment) = stream.next().await {
            let mut h = history.lock().unwrap();
            let now = micros(t0, tokio::time::Instant::now().into_std());
            match assignment {
                Assignment::Held(l) => {
                    let (i, n) = pair(&l);
                    h.records.push(Record::own(&name, i, n, l.token(), now));
                    h.held.insert(name.clone(), l);
                }
                Assignment::Idle(idle) => {
                    if let Some(l) = idle.ended {
                        let at = micros(t0, idle.since);
                        let (i, n) = pair(&l);
                        h.records.push(Record::release(&name, i, n, at));
                        h.held.remove(&name);
                    }
                }
            }
        }
    })
}

/// Plays the faults on `workers` (w0, w1, w2, started at `t0`), cancels the
/// survivors with `stop` at 25 s, and judges the history.
pub(crate) async fn play(
    t0: Instant,
    redis: &SimRedis,
    mut workers: Vec<JoinHandle<()>>,
    history: &History,
    stop: impl FnOnce(),
) -> Summary {
    let at = |s: u64| t0 + Duration::from_secs(s);
    let note = |r: Record| history.lock().unwrap().records.push(r);
    sleep_until(at(6)).await;
    workers[0].abort();
    // The crashed worker's lease ends at the crash, or at its deadline if
    // that came first.
    let crashed = history.lock().unwrap().held.remove("w0");
    if let Some(l) = crashed {
        let end = micros(t0, l.deadline()).min(6_000_000);
        let (i, n) = pair(&l);
        note(Record::release("w0", i, n, end));
    }
    note(Record::leave("w0", LeaveHow::Crash, 6_000_000));
    sleep_until(at(11)).await;
    redis.stall("w1", 3 * L);
    note(Record::fault("stall", 11_000_000));
    sleep_until(at(16)).await;
    redis.restart(L);
    note(Record::fault("restart", 16_000_000));
    sleep_until(at(25)).await;
    stop();
    for worker in workers.drain(1..) {
        worker.await.unwrap();
    }
    let records = history.lock().unwrap().records.clone();
    check(&records, Some(25_000_000))
}
