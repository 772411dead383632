//! The conformance suite (`lease-conformance`) for the smol adapter, twice:
//! with the workers and the scenarios on smol's executor, and on
//! async-std's (the adapter's promise to async-std users). Connections are
//! a `ConnectionManager` (which reconnects after a restart) and the cluster
//! async connection, both on redis-rs's smol runtime (no tokio runtime is
//! current).

use std::time::Duration;

use futures::StreamExt;
use futures::stream::LocalBoxStream;
use lease_conformance::Adapter;
use lease_conformance::redis_rs;

/// The suite's connection, shared as `connect` shares it: one server check
/// per connection.
type Conn = lease_smol::Shared<redis_rs::Conn>;
use lease_core::{Assignment, OptionsError};
use lease_smol::CancelToken;

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
        Conn::new(redis_rs::Conn::manager(url).await)
    }

    async fn connect_cluster(urls: &[String]) -> Conn {
        Conn::new(redis_rs::Conn::cluster(urls).await)
    }

    fn discover(
        conn: &Conn,
        options: lease_core::Options,
        cancel: CancelToken,
    ) -> Result<LocalBoxStream<'static, Assignment>, OptionsError> {
        let options = options.with_cancel_type().with_cancel(cancel);
        let pairs = if ON_ASYNC_STD {
            let spawn = |worker| drop(async_std::task::spawn(worker));
            lease_smol::discover_with(conn.clone(), options, spawn)
        } else {
            lease_smol::discover(conn.clone(), options)
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

/// TLS (feature `tls`): a group over `rediss://` on redis-rs's smol runtime
/// to a `redis-server` with `--tls-port` and a CA the test made, trusted
/// through `lease_smol::tls::client` with the CA file; a client that trusts
/// another CA is refused with redis-rs's error.
#[cfg(feature = "tls")]
mod tls {
    use lease_smol::redis::aio::ConnectionManager;
    use lease_smol::tls::Trust;
    use lease_testkit::TlsRedis;

    use super::*;

    #[test]
    fn a_group_settles_over_tls_trusting_the_ca_file() {
        let server = TlsRedis::start().expect("a redis-server with --tls-port");
        smol::block_on(async {
            let trust = Trust::File(server.ca_path());
            let client = lease_smol::tls::client(server.url(), &trust).expect("client");
            let manager = ConnectionManager::new(client)
                .await
                .expect("a TLS connection");
            lease_conformance::tls::group_settles_over_tls::<Smol<false>>(&Conn::new(
                redis_rs::Conn::Manager(manager),
            ))
            .await;
        });
    }

    #[test]
    fn a_client_trusting_another_ca_is_refused() {
        let server = TlsRedis::start().expect("a redis-server with --tls-port");
        smol::block_on(async {
            let trust = Trust::File(server.other_ca_path());
            let client = lease_smol::tls::client(server.url(), &trust).expect("client");
            let error = client
                .get_multiplexed_async_connection()
                .await
                .expect_err("the server's certificate is not trusted");
            assert!(error.to_string().contains("UnknownIssuer"), "{error}");
        });
    }
}
