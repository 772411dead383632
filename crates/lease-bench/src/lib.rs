//! # lease-bench
//!
//! The benchmarks behind `docs/benchmarks.md`: one binary
//! per table, each printing the machine it ran on, the command that
//! reproduces it, and a Markdown table.
//!
//! | binary | table |
//! |---|---|
//! | `sim-figures` | simulator, `Ranked` against `Arrival`, same seeds, every regime; handover scenarios; drain budgets |
//! | `sim-big-group` | simulator, one group of 1,000-10,000 workers: `redis-big-group`'s scenario in virtual time |
//! | `sim-upgrade` | simulator, a rolling deploy from the old defaults (whole pairs) to task sets |
//! | `affinity` | keys moved by `n -> n+1` and `n -> n-1`, modulo and consistent |
//! | `alloc-count` | heap allocations per registration in steady state |
//! | `redis-settled` | real Redis: shortest interval at which 16 workers stay settled |
//! | `redis-scale` | real Redis: 10,000 groups over one connection |
//! | `redis-big-group` | real Redis: one group of 1,000-10,000 workers over one connection |
//! | `redis-throughput` | real Redis: registrations per second against `redis-benchmark` |
//!
//! The criterion benchmarks of each `handle_*` call are `benches/core.rs`
//! (`cargo bench -p lease-bench --bench core`), on the hand-driven worker of
//! [`steady`]. The shell scripts `scripts/bench-*.sh` run all of these in
//! release mode.
//!
//! Every figure is a ratio or a count measured in one run, or a time stated
//! with the machine it came from; nothing here asserts on time.

use std::fmt::Write as _;
use std::time::Duration;

pub mod coverage;
pub mod redis;
pub mod steady;

use lease_core::{Counting, Handover, Mode};

/// Options counting in a mode the way the benchmarks compare the two
/// counting modes: whole pairs under `task.id % n == i` and a cancel that
/// does not leave (the shape of the figures that compare with the original);
/// the default task sets are measured by the rows that say so.
pub trait Classic {
    /// These options, counting in `mode` with whole pairs.
    fn classic(self, mode: Mode) -> Self;
}

impl<C> Classic for lease_core::Options<C> {
    fn classic(self, mode: Mode) -> Self {
        match mode {
            Mode::Ranked => self
                .with_handover(Handover::WholePairs)
                .with_graceful_leave(false),
            Mode::Arrival => self.with_counting(Counting::Arrival),
        }
    }
}

/// A description of the machine, for the header of every table: CPU model,
/// cores available to this process, memory, kernel.
pub fn machine() -> String {
    let cpu = read("/proc/cpuinfo")
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|r| r.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let mem_gib = read("/proc/meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|r| r.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0 / 1024.0);
    let kernel = read("/proc/sys/kernel/osrelease");
    format!(
        "{cpu}, {cores} cores, {mem_gib:.0} GiB, Linux {}",
        kernel.trim()
    )
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// A switch of a benchmark's command line: `on` or `off` (`None` for
/// anything else, which the binary answers with its usage).
pub fn on_off(value: &str) -> Option<bool> {
    match value {
        "on" => Some(true),
        "off" => Some(false),
        _ => None,
    }
}

/// A comma-separated list of counts from a benchmark's command line
/// (`1000,5000,10000`); `None` if any item is not a count.
pub fn counts(value: &str) -> Option<Vec<usize>> {
    value.split(',').map(|s| s.trim().parse().ok()).collect()
}

/// The machine's load average over the last minute (`/proc/loadavg`): how
/// busy the (shared) machine was while a figure was taken.
pub fn load_average() -> f64 {
    read("/proc/loadavg")
        .split_whitespace()
        .next()
        .and_then(|l| l.parse().ok())
        .unwrap_or(f64::NAN)
}

/// Prints the header every table starts with: what, how to reproduce, where.
pub fn header(title: &str, command: &str) {
    println!("## {title}\n");
    println!("- command: `{command}`");
    println!("- machine: {}", machine());
    println!("- load average at the start: {:.2}", load_average());
    println!();
}

/// CPU time (user + system) a process has used so far, from
/// `/proc/<pid>/stat` (`self` for this process). Linux reports it in ticks
/// of `USER_HZ`, which is 100 on every mainstream architecture.
pub fn cpu_time(pid: &str) -> Duration {
    let stat = read(&format!("/proc/{pid}/stat"));
    // The command name (field 2) may contain spaces; it is in parentheses.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3, utime field 14, stime field 15.
    let ticks = |i: usize| {
        fields
            .get(i - 3)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Duration::from_millis((ticks(14) + ticks(15)) * 10)
}

/// Nearest-rank percentile (`pct` in 0..=100) of values sorted ascending.
pub fn percentile<T: Copy>(sorted: &[T], pct: usize) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (pct * sorted.len()).div_ceil(100).max(1);
    sorted.get(rank - 1).copied()
}

/// Mean of the values, `NaN` for none.
pub fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len() as f64
}

/// A small deterministic generator (splitmix64) for scenario choices that
/// must be identical in both counting modes.
#[derive(Clone, Debug)]
pub struct SplitMix(u64);

impl SplitMix {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed ^ 0x6c65_6173_652d_6265)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A Markdown table built row by row.
#[derive(Debug, Default)]
pub struct Table {
    out: String,
}

impl Table {
    /// A table with these column headings.
    pub fn new(columns: &[&str]) -> Self {
        let mut t = Self::default();
        t.line(columns.iter().map(|c| (*c).to_owned()));
        t.line(columns.iter().map(|_| "---".to_owned()));
        t
    }

    /// Appends a row.
    pub fn row<I, S>(&mut self, cells: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.line(cells.into_iter().map(Into::into));
    }

    fn line(&mut self, cells: impl Iterator<Item = String>) {
        self.out.push('|');
        for c in cells {
            let _ = write!(self.out, " {c} |");
        }
        self.out.push('\n');
    }

    /// Prints the table and a blank line.
    pub fn print(&self) {
        println!("{}", self.out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let v = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10];
        assert_eq!(percentile(&v, 50), Some(5));
        assert_eq!(percentile(&v, 90), Some(9));
        assert_eq!(percentile(&v, 100), Some(10));
        assert_eq!(percentile::<u32>(&[], 50), None);
    }

    #[test]
    fn counts_are_comma_separated() {
        assert_eq!(counts("1000,5000, 10000"), Some(vec![1000, 5000, 10000]));
        assert_eq!(counts("7"), Some(vec![7]));
        assert_eq!(counts("1000,x"), None);
        assert_eq!(counts(""), None);
    }

    #[test]
    fn switches_read_on_and_off_only() {
        assert_eq!(on_off("on"), Some(true));
        assert_eq!(on_off("off"), Some(false));
        assert_eq!(on_off("yes"), None);
        assert_eq!(on_off(""), None);
    }

    #[test]
    fn splitmix_is_deterministic_and_in_range() {
        let (mut a, mut b) = (SplitMix::new(7), SplitMix::new(7));
        for _ in 0..1000 {
            let x = a.unit();
            assert_eq!(x, b.unit());
            assert!((0.0..1.0).contains(&x));
        }
    }

    #[test]
    fn own_cpu_time_is_readable() {
        // Burn a little CPU so the reading is not trivially zero everywhere.
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_add(i * i);
        }
        std::hint::black_box(x);
        assert!(cpu_time("self") < Duration::from_secs(3600));
    }
}
