//! A [`Worker`] driven by hand in steady state, with the script's replies
//! written out as the server would return them (as in
//! `crates/lease-core/tests/state_machine.rs`): the worker holds slot
//! `(i, n)` of a settled group and renews it once per interval.
//!
//! Used by the allocation count (`bin/alloc-count.rs`) and the criterion
//! benchmarks of each `handle_*` call (`benches/core.rs`).

use std::time::{Duration, Instant};

use lease_core::{Counting, Handover, Identity, Mode, Options, RequestId, Worker};

/// The server's interval number at local time zero.
const K0: u64 = 1_700_000;

/// One worker of a settled group, and the server it talks to.
#[derive(Debug)]
pub struct Steady {
    /// The state machine under test.
    pub worker: Worker,
    t0: Instant,
    /// The local instant of the last input.
    last: Instant,
    interval_us: i64,
    /// Server time (µs since the epoch) minus local time since `t0` (µs).
    offset_us: i64,
    /// The position and count every counted reply reports.
    slot: (i64, i64),
}

/// A registration the worker sent: its id, the interval its keys named,
/// and the local instant it was sent.
#[derive(Clone, Copy, Debug)]
pub struct Sent {
    /// Request id to answer.
    pub id: RequestId,
    /// The interval named in the keys (`ARGV[3]`).
    pub k: u64,
    /// When it was sent.
    pub at: Instant,
}

/// Round trip of every simulated registration: executed 100 µs after the
/// send, answered 200 µs after it.
pub const EXEC: Duration = Duration::from_micros(100);
/// See [`EXEC`].
pub const RTT: Duration = Duration::from_micros(200);

impl Steady {
    /// A worker of `mode` in group `g` with interval `interval` that holds
    /// slot `(i, n)`: the clock probe and the registrations until the lease
    /// is granted have already happened, and the events are drained.
    pub fn new(mode: Mode, interval: Duration, i: u32, n: u32) -> Self {
        let t0 = Instant::now();
        let options: Options = Options::new("g", interval);
        let options = match mode {
            Mode::Ranked => options.with_handover(Handover::WholePairs),
            Mode::Arrival => options.with_counting(Counting::Arrival),
        };
        let worker = Worker::new(&options, Identity::seeded(0x5eed, 0), t0).expect("valid options");
        let interval_us = interval.as_micros() as i64;
        let mut s = Self {
            worker,
            t0,
            last: t0,
            interval_us,
            // Local time 0 is 30 % into interval K0.
            offset_us: K0 as i64 * interval_us + interval_us * 3 / 10,
            slot: (i64::from(i), i64::from(n)),
        };
        for _ in 0..4 {
            s.register();
        }
        assert!(
            s.worker.lease_at(s.now()).is_some(),
            "the worker holds a lease after settling"
        );
        s
    }

    /// The local instant of the last input.
    pub fn now(&self) -> Instant {
        self.last
    }

    /// The server's interval number at local instant `at`.
    pub fn server_interval(&self, at: Instant) -> u64 {
        let local = at.saturating_duration_since(self.t0).as_micros() as i64;
        ((self.offset_us + local) / self.interval_us) as u64
    }

    /// The script's reply to `sent`, executed at local instant `exec`.
    pub fn reply(&self, sent: &Sent, exec: Instant) -> Vec<i64> {
        let mut out = Vec::with_capacity(9);
        self.reply_into(sent, exec, &mut out);
        out
    }

    /// [`Steady::reply`] into a buffer the caller reuses (no allocation).
    pub fn reply_into(&self, sent: &Sent, exec: Instant, out: &mut Vec<i64>) {
        let local = exec.saturating_duration_since(self.t0).as_micros() as i64;
        let server = self.offset_us + local;
        let k = server / self.interval_us;
        let (sec, usec) = (server / 1_000_000, server % 1_000_000);
        out.clear();
        if k as u64 != sent.k {
            out.extend_from_slice(&[0, k, sec, usec]);
        } else if self.worker.mode() == lease_core::Mode::Arrival {
            out.extend_from_slice(&[1, k, sec, usec, self.slot.0, self.slot.1]);
        } else {
            // A settled keeper's (rule 19): registered in k-1, nothing read
            // of closed k-2.
            let (position, count) = self.slot;
            out.extend_from_slice(&[1, k, sec, usec, position, count, 1, -1, -1]);
        }
    }

    /// Takes the registration the last input made due, if any; otherwise
    /// fires the next timer (at [`Worker::poll_timeout`]) until one is due.
    pub fn fire(&mut self) -> Sent {
        if let Some(sent) = self.take(self.last) {
            return sent;
        }
        loop {
            let at = self.worker.poll_timeout().expect("a timer is set");
            self.last = at;
            self.worker.handle_timeout(at);
            if let Some(sent) = self.take(at) {
                return sent;
            }
            self.drain();
        }
    }

    /// Takes the registration the last input made due, if any.
    pub fn take(&mut self, at: Instant) -> Option<Sent> {
        let t = self.worker.poll_transmit()?;
        let k = t.args[2].parse().expect("ARGV[3] is the interval");
        Some(Sent { id: t.id, k, at })
    }

    /// Drains the events; returns how many there were.
    pub fn drain(&mut self) -> usize {
        std::iter::from_fn(|| self.worker.poll_event()).count()
    }

    /// One whole registration: fire, answer promptly, drain the events.
    /// Returns the events drained (0 in steady state: a renewal is silent).
    pub fn register(&mut self) -> usize {
        let sent = self.fire();
        let reply = self.reply(&sent, sent.at + EXEC);
        self.last = sent.at + RTT;
        self.worker
            .handle_reply(self.last, sent.id, &reply)
            .expect("a well-formed reply");
        self.drain()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settled_worker_renews_silently_in_both_modes() {
        for mode in [Mode::Ranked, Mode::Arrival] {
            let mut s = Steady::new(mode, Duration::from_millis(100), 2, 5);
            let lease = s.worker.lease_at(s.now()).cloned().expect("held");
            assert_eq!(lease.pair().map(|p| (p.i(), p.n())), Some((2, 5)));
            for _ in 0..50 {
                assert_eq!(s.register(), 0, "{mode}: a renewal emits nothing");
            }
            assert!(lease.is_valid_at(s.now()), "{mode}: renewed");
        }
    }
}
