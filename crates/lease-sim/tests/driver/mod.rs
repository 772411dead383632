//! A deterministic driver of real [`lease_core::Worker`]s and the simulator's
//! [`SimStore`], shared by the bounded search (`exhaustive.rs`) and the
//! scripted regressions (`forward_step.rs`).
//!
//! No seed and no randomness: one event queue ordered by `(time, sequence)`.
//! Each worker's local clock is true time; the server clock is true time plus
//! an epoch aligned to `L` plus the sum of the clock steps so far. A [`Net`]
//! decides, for every request a worker sends, whether and when it executes
//! at the store (at a true instant, or once the *server* clock reads a value,
//! which follows the steps), and when each copy of its reply is delivered.
//! The driver does what an adapter does after every input (sends every
//! transmit, hands every event to the loop, sleeps until the next timeout),
//! writes the history of what the loops received, and checks, at every
//! instant something happened, that no two workers hold a common task
//! (whole pairs: one `n` and distinct `i`; task sets: no task id of
//! `0..UNIVERSE` in both). Each file uses a part of it.
#![allow(dead_code)]

use std::cell::RefCell;
use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap};
use std::fmt;
use std::time::{Duration, Instant};

use lease_core::ownership::Mapping;
use lease_core::{
    Assignment, Counting, Event, Handover, Identity, IdleReason, Lease, Mode, Options, RequestId,
    Worker,
};
use lease_history::{self as checker, LeaveHow, Part, PartEnd, Record, Summary};
use lease_sim::SimStore;

/// Interval length `L`, in microseconds.
pub(crate) const L: u64 = 1_000_000;
/// The server clock at true time 0 (a multiple of `L`, as in the simulator):
/// interval `k` of true time is server interval `K0 + k` until a step.
pub(crate) const SERVER_EPOCH_US: i64 = 1_700_000_000_000_000;
/// The server interval number at true time 0.
pub(crate) const K0: u64 = (SERVER_EPOCH_US as u64) / L;
/// One way of a prompt round trip.
pub(crate) const HALF_TRIP: u64 = 500;
/// Task ids the direct per-instant check compares: `0..UNIVERSE`.
pub(crate) const UNIVERSE: u64 = 4096;

/// An instant of the run: true time, or the first true instant at which the
/// server clock reads at least a value (so it moves with the clock's steps).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum At {
    /// True microseconds since the start of the run.
    True(u64),
    /// Server microseconds since the Unix epoch.
    Server(i64),
}

/// When one copy of a reply is delivered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReplyAt {
    /// This long after the execution.
    After(u64),
    /// At this instant, or right after the execution if that is later.
    At(At),
}

/// What the network does with one request.
#[derive(Clone, Debug, Default)]
pub(crate) struct Route {
    /// When it executes at the store; `None`: lost on the way.
    pub(crate) exec: Option<At>,
    /// A network queue of depth one: a request held (waiting for a server
    /// instant) in the same slot and not executed yet is lost when this one
    /// is held.
    pub(crate) slot: Option<u64>,
    /// The copies of the reply: none (lost), one, or duplicates.
    pub(crate) replies: Vec<ReplyAt>,
    /// The worker's process freezes this long right after the send: its
    /// replies, timers and give-ups wait until it wakes.
    pub(crate) stall: Option<u64>,
}

impl Route {
    /// Executes on arrival, half a trip after `now`, and the reply comes back
    /// half a trip later.
    pub(crate) fn prompt(now: u64) -> Self {
        Self {
            exec: Some(At::True(now + HALF_TRIP)),
            replies: vec![ReplyAt::After(HALF_TRIP)],
            ..Self::default()
        }
    }

    /// Lost before it reaches the store.
    pub(crate) fn lost() -> Self {
        Self::default()
    }
}

/// A request as the network sees it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sent {
    pub(crate) worker: usize,
    pub(crate) id: RequestId,
    /// True send time.
    pub(crate) at: u64,
    /// The leave script (rule 16) rather than a registration.
    pub(crate) leave: bool,
    /// The server interval named in the request's first key.
    pub(crate) named: u64,
    /// How many requests this worker sent before this one.
    pub(crate) nth: u32,
}

/// The clocks as the network sees them when it decides.
#[derive(Clone, Copy, Debug)]
pub(crate) struct View {
    /// True microseconds.
    pub(crate) now: u64,
    /// Server microseconds since the epoch.
    pub(crate) server: i64,
}

/// Something scheduled by the scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    /// The server clock moves by this many microseconds (signed).
    ClockStep(i64),
    /// The store loses every key (a restart without persistence).
    Restart,
    /// The worker's process dies: it receives nothing more; what it holds
    /// lasts to its deadline.
    Crash(usize),
    /// `Worker::handle_cancel` (a graceful leave if the options say so).
    Cancel(usize),
    /// Asks the network's [`Net::hook`] (choice points of a search).
    Hook(u32),
}

/// The network (and the scenario's choices).
pub(crate) trait Net {
    /// Decides the fate of a request sent now.
    fn route(&mut self, sent: &Sent, view: &View) -> Route;
    /// A scheduled [`Action::Hook`] fired: the actions to apply now.
    fn hook(&mut self, _tag: u32, _view: &View) -> Vec<Action> {
        Vec::new()
    }
}

/// One execution at the store, for assertions and for printing a schedule.
#[derive(Clone, Debug)]
pub(crate) struct Exec {
    pub(crate) worker: usize,
    pub(crate) id: RequestId,
    pub(crate) leave: bool,
    /// True send and execution instants.
    pub(crate) sent: u64,
    pub(crate) at: u64,
    /// Server time of the execution.
    pub(crate) server: i64,
    /// The interval the request named.
    pub(crate) named: u64,
    /// The script's reply.
    pub(crate) reply: Vec<i64>,
}

impl fmt::Display for Exec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rel = |k: i64| k - K0 as i64;
        let named = if self.named == 1 {
            "the probe".to_owned()
        } else {
            format!("{}", rel(self.named as i64))
        };
        write!(
            f,
            "w{} {} {} named {named}, sent {}, executed {} (server {}): ",
            self.worker,
            if self.leave { "leave" } else { "registration" },
            self.id,
            secs(self.sent),
            secs(self.at),
            server_secs(self.server),
        )?;
        match (self.leave, &self.reply[..]) {
            (false, [1, k, _, _, position, count]) => {
                write!(f, "counted in {}, position {position} of {count}", rel(*k))
            }
            (true, [1, k, _, _, removed]) => write!(f, "in {}, removed {removed}", rel(*k)),
            (_, [0, k, ..]) => write!(f, "wrong interval ({})", rel(*k)),
            (_, [2, ..]) => f.write_str("refused"),
            (_, other) => write!(f, "{other:?}"),
        }
    }
}

/// A span during which two workers held common tasks (the direct check).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Overlap {
    pub(crate) a: usize,
    pub(crate) b: usize,
    /// Task ids of `0..UNIVERSE` held by both (the most at any instant of
    /// the span). Whole pairs with different `n` or the same `i` conflict even
    /// when this is 0 (the loop may split by `n`).
    pub(crate) shared: u32,
    /// True microseconds.
    pub(crate) start: u64,
    pub(crate) end: u64,
}

/// What one run produced.
pub(crate) struct Outcome {
    pub(crate) history: Vec<Record>,
    /// The checker's verdict on the history.
    pub(crate) summary: Summary,
    /// The checker's verdict on the broken holder's history (whole pairs
    /// only; empty unless the driver tracks it).
    pub(crate) broken: Summary,
    /// Every span of two holders with common tasks, in order of start.
    pub(crate) overlaps: Vec<Overlap>,
    /// Replies the core rejected as malformed (the store is faithful: none).
    pub(crate) rejected: u64,
    /// Instants at which two or more holders were compared.
    pub(crate) shared: u64,
    pub(crate) execs: Vec<Exec>,
}

impl Outcome {
    /// The first overlap as one line.
    pub(crate) fn first_overlap(&self) -> Option<String> {
        self.overlaps.first().map(|o| {
            format!(
                "w{} and w{} hold {} common task ids of 0..{UNIVERSE} from {} to {}",
                o.a,
                o.b,
                o.shared,
                secs(o.start),
                secs(o.end)
            )
        })
    }
}

/// `t` true microseconds as seconds (`L` = 1 s).
pub(crate) fn secs(t: u64) -> String {
    format!("{:.4}", t as f64 / 1e6)
}

/// A server instant as seconds since the epoch's interval 0 (`K0`).
pub(crate) fn server_secs(s: i64) -> String {
    format!("{:.4}", (s - SERVER_EPOCH_US) as f64 / 1e6)
}

/// Tokens whose early-schedule spreads (rule 8) are the fraction `spread` of
/// the spread, distinct in their low bits: a worker with a smaller `spread`
/// sorts first among newcomers.
pub(crate) fn token_at(spread: f64, w: usize) -> Identity {
    let high = (spread * 18_446_744_073_709_551_616.0) as u64;
    Identity::from_bits_same_worker_if_reused((u128::from(high) << 64) | (w as u128 + 1))
}

/// The broken holder of exhaustive.rs's negative control: what it believes
/// it holds.
#[derive(Clone, Copy, Debug)]
struct BrokenHold {
    i: u32,
    n: u32,
    until: u64,
}

struct Proc {
    options: Options,
    token: Identity,
    core: Option<Worker>,
    crashed: bool,
    wake_gen: u64,
    stalled_until: u64,
    held: Option<Lease>,
    sent: Vec<(RequestId, u64)>,
    nth: u32,
    broken: Option<BrokenHold>,
}

enum Step {
    Join(usize),
    Wake(usize, u64),
    /// Boxed: the queue moves its entries around, and this one is large.
    Arrive(Box<Arrival>),
    Deliver(usize, RequestId, Vec<i64>),
    GiveUp(usize, RequestId),
    Act(Action),
    Flush(u64),
    Probe,
}

/// One entry of the event queue, ordered by `(at, seq)`.
struct Queued {
    at: u64,
    seq: u64,
    step: Step,
}

impl PartialEq for Queued {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl Eq for Queued {}

impl PartialOrd for Queued {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Queued {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

/// A request reaching the store.
struct Arrival {
    worker: usize,
    id: RequestId,
    leave: bool,
    sent: u64,
    named: u64,
    keys: [String; lease_core::KEY_COUNT],
    args: Vec<String>,
    replies: Vec<ReplyAt>,
}

/// A step waiting for a server instant.
struct Waiting {
    server: i64,
    seq: u64,
    slot: Option<u64>,
    step: Step,
}

/// The driver of one run.
pub(crate) struct Driver<N: Net> {
    pub(crate) net: N,
    base: Instant,
    now: u64,
    seq: u64,
    shift: i64,
    horizon: u64,
    queue: BinaryHeap<Reverse<Queued>>,
    waiting: Vec<Waiting>,
    flush_gen: u64,
    store: SimStore,
    procs: Vec<Proc>,
    history: Vec<Record>,
    broken: Vec<Record>,
    track_broken: bool,
    open: Vec<Overlap>,
    overlaps: Vec<Overlap>,
    shared: u64,
    rejected: u64,
    execs: Vec<Exec>,
    granted: bool,
}

impl<N: Net> Driver<N> {
    /// A run that ends at true `horizon`, with the network `net`.
    pub(crate) fn new(net: N, horizon: u64, base: Instant) -> Self {
        Self {
            net,
            base,
            now: 0,
            seq: 0,
            shift: 0,
            horizon,
            queue: BinaryHeap::new(),
            waiting: Vec::new(),
            flush_gen: 0,
            store: SimStore::new(),
            procs: Vec::new(),
            history: Vec::new(),
            broken: Vec::new(),
            track_broken: false,
            open: Vec::new(),
            overlaps: Vec::new(),
            shared: 0,
            rejected: 0,
            execs: Vec::new(),
            granted: false,
        }
    }

    /// Also writes the history of a holder that anchors every grant and
    /// renewal at the reply's arrival (exhaustive.rs's negative control).
    pub(crate) fn track_broken_holder(mut self) -> Self {
        self.track_broken = true;
        self
    }

    /// The store, to switch on its test-only sabotages before the run.
    pub(crate) fn store_mut(&mut self) -> &mut SimStore {
        &mut self.store
    }

    /// Adds a worker that starts at true `at`; returns its number.
    pub(crate) fn join(&mut self, at: u64, options: Options, token: Identity) -> usize {
        let w = self.procs.len();
        self.procs.push(Proc {
            options,
            token,
            core: None,
            crashed: false,
            wake_gen: 0,
            stalled_until: 0,
            held: None,
            sent: Vec::new(),
            nth: 0,
            broken: None,
        });
        self.push(at, Step::Join(w));
        w
    }

    /// Schedules `action` at true `at`.
    pub(crate) fn schedule(&mut self, at: u64, action: Action) {
        self.push(at, Step::Act(action));
    }

    fn push(&mut self, at: u64, step: Step) {
        self.seq += 1;
        self.queue.push(Reverse(Queued {
            at: at.max(self.now),
            seq: self.seq,
            step,
        }));
    }

    fn server_now(&self) -> i64 {
        SERVER_EPOCH_US + self.now as i64 + self.shift
    }

    fn view(&self) -> View {
        View {
            now: self.now,
            server: self.server_now(),
        }
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

    /// Schedules `step` at `at`; a server instant waits in the list that
    /// clock steps re-time.
    fn push_at(&mut self, at: At, slot: Option<u64>, step: Step) {
        match at {
            At::True(t) => self.push(t, step),
            At::Server(s) if s <= self.server_now() => self.push(self.now, step),
            At::Server(s) => {
                if let Some(slot) = slot {
                    self.waiting.retain(|w| w.slot != Some(slot));
                }
                self.seq += 1;
                self.waiting.push(Waiting {
                    server: s,
                    seq: self.seq,
                    slot,
                    step,
                });
                self.schedule_flush();
            }
        }
    }

    fn schedule_flush(&mut self) {
        self.flush_gen += 1;
        let server = self.server_now();
        if let Some(first) = self.waiting.iter().map(|w| w.server).min() {
            let at = self.now + (first - server).max(0) as u64;
            self.push(at, Step::Flush(self.flush_gen));
        }
    }

    fn flush(&mut self) {
        let server = self.server_now();
        let mut due: Vec<Waiting> = Vec::new();
        let mut i = 0;
        while i < self.waiting.len() {
            if self.waiting[i].server <= server {
                due.push(self.waiting.swap_remove(i));
            } else {
                i += 1;
            }
        }
        due.sort_by_key(|w| (w.server, w.seq));
        for w in due {
            self.push(self.now, w.step);
        }
        self.schedule_flush();
    }

    /// Runs to the horizon.
    pub(crate) fn run(self) -> Outcome {
        self.run_with_net().0
    }

    /// Runs to the horizon and hands the network back.
    pub(crate) fn run_with_net(mut self) -> (Outcome, N) {
        while let Some(Reverse(next)) = self.queue.peek() {
            let at = next.at;
            if at > self.horizon {
                break;
            }
            if at > self.now {
                self.check_now();
            }
            let Some(Reverse(next)) = self.queue.pop() else {
                break;
            };
            self.now = at;
            self.step(next.step);
        }
        self.check_now();
        self.now = self.horizon;
        self.close_overlaps();
        self.finish()
    }

    /// The holdings of every worker at `now`: a whole pair as the part
    /// `[i, n, i, n]` with a flag, or the parts valid now.
    fn holdings(&self) -> Vec<(usize, bool, Vec<[u32; 4]>, Mapping)> {
        let now = self.local(self.now);
        self.procs
            .iter()
            .enumerate()
            .filter_map(|(w, p)| {
                let core = p.core.as_ref()?;
                let mapping = p.options.mapping();
                let t = core.lease_at(now)?;
                if let Some((i, n)) = whole_pair(t) {
                    return Some((w, true, vec![[i, n, i, n]], mapping));
                }
                let parts: Vec<[u32; 4]> = t
                    .parts()
                    .iter()
                    .filter(|l| l.is_valid_at(now))
                    .map(|l| l.part().describe())
                    .collect();
                (!parts.is_empty()).then_some((w, false, parts, mapping))
            })
            .collect()
    }

    /// The direct check at `now`: opens and closes overlap spans.
    fn check_now(&mut self) {
        // Most instants have at most one holder and nothing open: nothing to
        // compare, nothing to close.
        let now = self.local(self.now);
        let holders = self
            .procs
            .iter()
            .filter(|p| p.core.as_ref().is_some_and(|c| c.lease_at(now).is_some()))
            .count();
        if holders < 2 && self.open.is_empty() {
            return;
        }
        let held = self.holdings();
        if held.len() >= 2 {
            self.shared += 1;
        }
        let mut current: Vec<(usize, usize, u32)> = Vec::new();
        for (x, (wa, whole_a, pa, mapping)) in held.iter().enumerate() {
            for (wb, whole_b, pb, _) in &held[x + 1..] {
                let whole_conflict =
                    *whole_a && *whole_b && (pa[0][1] != pb[0][1] || pa[0][0] == pb[0][0]);
                // Distinct slots of one `n` partition the tasks.
                let disjoint_slots = *whole_a && *whole_b && !whole_conflict;
                let shared: u32 = if disjoint_slots {
                    0
                } else {
                    pa.iter()
                        .flat_map(|a| pb.iter().map(move |b| common(*mapping, *a, *b)))
                        .sum()
                };
                if shared > 0 || whole_conflict {
                    current.push((*wa, *wb, shared));
                }
            }
        }
        let now = self.now;
        let mut still = Vec::new();
        for mut o in std::mem::take(&mut self.open) {
            match current.iter().find(|c| (c.0, c.1) == (o.a, o.b)) {
                Some(c) => {
                    o.shared = o.shared.max(c.2);
                    still.push(o);
                }
                None => {
                    o.end = now;
                    self.overlaps.push(o);
                }
            }
        }
        for (a, b, shared) in current {
            if !still.iter().any(|o| (o.a, o.b) == (a, b)) {
                still.push(Overlap {
                    a,
                    b,
                    shared,
                    start: now,
                    end: now,
                });
            }
        }
        self.open = still;
    }

    fn close_overlaps(&mut self) {
        for mut o in std::mem::take(&mut self.open) {
            o.end = self.horizon;
            self.overlaps.push(o);
        }
        self.overlaps.sort_by_key(|o| (o.start, o.a, o.b));
    }

    fn step(&mut self, step: Step) {
        // A frozen process receives nothing until it wakes; a dead one
        // nothing at all.
        if let Step::Wake(w, _) | Step::Deliver(w, ..) | Step::GiveUp(w, _) = &step {
            if self.procs[*w].crashed {
                return;
            }
            let until = self.procs[*w].stalled_until;
            if until > self.now {
                self.push(until, step);
                return;
            }
        }
        match step {
            Step::Join(w) => {
                let p = &self.procs[w];
                let core =
                    Worker::new(&p.options, p.token, self.local(self.now)).expect("valid options");
                self.procs[w].core = Some(core);
                self.history.push(Record::join(Self::name(w), self.now));
                self.input(w, None, |core, now| core.handle_timeout(now));
            }
            Step::Wake(w, gen_) => {
                if self.procs[w].wake_gen == gen_ {
                    self.input(w, None, |core, now| core.handle_timeout(now));
                }
            }
            Step::Arrive(arrival) => {
                let Arrival {
                    worker,
                    id,
                    leave,
                    sent,
                    named,
                    keys,
                    args,
                    replies,
                } = *arrival;
                let server = self.server_now();
                let keys_ref = keys.each_ref().map(String::as_str);
                let values = if leave {
                    self.store.execute_leave(server, &keys_ref, &args)
                } else {
                    let mode = self.procs[worker].options.mode();
                    self.store.execute(mode, server, &keys_ref, &args)
                }
                .expect("the store runs every script the core sends");
                self.execs.push(Exec {
                    worker,
                    id,
                    leave,
                    sent,
                    at: self.now,
                    server,
                    named,
                    reply: values.clone(),
                });
                for r in replies {
                    let at = match r {
                        ReplyAt::After(d) => At::True(self.now + d),
                        ReplyAt::At(at) => at,
                    };
                    self.push_at(at, None, Step::Deliver(worker, id, values.clone()));
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
            Step::Act(action) => self.act(action),
            Step::Flush(gen_) => {
                if gen_ == self.flush_gen {
                    self.flush();
                }
            }
            Step::Probe => {}
        }
    }

    fn act(&mut self, action: Action) {
        match action {
            Action::ClockStep(by) => {
                self.shift += by;
                self.history.push(Record::fault("clock-step", self.now));
                self.schedule_flush();
            }
            Action::Restart => {
                self.store.flush();
                self.history.push(Record::fault("restart", self.now));
            }
            Action::Crash(w) => {
                if self.procs[w].core.is_none() || self.procs[w].crashed {
                    return;
                }
                self.procs[w].crashed = true;
                self.history
                    .push(Record::leave(Self::name(w), LeaveHow::Crash, self.now));
                // What it holds lasts to its deadline: the direct check
                // must see the end then.
                let ends = self.deadlines(w);
                for end in ends {
                    self.push(end, Step::Probe);
                }
            }
            Action::Cancel(w) => {
                if self.procs[w].crashed {
                    return;
                }
                self.input(w, None, |core, now| core.handle_cancel(now));
            }
            Action::Hook(tag) => {
                let view = self.view();
                for a in self.net.hook(tag, &view) {
                    self.act(a);
                }
            }
        }
    }

    /// True deadlines of what worker `w` holds.
    fn deadlines(&self, w: usize) -> Vec<u64> {
        let p = &self.procs[w];
        p.held
            .iter()
            .flat_map(|l| l.parts())
            .map(|l| self.true_of(l.deadline()))
            .collect()
    }

    /// Feeds one input to worker `w` now, then does what an adapter does.
    /// `reply_sent` is the send time of the request whose reply this input
    /// is, for the broken holder.
    fn input(&mut self, w: usize, reply_sent: Option<u64>, f: impl FnOnce(&mut Worker, Instant)) {
        if self.procs[w].crashed {
            return;
        }
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
                    t.script.is_leave(),
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
        if self.track_broken
            && let Some(sent) = reply_sent
            && let Some(lease) = &self.procs[w].held
        {
            let deadline = self.true_of(lease.deadline());
            let renewed = self.granted || before.is_some_and(|b| deadline > b);
            if renewed && let Some(b) = &mut self.procs[w].broken {
                b.until = b.until.max(deadline + (self.now - sent));
            }
        }
        for (id, leave, keys, args, expires_at) in sends {
            self.send(w, id, leave, keys, args, expires_at);
        }
        if let Some(t) = timeout {
            let at = self.true_of(t).max(self.now);
            let p = &mut self.procs[w];
            p.wake_gen += 1;
            let gen_ = p.wake_gen;
            self.push(at, Step::Wake(w, gen_));
        }
    }

    fn send(
        &mut self,
        w: usize,
        id: RequestId,
        leave: bool,
        keys: [String; lease_core::KEY_COUNT],
        args: Vec<String>,
        expires_at: Instant,
    ) {
        let now = self.now;
        let named = keys[0]
            .rsplit_once(':')
            .and_then(|(_, k)| k.parse().ok())
            .unwrap_or(0);
        let p = &mut self.procs[w];
        p.sent.push((id, now));
        let nth = p.nth;
        p.nth += 1;
        let give_up = self.true_of(expires_at).max(now);
        self.push(give_up, Step::GiveUp(w, id));
        let sent = Sent {
            worker: w,
            id,
            at: now,
            leave,
            named,
            nth,
        };
        let view = self.view();
        let route = self.net.route(&sent, &view);
        if let Some(stall) = route.stall {
            let p = &mut self.procs[w];
            p.stalled_until = p.stalled_until.max(now + stall);
        }
        let Some(exec) = route.exec else {
            return;
        };
        let step = Step::Arrive(Box::new(Arrival {
            worker: w,
            id,
            leave,
            sent: now,
            named,
            keys,
            args,
            replies: route.replies,
        }));
        self.push_at(exec, route.slot, step);
    }

    /// The loop receives an event: history lines (and the broken holder's).
    fn record(&mut self, w: usize, event: Event) {
        let now = self.now;
        match event {
            Event::Assignment(Assignment::Held(lease)) => {
                self.granted = true;
                let Some((i, n)) = whole_pair(&lease) else {
                    // A task-set value replaces the holding from the instant
                    // it began (a part's end noticed late is written at that
                    // end).
                    let at = self.true_of(lease.since()).min(now);
                    let mapping = history_mapping(lease.mapping());
                    let parts = lease.history_parts().into_iter().map(Part::from);
                    self.history
                        .extend(Record::own_task_set(Self::name(w), mapping, parts, at));
                    self.procs[w].held = Some(lease);
                    return;
                };
                self.history
                    .push(Record::own(Self::name(w), i, n, lease.token(), now));
                if self.track_broken {
                    let deadline = self.true_of(lease.deadline());
                    if let Some(b) = self.procs[w].broken.take() {
                        self.broken.push(Record::release(
                            Self::name(w),
                            b.i,
                            b.n,
                            b.until.min(now),
                        ));
                    }
                    self.broken
                        .push(Record::own(Self::name(w), i, n, lease.token(), now));
                    self.procs[w].broken = Some(BrokenHold {
                        i,
                        n,
                        until: deadline,
                    });
                }
                self.procs[w].held = Some(lease);
            }
            Event::Assignment(Assignment::Idle(idle)) => {
                let at = self.true_of(idle.since).min(now);
                let release = |i, n| match idle.reason.as_str().parse() {
                    Ok(reason) => Record::release_because(Self::name(w), i, n, reason, at),
                    Err(_) => Record::release(Self::name(w), i, n, at),
                };
                if let Some(ended) = &idle.ended {
                    let last = self.procs[w].held.take();
                    let last = last.as_ref().unwrap_or(ended);
                    let (i, n) = whole_pair(last)
                        .or_else(|| last.newest_pair().map(|p| (p.i(), p.n())))
                        .unwrap_or((0, 1));
                    self.history.push(release(i, n));
                    // The broken holder trusts its own deadline over expiry,
                    // but gives the pair back when told to.
                    if self.track_broken
                        && idle.reason != IdleReason::Expired
                        && let Some(b) = self.procs[w].broken.take()
                    {
                        self.broken
                            .push(Record::release(Self::name(w), b.i, b.n, b.until.min(at)));
                    }
                }
            }
            // Written when the worker really stops (after a graceful
            // leave's drain), so the holding ends at its own release.
            Event::Stopped => {
                self.history
                    .push(Record::leave(Self::name(w), LeaveHow::Cancel, now))
            }
        }
    }

    fn finish(mut self) -> (Outcome, N) {
        let end = self.horizon;
        for w in 0..self.procs.len() {
            let held = self.procs[w].held.take();
            if let Some((i, n)) = held.as_ref().and_then(whole_pair) {
                let lease = held.as_ref().expect("held");
                let at = self.true_of(lease.deadline()).min(end);
                self.history.push(Record::release(Self::name(w), i, n, at));
            } else if let Some(tasks) = held {
                let live: Vec<PartEnd> = tasks
                    .parts()
                    .iter()
                    .zip(tasks.history_parts())
                    .map(|(l, p)| PartEnd {
                        part: Part::from(p),
                        end_us: self.true_of(l.deadline()),
                        renewed: Some(l.renewed_in()),
                    })
                    .collect();
                let mapping = history_mapping(tasks.mapping());
                self.history
                    .extend(Record::task_set_ending(&Self::name(w), mapping, live, end));
            }
            if let Some(b) = self.procs[w].broken.take() {
                self.broken
                    .push(Record::release(Self::name(w), b.i, b.n, b.until.min(end)));
            }
        }
        let summary = checker::check(&self.history, Some(end));
        let broken = checker::check(&self.broken, Some(end));
        let outcome = Outcome {
            history: self.history,
            summary,
            broken,
            overlaps: self.overlaps,
            rejected: self.rejected,
            shared: self.shared,
            execs: self.execs,
        };
        (outcome, self.net)
    }
}

fn history_mapping(m: Mapping) -> lease_history::Mapping {
    match m {
        Mapping::Modulo => lease_history::Mapping::Modulo,
        Mapping::Consistent => lease_history::Mapping::Consistent,
    }
}

/// Two parts under one mapping (`true`: consistent), smaller first.
type PartPair = (bool, [u32; 4], [u32; 4]);

thread_local! {
    /// Common task ids of two parts, computed once per thread.
    static COMMON: RefCell<HashMap<PartPair, u32>> = RefCell::new(HashMap::new());
}

/// How many task ids of `0..UNIVERSE` are in both parts `[i, n, pi, pn]`
/// under `mapping`.
pub(crate) fn common(mapping: Mapping, a: [u32; 4], b: [u32; 4]) -> u32 {
    let key = (mapping == Mapping::Consistent, a.min(b), a.max(b));
    COMMON.with(|c| {
        *c.borrow_mut().entry(key).or_insert_with(|| {
            let owns = |p: [u32; 4], id: u64| {
                mapping.owner(id, p[1]) == p[0] && mapping.owner(id, p[3]) == p[2]
            };
            (0..UNIVERSE)
                .filter(|&id| owns(a, id) && owns(b, id))
                .count() as u32
        })
    })
}

/// Options of the runs: group `g`, interval `L`, `mode`; incremental
/// handover takes the consistent mapping (rule 13).
pub(crate) fn options(mode: Mode, gap: f64, incremental: bool) -> Options {
    let o = Options::new("g", Duration::from_micros(L)).with_gap(gap);
    match (mode, incremental) {
        (Mode::Arrival, _) => o.with_counting(Counting::Arrival),
        (Mode::Ranked, true) => o
            .with_handover(Handover::TaskSets)
            .with_graceful_leave(false),
        (Mode::Ranked, false) => o
            .with_handover(Handover::WholePairs)
            .with_graceful_leave(false),
    }
}

/// `(i, n)` when a lease is written as a whole pair: one whole pair under
/// the modulo mapping; task sets are written with their parts.
pub(crate) fn whole_pair(lease: &Lease) -> Option<(u32, u32)> {
    let pair = lease
        .pair()
        .filter(|_| lease.mapping() == Mapping::Modulo)?;
    Some((pair.i(), pair.n()))
}
