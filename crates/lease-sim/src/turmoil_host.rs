//! The simulated Redis as a turmoil host: [`serve`] speaks RESP2 (parsed and
//! written with `redis-protocol`) on a `turmoil::net::TcpListener`, so a test
//! that already simulates its network with turmoil adds a Redis with
//! `sim.host("redis", || lease_sim::turmoil::serve(6379, config))` and
//! connects real redis-rs connections to it over turmoil streams
//! ([`connect`], [`TurmoilConnection`]).
//!
//! On the wire a Redis never loses one reply and keeps the connection: a
//! lost request or reply ([`RedisFaults`](crate::RedisFaults)) closes the
//! connection (the lost reply's command has run), as a network failure
//! would. Latency, pauses and stalls are the host's tokio timers, which
//! turmoil drives; turmoil's own faults (`sim.hold`, `sim.partition`,
//! `sim.crash` and `sim.bounce` of the host, message latency) apply as
//! well. A bounce restarts the server empty (keys and scripts gone), its
//! clock continuing from the simulation's.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{AsyncConnectionConfig, Cmd, RedisConnectionInfo, RedisError, RedisFuture, Value};
use redis_protocol::resp2::decode::decode;
use redis_protocol::resp2::encode::encode;
use redis_protocol::resp2::types::{OwnedFrame, Resp2Frame as _};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::server::{Reply, SimRedis, SimRedisConfig, Unanswered};

/// Runs a simulated Redis with `config` on port `port` of this turmoil host
/// until the host is crashed: the body of `sim.host("redis", ...)`.
///
/// The server's clock starts at `config.epoch_us` plus the simulation's
/// elapsed time, so after a bounce it goes on where it was. Each connection
/// is named by its peer's host name (the name [`SimRedis::stall`] takes).
pub async fn serve(port: u16, mut config: SimRedisConfig) -> turmoil::Result {
    if let Some(elapsed) = turmoil::sim_elapsed() {
        config.epoch_us += i64::try_from(elapsed.as_micros()).unwrap_or(0);
    }
    serve_on(port, SimRedis::new(config)).await
}

/// Like [`serve`], on a [`SimRedis`] created by the caller (inside this
/// host), for a test that also scripts the server's own faults.
pub async fn serve_on(port: u16, redis: SimRedis) -> turmoil::Result {
    let listener = turmoil::net::TcpListener::bind(("0.0.0.0", port)).await?;
    loop {
        let (stream, peer) = listener.accept().await?;
        let name = turmoil::reverse_lookup(peer.ip()).unwrap_or_else(|| peer.ip().to_string());
        tokio::spawn(connection(redis.clone(), name, stream));
    }
}

/// One client connection: frames in, replies out, in order. Ends when the
/// client closes, a frame is malformed, or a fault breaks the connection.
async fn connection(redis: SimRedis, name: String, mut stream: turmoil::net::TcpStream) {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let frame = match decode(&buffer) {
            Ok(Some((frame, used))) => {
                buffer.drain(..used);
                frame
            }
            Ok(None) => match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(read) => {
                    buffer.extend_from_slice(&chunk[..read]);
                    continue;
                }
            },
            // Malformed input: Redis answers a protocol error and closes.
            Err(e) => {
                let reply = OwnedFrame::Error(format!("ERR Protocol error: {e}"));
                let _ = write(&mut stream, &reply).await;
                return;
            }
        };
        let reply = match command(frame) {
            Some(args) => match redis.request_timed(&name, &args).await {
                Ok(reply) => frame_of(reply),
                Err(Unanswered::Down | Unanswered::Lost | Unanswered::Held) => return,
            },
            None => {
                OwnedFrame::Error("ERR Protocol error: expected an array of bulk strings".into())
            }
        };
        if write(&mut stream, &reply).await.is_err() {
            return;
        }
    }
}

/// A command's arguments, if `frame` is an array of bulk strings.
fn command(frame: OwnedFrame) -> Option<Vec<Vec<u8>>> {
    let OwnedFrame::Array(items) = frame else {
        return None;
    };
    items
        .into_iter()
        .map(|item| match item {
            OwnedFrame::BulkString(bytes) | OwnedFrame::SimpleString(bytes) => Some(bytes),
            _ => None,
        })
        .collect()
}

fn frame_of(reply: Reply) -> OwnedFrame {
    match reply {
        Reply::Integers(values) => {
            OwnedFrame::Array(values.into_iter().map(OwnedFrame::Integer).collect())
        }
        Reply::Bulk(text) => OwnedFrame::BulkString(text.into_bytes()),
        Reply::Simple(text) => OwnedFrame::SimpleString(text.as_bytes().to_vec()),
        Reply::Error(code, message) => OwnedFrame::Error(format!("{code} {message}")),
    }
}

async fn write(stream: &mut turmoil::net::TcpStream, frame: &OwnedFrame) -> std::io::Result<()> {
    let mut bytes = vec![0u8; frame.encode_len(false)];
    let len = encode(&mut bytes, frame, false).map_err(std::io::Error::other)?;
    stream.write_all(&bytes[..len]).await
}

/// A redis-rs [`MultiplexedConnection`] to `addr` (`"redis:6379"`) over a
/// turmoil stream, made with `MultiplexedConnection::new_with_config`; its
/// driver runs in a task of this host. No connection or response timeout
/// (the lease adapters time their requests out themselves). Like a plain
/// multiplexed connection to a real Redis, it fails for good once the
/// server restarts; [`TurmoilConnection`] reconnects.
pub async fn connect(addr: &str) -> Result<MultiplexedConnection, RedisError> {
    let stream = turmoil::net::TcpStream::connect(addr).await?;
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(None)
        .set_response_timeout(None);
    let info = RedisConnectionInfo::default();
    let (connection, driver) =
        MultiplexedConnection::new_with_config(&info, stream, config).await?;
    tokio::spawn(driver);
    Ok(connection)
}

/// A redis-rs connection to a turmoil host that reconnects, as a
/// `ConnectionManager` does for a real Redis: after an error or a request
/// left unanswered for `stale_after`, the next request opens a new
/// connection ([`connect`]). Cloning is cheap; clones share the connection.
#[derive(Clone)]
pub struct TurmoilConnection {
    addr: Arc<str>,
    stale_after: Duration,
    current: Arc<Mutex<Option<MultiplexedConnection>>>,
}

impl std::fmt::Debug for TurmoilConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TurmoilConnection")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl TurmoilConnection {
    /// A connection to `addr` (`"redis:6379"`), opened at the first request;
    /// a request unanswered for `stale_after` (choose the lease interval)
    /// fails and makes the next one reconnect.
    pub fn new(addr: &str, stale_after: Duration) -> Self {
        Self {
            addr: Arc::from(addr),
            stale_after,
            current: Arc::default(),
        }
    }

    fn take(&self) -> Option<MultiplexedConnection> {
        self.current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn put(&self, connection: Option<MultiplexedConnection>) {
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = connection;
    }
}

impl ConnectionLike for TurmoilConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let mut connection = match self.take() {
                Some(c) => c,
                None => {
                    let c = connect(&self.addr).await?;
                    self.put(Some(c.clone()));
                    c
                }
            };
            let reply = tokio::time::timeout(self.stale_after, connection.req_packed_command(cmd))
                .await
                .unwrap_or_else(|_| {
                    Err(RedisError::from(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "no reply in time",
                    )))
                });
            if reply
                .as_ref()
                .is_err_and(|e| e.is_io_error() || e.is_unrecoverable_error())
            {
                self.put(None);
            }
            reply
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let mut connection = match self.take() {
                Some(c) => c,
                None => {
                    let c = connect(&self.addr).await?;
                    self.put(Some(c.clone()));
                    c
                }
            };
            let replies = connection
                .req_packed_commands(pipeline, offset, count)
                .await;
            if replies
                .as_ref()
                .is_err_and(|e| e.is_io_error() || e.is_unrecoverable_error())
            {
                self.put(None);
            }
            replies
        })
    }

    fn get_db(&self) -> i64 {
        0
    }
}
