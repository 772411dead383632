//! The state machine of one worker, the protocol of docs/protocol.md.
//!
//! Inputs are `handle_*(now, ..)`, outputs `poll_*()`. After every input, the
//! driver drains [`Worker::poll_transmit`], then [`Worker::poll_event`], then
//! asks [`Worker::poll_timeout`] when to call [`Worker::handle_timeout`]
//! next. The worker never reads a clock and draws no random numbers: the
//! same inputs always give the same outputs.
//!
//! Each file owns a part of the protocol: `memory` what earlier answers
//! said and what a reply certifies (rules 4, 5, 10, 13), `holding` what is
//! held and when it ends (rules 5, 7, 13, 14), `schedule` when to send
//! (rules 8, 9, 17), `leave` the graceful leave (rule 16), `request` what is
//! sent; this file takes the inputs and dispatches the answers (rules 2,
//! 10, 12, 17).

mod config;
mod holding;
mod identity;
mod leave;
mod member;
mod memory;
mod request;
mod schedule;

use std::collections::VecDeque;
use std::fmt::Display;
use std::time::{Duration, Instant};

use crate::clock::{RttEstimate, SkewEstimate};
use crate::diag;
use crate::event::{Assignment, Event, Idle, IdleReason};
use crate::lease::{Clock, Lease, LocalClock};
use crate::options::{Handover, Mode, NegativeControl, Options, OptionsError};
use crate::reply::{Counted, Reply, ReplyError};
use crate::rules::{GroupRules, Refusal};
use crate::script::Script;

use config::Config;
use holding::{Certificate, Holding};
pub use identity::{Identity, RequestId};
use leave::Leaving;
use memory::{ClockHistory, Memory, OlderFactor, certified_parts};
use request::{Buffers, Pending, check_interval};
pub use request::{KEY_COUNT, Transmit};
use schedule::{Schedule, micros};

/// Bound on the local clock's rate error against the server clock (rule 6).
const RHO: f64 = 1e-3;

/// Where the worker is in its life.
#[derive(Clone, Copy, Debug)]
enum Lifecycle {
    /// Registering every interval.
    Running,
    /// Cancelled with graceful leave (rule 16): serving what it holds until
    /// the drain ends, registering no more.
    Leaving(Leaving),
    /// Cancelled; nothing more is sent or emitted.
    Stopped,
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
///    [`Worker::handle_failure`] if the request failed (or its reply was not
///    an array of integers), or [`Worker::handle_timeout`] if the deadline
///    passed (spurious calls are harmless).
/// 6. Go to 2, until [`Event::Stopped`] (after [`Worker::handle_cancel`]).
///
/// ```
/// use std::time::{Duration, Instant};
/// use lease_core::{Event, Identity, Options, Worker};
///
/// let t0 = Instant::now();
/// let options: Options = Options::new("mail-sender", Duration::from_millis(300));
/// let mut worker = Worker::new(&options, Identity::seeded(1, 0), t0).unwrap();
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
    identity: Identity,
    clock: LocalClock,
    skew: SkewEstimate,
    rtt: RttEstimate,
    pending: Vec<Pending>,
    memory: Memory,
    history: ClockHistory,
    holding: Holding,
    lifecycle: Lifecycle,
    /// The refusal in force (rule 12), until a registration is counted again.
    refused: Option<Refusal>,
    /// Rule 18: the member name is held by another identity, until a
    /// registration holds it again.
    member_in_use: Option<crate::MemberInUse>,
    schedule: Schedule,
    /// A transmit is ready in the buffers and not yet polled.
    ready: Option<(RequestId, i64)>,
    buffers: Buffers,
    events: VecDeque<Event>,
    next_id: u64,
}

impl Worker {
    /// A new worker with `identity` that starts at `now`. Fails if the
    /// options are invalid. (`options.identity` and `options.cancel` are the
    /// driver's; the state machine takes its identity here.)
    ///
    /// The first event is the idle value; the first registration (the clock
    /// probe) is due at once, or with [`Options::start_spread`] at a point
    /// of the first interval drawn from the identity (rule 8), so that
    /// thousands of workers started at once do not all send at once.
    pub fn new<C>(
        options: &Options<C>,
        identity: Identity,
        now: Instant,
    ) -> Result<Self, OptionsError> {
        let cfg = Config::new(options)?;
        let first_send = cfg.start_delay(identity);
        let clock = LocalClock::new(now);
        let mut events = VecDeque::with_capacity(4);
        events.push_back(Event::Assignment(Assignment::Idle(Idle {
            reason: IdleReason::Started,
            since: now,
            ended: None,
        })));
        Ok(Self {
            buffers: Buffers::new(&cfg),
            cfg,
            identity,
            clock,
            skew: SkewEstimate::default(),
            rtt: RttEstimate::default(),
            pending: Vec::with_capacity(8),
            memory: Memory::default(),
            history: ClockHistory::default(),
            holding: Holding::new(clock, Clock::system()),
            lifecycle: Lifecycle::Running,
            refused: None,
            member_in_use: None,
            schedule: Schedule {
                fire_at: Some(first_send),
                ..Schedule::default()
            },
            ready: None,
            events,
            next_id: 0,
        })
    }

    /// Leases handed out answer [`Lease::is_valid`] on `clock` (the driver's
    /// clock) instead of [`Instant::now`].
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.holding.set_now_clock(clock);
        self
    }

    // ----- getters -------------------------------------------------------

    /// The group name.
    pub fn name(&self) -> &str {
        &self.cfg.name
    }

    /// The counting kind.
    pub fn mode(&self) -> Mode {
        self.cfg.mode
    }

    /// The handover.
    pub fn handover(&self) -> Handover {
        self.cfg.handover
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

    /// This run's identity.
    pub fn identity(&self) -> Identity {
        self.identity
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

    /// The lease in force at `now`, if any of it is valid then. This is the
    /// truth even if no timer has fired (a stalled process).
    pub fn lease_at(&self, now: Instant) -> Option<&Lease> {
        self.holding.value_at(now)
    }

    /// Whether this worker is the group's exclusive leader at `now`.
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
    /// graceful leave, once what it held has drained).
    pub fn is_stopped(&self) -> bool {
        matches!(self.lifecycle, Lifecycle::Stopped)
    }

    /// Whether the worker is leaving gracefully (rule 16): cancelled, no
    /// longer registering, still serving what it held until its drain ends.
    pub fn is_leaving(&self) -> bool {
        matches!(self.lifecycle, Lifecycle::Leaving(_))
    }

    fn is_running(&self) -> bool {
        matches!(self.lifecycle, Lifecycle::Running)
    }

    // ----- outputs -------------------------------------------------------

    /// The request to send now, if one is due. Drain after every input.
    pub fn poll_transmit(&mut self) -> Option<Transmit<'_>> {
        let (id, give_up_at) = self.ready.take()?;
        let script = if self.is_leaving() {
            Script::leave()
        } else {
            Script::for_mode(self.cfg.mode)
        };
        let keys = &self.buffers.keys;
        Some(Transmit {
            id,
            script,
            keys: std::array::from_fn(|i| keys[i].as_str()),
            args: &self.buffers.args,
            expires_at: self.clock.instant(give_up_at),
        })
    }

    /// The next event for the application. Drain after every input.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When [`Worker::handle_timeout`] must be called next, if ever.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let live = self.pending.iter().find(|p| !p.timed_out);
        let (fire, leave) = match &self.lifecycle {
            Lifecycle::Stopped => return None,
            Lifecycle::Leaving(l) => (None, l.in_flight.map(|p| p.timeout_at)),
            Lifecycle::Running => match (live, self.ready) {
                (None, None) => (self.schedule.fire_at, None),
                _ => (None, None),
            },
        };
        [
            fire,
            leave,
            live.map(|p| p.timeout_at),
            self.holding.next_end(),
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
        match self.lifecycle {
            Lifecycle::Stopped => {}
            Lifecycle::Leaving(_) => self.on_leave_timeout(now),
            Lifecycle::Running => {
                self.on_request_timeouts(now);
                self.maybe_send(now);
            }
        }
    }

    /// The script answered request `id` with `values` (the reply array as
    /// integers). A malformed or unexpected answer counts as a failed
    /// request and is returned as an error; it never grants anything.
    /// Answers to unknown or abandoned requests are ignored. (A reply that
    /// is not an array of integers is a failure: [`Worker::handle_failure`].)
    pub fn handle_reply(
        &mut self,
        now: Instant,
        id: RequestId,
        values: &[i64],
    ) -> Result<(), ReplyError> {
        let now = self.clock.micros(now);
        self.expire(now);
        if self.is_leave_request(id) {
            return self.on_leave_answer(now, values);
        }
        if !self.is_running() {
            return Ok(());
        }
        let Some(at) = self.pending.iter().position(|p| p.id == id) else {
            return Ok(());
        };
        let req = self.pending.remove(at);
        let reply = Reply::parse(self.cfg.mode, self.cfg.interval_ms, values)
            .and_then(|r| check_interval(&r, req.interval).map(|()| r));
        let result = match reply {
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

    /// Request `id` failed (connection error, Redis error, a reply that is
    /// not integers, or the driver gave up on it). A registration is retried
    /// with a short backoff until the band ends; failures never reach the
    /// application as errors.
    pub fn handle_failure(&mut self, now: Instant, id: RequestId, error: &dyn Display) {
        let now = self.clock.micros(now);
        self.expire(now);
        match self.lifecycle {
            Lifecycle::Stopped => {}
            Lifecycle::Leaving(_) => self.on_leave_failure(now, id),
            Lifecycle::Running => {
                if let Some(at) = self.pending.iter().position(|p| p.id == id) {
                    let req = self.pending.remove(at);
                    if !req.timed_out {
                        self.on_failure(now, error);
                    }
                }
                self.maybe_send(now);
            }
        }
    }

    /// Cancellation. With graceful leave (rule 16, the default under Ranked
    /// counting) the worker sends one leave request (the leave script removes
    /// its identity from the set of the interval open at execution; retried
    /// once), registers no more, ignores replies to earlier registrations,
    /// and keeps what it holds until each part's drain end; then the idle
    /// value (reason [`IdleReason::Cancelled`]), then [`Event::Stopped`],
    /// once the leave request is answered or given up.
    ///
    /// Without it, the idle value is emitted at once if anything is held,
    /// then [`Event::Stopped`]; the worker stays counted in the interval it
    /// last registered in, so its tasks are unowned for up to about one
    /// interval, exactly as if it had crashed. Later calls change nothing.
    pub fn handle_cancel(&mut self, now: Instant) {
        if !self.is_running() {
            return;
        }
        let now = self.clock.micros(now);
        self.expire(now);
        if self.cfg.graceful_leave {
            self.start_leaving(now);
            return;
        }
        self.holding
            .release_all(&self.cfg, now, IdleReason::Cancelled, &mut self.events);
        self.stop(diag::StopReason::Abort);
    }

    // ----- the rules -----------------------------------------------------

    /// Rule 7, timers first: whatever ended before `now` ends at its end,
    /// whenever the worker notices. Memory is kept.
    fn expire(&mut self, now: i64) {
        let leaving = self.is_leaving();
        self.holding
            .expire(&self.cfg, now, leaving, &mut self.events);
        if leaving {
            self.maybe_finish_leaving(now);
        }
    }

    /// An answer to a registration: rule 10's checks on every answer, then
    /// what it says.
    fn process(&mut self, now: i64, req: &Pending, reply: Reply) {
        self.rtt.observe(now - req.sent_at);
        let server = i64::try_from(reply.server_time()).unwrap_or(i64::MAX);
        let interval = reply.interval();
        let latest = self.history.latest;
        let went_back = self.history.went_back(interval, req.sent_at);
        // A late answer from an older interval (rule 9): counted replies are
        // compared with the newest interval processed, so that a hedged
        // request's reply still counts after a wrong-interval answer named a
        // newer interval; other answers with the newest interval named.
        let newest = match reply {
            Reply::Counted(_) => self.memory.newest.map(|(k, _)| k),
            _ => latest.map(|(k, _)| k),
        };
        let late = newest.is_some_and(|newest| interval < newest) && !went_back;
        let jump = self
            .skew
            .observe(req.sent_at, now, server, self.cfg.g, 8 * self.cfg.l);
        if went_back || jump.is_some() {
            let backward = went_back || jump.is_some_and(|by| by < 0);
            self.stand_down_for_clock(now, jump.unwrap_or(0), interval, backward);
        }
        if went_back || latest.is_none_or(|(newest, _)| interval >= newest) {
            self.history.latest = Some((interval, now));
        }
        match reply {
            // A late answer from an older interval says nothing new (rule 9).
            _ if late => {}
            Reply::WrongInterval { .. } => self.on_wrong_interval(now),
            Reply::Refused { recorded, .. } => self.on_refused(now, interval, recorded),
            Reply::Counted(c) | Reply::MemberInUse(c) => {
                let holder = matches!(reply, Reply::Counted(_));
                // The closed set of k-1 cannot have changed: nothing new,
                // unless the first reply from k executed too early to grant
                // (rule 17) and this one may.
                let seen = self.memory.newest.is_some_and(|(k, _)| k == interval);
                let retry_of_early = self.memory.early.is_some_and(|(k, _)| k == interval);
                if !(seen && self.cfg.mode == Mode::Ranked) || retry_of_early {
                    self.on_counted(now, req, c, server, holder);
                }
            }
        }
    }

    /// Rule 10: stand down, forget what earlier replies implied and the
    /// requests still in flight (nothing read before the step may certify a
    /// grant after it). After a backward step, intervals up to the newest
    /// one seen before it may be reopened (written again after some workers
    /// read them closed), so nothing is granted until the interval two
    /// before the current one is newer than that.
    fn stand_down_for_clock(&mut self, now: i64, by: i64, interval: u64, backward: bool) {
        diag::server_clock_moved(&self.cfg.name, by, interval);
        self.holding
            .release_all(&self.cfg, now, IdleReason::ServerClock, &mut self.events);
        self.memory = Memory::default();
        if !self
            .cfg
            .broken(NegativeControl::KeepRequestsAcrossStandDown)
        {
            self.pending.clear();
        }
        if backward {
            self.history.fence_reopened();
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
            self.stand_idle(now, reason);
            self.refused = Some(refusal);
        }
        let fire = self.fire_local(k + 1);
        self.schedule.aim(k + 1, fire.max(now));
    }

    /// Ends what is held with `reason`, or, when nothing is held, yields an
    /// idle value with it (the callers do it once per refusal).
    fn stand_idle(&mut self, now: i64, reason: IdleReason) {
        if !self
            .holding
            .release_all(&self.cfg, now, reason, &mut self.events)
        {
            self.events
                .push_back(Event::Assignment(Assignment::Idle(Idle {
                    reason,
                    since: self.clock.instant(now),
                    ended: None,
                })));
        }
    }

    /// Rule 2: the keys named the wrong interval, nothing was written. The
    /// reply updated the clock estimate; aim again at once (twice), then at
    /// the next band. A re-aim may execute early in its interval; rule 17
    /// makes its reply grant nothing.
    fn on_wrong_interval(&mut self, now: i64) {
        self.schedule.mismatches += 1;
        self.schedule.target = None;
        self.schedule.fire_at = Some(if self.schedule.mismatches <= 2 {
            now
        } else {
            self.fire_local(self.server_interval(now) + 1)
        });
    }

    /// A counted registration: rules 4, 5/13, 6 and 17, then the next
    /// registration. Under a member name, only a registration that holds the
    /// name (`holder`) may grant or renew (rule 18).
    fn on_counted(&mut self, now: i64, req: &Pending, c: Counted, server: i64, holder: bool) {
        let k = c.interval;
        let holder = self.on_member_status(now, k, holder);
        self.schedule.mismatches = 0;
        self.schedule.attempt = 0;
        self.refused = None;
        let implied = self.memory.implied(self.cfg.mode, &c);
        let before = self.memory.before(&self.cfg, k);
        // Rule 19: p(k-2) from the server when the previous reply did not
        // say it, and the positions of closed k-2 this worker inherits.
        let seeded = self.memory.previous.is_some();
        let older = OlderFactor::of(&self.cfg, &c, before, self.memory.last_pair, seeded);
        // Rule 10: after a backward step, only closed intervals newer than
        // every interval seen before it may certify a lease.
        let fresh = self.cfg.broken(NegativeControl::GrantOverReopenedIntervals)
            || self
                .history
                .is_fresh(k, self.cfg.broken(NegativeControl::ShortReopenFence));
        let parts = certified_parts(&self.cfg, implied, older).filter(fresh && holder);
        match implied {
            None => diag::no_pair_implied(&self.cfg.name, older.own),
            Some(pair) if !parts.is_empty() => diag::pair_agreed(&self.cfg.name, pair),
            Some(_) => diag::pair_disagreed(&self.cfg.name, implied, older.own),
        }
        if self.cfg.mode == Mode::Arrival {
            self.memory.remember_arrival(&c);
        }
        // Rule 6: anchored at the send (the negative control: at the arrival).
        let anchor = if self.cfg.broken(NegativeControl::DeadlineFromArrival) {
            now
        } else {
            req.sent_at
        };
        let early = self.executed_early(k, server);
        // Rule 19: certified by a reserved entry (the member did not
        // register in k-1), the grant ends by (k+1)L.
        let short = !c.registered && !self.cfg.broken(NegativeControl::FullGrantFromReservation);
        let certificate = Certificate {
            parts,
            interval: k,
            deadline: self.lease_deadline(anchor, k, server, short),
            early,
        };
        self.holding
            .on_certified(&self.cfg, now, certificate, &mut self.events);
        self.memory.remember(k, implied, now);
        // Replies to older hedged requests would say nothing new.
        self.pending.retain(|p| p.interval > k);
        self.schedule_after_counted(now, k, early && !parts.is_empty(), older.own);
        diag::registration_completed(
            &self.cfg.name,
            k,
            c.position,
            c.count,
            self.skew.offset().unwrap_or(0),
        );
    }

    /// The next registration after a counted one from `k`: in the next
    /// interval, or (rule 17) again in `k` when this one would have granted
    /// but executed too early, while the band lasts (a repeat of the
    /// identity changes nothing in the set).
    fn schedule_after_counted(
        &mut self,
        now: i64,
        k: u64,
        would_grant_early: bool,
        before: Option<crate::Pair>,
    ) {
        let again = would_grant_early
            && self.cfg.mode == Mode::Ranked
            && self.local_of(self.band_end_server(k)) > self.fire_local(k).max(now);
        let (m, fire) = if again {
            self.memory.early = Some((k, before));
            (k, self.fire_local(k).max(now))
        } else {
            (k + 1, self.fire_local(k + 1))
        };
        self.schedule.aim(m, fire);
        let left = self.holding.last_end().map_or(0, |d| d - now);
        diag::next_registration_scheduled(&self.cfg.name, micros(fire - now), micros(left));
    }

    /// Rule 17: whether a registration of interval `k` executed at server
    /// time `server` came too early in its interval to grant or renew:
    /// before `kL + G`.
    fn executed_early(&self, k: u64, server: i64) -> bool {
        !self.cfg.broken(NegativeControl::GrantFromEarlyRegistration)
            && server < (k as i64) * self.cfg.l + self.cfg.g
    }

    /// Rule 6: the lease from a registration executed in `k` at server time
    /// `server` ends by server time `D`, converted to local time from the
    /// instant the request was *sent*, with a drift margin. A late reply or a
    /// stall only shortens it. Rule 19: a `short` one (certified by a
    /// reserved entry) ends by `(k+1)L` instead of `(k+2)L`.
    fn lease_deadline(&self, sent_at: i64, k: u64, server: i64, short: bool) -> i64 {
        let end_of_next = (k as i64 + 2) * self.cfg.l;
        let d = match self.cfg.mode {
            Mode::Arrival => (self.fire_server(k + 1) + self.cfg.g).min(end_of_next),
            Mode::Ranked if short => end_of_next - self.cfg.l,
            Mode::Ranked => end_of_next,
        };
        let budget = ((d - server).max(0) as f64 * (1.0 - RHO)).floor() as i64;
        // One microsecond for the resolution of TIME.
        sent_at + budget - 1
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if !self.is_stopped() {
            diag::discover_stopped(&self.cfg.name, diag::StopReason::Closed);
        }
    }
}
