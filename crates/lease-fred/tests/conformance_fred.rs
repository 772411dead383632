//! The conformance suite (`lease-conformance`) for the fred adapter, over a
//! centralized client (reconnecting after a restart) and a clustered one;
//! and what fred's re-send of a command in flight does to each mode, with
//! the lost reply injected by the fault proxy of `lease-chaos`.

use std::time::{Duration, Instant};

use fred::prelude::{
    Builder, Client, ClientLike, Config, LuaInterface, ReconnectPolicy, ServerConfig,
};
use futures::StreamExt;
use futures::stream::LocalBoxStream;
use lease_chaos::proxy::{Link, Proxy};
use lease_conformance::{Adapter, Group, capture, conformance_suite, intervals};
use lease_core::{Assignment, Mode, OptionsError, diag};
use lease_testkit::{RedisServer, test_interval, unique_name};
use tokio_util::sync::CancellationToken;

/// An initialized client for `config` that reconnects at once, forever.
async fn client(config: Config) -> Client {
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
    ) -> Result<LocalBoxStream<'static, Assignment>, OptionsError> {
        let options = options.with_cancel_type().with_cancel(cancel);
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

/// fred's own behaviour: a command whose connection drops after Redis
/// executed it (the reply is lost) is re-sent on the new connection and
/// executed again; the caller sees only the second reply.
#[test]
fn fred_resends_a_command_in_flight_when_its_connection_drops() {
    run(async {
        let server = RedisServer::start().expect("redis-server");
        let proxy = Proxy::new(server.addr()).expect("proxy");
        let link = proxy.link(1).expect("link");
        let client = client(Config::from_url(&link.url()).expect("url")).await;
        let sha = server.command(&["SCRIPT", "LOAD", "return redis.call('INCR', KEYS[1])"]);
        let sha: String = redis::from_redis_value(sha.expect("SCRIPT LOAD")).expect("sha");
        link.lose_next_reply();
        let count: i64 = client
            .evalsha(sha, vec!["counter"], Vec::<String>::new())
            .await
            .expect("re-sent, so answered");
        assert!(link.lost_reply());
        assert_eq!(link.resent(), 1);
        assert_eq!(link.counts().0, 2, "fred reconnected once");
        assert_eq!(count, 2, "executed twice, the first reply lost");
    });
}

/// Three settled workers share one client through a proxy, which loses the
/// reply of one executed registration and closes the connection: fred
/// reconnects and re-sends the registration (and in `Ranked` mode the
/// worker's own retry after its adaptive timeout may overtake it: the same
/// command), which Redis executes again.
async fn lose_one_reply(mode: Mode) -> (Group<Fred>, Instant, Upstream) {
    let server = RedisServer::start().expect("redis-server");
    let proxy = Proxy::new(server.addr()).expect("proxy");
    let link = proxy.link(2).expect("link");
    let client = client(Config::from_url(&link.url()).expect("url")).await;
    let mut group = Group::<Fred>::default();
    let name = unique_name("resend");
    let options = lease_core::Options {
        interval: test_interval(),
        ..lease_conformance::options(&name, mode)
    };
    group.add_many(&client, 0, &options, 3);
    group
        .wait("settled", intervals(10.0), |g| g.settled(0))
        .await;
    let failed = capture::count(&name, diag::REGISTRATION_FAILED);
    let since = Instant::now();
    link.lose_next_reply();
    group
        .wait(
            "a reply lost and the registration re-sent",
            intervals(3.0),
            |_| link.resent() > 0,
        )
        .await;
    assert!(link.lost_reply());
    assert_eq!(link.counts().0, 2, "fred reconnected once");
    let timeouts = capture::count(&name, diag::REGISTRATION_FAILED) - failed;
    eprintln!("{mode}: the registration was executed again; {timeouts} request timeouts meanwhile");
    let upstream = Upstream {
        _server: server,
        _proxy: proxy,
        _link: link,
    };
    (group, since, upstream)
}

/// The server, the proxy and the link of [`lose_one_reply`], kept alive
/// until the scenario ends.
struct Upstream {
    _server: RedisServer,
    _proxy: Proxy,
    _link: Link,
}

/// `Ranked` mode: the re-sent registration repeats a token in its interval,
/// which changes nothing; no worker stands down.
#[test]
fn resend_costs_no_stand_down_in_ranked_mode() {
    run(async {
        let (mut group, since, _upstream) = lose_one_reply(Mode::Ranked).await;
        group.run_for(intervals(4.0)).await;
        assert_eq!(
            group.changes_since(0, since),
            0,
            "a worker stood down:\n{}",
            group.render()
        );
        assert!(group.settled(0));
        group.check();
    });
}

/// `Arrival` mode: the re-sent `INCR` counts one worker twice (a ghost
/// index, a count of `n + 1`): the whole group stands down, then settles
/// again; the exclusive lease holds throughout.
#[test]
fn resend_stands_the_group_down_in_arrival_mode() {
    run(async {
        let (mut group, since, _upstream) = lose_one_reply(Mode::Arrival).await;
        group
            .wait("every worker stood down", intervals(4.0), |g| {
                (0..3).all(|w| g.records_of(w, since).iter().any(|r| r.pair.is_none()))
            })
            .await;
        group
            .wait("settled again", intervals(8.0), |g| g.settled(0))
            .await;
        let records: Vec<_> = (0..3).flat_map(|w| group.records_of(w, since)).collect();
        let first_idle = records
            .iter()
            .filter(|r| r.pair.is_none())
            .map(|r| r.at)
            .min();
        let last_grant = records
            .iter()
            .filter(|r| r.pair.is_some())
            .map(|r| r.at)
            .max();
        if let (Some(idle), Some(grant)) = (first_idle, last_grant) {
            eprintln!(
                "arrival: the group stood down for {:.1} intervals",
                (grant - idle).as_secs_f64() / test_interval().as_secs_f64()
            );
        }
        group.check();
    });
}

/// TLS (feature `tls`): a group over `rediss://` to a `redis-server` with
/// `--tls-port` and a CA the test made, trusted through the crate's knob
/// (`lease_fred::tls::config` with the CA file); a client that trusts
/// another CA is refused with fred's TLS error, not a panic.
#[cfg(feature = "tls")]
mod tls {
    use super::*;
    use lease_fred::tls::Trust;
    use lease_testkit::TlsRedis;

    fn config(server: &TlsRedis, trust: &Trust) -> Config {
        let mut config = Config::from_url(server.url()).expect("url");
        config.tls = Some(lease_fred::tls::config(trust).expect("trusted CAs"));
        config
    }

    #[test]
    fn a_group_settles_over_tls_trusting_the_ca_file() {
        let server = TlsRedis::start().expect("a redis-server with --tls-port");
        run(async {
            let conn = client(config(&server, &Trust::File(server.ca_path()))).await;
            lease_conformance::tls::group_settles_over_tls::<Fred>(&conn).await;
        });
    }

    #[test]
    fn a_client_trusting_another_ca_is_refused() {
        let server = TlsRedis::start().expect("a redis-server with --tls-port");
        run(async {
            // No reconnect policy: `init` reports the first failure.
            let config = config(&server, &Trust::File(server.other_ca_path()));
            let client = Builder::from_config(config).build().expect("fred client");
            let error = client.init().await.expect_err("not trusted");
            // fred reports rustls's verdict as an I/O error.
            assert!(error.details().contains("UnknownIssuer"), "{error:?}");
        });
    }
}
