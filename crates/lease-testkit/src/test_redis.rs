//! [`TestRedis`]: a local server or the external one named by `REDIS_URL`.

use std::io;
use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Duration;

use redis::{Connection, Value};

use crate::server::RedisServer;
use crate::util::{DEFAULT_COMMAND_TIMEOUT, Target};

/// The Redis server a test talks to: either a [`RedisServer`] started by the
/// harness, or an external server given by the `REDIS_URL` environment
/// variable.
///
/// With an external server the control operations ([`stop`](Self::stop),
/// [`restart`](Self::restart), [`pause`](Self::pause), …) fail with
/// [`io::ErrorKind::Unsupported`]; tests that need them should check
/// [`can_control`](Self::can_control) and skip, or use their own
/// [`RedisServer`].
#[derive(Debug)]
pub struct TestRedis {
    backend: Backend,
}

#[derive(Debug)]
enum Backend {
    Local(RedisServer),
    External { url: String, target: Target },
}

impl TestRedis {
    /// Uses the server named by `REDIS_URL` if that variable is set and not
    /// empty (see [`external`](Self::external)); otherwise starts a new local
    /// [`RedisServer`] owned by the returned value.
    pub fn from_env() -> io::Result<TestRedis> {
        match std::env::var("REDIS_URL") {
            Ok(url) if !url.trim().is_empty() => Self::external(url.trim()),
            Ok(_) | Err(std::env::VarError::NotPresent) => RedisServer::start().map(Self::from),
            Err(e) => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("REDIS_URL: {e}"),
            )),
        }
    }

    /// One server per test binary, created on first use by
    /// [`from_env`](Self::from_env) and never stopped by the harness (a
    /// local one is killed by its watchdog when the test process exits).
    ///
    /// Only `&self` is handed out, so tests sharing it cannot stop, restart
    /// or pause it. Use [`unique_name`](crate::unique_name) to keep tests
    /// from colliding on keys.
    ///
    /// # Panics
    ///
    /// If the server cannot be started or reached; a later call tries again.
    pub fn shared() -> &'static TestRedis {
        static SHARED: OnceLock<TestRedis> = OnceLock::new();
        SHARED.get_or_init(|| {
            TestRedis::from_env()
                .unwrap_or_else(|e| panic!("lease-testkit: no Redis server for tests: {e}"))
        })
    }

    /// Uses an already running server, e.g. `redis://127.0.0.1:6379/` or
    /// `redis://:secret@redis:6379/2`. Username/password (percent-encoded)
    /// and the database number are honoured by the admin connections.
    /// The server must answer `PING`.
    pub fn external(url: &str) -> io::Result<TestRedis> {
        let target = Target::from_url(url)?;
        target
            .command(&["PING"], DEFAULT_COMMAND_TIMEOUT)
            .map_err(|e| io::Error::new(e.kind(), format!("Redis at {url} is not usable: {e}")))?;
        Ok(TestRedis {
            backend: Backend::External {
                url: url.to_owned(),
                target,
            },
        })
    }

    /// The URL to hand to the client under test.
    pub fn url(&self) -> &str {
        match &self.backend {
            Backend::Local(s) => s.url(),
            Backend::External { url, .. } => url,
        }
    }

    /// The server's socket address.
    pub fn addr(&self) -> SocketAddr {
        self.target().addr
    }

    /// The server's TCP port.
    pub fn port(&self) -> u16 {
        self.addr().port()
    }

    /// `true` for a local server, which supports stop/restart/pause.
    pub fn can_control(&self) -> bool {
        matches!(self.backend, Backend::Local(_))
    }

    /// The local server, if this is one.
    pub fn server(&self) -> Option<&RedisServer> {
        match &self.backend {
            Backend::Local(s) => Some(s),
            Backend::External { .. } => None,
        }
    }

    /// The local server, mutably, if this is one.
    pub fn server_mut(&mut self) -> Option<&mut RedisServer> {
        match &mut self.backend {
            Backend::Local(s) => Some(s),
            Backend::External { .. } => None,
        }
    }

    /// Opens a new admin connection (redis-rs's sync client, authenticated,
    /// database selected).
    pub fn connect(&self) -> io::Result<Connection> {
        self.target().connect(DEFAULT_COMMAND_TIMEOUT)
    }

    /// Runs one command over a fresh connection (5 s timeout); see
    /// [`RedisServer::command`].
    pub fn command<A: AsRef<[u8]>>(&self, args: &[A]) -> io::Result<Value> {
        self.target().command(args, DEFAULT_COMMAND_TIMEOUT)
    }

    /// Like [`command`](Self::command) with an explicit timeout.
    pub fn command_with_timeout<A: AsRef<[u8]>>(
        &self,
        args: &[A],
        timeout: Duration,
    ) -> io::Result<Value> {
        self.target().command(args, timeout)
    }

    /// See [`RedisServer::stop`]. Unsupported for an external server.
    pub fn stop(&mut self) -> io::Result<()> {
        self.control("stop")?.stop()
    }

    /// See [`RedisServer::start_again`]. Unsupported for an external server.
    pub fn start_again(&mut self) -> io::Result<()> {
        self.control("start_again")?.start_again()
    }

    /// See [`RedisServer::restart`]. Unsupported for an external server.
    pub fn restart(&mut self) -> io::Result<()> {
        self.control("restart")?.restart()
    }

    /// See [`RedisServer::pause`]. Unsupported for an external server.
    pub fn pause(&mut self, duration: Duration) -> io::Result<()> {
        self.control("pause")?.pause(duration)
    }

    /// See [`RedisServer::pause_writes`]. Unsupported for an external server.
    pub fn pause_writes(&mut self, duration: Duration) -> io::Result<()> {
        self.control("pause_writes")?.pause_writes(duration)
    }

    /// See [`RedisServer::unpause`]. Unsupported for an external server.
    pub fn unpause(&mut self) -> io::Result<()> {
        self.control("unpause")?.unpause()
    }

    fn target(&self) -> &Target {
        match &self.backend {
            Backend::Local(s) => s.target(),
            Backend::External { target, .. } => target,
        }
    }

    fn control(&mut self, what: &str) -> io::Result<&mut RedisServer> {
        match &mut self.backend {
            Backend::Local(s) => Ok(s),
            Backend::External { url, .. } => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("{what} is not possible on the external Redis server {url} (REDIS_URL)"),
            )),
        }
    }
}

impl From<RedisServer> for TestRedis {
    fn from(server: RedisServer) -> Self {
        TestRedis {
            backend: Backend::Local(server),
        }
    }
}
