//! A private PostgreSQL server child process, for tests of task sources
//! that select a lease's rows themselves (push-down predicates).

use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::util::{PortLease, file_tail, render_command};

/// How long a fresh server may take to accept connections.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a stopping server may take to exit after `SIGQUIT`.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// Fresh ports tried when another process wins the race for a picked one.
const START_ATTEMPTS: usize = 5;
/// Lines of the server log included in error messages.
const LOG_TAIL_LINES: usize = 25;
/// The superuser `initdb` creates; the server trusts every local
/// connection, so no password.
const USER: &str = "postgres";
/// The account the server runs as when the tests run as root (PostgreSQL
/// refuses to run as root).
const SERVICE_ACCOUNT: &str = "postgres";

/// A real PostgreSQL server (`initdb` + `postgres`) on a free port of
/// `127.0.0.1`, with its data directory and its socket in a temporary
/// directory of its own, trusting every connection from this machine, and
/// tuned for tests (`fsync`, full page writes and synchronous commit off).
///
/// The programs come from `$LEASE_PG_BIN` if set, else from the newest
/// `/usr/lib/postgresql/<version>/bin` (Debian's `postgresql` package;
/// `scripts/test.sh` installs it where it is missing), else from `PATH`.
/// Run as root, the server runs as the `postgres` account (PostgreSQL
/// refuses root), which then owns the directory. Never the system's server
/// on 5432: each value starts its own.
///
/// The server is stopped (`SIGQUIT`, an immediate shutdown that removes
/// its shared memory; `SIGKILL` if that takes more than 10 s) and its
/// directory removed when the value is dropped; a watchdog does the same if
/// the test process dies first.
#[derive(Debug)]
pub struct PostgresServer {
    // Field order: the process goes before the directory it lives in.
    process: Option<PgProcess>,
    port: PortLease,
    bin: PathBuf,
    dir: TempDir,
}

#[derive(Debug)]
struct PgProcess {
    child: Child,
    watchdog: Option<Child>,
}

impl PostgresServer {
    /// Runs `initdb` in a fresh temporary directory, starts the server on a
    /// free port and waits until it accepts connections (at most 30 s).
    pub fn start() -> io::Result<PostgresServer> {
        let bin = pg_bin_dir();
        let dir = tempfile::Builder::new()
            .prefix("lease-testkit-postgres-")
            .tempdir()?;
        let account = service_account()?;
        if let Some((uid, gid)) = account {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))?;
        }
        let data = dir.path().join("data");
        let initdb = bin.join("initdb");
        let args: Vec<String> = [
            "-D",
            &data.display().to_string(),
            "-U",
            USER,
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--no-sync",
            "--no-instructions",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        let mut cmd = Command::new(&initdb);
        cmd.args(&args).current_dir(dir.path()).env("LC_ALL", "C");
        as_account(&mut cmd, account);
        let out = cmd.output().map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "cannot run {}: {e} (is PostgreSQL installed? Debian: apt-get install \
                     postgresql; or set LEASE_PG_BIN to its bin directory)",
                    initdb.display()
                ),
            )
        })?;
        if !out.status.success() {
            return Err(io::Error::other(format!(
                "{} failed ({}):\n{}",
                render_command(&initdb.display().to_string(), &args),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        let mut last = None;
        for _ in 0..START_ATTEMPTS {
            let port = PortLease::pick()?;
            match launch(&bin, dir.path(), port.port(), account) {
                Ok(process) => {
                    return Ok(PostgresServer {
                        process: Some(process),
                        port,
                        bin,
                        dir,
                    });
                }
                Err(Launch::PortRace(e)) => last = Some(e),
                Err(Launch::Fatal(e)) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("no port")))
    }

    /// The port on `127.0.0.1`.
    pub fn port(&self) -> u16 {
        self.port.port()
    }

    /// `127.0.0.1`.
    pub fn host(&self) -> &'static str {
        "127.0.0.1"
    }

    /// The superuser, `postgres` (no password: the server trusts local
    /// connections).
    pub fn user(&self) -> &'static str {
        USER
    }

    /// The database that always exists, `postgres`.
    pub fn dbname(&self) -> &'static str {
        "postgres"
    }

    /// `postgresql://postgres@127.0.0.1:PORT/postgres`, for clients that
    /// take a URL.
    pub fn url(&self) -> String {
        format!(
            "postgresql://{USER}@127.0.0.1:{}/{}",
            self.port(),
            self.dbname()
        )
    }

    /// `host=127.0.0.1 port=PORT user=postgres dbname=postgres`, for
    /// clients that take libpq's key-value form (tokio-postgres's
    /// `Config`).
    pub fn conninfo(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user={USER} dbname={}",
            self.port(),
            self.dbname()
        )
    }

    /// The server's directory (data directory `data/`, socket, log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The last `lines` lines of the server's log.
    pub fn log_tail(&self, lines: usize) -> String {
        file_tail(&self.dir.path().join(LOG_FILE), 0, lines)
    }

    /// Runs `sql` with `psql` (stopping at the first error) and returns what
    /// it printed, unaligned and without headers (`psql -At`): one row per
    /// line, columns separated by `|`. For setting up and checking tables
    /// without a client library.
    pub fn psql(&self, sql: &str) -> io::Result<String> {
        let psql = self.bin.join("psql");
        let out: Output = Command::new(&psql)
            .args(["-X", "-At", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1"])
            .args(["-p", &self.port().to_string(), "-U", USER, "-d", "postgres"])
            .args(["-c", sql])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| io::Error::new(e.kind(), format!("cannot run {}: {e}", psql.display())))?;
        if !out.status.success() {
            return Err(io::Error::other(format!(
                "psql failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Stops the server (an immediate shutdown). Idempotent.
    pub fn stop(&mut self) -> io::Result<()> {
        // Dropping the process stops it.
        drop(self.process.take());
        Ok(())
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

const LOG_FILE: &str = "postgres.log";

enum Launch {
    PortRace(io::Error),
    Fatal(io::Error),
}

fn launch(
    bin: &Path,
    dir: &Path,
    port: u16,
    account: Option<(u32, u32)>,
) -> Result<PgProcess, Launch> {
    let fatal = Launch::Fatal;
    let program = bin.join("postgres");
    let args: Vec<String> = [
        "-D".to_owned(),
        dir.join("data").display().to_string(),
        "-p".to_owned(),
        port.to_string(),
        "-c".to_owned(),
        "listen_addresses=127.0.0.1".to_owned(),
        "-c".to_owned(),
        format!("unix_socket_directories={}", dir.display()),
        "-c".to_owned(),
        "fsync=off".to_owned(),
        "-c".to_owned(),
        "synchronous_commit=off".to_owned(),
        "-c".to_owned(),
        "full_page_writes=off".to_owned(),
        "-c".to_owned(),
        "max_connections=60".to_owned(),
        "-c".to_owned(),
        "shared_buffers=16MB".to_owned(),
    ]
    .into();
    let log_path = dir.join(LOG_FILE);
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(fatal)?;
    let log_start = log.metadata().map_err(fatal)?.len();
    let mut cmd = Command::new(&program);
    cmd.args(&args)
        .current_dir(dir)
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(fatal)?)
        .stderr(log)
        // Ctrl-C on the test run must not reach the server; the watchdog
        // and the drop stop it.
        .process_group(0);
    as_account(&mut cmd, account);
    let child = cmd.spawn().map_err(|e| {
        fatal(io::Error::new(
            e.kind(),
            format!("cannot run {}: {e}", program.display()),
        ))
    })?;
    let watchdog = spawn_watchdog(child.id(), dir);
    let mut process = PgProcess { child, watchdog };
    let deadline = Instant::now() + READY_TIMEOUT;
    let isready = bin.join("pg_isready");
    loop {
        if let Some(status) = process.child.try_wait().map_err(fatal)? {
            let tail = file_tail(&log_path, log_start, LOG_TAIL_LINES);
            let e = io::Error::other(format!(
                "postgres exited during startup ({status})\ncommand: {}\nlog tail:\n{tail}",
                render_command(&program.display().to_string(), &args)
            ));
            return Err(if tail.contains("already in use") {
                Launch::PortRace(e)
            } else {
                Launch::Fatal(e)
            });
        }
        let ready = Command::new(&isready)
            .args(["-q", "-h", "127.0.0.1", "-p", &port.to_string(), "-U", USER])
            .stdin(Stdio::null())
            .status()
            .map_err(fatal)?;
        if ready.success() {
            return Ok(process);
        }
        if Instant::now() >= deadline {
            return Err(Launch::Fatal(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "postgres did not accept connections on port {port} within {READY_TIMEOUT:?}\nlog tail:\n{}",
                    file_tail(&log_path, log_start, LOG_TAIL_LINES)
                ),
            )));
        }
        thread::sleep(Duration::from_millis(50));
    }
}

impl Drop for PgProcess {
    fn drop(&mut self) {
        if let Some(mut w) = self.watchdog.take() {
            let _ = w.kill();
            let _ = w.wait();
        }
        if matches!(self.child.try_wait(), Ok(None)) {
            quit(self.child.id());
            let deadline = Instant::now() + STOP_TIMEOUT;
            while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
                thread::sleep(Duration::from_millis(20));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Sends `SIGQUIT` (PostgreSQL's immediate shutdown) to `pid`, the
/// postmaster this process started and has not reaped, so never a stranger.
fn quit(pid: u32) {
    use rustix::process::{Pid, Signal, kill_process};
    if let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) {
        let _ = kill_process(pid, Signal::QUIT);
    }
}

/// `sh -c 'read; kill -QUIT PID; sleep 2; kill -9 PID; rm -rf DIR'` with a
/// piped stdin only this process holds: if this process dies without
/// stopping the server, the pipe closes and the watchdog stops it.
fn spawn_watchdog(pid: u32, dir: &Path) -> Option<Child> {
    Command::new("/bin/sh")
        .arg("-c")
        .arg(
            r#"read _unused; kill -QUIT "$1" 2>/dev/null; sleep 2; kill -9 "$1" 2>/dev/null; rm -rf -- "$2""#,
        )
        .arg("lease-testkit-postgres-watchdog")
        .arg(pid.to_string())
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .ok()
}

/// Runs `cmd` as `account` (uid, gid), if given.
fn as_account(cmd: &mut Command, account: Option<(u32, u32)>) {
    if let Some((uid, gid)) = account {
        cmd.uid(uid).gid(gid);
    }
}

/// `Some((uid, gid))` of the `postgres` account when this process runs as
/// root, `None` otherwise (the server then runs as the current user).
fn service_account() -> io::Result<Option<(u32, u32)>> {
    use std::os::unix::fs::MetadataExt;
    // /proc/self belongs to the process's effective user.
    if fs::metadata("/proc/self")?.uid() != 0 {
        return Ok(None);
    }
    let passwd = fs::read_to_string("/etc/passwd")?;
    passwd
        .lines()
        .find_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            (fields.len() >= 4 && fields[0] == SERVICE_ACCOUNT)
                .then(|| Some((fields[2].parse().ok()?, fields[3].parse().ok()?)))
                .flatten()
        })
        .map(Some)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                "running as root, and there is no postgres account to run PostgreSQL as \
                 (PostgreSQL refuses root; Debian's postgresql package creates the account)",
            )
        })
}

/// `$LEASE_PG_BIN`, else the newest `/usr/lib/postgresql/<v>/bin` with an
/// `initdb`, else the empty path (the programs are then looked up in
/// `PATH`).
fn pg_bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("LEASE_PG_BIN") {
        return PathBuf::from(dir);
    }
    let mut found: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version: u32 = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin).unwrap_or_default()
}
