//! Three real `lease_fred::discover` workers on the simulated Redis through
//! fred's mocking layer (`SimRedis::fred_mocks`) under paused tokio time,
//! for 25 virtual seconds with lost requests and replies, duplicates, a
//! crash, a stall and a restart; what their loops received is judged by
//! `lease_history::check` (exclusivity, fencing, coverage).

use std::sync::Arc;

use lease_fred::fred::prelude::*;
use lease_fred::{CancellationToken, Handover, Identity, Options, discover};
use lease_sim::{RedisFaults, SimRedis, SimRedisConfig};
use tokio::time::Instant;

mod scripted;

use scripted::{History, L, play, record};

#[tokio::test(start_paused = true)]
async fn three_fred_workers_with_a_crash_a_stall_and_a_restart() {
    let t0 = Instant::now();
    let faults = RedisFaults {
        // fred's mocks answer at once: no latency.
        lose_requests: 0.02,
        lose_replies: 0.02,
        duplicates: 0.02,
        ..RedisFaults::default()
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
        let config = Config {
            mocks: Some(Arc::new(redis.fred_mocks(&name))),
            ..Config::default()
        };
        let client = Builder::from_config(config).build().unwrap();
        client.init().await.unwrap();
        let stream = discover(client, options).unwrap();
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
