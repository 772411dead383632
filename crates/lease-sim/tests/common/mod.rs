//! Helpers shared by the simulator's integration tests.
#![allow(dead_code, unreachable_pub)]

pub mod search;

use std::time::Duration;

use lease_core::{Assignment, Counting, Event, Handover, Mode, Options};
use lease_sim::{Network, Observed, Sim, SimConfig, WorkerId};

/// Interval used by the liveness tests (virtual time).
pub const L: Duration = Duration::from_secs(1);

/// `options` counting in `mode` with the whole-pair handover and a cancel
/// that does not leave: the shape these tests measure (pairs, slot indices,
/// stand-downs of whole pairs). Task sets have tests of their own.
pub fn classic(options: Options, mode: Mode) -> Options {
    match mode {
        Mode::Ranked => options
            .with_handover(Handover::WholePairs)
            .with_graceful_leave(false),
        Mode::Arrival => options.with_counting(Counting::Arrival),
    }
}

/// The pair of a lease, when it is one whole pair.
pub fn ij(lease: &lease_core::Lease) -> Option<(u32, u32)> {
    lease.pair().map(|p| (p.i(), p.n()))
}

/// A simulation with `n` workers joining at random instants of the first
/// interval.
pub fn group(seed: u64, mode: Mode, gap: f64, n: usize, network: Network) -> (Sim, Vec<WorkerId>) {
    let options = classic(Options::new("g", L).with_gap(gap), mode);
    let mut cfg = SimConfig::new(seed, options);
    cfg.network = network;
    let mut sim = Sim::new(cfg).expect("valid options");
    let ws = (0..n)
        .map(|k| sim.schedule_join(L.mul_f64(k as f64 / n as f64 + 0.01 * seed as f64 % 0.1)))
        .collect();
    (sim, ws)
}

/// Whether `ws` hold exactly the slots `0..ws.len()` of `n = ws.len()` now.
pub fn settled(sim: &Sim, ws: &[WorkerId]) -> bool {
    let mut slots: Vec<(u32, u32)> = ws
        .iter()
        .filter_map(|&w| sim.lease(w).and_then(|l| ij(&l)))
        .collect();
    slots.sort_unstable();
    let n = ws.len() as u32;
    slots.len() == ws.len()
        && slots
            .iter()
            .enumerate()
            .all(|(k, &(i, m))| i == k as u32 && m == n)
}

/// Runs in small steps until `ws` are settled; returns the time it took, or
/// `None` if they were not settled within `limit`.
pub fn run_until_settled(sim: &mut Sim, ws: &[WorkerId], limit: Duration) -> Option<Duration> {
    let start = sim.now();
    let step = L / 50;
    while sim.now() - start <= limit {
        if settled(sim, ws) {
            return Some(sim.now() - start);
        }
        sim.run_for(step);
    }
    None
}

/// The slot index each worker holds now.
pub fn indices(sim: &Sim, ws: &[WorkerId]) -> Vec<Option<u32>> {
    ws.iter()
        .map(|&w| sim.lease(w).and_then(|l| ij(&l)).map(|(i, _)| i))
        .collect()
}

/// Pair changes (grants and releases) the workers' loops saw.
pub fn pair_changes(observed: &[Observed]) -> usize {
    observed
        .iter()
        .filter(|o| matches!(&o.event, Event::Assignment(a) if !a.is_idle() || matches!(a, Assignment::Idle(i) if i.ended.is_some())))
        .count()
}

/// The first instant `w` received a lease, after `after`.
pub fn first_own(observed: &[Observed], w: WorkerId, after: Duration) -> Option<Duration> {
    observed
        .iter()
        .find(|o| {
            o.worker == w
                && o.at >= after
                && matches!(&o.event, Event::Assignment(Assignment::Held(_)))
        })
        .map(|o| o.at)
}

/// Median of a list of durations.
pub fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}
