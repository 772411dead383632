//! redis-rs connections for the suite (feature `redis-rs`), shared by the
//! tests of the two redis-rs adapters (`lease-redis` on tokio, `lease-smol`
//! on smol and async-std): redis-rs picks its runtime by whether a tokio
//! runtime is current.

use std::time::Duration;

use redis::aio::{
    ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection,
};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

/// Every connection kind the suite runs the redis-rs adapters over.
#[derive(Clone)]
pub enum Conn {
    /// Reconnects after a restart.
    Manager(ConnectionManager),
    /// Does not reconnect: only for scenarios that keep the server up.
    Multiplexed(MultiplexedConnection),
    /// A Redis Cluster.
    Cluster(ClusterConnection),
}

impl Conn {
    /// A `ConnectionManager` to `url` that retries quickly (10 to 100 ms).
    pub async fn manager(url: &str) -> Self {
        let client = redis::Client::open(url).expect("url");
        let config = ConnectionManagerConfig::new()
            .set_min_delay(Duration::from_millis(10))
            .set_max_delay(Duration::from_millis(100));
        let manager = ConnectionManager::new_with_config(client, config).await;
        Self::Manager(manager.expect("connection manager"))
    }

    /// A plain multiplexed connection to `url`.
    pub async fn multiplexed(url: &str) -> Self {
        let client = redis::Client::open(url).expect("url");
        let conn = client.get_multiplexed_async_connection().await;
        Self::Multiplexed(conn.expect("multiplexed connection"))
    }

    /// The cluster async connection to the nodes at `urls`.
    pub async fn cluster(urls: &[String]) -> Self {
        let client = ClusterClient::new(urls.to_vec()).expect("cluster client");
        let conn = client.get_async_connection().await;
        Self::Cluster(conn.expect("cluster connection"))
    }

    fn inner(&mut self) -> &mut dyn ConnectionLike {
        match self {
            Self::Manager(c) => c,
            Self::Multiplexed(c) => c,
            Self::Cluster(c) => c,
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        self.inner().req_packed_command(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.inner().req_packed_commands(cmd, offset, count)
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Manager(c) => c.get_db(),
            Self::Multiplexed(c) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
        }
    }
}
