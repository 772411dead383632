//! Real `lease_redis::discover` workers on the simulated Redis under paused
//! tokio time: three for 25 virtual seconds with lossy requests, a crash, a
//! stall and a restart, and five with graceful leave (rule 16); what their
//! loops received is judged by `lease_history::check` (exclusivity, fencing,
//! coverage).

use std::time::Duration;

use lease_history::{LeaveHow, Record, check};
use lease_redis::{CancellationToken, Handover, Identity, Options, discover};
use lease_sim::{RedisFaults, SimRedis, SimRedisConfig};
use tokio::time::Instant;

mod scripted;

use scripted::{History, L, play, record};

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
    let history = History::default();
    let stop = CancellationToken::new();
    let mut workers = Vec::new();
    for w in 0..3u64 {
        let name = format!("w{w}");
        let options = Options::new("g", L)
            .with_handover(Handover::WholePairs)
            .with_graceful_leave(false)
            .with_cancel(stop.clone())
            .with_identity(Identity::seeded(3, w));
        let stream = discover(redis.connection(&name), options).unwrap();
        workers.push(record(name, stream, &history, t0));
    }
    let summary = play(t0, &redis, workers, &history, || stop.cancel()).await;
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

/// Rule 16 through the real lease-redis adapter: five workers with graceful
/// leave on the simulated Redis; w2 is cancelled at 15.5 L, after its
/// registration of interval 15. Its leave request (`leave.lua`, run by the
/// simulated server) removes its token from the open set 15, so the
/// survivors regrant on n = 4 with their replies from 17 (before 17.5 L),
/// while w2 serves its lease until 17 L minus the drain budget (the gap).
/// Without the removal, w2 stays in closed 15 and the survivors regrant
/// only from 18.
#[tokio::test(start_paused = true)]
async fn a_graceful_leave_through_lease_redis_hands_over_one_interval_sooner() {
    let t0 = Instant::now();
    let redis = SimRedis::new(
        SimRedisConfig::new(5).with_faults(RedisFaults::latency(Duration::from_millis(1))),
    );
    let k0 = redis.now_us() / 1000 / L.as_millis() as i64;
    let history = History::default();
    let mut cancels = Vec::new();
    let mut workers = Vec::new();
    for w in 0..5u64 {
        let stop = CancellationToken::new();
        let options = Options::new("g", L)
            .with_gap(0.15)
            .with_handover(Handover::WholePairs)
            .with_graceful_leave(true)
            .with_cancel(stop.clone())
            .with_identity(Identity::seeded(5, w));
        let name = format!("w{w}");
        let stream = discover(redis.connection(&name), options).unwrap();
        workers.push(record(name, stream, &history, t0));
        cancels.push(stop);
    }
    let at = |l: f64| t0 + L.mul_f64(l);
    let us = |l: f64| L.mul_f64(l).as_micros() as u64;
    tokio::time::sleep_until(at(15.5)).await;
    cancels[2].cancel();
    history
        .lock()
        .unwrap()
        .records
        .push(Record::leave("w2", LeaveHow::Cancel, us(15.5)));
    // The departed's stream ends once its lease has drained.
    tokio::time::timeout_at(at(18.0), workers.remove(2))
        .await
        .expect("w2's stream ends by 18 L")
        .unwrap();
    tokio::time::sleep_until(at(21.0)).await;
    for stop in &cancels {
        stop.cancel();
    }
    for worker in workers {
        worker.await.unwrap();
    }
    let records = history.lock().unwrap().records.clone();
    let summary = check(&records, Some(us(21.0)));
    assert!(summary.is_ok(), "{summary}");

    // w2 released at 17 L minus the gap; each survivor regranted on n = 4
    // from its reply of 17.
    let released = records
        .iter()
        .find_map(|r| match r {
            Record::Release { worker, at_us, .. } if worker == "w2" => Some(*at_us),
            _ => None,
        })
        .expect("w2 released its lease");
    assert!(
        (us(16.8)..=us(16.86)).contains(&released),
        "released at {released} us"
    );
    for w in [0, 1, 3, 4] {
        let name = format!("w{w}");
        let takeover = records
            .iter()
            .find_map(|r| match r {
                Record::Own {
                    worker,
                    n: 4,
                    at_us,
                    ..
                } if *worker == name && *at_us > us(15.5) => Some(*at_us),
                _ => None,
            })
            .unwrap_or_else(|| panic!("{name} regranted on n = 4"));
        assert!(
            (us(17.0)..us(17.5)).contains(&takeover),
            "{name} took over at {takeover} us"
        );
    }

    // The leave ran on the simulated server: w2 is counted in closed 14,
    // and in 15 (where it had registered) it is a left entry, present but
    // not counted (rule 19), and has no reservation in 16.
    let departed = Identity::seeded(5, 2).to_string();
    let scores = |k: i64| match redis.with_store(|s| s.scores(&format!("{{g}}:{}", k0 + k))) {
        Some(scores) => scores,
        None => panic!("set {k} is missing"),
    };
    let score_of = |k: i64| {
        scores(k)
            .into_iter()
            .find(|(_, m)| *m == departed)
            .map(|(s, _)| s)
    };
    assert!(score_of(14).is_some_and(|s| s >= 0.0), "{:?}", scores(14));
    assert_eq!(score_of(15), Some(-1.0), "{:?}", scores(15));
    assert_eq!(scores(15).iter().filter(|(s, _)| *s >= 0.0).count(), 4);
    assert_eq!(score_of(16), None, "{:?}", scores(16));
    eprintln!("{summary}\nw2 released at {released} us");
}
