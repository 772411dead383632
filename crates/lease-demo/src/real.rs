//! The demo against a real Redis: every worker is a real `lease-redis`
//! worker with its own current-thread tokio runtime on its own OS thread, so
//! a stall can freeze exactly one of them.
//!
//! - crash: the worker's pair stream is dropped (no stand-down);
//! - stall: the worker's runtime thread is blocked;
//! - cancel: the worker's cancellation token;
//! - Redis restart: only on a server the demo started itself
//!   (`--redis-server`), skipped on an external one.

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use futures::StreamExt;
use lease_core::Mode;
use lease_history::{LeaveHow, Record};
use lease_redis::{Lease, Options, discover};
use lease_testkit::RedisServer;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio_util::sync::CancellationToken;

use crate::scenario::{SCRIPT, What, length};
use crate::view::View;
use crate::{DemoError, redact};

/// How the real run goes.
pub(crate) struct RealRun {
    /// An external server, or `None` to start a private `redis-server`.
    pub(crate) url: Option<String>,
    pub(crate) name: String,
    pub(crate) interval: Duration,
    pub(crate) mode: Mode,
}

/// What a worker thread tells the demo.
enum Msg {
    Pair(usize, Option<Lease>, Instant),
    Ended(usize, Instant),
    Failed(usize, String),
}

/// What the demo tells a worker thread.
enum Control {
    Stall(Duration),
    Crash,
    Cancel,
}

struct Handle {
    control: tokio::sync::mpsc::UnboundedSender<Control>,
    thread: JoinHandle<()>,
    held: Option<Lease>,
    gone: bool,
}

/// Connects, checks the server answers, and returns the client.
pub(crate) fn connect(url: &str) -> Result<redis::Client, DemoError> {
    let client = redis::Client::open(url)
        .map_err(|e| DemoError::Usage(format!("{} is not a Redis URL: {}", redact(url), e)))?;
    let mut conn = client
        .get_connection_with_timeout(Duration::from_secs(3))
        .map_err(|e| DemoError::Unreachable(format!("{}: {e}", redact(url))))?;
    redis::cmd("PING")
        .query::<String>(&mut conn)
        .map_err(|e| DemoError::Unreachable(format!("{}: {e}", redact(url))))?;
    Ok(client)
}

/// Plays the script against a real Redis. Returns the closed history and
/// its end.
pub(crate) fn run(cfg: &RealRun, view: &mut View) -> Result<(Vec<Record>, u64), DemoError> {
    let mut server = match &cfg.url {
        Some(_) => None,
        None => Some(RedisServer::start().map_err(|e| {
            DemoError::Runtime(format!(
                "cannot start a private redis-server (is it installed and on PATH?): {e}"
            ))
        })?),
    };
    let url = match (&cfg.url, &server) {
        (Some(url), _) => url.clone(),
        (None, Some(s)) => s.url().to_owned(),
        (None, None) => unreachable!("a server was started above"),
    };
    let client = connect(&url)?;
    let options = Options::new(cfg.name.clone(), cfg.interval).with_mode(cfg.mode);
    // Invalid options fail here, before any thread starts.
    lease_core::Worker::new(&options.lease, lease_core::Token::new(0), Instant::now())
        .map_err(|e| DemoError::Usage(e.to_string()))?;

    let l = cfg.interval;
    let end = l.mul_f64(length());
    let origin = Instant::now();
    let us = |at: Instant| at.saturating_duration_since(origin).as_micros() as u64;
    let (tx, rx) = mpsc::channel::<Msg>();
    let mut workers: BTreeMap<usize, Handle> = BTreeMap::new();
    let mut records: Vec<Record> = Vec::new();
    let mut steps = SCRIPT.iter().peekable();
    let mut last_frame: Option<Instant> = None;

    loop {
        // What the workers' loops received.
        while let Ok(msg) = rx.try_recv() {
            receive(msg, &mut workers, &mut records, view, origin);
        }
        let now = origin.elapsed();
        while let Some(step) = steps.next_if(|s| l.mul_f64(s.at) <= now) {
            if step.what != What::End {
                view.event(now, &step.what.describe());
            }
            let at = us(Instant::now());
            match step.what {
                What::Start(count) => {
                    for w in 0..count {
                        workers.insert(w, spawn(w, client.clone(), options.clone(), tx.clone()));
                        records.push(Record::join(format!("w{w}"), at));
                        view.started(w);
                    }
                }
                What::Join(w) => {
                    workers.insert(w, spawn(w, client.clone(), options.clone(), tx.clone()));
                    records.push(Record::join(format!("w{w}"), at));
                    view.started(w);
                }
                What::Crash(w) => {
                    if let Some(h) = workers.get_mut(&w) {
                        let _ = h.control.send(Control::Crash);
                        h.gone = true;
                        let now = Instant::now();
                        if let Some(lease) = h.held.take() {
                            let ended = lease.deadline().min(now);
                            records.push(Record::release(format!("w{w}"), lease.i(), lease.n(), us(ended)));
                        }
                        records.push(Record::leave(format!("w{w}"), LeaveHow::Crash, us(now)));
                        view.crashed(w, origin.elapsed());
                    }
                }
                What::Stall(w, intervals) => {
                    if let Some(h) = workers.get(&w) {
                        let d = l.mul_f64(intervals);
                        let _ = h.control.send(Control::Stall(d));
                        records.push(Record::Fault {
                            kind: "stall".into(),
                            worker: Some(format!("w{w}")),
                            detail: Some(format!("{}ms", d.as_millis())),
                            at_us: at,
                        });
                        view.stalled(w, now + d);
                    }
                }
                What::RestartRedis(_) => match server.as_mut() {
                    Some(server) => {
                        records.push(Record::fault("restart", at));
                        if let Err(e) = server.restart() {
                            return Err(DemoError::Runtime(format!("restarting redis-server failed: {e}")));
                        }
                    }
                    None => view.event(
                        now,
                        "skipped: the demo cannot restart a server it did not start (use --redis-server)",
                    ),
                },
                What::Cancel(w) => {
                    if let Some(h) = workers.get(&w) {
                        let _ = h.control.send(Control::Cancel);
                    }
                }
                What::End => {}
            }
        }
        if now >= end {
            break;
        }
        view.set_next(steps.peek().map(|s| {
            format!(
                "at {:.1} s, {}",
                l.mul_f64(s.at).as_secs_f64(),
                s.what.describe()
            )
        }));
        for (w, h) in &workers {
            view.set_lapsed(*w, h.held.as_ref().is_some_and(|lease| !lease.is_valid()));
        }
        view.set_now(origin.elapsed());
        if view.is_live() && last_frame.is_none_or(|t| t.elapsed() >= FRAME) {
            view.draw();
            last_frame = Some(Instant::now());
        }
        if let Ok(msg) = rx.recv_timeout(Duration::from_millis(20)) {
            receive(msg, &mut workers, &mut records, view, origin);
        }
    }

    // The end: every worker still running stands down.
    for h in workers.values().filter(|h| !h.gone) {
        let _ = h.control.send(Control::Cancel);
    }
    let wait_until = Instant::now() + l * 2 + Duration::from_secs(1);
    while workers.values().any(|h| !h.gone) {
        let left = wait_until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        if let Ok(msg) = rx.recv_timeout(left) {
            receive(msg, &mut workers, &mut records, view, origin);
        }
    }
    let end_at = Instant::now();
    for (w, h) in &mut workers {
        let _ = h.control.send(Control::Crash);
        if let Some(lease) = h.held.take() {
            let ended = lease.deadline().min(end_at);
            records.push(Record::release(
                format!("w{w}"),
                lease.i(),
                lease.n(),
                us(ended),
            ));
        }
    }
    for (_, h) in std::mem::take(&mut workers) {
        let _ = h.thread.join();
    }
    view.set_next(None);
    view.set_now(origin.elapsed());
    view.draw();
    drop(server);
    Ok((records, us(end_at)))
}

/// The live view is redrawn at most this often.
const FRAME: Duration = Duration::from_millis(50);

/// Records and shows one message from a worker thread.
fn receive(
    msg: Msg,
    workers: &mut BTreeMap<usize, Handle>,
    records: &mut Vec<Record>,
    view: &mut View,
    origin: Instant,
) {
    let us = |at: Instant| at.saturating_duration_since(origin).as_micros() as u64;
    let since = |at: Instant| at.saturating_duration_since(origin);
    let w = match &msg {
        Msg::Pair(w, ..) | Msg::Ended(w, _) | Msg::Failed(w, _) => *w,
    };
    let Some(h) = workers.get_mut(&w) else { return };
    if h.gone {
        return; // crashed: nothing it says counts any more
    }
    let name = format!("w{w}");
    match msg {
        Msg::Pair(_, Some(lease), at) => {
            records.push(Record::own(
                &name,
                lease.i(),
                lease.n(),
                lease.token(),
                us(at),
            ));
            view.own(w, lease.i(), lease.n(), lease.token(), since(at));
            h.held = Some(lease);
        }
        Msg::Pair(_, None, at) => {
            if let Some(lease) = h.held.take() {
                // The instant the lease really ended: its deadline, if the
                // worker only noticed later (it was frozen).
                let ended = lease.deadline().min(at);
                records.push(Record::release(&name, lease.i(), lease.n(), us(ended)));
                view.release(w, since(at), since(ended), None);
            }
        }
        Msg::Ended(_, at) => {
            h.gone = true;
            records.push(Record::leave(&name, LeaveHow::Cancel, us(at)));
            view.ended(w);
            view.event(since(at), &format!("{name} has stood down and ended"));
        }
        Msg::Failed(_, error) => {
            h.gone = true;
            view.event(origin.elapsed(), &format!("{name} failed: {error}"));
        }
    }
}

/// Starts worker `w` on its own OS thread with its own current-thread
/// runtime and connection.
fn spawn(w: usize, client: redis::Client, options: Options, tx: mpsc::Sender<Msg>) -> Handle {
    let (control, mut inbox) = tokio::sync::mpsc::unbounded_channel();
    let thread = std::thread::Builder::new()
        .name(format!("w{w}"))
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = tx.send(Msg::Failed(w, format!("cannot start a runtime: {e}")));
                    return;
                }
            };
            runtime.block_on(async move {
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(Duration::from_secs(2)))
                    .set_number_of_retries(3);
                let conn = match ConnectionManager::new_with_config(client, config).await {
                    Ok(c) => c,
                    Err(e) => {
                        let _ = tx.send(Msg::Failed(w, format!("cannot connect: {e}")));
                        return;
                    }
                };
                let cancel = CancellationToken::new();
                let mut pairs = match discover(conn, options.with_cancel(cancel.clone())) {
                    Ok(p) => p,
                    Err(e) => {
                        let _ = tx.send(Msg::Failed(w, e.to_string()));
                        return;
                    }
                };
                loop {
                    tokio::select! {
                        biased;
                        control = inbox.recv() => match control {
                            // Blocks this worker's only runtime thread: its
                            // registrations and timers stop, as in a frozen
                            // process.
                            Some(Control::Stall(d)) => std::thread::sleep(d),
                            // Dropping the stream stops the worker at once.
                            Some(Control::Crash) | None => return,
                            Some(Control::Cancel) => cancel.cancel(),
                        },
                        pair = pairs.next() => match pair {
                            Some(pair) => {
                                if tx.send(Msg::Pair(w, pair, Instant::now())).is_err() {
                                    return;
                                }
                            }
                            None => {
                                let _ = tx.send(Msg::Ended(w, Instant::now()));
                                return;
                            }
                        },
                    }
                }
            });
        })
        .expect("spawning a thread");
    Handle {
        control,
        thread,
        held: None,
        gone: false,
    }
}
