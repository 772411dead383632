//! `lease check HISTORY [--svg FILE]`: the history checker (`lease-history`)
//! on any history file in the format of docs/history-format.md (a `lease sim
//! --history` file, a lease-chaos run against a real Redis, one written by
//! hand). It prints what it found and the checker's verdict as its last line
//! (the line `lease sim` prints), and draws the SVG timeline if asked.
//!
//! Exit codes: 0 clean, 1 a violation or an anomaly (or the picture could
//! not be written), 2 a file it cannot read or parse (the message names the
//! line and what was wrong).

use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use lease_history::timeline::{TimelineOptions, svg_with};
use lease_history::{Checker, Record, read_history};

use crate::CliError;

/// How many findings of each kind are printed before the verdict (the
/// verdict's counts are exact).
const SHOWN: usize = 20;

/// The flags of `lease check`.
#[derive(Args, Debug)]
pub(crate) struct CheckArgs {
    /// The history: one JSON object per line (docs/history-format.md), in
    /// the order it was written.
    history: PathBuf,
    /// Also draw the timeline of what the checker judged, as an SVG file.
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
}

/// Reads the history, checks it, writes the picture if asked, prints the
/// findings and the verdict (the last line).
pub(crate) fn check(args: &CheckArgs) -> Result<ExitCode, CliError> {
    let path = &args.history;
    let file = File::open(path).map_err(|source| CliError::Read {
        path: path.clone(),
        source,
    })?;
    let records = read_history(BufReader::new(file)).map_err(|source| CliError::History {
        path: path.clone(),
        source,
    })?;
    let checker = Checker::new(&records, None);
    if let Some(svg) = &args.svg {
        let title = format!("lease check {}", path.display());
        std::fs::write(
            svg,
            svg_with(&records, &title, &timeline(&records, &checker)),
        )
        .map_err(|source| CliError::Write {
            path: svg.clone(),
            source,
        })?;
    }
    let summary = checker.summary();
    show("violation", &summary.violations);
    show("fencing", &summary.fencing);
    show("interval end", &summary.interval_ends);
    if let Some(t) = &summary.tasks {
        show("task violation", &t.violations);
        show("task fencing", &t.fencing);
    }
    show("anomaly", &summary.anomalies);
    println!("{summary}");
    Ok(if summary.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Prints the first [`SHOWN`] findings of one kind, and how many more the
/// checker kept.
fn show<T: std::fmt::Display>(kind: &str, items: &[T]) {
    for item in items.iter().take(SHOWN) {
        println!("{kind}: {item}");
    }
    if items.len() > SHOWN {
        println!("{kind}: ... and {} more", items.len() - SHOWN);
    }
}

/// The timeline's options: the interval grid from the history's `clock`
/// lines, if it has any, and a width that grows with the run's length.
fn timeline(records: &[Record], checker: &Checker) -> TimelineOptions {
    let interval_us = records.iter().find_map(|r| match r {
        Record::Clock { interval_us, .. } if *interval_us > 0 => Some(*interval_us),
        _ => None,
    });
    let mut options = TimelineOptions::default();
    if let Some(l) = interval_us {
        let intervals = (checker.end_us() - checker.start_us()) / l;
        let width = u32::try_from(intervals.saturating_mul(4)).unwrap_or(u32::MAX);
        options = options
            .with_interval(Duration::from_micros(l))
            .with_width(width.clamp(1200, 24_000));
    }
    options
}
