//! Small std-only helpers: temporary directories, free ports, connection
//! targets, log tails.

use std::collections::HashSet;
use std::fs;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::resp::{RespConnection, RespValue};

/// Timeout used for admin commands unless the caller picks another one.
pub(crate) const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(5);

/// A directory under [`std::env::temp_dir`] removed (recursively) on drop.
#[derive(Debug)]
pub(crate) struct TempDir {
    path: PathBuf,
}

impl TempDir {
    pub(crate) fn new(prefix: &str) -> io::Result<TempDir> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let base = std::env::temp_dir();
        let pid = std::process::id();
        // A stale directory of an earlier process with the same pid may
        // exist; `create_dir` fails on it and we simply take the next number.
        for _ in 0..1000 {
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let path = base.join(format!("{prefix}-{pid}-{n}"));
            match fs::create_dir(&path) {
                Ok(()) => return Ok(TempDir { path }),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("cannot create temp dir {}: {e}", path.display()),
                    ));
                }
            }
        }
        Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("cannot find a free temp dir name under {}", base.display()),
        ))
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

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

/// Where and how to open admin connections.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) addr: SocketAddr,
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
    pub(crate) db: u32,
}

impl Target {
    pub(crate) fn local(port: u16) -> Target {
        Target {
            addr: SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port)),
            username: None,
            password: None,
            db: 0,
        }
    }

    /// Opens a connection, authenticates and selects the database.
    pub(crate) fn connect(&self, timeout: Duration) -> io::Result<RespConnection> {
        let mut conn = RespConnection::connect(self.addr, timeout).map_err(|e| {
            io::Error::new(e.kind(), format!("cannot connect to {}: {e}", self.addr))
        })?;
        if let Some(password) = &self.password {
            match &self.username {
                Some(user) => conn.command(&["AUTH", user, password])?,
                None => conn.command(&["AUTH", password])?,
            };
        }
        if self.db != 0 {
            conn.command(&["SELECT", &self.db.to_string()])?;
        }
        Ok(conn)
    }

    pub(crate) fn command<A: AsRef<[u8]>>(
        &self,
        args: &[A],
        timeout: Duration,
    ) -> io::Result<RespValue> {
        self.connect(timeout)?.command(args)
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
