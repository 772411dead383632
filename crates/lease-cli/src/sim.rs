//! `lease sim`: one randomized simulation run of a group on the
//! deterministic simulator (`lease-sim`), its history, and the checker's
//! verdict (`lease-history`) as the last line. Exits 1 on a violation.

use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use lease_core::{Handover, Mode, Options};
use lease_history::HistoryWriter;
use lease_sim::{Faults, Network, RunConfig, random_run};

use crate::CliError;

/// The value of `--spread`: a fraction of the interval, or the widest
/// spread the gap allows (`Options::max_spread`, which a decimal typed by
/// hand can miss by a rounding error).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Spread {
    /// This fraction of `L`.
    Fraction(f64),
    /// `Options::max_spread` at the run's gap.
    Max,
}

impl std::str::FromStr for Spread {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "max" {
            return Ok(Spread::Max);
        }
        s.parse()
            .map(Spread::Fraction)
            .map_err(|_| format!("{s:?} is neither a fraction of the interval nor \"max\""))
    }
}

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
    /// Inject every fault under which the guarantee is claimed: latency up
    /// to and beyond the gap, spikes, fast errors, lost requests and replies,
    /// duplicates, pauses longer than the gap, forward server-clock steps
    /// smaller than the gap (at most one in any three intervals), and Redis
    /// restarts in Ranked mode.
    #[arg(long)]
    faults: bool,
    /// Counting mode: ranked or arrival.
    #[arg(long, default_value = "ranked")]
    mode: Mode,
    /// Handover (Ranked): task-sets (the default: rule 13 under the
    /// consistent mapping, histories judged per task) or whole-pairs (rule
    /// 5, `task.id % n == i`).
    #[arg(long, default_value = "task-sets")]
    handover: Handover,
    /// Play this many runs, seeds `seed..seed+seeds`, and print one tally
    /// line instead of each run's (the history is written for single runs
    /// only). Exits 1 if any run has a violation or an anomaly.
    #[arg(long, default_value_t = 1)]
    seeds: u64,
    /// Interval length in milliseconds (virtual time).
    #[arg(long, default_value_t = 1000)]
    interval_ms: u64,
    /// Gap fraction.
    #[arg(long, default_value_t = 0.15)]
    gap: f64,
    /// Drain budget of kept leases in milliseconds (rule 14, Ranked): a
    /// lease that a reply does not renew is released this long before its
    /// deadline. From 0 to the interval L (default: the gap G).
    #[arg(long, value_name = "N")]
    drain_budget_ms: Option<u64>,
    /// Width of the Ranked schedule's spread as a fraction of the interval
    /// (rule 8): workers fire between G and G + spread·L into each
    /// interval. From 0 to the widest allowed, (1 - 2g) - max(g, 1/4), and
    /// never less than the default (default: min(g, 0.1, (1 - 2g)/2));
    /// `max` is that widest spread at the run's gap.
    #[arg(long, value_name = "F", allow_hyphen_values = true)]
    spread: Option<Spread>,
    /// Cancel without graceful leave (rule 16 is the default under Ranked
    /// counting: a cancelled worker removes itself from the open interval's
    /// set and serves its lease to the drain's end); a cancelled worker then
    /// stays counted until the group re-counts, as after a crash.
    #[arg(long)]
    no_graceful_leave: bool,
    /// Member names (rule 18, Ranked): every worker registers under a name
    /// of its own, and churn adds member restarts (a new process with the
    /// same name, at once, later, or before the old one is gone).
    #[arg(long)]
    members: bool,
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
    /// The options that shape the schedule and the drain, as `key=value`
    /// fields (`default` where the option's default is in force), so that a
    /// printed line says how to replay it.
    fn options_text(&self) -> String {
        let or_default = |v: Option<String>| v.unwrap_or_else(|| "default".to_owned());
        format!(
            "gap={} drain_budget_ms={} spread={} graceful_leave={} members={}",
            self.gap,
            or_default(self.drain_budget_ms.map(|b| b.to_string())),
            or_default(self.spread.map(|s| match s {
                Spread::Fraction(f) => f.to_string(),
                Spread::Max => "max".to_owned(),
            })),
            !self.no_graceful_leave,
            self.members,
        )
    }

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
            handover: self.handover,
            drain_budget: self.drain_budget_ms.map(Duration::from_millis),
            spread: self.spread.map(|s| match s {
                Spread::Fraction(f) => f,
                Spread::Max => Options::<()>::new("sim", Duration::from_millis(self.interval_ms))
                    .with_gap(self.gap)
                    .max_spread(),
            }),
            graceful_leave: !self.no_graceful_leave,
            members: self.members,
            customize: std::convert::identity,
        }
    }
}

/// Plays the run, writes its history if asked, prints the run's counters and
/// the checker's verdict (the last line).
pub(crate) fn sim(args: &SimArgs) -> Result<ExitCode, CliError> {
    if args.seeds > 1 {
        return many(args);
    }
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
        "run: seed={} mode={} handover={} workers={} intervals={} {} sent={} executed={} lost_requests={} lost_replies={} fast_errors={} rejected={} leaves={}",
        args.seed,
        args.mode,
        args.handover,
        args.workers,
        args.intervals,
        args.options_text(),
        s.sent,
        s.executed,
        s.lost_requests,
        s.lost_replies,
        s.fast_errors,
        s.rejected,
        s.leaves
    );
    println!("{}", report.summary);
    Ok(if report.summary.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `--seeds N`: plays seeds `seed..seed+N` and prints one tally line:
/// runs, *violating* runs (any exclusivity, fencing or interval-end
/// violation, per pair or per task, or any anomaly: the runs whose verdict
/// is not `ok`), then the pair-level violations, the interval-end
/// violations, the anomalies and the per-task violations summed over the
/// runs, and the mean task coverage (incremental) or the
/// mean full coverage.
fn many(args: &SimArgs) -> Result<ExitCode, CliError> {
    let mut cfg = args.config();
    let (mut bad, mut violations, mut interval_ends, mut anomalies) = (0u64, 0u64, 0u64, 0u64);
    let (mut task_violations, mut coverage) = (0u64, 0.0);
    let mut first_bad = None;
    for seed in args.seed..args.seed.saturating_add(args.seeds) {
        cfg.seed = seed;
        let s = random_run(&cfg)?.summary;
        violations += s.violation_count + s.fencing_count;
        interval_ends += s.interval_end_count;
        anomalies += s.anomaly_count;
        coverage += match &s.tasks {
            Some(t) => {
                task_violations += t.violation_count + t.fencing_count;
                t.coverage
            }
            None => s.coverage.fraction(),
        };
        if !s.is_ok() {
            bad += 1;
            first_bad.get_or_insert(seed);
        }
    }
    println!(
        "runs: seeds={}..{} mode={} handover={} workers={} intervals={} {} faults={} runs={} violating={} violations={} interval_ends={} anomalies={} task_violations={} mean_coverage={:.4}{}",
        args.seed,
        args.seed.saturating_add(args.seeds),
        args.mode,
        args.handover,
        args.workers,
        args.intervals,
        args.options_text(),
        args.faults,
        args.seeds,
        bad,
        violations,
        interval_ends,
        anomalies,
        task_violations,
        coverage / args.seeds as f64,
        first_bad.map_or(String::new(), |s| format!(" first_violating_seed={s}")),
    );
    Ok(if bad == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
