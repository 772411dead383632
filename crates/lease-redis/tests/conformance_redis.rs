//! The conformance suite (`lease-conformance`) for the redis-rs adapter:
//! over a `ConnectionManager` (which reconnects after a restart) and the
//! cluster async connection, and a few scenarios over a plain
//! `MultiplexedConnection`.

use std::future::Future;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::LocalBoxStream;
use lease_conformance as conformance;
use lease_conformance::conformance_suite;
use lease_core::{Lease, OptionsError};
use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use tokio_util::sync::CancellationToken;

/// Every connection kind this adapter is tested over.
#[derive(Clone)]
enum Conn {
    Manager(ConnectionManager),
    Multiplexed(MultiplexedConnection),
    Cluster(ClusterConnection),
}

fn start(
    conn: &Conn,
    options: lease_redis::Options,
) -> Result<lease_redis::Discover, OptionsError> {
    match conn.clone() {
        Conn::Manager(c) => lease_redis::discover(c, options),
        Conn::Multiplexed(c) => lease_redis::discover(c, options),
        Conn::Cluster(c) => lease_redis::discover(c, options),
    }
}

fn discover(
    conn: &Conn,
    options: lease_core::Options,
    cancel: CancellationToken,
) -> Result<LocalBoxStream<'static, Option<Lease>>, OptionsError> {
    let options = lease_redis::Options::from(options).with_cancel(cancel);
    start(conn, options).map(StreamExt::boxed_local)
}

async fn cluster(urls: &[String]) -> Conn {
    let client = ClusterClient::new(urls.to_vec()).expect("cluster client");
    Conn::Cluster(
        client
            .get_async_connection()
            .await
            .expect("cluster connection"),
    )
}

async fn sleep(duration: Duration) {
    tokio::time::sleep(duration).await;
}

/// The adapter over a `ConnectionManager` (single server) or the cluster
/// async connection.
struct Redis;

impl conformance::Adapter for Redis {
    type Conn = Conn;
    type Cancel = CancellationToken;
    const REGISTRY: &'static str = "redis-rs";

    fn cancel(token: &CancellationToken) {
        token.cancel();
    }

    async fn connect(url: &str) -> Conn {
        let client = redis::Client::open(url).expect("url");
        let config = ConnectionManagerConfig::new()
            .set_min_delay(Duration::from_millis(10))
            .set_max_delay(Duration::from_millis(100));
        let manager = ConnectionManager::new_with_config(client, config)
            .await
            .expect("connection manager");
        Conn::Manager(manager)
    }

    fn connect_cluster(urls: &[String]) -> impl Future<Output = Conn> {
        cluster(urls)
    }

    fn discover(
        conn: &Conn,
        options: lease_core::Options,
        cancel: CancellationToken,
    ) -> Result<LocalBoxStream<'static, Option<Lease>>, OptionsError> {
        discover(conn, options, cancel)
    }

    fn sleep(duration: Duration) -> impl Future<Output = ()> {
        sleep(duration)
    }
}

/// The adapter over a plain `MultiplexedConnection` (which does not
/// reconnect, so only the scenarios that keep the server up).
struct RedisMultiplexed;

impl conformance::Adapter for RedisMultiplexed {
    type Conn = Conn;
    type Cancel = CancellationToken;
    const REGISTRY: &'static str = "redis-rs";

    fn cancel(token: &CancellationToken) {
        token.cancel();
    }

    async fn connect(url: &str) -> Conn {
        let client = redis::Client::open(url).expect("url");
        let conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("multiplexed connection");
        Conn::Multiplexed(conn)
    }

    fn connect_cluster(urls: &[String]) -> impl Future<Output = Conn> {
        cluster(urls)
    }

    fn discover(
        conn: &Conn,
        options: lease_core::Options,
        cancel: CancellationToken,
    ) -> Result<LocalBoxStream<'static, Option<Lease>>, OptionsError> {
        discover(conn, options, cancel)
    }

    fn sleep(duration: Duration) -> impl Future<Output = ()> {
        sleep(duration)
    }
}

/// Runs a scenario on a multi-thread runtime, so workers keep running while
/// the scenario blocks on a `lease-testkit` call.
fn run<F: Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(future)
}

conformance_suite!(Redis, run);

#[test]
fn multiplexed_one_worker_owns_alone() {
    run(conformance::one_worker_owns_alone::<RedisMultiplexed>());
}

#[test]
fn multiplexed_four_workers_settle() {
    run(conformance::four_workers_settle_ranked::<RedisMultiplexed>());
}

#[test]
fn multiplexed_script_flush() {
    run(conformance::script_flush::<RedisMultiplexed>());
}
