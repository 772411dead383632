//! The adapters a harness can drive, and the one place that builds their
//! clients.
//!
//! Every adapter has one function, called on a fresh OS thread: it builds
//! the adapter's own executor on that thread, connects to the worker's URL,
//! starts the adapter's pair stream with the worker's cancellation token and
//! hands it to [`super::worker::drive`]. Nothing else knows which adapter it
//! is. Adding one is a function here and a variant of [`AdapterKind`].

use std::fmt;
use std::io;
use std::str::FromStr;
use std::thread::JoinHandle;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use super::worker::{WorkerCtx, drive, starting};

/// Which adapter the workers use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AdapterKind {
    /// `lease-redis`: redis-rs on tokio (a `ConnectionManager`, which
    /// reconnects by itself), one current-thread runtime per worker.
    #[default]
    Redis,
    /// `lease-fred`: fred 10 on tokio (a client that reconnects at once,
    /// forever, and re-sends commands in flight), one current-thread runtime
    /// per worker.
    Fred,
    /// `lease-smol`: redis-rs (`smol-comp`) on smol, the adapter for smol and
    /// async-std users (a `ConnectionManager`), one smol executor per worker.
    Smol,
}

impl AdapterKind {
    /// Every adapter.
    pub const ALL: [AdapterKind; 3] = [AdapterKind::Redis, AdapterKind::Fred, AdapterKind::Smol];

    /// The name given on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            AdapterKind::Redis => "redis",
            AdapterKind::Fred => "fred",
            AdapterKind::Smol => "smol",
        }
    }

    /// Starts a worker on its own OS thread.
    pub(crate) fn spawn(self, name: &str, spec: WorkerSpec) -> io::Result<JoinHandle<()>> {
        std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || match self {
                AdapterKind::Redis => redis(spec),
                AdapterKind::Fred => fred(spec),
                AdapterKind::Smol => smol(spec),
            })
    }
}

impl fmt::Display for AdapterKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for AdapterKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        AdapterKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| format!("unknown adapter {s:?} (expected redis, fred or smol)"))
    }
}

/// Where a worker connects.
pub(crate) enum Endpoint {
    /// One server: the `redis://` URL of a proxy link, or of Redis.
    Url(String),
    /// A Redis Cluster: `redis://` URLs of some of its nodes.
    Cluster(Vec<String>),
}

/// What an adapter needs to start one worker.
pub(crate) struct WorkerSpec {
    /// Where the worker connects.
    pub(crate) endpoint: Endpoint,
    /// The group's options (name, interval, gap, mode).
    pub(crate) options: lease_core::Options,
    /// The loop's context (control, events, sink, cancellation token).
    pub(crate) ctx: WorkerCtx,
}

/// A lazy redis-rs connection manager for `url`, the same for both redis-rs
/// adapters: the first registration connects, and a failed connection is a
/// failed registration that the worker retries, as after a restart.
fn connection_manager(url: &str) -> redis::RedisResult<ConnectionManager> {
    let client = redis::Client::open(url)?;
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(1)))
        .set_min_delay(Duration::from_millis(10))
        .set_max_delay(Duration::from_millis(200))
        .set_number_of_retries(4);
    ConnectionManager::new_lazy_with_config(client, config)
}

/// A current-thread tokio runtime for one worker's thread.
fn tokio_runtime(ctx: &WorkerCtx) -> Option<tokio::runtime::Runtime> {
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => Some(rt),
        Err(e) => {
            ctx.failed(format_args!("cannot start a runtime: {e}"));
            None
        }
    }
}

/// `lease-redis` on a current-thread tokio runtime, until the worker ends.
fn redis(spec: WorkerSpec) {
    let WorkerSpec {
        endpoint,
        options,
        mut ctx,
    } = spec;
    let Some(runtime) = tokio_runtime(&ctx) else {
        return;
    };
    runtime.block_on(async move {
        let options = options.with_cancel_type().with_cancel(ctx.cancel.clone());
        let pairs = match endpoint {
            Endpoint::Url(url) => match connection_manager(&url) {
                Ok(conn) => lease_redis::discover(conn, options),
                Err(e) => return ctx.failed(e),
            },
            Endpoint::Cluster(urls) => {
                let client = match redis::cluster::ClusterClient::builder(urls)
                    .connection_timeout(Duration::from_secs(1))
                    .response_timeout(Duration::from_secs(1))
                    .build()
                {
                    Ok(c) => c,
                    Err(e) => return ctx.failed(e),
                };
                match starting(&mut ctx, client.get_async_connection()).await {
                    None => return,
                    Some(Err(e)) => return ctx.failed(e),
                    Some(Ok(conn)) => lease_redis::discover(conn, options),
                }
            }
        };
        let pairs = match pairs {
            Ok(p) => p,
            Err(e) => return ctx.failed(e),
        };
        drive(pairs, tokio::time::sleep, ctx).await;
    });
}

/// `lease-fred` on a current-thread tokio runtime, until the worker ends.
fn fred(spec: WorkerSpec) {
    use fred::prelude::{Builder, ClientLike, Config, ReconnectPolicy, ServerConfig};
    let WorkerSpec {
        endpoint,
        options,
        mut ctx,
    } = spec;
    let Some(runtime) = tokio_runtime(&ctx) else {
        return;
    };
    runtime.block_on(async move {
        let config = match &endpoint {
            Endpoint::Url(url) => Config::from_url(url),
            Endpoint::Cluster(urls) => urls
                .iter()
                .map(|url| {
                    let server = Config::from_url(url)?.server.hosts().remove(0);
                    Ok((server.host.to_string(), server.port))
                })
                .collect::<Result<Vec<_>, fred::error::Error>>()
                .map(|hosts| Config {
                    server: ServerConfig::new_clustered(hosts),
                    ..Config::default()
                }),
        };
        let mut config = match config {
            Ok(c) => c,
            Err(e) => return ctx.failed(e),
        };
        // Keep trying the first connection too (Redis may be restarting).
        config.fail_fast = false;
        let client = match Builder::from_config(config)
            .set_policy(ReconnectPolicy::new_constant(0, 10))
            .build()
        {
            Ok(c) => c,
            Err(e) => return ctx.failed(e),
        };
        match starting(&mut ctx, client.init()).await {
            None => return,
            Some(Err(e)) => return ctx.failed(e),
            // The connection task keeps running on this runtime.
            Some(Ok(_connection)) => {}
        }
        let options = options.with_cancel_type().with_cancel(ctx.cancel.clone());
        let pairs = match lease_fred::discover(client, options) {
            Ok(p) => p,
            Err(e) => return ctx.failed(e),
        };
        drive(pairs, tokio::time::sleep, ctx).await;
    });
}

/// `lease-smol` on a smol executor of the worker's own thread, until the
/// worker ends.
///
/// The adapter's worker future runs on that executor (`discover_with`), so
/// a stall freezes it with the loop. redis-rs runs each connection's own I/O
/// task on smol's global executor; it only buffers bytes, and the frozen
/// worker sees them when it wakes, as a frozen process would.
fn smol(spec: WorkerSpec) {
    let WorkerSpec {
        endpoint,
        options,
        ctx,
    } = spec;
    let url = match endpoint {
        Endpoint::Url(url) => url,
        Endpoint::Cluster(_) => {
            return ctx.failed("the smol adapter has no Redis Cluster client in this harness");
        }
    };
    let executor = smol::Executor::new();
    smol::block_on(executor.run(async {
        let conn = match connection_manager(&url) {
            Ok(c) => c,
            Err(e) => return ctx.failed(e),
        };
        // The loop cancels a tokio-util token; lease-smol has its own.
        let stop = lease_smol::CancelToken::new();
        let (cancel, relay) = (ctx.cancel.clone(), stop.clone());
        executor
            .spawn(async move {
                cancel.cancelled().await;
                relay.cancel();
            })
            .detach();
        let options = options.with_cancel_type().with_cancel(stop);
        let spawn = |worker| executor.spawn(worker).detach();
        let pairs = match lease_smol::discover_with(conn, options, spawn) {
            Ok(p) => p,
            Err(e) => return ctx.failed(e),
        };
        let sleep = |d: Duration| async move {
            smol::Timer::after(d).await;
        };
        drive(pairs, sleep, ctx).await;
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for kind in AdapterKind::ALL {
            assert_eq!(kind.as_str().parse::<AdapterKind>().unwrap(), kind);
            assert_eq!(kind.to_string(), kind.as_str());
        }
        let err = "sled".parse::<AdapterKind>().unwrap_err();
        assert!(err.contains("sled") && err.contains("fred"), "{err}");
    }
}
