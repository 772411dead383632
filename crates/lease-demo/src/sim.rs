//! The demo on the deterministic simulator: no server needed.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use lease_core::{Assignment, Counting, Event, Handover, Mode, Options, OptionsError};
use lease_history::Record;
use lease_sim::{Action, Sim, SimConfig, WorkerId};

use crate::scenario::{SCRIPT, What, length};
use crate::view::View;

/// How the simulator run goes.
pub(crate) struct SimRun {
    pub(crate) seed: u64,
    pub(crate) name: String,
    pub(crate) interval: Duration,
    pub(crate) mode: Mode,
    /// Whole pairs (shown live, slot by slot) or task sets (the default
    /// handover, rule 13, under the consistent mapping).
    pub(crate) handover: Handover,
    /// Virtual seconds per wall-clock second, or `None` for as fast as
    /// possible.
    pub(crate) speed: Option<f64>,
}

/// Virtual time advanced per step of the loop, as a fraction of the interval.
const TICKS_PER_INTERVAL: u32 = 20;
/// The live view is redrawn at most this often.
const FRAME: Duration = Duration::from_millis(50);

/// Plays the script on a [`Sim`], showing it on `view`. Returns the closed
/// history and its end.
pub(crate) fn run(cfg: &SimRun, view: &mut View) -> Result<(Vec<Record>, u64), OptionsError> {
    let l = cfg.interval;
    let options = Options::new(cfg.name.clone(), l);
    let options = match cfg.mode {
        Mode::Ranked => options.with_handover(cfg.handover),
        Mode::Arrival => options.with_counting(Counting::Arrival),
    };
    let mut sim = Sim::new(SimConfig::new(cfg.seed, options))?;
    let tick = l / TICKS_PER_INTERVAL;
    let end = l.mul_f64(length());
    let wall0 = Instant::now();
    let mut last_frame: Option<Instant> = None;
    let mut steps = SCRIPT.iter().peekable();
    let mut seen = 0;
    loop {
        while let Some(step) = steps.next_if(|s| l.mul_f64(s.at) <= sim.now()) {
            let now = sim.now();
            if step.what != What::End {
                view.event(now, &step.what.describe());
            }
            match step.what {
                What::Start(count) => {
                    for _ in 0..count {
                        let w = sim.join_now();
                        view.started(w.0);
                    }
                }
                What::Join(_) => {
                    let w = sim.join_now();
                    view.started(w.0);
                }
                What::Crash(w) => {
                    sim.act(Action::Crash(WorkerId(w)));
                    view.crashed(w, now);
                }
                What::Stall(w, intervals) => {
                    let d = l.mul_f64(intervals);
                    sim.act(Action::Stall(WorkerId(w), d));
                    view.stalled(w, now + d);
                }
                What::RestartRedis(intervals) => sim.act(Action::Restart {
                    down: l.mul_f64(intervals),
                }),
                What::Cancel(w) => sim.act(Action::Cancel(WorkerId(w))),
                What::End => {}
            }
        }
        if sim.now() >= end {
            break;
        }
        view.set_next(steps.peek().map(|s| {
            format!(
                "at {:.1} s, {}",
                l.mul_f64(s.at).as_secs_f64(),
                s.what.describe()
            )
        }));
        sim.run_for(tick);
        seen = show(&mut sim, view, seen);
        for w in view.holders() {
            view.set_lapsed(w, sim.lease(WorkerId(w)).is_none());
        }
        view.set_now(sim.now());
        if let Some(speed) = cfg.speed {
            let due = wall0 + sim.now().div_f64(speed);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
        }
        if view.is_live() && last_frame.is_none_or(|t| t.elapsed() >= FRAME) {
            view.draw();
            last_frame = Some(Instant::now());
        }
    }
    view.set_next(None);
    view.set_now(sim.now());
    view.draw();
    let end_us = sim.now().as_micros() as u64;
    Ok((sim.closed_history(), end_us))
}

/// Shows what the workers' loops received since the last call; returns how
/// much of the history has been read.
fn show(sim: &mut Sim, view: &mut View, seen: usize) -> usize {
    // When each lease really ended, from the history the simulator wrote.
    let history = sim.history();
    let mut ended: HashMap<&str, u64> = HashMap::new();
    for r in &history[seen..] {
        if let Record::Release { worker, at_us, .. } = r {
            ended.insert(worker, *at_us);
        }
    }
    let ended: HashMap<String, u64> = ended
        .into_iter()
        .map(|(w, at)| (w.to_owned(), at))
        .collect();
    let seen = history.len();
    for o in sim.drain_observed() {
        let w = o.worker.0;
        match o.event {
            // Only whole pairs are shown live (the task-set companion run
            // is not).
            Event::Assignment(Assignment::Held(lease)) => {
                if let Some(p) = lease.pair() {
                    view.own(w, p.i(), p.n(), lease.token(), o.at);
                }
            }
            Event::Assignment(Assignment::Idle(idle)) => {
                if idle.ended.is_some() {
                    let ended_at = ended
                        .get(&o.worker.to_string())
                        .map_or(o.at, |us| Duration::from_micros(*us));
                    view.release(w, o.at, ended_at, Some(idle.reason.as_str()));
                }
            }
            Event::Stopped => {
                view.ended(w);
                view.event(o.at, &format!("w{w} has stood down and ended"));
            }
        }
    }
    seen
}
