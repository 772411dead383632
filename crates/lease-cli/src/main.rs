//! `lease`: look into a group's interval keys, or run any command under an
//! exclusive `(i, n)` lease.
//!
//! - `lease inspect` prints a group's recent interval keys (from the
//!   server's clock: `k`, `k-1`, `k-2`, `k-3`), their counts and TTLs, the
//!   pair each position implies, and the server time.
//! - `lease run -- <command> [args...]` runs the command while this process
//!   holds a pair, with `LEASE_I`, `LEASE_N`, `LEASE_TOKEN` and `LEASE_NAME`
//!   in its environment. When the pair changes it sends `SIGTERM` to the
//!   command's process group, waits the drain timeout, sends `SIGKILL`, and
//!   starts it again on the new pair (while idle, nothing runs).
//! - `lease sim` plays one randomized run of a group on the deterministic
//!   simulator, with every fault the guarantee covers if asked, and prints
//!   the history checker's verdict as its last line (exit 1 on a violation).
//!
//! Exit codes: 0 success, 1 runtime error, 2 invalid options or usage,
//! 3 Redis unreachable. No output ever carries a password: URLs are printed
//! with the password replaced by `***`.

mod inspect;
mod run;
mod sim;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
pub(crate) use lease_core::diag::redact_url as redact;
use lease_core::{Mode, Options, OptionsError};

/// Inspect a lease group, or run a command under an exclusive (i, n) lease.
///
/// Exit codes: 0 success, 1 runtime error, 2 invalid options or usage,
/// 3 Redis unreachable.
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
    /// implies, which pairs are in force, and the server time.
    Inspect(inspect::InspectArgs),
    /// Run a command while this process holds a pair of the group, with
    /// LEASE_I, LEASE_N, LEASE_TOKEN and LEASE_NAME in its environment.
    ///
    /// When the pair changes, the command's process group gets SIGTERM, then
    /// SIGKILL after the drain timeout, and the command starts again on the
    /// new pair; while idle, nothing runs. If the command exits on its own
    /// while the pair is held, it is started again after one second.
    /// SIGTERM or SIGINT to `lease run` stands down (the command is stopped
    /// the same way) and exits 0.
    ///
    /// The guarantee ends where the command's work is still running after
    /// its lease ended: keep drains short (the default drain timeout is the
    /// gap, 0.15 of the interval) and fence writes with LEASE_TOKEN.
    ///
    /// `lease run` always holds whole pairs (the original's handover, with
    /// the modulo split `task.id % LEASE_N == LEASE_I`): a task set of the
    /// incremental handover (rule 13) cannot be passed to a command as two
    /// numbers. Groups that want incremental handover use a library
    /// adapter (lease-redis, lease-fred, lease-smol) and its task sets.
    Run(run::RunArgs),
    /// Play one randomized run of a group on the deterministic simulator
    /// (virtual time, a simulated Redis: no server needed) and check its
    /// history; the last line is the checker's verdict.
    ///
    /// Workers join, leave, crash and stall at random; with --faults every
    /// fault under which exclusivity is claimed is injected too. A seed
    /// replays a run exactly. Exits 1 on a violation.
    Sim(sim::SimArgs),
}

/// Where the group lives: the options both subcommands share.
#[derive(Args, Debug, Clone)]
struct Group {
    /// Redis URL, such as redis://127.0.0.1:6379/ or
    /// redis://user:password@host:6379/0. Read from
    /// REDIS_URL if not given (which keeps a password out of the process
    /// list). Printed with the password replaced by ***. This build speaks
    /// plain TCP (no rediss://).
    #[arg(long, value_name = "URL", env = "REDIS_URL", hide_env_values = true)]
    redis: String,

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
    /// Anything else: exit 1.
    #[error("error: {0}")]
    Runtime(String),
}

impl CliError {
    /// 2 for invalid options, 3 for an unreachable Redis, 1 otherwise.
    fn exit_code(&self) -> u8 {
        match self {
            CliError::Options(_) | CliError::Usage(_) => 2,
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
    if e.is_io_error() || e.is_connection_refusal() || e.is_timeout() || e.is_connection_dropped() {
        CliError::Unreachable { shown, source }
    } else {
        CliError::Refused { shown, source }
    }
}

/// Opens a client for `url`, or says why the URL is not usable (exit 2).
pub(crate) fn client(url: &str) -> Result<redis::Client, CliError> {
    let shown = redact(url);
    if url.starts_with("rediss://") || url.starts_with("valkeys://") {
        return Err(CliError::Usage(format!(
            "{shown}: this build of `lease` has no TLS support; use redis:// (through a TLS tunnel \
             such as stunnel if the server needs TLS)"
        )));
    }
    redis::Client::open(url)
        .map_err(|e| CliError::Usage(format!("{shown} is not a usable Redis URL: {e}")))
}

/// Validates group options (name, prefix, interval, gap) before anything
/// connects.
pub(crate) fn validate(options: &Options) -> Result<(), CliError> {
    Ok(options.validate()?)
}

/// The `Options` for `group` with `interval` (1 s if not given: inspect
/// needs none) and `mode`.
pub(crate) fn options(group: &Group, interval: Option<u64>, mode: Option<Mode>) -> Options {
    Options::new(
        group.name.clone(),
        Duration::from_millis(interval.unwrap_or(1000)),
    )
    .with_prefix(group.prefix.clone())
    .with_mode(mode.unwrap_or_default())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Inspect(args) => inspect::inspect(&args),
        Command::Run(args) => run::run(&args),
        Command::Sim(args) => sim::sim(&args),
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
        assert!(matches!(
            client("rediss://u:pw@h/"),
            Err(CliError::Usage(m)) if m.contains("no TLS") && !m.contains("pw")
        ));
        assert!(matches!(
            client("http://u:pw@h/"),
            Err(CliError::Usage(m)) if !m.contains("pw")
        ));
        assert!(client("redis://127.0.0.1:1/").is_ok());
    }

    #[test]
    fn the_command_line_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
