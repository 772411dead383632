//! The simulated world: a virtual clock, one [`SimStore`], a [`Network`], and
//! workers that are each a [`lease_core::Worker`] driven through exactly the
//! interface an adapter uses (`poll_transmit`, `poll_event`, `poll_timeout`,
//! `handle_*`). Everything random comes from one seeded generator, so a seed
//! replays a run exactly.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::fmt;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use lease_core::{Event, Identity, Lease, Options, OptionsError, RequestId, Worker};

use crate::net::{LocalClock, Network};
use crate::store::SimStore;

mod config;
mod history;

pub use config::{Action, Clocks, Mishap, SimConfig, WorkerId};
use history::fault_detail;
use lease_history::{LeaveHow, Record};

/// The server clock's reading at true time zero: 2023-11-14, in microseconds
/// since the Unix epoch (any realistic value would do).
const SERVER_EPOCH_US: i64 = 1_700_000_000_000_000;

enum Step {
    Act(Action),
    Wake(WorkerId, u64),
    Arrive(WorkerId, Request),
    Deliver(WorkerId, RequestId, Result<Vec<i64>, String>),
    GiveUp(WorkerId, RequestId),
}

#[derive(Clone)]
struct Request {
    id: RequestId,
    /// The leave script (rule 16) rather than a registration.
    leave: bool,
    keys: [String; lease_core::KEY_COUNT],
    args: Vec<String>,
    /// A duplicate delivery: executed, but its reply goes nowhere.
    echo: bool,
    /// The reply is lost.
    lose_reply: bool,
}

struct Scheduled {
    at: u64,
    seq: u64,
    step: Step,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scheduled {
    // Reversed: BinaryHeap is a max-heap and we want the earliest first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

enum Life {
    /// Reserved by `schedule_join`, not started yet.
    Waiting,
    Alive(Box<Worker>),
    Gone,
}

struct SimWorker {
    life: Life,
    clock: LocalClock,
    /// True time until which the process is frozen.
    stalled_until: u64,
    /// Generation of the newest timer, so superseded wake-ups are skipped.
    wake_gen: u64,
    /// The lease handed to the worker's loop, if any.
    held: Option<Lease>,
    /// A mishap waiting for the next registration.
    mishap: Option<Mishap>,
    /// Options of its own, instead of the simulation's (a worker deployed
    /// with other rules).
    options: Option<Options>,
}

/// An event a worker's loop received, with the true time it arrived.
#[derive(Clone, Debug, PartialEq)]
pub struct Observed {
    /// Which worker.
    pub worker: WorkerId,
    /// True (virtual) time since the start of the simulation.
    pub at: Duration,
    /// What the worker's state machine emitted.
    pub event: Event,
}

/// Counters of what happened in a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Registrations sent by workers.
    pub sent: u64,
    /// Scripts the server executed (duplicates included).
    pub executed: u64,
    /// Replies that were lost.
    pub lost_replies: u64,
    /// Requests that were lost.
    pub lost_requests: u64,
    /// Requests that failed at once.
    pub fast_errors: u64,
    /// Replies the core rejected as malformed or unexpected.
    pub rejected: u64,
    /// Leave scripts (rule 16) the server executed, duplicates included
    /// (also counted in `executed`).
    pub leaves: u64,
}

/// A deterministic simulation of one group.
///
/// ```
/// use std::time::Duration;
/// use lease_core::Options;
/// use lease_sim::{Sim, SimConfig};
///
/// let options = Options::new("demo", Duration::from_millis(100));
/// let mut sim = Sim::new(SimConfig::new(7, options)).unwrap();
/// let workers: Vec<_> = (0..3).map(|_| sim.join_now()).collect();
/// sim.run_for(Duration::from_secs(2));
/// // After a few intervals every worker holds a distinct pair of n = 3.
/// let mut pairs: Vec<_> = workers
///     .iter()
///     .map(|&w| sim.lease(w).and_then(|l| l.pair()).map(|p| (p.i(), p.n())))
///     .collect();
/// pairs.sort();
/// assert_eq!(pairs, [Some((0, 3)), Some((1, 3)), Some((2, 3))]);
/// assert!(sim.check().is_ok());
/// ```
pub struct Sim {
    options: Options,
    network: Network,
    clocks: Clocks,
    rng: ChaCha8Rng,
    now: u64,
    seq: u64,
    queue: BinaryHeap<Scheduled>,
    store: SimStore,
    /// Microseconds added to the server clock by clock steps.
    server_shift: i64,
    down_until: u64,
    paused_until: u64,
    workers: Vec<SimWorker>,
    history: Vec<Record>,
    observed: Vec<Observed>,
    stats: Stats,
    epoch: Instant,
}

impl Sim {
    /// A simulation with no workers yet. Fails if the options are invalid.
    pub fn new(config: SimConfig) -> Result<Self, OptionsError> {
        config.options.validate()?;
        let mut sim = Self {
            options: config.options,
            network: config.network,
            clocks: config.clocks,
            rng: ChaCha8Rng::seed_from_u64(config.seed),
            now: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            store: SimStore::new(),
            server_shift: 0,
            down_until: 0,
            paused_until: 0,
            workers: Vec::new(),
            history: Vec::new(),
            observed: Vec::new(),
            stats: Stats::default(),
            // Only differences of instants matter; the origin is arbitrary.
            epoch: Instant::now(),
        };
        sim.record_clock();
        Ok(sim)
    }

    /// The group's options.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// True (virtual) time since the start.
    pub fn now(&self) -> Duration {
        Duration::from_micros(self.now)
    }

    /// The history so far, in the order it was written.
    pub fn history(&self) -> &[Record] {
        &self.history
    }

    /// Counters of what happened.
    pub fn stats(&self) -> Stats {
        Stats {
            executed: self.store.executed(),
            ..self.stats
        }
    }

    /// The simulated server's key space.
    pub fn store(&self) -> &SimStore {
        &self.store
    }

    /// **Test only: breaks exclusivity.** Computes hole-filling positions
    /// wrongly from now on (the negative control of rule 15; see
    /// [`SimStore::sabotage_positions`]).
    pub fn sabotage_positions(&mut self, on: bool) {
        self.store.sabotage_positions(on);
    }

    /// **Test only: breaks exclusivity.** The group's rules record is no
    /// longer checked (the negative control of rule 12; see
    /// [`SimStore::sabotage_rules`]).
    pub fn sabotage_rules(&mut self, on: bool) {
        self.store.sabotage_rules(on);
    }

    /// **Test only: breaks exclusivity.** Inheritance takes positions whose
    /// keepers are still in the set of `k-1` (the negative control of rule
    /// 19; see [`SimStore::sabotage_inheritance`]).
    pub fn sabotage_inheritance(&mut self, on: bool) {
        self.store.sabotage_inheritance(on);
    }

    /// **Test only: breaks exclusivity.** Runs a wrong leave script from now
    /// on (the negative controls of rule 16), or the right one with `None`.
    pub fn sabotage_leave(&mut self, sabotage: Option<crate::store::LeaveSabotage>) {
        self.store.sabotage_leave(sabotage);
    }

    /// Events the workers' loops received since the last call.
    pub fn drain_observed(&mut self) -> Vec<Observed> {
        std::mem::take(&mut self.observed)
    }

    /// Every worker id handed out so far (started or not, alive or not).
    pub fn workers(&self) -> impl Iterator<Item = WorkerId> + '_ {
        (0..self.workers.len()).map(WorkerId)
    }

    /// Whether the worker is running.
    pub fn is_alive(&self, w: WorkerId) -> bool {
        matches!(self.workers.get(w.0).map(|s| &s.life), Some(Life::Alive(_)))
    }

    /// The lease worker `w` holds now, judged by its own state machine at its
    /// own local time (a stalled worker's lease runs out even while frozen).
    pub fn lease(&self, w: WorkerId) -> Option<Lease> {
        let sw = self.workers.get(w.0)?;
        let Life::Alive(core) = &sw.life else {
            return None;
        };
        core.lease_at(self.local_instant(sw.clock, self.now))
            .cloned()
    }

    /// Whether worker `w` holds task `id` now, whatever the handover mode
    /// (its own state machine's view at its own local time).
    pub fn holds_task(&self, w: WorkerId, id: u64) -> bool {
        let Some(sw) = self.workers.get(w.0) else {
            return false;
        };
        let Life::Alive(core) = &sw.life else {
            return false;
        };
        let now = self.local_instant(sw.clock, self.now);
        core.lease_at(now).is_some_and(|lease| {
            lease
                .parts()
                .iter()
                .any(|p| p.part().contains(lease.mapping(), id) && p.is_valid_at(now))
        })
    }

    /// The fencing token worker `w` writes task `id` with now, if it holds
    /// the task (its own state machine's view at its own local time): the
    /// virtual-time form of [`Lease::token_for`].
    pub fn token_for(&self, w: WorkerId, id: u64) -> Option<u64> {
        let sw = self.workers.get(w.0)?;
        let Life::Alive(core) = &sw.life else {
            return None;
        };
        let now = self.local_instant(sw.clock, self.now);
        let lease = core.lease_at(now)?;
        lease
            .parts()
            .iter()
            .filter(|p| p.part().contains(lease.mapping(), id) && p.is_valid_at(now))
            .map(|p| p.token())
            .max()
    }

    /// The identity of worker `w`, once it has started (until it ends).
    pub fn identity(&self, w: WorkerId) -> Option<Identity> {
        match &self.workers.get(w.0)?.life {
            Life::Alive(core) => Some(core.identity()),
            _ => None,
        }
    }

    /// Starts a new worker now.
    pub fn join_now(&mut self) -> WorkerId {
        let w = self.reserve();
        self.act(Action::Join(w));
        w
    }

    /// Reserves a worker id that starts at `at` (true time since the start).
    pub fn schedule_join(&mut self, at: Duration) -> WorkerId {
        let w = self.reserve();
        self.schedule(at, Action::Join(w));
        w
    }

    /// Like [`Sim::schedule_join`], for a worker with options of its own (a
    /// worker of the same group deployed with another interval or mode, say).
    /// Fails if they are invalid.
    pub fn schedule_join_with(
        &mut self,
        at: Duration,
        options: Options,
    ) -> Result<WorkerId, OptionsError> {
        options.validate()?;
        let w = self.reserve();
        self.workers[w.0].options = Some(options);
        self.schedule(at, Action::Join(w));
        Ok(w)
    }

    /// Schedules an action at `at` (true time since the start; an instant in
    /// the past means now).
    pub fn schedule(&mut self, at: Duration, action: Action) {
        let at = (at.as_micros() as u64).max(self.now);
        self.push(at, Step::Act(action));
    }

    /// Carries out an action now.
    pub fn act(&mut self, action: Action) {
        self.push(self.now, Step::Act(action));
        self.run_until(self.now());
    }

    /// Runs until true time `until` (everything scheduled at or before it
    /// happens).
    pub fn run_until(&mut self, until: Duration) {
        let until = until.as_micros() as u64;
        while let Some(next) = self.queue.peek() {
            if next.at > until {
                break;
            }
            let Some(s) = self.queue.pop() else { break };
            self.now = s.at;
            self.step(s.step);
        }
        self.now = self.now.max(until);
    }

    /// Runs for `d` more.
    pub fn run_for(&mut self, d: Duration) {
        self.run_until(self.now() + d);
    }

    /// Checks the history so far (docs/history-format.md): exclusivity, fencing,
    /// coverage, stand-downs, join-to-own.
    pub fn check(&self) -> lease_history::Summary {
        let mut records = self.history.clone();
        records.extend(self.closing_records());
        lease_history::check(&records, Some(self.now))
    }

    // ----- internals -----------------------------------------------------

    fn reserve(&mut self) -> WorkerId {
        let offset = self
            .rng
            .random_range(0..=self.clocks.max_offset.as_micros() as u64);
        let drift = if self.clocks.max_drift > 0.0 {
            self.rng
                .random_range(-self.clocks.max_drift..=self.clocks.max_drift)
        } else {
            0.0
        };
        self.workers.push(SimWorker {
            life: Life::Waiting,
            clock: LocalClock {
                offset_us: offset,
                drift,
            },
            stalled_until: 0,
            wake_gen: 0,
            held: None,
            mishap: None,
            options: None,
        });
        WorkerId(self.workers.len() - 1)
    }

    fn push(&mut self, at: u64, step: Step) {
        self.seq += 1;
        self.queue.push(Scheduled {
            at,
            seq: self.seq,
            step,
        });
    }

    fn local_instant(&self, clock: LocalClock, true_us: u64) -> Instant {
        self.epoch + Duration::from_micros(clock.local(true_us))
    }

    fn true_of(&self, clock: LocalClock, at: Instant) -> u64 {
        let local = at.saturating_duration_since(self.epoch).as_micros() as u64;
        clock.true_of(local)
    }

    fn server_now(&self) -> i64 {
        SERVER_EPOCH_US + self.now as i64 + self.server_shift
    }

    /// A `clock` line: what the server clock reads now. Written at the start
    /// and after every step, so the checker can hold every lease to the end
    /// of the interval after its last renewal.
    fn record_clock(&mut self) {
        let interval_us = self.options.interval.as_micros() as u64;
        let server_us = u64::try_from(self.server_now()).unwrap_or(0);
        self.history
            .push(Record::clock(interval_us, server_us, self.now));
    }

    fn step(&mut self, step: Step) {
        // A frozen process receives nothing until it resumes.
        if let Step::Wake(w, _) | Step::Deliver(w, ..) | Step::GiveUp(w, _) = &step {
            let until = self.workers[w.0].stalled_until;
            if until > self.now {
                self.push(until, step);
                return;
            }
        }
        match step {
            Step::Act(action) => self.on_action(action),
            Step::Wake(w, gen_) => {
                if self.workers[w.0].wake_gen == gen_ {
                    self.with_core(w, |core, now| core.handle_timeout(now));
                }
            }
            Step::Arrive(w, req) => self.on_arrive(w, req),
            Step::Deliver(w, id, result) => {
                let rejected = self.with_core(w, |core, now| match result {
                    Ok(values) => core.handle_reply(now, id, &values).is_err(),
                    Err(e) => {
                        core.handle_failure(now, id, &e);
                        false
                    }
                });
                if rejected == Some(true) {
                    self.stats.rejected += 1;
                }
            }
            Step::GiveUp(w, id) => {
                self.with_core(w, |core, now| core.handle_failure(now, id, &"gave up"));
            }
        }
    }

    /// Runs `f` on a live worker's core at its local time, then drives it.
    fn with_core<T>(
        &mut self,
        w: WorkerId,
        f: impl FnOnce(&mut Worker, Instant) -> T,
    ) -> Option<T> {
        let now = self.local_instant(self.workers[w.0].clock, self.now);
        let Life::Alive(core) = &mut self.workers[w.0].life else {
            return None;
        };
        let out = f(core, now);
        self.drive(w);
        Some(out)
    }

    /// What an adapter does after every input: send every transmit, hand
    /// every event to the loop, and sleep until the next timeout.
    fn drive(&mut self, w: WorkerId) {
        let clock = self.workers[w.0].clock;
        let mut sends = Vec::new();
        let mut events = Vec::new();
        let timeout;
        {
            let Life::Alive(core) = &mut self.workers[w.0].life else {
                return;
            };
            while let Some(t) = core.poll_transmit() {
                sends.push((
                    Request {
                        id: t.id,
                        leave: t.script.is_leave(),
                        keys: t.keys.map(str::to_owned),
                        args: t.args.to_vec(),
                        echo: false,
                        lose_reply: false,
                    },
                    t.expires_at,
                ));
            }
            while let Some(e) = core.poll_event() {
                events.push(e);
            }
            timeout = core.poll_timeout();
        }
        for (req, expires_at) in sends {
            self.send(w, req, expires_at);
        }
        for e in events {
            self.record(w, e);
        }
        if let Some(t) = timeout {
            let at = self.true_of(clock, t).max(self.now);
            let sw = &mut self.workers[w.0];
            sw.wake_gen += 1;
            let gen_ = sw.wake_gen;
            self.push(at, Step::Wake(w, gen_));
        }
    }

    fn send(&mut self, w: WorkerId, mut req: Request, expires_at: Instant) {
        self.stats.sent += 1;
        let give_up = self
            .true_of(self.workers[w.0].clock, expires_at)
            .max(self.now);
        self.push(give_up, Step::GiveUp(w, req.id));
        let net = self.network.clone();
        let mishap = self.workers[w.0].mishap.take();
        req.lose_reply = mishap == Some(Mishap::LoseReply)
            || self.rng.random_bool(net.lost_reply.clamp(0.0, 1.0));
        if mishap == Some(Mishap::FastError) || self.rng.random_bool(net.fast_error.clamp(0.0, 1.0))
        {
            self.stats.fast_errors += 1;
            let back = self.now + net.trip(&mut self.rng);
            self.push(
                back,
                Step::Deliver(w, req.id, Err("connection reset".into())),
            );
            return;
        }
        if mishap == Some(Mishap::LoseRequest)
            || self.rng.random_bool(net.lost_request.clamp(0.0, 1.0))
        {
            self.stats.lost_requests += 1;
            return;
        }
        let delay = match mishap {
            Some(Mishap::Delay(d)) => d.as_micros() as u64,
            _ => 0,
        };
        let arrive = self.now + net.trip(&mut self.rng) + delay;
        if mishap == Some(Mishap::Duplicate) || self.rng.random_bool(net.duplicate.clamp(0.0, 1.0))
        {
            let again = arrive + net.trip(&mut self.rng);
            let echo = Request {
                echo: true,
                ..req.clone()
            };
            self.push(again, Step::Arrive(w, echo));
        }
        self.push(arrive, Step::Arrive(w, req));
    }

    fn on_arrive(&mut self, w: WorkerId, req: Request) {
        if self.now < self.down_until {
            if !req.echo {
                let back = self.now + self.network.trip(&mut self.rng);
                self.push(
                    back,
                    Step::Deliver(w, req.id, Err("connection refused".into())),
                );
            }
            return;
        }
        if self.now < self.paused_until {
            self.push(self.paused_until, Step::Arrive(w, req));
            return;
        }
        let keys = req.keys.each_ref().map(String::as_str);
        // The script of the sending worker's own mode.
        let mode = self.workers[w.0]
            .options
            .as_ref()
            .map_or(self.options.mode(), |o| o.mode());
        let now = self.server_now();
        let result = if req.leave {
            self.stats.leaves += 1;
            self.store.execute_leave(now, &keys, &req.args)
        } else {
            self.store.execute(mode, now, &keys, &req.args)
        }
        .map_err(|e| e.to_string());
        if req.echo {
            return;
        }
        if req.lose_reply {
            self.stats.lost_replies += 1;
            return;
        }
        let back = self.now + self.network.trip(&mut self.rng);
        self.push(back, Step::Deliver(w, req.id, result));
    }

    fn on_action(&mut self, action: Action) {
        if let Some(kind) = action.fault_kind() {
            let worker = match &action {
                Action::Stall(w, _) | Action::Mishap(w, _) => Some(w.to_string()),
                _ => None,
            };
            self.history.push(Record::Fault {
                kind: kind.to_owned(),
                worker,
                detail: fault_detail(&action),
                at_us: self.now,
            });
        }
        match action {
            Action::Join(w) => {
                // From the run's seeded generator: unique per worker, and
                // the same on every replay of the seed.
                let token = Identity::from_bits_same_worker_if_reused(self.rng.random::<u128>());
                let now = self.local_instant(self.workers[w.0].clock, self.now);
                // Options were validated in `Sim::new` or `schedule_join_with`.
                let options = self.workers[w.0].options.as_ref().unwrap_or(&self.options);
                if let Ok(core) = Worker::new(options, token, now) {
                    self.workers[w.0].life = Life::Alive(Box::new(core));
                    self.history.push(Record::join(w.to_string(), self.now));
                    self.with_core(w, |core, now| core.handle_timeout(now));
                }
            }
            Action::Cancel(w) => {
                let first = self.with_core(w, |core, now| {
                    let first = !core.is_leaving();
                    core.handle_cancel(now);
                    first
                });
                if first == Some(true) {
                    self.history
                        .push(Record::leave(w.to_string(), LeaveHow::Cancel, self.now));
                }
            }
            Action::Crash(w) => {
                let sw = &mut self.workers[w.0];
                if matches!(sw.life, Life::Alive(_)) {
                    sw.life = Life::Gone;
                    let ending = self.ending(w, &self.workers[w.0]);
                    self.history.extend(ending);
                    let sw = &mut self.workers[w.0];
                    sw.held = None;
                    self.history
                        .push(Record::leave(w.to_string(), LeaveHow::Crash, self.now));
                }
            }
            Action::Stall(w, d) => {
                let sw = &mut self.workers[w.0];
                sw.stalled_until = sw.stalled_until.max(self.now + d.as_micros() as u64);
            }
            Action::Restart { down } => {
                self.store.flush();
                self.down_until = self.now + down.as_micros() as u64;
            }
            Action::Pause(d) => {
                self.paused_until = self.paused_until.max(self.now + d.as_micros() as u64);
            }
            Action::ClockStep(us) => {
                self.server_shift += us;
                self.record_clock();
            }
            Action::LoseWrites(p) => {
                let l = self.options.interval.as_millis() as i64;
                let k = (self.server_now() / 1000).div_euclid(l) as u64;
                let keys: Vec<String> = [k, k.saturating_sub(1)]
                    .iter()
                    .map(|&k| lease_core::interval_key(&self.options.prefix, &self.options.name, k))
                    .collect();
                let rng = &mut self.rng;
                self.store
                    .lose_writes(&keys, || rng.random_bool(p.clamp(0.0, 1.0)));
            }
            Action::SetNetwork(n) => self.network = n,
            Action::Mishap(w, m) => self.workers[w.0].mishap = Some(m),
        }
    }
}

impl fmt::Debug for Sim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sim")
            .field("now_us", &self.now)
            .field("workers", &self.workers.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}
