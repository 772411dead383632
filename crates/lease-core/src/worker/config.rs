//! The options after validation, in the integer units the state machine
//! uses (microseconds of the worker's local clock).

use std::time::Duration;

use crate::options::{Handover, Mode, NegativeControl, Options, OptionsError};
use crate::ownership::Mapping;
use crate::rules::GroupRules;

#[derive(Clone, Debug)]
pub(super) struct Config {
    pub(super) name: String,
    pub(super) prefix: String,
    pub(super) mode: Mode,
    pub(super) gap: f64,
    pub(super) interval: Duration,
    pub(super) interval_ms: u64,
    /// `L` in microseconds.
    pub(super) l: i64,
    /// `G = g * L` in microseconds.
    pub(super) g: i64,
    /// Width of the Ranked schedule's spread (rule 8), in microseconds.
    pub(super) spread: i64,
    /// Key TTL: keys expire a few intervals after they close.
    pub(super) ttl_ms: u64,
    pub(super) mapping: Mapping,
    pub(super) handover: Handover,
    /// The rules this worker follows (rule 12), and their encoding.
    pub(super) rules: GroupRules,
    pub(super) rules_record: String,
    /// Rule 8: the first request waits for its point of the first interval.
    pub(super) start_spread: bool,
    /// Rule 14: an unrenewed part is served until its deadline minus this.
    pub(super) drain_budget: i64,
    /// Rule 16: leave gracefully on cancellation.
    pub(super) graceful_leave: bool,
    /// Rule 18: the member name registered under, if any.
    pub(super) member: Option<crate::Member>,
    #[cfg(feature = "negative-controls")]
    control: Option<NegativeControl>,
}

impl Config {
    pub(super) fn new<C>(o: &Options<C>) -> Result<Self, OptionsError> {
        o.validate()?;
        let interval_ms = u64::try_from(o.interval.as_millis()).unwrap_or(u64::MAX);
        let l = i64::try_from(interval_ms).unwrap_or(i64::MAX / 1000) * 1000;
        let lf = l as f64;
        let rules = GroupRules::of(o);
        Ok(Self {
            name: o.name.clone(),
            prefix: o.prefix.clone(),
            mode: o.mode(),
            gap: o.gap,
            interval: o.interval,
            interval_ms,
            l,
            g: (o.gap * lf).round() as i64,
            spread: (o.effective_spread() * lf).round() as i64,
            // Ranked sets live from (k-1)L (a reservation creates the set of
            // k) until read as k-2 during k+2 (rule 19): 4L, and one more
            // for margin; Arrival's counters are read in k+1 only.
            ttl_ms: interval_ms.saturating_mul(match o.mode() {
                Mode::Arrival => 3,
                Mode::Ranked => 5,
            }),
            mapping: o.mapping(),
            handover: o.handover(),
            rules_record: rules.encode(),
            rules,
            drain_budget: i64::try_from(o.effective_drain_budget().as_micros()).unwrap_or(i64::MAX),
            graceful_leave: o.graceful_leave(),
            member: o.member,
            start_spread: o.start_spread,
            #[cfg(feature = "negative-controls")]
            control: o.negative_control,
        })
    }

    /// Rule 8: how long after its start (local microseconds) a worker with
    /// `identity` sends its first request, the clock probe: with
    /// `start_spread`, a point of `[0, L)` drawn from the identity (else at
    /// once), so that the workers of a process
    /// started at once (30,000 groups) reach Redis spread over an interval
    /// instead of in one burst. The probe writes nothing, so when it is
    /// sent bears on no safety rule; it delays a first lease by `L/2` on
    /// average.
    pub(super) fn start_delay(&self, identity: super::Identity) -> i64 {
        if !self.start_spread {
            return 0;
        }
        (identity.start_fraction() * self.l as f64) as i64
    }

    /// Whether the test-only `control` breaks its rule in this run: always
    /// false without the `negative-controls` feature.
    #[inline(always)]
    pub(super) fn broken(&self, control: NegativeControl) -> bool {
        #[cfg(feature = "negative-controls")]
        {
            use NegativeControl::{
                EarlyGrantsAndKeptRequests, GrantFromEarlyRegistration, KeepRequestsAcrossStandDown,
            };
            match self.control {
                Some(EarlyGrantsAndKeptRequests) => matches!(
                    control,
                    GrantFromEarlyRegistration | KeepRequestsAcrossStandDown
                ),
                broken => broken == Some(control),
            }
        }
        #[cfg(not(feature = "negative-controls"))]
        {
            let _ = control;
            false
        }
    }
}
