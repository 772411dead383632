//! Exclusivity under arbitrary interleavings: two or three `Worker`s (each
//! with its own offset and drifting local clock) share one simulated Redis
//! (`lease_sim::SimStore`) through a network the fuzzer controls: it picks
//! latencies, delays, drops, duplicates and fails individual requests and
//! replies, stalls, crashes, restarts and cancels workers, steps the server
//! clock forward and restarts the store (losing every key).
//!
//! After every input, at that true instant, the lease each live worker holds
//! (`lease_at(local now)`) goes into a history (docs/history-format.md: an `own`
//! when it appears, a `release` when it is gone or replaced), and at the end
//! the one checker of `lease-history` judges it: at every instant the held
//! pairs have distinct `i` and the same `n` (docs/protocol.md, "Why it is
//! exclusive"), and two workers' leases that share a task (any two with
//! different `n`) have fencing tokens at least 2 apart, in time order
//! (docs/protocol.md, "Fencing"). Each worker's own pair stream is checked as in `core_inputs`.
//!
//! Within the protocol's assumptions only: the server clock is monotone and
//! steps forward by at most G at a time (docs/protocol.md, "Limits"), a restart loses
//! all keys (never some), and local clocks drift by less than the bound
//! `rho` = 1e-3 (here at most 900 ppm).
#![no_main]

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use arbitrary::Arbitrary;
use lease_core::{Counting, Handover, Identity, Lease, Mode, Options, RequestId, Worker};
use lease_fuzz::PairStream;
use lease_history::Record;
use lease_sim::SimStore;
use libfuzzer_sys::fuzz_target;

const SLOTS: usize = 3;

#[derive(Arbitrary, Debug)]
enum IntervalMs {
    Small(u8),
    Medium(u16),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
struct ClockSpec {
    /// Local clock ahead of true time by this many ms.
    offset_ms: u16,
    /// Rate error in ppm, mapped into [-900, 900].
    drift: i16,
}

#[derive(Arbitrary, Debug)]
struct Input {
    arrival: bool,
    interval: IntervalMs,
    gap: u16,
    /// 2 or 3 workers at the start.
    third: bool,
    clocks: [ClockSpec; SLOTS],
    tokens: [u128; SLOTS],
    /// One-way latencies (µs, taken modulo L/2).
    up: u32,
    down: u32,
    server_base: u32,
    ops: Vec<Op>,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Op {
    /// Process the next thing due (a message or a timer), advancing time.
    Step,
    /// Up to 64 steps.
    Steps(u8),
    Advance(u32),
    /// Fire a worker's timer now, due or not.
    Wake(u8),
    /// Lose a message in flight (request or reply).
    Drop(u8),
    /// Hold a message in flight longer (µs, modulo 4 L).
    Delay(u8, u32),
    /// A request executes twice (the echo's reply goes nowhere), or a reply
    /// is delivered twice.
    Duplicate(u8, u16),
    /// A request fails before reaching the server (connection error).
    Fail(u8),
    /// The driver gives up on a request: `handle_failure`, while the message
    /// stays in flight.
    GiveUp(u8),
    /// New one-way latencies (µs, modulo L/2).
    Latency {
        up: u32,
        down: u32,
    },
    /// The worker receives nothing (replies, timers) for this long (µs, modulo 4 L).
    Stall(u8, u32),
    Crash(u8),
    /// A new incarnation (new token) in this slot, or a first start.
    Restart(u8),
    Cancel(u8),
    FlushStore,
    /// The server clock steps forward by `x` modulo (G + 1) µs, at most once
    /// per 4 L. A larger step can break exclusivity, as documented
    /// (docs/protocol.md, "Limits"); an early version of this target without the bound found
    /// exactly that within minutes.
    ServerJump(u32),
}

enum Payload {
    Request {
        keys: [String; lease_core::KEY_COUNT],
        args: Vec<String>,
        echo: bool,
    },
    Reply(Result<Vec<i64>, String>),
}

struct Msg {
    due: u64,
    slot: usize,
    incarnation: u32,
    id: RequestId,
    payload: Payload,
}

struct Proc {
    worker: Worker,
    app: PairStream,
    incarnation: u32,
    offset_us: u64,
    drift_ppm: i64,
    stalled_until: u64,
    /// `poll_timeout`, as a local microsecond count.
    timer: Option<u64>,
}

struct World {
    mode: Mode,
    options: Options,
    l_us: u64,
    base: Instant,
    now: u64,
    server_base: i64,
    server_jump: i64,
    /// True time of the last server clock step.
    last_jump: Option<u64>,
    /// `G = g L` in µs, rounded as the worker rounds it.
    g_us: u64,
    store: SimStore,
    net: VecDeque<Msg>,
    up: u64,
    down: u64,
    procs: [Option<Proc>; SLOTS],
    clocks: [ClockSpec; SLOTS],
    tokens: [u128; SLOTS],
    incarnations: u32,
    /// What the judge is given: the leases held at every check.
    history: Vec<Record>,
    /// Per slot, the lease last written as held: (worker, i, n, token).
    written: [Option<(String, u32, u32, u64)>; SLOTS],
}

/// A local clock reading at true time `t`: monotone, rate error `drift_ppm`.
fn local_of(offset_us: u64, drift_ppm: i64, t: u64) -> u64 {
    let t = t as i128;
    (offset_us as i128 + t + t * drift_ppm as i128 / 1_000_000) as u64
}

impl Proc {
    fn local(&self, t: u64) -> u64 {
        local_of(self.offset_us, self.drift_ppm, t)
    }

    /// The first true instant at which the local clock reads `local`.
    fn true_of(&self, local: u64) -> u64 {
        let x = local as i128 - self.offset_us as i128;
        if x <= 0 {
            return 0;
        }
        let mut t = (x * 1_000_000 / (1_000_000 + self.drift_ppm as i128)).max(0) as u64;
        t = t.saturating_sub(2);
        while self.local(t) < local {
            t += 1;
        }
        t
    }
}

impl World {
    fn instant(&self, local: u64) -> Instant {
        self.base + Duration::from_micros(local)
    }

    fn server_now(&self) -> i64 {
        self.server_base + self.now as i64 + self.server_jump
    }

    fn start(&mut self, slot: usize) {
        self.incarnations += 1;
        let c = self.clocks[slot];
        let offset_us = u64::from(c.offset_ms) * 1000;
        let drift_ppm = i64::from(c.drift) % 901;
        // Tokens are random and new on every start: never let two workers
        // share one (the store would count them as one member). An earlier
        // version derived them by XOR, which the fuzzer made collide.
        let token = (self.tokens[slot] & !0xffff_ffff) | u128::from(self.incarnations);
        let now = self.instant(local_of(offset_us, drift_ppm, self.now));
        let worker = Worker::new(
            &self.options,
            Identity::from_bits_same_worker_if_reused(token),
            now,
        )
        .expect("valid options");
        self.procs[slot] = Some(Proc {
            worker,
            app: PairStream::new(),
            incarnation: self.incarnations,
            offset_us,
            drift_ppm,
            stalled_until: 0,
            timer: None,
        });
        self.drive(slot);
    }

    /// The driver's part after every input to `slot`.
    fn drive(&mut self, slot: usize) {
        let Some(p) = self.procs[slot].as_mut() else {
            return;
        };
        let local = p.local(self.now);
        let now = self.base + Duration::from_micros(local);
        let mut sends = Vec::new();
        let mut spins = 0;
        loop {
            let stopped = p.worker.is_stopped();
            while let Some(t) = p.worker.poll_transmit() {
                assert!(!stopped, "transmit after Stopped");
                sends.push((t.id, t.keys.map(str::to_owned), t.args.to_vec()));
            }
            while let Some(e) = p.worker.poll_event() {
                let _granted: Option<Lease> = p.app.on_event(e, now);
            }
            p.app
                .check_worker(&p.worker, now, Duration::from_micros(self.l_us));
            match p.worker.poll_timeout() {
                Some(t) if t <= now => {
                    spins += 1;
                    assert!(
                        spins <= 3,
                        "poll_timeout stays at or before now: the driver would spin"
                    );
                    p.worker.handle_timeout(now);
                }
                t => {
                    assert!(
                        t.is_some() || p.app.stopped(),
                        "no timeout while running: the worker would never act again"
                    );
                    p.timer = t.map(|t| t.saturating_duration_since(self.base).as_micros() as u64);
                    break;
                }
            }
        }
        let incarnation = p.incarnation;
        for (id, keys, args) in sends {
            self.net.push_back(Msg {
                due: self.now + self.up,
                slot,
                incarnation,
                id,
                payload: Payload::Request {
                    keys,
                    args,
                    echo: false,
                },
            });
        }
    }

    fn with_worker(&mut self, slot: usize, f: impl FnOnce(&mut Worker, Instant)) {
        let Some(p) = self.procs[slot].as_mut() else {
            return;
        };
        let now = self.base + Duration::from_micros(p.local(self.now));
        f(&mut p.worker, now);
        self.drive(slot);
    }

    /// Writes what every live worker holds at the current true instant
    /// into the history: a lease that appeared is an `own`, one that is gone
    /// or was replaced (a renewal, a new pair) a `release`, both at `now`.
    /// Two leases overlap in the history exactly when both were held at
    /// one of these instants.
    fn observe(&mut self) {
        for slot in 0..SLOTS {
            let held = self.procs[slot].as_ref().and_then(|p| {
                let now = self.instant(p.local(self.now));
                let l = p.worker.lease_at(now)?;
                let name = format!("w{slot}.{}", p.incarnation);
                let pair = l.pair()?;
                Some((name, pair.i(), pair.n(), l.token()))
            });
            if held == self.written[slot] {
                continue;
            }
            if let Some((name, i, n, _)) = self.written[slot].take() {
                self.history.push(Record::release(name, i, n, self.now));
            }
            if let Some((name, i, n, token)) = &held {
                self.history
                    .push(Record::own(name.clone(), *i, *n, *token, self.now));
            }
            self.written[slot] = held;
        }
    }

    /// The judge's verdict on the whole run.
    fn judge(&self) {
        let checker = lease_history::Checker::new(&self.history, Some(self.now));
        let summary = checker.summary();
        let found: Vec<String> = checker
            .violations()
            .iter()
            .map(ToString::to_string)
            .chain(checker.fencing_violations().iter().map(ToString::to_string))
            .chain(checker.anomalies().iter().map(ToString::to_string))
            .collect();
        assert!(summary.is_ok(), "{summary}\n{}", found.join("\n"));
    }

    fn msg(&self, pick: u8) -> Option<usize> {
        (!self.net.is_empty()).then(|| usize::from(pick) % self.net.len())
    }

    fn slot(&self, pick: u8) -> usize {
        usize::from(pick) % SLOTS
    }

    /// The next thing due: a message (index) or a timer (slot), and when.
    fn next(&self) -> Option<(u64, Result<usize, usize>)> {
        let mut best: Option<(u64, Result<usize, usize>)> = None;
        for (i, m) in self.net.iter().enumerate() {
            let due = match self.procs[m.slot].as_ref() {
                Some(p) if matches!(m.payload, Payload::Reply(_)) => m.due.max(p.stalled_until),
                _ => m.due,
            };
            if best.is_none_or(|(t, _)| due < t) {
                best = Some((due, Ok(i)));
            }
        }
        for (slot, p) in self.procs.iter().enumerate() {
            let Some(p) = p else { continue };
            if let Some(local) = p.timer {
                let due = p.true_of(local).max(p.stalled_until);
                if best.is_none_or(|(t, _)| due < t) {
                    best = Some((due, Err(slot)));
                }
            }
        }
        best
    }

    fn step(&mut self) {
        let Some((due, what)) = self.next() else {
            return;
        };
        self.now = self.now.max(due);
        match what {
            Err(slot) => self.with_worker(slot, |w, now| w.handle_timeout(now)),
            Ok(i) => {
                let m = self.net.remove(i).unwrap();
                match m.payload {
                    Payload::Request { keys, args, echo } => {
                        let keys_ref = keys.each_ref().map(String::as_str);
                        let r = self
                            .store
                            .execute(self.mode, self.server_now(), &keys_ref, &args)
                            .map_err(|e| e.to_string());
                        if !echo {
                            self.net.push_back(Msg {
                                due: self.now + self.down,
                                payload: Payload::Reply(r),
                                ..m
                            });
                        }
                    }
                    Payload::Reply(r) => self.deliver(m.slot, m.incarnation, m.id, r),
                }
            }
        }
    }

    fn deliver(
        &mut self,
        slot: usize,
        incarnation: u32,
        id: RequestId,
        r: Result<Vec<i64>, String>,
    ) {
        if self.procs[slot]
            .as_ref()
            .is_none_or(|p| p.incarnation != incarnation)
        {
            return;
        }
        self.with_worker(slot, |w, now| match r {
            Ok(v) => {
                let _ = w.handle_reply(now, id, &v);
            }
            Err(e) => w.handle_failure(now, id, &e),
        });
    }

    fn apply(&mut self, op: Op) {
        let four_l = 4 * self.l_us;
        match op {
            Op::Step => self.step(),
            Op::Steps(n) => {
                for _ in 0..(n % 64) {
                    self.step();
                    self.observe();
                }
            }
            Op::Advance(us) => self.now += u64::from(us) % four_l,
            Op::Wake(s) => {
                let s = self.slot(s);
                self.with_worker(s, |w, now| w.handle_timeout(now));
            }
            Op::Drop(m) => {
                if let Some(i) = self.msg(m) {
                    self.net.remove(i);
                }
            }
            Op::Delay(m, us) => {
                if let Some(i) = self.msg(m) {
                    self.net[i].due += u64::from(us) % four_l;
                }
            }
            Op::Duplicate(m, extra) => {
                if let Some(i) = self.msg(m) {
                    let src = &self.net[i];
                    let payload = match &src.payload {
                        Payload::Request { keys, args, .. } => Payload::Request {
                            keys: keys.clone(),
                            args: args.clone(),
                            echo: true,
                        },
                        Payload::Reply(r) => Payload::Reply(r.clone()),
                    };
                    let copy = Msg {
                        due: src.due + u64::from(extra),
                        slot: src.slot,
                        incarnation: src.incarnation,
                        id: src.id,
                        payload,
                    };
                    self.net.push_back(copy);
                }
            }
            Op::Fail(m) => {
                if let Some(i) = self.msg(m)
                    && matches!(self.net[i].payload, Payload::Request { echo: false, .. })
                {
                    self.net[i].payload = Payload::Reply(Err("connection reset".into()));
                }
            }
            Op::GiveUp(m) => {
                if let Some(i) = self.msg(m) {
                    let (slot, inc, id) =
                        (self.net[i].slot, self.net[i].incarnation, self.net[i].id);
                    if self.procs[slot]
                        .as_ref()
                        .is_some_and(|p| p.incarnation == inc)
                    {
                        self.with_worker(slot, |w, now| w.handle_failure(now, id, &"gave up"));
                    }
                }
            }
            Op::Latency { up, down } => {
                let half = self.l_us / 2 + 1;
                self.up = u64::from(up) % half;
                self.down = u64::from(down) % half;
            }
            Op::Stall(s, us) => {
                let s = self.slot(s);
                let until = self.now + u64::from(us) % four_l;
                if let Some(p) = self.procs[s].as_mut() {
                    p.stalled_until = until;
                }
            }
            Op::Crash(s) => {
                let s = self.slot(s);
                self.procs[s] = None;
            }
            Op::Restart(s) => {
                let s = self.slot(s);
                self.start(s);
            }
            Op::Cancel(s) => {
                let s = self.slot(s);
                self.with_worker(s, |w, now| w.handle_cancel(now));
            }
            Op::FlushStore => self.store.flush(),
            Op::ServerJump(x) => {
                if self.last_jump.is_none_or(|t| self.now >= t + four_l) {
                    self.server_jump += (u64::from(x) % (self.g_us + 1)) as i64;
                    self.last_jump = Some(self.now);
                }
            }
        }
    }
}

fuzz_target!(|input: Input| {
    let interval_ms: u64 = match input.interval {
        IntervalMs::Small(x) => 1 + u64::from(x),
        IntervalMs::Medium(x) => 1 + u64::from(x),
    };
    let l_us = interval_ms * 1000;
    let mode = if input.arrival {
        Mode::Arrival
    } else {
        Mode::Ranked
    };
    let gap = f64::from(1 + input.gap % 499) / 1000.0;
    let options = Options::new("fuzz", Duration::from_millis(interval_ms)).with_gap(gap);
    // Whole pairs, a plain cancel: the stream's alternation rule (rule 11)
    // that this target checks is the whole-pair one.
    let options = match mode {
        Mode::Arrival => options.with_counting(Counting::Arrival),
        Mode::Ranked => options
            .with_handover(Handover::WholePairs)
            .with_graceful_leave(false),
    };
    let half = l_us / 2 + 1;
    let mut world = World {
        mode,
        options,
        l_us,
        base: Instant::now(),
        now: 0,
        server_base: (1_600_000_000 + i64::from(input.server_base)) * 1_000_000,
        server_jump: 0,
        last_jump: None,
        g_us: (gap * l_us as f64).round() as u64,
        store: SimStore::new(),
        net: VecDeque::new(),
        up: u64::from(input.up) % half,
        down: u64::from(input.down) % half,
        procs: [None, None, None],
        clocks: input.clocks,
        tokens: input.tokens,
        incarnations: 0,
        history: Vec::new(),
        written: [None, None, None],
    };
    let n = if input.third { 3 } else { 2 };
    for slot in 0..n {
        world.start(slot);
    }
    world.observe();
    for op in input.ops {
        world.apply(op);
        world.observe();
    }
    world.judge();
});
