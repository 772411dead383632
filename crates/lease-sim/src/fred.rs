//! The simulated Redis behind fred: [`FredMocks`], a
//! [`fred::mocks::Mocks`] on a [`SimRedis`], for `lease-fred` (and any code
//! written against fred).
//!
//! fred's mocking layer answers each command synchronously, inside fred's
//! routing task, so the faults that need time cannot be modelled as they
//! are on the other connections: latency is zero; a lost request or reply
//! is answered at once with a timeout error (a lost reply's command has
//! run); a command sent while the server is paused or the connection is
//! stalled is answered with a timeout error; while the server is down after
//! a restart, with an I/O error. Duplicates run twice. The store, the
//! scripts' semantics, `NOSCRIPT`, restarts and clock steps are the same as
//! on every connection of the server.

use std::sync::Arc;

use fred::error::{Error, ErrorKind};
use fred::mocks::{MockCommand, Mocks};
use fred::types::Value;

use crate::server::{Reply, SimRedis, Unanswered};

/// fred's mocking layer on a [`SimRedis`], as one named connection (the name
/// [`SimRedis::stall`] takes): put it in `fred::types::config::Config::mocks`
/// and build the client as usual.
///
/// ```
/// use std::sync::Arc;
/// use fred::prelude::*;
/// use lease_sim::{SimRedis, SimRedisConfig};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let redis = SimRedis::new(SimRedisConfig::new(7));
/// let config = Config {
///     mocks: Some(Arc::new(redis.fred_mocks("w0"))),
///     ..Config::default()
/// };
/// let client = Builder::from_config(config).build().unwrap();
/// client.init().await.unwrap();
/// let pong: String = client.ping(None).await.unwrap();
/// assert_eq!(pong, "PONG");
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct FredMocks {
    server: SimRedis,
    name: Arc<str>,
}

impl SimRedis {
    /// fred's mocking layer on this server, as the connection named `name`.
    pub fn fred_mocks(&self, name: &str) -> FredMocks {
        FredMocks {
            server: self.clone(),
            name: Arc::from(name),
        }
    }
}

fn bytes(value: &Value) -> Vec<u8> {
    match value {
        Value::Bytes(b) => b.to_vec(),
        Value::String(s) => s.as_bytes().to_vec(),
        other => other
            .as_str()
            .map(|s| s.into_owned().into_bytes())
            .unwrap_or_default(),
    }
}

impl Mocks for FredMocks {
    fn process_command(&self, command: MockCommand) -> Result<Value, Error> {
        let mut args = vec![command.cmd.as_bytes().to_vec()];
        args.extend(command.subcommand.iter().map(|s| s.as_bytes().to_vec()));
        args.extend(command.args.iter().map(bytes));
        match self.server.request_now(&self.name, &args) {
            Ok(Reply::Integers(values)) => Ok(Value::Array(
                values.into_iter().map(Value::Integer).collect(),
            )),
            Ok(Reply::Bulk(text)) => Ok(Value::String(text.into())),
            Ok(Reply::Simple(text)) => Ok(Value::String(text.into())),
            Ok(Reply::Error(code, message)) => {
                Err(Error::new(ErrorKind::Unknown, format!("{code} {message}")))
            }
            Err(Unanswered::Down) => Err(Error::new(
                ErrorKind::IO,
                "connection refused (the simulated Redis is restarting)",
            )),
            Err(Unanswered::Lost) => Err(Error::new(
                ErrorKind::Timeout,
                "request or reply lost (simulated)",
            )),
            Err(Unanswered::Held) => Err(Error::new(
                ErrorKind::Timeout,
                "server paused or connection stalled (simulated)",
            )),
        }
    }
}
