//! # lease-driver
//!
//! The I/O loop every `lease` adapter shares, on top of the sans-IO
//! [`lease_core::Worker`]: runtime-agnostic (`std` futures only, no async
//! runtime in its dependency tree), so that an adapter is only its Redis client
//! ([`Connection`]), its runtime's clock and timers, its task and its
//! cancellation token.
//!
//! [`Driver`] is the adapter loop of [`Worker`], written once, on `std`
//! futures only: it sends each registration (`EVALSHA`, `EVAL` after
//! `NOSCRIPT`: rule 2) through the adapter's connection, times it out on the
//! adapter's timer, feeds the outcome back, records [`metrics`],
//! and hands each [`Assignment`] to the stream ([`Assignments`]) until it is
//! cancelled or the stream is dropped. [`Options`] are the group's options
//! with the adapter's cancellation token and, for runs that replay, a given
//! worker identity. An adapter, whole:
//!
//! ```text
//! pub type Options = lease_driver::Options<MyCancelToken>;
//!
//! pub type Discover = Assignments<MyTaskHandle>; // dropping it must stop the task
//!
//! pub fn discover(conn: MyClient, options: Options) -> Result<Discover, OptionsError> {
//!     let clock = Clock::new(my_runtime_now);
//!     let (driver, stream) = Driver::new(&options.group, options.token_or_random(), clock, "my-client")?;
//!     let cancelled = /* a future that completes when options.cancel is cancelled */;
//!     let task = spawn(driver.run(MyConnection(conn), sleep_until, cancelled));
//!     Ok(stream.with_guard(task))
//! }
//! ```
//!
//! Nothing here does I/O or reads a clock: commands go through the
//! [`Connection`], and time comes from the adapter's clock and timers.
#![forbid(unsafe_code)]

use std::collections::VecDeque;
use std::fmt::Display;
use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use lease_core::diag;
use lease_core::{
    Assignment, Clock, Event, IdleReason, OptionsError, ReplyError, RequestId, Script, Token,
    UnsupportedServer, Worker,
};

use crate::metrics::Metrics;

pub mod metrics;

/// A fresh worker identity drawn from the operating system's random source:
/// what every adapter uses for each start unless given one
/// ([`Options::with_token`]).
///
/// # Panics
///
/// If the operating system has no random source to give (which `getrandom`
/// reports only on platforms without one).
pub fn random_token() -> Token {
    let mut bits = [0u8; 16];
    getrandom::fill(&mut bits).expect("the operating system's random source");
    Token::from_bits_same_worker_if_reused(u128::from_le_bytes(bits))
}

/// Options of one adapter's worker: the group's options
/// ([`lease_core::Options`], with all their builder methods), an optional
/// cancellation token of the adapter's runtime (`C`), and an optional worker
/// identity.
///
/// Each adapter names its own: `lease_redis::Options` is
/// `Options<tokio_util::sync::CancellationToken>`.
///
/// ```
/// use std::time::Duration;
/// use lease_core::{Mode, Token};
/// use lease_driver::Options;
///
/// let group = lease_core::Options::new("mail-sender", Duration::from_secs(5))
///     .with_gap(0.2)
///     .with_mode(Mode::Arrival);
/// let options = Options::<()>::from(group).with_cancel(());
/// assert_eq!(options.group.gap, 0.2);
/// assert!(options.cancel.is_some());
/// // A run that replays: the identity derived from a seed.
/// let options = options.with_token(Token::seeded(42, 0));
/// assert_eq!(options.token, Some(Token::seeded(42, 0)));
/// ```
#[derive(Clone, Debug)]
pub struct Options<C> {
    /// Group name, interval, gap, key prefix, counting mode and mapping,
    /// validated when the worker starts.
    pub group: lease_core::Options,
    /// Cancelling this token stands the worker down: the stream yields the
    /// idle value once if a lease is held, then ends.
    pub cancel: Option<C>,
    /// The worker's identity; `None` (the default) draws a fresh one from the
    /// operating system at the start ([`random_token`]). Give one only for
    /// runs that must replay ([`Token::seeded`]): two live workers with one
    /// token are one worker to the group.
    pub token: Option<Token>,
}

impl<C> Options<C> {
    /// Options for group `name` with interval `interval`, every other option
    /// at its default (see [`lease_core::Options::new`]), no cancellation
    /// token, a fresh identity.
    pub fn new(name: impl Into<String>, interval: Duration) -> Self {
        lease_core::Options::new(name, interval).into()
    }

    /// Sets the cancellation token.
    pub fn with_cancel(mut self, cancel: C) -> Self {
        self.cancel = Some(cancel);
        self
    }

    /// Sets the worker's identity (for runs that replay; see
    /// [`Options::token`]).
    pub fn with_token(mut self, token: Token) -> Self {
        self.token = Some(token);
        self
    }

    /// The given identity, or a fresh one from the operating system.
    pub fn token_or_random(&self) -> Token {
        self.token.unwrap_or_else(random_token)
    }
}

impl<C> From<lease_core::Options> for Options<C> {
    fn from(group: lease_core::Options) -> Self {
        Self {
            group,
            cancel: None,
            token: None,
        }
    }
}

/// Which of the two script commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    /// `EVALSHA sha1 ..`: the first attempt.
    EvalSha,
    /// `EVAL source ..`: after `NOSCRIPT`; it also loads the script on the
    /// node that owns the keys.
    Eval,
}

impl Verb {
    /// `EVALSHA` or `EVAL`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::EvalSha => "EVALSHA",
            Verb::Eval => "EVAL",
        }
    }
}

/// One script command to run: `verb script 3 keys[0] keys[1] keys[2] args..`.
///
/// It borrows the worker's buffers only for the call to
/// [`Connection::run`]: the client encodes it there (its own copy is the
/// only one made), and the future it returns must not borrow it.
#[derive(Clone, Copy, Debug)]
pub struct Command<'a> {
    /// `EVALSHA` or `EVAL`.
    pub verb: Verb,
    /// The script's SHA-1 (`EVALSHA`) or its source (`EVAL`).
    pub script: &'static str,
    /// `KEYS`.
    pub keys: [&'a str; 3],
    /// `ARGV`.
    pub args: &'a [String],
}

impl<'a> Command<'a> {
    /// Every argument after the verb, for clients that build commands from
    /// strings: the script, `3`, the keys, the arguments.
    pub fn arguments(&self) -> impl Iterator<Item = &'a str> + use<'a> {
        [self.script, "3"]
            .into_iter()
            .chain(self.keys)
            .chain(self.args.iter().map(String::as_str))
    }
}

/// A script's reply as integers, held inline (no heap allocation): at most
/// [`Integers::CAPACITY`] values (the scripts reply at most 8).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Integers {
    len: usize,
    values: [i64; Integers::CAPACITY],
}

impl Integers {
    /// The most values held.
    pub const CAPACITY: usize = 16;

    /// The integers of `items`, if each item is one (`Some` from `integer`)
    /// and there are at most [`Integers::CAPACITY`]; `None` otherwise (the
    /// worker then rejects the reply as not an array of integers).
    ///
    /// ```
    /// use lease_driver::Integers;
    /// let ints = Integers::collect([1, -1].iter(), |v| Some(*v)).unwrap();
    /// assert_eq!(ints.as_slice(), &[1, -1]);
    /// assert!(Integers::collect(["1"].iter(), |_| None::<i64>).is_none());
    /// assert!(Integers::collect(0..17, Some).is_none());
    /// ```
    pub fn collect<T>(
        items: impl IntoIterator<Item = T>,
        mut integer: impl FnMut(T) -> Option<i64>,
    ) -> Option<Self> {
        let mut out = Self {
            len: 0,
            values: [0; Self::CAPACITY],
        };
        for item in items {
            let slot = out.values.get_mut(out.len)?;
            *slot = integer(item)?;
            out.len += 1;
        }
        Some(out)
    }

    /// The values.
    pub fn as_slice(&self) -> &[i64] {
        &self.values[..self.len]
    }
}

impl std::fmt::Debug for Integers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.as_slice().fmt(f)
    }
}

/// A Redis client as the driver uses it: runs one script command and
/// returns its reply as integers. Each adapter implements it for its client.
pub trait Connection: Send + Sync {
    /// The client's error.
    type Error: Display + Send;

    /// Runs `command`: encodes it now (the returned future borrows the
    /// connection only, not the command). The reply is `Some` if it is an
    /// array of integers and nothing else ([`Integers::collect`]), `None`
    /// if it is anything else (the worker then rejects it); a client that
    /// converts leniently (strings of digits) must not.
    fn run<'c>(
        &'c self,
        command: Command<'_>,
    ) -> impl Future<Output = Result<Option<Integers>, Self::Error>> + Send + use<'c, Self>;

    /// Whether `error` is Redis's `NOSCRIPT` (the script cache lacks it).
    fn is_noscript(error: &Self::Error) -> bool;

    /// Runs [`lease_core::server::INFO_COMMAND`] (`INFO`, default sections)
    /// and returns its text: `Some` if the reply is text (a cluster client's
    /// per-node answers may be joined into one text), `None` if it is
    /// anything else. The driver calls it once when the worker starts and
    /// refuses a server [`lease_core::check_server`] refuses.
    ///
    /// The default returns `None` at once (no check): for connections that
    /// are not a Redis server's, such as a simulator's.
    fn server_info(&self) -> impl Future<Output = Result<Option<String>, Self::Error>> + Send {
        std::future::ready(Ok(None))
    }
}

/// The most registrations one worker keeps in flight at once. The worker
/// has at most one live request, but in Ranked mode it keeps accepting the
/// reply of a request it timed out (a hedge, rule 9) until that request's
/// `expires_at`; with a slow connection those add up. When a new request is
/// due and this many are in flight, the driver does not send it: it reports
/// it to the worker as failed at once (`not sent: in-flight bound`), and the
/// worker backs off and retries as after any failure (rule 9), while the
/// requests in flight stay in flight: on one connection replies come back in
/// the order of the sends, so the oldest is the likeliest to be answered
/// first. A slot frees when its request is answered, fails or reaches its
/// `expires_at`. So a worker's memory and its share of the connection stay
/// bounded however slow Redis gets.
pub const MAX_IN_FLIGHT: usize = 4;

/// A registration in flight: what the driver needs when it ends.
#[derive(Clone, Copy, Debug)]
struct Sent {
    id: RequestId,
    script: &'static Script,
    verb: Verb,
    sent_at: Instant,
    expires_at: Instant,
}

/// One place for a registration in flight, reused for later ones: the
/// copies of its keys and arguments (for the `EVAL` after `NOSCRIPT`; their
/// buffers are reused, so copying allocates nothing once they have grown)
/// and the client's future, replaced in place.
struct Slot<F> {
    sent: Option<Sent>,
    keys: [String; 3],
    args: Vec<String>,
    reply: Pin<Box<Option<F>>>,
}

impl<F> Slot<F> {
    fn command(&self, verb: Verb) -> Command<'_> {
        let sent = self.sent.expect("a busy slot");
        let script = match verb {
            Verb::EvalSha => sent.script.sha1(),
            Verb::Eval => sent.script.source(),
        };
        Command {
            verb,
            script,
            keys: [&self.keys[0], &self.keys[1], &self.keys[2]],
            args: &self.args,
        }
    }
}

/// Copies `from` into `into`, reusing `into`'s buffers.
fn copy_strings<'a>(into: &mut Vec<String>, from: impl ExactSizeIterator<Item = &'a str>) {
    into.truncate(from.len());
    let reuse = into.len();
    for (i, s) in from.enumerate() {
        if i < reuse {
            into[i].clear();
            into[i].push_str(s);
        } else {
            into.push(s.to_owned());
        }
    }
}

/// What the start's server check decided.
enum Checked {
    /// Run (checked, or not checkable).
    Passed,
    /// Cancelled while checking.
    Cancelled,
    /// Refused: the worker registers nothing.
    Refused(UnsupportedServer),
}

/// What woke the loop.
enum Woke<E> {
    Cancelled,
    /// The client answered the request in this slot.
    Replied(usize, Result<Option<Integers>, E>),
    Timeout,
}

/// The adapter loop of one [`Worker`]: see the [module docs](self).
#[derive(Debug)]
pub struct Driver {
    worker: Worker,
    name: Arc<str>,
    /// How long the start's server check may take (the interval).
    check_within: Duration,
    metrics: Metrics,
    clock: Clock,
    stream: Sender,
}

impl Driver {
    /// A worker for `options` with identity `token`, on the adapter's
    /// `clock` (its runtime's: a runtime with virtual time gives its own, and
    /// every lease handed out answers `is_valid()` on it), started now and
    /// announced with `discover started` (`registry` names the client
    /// library, e.g. `redis-rs`), and its stream. Fails if the options are
    /// invalid.
    pub fn new(
        options: &lease_core::Options,
        token: Token,
        clock: Clock,
        registry: &str,
    ) -> Result<(Self, Assignments), OptionsError> {
        let worker = Worker::new(options, token, clock.now())?.with_clock(clock.clone());
        let o = options;
        diag::discover_started(&o.name, o.interval, o.gap, &o.prefix, registry);
        let name: Arc<str> = Arc::from(o.name.as_str());
        let (stream, receiver) = channel(name.clone());
        let driver = Self {
            worker,
            check_within: o.interval,
            metrics: Metrics::new(&name),
            name,
            clock,
            stream,
        };
        Ok((driver, receiver))
    }

    /// The group name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs the worker on `conn` until `cancelled` completes
    /// (it then stands down: the stream yields the idle value once if a
    /// lease is held, then ends; with graceful leave, rule 16, only once the
    /// lease held has drained and the leave request is answered) or the
    /// stream is dropped. Dropping this
    /// future stops the worker at once, like a crash.
    ///
    /// The loop of [`Worker`]: send every transmit (each request is timed out
    /// at its `expires_at`), hand every event on, then wait for cancellation,
    /// a reply or the worker's next deadline, and feed in what happened.
    /// Time is the clock given to [`Driver::new`]; `sleep_until` is the
    /// runtime's timer on that clock, completing at the given instant.
    pub async fn run<C: Connection, S: Future>(
        mut self,
        conn: C,
        sleep_until: impl Fn(Instant) -> S,
        cancelled: impl Future,
    ) {
        let clock = self.clock.clone();
        let now = || clock.now();
        let mut cancelled = pin!(cancelled);
        // Polled until it completes once: a worker leaving gracefully (rule
        // 16) keeps running after the cancel, and a completed future must
        // not be polled again.
        let mut cancel_seen = false;
        match self
            .check_server(&conn, &sleep_until, cancelled.as_mut())
            .await
        {
            Checked::Passed => {}
            Checked::Cancelled => {
                cancel_seen = true;
                self.worker.handle_cancel(now());
            }
            Checked::Refused(why) => {
                let at = now();
                if self.drain_events() {
                    let idle = Assignment::Idle(lease_core::Idle {
                        reason: IdleReason::UnsupportedServer(why),
                        since: at,
                        ended: None,
                        ended_tasks: None,
                    });
                    self.metrics.event(&Event::Assignment(idle.clone()));
                    let _ = self.stream.send(idle);
                }
                return;
            }
        }
        // At most `MAX_IN_FLIGHT` places, made when first needed and reused.
        let mut slots = Vec::with_capacity(MAX_IN_FLIGHT);
        // One timer for the worker's next deadline and the end of every
        // request in flight, rebuilt only when that instant changes.
        let mut timer = pin!(None::<S>);
        let mut timer_at = None;
        loop {
            // Send every registration due, each in a free slot (made if
            // fewer than `MAX_IN_FLIGHT` exist); with none free, it is not
            // sent (see `MAX_IN_FLIGHT`).
            loop {
                let at = now();
                let Some(t) = self.worker.poll_transmit() else {
                    break;
                };
                let free = slots.iter().position(|s: &Slot<_>| s.sent.is_none());
                let x = match free {
                    Some(x) => x,
                    None if slots.len() < MAX_IN_FLIGHT => {
                        slots.push(Slot {
                            sent: None,
                            keys: Default::default(),
                            args: Vec::new(),
                            reply: Box::pin(None),
                        });
                        slots.len() - 1
                    }
                    None => {
                        // At the bound: this one is not sent (see
                        // `MAX_IN_FLIGHT`); the worker backs off and retries.
                        let id = t.id;
                        self.worker
                            .handle_failure(at, id, &"not sent: in-flight bound");
                        continue;
                    }
                };
                let slot = &mut slots[x];
                for (into, from) in slot.keys.iter_mut().zip(t.keys) {
                    into.clear();
                    into.push_str(from);
                }
                copy_strings(&mut slot.args, t.args.iter().map(String::as_str));
                slot.sent = Some(Sent {
                    id: t.id,
                    script: t.script,
                    verb: Verb::EvalSha,
                    sent_at: at,
                    expires_at: t.expires_at,
                });
                let command = Command {
                    verb: Verb::EvalSha,
                    script: t.script.sha1(),
                    keys: t.keys,
                    args: t.args,
                };
                let reply = conn.run(command);
                slot.reply.set(Some(reply));
            }
            if !self.drain_events() {
                return;
            }
            let next = slots
                .iter()
                .filter_map(|s| s.sent.map(|s| s.expires_at))
                .chain(self.worker.poll_timeout())
                .min();
            if next != timer_at {
                timer.set(next.map(&sleep_until));
                timer_at = next;
            }
            // Wait for cancellation, a reply or the next deadline, in this
            // order of precedence.
            let woke = poll_fn(|cx| {
                if !cancel_seen && cancelled.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Woke::Cancelled);
                }
                for (x, slot) in slots.iter_mut().enumerate() {
                    if let Some(reply) = slot.reply.as_mut().as_pin_mut()
                        && let Poll::Ready(result) = reply.poll(cx)
                    {
                        slot.reply.set(None);
                        return Poll::Ready(Woke::Replied(x, result));
                    }
                }
                match timer.as_mut().as_pin_mut().map(|t| t.poll(cx)) {
                    Some(Poll::Ready(_)) => Poll::Ready(Woke::Timeout),
                    _ => Poll::Pending,
                }
            })
            .await;
            let at = now();
            match woke {
                Woke::Cancelled => {
                    cancel_seen = true;
                    self.worker.handle_cancel(at);
                }
                Woke::Replied(x, result) => {
                    let slot = &mut slots[x];
                    let Some(sent) = slot.sent else { continue };
                    // Rule 2: `EVAL` with the source after `NOSCRIPT` (which
                    // loads the script, routed by key in a cluster).
                    if let Err(e) = &result
                        && sent.verb == Verb::EvalSha
                        && C::is_noscript(e)
                    {
                        slot.sent = Some(Sent {
                            verb: Verb::Eval,
                            ..sent
                        });
                        let eval = conn.run(slot.command(Verb::Eval));
                        slot.reply.set(Some(eval));
                        continue;
                    }
                    slot.sent = None;
                    if sent.verb == Verb::Eval && result.is_ok() {
                        diag::script_loaded(&self.name, sent.script.sha1());
                    }
                    self.handle_outcome(at, &sent, Some(result));
                }
                Woke::Timeout => {
                    // A completed timer is not polled again.
                    timer.set(None);
                    timer_at = None;
                    for slot in &mut slots {
                        if let Some(sent) = slot.sent
                            && sent.expires_at <= at
                        {
                            slot.sent = None;
                            slot.reply.set(None);
                            self.handle_outcome::<C::Error>(at, &sent, None);
                        }
                    }
                    self.worker.handle_timeout(at);
                }
            }
        }
    }

    /// The start's server check: `INFO` once ([`Connection::server_info`]),
    /// judged by [`lease_core::check_server`]. An error, a reply that is not
    /// text, or no answer within an interval lets the worker run unchecked
    /// (`server not checked`): a server that hides `INFO` (an ACL, a managed
    /// service) is not refused for it. Cancellation during the check ends
    /// it.
    async fn check_server<C: Connection, S: Future>(
        &self,
        conn: &C,
        sleep_until: impl Fn(Instant) -> S,
        mut cancelled: std::pin::Pin<&mut impl Future>,
    ) -> Checked {
        let mut info = pin!(conn.server_info());
        let mut timer = pin!(sleep_until(self.clock.now() + self.check_within));
        let answer = poll_fn(|cx| {
            if cancelled.as_mut().poll(cx).is_ready() {
                return Poll::Ready(None);
            }
            if let Poll::Ready(answer) = info.as_mut().poll(cx) {
                return Poll::Ready(Some(Some(answer)));
            }
            timer.as_mut().poll(cx).map(|_| Some(None))
        })
        .await;
        let text = match answer {
            None => return Checked::Cancelled,
            Some(Some(Ok(Some(text)))) => text,
            Some(Some(Ok(None))) => {
                diag::server_not_checked(&self.name, &"the reply to INFO is not text");
                return Checked::Passed;
            }
            Some(Some(Err(error))) => {
                diag::server_not_checked(&self.name, &error);
                return Checked::Passed;
            }
            Some(None) => {
                diag::server_not_checked(&self.name, &"no answer to INFO within an interval");
                return Checked::Passed;
            }
        };
        match lease_core::check_server(&text) {
            Ok(server) => {
                diag::server_checked(&self.name, &server);
                Checked::Passed
            }
            Err(why) => {
                diag::server_refused(&self.name, &why);
                Checked::Refused(why)
            }
        }
    }

    /// Drains the worker's events: records each (metrics) and hands every
    /// assignment to the stream. Returns `false` when the loop must end: the
    /// worker stopped (after cancellation), or the stream was dropped.
    fn drain_events(&mut self) -> bool {
        while let Some(event) = self.worker.poll_event() {
            self.metrics.event(&event);
            let more = match event {
                Event::Assignment(assignment) => self.stream.send(assignment),
                Event::Stopped => false,
            };
            if !more {
                return false;
            }
        }
        true
    }

    /// Feeds what became of `request` at `now` (`None`: it timed out). A
    /// reply that is not an array of integers is rejected by the worker
    /// (logged there, and counted as a failed registration).
    fn handle_outcome<E: Display>(
        &mut self,
        now: Instant,
        request: &Sent,
        outcome: Option<Result<Option<Integers>, E>>,
    ) {
        let id = request.id;
        match outcome {
            Some(Ok(reply)) => {
                self.metrics.latency(now - request.sent_at);
                let _rejected = match reply {
                    Some(values) => self.worker.handle_reply(now, id, values.as_slice()),
                    None => self
                        .worker
                        .handle_parsed(now, id, Err(ReplyError::NotIntegers)),
                };
            }
            Some(Err(error)) => self.worker.handle_failure(now, id, &error),
            None => self.worker.handle_failure(now, id, &"timed out"),
        }
    }
}

/// The channel from the driver to its stream: unbounded (the driver never
/// waits for the loop body), with the stream's waker.
#[derive(Debug, Default)]
struct Channel {
    queue: VecDeque<Assignment>,
    waker: Option<Waker>,
    /// The driver ended: the stream ends once the queue is empty.
    closed: bool,
    /// The stream was dropped: the driver stops.
    dropped: bool,
}

fn channel(name: Arc<str>) -> (Sender, Assignments) {
    let shared = Arc::new(Mutex::new(Channel::default()));
    let stream = Assignments {
        rx: Receiver(shared.clone()),
        name,
        done: false,
        _guard: (),
    };
    (Sender(shared), stream)
}

fn lock(shared: &Mutex<Channel>) -> MutexGuard<'_, Channel> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

#[derive(Debug)]
struct Sender(Arc<Mutex<Channel>>);

impl Sender {
    /// Queues `assignment`; `false` if the stream was dropped.
    fn send(&self, assignment: Assignment) -> bool {
        let waker = {
            let mut c = lock(&self.0);
            if c.dropped {
                return false;
            }
            c.queue.push_back(assignment);
            c.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
        true
    }
}

impl Drop for Sender {
    fn drop(&mut self) {
        let waker = {
            let mut c = lock(&self.0);
            c.closed = true;
            c.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

/// The stream of one worker: the receiving end of a [`Driver`]'s
/// [`Assignment`]s, holding `G` (the worker's task handle, so that dropping
/// the stream stops the worker) for as long as it lives. With the feature
/// `stream` it is a `futures::Stream` (and `FusedStream`); each adapter's
/// `Discover` is one.
///
/// It starts with an idle value, then yields a value each time the lease in
/// force changes (and an idle value when registrations are refused), never
/// coalescing a release away: between two different leases there is always
/// an idle value, which says why the lease ended and when. It logs `pair
/// handed to the loop` for each value, and ends after cancellation, having
/// yielded the idle value if a lease was held.
#[derive(Debug)]
pub struct Assignments<G = ()> {
    rx: Receiver,
    name: Arc<str>,
    done: bool,
    _guard: G,
}

impl Assignments {
    /// The stream, holding `guard` until it is dropped.
    pub fn with_guard<G>(self, guard: G) -> Assignments<G> {
        Assignments {
            rx: self.rx,
            name: self.name,
            done: self.done,
            _guard: guard,
        }
    }
}

impl<G> Assignments<G> {
    /// The group name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The stream has ended.
    pub fn is_terminated(&self) -> bool {
        self.done
    }

    /// The next value, as `Stream::poll_next`.
    pub fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Assignment>> {
        if self.done {
            return Poll::Ready(None);
        }
        let mut c = lock(&self.rx.0);
        if let Some(assignment) = c.queue.pop_front() {
            drop(c);
            let slot = assignment.lease().map(lease_core::Lease::slot);
            diag::pair_handed_to_the_loop(&self.name, slot);
            return Poll::Ready(Some(assignment));
        }
        if c.closed {
            self.done = true;
            return Poll::Ready(None);
        }
        match &mut c.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            slot => *slot = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

#[cfg(feature = "stream")]
impl<G: Unpin> futures_core::Stream for Assignments<G> {
    type Item = Assignment;

    fn poll_next(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Assignment>> {
        Assignments::poll_next(self.get_mut(), cx)
    }
}

#[cfg(feature = "stream")]
impl<G: Unpin> futures_core::FusedStream for Assignments<G> {
    fn is_terminated(&self) -> bool {
        self.done
    }
}

/// The stream's end of the channel: marks it dropped, so the driver stops.
#[derive(Debug)]
struct Receiver(Arc<Mutex<Channel>>);

impl Drop for Receiver {
    fn drop(&mut self) {
        lock(&self.0).dropped = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

    /// Virtual time: the clock moves only when every future waits, to the
    /// earliest instant a timer (or a scripted reply) waits for.
    struct World {
        t0: Instant,
        micros: AtomicU64,
        /// Instants waited for since the last step.
        waits: Mutex<Vec<u64>>,
        /// Every timer the driver built, at its instant.
        built: Mutex<Vec<u64>>,
    }

    impl World {
        fn new() -> Arc<Self> {
            Arc::new(Self {
                t0: Instant::now(),
                micros: AtomicU64::new(0),
                waits: Mutex::default(),
                built: Mutex::default(),
            })
        }

        fn now(&self) -> Instant {
            self.t0 + Duration::from_micros(self.micros.load(Ordering::SeqCst))
        }

        fn micros_of(&self, at: Instant) -> u64 {
            at.saturating_duration_since(self.t0).as_micros() as u64
        }

        /// A timer completing at `at`, counted as one the driver built.
        fn sleep_until(self: &Arc<Self>, at: Instant) -> Sleep {
            let at = self.micros_of(at);
            self.built.lock().unwrap().push(at);
            Sleep {
                world: self.clone(),
                at,
            }
        }

        /// Polls `f` until it completes or virtual time would pass `end`.
        fn run_until<F: Future>(&self, f: F, end: Duration) -> Option<F::Output> {
            let mut f = pin!(f);
            let mut cx = Context::from_waker(Waker::noop());
            loop {
                if let Poll::Ready(out) = f.as_mut().poll(&mut cx) {
                    return Some(out);
                }
                let now = self.micros.load(Ordering::SeqCst);
                let next = self
                    .waits
                    .lock()
                    .unwrap()
                    .drain(..)
                    .filter(|&t| t > now)
                    .min();
                match next {
                    Some(t) if t <= end.as_micros() as u64 => {
                        self.micros.store(t, Ordering::SeqCst);
                    }
                    _ => return None,
                }
            }
        }
    }

    /// Completes once the virtual clock reaches `at`.
    struct Sleep {
        world: Arc<World>,
        at: u64,
    }

    impl Future for Sleep {
        type Output = ();

        fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
            if self.world.micros.load(Ordering::SeqCst) >= self.at {
                return Poll::Ready(());
            }
            self.world.waits.lock().unwrap().push(self.at);
            Poll::Pending
        }
    }

    /// Server time: the virtual clock, some years after the epoch.
    const SERVER_US: u64 = 1_700_000_000_000_000;

    /// A scripted Redis on the virtual clock, logging every command: it
    /// answers `NOSCRIPT` to `EVALSHA` while `flushed`, and otherwise counts
    /// the worker alone in the interval it names, after `delay` (never if
    /// `None`). It counts the commands whose futures are alive.
    struct Scripted {
        world: Arc<World>,
        interval_us: u64,
        delay: Option<Duration>,
        /// Commands sent from this instant on are never answered.
        stall_from: Option<Duration>,
        flushed: bool,
        log: Arc<Mutex<Vec<String>>>,
        live: Arc<AtomicUsize>,
        most_live: Arc<AtomicUsize>,
    }

    impl Scripted {
        fn new(world: &Arc<World>, delay: Option<Duration>) -> Self {
            Self {
                world: world.clone(),
                interval_us: 300_000,
                delay,
                stall_from: None,
                flushed: false,
                log: Arc::default(),
                live: Arc::default(),
                most_live: Arc::default(),
            }
        }

        fn flushed(world: &Arc<World>) -> Self {
            Self {
                flushed: true,
                ..Self::new(world, Some(Duration::from_millis(1)))
            }
        }
    }

    /// Decrements the count of live commands when dropped.
    struct Live(Arc<AtomicUsize>);

    impl Drop for Live {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::SeqCst);
        }
    }

    impl Connection for Scripted {
        type Error = &'static str;

        fn run<'c>(
            &'c self,
            command: Command<'_>,
        ) -> impl Future<Output = Result<Option<Integers>, &'static str>> + Send + use<'c> {
            let line: Vec<&str> = std::iter::once(command.verb.as_str())
                .chain(command.arguments())
                .collect();
            self.log.lock().unwrap().push(line.join(" "));
            let live = self.live.fetch_add(1, Ordering::SeqCst) + 1;
            self.most_live.fetch_max(live, Ordering::SeqCst);
            let guard = Live(self.live.clone());
            let noscript = self.flushed && command.verb == Verb::EvalSha;
            let expected: Option<u64> = command.keys[0]
                .rsplit(':')
                .next()
                .and_then(|k| k.parse().ok());
            let stalled = self
                .stall_from
                .is_some_and(|t| self.world.now() >= self.world.t0 + t);
            let answer_at = self
                .delay
                .filter(|_| !stalled)
                .map(|d| self.world.now() + d)
                .unwrap_or(self.world.t0 + Duration::from_secs(1 << 30));
            let wait = Sleep {
                world: self.world.clone(),
                at: self.world.micros_of(answer_at),
            };
            let interval_us = self.interval_us;
            async move {
                let _guard = guard;
                if noscript {
                    return Err("NOSCRIPT");
                }
                wait.await;
                let server = SERVER_US + self.world.micros.load(Ordering::SeqCst);
                let k = server / interval_us;
                let (sec, usec) = ((server / 1_000_000) as i64, (server % 1_000_000) as i64);
                let reply = if expected == Some(k) {
                    vec![1, k as i64, sec, usec, 0, 1]
                } else {
                    vec![0, k as i64, sec, usec]
                };
                Ok(Integers::collect(reply, Some))
            }
        }

        fn is_noscript(error: &&'static str) -> bool {
            *error == "NOSCRIPT"
        }
    }

    fn clock(world: &Arc<World>) -> Clock {
        let w = world.clone();
        Clock::new(move || w.now())
    }

    fn driver_with(world: &Arc<World>, options: &lease_core::Options) -> (Driver, Assignments) {
        Driver::new(options, Token::seeded(1, 7), clock(world), "test").unwrap()
    }

    fn driver(world: &Arc<World>) -> (Driver, Assignments) {
        driver_with(
            world,
            &lease_core::Options::new("g", Duration::from_millis(300)),
        )
    }

    /// Runs `driver` on `conn` for `intervals` of 300 ms of virtual time (or
    /// to its end), never cancelled unless `cancelled` completes.
    fn run(
        world: &Arc<World>,
        driver: Driver,
        conn: Scripted,
        intervals: u32,
        cancelled: impl Future,
    ) -> bool {
        let w = world.clone();
        let run = driver.run(conn, move |at| w.sleep_until(at), cancelled);
        world
            .run_until(run, Duration::from_millis(300) * intervals)
            .is_some()
    }

    #[test]
    fn noscript_falls_back_to_eval_with_the_source() {
        let world = World::new();
        let (driver, _stream) = driver(&world);
        let conn = Scripted::flushed(&world);
        let log = conn.log.clone();
        run(&world, driver, conn, 3, std::future::pending::<()>());
        let sent = log.lock().unwrap().clone();
        let sha = Script::for_mode(lease_core::Mode::Ranked).sha1();
        assert!(sent.len() >= 4, "{sent:?}");
        let evalsha = format!("EVALSHA {sha} 3 {{g}}:");
        assert!(sent[0].starts_with(&evalsha), "{}", sent[0]);
        assert!(sent[0].contains(" {g}:rules 300 "), "{}", sent[0]);
        assert!(sent[1].starts_with("EVAL "), "{}", sent[1]);
        let source = Script::for_mode(lease_core::Mode::Ranked).source();
        assert!(sent[1].contains(source), "the source, whole");
        // The arguments after the script are the same.
        let tail = |l: &str, s: &str| l[l.find(s).unwrap() + s.len()..].to_owned();
        assert_eq!(tail(&sent[0], sha), tail(&sent[1], source));
    }

    #[test]
    fn a_worker_alone_gets_its_lease_and_keeps_it() {
        let world = World::new();
        let (driver, mut stream) = driver(&world);
        let conn = Scripted::new(&world, Some(Duration::from_millis(2)));
        let log = conn.log.clone();
        assert!(!run(&world, driver, conn, 20, std::future::pending::<()>()));
        let mut cx = Context::from_waker(Waker::noop());
        let mut values = Vec::new();
        while let Poll::Ready(Some(a)) = stream.poll_next(&mut cx) {
            values.push(a);
        }
        assert_eq!(values.len(), 2, "{values:?}");
        assert_eq!(
            values[1].lease().map(|l| l.slot()),
            lease_core::Slot::new(0, 1)
        );
        let sent = log.lock().unwrap().len();
        assert!(
            (19..=23).contains(&sent),
            "one registration per interval: {sent}"
        );
    }

    /// The timer is rebuilt only when the next deadline changes: each timer
    /// the driver builds is for another instant than the one before. A
    /// worker whose requests are answered after a round trip longer than
    /// its timeout hedges, and the hedge's late reply changes nothing.
    #[test]
    fn the_timer_is_rebuilt_only_when_the_next_deadline_changes() {
        let world = World::new();
        let (driver, _stream) = driver(&world);
        let conn = Scripted::new(&world, Some(Duration::from_millis(40)));
        let log = conn.log.clone();
        run(&world, driver, conn, 30, std::future::pending::<()>());
        let built = world.built.lock().unwrap().clone();
        let registrations = log.lock().unwrap().len();
        assert!(registrations >= 30, "{registrations}");
        let repeats = built.windows(2).filter(|w| w[0] == w[1]).count();
        assert_eq!(repeats, 0, "{built:?}");
        assert!(
            built.len() <= 3 * registrations,
            "{} timers for {registrations} registrations",
            built.len()
        );
    }

    /// `in_flight` is bounded: when Redis stops answering a Ranked worker
    /// that holds a lease, it keeps hedging on a short timeout (each
    /// timed-out request stays in flight until its `expires_at`, the lease's
    /// deadline), and the driver sends no more once `MAX_IN_FLIGHT` are in
    /// flight.
    #[test]
    fn requests_in_flight_are_bounded() {
        let world = World::new();
        let options = lease_core::Options::new("g", Duration::from_millis(300))
            .with_mode(lease_core::Mode::Ranked);
        let (driver, _stream) = driver_with(&world, &options);
        let mut conn = Scripted::new(&world, Some(Duration::from_millis(1)));
        conn.stall_from = Some(Duration::from_millis(3000));
        let (log, most_live) = (conn.log.clone(), conn.most_live.clone());
        run(&world, driver, conn, 40, std::future::pending::<()>());
        let sent = log.lock().unwrap().len();
        assert!(sent > MAX_IN_FLIGHT, "{sent} sent");
        assert_eq!(most_live.load(Ordering::SeqCst), MAX_IN_FLIGHT);
    }

    #[test]
    fn the_loop_ends_when_the_stream_is_dropped() {
        let world = World::new();
        let (driver, stream) = driver(&world);
        drop(stream);
        let conn = Scripted::new(&world, None);
        assert!(run(&world, driver, conn, 1, std::future::pending::<()>()));
    }

    #[test]
    fn cancellation_ends_the_stream_after_the_opening_idle_value() {
        let world = World::new();
        let (driver, mut stream) = driver(&world);
        let conn = Scripted::new(&world, None);
        assert!(run(&world, driver, conn, 1, std::future::ready(())));
        let mut cx = Context::from_waker(Waker::noop());
        match stream.poll_next(&mut cx) {
            Poll::Ready(Some(Assignment::Idle(idle))) => {
                assert_eq!(idle.reason, lease_core::IdleReason::Started);
                assert_eq!(idle.since, world.t0, "on the driver's clock");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(stream.poll_next(&mut cx), Poll::Ready(None));
        assert!(stream.is_terminated());
        assert_eq!(stream.poll_next(&mut cx), Poll::Ready(None));
    }

    /// Rule 16: a worker leaving gracefully keeps running after the cancel
    /// (to send its leave request and read the answer), so the loop polls
    /// the completed cancel future no more: it used to, every iteration,
    /// which panics on `ready(())` and starves the replies.
    #[test]
    fn a_graceful_leave_runs_its_leave_request_to_the_end_after_the_cancel() {
        let world = World::new();
        let options =
            lease_core::Options::new("g", Duration::from_millis(300)).with_graceful_leave(true);
        let (driver, mut stream) = driver_with(&world, &options);
        let conn = Scripted::flushed(&world);
        let log = conn.log.clone();
        assert!(run(&world, driver, conn, 10, std::future::ready(())));
        let sent = log.lock().unwrap().clone();
        let leave = Script::leave().sha1();
        assert!(
            sent.iter()
                .any(|l| l.starts_with(&format!("EVALSHA {leave} 3 "))),
            "{sent:?}"
        );
        let mut cx = Context::from_waker(Waker::noop());
        assert!(matches!(
            stream.poll_next(&mut cx),
            Poll::Ready(Some(Assignment::Idle(_)))
        ));
        assert_eq!(stream.poll_next(&mut cx), Poll::Ready(None));
    }

    #[test]
    fn the_stream_waits_for_the_driver() {
        let (_driver, mut stream) = driver(&World::new());
        let mut cx = Context::from_waker(Waker::noop());
        assert_eq!(stream.poll_next(&mut cx), Poll::Pending);
        assert_eq!(stream.name(), "g");
    }

    /// A server whose `INFO` says `info` (or fails with `"ERR"`), counting
    /// registrations.
    struct Described {
        info: Result<Option<&'static str>, &'static str>,
        log: Arc<Mutex<Vec<String>>>,
    }

    impl Connection for Described {
        type Error = &'static str;

        fn run<'c>(
            &'c self,
            command: Command<'_>,
        ) -> impl Future<Output = Result<Option<Integers>, &'static str>> + Send + use<'c> {
            self.log
                .lock()
                .unwrap()
                .push(command.verb.as_str().to_owned());
            std::future::ready(Ok(Integers::collect([0, 10, 3, 1500], Some)))
        }

        fn is_noscript(_: &&'static str) -> bool {
            false
        }

        async fn server_info(&self) -> Result<Option<String>, &'static str> {
            self.log.lock().unwrap().push("INFO".to_owned());
            self.info.map(|text| text.map(str::to_owned))
        }
    }

    /// Runs a driver against `info` until it ends (cancelled after its
    /// first registrations if it runs); the values its stream yielded and
    /// the commands it sent.
    fn run_against(
        info: Result<Option<&'static str>, &'static str>,
    ) -> (Vec<Assignment>, Vec<String>) {
        let world = World::new();
        let (driver, mut stream) = driver(&world);
        let log = Arc::new(Mutex::new(Vec::new()));
        let conn = Described {
            info,
            log: log.clone(),
        };
        // Cancelled once a registration went out: the loop then ends.
        let sent = log.clone();
        let cancelled = poll_fn(move |_| {
            if sent.lock().unwrap().iter().any(|c| c == "EVALSHA") {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        });
        let w = world.clone();
        let run = driver.run(conn, move |at| w.sleep_until(at), cancelled);
        assert!(
            world.run_until(run, Duration::from_secs(3)).is_some(),
            "the driver ends"
        );
        let mut cx = Context::from_waker(Waker::noop());
        let mut values = Vec::new();
        while let Poll::Ready(Some(value)) = stream.poll_next(&mut cx) {
            values.push(value);
        }
        let sent = log.lock().unwrap().clone();
        (values, sent)
    }

    #[test]
    fn a_server_that_info_shows_to_break_the_guarantee_is_refused_before_any_registration() {
        let keydb = "# Server\r\nredis_version:6.3.4\r\n# Replication\r\nrole:active-replica\r\n";
        let (values, sent) = run_against(Ok(Some(keydb)));
        assert_eq!(sent, ["INFO"], "nothing registered");
        let reasons: Vec<IdleReason> = values
            .iter()
            .map(|v| match v {
                Assignment::Idle(idle) => idle.reason,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            reasons,
            [
                IdleReason::Started,
                IdleReason::UnsupportedServer(UnsupportedServer::ActiveReplica)
            ]
        );
    }

    #[test]
    fn a_server_that_passes_or_hides_info_is_registered_with() {
        for info in [
            Ok(Some("# Server\r\nredis_version:7.0.15\r\nrole:master\r\n")),
            Ok(None),
            Err("NOPERM this user has no permissions to run the 'info' command"),
        ] {
            let (values, sent) = run_against(info);
            assert_eq!(sent[0], "INFO", "{info:?}");
            assert!(
                sent[1..].iter().any(|c| c == "EVALSHA"),
                "{info:?}: {sent:?}"
            );
            assert!(
                values.iter().all(|v| !matches!(
                    v,
                    Assignment::Idle(lease_core::Idle {
                        reason: IdleReason::UnsupportedServer(_),
                        ..
                    })
                )),
                "{info:?}: {values:?}"
            );
        }
    }

    #[test]
    fn random_tokens_differ() {
        assert_ne!(random_token(), random_token());
    }
}
