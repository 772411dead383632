//! `lease run`: a command that runs only while this process holds a pair.

use std::process::{ExitCode, ExitStatus};
use std::time::{Duration, Instant};

use clap::Args;
use futures::StreamExt;
use lease_core::{DEFAULT_GAP, Mode, Options};
use lease_redis::{Assignment, IdleReason, Lease, discover};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use rustix::process::{Pid, Signal, kill_process_group};
use tokio::process::{Child, Command};
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

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

    /// How long the command may take to exit after SIGTERM before its
    /// process group gets SIGKILL, in milliseconds. Default: the gap
    /// (gap x interval).
    #[arg(long, value_name = "MS")]
    drain_timeout: Option<u64>,

    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<String>,
}

/// What `lease run` says about itself, on stderr.
fn say(message: &str) {
    eprintln!("lease: {message}");
}

pub(crate) fn run(args: &RunArgs) -> Result<ExitCode, CliError> {
    let opts = options(&args.group, Some(args.interval), Some(args.mode)).with_gap(args.gap);
    validate(&opts)?;
    let client = client(&args.group)?;
    let drain = Duration::from_millis(
        args.drain_timeout
            .unwrap_or_else(|| (args.gap * args.interval as f64).round() as u64),
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Runtime(format!("cannot start the runtime: {e}")))?;
    runtime.block_on(supervise(args, opts, client, drain))
}

/// The loop: follow the pair stream, keep the command running exactly while
/// a pair is held.
async fn supervise(
    args: &RunArgs,
    opts: Options,
    client: redis::Client,
    drain: Duration,
) -> Result<ExitCode, CliError> {
    let shown = redact(&args.group.redis);
    let signals = |kind: SignalKind| {
        signal(kind).map_err(|e| CliError::Runtime(format!("cannot watch signals: {e}")))
    };
    let (mut term, mut int) = (
        signals(SignalKind::terminate())?,
        signals(SignalKind::interrupt())?,
    );
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(3)))
        .set_number_of_retries(1);
    let conn = tokio::select! {
        conn = ConnectionManager::new_with_config(client, config) => {
            conn.map_err(|e| connect_error(&shown, &e))?
        }
        _ = term.recv() => return Ok(ExitCode::SUCCESS),
        _ = int.recv() => return Ok(ExitCode::SUCCESS),
    };
    let name = opts.name.clone();
    let cancel = CancellationToken::new();
    let mut pairs = discover(conn, opts.with_cancel_type().with_cancel(cancel.clone()))?;
    say(&format!(
        "group {name} at {shown}: registering every {} ms; the command runs while a pair is held",
        args.interval
    ));

    let mut child: Option<Child> = None;
    let mut held: Option<Lease> = None;
    let mut restart_at: Option<Instant> = None;
    let mut failure: Option<CliError> = None;
    loop {
        tokio::select! {
            _ = term.recv() => {
                say("SIGTERM: standing down");
                cancel.cancel();
            }
            _ = int.recv() => {
                say("SIGINT: standing down");
                cancel.cancel();
            }
            pair = pairs.next() => {
                let Some(pair) = pair else { break };
                if let Some(running) = child.take() {
                    stop(running, drain).await;
                }
                restart_at = None;
                let reason = match &pair {
                    Assignment::Idle(idle) => Some(idle.reason),
                    Assignment::Held(_) => None,
                };
                held = pair.into_lease();
                match &held {
                    Some(lease) => match start(&args.command, lease, &name) {
                        Ok(c) => child = Some(c),
                        Err(e) => {
                            failure = Some(CliError::Runtime(format!(
                                "cannot start {:?}: {e}",
                                args.command[0]
                            )));
                            cancel.cancel();
                        }
                    },
                    None => match reason {
                        Some(IdleReason::UnsupportedServer(why)) => {
                            // The worker registers nothing and its stream
                            // ends after this value.
                            failure = Some(CliError::Runtime(format!("{shown}: refused: {why}")));
                        }
                        Some(IdleReason::Refused(refusal)) => say(&format!(
                            "refused: {refusal}; staying idle until the group's rules agree"
                        )),
                        Some(reason) if reason != IdleReason::Started => {
                            say(&format!("idle ({reason}): holding no pair, nothing runs"))
                        }
                        _ => say("idle: holding no pair, nothing runs"),
                    },
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
                    match start(&args.command, lease, &name) {
                        Ok(c) => child = Some(c),
                        Err(e) => say(&format!("cannot start {:?}: {e}", args.command[0])),
                    }
                }
            }
        }
    }
    if let Some(running) = child.take() {
        stop(running, drain).await;
    }
    say("stopped");
    match failure {
        Some(e) => Err(e),
        None => Ok(ExitCode::SUCCESS),
    }
}

/// Starts the command on `lease`, in a process group of its own (so that
/// stopping it reaches every process it started).
fn start(command: &[String], lease: &Lease, name: &str) -> std::io::Result<Child> {
    // `lease run` holds whole pairs (its options), so every value is one.
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
