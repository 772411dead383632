//! `--members`: rule 18's figures beside the anonymous defaults. One member
//! restarted (a graceful cancel with the new process started at once or
//! `0.5 L` later, a crash with the new process started at once), one crash
//! without a replacement, and one missed registration, each on the worker
//! at position `n0 / 2`, with the seeds, draws, windows and definitions of
//! the scenario table (`--scenarios`).
//!
//! Per seed, besides the window's task coverage and moves:
//!
//! - *member's tasks uncovered*: per task of the restarted member's share
//!   at the event, the time nobody held it in the window, in L (a crashed
//!   holder counts only until the crash, as for the coverage);
//! - *lease gap*: per such task, from the end of the old process's lease
//!   on it (its release at the drain end after a cancel, the drain end
//!   `(m+2)L - b` its lease from `m` would have had after a crash, the
//!   lease's end in a stall) to the next grant of it to anyone, in L: the
//!   figure rule 18 derives (`b + G + u + RTT`, about `0.35 L`), and how
//!   many seeds had a gap above `0.9 L` (an interval more: the old
//!   process's last registration executed before the event, but its reply
//!   came after it and renewed nothing);
//! - *regrant*: from the event to the new process's first grant, in L;
//! - *same index*: whether the new process (or the stalled one) ends the
//!   run on the member's index before the event, on the same `n`;
//! - *others kept*: whether every other worker ends the run on its own pair.

use std::time::Duration;

use lease_bench::{SplitMix, Table, mean};
use lease_core::Options;
use lease_core::ownership::Mapping;
use lease_history::checker::{Holding, task_moves};
use lease_history::tasks::{TASKS, TaskSet};
use lease_history::{Checker, Record, Renewed};
use lease_sim::{Action, Network, Sim, WorkerId};

use super::{
    EVENT_AT, L, Variant, WINDOW, cells, completed_runs, faults, holder_of, in_l, join_as, judge,
    last_own, start_variant, task_cover, us,
};

/// What happens to the worker at position `n0 / 2` at the event.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Restart {
    /// Cancelled (a graceful leave); the new process starts at once.
    CancelNow,
    /// Cancelled; the new process starts `0.5 L` later.
    CancelHalf,
    /// Crashed; the new process starts at once.
    CrashNow,
    /// Crashed; no new process (the scenario table's crash).
    CrashAlone,
    /// Frozen for exactly `L` (the scenario table's missed registration).
    Stall1,
}

impl Restart {
    const ALL: [Restart; 5] = [
        Restart::CancelNow,
        Restart::CancelHalf,
        Restart::CrashNow,
        Restart::CrashAlone,
        Restart::Stall1,
    ];

    fn name(self) -> &'static str {
        match self {
            Restart::CancelNow => "restart: cancel, new process at once",
            Restart::CancelHalf => "restart: cancel, new process 0.5 L later",
            Restart::CrashNow => "restart: crash, new process at once",
            Restart::CrashAlone => "crash, no new process",
            Restart::Stall1 => "one missed registration",
        }
    }

    /// When the new process starts after the event, if one does.
    fn replacement(self) -> Option<Duration> {
        match self {
            Restart::CancelNow | Restart::CrashNow => Some(Duration::ZERO),
            Restart::CancelHalf => Some(L / 2),
            Restart::CrashAlone | Restart::Stall1 => None,
        }
    }

    fn crashes(self) -> bool {
        matches!(self, Restart::CrashNow | Restart::CrashAlone)
    }
}

/// What one seed of one restart gave.
#[derive(Clone, Copy, Debug)]
struct RestartOutcome {
    /// The member's tasks' uncovered time in the window, per task, in L.
    uncovered: f64,
    /// The member's tasks' mean lease gap, in L (`None`: none regranted).
    gap: Option<f64>,
    /// The new process's first grant after the event, in L.
    regrant: Option<f64>,
    /// Whether the successor ends on the member's pair (`None`: no successor).
    same_index: Option<bool>,
    /// Whether every other worker ends on its own pair.
    others_kept: bool,
    /// The window's task coverage.
    cover: f64,
    /// Task owner changes over the window / the number of tasks.
    moved: f64,
    /// The checker's findings.
    faults: u64,
}

/// The tasks a holding holds under `mapping` (the union of its parts for a
/// task set).
fn holding_tasks(h: &Holding, mapping: lease_history::Mapping) -> TaskSet {
    if h.parts.is_empty() {
        return TaskSet::pair(mapping, h.i, h.n);
    }
    h.parts.iter().fold(TaskSet::default(), |s, p| {
        s.union(&TaskSet::part(mapping, p))
    })
}

/// How a crashed holder's lease would have ended: the drain budget `b`,
/// and the server clock's lead on the history's time (its first `clock`
/// line), which turns an interval number into an instant of the history.
#[derive(Clone, Copy)]
struct CrashEnd {
    budget: Duration,
    server_lead_us: u64,
}

impl CrashEnd {
    /// From `history`'s first `clock` line.
    fn of(history: &[Record], budget: Duration) -> Option<Self> {
        history.iter().find_map(|r| match r {
            Record::Clock {
                server_us, at_us, ..
            } => Some(Self {
                budget,
                server_lead_us: server_us - at_us,
            }),
            _ => None,
        })
    }

    /// The drain end `(m+2)L - b` of a lease last renewed from `m` (rule
    /// 14; its deadline is at most `(m+2)L`), as an instant of the history.
    fn drain_end(self, m: u64) -> u64 {
        ((m + 2) * us(L)).saturating_sub(self.server_lead_us + us(self.budget))
    }
}

/// Per task, the end of what `h` holds of it: `h`'s end, or for a crashed
/// holder (whose holding the history ends at the crash) the drain end its
/// lease would have had, per part by the interval it was last renewed in.
fn ends(
    h: &Holding,
    mapping: lease_history::Mapping,
    crash: Option<CrashEnd>,
) -> Vec<(TaskSet, u64)> {
    let renewed: Vec<u64> = match &h.renewed {
        Some(Renewed::Pair(m)) => vec![*m],
        Some(Renewed::Parts(ms)) => ms.clone(),
        None => Vec::new(),
    };
    let end = |k: usize| match (crash, renewed.get(k)) {
        (Some(c), Some(&m)) => c.drain_end(m),
        _ => h.end_us,
    };
    if h.parts.is_empty() {
        return vec![(TaskSet::pair(mapping, h.i, h.n), end(0))];
    }
    let parts = h.parts.iter().enumerate();
    parts
        .map(|(k, p)| (TaskSet::part(mapping, p), end(k)))
        .collect()
}

/// Per task of `tasks`, from the end of `old`'s lease on it at `at_us`
/// (its holding then, followed through holdings that continue it at once;
/// [`ends`] for a crash) to the next holding of it by anyone (`old`
/// included, for a stall), in L; tasks `old` did not hold at `at_us`, or
/// nobody held again, are left out.
fn lease_gaps(
    holdings: &[Holding],
    mapping: Mapping,
    tasks: &TaskSet,
    (old, at_us): (&str, u64),
    crash: Option<CrashEnd>,
) -> Vec<f64> {
    let mapping = judge(mapping);
    let mut order: Vec<&Holding> = holdings.iter().filter(|h| h.end_us > h.start_us).collect();
    order.sort_by_key(|h| h.start_us);
    let mut old_end = vec![None::<u64>; TASKS];
    for h in order.iter().filter(|h| h.worker == old) {
        let live = h.start_us <= at_us && at_us <= h.end_us;
        for (set, end) in ends(h, mapping, crash.filter(|_| live)) {
            for t in set.iter() {
                old_end[t] = match old_end[t] {
                    None if live => Some(end),
                    Some(e) if h.start_us == e => Some(end),
                    kept => kept,
                };
            }
        }
    }
    let mut next = vec![None::<u64>; TASKS];
    for h in &order {
        for t in holding_tasks(h, mapping).iter() {
            if next[t].is_none() && old_end[t].is_some_and(|end| h.start_us >= end) {
                next[t] = Some(h.start_us);
            }
        }
    }
    tasks
        .iter()
        .filter_map(|t| Some(in_l(next[t]? - old_end[t]?)))
        .collect()
}

/// The pair every worker of `ws` holds now (or last held).
fn pairs_now(sim: &Sim, ws: &[WorkerId]) -> Vec<Option<(u32, u32)>> {
    ws.iter()
        .map(|&w| {
            sim.lease(w)
                .and_then(|l| l.pair())
                .or_else(|| last_own(sim, w))
                .map(|p| (p.i(), p.n()))
        })
        .collect()
}

/// The first grant to `w` at or after `from_us`, in L after it.
fn first_grant(sim: &Sim, w: WorkerId, from_us: u64) -> Option<f64> {
    let name = w.to_string();
    sim.history().iter().find_map(|r| match r {
        Record::Own { worker, at_us, .. } if *worker == name && *at_us >= from_us => {
            Some(in_l(at_us - from_us))
        }
        _ => None,
    })
}

/// One seed of one restart under `v`; `None` when no worker held the middle
/// position at the event. Draws as `scenario_run` does, so the crash
/// without a new process is the scenario table's crash.
fn restart_run(
    seed: u64,
    v: Variant,
    n0: usize,
    network: Network,
    restart: Restart,
) -> Option<RestartOutcome> {
    let mut draw = SplitMix::new(seed ^ 3);
    let (mut sim, mut ws) = start_variant(seed, v, n0, network, &mut draw);
    let t = if restart == Restart::Stall1 {
        L * EVENT_AT + L.mul_f64(0.15 / 2.0 * draw.unit())
    } else {
        L * EVENT_AT + L.mul_f64(draw.unit())
    };
    sim.run_until(t);
    let middle = (0..TASKS as u64)
        .find(|&id| v.mapping().owner(id, n0 as u32) == n0 as u32 / 2)
        .and_then(|id| holder_of(&sim, &ws, id))?;
    let at = ws.iter().position(|&w| w == middle)?;
    let before = pairs_now(&sim, &ws);
    let old = middle.to_string();
    sim.act(match restart {
        Restart::CancelNow | Restart::CancelHalf => Action::Cancel(middle),
        Restart::CrashNow | Restart::CrashAlone => Action::Crash(middle),
        Restart::Stall1 => Action::Stall(middle, L),
    });
    let successor = match restart.replacement() {
        Some(after) => Some(join_as(&mut sim, v, at, t + after)),
        None => (restart == Restart::Stall1).then_some(middle),
    };
    if let Some(s) = successor {
        ws[at] = s;
    }
    let end = t + L * WINDOW;
    sim.run_until(end + L);
    let after = pairs_now(&sim, &ws);
    let others_kept = (0..ws.len())
        .filter(|&k| k != at)
        .all(|k| after[k].is_some() && after[k] == before[k]);
    let (i, n) = before[at]?;
    let history = sim.closed_history();
    let checker = Checker::new(&history, Some(us(sim.now())));
    let mut holdings = checker.holdings().to_vec();
    if restart.crashes() {
        // A crashed worker counts as a holder only until the crash.
        for h in holdings.iter_mut().filter(|h| h.worker == old) {
            h.end_us = h.end_us.min(us(t)).max(h.start_us);
        }
    }
    let (from, to) = (us(t), us(end));
    let mine = TaskSet::pair(judge(v.mapping()), i, n);
    let (_, uncovered) = task_cover(&holdings, v.mapping(), &mine, from, to);
    let (cover, _) = task_cover(&holdings, v.mapping(), &TaskSet::all(), from, to);
    let budget = v.options().effective_drain_budget();
    let crash = CrashEnd::of(&history, budget).filter(|_| restart.crashes());
    let gaps = lease_gaps(checker.holdings(), v.mapping(), &mine, (&old, from), crash);
    Some(RestartOutcome {
        uncovered,
        gap: (!gaps.is_empty()).then(|| mean(&gaps)),
        regrant: successor
            .filter(|&s| s != middle)
            .and_then(|s| first_grant(&sim, s, from)),
        same_index: successor.map(|_| after[at] == before[at]),
        others_kept: successor.is_some() && others_kept,
        cover,
        moved: task_moves(checker.holdings(), judge(v.mapping()), from, to) as f64 / TASKS as f64,
        faults: faults(&checker),
    })
}

/// A share of the runs as a fraction, or `–` when none has the figure.
fn share(flags: impl Iterator<Item = Option<bool>>) -> String {
    let flags: Vec<bool> = flags.flatten().collect();
    if flags.is_empty() {
        return "–".to_owned();
    }
    let yes = flags.iter().filter(|&&f| f).count();
    format!("{yes}/{}", flags.len())
}

/// Mean and max of the figures that exist, or `–`.
fn mean_max(xs: impl Iterator<Item = Option<f64>>) -> String {
    let xs: Vec<f64> = xs.flatten().collect();
    if xs.is_empty() {
        return "–".to_owned();
    }
    let max = xs.iter().copied().fold(0.0, f64::max);
    format!("{:.2} / {max:.2}", mean(&xs))
}

/// One table row from the runs of one cell.
fn row(cell: [&str; 4], runs: &[RestartOutcome]) -> Vec<String> {
    let cover: Vec<f64> = runs.iter().map(|r| r.cover).collect();
    let moved: Vec<f64> = runs.iter().map(|r| r.moved).collect();
    let mut row: Vec<String> = cell.iter().map(|s| (*s).to_owned()).collect();
    row.extend([
        mean_max(runs.iter().map(|r| Some(r.uncovered))),
        mean_max(runs.iter().map(|r| r.gap)),
        runs.iter()
            .filter(|r| r.gap.is_some_and(|g| g > 0.9))
            .count()
            .to_string(),
        mean_max(runs.iter().map(|r| r.regrant)),
        share(runs.iter().map(|r| r.same_index)),
        share(runs.iter().map(|r| r.same_index.map(|_| r.others_kept))),
        format!(
            "{:.3} ({:.3})",
            mean(&cover),
            cover.iter().copied().fold(1.0, f64::min)
        ),
        format!(
            "{:.3} ({:.3})",
            mean(&moved),
            moved.iter().copied().fold(0.0, f64::max)
        ),
        runs.len().to_string(),
        runs.iter().map(|r| r.faults).sum::<u64>().to_string(),
    ]);
    row
}

/// The member-name figures: per restart, regime, `n0` and variant (the
/// defaults, and the defaults with member names).
pub(super) fn member_figures(seeds: u64, only: &str) {
    let variants = [
        Variant {
            name: "default (anonymous)",
            options: || Options::new("g", L),
            members: false,
        },
        Variant {
            name: "default with member names",
            options: || Options::new("g", L),
            members: true,
        },
    ];
    let mut table = Table::new(&[
        "scenario",
        "regime",
        "n0",
        "variant",
        "member's tasks uncovered (mean / max, L)",
        "lease gap (mean / max, L)",
        "seeds with a gap > 0.9 L",
        "regrant (mean / max, L)",
        "same index",
        "others kept",
        "window task coverage (worst)",
        "moved / tasks (max)",
        "runs",
        "violations",
    ]);
    for restart in Restart::ALL {
        if !restart.name().contains(only) {
            continue;
        }
        for (regime, network, n0) in cells() {
            for v in variants {
                let runs: Vec<RestartOutcome> = completed_runs(seeds, |seed| {
                    restart_run(seed, v, n0, network.clone(), restart)
                });
                let n0 = n0.to_string();
                table.row(row([restart.name(), regime, &n0, v.name], &runs));
            }
        }
    }
    table.print();
    println!(
        "Window: [event, event + 6 L). Uncovered: per task of the member's share at the event, \
         time held by nobody (a crashed holder counts until the crash). Lease gap: per such \
         task, from the old process's last lease end (release, or deadline) to the next grant \
         to anyone (for a crash, from the drain end (m+2)L - b of its lease last renewed \
         from m). Regrant: event to the new process's first grant. Same index: the new (or \
         stalled) process ends on the member's pair; others kept: every other worker ends on \
         its own pair (seeds / runs with a successor). Coverage and moved as in the scenario \
         table: mean (worst seed).\n"
    );
}
