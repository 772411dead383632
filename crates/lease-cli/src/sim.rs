//! `lease sim`: one randomized simulation run of a group on the
//! deterministic simulator (`lease-sim`), its history, and the checker's
//! verdict (`lease-history`) as the last line. Exits 1 on a violation.

use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use lease_core::Mode;
use lease_history::HistoryWriter;
use lease_sim::{Faults, Network, RunConfig, random_run};

use crate::CliError;

/// The flags of `lease sim`.
#[derive(Args, Debug)]
pub(crate) struct SimArgs {
    /// Seed of the run.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Workers at the start.
    #[arg(long, default_value_t = 5)]
    workers: usize,
    /// Length of the run, in intervals.
    #[arg(long, default_value_t = 200)]
    intervals: u32,
    /// Inject every fault under which the guarantee is claimed.
    #[arg(long)]
    faults: bool,
    /// Counting mode: ranked or arrival.
    #[arg(long, default_value = "ranked")]
    mode: Mode,
    /// Interval length in milliseconds (virtual time).
    #[arg(long, default_value_t = 1000)]
    interval_ms: u64,
    /// Gap fraction.
    #[arg(long, default_value_t = 0.15)]
    gap: f64,
    /// Outside the guarantee: server clock steps larger than the gap, and backwards.
    #[arg(long)]
    clock_jumps: bool,
    /// Outside the guarantee: failovers losing writes in two consecutive intervals.
    #[arg(long)]
    lost_writes: bool,
    /// Outside the Arrival mode's guarantee: Redis restarts in Arrival mode
    /// (with --faults they are injected in Ranked mode only).
    #[arg(long)]
    arrival_restarts: bool,
    /// No joins, leaves, crashes or stalls after the start.
    #[arg(long)]
    no_churn: bool,
    /// Where to write the history (one JSON object per line).
    #[arg(long)]
    history: Option<PathBuf>,
}

impl SimArgs {
    fn config(&self) -> RunConfig {
        RunConfig {
            seed: self.seed,
            workers: self.workers,
            intervals: self.intervals,
            mode: self.mode,
            interval: Duration::from_millis(self.interval_ms),
            gap: self.gap,
            faults: Faults {
                within_guarantee: self.faults,
                clock_jumps: self.clock_jumps,
                lost_writes: self.lost_writes,
                arrival_restarts: self.arrival_restarts,
            },
            churn: !self.no_churn,
            network: Network::default(),
            customize: std::convert::identity,
        }
    }
}

/// Plays the run, writes its history if asked, prints the run's counters and
/// the checker's verdict (the last line).
pub(crate) fn sim(args: &SimArgs) -> Result<ExitCode, CliError> {
    let report = random_run(&args.config())?;
    if let Some(path) = &args.history {
        let write = |path: &PathBuf| -> std::io::Result<()> {
            let mut w = HistoryWriter::new(BufWriter::new(File::create(path)?));
            w.write_all(&report.history)?;
            w.flush()
        };
        write(path).map_err(|source| CliError::Write {
            path: path.clone(),
            source,
        })?;
    }
    let s = &report.stats;
    println!(
        "run: seed={} mode={} workers={} intervals={} sent={} executed={} lost_requests={} lost_replies={} fast_errors={} rejected={}",
        args.seed,
        args.mode,
        args.workers,
        args.intervals,
        s.sent,
        s.executed,
        s.lost_requests,
        s.lost_replies,
        s.fast_errors,
        s.rejected
    );
    println!("{}", report.summary);
    Ok(if report.summary.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
