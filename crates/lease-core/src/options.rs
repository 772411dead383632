//! Options of one worker, and their validation into typed errors.
//!
//! Settings that apply to one way of counting live inside it
//! ([`Counting::Ranked`] carries the handover, the drain budget, graceful
//! leave and the schedule's spread; [`Counting::Arrival`] has none), so no
//! combination of options is contradictory. What can still be wrong is a
//! value out of its range (an empty name, a gap of 0.7); [`Options::validate`]
//! finds it, and [`crate::Worker::new`] and every adapter call it, so invalid
//! options fail once, at construction, never on the network path.

use std::time::Duration;

use crate::member::{Member, MemberError};
use crate::ownership::Mapping;
use crate::worker::Identity;

/// Which of the two counting scripts a worker runs, as recorded in the
/// group's rules (rule 12 of docs/protocol.md): the kind of a [`Counting`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Positions are ranks in a sorted set whose order the server carries from
    /// one interval to the next ([`Counting::Ranked`]).
    #[default]
    Ranked,
    /// The original `INCR` count, the position is the arrival index
    /// ([`Counting::Arrival`]).
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

/// How a worker's group counts its members, and what that way supports.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Counting {
    /// The default: each worker is a member of a sorted set whose order the
    /// server carries from one interval to the next, so retries, lost replies
    /// and jitter never reshuffle the group, a newcomer lands at the tail and
    /// a departed worker's hole is filled by the last one (rules 3 and 15).
    Ranked(Ranked),
    /// The original protocol (`INCR` of the interval key, the position is the
    /// arrival index), kept exact for comparison: whole pairs under
    /// `task.id % n == i`, a lease released at the reply that does not renew
    /// it, no graceful leave. Any one worker's failed registration stands
    /// the whole group down.
    Arrival,
}

impl Default for Counting {
    fn default() -> Self {
        Counting::Ranked(Ranked::default())
    }
}

impl Counting {
    /// The kind recorded in the group's rules.
    pub fn mode(&self) -> Mode {
        match self {
            Counting::Ranked(_) => Mode::Ranked,
            Counting::Arrival => Mode::Arrival,
        }
    }

    /// How tasks are split between the pairs: jump hash for task sets,
    /// `task.id % n` otherwise. One of the group's recorded rules.
    pub fn mapping(&self) -> Mapping {
        match self {
            Counting::Ranked(Ranked {
                handover: Handover::TaskSets,
                ..
            }) => Mapping::Consistent,
            _ => Mapping::Modulo,
        }
    }

    /// The Ranked settings, if this is Ranked counting.
    pub fn ranked(&self) -> Option<&Ranked> {
        match self {
            Counting::Ranked(r) => Some(r),
            Counting::Arrival => None,
        }
    }
}

/// The settings of [`Counting::Ranked`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ranked {
    /// How tasks move when the group changes (default [`Handover::TaskSets`]).
    pub handover: Handover,
    /// The drain budget `b` (rule 14): a lease, or part of one, that a later
    /// reply does not renew is kept and served until its own deadline minus
    /// `b`, then released. Nobody else can hold its tasks before its
    /// deadline, so `b` is the loop's time to finish the task in hand, not a
    /// safety margin. `None` (the default) means the gap `G = g·L`. At most
    /// the interval `L` ([`Options::max_drain_budget`]).
    pub drain_budget: Option<Duration>,
    /// Graceful leave on cancellation (rule 16, default on): the cancelled
    /// worker removes itself from the interval open at the time, serves
    /// what it holds until its drain ends, then the stream ends. The
    /// survivors take its tasks about an interval sooner than after a crash.
    /// Off, a cancel releases at once and the worker stays counted until the
    /// group re-counts, exactly as if it had crashed.
    pub graceful_leave: bool,
    /// Width of the schedule's spread (rule 8), in `L`: a worker fires at
    /// `G + frac(identity)·spread·L` into each interval. `None` (the default)
    /// is the early spread `min(g, 0.1, (1-2g)/2)`, which leaves the most of
    /// the interval for slow round trips and pauses. A process that runs
    /// thousands of groups on one Redis should widen it (up to
    /// [`Options::max_spread`]; docs/choosing-an-interval.md). At least 0.
    pub spread: Option<f64>,
}

impl Default for Ranked {
    fn default() -> Self {
        Self {
            handover: Handover::TaskSets,
            drain_budget: None,
            graceful_leave: true,
            spread: None,
        }
    }
}

/// How a Ranked group hands tasks over when it changes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Handover {
    /// The default (rule 13): a worker holds a set of tasks under the
    /// consistent mapping (jump hash), and a change of the group moves only
    /// the tasks that change owner: a join takes about `1/(n+1)` of the tasks
    /// to the newcomer while everyone else keeps serving. Ask the lease
    /// [`crate::Lease::owns`] before each task.
    #[default]
    TaskSets,
    /// Whole pairs `(i, n)` under `task.id % n == i`, for task sources that
    /// filter by that predicate themselves (`WHERE id % n = i`, queue
    /// partitions): [`crate::Lease::pair`] is always `Some`. Every change of
    /// `n` stands the whole group down from each lease's drain end to the
    /// next grant (about a third of an interval).
    WholePairs,
}

impl Handover {
    /// The name used on command lines and in reports: `task-sets` or
    /// `whole-pairs`.
    pub fn as_str(self) -> &'static str {
        match self {
            Handover::TaskSets => "task-sets",
            Handover::WholePairs => "whole-pairs",
        }
    }
}

impl std::fmt::Display for Handover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Handover {
    type Err = OptionsError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "task-sets" => Ok(Handover::TaskSets),
            "whole-pairs" => Ok(Handover::WholePairs),
            other => Err(OptionsError::UnknownHandover(other.to_owned())),
        }
    }
}

/// A deliberately broken rule, for the negative controls of the simulator's
/// tests (feature `negative-controls`, which no product build enables): each
/// variant undoes one rule of docs/protocol.md, and the history checker must
/// catch the runs it breaks. Without the feature the type is not exported
/// and no option can name one, so every check of it is constant false.
#[cfg_attr(not(feature = "negative-controls"), allow(dead_code, unreachable_pub))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NegativeControl {
    /// Rule 6: anchor a lease's deadline at the reply's arrival instead of
    /// the request's send.
    DeadlineFromArrival,
    /// Rule 13: grant `T(p(k-1))` alone instead of its intersection with
    /// `T(p(k-2))`.
    GrantNewestPairOnly,
    /// Rule 13: take `p(k-2)` from the previous processed reply even when it
    /// was not from `k-1`.
    PairFromAnyPreviousReply,
    /// Rule 14: keep an unrenewed lease until half an interval past its
    /// deadline.
    OverdrainPastDeadline,
    /// Rule 10: after a backward step of the server clock, grant over
    /// intervals that may have been reopened.
    GrantOverReopenedIntervals,
    /// Rule 17: grant and renew from registrations that executed less than
    /// `G` into their interval.
    GrantFromEarlyRegistration,
    /// Rule 10: after a stand-down, keep accepting the replies of requests
    /// sent before it.
    KeepRequestsAcrossStandDown,
    /// Rule 14: grant a lease whose drain end has passed, and start a drain
    /// before the reply that starts it.
    GrantPastDrainEnd,
    /// Rule 18: grant from a registration under a member name that another
    /// identity holds, without waiting for that incarnation's last lease to
    /// end.
    GrantWhileMemberInUse,
    /// Rule 10 with rule 19: after a backward step, grant from the third
    /// interval after the newest seen before it, as revision 2 did, instead
    /// of the fourth.
    ShortReopenFence,
    /// Rule 19: a grant certified by a member's *reserved* entry in closed
    /// `k-1` (it did not register in `k-1`) lives to `(k+2)L` like any
    /// other, instead of ending by `(k+1)L`.
    FullGrantFromReservation,
    /// Rule 19: when the worker's previous reply does not say its pair in
    /// closed `k-2`, take its last known position with that set's size as
    /// the second factor, without the server saying it was there.
    SecondFactorFromMemory,
    /// [`NegativeControl::GrantFromEarlyRegistration`] and
    /// [`NegativeControl::KeepRequestsAcrossStandDown`] at once: a forward
    /// step just under the gap that the worker detects overlaps only without
    /// both rules.
    EarlyGrantsAndKeptRequests,
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

/// What one worker needs to know about its group, and (for an adapter) how to
/// stop it: `C` is the adapter's cancellation type (each adapter names its
/// own `Options`, e.g. `lease_redis::Options` with tokio's
/// `CancellationToken`); the state machine itself never looks at it.
///
/// Build with [`Options::new`] and the `with_*` methods. The defaults are
/// the best measured behaviour: Ranked counting, task sets (incremental
/// handover under jump hash), graceful leave.
///
/// ```
/// use std::time::Duration;
/// use lease_core::{Handover, Options};
///
/// let options: Options = Options::new("mail-sender", Duration::from_secs(5))
///     .with_gap(0.2)
///     .with_prefix("prod:");
/// assert!(options.validate().is_ok());
/// // A task source that filters by `id % n = i` itself:
/// let sql = options.clone().with_handover(Handover::WholePairs);
/// assert!(sql.validate().is_ok());
/// assert!(Options::<()>::new("bad{name}", Duration::from_secs(5)).validate().is_err());
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Options<C = ()> {
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
    /// How the group counts its members (default Ranked, with its defaults).
    /// Every worker of a group must count the same way and split tasks the
    /// same way: both are rules recorded and checked in Redis
    /// ([`crate::GroupRules`]).
    pub counting: Counting,
    /// The worker's identity, for runs that replay; `None` (the default):
    /// the adapter draws a fresh one from the operating system at every
    /// start. See [`Identity`].
    pub identity: Option<Identity>,
    /// Whether the first request (the clock probe) waits for a point of the
    /// first interval drawn from the identity (rule 8) instead of leaving at
    /// once: for a process that starts thousands of workers together, whose
    /// probes would otherwise reach Redis in one burst. It delays the first
    /// lease by `L/2` on average. Off by default, and best left off for
    /// the workers of one group that start together (a deploy replacing
    /// many at once): spread, they join over two intervals instead of one,
    /// so the group's count changes twice and more tasks move.
    pub start_spread: bool,
    /// Cancelling this stands the worker down (the adapter's type).
    pub cancel: Option<C>,
    /// The member name this worker registers under (rule 18), `None` (the
    /// default) for an anonymous worker. Set with [`Options::with_member`].
    pub member: Option<Member>,
    /// A deliberately broken rule (feature `negative-controls`, tests only).
    #[cfg(feature = "negative-controls")]
    pub negative_control: Option<NegativeControl>,
}

impl<C> Options<C> {
    /// Options for group `name` with interval `interval` and every other
    /// option at its default.
    pub fn new(name: impl Into<String>, interval: Duration) -> Self {
        Self {
            name: name.into(),
            interval,
            gap: DEFAULT_GAP,
            prefix: String::new(),
            counting: Counting::default(),
            identity: None,
            start_spread: false,
            cancel: None,
            member: None,
            #[cfg(feature = "negative-controls")]
            negative_control: None,
        }
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

    /// Sets how the group counts its members.
    pub fn with_counting(mut self, counting: Counting) -> Self {
        self.counting = counting;
        self
    }

    /// Sets the Ranked handover (switching to Ranked counting with its
    /// defaults if the counting was [`Counting::Arrival`]).
    pub fn with_handover(self, handover: Handover) -> Self {
        self.with_ranked(|r| r.handover = handover)
    }

    /// Sets the Ranked drain budget (see [`Ranked::drain_budget`];
    /// switching to Ranked counting if it was [`Counting::Arrival`]).
    pub fn with_drain_budget(self, budget: Duration) -> Self {
        self.with_ranked(|r| r.drain_budget = Some(budget))
    }

    /// Turns Ranked graceful leave on or off (see [`Ranked::graceful_leave`];
    /// switching to Ranked counting if it was [`Counting::Arrival`]).
    pub fn with_graceful_leave(self, on: bool) -> Self {
        self.with_ranked(|r| r.graceful_leave = on)
    }

    /// Sets the Ranked schedule's spread, in `L` (see [`Ranked::spread`];
    /// switching to Ranked counting if it was [`Counting::Arrival`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use lease_core::Options;
    ///
    /// let o: Options = Options::new("g", Duration::from_secs(1));
    /// assert_eq!(o.effective_spread(), 0.1);
    /// assert!((o.max_spread() - 0.45).abs() < 1e-12);
    /// let wide = o.clone().with_spread(o.max_spread());
    /// assert!(wide.validate().is_ok());
    /// assert!(o.with_spread(0.5).validate().is_err());
    /// ```
    pub fn with_spread(self, spread: f64) -> Self {
        self.with_ranked(|r| r.spread = Some(spread))
    }

    /// Spreads the first request over the first interval (see
    /// [`Options::start_spread`]).
    pub fn with_start_spread(mut self, on: bool) -> Self {
        self.start_spread = on;
        self
    }

    /// Sets the identity (runs that replay; see [`Options::identity`]).
    pub fn with_identity(mut self, identity: Identity) -> Self {
        self.identity = Some(identity);
        self
    }

    /// Registers under the member name `name` (rule 18, Ranked counting):
    /// a restarted process with the same name takes back its position, and
    /// so its tasks, once the previous process's last lease has ended. Use a
    /// name that stays with the *slot*, not the process: a StatefulSet pod
    /// name such as `web-3` (docs/operations.md). Two live processes with
    /// one name never both hold; the later one is refused
    /// ([`crate::IdleReason::MemberInUse`]) until the other stops.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lease_core::Options;
    /// let o: Options = Options::new("mail", Duration::from_secs(1)).with_member("web-3").unwrap();
    /// assert_eq!(o.member.unwrap().as_str(), "web-3");
    /// assert!(Options::<()>::new("mail", Duration::from_secs(1)).with_member("web 3").is_err());
    /// ```
    pub fn with_member(mut self, name: &str) -> Result<Self, MemberError> {
        self.member = Some(Member::new(name)?);
        Ok(self)
    }

    /// Sets the cancellation: cancelling it stands the worker down.
    pub fn with_cancel(mut self, cancel: C) -> Self {
        self.cancel = Some(cancel);
        self
    }

    /// Breaks one rule on purpose (feature `negative-controls`, tests only).
    #[cfg(feature = "negative-controls")]
    pub fn with_negative_control(mut self, control: NegativeControl) -> Self {
        self.negative_control = Some(control);
        self
    }

    /// The same options with another cancellation type (an adapter's), and
    /// no cancellation.
    pub fn with_cancel_type<D>(self) -> Options<D> {
        Options {
            name: self.name,
            interval: self.interval,
            gap: self.gap,
            prefix: self.prefix,
            counting: self.counting,
            identity: self.identity,
            start_spread: self.start_spread,
            cancel: None,
            member: self.member,
            #[cfg(feature = "negative-controls")]
            negative_control: self.negative_control,
        }
    }

    /// Changes the Ranked settings (Ranked's defaults if the counting was
    /// Arrival).
    fn with_ranked(mut self, change: impl FnOnce(&mut Ranked)) -> Self {
        let mut ranked = self.counting.ranked().copied().unwrap_or_default();
        change(&mut ranked);
        self.counting = Counting::Ranked(ranked);
        self
    }

    /// The counting kind.
    pub fn mode(&self) -> Mode {
        self.counting.mode()
    }

    /// How tasks are split between the pairs (follows from the counting).
    pub fn mapping(&self) -> Mapping {
        self.counting.mapping()
    }

    /// The handover: Ranked's, or whole pairs for Arrival.
    pub fn handover(&self) -> Handover {
        self.counting
            .ranked()
            .map_or(Handover::WholePairs, |r| r.handover)
    }

    /// Whether a cancel leaves gracefully (rule 16; never for Arrival).
    pub fn graceful_leave(&self) -> bool {
        self.counting.ranked().is_some_and(|r| r.graceful_leave)
    }

    /// The width of the Ranked schedule's spread in force, in `L`:
    /// [`Ranked::spread`], or the early spread `min(g, 0.1, (1-2g)/2)`.
    pub fn effective_spread(&self) -> f64 {
        self.counting
            .ranked()
            .and_then(|r| r.spread)
            .unwrap_or_else(|| self.early_spread())
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

    /// The gap `G = g·L`, rounded to the microsecond, as the state machine
    /// uses it.
    pub fn gap_duration(&self) -> Duration {
        let l = self.interval.as_micros() as f64;
        Duration::from_micros((self.gap * l).round().max(0.0) as u64)
    }

    /// The drain budget in force: Ranked's, or the gap `G` when none was
    /// given; zero for Arrival, which releases at the reply.
    pub fn effective_drain_budget(&self) -> Duration {
        match &self.counting {
            Counting::Ranked(r) => r.drain_budget.unwrap_or_else(|| self.gap_duration()),
            Counting::Arrival => Duration::ZERO,
        }
    }

    /// The longest a lease lasts from the registration that granted it,
    /// `2L - G` (rule 6: a Ranked registration fires at `kL + G + u` and its
    /// lease ends by `(k+2)L`).
    pub fn lease_span(&self) -> Duration {
        (self.interval * 2).saturating_sub(self.gap_duration())
    }

    /// The longest drain budget accepted: the interval `L`. A lease is
    /// granted only while its drain end is ahead (rule 14), and a grant
    /// arrives up to `G + spread + RTT` into its interval with its deadline
    /// at the end of the next one, so a budget near the lease's span would
    /// leave no grant a drain end ahead of it; at most `L` keeps at least
    /// `L - G - spread·L` (0.4 L at the widest spread) for the round trip.
    pub fn max_drain_budget(&self) -> Duration {
        self.interval
    }

    /// Checks every value against its range; the first problem found is
    /// returned.
    pub fn validate(&self) -> Result<(), OptionsError> {
        validate_name(&self.name)?;
        validate_interval(self.interval)?;
        validate_gap(self.gap)?;
        validate_prefix(&self.prefix)?;
        let Counting::Ranked(ranked) = &self.counting else {
            if self.member.is_some() {
                return Err(OptionsError::MemberNeedsRanked);
            }
            return Ok(());
        };
        if let Some(budget) = ranked.drain_budget {
            let max = self.max_drain_budget();
            if budget > max {
                return Err(OptionsError::DrainBudgetTooLong { budget, max });
            }
        }
        if let Some(spread) = ranked.spread {
            let max = self.max_spread();
            // `!(a <= x && x <= b)` also rejects NaN; the tolerance lets a
            // decimal such as 0.45 through where the bound is computed as
            // 0.44999999999999996.
            if !(0.0 <= spread && spread <= max + 1e-9) {
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
    /// The drain budget is longer than the interval.
    #[error(
        "the drain budget is {budget:?}; it must be at most the interval, {max:?} (default: the gap G), or no lease would ever be granted ahead of its drain end"
    )]
    DrainBudgetTooLong {
        /// The budget given.
        budget: Duration,
        /// The longest accepted, the interval `L`.
        max: Duration,
    },
    /// A member name (rule 18) that is not valid.
    #[error("{0}")]
    Member(#[from] MemberError),
    /// A member name (rule 18) was given under `Arrival` counting, whose
    /// `INCR` positions cannot be carried by name.
    #[error("member names need Ranked counting; Arrival positions are arrival order")]
    MemberNeedsRanked,
    /// A handover name that is neither `task-sets` nor `whole-pairs`.
    #[error("unknown handover {0:?}; use \"task-sets\" or \"whole-pairs\"")]
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
    fn the_defaults_are_ranked_task_sets_with_graceful_leave() {
        let o = base();
        assert_eq!(o.gap, DEFAULT_GAP);
        assert_eq!(o.mode(), Mode::Ranked);
        assert_eq!(o.handover(), Handover::TaskSets);
        assert_eq!(o.mapping(), Mapping::Consistent);
        assert!(o.graceful_leave());
        assert_eq!(o.prefix, "");
        assert_eq!(o.validate(), Ok(()));
        let sql = base().with_handover(Handover::WholePairs);
        assert_eq!(sql.mapping(), Mapping::Modulo);
        let arrival = base().with_counting(Counting::Arrival);
        assert_eq!(
            (
                arrival.mapping(),
                arrival.handover(),
                arrival.graceful_leave()
            ),
            (Mapping::Modulo, Handover::WholePairs, false)
        );
        assert_eq!(arrival.effective_drain_budget(), Duration::ZERO);
    }

    #[test]
    fn a_ranked_setting_after_arrival_switches_to_ranked() {
        let o = base()
            .with_counting(Counting::Arrival)
            .with_drain_budget(Duration::from_millis(10));
        assert_eq!(o.mode(), Mode::Ranked);
        assert_eq!(o.effective_drain_budget(), Duration::from_millis(10));
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
    fn the_drain_budget_defaults_to_the_gap_and_is_at_most_the_interval() {
        let o = base();
        assert_eq!(o.effective_drain_budget(), Duration::from_millis(45));
        assert_eq!(o.lease_span(), Duration::from_millis(555));
        for ok in [0, 1, 45, 300] {
            let o = base().with_drain_budget(Duration::from_millis(ok));
            assert_eq!(o.validate(), Ok(()), "{ok} ms");
            assert_eq!(o.effective_drain_budget(), Duration::from_millis(ok));
        }
        for bad in [301, 555, 10_000] {
            assert_eq!(
                err(base().with_drain_budget(Duration::from_millis(bad))),
                OptionsError::DrainBudgetTooLong {
                    budget: Duration::from_millis(bad),
                    max: Duration::from_millis(300)
                }
            );
        }
    }

    #[test]
    fn the_widest_spread_is_accepted_as_written() {
        let o = base();
        assert!(o.clone().with_spread(0.45).validate().is_ok());
        assert!(o.clone().with_spread(o.max_spread()).validate().is_ok());
        assert!(o.with_spread(0.451).validate().is_err());
    }

    #[test]
    fn names_parse_and_print() {
        assert_eq!("ranked".parse::<Mode>(), Ok(Mode::Ranked));
        assert_eq!("arrival".parse::<Mode>(), Ok(Mode::Arrival));
        assert_eq!(
            "fifo".parse::<Mode>(),
            Err(OptionsError::UnknownMode("fifo".into()))
        );
        assert_eq!(Mode::Arrival.to_string(), "arrival");
        for h in [Handover::TaskSets, Handover::WholePairs] {
            assert_eq!(h.as_str().parse::<Handover>(), Ok(h));
        }
        assert!("incremental".parse::<Handover>().is_err());
    }

    #[test]
    fn messages_say_what_is_allowed() {
        let msg = OptionsError::GapOutOfRange(0.7).to_string();
        assert!(msg.contains("strictly between 0 and 0.5"), "{msg}");
    }
}
