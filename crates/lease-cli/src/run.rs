//! `lease run`: a command that runs only while this process holds tasks:
//! under task sets it keeps running through the group's changes and follows
//! them through a lease file; under whole pairs it is restarted on each new
//! pair.

use std::path::PathBuf;
use std::process::{ExitCode, ExitStatus};
use std::time::{Duration, Instant};

use clap::Args;
use futures::StreamExt;
use lease_core::pushdown::Buckets;
use lease_core::{DEFAULT_GAP, Handover, Mode, Options};
use lease_redis::{Assignment, Discover, IdleReason, Lease, discover};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use rustix::process::{Pid, Signal, kill_process_group};
use tokio::process::{Child, Command};
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

use crate::lease_file::LeaseFile;
use crate::{CliError, Group, client, connect_error, options, redact, validate};

/// How long after the command exits on its own it is started again (while
/// the pair is still held).
const RESTART_DELAY: Duration = Duration::from_secs(1);

/// Options of `lease run`.
#[derive(Args, Debug)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    group: Group,

    /// Interval length in milliseconds; every worker of the group must use
    /// the same.
    #[arg(long, value_name = "MS")]
    interval: u64,

    /// Gap fraction, strictly between 0 and 0.5; every worker of the group
    /// must use the same.
    #[arg(long, default_value_t = DEFAULT_GAP)]
    gap: f64,

    /// Counting mode: ranked or arrival; every worker of the group must use
    /// the same.
    #[arg(long, default_value = "ranked")]
    mode: Mode,

    /// How the command gets its tasks. task-sets (the default, Ranked
    /// only): the command keeps running through changes of the group; it
    /// reads its buckets from the JSON file named by LEASE_FILE, rewritten
    /// at each change with a line on its stdin. whole-pairs: LEASE_I and
    /// LEASE_N (task.id % LEASE_N == LEASE_I), and the command is restarted
    /// at each change. Every worker of the group must use the same (the
    /// mapping is one of the group's rules). Arrival is always whole pairs.
    #[arg(long)]
    handover: Option<Handover>,

    /// Task sets: the bucket count B. Task t is in bucket t % B, and every
    /// worker of the group must use the same B (docs/operations.md,
    /// "Push-down predicates").
    #[arg(long, default_value_t = 1024, value_name = "B")]
    buckets: u32,

    /// Task sets: where to write the lease file (default: a fresh private
    /// directory under the temporary directory, removed at exit).
    #[arg(long, value_name = "PATH")]
    lease_file: Option<PathBuf>,

    /// How long the command may take to exit after SIGTERM before its
    /// process group gets SIGKILL, in milliseconds. Default: the gap
    /// (gap x interval).
    #[arg(long, value_name = "MS")]
    drain_timeout: Option<u64>,

    /// Register under this member name (rule 18, Ranked): a restarted
    /// `lease run` with the same name takes back its position and tasks
    /// once the previous process's last lease has ended; a second live
    /// process with the name is refused (`member in use`) until the first
    /// stops. Use a name that stays with the slot, such as a StatefulSet
    /// pod name.
    #[arg(long, value_name = "NAME")]
    member: Option<String>,

    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<String>,
}

/// What `lease run` says about itself, on stderr.
fn say(message: &str) {
    eprintln!("lease: {message}");
}

pub(crate) fn run(args: &RunArgs) -> Result<ExitCode, CliError> {
    let handover = match (args.mode, args.handover) {
        (Mode::Arrival, Some(Handover::TaskSets)) => {
            return Err(CliError::Usage(
                "--handover task-sets needs --mode ranked (Arrival holds whole pairs only)"
                    .to_owned(),
            ));
        }
        (Mode::Arrival, _) => Handover::WholePairs,
        (Mode::Ranked, h) => h.unwrap_or_default(),
    };
    let mut opts = options(&args.group, Some(args.interval), Some(args.mode)).with_gap(args.gap);
    if args.mode == Mode::Ranked {
        opts = opts.with_handover(handover);
    }
    if let Some(member) = &args.member {
        opts = opts
            .with_member(member)
            .map_err(lease_core::OptionsError::from)?;
    }
    validate(&opts)?;
    if handover == Handover::TaskSets {
        // Checked before anything connects, like the group's options.
        Buckets::from_owned(args.buckets, Vec::new())
            .map_err(|e| CliError::Usage(format!("--buckets: {e}")))?;
    }
    let client = client(&args.group)?;
    let drain = Duration::from_millis(
        args.drain_timeout
            .unwrap_or_else(|| (args.gap * args.interval as f64).round() as u64),
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Runtime(format!("cannot start the runtime: {e}")))?;
    runtime.block_on(supervise(args, opts, handover, client, drain))
}

/// The loop: connect, follow the stream, keep the command running exactly
/// while tasks are held.
async fn supervise(
    args: &RunArgs,
    opts: Options,
    handover: Handover,
    client: redis::Client,
    drain: Duration,
) -> Result<ExitCode, CliError> {
    let shown = redact(&args.group.redis);
    let signals = |kind: SignalKind| {
        signal(kind).map_err(|e| CliError::Runtime(format!("cannot watch signals: {e}")))
    };
    let mut stop_signals = StopSignals {
        term: signals(SignalKind::terminate())?,
        int: signals(SignalKind::interrupt())?,
    };
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(3)))
        .set_number_of_retries(1);
    let conn = tokio::select! {
        conn = ConnectionManager::new_with_config(client, config) => {
            conn.map_err(|e| connect_error(&shown, &e))?
        }
        _ = stop_signals.recv() => return Ok(ExitCode::SUCCESS),
    };
    let name = opts.name.clone();
    let cancel = CancellationToken::new();
    let stream = discover(conn, opts.with_cancel_type().with_cancel(cancel.clone()))?;
    let session = Session {
        args,
        name: &name,
        shown: &shown,
        cancel,
        drain,
    };
    if handover == Handover::TaskSets {
        say(&format!(
            "group {name} at {shown}: registering every {} ms; the command runs while tasks are \
             held and follows their changes through LEASE_FILE",
            args.interval
        ));
        serve_task_sets(&session, stream, stop_signals).await
    } else {
        say(&format!(
            "group {name} at {shown}: registering every {} ms; the command runs while a pair is held",
            args.interval
        ));
        serve_whole_pairs(&session, stream, stop_signals).await
    }
}

/// SIGTERM and SIGINT, either of which stands the worker down.
struct StopSignals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl StopSignals {
    /// The name of the next stop signal to arrive.
    async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}

/// What both serving loops share: the arguments, the names shown, the
/// worker's cancellation and the drain timeout.
struct Session<'a> {
    args: &'a RunArgs,
    name: &'a str,
    shown: &'a str,
    cancel: CancellationToken,
    drain: Duration,
}

impl Session<'_> {
    /// Says why the worker is idle; returns the failure to exit with when
    /// the server was refused (the stream ends after that value).
    fn idle(&self, reason: IdleReason, holding: &str) -> Option<CliError> {
        match reason {
            IdleReason::UnsupportedServer(why) => {
                Some(CliError::Runtime(format!("{}: refused: {why}", self.shown)))
            }
            IdleReason::Refused(refusal) => {
                say(&format!(
                    "refused: {refusal}; staying idle until the group's rules agree"
                ));
                None
            }
            IdleReason::Started => {
                say(&format!("idle: holding {holding}, nothing runs"));
                None
            }
            reason => {
                say(&format!("idle ({reason}): holding {holding}, nothing runs"));
                None
            }
        }
    }

    fn cannot_start(&self, e: &std::io::Error) -> CliError {
        CliError::Runtime(format!("cannot start {:?}: {e}", self.args.command[0]))
    }
}

/// Whole pairs: the command is started on each pair held, with the pair
/// in its environment, and stopped at each change.
async fn serve_whole_pairs(
    session: &Session<'_>,
    mut pairs: Discover,
    mut signals: StopSignals,
) -> Result<ExitCode, CliError> {
    let command = &session.args.command;
    let mut child: Option<Child> = None;
    let mut held: Option<Lease> = None;
    let mut restart_at: Option<Instant> = None;
    let mut failure: Option<CliError> = None;
    loop {
        tokio::select! {
            which = signals.recv() => {
                say(&format!("{which}: standing down"));
                session.cancel.cancel();
            }
            pair = pairs.next() => {
                let Some(pair) = pair else { break };
                if let Some(running) = child.take() {
                    stop(running, session.drain).await;
                }
                restart_at = None;
                match pair {
                    Assignment::Held(lease) => {
                        match start(command, &lease, session.name) {
                            Ok(c) => child = Some(c),
                            Err(e) => {
                                failure = Some(session.cannot_start(&e));
                                session.cancel.cancel();
                            }
                        }
                        held = Some(lease);
                    }
                    Assignment::Idle(idle) => {
                        held = None;
                        failure = session.idle(idle.reason, "no pair").or(failure);
                    }
                }
            }
            status = wait(&mut child) => {
                child = None;
                say(&format!("the command exited on its own ({}); starting it again in {} s",
                    describe(status), RESTART_DELAY.as_secs()));
                restart_at = held.as_ref().map(|_| Instant::now() + RESTART_DELAY);
            }
            () = sleep_until(restart_at) => {
                restart_at = None;
                if let Some(lease) = held.as_ref().filter(|l| l.is_valid()) {
                    match start(command, lease, session.name) {
                        Ok(c) => child = Some(c),
                        Err(e) => say(&format!("cannot start {:?}: {e}", command[0])),
                    }
                }
            }
        }
    }
    if let Some(running) = child.take() {
        stop(running, session.drain).await;
    }
    say("stopped");
    failure.map_or(Ok(ExitCode::SUCCESS), Err)
}

/// Starts the command on `lease`, in a process group of its own (so that
/// stopping it reaches every process it started).
fn start(command: &[String], lease: &Lease, name: &str) -> std::io::Result<Child> {
    // The whole-pair path (`--handover whole-pairs`): every value is one pair.
    let (i, n) = lease.pair().map_or((0, 1), |p| (p.i(), p.n()));
    let child = Command::new(&command[0])
        .args(&command[1..])
        .env("LEASE_I", i.to_string())
        .env("LEASE_N", n.to_string())
        .env("LEASE_TOKEN", lease.token().to_string())
        .env("LEASE_NAME", name)
        .process_group(0)
        .kill_on_drop(true)
        .spawn()?;
    say(&format!(
        "holding ({i}, {n}), fencing token {}: started {:?} (pid {})",
        lease.token(),
        command[0],
        child.id().map_or("?".to_owned(), |p| p.to_string())
    ));
    Ok(child)
}

/// Sends `signal` to the child's process group (never to anything else).
fn signal_group(pid: Option<u32>, signal: Signal) {
    let pid = pid
        .and_then(|p| i32::try_from(p).ok())
        .filter(|p| *p > 1)
        .and_then(Pid::from_raw);
    if let Some(pid) = pid {
        // The group may be gone already (ESRCH): nothing to do then.
        let _ = kill_process_group(pid, signal);
    }
}

/// SIGTERM to the command's process group, up to `drain` for it to exit,
/// then SIGKILL to whatever is left of the group.
async fn stop(mut child: Child, drain: Duration) {
    let pid = child.id();
    let started = Instant::now();
    signal_group(pid, Signal::TERM);
    let status = match tokio::time::timeout(drain, child.wait()).await {
        Ok(status) => status,
        Err(_) => {
            signal_group(pid, Signal::KILL);
            child.wait().await
        }
    };
    // Processes of the group that outlived their leader go too.
    signal_group(pid, Signal::KILL);
    say(&format!(
        "stopped the command ({} after {:.2} s)",
        describe(status),
        started.elapsed().as_secs_f64()
    ));
}

/// Waits for the running child, if any (never returns if there is none).
async fn wait(child: &mut Option<Child>) -> std::io::Result<ExitStatus> {
    match child {
        Some(c) => c.wait().await,
        None => std::future::pending().await,
    }
}

/// Sleeps until `at`, if any (never returns if there is none).
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

fn describe(status: std::io::Result<ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Ok(s) => match (s.code(), s.signal()) {
            (Some(code), _) => format!("exit code {code}"),
            (None, Some(sig)) => format!("killed by signal {sig}"),
            _ => s.to_string(),
        },
        Err(e) => format!("wait failed: {e}"),
    }
}

/// Task sets: the command starts at the first value that holds tasks, with
/// the lease file already written; each later value rewrites the file and
/// puts its version on the command's stdin, and the command is stopped
/// (SIGTERM, the drain timeout, SIGKILL) only at a value that holds
/// nothing. Renewals rewrite the file too (they move its deadlines), so a
/// command that checks `valid_until_monotonic_us` before each task never
/// works past the lease even if this process stalls.
async fn serve_task_sets(
    session: &Session<'_>,
    mut stream: Discover,
    mut signals: StopSignals,
) -> Result<ExitCode, CliError> {
    let args = session.args;
    let file = LeaseFile::create(args.lease_file.clone(), session.name, args.buckets)
        .map_err(|e| CliError::Runtime(format!("cannot write the lease file: {e}")))?;
    let mut state = TaskSetState {
        session,
        file,
        child: None,
        held: None,
        restart_at: None,
        failure: None,
    };
    // Renewals move deadlines without a new value: look four times an
    // interval.
    let mut renewals = tokio::time::interval(Duration::from_millis(args.interval.div_ceil(4)));
    renewals.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            which = signals.recv() => {
                say(&format!(
                    "{which}: standing down (the command serves what is held until its drain ends)"
                ));
                session.cancel.cancel();
            }
            value = stream.next() => match value {
                None => break,
                Some(Assignment::Held(lease)) => state.on_held(lease),
                Some(Assignment::Idle(idle)) => state.on_idle(idle.reason).await,
            },
            _ = renewals.tick() => state.on_renewal_tick(),
            status = wait_served(&mut state.child) => {
                state.child = None;
                say(&format!("the command exited on its own ({}); starting it again in {} s",
                    describe(status), RESTART_DELAY.as_secs()));
                state.restart_at = state.held.as_ref().map(|_| Instant::now() + RESTART_DELAY);
            }
            () = sleep_until(state.restart_at) => state.restart(),
        }
    }
    if let Some(served) = state.child.take() {
        let _ = state.file.write(None);
        served.notify(state.file.version());
        stop(served.child, session.drain).await;
    }
    say("stopped");
    state.failure.map_or(Ok(ExitCode::SUCCESS), Err)
}

/// What the task-set loop keeps between values.
struct TaskSetState<'s, 'a> {
    session: &'s Session<'a>,
    file: LeaseFile,
    child: Option<Served>,
    held: Option<Lease>,
    restart_at: Option<Instant>,
    failure: Option<CliError>,
}

impl TaskSetState<'_, '_> {
    /// Rewrites the lease file; a failure ends the worker.
    fn write(&mut self, lease: Option<&Lease>) -> Option<u64> {
        match self.file.write(lease) {
            Ok(version) => Some(version),
            Err(e) => {
                let path = self.file.path().display();
                self.failure = Some(CliError::Runtime(format!("cannot write {path}: {e}")));
                self.session.cancel.cancel();
                None
            }
        }
    }

    /// A value that holds tasks: the file's new version, to the running
    /// command or to the one started now.
    fn on_held(&mut self, lease: Lease) {
        let Some(version) = self.write(Some(&lease)) else {
            return;
        };
        let buckets = self.session.args.buckets;
        say(&format!(
            "holding {} of {buckets} buckets in {} part(s), newest token {}: lease file version {version}",
            lease.buckets(buckets).map_or(0, |b| b.len()),
            lease.parts().len(),
            lease.token()
        ));
        match &self.child {
            Some(served) => served.notify(version),
            None => {
                self.restart_at = None;
                let session = self.session;
                match Served::start(
                    &session.args.command,
                    &self.file,
                    session.name,
                    &lease,
                    version,
                ) {
                    Ok(s) => self.child = Some(s),
                    Err(e) => {
                        self.failure = Some(session.cannot_start(&e));
                        session.cancel.cancel();
                    }
                }
            }
        }
        self.held = Some(lease);
    }

    /// A value that holds nothing: the file says so, and the command stops.
    async fn on_idle(&mut self, reason: IdleReason) {
        self.held = None;
        self.restart_at = None;
        self.write(None);
        if let Some(served) = self.child.take() {
            served.notify(self.file.version());
            stop(served.child, self.session.drain).await;
        }
        if let Some(failure) = self.session.idle(reason, "nothing") {
            self.failure = Some(failure);
        }
    }

    /// Renewals move the deadlines: the file follows when it is stale.
    fn on_renewal_tick(&mut self) {
        let Some(lease) = self.held.clone().filter(|l| self.file.is_stale(l)) else {
            return;
        };
        if let (Some(version), Some(served)) = (self.write(Some(&lease)), &self.child) {
            served.notify(version);
        }
    }

    /// The command exited on its own while tasks are held: start it again.
    fn restart(&mut self) {
        self.restart_at = None;
        let session = self.session;
        if let Some(lease) = self.held.as_ref().filter(|l| l.is_valid()) {
            let version = self.file.version();
            match Served::start(
                &session.args.command,
                &self.file,
                session.name,
                lease,
                version,
            ) {
                Ok(s) => self.child = Some(s),
                Err(e) => say(&format!("cannot start {:?}: {e}", session.args.command[0])),
            }
        }
    }
}

/// The command under task sets, and the line writer of its stdin.
struct Served {
    child: Child,
    versions: tokio::sync::watch::Sender<u64>,
}

impl Served {
    /// Starts the command in a process group of its own, with the lease
    /// file in its environment and a pipe on its stdin that carries one
    /// line, the file's version, per rewrite.
    fn start(
        command: &[String],
        file: &LeaseFile,
        name: &str,
        lease: &Lease,
        version: u64,
    ) -> std::io::Result<Served> {
        let mut child = Command::new(&command[0])
            .args(&command[1..])
            .env("LEASE_FILE", file.path())
            .env("LEASE_BUCKETS", file.buckets().to_string())
            .env("LEASE_HANDOVER", Handover::TaskSets.as_str())
            .env("LEASE_TOKEN", lease.token().to_string())
            .env("LEASE_NAME", name)
            .env_remove("LEASE_I")
            .env_remove("LEASE_N")
            .stdin(std::process::Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()?;
        say(&format!(
            "started {:?} (pid {}) on lease file {} version {version}",
            command[0],
            child.id().map_or("?".to_owned(), |p| p.to_string()),
            file.path().display()
        ));
        let (versions, mut seen) = tokio::sync::watch::channel(version);
        if let Some(mut stdin) = child.stdin.take() {
            // A writer of its own: a command that does not read its stdin
            // blocks only this task (the pipe fills), never the lease loop,
            // and versions written late are coalesced to the newest.
            tokio::spawn(async move {
                use tokio::io::AsyncWriteExt;
                while seen.changed().await.is_ok() {
                    let line = format!("{}\n", *seen.borrow_and_update());
                    if stdin.write_all(line.as_bytes()).await.is_err() {
                        break;
                    }
                    let _ = stdin.flush().await;
                }
            });
        }
        Ok(Served { child, versions })
    }

    /// Tells the command that the file is at `version` now.
    fn notify(&self, version: u64) {
        let _ = self.versions.send(version);
    }
}

/// Waits for the served command, if any (never returns if there is none).
async fn wait_served(child: &mut Option<Served>) -> std::io::Result<ExitStatus> {
    match child {
        Some(s) => s.child.wait().await,
        None => std::future::pending().await,
    }
}
