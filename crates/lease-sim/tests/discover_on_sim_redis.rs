//! Three real `lease_redis::discover` workers on the simulated Redis under
//! paused tokio time, for 25 virtual seconds with lossy requests, a crash, a
//! stall and a restart; what their loops received is judged by
//! `lease_history::check` (exclusivity, fencing, coverage).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use lease_history::{LeaveHow, Record, check};
use lease_redis::{Assignment, CancellationToken, GroupOptions, Options, Token, discover};
use lease_sim::{RedisFaults, SimRedis, SimRedisConfig};
use tokio::time::{Instant, sleep_until};

const L: Duration = Duration::from_millis(500);

fn micros(t0: Instant, at: std::time::Instant) -> u64 {
    at.saturating_duration_since(t0.into_std()).as_micros() as u64
}

#[tokio::test(start_paused = true)]
async fn three_discover_workers_with_a_crash_a_stall_and_a_restart() {
    let t0 = Instant::now();
    let faults = RedisFaults {
        latency: Duration::from_millis(2),
        jitter: Duration::from_millis(4),
        lose_requests: 0.02,
        lose_replies: 0.02,
        duplicates: 0.02,
    };
    let redis = SimRedis::new(SimRedisConfig::new(3).with_faults(faults));
    let history = Arc::new(Mutex::new(Vec::new()));
    let stop = CancellationToken::new();
    let mut workers = Vec::new();
    for w in 0..3u64 {
        let name = format!("w{w}");
        let options = Options::from(GroupOptions::new("g", L))
            .with_cancel(stop.clone())
            .with_token(Token::seeded(3, w));
        let mut stream = discover(redis.connection(&name), options).unwrap();
        let history = history.clone();
        history.lock().unwrap().push(Record::join(&name, 0));
        workers.push(tokio::spawn(async move {
            while let Some(assignment) = stream.next().await {
                let mut h = history.lock().unwrap();
                let now = micros(t0, tokio::time::Instant::now().into_std());
                match assignment {
                    Assignment::Held(l) => h.push(Record::own(&name, l.i(), l.n(), l.token(), now)),
                    Assignment::Idle(idle) => {
                        if let Some(l) = idle.ended {
                            h.push(Record::release(&name, l.i(), l.n(), micros(t0, idle.since)));
                        }
                    }
                }
            }
        }));
    }
    let at = |s: u64| t0 + Duration::from_secs(s);
    sleep_until(at(6)).await;
    workers[0].abort();
    history
        .lock()
        .unwrap()
        .push(Record::leave("w0", LeaveHow::Crash, 6_000_000));
    sleep_until(at(11)).await;
    redis.stall("w1", 3 * L);
    history
        .lock()
        .unwrap()
        .push(Record::fault("stall", 11_000_000));
    sleep_until(at(16)).await;
    redis.restart(L);
    history
        .lock()
        .unwrap()
        .push(Record::fault("restart", 16_000_000));
    sleep_until(at(25)).await;
    stop.cancel();
    for worker in workers.drain(1..) {
        worker.await.unwrap();
    }
    let records = history.lock().unwrap().clone();
    let summary = check(&records, Some(25_000_000));
    assert!(summary.is_ok(), "{summary}");
    // The group served most of the run despite the faults.
    assert!(summary.coverage.fraction() > 0.6, "{summary}");
    assert!(summary.owns >= 6, "{summary}");
    let stats = redis.stats();
    assert!(
        stats.lost_requests + stats.lost_replies + stats.duplicates > 0,
        "{stats:?}"
    );
    eprintln!("{summary}\n{stats:?}");
}
