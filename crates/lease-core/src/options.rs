//! Options of one worker, and their validation into typed errors.
//!
//! Invalid options fail once, at construction ([`Options::validate`], which
//! [`crate::Worker::new`] calls), never later on the network path.

use std::time::Duration;

use crate::ownership::Mapping;

/// How positions in a closed interval are counted (DESIGN section 3, rule 3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Positions are ranks in a sorted set whose order the server carries from
    /// one interval to the next: retries, lost replies and jitter no longer
    /// reshuffle the group, and a newcomer lands at the tail.
    #[default]
    Ranked,
    /// The original `n-and-i` protocol: `INCR` of the interval key, the
    /// position is the arrival index. Kept exact, as the compatible mode and
    /// the baseline that every figure is compared with.
    Arrival,
}

impl Mode {
    /// The mode's name as used on command lines and in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Ranked => "ranked",
            Mode::Arrival => "arrival",
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Mode {
    type Err = OptionsError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "ranked" => Ok(Mode::Ranked),
            "arrival" => Ok(Mode::Arrival),
            other => Err(OptionsError::UnknownMode(other.to_owned())),
        }
    }
}

/// How a worker hands tasks over when the group changes (DESIGN section 3,
/// rule 13).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum HandoverMode {
    /// The original rule 5: a reply grants the whole pair `(i, n)` only when
    /// the two newest closed intervals imply the same pair; the held value
    /// is an [`crate::Assignment::Held`] lease.
    #[default]
    Whole,
    /// Rule 13: a reply from `k` grants the task set `T(p(k-1)) ∩ T(p(k-2))`,
    /// so tasks that stay with a worker through a change of the group stay
    /// served. The held value is an [`crate::Assignment::Tasks`] task set
    /// (with the tasks granted and released since the previous value), which
    /// offers no pair to split tasks by. Needs [`Mode::Ranked`] and
    /// [`Mapping::Consistent`]: with modulo a worker keeps only about
    /// `1/(n+1)` of its tasks through a change, so it would buy nothing.
    Incremental,
}

impl HandoverMode {
    /// The name used on command lines and in reports: `whole` or
    /// `incremental`.
    pub fn as_str(self) -> &'static str {
        match self {
            HandoverMode::Whole => "whole",
            HandoverMode::Incremental => "incremental",
        }
    }
}

impl std::fmt::Display for HandoverMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for HandoverMode {
    type Err = OptionsError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "whole" => Ok(HandoverMode::Whole),
            "incremental" => Ok(HandoverMode::Incremental),
            other => Err(OptionsError::UnknownHandover(other.to_owned())),
        }
    }
}

/// The longest accepted group name, in bytes.
pub const MAX_NAME_LEN: usize = 200;
/// The longest accepted key prefix, in bytes.
pub const MAX_PREFIX_LEN: usize = 200;
/// The longest accepted interval. Bounded so that every millisecond and
/// microsecond computation on interval numbers stays far from overflow.
pub const MAX_INTERVAL: Duration = Duration::from_secs(24 * 60 * 60);
/// The default gap, as a fraction of the interval.
pub const DEFAULT_GAP: f64 = 0.15;

/// What one worker needs to know about its group.
///
/// Build with [`Options::new`] and the `with_*` methods; validation happens in
/// [`Options::validate`] (called by [`crate::Worker::new`]).
///
/// ```
/// use std::time::Duration;
/// use lease_core::{Mode, Options};
///
/// let options = Options::new("mail-sender", Duration::from_secs(5))
///     .with_gap(0.2)
///     .with_prefix("prod:")
///     .with_mode(Mode::Ranked);
/// assert!(options.validate().is_ok());
/// assert!(Options::new("bad{name}", Duration::from_secs(5)).validate().is_err());
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// Group name, for example `mail-sender`. Non-empty, at most
    /// [`MAX_NAME_LEN`] bytes, no `{` or `}` (it becomes the Redis Cluster hash
    /// tag), no whitespace or control characters.
    pub name: String,
    /// Interval length `L`: a whole number of milliseconds, at least 1 ms and
    /// at most [`MAX_INTERVAL`].
    pub interval: Duration,
    /// Gap fraction `g`, strictly between 0 and 0.5 (default 0.15).
    pub gap: f64,
    /// Prepended to every key, for namespacing (default empty). At most
    /// [`MAX_PREFIX_LEN`] bytes, no control characters and no braces.
    pub prefix: String,
    /// Counting mode (default [`Mode::Ranked`]).
    pub mode: Mode,
    /// How tasks are split between the pairs (default [`Mapping::Modulo`],
    /// the original's `task.id % n == i`). Every worker of a group must use
    /// the same mapping: it is one of the group's rules, recorded and checked
    /// in Redis ([`crate::GroupRules`]).
    pub mapping: Mapping,
    /// The drain budget `b` of a kept lease (rule 14, `Ranked` only): a lease
    /// that a later reply does not renew is kept, and served, until its own
    /// deadline minus `b`, then released (the idle value, reason
    /// [`crate::IdleReason::HandedOver`]). Nobody else can hold its tasks
    /// before its deadline, so `b` is the loop body's time to finish the task
    /// in hand, not a safety margin. `None` (the default) means the gap `G =
    /// g·L`. At most the longest a lease can last, `2L - G` (exclusive).
    /// `Arrival` mode ignores it: it releases as the original does.
    pub drain_budget: Option<Duration>,
    /// Graceful leave on cancellation (rule 16, `Ranked` only; default off,
    /// which keeps the original's cancel: release at once and stop). When
    /// on, a cancelled worker removes its token from the set of the interval
    /// open when the request executes (the leave script decides it from
    /// `TIME`), registers no more, and keeps serving the lease it holds
    /// until its deadline minus the drain budget; then the stream yields the
    /// idle value (reason [`crate::IdleReason::Cancelled`]) and ends. The
    /// survivors take over the departed's tasks about an interval sooner.
    pub graceful_leave: bool,
    /// How tasks are handed over when the group changes (rule 13; default
    /// [`HandoverMode::Whole`], the original). Workers of one group may mix
    /// the two: a whole-pair grant is the incremental grant of two equal
    /// pairs, so it is not one of the recorded group rules.
    pub handover: HandoverMode,
    /// **Test only: breaks exclusivity.** Anchors a lease's deadline at the
    /// reply's arrival instead of the request's send (rule 6). The negative
    /// control `bad-arrival` of rule 13: the simulator's checker must catch it.
    #[doc(hidden)]
    pub sabotage_deadline_from_arrival: bool,
    /// **Test only: breaks exclusivity.** Incremental handover grants
    /// `T(p(k-1))` alone instead of the intersection with `T(p(k-2))`. The
    /// negative control `bad-k1only` of rule 13.
    #[doc(hidden)]
    pub sabotage_grant_newest_pair_only: bool,
    /// **Test only: breaks exclusivity.** Takes `p(k-2)` from the previous
    /// processed reply even when that reply was not from `k-1`. The negative
    /// control `bad-skip` of rule 13.
    #[doc(hidden)]
    pub sabotage_pair_from_any_previous_reply: bool,
    /// Width of the Ranked schedule's spread (rule 8), in `L`: a worker
    /// fires at `G + frac(token)·spread·L` into each interval. `None` (the
    /// default) is the early spread `min(g, 0.1, (1-2g)/2)`, which leaves
    /// the most of the interval for slow round trips and pauses. A process
    /// that runs thousands of groups on one Redis should widen it (up to
    /// [`Options::max_spread`], `0.45` at the default gap), so that their
    /// registrations do not all queue in the first tenth of the interval
    /// (docs/choosing-an-interval.md). At least 0, at most
    /// [`Options::max_spread`]. `Arrival` mode ignores it.
    pub spread: Option<f64>,
    /// **Test only: breaks exclusivity.** Keeps a lease that a later reply
    /// does not renew until half an interval *past* its deadline, instead of
    /// its deadline minus the drain budget. The negative control of rule 14
    /// (research `bad-overdrain`): the simulator's checker must catch it.
    #[doc(hidden)]
    pub sabotage_overdrain_past_deadline: bool,
    /// **Test only: breaks exclusivity.** After a backward step of the
    /// server clock, grants from the very next agreeing replies, over
    /// intervals that may have been reopened, as before rule 10's fence. The
    /// negative control of that fence: the simulator's checker must catch it.
    #[doc(hidden)]
    pub sabotage_grant_over_reopened_intervals: bool,
    /// **Test only: breaks exclusivity.** Grants and renews from a
    /// registration that executed less than `G` into its interval (after a
    /// re-aim), so a forward step of the server clock smaller than the gap
    /// can let two workers hold one task. The negative control of rule 17.
    #[doc(hidden)]
    pub sabotage_grant_from_early_registration: bool,
    /// **Test only.** After a server-clock stand-down (rule 10), still
    /// accepts replies to requests sent before it, so a reading from before
    /// the step seeds the memory again. The negative control of rule 10's
    /// forgetting.
    #[doc(hidden)]
    pub sabotage_keep_requests_across_stand_down: bool,
    /// **Test only.** Grants a lease or part whose drain end (its deadline
    /// minus the drain budget, rule 14) has already passed, and drains a
    /// part from its deadline minus the budget even when that is before the
    /// reply that drains it. The negative control of the late-grant rule.
    #[doc(hidden)]
    pub sabotage_grant_past_drain_end: bool,
}

impl Options {
    /// Options for group `name` with interval `interval` and every other
    /// option at its default.
    pub fn new(name: impl Into<String>, interval: Duration) -> Self {
        Self {
            name: name.into(),
            interval,
            gap: DEFAULT_GAP,
            prefix: String::new(),
            mode: Mode::default(),
            mapping: Mapping::default(),
            drain_budget: None,
            graceful_leave: false,
            handover: HandoverMode::Whole,
            sabotage_deadline_from_arrival: false,
            sabotage_grant_newest_pair_only: false,
            sabotage_pair_from_any_previous_reply: false,
            spread: None,
            sabotage_overdrain_past_deadline: false,
            sabotage_grant_over_reopened_intervals: false,
            sabotage_grant_from_early_registration: false,
            sabotage_keep_requests_across_stand_down: false,
            sabotage_grant_past_drain_end: false,
        }
    }

    /// Sets the width of the Ranked schedule's spread, in `L` (see
    /// [`Options::spread`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use lease_core::Options;
    ///
    /// let o = Options::new("g", Duration::from_secs(1));
    /// assert_eq!(o.effective_spread(), 0.1);
    /// assert!((o.max_spread() - 0.45).abs() < 1e-12);
    /// let wide = o.clone().with_spread(o.max_spread());
    /// assert!(wide.validate().is_ok());
    /// assert!(o.with_spread(0.5).validate().is_err());
    /// ```
    pub fn with_spread(mut self, spread: f64) -> Self {
        self.spread = Some(spread);
        self
    }

    /// The width of the Ranked schedule's spread in force, in `L`:
    /// [`Options::spread`], or the early spread `min(g, 0.1, (1-2g)/2)`.
    pub fn effective_spread(&self) -> f64 {
        self.spread.unwrap_or_else(|| self.early_spread())
    }

    fn early_spread(&self) -> f64 {
        self.gap.min(0.1).min((1.0 - 2.0 * self.gap) / 2.0)
    }

    /// The widest spread allowed, in `L`: the band `1 - 2g` less a reserve
    /// of `max(g, 1/4)` kept for retries (rule 9: at least one retry at its
    /// longest backoff, `L/4`, and at least the gap), and never less than
    /// the early spread.
    pub fn max_spread(&self) -> f64 {
        let band = 1.0 - 2.0 * self.gap;
        (band - self.gap.max(0.25)).max(self.early_spread())
    }

    /// Sets the gap fraction.
    pub fn with_gap(mut self, gap: f64) -> Self {
        self.gap = gap;
        self
    }

    /// Sets the key prefix.
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Sets the counting mode.
    pub fn with_mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// Sets the task mapping.
    pub fn with_mapping(mut self, mapping: Mapping) -> Self {
        self.mapping = mapping;
        self
    }

    /// Sets the drain budget of kept leases (rule 14; see
    /// [`Options::drain_budget`]).
    pub fn with_drain_budget(mut self, budget: Duration) -> Self {
        self.drain_budget = Some(budget);
        self
    }

    /// Turns graceful leave on or off (rule 16; see
    /// [`Options::graceful_leave`]).
    pub fn with_graceful_leave(mut self, on: bool) -> Self {
        self.graceful_leave = on;
        self
    }

    /// Sets the handover mode (rule 13; see [`Options::handover`]).
    /// Incremental handover needs [`Mode::Ranked`] and
    /// [`Mapping::Consistent`]:
    ///
    /// ```
    /// use std::time::Duration;
    /// use lease_core::{HandoverMode, Options};
    /// use lease_core::ownership::Mapping;
    ///
    /// let options = Options::new("g", Duration::from_secs(2))
    ///     .with_mapping(Mapping::Consistent)
    ///     .with_handover(HandoverMode::Incremental);
    /// assert!(options.validate().is_ok());
    /// assert!(options.with_mapping(Mapping::Modulo).validate().is_err());
    /// ```
    pub fn with_handover(mut self, handover: HandoverMode) -> Self {
        self.handover = handover;
        self
    }

    /// The gap `G = g·L`.
    /// Rounded to the microsecond, as the state machine uses it.
    pub fn gap_duration(&self) -> Duration {
        let l = self.interval.as_micros() as f64;
        Duration::from_micros((self.gap * l).round().max(0.0) as u64)
    }

    /// The drain budget in force: [`Options::drain_budget`], or the gap `G`
    /// when none was given.
    pub fn effective_drain_budget(&self) -> Duration {
        self.drain_budget.unwrap_or_else(|| self.gap_duration())
    }

    /// The longest a lease lasts from the registration that granted it,
    /// `2L - G` (rule 6: a `Ranked` registration fires at `kL + G + u` and
    /// its lease ends by `(k+2)L`): the drain budget must be shorter.
    pub fn lease_span(&self) -> Duration {
        (self.interval * 2).saturating_sub(self.gap_duration())
    }

    /// Checks every option; the first problem found is returned.
    pub fn validate(&self) -> Result<(), OptionsError> {
        validate_name(&self.name)?;
        validate_interval(self.interval)?;
        validate_gap(self.gap)?;
        validate_prefix(&self.prefix)?;
        if let Some(budget) = self.drain_budget {
            let max = self.lease_span();
            if budget >= max {
                return Err(OptionsError::DrainBudgetTooLong { budget, max });
            }
        }
        if self.graceful_leave && self.mode == Mode::Arrival {
            return Err(OptionsError::GracefulLeaveNeedsRanked);
        }
        if self.handover == HandoverMode::Incremental {
            if self.mode == Mode::Arrival {
                return Err(OptionsError::IncrementalNeedsRanked);
            }
            if self.mapping != Mapping::Consistent {
                return Err(OptionsError::IncrementalNeedsConsistent);
            }
        }
        if let Some(spread) = self.spread {
            let max = self.max_spread();
            // `!(a <= x && x <= b)` also rejects NaN.
            if !(0.0 <= spread && spread <= max) {
                return Err(OptionsError::SpreadOutOfRange { spread, max });
            }
        }
        Ok(())
    }
}

fn validate_name(name: &str) -> Result<(), OptionsError> {
    if name.is_empty() {
        return Err(OptionsError::EmptyName);
    }
    if name.len() > MAX_NAME_LEN {
        return Err(OptionsError::NameTooLong {
            len: name.len(),
            max: MAX_NAME_LEN,
        });
    }
    if let Some(c) = name.chars().find(|c| matches!(c, '{' | '}')) {
        return Err(OptionsError::NameHasBrace(c));
    }
    if let Some(c) = name.chars().find(|c| c.is_whitespace() || c.is_control()) {
        return Err(OptionsError::NameHasSpaceOrControl(c));
    }
    Ok(())
}

fn validate_interval(interval: Duration) -> Result<(), OptionsError> {
    if interval < Duration::from_millis(1) {
        return Err(OptionsError::IntervalTooShort(interval));
    }
    if interval > MAX_INTERVAL {
        return Err(OptionsError::IntervalTooLong(interval));
    }
    if !interval.subsec_nanos().is_multiple_of(1_000_000) {
        return Err(OptionsError::IntervalNotWholeMillis(interval));
    }
    Ok(())
}

fn validate_gap(gap: f64) -> Result<(), OptionsError> {
    // `!(a < x && x < b)` also rejects NaN.
    if !(0.0 < gap && gap < 0.5) {
        return Err(OptionsError::GapOutOfRange(gap));
    }
    Ok(())
}

fn validate_prefix(prefix: &str) -> Result<(), OptionsError> {
    if prefix.len() > MAX_PREFIX_LEN {
        return Err(OptionsError::PrefixTooLong {
            len: prefix.len(),
            max: MAX_PREFIX_LEN,
        });
    }
    if let Some(c) = prefix.chars().find(|c| c.is_control()) {
        return Err(OptionsError::PrefixHasControl(c));
    }
    if let Some(c) = prefix.chars().find(|c| matches!(c, '{' | '}')) {
        return Err(OptionsError::PrefixHasBrace(c));
    }
    Ok(())
}

/// Why a set of [`Options`] was rejected.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum OptionsError {
    /// The group name is empty.
    #[error("the group name is empty; give a name such as \"mail-sender\"")]
    EmptyName,
    /// The group name is longer than allowed.
    #[error("the group name is {len} bytes long; at most {max} bytes are allowed")]
    NameTooLong {
        /// Length of the name given, in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The group name contains a brace, which would change the cluster hash tag.
    #[error(
        "the group name contains {0:?}; braces are not allowed because the name is the Redis Cluster hash tag"
    )]
    NameHasBrace(char),
    /// The group name contains whitespace or a control character.
    #[error("the group name contains {0:?}; whitespace and control characters are not allowed")]
    NameHasSpaceOrControl(char),
    /// The interval is shorter than one millisecond.
    #[error("the interval is {0:?}; it must be at least 1 ms")]
    IntervalTooShort(Duration),
    /// The interval is longer than [`MAX_INTERVAL`].
    #[error("the interval is {0:?}; it must be at most 24 h")]
    IntervalTooLong(Duration),
    /// The interval is not a whole number of milliseconds.
    #[error("the interval is {0:?}; it must be a whole number of milliseconds")]
    IntervalNotWholeMillis(Duration),
    /// The Ranked schedule's spread is below 0 or above
    /// [`Options::max_spread`].
    #[error(
        "the spread is {spread}; it must be between 0 and {max} (the band less a reserve for retries)"
    )]
    SpreadOutOfRange {
        /// The spread given, in `L`.
        spread: f64,
        /// The widest allowed at this gap, in `L`.
        max: f64,
    },
    /// The gap is not strictly between 0 and 0.5.
    #[error("the gap is {0}; it must be strictly between 0 and 0.5 (default 0.15)")]
    GapOutOfRange(f64),
    /// The prefix is longer than allowed.
    #[error("the key prefix is {len} bytes long; at most {max} bytes are allowed")]
    PrefixTooLong {
        /// Length of the prefix given, in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The prefix contains a control character.
    #[error("the key prefix contains {0:?}; control characters are not allowed")]
    PrefixHasControl(char),
    /// The prefix contains a brace, which would change the cluster hash tag.
    #[error(
        "the key prefix contains {0:?}; braces are not allowed because they would change the Redis Cluster hash tag"
    )]
    PrefixHasBrace(char),
    /// A counting mode name that is neither `ranked` nor `arrival`.
    #[error("unknown counting mode {0:?}; use \"ranked\" or \"arrival\"")]
    UnknownMode(String),
    /// The drain budget is not shorter than the longest lease, `2L - G`.
    #[error(
        "the drain budget is {budget:?}; it must be shorter than the longest lease, 2L - G = {max:?} (default: the gap G)"
    )]
    DrainBudgetTooLong {
        /// The budget given.
        budget: Duration,
        /// The longest lease, `2L - G` (exclusive bound).
        max: Duration,
    },
    /// Graceful leave was asked for in `Arrival` mode, whose `INCR` counts
    /// cannot take a worker out.
    #[error("graceful leave needs the ranked mode: an arrival count cannot take a worker out")]
    GracefulLeaveNeedsRanked,
    /// Incremental handover was asked for in `Arrival` mode, which stays
    /// exactly the original.
    #[error(
        "incremental handover needs the ranked mode: the arrival mode stays exactly the original"
    )]
    IncrementalNeedsRanked,
    /// Incremental handover was asked for with the modulo mapping, under
    /// which a worker keeps only about `1/(n+1)` of its tasks through a change.
    #[error(
        "incremental handover needs the consistent mapping: under modulo a worker keeps only about 1/(n+1) of its tasks through a change"
    )]
    IncrementalNeedsConsistent,
    /// A handover name that is neither `whole` nor `incremental`.
    #[error("unknown handover mode {0:?}; use \"whole\" or \"incremental\"")]
    UnknownHandover(String),
    /// A mapping name that is neither `modulo` nor `consistent`.
    #[error("unknown task mapping {0:?}; use \"modulo\" or \"consistent\"")]
    UnknownMapping(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Options {
        Options::new("group", Duration::from_millis(300))
    }

    fn err(o: Options) -> OptionsError {
        o.validate().expect_err("options should be rejected")
    }

    #[test]
    fn defaults_are_valid() {
        let o = base();
        assert_eq!(o.gap, DEFAULT_GAP);
        assert_eq!(o.mode, Mode::Ranked);
        assert_eq!(o.prefix, "");
        assert_eq!(o.validate(), Ok(()));
    }

    #[test]
    fn every_invalid_name_is_rejected() {
        let mut o = base();
        o.name = String::new();
        assert_eq!(err(o.clone()), OptionsError::EmptyName);
        o.name = "a".repeat(MAX_NAME_LEN + 1);
        assert_eq!(
            err(o.clone()),
            OptionsError::NameTooLong {
                len: MAX_NAME_LEN + 1,
                max: MAX_NAME_LEN
            }
        );
        o.name = "a".repeat(MAX_NAME_LEN);
        assert_eq!(o.validate(), Ok(()));
        o.name = "a{b".into();
        assert_eq!(err(o.clone()), OptionsError::NameHasBrace('{'));
        o.name = "a}b".into();
        assert_eq!(err(o.clone()), OptionsError::NameHasBrace('}'));
        o.name = "a b".into();
        assert_eq!(err(o.clone()), OptionsError::NameHasSpaceOrControl(' '));
        o.name = "a\tb".into();
        assert_eq!(err(o.clone()), OptionsError::NameHasSpaceOrControl('\t'));
        o.name = "a\u{7}b".into();
        assert_eq!(err(o.clone()), OptionsError::NameHasSpaceOrControl('\u{7}'));
        o.name = "a\u{a0}b".into();
        assert_eq!(err(o), OptionsError::NameHasSpaceOrControl('\u{a0}'));
    }

    #[test]
    fn every_invalid_interval_is_rejected() {
        let mut o = base();
        o.interval = Duration::ZERO;
        assert_eq!(
            err(o.clone()),
            OptionsError::IntervalTooShort(Duration::ZERO)
        );
        o.interval = Duration::from_micros(999);
        assert!(matches!(err(o.clone()), OptionsError::IntervalTooShort(_)));
        o.interval = MAX_INTERVAL + Duration::from_millis(1);
        assert!(matches!(err(o.clone()), OptionsError::IntervalTooLong(_)));
        o.interval = Duration::MAX;
        assert!(matches!(err(o.clone()), OptionsError::IntervalTooLong(_)));
        o.interval = Duration::from_micros(1500);
        assert!(matches!(
            err(o.clone()),
            OptionsError::IntervalNotWholeMillis(_)
        ));
        o.interval = MAX_INTERVAL;
        assert_eq!(o.validate(), Ok(()));
        o.interval = Duration::from_millis(1);
        assert_eq!(o.validate(), Ok(()));
    }

    #[test]
    fn every_invalid_gap_is_rejected() {
        for gap in [0.0, -0.1, 0.5, 0.7, f64::NAN, f64::INFINITY, -0.0] {
            let o = base().with_gap(gap);
            assert!(
                matches!(err(o), OptionsError::GapOutOfRange(_)),
                "gap {gap} accepted"
            );
        }
        for gap in [0.001, 0.15, 0.499] {
            assert_eq!(base().with_gap(gap).validate(), Ok(()));
        }
    }

    #[test]
    fn every_invalid_prefix_is_rejected() {
        let o = base().with_prefix("p".repeat(MAX_PREFIX_LEN + 1));
        assert!(matches!(err(o), OptionsError::PrefixTooLong { .. }));
        let o = base().with_prefix("a\nb");
        assert_eq!(err(o), OptionsError::PrefixHasControl('\n'));
        let o = base().with_prefix("a{");
        assert_eq!(err(o), OptionsError::PrefixHasBrace('{'));
        assert_eq!(base().with_prefix("svc:prod:").validate(), Ok(()));
    }

    #[test]
    fn the_drain_budget_defaults_to_the_gap_and_is_bounded_by_the_longest_lease() {
        let o = base();
        assert_eq!(o.drain_budget, None);
        assert_eq!(o.effective_drain_budget(), Duration::from_millis(45));
        assert_eq!(o.lease_span(), Duration::from_millis(555));
        for ok in [0, 1, 45, 554] {
            let o = base().with_drain_budget(Duration::from_millis(ok));
            assert_eq!(o.validate(), Ok(()), "{ok} ms");
            assert_eq!(o.effective_drain_budget(), Duration::from_millis(ok));
        }
        for bad in [555, 600, 10_000] {
            assert_eq!(
                err(base().with_drain_budget(Duration::from_millis(bad))),
                OptionsError::DrainBudgetTooLong {
                    budget: Duration::from_millis(bad),
                    max: Duration::from_millis(555)
                }
            );
        }
    }

    #[test]
    fn graceful_leave_is_ranked_only() {
        assert!(!base().graceful_leave);
        assert_eq!(base().with_graceful_leave(true).validate(), Ok(()));
        assert_eq!(
            err(base().with_graceful_leave(true).with_mode(Mode::Arrival)),
            OptionsError::GracefulLeaveNeedsRanked
        );
        assert_eq!(base().with_mode(Mode::Arrival).validate(), Ok(()));
    }

    #[test]
    fn modes_parse_and_print() {
        assert_eq!("ranked".parse::<Mode>(), Ok(Mode::Ranked));
        assert_eq!("arrival".parse::<Mode>(), Ok(Mode::Arrival));
        assert_eq!(
            "fifo".parse::<Mode>(),
            Err(OptionsError::UnknownMode("fifo".into()))
        );
        assert_eq!(Mode::Arrival.to_string(), "arrival");
    }

    #[test]
    fn messages_say_what_is_allowed() {
        let msg = OptionsError::GapOutOfRange(0.7).to_string();
        assert!(msg.contains("strictly between 0 and 0.5"), "{msg}");
    }
}
