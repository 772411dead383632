//! Event sequences of canonical scenarios, as the workers' loops saw them.
//! Each snapshot was read and approved by hand; the reasoning is in the
//! comment above each test. Times are in intervals since the start (L = 1 s);
//! tokens are interval numbers, shown relative to the interval of the start.

mod common;

use std::fmt::Write as _;
use std::time::Duration;

use common::*;
use lease_core::{Assignment, Event, Mode};
use lease_sim::{Action, Network, Observed, Sim, WorkerId};

/// Server interval number at true time 0 (the simulator's server epoch / L).
const K0: u64 = 1_700_000_000;

fn render(observed: &[Observed]) -> String {
    let mut out = String::new();
    for o in observed {
        let t = o.at.as_secs_f64();
        let what = match &o.event {
            Event::Assignment(Assignment::Held(l)) => match ij(l) {
                Some((i, n)) => format!("own {i}/{n} token=k{:+}", l.token() as i64 - K0 as i64),
                None => format!("own tasks token=k{:+}", l.token() as i64 - K0 as i64),
            },
            Event::Assignment(Assignment::Idle(idle)) => match &idle.ended {
                Some(l) => {
                    let (i, n) = ij(l)
                        .or_else(|| l.newest_pair().map(|p| (p.i(), p.n())))
                        .unwrap_or_default();
                    format!(
                        "released {i}/{n} ({})\n{t:7.3}L {} idle",
                        idle.reason.as_str(),
                        o.worker
                    )
                }
                None => "idle".to_owned(),
            },
            Event::Stopped => "stopped".to_owned(),
        };
        let _ = writeln!(out, "{t:7.3}L {} {what}", o.worker);
    }
    out
}

fn start(mode: Mode, n: usize) -> (Sim, Vec<WorkerId>) {
    // Quiet network, joins spread over the first interval.
    let (mut sim, ws) = group(42, mode, 0.15, n, Network::default());
    run_until_settled(&mut sim, &ws, L * 10).expect("settles");
    (sim, ws)
}

// Settled start, Ranked: each worker sees the opening idle at its join, then
// owns after two closed intervals agree. All three joined in interval 0, so
// all three own early in interval 2 (the first whose two predecessors both
// counted all three): same n, distinct i. Newcomers that arrive in the same
// interval tie on phase 2 and sort by token, so the order is w1, w2, w0, not
// the join order; from then on the server carries it.
#[test]
fn settled_start_ranked() {
    let (mut sim, _) = start(Mode::Ranked, 3);
    sim.run_for(L * 3);
    insta::assert_snapshot!(render(&sim.drain_observed()));
}

// Settled start, Arrival: the same shape; owns come at each worker's slot in
// the band, in index order.
#[test]
fn settled_start_arrival() {
    let (mut sim, _) = start(Mode::Arrival, 3);
    sim.run_for(L * 3);
    insta::assert_snapshot!(render(&sim.drain_observed()));
}

// Join, Ranked: the newcomer w3 starts idle; one interval after the newcomer
// was first counted the settled workers' replies disagree (n changes from 3
// to 4), and each keeps its lease (rule 14) until its deadline, 4 L, minus
// the drain budget G = 0.15 L (3.85 L, a little earlier for the drift
// margin), then regrants on n = 4 keeping its index; w3 owns 3/4.
#[test]
fn join_ranked() {
    let (mut sim, _) = start(Mode::Ranked, 3);
    sim.run_for(L.mul_f64(0.5));
    sim.drain_observed();
    sim.join_now();
    sim.run_for(L * 4);
    insta::assert_snapshot!(render(&sim.drain_observed()));
}

// Leave by cancellation (these groups cancel without a graceful leave): w1
// releases at once (cancelled) and stops. Its registration in 2 reserved its
// place in 3 (rule 19), so the count drops to 2 in closed 4: the others'
// replies from 5 disagree, they keep their leases (renewed from 4) until
// their deadline minus G (rule 14: 6 L - 0.15 L), and regrant on n = 2 from
// 6. Positions fill holes (rule 15): w2 keeps its index 1 (below the new
// size), and w0, whose 2 is out of range, takes the hole w1 left, 0.
#[test]
fn cancel_ranked() {
    let (mut sim, ws) = start(Mode::Ranked, 3);
    sim.drain_observed();
    sim.act(Action::Cancel(ws[1]));
    sim.run_for(L * 4);
    insta::assert_snapshot!(render(&sim.drain_observed()));
}

// Crash: w1 disappears without a word (its loop sees nothing more); its
// reservation counts it in closed 3, and the survivors keep their leases to
// the drain's end and regrant on n = 2, as after a cancel: w2 keeps 1, w0
// fills the hole at 0 (rule 15).
#[test]
fn crash_ranked() {
    let (mut sim, ws) = start(Mode::Ranked, 3);
    sim.drain_observed();
    sim.act(Action::Crash(ws[1]));
    sim.run_for(L * 4);
    insta::assert_snapshot!(render(&sim.drain_observed()));
}

// Stall: w0 freezes for 3 intervals, from just after its registration in 2
// to 5.24. When it wakes its lease has expired (released ... expired). Its
// reservation counts it in closed 3 (rule 19); it is missing from closed 4
// only, and back in 5 (a returnee, filling position 2 again). So the
// others' replies from 5 see 2 after 3 and hand over at their deadline
// minus G (rule 14), their replies from 6 see 3 after 2 and grant nothing,
// and the group regrants on n = 3 from 7, each on its old index: whole
// pairs never agree on n = 2 (before rule 19 w0 was missing from closed 3
// and 4, and the group regranted on n = 2 in between).
#[test]
fn stall_ranked() {
    let (mut sim, ws) = start(Mode::Ranked, 3);
    sim.drain_observed();
    sim.act(Action::Stall(ws[0], L * 3));
    sim.run_for(L * 8);
    insta::assert_snapshot!(render(&sim.drain_observed()));
}

// Redis restart: every key is lost. The next registrations find no closed
// interval: every worker's reply disagrees, it keeps its lease to its
// deadline minus G (rule 14), then regrants two intervals
// later on the same n and the same indices: with the previous set gone, each
// worker sends the phase of its last known pair, which rebuilds the order.
#[test]
fn redis_restart_ranked() {
    let (mut sim, _) = start(Mode::Ranked, 3);
    sim.drain_observed();
    sim.act(Action::Restart {
        down: Duration::from_millis(50),
    });
    sim.run_for(L * 4);
    insta::assert_snapshot!(render(&sim.drain_observed()));
}

// Redis restart in Arrival mode, for comparison.
#[test]
fn redis_restart_arrival() {
    let (mut sim, _) = start(Mode::Arrival, 3);
    sim.drain_observed();
    sim.act(Action::Restart {
        down: Duration::from_millis(50),
    });
    sim.run_for(L * 4);
    insta::assert_snapshot!(render(&sim.drain_observed()));
}
