//! One `Worker` driven by an arbitrary sequence of inputs: time advancing by
//! arbitrary amounts, timer calls (due or spurious), replies to any request
//! ever sent (outstanding, answered, abandoned) that are arbitrary integers,
//! replies computed by `lease_sim::SimStore` from the transmit's keys and
//! arguments, or forged well-formed replies (a server time inside the named
//! interval or not, arbitrary positions and counts), failures, undecodable
//! replies, server clock steps, store flushes and cancellation.
//!
//! The harness is the driver loop documented on `Worker`: after every input
//! it drains `poll_transmit`, then `poll_event`, then honours `poll_timeout`.
//! Checked after every input (see docs/fuzzing.md for the list):
//! no panic; the pair stream (opening idle pair, never two leases without an
//! idle pair between, `Released` always followed by `Pair(None)`, no idle pair
//! twice); `Released` matches the held lease, is not later than the input
//! that produced it and is exactly where the handed-out lease stops being
//! valid; `lease_at(now)` is valid at `now`, has `i < n`, is the lease the
//! application was last given and ends within 2 L; nothing after `Stopped`;
//! `poll_timeout` never makes the driver spin (at most 3 non-advancing
//! timeouts in a row) and is `None` only after `Stopped`.
#![no_main]

use std::time::{Duration, Instant};

use arbitrary::Arbitrary;
use lease_core::{
    Counting, Handover, Identity, MAX_SERVER_SECONDS, Mode, Options, ReplyError, RequestId, Worker,
};
use lease_fuzz::PairStream;
use lease_sim::SimStore;
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum IntervalMs {
    Small(u8),
    Medium(u16),
    Day,
}

#[derive(Arbitrary, Debug)]
struct Input {
    arrival: bool,
    interval: IntervalMs,
    /// Gap in thousandths, mapped into 1..=499.
    gap: u16,
    token: u128,
    /// Server clock at the worker's creation: 2020-09 plus this many seconds.
    server_base: u32,
    server_sub_us: u32,
    ops: Vec<Op>,
}

#[derive(Arbitrary, Debug)]
enum Pick {
    /// The newest transmit.
    Latest,
    /// The n-th newest (wraps), answered or not: duplicates and stale replies.
    Back(u8),
}

#[derive(Arbitrary, Debug)]
enum Exec {
    /// Executed on the simulated server clock somewhere between the send and
    /// now (fraction /255): a causal reply.
    Causal(u8),
    /// Executed in the interval the keys named plus `delta`, at `frac`/65536
    /// of it, whatever the clock says.
    InInterval { delta: i8, frac: u16 },
    /// Any server time (microseconds since the epoch), up to `i64::MAX`.
    Absolute(u64),
    /// Any server time `Reply::parse` accepts (up to `MAX_SERVER_SECONDS`).
    Late(u64),
}

#[derive(Arbitrary, Debug)]
enum Status {
    /// Counted if the server's interval is the one the keys named, else the
    /// wrong-interval answer: what the script does.
    Auto,
    Counted,
    Wrong,
}

#[derive(Arbitrary, Debug)]
enum Num {
    /// -1: absent.
    Absent,
    Small(u8),
    /// The value sent in the previous forged reply (helps reach agreement).
    SameAsLast,
    Raw(i64),
}

#[derive(Arbitrary, Debug)]
enum ReplySpec {
    Raw(Vec<i64>),
    /// What a real store answers: `SimStore` runs the transmit.
    Store(Exec),
    Forged {
        exec: Exec,
        status: Status,
        position: Num,
        count: Num,
        /// Ranked: the entry in closed k-1 is only a reservation (rule 19).
        reserved: bool,
        /// Ranked: closed k-2 as the script read it, and the positions
        /// inherited from it (the parser rejects what cannot come together).
        older: Option<(u8, u8)>,
        inherited: Vec<u8>,
    },
}

#[derive(Arbitrary, Debug)]
enum Op {
    AdvanceMicros(u16),
    AdvanceMillis(u16),
    /// `(whole + frac/256) * L`.
    AdvanceIntervals {
        whole: u8,
        frac: u8,
    },
    AdvanceDays(u8),
    /// Advance to `poll_timeout()` (if later) and call `handle_timeout`.
    ToTimer,
    /// `handle_timeout(now)`, due or not.
    Timeout,
    Reply {
        to: Pick,
        reply: ReplySpec,
    },
    Failure {
        to: Pick,
    },
    /// The client could not decode the reply (a failure: `NotIntegers`).
    NotIntegers {
        to: Pick,
    },
    Cancel,
    /// Step the server clock (ms, either direction).
    ShiftServer(i32),
    /// The store restarts and loses every key.
    FlushStore,
    /// Ask `lease_at` at a later instant, without an input.
    LookAhead(u32),
    /// A healthy stretch, so the fuzzer reaches leases: `rounds` times, go
    /// to the timer and, if it sent a request, answer it from the store
    /// `rtt` µs later (modulo L).
    Healthy {
        rounds: u8,
        rtt: u16,
    },
}

/// One transmit as the driver saw it.
struct Sent {
    id: RequestId,
    keys: [String; lease_core::KEY_COUNT],
    args: Vec<String>,
    sent_us: u64,
}

struct Harness {
    w: Worker,
    app: PairStream,
    t0: Instant,
    l_us: u64,
    mode: Mode,
    now_us: u64,
    server_base: i64,
    server_shift: i64,
    sent: Vec<Sent>,
    store: SimStore,
    last: (i64, i64),
}

impl Harness {
    fn now(&self) -> Instant {
        self.t0 + Duration::from_micros(self.now_us)
    }

    fn server_at(&self, local_us: u64) -> i64 {
        self.server_base + local_us as i64 + self.server_shift
    }

    /// The driver's part after every input.
    fn drive(&mut self) {
        let mut spins = 0;
        loop {
            let stopped = self.w.is_stopped();
            while let Some(t) = self.w.poll_transmit() {
                assert!(!stopped, "transmit after Stopped");
                assert!(
                    t.expires_at > self.t0 + Duration::from_micros(self.now_us),
                    "transmit already expired"
                );
                self.sent.push(Sent {
                    id: t.id,
                    keys: t.keys.map(str::to_owned),
                    args: t.args.to_vec(),
                    sent_us: self.now_us,
                });
            }
            let now = self.now();
            while let Some(e) = self.w.poll_event() {
                self.app.on_event(e, now);
            }
            self.app
                .check_worker(&self.w, now, Duration::from_micros(self.l_us));
            match self.w.poll_timeout() {
                Some(t) if t <= now => {
                    spins += 1;
                    assert!(
                        spins <= 3,
                        "poll_timeout stays at or before now: the driver would spin"
                    );
                    self.w.handle_timeout(now);
                }
                Some(_) => break,
                None => {
                    assert!(
                        self.app.stopped(),
                        "no timeout while running: the worker would never act again"
                    );
                    break;
                }
            }
        }
    }

    fn advance(&mut self, us: u64) {
        // Stay within a few thousand years: far beyond any real run.
        self.now_us = self.now_us.saturating_add(us).min(1 << 56);
    }

    fn pick(&self, p: &Pick) -> Option<usize> {
        let n = self.sent.len();
        if n == 0 {
            return None;
        }
        Some(match p {
            Pick::Latest => n - 1,
            Pick::Back(b) => n - 1 - usize::from(*b) % n,
        })
    }

    fn exec_time(&self, s: &Sent, exec: &Exec) -> i64 {
        let l_us = self.l_us as i64;
        match *exec {
            Exec::Causal(f) => {
                let span = self.now_us.saturating_sub(s.sent_us);
                self.server_at(s.sent_us + span * u64::from(f) / 255)
            }
            Exec::InInterval { delta, frac } => {
                let k: i64 = s.args[2].parse().unwrap();
                let k = (k + i64::from(delta)).max(0);
                k * l_us + (l_us * i64::from(frac)) / 65536
            }
            Exec::Absolute(us) => us.min(i64::MAX as u64) as i64,
            Exec::Late(us) => (us % ((MAX_SERVER_SECONDS + 1) * 1_000_000)) as i64,
        }
    }

    fn num(&self, n: &Num, last: i64) -> i64 {
        match *n {
            Num::Absent => -1,
            Num::Small(x) => i64::from(x % 8),
            Num::SameAsLast => last,
            Num::Raw(v) => v,
        }
    }

    fn reply(&mut self, to: &Pick, spec: ReplySpec) {
        let Some(at) = self.pick(to) else { return };
        let now = self.now();
        let s = &self.sent[at];
        let id = s.id;
        let values = match spec {
            ReplySpec::Raw(v) => v,
            ReplySpec::Store(exec) => {
                let exec = match exec {
                    // The store needs a sane clock; extreme times are forged below.
                    Exec::Absolute(_) | Exec::Late(_) => Exec::Causal(255),
                    e => e,
                };
                let server = self.exec_time(s, &exec);
                let keys = s.keys.each_ref().map(String::as_str);
                match self
                    .store
                    .execute(self.mode, server, &keys, &s.args)
                {
                    Ok(v) => v,
                    Err(e) => {
                        self.w.handle_failure(now, id, &e);
                        return;
                    }
                }
            }
            ReplySpec::Forged {
                exec,
                status,
                position,
                count,
                reserved,
                older,
                inherited,
            } => {
                let server = self.exec_time(s, &exec);
                let l_ms = self.l_us as i64 / 1000;
                let k = (server / 1000) / l_ms;
                let named: i64 = s.args[2].parse().unwrap();
                let counted = match status {
                    Status::Auto => k == named,
                    Status::Counted => true,
                    Status::Wrong => false,
                };
                let mut v = vec![
                    i64::from(counted),
                    k,
                    server / 1_000_000,
                    server % 1_000_000,
                ];
                if counted {
                    let p = self.num(&position, self.last.0);
                    let mut c = self.num(&count, self.last.1);
                    if let (Num::Small(_), Num::Small(x)) = (&position, &count) {
                        // Keep a small rank below its count most of the time.
                        c = p + 1 + i64::from(x / 8 % 4);
                    }
                    self.last = (p, c);
                    v.extend([p, c]);
                    if self.mode == Mode::Ranked {
                        // Rule 19's fields: registered (-1 when absent),
                        // then what the script read of closed k-2.
                        let registered = if p == -1 { -1 } else { i64::from(!reserved) };
                        let (op, oc) = older.map_or((-1, -1), |(op, oc)| {
                            let oc = i64::from(oc);
                            (i64::from(op).min(oc - 1), oc)
                        });
                        v.extend([registered, op, oc]);
                        v.extend(inherited.iter().take(8).map(|&q| i64::from(q)));
                    }
                }
                v
            }
        };
        let r = self.w.handle_reply(now, id, &values);
        if let Err(e) = r {
            let _ = e.to_string();
        }
    }

    fn step(&mut self, op: Op) {
        let l_us = self.l_us;
        match op {
            Op::AdvanceMicros(us) => return self.advance(u64::from(us)),
            Op::AdvanceMillis(ms) => return self.advance(u64::from(ms) * 1000),
            Op::AdvanceIntervals { whole, frac } => {
                return self.advance(u64::from(whole) * l_us + l_us * u64::from(frac) / 256);
            }
            Op::AdvanceDays(d) => return self.advance(u64::from(d) * 86_400_000_000),
            Op::LookAhead(us) => {
                let later = self.now() + Duration::from_micros(u64::from(us));
                return self.app.check_lease_at(&self.w, later);
            }
            Op::ShiftServer(ms) => {
                self.server_shift += i64::from(ms) * 1000;
                return;
            }
            Op::FlushStore => return self.store.flush(),
            Op::ToTimer => {
                if let Some(t) = self.w.poll_timeout() {
                    let due = t.saturating_duration_since(self.t0).as_micros() as u64;
                    self.advance(due.saturating_sub(self.now_us));
                }
                self.w.handle_timeout(self.now());
            }
            Op::Timeout => self.w.handle_timeout(self.now()),
            Op::Reply { to, reply } => self.reply(&to, reply),
            Op::Failure { to } => {
                if let Some(at) = self.pick(&to) {
                    self.w
                        .handle_failure(self.now(), self.sent[at].id, &"connection reset");
                }
            }
            Op::NotIntegers { to } => {
                if let Some(at) = self.pick(&to) {
                    let id = self.sent[at].id;
                    self.w
                        .handle_failure(self.now(), id, &ReplyError::NotIntegers);
                }
            }
            Op::Cancel => self.w.handle_cancel(self.now()),
            Op::Healthy { rounds, rtt } => {
                for _ in 0..rounds % 32 {
                    let before = self.sent.len();
                    self.step(Op::ToTimer);
                    if self.sent.len() > before {
                        self.advance(u64::from(rtt) % self.l_us);
                        self.reply(&Pick::Latest, ReplySpec::Store(Exec::Causal(128)));
                        self.drive();
                    }
                }
                return;
            }
        }
        self.drive();
    }
}

fuzz_target!(|input: Input| {
    let interval_ms: u64 = match input.interval {
        IntervalMs::Small(x) => 1 + u64::from(x),
        IntervalMs::Medium(x) => 1 + u64::from(x),
        IntervalMs::Day => 86_400_000,
    };
    let mode = if input.arrival {
        Mode::Arrival
    } else {
        Mode::Ranked
    };
    let gap = f64::from(1 + input.gap % 499) / 1000.0;
    let options: Options = Options::new("fuzz", Duration::from_millis(interval_ms)).with_gap(gap);
    // Whole pairs, a plain cancel: the stream's alternation rule (rule 11)
    // that this target checks is the whole-pair one.
    let options = match mode {
        Mode::Arrival => options.with_counting(Counting::Arrival),
        Mode::Ranked => options
            .with_handover(Handover::WholePairs)
            .with_graceful_leave(false),
    };
    let t0 = Instant::now();
    let w = Worker::new(
        &options,
        Identity::from_bits_same_worker_if_reused(input.token),
        t0,
    )
    .expect("valid options");
    let mut h = Harness {
        w,
        app: PairStream::new(),
        t0,
        l_us: interval_ms * 1000,
        mode,
        now_us: 0,
        server_base: (1_600_000_000 + i64::from(input.server_base)) * 1_000_000
            + i64::from(input.server_sub_us % 1_000_000),
        server_shift: 0,
        sent: Vec::new(),
        store: SimStore::new(),
        last: (0, 1),
    };
    h.drive();
    for op in input.ops {
        h.step(op);
    }
});
