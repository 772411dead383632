//! The demo against a real Redis, with the real-worker harness of
//! `lease-chaos`: every worker is a real `lease-redis` worker on a thread and
//! a current-thread runtime of its own, so a stall can freeze exactly one of
//! them, and the harness records the history as it happens.
//!
//! - crash: the worker's pair stream is dropped (no stand-down);
//! - stall: the worker's runtime thread is blocked;
//! - cancel: the worker's cancellation token;
//! - Redis restart: only on a server the demo started itself
//!   (`--redis-server`), skipped on an external one.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use lease_chaos::harness::{AdapterKind, Control, Happened, Harness, WorkerId};
use lease_core::Mode;
use lease_history::{LeaveHow, Record};
use lease_testkit::RedisServer;

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

/// The live view is redrawn at most this often.
const FRAME: Duration = Duration::from_millis(50);

/// Checks that the server at `url` answers `PING` (over TLS for
/// `rediss://`).
pub(crate) fn connect(url: &str) -> Result<(), DemoError> {
    let shown = redact(url);
    // rediss://: rustls on the ring provider, trusting SSL_CERT_FILE or the
    // system's store (redis-rs reads them; the workers connect the same way).
    lease_tls::install_default_provider();
    let client = redis::Client::open(url).map_err(|source| DemoError::BadUrl {
        shown: shown.clone(),
        source,
    })?;
    let ping = || -> redis::RedisResult<String> {
        let mut conn = client.get_connection_with_timeout(Duration::from_secs(3))?;
        redis::cmd("PING").query(&mut conn)
    };
    ping().map_err(|source| DemoError::Unreachable { shown, source })?;
    Ok(())
}

/// The demo's workers: their numbers in the script and in the harness.
struct Workers {
    harness: Harness,
    ids: BTreeMap<usize, WorkerId>,
    numbers: BTreeMap<WorkerId, usize>,
    url: String,
}

impl Workers {
    fn start(&mut self, w: usize, view: &mut View) -> Result<(), DemoError> {
        let id = self.harness.spawn(&format!("w{w}"), self.url.clone())?;
        self.ids.insert(w, id);
        self.numbers.insert(id, w);
        view.started(w);
        Ok(())
    }

    fn control(&mut self, w: usize, control: Control) -> bool {
        match self.ids.get(&w) {
            Some(&id) if self.harness.is_running(id) => {
                self.harness.control(id, control);
                true
            }
            _ => false,
        }
    }

    /// Shows what the harness recorded.
    fn show(&self, happened: Happened, view: &mut View) {
        let origin = self.harness.origin();
        let since = |at: Instant| at.saturating_duration_since(origin);
        let number = |id: WorkerId| self.numbers.get(&id).copied().unwrap_or_default();
        match happened {
            Happened::Own { id, lease, at, .. } => {
                if let Some(p) = lease.pair() {
                    view.own(number(id), p.i(), p.n(), lease.token(), since(at));
                }
            }
            Happened::Release {
                id,
                noticed,
                ended,
                reason,
                ..
            } => view.release(
                number(id),
                since(noticed),
                since(ended),
                reason.as_ref().map(lease_core::IdleReason::as_str),
            ),
            Happened::Left {
                id,
                name,
                how: LeaveHow::Cancel,
                at,
            } => {
                view.ended(number(id));
                view.event(since(at), &format!("{name} has stood down and ended"));
            }
            Happened::Left { .. } => {}
            Happened::Failed { name, error, .. } => {
                view.event(origin.elapsed(), &format!("{name} failed: {error}"));
            }
        }
    }
}

/// Plays the script against a real Redis. Returns the closed history and
/// its end.
pub(crate) fn run(cfg: &RealRun, view: &mut View) -> Result<(Vec<Record>, u64), DemoError> {
    // The live view shows slots: whole pairs under modulo.
    let options = lease_core::Options::new(cfg.name.clone(), cfg.interval);
    let options = match cfg.mode {
        Mode::Ranked => options.with_handover(lease_core::Handover::WholePairs),
        Mode::Arrival => options.with_counting(lease_core::Counting::Arrival),
    };
    // Invalid options fail here, before anything starts.
    options.validate()?;
    let mut server = match &cfg.url {
        Some(_) => None,
        None => Some(RedisServer::start().map_err(DemoError::NoServer)?),
    };
    let url = match (&cfg.url, &server) {
        (Some(url), _) => url.clone(),
        (None, Some(s)) => s.url().to_owned(),
        (None, None) => unreachable!("a server was started above"),
    };
    connect(&url)?;

    let l = cfg.interval;
    let end = l.mul_f64(length());
    let origin = Instant::now();
    let mut workers = Workers {
        harness: Harness::new(AdapterKind::Redis, options, origin),
        ids: BTreeMap::new(),
        numbers: BTreeMap::new(),
        url,
    };
    let mut steps = SCRIPT.iter().peekable();
    let mut last_frame: Option<Instant> = None;

    loop {
        while let Some(happened) = workers.harness.next(Duration::ZERO)? {
            workers.show(happened, view);
        }
        let now = origin.elapsed();
        while let Some(step) = steps.next_if(|s| l.mul_f64(s.at) <= now) {
            if step.what != What::End {
                view.event(now, &step.what.describe());
            }
            let at = workers.harness.us(Instant::now());
            match step.what {
                What::Start(count) => {
                    for w in 0..count {
                        workers.start(w, view)?;
                    }
                }
                What::Join(w) => workers.start(w, view)?,
                What::Crash(w) => {
                    if workers.control(w, Control::Crash) {
                        view.crashed(w, now);
                    }
                }
                What::Stall(w, intervals) => {
                    let d = l.mul_f64(intervals);
                    let stall = Control::Stall {
                        duration: d,
                        mid_task: false,
                    };
                    if workers.control(w, stall) {
                        workers.harness.record(Record::Fault {
                            kind: "stall".into(),
                            worker: Some(format!("w{w}")),
                            detail: Some(format!("{}ms", d.as_millis())),
                            at_us: at,
                        })?;
                        view.stalled(w, now + d);
                    }
                }
                What::RestartRedis(_) => match server.as_mut() {
                    Some(server) => {
                        workers.harness.record(Record::fault("restart", at))?;
                        server.restart().map_err(DemoError::Restart)?;
                    }
                    None => view.event(
                        now,
                        "skipped: the demo cannot restart a server it did not start (use --redis-server)",
                    ),
                },
                What::Cancel(w) => {
                    workers.control(w, Control::Cancel);
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
        for w in workers.harness.workers() {
            let lapsed = w.held.is_some_and(|lease| !lease.is_valid());
            if let Some(&number) = workers.numbers.get(&w.id) {
                view.set_lapsed(number, lapsed);
            }
        }
        view.set_now(origin.elapsed());
        if view.is_live() && last_frame.is_none_or(|t| t.elapsed() >= FRAME) {
            view.draw();
            last_frame = Some(Instant::now());
        }
        if let Some(happened) = workers.harness.next(Duration::from_millis(20))? {
            workers.show(happened, view);
        }
    }

    // The end: every worker still running stands down.
    let mut seen = Vec::new();
    let (end_at, _stuck) = workers
        .harness
        .stop(l * 2 + Duration::from_secs(1), |h| seen.push(h))?;
    for happened in seen {
        workers.show(happened, view);
    }
    view.set_next(None);
    view.set_now(origin.elapsed());
    view.draw();
    drop(server);
    let end_us = workers.harness.us(end_at);
    Ok((workers.harness.records().to_vec(), end_us))
}
