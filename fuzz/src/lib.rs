//! Shared by the fuzz targets: a checker of what one worker tells its
//! application (the stream of rule 11 of docs/protocol.md, and the
//! contracts documented on `Event`, `Idle`, `Lease` and `Worker`).
//!
//! It is fed every event the driver drains and asked to compare the worker's
//! own view (`lease_at`) after every input. Any violation panics, which
//! libFuzzer reports as a crash.

use std::time::{Duration, Instant};

use lease_core::{Assignment, Event, IdleReason, Lease, Worker};

/// What the application has been told by one worker, checked as it arrives.
#[derive(Debug, Default)]
pub struct PairStream {
    /// Events seen so far (the first must be the idle pair).
    events: u64,
    /// The lease last handed out and the instant of the input that granted
    /// it, until the idle value that ends it.
    held: Option<(Lease, Instant)>,
    stopped: bool,
}

impl PairStream {
    /// A stream that has seen nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether `Event::Stopped` was seen.
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// The lease the application holds (announced and not yet released).
    pub fn held(&self) -> Option<&Lease> {
        self.held.as_ref().map(|(l, _)| l)
    }

    /// One event, drained after the input at `now`. Returns the lease if the
    /// event granted one.
    pub fn on_event(&mut self, e: Event, now: Instant) -> Option<Lease> {
        assert!(!self.stopped, "event {e:?} after Stopped");
        let first = self.events == 0;
        self.events += 1;
        if first {
            assert!(
                matches!(&e, Event::Assignment(Assignment::Idle(i))
                    if i.reason == IdleReason::Started && i.ended.is_none()),
                "the first event must be the opening idle value, got {e:?}"
            );
            return None;
        }
        match e {
            Event::Assignment(Assignment::Idle(idle)) => {
                match (&idle.ended, self.held.take()) {
                    (Some(ended), Some((lease, granted))) => {
                        assert_eq!(
                            ended.slot(),
                            lease.slot(),
                            "the idle value names another slot"
                        );
                        assert_eq!(
                            ended.token(),
                            lease.token(),
                            "the idle value names another token"
                        );
                        assert!(
                            idle.since <= now,
                            "idle.since is later than the input that produced it"
                        );
                        assert!(
                            idle.since >= granted,
                            "idle.since is before the lease's grant"
                        );
                        assert_eq!(
                            lease.deadline(),
                            idle.since,
                            "the handed-out lease does not end at idle.since"
                        );
                        assert!(!lease.is_valid_at(now), "a released lease is still valid");
                    }
                    (None, None) => assert!(
                        matches!(idle.reason, IdleReason::Refused(_)),
                        "an idle value without a lease that ended must be a refusal: {idle:?}"
                    ),
                    (ended, held) => panic!("idle value {ended:?} while holding {held:?}"),
                }
                None
            }
            Event::Assignment(Assignment::Held(lease)) => {
                assert!(
                    self.held.is_none(),
                    "two leases without an idle value between: {:?} then {lease:?}",
                    self.held
                );
                assert!(lease.i() < lease.n());
                assert!(
                    lease.is_valid_at(now),
                    "granted a lease already invalid at its grant"
                );
                self.held = Some((lease.clone(), now));
                Some(lease)
            }
            Event::Stopped => {
                assert!(self.held.is_none(), "Stopped while a lease is held");
                self.stopped = true;
                None
            }
        }
    }

    /// After the events of an input at `now` are drained: the worker's own
    /// view agrees with what the application was told. `interval` is `L`.
    pub fn check_worker(&self, w: &Worker, now: Instant, interval: Duration) {
        assert_eq!(
            w.is_stopped(),
            self.stopped,
            "is_stopped disagrees with the Stopped event"
        );
        self.check_lease_at(w, now);
        if let Some(l) = w.lease_at(now) {
            // Rule 6: a lease ends by (k+2)L server time, measured from the
            // send of a request executed in k: at most 2 L after the send.
            assert!(
                l.deadline() <= now + 2 * interval,
                "lease deadline more than 2 L ahead"
            );
        }
        if let Some((held, _)) = &self.held
            && w.lease_at(now).is_none()
        {
            assert!(
                !held.is_valid_at(now),
                "the application's lease is valid but lease_at is None"
            );
        }
    }

    /// `lease_at(at)` (at any instant, no input needed) is valid at `at`,
    /// has `i < n`, and is the lease the application was last given.
    pub fn check_lease_at(&self, w: &Worker, at: Instant) {
        if let Some(l) = w.lease_at(at) {
            assert!(!self.stopped, "a lease after Stopped");
            assert!(
                l.is_valid_at(at),
                "lease_at returned a lease invalid at that instant"
            );
            assert!(l.i() < l.n());
            let held = self
                .held()
                .expect("lease_at returns a lease that was never announced");
            assert_eq!(l, held, "lease_at differs from the announced lease");
            assert!(held.is_valid_at(at));
        }
    }
}
