//! Start-up without a storm: the workers started on one connection (and its
//! clones) send the server check's `INFO` once between them, counted by the
//! server itself (`INFO commandstats`) on a redis-server of the test's own.

use futures::StreamExt;
use lease_redis::redis::aio::ConnectionManager;
use lease_redis::{Assignment, Options, Shared, discover};
use lease_testkit::{RedisServer, test_interval, unique_name};

/// Calls of the bare `INFO` the server has run since its statistics were
/// reset (this read itself is counted only after it answers).
fn info_calls(server: &RedisServer) -> u64 {
    let v = server.command(&["INFO", "commandstats"]).expect("INFO");
    let text: String = lease_redis::redis::from_redis_value(v).expect("text");
    text.lines()
        .find_map(|l| l.strip_prefix("cmdstat_info:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().expect("a count"))
}

/// Starts `workers` workers of one group, each on a clone of `conn`, and
/// waits until every one has been granted a lease (so each has passed its
/// server check).
async fn start_and_hold<C>(conn: C, workers: usize)
where
    C: lease_redis::redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    let name = unique_name("one-check");
    let mut streams: Vec<_> = (0..workers)
        .map(|_| discover(conn.clone(), Options::new(&name, test_interval())).expect("options"))
        .collect();
    for stream in &mut streams {
        loop {
            match stream.next().await.expect("a running worker") {
                Assignment::Held(_) => break,
                Assignment::Idle(idle) => {
                    use lease_redis::IdleReason;
                    let refused = matches!(
                        idle.reason,
                        IdleReason::Refused(_) | IdleReason::UnsupportedServer(_)
                    );
                    assert!(!refused, "{idle:?}");
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_workers_on_one_connection_send_info_once() {
    let server = RedisServer::start().expect("redis-server");
    server.command(&["CONFIG", "RESETSTAT"]).expect("reset");
    let conn = lease_redis::connect(server.url()).await.expect("connect");
    start_and_hold(conn.clone(), 40).await;
    assert_eq!(info_calls(&server), 1, "one INFO for 40 workers");
    // Another group on a clone of the same connection: still the one (and
    // the read above, `INFO commandstats`, counted once it had answered).
    start_and_hold(conn, 5).await;
    assert_eq!(info_calls(&server), 2);
}

/// The control: without `Shared`, each worker sends its own (so the count
/// above measures what it claims).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_sharing_each_worker_sends_its_own() {
    let server = RedisServer::start().expect("redis-server");
    server.command(&["CONFIG", "RESETSTAT"]).expect("reset");
    let shared: Shared<ConnectionManager> =
        lease_redis::connect(server.url()).await.expect("connect");
    start_and_hold(shared.into_inner(), 4).await;
    assert_eq!(info_calls(&server), 4);
}
