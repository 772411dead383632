//! [`TestRedis`]: a local server or the external one named by `REDIS_URL`.

use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::OnceLock;
use std::time::Duration;

use crate::resp::{RespConnection, RespValue};
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
        let target = parse_url(url)?;
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

    /// Opens a new admin connection (authenticated, database selected).
    pub fn connect(&self) -> io::Result<RespConnection> {
        self.target().connect(DEFAULT_COMMAND_TIMEOUT)
    }

    /// Runs one command over a fresh connection (5 s timeout); see
    /// [`RedisServer::command`].
    pub fn command<A: AsRef<[u8]>>(&self, args: &[A]) -> io::Result<RespValue> {
        self.target().command(args, DEFAULT_COMMAND_TIMEOUT)
    }

    /// Like [`command`](Self::command) with an explicit timeout.
    pub fn command_with_timeout<A: AsRef<[u8]>>(
        &self,
        args: &[A],
        timeout: Duration,
    ) -> io::Result<RespValue> {
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

/// Parses `redis://[[user]:password@]host[:port][/db]`.
fn parse_url(url: &str) -> io::Result<Target> {
    let bad = |why: &str| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("unsupported Redis URL {url:?}: {why}"),
        )
    };
    let rest = url
        .strip_prefix("redis://")
        .ok_or_else(|| bad("expected the redis:// scheme"))?;
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let (username, password) = match userinfo {
        None => (None, None),
        Some(u) => match u.split_once(':') {
            Some((user, pass)) => (
                Some(percent_decode(user).ok_or_else(|| bad("bad percent-encoding"))?)
                    .filter(|u| !u.is_empty()),
                Some(percent_decode(pass).ok_or_else(|| bad("bad percent-encoding"))?),
            ),
            None => (
                Some(percent_decode(u).ok_or_else(|| bad("bad percent-encoding"))?)
                    .filter(|u| !u.is_empty()),
                None,
            ),
        },
    };
    let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
        let (host, after) = v6.split_once(']').ok_or_else(|| bad("unclosed ["))?;
        (host, after.strip_prefix(':'))
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hostport, None),
        }
    };
    if host.is_empty() {
        return Err(bad("missing host"));
    }
    let port: u16 = match port {
        None | Some("") => 6379,
        Some(p) => p.parse().map_err(|_| bad("bad port"))?,
    };
    let db: u32 = match path.trim_end_matches('/') {
        "" => 0,
        p => p.parse().map_err(|_| bad("bad database number"))?,
    };
    let addr = (host, port)
        .to_socket_addrs()
        .map_err(|e| io::Error::new(e.kind(), format!("cannot resolve {host}:{port}: {e}")))?
        .next()
        .ok_or_else(|| bad("host resolves to no address"))?;
    Ok(Target {
        addr,
        username,
        password,
        db,
    })
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_plain_url() {
        let t = parse_url("redis://127.0.0.1:7000/").unwrap();
        assert_eq!(t.addr, "127.0.0.1:7000".parse().unwrap());
        assert_eq!((t.username, t.password, t.db), (None, None, 0));
        let t = parse_url("redis://127.0.0.1").unwrap();
        assert_eq!(t.addr.port(), 6379);
    }

    #[test]
    fn parses_auth_db_and_ipv6() {
        let t = parse_url("redis://:p%40ss@127.0.0.1:7001/3").unwrap();
        assert_eq!(t.username, None);
        assert_eq!(t.password.as_deref(), Some("p@ss"));
        assert_eq!(t.db, 3);
        let t = parse_url("redis://user:pw@[::1]:7002/").unwrap();
        assert_eq!(t.username.as_deref(), Some("user"));
        assert_eq!(t.password.as_deref(), Some("pw"));
        assert_eq!(t.addr, "[::1]:7002".parse().unwrap());
    }

    #[test]
    fn rejects_bad_urls() {
        for url in [
            "rediss://127.0.0.1/",
            "unix:///tmp/redis.sock",
            "redis://:6379/",
            "redis://127.0.0.1:notaport/",
            "redis://127.0.0.1:6379/x",
            "redis://:%zz@127.0.0.1/",
        ] {
            let err = parse_url(url).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{url}");
        }
    }
}
