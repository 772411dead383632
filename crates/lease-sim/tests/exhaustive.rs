//! Exhaustive, bounded check of the exclusivity invariant (DESIGN section 3,
//! "Why it is exclusive"): for 2 and 3 workers, over a bounded window of
//! intervals, every combination of network outcomes and stalls is run, and
//! none lets two workers hold conflicting pairs at any instant.
//!
//! # The model checker
//!
//! A small stateless model checker of our own. It drives the real
//! [`lease_core::Worker`] state machines and the real [`SimStore`] (both
//! scripts' semantics) through a fully deterministic driver: no seed, no
//! randomness, one event queue ordered by `(time, sequence)`. The worker is
//! not `Clone`, so the search is a depth-first walk over *choice sequences*
//! with replay from scratch: a run takes its choices from a prefix, then the
//! first option at every new choice point; the next run increments the
//! deepest choice that has options left. Every leaf is one complete run.
//!
//! # The environment
//!
//! - Interval `L` = 1000 ms, gap 0.15 (and 0.05). The server clock is true
//!   time plus an epoch aligned to `L`; each worker's local clock is true time
//!   (offsets and drift are covered by the randomized simulations).
//! - A **choice point** is the first registration a worker sends in an
//!   interval of the scenario's window. Its outcome is one of [`Fate`]:
//!   executed with a prompt reply (1 ms round trip), executed with a late
//!   reply (just past the gap, or 0.9 L), executed with the reply lost, lost
//!   before execution, or executed at once while the worker process freezes
//!   for one interval right after the send (every input deferred until it
//!   wakes). The outcome is the worker's link for the rest of that interval:
//!   its retries in the same interval share it (so one choice can keep a
//!   worker out of an interval, which `Ranked` retries would otherwise always
//!   undo). Outside the window every registration is prompt.
//! - Optionally, the store loses every key (a restart) at one interval
//!   boundary.
//!
//! The number of choice points is the same on every path (each worker sends
//! in every interval, whatever happened before), so a scenario has exactly
//! `fates ^ (workers x window intervals)` leaves; each test asserts that
//! count, so a change that silently shrinks the search fails.
//!
//! # What is checked at every leaf
//!
//! 1. The history (an `own` when a loop receives a pair, a `release` at the
//!    instant the lease really ended: the `Released` event's `at`, or at the
//!    end the earlier of the lease deadline and the end of the run) passes
//!    [`checker::check`]: no exclusivity violation, no fencing violation, no
//!    anomaly.
//! 2. Independently, after every instant at which something happened, the
//!    pairs `lease_at(now)` of all workers have one `n` and distinct `i`
//!    (every lease starts at an event, so an overlap shows at one).
//!
//! # The negative control
//!
//! `holder_measuring_from_arrival_is_caught_by_the_search` feeds the checker
//! the spans of a deliberately broken holder, which anchors every grant and
//! renewal at the reply's *arrival* instead of its send (rule 6 forbids it),
//! and asserts that the same search finds violating leaves: the checker and
//! the search are able to see the overlap the real core avoids.
//!
//! Run with `--nocapture` to see the leaf counts and the time per scenario.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::time::{Duration, Instant};

use lease_core::{Assignment, Event, IdleReason, Lease, Mode, Options, RequestId, Token, Worker};
use lease_history::Record;
use lease_history::{self as checker, Summary};
use lease_sim::SimStore;

/// Interval length `L`, in microseconds.
const L: u64 = 1_000_000;
/// The server clock at true time 0 (a multiple of `L`, as in the simulator).
const SERVER_EPOCH_US: i64 = 1_700_000_000_000_000;
/// One way of a prompt round trip.
const HALF_TRIP: u64 = 500;
/// How long a stalled worker stays frozen.
const STALL: u64 = L;

/// The outcome of a registration (and of the worker's retries in the same
/// interval).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    /// Executed on arrival at the store, 0.5 ms after the send (as every
    /// executed outcome is: "at once" below); the reply arrives 1 ms after
    /// the send.
    Prompt,
    /// Executed at once; the reply arrives just past the gap, `G + 1 ms`
    /// after the send.
    LateGap,
    /// Executed at once; the reply arrives `0.9 L` after the send.
    LateLong,
    /// Executed; the reply is lost.
    ReplyLost,
    /// Lost before execution.
    RequestLost,
    /// Executed at once with a prompt reply, but the worker process freezes
    /// for `L` right after the send: its reply, timers and give-ups wait
    /// until it wakes.
    Stall,
}

impl fmt::Display for Fate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Fate::Prompt => "prompt",
            Fate::LateGap => "late-gap",
            Fate::LateLong => "late-0.9L",
            Fate::ReplyLost => "reply-lost",
            Fate::RequestLost => "request-lost",
            Fate::Stall => "stall",
        })
    }
}

/// Every outcome.
const ALL_FATES: [Fate; 6] = [
    Fate::Prompt,
    Fate::LateGap,
    Fate::LateLong,
    Fate::ReplyLost,
    Fate::RequestLost,
    Fate::Stall,
];

/// The outcomes that change who is counted where and how long a reply takes,
/// without the short delay (for the larger trees).
const CORE_FATES: [Fate; 5] = [
    Fate::Prompt,
    Fate::LateLong,
    Fate::ReplyLost,
    Fate::RequestLost,
    Fate::Stall,
];

/// One bounded search.
#[derive(Clone, Debug)]
struct Scenario {
    mode: Mode,
    gap: f64,
    /// True join time of each worker, in microseconds.
    joins: Vec<u64>,
    /// Intervals (true time / `L`) whose first registration per worker is a
    /// choice point.
    window: Range<u64>,
    fates: &'static [Fate],
    /// The store loses every key at this true instant.
    restart_at: Option<u64>,
    /// The run ends here (true microseconds).
    horizon: u64,
}

impl Scenario {
    fn workers(&self) -> usize {
        self.joins.len()
    }

    /// The number of leaves the search must visit: every worker meets one
    /// choice point in every interval of the window.
    fn expected_leaves(&self) -> u64 {
        let points = self.workers() as u32 * (self.window.end - self.window.start) as u32;
        (self.fates.len() as u64).pow(points)
    }

    fn g(&self) -> u64 {
        (self.gap * L as f64).round() as u64
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} g={} workers={} window=[{}L,{}L) fates={} restart={} horizon={}L",
            self.mode,
            self.gap,
            self.workers(),
            self.window.start,
            self.window.end,
            self.fates.len(),
            self.restart_at
                .map_or_else(|| "-".to_owned(), |t| format!("{}L", t as f64 / L as f64)),
            self.horizon as f64 / L as f64,
        )
    }
}

/// A choice made at a choice point: worker, interval, outcome.
#[derive(Clone, Copy, Debug)]
struct Choice {
    worker: usize,
    interval: u64,
    fate: Fate,
}

fn render(choices: &[Choice]) -> String {
    choices
        .iter()
        .map(|c| format!("w{}@{}L:{}", c.worker, c.interval, c.fate))
        .collect::<Vec<_>>()
        .join(" ")
}

/// What one leaf (one complete run) produced.
struct Leaf {
    /// `(chosen option, number of options)` at each choice point, in order.
    trace: Vec<(usize, usize)>,
    choices: Vec<Choice>,
    /// The checker's verdict on the real history.
    summary: Summary,
    /// The checker's verdict on the broken holder's spans (negative control).
    broken: Summary,
    /// The first instant at which the `lease_at` pairs conflicted, if any.
    pointwise: Option<String>,
    /// Replies the core rejected as malformed (the store is faithful: none).
    rejected: u64,
    /// Grants seen (so a scenario that never grants anything is noticed).
    owns: u64,
    /// Instants at which the pointwise check compared two or more leases.
    shared: u64,
}

/// Something scheduled in the model.
enum Step {
    Join(usize),
    Wake(usize, u64),
    /// The request reaches the store; the reply (if any) is due at `reply_at`.
    Arrive {
        worker: usize,
        id: RequestId,
        keys: [String; 3],
        args: Vec<String>,
        reply_at: Option<u64>,
    },
    Deliver(usize, RequestId, Vec<i64>),
    GiveUp(usize, RequestId),
    Restart,
}

/// The broken holder of the negative control: what it believes it holds.
#[derive(Clone, Copy, Debug)]
struct BrokenHold {
    i: u32,
    n: u32,
    /// True instant until which it believes the lease valid.
    until: u64,
}

struct Proc {
    core: Option<Worker>,
    wake_gen: u64,
    stalled_until: u64,
    /// The lease the loop holds (a clone shares the core's deadline).
    held: Option<Lease>,
    /// The outcome chosen for this interval: `(interval, fate)`.
    link: Option<(u64, Fate)>,
    /// True send time of each request.
    sent: Vec<(RequestId, u64)>,
    broken: Option<BrokenHold>,
}

/// One replay: the deterministic driver.
struct Model<'a> {
    sc: &'a Scenario,
    options: Options,
    base: Instant,
    now: u64,
    seq: u64,
    queue: BTreeMap<(u64, u64), Step>,
    store: SimStore,
    procs: Vec<Proc>,
    prefix: &'a [usize],
    trace: Vec<(usize, usize)>,
    choices: Vec<Choice>,
    history: Vec<Record>,
    broken: Vec<Record>,
    pointwise: Option<String>,
    shared: u64,
    rejected: u64,
    /// Set by `record` when a grant is seen during the current input.
    granted: bool,
}

impl<'a> Model<'a> {
    fn new(sc: &'a Scenario, prefix: &'a [usize], base: Instant) -> Self {
        let options = Options::new("g", Duration::from_micros(L))
            .with_gap(sc.gap)
            .with_mode(sc.mode);
        let mut m = Self {
            sc,
            options,
            base,
            now: 0,
            seq: 0,
            queue: BTreeMap::new(),
            store: SimStore::new(),
            procs: Vec::new(),
            prefix,
            trace: Vec::new(),
            choices: Vec::new(),
            history: Vec::new(),
            broken: Vec::new(),
            pointwise: None,
            shared: 0,
            rejected: 0,
            granted: false,
        };
        for (w, &at) in sc.joins.iter().enumerate() {
            m.procs.push(Proc {
                core: None,
                wake_gen: 0,
                stalled_until: 0,
                held: None,
                link: None,
                sent: Vec::new(),
                broken: None,
            });
            m.push(at, Step::Join(w));
        }
        if let Some(at) = sc.restart_at {
            m.push(at, Step::Restart);
        }
        m
    }

    fn push(&mut self, at: u64, step: Step) {
        self.seq += 1;
        self.queue.insert((at, self.seq), step);
    }

    fn local(&self, t: u64) -> Instant {
        self.base + Duration::from_micros(t)
    }

    fn true_of(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.base).as_micros() as u64
    }

    fn name(w: usize) -> String {
        format!("w{w}")
    }

    /// Runs to the horizon and returns the leaf.
    fn run(mut self) -> Leaf {
        while let Some((&(at, _), _)) = self.queue.first_key_value() {
            if at > self.sc.horizon {
                break;
            }
            if at > self.now {
                self.check_pointwise();
            }
            let Some(((at, _), step)) = self.queue.pop_first() else {
                break;
            };
            self.now = at;
            self.step(step);
        }
        self.check_pointwise();
        self.now = self.sc.horizon;
        self.finish()
    }

    /// Rule of the lease: at `now`, the pairs in force have one `n` and
    /// distinct `i`.
    fn check_pointwise(&mut self) {
        if self.pointwise.is_some() {
            return;
        }
        let now = self.local(self.now);
        let held: Vec<(usize, u32, u32)> = self
            .procs
            .iter()
            .enumerate()
            .filter_map(|(w, p)| {
                let l = p.core.as_ref()?.lease_at(now)?;
                Some((w, l.i(), l.n()))
            })
            .collect();
        if held.len() >= 2 {
            self.shared += 1;
        }
        for (a, &(wa, ia, na)) in held.iter().enumerate() {
            for &(wb, ib, nb) in &held[a + 1..] {
                if na != nb || ia == ib {
                    self.pointwise = Some(format!(
                        "at {}us: w{wa} holds {ia}/{na} while w{wb} holds {ib}/{nb}",
                        self.now
                    ));
                    return;
                }
            }
        }
    }

    fn step(&mut self, step: Step) {
        // A frozen process receives nothing until it wakes.
        if let Step::Wake(w, _) | Step::Deliver(w, ..) | Step::GiveUp(w, _) = &step {
            let until = self.procs[*w].stalled_until;
            if until > self.now {
                self.push(until, step);
                return;
            }
        }
        match step {
            Step::Join(w) => {
                let bits = spread_token(w, self.sc.workers());
                let core = Worker::new(
                    &self.options,
                    Token::from_bits_same_worker_if_reused(bits),
                    self.local(self.now),
                )
                .expect("valid options");
                self.procs[w].core = Some(core);
                self.history.push(Record::join(Self::name(w), self.now));
                self.input(w, None, |core, now| core.handle_timeout(now));
            }
            Step::Wake(w, gen_) => {
                if self.procs[w].wake_gen == gen_ {
                    self.input(w, None, |core, now| core.handle_timeout(now));
                }
            }
            Step::Arrive {
                worker,
                id,
                keys,
                args,
                reply_at,
            } => {
                let server = SERVER_EPOCH_US + self.now as i64;
                let values = self
                    .store
                    .execute(self.sc.mode, server, [&keys[0], &keys[1], &keys[2]], &args)
                    .expect("the store runs every registration the core sends");
                if let Some(at) = reply_at {
                    self.push(at.max(self.now), Step::Deliver(worker, id, values));
                }
            }
            Step::Deliver(w, id, values) => {
                let sent = self.procs[w]
                    .sent
                    .iter()
                    .find(|(r, _)| *r == id)
                    .map(|&(_, t)| t);
                let mut rejected = false;
                self.input(w, sent, |core, now| {
                    rejected = core.handle_reply(now, id, &values).is_err();
                });
                self.rejected += u64::from(rejected);
            }
            Step::GiveUp(w, id) => {
                self.input(w, None, |core, now| {
                    core.handle_failure(now, id, &"gave up")
                });
            }
            Step::Restart => self.store.flush(),
        }
    }

    /// Feeds one input to worker `w` at the current instant, then does what
    /// an adapter does: sends every transmit, hands every event to the loop,
    /// and sleeps until the next timeout. `reply_sent` is the send time of the
    /// request whose reply this input is, for the broken holder.
    fn input(&mut self, w: usize, reply_sent: Option<u64>, f: impl FnOnce(&mut Worker, Instant)) {
        let now = self.local(self.now);
        let before = self.procs[w]
            .held
            .as_ref()
            .map(|l| self.true_of(l.deadline()));
        let mut sends = Vec::new();
        let mut events = Vec::new();
        let timeout;
        {
            let Some(core) = self.procs[w].core.as_mut() else {
                return;
            };
            f(core, now);
            while let Some(t) = core.poll_transmit() {
                sends.push((
                    t.id,
                    t.keys.map(str::to_owned),
                    t.args.to_vec(),
                    t.expires_at,
                ));
            }
            while let Some(e) = core.poll_event() {
                events.push(e);
            }
            timeout = core.poll_timeout();
        }
        self.granted = false;
        for e in events {
            self.record(w, e);
        }
        // The broken holder re-anchors every grant or renewal at the arrival.
        if let Some(sent) = reply_sent
            && let Some(lease) = &self.procs[w].held
        {
            let deadline = self.true_of(lease.deadline());
            let renewed = self.granted || before.is_some_and(|b| deadline > b);
            if renewed && let Some(b) = &mut self.procs[w].broken {
                b.until = b.until.max(deadline + (self.now - sent));
            }
        }
        for (id, keys, args, expires_at) in sends {
            self.send(w, id, keys, args, expires_at);
        }
        if let Some(t) = timeout {
            let at = self.true_of(t).max(self.now);
            let p = &mut self.procs[w];
            p.wake_gen += 1;
            let gen_ = p.wake_gen;
            self.push(at, Step::Wake(w, gen_));
        }
    }

    /// The outcome of a registration `w` sends now: a choice point for its
    /// first registration in an interval of the window, the same outcome for
    /// the rest of that interval, prompt elsewhere.
    fn fate(&mut self, w: usize) -> Fate {
        let k = self.now / L;
        match self.procs[w].link {
            Some((j, fate)) if j == k => return fate,
            _ => {}
        }
        if !self.sc.window.contains(&k) {
            return Fate::Prompt;
        }
        let at = self.trace.len();
        let arity = self.sc.fates.len();
        let c = self.prefix.get(at).copied().unwrap_or(0);
        self.trace.push((c, arity));
        let fate = self.sc.fates[c];
        self.choices.push(Choice {
            worker: w,
            interval: k,
            fate,
        });
        self.procs[w].link = Some((k, fate));
        fate
    }

    fn send(
        &mut self,
        w: usize,
        id: RequestId,
        keys: [String; 3],
        args: Vec<String>,
        expires_at: Instant,
    ) {
        let now = self.now;
        self.procs[w].sent.push((id, now));
        let give_up = self.true_of(expires_at).max(now);
        self.push(give_up, Step::GiveUp(w, id));
        let reply_at = match self.fate(w) {
            Fate::Prompt => Some(now + 2 * HALF_TRIP),
            Fate::LateGap => Some(now + self.sc.g() + 1000),
            Fate::LateLong => Some(now + L * 9 / 10),
            Fate::ReplyLost => None,
            Fate::RequestLost => return,
            Fate::Stall => {
                let p = &mut self.procs[w];
                p.stalled_until = p.stalled_until.max(now + STALL);
                Some(now + 2 * HALF_TRIP)
            }
        };
        self.push(
            now + HALF_TRIP,
            Step::Arrive {
                worker: w,
                id,
                keys,
                args,
                reply_at,
            },
        );
    }

    /// The loop receives an event: history lines for the real holder and
    /// for the broken one.
    fn record(&mut self, w: usize, event: Event) {
        let now = self.now;
        match event {
            // This model checks whole pairs.
            Event::Assignment(Assignment::Tasks(_)) => {}
            Event::Assignment(Assignment::Held(lease)) => {
                self.granted = true;
                let deadline = self.true_of(lease.deadline());
                self.history.push(Record::own(
                    Self::name(w),
                    lease.i(),
                    lease.n(),
                    lease.token(),
                    now,
                ));
                if let Some(b) = self.procs[w].broken.take() {
                    self.broken
                        .push(Record::release(Self::name(w), b.i, b.n, b.until.min(now)));
                }
                self.broken.push(Record::own(
                    Self::name(w),
                    lease.i(),
                    lease.n(),
                    lease.token(),
                    now,
                ));
                self.procs[w].broken = Some(BrokenHold {
                    i: lease.i(),
                    n: lease.n(),
                    until: deadline,
                });
                self.procs[w].held = Some(lease);
            }
            Event::Assignment(Assignment::Idle(idle)) => {
                let Some(ended) = &idle.ended else { return };
                let at = self.true_of(idle.since).min(now);
                self.history
                    .push(Record::release(Self::name(w), ended.i(), ended.n(), at));
                self.procs[w].held = None;
                // The broken holder trusts its own deadline over expiry, but
                // gives the pair back when told to.
                if idle.reason != IdleReason::Expired
                    && let Some(b) = self.procs[w].broken.take()
                {
                    self.broken
                        .push(Record::release(Self::name(w), b.i, b.n, b.until.min(at)));
                }
            }
            Event::Stopped => {}
        }
    }

    fn finish(mut self) -> Leaf {
        let end = self.sc.horizon;
        for w in 0..self.procs.len() {
            if let Some(lease) = self.procs[w].held.take() {
                let at = self.true_of(lease.deadline()).min(end);
                self.history
                    .push(Record::release(Self::name(w), lease.i(), lease.n(), at));
            }
            if let Some(b) = self.procs[w].broken.take() {
                self.broken
                    .push(Record::release(Self::name(w), b.i, b.n, b.until.min(end)));
            }
        }
        let summary = checker::check(&self.history, Some(end));
        let broken = checker::check(&self.broken, Some(end));
        Leaf {
            trace: self.trace,
            choices: self.choices,
            owns: summary.owns,
            summary,
            broken,
            pointwise: self.pointwise,
            shared: self.shared,
            rejected: self.rejected,
        }
    }
}

/// Tokens whose early-schedule spreads (rule 8) are `(w + 0.5) / workers`
/// of the spread: distinct send times, in the order of the workers.
fn spread_token(w: usize, workers: usize) -> u128 {
    let fraction = (w as f64 + 0.5) / workers as f64;
    let high = (fraction * 18_446_744_073_709_551_616.0) as u64;
    (u128::from(high) << 64) | (w as u128 + 1)
}

/// Depth-first search over every choice sequence of `sc`, replaying each
/// from scratch; calls `visit` on every leaf and returns the number of
/// leaves.
fn explore(sc: &Scenario, mut visit: impl FnMut(&Leaf)) -> u64 {
    let base = Instant::now();
    let mut prefix: Vec<usize> = Vec::new();
    let mut leaves = 0;
    loop {
        let leaf = Model::new(sc, &prefix, base).run();
        leaves += 1;
        visit(&leaf);
        let mut path = leaf.trace;
        loop {
            match path.pop() {
                None => return leaves,
                Some((c, arity)) if c + 1 < arity => {
                    path.push((c + 1, arity));
                    break;
                }
                Some(_) => {}
            }
        }
        prefix = path.iter().map(|&(c, _)| c).collect();
    }
}

/// Runs the search of `sc` and asserts, at every leaf, the checker's verdict
/// and the pointwise check; then asserts the leaf count.
fn assert_exclusive(sc: &Scenario) {
    let started = Instant::now();
    let (mut owns, mut shared) = (0, 0);
    let leaves = explore(sc, |leaf| {
        let why = if leaf.summary.is_ok() {
            leaf.pointwise.clone()
        } else {
            Some(format!(
                "{}\nviolations: {:?}\nfencing: {:?}\nanomalies: {:?}",
                leaf.summary, leaf.summary.violations, leaf.summary.fencing, leaf.summary.anomalies
            ))
        };
        let replay: Vec<usize> = leaf.trace.iter().map(|&(c, _)| c).collect();
        if let Some(why) = why {
            panic!(
                "{sc}: violation with choices [{}] (replay prefix {replay:?}): {why}",
                render(&leaf.choices),
            );
        }
        assert_eq!(
            leaf.rejected,
            0,
            "{sc}: a reply was rejected with choices [{}]",
            render(&leaf.choices)
        );
        owns += leaf.owns;
        shared += leaf.shared;
    });
    println!(
        "{sc}: {leaves} leaves in {:.2?}, {owns} grants, {shared} instants with 2+ holders \
         compared, no violation",
        started.elapsed()
    );
    assert!(owns > 0, "{sc}: nothing was ever granted");
    assert!(shared > 0, "{sc}: no two leases ever held at once");
    assert_eq!(
        leaves,
        sc.expected_leaves(),
        "{sc}: the search shrank or grew"
    );
}

// ----- scenarios ---------------------------------------------------------

/// `workers` (2 or 3) join in interval 0, at 0.30 L, 0.55 L and 0.80 L, and
/// own from interval 2 on; then every outcome for each of them in each
/// interval of the window, and three quiet intervals after it.
fn settled(
    mode: Mode,
    gap: f64,
    workers: usize,
    window: Range<u64>,
    fates: &'static [Fate],
) -> Scenario {
    let horizon = (window.end + 3) * L;
    Scenario {
        mode,
        gap,
        joins: [3 * L / 10, 55 * L / 100, 8 * L / 10][..workers].to_vec(),
        window,
        fates,
        restart_at: None,
        horizon,
    }
}

/// One worker owns the whole group alone; a second joins at `2.5 L`, and the
/// window covers the join and the two intervals after it: the membership
/// change where a stale `n = 1` lease meets the newcomer's `n = 2`.
fn late_joiner(mode: Mode, gap: f64) -> Scenario {
    Scenario {
        mode,
        gap,
        joins: vec![3 * L / 10, 5 * L / 2],
        window: 2..4,
        fates: &ALL_FATES,
        restart_at: None,
        horizon: 7 * L,
    }
}

// ----- tests ---------------------------------------------------------------

const MODES: [Mode; 2] = [Mode::Ranked, Mode::Arrival];

#[test]
fn no_two_workers_hold_one_slot_in_any_interleaving_ranked() {
    // Three intervals of outcomes for both workers: 5^6 leaves; then two
    // intervals with the short delay too: 6^4.
    let wide = settled(Mode::Ranked, 0.15, 2, 3..6, &CORE_FATES);
    assert_eq!(wide.expected_leaves(), 15_625);
    assert_exclusive(&wide);
    let all = settled(Mode::Ranked, 0.15, 2, 3..5, &ALL_FATES);
    assert_eq!(all.expected_leaves(), 1_296);
    assert_exclusive(&all);
}

#[test]
fn no_two_workers_hold_one_slot_in_any_interleaving_arrival() {
    let wide = settled(Mode::Arrival, 0.15, 2, 3..6, &CORE_FATES);
    assert_eq!(wide.expected_leaves(), 15_625);
    assert_exclusive(&wide);
    let all = settled(Mode::Arrival, 0.15, 2, 3..5, &ALL_FATES);
    assert_eq!(all.expected_leaves(), 1_296);
    assert_exclusive(&all);
}

#[test]
fn a_stale_single_holder_never_overlaps_a_newcomer_in_any_interleaving() {
    for mode in MODES {
        let sc = late_joiner(mode, 0.15);
        assert_eq!(sc.expected_leaves(), 1_296);
        assert_exclusive(&sc);
    }
}

#[test]
fn no_two_workers_hold_one_slot_in_any_interleaving_with_a_small_gap() {
    for mode in MODES {
        let sc = settled(mode, 0.05, 2, 3..5, &ALL_FATES);
        assert_eq!(sc.expected_leaves(), 1_296);
        assert_exclusive(&sc);
    }
}

#[test]
fn three_workers_hold_distinct_slots_of_one_n_in_any_interleaving() {
    const FATES: [Fate; 4] = [
        Fate::Prompt,
        Fate::LateLong,
        Fate::ReplyLost,
        Fate::RequestLost,
    ];
    for mode in MODES {
        let one = settled(mode, 0.15, 3, 3..4, &ALL_FATES);
        assert_eq!(one.expected_leaves(), 216);
        assert_exclusive(&one);
        let two = settled(mode, 0.15, 3, 3..5, &FATES);
        assert_eq!(two.expected_leaves(), 4_096);
        assert_exclusive(&two);
    }
}

#[test]
fn a_restart_at_a_boundary_never_yields_overlapping_leases_in_any_interleaving() {
    for mode in MODES {
        // Inside the window, and at its end.
        for boundary in [4, 5] {
            let mut sc = settled(mode, 0.15, 2, 3..5, &ALL_FATES);
            sc.restart_at = Some(boundary * L);
            assert_eq!(sc.expected_leaves(), 1_296);
            assert_exclusive(&sc);
        }
    }
}

/// The negative control. The broken holder anchors every grant and renewal
/// at the reply's arrival instead of its send, so a reply that arrived
/// `0.9 L` late stretches its lease `0.9 L` past what rule 6 allows. In the
/// late-joiner search, the holder of `0/1` gets its last renewal late, then
/// learns nothing in the next interval (its replies are lost, so it never
/// hears of the disagreement), while the newcomer is granted `1/2`: the
/// checker must flag the mixed `n`. The real core, in the very same leaves,
/// stays exclusive.
#[test]
fn holder_measuring_from_arrival_is_caught_by_the_search() {
    let sc = late_joiner(Mode::Ranked, 0.15);
    let mut caught = 0;
    let mut first = None;
    let leaves = explore(&sc, |leaf| {
        assert!(leaf.summary.is_ok(), "{}", leaf.summary);
        if leaf.broken.violation_count > 0 {
            caught += 1;
            first.get_or_insert_with(|| {
                format!(
                    "[{}]: {:?}",
                    render(&leaf.choices),
                    leaf.broken.violations.first()
                )
            });
        }
    });
    println!("negative control, {sc}: {caught} of {leaves} leaves violate; first {first:?}");
    assert_eq!(leaves, sc.expected_leaves());
    assert!(
        caught > 0,
        "the search never caught the broken holder: the checker or the search is blind"
    );
}

/// The search itself: every leaf is a different choice sequence, and the
/// all-prompt leaf (the first) consumes exactly one choice per worker and
/// interval of the window.
#[test]
fn the_search_visits_each_choice_sequence_once() {
    let sc = settled(Mode::Ranked, 0.15, 2, 3..4, &ALL_FATES);
    let mut seen = std::collections::HashSet::new();
    let mut first = None;
    let leaves = explore(&sc, |leaf| {
        let choices: Vec<usize> = leaf.trace.iter().map(|&(c, _)| c).collect();
        assert!(seen.insert(choices), "a choice sequence was visited twice");
        first.get_or_insert_with(|| leaf.choices.clone());
    });
    assert_eq!(leaves, 36);
    let first = first.expect("at least one leaf");
    assert_eq!(render(&first), "w0@3L:prompt w1@3L:prompt");
}
