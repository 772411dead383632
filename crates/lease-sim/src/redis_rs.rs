//! The simulated Redis behind redis-rs: [`SimConnection`], a
//! [`redis::aio::ConnectionLike`] in process, for `lease-redis` (and any
//! code written against redis-rs's async connections).

use std::sync::Arc;

use redis::aio::ConnectionLike;
use redis::{Arg, Cmd, ErrorKind, RedisError, RedisFuture, ServerErrorKind, Value};

use crate::server::{Down, Reply, SimRedis};

/// One client connection to a [`SimRedis`], as redis-rs's async
/// connections are: pass it to `lease_redis::discover` where production
/// code passes a `MultiplexedConnection` or a `ConnectionManager`.
///
/// Cloning is cheap; clones are the same connection (the same name, so the
/// same [`SimRedis::stall`]). After [`SimRedis::restart`] requests fail with
/// an I/O error (connection refused) until the server is back, then work
/// again, as a `ConnectionManager` behaves. Pipelines are refused.
///
/// ```
/// use lease_sim::{SimRedis, SimRedisConfig};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let redis = SimRedis::new(SimRedisConfig::new(7));
/// let mut conn = redis.connection("w0");
/// let pong: String = redis::cmd("PING").query_async(&mut conn).await.unwrap();
/// assert_eq!(pong, "PONG");
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct SimConnection {
    server: SimRedis,
    name: Arc<str>,
}

impl SimRedis {
    /// A redis-rs connection to this server named `name` (the name that
    /// [`SimRedis::stall`] takes).
    pub fn connection(&self, name: &str) -> SimConnection {
        SimConnection {
            server: self.clone(),
            name: Arc::from(name),
        }
    }
}

impl SimConnection {
    /// The connection's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl ConnectionLike for SimConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let args: Vec<Vec<u8>> = cmd
            .args_iter()
            .map(|arg| match arg {
                Arg::Simple(bytes) => bytes.to_vec(),
                _ => b"0".to_vec(),
            })
            .collect();
        let server = self.server.clone();
        let name = self.name.clone();
        Box::pin(async move { value(server.request(&name, args).await) })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        _pipeline: &'a redis::Pipeline,
        _offset: usize,
        _count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async {
            Err(RedisError::from((
                ErrorKind::Client,
                "pipelines are not supported by the simulated connection",
            )))
        })
    }

    fn get_db(&self) -> i64 {
        0
    }
}

/// A reply as redis-rs gives it.
fn value(reply: Result<Reply, Down>) -> Result<Value, RedisError> {
    match reply {
        Err(down) => Err(RedisError::from(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            down.to_string(),
        ))),
        Ok(Reply::Integers(values)) => {
            Ok(Value::Array(values.into_iter().map(Value::Int).collect()))
        }
        Ok(Reply::Bulk(text)) => Ok(Value::BulkString(text.into_bytes())),
        Ok(Reply::Simple(text)) => Ok(Value::SimpleString(text.to_owned())),
        Ok(Reply::Error(code, message)) => Err(match code {
            "NOSCRIPT" => (
                ErrorKind::Server(ServerErrorKind::NoScript),
                "NOSCRIPT",
                message,
            )
                .into(),
            "ERR" => (
                ErrorKind::Server(ServerErrorKind::ResponseError),
                "ERR",
                message,
            )
                .into(),
            _ => redis::make_extension_error(code.to_owned(), Some(message)),
        }),
    }
}
