//! What a downstream project writes: its own worker loop, tested against the
//! simulated Redis in virtual time. Here the "application" processes task ids
//! `0..1000` split by `id % n == i`, writes results to a fencing store that
//! rejects a token older than the newest it has seen per task, and the test
//! checks that no task is ever processed by two workers at the same instant,
//! through a join, a stall and a crash.

use std::collections::HashMap;
use std::time::Duration;

use lease_core::{Assignment, Event, Options};
use lease_sim::{Action, Sim, SimConfig, WorkerId};

/// The application's store: keeps the newest fencing token per task and
/// rejects writes carrying an older one.
#[derive(Default)]
struct FencedStore {
    newest: HashMap<u64, u64>,
    accepted: u64,
    rejected: u64,
}

impl FencedStore {
    fn write(&mut self, task: u64, token: u64) {
        let newest = self.newest.entry(task).or_insert(0);
        if token < *newest {
            self.rejected += 1;
        } else {
            *newest = token;
            self.accepted += 1;
        }
    }
}

#[test]
fn downstream_worker_loop_never_processes_a_task_twice_at_once() {
    let l = Duration::from_millis(500);
    let mut sim = Sim::new(SimConfig::new(2024, Options::new("invoices", l))).unwrap();
    let mut workers: Vec<WorkerId> = (0..3).map(|_| sim.join_now()).collect();
    let mut store = FencedStore::default();
    let step = Duration::from_millis(10);
    let mut grants = 0;
    let end = l * 60;
    while sim.now() < end {
        // Scripted faults, as a downstream test would write them.
        let t = sim.now();
        if t == l * 15 {
            workers.push(sim.join_now());
        }
        if t == l * 30 {
            sim.act(Action::Stall(workers[1], l * 3));
        }
        if t == l * 45 {
            sim.act(Action::Crash(workers[0]));
        }
        // The loop body: each worker that holds a valid lease processes the
        // tasks it owns at this instant.
        let mut owner_of = HashMap::new();
        for &w in &workers {
            for task in 0..1000u64 {
                // The fencing token the loop writes with, if it holds the
                // task now (virtual time).
                let Some(token) = sim.token_for(w, task) else {
                    continue;
                };
                let previous = owner_of.insert(task, w);
                assert_eq!(previous, None, "task {task} owned twice at {t:?}");
                store.write(task, token);
            }
        }
        // The change-only pair stream each loop received: count the grants.
        grants += sim
            .drain_observed()
            .iter()
            .filter(|o| matches!(o.event, Event::Assignment(Assignment::Held(_))))
            .count();
        sim.run_for(step);
    }
    assert!(store.accepted > 0);
    // 3 at the start, 4 after the join, 4 after the stall (twice: n = 3,
    // then n = 4 again), 3 after the crash: every change regrants everyone.
    assert!(grants >= 3 + 4 + 3, "{grants} grants");
    assert_eq!(
        store.rejected, 0,
        "no stale writes: leases never overlapped"
    );
    assert!(sim.check().is_ok(), "{}", sim.check());
}
