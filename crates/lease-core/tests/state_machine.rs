//! The state machine driven by hand, one reply at a time, with server
//! replies written out as the script would return them.

use std::time::{Duration, Instant};

#[cfg(feature = "negative-controls")]
use lease_core::NegativeControl;
use lease_core::{
    Assignment, Counting, Event, Handover, Identity, Idle, IdleReason, Lease, Mode, Options,
    RequestId, Worker,
};

/// The options these tests were written for: whole pairs, cancel without
/// leave (the graceful-leave tests turn it on), in `mode`.
fn opts(mode: Mode) -> Options {
    let o = Options::new("g", Duration::from_millis(L_MS));
    match mode {
        Mode::Ranked => o
            .with_handover(Handover::WholePairs)
            .with_graceful_leave(false),
        Mode::Arrival => o.with_counting(Counting::Arrival),
    }
}

fn held(e: &Event) -> Option<&Lease> {
    match e {
        Event::Assignment(Assignment::Held(lease)) => Some(lease),
        _ => None,
    }
}

fn idle(e: &Event) -> Option<&Idle> {
    match e {
        Event::Assignment(Assignment::Idle(idle)) => Some(idle),
        _ => None,
    }
}

/// Whether `events` is exactly the opening idle value.
fn only_started(events: &[Event]) -> bool {
    matches!(events, [e] if idle(e).is_some_and(|i| i.reason == IdleReason::Started))
}

const L_MS: u64 = 1000;

/// A Ranked counted reply as the script returns it for a member that
/// registered in the closed interval (rule 19's fields: registered, and
/// nothing read of closed `k-2`).
fn ranked_counted(k: i64, sec: i64, usec: i64, position: i64, count: i64) -> Vec<i64> {
    let registered = if position < 0 { -1 } else { 1 };
    vec![1, k, sec, usec, position, count, registered, -1, -1]
}
/// The server's interval at the start of each test.
const K: u64 = 1_700_000;

struct Harness {
    w: Worker,
    t0: Instant,
    /// Server time minus local time since t0, in microseconds.
    offset_us: i64,
    /// Local time of the last input.
    last: Duration,
}

/// A request as sent: its id and the interval its keys named.
struct Sent {
    id: RequestId,
    k: u64,
    at: Duration,
}

impl Harness {
    fn new(mode: Mode) -> Self {
        let t0 = Instant::now();
        let options = opts(mode);
        let w = Worker::new(
            &options,
            Identity::from_bits_same_worker_if_reused(1 << 100),
            t0,
        )
        .unwrap();
        // Local time 0 is server time K*L + 0.3 L.
        let offset_us = (K * L_MS * 1000 + 300_000) as i64;
        Self {
            w,
            t0,
            offset_us,
            last: Duration::ZERO,
        }
    }

    fn at(&self, local: Duration) -> Instant {
        self.t0 + local
    }

    fn server_us(&self, local: Duration) -> i64 {
        self.offset_us + local.as_micros() as i64
    }

    /// Takes the transmit that the last input made due, if any; otherwise
    /// fires the timer (at `poll_timeout`, or `now` if given) and takes the
    /// transmit it produces.
    fn send(&mut self, now: Option<Duration>) -> Sent {
        if let Some(t) = self.w.poll_transmit() {
            return Sent {
                id: t.id,
                k: t.args[2].parse().unwrap(),
                at: self.last,
            };
        }
        let at = now.unwrap_or_else(|| {
            self.w
                .poll_timeout()
                .expect("a timer is set")
                .duration_since(self.t0)
        });
        self.w.handle_timeout(self.at(at));
        self.last = at;
        let t = self.w.poll_transmit().expect("a registration is due");
        Sent {
            id: t.id,
            k: t.args[2].parse().unwrap(),
            at,
        }
    }

    /// The script's reply to `s`, executed at local time `exec`.
    fn reply(&self, s: &Sent, exec: Duration, position: i64, count: i64) -> Vec<i64> {
        let server = self.server_us(exec);
        let (sec, usec) = (server / 1_000_000, server % 1_000_000);
        let k = (server / 1000) / L_MS as i64;
        if k as u64 != s.k {
            vec![0, k, sec, usec]
        } else if self.w.mode() == Mode::Arrival {
            vec![1, k, sec, usec, position, count]
        } else {
            ranked_counted(k, sec, usec, position, count)
        }
    }

    fn deliver(&mut self, s: &Sent, exec: Duration, arrive: Duration, pos: i64, count: i64) {
        let r = self.reply(s, exec, pos, count);
        self.last = arrive;
        self.w.handle_reply(self.at(arrive), s.id, &r).unwrap();
    }

    fn events(&mut self) -> Vec<Event> {
        std::iter::from_fn(|| self.w.poll_event()).collect()
    }

    /// Probe, then three counted registrations with `(0, 1)` replies: the
    /// lease is granted at the third.
    fn settle_alone(&mut self) -> Sent {
        let ms = Duration::from_millis;
        let probe = self.send(Some(ms(0)));
        assert_eq!(probe.k, 1, "a newcomer's first request is the clock probe");
        self.deliver(&probe, ms(1), ms(2), 0, 0);
        let first = self.send(None);
        assert_eq!(
            first.k, K,
            "then it registers at once in the current interval"
        );
        self.deliver(&first, first.at + ms(1), first.at + ms(2), -1, 0);
        let second = self.send(None);
        assert_eq!(second.k, K + 1);
        self.deliver(&second, second.at + ms(1), second.at + ms(2), 0, 1);
        let third = self.send(None);
        assert_eq!(third.k, K + 2);
        self.deliver(&third, third.at + ms(1), third.at + ms(2), 0, 1);
        third
    }
}

#[test]
fn a_lone_worker_owns_0_of_1_after_two_agreeing_intervals() {
    let mut h = Harness::new(Mode::Ranked);
    assert!(only_started(&h.events()));
    let third = h.settle_alone();
    let events = h.events();
    let [Some(lease)] = events.iter().map(held).collect::<Vec<_>>()[..] else {
        panic!("expected one grant, got {events:?}");
    };
    assert_eq!(
        (lease.pair().map(|p| (p.i(), p.n())), lease.token()),
        (Some((0, 1)), K + 2)
    );
    assert!(lease.is_leader());
    // Rule 6, Ranked: D = (k+2)L from the send, shortened by the drift margin.
    let server_at_exec = h.server_us(third.at + Duration::from_millis(1));
    let d = ((K + 4) * L_MS * 1000) as i64;
    let budget = ((d - server_at_exec) as f64 * (1.0 - 1e-3)).floor() as u64 - 1;
    assert_eq!(
        lease.deadline(),
        h.at(third.at) + Duration::from_micros(budget)
    );
}

#[test]
fn late_reply_never_extends_a_lease() {
    let mut h = Harness::new(Mode::Ranked);
    h.settle_alone();
    let lease = match h.events().pop() {
        Some(Event::Assignment(Assignment::Held(l))) => l,
        other => panic!("{other:?}"),
    };
    let deadline = lease.deadline();
    // The next registration executes promptly, but its reply arrives only
    // after the lease it would renew has run out: it must not revive it.
    let fourth = h.send(None);
    assert_eq!(fourth.k, K + 3);
    let late = deadline.duration_since(h.t0) + Duration::from_millis(1);
    h.w.handle_timeout(h.at(late));
    let events = h.events();
    assert!(
        matches!(events.as_slice(), [e] if idle(e).is_some_and(|i| i.reason == IdleReason::Expired && i.since == deadline && i.ended.as_ref() == Some(&lease))),
        "{events:?}"
    );
    assert!(!lease.is_valid_at(h.at(late)));
    // The renewing reply, sent long ago, still grants: its own deadline is
    // anchored at its send and has not passed. A new lease, not the old one.
    h.deliver(&fourth, fourth.at + Duration::from_millis(1), late, 0, 1);
    let events = h.events();
    match events.as_slice() {
        [Event::Assignment(Assignment::Held(again))] => {
            assert_eq!(again.token(), K + 3, "a fresh lease with a new token");
            assert!(again.deadline() > deadline);
        }
        other => panic!("{other:?}"),
    }
    assert!(!lease.is_valid_at(h.at(late)), "the old handle stays ended");
}

#[test]
fn reply_after_its_own_deadline_grants_nothing() {
    let mut h = Harness::new(Mode::Ranked);
    let ms = Duration::from_millis;
    let probe = h.send(Some(ms(0)));
    h.deliver(&probe, ms(1), ms(2), 0, 0);
    let first = h.send(None);
    h.deliver(&first, first.at + ms(1), first.at + ms(2), -1, 0);
    let second = h.send(None);
    h.deliver(&second, second.at + ms(1), second.at + ms(2), 0, 1);
    let third = h.send(None);
    // Executed at once, but the reply comes back 2.5 intervals later: past
    // (k+2)L. It would agree, yet it must not grant.
    h.deliver(&third, third.at + ms(1), third.at + ms(2500), 0, 1);
    assert!(only_started(&h.events()));
}

#[test]
fn malformed_reply_is_an_error_and_never_a_lease() {
    let mut h = Harness::new(Mode::Ranked);
    let ms = Duration::from_millis;
    let probe = h.send(Some(ms(0)));
    h.deliver(&probe, ms(1), ms(2), 0, 0);
    let first = h.send(None);
    h.deliver(&first, first.at + ms(1), first.at + ms(2), -1, 0);
    let second = h.send(None);
    h.deliver(&second, second.at + ms(1), second.at + ms(2), 0, 1);
    let third = h.send(None);
    // Rank not below its count.
    let mut bad = h.reply(&third, third.at + ms(1), 0, 1);
    bad[4] = 1;
    assert!(
        h.w.handle_reply(h.at(third.at + ms(2)), third.id, &bad)
            .is_err()
    );
    // Wrong arity, and a counted reply for another interval than the keys named.
    let retry = h.send(None);
    assert!(
        h.w.handle_reply(h.at(retry.at + ms(1)), retry.id, &[1, 2])
            .is_err()
    );
    let retry = h.send(None);
    let mut other = h.reply(&retry, retry.at + ms(1), 0, 1);
    other[1] += 1;
    assert!(
        h.w.handle_reply(h.at(retry.at + ms(2)), retry.id, &other)
            .is_err()
    );
    assert!(only_started(&h.events()), "nothing granted");
    // And the worker carries on: a good reply to the next retry grants.
    let retry = h.send(None);
    h.deliver(&retry, retry.at + ms(1), retry.at + ms(2), 0, 1);
    assert!(matches!(h.events().as_slice(), [e] if held(e).is_some()));
}

#[test]
fn cancel_yields_idle_once_then_stops() {
    let mut h = Harness::new(Mode::Arrival);
    let ms = Duration::from_millis;
    let probe = h.send(Some(ms(0)));
    h.deliver(&probe, ms(1), ms(2), 0, 0);
    let first = h.send(None);
    h.deliver(&first, first.at + ms(1), first.at + ms(2), 0, -1);
    let second = h.send(None);
    h.deliver(&second, second.at + ms(1), second.at + ms(2), 0, 1);
    let third = h.send(None);
    h.deliver(&third, third.at + ms(1), third.at + ms(2), 0, 1);
    let got = h.events();
    assert!(got.last().and_then(held).is_some(), "{got:?}");
    let now = h.at(third.at + ms(10));
    h.w.handle_cancel(now);
    let events = h.events();
    assert!(
        matches!(events.as_slice(), [e, Event::Stopped] if idle(e).is_some_and(|i| i.reason == IdleReason::Cancelled)),
        "{events:?}"
    );
    assert!(h.w.is_stopped());
    assert_eq!(h.w.poll_timeout(), None);
    h.w.handle_timeout(now + Duration::from_secs(5));
    assert!(h.w.poll_transmit().is_none());
    assert!(h.events().is_empty());
}

#[test]
fn server_clock_jump_beyond_the_gap_stands_down() {
    let mut h = Harness::new(Mode::Ranked);
    h.settle_alone();
    assert!(h.events().pop().as_ref().and_then(held).is_some());
    let fourth = h.send(None);
    // The server clock jumped 0.3 L ahead (G = 0.15 L) since the last reply.
    h.offset_us += 300_000;
    h.deliver(
        &fourth,
        fourth.at + Duration::from_millis(1),
        fourth.at + Duration::from_millis(2),
        0,
        1,
    );
    let events = h.events();
    assert!(
        matches!(events.first().and_then(idle), Some(i) if i.reason == IdleReason::ServerClock),
        "{events:?}"
    );
}

/// Found by the `core_inputs` fuzz target: a reply whose server time is near
/// `i64::MAX` microseconds must be rejected, not overflow.
#[test]
fn reply_with_a_server_time_near_i64_max_is_rejected_without_panic() {
    let t0 = Instant::now();
    let options: Options = Options::new("fuzz", Duration::from_millis(141));
    let mut w = Worker::new(&options, Identity::from_bits_same_worker_if_reused(0), t0).unwrap();
    w.handle_timeout(t0);
    let id = w.poll_transmit().unwrap().id;
    // Server time i64::MAX us = 9223372036854 s + 775807 us; interval 141 ms.
    let reply = [0, 65_413_986_076_984, 9_223_372_036_854, 775_807];
    assert!(w.handle_reply(t0, id, &reply).is_err());
    // And time far in the future does not overflow either.
    w.handle_timeout(t0 + Duration::from_secs(u64::MAX / 2_000_000));
    assert!(w.poll_timeout().is_some());
}

/// Found by the `core_inputs` fuzz target: a Ranked worker whose skew
/// estimate ran ahead got a wrong-interval answer naming the interval it had
/// already counted in, ignored it as "nothing new", and never sent again.
/// A running worker always has a request in flight or one scheduled.
#[test]
fn ranked_worker_never_goes_silent_after_a_wrong_interval_answer() {
    const K0: i64 = 1_700_000_000;
    // The reply of a registration executed at local time `local` ms: the
    // server clock reads K0 * L + local - 300 ms.
    let values = |counted: bool, local: i64| -> Vec<i64> {
        let us = K0 * 1_000_000 + (local - 300) * 1000;
        let v = vec![
            i64::from(counted),
            us / 1_000_000,
            us / 1_000_000,
            us % 1_000_000,
        ];
        if counted {
            [v, vec![-1, 0, -1, -1, -1]].concat()
        } else {
            v
        }
    };
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let options = opts(Mode::Ranked).with_graceful_leave(false);
    let options = Options {
        interval: Duration::from_secs(1),
        ..options
    };
    let mut w = Worker::new(&options, Identity::from_bits_same_worker_if_reused(0), t0).unwrap();
    w.handle_timeout(at(0));
    let probe = w.poll_transmit().unwrap().id;
    // Slow requests (360 ms up, 40 ms down) put the skew estimate 160 ms ahead.
    w.handle_reply(at(400), probe, &values(false, 360)).unwrap();
    let r1 = w.poll_transmit().unwrap();
    assert_eq!(r1.args[2], K0.to_string());
    let r1 = r1.id;
    w.handle_reply(at(800), r1, &values(true, 760)).unwrap();
    let next = w.poll_timeout().unwrap();
    w.handle_timeout(next);
    let r2 = w.poll_transmit().unwrap();
    assert_eq!(r2.args[2], (K0 + 1).to_string(), "aimed early at K0+1");
    let r2 = r2.id;
    // A fast request, and the server clock has stepped back a little: the
    // server is still in K0. (The estimate's own error alone would not do
    // it: the schedule's margin of half a round trip absorbs it, rule 17.)
    let sent = next.duration_since(t0).as_millis() as i64;
    assert!(
        sent >= 1300,
        "the fire is aimed into K0+1 by the true clock"
    );
    let executed = 1299;
    w.handle_reply(at(sent as u64 + 10), r2, &values(false, executed))
        .unwrap();
    while w.poll_event().is_some() {}
    assert!(!w.is_stopped());
    let again = w.poll_timeout().expect("something is scheduled");
    w.handle_timeout(again.max(at(sent as u64 + 10)));
    assert!(w.poll_transmit().is_some(), "it registers again");
}

/// Rule 12: a registration refused because the group's recorded rules
/// differ grants nothing, says why once (the idle value carries both rules),
/// and keeps registering, so the worker joins once the record agrees.
#[test]
fn a_refused_registration_holds_nothing_says_why_and_keeps_trying() {
    let mut h = Harness::new(Mode::Ranked);
    let ms = Duration::from_millis;
    assert!(only_started(&h.events()));
    let probe = h.send(Some(ms(0)));
    h.deliver(&probe, ms(1), ms(2), 0, 0);
    // The group runs a 2 s interval in Arrival mode (codes: 0 arrival, 0 modulo).
    let refused = |h: &Harness, exec: Duration| {
        let server = h.server_us(exec);
        let k = (server / 1000) / L_MS as i64;
        vec![2, k, server / 1_000_000, server % 1_000_000, 1, 2000, 0, 0]
    };
    for round in 0..3 {
        let s = h.send(None);
        let r = refused(&h, s.at + ms(1));
        h.last = s.at + ms(2);
        h.w.handle_reply(h.at(s.at + ms(2)), s.id, &r).unwrap();
        let events = h.events();
        if round == 0 {
            let [e] = events.as_slice() else {
                panic!("{events:?}")
            };
            let Some(Idle {
                reason: IdleReason::Refused(refusal),
                ended: None,
                ..
            }) = idle(e)
            else {
                panic!("{events:?}");
            };
            assert_eq!(refusal.ours, h.w.rules());
            let recorded = refusal.recorded.expect("a readable record");
            assert_eq!((recorded.interval_ms, recorded.mode), (2000, Mode::Arrival));
            assert_eq!(h.w.refusal(), Some(*refusal));
        } else {
            assert!(events.is_empty(), "said once: {events:?}");
        }
        // It tries again in the next interval, never sooner.
        let next = h.w.poll_timeout().expect("it keeps registering");
        assert!(next.duration_since(h.t0) > s.at + ms(500), "round {round}");
    }
    // The record expired and ours took its place: counted again, it settles.
    let first = h.send(None);
    h.deliver(&first, first.at + ms(1), first.at + ms(2), -1, 0);
    assert_eq!(h.w.refusal(), None);
    let second = h.send(None);
    h.deliver(&second, second.at + ms(1), second.at + ms(2), 0, 1);
    let third = h.send(None);
    h.deliver(&third, third.at + ms(1), third.at + ms(2), 0, 1);
    assert!(h.events().iter().any(|e| held(e).is_some()));
}

/// Rule 10: a backward step seen in a wrong-interval answer (an interval
/// older than one already seen, to a request sent after that) stands the
/// worker down at once.
#[test]
fn a_backward_step_seen_in_a_wrong_interval_answer_stands_down() {
    let mut h = Harness::new(Mode::Ranked);
    h.settle_alone();
    assert!(h.events().pop().as_ref().and_then(held).is_some());
    let fourth = h.send(None);
    // The server clock stepped back 2 L: the request named K+3, the server is
    // in K+1 now (the same step seen through the answer, not the skew alone).
    h.offset_us -= 2_000_000;
    h.deliver(
        &fourth,
        fourth.at + Duration::from_millis(1),
        fourth.at + Duration::from_millis(2),
        0,
        1,
    );
    let events = h.events();
    assert!(
        matches!(events.first().and_then(idle), Some(i) if i.reason == IdleReason::ServerClock),
        "{events:?}"
    );
}

/// The counterexample of rule 10 (docs/protocol.md): after a backward step, the very
/// next replies must not seed an agreement over reopened intervals. Closed
/// K+1 and K+2 were read before the clock stepped back 2 L; after the step,
/// K+1 and K+2 are open again and may be written twice. Nothing is granted
/// until the interval three before the current one is newer than K+3, the
/// newest interval seen before the step (rule 10 with rule 19: one interval
/// more than two, since a reservation keeps a member counted one interval
/// longer).
#[test]
fn after_a_backward_step_nothing_is_granted_over_reopened_intervals() {
    let mut h = Harness::new(Mode::Ranked);
    let ms = Duration::from_millis;
    h.settle_alone();
    let _ = h.events();
    let fourth = h.send(None);
    h.deliver(&fourth, fourth.at + ms(1), fourth.at + ms(2), 0, 1);
    // Step back 2 L: the next registrations land in reopened K+2, K+3.
    h.offset_us -= 2_000_000;
    let mut granted = Vec::new();
    let mut counted = Vec::new();
    for _ in 0..8 {
        let s = h.send(None);
        let r = h.reply(&s, s.at + ms(1), 0, 1);
        h.last = s.at + ms(2);
        h.w.handle_reply(h.at(s.at + ms(2)), s.id, &r).unwrap();
        if r[0] == 1 {
            counted.push(s.k);
        }
        for e in h.events() {
            if let Some(lease) = held(&e) {
                granted.push(lease.token());
            }
        }
    }
    assert!(
        counted.contains(&(K + 3)),
        "registered into reopened intervals: {counted:?}"
    );
    // K+3 was the newest seen before the step: the first grant may come
    // from K+7 (closed K+4, K+5 and K+6 all newer).
    assert_eq!(
        granted.first(),
        Some(&(K + 7)),
        "counted {counted:?}, granted {granted:?}"
    );
}

/// A settled lone worker (lease from K+2, `(0, 1)`) whose reply from K+3
/// says a newcomer joined in K+2: the pair implied by K+2 is `(0, 2)`.
/// Returns the lease and the instant that reply was processed.
fn disagree_after_settling(mode: Mode) -> (Harness, Lease, Duration) {
    let mut h = Harness::new(mode);
    let ms = Duration::from_millis;
    let probe = h.send(Some(ms(0)));
    h.deliver(&probe, ms(1), ms(2), 0, 0);
    let first = h.send(None);
    let (x0, absent) = match mode {
        Mode::Ranked => (-1, 0),
        Mode::Arrival => (0, -1),
    };
    h.deliver(&first, first.at + ms(1), first.at + ms(2), x0, absent);
    let second = h.send(None);
    h.deliver(&second, second.at + ms(1), second.at + ms(2), 0, 1);
    let third = h.send(None);
    h.deliver(&third, third.at + ms(1), third.at + ms(2), 0, 1);
    let lease = h
        .events()
        .iter()
        .find_map(|e| held(e).cloned())
        .expect("granted");
    let fourth = h.send(None);
    let arrive = fourth.at + ms(2);
    h.deliver(&fourth, fourth.at + ms(1), arrive, 0, 2);
    (h, lease, arrive)
}

/// Rule 14: in `Ranked` mode a lease that the next reply does not renew is
/// kept, valid and with its real deadline, until that deadline minus the
/// drain budget (default `G`), and only then released (`HandedOver`, at
/// that instant). Fails without the change: the lease was released at the
/// disagreeing reply.
#[test]
fn ranked_keeps_an_unrenewed_lease_until_its_deadline_minus_the_drain_budget() {
    let (mut h, lease, arrive) = disagree_after_settling(Mode::Ranked);
    let deadline = lease.deadline();
    assert!(h.events().is_empty(), "no release at the disagreeing reply");
    assert!(lease.is_valid_at(h.at(arrive)));
    assert_eq!(lease.deadline(), deadline, "the real deadline, untouched");
    assert!(h.w.lease_at(h.at(arrive)).is_some());
    let g = Duration::from_millis(150);
    let drain_end = deadline - g;
    assert!(h.w.poll_timeout().is_some_and(|t| t <= drain_end));
    // A timer just before the drain's end changes nothing.
    h.w.handle_timeout(drain_end - Duration::from_micros(1));
    assert!(
        h.events()
            .iter()
            .all(|e| held(e).is_none() && idle(e).is_none())
    );
    assert!(lease.is_valid_at(drain_end - Duration::from_micros(1)));
    // At the drain's end: released, handed over, at exactly that instant.
    h.w.handle_timeout(drain_end);
    let events = h.events();
    assert!(
        matches!(events.as_slice(), [e] if idle(e).is_some_and(|i| i.reason == IdleReason::HandedOver && i.since == drain_end && i.ended.as_ref() == Some(&lease))),
        "{events:?}"
    );
    assert!(!lease.is_valid_at(drain_end));
}

/// Rule 14 is `Ranked` only: `Arrival`, the original protocol kept for
/// comparison, releases at the disagreeing reply.
#[test]
fn arrival_still_releases_at_the_disagreeing_reply() {
    let (mut h, lease, arrive) = disagree_after_settling(Mode::Arrival);
    let events = h.events();
    assert!(
        matches!(events.as_slice(), [e] if idle(e).is_some_and(|i| i.reason == IdleReason::HandedOver && i.since == h.at(arrive))),
        "{events:?}"
    );
    assert!(!lease.is_valid_at(h.at(arrive)));
}

/// A drain budget of zero keeps the lease to its very deadline, and the
/// release still says handed over, not expired.
#[test]
fn a_zero_drain_budget_keeps_the_lease_to_its_deadline() {
    let mut h = Harness::new(Mode::Ranked);
    let options = opts(Mode::Ranked).with_drain_budget(Duration::ZERO);
    h.w = Worker::new(
        &options,
        Identity::from_bits_same_worker_if_reused(1 << 100),
        h.t0,
    )
    .unwrap();
    let ms = Duration::from_millis;
    h.settle_alone();
    let lease = h
        .events()
        .iter()
        .find_map(|e| held(e).cloned())
        .expect("granted");
    let fourth = h.send(None);
    h.deliver(&fourth, fourth.at + ms(1), fourth.at + ms(2), 0, 2);
    assert!(h.events().is_empty());
    let deadline = lease.deadline();
    h.w.handle_timeout(deadline);
    let events = h.events();
    assert!(
        matches!(events.as_slice(), [e] if idle(e).is_some_and(|i| i.reason == IdleReason::HandedOver && i.since == deadline)),
        "{events:?}"
    );
}

/// A settled lone worker with graceful leave on, lease from K+2.
fn settled_leaver() -> (Harness, Lease) {
    let mut h = Harness::new(Mode::Ranked);
    let options = opts(Mode::Ranked).with_graceful_leave(true);
    h.w = Worker::new(
        &options,
        Identity::from_bits_same_worker_if_reused(1 << 100),
        h.t0,
    )
    .unwrap();
    h.settle_alone();
    let lease = h
        .events()
        .iter()
        .find_map(|e| held(e).cloned())
        .expect("granted");
    (h, lease)
}

/// Rule 16: a cancelled worker with graceful leave sends one leave request
/// (the leave script, keys of the interval it believes open and the next),
/// registers no more, keeps serving its lease until its deadline minus the
/// drain budget, then yields the idle value (cancelled) and stops. Fails
/// without the change: the lease was released at the cancel and nothing was
/// sent.
#[test]
fn graceful_leave_removes_the_token_and_serves_the_lease_to_its_drain_end() {
    let (mut h, lease) = settled_leaver();
    let ms = Duration::from_millis;
    let cancel = h.last + ms(100);
    h.w.handle_cancel(h.at(cancel));
    assert!(h.events().is_empty(), "the lease is still served");
    assert!(h.w.is_leaving() && !h.w.is_stopped());
    assert!(lease.is_valid_at(h.at(cancel)));
    let c = (h.server_us(cancel) / 1000) as u64 / L_MS;
    let token = h.w.identity().to_string();
    let t = h.w.poll_transmit().expect("the leave request");
    assert!(t.script.is_leave());
    assert_eq!(
        t.keys,
        [
            &format!("{{g}}:{c}")[..],
            &format!("{{g}}:{}", c + 1)[..],
            "{g}:rules",
            &format!("{{g}}:{}", c + 2)[..],
            &format!("{{g}}:{c}:fillers")[..],
            &format!("{{g}}:{}:fillers", c + 1)[..],
            &format!("{{g}}:{}:fillers", c + 2)[..],
            "{g}:members",
        ]
    );
    assert_eq!(t.args[1], c.to_string());
    assert_eq!(t.args[3], token);
    let id = t.id;
    // Removed, in the interval it named.
    let server = h.server_us(cancel + ms(1));
    let reply = [1, c as i64, server / 1_000_000, server % 1_000_000, 1];
    h.w.handle_reply(h.at(cancel + ms(2)), id, &reply).unwrap();
    assert!(h.events().is_empty());
    // Nothing but the drain's end is due: no registration is ever sent.
    let drain_end = lease.deadline() - ms(150);
    assert_eq!(h.w.poll_timeout(), Some(drain_end));
    h.w.handle_timeout(h.at(cancel + ms(300)));
    assert!(h.w.poll_transmit().is_none());
    h.w.handle_timeout(drain_end);
    let events = h.events();
    assert!(
        matches!(events.as_slice(), [e, Event::Stopped] if idle(e).is_some_and(|i| i.reason == IdleReason::Cancelled && i.since == drain_end && i.ended.as_ref() == Some(&lease))),
        "{events:?}"
    );
    assert!(h.w.is_stopped() && !h.w.is_leaving());
    assert_eq!(h.w.poll_timeout(), None);
}

/// Rule 16: a wrong-interval answer (the server clock reads two intervals
/// after the one the request named) wrote nothing; the worker retries once
/// with the new clock sample, then gives up. Rule 10: that answer shows the
/// server clock jumped, so the lease still served ends at once.
#[test]
fn a_leave_answered_wrong_interval_is_retried_once() {
    let (mut h, lease) = settled_leaver();
    let ms = Duration::from_millis;
    let cancel = h.last + ms(100);
    h.w.handle_cancel(h.at(cancel));
    let first = h.w.poll_transmit().unwrap();
    let (id, c) = (first.id, first.args[1].parse::<i64>().unwrap());
    let wrong = |h: &Harness, local: Duration| {
        let s = h.server_us(local) + 2_000_000;
        vec![0, s / 1000 / L_MS as i64, s / 1_000_000, s % 1_000_000]
    };
    let r = wrong(&h, cancel + ms(1));
    assert_ne!(r[1], c);
    h.w.handle_reply(h.at(cancel + ms(2)), id, &r).unwrap();
    // Rule 10 applies to leave answers too: the server clock jumped 2 s
    // ahead, so the lease still being served ends at once.
    let events = h.events();
    assert!(
        matches!(events.as_slice(), [e] if idle(e).is_some_and(|i| i.reason == IdleReason::ServerClock && i.ended.as_ref() == Some(&lease))),
        "{events:?}"
    );
    assert!(!lease.is_valid_at(h.at(cancel + ms(2))));
    let retry = h.w.poll_transmit().expect("one retry");
    assert!(retry.script.is_leave());
    assert_eq!(retry.args[1], r[1].to_string(), "aimed by the new sample");
    let id = retry.id;
    let r = wrong(&h, cancel + ms(3));
    h.w.handle_reply(h.at(cancel + ms(4)), id, &r).unwrap();
    assert!(h.w.poll_transmit().is_none(), "no second retry");
    assert!(matches!(h.events().as_slice(), [Event::Stopped]));
    assert!(h.w.is_stopped());
}

/// Without a lease the leaving worker stops once its leave request is
/// answered; a malformed answer counts as a failure and is retried once.
#[test]
fn a_leaver_without_a_lease_stops_once_the_leave_is_answered() {
    let mut h = Harness::new(Mode::Ranked);
    let options = opts(Mode::Ranked).with_graceful_leave(true);
    h.w = Worker::new(
        &options,
        Identity::from_bits_same_worker_if_reused(1 << 100),
        h.t0,
    )
    .unwrap();
    let ms = Duration::from_millis;
    let probe = h.send(Some(ms(0)));
    h.deliver(&probe, ms(1), ms(2), 0, 0);
    h.events();
    h.w.handle_cancel(h.at(ms(5)));
    let t = h.w.poll_transmit().unwrap();
    let id = t.id;
    assert!(h.w.handle_reply(h.at(ms(6)), id, &[1, 2, 3]).is_err());
    let retry = h.w.poll_transmit().expect("retried once").id;
    let s = h.server_us(ms(7));
    let k = s / 1000 / L_MS as i64;
    h.w.handle_reply(h.at(ms(8)), retry, &[1, k, s / 1_000_000, s % 1_000_000, 0])
        .unwrap();
    assert!(matches!(h.events().as_slice(), [Event::Stopped]));
    assert!(h.w.is_stopped());
}

/// A settled lone worker with `options`, and the lease it holds.
fn settled_with(options: &Options) -> (Harness, Lease) {
    let mut h = Harness::new(Mode::Ranked);
    h.w = Worker::new(
        options,
        Identity::from_bits_same_worker_if_reused(1 << 100),
        h.t0,
    )
    .unwrap();
    h.settle_alone();
    let lease = h
        .events()
        .iter()
        .find_map(|e| held(e).cloned())
        .expect("granted");
    (h, lease)
}

/// Rule 17: a registration that executed less than `G` into its interval
/// renews nothing, even though both closed intervals agree (a forward step
/// of the server clock smaller than the gap could otherwise let the renewed
/// lease outlive the margin); the worker registers again later in the same
/// interval, and that reply renews.
#[test]
fn a_reply_executed_before_the_gap_renews_nothing_and_the_worker_registers_again() {
    let ms = Duration::from_millis;
    let (mut h, lease) = settled_with(&opts(Mode::Ranked));
    let deadline = lease.deadline();
    let fourth = h.send(None);
    assert_eq!(fourth.k, K + 3);
    // The server clock stepped back 0.1 L (below the gap, not detected), so
    // the scheduled registration executes about 0.05 L into K+3.
    h.offset_us -= 100_000;
    let exec = fourth.at + ms(1);
    let into = h.server_us(exec) - ((K + 3) * L_MS * 1000) as i64;
    assert!((0..150_000).contains(&into), "executed {into} us into K+3");
    h.deliver(&fourth, exec, fourth.at + ms(2), 0, 1);
    assert!(h.events().is_empty());
    assert_eq!(lease.deadline(), deadline, "an early reply renews nothing");
    assert_eq!(lease.parts()[0].renewed_in(), K + 2);
    let again = h.send(None);
    assert_eq!(again.k, K + 3, "it registers again in the same interval");
    let into = h.server_us(again.at) - ((K + 3) * L_MS * 1000) as i64;
    assert!(into >= 150_000, "no earlier than G into K+3: {into} us");
    h.deliver(&again, again.at + ms(1), again.at + ms(2), 0, 1);
    assert!(h.events().is_empty(), "a renewal yields nothing");
    assert!(lease.deadline() > deadline, "renewed by the second reply");
    assert_eq!(lease.parts()[0].renewed_in(), K + 3);
}

/// The test options, with `control` broken if `broken`.
#[cfg(feature = "negative-controls")]
fn with_control(broken: bool, control: NegativeControl) -> Options {
    let o = opts(Mode::Ranked);
    if broken {
        o.with_negative_control(control)
    } else {
        o
    }
}

/// Rule 17 for grants: the agreeing reply that would grant executed early,
/// so the lease comes only from the registration sent again later in the
/// same interval. The negative control grants from the early reply.
#[cfg(feature = "negative-controls")]
#[test]
fn an_early_reply_grants_nothing_until_the_second_registration() {
    for sabotage in [false, true] {
        let ms = Duration::from_millis;
        let mut h = Harness::new(Mode::Ranked);
        let options = with_control(sabotage, NegativeControl::GrantFromEarlyRegistration);
        h.w = Worker::new(
            &options,
            Identity::from_bits_same_worker_if_reused(1 << 100),
            h.t0,
        )
        .unwrap();
        let probe = h.send(Some(ms(0)));
        h.deliver(&probe, ms(1), ms(2), 0, 0);
        let first = h.send(None);
        h.deliver(&first, first.at + ms(1), first.at + ms(2), -1, 0);
        let second = h.send(None);
        h.deliver(&second, second.at + ms(1), second.at + ms(2), 0, 1);
        let third = h.send(None);
        assert_eq!(third.k, K + 2);
        h.offset_us -= 100_000;
        h.deliver(&third, third.at + ms(1), third.at + ms(2), 0, 1);
        let events = h.events();
        let granted = events.iter().any(|e| held(e).is_some());
        assert_eq!(granted, sabotage, "{events:?}");
        if sabotage {
            continue;
        }
        let again = h.send(None);
        assert_eq!(again.k, K + 2);
        h.deliver(&again, again.at + ms(1), again.at + ms(2), 0, 1);
        let events = h.events();
        assert!(
            matches!(events.as_slice(), [e] if held(e).is_some_and(|l| l.token() == K + 2)),
            "{events:?}"
        );
    }
}

/// Rule 10: after a stand-down, nothing read before the step certifies a
/// grant. The reply of a registration that executed before a detected jump
/// and arrives after the stand-down is ignored; without that (the negative
/// control) it seeds the memory and the next reply grants at once.
#[cfg(feature = "negative-controls")]
#[test]
fn after_a_stand_down_replies_of_earlier_requests_seed_nothing() {
    for sabotage in [false, true] {
        let ms = Duration::from_millis;
        let options = with_control(sabotage, NegativeControl::KeepRequestsAcrossStandDown);
        let (mut h, lease) = settled_with(&options);
        // The shape of the trace in docs/protocol.md (rule 17): K+3's
        // registration is held in the network and executes 0.35 L later;
        // its reply comes back only after the step below.
        let fourth = h.send(None);
        assert_eq!(fourth.k, K + 3);
        let slow = h.reply(&fourth, fourth.at + ms(350), 0, 1);
        // It times out; the retry, sent near the end of the band and slow
        // too (45 ms to execute), finds that the server clock stepped
        // 0.149 L ahead meanwhile: it executes in K+4, a wrong-interval
        // answer whose precise sample shows the jump.
        let k3 = (K + 3) * L_MS * 1000;
        let local_of =
            |h: &Harness, server: u64| Duration::from_micros(server - h.offset_us as u64);
        h.w.handle_timeout(h.at(local_of(&h, k3 + 800_000)));
        let retry = h.send(None);
        assert_eq!(retry.k, K + 3);
        h.offset_us += 149_000;
        let exec = retry.at + ms(45);
        h.deliver(&retry, exec, exec + ms(2), 0, 0);
        let events = h.events();
        assert!(
            matches!(events.as_slice(), [e] if idle(e).is_some_and(|i| i.reason == IdleReason::ServerClock && i.ended.as_ref() == Some(&lease))),
            "{events:?}"
        );
        // The reply from before the step arrives now.
        let late = exec + ms(3);
        h.last = late;
        h.w.handle_reply(h.at(late), fourth.id, &slow).unwrap();
        // The registrations in K+4 (the re-aim fires at once, so early, then
        // again from G into K+4, rule 17) agree with K+3's reading, if that
        // reading was kept.
        let mut granted = false;
        for _ in 0..2 {
            let next = h.send(None);
            if next.k != K + 4 {
                break;
            }
            h.deliver(&next, next.at + ms(1), next.at + ms(2), 0, 1);
            granted |= h.events().iter().any(|e| held(e).is_some());
        }
        assert_eq!(granted, sabotage, "sabotage {sabotage}");
    }
}

/// Rule 8, the start: with `start_spread` the first request (the clock
/// probe) waits for a point of the first interval drawn from the identity:
/// the same identity always waits as long, and a thousand identities cover
/// the interval evenly (each tenth of it gets 50 to 150 of them). Without
/// it the probe leaves at once.
#[test]
fn the_first_request_is_spread_over_the_first_interval_by_identity() {
    let t0 = Instant::now();
    let l = Duration::from_millis(L_MS);
    let first_send = |identity: Identity, spread: bool| {
        let o = opts(Mode::Ranked).with_start_spread(spread);
        let mut w = Worker::new(&o, identity, t0).unwrap();
        let at = w.poll_timeout().expect("the probe is scheduled");
        // Nothing is sent before that instant, and it is sent then.
        if at > t0 {
            w.handle_timeout(at - Duration::from_micros(1));
            assert!(w.poll_transmit().is_none(), "sent early");
        }
        w.handle_timeout(at);
        assert!(w.poll_transmit().is_some(), "due at its instant");
        at - t0
    };
    let mut tenths = [0u32; 10];
    for worker in 0..1000 {
        let identity = Identity::seeded(7, worker);
        let wait = first_send(identity, true);
        assert!(wait < l, "within the first interval: {wait:?}");
        assert_eq!(wait, first_send(identity, true), "deterministic");
        assert_eq!(first_send(identity, false), Duration::ZERO, "off: at once");
        tenths[(wait.as_micros() * 10 / l.as_micros()) as usize] += 1;
    }
    assert!(
        tenths.iter().all(|&c| (50..=150).contains(&c)),
        "{tenths:?}"
    );
}
