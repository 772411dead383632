//! The state machine of one worker (DESIGN section 3).
//!
//! Inputs are `handle_*(now, ..)`, outputs `poll_*()`. After every input, the
//! driver drains [`Worker::poll_transmit`], then [`Worker::poll_event`], then
//! asks [`Worker::poll_timeout`] when to call [`Worker::handle_timeout`]
//! next. The worker never reads a clock and draws no random numbers: the
//! same inputs always give the same outputs.

use std::collections::VecDeque;
use std::fmt::{Display, Write as _};
use std::time::{Duration, Instant};

use crate::clock::{RttEstimate, SkewCheck, SkewEstimate};
use crate::diag;
use crate::event::{Assignment, Event, Idle, IdleReason};
use crate::lease::{Clock, Lease, LocalClock};
use crate::options::{HandoverMode, Mode, Options, OptionsError};
use crate::ownership::{Mapping, Slot, id_hash};
use crate::reply::{Counted, Reply, ReplyError};
use crate::rules::{GroupRules, Refusal};
use crate::script::{Script, write_key, write_rules_key};
use crate::tasks::{Part, TaskLease, Tasks};

/// Bound on the local clock's rate error against the server clock (rule 6).
const RHO: f64 = 1e-3;
/// How many requests (one live, the rest timed out but still acceptable in
/// `Ranked` mode) are remembered at once.
const MAX_PENDING: usize = 8;
/// Interval number named by a newcomer's first request, which has no clock
/// estimate yet: it never matches the server, so the script only reports its
/// time (rule 2: the wrong-interval answer is the newcomer's clock probe).
const PROBE_INTERVAL: u64 = 1;

/// The identity of one worker run in `Ranked` mode: 128 bits, new on every
/// start, and the member the worker is in each interval's sorted set.
///
/// Two live workers with one token are **one member** to the group: both
/// get its position and both hold its lease, so the lease is no longer
/// exclusive. The state machine draws no randomness itself; tokens come from
/// a constructor that draws them: the adapters draw one from the operating
/// system for every start (`lease_driver::random_token`), the simulator
/// derives one from its seed and the worker's number ([`Token::seeded`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Token(u128);

impl Token {
    /// A token from exactly these bits. **Reused bits are the same worker**:
    /// two live workers of one group built from the same bits share one
    /// position and both hold its lease, which breaks exclusivity. Only for
    /// bits that are unique per process start (drawn at random, as
    /// `lease_driver::random_token` does, or derived from a seed with
    /// [`Token::seeded`]); never a constant.
    pub const fn from_bits_same_worker_if_reused(bits: u128) -> Self {
        Self(bits)
    }

    /// A token derived from a run's `seed` and the worker's number `worker`,
    /// for deterministic runs (simulations, tests that replay): distinct
    /// worker numbers under one seed always give distinct tokens, and their
    /// schedule spreads (rule 8) differ.
    ///
    /// ```
    /// use lease_core::Token;
    /// assert_ne!(Token::seeded(1, 0), Token::seeded(1, 1));
    /// assert_eq!(Token::seeded(1, 0), Token::seeded(1, 0));
    /// ```
    pub const fn seeded(seed: u64, worker: u64) -> Self {
        // `id_hash` is a bijection, so for one seed the high halves (and so
        // the tokens) of distinct worker numbers are distinct.
        let high = id_hash(worker ^ id_hash(seed));
        let low = id_hash(high ^ seed.rotate_left(32));
        Self(((high as u128) << 64) | low as u128)
    }

    /// The token's bits.
    pub const fn bits(self) -> u128 {
        self.0
    }

    /// A number in `[0, 1)` derived from the token: its place in the early
    /// schedule's spread (rule 8), constant for the run.
    fn spread_fraction(self) -> f64 {
        ((self.0 >> 64) as u64) as f64 / 18_446_744_073_709_551_616.0
    }
}

impl Display for Token {
    /// 32 lowercase hex digits: fixed width, so the sorted set's tie-break by
    /// member is the numeric order of tokens.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// Identifies one registration request, so its reply or failure can be fed
/// back with [`Worker::handle_reply`] or [`Worker::handle_failure`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(u64);

impl Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// A registration to send now: `EVALSHA script.sha1() 3 keys[0] keys[1] keys[2] args..`
/// (or `EVAL script.source() ..` after `NOSCRIPT`).
#[derive(Debug)]
pub struct Transmit<'a> {
    /// Feed the outcome back under this id.
    pub id: RequestId,
    /// The script to run.
    pub script: &'static Script,
    /// `KEYS`: the interval the worker expects, the one before it, and the
    /// group's rules record.
    pub keys: [&'a str; 3],
    /// `ARGV`.
    pub args: &'a [String],
    /// After this instant the reply is of no use: the driver may abandon the
    /// request (and report it with [`Worker::handle_failure`] or not at all).
    pub expires_at: Instant,
}

/// Options after validation, in the integer units the state machine uses.
#[derive(Clone, Debug)]
struct Config {
    name: String,
    prefix: String,
    mode: Mode,
    gap: f64,
    interval: Duration,
    interval_ms: u64,
    /// `L` in microseconds.
    l: i64,
    /// `G = g * L` in microseconds.
    g: i64,
    /// Width of the Ranked schedule's spread (rule 8),
    /// [`Options::effective_spread`] `* L`.
    spread: i64,
    /// Key TTL: keys expire a few intervals after they close.
    ttl_ms: u64,
    /// The task mapping.
    mapping: Mapping,
    /// The rules this worker follows (rule 12).
    rules: GroupRules,
    /// Rule 14: a kept lease is released this long before its deadline, in
    /// microseconds.
    drain_budget: i64,
    /// The negative control of rule 14: keep past the deadline instead.
    sabotage_overdrain: bool,
    /// The negative control of the reopened-interval fence (rule 10).
    sabotage_reopened: bool,
    /// Rule 16: leave gracefully on cancellation.
    graceful_leave: bool,
    /// Rule 13: whole pairs or task sets.
    handover: HandoverMode,
    /// Negative controls of rule 13 (research `bad-arrival`, `bad-k1only`,
    /// `bad-skip`).
    sabotage_arrival: bool,
    sabotage_k1only: bool,
    sabotage_skip: bool,
    /// The negative control of rule 17: grant from early registrations.
    sabotage_early: bool,
    /// The negative control of rule 10's forgetting: keep the requests sent
    /// before a stand-down.
    sabotage_stand_down: bool,
    /// The negative control of the late-grant rule: grant past the drain end.
    sabotage_late: bool,
}

impl Config {
    fn new(o: &Options) -> Result<Self, OptionsError> {
        o.validate()?;
        let interval_ms = u64::try_from(o.interval.as_millis()).unwrap_or(u64::MAX);
        let l = i64::try_from(interval_ms).unwrap_or(i64::MAX / 1000) * 1000;
        let lf = l as f64;
        Ok(Self {
            name: o.name.clone(),
            prefix: o.prefix.clone(),
            mode: o.mode,
            gap: o.gap,
            interval: o.interval,
            interval_ms,
            l,
            g: (o.gap * lf).round() as i64,
            spread: (o.effective_spread() * lf).round() as i64,
            ttl_ms: interval_ms.saturating_mul(3),
            mapping: o.mapping,
            rules: GroupRules::of(o),
            drain_budget: i64::try_from(o.effective_drain_budget().as_micros()).unwrap_or(i64::MAX),
            sabotage_overdrain: o.sabotage_overdrain_past_deadline,
            sabotage_reopened: o.sabotage_grant_over_reopened_intervals,
            graceful_leave: o.graceful_leave,
            handover: o.handover,
            sabotage_arrival: o.sabotage_deadline_from_arrival,
            sabotage_k1only: o.sabotage_grant_newest_pair_only,
            sabotage_skip: o.sabotage_pair_from_any_previous_reply,
            sabotage_early: o.sabotage_grant_from_early_registration,
            sabotage_stand_down: o.sabotage_keep_requests_across_stand_down,
            sabotage_late: o.sabotage_grant_past_drain_end,
        })
    }
}

/// One request in flight.
#[derive(Clone, Copy, Debug)]
struct Pending {
    id: RequestId,
    /// Local time of the send: every lease deadline is anchored here (rule 6).
    sent_at: i64,
    /// The interval named in the keys.
    interval: u64,
    /// When to stop waiting and retry (adaptive, rule 9).
    timeout_at: i64,
    /// Timed out: a retry is under way, but in `Ranked` mode the reply is
    /// still accepted (its deadline is anchored at its own send).
    timed_out: bool,
    /// After this the reply is dropped.
    give_up_at: i64,
}

/// What earlier replies told the worker (rules 4 and 5). Expiry keeps it
/// (rule 7); only a server-clock problem clears it.
#[derive(Clone, Copy, Debug, Default)]
struct Memory {
    /// `Arrival`: the interval of the last counted reply and the index it
    /// gave, to pair with that interval's final count one interval later.
    held: Option<(u64, u32)>,
    /// The pair implied at the last processed reply, and that reply's interval.
    previous: Option<(u64, Option<Slot>)>,
    /// The newest interval processed, and the local time its reply arrived.
    newest: Option<(u64, i64)>,
    /// The last pair any reply implied: its position is what a returning
    /// worker sends (rule 15).
    last_slot: Option<Slot>,
    /// `Arrival`: phase `(x + 0.5) / n` of the slot to fire in next.
    arrival_phase: Option<f64>,
    /// Rule 17: a counted reply from this interval executed too early to
    /// grant, and the pair implied before it (`p(k-2)`), kept so that a
    /// second registration later in the same interval can grant.
    early: Option<(u64, Option<Slot>)>,
}

/// What the worker knows about the server clock's history (rule 10), beyond
/// the skew estimate. Survives the memory reset of a stand-down.
#[derive(Clone, Copy, Debug, Default)]
struct ClockHistory {
    /// The newest interval any answer named (counted, wrong-interval or
    /// refused), and the local time that answer arrived.
    latest: Option<(u64, i64)>,
    /// After a backward step: the newest interval seen before it. Intervals
    /// up to it may have been reopened and written twice, so nothing is
    /// granted until the interval two before the current one is newer.
    reopened_through: Option<u64>,
}

/// Rule 16: a graceful leave under way (after [`Worker::handle_cancel`]).
#[derive(Clone, Copy, Debug, Default)]
struct Leaving {
    /// Leave requests sent so far: one, and one retry after a wrong-interval
    /// answer, a failure or a timeout.
    sent: u8,
    /// The leave request in flight.
    in_flight: Option<Pending>,
    /// No leave request will be sent or awaited any more.
    done: bool,
}

/// One part an incremental worker holds (rule 13), with its drain (rule 14).
#[derive(Clone, Debug)]
struct HeldPart {
    lease: TaskLease,
    /// Kept, not renewed: released at this local instant (its deadline
    /// minus the drain budget).
    drain_until: Option<i64>,
}

impl HeldPart {
    /// The local instant the part ends, unless renewed.
    fn end(&self) -> i64 {
        let deadline = self.lease.inner().deadline_micros();
        self.drain_until.map_or(deadline, |d| d.min(deadline))
    }
}

/// When to send next.
#[derive(Clone, Copy, Debug, Default)]
struct Schedule {
    /// Local time of the next send, if one is due.
    fire_at: Option<i64>,
    /// The interval aimed at, once known.
    target: Option<u64>,
    /// Failures in a row, for backoff.
    attempt: u32,
    /// Wrong-interval answers in a row.
    mismatches: u32,
}

/// One worker's view of its group: the whole protocol as a sans-IO state
/// machine.
///
/// The driver loop (what every adapter is):
///
/// 1. Create the worker with [`Worker::new`].
/// 2. Send every [`Worker::poll_transmit`] to Redis as `EVALSHA`, remembering
///    its [`RequestId`].
/// 3. Hand every [`Worker::poll_event`] to the application
///    ([`Event::Assignment`] values are the stream).
/// 4. Wait until [`Worker::poll_timeout`] or until a reply arrives, whichever
///    comes first.
/// 5. Feed what happened: [`Worker::handle_reply`] with the reply's integers,
///    [`Worker::handle_failure`] if the request failed, or
///    [`Worker::handle_timeout`] if the deadline passed (spurious calls are
///    harmless).
/// 6. Go to 2, until [`Event::Stopped`] (after [`Worker::handle_cancel`]).
///
/// ```
/// use std::time::{Duration, Instant};
/// use lease_core::{Event, Options, Token, Worker};
///
/// let t0 = Instant::now();
/// let options = Options::new("mail-sender", Duration::from_millis(300));
/// let mut worker = Worker::new(&options, Token::seeded(1, 0), t0).unwrap();
/// assert!(matches!(worker.poll_event(), Some(Event::Assignment(a)) if a.is_idle())); // the opening idle
///
/// worker.handle_timeout(t0);
/// let transmit = worker.poll_transmit().expect("a newcomer registers at once");
/// let id = transmit.id;
/// // ... EVALSHA transmit.script.sha1() with transmit.keys and transmit.args ...
/// # let reply = [0, 10, 3, 1500];
/// worker.handle_reply(t0 + Duration::from_millis(1), id, &reply).unwrap();
/// assert!(worker.poll_timeout().is_some());
/// ```
#[derive(Debug)]
pub struct Worker {
    cfg: Config,
    token: Token,
    clock: LocalClock,
    skew: SkewEstimate,
    rtt: RttEstimate,
    pending: Vec<Pending>,
    memory: Memory,
    history: ClockHistory,
    /// The refusal in force (rule 12), until a registration is counted again.
    refused: Option<Refusal>,
    /// The clock handed-out leases answer `is_valid()` on.
    now_clock: Clock,
    lease: Option<Lease>,
    /// Interval of the registration that last granted or renewed the lease.
    lease_interval: u64,
    /// Rule 14: the lease in force is kept, not renewed, and is released at
    /// this local instant (its deadline minus the drain budget).
    drain_until: Option<i64>,
    /// Rule 13: the parts an incremental worker holds, oldest grant first.
    parts: Vec<HeldPart>,
    /// The parts of the last task-set value handed out, for its deltas.
    emitted: Vec<Part>,
    /// The last task-set value handed out, while it holds something.
    tasks_value: Option<Tasks>,
    /// Rule 16: cancelled with graceful leave, not stopped yet.
    leaving: Option<Leaving>,
    schedule: Schedule,
    /// A transmit is ready in `keys`/`args` and not yet polled.
    ready: Option<(RequestId, i64)>,
    keys: [String; 3],
    args: Vec<String>,
    events: VecDeque<Event>,
    next_id: u64,
    stopped: bool,
}

impl Worker {
    /// A new worker that starts at `now`. Fails if the options are invalid.
    ///
    /// The first event is the idle pair; the first registration is due at once.
    pub fn new(options: &Options, token: Token, now: Instant) -> Result<Self, OptionsError> {
        let cfg = Config::new(options)?;
        let args = match cfg.mode {
            Mode::Arrival => 4,
            Mode::Ranked => 6,
        };
        let mut events = VecDeque::with_capacity(4);
        events.push_back(Event::Assignment(Assignment::Idle(Idle {
            reason: IdleReason::Started,
            since: now,
            ended: None,
            ended_tasks: None,
        })));
        let mut keys = [
            String::with_capacity(64),
            String::with_capacity(64),
            String::with_capacity(64),
        ];
        write_rules_key(&mut keys[2], &cfg.prefix, &cfg.name);
        let mut args = vec![String::with_capacity(40); args];
        args[3] = cfg.rules.encode();
        Ok(Self {
            cfg,
            token,
            clock: LocalClock::new(now),
            skew: SkewEstimate::default(),
            rtt: RttEstimate::default(),
            pending: Vec::with_capacity(MAX_PENDING),
            memory: Memory::default(),
            history: ClockHistory::default(),
            refused: None,
            now_clock: Clock::system(),
            lease: None,
            lease_interval: 0,
            drain_until: None,
            parts: Vec::new(),
            emitted: Vec::new(),
            tasks_value: None,
            leaving: None,
            schedule: Schedule {
                fire_at: Some(0),
                ..Schedule::default()
            },
            ready: None,
            keys,
            args,
            events,
            next_id: 0,
            stopped: false,
        })
    }

    /// Leases handed out answer [`Lease::is_valid`] on `clock` (the driver's
    /// clock) instead of [`Instant::now`].
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.now_clock = clock;
        self
    }

    // ----- getters -------------------------------------------------------

    /// The group name.
    pub fn name(&self) -> &str {
        &self.cfg.name
    }

    /// The counting mode.
    pub fn mode(&self) -> Mode {
        self.cfg.mode
    }

    /// The interval length.
    pub fn interval(&self) -> Duration {
        self.cfg.interval
    }

    /// The gap fraction.
    pub fn gap(&self) -> f64 {
        self.cfg.gap
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.cfg.prefix
    }

    /// This run's token.
    pub fn token(&self) -> Token {
        self.token
    }

    /// The rules this worker follows, as recorded in Redis (rule 12).
    pub fn rules(&self) -> GroupRules {
        self.cfg.rules
    }

    /// The refusal in force, if the group's recorded rules differ from this
    /// worker's: it then holds nothing and writes nothing.
    pub fn refusal(&self) -> Option<Refusal> {
        self.refused
    }

    /// The lease in force at `now`, if any. This is the truth even if no
    /// timer has fired (a stalled process): a lease past its deadline is not
    /// returned.
    pub fn lease_at(&self, now: Instant) -> Option<&Lease> {
        self.lease.as_ref().filter(|l| l.is_valid_at(now))
    }

    /// The task set in force at `now` (incremental handover), if any part
    /// of it is valid then.
    pub fn tasks_at(&self, now: Instant) -> Option<&Tasks> {
        self.tasks_value
            .as_ref()
            .filter(|t| t.leases().iter().any(|l| l.is_valid_at(now)))
    }

    /// The handover mode (rule 13).
    pub fn handover(&self) -> HandoverMode {
        self.cfg.handover
    }

    /// Whether this worker holds slot 0, the group's exclusive leader, at `now`.
    pub fn is_leader(&self, now: Instant) -> bool {
        self.lease_at(now).is_some_and(Lease::is_leader)
    }

    /// Estimated server time at `now` in microseconds since the Unix epoch,
    /// once a reply has been seen.
    pub fn server_time_at(&self, now: Instant) -> Option<u64> {
        let off = self.skew.offset()?;
        u64::try_from(self.clock.micros(now).saturating_add(off)).ok()
    }

    /// Whether the worker has stopped (after [`Worker::handle_cancel`]; with
    /// graceful leave, once the lease it held has drained).
    pub fn is_stopped(&self) -> bool {
        self.stopped
    }

    /// Whether the worker is leaving gracefully (rule 16): cancelled, no
    /// longer registering, still serving the lease it held until its
    /// deadline minus the drain budget.
    pub fn is_leaving(&self) -> bool {
        self.leaving.is_some() && !self.stopped
    }

    // ----- outputs -------------------------------------------------------

    /// The registration to send now, if one is due. Drain after every input.
    pub fn poll_transmit(&mut self) -> Option<Transmit<'_>> {
        let (id, give_up_at) = self.ready.take()?;
        let script = if self.leaving.is_some() {
            Script::leave()
        } else {
            Script::for_mode(self.cfg.mode)
        };
        Some(Transmit {
            id,
            script,
            keys: [&self.keys[0], &self.keys[1], &self.keys[2]],
            args: &self.args,
            expires_at: self.clock.instant(give_up_at),
        })
    }

    /// The next event for the application. Drain after every input.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When [`Worker::handle_timeout`] must be called next, if ever.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.stopped {
            return None;
        }
        let live = self.pending.iter().find(|p| !p.timed_out);
        let fire = match (live, self.ready) {
            (None, None) => self.schedule.fire_at,
            _ => None,
        };
        let leave = self.leaving.and_then(|l| l.in_flight).map(|p| p.timeout_at);
        [
            fire,
            live.map(|p| p.timeout_at),
            self.lease.as_ref().map(Lease::deadline_micros),
            self.drain_until,
            leave,
            self.parts.iter().map(HeldPart::end).min(),
        ]
        .into_iter()
        .flatten()
        .min()
        .map(|us| self.clock.instant(us))
    }

    // ----- inputs --------------------------------------------------------

    /// Time passed: applies expiry, request timeouts and the schedule.
    /// Spurious or early calls are harmless.
    pub fn handle_timeout(&mut self, now: Instant) {
        let now = self.clock.micros(now);
        self.expire(now);
        if self.stopped {
            return;
        }
        if let Some(leaving) = &mut self.leaving {
            if leaving.in_flight.is_some_and(|p| p.timeout_at <= now) {
                leaving.in_flight = None;
                self.send_leave(now);
            }
            self.maybe_finish_leaving(now);
            return;
        }
        if let Some(i) = self
            .pending
            .iter()
            .position(|p| !p.timed_out && p.timeout_at <= now)
        {
            match self.cfg.mode {
                // The original abandons a timed-out request (A9).
                Mode::Arrival => {
                    self.pending.remove(i);
                }
                // Hedge: keep accepting its reply (rule 9).
                Mode::Ranked => self.pending[i].timed_out = true,
            }
            self.on_failure(now, &"timed out");
        }
        self.pending.retain(|p| p.give_up_at > now);
        self.maybe_send(now);
    }

    /// The script replied to request `id` with `values` (the reply array as
    /// integers). A malformed or unexpected reply counts as a failed
    /// registration and is returned as an error; it never grants anything.
    /// Replies to unknown or abandoned requests are ignored.
    pub fn handle_reply(
        &mut self,
        now: Instant,
        id: RequestId,
        values: &[i64],
    ) -> Result<(), ReplyError> {
        if self.is_leave_request(id) {
            let answer = parse_leave(self.cfg.interval_ms, values);
            let result = answer.as_ref().map(|_| ()).map_err(Clone::clone);
            self.on_leave_answer(now, answer);
            return result;
        }
        let reply = Reply::parse(self.cfg.mode, self.cfg.interval_ms, values);
        self.handle_parsed(now, id, reply)
    }

    /// Like [`Worker::handle_reply`], for a reply the driver already parsed
    /// (or could not turn into integers: pass the error).
    pub fn handle_parsed(
        &mut self,
        now: Instant,
        id: RequestId,
        reply: Result<Reply, ReplyError>,
    ) -> Result<(), ReplyError> {
        if self.is_leave_request(id) {
            // Only a failure to read integers reaches here for a leave.
            let err = reply.err().unwrap_or(ReplyError::NotIntegers);
            self.on_leave_answer(now, Err(err.clone()));
            return Err(err);
        }
        let now = self.clock.micros(now);
        self.expire(now);
        if self.stopped || self.leaving.is_some() {
            return Ok(());
        }
        let Some(at) = self.pending.iter().position(|p| p.id == id) else {
            return Ok(());
        };
        let req = self.pending.remove(at);
        let checked = reply.and_then(|r| check_interval(&r, req.interval).map(|()| r));
        let result = match checked {
            Ok(reply) => {
                self.process(now, &req, reply);
                Ok(())
            }
            Err(e) => {
                diag::reply_rejected(&self.cfg.name, &e);
                if !req.timed_out {
                    self.on_failure(now, &e);
                }
                Err(e)
            }
        };
        self.maybe_send(now);
        result
    }

    /// Request `id` failed (connection error, Redis error, or the driver gave
    /// up on it). It is retried with a short backoff until the band ends;
    /// failures never reach the application as errors.
    pub fn handle_failure(&mut self, now: Instant, id: RequestId, error: &dyn Display) {
        let now = self.clock.micros(now);
        self.expire(now);
        if self.stopped {
            return;
        }
        if let Some(leaving) = &mut self.leaving {
            if leaving.in_flight.is_some_and(|p| p.id == id) {
                leaving.in_flight = None;
                self.send_leave(now);
            }
            self.maybe_finish_leaving(now);
            return;
        }
        if let Some(at) = self.pending.iter().position(|p| p.id == id) {
            let req = self.pending.remove(at);
            if !req.timed_out {
                self.on_failure(now, error);
            }
        }
        self.maybe_send(now);
    }

    /// Cancellation: if a lease is held, the idle pair is emitted once, then
    /// [`Event::Stopped`]; nothing is sent after this. The worker stays
    /// counted in the interval it last registered in, so its slot is unowned
    /// for up to about one interval, exactly as if it had crashed.
    ///
    /// With [`crate::Options::graceful_leave`] (rule 16) the worker instead
    /// sends one leave request (the leave script removes its token from the
    /// set of the interval open at execution; retried once), registers no
    /// more, ignores replies to earlier registrations, and keeps the lease it
    /// holds until its deadline minus the drain budget. Then the idle value
    /// (reason [`IdleReason::Cancelled`]), then [`Event::Stopped`], once the
    /// leave request is answered or given up. Later calls change nothing.
    pub fn handle_cancel(&mut self, now: Instant) {
        if self.stopped || self.leaving.is_some() {
            return;
        }
        let now = self.clock.micros(now);
        self.expire(now);
        if self.cfg.graceful_leave {
            self.start_leaving(now);
            return;
        }
        self.release(now, IdleReason::Cancelled);
        self.stopped = true;
        self.pending.clear();
        self.ready = None;
        self.schedule.fire_at = None;
        self.events.push_back(Event::Stopped);
        diag::discover_stopped(&self.cfg.name, diag::StopReason::Abort);
    }

    // ----- graceful leave (rule 16) -----------------------------------------

    fn is_leave_request(&self, id: RequestId) -> bool {
        self.leaving
            .and_then(|l| l.in_flight)
            .is_some_and(|p| p.id == id)
    }

    /// Rule 16: stop registering, keep the lease held until its deadline
    /// minus the drain budget, and send the leave request.
    fn start_leaving(&mut self, now: i64) {
        self.pending.clear();
        self.ready = None;
        self.schedule.fire_at = None;
        self.leaving = Some(Leaving::default());
        self.drain_parts(now);
        if let Some(deadline) = self.lease.as_ref().map(Lease::deadline_micros) {
            let until = if self.cfg.sabotage_overdrain {
                let past = deadline.saturating_add(self.cfg.l / 2);
                if let Some(l) = &self.lease {
                    l.extend_to(past);
                }
                past
            } else {
                // A kept lease already draining ends no later than before.
                let until = deadline.saturating_sub(self.cfg.drain_budget);
                self.drain_until.map_or(until, |u| u.min(until))
            };
            if until <= now {
                self.release(now, IdleReason::Cancelled);
            } else {
                self.drain_until = Some(until);
            }
        }
        self.send_leave(now);
        self.maybe_finish_leaving(now);
    }

    /// The leave request, or its one retry: keys of the interval `c` the
    /// worker believes open and of `c + 1` (the script removes from
    /// whichever is open at execution, or answers wrong-interval).
    fn send_leave(&mut self, now: i64) {
        let Some(mut leaving) = self.leaving else {
            return;
        };
        if leaving.done || leaving.in_flight.is_some() {
            return;
        }
        if leaving.sent >= 2 {
            leaving.done = true;
            self.leaving = Some(leaving);
            return;
        }
        leaving.sent += 1;
        let c = if self.skew.offset().is_some() {
            self.server_interval(now)
        } else {
            PROBE_INTERVAL
        };
        let id = RequestId(self.next_id);
        self.next_id += 1;
        let floor = (self.cfg.l / 20).max(1000).min(self.cfg.l);
        let t = self.rtt.timeout(self.cfg.l / 2).max(floor).min(self.cfg.l);
        let cfg = &self.cfg;
        write_key(&mut self.keys[0], &cfg.prefix, &cfg.name, c);
        write_key(&mut self.keys[1], &cfg.prefix, &cfg.name, c + 1);
        self.args.truncate(4);
        let values: [&dyn Display; 4] = [&cfg.interval_ms, &c, &cfg.rules.encode(), &self.token];
        for (arg, v) in self.args.iter_mut().zip(values) {
            arg.clear();
            let _ = write!(arg, "{v}");
        }
        leaving.in_flight = Some(Pending {
            id,
            sent_at: now,
            interval: c,
            timeout_at: now + t,
            timed_out: false,
            give_up_at: now + t,
        });
        self.leaving = Some(leaving);
        self.ready = Some((id, now + t));
    }

    /// The leave request was answered (or the answer was malformed).
    fn on_leave_answer(&mut self, now: Instant, answer: Result<LeaveAnswer, ReplyError>) {
        let now = self.clock.micros(now);
        self.expire(now);
        let Some(leaving) = &mut self.leaving else {
            return;
        };
        let Some(req) = leaving.in_flight.take() else {
            return;
        };
        let answer = match answer {
            Ok(answer) => answer,
            Err(e) => {
                diag::reply_rejected(&self.cfg.name, &e);
                self.send_leave(now);
                self.maybe_finish_leaving(now);
                return;
            }
        };
        if !answer.wrong_interval {
            leaving.done = true;
        }
        // Rule 10 for leave answers too: the lease still being served ends
        // at once if the server clock jumped or went back.
        let went_back = self
            .history
            .latest
            .is_some_and(|(newest, received)| answer.interval < newest && req.sent_at >= received);
        let check = self
            .skew
            .observe(req.sent_at, now, answer.server, self.cfg.g, 8 * self.cfg.l);
        if went_back || matches!(check, SkewCheck::Jumped { .. }) {
            diag::server_clock_moved(&self.cfg.name, server_step(check), answer.interval);
            self.release(now, IdleReason::ServerClock);
        }
        if answer.wrong_interval {
            // Aim the one retry with this clock sample.
            self.send_leave(now);
        }
        self.maybe_finish_leaving(now);
    }

    /// Rule 16 ends when the lease held has drained and the leave request
    /// is answered or given up: then [`Event::Stopped`].
    fn maybe_finish_leaving(&mut self, now: i64) {
        let Some(leaving) = self.leaving else {
            return;
        };
        if self.stopped || self.lease.is_some() || !self.parts.is_empty() {
            return;
        }
        if !leaving.done && (leaving.in_flight.is_some() || self.ready.is_some()) {
            return;
        }
        if !leaving.done {
            self.send_leave(now);
            if self.ready.is_some() {
                return;
            }
        }
        self.stopped = true;
        self.ready = None;
        self.events.push_back(Event::Stopped);
        diag::discover_stopped(&self.cfg.name, diag::StopReason::Abort);
    }

    // ----- the rules -----------------------------------------------------

    /// Rule 7, timers first: a lease past its deadline ends at its deadline,
    /// whenever the worker notices. Memory is kept.
    fn expire(&mut self, now: i64) {
        self.expire_parts(now);
        let Some(deadline) = self.lease.as_ref().map(Lease::deadline_micros) else {
            return;
        };
        // Rule 14: a kept lease ends at its deadline minus the drain budget;
        // rule 16: so does the lease a leaving worker still serves.
        if let Some(until) = self.drain_until.filter(|&u| now >= u) {
            let reason = if self.leaving.is_some() {
                IdleReason::Cancelled
            } else {
                IdleReason::HandedOver
            };
            self.release(until, reason);
            return;
        }
        if now >= deadline {
            diag::lease_expired(
                &self.cfg.name,
                self.lease_interval,
                micros_to_duration(now - deadline),
            );
            self.release(deadline, IdleReason::Expired);
        }
    }

    /// Ends the lease in force, if any, at `at` (never after its deadline),
    /// and hands the idle value with `reason` to the stream. Returns whether
    /// a lease was held.
    fn release(&mut self, at: i64, reason: IdleReason) -> bool {
        if !self.parts.is_empty() {
            for p in &self.parts {
                p.lease.inner().end_at(at);
            }
            let since = self
                .parts
                .iter()
                .map(HeldPart::end)
                .max()
                .unwrap_or(at)
                .min(at);
            self.parts.clear();
            self.idle_after_tasks(since, reason);
            return true;
        }
        self.drain_until = None;
        let Some(lease) = self.lease.take() else {
            return false;
        };
        let at = at.min(lease.deadline_micros());
        lease.end_at(at);
        diag::lease_released(&self.cfg.name, lease.slot(), reason.as_str());
        self.events
            .push_back(Event::Assignment(Assignment::Idle(Idle {
                reason,
                since: self.clock.instant(at),
                ended: Some(lease),
                ended_tasks: None,
            })));
        true
    }

    /// Rule 5, and rule 14 in `Ranked` mode: the newest reply renews nothing.
    /// `Arrival` releases at once, as the original does. `Ranked` keeps the
    /// lease (still exclusive: nobody else can hold its tasks before its
    /// deadline) and releases it at its deadline minus the drain budget, or
    /// at once if that instant has passed.
    fn hand_over(&mut self, now: i64) {
        if self.cfg.handover == HandoverMode::Incremental {
            self.drain_parts(now);
            return;
        }
        let Some(deadline) = self.lease.as_ref().map(Lease::deadline_micros) else {
            return;
        };
        if self.cfg.mode == Mode::Arrival {
            self.release(now, IdleReason::HandedOver);
            return;
        }
        if self.drain_until.is_some() {
            return;
        }
        let until = if self.cfg.sabotage_overdrain {
            // The negative control: past the deadline (breaks rule 6).
            let past = deadline.saturating_add(self.cfg.l / 2);
            if let Some(l) = &self.lease {
                l.extend_to(past);
            }
            past
        } else {
            deadline.saturating_sub(self.cfg.drain_budget)
        };
        if until <= now {
            self.release(now, IdleReason::HandedOver);
        } else {
            self.drain_until = Some(until);
        }
    }

    fn grant(&mut self, slot: Slot, interval: u64, deadline: i64) {
        let lease = Lease::new(
            slot,
            interval,
            self.cfg.mapping,
            self.clock,
            self.now_clock.clone(),
            deadline,
        );
        diag::lease_granted(&self.cfg.name, slot);
        self.events
            .push_back(Event::Assignment(Assignment::Held(lease.clone())));
        self.lease = Some(lease);
    }

    fn process(&mut self, now: i64, req: &Pending, reply: Reply) {
        self.rtt.observe(now - req.sent_at);
        let server = i64::try_from(reply.server_time()).unwrap_or(i64::MAX);
        let interval = reply.interval();
        // Rule 10, for every answer (wrong-interval and refused ones too):
        // an interval older than one already seen, on a request sent after
        // that answer arrived, means the server clock went back.
        let latest = self.history.latest;
        let went_back =
            latest.is_some_and(|(newest, received)| interval < newest && req.sent_at >= received);
        // A late answer from an older interval (rule 9): counted replies are
        // compared with the newest interval processed, so that a hedged
        // request's reply still counts after a wrong-interval answer named a
        // newer interval; other answers with the newest interval named.
        let newest = match reply {
            Reply::Counted(_) => self.memory.newest.map(|(k, _)| k),
            _ => latest.map(|(k, _)| k),
        };
        let late = newest.is_some_and(|newest| interval < newest) && !went_back;
        let check = self
            .skew
            .observe(req.sent_at, now, server, self.cfg.g, 8 * self.cfg.l);
        match check {
            _ if went_back => self.stand_down_for_clock(now, server_step(check), interval, true),
            SkewCheck::Jumped { by } => self.stand_down_for_clock(now, by, interval, by < 0),
            SkewCheck::Consistent => {}
        }
        if went_back || latest.is_none_or(|(newest, _)| interval >= newest) {
            self.history.latest = Some((interval, now));
        }
        match reply {
            // A late answer from an older interval says nothing new (rule 9).
            _ if late => {}
            // A wrong-interval answer wrote nothing: re-aim.
            Reply::WrongInterval { .. } => self.on_wrong_interval(now),
            Reply::Refused { recorded, .. } => self.on_refused(now, interval, recorded),
            Reply::Counted(c) => {
                // The closed set of k-1 cannot have changed: nothing new,
                // unless the first reply from k executed too early to grant
                // (rule 17) and this one may.
                let seen = self
                    .memory
                    .newest
                    .is_some_and(|(newest, _)| interval == newest);
                let retry_of_early = self.memory.early.is_some_and(|(k, _)| k == interval);
                if !(seen && self.cfg.mode == Mode::Ranked) || retry_of_early {
                    self.on_counted(now, req, c, server);
                }
            }
        }
    }

    /// Rule 10: stand down and forget what earlier replies implied. After a
    /// backward step, intervals up to the newest one seen before it may be
    /// reopened (written again after some workers read them closed), so
    /// nothing is granted until the interval two before the current one is
    /// newer than that (`ClockHistory::reopened_through`).
    fn stand_down_for_clock(&mut self, now: i64, by: i64, interval: u64, backward: bool) {
        diag::server_clock_moved(&self.cfg.name, by, interval);
        self.release(now, IdleReason::ServerClock);
        self.memory = Memory::default();
        // Nothing read before the step may certify a grant after it: the
        // replies of requests still in flight would seed the memory again.
        if !self.cfg.sabotage_stand_down {
            self.pending.clear();
        }
        if backward && let Some((newest, _)) = self.history.latest {
            let fence = self
                .history
                .reopened_through
                .map_or(newest, |f| f.max(newest));
            self.history.reopened_through = Some(fence);
        }
    }

    /// Rule 12: the group's recorded rules differ from ours. The
    /// registration wrote nothing; hold nothing, say so once (and again if
    /// the record changes), and keep registering once an interval, so the
    /// worker takes over when the record agrees or expires.
    fn on_refused(&mut self, now: i64, k: u64, recorded: Option<GroupRules>) {
        let refusal = Refusal {
            ours: self.cfg.rules,
            recorded,
        };
        self.schedule.mismatches = 0;
        self.schedule.attempt = 0;
        if self.refused != Some(refusal) {
            diag::group_rules_differ(&self.cfg.name, &refusal);
            let reason = IdleReason::Refused(refusal);
            if !self.release(now, reason) {
                self.events
                    .push_back(Event::Assignment(Assignment::Idle(Idle {
                        reason,
                        since: self.clock.instant(now),
                        ended: None,
                        ended_tasks: None,
                    })));
            }
            self.refused = Some(refusal);
        }
        let fire = self.fire_local(k + 1);
        self.schedule.target = Some(k + 1);
        self.schedule.fire_at = Some(fire.max(now));
    }

    /// Rule 2: the keys named the wrong interval, nothing was written. The
    /// reply updated the clock estimate; aim again.
    fn on_wrong_interval(&mut self, now: i64) {
        self.schedule.mismatches += 1;
        self.schedule.target = None;
        self.schedule.fire_at = Some(if self.schedule.mismatches <= 2 {
            now
        } else {
            // Repeated misses near a boundary: aim at the next band.
            self.fire_local(self.server_interval(now) + 1)
        });
    }

    fn on_counted(&mut self, now: i64, req: &Pending, c: Counted, server: i64) {
        let k = c.interval;
        self.schedule.mismatches = 0;
        self.schedule.attempt = 0;
        self.refused = None;
        let implied = self.implied(&c);
        // A second registration in an interval whose first reply executed
        // too early (rule 17) is certified by what the first one was.
        let before = match self.memory.early.take() {
            Some((ek, before)) if ek == k => before,
            _ => self
                .memory
                .previous
                .filter(|(pk, _)| pk + 1 == k || self.cfg.sabotage_skip)
                .and_then(|(_, s)| s),
        };
        let early = self.executed_early(k, server);
        // Rule 10: after a backward step, only closed intervals newer than
        // every interval seen before it may certify a lease.
        let fresh = self.cfg.sabotage_reopened
            || self
                .history
                .reopened_through
                .is_none_or(|fence| k >= fence.saturating_add(3));
        let agreed = implied.is_some() && implied == before && fresh;
        match implied {
            None => diag::no_pair_implied(&self.cfg.name, before),
            Some(slot) if agreed => diag::pair_agreed(&self.cfg.name, slot),
            Some(_) => diag::pair_disagreed(&self.cfg.name, implied, before),
        }

        // Remember before scheduling: the Arrival slot depends on the new index.
        if self.cfg.mode == Mode::Arrival
            && let Some(x) = c.position
        {
            self.memory.held = Some((k, x));
            let n = c.count.unwrap_or(0).max(x.saturating_add(1));
            self.memory.arrival_phase = Some((f64::from(x) + 0.5) / f64::from(n));
        }
        // Rule 6: anchored at the send (the negative control: at the arrival).
        let anchor = if self.cfg.sabotage_arrival {
            now
        } else {
            req.sent_at
        };
        let deadline = self.lease_deadline(anchor, k, server);
        let would_grant = if self.cfg.handover == HandoverMode::Incremental {
            let grant = if fresh {
                rule_13_grant(implied, before, self.cfg.mapping, self.cfg.sabotage_k1only)
            } else {
                None
            };
            self.on_incremental_grant(now, grant, k, deadline, early);
            grant.is_some()
        } else {
            self.on_whole_pair(now, implied, agreed, k, deadline, early);
            agreed
        };
        self.memory.previous = Some((k, implied));
        self.memory.newest = Some((k, now));
        if implied.is_some() {
            self.memory.last_slot = implied;
        }
        // Replies to older hedged requests would say nothing new.
        self.pending.retain(|p| p.interval > k);

        // Rule 17: a reply that would have granted but executed too early
        // is tried again later in the same interval (Ranked: a repeat of the
        // token changes nothing in the set), while the band lasts.
        let retry_early = early
            && would_grant
            && self.cfg.mode == Mode::Ranked
            && self.local_of(self.band_end_server(k)) > self.fire_local(k).max(now);
        let fire = if retry_early {
            self.memory.early = Some((k, before));
            self.schedule.target = Some(k);
            self.fire_local(k).max(now)
        } else {
            self.schedule.target = Some(k + 1);
            self.fire_local(k + 1)
        };
        self.schedule.fire_at = Some(fire);
        let lease_left = self
            .lease
            .as_ref()
            .map(Lease::deadline_micros)
            .or_else(|| self.parts.iter().map(HeldPart::end).max())
            .map_or(0, |d| d - now);
        diag::registration_completed(
            &self.cfg.name,
            k,
            c.position,
            c.count,
            self.skew.offset().unwrap_or(0),
        );
        diag::next_registration_scheduled(
            &self.cfg.name,
            micros_to_duration(fire - now),
            micros_to_duration(lease_left),
        );
    }

    /// Rule 5 (whole pairs): grant or renew the pair when both closed
    /// intervals agree, else hand over. Rule 17: a reply that executed too
    /// early in its interval grants and renews nothing (and hands nothing
    /// over: it certified the pair).
    fn on_whole_pair(
        &mut self,
        now: i64,
        implied: Option<Slot>,
        agreed: bool,
        k: u64,
        deadline: i64,
        early: bool,
    ) {
        match (implied, agreed) {
            (Some(_), true) if early => {}
            (Some(slot), true) => match &self.lease {
                Some(l) if l.slot() == slot && now < deadline => {
                    l.renew(deadline, k);
                    self.lease_interval = k;
                    self.drain_until = None;
                }
                // The same pair, but the reply came after its deadline.
                Some(l) if l.slot() == slot => {}
                // A new lease only while its drain end is ahead: one handed
                // out later would leave the loop less than the drain budget
                // if the next reply does not renew it.
                _ if now < self.drain_end(deadline) => {
                    // Rule 14: a kept lease has always ended by now (a grant
                    // of another pair from k needs p(k-1) = p(k-2), which a
                    // lease still live from k-1 or earlier contradicts;
                    // docs/protocol.md). Releasing here is the fallback that
                    // only the overdrain control reaches.
                    self.release(now, IdleReason::HandedOver);
                    self.grant(slot, k, deadline);
                    self.lease_interval = k;
                }
                // Agreed, but the reply came too late to be of use: grants
                // nothing; memory is still updated by the caller.
                _ => {}
            },
            _ => self.hand_over(now),
        }
    }

    /// Rule 13 with rule 14 per part: the reply from `k` grants `grant`
    /// (if any) until `deadline`, renewing the part if it is already held;
    /// every other part is kept until its deadline minus the drain budget
    /// (or now, if that has passed). Rule 17: when the reply executed too
    /// early, the part it certifies is neither renewed nor granted, and is
    /// not drained either.
    fn on_incremental_grant(
        &mut self,
        now: i64,
        grant: Option<Part>,
        k: u64,
        deadline: i64,
        early: bool,
    ) {
        let certified = grant;
        let mut new_part = None;
        let drain_end = self.drain_end(deadline);
        if let Some(part) = grant.filter(|_| !early) {
            match self.parts.iter_mut().find(|p| p.lease.part() == part) {
                Some(held) if now < deadline => {
                    held.lease.inner().renew(deadline, k);
                    held.drain_until = None;
                    self.lease_interval = k;
                }
                Some(_) => {}
                // A new part only while its drain end is ahead (see
                // `on_whole_pair`).
                None if now < drain_end => new_part = Some(part),
                None => {}
            }
        }
        // Rule 14, per part: what this reply did not renew is kept.
        let budget = self.cfg.drain_budget;
        let overdrain = self.cfg.sabotage_overdrain;
        let half = self.cfg.l / 2;
        for held in &mut self.parts {
            if Some(held.lease.part()) == certified || held.drain_until.is_some() {
                continue;
            }
            let deadline = held.lease.inner().deadline_micros();
            held.drain_until = Some(if overdrain {
                let past = deadline.saturating_add(half);
                held.lease.inner().extend_to(past);
                past
            } else {
                // Never before now: the loop learns of the drain now, and
                // a value it was handed must not end before it.
                let end = deadline.saturating_sub(budget);
                if self.cfg.sabotage_late {
                    end
                } else {
                    end.max(now)
                }
            });
        }
        // A kept part whose drain has already ended goes now, before the
        // new part is added, so that no value names a part before its grant.
        self.expire_parts(now);
        if let Some(part) = new_part {
            let inner = Lease::new(
                part.newer(),
                k,
                self.cfg.mapping,
                self.clock,
                self.now_clock.clone(),
                deadline,
            );
            diag::lease_granted(&self.cfg.name, part.newer());
            self.parts.push(HeldPart {
                lease: TaskLease::new(part, inner),
                drain_until: None,
            });
            self.lease_interval = k;
            self.emit_tasks(now);
        }
    }

    /// Rule 14 for every part held: keep it until its deadline minus the
    /// drain budget (rule 16 on a graceful leave).
    fn drain_parts(&mut self, now: i64) {
        self.on_incremental_grant(now, None, self.lease_interval, i64::MIN, false);
    }

    /// Where a lease or part with `deadline` stops being served if no
    /// reply renews it: its deadline minus the drain budget (rule 14); in
    /// `Arrival` mode, which releases at the reply, its deadline.
    fn drain_end(&self, deadline: i64) -> i64 {
        match self.cfg.mode {
            _ if self.cfg.sabotage_late => deadline,
            Mode::Arrival => deadline,
            Mode::Ranked => deadline.saturating_sub(self.cfg.drain_budget),
        }
    }

    /// Rule 17: whether a registration of interval `k` executed at server
    /// time `server` came too early in its interval to grant or renew:
    /// before `kL + G`.
    fn executed_early(&self, k: u64, server: i64) -> bool {
        !self.cfg.sabotage_early && server < (k as i64) * self.cfg.l + self.cfg.g
    }

    /// Rules 7 and 14 for parts: every part whose end (deadline, or drain)
    /// has passed ends at that instant; one value per distinct instant, in
    /// order, so a stalled worker's history says when each one ended.
    fn expire_parts(&mut self, now: i64) {
        while let Some(end) = self.parts.iter().map(HeldPart::end).min() {
            if end > now {
                break;
            }
            let mut drained = false;
            self.parts.retain(|p| {
                if p.end() == end {
                    drained |= p
                        .drain_until
                        .is_some_and(|d| d <= p.lease.inner().deadline_micros());
                    p.lease.inner().end_at(end);
                    false
                } else {
                    true
                }
            });
            if self.parts.is_empty() {
                let reason = if self.leaving.is_some() {
                    IdleReason::Cancelled
                } else if drained {
                    IdleReason::HandedOver
                } else {
                    IdleReason::Expired
                };
                self.idle_after_tasks(end, reason);
            } else {
                self.emit_tasks(end);
            }
        }
    }

    /// Hands the task set held now to the stream, with its deltas.
    fn emit_tasks(&mut self, since: i64) {
        let leases: Vec<TaskLease> = self.parts.iter().map(|p| p.lease.clone()).collect();
        let tasks = Tasks::new(
            leases,
            &self.emitted,
            self.cfg.mapping,
            self.clock.instant(since),
        );
        self.emitted = self.parts.iter().map(|p| p.lease.part()).collect();
        self.events
            .push_back(Event::Assignment(Assignment::Tasks(tasks.clone())));
        self.tasks_value = Some(tasks);
    }

    /// The last part ended at `since`: the idle value, with the task set
    /// that ended.
    fn idle_after_tasks(&mut self, since: i64, reason: IdleReason) {
        self.emitted.clear();
        let ended = self.tasks_value.take();
        if let Some(t) = ended.as_ref().and_then(Tasks::newest) {
            diag::lease_released(&self.cfg.name, t.part().newer(), reason.as_str());
        }
        self.events
            .push_back(Event::Assignment(Assignment::Idle(Idle {
                reason,
                since: self.clock.instant(since),
                ended: None,
                ended_tasks: ended,
            })));
    }

    /// Rule 4: the pair implied by the closed interval `k-1`, if this worker
    /// was counted there, the count is positive and the position below it.
    fn implied(&self, c: &Counted) -> Option<Slot> {
        let k = c.interval;
        let count = c.count.filter(|&n| n > 0)?;
        let position = match self.cfg.mode {
            // The index this worker got in k-1, paired with k-1's final count.
            Mode::Arrival => match self.memory.held {
                Some((hk, x)) if hk + 1 == k => x,
                _ => return None,
            },
            // The token's rank in the closed set of k-1.
            Mode::Ranked => c.position?,
        };
        Slot::new(position, count)
    }

    /// Rule 6: the lease from a registration executed in `k` at server time
    /// `server` ends by server time `D`, converted to local time from the
    /// instant the request was *sent*, with a drift margin. A late reply or a
    /// stall only shortens it.
    fn lease_deadline(&self, sent_at: i64, k: u64, server: i64) -> i64 {
        let end_of_next = (k as i64 + 2) * self.cfg.l;
        let d = match self.cfg.mode {
            Mode::Arrival => (self.fire_server(k + 1) + self.cfg.g).min(end_of_next),
            Mode::Ranked => end_of_next,
        };
        let budget = ((d - server).max(0) as f64 * (1.0 - RHO)).floor() as i64;
        // One microsecond for the resolution of TIME.
        sent_at + budget - 1
    }

    /// Rule 8: server time of the registration aimed at interval `m`.
    fn fire_server(&self, m: u64) -> i64 {
        let base = m as i64 * self.cfg.l + self.cfg.g;
        match self.cfg.mode {
            // The original's slots: firing order is index order.
            Mode::Arrival => {
                let phase = self.memory.arrival_phase.unwrap_or(0.5);
                base + (phase * (self.cfg.l - 2 * self.cfg.g) as f64) as i64
            }
            // Early, spread by token against a thundering herd.
            Mode::Ranked => base + (self.token.spread_fraction() * self.cfg.spread as f64) as i64,
        }
    }

    /// Server time at which retries for interval `m` stop (the band's end).
    fn band_end_server(&self, m: u64) -> i64 {
        (m as i64 + 1) * self.cfg.l - self.cfg.g
    }

    fn local_of(&self, server: i64) -> i64 {
        server - self.skew.offset().unwrap_or(0)
    }

    /// Rules 8 and 17: the local instant of the registration aimed at
    /// interval `m`. Never earlier than the instant that reaches the server
    /// at `mL + G` even if the skew estimate is off by all of its
    /// uncertainty (half the round trip of its sample), so that a scheduled
    /// registration never executes too early to grant.
    fn fire_local(&self, m: u64) -> i64 {
        let earliest =
            self.local_of((m as i64) * self.cfg.l + self.cfg.g) + self.skew.uncertainty();
        self.local_of(self.fire_server(m)).max(earliest)
    }

    fn server_interval(&self, now: i64) -> u64 {
        let server = now + self.skew.offset().unwrap_or(0);
        u64::try_from(server.max(0) / self.cfg.l).unwrap_or(0)
    }

    /// Rule 9: retry with a short backoff until the band ends, then aim at
    /// the next interval.
    fn on_failure(&mut self, now: i64, error: &dyn Display) {
        self.schedule.attempt = self.schedule.attempt.saturating_add(1);
        let attempt = self.schedule.attempt;
        let exp = attempt.saturating_sub(1).min(16);
        let backoff = (self.cfg.l / 50)
            .saturating_mul(1 << exp)
            .min(self.cfg.l / 4);
        let mut fire = now + backoff.max(1);
        if self.skew.offset().is_some() {
            let m = self
                .schedule
                .target
                .unwrap_or_else(|| self.server_interval(now));
            let m = m.max(self.server_interval(now));
            if fire + self.skew.offset().unwrap_or(0) > self.band_end_server(m) {
                let next = self.server_interval(now).max(m) + 1;
                self.schedule.target = Some(next);
                self.schedule.attempt = 0;
                fire = self.fire_local(next).max(now);
            }
        }
        self.schedule.fire_at = Some(fire);
        diag::registration_failed(
            &self.cfg.name,
            error,
            attempt,
            micros_to_duration(fire - now),
        );
    }

    /// Liveness net: a running worker always has a request in flight or a
    /// registration scheduled. If a reply was ignored (stale, or nothing new)
    /// while it answered the only live request, aim at the interval after the
    /// newest one counted, or register now if that one has begun.
    fn ensure_scheduled(&mut self, now: i64) {
        let idle = self.schedule.fire_at.is_none()
            && self.ready.is_none()
            && !self.pending.iter().any(|p| !p.timed_out);
        if self.stopped || self.leaving.is_some() || !idle {
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

    fn maybe_send(&mut self, now: i64) {
        self.ensure_scheduled(now);
        if self.stopped
            || self.leaving.is_some()
            || self.ready.is_some()
            || self.pending.iter().any(|p| !p.timed_out)
        {
            return;
        }
        match self.schedule.fire_at {
            Some(at) if at <= now => {}
            _ => return,
        }
        if self.pending.len() >= MAX_PENDING {
            self.pending.remove(0);
        }
        let interval = if self.skew.offset().is_some() {
            self.server_interval(now)
        } else {
            PROBE_INTERVAL
        };
        let id = RequestId(self.next_id);
        self.next_id += 1;
        let (timeout_at, give_up_at) = self.request_timeout(now, interval);
        self.write_request(interval);
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

    /// Rule 9: `Ranked` times a request out on the adaptive estimate
    /// `srtt + 4 rttvar`, doubled for each consecutive failure (RFC 6298
    /// section 5.5, so a slow connection is not flooded with retries), then
    /// retries while still accepting the late reply. `Arrival`, where a retry
    /// is a second `INCR` that reshuffles the group, waits until the band
    /// ends, and at least `L/4` so that a registration fired in the last slot
    /// is not abandoned on a round trip longer than its slot's share of the
    /// band.
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

    fn write_request(&mut self, k: u64) {
        let c = &self.cfg;
        write_key(&mut self.keys[0], &c.prefix, &c.name, k);
        write_key(&mut self.keys[1], &c.prefix, &c.name, k.saturating_sub(1));
        let mut set = |i: usize, v: &dyn Display| {
            let s = &mut self.args[i];
            s.clear();
            let _ = write!(s, "{v}");
        };
        set(0, &c.interval_ms);
        set(1, &c.ttl_ms);
        set(2, &k);
        // args[3], the rules record, is constant: written in `new`.
        if c.mode == Mode::Ranked {
            set(4, &self.token);
            // Rule 15: a returning worker sends its last known position (the
            // server ranks returnees after every carried position, by it); a
            // newcomer sends -1 and sorts last.
            match self.memory.last_slot {
                Some(s) => set(5, &s.i()),
                None => set(5, &-1),
            }
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if !self.stopped {
            diag::discover_stopped(&self.cfg.name, diag::StopReason::Closed);
        }
    }
}

/// Rule 13, incremental handover (DESIGN section 3):
///
/// > A reply from interval `k` grants the task set `T(p_{k-1}) ∩ T(p_{k-2})`,
/// > where `p_x` is the pair implied by closed interval `x`, whenever both
/// > are implied; when they are equal this is today's rule. Load-bearing:
/// > the deadline stays anchored at the send; the set is the intersection,
/// > never `T(p_{k-1})` alone; `p_{k-2}` comes from a reply to a
/// > registration executed in `k-1`, never "the last two pairs this worker
/// > knows".
///
/// `newer` is `p_{k-1}`, implied by this reply; `older` is `p_{k-2}`, implied
/// by the worker's previous processed reply *if* that reply was from `k-1`
/// (the caller filters it). An empty intersection holds nothing. The
/// deadline is the caller's, anchored at the send. `k1only` is the negative
/// control that grants `T(p_{k-1})` alone.
fn rule_13_grant(
    newer: Option<Slot>,
    older: Option<Slot>,
    mapping: Mapping,
    k1only: bool,
) -> Option<Part> {
    let newer = newer?;
    let older = if k1only { newer } else { older? };
    let part = Part::new(newer, older);
    (!part.is_empty(mapping)).then_some(part)
}

/// A reply must be about the interval its keys named: a counted reply for
/// another interval, or a wrong-interval reply naming the same one, is
/// malformed.
fn check_interval(reply: &Reply, expected: u64) -> Result<(), ReplyError> {
    let ok = match reply {
        Reply::Counted(c) => c.interval == expected,
        Reply::WrongInterval { interval, .. } => *interval != expected,
        // The rules are checked before the interval: any interval may come.
        Reply::Refused { .. } => true,
    };
    if ok {
        Ok(())
    } else {
        Err(ReplyError::UnexpectedInterval {
            expected,
            got: reply.interval(),
        })
    }
}

/// What the leave script answered (rule 16).
#[derive(Clone, Copy, Debug)]
struct LeaveAnswer {
    /// The server's interval was neither of the two named: nothing written.
    /// Otherwise the token was removed, was not a member, or the rules
    /// differ: nothing more to do.
    wrong_interval: bool,
    /// The server's interval at execution.
    interval: u64,
    /// Server time at execution, in microseconds.
    server: i64,
}

/// Parses the leave script's reply: `{0|2, k, sec, usec}` or `{1, k, sec,
/// usec, removed}`, with the time checks of [`Reply::parse`].
fn parse_leave(interval_ms: u64, values: &[i64]) -> Result<LeaveAnswer, ReplyError> {
    let status = values.first().copied().unwrap_or(-1);
    let expected = match status {
        0 | 2 => 4,
        1 => 5,
        -1 if values.is_empty() => {
            return Err(ReplyError::Arity {
                got: 0,
                expected: 0,
            });
        }
        other => return Err(ReplyError::Status(other)),
    };
    if values.len() != expected {
        return Err(ReplyError::Arity {
            got: values.len(),
            expected,
        });
    }
    if status == 1 && !matches!(values[4], 0 | 1) {
        return Err(ReplyError::OutOfRange {
            field: "removed",
            value: values[4],
        });
    }
    // The clock fields, checked as a wrong-interval answer would be.
    let time = Reply::parse(
        Mode::Ranked,
        interval_ms,
        &[0, values[1], values[2], values[3]],
    )?;
    Ok(LeaveAnswer {
        wrong_interval: status == 0,
        interval: time.interval(),
        server: i64::try_from(time.server_time()).unwrap_or(i64::MAX),
    })
}

/// The size of a detected step for the `server clock moved` diagnostic.
fn server_step(check: SkewCheck) -> i64 {
    match check {
        SkewCheck::Jumped { by } => by,
        SkewCheck::Consistent => 0,
    }
}

fn micros_to_duration(us: i64) -> Duration {
    Duration::from_micros(u64::try_from(us).unwrap_or(0))
}

#[cfg(test)]
mod rule_13_tests {
    use super::*;

    fn slot(i: u32, n: u32) -> Option<Slot> {
        Slot::new(i, n)
    }

    #[test]
    fn rule_13_grants_the_intersection_of_two_present_pairs() {
        let m = Mapping::Consistent;
        // Equal pairs: rule 5's whole pair.
        let whole = rule_13_grant(slot(1, 3), slot(1, 3), m, false).unwrap();
        assert!(whole.is_whole());
        // A tail join: T(1,4) ∩ T(1,3), which is T(1,4) under jump hash.
        let part = rule_13_grant(slot(1, 4), slot(1, 3), m, false).unwrap();
        assert_eq!(part.describe(), [1, 4, 1, 3]);
        assert!((0..2000).all(|id| part.contains(m, id) == (m.owner(id, 4) == 1)));
        // Either pair absent: nothing.
        assert_eq!(rule_13_grant(None, slot(1, 3), m, false), None);
        assert_eq!(rule_13_grant(slot(1, 3), None, m, false), None);
        // An empty intersection holds nothing: an id at 1 of 4 was at 1 of 3.
        assert_eq!(rule_13_grant(slot(2, 3), slot(1, 4), m, false), None);
        // The negative control grants the newest pair alone.
        let bad = rule_13_grant(slot(2, 3), slot(1, 4), m, true).unwrap();
        assert!(bad.is_whole());
        assert_eq!(rule_13_grant(slot(2, 3), None, m, true), bad.into());
    }
}
