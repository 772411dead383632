//! `lease`: look into a group's interval keys, or run any command under an
//! exclusive `(i, n)` lease.
//!
//! - `lease inspect` prints a group's recent interval keys (from the
//!   server's clock: `k`, `k-1`, `k-2`, `k-3`), their counts and TTLs, the
//!   pair each position implies, the server time, and what each member's
//!   positions give it under task sets (its part, its share of the
//!   buckets, what may drain, the share held by nobody).
//! - `lease watch` redraws that view live (`--json`: one object per read).
//! - `lease run -- <command> [args...]` runs the command while this process
//!   holds tasks. Under task sets (the default) the command keeps running
//!   through changes and reads what it holds from the JSON file named by
//!   `LEASE_FILE` (rewritten atomically, its version on a line of the
//!   command's stdin); under whole pairs it gets `LEASE_I` and `LEASE_N` and
//!   is restarted on each new pair (`SIGTERM` to its process group, the
//!   drain timeout, `SIGKILL`). While idle, nothing runs.
//! - `lease sim` plays one randomized run of a group on the deterministic
//!   simulator, with every fault the guarantee covers if asked, and prints
//!   the history checker's verdict as its last line (exit 1 on a violation).
//! - `lease check HISTORY [--svg FILE]` runs the same checker on any history
//!   file (docs/history-format.md: a `lease sim --history` file, a
//!   lease-chaos run), prints what it found and the same verdict line last,
//!   and draws the timeline if asked: exit 0 when clean, 1 on a violation or
//!   an anomaly, 2 on a file it cannot read or parse (with the line number
//!   and what was wrong).
//!
//! Exit codes: 0 success, 1 runtime error (or, for `sim` and `check`, a
//! violation), 2 invalid options or usage (or, for `check`, an unreadable
//! history), 3 Redis unreachable. No output ever carries a password: URLs are printed
//! with the password replaced by `***`.
//!
//! `rediss://` URLs connect over TLS (rustls): the server's certificate is
//! checked against `--ca-cert PATH` if given, else the file named by
//! `SSL_CERT_FILE`, else the system's trust store.

mod check;
mod inspect;
mod lease_file;
mod run;
mod sim;
mod watch;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
pub(crate) use lease_core::diag::redact_url as redact;
use lease_core::{Mode, Options, OptionsError};
use lease_redis::tls::{ClientError, Trust};

/// Inspect a lease group, run a command under an exclusive lease,
/// play a checked simulator run, or check a history file.
///
/// Exit codes: 0 success, 1 runtime error (for sim and check: a violation),
/// 2 invalid options or usage (for check: an unreadable history), 3 Redis
/// unreachable.
#[derive(Parser, Debug)]
#[command(name = "lease", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print a group's recent interval keys (k, k-1, k-2, k-3 from the
    /// server's clock), their counts and TTLs, the pair each position
    /// implies, which pairs are in force, the server time, and (with
    /// --interval, Ranked) the task sets: each member's positions, part,
    /// share of the buckets and drain, and the share held by nobody.
    Inspect(inspect::InspectArgs),
    /// Redraw `lease inspect`'s view live: the keys, and with task sets
    /// what each member holds (its positions in the closed sets k-3, k-2,
    /// k-1, the part its registration in k is answered with, its share of
    /// the buckets, what may still drain) and the share held by nobody.
    /// --json prints one object per read, one per line, for scripts.
    Watch(watch::WatchArgs),
    /// Run a command while this process holds tasks of the group.
    ///
    /// Task sets (the default, --handover task-sets): the command starts
    /// when tasks are first held and keeps running through the group's
    /// changes. LEASE_FILE names a JSON file with what it holds (the bucket
    /// count, the buckets, each part with its token and its deadline on
    /// CLOCK_MONOTONIC), replaced atomically at each change and renewal,
    /// and each replacement puts the file's version on a line of the
    /// command's stdin (end of file: `lease run` is gone, stop). Task t is
    /// in bucket t % LEASE_BUCKETS; every worker of the group must use the
    /// same --buckets. The command is stopped (SIGTERM, the drain timeout,
    /// SIGKILL) only when nothing is held.
    ///
    /// Whole pairs (--handover whole-pairs, and always with --mode arrival):
    /// the command gets LEASE_I and LEASE_N (task.id % LEASE_N == LEASE_I)
    /// and is restarted at each change: SIGTERM to its process group, the
    /// drain timeout, SIGKILL, and a start on the new pair; while idle,
    /// nothing runs.
    ///
    /// Both get LEASE_TOKEN and LEASE_NAME. If the command exits on its own
    /// while tasks are held, it is started again after one second. SIGTERM
    /// or SIGINT to `lease run` stands down (the command is stopped the
    /// same way) and exits 0.
    ///
    /// The guarantee ends where the command's work is still running after
    /// its lease ended: check the deadlines before each task, keep drains
    /// short (the default drain timeout is the gap, 0.15 of the interval)
    /// and fence writes with the token.
    Run(run::RunArgs),
    /// Play one randomized run of a group on the deterministic simulator
    /// (virtual time, a simulated Redis: no server needed) and check its
    /// history; the last line is the checker's verdict.
    ///
    /// Workers join, leave, crash and stall at random; with --faults every
    /// fault under which exclusivity is claimed is injected too. A seed
    /// replays a run exactly. Exits 1 on a violation.
    Sim(sim::SimArgs),
    /// Check a history file (one JSON object per line, the format of
    /// docs/history-format.md: a `lease sim --history` file, a lease-chaos
    /// run) with the same checker as `lease sim`; the last line is its
    /// verdict. Exclusivity per pair and per task, fencing per part, every
    /// lease within the end of the interval after its last renewal (when
    /// the history has clock lines), anomalies.
    ///
    /// Exits 0 when clean, 1 on a violation or an anomaly, 2 if the file
    /// cannot be read or a line is not a record (with its number).
    Check(check::CheckArgs),
}

/// Where the group lives: the options both subcommands share.
#[derive(Args, Debug, Clone)]
struct Group {
    /// Redis URL, such as redis://127.0.0.1:6379/,
    /// redis://user:password@host:6379/0, or rediss://host:6380/ for TLS.
    /// Read from REDIS_URL if not given (which keeps a password out of the
    /// process list). Printed with the password replaced by ***.
    #[arg(long, value_name = "URL", env = "REDIS_URL", hide_env_values = true)]
    redis: String,

    /// For a rediss:// URL: a PEM file of the certificate authorities to
    /// trust (only those). Without it, the file named by SSL_CERT_FILE if
    /// set, else the system's trust store.
    #[arg(long, value_name = "PATH")]
    ca_cert: Option<PathBuf>,

    /// Group name, e.g. mail-sender: non-empty, no braces, no whitespace.
    #[arg(long)]
    name: String,

    /// Key prefix, for namespacing: keys are PREFIX{NAME}:K.
    #[arg(long, default_value = "")]
    prefix: String,
}

/// Why a command failed; [`CliError::exit_code`] says with which code.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CliError {
    /// Group options that do not validate: exit 2.
    #[error("invalid options: {0}")]
    Options(#[from] OptionsError),
    /// Other invalid options or usage: exit 2.
    #[error("invalid options: {0}")]
    Usage(String),
    /// Redis did not answer: exit 3.
    #[error("Redis unreachable: {shown}: {source}")]
    Unreachable {
        /// The URL, password redacted.
        shown: String,
        /// What the client said.
        #[source]
        source: redis::RedisError,
    },
    /// Redis answered with a refusal (a wrong password, say): exit 1.
    #[error("error: {shown} refused the connection: {source}")]
    Refused {
        /// The URL, password redacted.
        shown: String,
        /// What the client said.
        #[source]
        source: redis::RedisError,
    },
    /// A file could not be written: exit 1.
    #[error("error: cannot write {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A history that could not be opened: exit 2.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A history with a line that could not be read or is not a record:
    /// exit 2.
    #[error("{}: {source}", path.display())]
    History {
        /// The file.
        path: PathBuf,
        /// Which line, and what was wrong with it.
        #[source]
        source: lease_history::HistoryError,
    },
    /// Anything else: exit 1.
    #[error("error: {0}")]
    Runtime(String),
}

impl CliError {
    /// 2 for invalid options and unreadable histories, 3 for an
    /// unreachable Redis, 1 otherwise.
    fn exit_code(&self) -> u8 {
        match self {
            CliError::Options(_)
            | CliError::Usage(_)
            | CliError::Read { .. }
            | CliError::History { .. } => 2,
            CliError::Unreachable { .. } => 3,
            CliError::Refused { .. } | CliError::Write { .. } | CliError::Runtime(_) => 1,
        }
    }

    fn report(&self) -> ExitCode {
        eprintln!("lease: {self}");
        ExitCode::from(self.exit_code())
    }
}

/// The error for a failed connection: unreachable (exit 3) if the server
/// did not answer, a runtime error (exit 1) if it answered with a refusal
/// (a wrong password, for example).
pub(crate) fn connect_error(shown: &str, e: &redis::RedisError) -> CliError {
    let (shown, source) = (shown.to_owned(), e.clone());
    if is_tls_refusal(e) {
        CliError::Refused { shown, source }
    } else if e.is_io_error()
        || e.is_connection_refusal()
        || e.is_timeout()
        || e.is_connection_dropped()
    {
        CliError::Unreachable { shown, source }
    } else {
        CliError::Refused { shown, source }
    }
}

/// Whether `e` is a TLS handshake's verdict (rustls refused the server's
/// certificate, or the server refused ours): the server answered, so it is
/// not unreachable. rustls reports it as an I/O error of kind `InvalidData`.
fn is_tls_refusal(e: &redis::RedisError) -> bool {
    e.is_io_error() && {
        let text = e.to_string();
        text.contains("certificate") || text.contains("UnknownIssuer")
    }
}

/// Opens a client for the group's URL (over TLS for `rediss://`, trusting
/// `--ca-cert`, else `SSL_CERT_FILE`, else the system's store: see
/// [`Trust::resolve`]), or says why the URL or the CA file is
/// not usable (exit 2).
pub(crate) fn client(group: &Group) -> Result<redis::Client, CliError> {
    let url = &group.redis;
    let shown = redact(url);
    let ca_cert = group.ca_cert.as_deref();
    if ca_cert.is_some() && !lease_redis::tls::is_tls_url(url) {
        return Err(CliError::Usage(format!(
            "--ca-cert is for rediss:// URLs; {shown} does not use TLS"
        )));
    }
    let trust = Trust::resolve(ca_cert);
    lease_redis::tls::client(url, &trust).map_err(|e| match e {
        ClientError::Tls(e) => CliError::Usage(format!("{shown}: {e}")),
        ClientError::Redis(e) => CliError::Usage(format!("{shown} is not a usable Redis URL: {e}")),
        other => CliError::Usage(format!("{shown}: {other}")),
    })
}

/// Validates group options (name, prefix, interval, gap) before anything
/// connects.
pub(crate) fn validate(options: &Options) -> Result<(), CliError> {
    Ok(options.validate()?)
}

/// The `Options` for `group` with `interval` (1 s if not given: inspect
/// needs none) and `mode`, with whole pairs under `task.id % n == i` in
/// Ranked mode (`lease run` sets the handover it was asked for).
pub(crate) fn options(group: &Group, interval: Option<u64>, mode: Option<Mode>) -> Options {
    let options = Options::new(
        group.name.clone(),
        Duration::from_millis(interval.unwrap_or(1000)),
    )
    .with_prefix(group.prefix.clone());
    match mode.unwrap_or_default() {
        Mode::Arrival => options.with_counting(lease_core::Counting::Arrival),
        Mode::Ranked => options.with_handover(lease_core::Handover::WholePairs),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Inspect(args) => inspect::inspect(&args),
        Command::Watch(args) => watch::watch(&args),
        Command::Run(args) => run::run(&args),
        Command::Sim(args) => sim::sim(&args),
        Command::Check(args) => check::check(&args),
    };
    match result {
        Ok(code) => code,
        Err(e) => e.report(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked_before_connecting() {
        let group = |url: &str, ca: Option<&str>| Group {
            redis: url.to_owned(),
            ca_cert: ca.map(PathBuf::from),
            name: "g".to_owned(),
            prefix: String::new(),
        };
        assert!(client(&group("rediss://u:pw@h/", None)).is_ok());
        assert!(matches!(
            client(&group("rediss://u:pw@h/", Some("/nonexistent/ca.pem"))),
            Err(CliError::Usage(m)) if m.contains("/nonexistent/ca.pem") && !m.contains("pw")
        ));
        assert!(matches!(
            client(&group("redis://u:pw@h/", Some("/nonexistent/ca.pem"))),
            Err(CliError::Usage(m)) if m.contains("--ca-cert is for rediss://") && !m.contains("pw")
        ));
        assert!(matches!(
            client(&group("http://u:pw@h/", None)),
            Err(CliError::Usage(m)) if !m.contains("pw")
        ));
        assert!(client(&group("redis://127.0.0.1:1/", None)).is_ok());
    }

    #[test]
    fn the_command_line_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
