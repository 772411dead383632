//! Rules 16 and 19, graceful leave: a cancelled worker takes its token out
//! of the count of the interval open when the request executes (and out of
//! its reservation in the next), registers no more, and serves the lease it
//! holds until its deadline minus the drain budget.
//!
//! The uniform cancel scenario rarely catches a wrong leave, so the
//! negative controls use targeted constructions: a newcomer Y
//! settles in the last position; in interval 15 the removal is made to
//! execute between Y's registration and that of a worker Z firing at least
//! 0.01 L after Y, so a closed set written by the removal is read in two
//! versions.

use std::time::Duration;

use lease_core::NegativeControl;
use lease_core::{Assignment, Event, Handover, Identity, Options};
use lease_history::{Checker, Record};
use lease_sim::{Action, LeaveSabotage, Mishap, Network, Sim, SimConfig, WorkerId};

const L: Duration = Duration::from_secs(1);
const G: f64 = 0.15;
/// The early schedule's spread at g = 0.15: `min(g, 0.1, (1-2g)/2) L`.
const SPREAD: f64 = 0.1;
/// The ideal network's one-way latency, in L.
const TRIP: f64 = 0.002;

fn options() -> Options {
    Options::new("g", L)
        .with_gap(G)
        .with_handover(Handover::WholePairs)
        .with_graceful_leave(true)
}

/// Where in the band a worker fires (rule 8), in L after `mL + G`.
fn offset(token: Identity) -> f64 {
    ((token.bits() >> 64) as u64) as f64 / 18_446_744_073_709_551_616.0 * SPREAD
}

fn at(l: f64) -> Duration {
    L.mul_f64(l)
}

/// How the removal is made to race the readers of a closed set.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Construction {
    /// The removal executes in interval 15, between Y's and Z's
    /// registrations: a removal from closed 14 splits it.
    Split,
    /// The cancel comes at 15.99 L and the removal is held in the network
    /// until interval 16, between Y's and Z's registrations there: a removal
    /// from the interval the client named, 15, splits closed 15.
    Late,
    /// The cancel comes at 15.5 L, after every registration of 15: the
    /// departed serves a lease from 15, whose deadline is 17 L.
    AfterRegistering,
}

/// What one construction gave: violations (exclusivity or fencing) that
/// started after the cancel, and whether a closed set was written.
struct Outcome {
    violations: u64,
    closed_writes: u64,
}

/// `n` settled workers (the departed D among them, with options of its own
/// when `departed` is given), a newcomer Y at 5 L, then the construction.
/// `None` when the seed cannot build it (no Z at least 0.01 L after Y).
fn construct(
    seed: u64,
    n: usize,
    how: Construction,
    sabotage: Option<LeaveSabotage>,
    departed: Option<Options>,
) -> Option<Outcome> {
    let mut cfg = SimConfig::new(seed, options());
    cfg.network = Network::ideal(L);
    let mut sim = Sim::new(cfg).expect("valid");
    sim.sabotage_leave(sabotage);
    let mut ws: Vec<WorkerId> = (0..n - 1)
        .map(|k| sim.schedule_join(at(0.9 * k as f64 / n as f64)))
        .collect();
    let d = sim
        .schedule_join_with(at(0.95), departed.unwrap_or_else(options))
        .expect("valid");
    ws.push(d);
    let y = sim.schedule_join(at(5.3));
    sim.run_until(at(12.0));
    let u = |w: WorkerId| offset(sim.identity(w).expect("alive"));
    let uy = u(y);
    let z = ws
        .iter()
        .copied()
        .filter(|&w| w != d && u(w) >= uy + 0.01)
        .min_by(|&a, &b| u(a).total_cmp(&u(b)))?;
    let mid = (uy + u(z)) / 2.0;
    match how {
        Construction::Split => {
            sim.schedule(at(15.0 + G + mid - TRIP), Action::Cancel(d));
        }
        Construction::Late => {
            let cancel = 15.99;
            let execute = 16.0 + G + mid;
            let hold = execute - cancel - TRIP;
            sim.schedule(
                at(cancel - 0.001),
                Action::Mishap(d, Mishap::Delay(at(hold))),
            );
            sim.schedule(at(cancel), Action::Cancel(d));
        }
        Construction::AfterRegistering => sim.schedule(at(15.5), Action::Cancel(d)),
    }
    let cancel_us = at(15.0).as_micros() as u64;
    sim.run_until(at(22.0));

    let checker = Checker::new(&sim.closed_history(), Some(sim.now().as_micros() as u64));
    let violations = checker
        .violations()
        .iter()
        .filter(|v| v.start_us >= cancel_us)
        .count() as u64
        + checker
            .fencing_violations()
            .iter()
            .filter(|f| f.later.start_us >= cancel_us)
            .count() as u64;
    Some(Outcome {
        violations,
        closed_writes: sim.store().closed_set_writes(),
    })
}

/// Runs built and runs violating, over seeds 1..=20 and n = 5 and 16.
fn tally(
    how: Construction,
    sabotage: Option<LeaveSabotage>,
    departed: impl Fn() -> Option<Options>,
) -> (usize, usize, u64) {
    let (mut built, mut violating, mut closed) = (0, 0, 0);
    for n in [5, 16] {
        for seed in 1..=20 {
            if let Some(o) = construct(seed, n, how, sabotage, departed()) {
                built += 1;
                violating += usize::from(o.violations > 0);
                closed += o.closed_writes;
            }
        }
    }
    (built, violating, closed)
}

/// The correct leave script in both constructions: no violation, and never
/// a write to a closed set, although the removal lands in the middle of the
/// readers of a closed set every time.
#[test]
fn a_correct_leave_breaks_nothing_in_the_targeted_constructions() {
    for how in [
        Construction::Split,
        Construction::Late,
        Construction::AfterRegistering,
    ] {
        let (built, violating, closed) = tally(how, None, || None);
        assert!(built >= 20, "{how:?}: only {built} runs built");
        eprintln!("{how:?}: correct leave, {violating}/{built} runs violate");
        assert_eq!(violating, 0, "{how:?}: {violating}/{built} runs violate");
        assert_eq!(closed, 0, "{how:?}");
    }
}

/// Negative control (`LeaveSabotage::AlsoClosed`): removing the token from the
/// closed set before the open one too. Readers of that closed set before and
/// after the removal disagree, and the checker catches it.
#[test]
fn a_leave_that_also_writes_the_closed_set_is_caught() {
    let (built, violating, closed) =
        tally(Construction::Split, Some(LeaveSabotage::AlsoClosed), || {
            None
        });
    eprintln!("AlsoClosed, split: caught in {violating}/{built}");
    assert!(closed > 0);
    assert!(violating * 2 >= built, "caught in only {violating}/{built}");
}

/// `LeaveSabotage::InsteadClosed`: removing from the closed set only. It
/// writes a closed set (14) in every run, but rule 19 takes the bite out
/// of it here: the departed's registration in 14 reserved its place in 15,
/// which this leave leaves alone, so closed 15 still counts it, every
/// worker's pair implied by 15 has the old size, and the split of 14 is
/// never certified by two agreeing intervals (the later readers of 14 see
/// `(z, n-1)` there and `(z, n)` in 15). With revision 2 (no reservation)
/// closed 15 lacked the departed and the checker caught 15 runs of 27. A
/// leave that also writes the closed set (above) is still caught.
#[test]
fn a_leave_that_writes_only_the_closed_set_is_masked_by_the_reservation() {
    let (built, violating, closed) = tally(
        Construction::Split,
        Some(LeaveSabotage::InsteadClosed),
        || None,
    );
    eprintln!("InsteadClosed, split: caught in {violating}/{built}");
    assert!(closed > 0, "the sabotaged leave writes a closed set");
    assert_eq!(violating, 0, "caught in {violating}/{built}");
}

/// Negative control (`LeaveSabotage::ClientNamed`): removing from the interval the
/// client named, which is closed once the request executes late.
#[test]
fn a_leave_from_the_interval_the_client_names_is_caught() {
    let (built, violating, closed) =
        tally(Construction::Late, Some(LeaveSabotage::ClientNamed), || {
            None
        });
    eprintln!("ClientNamed, late: caught in {violating}/{built}");
    assert!(closed > 0);
    assert!(violating * 2 >= built, "caught in only {violating}/{built}");
}

/// Negative control (`NegativeControl::OverdrainPastDeadline`): the departed keeps its lease
/// (from 15, deadline 17 L) half an interval past its deadline; the
/// survivors take over at their regrant from 17 and the checker catches the
/// overlap.
#[test]
fn a_leave_that_drains_past_the_deadline_is_caught() {
    let overdrain = || {
        let mut o = options();
        o.negative_control = Some(NegativeControl::OverdrainPastDeadline);
        Some(o)
    };
    let (built, violating, _) = tally(Construction::AfterRegistering, None, overdrain);
    eprintln!("OverdrainPastDeadline, after registering: caught in {violating}/{built}");
    assert!(violating * 2 >= built, "caught in only {violating}/{built}");
}

/// The departed's tasks: when a settled worker of 5 leaves gracefully at
/// 15.5 L (after registering in 15), it serves its lease until its deadline,
/// 17 L, minus G, and the survivors take over on n = 4 with their replies
/// from 17: the task set is uncovered only from 16.85 L to about 17.2 L.
/// Without the removal (plain cancel) they take over an interval later,
/// from 18. Fails without rule 16.
#[test]
fn the_survivors_take_over_one_interval_sooner_and_the_gap_is_short() {
    for graceful in [true, false] {
        let mut cfg = SimConfig::new(3, options().with_graceful_leave(graceful));
        cfg.network = Network::ideal(L);
        let mut sim = Sim::new(cfg).expect("valid");
        let ws: Vec<WorkerId> = (0..5)
            .map(|k| sim.schedule_join(at(0.15 * k as f64)))
            .collect();
        sim.run_until(at(15.5));
        let d = ws[2];
        sim.act(Action::Cancel(d));
        sim.run_until(at(21.0));
        let observed = sim.drain_observed();
        let name = d.to_string();
        let released = sim.history().iter().rev().find_map(|r| match r {
            Record::Release { worker, at_us, .. } if *worker == name => Some(*at_us),
            _ => None,
        });
        let takeover = observed
            .iter()
            .filter(|o| o.worker != d && o.at > at(15.5))
            .filter_map(|o| match &o.event {
                Event::Assignment(Assignment::Held(l)) if l.pair().is_some_and(|p| p.n() == 4) => {
                    Some(o.at)
                }
                _ => None,
            })
            .max()
            .expect("the survivors regrant on n = 4");
        let released = Duration::from_micros(released.expect("released"));
        if graceful {
            assert!(released > at(16.8) && released < at(16.86), "{released:?}");
            assert!(takeover < at(17.3), "{takeover:?}");
            assert!(
                observed
                    .iter()
                    .any(|o| o.worker == d && o.event == Event::Stopped)
            );
        } else {
            assert!(released <= at(15.5), "{released:?}");
            assert!(takeover > at(18.0), "{takeover:?}");
        }
        assert!(sim.check().is_ok(), "{}", sim.check());
    }
}

/// Rule 19's leave, its negative control (`LeaveSabotage::OpenAndNext`):
/// a worker of 5 cancelled at 15.5 L, after its registration in 15, under
/// the default task sets. The correct leave turns its entry in 15 into a
/// left entry, so nobody inherits its position of 14 while its lease from
/// 15 lives (to 17 L minus the drain budget). The sabotaged one takes it out
/// of 15 altogether: the worker that fills its hole inherits that position
/// with its reply from 16, beside the departed's lease, and the per-task
/// checker catches it.
#[test]
fn a_leave_that_takes_a_registered_member_out_of_the_open_set_is_caught_under_task_sets() {
    let (mut clean, mut caught) = (0, 0);
    for seed in 1..=20u64 {
        for sabotage in [None, Some(LeaveSabotage::OpenAndNext)] {
            let mut cfg = SimConfig::new(seed, Options::new("g", L).with_gap(G));
            cfg.network = Network::ideal(L);
            let mut sim = Sim::new(cfg).expect("valid");
            sim.sabotage_leave(sabotage);
            let ws: Vec<WorkerId> = (0..5)
                .map(|k| sim.schedule_join(at(0.15 * k as f64)))
                .collect();
            sim.run_until(at(15.5));
            sim.act(Action::Cancel(ws[seed as usize % 5]));
            sim.run_until(at(21.0));
            let s = sim.check();
            let tasks = s.tasks.as_ref().expect("a task-set history");
            let violated = !s.is_ok() || !tasks.is_ok();
            match sabotage {
                None => {
                    assert!(!violated, "seed {seed}: {s}");
                    clean += 1;
                }
                Some(_) => caught += usize::from(violated),
            }
        }
    }
    eprintln!("OpenAndNext under task sets: caught in {caught}/{clean}");
    assert!(caught * 2 >= clean, "caught in only {caught}/{clean}");
}
