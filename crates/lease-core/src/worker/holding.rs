//! What the worker holds (rules 5, 7, 13 and 14 of docs/protocol.md): its
//! parts, how a certified reply grants, renews or drains them, when each
//! one ends, and the values the stream gets.
//!
//! A whole pair is the part of two equal pairs, so both handovers hold the
//! same thing; they differ only in which parts a reply may grant
//! (`super::memory::grant`).

use std::collections::VecDeque;

use crate::diag;
use crate::event::{Assignment, Event, Idle, IdleReason};
use crate::lease::{Clock, Lease, LocalClock, PartLease};
use crate::options::{Mode, NegativeControl};
use crate::part::{Part, maximal};

use super::config::Config;
use super::memory::Certified;

/// One part held, with its drain (rule 14).
#[derive(Clone, Debug)]
struct HeldPart {
    lease: PartLease,
    /// Not renewed by the newest reply: released at this local instant (its
    /// deadline minus the drain budget).
    drain_until: Option<i64>,
}

impl HeldPart {
    /// The local instant the part ends, unless renewed.
    fn end(&self) -> i64 {
        let deadline = self.lease.deadline_micros();
        self.drain_until.map_or(deadline, |d| d.min(deadline))
    }
}

/// What a certified reply says (rules 5, 13, 17 and 19).
#[derive(Clone, Copy, Debug)]
pub(super) struct Certificate {
    /// The parts the reply certifies (none, one, or more with inherited
    /// positions, rule 19).
    pub(super) parts: Certified,
    /// The interval of the registration.
    pub(super) interval: u64,
    /// Its lease deadline (rule 6), local microseconds.
    pub(super) deadline: i64,
    /// Executed too early in its interval to grant or renew (rule 17).
    pub(super) early: bool,
}

/// The parts held and the last value handed to the stream.
#[derive(Debug)]
pub(super) struct Holding {
    clock: LocalClock,
    /// The clock handed-out leases answer `is_valid()` on.
    now_clock: Clock,
    /// Oldest grant first.
    parts: Vec<HeldPart>,
    /// The maximal parts of the last value handed out (empty: idle): a new
    /// value comes only when they change.
    shown: Vec<Part>,
    /// The parts of the last value handed out, for the next value's deltas.
    shown_parts: Vec<Part>,
    /// The last value handed out, while it holds something.
    value: Option<Lease>,
    /// The interval of the registration that last granted or renewed a part.
    pub(super) interval: u64,
}

impl Holding {
    pub(super) fn new(clock: LocalClock, now_clock: Clock) -> Self {
        Self {
            clock,
            now_clock,
            parts: Vec::new(),
            shown: Vec::new(),
            shown_parts: Vec::new(),
            value: None,
            interval: 0,
        }
    }

    pub(super) fn set_now_clock(&mut self, clock: Clock) {
        self.now_clock = clock;
    }

    pub(super) fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    /// The value in force at local `now`, if any part of it is valid then.
    pub(super) fn value_at(&self, now: std::time::Instant) -> Option<&Lease> {
        self.value.as_ref().filter(|l| l.is_valid_at(now))
    }

    /// The local instant the next part ends, if any is held.
    pub(super) fn next_end(&self) -> Option<i64> {
        self.parts.iter().map(HeldPart::end).min()
    }

    /// The latest instant a part held now ends.
    pub(super) fn last_end(&self) -> Option<i64> {
        self.parts.iter().map(HeldPart::end).max()
    }

    /// Rules 5, 13 and 19 with rule 14 per part: the reply grants each
    /// certified part until `deadline`, or renews it if it is held (parts
    /// with one canonical form hold the same tasks); every other part is
    /// kept until its deadline minus the drain budget, or ends now under
    /// Arrival, which releases at the reply. Rule 17: a reply that executed
    /// too early grants and renews nothing, and leaves the parts it
    /// certified alone.
    pub(super) fn on_certified(
        &mut self,
        cfg: &Config,
        now: i64,
        c: Certificate,
        events: &mut VecDeque<Event>,
    ) {
        let mut certified = Certified::default();
        for part in c.parts.iter() {
            certified.push(part.canonical(cfg.mapping));
        }
        // A new part only while its drain end is ahead: one handed out later
        // would leave the loop less than the drain budget if the next reply
        // does not renew it.
        let drain_end = if cfg.broken(NegativeControl::GrantPastDrainEnd) {
            c.deadline
        } else {
            c.deadline.saturating_sub(cfg.drain_budget)
        };
        let mut new_parts = Certified::default();
        if !c.early {
            for part in certified.iter() {
                match self.parts.iter_mut().find(|p| p.lease.part() == part) {
                    Some(held) if now < c.deadline => {
                        held.lease.renew(c.deadline, c.interval);
                        held.drain_until = None;
                        self.interval = c.interval;
                    }
                    Some(_) => {}
                    None if now < drain_end && !new_parts.contains(part) => {
                        new_parts.push(part);
                    }
                    None => {}
                }
            }
        }
        for held in &mut self.parts {
            if certified.contains(held.lease.part()) || held.drain_until.is_some() {
                continue;
            }
            held.drain_until = Some(drain_until(cfg, now, &held.lease));
        }
        // A kept part whose drain has already ended goes now, before the new
        // parts are added, so that no value names a part before its grant.
        self.expire(cfg, now, false, events);
        if new_parts.is_empty() {
            return;
        }
        for part in new_parts.iter() {
            diag::lease_granted(&cfg.name, part.newer());
            let lease = PartLease::new(
                part,
                c.interval,
                cfg.mapping,
                self.clock,
                self.now_clock.clone(),
                c.deadline,
            );
            self.parts.push(HeldPart {
                lease,
                drain_until: None,
            });
        }
        self.interval = c.interval;
        self.show(cfg, now, IdleReason::HandedOver, events);
    }

    /// Rule 14 for every part held (rule 16: a graceful leave serves what it
    /// holds to each part's drain end).
    pub(super) fn drain_all(&mut self, cfg: &Config, now: i64, events: &mut VecDeque<Event>) {
        for held in &mut self.parts {
            if held.drain_until.is_none() {
                held.drain_until = Some(drain_until(cfg, now, &held.lease));
            }
        }
        self.expire(cfg, now, true, events);
    }

    /// Rules 7 and 14: every part whose end (deadline, or drain) has passed
    /// ends at that instant, whenever the worker notices; one value per
    /// distinct instant, in order, so a stalled worker's history says when
    /// each one ended. `leaving`: the last part's end is a cancellation.
    pub(super) fn expire(
        &mut self,
        cfg: &Config,
        now: i64,
        leaving: bool,
        events: &mut VecDeque<Event>,
    ) {
        while let Some(end) = self.next_end() {
            if end > now {
                break;
            }
            let mut drained = false;
            self.parts.retain(|p| {
                if p.end() != end {
                    return true;
                }
                drained |= p
                    .drain_until
                    .is_some_and(|d| d <= p.lease.deadline_micros());
                p.lease.end_at(end);
                false
            });
            let reason = if leaving {
                IdleReason::Cancelled
            } else if drained {
                IdleReason::HandedOver
            } else {
                if self.parts.is_empty() {
                    diag::lease_expired(&cfg.name, self.interval, micros(now - end));
                }
                IdleReason::Expired
            };
            self.show(cfg, end, reason, events);
        }
    }

    /// Ends everything held at local `at` (never after a part's own end)
    /// and hands the idle value with `reason` to the stream: a clock
    /// stand-down, a refusal, a cancellation. Returns whether anything was
    /// held.
    pub(super) fn release_all(
        &mut self,
        cfg: &Config,
        at: i64,
        reason: IdleReason,
        events: &mut VecDeque<Event>,
    ) -> bool {
        if self.parts.is_empty() {
            return false;
        }
        let since = self.last_end().unwrap_or(at).min(at);
        for p in &self.parts {
            p.lease.end_at(at);
        }
        self.parts.clear();
        self.show(cfg, since, reason, events);
        true
    }

    /// Hands a new value to the stream if the tasks held changed (the
    /// maximal parts differ from the last value's): the lease, or the idle
    /// value with `reason` once nothing is held.
    fn show(&mut self, cfg: &Config, at: i64, reason: IdleReason, events: &mut VecDeque<Event>) {
        let now = maximal(self.parts.iter().map(|p| p.lease.part()), cfg.mapping);
        if now == self.shown {
            return;
        }
        self.shown = now;
        let since = self.clock.instant(at);
        if self.parts.is_empty() {
            self.shown_parts.clear();
            let ended = self.value.take();
            if let Some(pair) = ended.as_ref().and_then(Lease::newest_pair) {
                diag::lease_released(&cfg.name, pair, reason.as_str());
            }
            events.push_back(Event::Assignment(Assignment::Idle(Idle {
                reason,
                since,
                ended,
            })));
            return;
        }
        // The value names only the maximal parts: a part inside another one
        // adds no task, and when the outer one ends the set changes and the
        // next value names the inner one.
        let parts: Vec<PartLease> = self
            .parts
            .iter()
            .filter(|p| self.shown.contains(&p.lease.part()))
            .map(|p| p.lease.clone())
            .collect();
        let lease = Lease::new(parts, &self.shown_parts, cfg.mapping, since);
        self.shown_parts = lease.parts().iter().map(PartLease::part).collect();
        events.push_back(Event::Assignment(Assignment::Held(lease.clone())));
        self.value = Some(lease);
    }
}

/// Rule 14: the local instant an unrenewed part stops being served, decided
/// at local `now`: its deadline minus the drain budget, never before now
/// (the loop learns of the drain now, and a value it was handed must not end
/// before it); under Arrival, now. The negative control of rule 14 keeps it
/// half an interval past its deadline instead.
fn drain_until(cfg: &Config, now: i64, lease: &PartLease) -> i64 {
    let deadline = lease.deadline_micros();
    if cfg.broken(NegativeControl::OverdrainPastDeadline) {
        let past = deadline.saturating_add(cfg.l / 2);
        lease.extend_to(past);
        return past;
    }
    if cfg.mode == Mode::Arrival {
        return now;
    }
    let end = deadline.saturating_sub(cfg.drain_budget);
    if cfg.broken(NegativeControl::GrantPastDrainEnd) {
        end
    } else {
        end.max(now)
    }
}

fn micros(us: i64) -> std::time::Duration {
    std::time::Duration::from_micros(u64::try_from(us).unwrap_or(0))
}
