//! The conformance suite (`lease-conformance`) for the smol adapter, twice:
//! with the workers and the scenarios on smol's executor, and on
//! async-std's (the adapter's promise to async-std users). Connections are
//! a `ConnectionManager` (which reconnects after a restart) and the cluster
//! async connection, both on redis-rs's smol runtime.

use std::time::Duration;

use futures::StreamExt;
use futures::stream::LocalBoxStream;
use lease_conformance::Adapter;
use lease_core::{Lease, OptionsError};
use lease_smol::{CancelToken, Options};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;

/// Every connection kind the suite uses.
#[derive(Clone)]
enum Conn {
    Manager(ConnectionManager),
    Cluster(ClusterConnection),
}

/// The adapter, with its workers on smol's executor (`discover`) or on
/// async-std's (`discover_with` and `async_std::task::spawn`).
struct Smol<const ON_ASYNC_STD: bool>;

impl<const ON_ASYNC_STD: bool> Adapter for Smol<ON_ASYNC_STD> {
    type Conn = Conn;
    type Cancel = CancelToken;
    const REGISTRY: &'static str = "redis-rs/smol";

    fn cancel(token: &CancelToken) {
        token.cancel();
    }

    async fn connect(url: &str) -> Conn {
        let client = redis::Client::open(url).expect("url");
        let config = ConnectionManagerConfig::new()
            .set_min_delay(Duration::from_millis(10))
            .set_max_delay(Duration::from_millis(100));
        let manager = ConnectionManager::new_with_config(client, config).await;
        Conn::Manager(manager.expect("connection manager"))
    }

    async fn connect_cluster(urls: &[String]) -> Conn {
        let client = ClusterClient::new(urls.to_vec()).expect("cluster client");
        let conn = client.get_async_connection().await;
        Conn::Cluster(conn.expect("cluster connection"))
    }

    fn discover(
        conn: &Conn,
        options: lease_core::Options,
        cancel: CancelToken,
    ) -> Result<LocalBoxStream<'static, Option<Lease>>, OptionsError> {
        let options = Options::from(options).with_cancel(cancel);
        let spawn = |worker| drop(async_std::task::spawn(worker));
        let pairs = match (conn.clone(), ON_ASYNC_STD) {
            (Conn::Manager(c), false) => lease_smol::discover(c, options),
            (Conn::Cluster(c), false) => lease_smol::discover(c, options),
            (Conn::Manager(c), true) => lease_smol::discover_with(c, options, spawn),
            (Conn::Cluster(c), true) => lease_smol::discover_with(c, options, spawn),
        };
        pairs.map(StreamExt::boxed_local)
    }

    /// `async-io`'s timer, which every executor here runs.
    async fn sleep(duration: Duration) {
        smol::Timer::after(duration).await;
    }
}

/// Scenarios (`smol::block_on`) and workers on smol's executor.
mod on_smol {
    lease_conformance::conformance_suite!(super::Smol<false>, smol::block_on);
}

/// Scenarios (`async_std::task::block_on`) and workers on async-std's
/// executor.
mod on_async_std {
    lease_conformance::conformance_suite!(super::Smol<true>, async_std::task::block_on);
}
