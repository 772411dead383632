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
use std::pin::pin;
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
#[derive(Clone, Copy, Debug)]
pub struct Command<'a> {
    /// `EVALSHA` or `EVAL`.
    pub verb: Verb,
    /// The script's SHA-1 (`EVALSHA`) or its source (`EVAL`).
    pub script: &'a str,
    /// `KEYS`.
    pub keys: &'a [String; 3],
    /// `ARGV`.
    pub args: &'a [String],
}

impl<'a> Command<'a> {
    /// Every argument after the verb, for clients that build commands from
    /// strings: the script, `3`, the keys, the arguments.
    pub fn arguments(&self) -> impl Iterator<Item = &'a str> {
        [self.script, "3"]
            .into_iter()
            .chain(self.keys.iter().map(String::as_str))
            .chain(self.args.iter().map(String::as_str))
    }
}

/// A Redis client as the driver uses it: runs one script command and
/// returns its reply as integers. Each adapter implements it for its client.
pub trait Connection: Send + Sync {
    /// The client's error.
    type Error: Display + Send;

    /// Runs `command`. The reply is `Some` if it is an array of integers and
    /// nothing else, `None` if it is anything else (the worker then rejects
    /// it); a client that converts leniently (strings of digits) must not.
    fn run(
        &self,
        command: Command<'_>,
    ) -> impl Future<Output = Result<Option<Vec<i64>>, Self::Error>> + Send;

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

/// A registration, owned, so it can outlive the borrow of the worker.
#[derive(Debug)]
struct Request {
    id: RequestId,
    script: &'static Script,
    keys: [String; 3],
    args: Vec<String>,
    sent_at: Instant,
    expires_at: Instant,
    name: Arc<str>,
}

/// What became of a request: `None` if it timed out, else what
/// [`Request::send`] returned.
type Outcome<E> = Option<Result<Option<Vec<i64>>, E>>;

impl Request {
    /// Rule 2: `EVALSHA`, or `EVAL` with the source after `NOSCRIPT` (which
    /// loads the script, routed by key in a cluster), logging `script loaded`.
    async fn send<C: Connection>(&self, conn: &C) -> Result<Option<Vec<i64>>, C::Error> {
        let sha = self.script.sha1();
        match conn.run(self.command(Verb::EvalSha, sha)).await {
            Err(e) if C::is_noscript(&e) => {
                let reply = conn
                    .run(self.command(Verb::Eval, self.script.source()))
                    .await?;
                diag::script_loaded(&self.name, sha);
                Ok(reply)
            }
            other => other,
        }
    }

    fn command<'a>(&'a self, verb: Verb, script: &'a str) -> Command<'a> {
        Command {
            verb,
            script,
            keys: &self.keys,
            args: &self.args,
        }
    }

    /// Sends the request, giving up when `expired` completes.
    async fn exchange<C: Connection>(
        self,
        conn: &C,
        expired: impl Future,
    ) -> (Self, Outcome<C::Error>) {
        let outcome = {
            let mut send = pin!(self.send(conn));
            let mut expired = pin!(expired);
            poll_fn(|cx| match send.as_mut().poll(cx) {
                Poll::Ready(result) => Poll::Ready(Some(result)),
                Poll::Pending => expired.as_mut().poll(cx).map(|_| None),
            })
            .await
        };
        (self, outcome)
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
    Replied(Box<(Request, Outcome<E>)>),
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
        let mut in_flight = Vec::new();
        loop {
            while let Some(request) = self.poll_request(now()) {
                let expired = sleep_until(request.expires_at);
                in_flight.push(Box::pin(request.exchange(&conn, expired)));
            }
            if !self.drain_events() {
                return;
            }
            // Wait for cancellation, a reply or the next deadline, in this
            // order of precedence.
            let mut timer = pin!(self.worker.poll_timeout().map(&sleep_until));
            let woke = poll_fn(|cx| {
                if !cancel_seen && cancelled.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Woke::Cancelled);
                }
                for x in 0..in_flight.len() {
                    if let Poll::Ready(done) = in_flight[x].as_mut().poll(cx) {
                        drop(in_flight.swap_remove(x));
                        return Poll::Ready(Woke::Replied(Box::new(done)));
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
                Woke::Replied(done) => self.handle_reply(at, &done.0, done.1),
                Woke::Timeout => self.worker.handle_timeout(at),
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

    /// The next registration to send, sent at `now`.
    fn poll_request(&mut self, now: Instant) -> Option<Request> {
        let t = self.worker.poll_transmit()?;
        Some(Request {
            id: t.id,
            script: t.script,
            keys: t.keys.map(str::to_owned),
            args: t.args.to_vec(),
            sent_at: now,
            expires_at: t.expires_at,
            name: self.name.clone(),
        })
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

    /// Feeds what became of `request` at `now`. A reply that is not an array
    /// of integers is rejected by the worker (logged there, and counted as a
    /// failed registration).
    fn handle_reply<E: Display>(&mut self, now: Instant, request: &Request, outcome: Outcome<E>) {
        let id = request.id;
        match outcome {
            Some(Ok(reply)) => {
                self.metrics.latency(now - request.sent_at);
                let _rejected = match reply {
                    Some(values) => self.worker.handle_reply(now, id, &values),
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
    use std::sync::atomic::{AtomicU64, Ordering};

    /// Answers `NOSCRIPT` to `EVALSHA` and a counted reply to `EVAL`,
    /// logging every command it runs.
    #[derive(Default)]
    struct Flushed(Arc<Mutex<Vec<String>>>);

    impl Connection for Flushed {
        type Error = &'static str;

        async fn run(&self, command: Command<'_>) -> Result<Option<Vec<i64>>, &'static str> {
            let line: Vec<&str> = std::iter::once(command.verb.as_str())
                .chain(command.arguments())
                .collect();
            self.0.lock().unwrap().push(line.join(" "));
            match command.verb {
                Verb::EvalSha => Err("NOSCRIPT"),
                Verb::Eval => Ok(Some(vec![0, 10, 3, 1500])),
            }
        }

        fn is_noscript(error: &&'static str) -> bool {
            *error == "NOSCRIPT"
        }
    }

    /// Virtual time: every timer completes at once and moves the clock to
    /// its instant.
    struct Virtual {
        t0: Instant,
        micros: AtomicU64,
    }

    impl Virtual {
        fn now(&self) -> Instant {
            self.t0 + Duration::from_micros(self.micros.load(Ordering::SeqCst))
        }

        fn sleep_until(&self, at: Instant) -> std::future::Ready<()> {
            let us = at.saturating_duration_since(self.t0).as_micros() as u64;
            self.micros.fetch_max(us, Ordering::SeqCst);
            std::future::ready(())
        }
    }

    fn block_on<F: Future>(f: F) -> F::Output {
        let mut f = pin!(f);
        match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(out) => out,
            Poll::Pending => panic!("nothing here waits"),
        }
    }

    /// Runs `driver` to its end in virtual time, against a flushed cache.
    fn run_virtual(driver: Driver, runtime: &Virtual, cancelled: impl Future) {
        let conn = Flushed::default();
        block_on(driver.run(conn, |at| runtime.sleep_until(at), cancelled));
    }

    fn world() -> Arc<Virtual> {
        Arc::new(Virtual {
            t0: Instant::now(),
            micros: AtomicU64::new(0),
        })
    }

    fn driver(runtime: &Arc<Virtual>) -> (Driver, Assignments) {
        let options = lease_core::Options::new("g", Duration::from_millis(300));
        let rt = runtime.clone();
        let clock = Clock::new(move || rt.now());
        Driver::new(&options, Token::seeded(1, 7), clock, "test").unwrap()
    }

    #[test]
    fn noscript_falls_back_to_eval_with_the_source() {
        let runtime = world();
        let t0 = runtime.now();
        let (mut driver, _stream) = driver(&runtime);
        driver.worker.handle_timeout(t0);
        let request = driver.poll_request(t0).expect("due at once");
        let conn = Flushed::default();
        let reply = block_on(request.send(&conn));
        assert_eq!(reply, Ok(Some(vec![0, 10, 3, 1500])));
        let sent = conn.0.lock().unwrap().clone();
        assert_eq!(sent.len(), 2);
        let sha = Script::for_mode(lease_core::Mode::Ranked).sha1();
        assert!(sent[0].starts_with(&format!("EVALSHA {sha} 3 {{g}}:1 {{g}}:0 {{g}}:rules 300 ")));
        assert!(sent[1].starts_with("EVAL "), "{}", sent[1]);
    }

    #[test]
    fn the_loop_ends_when_the_stream_is_dropped() {
        let runtime = world();
        let (driver, stream) = driver(&runtime);
        drop(stream);
        run_virtual(driver, &runtime, std::future::pending::<()>());
    }

    #[test]
    fn cancellation_ends_the_stream_after_the_opening_idle_value() {
        let runtime = world();
        let (driver, mut stream) = driver(&runtime);
        run_virtual(driver, &runtime, std::future::ready(()));
        let mut cx = Context::from_waker(Waker::noop());
        match stream.poll_next(&mut cx) {
            Poll::Ready(Some(Assignment::Idle(idle))) => {
                assert_eq!(idle.reason, lease_core::IdleReason::Started);
                assert_eq!(idle.since, runtime.t0, "on the driver's clock");
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
        let runtime = world();
        let rt = runtime.clone();
        let clock = Clock::new(move || rt.now());
        let options =
            lease_core::Options::new("g", Duration::from_millis(300)).with_graceful_leave(true);
        let (driver, mut stream) =
            Driver::new(&options, Token::seeded(1, 7), clock, "test").unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let conn = Flushed(log.clone());
        block_on(driver.run(conn, |at| runtime.sleep_until(at), std::future::ready(())));
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
        let (_driver, mut stream) = driver(&world());
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

        async fn run(&self, command: Command<'_>) -> Result<Option<Vec<i64>>, &'static str> {
            self.log
                .lock()
                .unwrap()
                .push(command.verb.as_str().to_owned());
            Ok(Some(vec![0, 10, 3, 1500]))
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
        let runtime = world();
        let (driver, mut stream) = driver(&runtime);
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
        block_on(driver.run(conn, |at| runtime.sleep_until(at), cancelled));
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
