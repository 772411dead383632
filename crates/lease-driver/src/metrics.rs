//! Metrics through the [`metrics`](https://docs.rs/metrics) facade, recorded
//! by every adapter's driver ([`crate::Driver`]) from the worker's
//! events, with the feature `metrics` of this crate (each adapter's own
//! `metrics` feature turns it on). Without it nothing is recorded and the
//! `metrics` crate is not a dependency. With it, nothing is recorded either
//! unless the application installs a recorder. Every metric carries the
//! label `name` (the group name).
//!
//! | metric | kind | meaning |
//! |---|---|---|
//! | [`IS_OWNER`] | gauge | 1 while a lease is held, else 0 |
//! | [`INDEX`] | gauge | `i` of the lease held, -1 while idle |
//! | [`REPLICAS`] | gauge | `n` of the lease held, -1 while idle |
//! | [`STAND_DOWNS`] | counter | leases given back, for any reason |
//! | [`EXPIRIES`] | counter | leases that ran out without a renewal |
//! | [`REFUSALS`] | counter | refusals: the group's recorded rules differ from this worker's (counted once per refusal, not per registration) |
//! | [`REGISTRATION_SECONDS`] | histogram | round trip of each answered registration |

use std::time::Duration;

use lease_core::Event;
#[cfg(feature = "metrics")]
use lease_core::{Assignment, IdleReason};

/// Gauge: 1 while this worker holds a lease, else 0.
pub const IS_OWNER: &str = "lease_is_owner";
/// Gauge: the index `i` of the lease held, -1 while idle.
pub const INDEX: &str = "lease_index";
/// Gauge: the group size `n` of the lease held, -1 while idle.
pub const REPLICAS: &str = "lease_replicas";
/// Counter: leases given back (stand-downs), whatever the reason.
pub const STAND_DOWNS: &str = "lease_stand_downs_total";
/// Counter: leases that ran out because no renewal arrived in time.
pub const EXPIRIES: &str = "lease_expiries_total";
/// Counter: times this worker's registrations were refused because the
/// group's recorded rules differ from its own (once per refusal).
pub const REFUSALS: &str = "lease_refusals_total";
/// Histogram: round-trip time of each answered registration, in seconds.
pub const REGISTRATION_SECONDS: &str = "lease_registration_seconds";

/// The handles of one worker's metrics; idle again when dropped (a dropped
/// worker holds nothing).
#[cfg(feature = "metrics")]
#[derive(Debug)]
pub(crate) struct Metrics {
    is_owner: metrics::Gauge,
    index: metrics::Gauge,
    replicas: metrics::Gauge,
    stand_downs: metrics::Counter,
    expiries: metrics::Counter,
    refusals: metrics::Counter,
    latency: metrics::Histogram,
}

#[cfg(feature = "metrics")]
impl Metrics {
    pub(crate) fn new(name: &str) -> Self {
        let label = [("name", name.to_owned())];
        let m = Self {
            is_owner: metrics::gauge!(IS_OWNER, &label),
            index: metrics::gauge!(INDEX, &label),
            replicas: metrics::gauge!(REPLICAS, &label),
            stand_downs: metrics::counter!(STAND_DOWNS, &label),
            expiries: metrics::counter!(EXPIRIES, &label),
            refusals: metrics::counter!(REFUSALS, &label),
            latency: metrics::histogram!(REGISTRATION_SECONDS, &label),
        };
        m.idle();
        m
    }

    pub(crate) fn event(&self, event: &Event) {
        match event {
            // During a handover a lease has no one pair: index and group
            // size are the newest pair certified.
            Event::Assignment(Assignment::Held(lease)) => {
                self.is_owner.set(1.0);
                if let Some(newest) = lease.newest_pair() {
                    self.index.set(f64::from(newest.i()));
                    self.replicas.set(f64::from(newest.n()));
                }
            }
            Event::Assignment(Assignment::Idle(idle)) => {
                self.idle();
                if idle.ends_holding() {
                    self.stand_downs.increment(1);
                }
                match idle.reason {
                    IdleReason::Expired => self.expiries.increment(1),
                    IdleReason::Refused(_) => self.refusals.increment(1),
                    _ => {}
                }
            }
            Event::Stopped => {}
        }
    }

    pub(crate) fn latency(&self, rtt: Duration) {
        self.latency.record(rtt.as_secs_f64());
    }

    fn idle(&self) {
        self.is_owner.set(0.0);
        self.index.set(-1.0);
        self.replicas.set(-1.0);
    }
}

#[cfg(feature = "metrics")]
impl Drop for Metrics {
    fn drop(&mut self) {
        self.idle();
    }
}

/// Without the feature: nothing.
#[cfg(not(feature = "metrics"))]
#[derive(Debug)]
pub(crate) struct Metrics;

#[cfg(not(feature = "metrics"))]
impl Metrics {
    pub(crate) fn new(_name: &str) -> Self {
        Self
    }

    pub(crate) fn event(&self, _event: &Event) {}

    pub(crate) fn latency(&self, _rtt: Duration) {}
}
