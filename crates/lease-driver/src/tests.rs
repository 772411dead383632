//! The driver on a virtual clock with scripted connections.

use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use lease_core::{
    Assignment, Clock, Identity, IdleReason, Options, Pair, Script, UnsupportedServer,
};

use crate::*;

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
                // A lone worker at 0 of 1, registered in k-1, nothing read
                // of k-2 (rule 19's fields).
                vec![1, k as i64, sec, usec, 0, 1, 1, -1, -1]
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

/// Whole pairs, cancel without leave: the loop's mechanics, one pair.
fn classic() -> Options {
    Options::new("g", Duration::from_millis(300))
        .with_handover(lease_core::Handover::WholePairs)
        .with_graceful_leave(false)
}

fn driver_with(world: &Arc<World>, options: &Options) -> (Driver, Assignments) {
    Driver::new(options, Identity::seeded(1, 7), clock(world), "test").unwrap()
}

fn driver(world: &Arc<World>) -> (Driver, Assignments) {
    driver_with(world, &classic())
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
    let evalsha = format!("EVALSHA {sha} 8 {{g}}:");
    assert!(sent[0].starts_with(&evalsha), "{}", sent[0]);
    assert!(
        sent[0].contains(" {g}:rules {g}:members {g}:0:fillers {g}:2 {g}:0 {g}:1:fillers 300 "),
        "{}",
        sent[0]
    );
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
    assert_eq!(values[1].lease().and_then(|l| l.pair()), Pair::new(0, 1));
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
    let options = classic();
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
/// (to send its leave request and read the answer), so the loop must not
/// poll the completed cancel future again: polling it every iteration
/// panics on `ready(())` and starves the replies.
#[test]
fn a_graceful_leave_runs_its_leave_request_to_the_end_after_the_cancel() {
    let world = World::new();
    let options = classic().with_graceful_leave(true);
    let (driver, mut stream) = driver_with(&world, &options);
    let conn = Scripted::flushed(&world);
    let log = conn.log.clone();
    assert!(run(&world, driver, conn, 10, std::future::ready(())));
    let sent = log.lock().unwrap().clone();
    let leave = Script::leave().sha1();
    assert!(
        sent.iter()
            .any(|l| l.starts_with(&format!("EVALSHA {leave} 8 "))),
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
fn run_against(info: Result<Option<&'static str>, &'static str>) -> (Vec<Assignment>, Vec<String>) {
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
    assert_ne!(random_identity(), random_identity());
}
