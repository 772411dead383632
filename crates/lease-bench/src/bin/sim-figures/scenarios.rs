//! `--scenarios` and `--drain-budgets`: the handover scenarios (one join,
//! one departure by cancel and by crash of the worker at position `n0 / 2`,
//! a rolling restart 4 L apart, one missed registration) per variant, and
//! the same scenarios under the default options at four drain budgets, with
//! the quiet time of every task handed over.

use std::time::Duration;

use lease_bench::{SplitMix, Table, mean};
use lease_core::ownership::Mapping;
use lease_core::{Counting, Handover, Options};
use lease_history::Checker;
use lease_history::checker::{Holding, task_moves};
use lease_history::tasks::{TASKS, TaskSet};
use lease_sim::{Action, Network, WorkerId};

use super::{
    EVENT_AT, G, L, Variant, WINDOW, cells, completed_runs, faults, holder_of, in_l, join_as,
    judge, over_seeds, start_variant, task_cover, us,
};

/// The scenarios of the handover table.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Scenario {
    /// A newcomer at the event.
    Join,
    /// The worker at position `n0 / 2` is cancelled at the event.
    Cancel,
    /// The worker at position `n0 / 2` crashes at the event (its lease runs
    /// to its deadline; for coverage it counts only until the crash).
    Crash,
    /// Rolling restart 4 L apart: worker `j` (in join order) is cancelled
    /// at `event + 4 j L`; its replacement joins 4 L later, as the next one
    /// leaves.
    Roll4,
    /// Rolling restart 4 L apart, each replacement started at once: worker
    /// `j` is cancelled at `event + 4 j L` and its replacement (under its
    /// member name, for a variant with names) joins at the same instant.
    Roll4Now,
    /// The worker at position `n0 / 2` misses exactly one registration: its
    /// process is frozen for exactly `L` from `15 L + U(0, G/2)`, which
    /// holds that interval's firing instant and no other.
    Stall1,
}

impl Scenario {
    const ALL: [Scenario; 6] = [
        Scenario::Join,
        Scenario::Cancel,
        Scenario::Crash,
        Scenario::Roll4,
        Scenario::Roll4Now,
        Scenario::Stall1,
    ];

    fn name(self) -> &'static str {
        match self {
            Scenario::Join => "one join",
            Scenario::Cancel => "one departure (cancel)",
            Scenario::Crash => "one departure (crash)",
            Scenario::Roll4 => "rolling restart, 4 L apart",
            Scenario::Roll4Now => "rolling restart, 4 L apart, replacement at once",
            Scenario::Stall1 => "one missed registration",
        }
    }
}

/// What one seed of one scenario gave.
#[derive(Clone, Copy, Debug)]
struct ScenarioOutcome {
    /// The window's task coverage.
    cover: f64,
    /// Task owner changes over the window / the number of tasks.
    moved: f64,
    /// The same with every process counted as its member (rule 18): a
    /// task handed from a member's old process to its new one is no move.
    /// Anonymous processes are members of their own.
    member_moved: f64,
    /// The checker's findings.
    faults: u64,
    /// The shortest quiet time of a task handed over in the window, in L
    /// ([`quiet_times`]); `None` when no task changed hands.
    quiet_min: Option<f64>,
    /// Their mean, in L.
    quiet_mean: Option<f64>,
}

/// Per task handed over from one worker to another with its holding
/// starting in `[from, to)`: the time from the end of the old holder's last
/// holding of it (the instant its loop was handed the value without it) to
/// the start of the new holder's (its grant), in L. This is the time a
/// loop had to stop the task before anyone else could start it. Each
/// holding is read under `mapping` (the union of its parts for a task set).
fn quiet_times(holdings: &[Holding], mapping: Mapping, from: u64, to: u64) -> Vec<f64> {
    let mapping = judge(mapping);
    let mut order: Vec<&Holding> = holdings.iter().filter(|h| h.end_us > h.start_us).collect();
    order.sort_by_key(|h| h.start_us);
    let mut last: Vec<Option<(&str, u64)>> = vec![None; TASKS];
    let mut out = Vec::new();
    for h in order {
        let set = if h.parts.is_empty() {
            TaskSet::pair(mapping, h.i, h.n)
        } else {
            h.parts.iter().fold(TaskSet::default(), |s, p| {
                s.union(&TaskSet::part(mapping, p))
            })
        };
        for t in set.iter() {
            let prev = last[t].replace((h.worker.as_str(), h.end_us));
            if let Some((w, end)) = prev
                && w != h.worker
                && (from..to).contains(&h.start_us)
            {
                out.push(in_l(h.start_us.saturating_sub(end)));
            }
        }
    }
    out
}

/// One seed of one scenario; `None` when the scenario could not be set up
/// (no worker held the middle position at the event).
fn scenario_run(
    seed: u64,
    v: Variant,
    n0: usize,
    network: Network,
    scenario: Scenario,
) -> Option<ScenarioOutcome> {
    let mut draw = SplitMix::new(seed ^ 3);
    let (mut sim, ws) = start_variant(seed, v, n0, network, &mut draw);
    // Each process's member: worker `j` and its replacement are `m{j}`.
    let mut member_of: Vec<(WorkerId, usize)> = ws.iter().copied().zip(0..).collect();
    let mut t = L * EVENT_AT + L.mul_f64(draw.unit());
    if scenario == Scenario::Stall1 {
        t = L * EVENT_AT + L.mul_f64(0.15 / 2.0 * draw.unit());
    }
    sim.run_until(t);
    // The worker at the middle position: the holder of a task that position
    // owns under the variant's mapping.
    let middle = (0..TASKS as u64)
        .find(|&id| v.mapping().owner(id, n0 as u32) == n0 as u32 / 2)
        .and_then(|id| holder_of(&sim, &ws, id));
    let mut crashed = None;
    let end = match scenario {
        Scenario::Join => {
            sim.schedule_join(t);
            t + L * WINDOW
        }
        Scenario::Cancel => {
            sim.act(Action::Cancel(middle?));
            t + L * WINDOW
        }
        Scenario::Crash => {
            sim.act(Action::Crash(middle?));
            crashed = middle;
            t + L * WINDOW
        }
        Scenario::Stall1 => {
            sim.act(Action::Stall(middle?, L));
            t + L * WINDOW
        }
        Scenario::Roll4 | Scenario::Roll4Now => {
            let delay = u32::from(scenario == Scenario::Roll4);
            for (j, &w) in ws.iter().enumerate() {
                sim.schedule(t + L * (4 * j as u32), Action::Cancel(w));
                let new = join_as(&mut sim, v, j, t + L * (4 * (j as u32 + delay)));
                member_of.push((new, j));
            }
            t + L * (4 * n0 as u32 + WINDOW)
        }
    };
    sim.run_until(end + L);
    let checker = Checker::new(&sim.closed_history(), Some(us(sim.now())));
    let mut holdings = checker.holdings().to_vec();
    if let Some(w) = crashed {
        // A crashed worker counts as a holder only until the crash.
        let name = w.to_string();
        for h in holdings.iter_mut().filter(|h| h.worker == name) {
            h.end_us = h.end_us.min(us(t)).max(h.start_us);
        }
    }
    let (from, to) = (us(t), us(end));
    let (cover, _) = task_cover(&holdings, v.mapping(), &TaskSet::all(), from, to);
    let moved = task_moves(checker.holdings(), judge(v.mapping()), from, to) as f64 / TASKS as f64;
    let member_moved = if v.members {
        let mut by_member = checker.holdings().to_vec();
        for h in &mut by_member {
            if let Some((_, j)) = member_of.iter().find(|(w, _)| w.to_string() == h.worker) {
                h.worker = format!("m{j}");
            }
        }
        task_moves(&by_member, judge(v.mapping()), from, to) as f64 / TASKS as f64
    } else {
        moved
    };
    // A crashed holder's loop was told nothing: its holding ends at its
    // deadline, so its quiet time would be the protocol's, not the loop's.
    let quiet = match scenario {
        Scenario::Crash => Vec::new(),
        _ => quiet_times(checker.holdings(), v.mapping(), from, to),
    };
    Some(ScenarioOutcome {
        cover,
        moved,
        member_moved,
        faults: faults(&checker),
        quiet_min: quiet.iter().copied().reduce(f64::min),
        quiet_mean: (!quiet.is_empty()).then(|| mean(&quiet)),
    })
}

/// The scenario table: task coverage of the window, moved tasks, violations,
/// per scenario, regime, `n0` and variant.
pub(super) fn scenario_figures(seeds: u64, only: &str) {
    let variants = [
        Variant {
            name: "default (Options::new)",
            options: || Options::new("g", L),
            members: false,
        },
        Variant {
            name: "default with member names",
            options: || Options::new("g", L),
            members: true,
        },
        Variant {
            name: "whole pairs (modulo)",
            options: || Options::new("g", L).with_handover(Handover::WholePairs),
            members: false,
        },
        Variant {
            name: "arrival (the original)",
            options: || Options::new("g", L).with_counting(Counting::Arrival),
            members: false,
        },
    ];
    let mut table = Table::new(&[
        "scenario",
        "regime",
        "n0",
        "variant",
        "window task coverage (mean)",
        "worst seed",
        "moved / tasks (mean)",
        "max",
        "moved between members / tasks (mean)",
        "runs",
        "violations",
    ]);
    for scenario in Scenario::ALL {
        if !scenario.name().contains(only) {
            continue;
        }
        for (regime, network, n0) in cells() {
            for v in variants {
                let runs: Vec<ScenarioOutcome> = completed_runs(seeds, |seed| {
                    scenario_run(seed, v, n0, network.clone(), scenario)
                });
                let cover: Vec<f64> = runs.iter().map(|r| r.cover).collect();
                let moved: Vec<f64> = runs.iter().map(|r| r.moved).collect();
                let member: Vec<f64> = runs.iter().map(|r| r.member_moved).collect();
                table.row([
                    scenario.name().to_owned(),
                    regime.to_owned(),
                    n0.to_string(),
                    v.name.to_owned(),
                    format!("{:.3}", mean(&cover)),
                    format!("{:.3}", cover.iter().copied().fold(1.0, f64::min)),
                    format!("{:.3}", mean(&moved)),
                    format!("{:.3}", moved.iter().copied().fold(0.0, f64::max)),
                    format!("{:.3}", mean(&member)),
                    runs.len().to_string(),
                    runs.iter().map(|r| r.faults).sum::<u64>().to_string(),
                ]);
            }
        }
    }
    table.print();
    println!(
        "Window: [event, event + 6 L), for the rolling restart [first leave, last join + 6 L). \
         Task coverage: share of tasks 0..1024 held by exactly one worker (modulo mapping for \
         whole pairs, consistent for incremental). Moved: task owner changes over the window / 1024; between members: the same with a member's old and new process as one owner (anonymous processes: their own).\n"
    );
}

/// One join under the default options with budget `v`, and a forward step
/// of the server clock by `0.9 G` (within the guarantee, rule 17) at
/// `offset` after the join: the shortest quiet time of a task handed over
/// in `[join, join + 6 L)` ([`quiet_times`]), and the checker's findings.
fn stepped_join(seed: u64, v: Variant, n0: usize, offset: Duration) -> (Option<f64>, u64) {
    let mut draw = SplitMix::new(seed ^ 3);
    let (mut sim, _) = start_variant(seed, v, n0, Network::ideal(L), &mut draw);
    let t = L * EVENT_AT + L.mul_f64(draw.unit());
    sim.run_until(t);
    sim.schedule_join(t);
    sim.schedule(t + offset, Action::ClockStep(us(G.mul_f64(0.9)) as i64));
    sim.run_until(t + L * (WINDOW + 1));
    let checker = Checker::new(&sim.closed_history(), Some(us(sim.now())));
    let quiet = quiet_times(checker.holdings(), v.mapping(), us(t), us(t + L * WINDOW));
    (quiet.into_iter().reduce(f64::min), faults(&checker))
}

/// [`stepped_join`] at 30 step instants `0, L/10, ..., 2.9 L` after the
/// join: per budget and `n0`, the shortest quiet time over the instants
/// and seeds, and the mean over the seeds of each seed's shortest.
fn stepped_join_figures(seeds: u64, variants: &[Variant]) {
    let mut table = Table::new(&[
        "n0",
        "budget",
        "shortest quiet time (L)",
        "mean of the seeds' shortest",
        "runs",
        "violations",
    ]);
    for n0 in [5usize, 16] {
        for &v in variants {
            let per_seed: Vec<(f64, u64, usize)> = over_seeds(seeds, |seed| {
                let runs: Vec<(Option<f64>, u64)> = (0..30)
                    .map(|k| stepped_join(seed, v, n0, L / 10 * k))
                    .collect();
                let min = runs
                    .iter()
                    .filter_map(|r| r.0)
                    .fold(f64::INFINITY, f64::min);
                (min, runs.iter().map(|r| r.1).sum(), runs.len())
            });
            let mins: Vec<f64> = per_seed.iter().map(|r| r.0).collect();
            table.row([
                n0.to_string(),
                v.name.to_owned(),
                format!("{:.3}", mins.iter().copied().fold(f64::INFINITY, f64::min)),
                format!("{:.3}", mean(&mins)),
                per_seed.iter().map(|r| r.2).sum::<usize>().to_string(),
                per_seed.iter().map(|r| r.1).sum::<u64>().to_string(),
            ]);
        }
    }
    table.print();
    println!(
        "One join (ideal network) with a forward step of the server clock by 0.9 G at one of 30 \
         instants 0, 0.1 L, ..., 2.9 L after it: the quiet time of every task handed over in \
         the 6 L after the join, shortest over the instants.\n"
    );
}

/// The drain budget's figures: the scenarios of [`scenario_figures`] under
/// the default options at `b = 0`, `G/2`, `L/10` and `G`, side by side: the
/// window's task coverage, and the quiet time of every task handed over
/// ([`quiet_times`]).
pub(super) fn drain_budget_figures(seeds: u64, only: &str) {
    let variants = [
        Variant {
            name: "b = 0",
            options: || Options::new("g", L).with_drain_budget(Duration::ZERO),
            members: false,
        },
        Variant {
            name: "b = G/2",
            options: || Options::new("g", L).with_drain_budget(G / 2),
            members: false,
        },
        Variant {
            name: "b = L/10",
            options: || Options::new("g", L).with_drain_budget(L / 10),
            members: false,
        },
        Variant {
            name: "b = G",
            options: || Options::new("g", L).with_drain_budget(G),
            members: false,
        },
    ];
    let mut heads = vec!["scenario".to_owned(), "regime".to_owned(), "n0".to_owned()];
    heads.extend(variants.iter().map(|v| format!("coverage {}", v.name)));
    heads.extend(
        variants
            .iter()
            .map(|v| format!("quiet {} (min / mean)", v.name)),
    );
    heads.push("runs".to_owned());
    heads.push("violations".to_owned());
    let heads: Vec<&str> = heads.iter().map(String::as_str).collect();
    let mut table = Table::new(&heads);
    for scenario in Scenario::ALL {
        if !scenario.name().contains(only) {
            continue;
        }
        for (regime, network, n0) in cells() {
            let mut covers = Vec::new();
            let mut quiets = Vec::new();
            let (mut runs, mut violations) = (0, 0);
            for v in variants {
                let out: Vec<ScenarioOutcome> = completed_runs(seeds, |seed| {
                    scenario_run(seed, v, n0, network.clone(), scenario)
                });
                let cover: Vec<f64> = out.iter().map(|r| r.cover).collect();
                covers.push(format!(
                    "{:.3} ({:.3})",
                    mean(&cover),
                    cover.iter().copied().fold(1.0, f64::min)
                ));
                let min = out.iter().filter_map(|r| r.quiet_min).reduce(f64::min);
                let means: Vec<f64> = out.iter().filter_map(|r| r.quiet_mean).collect();
                quiets.push(match min {
                    Some(min) => format!("{min:.3} / {:.3}", mean(&means)),
                    None => "–".to_owned(),
                });
                runs += out.len();
                violations += out.iter().map(|r| r.faults).sum::<u64>();
            }
            let mut row = vec![
                scenario.name().to_owned(),
                regime.to_owned(),
                n0.to_string(),
            ];
            row.extend(covers);
            row.extend(quiets);
            row.push(runs.to_string());
            row.push(violations.to_string());
            table.row(row);
        }
    }
    table.print();
    println!(
        "Coverage: the window's task coverage, mean (worst seed), as in the scenario table. \
         Quiet: per task handed over in the window, the time from its old holder's last value \
         with it to its new holder's grant, in L (shortest over all seeds / mean of the \
         seeds' means; none for a crash, whose holder is told nothing). Runs and violations \
         summed over the budgets.\n"
    );
    stepped_join_figures(seeds, &variants);
}
