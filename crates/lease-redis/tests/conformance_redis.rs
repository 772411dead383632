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
use lease_conformance::redis_rs;

/// The suite's connection, shared as `connect` shares it: one server check
/// per connection.
type Conn = lease_redis::Shared<redis_rs::Conn>;
use lease_core::{Assignment, OptionsError};
use tokio_util::sync::CancellationToken;

/// The adapter over a `ConnectionManager` (which reconnects after a
/// restart; `Redis<false>`) or a plain `MultiplexedConnection` (which does
/// not, so only the scenarios that keep the server up; `Redis<true>`), and
/// over the cluster async connection.
struct Redis<const MULTIPLEXED: bool>;

type RedisMultiplexed = Redis<true>;

impl<const MULTIPLEXED: bool> conformance::Adapter for Redis<MULTIPLEXED> {
    type Conn = Conn;
    type Cancel = CancellationToken;
    const REGISTRY: &'static str = "redis-rs";

    fn cancel(token: &CancellationToken) {
        token.cancel();
    }

    async fn connect(url: &str) -> Conn {
        if MULTIPLEXED {
            Conn::new(redis_rs::Conn::multiplexed(url).await)
        } else {
            Conn::new(redis_rs::Conn::manager(url).await)
        }
    }

    async fn connect_cluster(urls: &[String]) -> Conn {
        Conn::new(redis_rs::Conn::cluster(urls).await)
    }

    fn discover(
        conn: &Conn,
        options: lease_core::Options,
        cancel: CancellationToken,
    ) -> Result<LocalBoxStream<'static, Assignment>, OptionsError> {
        let options = options.with_cancel_type().with_cancel(cancel);
        lease_redis::discover(conn.clone(), options).map(StreamExt::boxed_local)
    }

    async fn sleep(duration: Duration) {
        tokio::time::sleep(duration).await;
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

conformance_suite!(Redis<false>, run);

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

/// TLS (feature `tls`): a group over `rediss://` to a `redis-server` with
/// `--tls-port` and a CA the test made, trusted through the crate's knob
/// (`lease_redis::tls::client` with the CA file); a client that trusts
/// another CA is refused with redis-rs's error, not a panic.
#[cfg(feature = "tls")]
mod tls {
    use super::*;
    use lease_redis::redis::aio::{ConnectionManager, ConnectionManagerConfig};
    use lease_redis::tls::{ClientError, Trust};
    use lease_testkit::TlsRedis;

    #[test]
    fn a_group_settles_over_tls_trusting_the_ca_file() {
        let server = TlsRedis::start().expect("a redis-server with --tls-port");
        run(async {
            let trust = Trust::File(server.ca_path());
            let client = lease_redis::tls::client(server.url(), &trust).expect("client");
            let config = ConnectionManagerConfig::new()
                .set_min_delay(Duration::from_millis(10))
                .set_max_delay(Duration::from_millis(100));
            let manager = ConnectionManager::new_with_config(client, config)
                .await
                .expect("a TLS connection");
            conformance::tls::group_settles_over_tls::<Redis<false>>(&Conn::new(
                redis_rs::Conn::Manager(manager),
            ))
            .await;
        });
    }

    #[test]
    fn a_client_trusting_another_ca_is_refused() {
        let server = TlsRedis::start().expect("a redis-server with --tls-port");
        run(async {
            let trust = Trust::File(server.other_ca_path());
            let client = lease_redis::tls::client(server.url(), &trust).expect("client");
            let refused = client.get_multiplexed_async_connection().await;
            let error = refused.expect_err("the server's certificate is not trusted");
            let text = error.to_string();
            assert!(
                text.contains("certificate") || text.contains("UnknownIssuer"),
                "{text}"
            );
            // And a CA file that is not there fails before connecting.
            let missing = Trust::File(server.ca_path().with_file_name("missing.pem"));
            assert!(matches!(
                lease_redis::tls::client(server.url(), &missing),
                Err(ClientError::Tls(_))
            ));
        });
    }
}
