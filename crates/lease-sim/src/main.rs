//! `lease-sim`: one randomized simulation run, its history, and the checker's
//! verdict as the last line. Exits 1 on a violation.

use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use lease_core::Mode;
use lease_sim::history::HistoryWriter;
use lease_sim::{Faults, RunConfig, random_run};

/// Run one randomized simulation of a lease group and check its history.
///
/// Workers join, leave, crash and stall at random; with --faults every fault
/// under which exclusivity is claimed is injected too. A seed replays a run
/// exactly.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
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

fn main() -> ExitCode {
    let args = Args::parse();
    let cfg = RunConfig {
        seed: args.seed,
        workers: args.workers,
        intervals: args.intervals,
        mode: args.mode,
        interval: Duration::from_millis(args.interval_ms),
        gap: args.gap,
        faults: Faults {
            within_guarantee: args.faults,
            clock_jumps: args.clock_jumps,
            lost_writes: args.lost_writes,
            arrival_restarts: args.arrival_restarts,
        },
        churn: !args.no_churn,
        network: lease_sim::Network::default(),
    };
    let report = match random_run(&cfg) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("lease-sim: invalid options: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(path) = &args.history {
        let written = File::create(path).map_err(|e| e.to_string()).and_then(|f| {
            let mut w = HistoryWriter::new(BufWriter::new(f));
            for r in &report.history {
                w.write(r).map_err(|e| e.to_string())?;
            }
            w.flush().map_err(|e| e.to_string())
        });
        if let Err(e) = written {
            eprintln!("lease-sim: cannot write history to {}: {e}", path.display());
            return ExitCode::from(2);
        }
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
    if report.summary.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
