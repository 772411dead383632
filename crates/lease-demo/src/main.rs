//! `lease-demo`: the README's first command.
//!
//! A group of workers on the deterministic simulator (no server needed):
//! four workers start and settle, a fifth joins, one crashes, one stalls for
//! longer than its lease, Redis restarts, one is cancelled. A live terminal
//! view shows who holds which slot; at the end the history checker's verdict
//! is printed and an SVG timeline of the run is written. `--redis <url>` (or
//! `--redis-server`) runs the same script with real `lease-redis` workers.
//!
//! Exit codes: 0 the run was exclusive, 1 a violation or a runtime error,
//! 2 invalid options, 3 Redis unreachable.

mod real;
mod scenario;
mod sim;
mod view;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
pub(crate) use lease_core::diag::redact_url as redact;
use lease_core::{Handover, Mode};
use lease_history::checker::TaskCoverage;
use lease_history::tasks::TaskSet;
use lease_history::timeline::{self, TimelineOptions};
use lease_history::{Checker, HistoryWriter, Record, check};

use crate::view::View;

/// Watch a lease group keep its guarantee through joins, a crash, a stall,
/// a Redis restart and a cancellation.
///
/// By default the group runs on the deterministic simulator (virtual time,
/// a simulated Redis: no server needed), paced against the wall clock so
/// the whole demo takes about 25 seconds. A live view shows one row per
/// slot (which worker holds it, its fencing token, for how long), the group
/// size n, and every stand-down as it happens. At the end the history
/// checker's verdict is printed and an SVG timeline of the run is written.
///
/// When the output is not a terminal, the demo runs as fast as possible
/// and prints one plain line per event.
///
/// Exit codes: 0 the run was exclusive, 1 a violation or a runtime error,
/// 2 invalid options, 3 Redis unreachable.
#[derive(Parser, Debug)]
#[command(name = "lease-demo", version)]
struct Args {
    /// Simulator only: how many times faster than the wall clock virtual
    /// time runs. The script lasts 38 intervals, so the default (1.5, with
    /// a 1 s interval) takes about 25 s.
    #[arg(long, default_value_t = 1.5, value_parser = positive)]
    speed: f64,

    /// Simulator only: run as fast as possible (the default when the output
    /// is not a terminal).
    #[arg(long)]
    fast: bool,

    /// Print one plain line per event instead of the live view, even on a
    /// terminal.
    #[arg(long)]
    plain: bool,

    /// Interval length in milliseconds (virtual time on the simulator).
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    interval: u64,

    /// Counting mode: ranked (the default) or arrival (the original
    /// n-and-i protocol; a Redis restart inside an interval is outside its
    /// guarantee).
    #[arg(long, default_value = "ranked")]
    mode: Mode,

    /// Simulator only: the seed (the same seed replays the same run).
    #[arg(long, default_value_t = 1)]
    seed: u64,

    /// Where to write the SVG timeline.
    #[arg(long, value_name = "PATH", default_value = "lease-demo.svg")]
    svg: PathBuf,

    /// Also write the history, one JSON object per line (docs/history-format.md).
    #[arg(long, value_name = "PATH")]
    history: Option<PathBuf>,

    /// Run the script with real lease-redis workers against this Redis
    /// (e.g. redis://127.0.0.1:6379/, or rediss://host:6380/ for TLS,
    /// trusting the CA file named by SSL_CERT_FILE, else the system's
    /// trust store). Each worker has its own thread,
    /// runtime and connection. The Redis restart step is skipped: the demo
    /// does not restart a server it did not start.
    #[arg(long, value_name = "URL", conflicts_with = "redis_server")]
    redis: Option<String>,

    /// Run the script with real lease-redis workers against a private
    /// redis-server the demo starts (on a free port of 127.0.0.1, needs
    /// redis-server on PATH) and restarts at the restart step.
    #[arg(long)]
    redis_server: bool,

    /// Group name (default: lease-demo, or lease-demo-PID on a real
    /// Redis so that runs never share keys).
    #[arg(long)]
    name: Option<String>,
}

fn positive(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("{s:?} is not a positive number")),
    }
}

/// Why the demo could not run; [`DemoError::exit`] reports it with its exit
/// code.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DemoError {
    /// The group's options do not validate (exit 2).
    #[error("invalid options: {0}")]
    Options(#[from] lease_core::OptionsError),
    /// The Redis URL is not one (exit 2).
    #[error("invalid options: {shown} is not a Redis URL: {source}")]
    BadUrl {
        /// The URL, password redacted.
        shown: String,
        /// What redis-rs said.
        #[source]
        source: redis::RedisError,
    },
    /// Redis did not answer (exit 3).
    #[error("Redis unreachable: {shown}: {source}")]
    Unreachable {
        /// The URL, password redacted.
        shown: String,
        /// What redis-rs said.
        #[source]
        source: redis::RedisError,
    },
    /// The private redis-server did not start (exit 1).
    #[error("error: cannot start a private redis-server (is it installed and on PATH?): {0}")]
    NoServer(#[source] std::io::Error),
    /// The private redis-server did not restart (exit 1).
    #[error("error: restarting redis-server failed: {0}")]
    Restart(#[source] std::io::Error),
    /// The worker harness failed (exit 1).
    #[error("error: {0}")]
    Harness(#[from] lease_chaos::harness::HarnessError),
    /// A file could not be written (exit 1).
    #[error("error: cannot write the {what} to {}: {source}", path.display())]
    Write {
        /// `history` or `timeline`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl DemoError {
    fn exit(&self) -> ExitCode {
        let code = match self {
            DemoError::Options(_) | DemoError::BadUrl { .. } => 2,
            DemoError::Unreachable { .. } => 3,
            DemoError::NoServer(_)
            | DemoError::Restart(_)
            | DemoError::Harness(_)
            | DemoError::Write { .. } => 1,
        };
        eprintln!("lease-demo: {self}");
        ExitCode::from(code)
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    match demo(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => e.exit(),
    }
}

/// Runs the demo; `Ok(false)` if the checker found a violation.
fn demo(args: &Args) -> Result<bool, DemoError> {
    let interval = Duration::from_millis(args.interval);
    let tty = std::io::stdout().is_terminal();
    let real = args.redis.is_some() || args.redis_server;
    let fast = args.fast || !tty;
    let live = tty && !args.plain && (real || !fast);
    let length = interval.mul_f64(scenario::length());
    let name = match &args.name {
        Some(n) => n.clone(),
        None if real => format!("lease-demo-{}", std::process::id()),
        None => "lease-demo".to_owned(),
    };
    let where_ = match (&args.redis, args.redis_server) {
        (Some(url), _) => format!("Redis at {}", redact(url)),
        (None, true) => "a private redis-server".to_owned(),
        (None, false) => format!("the simulator (seed {})", args.seed),
    };
    let pace = if real {
        "real time".to_owned()
    } else if fast {
        "virtual time, as fast as possible".to_owned()
    } else {
        format!("virtual time at {}x", args.speed)
    };
    let header = vec![
        format!("lease demo: group \"{name}\" on {where_}"),
        format!(
            "{} counting, interval {} ms, {pace}",
            args.mode, args.interval
        ),
        "The guarantee: one holder per slot i, and every holder uses the same n.".to_owned(),
    ];
    let mut view = View::new(live, header, interval, length);
    let started = Instant::now();
    let (records, end_us) = if real {
        let cfg = real::RealRun {
            url: args.redis.clone(),
            name,
            interval,
            mode: args.mode,
        };
        real::run(&cfg, &mut view)?
    } else {
        let cfg = sim::SimRun {
            seed: args.seed,
            name,
            interval,
            mode: args.mode,
            handover: Handover::WholePairs,
            speed: (!fast).then_some(args.speed),
        };
        sim::run(&cfg, &mut view)?
    };
    let took = started.elapsed();
    let ok = finish(args, &records, end_us, interval, &where_, took)?;
    if real || args.mode != Mode::Ranked {
        return Ok(ok);
    }
    // The same script and seed with incremental handover (rule 13), as
    // fast as possible and not shown: the task coverage side by side.
    let cfg = sim::SimRun {
        seed: args.seed,
        name: "lease-demo".to_owned(),
        interval,
        mode: args.mode,
        handover: Handover::TaskSets,
        speed: None,
    };
    let (inc, inc_end) = sim::run(&cfg, &mut View::quiet(interval, length))?;
    let same = compare(&records, end_us, &inc, inc_end);
    let path = args.svg.with_extension("incremental.svg");
    let title = format!(
        "lease demo on {where_}, incremental handover: {} counting, interval {} ms",
        args.mode, args.interval
    );
    let picture = timeline::svg_with(
        &inc,
        &title,
        &TimelineOptions::default()
            .with_interval(interval)
            .with_end_us(inc_end),
    );
    std::fs::write(&path, picture).map_err(|source| DemoError::Write {
        what: "timeline",
        path: path.clone(),
        source,
    })?;
    println!(
        "Its timeline (task sets shaded by their share of the pair's tasks): {}",
        path.display()
    );
    Ok(same && ok)
}

/// The task coverage of both runs: the share of the tasks `0..1024` held
/// by exactly one worker, whole pairs read under the modulo mapping, task
/// sets under the consistent one. Returns whether the incremental run was
/// exclusive per task.
fn compare(whole: &[Record], whole_end: u64, inc: &[Record], inc_end: u64) -> bool {
    let (w, i) = task_coverages(whole, whole_end, inc, inc_end);
    let checked = check(inc, Some(inc_end));
    let tasks = checked.tasks.as_ref();
    let task_ok = tasks.is_some_and(|t| t.is_ok()) && checked.anomaly_count == 0;
    println!();
    println!("The same script and seed, both handover modes (task coverage: the share of the");
    println!("tasks 0..1024 held by exactly one worker, time-weighted):");
    println!(
        "  whole pairs (the run above):                       {:.3}",
        w
    );
    println!(
        "  incremental handover (rule 13, consistent mapping): {:.3}  task_violations={} task_fencing={}",
        i,
        tasks.map_or(0, |t| t.violation_count),
        tasks.map_or(0, |t| t.fencing_count),
    );
    task_ok
}

/// The whole-pair and the incremental run's task coverage over each run.
fn task_coverages(whole: &[Record], whole_end: u64, inc: &[Record], inc_end: u64) -> (f64, f64) {
    let c = Checker::new(whole, Some(whole_end));
    let w = TaskCoverage::of(
        c.holdings(),
        lease_history::Mapping::Modulo,
        &TaskSet::all(),
        c.start_us(),
        c.end_us(),
    )
    .fraction_in(c.start_us(), c.end_us());
    let i = check(inc, Some(inc_end)).tasks.map_or(0.0, |t| t.coverage);
    (w, i)
}

/// Prints the checker's verdict and writes the timeline (and the history).
fn finish(
    args: &Args,
    records: &[Record],
    end_us: u64,
    interval: Duration,
    where_: &str,
    took: Duration,
) -> Result<bool, DemoError> {
    let summary = check(records, Some(end_us));
    if let Some(path) = &args.history {
        let written = std::fs::File::create(path).and_then(|f| {
            let mut w = HistoryWriter::new(std::io::BufWriter::new(f));
            w.write_all(records)?;
            w.flush()
        });
        written.map_err(|source| DemoError::Write {
            what: "history",
            path: path.clone(),
            source,
        })?;
    }
    let title = format!(
        "lease demo on {where_}: {} counting, interval {} ms",
        args.mode, args.interval
    );
    let picture = timeline::svg_with(
        records,
        &title,
        &TimelineOptions::default()
            .with_interval(interval)
            .with_end_us(end_us),
    );
    std::fs::write(&args.svg, picture).map_err(|source| DemoError::Write {
        what: "timeline",
        path: args.svg.clone(),
        source,
    })?;

    println!();
    println!("{summary}");
    if summary.is_ok() {
        println!(
            "In words: at no instant did two workers hold the same slot or different n, and the\n\
             fencing tokens were in order. The group was fully covered {:.1} % of the time; the rest\n\
             is the stand-down that every change of n costs (about one interval each).",
            summary.coverage.fraction() * 100.0
        );
    } else {
        println!(
            "The checker found a violation: the run was not exclusive (see the timeline, and the\n\
             history with --history)."
        );
    }
    println!(
        "Timeline: {} (open it in a browser). The demo took {:.1} s.",
        args.svg.display(),
        took.as_secs_f64()
    );
    if let Some(path) = &args.history {
        println!("History: {}", path.display());
    }
    Ok(summary.is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_ends_last() {
        assert_eq!(scenario::length(), 38.0);
    }

    /// Both modes on the simulator: the incremental run keeps more of the
    /// tasks covered through the same script, and is exclusive per task.
    #[test]
    fn incremental_handover_covers_more_of_the_tasks() {
        let run = |handover| {
            let cfg = sim::SimRun {
                seed: 1,
                name: "lease-demo".to_owned(),
                interval: Duration::from_secs(1),
                mode: Mode::Ranked,
                handover,
                speed: None,
            };
            let length = Duration::from_secs(38);
            sim::run(&cfg, &mut View::quiet(cfg.interval, length)).expect("valid options")
        };
        let (whole, whole_end) = run(Handover::WholePairs);
        let (inc, inc_end) = run(Handover::TaskSets);
        let (w, i) = task_coverages(&whole, whole_end, &inc, inc_end);
        assert!(i > w, "incremental {i} against whole pairs {w}");
        assert!(w > 0.5, "{w}");
        assert!(compare(&whole, whole_end, &inc, inc_end));
    }
}
