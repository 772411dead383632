//! Rule 14, kept leases with a drain budget (`Ranked`): a lease that a later
//! reply does not renew is kept until its deadline minus the drain budget.
//! Its properties in the simulator, and its negative control.

mod common;

use std::time::Duration;

use common::*;
use lease_core::NegativeControl;
use lease_core::{Assignment, Event, Mode, Options};
use lease_sim::{Faults, Network, Observed, RunConfig, Sim, SimConfig, random_run};

/// Each settled worker's time without a lease in `[join, join + 6 L)` after
/// a newcomer joins a settled group of `n` at 15.x L.
fn idle_after_join(seed: u64, n: usize) -> Vec<Duration> {
    let (mut sim, ws) = group(seed, Mode::Ranked, 0.15, n, Network::ideal(L));
    let join = L * 15 + L.mul_f64(0.37);
    sim.run_until(join);
    sim.drain_observed();
    sim.join_now();
    let step = L / 1000;
    let mut idle = vec![Duration::ZERO; ws.len()];
    while sim.now() < join + L * 6 {
        sim.run_for(step);
        for (k, &w) in ws.iter().enumerate() {
            if sim.lease(w).is_none() {
                idle[k] += step;
            }
        }
    }
    assert!(sim.check().is_ok(), "{}", sim.check());
    idle
}

/// A join changes `n`, so in whole-pair mode every settled worker's pair
/// changes. With kept leases each one holds its old lease until its deadline
/// minus `G` and is idle only from there to its regrant, about
/// `G + u + RTT` later: about 0.35 L instead of a whole interval. Fails
/// without rule 14 (every settled worker was idle about 1 L).
#[test]
fn a_join_costs_each_settled_worker_only_the_drain_budget_and_the_regrant() {
    for seed in [1, 2, 3] {
        for n in [3, 8] {
            let idle = idle_after_join(seed, n);
            for (k, d) in idle.iter().enumerate() {
                assert!(
                    *d < L.mul_f64(0.45) && *d > L.mul_f64(0.15),
                    "seed {seed}, n {n}: settled worker {k} idle {d:?} after the join"
                );
            }
        }
    }
}

/// How many values a loop saw in which a grant came while a kept lease was
/// still held: under whole pairs every value is one pair, so a value holding
/// two (no `pair()`) is a grant beside a kept lease its drain timer had not
/// ended first.
fn grants_cutting_a_drain_short(observed: &[Observed]) -> usize {
    observed
        .iter()
        .filter(
            |o| matches!(&o.event, Event::Assignment(Assignment::Held(l)) if l.pair().is_none()),
        )
        .count()
}

fn churn_run(seed: u64, options: Options) -> (Sim, usize) {
    let mut cfg = SimConfig::new(seed, options);
    cfg.network = Network::lossy(L);
    let mut sim = Sim::new(cfg).expect("valid options");
    let mut ws: Vec<_> = (0..4)
        .map(|k| sim.schedule_join(L.mul_f64(0.2 * k as f64)))
        .collect();
    // A join every 5 L and a departure every 7 L: n changes often.
    for m in 1..12u32 {
        ws.push(sim.schedule_join(L * (5 * m) + L.mul_f64(0.31 * f64::from(m % 3))));
        if m % 2 == 0 {
            let w = ws.remove((seed as usize + m as usize) % ws.len());
            sim.schedule(
                L * (7 * m / 2) + L.mul_f64(0.5),
                lease_sim::Action::Cancel(w),
            );
        }
    }
    let mut observed = Vec::new();
    while sim.now() < L * 60 {
        sim.run_for(L);
        observed.extend(sim.drain_observed());
    }
    let cut = grants_cutting_a_drain_short(&observed);
    (sim, cut)
}

/// In whole-pair mode a kept lease always ends before its worker's next
/// different grant: a grant from `k` needs the pairs implied by `k-1` and
/// `k-2` to agree, and a lease still live from `k-1` or earlier certified
/// another pair for `k-2` (docs/protocol.md, rule 14). So the drain timer
/// always fires first, and no grant ever has to cut a drain short. The
/// overdrain control breaks it, which shows the check can fail.
#[test]
fn a_kept_lease_always_ends_before_the_next_different_grant() {
    let options = || common::classic(Options::new("g", L), Mode::Ranked);
    let mut grants = 0;
    for seed in 1..=8 {
        let (sim, cut) = churn_run(seed, options());
        assert_eq!(cut, 0, "seed {seed}: a grant cut a kept lease short");
        assert!(sim.check().is_ok(), "seed {seed}: {}", sim.check());
        grants += sim.check().owns;
    }
    assert!(
        grants > 100,
        "the runs changed pairs often ({grants} grants)"
    );
    let sabotaged: usize = (1..=8)
        .map(|seed| {
            let mut o = options();
            o.negative_control = Some(NegativeControl::OverdrainPastDeadline);
            churn_run(seed, o).1
        })
        .sum();
    assert!(sabotaged > 0, "the check never fires, even on the control");
}

/// The negative control of rule 14 (`NegativeControl::OverdrainPastDeadline`): keeping a
/// lease half an interval past its deadline breaks exclusivity, and the
/// checker catches it over a few seeds of ordinary churn; the same seeds
/// without the sabotage are clean.
#[test]
fn overdrain_past_the_deadline_is_caught_by_the_checker() {
    let run = |seed: u64, sabotage: bool| {
        let cfg = RunConfig {
            mode: Mode::Ranked,
            faults: Faults {
                within_guarantee: true,
                ..Faults::default()
            },
            customize: if sabotage {
                |mut o: Options| {
                    o.negative_control = Some(NegativeControl::OverdrainPastDeadline);
                    o
                }
            } else {
                std::convert::identity
            },
            ..RunConfig::new(seed, 5, 120)
        };
        random_run(&cfg).expect("valid").summary
    };
    let caught = (1..=10u64).filter(|&seed| !run(seed, true).is_ok()).count();
    assert!(caught >= 5, "overdrain caught in only {caught}/10 runs");
    for seed in 1..=10u64 {
        let s = run(seed, false);
        assert!(s.is_ok(), "seed {seed}: {s}");
    }
}
