//! The conformance suite (`lease-conformance`) for the fred adapter, over a
//! centralized client (reconnecting after a restart) and a clustered one.

use std::time::Duration;

use fred::prelude::{Builder, Client, ClientLike, Config, ReconnectPolicy, ServerConfig};
use futures::StreamExt;
use futures::stream::LocalBoxStream;
use lease_conformance::{Adapter, conformance_suite};
use lease_core::{Lease, OptionsError};
use tokio_util::sync::CancellationToken;

/// An initialized client for `config` that reconnects at once, forever.
pub async fn client(config: Config) -> Client {
    let client = Builder::from_config(config)
        .set_policy(ReconnectPolicy::new_constant(0, 10))
        .build()
        .expect("fred client");
    client.init().await.expect("connected");
    client
}

struct Fred;

impl Adapter for Fred {
    type Conn = Client;
    type Cancel = CancellationToken;
    const REGISTRY: &'static str = "fred";

    fn cancel(token: &CancellationToken) {
        token.cancel();
    }

    async fn connect(url: &str) -> Client {
        client(Config::from_url(url).expect("url")).await
    }

    async fn connect_cluster(urls: &[String]) -> Client {
        let hosts = urls
            .iter()
            .map(|url| {
                let config = Config::from_url(url).expect("url");
                let server = config.server.hosts().remove(0);
                (server.host.to_string(), server.port)
            })
            .collect();
        let config = Config {
            server: ServerConfig::new_clustered(hosts),
            ..Config::default()
        };
        client(config).await
    }

    fn discover(
        conn: &Client,
        options: lease_core::Options,
        cancel: CancellationToken,
    ) -> Result<LocalBoxStream<'static, Option<Lease>>, OptionsError> {
        let options = lease_fred::Options::from(options).with_cancel(cancel);
        lease_fred::discover(conn.clone(), options).map(StreamExt::boxed_local)
    }

    async fn sleep(duration: Duration) {
        tokio::time::sleep(duration).await;
    }
}

/// Runs a scenario on a multi-thread runtime, so workers keep running while
/// the scenario blocks on a `lease-testkit` call.
fn run<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(future)
}

conformance_suite!(Fred, run);
