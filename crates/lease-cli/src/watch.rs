//! `lease watch`: `lease inspect`'s view of a group, redrawn live.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use crate::CliError;
use crate::inspect::{InspectArgs, gather, open};

/// Options of `lease watch`.
#[derive(Args, Debug)]
pub(crate) struct WatchArgs {
    #[command(flatten)]
    inspect: InspectArgs,

    /// Time between two reads of the group, in milliseconds (default: a
    /// quarter of the interval, at least 100).
    #[arg(long, value_name = "MS")]
    every: Option<u64>,

    /// One JSON object per read, one per line (for scripts), instead of
    /// the text view.
    #[arg(long)]
    json: bool,

    /// Stop after this many reads (default: until interrupted).
    #[arg(long, value_name = "N")]
    count: Option<u64>,
}

/// Clears a terminal and puts the cursor at its top left.
const CLEAR: &str = "\x1b[H\x1b[2J";

pub(crate) fn watch(args: &WatchArgs) -> Result<ExitCode, CliError> {
    let Some(interval) = args.inspect.interval else {
        return Err(CliError::Usage(
            "lease watch needs --interval (the view is of intervals k to k-3)".to_owned(),
        ));
    };
    let every = Duration::from_millis(args.every.unwrap_or(interval / 4).max(100));
    let (mut conn, shown) = open(&args.inspect)?;
    let terminal = !args.json && std::io::stdout().is_terminal();
    let mut stdout = std::io::stdout();
    let mut reads = 0u64;
    loop {
        let frame = match gather(&mut conn, &args.inspect, &shown) {
            Ok(snapshot) if args.json => format!("{}\n", snapshot.json(&args.inspect)),
            Ok(snapshot) => snapshot.text(&args.inspect),
            Err(e) => {
                // Keep watching through an outage: reconnect at the next read.
                if let Ok((fresh, _)) = open(&args.inspect) {
                    conn = fresh;
                }
                if args.json {
                    format!("{}\n", serde_json::json!({ "error": e.to_string() }))
                } else {
                    format!("{e}\n")
                }
            }
        };
        let written = if terminal {
            write!(
                stdout,
                "{CLEAR}{frame}\nlease watch: every {} ms; Ctrl-C to stop\n",
                every.as_millis()
            )
        } else if args.json {
            write!(stdout, "{frame}")
        } else {
            writeln!(stdout, "{frame}")
        };
        // A closed pipe (`| head`) ends the watch.
        if written.and_then(|()| stdout.flush()).is_err() {
            return Ok(ExitCode::SUCCESS);
        }
        reads += 1;
        if args.count.is_some_and(|n| reads >= n) {
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(every);
    }
}
