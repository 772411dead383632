//! Rule 12 in the simulator, in both counting modes: a group at `L` is
//! settled; a worker at `2L` and one in the other mode join the same group.
//! Both are refused (they say so, with the recorded rules) and hold nothing
//! while the group runs, so no instant has two holders of one slot; after
//! the group has left and its record has expired, one of them takes over.
//! Before the record existed, the newcomer at `2L` counted itself alone and
//! held `(0, 1)` beside the group.

use std::time::Duration;

mod common;

use lease_core::{Assignment, Event, IdleReason, Mode, Options};
use lease_sim::{Action, Sim, SimConfig, WorkerId};

const L: Duration = Duration::from_millis(200);

fn refused(sim: &mut Sim, seen: &mut Vec<WorkerId>) {
    for o in sim.drain_observed() {
        if let Event::Assignment(Assignment::Idle(idle)) = &o.event
            && let IdleReason::Refused(refusal) = idle.reason
        {
            assert!(refusal.recorded.is_some(), "a readable record");
            seen.push(o.worker);
        }
    }
}

fn other(mode: Mode) -> Mode {
    match mode {
        Mode::Ranked => Mode::Arrival,
        Mode::Arrival => Mode::Ranked,
    }
}

fn run(mode: Mode, seed: u64) {
    let options = common::classic(Options::new("g", L), mode);
    let mut sim = Sim::new(SimConfig::new(seed, options.clone())).expect("valid options");
    let group: Vec<WorkerId> = (0..3).map(|_| sim.join_now()).collect();
    sim.run_for(L * 8);
    assert!(group.iter().all(|&w| sim.lease(w).is_some()), "settled");
    let at = sim.now();
    let longer = sim
        .schedule_join_with(at, common::classic(Options::new("g", L * 2), mode))
        .expect("valid");
    let other_mode = sim
        .schedule_join_with(at, common::classic(Options::new("g", L), other(mode)))
        .expect("valid");
    let mut seen = Vec::new();
    for _ in 0..40 {
        sim.run_for(L / 4);
        refused(&mut sim, &mut seen);
        assert!(sim.lease(longer).is_none() && sim.lease(other_mode).is_none());
        assert!(
            group.iter().all(|&w| sim.lease(w).is_some()),
            "the group keeps serving"
        );
    }
    assert!(
        seen.contains(&longer) && seen.contains(&other_mode),
        "{seen:?}"
    );
    for &w in &group {
        sim.act(Action::Cancel(w));
    }
    let mut taken = None;
    for _ in 0..200 {
        sim.run_for(L / 4);
        refused(&mut sim, &mut seen);
        let holders: Vec<WorkerId> = [longer, other_mode]
            .into_iter()
            .filter(|&w| sim.lease(w).is_some())
            .collect();
        assert!(holders.len() <= 1, "two sets of rules hold at once");
        if let [w] = holders[..] {
            taken = Some(w);
        }
    }
    assert!(taken.is_some(), "nobody took over after the group left");
    // The group's workers stood down by cancellation: the history says so.
    let cancelled = sim
        .history()
        .iter()
        .filter(|r| r.to_line().contains("\"reason\":\"cancelled\""))
        .count();
    assert_eq!(cancelled, group.len(), "one cancelled release per worker");
    let summary = sim.check();
    // Fencing tokens are interval numbers: not comparable across interval
    // lengths (docs/protocol.md, rule 12), so only exclusivity is asked.
    assert_eq!(summary.violation_count, 0, "{mode} seed {seed}: {summary}");
    assert_eq!(summary.anomaly_count, 0, "{mode} seed {seed}: {summary}");
}

#[test]
fn workers_with_other_rules_are_refused_in_ranked_mode() {
    for seed in 0..5 {
        run(Mode::Ranked, seed);
    }
}

#[test]
fn workers_with_other_rules_are_refused_in_arrival_mode() {
    for seed in 0..5 {
        run(Mode::Arrival, seed);
    }
}

/// The negative control: with the simulated scripts ignoring the rules
/// record (`Sim::sabotage_rules`), the newcomer at `2L` counts itself alone
/// beside the group, and the checker catches the overlap.
#[test]
fn without_the_record_the_checker_catches_the_split_brain() {
    for mode in [Mode::Ranked, Mode::Arrival] {
        let options = common::classic(Options::new("g", L), mode);
        let mut sim = Sim::new(SimConfig::new(1, options)).expect("valid options");
        sim.sabotage_rules(true);
        for _ in 0..3 {
            sim.join_now();
        }
        sim.run_for(L * 8);
        let at = sim.now();
        sim.schedule_join_with(at, common::classic(Options::new("g", L * 2), mode))
            .expect("valid");
        sim.run_for(L * 12);
        let summary = sim.check();
        assert!(summary.violation_count > 0, "{mode}: {summary}");
    }
}
