//! The example's production path, [`lease_example::run_group`] (what its
//! `main` runs), on a real `redis-server` in real time: three workers for
//! 4 s, judged by the same checker as the simulated runs.

use std::time::Duration;

use lease_example::{Work, run_group};
use lease_history::work::check_tasks;
use lease_redis::Options;
use lease_testkit::RedisServer;

#[tokio::test(flavor = "current_thread")]
async fn three_workers_on_a_real_redis() {
    let server = RedisServer::start().expect("redis-server (scripts/test.sh installs it)");
    let redis = lease_redis::redis::Client::open(server.url())
        .unwrap()
        .get_connection_manager()
        .await
        .unwrap();
    let group = Options::new("lease-example", Duration::from_millis(200));
    let recorder = run_group(redis, group, 3, Duration::from_secs(4))
        .await
        .unwrap();
    let summary = check_tasks(&recorder.records());
    assert!(summary.is_ok(), "{summary}");
    // Once the group settled, every task was processed.
    assert_eq!(summary.tasks, Work::default().tasks, "{summary}");
    assert_eq!(summary.unfinished, 0, "every worker drained: {summary}");
}
