//! The adapter loop of one worker, on `std` futures.

use std::fmt::Display;
use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use lease_core::diag;
use lease_core::{
    Assignment, Clock, Event, Identity, IdleReason, Options, OptionsError, ReplyError, RequestId,
    Script, UnsupportedServer, Worker,
};

use crate::connection::{Command, Connection, Integers, Verb};
use crate::metrics::Metrics;
use crate::stream::{Assignments, Sender, channel};

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
    keys: [String; lease_core::KEY_COUNT],
    args: Vec<String>,
    reply: Pin<Box<Option<F>>>,
}

impl<F> Slot<F> {
    fn new() -> Self {
        Self {
            sent: None,
            keys: Default::default(),
            args: Vec::new(),
            reply: Box::pin(None),
        }
    }

    fn command(&self, verb: Verb) -> Command<'_> {
        let sent = self.sent.expect("a busy slot");
        let script = match verb {
            Verb::EvalSha => sent.script.sha1(),
            Verb::Eval => sent.script.source(),
        };
        Command {
            verb,
            script,
            keys: self.keys.each_ref().map(String::as_str),
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
enum Woke<R> {
    Cancelled,
    /// The client answered the request in this slot.
    Replied(usize, R),
    Timeout,
}

/// The adapter loop of one [`Worker`]: see the [crate docs](crate).
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
    /// A worker for `options` with `identity`, on the adapter's `clock` (its
    /// runtime's: a runtime with virtual time gives its own, and every lease
    /// handed out answers `is_valid()` on it), started now and announced
    /// with `discover started` (`registry` names the client library, e.g.
    /// `redis-rs`), and its stream. Fails if the options are invalid.
    pub fn new<C>(
        options: &Options<C>,
        identity: Identity,
        clock: Clock,
        registry: &str,
    ) -> Result<(Self, Assignments), OptionsError> {
        let worker = Worker::new(options, identity, clock.now())?.with_clock(clock.clone());
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

    /// Runs the worker on `conn` until `cancelled` completes (it then stands
    /// down: with graceful leave, once what it held has drained and the
    /// leave request is answered; the stream yields the idle value and ends)
    /// or the stream is dropped. Dropping this future stops the worker at
    /// once, like a crash.
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
                self.worker.handle_cancel(self.clock.now());
            }
            Checked::Refused(why) => return self.refuse(why),
        }
        // At most `MAX_IN_FLIGHT` places, made when first needed and reused.
        let mut slots = Vec::with_capacity(MAX_IN_FLIGHT);
        // One timer for the worker's next deadline and the end of every
        // request in flight, rebuilt only when that instant changes.
        let mut timer = pin!(None::<S>);
        let mut timer_at = None;
        loop {
            self.send_due(&mut slots, |command| conn.run(command));
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
            let woke = wait(&mut cancelled, cancel_seen, &mut slots, timer.as_mut()).await;
            let at = self.clock.now();
            match woke {
                Woke::Cancelled => {
                    cancel_seen = true;
                    self.worker.handle_cancel(at);
                }
                Woke::Replied(x, result) => {
                    self.on_reply::<C, _>(at, &mut slots[x], result, |command| conn.run(command));
                }
                Woke::Timeout => {
                    // A completed timer is not polled again.
                    timer.set(None);
                    timer_at = None;
                    self.on_timeout::<C::Error, _>(at, &mut slots);
                }
            }
        }
    }

    /// Sends every registration due, each in a free slot (made if fewer than
    /// `MAX_IN_FLIGHT` exist); with none free, it is not sent (see
    /// `MAX_IN_FLIGHT`) and the worker backs off and retries.
    fn send_due<F>(&mut self, slots: &mut Vec<Slot<F>>, start: impl Fn(Command<'_>) -> F) {
        loop {
            let at = self.clock.now();
            let Some(t) = self.worker.poll_transmit() else {
                return;
            };
            let free = slots.iter().position(|s| s.sent.is_none());
            let x = match free {
                Some(x) => x,
                None if slots.len() < MAX_IN_FLIGHT => {
                    slots.push(Slot::new());
                    slots.len() - 1
                }
                None => {
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
            let reply = start(Command {
                verb: Verb::EvalSha,
                script: t.script.sha1(),
                keys: t.keys,
                args: t.args,
            });
            slot.reply.set(Some(reply));
        }
    }

    /// The client answered the request in `slot`. Rule 2: `EVAL` with the
    /// source after `NOSCRIPT` (which loads the script, routed by key in a
    /// cluster).
    fn on_reply<C: Connection, F>(
        &mut self,
        at: Instant,
        slot: &mut Slot<F>,
        result: Result<Option<Integers>, C::Error>,
        start: impl Fn(Command<'_>) -> F,
    ) {
        let Some(sent) = slot.sent else { return };
        if let Err(e) = &result
            && sent.verb == Verb::EvalSha
            && C::is_noscript(e)
        {
            slot.sent = Some(Sent {
                verb: Verb::Eval,
                ..sent
            });
            let eval = start(slot.command(Verb::Eval));
            slot.reply.set(Some(eval));
            return;
        }
        slot.sent = None;
        if sent.verb == Verb::Eval && result.is_ok() {
            diag::script_loaded(&self.name, sent.script.sha1());
        }
        self.handle_outcome(at, &sent, Some(result));
    }

    /// The timer fired: every request past its `expires_at` is abandoned,
    /// then the worker's own deadlines.
    fn on_timeout<E: Display, F>(&mut self, at: Instant, slots: &mut [Slot<F>]) {
        for slot in slots {
            if let Some(sent) = slot.sent
                && sent.expires_at <= at
            {
                slot.sent = None;
                slot.reply.set(None);
                self.handle_outcome::<E>(at, &sent, None);
            }
        }
        self.worker.handle_timeout(at);
    }

    /// The server check refused the server: the stream yields why and ends.
    fn refuse(mut self, why: UnsupportedServer) {
        let at = self.clock.now();
        if self.drain_events() {
            let idle = Assignment::Idle(lease_core::Idle {
                reason: IdleReason::UnsupportedServer(why),
                since: at,
                ended: None,
            });
            self.metrics.event(&Event::Assignment(idle.clone()));
            let _ = self.stream.send(idle);
        }
    }

    /// The start's server check: `INFO` once ([`Connection::server_info`];
    /// the adapters share one answer among a connection's clones), judged
    /// by [`lease_core::check_server`] once per answer. An error, a reply that is not
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
        match crate::judged::judge(&text) {
            (Ok(server), new) => {
                // Once per answer, not per worker sharing it.
                if new {
                    diag::server_checked(&self.name, &server);
                }
                Checked::Passed
            }
            (Err(why), _) => {
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
    /// reply that is not an array of integers is a failed registration.
    fn handle_outcome<E: Display>(
        &mut self,
        now: Instant,
        request: &Sent,
        outcome: Option<Result<Option<Integers>, E>>,
    ) {
        let id = request.id;
        match outcome {
            Some(Ok(Some(values))) => {
                self.metrics.latency(now - request.sent_at);
                let _rejected = self.worker.handle_reply(now, id, values.as_slice());
            }
            Some(Ok(None)) => {
                self.metrics.latency(now - request.sent_at);
                self.worker
                    .handle_failure(now, id, &ReplyError::NotIntegers);
            }
            Some(Err(error)) => self.worker.handle_failure(now, id, &error),
            None => self.worker.handle_failure(now, id, &"timed out"),
        }
    }
}

/// Waits for cancellation (until seen once), a reply or the timer, in this
/// order of precedence.
async fn wait<F: Future, T: Future>(
    cancelled: &mut Pin<&mut impl Future>,
    cancel_seen: bool,
    slots: &mut [Slot<F>],
    mut timer: Pin<&mut Option<T>>,
) -> Woke<F::Output> {
    poll_fn(|cx| {
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
    .await
}
