//! Randomized runs: a scenario of joins, leaves, crashes, stalls and faults
//! drawn from a seed, played on a [`Sim`], then checked. This is what the
//! command-line runner and the property tests execute.

use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use lease_core::{Counting, Handover, Mode, Options, OptionsError};

use crate::net::Network;
use crate::world::{Action, Observed, Sim, SimConfig, Stats, WorkerId};
use lease_history::{Record, Summary};

/// Which faults a randomized run injects.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// Every fault under which exclusivity is claimed for the run's mode:
    /// latency up to and beyond the gap, spikes, fast errors, lost requests
    /// and replies, duplicated requests, pauses longer than the gap, forward
    /// server-clock steps smaller than the gap (up to 0.95 `G`, at most one
    /// in any three intervals, so that the steps during one lease sum to less
    /// than `G`: rule 17 of docs/protocol.md), and (`Ranked` only) server
    /// restarts.
    pub within_guarantee: bool,
    /// Server restarts in `Arrival` mode, which are outside its guarantee: a
    /// restart inside an interval lets a registrant from before it and one
    /// from after it receive the same `INCR` index (docs/protocol.md,
    /// "Limits"). In `Ranked` mode restarts are part of `within_guarantee`.
    pub arrival_restarts: bool,
    /// Outside the guarantee: forward server-clock steps larger than the gap,
    /// and backward steps.
    pub clock_jumps: bool,
    /// Outside the guarantee: failovers that lose acknowledged writes in two
    /// consecutive intervals.
    pub lost_writes: bool,
}

/// Parameters of one randomized run.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// Seed: the same seed replays the same run.
    pub seed: u64,
    /// Workers at the start (churn keeps the population between 1 and twice this).
    pub workers: usize,
    /// Length of the run in intervals.
    pub intervals: u32,
    /// Counting mode.
    pub mode: Mode,
    /// Interval length (virtual time).
    pub interval: Duration,
    /// Gap fraction.
    pub gap: f64,
    /// Faults to inject.
    pub faults: Faults,
    /// Whether workers join, leave, crash and stall during the run.
    pub churn: bool,
    /// The network at the start (with faults, regimes change every 10
    /// intervals).
    pub network: Network,
    /// The Ranked handover (rule 13; ignored under Arrival): task sets
    /// under the consistent mapping, or whole pairs under modulo.
    pub handover: Handover,
    /// The drain budget (rule 14, [`lease_core::Ranked::drain_budget`]):
    /// `None` is the default, the gap `G`.
    pub drain_budget: Option<Duration>,
    /// The schedule's spread in `L` (rule 8, [`lease_core::Ranked::spread`]):
    /// `None` is the early default. Valid in `[0, Options::max_spread]`.
    pub spread: Option<f64>,
    /// Graceful leave on cancellation (rule 16; the default, Ranked only).
    pub graceful_leave: bool,
    /// Member names (rule 18, Ranked only): every worker registers under a
    /// name of its own (`m0`, `m1`, ...), and churn adds member restarts: a
    /// named worker crashes or is cancelled and a new process with the same
    /// name starts at once, a little later, or before the old one is gone.
    pub members: bool,
    /// Applied to every worker's options after the fields above (a test-only
    /// negative control, say); identity by default. A plain function, so it
    /// cannot carry values: options with a value have fields of their own.
    pub customize: fn(Options) -> Options,
}

impl RunConfig {
    /// A run with churn and no faults, interval 1 s, the library's default
    /// options (Ranked, task sets, graceful leave, gap 0.15).
    pub fn new(seed: u64, workers: usize, intervals: u32) -> Self {
        Self {
            seed,
            workers,
            intervals,
            mode: Mode::Ranked,
            interval: Duration::from_secs(1),
            gap: lease_core::DEFAULT_GAP,
            faults: Faults::default(),
            churn: true,
            network: Network::default(),
            handover: Handover::TaskSets,
            drain_budget: None,
            spread: None,
            graceful_leave: true,
            members: false,
            customize: std::convert::identity,
        }
    }
}

/// What a randomized run produced.
#[derive(Debug)]
pub struct RunReport {
    /// The checker's verdict.
    pub summary: Summary,
    /// Counters of the run.
    pub stats: Stats,
    /// The history, as written.
    pub history: Vec<Record>,
    /// Every event the workers' loops received, in order.
    pub observed: Vec<Observed>,
}

/// The options of every worker of a run (before member names).
fn run_options(cfg: &RunConfig) -> Options {
    let options = Options::new("sim", cfg.interval).with_gap(cfg.gap);
    let mut options = match cfg.mode {
        Mode::Arrival => options.with_counting(Counting::Arrival),
        Mode::Ranked => options
            .with_handover(cfg.handover)
            .with_graceful_leave(cfg.graceful_leave),
    };
    if cfg.mode == Mode::Ranked {
        if let Some(b) = cfg.drain_budget {
            options = options.with_drain_budget(b);
        }
        if let Some(s) = cfg.spread {
            options = options.with_spread(s);
        }
    }
    (cfg.customize)(options)
}

/// Plays one randomized run.
pub fn random_run(cfg: &RunConfig) -> Result<RunReport, OptionsError> {
    let options = run_options(cfg);
    let mut sim_cfg = SimConfig::new(cfg.seed, options.clone());
    sim_cfg.network = cfg.network.clone();
    let mut sim = Sim::new(sim_cfg)?;
    // The scenario has its own generator, so adding a fault kind does not
    // perturb the network's draws and vice versa.
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x5ce_4a21_0000_0000);
    let l = cfg.interval;
    let g = l.mul_f64(cfg.gap);
    let at = |m: u32, f: f64| l * m + l.mul_f64(f);

    let mut alive: Vec<WorkerId> = Vec::new();
    let mut members = Members::new(cfg.members && cfg.mode == Mode::Ranked, options);
    for _ in 0..cfg.workers.max(1) {
        let t = l.mul_f64(rng.random::<f64>());
        alive.push(members.join(&mut sim, t, None)?);
    }
    let max = cfg.workers.max(1) * 2;
    let mut last_step: Option<u32> = None;
    for m in 2..cfg.intervals {
        if cfg.churn {
            if alive.len() < max && rng.random_bool(0.06) {
                alive.push(members.join(&mut sim, at(m, rng.random()), None)?);
            }
            if members.on && rng.random_bool(0.04) {
                let x = rng.random_range(0..alive.len());
                let when = at(m, rng.random());
                alive[x] = members.restart(&mut sim, &mut rng, alive[x], when)?;
            }
            if alive.len() > 1 && rng.random_bool(0.04) {
                let w = alive.swap_remove(rng.random_range(0..alive.len()));
                sim.schedule(at(m, rng.random()), Action::Cancel(w));
            }
            if alive.len() > 1 && rng.random_bool(0.04) {
                let w = alive.swap_remove(rng.random_range(0..alive.len()));
                sim.schedule(at(m, rng.random()), Action::Crash(w));
            }
            if rng.random_bool(0.05) {
                let w = alive[rng.random_range(0..alive.len())];
                let len = [0.5, 1.0, 3.0, 10.0][rng.random_range(0..4)];
                sim.schedule(at(m, rng.random()), Action::Stall(w, l.mul_f64(len)));
            }
        }
        if cfg.faults.within_guarantee {
            if m % 10 == 2 {
                let net = random_network(&mut rng, l, g);
                sim.schedule(at(m, 0.0), Action::SetNetwork(net));
            }
            // Draw even when unused, so both modes see the same scenario.
            let restart = rng.random_bool(0.02);
            let down = l.mul_f64(rng.random_range(0.0..0.3));
            let restarts = cfg.mode == Mode::Ranked || cfg.faults.arrival_restarts;
            if restart && restarts {
                sim.schedule(at(m, rng.random()), Action::Restart { down });
            }
            if rng.random_bool(0.02) {
                let d = g.mul_f64(rng.random_range(1.0..3.0));
                sim.schedule(at(m, rng.random()), Action::Pause(d));
            }
            // Rule 17 absorbs forward steps that sum to less than `G` over
            // the life of a lease (at most two intervals): steps up to 0.95 G,
            // at most one in any three intervals.
            let step = rng.random_bool(0.01);
            let size = (g.as_micros() as f64 * rng.random_range(0.0..0.95)) as i64;
            let when = rng.random();
            if step && last_step.is_none_or(|last| m >= last + 3) {
                sim.schedule(at(m, when), Action::ClockStep(size));
                last_step = Some(m);
            }
        }
        if cfg.faults.clock_jumps && rng.random_bool(0.02) {
            let gu = g.as_micros() as f64;
            let step = if rng.random_bool(0.5) {
                (gu * rng.random_range(1.5..4.0)) as i64
            } else {
                -((gu * rng.random_range(0.5..4.0)) as i64)
            };
            sim.schedule(at(m, rng.random()), Action::ClockStep(step));
        }
        if cfg.faults.lost_writes && rng.random_bool(0.03) {
            sim.schedule(at(m, rng.random()), Action::LoseWrites(0.5));
        }
    }
    sim.run_until(l * cfg.intervals);
    Ok(report(sim))
}

/// The member names of a run ([`RunConfig::members`]).
struct Members {
    on: bool,
    options: Options,
    /// Each worker's member name, by worker id.
    names: std::collections::BTreeMap<WorkerId, String>,
    next: usize,
}

impl Members {
    fn new(on: bool, options: Options) -> Self {
        Self {
            on,
            options,
            names: Default::default(),
            next: 0,
        }
    }

    /// Schedules a worker's start at `at`: under member names, with `name`
    /// or a new one.
    fn join(
        &mut self,
        sim: &mut Sim,
        at: Duration,
        name: Option<String>,
    ) -> Result<WorkerId, OptionsError> {
        if !self.on {
            return Ok(sim.schedule_join(at));
        }
        let name = name.unwrap_or_else(|| {
            self.next += 1;
            format!("m{}", self.next - 1)
        });
        let options = self
            .options
            .clone()
            .with_member(&name)
            .map_err(OptionsError::Member)?;
        let w = sim.schedule_join_with(at, options)?;
        self.names.insert(w, name);
        Ok(w)
    }

    /// A member restart at `at`: `old` crashes or is cancelled, and a new
    /// process with its name starts at once, a little later, or up to an
    /// interval before the old one is gone (two live processes with one
    /// name). Returns the new worker.
    fn restart(
        &mut self,
        sim: &mut Sim,
        rng: &mut ChaCha8Rng,
        old: WorkerId,
        at: Duration,
    ) -> Result<WorkerId, OptionsError> {
        let l = self.options.interval;
        let end = if rng.random_bool(0.5) {
            Action::Crash(old)
        } else {
            Action::Cancel(old)
        };
        let shift = [-1.0, -0.3, 0.0, 0.0, 0.1, 0.6, 1.5][rng.random_range(0..7)];
        let start = if shift < 0.0 {
            at.saturating_sub(l.mul_f64(-shift))
        } else {
            at + l.mul_f64(shift)
        };
        sim.schedule(at, end);
        let name = self.names.get(&old).cloned();
        self.join(sim, start, name)
    }
}

fn report(mut sim: Sim) -> RunReport {
    RunReport {
        summary: sim.check(),
        stats: sim.stats(),
        history: sim.closed_history(),
        observed: sim.drain_observed(),
    }
}

/// One of the network regimes the guarantee covers, drawn at random.
fn random_network(rng: &mut ChaCha8Rng, l: Duration, g: Duration) -> Network {
    match rng.random_range(0..6) {
        0 => Network::ideal(l),
        // Round trip around half the gap.
        1 => Network::round_trip(g / 2),
        // Round trip beyond the gap.
        2 => Network::round_trip(g.mul_f64(1.5)),
        3 => Network::lossy(l),
        4 => Network {
            spike_probability: 0.05,
            spike_max: l.mul_f64(0.6),
            ..Network::ideal(l)
        },
        _ => Network {
            duplicate: 0.05,
            lost_reply: 0.02,
            jitter: g / 2,
            ..Network::ideal(l)
        },
    }
}
