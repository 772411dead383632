//! Rule 19, sticky return, with the real workers and the simulator's store:
//! a worker that misses one registration keeps its position and nobody
//! moves; a crash hands the crashed worker's tasks over as before; and the
//! negative controls of inheritance and of the returnee's second factor are
//! caught by the history checker. (The whole-interval model of the design,
//! with every fate of three workers and one-interval lost writes, is
//! `model_sticky_return.rs`.)

use std::time::Duration;

use lease_core::{NegativeControl, Options};
use lease_history::Summary;
use lease_sim::{Action, Faults, Network, RunConfig, Sim, SimConfig, WorkerId, random_run};

const L: Duration = Duration::from_secs(1);

fn at(l: f64) -> Duration {
    L.mul_f64(l)
}

/// Five workers with the default options, settled by 12 L.
fn settled(seed: u64, options: Options) -> (Sim, Vec<WorkerId>) {
    let mut cfg = SimConfig::new(seed, options);
    cfg.network = Network::ideal(L);
    let mut sim = Sim::new(cfg).expect("valid options");
    let ws: Vec<WorkerId> = (0..5)
        .map(|k| sim.schedule_join(at(0.17 * k as f64)))
        .collect();
    sim.run_until(at(12.0));
    (sim, ws)
}

/// Each worker's whole pair now, `None` for one that holds no whole pair.
fn pairs(sim: &Sim, ws: &[WorkerId]) -> Vec<Option<(u32, u32)>> {
    ws.iter()
        .map(|&w| sim.lease(w).and_then(|l| l.pair()).map(|p| (p.i(), p.n())))
        .collect()
}

fn violated(s: &Summary) -> bool {
    !s.is_ok() || s.tasks.as_ref().is_some_and(|t| !t.is_ok())
}

/// A worker frozen for exactly `L` from the start of interval 15 misses its
/// registration there; its registration in 14 reserved its place in 15, so
/// closed 15 still counts it at its position: when it is back every worker
/// holds the pair it held before (nobody filled its hole), and the history
/// is exclusive. Fails without reservations (the returnee came back at the
/// tail and swapped with the last worker).
#[test]
fn a_worker_that_misses_one_registration_keeps_its_position_and_nobody_moves() {
    for seed in 1..=10 {
        let (mut sim, ws) = settled(seed, Options::new("g", L));
        let before = pairs(&sim, &ws);
        assert!(
            before.iter().all(|p| p.is_some_and(|(_, n)| n == 5)),
            "seed {seed}: not settled on 5: {before:?}"
        );
        sim.run_until(at(15.0));
        sim.act(Action::Stall(ws[(seed % 5) as usize], L));
        sim.run_until(at(20.0));
        assert_eq!(pairs(&sim, &ws), before, "seed {seed}");
        let s = sim.check();
        assert!(!violated(&s), "seed {seed}: {s}");
    }
}

/// Crashes in five-worker groups: with inheritance the worker that fills
/// the crashed worker's hole holds its tasks from its reply of the second
/// interval without it (rule 19); every run is exclusive. The negative
/// control (`Sim::sabotage_inheritance`: inherit positions whose keepers
/// are still in the set) hands the moved tail worker's old position to the
/// others beside its own lease, and the checker catches it.
#[test]
fn inheriting_a_present_keepers_position_is_caught() {
    let (mut clean, mut caught) = (0, 0);
    for seed in 1..=20u64 {
        for sabotage in [false, true] {
            let (mut sim, ws) = settled(seed, Options::new("g", L));
            sim.sabotage_inheritance(sabotage);
            sim.run_until(at(15.5));
            sim.act(Action::Crash(ws[(seed % 4) as usize]));
            sim.run_until(at(22.0));
            let s = sim.check();
            if sabotage {
                caught += usize::from(violated(&s));
            } else {
                assert!(!violated(&s), "seed {seed}: {s}");
                clean += 1;
            }
        }
    }
    eprintln!("inheritance sabotaged: caught in {caught}/{clean}");
    assert!(caught * 2 >= clean, "caught in only {caught}/{clean}");
}

/// The negative control of the returnee's second factor
/// (`NegativeControl::SecondFactorFromMemory`): a worker whose previous
/// reply is not from `k-1` takes its last known position with the size of
/// closed `k-2` instead of its position there, which the server says. In
/// random runs with churn and every fault within the guarantee it is
/// caught; the same runs are clean without it.
#[test]
fn a_second_factor_from_memory_is_caught() {
    let run = |seed: u64, customize: fn(Options) -> Options| {
        let cfg = RunConfig {
            faults: Faults {
                within_guarantee: true,
                ..Faults::default()
            },
            customize,
            ..RunConfig::new(seed, 6, 150)
        };
        random_run(&cfg).expect("valid options").summary
    };
    let broken = |o: Options| Options {
        negative_control: Some(NegativeControl::SecondFactorFromMemory),
        ..o
    };
    let mut caught = 0;
    for seed in 0..40 {
        assert!(!violated(&run(seed, std::convert::identity)), "seed {seed}");
        caught += usize::from(violated(&run(seed, broken)));
    }
    eprintln!("second factor from memory: caught in {caught}/40");
    assert!(caught >= 1, "never caught");
}
