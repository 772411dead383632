//! When to send (rules 8, 9 and 17 of docs/protocol.md): the firing time in
//! each interval, retries with backoff until the band ends, adaptive
//! timeouts, and the liveness net that keeps a running worker registering.

use std::fmt::Display;
use std::time::Duration;

use crate::diag;
use crate::options::Mode;

use super::Worker;
use super::identity::RequestId;
use super::request::{PROBE_INTERVAL, Pending};

/// How many requests (one live, the rest timed out but still acceptable
/// under Ranked counting) are remembered at once.
const MAX_PENDING: usize = 8;

/// When to send next.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Schedule {
    /// Local time of the next send, if one is due.
    pub(super) fire_at: Option<i64>,
    /// The interval aimed at, once known.
    pub(super) target: Option<u64>,
    /// Failures in a row, for backoff.
    pub(super) attempt: u32,
    /// Wrong-interval answers in a row.
    pub(super) mismatches: u32,
}

impl Schedule {
    /// Aims at interval `m`, firing at local `at`.
    pub(super) fn aim(&mut self, m: u64, at: i64) {
        self.target = Some(m);
        self.fire_at = Some(at);
    }
}

impl Worker {
    /// Rule 8: server time of the registration aimed at interval `m`.
    /// Arrival fires at the original protocol's slots, so firing order is index
    /// order; Ranked fires early, spread by identity against a thundering
    /// herd.
    pub(super) fn fire_server(&self, m: u64) -> i64 {
        let base = m as i64 * self.cfg.l + self.cfg.g;
        match self.cfg.mode {
            Mode::Arrival => {
                let phase = self.memory.arrival_phase.unwrap_or(0.5);
                base + (phase * (self.cfg.l - 2 * self.cfg.g) as f64) as i64
            }
            Mode::Ranked => {
                base + (self.identity.spread_fraction() * self.cfg.spread as f64) as i64
            }
        }
    }

    /// Rules 8 and 17: the local instant of the registration aimed at
    /// interval `m`. Never earlier than the instant that reaches the server
    /// at `mL + G` even if the skew estimate is off by all of its
    /// uncertainty (half the round trip of its sample), so that a scheduled
    /// registration never executes too early to grant.
    pub(super) fn fire_local(&self, m: u64) -> i64 {
        let earliest =
            self.local_of((m as i64) * self.cfg.l + self.cfg.g) + self.skew.uncertainty();
        self.local_of(self.fire_server(m)).max(earliest)
    }

    /// Server time at which retries for interval `m` stop (the band's end).
    pub(super) fn band_end_server(&self, m: u64) -> i64 {
        (m as i64 + 1) * self.cfg.l - self.cfg.g
    }

    pub(super) fn local_of(&self, server: i64) -> i64 {
        server - self.skew.offset().unwrap_or(0)
    }

    pub(super) fn server_interval(&self, now: i64) -> u64 {
        let server = now + self.skew.offset().unwrap_or(0);
        u64::try_from(server.max(0) / self.cfg.l).unwrap_or(0)
    }

    /// The interval a request sent now names: the server's, from the skew
    /// estimate, or the probe interval before the first answer.
    pub(super) fn interval_to_name(&self, now: i64) -> u64 {
        if self.skew.offset().is_some() {
            self.server_interval(now)
        } else {
            PROBE_INTERVAL
        }
    }

    /// Rule 9: retry with a short backoff, `min(0.02L·2^(a-1), L/4)`, until
    /// the band ends, then aim at the next interval.
    pub(super) fn on_failure(&mut self, now: i64, error: &dyn Display) {
        self.schedule.attempt = self.schedule.attempt.saturating_add(1);
        let attempt = self.schedule.attempt;
        let exp = attempt.saturating_sub(1).min(16);
        let backoff = (self.cfg.l / 50)
            .saturating_mul(1 << exp)
            .min(self.cfg.l / 4);
        let mut fire = now + backoff.max(1);
        if let Some(offset) = self.skew.offset() {
            let current = self.server_interval(now);
            let m = self.schedule.target.unwrap_or(current).max(current);
            if fire + offset > self.band_end_server(m) {
                let next = current.max(m) + 1;
                self.schedule.target = Some(next);
                self.schedule.attempt = 0;
                fire = self.fire_local(next).max(now);
            }
        }
        self.schedule.fire_at = Some(fire);
        diag::registration_failed(&self.cfg.name, error, attempt, micros(fire - now));
    }

    /// Rule 9: Ranked times a request out on the adaptive estimate
    /// `srtt + 4 rttvar`, doubled for each consecutive failure (RFC 6298
    /// section 5.5, so a slow connection is not flooded with retries), then
    /// retries while still accepting the late reply. Arrival, where a retry
    /// is a second `INCR` that reshuffles the group, waits until the band
    /// ends, and at least `L/4` so that a registration fired in the last slot
    /// is not abandoned on a round trip longer than its slot's share of the
    /// band. Returns `(timeout_at, give_up_at)`.
    fn request_timeout(&self, now: i64, interval: u64) -> (i64, i64) {
        let floor = (self.cfg.l / 20).max(1000).min(self.cfg.l);
        let band_left = if self.skew.offset().is_some() {
            self.local_of(self.band_end_server(interval)) - now
        } else {
            self.cfg.l / 2
        };
        match self.cfg.mode {
            Mode::Ranked => {
                let backoff = 1i64 << self.schedule.attempt.min(4);
                let rto = self.rtt.timeout(self.cfg.l / 2).saturating_mul(backoff);
                let t = rto.min(band_left).max(floor);
                (now + t, now + 2 * self.cfg.l)
            }
            Mode::Arrival => {
                let t = band_left.max(self.cfg.l / 4).max(floor);
                (now + t, now + t)
            }
        }
    }

    /// Rule 9 for a request that timed out: Arrival abandons it (its reply
    /// would be a second count), Ranked keeps accepting its reply (a hedge).
    pub(super) fn on_request_timeouts(&mut self, now: i64) {
        let due = self
            .pending
            .iter()
            .position(|p| !p.timed_out && p.timeout_at <= now);
        if let Some(i) = due {
            match self.cfg.mode {
                Mode::Arrival => {
                    self.pending.remove(i);
                }
                Mode::Ranked => self.pending[i].timed_out = true,
            }
            self.on_failure(now, &"timed out");
        }
        self.pending.retain(|p| p.give_up_at > now);
    }

    /// Liveness net: a running worker always has a request in flight or a
    /// registration scheduled. If a reply was ignored (stale, or nothing new)
    /// while it answered the only live request, aim at the interval after the
    /// newest one counted, or register now if that one has begun.
    fn ensure_scheduled(&mut self, now: i64) {
        let idle = self.schedule.fire_at.is_none()
            && self.ready.is_none()
            && !self.pending.iter().any(|p| !p.timed_out);
        if !self.is_running() || !idle {
            return;
        }
        let fire = match (self.skew.offset(), self.memory.newest) {
            (Some(_), Some((k, _))) => {
                let m = (k + 1).max(self.server_interval(now));
                self.schedule.target = Some(m);
                self.fire_local(m).max(now)
            }
            _ => now,
        };
        self.schedule.fire_at = Some(fire);
    }

    /// Sends the registration that is due, if one is and none is live.
    pub(super) fn maybe_send(&mut self, now: i64) {
        self.ensure_scheduled(now);
        let live = self.pending.iter().any(|p| !p.timed_out);
        if !self.is_running() || self.ready.is_some() || live {
            return;
        }
        if self.schedule.fire_at.is_none_or(|at| at > now) {
            return;
        }
        if self.pending.len() >= MAX_PENDING {
            self.pending.remove(0);
        }
        let interval = self.interval_to_name(now);
        let id = self.next_request_id();
        let (timeout_at, give_up_at) = self.request_timeout(now, interval);
        let last = self.memory.last_pair.map(|p| p.i());
        let older = self.memory.older_for(interval);
        self.buffers
            .registration(&self.cfg, interval, self.identity, last, older);
        self.pending.push(Pending {
            id,
            sent_at: now,
            interval,
            timeout_at,
            timed_out: false,
            give_up_at,
        });
        self.schedule.fire_at = None;
        self.ready = Some((id, give_up_at));
    }

    pub(super) fn next_request_id(&mut self) -> RequestId {
        let id = RequestId(self.next_id);
        self.next_id += 1;
        id
    }
}

pub(super) fn micros(us: i64) -> Duration {
    Duration::from_micros(u64::try_from(us).unwrap_or(0))
}
