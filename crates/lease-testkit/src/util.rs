//! Small helpers: free ports, admin connections (redis-rs's sync client),
//! log tails.

use std::collections::HashSet;
use std::fs;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, ToSocketAddrs};
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use redis::{
    Client, Connection, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisConnectionInfo,
    RedisError, RedisResult, Value,
};

/// Timeout used for admin commands unless the caller picks another one.
pub(crate) const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(5);

/// Ports handed out by this process and not yet released. Prevents two
/// servers of the same test binary from racing for the same port when the
/// kernel hands out a recently released port again.
static RESERVED_PORTS: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// A port on 127.0.0.1 that was free when it was picked, reserved within
/// this process until dropped.
#[derive(Debug)]
pub(crate) struct PortLease {
    port: u16,
}

impl PortLease {
    /// Binds 127.0.0.1:0, reads the port and releases the socket.
    ///
    /// Another process may still grab the port before redis-server binds it;
    /// callers detect that and retry with a new lease.
    pub(crate) fn pick() -> io::Result<PortLease> {
        for _ in 0..100 {
            let port = {
                let listener = TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))?;
                listener.local_addr()?.port()
            };
            let mut reserved = RESERVED_PORTS.lock().unwrap_or_else(|e| e.into_inner());
            if reserved.get_or_insert_with(HashSet::new).insert(port) {
                return Ok(PortLease { port });
            }
        }
        Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            "could not find a free TCP port on 127.0.0.1",
        ))
    }

    pub(crate) fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for PortLease {
    fn drop(&mut self) {
        let mut reserved = RESERVED_PORTS.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(set) = reserved.as_mut() {
            set.remove(&self.port);
        }
    }
}

/// Where and how to open admin connections: redis-rs's connection info
/// (address, user, password, database) and the socket address it names.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) addr: SocketAddr,
    pub(crate) info: ConnectionInfo,
}

impl Target {
    /// A server on `127.0.0.1:port`, authenticating with `password` if set.
    pub(crate) fn local(port: u16, password: Option<&str>) -> Target {
        let mut redis = RedisConnectionInfo::default();
        if let Some(password) = password {
            redis = redis.set_password(password);
        }
        let info = ConnectionAddr::Tcp(Ipv4Addr::LOCALHOST.to_string(), port)
            .into_connection_info()
            .map(|info| info.set_redis_settings(redis));
        Target {
            addr: SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port)),
            // Building the info of a TCP address cannot fail.
            info: info.unwrap_or_else(|e| unreachable!("{e}")),
        }
    }

    /// The target of a `redis://` URL (parsed by redis-rs: user, password,
    /// database; percent-coding undone).
    pub(crate) fn from_url(url: &str) -> io::Result<Target> {
        let bad = |why: String| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: {why}", shown_url(url)),
            )
        };
        let info = url.into_connection_info().map_err(|e| bad(e.to_string()))?;
        let ConnectionAddr::Tcp(host, port) = info.addr() else {
            return Err(bad("only redis:// (TCP) URLs are supported".into()));
        };
        let addr = (host.as_str(), *port)
            .to_socket_addrs()
            .map_err(|e| bad(e.to_string()))?
            .next()
            .ok_or_else(|| bad(format!("{host} has no address")))?;
        Ok(Target { addr, info })
    }

    /// Opens a connection (authenticated, database selected) whose reads
    /// and writes time out after `timeout`.
    pub(crate) fn connect(&self, timeout: Duration) -> io::Result<Connection> {
        let connect = || -> RedisResult<Connection> {
            let conn = Client::open(self.info.clone())?.get_connection_with_timeout(timeout)?;
            conn.set_read_timeout(Some(timeout))?;
            conn.set_write_timeout(Some(timeout))?;
            Ok(conn)
        };
        connect().map_err(|e| io_error(&format!("cannot connect to {}", self.addr), e))
    }

    /// Runs one command over a fresh connection; an error reply is an
    /// `Err` carrying the server's message.
    pub(crate) fn command<A: AsRef<[u8]>>(
        &self,
        args: &[A],
        timeout: Duration,
    ) -> io::Result<Value> {
        let mut conn = self.connect(timeout)?;
        command(&mut conn, args)
    }
}

/// Runs `args` (command name first) on `conn`. An error reply is an `Err`
/// of kind [`Other`](io::ErrorKind::Other) carrying the server's message.
pub fn command<A: AsRef<[u8]>>(conn: &mut Connection, args: &[A]) -> io::Result<Value> {
    let mut cmd = redis::Cmd::new();
    for arg in args {
        cmd.arg(arg.as_ref());
    }
    cmd.query::<Value>(conn)
        .map_err(|e| io_error("command failed", e))
}

/// An `io::Error` for a redis-rs error: its I/O kind where it has one
/// (refused, timed out, ...), `Other` for a server's error reply, whose text
/// is the server's (`MOVED 5225 127.0.0.1:7001`, `NOSCRIPT ...`).
fn io_error(what: &str, e: RedisError) -> io::Error {
    if let Some(code) = e.code() {
        let detail = e.detail().unwrap_or_default();
        return io::Error::other(format!("{what}: {code} {detail}"));
    }
    let kind = if e.is_timeout() {
        io::ErrorKind::TimedOut
    } else if e.is_connection_refusal() {
        io::ErrorKind::ConnectionRefused
    } else {
        io::ErrorKind::Other
    };
    io::Error::new(kind, format!("{what}: {e}"))
}

/// The URL for messages, password hidden.
fn shown_url(url: &str) -> String {
    match url.rsplit_once('@') {
        Some((_, host)) => format!("redis://***@{host}"),
        None => url.to_owned(),
    }
}

/// The last `lines` lines of a (log) file from byte `offset` on, or a note
/// why it is unavailable.
pub(crate) fn file_tail(path: &Path, offset: u64, lines: usize) -> String {
    match fs::read(path) {
        Ok(bytes) => {
            let from = usize::try_from(offset)
                .unwrap_or(usize::MAX)
                .min(bytes.len());
            let text = String::from_utf8_lossy(&bytes[from..]);
            let all: Vec<&str> = text.lines().collect();
            let start = all.len().saturating_sub(lines);
            all[start..].join("\n")
        }
        Err(e) => format!("<cannot read {}: {e}>", path.display()),
    }
}

/// Renders a program invocation for error messages.
pub(crate) fn render_command(program: &str, args: &[String]) -> String {
    let mut out = program.to_owned();
    for arg in args {
        out.push(' ');
        if arg.is_empty() || arg.contains(char::is_whitespace) {
            out.push_str(&format!("{arg:?}"));
        } else {
            out.push_str(arg);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_parsed_by_redis_rs_with_user_password_and_database() {
        let t = Target::from_url("redis://me:s3cr%40t@127.0.0.1:6390/2").unwrap();
        assert_eq!(t.addr, "127.0.0.1:6390".parse().unwrap());
        let settings = t.info.redis_settings();
        assert_eq!(settings.username(), Some("me"));
        assert_eq!(settings.password(), Some("s3cr@t"));
        assert_eq!(settings.db(), 2);
        let t = Target::from_url("redis://localhost:7001/").unwrap();
        assert_eq!(t.addr.port(), 7001);
        assert!(t.addr.ip().is_loopback());
    }

    #[test]
    fn bad_urls_are_rejected_without_showing_the_password() {
        for url in [
            "http://u:pw@127.0.0.1/",
            "redis+unix:///tmp/redis.sock",
            "not a url",
        ] {
            let err = Target::from_url(url).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{url}");
            assert!(!err.to_string().contains("pw"), "{err}");
        }
    }

    #[test]
    fn local_targets_authenticate_when_asked() {
        let t = Target::local(7000, Some("pw"));
        assert_eq!(t.info.redis_settings().password(), Some("pw"));
        assert_eq!(t.addr.port(), 7000);
        assert_eq!(
            Target::local(7000, None).info.redis_settings().password(),
            None
        );
    }
}
