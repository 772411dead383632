//! `lease-chaos`: fault injection against a real Redis, with history
//! checking and a timeline picture.
//!
//! It starts its own `redis-server` on a free loopback port, runs a group of
//! workers of the chosen adapter in this process (each on an executor thread
//! of its own, so one can be stalled) behind an in-process TCP proxy (one
//! link per worker, so faults can hit one worker's traffic), injects faults
//! one at a time, writes the history (docs/history-format.md) with the faults as
//! extra lines, checks it, and prints the summary as its last line. Workers
//! write task results to a fencing sink that rejects tokens older than the
//! newest it has seen. Exits 1 on any violation, 2 if the run could not be
//! done.
//!
//! ```text
//! cargo run --release -p lease-chaos -- --workers 5 --duration 60 --interval 200 \
//!     --faults all --seed 1 --history chaos.jsonl --svg chaos.svg
//! ```
//!
//! `docs/reliability.md` describes every fault and what it checks.

mod faults;
mod report;
mod run;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use lease_chaos::harness::AdapterKind;
use lease_core::Mode;

use crate::faults::FaultSet;

/// Fault injection against a real Redis: a group of workers behind a
/// per-worker proxy, faults one at a time, a checked history, a fencing sink
/// and an optional timeline picture. The last line is the summary; the exit
/// status is 1 on any violation.
#[derive(Parser, Debug, Clone)]
#[command(version)]
pub(crate) struct Args {
    /// Workers of the group (a burst adds half as many again for a while).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub(crate) workers: u32,
    /// Length of the run in seconds.
    #[arg(long, default_value_t = 60.0)]
    pub(crate) duration: f64,
    /// Lease interval in milliseconds.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(20..=60_000))]
    pub(crate) interval: u64,
    /// Faults to inject: `all`, `none`, or a comma-separated list of stall,
    /// crash, cancel, restart, pause, kill, latency, blackhole, reset,
    /// flush, flushall, churn, burst, restart-member (with it, every worker
    /// registers under its seat's member name: a crashed worker's new
    /// process starts at once, or first, the old one crashed up to an
    /// interval later), clock, failover, failover-lossy, failover-split,
    /// cluster-failover, reshard. Not part of `all`:
    /// `clock` (steps of the server's clock by ±G/2 and ±2G, the server
    /// under libfaketime: needs a server built with libc's malloc, e.g.
    /// `REDIS_SERVER_BIN=$(scripts/valkey.sh)`); `failover` (Redis's
    /// coordinated FAILOVER to a replica), `failover-lossy` (the replica
    /// cut off for 0.5-3 intervals, then promoted) and `failover-split`
    /// (the known limit, expected to violate: part of the group stays on
    /// the deposed primary), which start a replica; `cluster-failover` and
    /// `reshard` (a 3-master Redis Cluster with replicas, the workers
    /// connected to it directly; only with stall, crash, cancel, churn and
    /// burst, and the redis or fred adapter).
    #[arg(long, default_value = "all")]
    pub(crate) faults: FaultSet,
    /// Seed of the fault sequence (kinds, victims, durations, jitter).
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Where to write the history (one JSON object per line).
    #[arg(long)]
    pub(crate) history: PathBuf,
    /// Where to write the SVG timeline of the run.
    #[arg(long)]
    pub(crate) svg: Option<PathBuf>,
    /// The adapter the workers use: redis, fred or smol.
    #[arg(long, default_value = "redis")]
    pub(crate) adapter: AdapterKind,
    /// Counting mode. Ranked by default: in Arrival mode a Redis restart
    /// inside an interval can hand one index to two workers (a documented
    /// limit of the original design, docs/protocol.md).
    #[arg(long, default_value = "ranked")]
    pub(crate) mode: Mode,
    /// Handover (Ranked): task-sets (the default, rule 13, under the
    /// consistent mapping; the history is judged per task) or whole-pairs
    /// (rule 5, `task.id % n == i`).
    #[arg(long, default_value = "task-sets")]
    pub(crate) handover: lease_core::Handover,
    /// Gap fraction.
    #[arg(long, default_value_t = 0.15)]
    pub(crate) gap: f64,
    /// Tasks in the task source (task `t` belongs to slot `t % n`).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub(crate) tasks: u64,
    /// `min-replicas-to-write` of the primary and its replica (with the
    /// failover faults): the primary refuses writes while fewer replicas
    /// are connected and caught up (0: off, Redis's default).
    #[arg(long, default_value_t = 0)]
    pub(crate) min_replicas_to_write: u32,
    /// `min-replicas-max-lag`, in seconds (Redis's unit), with
    /// `--min-replicas-to-write`.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=3600))]
    pub(crate) min_replicas_max_lag: u32,
    /// How long `failover-split` leaves part of the group on the deposed
    /// primary, in intervals.
    #[arg(long, default_value_t = 4.0)]
    pub(crate) split_intervals: f64,
    /// Print every fault to stderr as it is injected.
    #[arg(long, short)]
    pub(crate) verbose: bool,
    /// Stall lengths to draw from, in intervals.
    #[arg(long, hide = true, value_delimiter = ',', default_value = "0.5,1,3,10")]
    pub(crate) stall_intervals: Vec<f64>,
    /// Negative control: write a stalled worker's release at the instant it
    /// woke up instead of its lease deadline (the checker must object).
    #[arg(long, hide = true)]
    pub(crate) sabotage_release: bool,
}

impl Args {
    /// Whether the run holds task sets (Ranked counting with the task-set
    /// handover), judged per task.
    pub(crate) fn task_sets(&self) -> bool {
        self.mode == Mode::Ranked && self.handover == lease_core::Handover::TaskSets
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run::run(&args) {
        Ok(report) => {
            print!("{}", report.render());
            if report.is_ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("lease-chaos: {e}");
            ExitCode::from(2)
        }
    }
}
