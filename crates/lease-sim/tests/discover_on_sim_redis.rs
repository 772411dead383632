//! Three real `lease_redis::discover` workers on the simulated Redis under
//! paused tokio time, for 25 virtual seconds with lossy requests, a crash, a
//! stall and a restart; what their loops received is judged by
//! `lease_history::check` (exclusivity, fencing, coverage).

use std::time::Duration;

use lease_redis::{CancellationToken, GroupOptions, Options, Token, discover};
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
        let options = Options::from(GroupOptions::new("g", L))
            .with_cancel(stop.clone())
            .with_token(Token::seeded(3, w));
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
