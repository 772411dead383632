//! The controller: starts Redis, the proxy and the workers, injects faults
//! one at a time, records the history and checks it.
//!
//! Timing. Every instant of the history is the host's monotonic clock
//! ([`Instant`]) in microseconds since one origin taken before anything
//! starts. A worker thread stamps what its loop receives the moment it
//! receives it; the controller only writes the lines:
//!
//! - `own` at the instant the loop received the pair;
//! - `release` at the instant the lease really ended: the earlier of the
//!   instant the loop was handed the idle pair and the lease's deadline
//!   ([`Lease::deadline`], which a release pulls back to the release
//!   itself), so a stalled worker writes its deadline, not its wake-up;
//! - at a crash or the end of a cancelled worker, the instant it stood down
//!   (again at most the deadline);
//! - never before the `own` it closes.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::BufWriter;
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use futures::channel::mpsc::UnboundedSender;
use lease_core::Lease;
use lease_history::timeline::{TimelineOptions, svg_with};
use lease_history::{Checker, HistoryWriter, LeaveHow, Record};
use lease_testkit::RedisServer;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio_util::sync::CancellationToken;

use crate::Args;
use crate::adapters::WorkerSpec;
use crate::faults::FaultKind;
use crate::proxy::{Latency, Link, Proxy};
use crate::report::{FaultRun, Report, Setup, per_kind};
use crate::sink::FencingSink;
use crate::worker::{Control, Msg, WorkerCtx};

/// The group needs to be fully covered this many intervals before the next
/// fault (or the first one) is injected...
const SETTLED_INTERVALS: u32 = 2;
/// ... unless this many intervals passed since the last fault ended.
const MAX_WAIT_INTERVALS: u32 = 15;

/// Runs the whole chaos run of `args` and returns its report.
pub(crate) fn run(args: &Args) -> Result<Report, String> {
    let interval = Duration::from_millis(args.interval);
    let options = lease_core::Options::new("chaos", interval)
        .with_gap(args.gap)
        .with_mode(args.mode);
    options.validate().map_err(|e| e.to_string())?;
    if !(args.duration.is_finite() && args.duration > 0.0) {
        return Err(format!(
            "--duration must be a positive number of seconds, got {}",
            args.duration
        ));
    }
    if args
        .stall_intervals
        .iter()
        .any(|x| !(x.is_finite() && *x > 0.0))
    {
        return Err("stall lengths must be positive".into());
    }
    let server = RedisServer::start().map_err(|e| format!("cannot start redis-server: {e}"))?;
    let proxy = Proxy::new(server.addr()).map_err(|e| format!("cannot start the proxy: {e}"))?;
    let file = File::create(&args.history)
        .map_err(|e| format!("cannot create {}: {e}", args.history.display()))?;
    eprintln!(
        "lease-chaos: redis-server on {}, adapter {}, {} workers, interval {} ms, mode {}, faults {}, seed {}, {} s; history {}",
        server.addr(),
        args.adapter.as_str(),
        args.workers,
        args.interval,
        args.mode,
        args.faults,
        args.seed,
        args.duration,
        args.history.display()
    );
    let (tx, rx) = mpsc::channel();
    let origin = Instant::now();
    let chaos = Chaos {
        args,
        interval,
        gap: interval.mul_f64(args.gap),
        tick: (interval / 10).max(Duration::from_millis(2)),
        options,
        server,
        proxy,
        sink: Arc::new(FencingSink::new(args.tasks)),
        rec: Recorder {
            origin,
            out: HistoryWriter::new(BufWriter::new(file)),
            records: Vec::new(),
            last_flush: origin,
        },
        rng: ChaCha8Rng::seed_from_u64(args.seed),
        tx,
        rx,
        seats: Vec::new(),
        workers: BTreeMap::new(),
        names: BTreeMap::new(),
        next_id: 0,
        pending: Vec::new(),
        next_seq: 0,
        faults: Vec::new(),
        quiet_until: origin + interval * SETTLED_INTERVALS,
        last_fault_end: origin,
        covered_since: None,
        settled_us: None,
        notes: Vec::new(),
        proxy_counts: (0, 0),
        long_mid_stalls: 0,
    };
    chaos.go()
}

/// Writes the history as it happens and keeps it for the checker.
struct Recorder {
    origin: Instant,
    out: HistoryWriter<BufWriter<File>>,
    records: Vec<Record>,
    last_flush: Instant,
}

impl Recorder {
    fn us(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.origin).as_micros()).unwrap_or(u64::MAX)
    }

    fn push(&mut self, record: Record) -> Result<(), String> {
        self.out
            .write(&record)
            .map_err(|e| format!("writing the history: {e}"))?;
        self.records.push(record);
        if self.last_flush.elapsed() >= Duration::from_secs(1) {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), String> {
        self.last_flush = Instant::now();
        self.out
            .flush()
            .map_err(|e| format!("writing the history: {e}"))
    }

    /// The release line of `lease` held since `own_us`, which ended at
    /// `ended` unless its deadline came first.
    fn release(
        &mut self,
        name: &str,
        lease: &Lease,
        own_us: u64,
        ended: Instant,
    ) -> Result<(), String> {
        let at_us = self.us(ended.min(lease.deadline())).max(own_us);
        self.push(Record::release(name, lease.i(), lease.n(), at_us))
    }
}

/// A place in the group: the base workers' seats and the burst seats. A seat
/// keeps its name across restarts of its worker.
struct Seat {
    name: String,
    current: Option<u64>,
}

/// One running worker instance.
struct Live {
    seat: usize,
    name: String,
    control: UnboundedSender<Control>,
    link: Link,
    thread: Option<JoinHandle<()>>,
    held: Option<(Lease, u64)>,
    /// The thread said it ended (or was given up on).
    gone: bool,
    /// A crash or cancel order was sent.
    leaving: bool,
}

/// Something the controller must do later, for a fault.
#[derive(Debug)]
enum Action {
    Spawn { seat: usize },
    Crash { id: u64 },
    Cancel { id: u64 },
    ClearLatency { id: u64 },
    LiftBlackhole { id: u64, reset: bool },
    DisarmReset { id: u64 },
}

struct Pending {
    at: Instant,
    seq: u64,
    fault: Option<usize>,
    action: Action,
}

struct Chaos<'a> {
    args: &'a Args,
    interval: Duration,
    gap: Duration,
    tick: Duration,
    options: lease_core::Options,
    server: RedisServer,
    proxy: Proxy,
    sink: Arc<FencingSink>,
    rec: Recorder,
    rng: ChaCha8Rng,
    tx: Sender<Msg>,
    rx: Receiver<Msg>,
    seats: Vec<Seat>,
    workers: BTreeMap<u64, Live>,
    /// Every instance's name, for reports.
    names: BTreeMap<u64, String>,
    next_id: u64,
    pending: Vec<Pending>,
    next_seq: u64,
    faults: Vec<FaultRun>,
    /// No fault before this instant.
    quiet_until: Instant,
    /// When the latest fault's effect ended.
    last_fault_end: Instant,
    /// Since when the group has been fully covered, as the controller sees it.
    covered_since: Option<Instant>,
    /// When the group first settled (history microseconds).
    settled_us: Option<u64>,
    notes: Vec<String>,
    /// Proxy connections accepted and reset, over the reaped workers.
    proxy_counts: (u64, u64),
    /// Stalls between a check and a write, longer than any lease can run
    /// (2 intervals): the worker wakes with an ended lease.
    long_mid_stalls: u64,
}

impl Chaos<'_> {
    fn l(&self, intervals: f64) -> Duration {
        self.interval.mul_f64(intervals)
    }

    fn go(mut self) -> Result<Report, String> {
        let base = self.args.workers as usize;
        let burst = base.div_ceil(2);
        for k in 0..base + burst {
            self.seats.push(Seat {
                name: format!("w{k}"),
                current: None,
            });
        }
        for seat in 0..base {
            self.spawn(seat)?;
        }
        let end = self.rec.origin + Duration::from_secs_f64(self.args.duration);
        loop {
            while let Ok(msg) = self.rx.try_recv() {
                self.receive(msg)?;
            }
            let now = Instant::now();
            self.run_due(now)?;
            self.reap();
            self.watch_coverage(now);
            if now >= end {
                break;
            }
            self.maybe_inject(now, end)?;
            let next = self
                .pending
                .iter()
                .map(|p| p.at)
                .min()
                .map_or(Duration::from_millis(10), |at| {
                    at.saturating_duration_since(now)
                })
                .min(Duration::from_millis(10));
            if let Ok(msg) = self.rx.recv_timeout(next) {
                self.receive(msg)?;
            }
        }
        self.shutdown()
    }

    // --- workers -------------------------------------------------------

    /// Starts a worker on `seat`; `false` if the seat's previous worker has
    /// not ended yet.
    fn spawn(&mut self, seat: usize) -> Result<bool, String> {
        if self.seats[seat].current.is_some() {
            return Ok(false);
        }
        let id = self.next_id;
        self.next_id += 1;
        let link = self
            .proxy
            .link(self.rng.random())
            .map_err(|e| format!("cannot open a proxy link: {e}"))?;
        let (control, inbox) = futures::channel::mpsc::unbounded();
        let ctx = WorkerCtx {
            id,
            control: inbox,
            events: self.tx.clone(),
            sink: self.sink.clone(),
            tasks: self.args.tasks,
            tick: self.tick,
            cancel: CancellationToken::new(),
        };
        let spec = WorkerSpec {
            url: link.url(),
            options: self.options.clone(),
            ctx,
        };
        let name = self.seats[seat].name.clone();
        let at = self.rec.us(Instant::now());
        self.rec.push(Record::join(&name, at))?;
        let thread = self
            .args
            .adapter
            .spawn(&name, spec)
            .map_err(|e| format!("cannot start a worker thread: {e}"))?;
        self.seats[seat].current = Some(id);
        self.names.insert(id, name.clone());
        self.workers.insert(
            id,
            Live {
                seat,
                name,
                control,
                link,
                thread: Some(thread),
                held: None,
                gone: false,
                leaving: false,
            },
        );
        Ok(true)
    }

    fn receive(&mut self, msg: Msg) -> Result<(), String> {
        match msg {
            Msg::Pair { id, pair, at } => {
                let Some(w) = self.workers.get_mut(&id).filter(|w| !w.gone) else {
                    return Ok(());
                };
                match pair {
                    Some(lease) => {
                        // A second pair without the idle one in between is
                        // written as it came: the checker reports it.
                        let at_us = self.rec.us(at);
                        self.rec.push(Record::own(
                            &w.name,
                            lease.i(),
                            lease.n(),
                            lease.token(),
                            at_us,
                        ))?;
                        w.held = Some((lease, at_us));
                    }
                    None => {
                        if let Some((lease, own_us)) = w.held.take() {
                            if self.args.sabotage_release {
                                let at_us = self.rec.us(at).max(own_us);
                                self.rec.push(Record::release(
                                    &w.name,
                                    lease.i(),
                                    lease.n(),
                                    at_us,
                                ))?;
                            } else {
                                self.rec.release(&w.name, &lease, own_us, at)?;
                            }
                        }
                    }
                }
            }
            Msg::Ended { id, at } => self.left(id, LeaveHow::Cancel, at)?,
            Msg::Crashed { id, at } => self.left(id, LeaveHow::Crash, at)?,
            Msg::Failed { id, error } => {
                let name = self.names.get(&id).cloned().unwrap_or_default();
                self.notes.push(format!("worker {name} failed: {error}"));
                eprintln!("lease-chaos: worker {name} failed: {error}");
                self.left(id, LeaveHow::Crash, Instant::now())?;
            }
        }
        Ok(())
    }

    /// Worker `id` ended at `at`: its lease (if any) ends then, at the latest.
    fn left(&mut self, id: u64, how: LeaveHow, at: Instant) -> Result<(), String> {
        let Some(w) = self.workers.get_mut(&id).filter(|w| !w.gone) else {
            return Ok(());
        };
        w.gone = true;
        if let Some((lease, own_us)) = w.held.take() {
            self.rec.release(&w.name, &lease, own_us, at)?;
        }
        let at_us = self.rec.us(at);
        self.rec.push(Record::leave(&w.name, how, at_us))?;
        if self.seats[w.seat].current == Some(id) {
            self.seats[w.seat].current = None;
        }
        Ok(())
    }

    /// Joins the threads of workers that ended and forgets them.
    fn reap(&mut self) {
        let done: Vec<u64> = self
            .workers
            .iter()
            .filter(|(_, w)| w.gone && w.thread.as_ref().is_none_or(JoinHandle::is_finished))
            .map(|(id, _)| *id)
            .collect();
        for id in done {
            if let Some(mut w) = self.workers.remove(&id) {
                if let Some(thread) = w.thread.take() {
                    let _ = thread.join();
                }
                let (connections, resets) = w.link.counts();
                self.proxy_counts.0 += connections;
                self.proxy_counts.1 += resets;
            }
        }
    }

    fn send(&mut self, id: u64, control: Control) {
        if let Some(w) = self.workers.get_mut(&id).filter(|w| !w.gone) {
            if matches!(control, Control::Crash | Control::Cancel) {
                w.leaving = true;
            }
            let _ = w.control.unbounded_send(control);
        }
    }

    /// Whether every slot `0..n` of one `n` is held, validly, by exactly
    /// one live worker, as the controller sees it.
    fn covered(&self, now: Instant) -> bool {
        let held: Vec<(u32, u32)> = self
            .workers
            .values()
            .filter(|w| !w.gone)
            .filter_map(|w| w.held.as_ref())
            .filter(|(lease, _)| lease.is_valid_at(now))
            .map(|(lease, _)| (lease.i(), lease.n()))
            .collect();
        let Some(&(_, n)) = held.first() else {
            return false;
        };
        let mut seen = vec![false; n as usize];
        held.len() == n as usize
            && held
                .iter()
                .all(|&(i, m)| m == n && !std::mem::replace(&mut seen[i as usize], true))
    }

    fn watch_coverage(&mut self, now: Instant) {
        if self.covered(now) {
            self.covered_since.get_or_insert(now);
        } else {
            self.covered_since = None;
        }
    }

    // --- faults --------------------------------------------------------

    fn later(&mut self, at: Instant, fault: Option<usize>, action: Action) {
        self.pending.push(Pending {
            at,
            seq: self.next_seq,
            fault,
            action,
        });
        self.next_seq += 1;
    }

    /// Runs the pending actions that are due, in order.
    fn run_due(&mut self, now: Instant) -> Result<(), String> {
        loop {
            let Some(k) = self
                .pending
                .iter()
                .enumerate()
                .filter(|(_, p)| p.at <= now)
                .min_by_key(|(_, p)| (p.at, p.seq))
                .map(|(k, _)| k)
            else {
                return Ok(());
            };
            let p = self.pending.swap_remove(k);
            self.act(p, now)?;
        }
    }

    fn act(&mut self, p: Pending, now: Instant) -> Result<(), String> {
        match p.action {
            Action::Spawn { seat } => {
                if !self.spawn(seat)? {
                    // The seat's worker is still standing down: soon.
                    let at = now + Duration::from_millis(5);
                    self.later(at, p.fault, Action::Spawn { seat });
                    return Ok(());
                }
            }
            Action::Crash { id } => self.send(id, Control::Crash),
            Action::Cancel { id } => self.send(id, Control::Cancel),
            Action::ClearLatency { id } => {
                if let Some(w) = self.workers.get(&id) {
                    w.link.set_latency(None);
                }
            }
            Action::LiftBlackhole { id, reset } => {
                if let Some(w) = self.workers.get(&id) {
                    if reset {
                        w.link.reset_all();
                    }
                    w.link.lift_blackhole();
                }
            }
            Action::DisarmReset { id } => {
                if let Some(w) = self.workers.get(&id)
                    && w.link.disarm_reset()
                {
                    self.notes.push(format!(
                        "reset on {} was not used (no registration)",
                        w.name
                    ));
                }
            }
        }
        if let Some(f) = p.fault {
            let at_us = self.rec.us(now);
            let fault = &mut self.faults[f];
            fault.end_us = fault.end_us.max(at_us);
            self.last_fault_end = self.last_fault_end.max(now);
        }
        Ok(())
    }

    /// Injects the next fault if one is due and the group has settled.
    fn maybe_inject(&mut self, now: Instant, end: Instant) -> Result<(), String> {
        let settled = self.covered_since.is_some_and(|since| {
            now.saturating_duration_since(since) >= self.interval * SETTLED_INTERVALS
        });
        if settled && self.settled_us.is_none() {
            self.settled_us = self.covered_since.map(|since| self.rec.us(since));
        }
        let busy = !self.pending.is_empty() || now < self.quiet_until;
        let waited_long = now >= self.last_fault_end + self.interval * MAX_WAIT_INTERVALS;
        if self.args.faults.0.is_empty() || busy || !(settled || waited_long) {
            return Ok(());
        }
        if end.saturating_duration_since(now) < self.interval * 3 {
            return Ok(());
        }
        if let Some(fault_end) = self.inject(now, end)? {
            self.last_fault_end = fault_end;
            let extra = self.rng.random_range(0.0..2.0);
            let extra = self.l(extra);
            self.quiet_until = fault_end + self.interval * SETTLED_INTERVALS + extra;
        }
        Ok(())
    }

    /// Live workers that may be hit (not leaving), by id.
    fn victims(&self) -> Vec<u64> {
        self.workers
            .iter()
            .filter(|(_, w)| !w.gone && !w.leaving)
            .map(|(id, _)| *id)
            .collect()
    }

    fn note_fault(
        &mut self,
        kind: FaultKind,
        victim: Option<u64>,
        detail: String,
        now: Instant,
        planned_end: Instant,
    ) -> Result<usize, String> {
        let at_us = self.rec.us(now);
        let worker = victim.and_then(|id| self.names.get(&id).cloned());
        if self.args.verbose {
            eprintln!(
                "[{:>9.3} s] {kind} {} {detail}",
                at_us as f64 / 1e6,
                worker.as_deref().unwrap_or("-")
            );
        }
        self.rec.push(Record::Fault {
            kind: kind.as_str().to_owned(),
            worker,
            detail: Some(detail),
            at_us,
        })?;
        self.faults.push(FaultRun {
            kind,
            start_us: at_us,
            end_us: self.rec.us(planned_end),
        });
        Ok(self.faults.len() - 1)
    }

    /// Draws a fault and injects it; returns when its effect ends, or `None`
    /// if it did not fit before the end of the run or had no victim.
    fn inject(&mut self, now: Instant, end: Instant) -> Result<Option<Instant>, String> {
        let kinds = &self.args.faults.0;
        let kind = kinds[self.rng.random_range(0..kinds.len())];
        // Every draw is made whatever the kind, so the sequence of kinds
        // depends on the seed alone.
        let pick: u64 = self.rng.random();
        let a: usize = self.rng.random_range(0..4);
        let coin: bool = self.rng.random();
        let x: f64 = self.rng.random_range(1.0..4.0);
        let (l, g) = (self.interval, self.gap);
        let victims = self.victims();
        let victim = (!victims.is_empty()).then(|| victims[(pick % victims.len() as u64) as usize]);
        let base_alive: Vec<(usize, u64)> = self
            .seats
            .iter()
            .enumerate()
            .take(self.args.workers as usize)
            .filter_map(|(seat, s)| s.current.map(|id| (seat, id)))
            .collect();
        let length = match kind {
            FaultKind::Stall => {
                let stalls = &self.args.stall_intervals;
                l.mul_f64(stalls[a % stalls.len()]) + self.tick
            }
            FaultKind::Crash | FaultKind::Cancel => l.mul_f64(x),
            FaultKind::Pause => [g.mul_f64(1.5), g * 3, l, l * 2][a],
            FaultKind::Latency => l.mul_f64(2.0 * x),
            FaultKind::Blackhole => l.mul_f64([0.5, 1.0, 2.0, 4.0][a]),
            FaultKind::Reset => l,
            FaultKind::Churn => l.mul_f64(x / 2.0) * base_alive.len() as u32,
            FaultKind::Burst => l.mul_f64(4.0 + 2.0 * x),
            FaultKind::Restart | FaultKind::Kill | FaultKind::Flush | FaultKind::Flushall => {
                Duration::ZERO
            }
        };
        if now + length + l * SETTLED_INTERVALS > end {
            return Ok(None);
        }
        let needs_victim = matches!(
            kind,
            FaultKind::Stall
                | FaultKind::Crash
                | FaultKind::Cancel
                | FaultKind::Kill
                | FaultKind::Latency
                | FaultKind::Blackhole
                | FaultKind::Reset
        );
        let victim = match (needs_victim, victim) {
            (true, None) => return Ok(None),
            (true, Some(id)) => Some(id),
            (false, _) => None,
        };
        let planned_end = now + length;
        let ms = |d: Duration| d.as_millis();
        let li = |d: Duration| d.as_secs_f64() / l.as_secs_f64();
        match kind {
            FaultKind::Stall => {
                let id = victim.unwrap_or_default();
                let duration = length - self.tick;
                let detail = format!(
                    "{:.1}L={}ms{}",
                    li(duration),
                    ms(duration),
                    if coin { " mid-task" } else { "" }
                );
                self.note_fault(kind, victim, detail, now, planned_end)?;
                if coin && duration > l * 2 {
                    self.long_mid_stalls += 1;
                }
                self.send(
                    id,
                    Control::Stall {
                        duration,
                        mid_task: coin,
                    },
                );
            }
            FaultKind::Crash | FaultKind::Cancel => {
                let id = victim.unwrap_or_default();
                let seat = self.workers[&id].seat;
                let detail = format!("rejoins after {:.1}L", li(length));
                let f = self.note_fault(kind, victim, detail, now, planned_end)?;
                let action = if kind == FaultKind::Crash {
                    Action::Crash { id }
                } else {
                    Action::Cancel { id }
                };
                self.act(
                    Pending {
                        at: now,
                        seq: 0,
                        fault: None,
                        action,
                    },
                    now,
                )?;
                self.later(planned_end, Some(f), Action::Spawn { seat });
            }
            FaultKind::Restart => {
                let f = self.note_fault(kind, None, "no persistence".into(), now, now)?;
                let t = Instant::now();
                self.server
                    .restart()
                    .map_err(|e| format!("restarting redis-server failed: {e}"))?;
                let back = Instant::now();
                self.faults[f].end_us = self.rec.us(back);
                if self.args.verbose {
                    eprintln!("             redis-server back after {} ms", ms(back - t));
                }
                return Ok(Some(back));
            }
            FaultKind::Pause => {
                let detail = format!(
                    "CLIENT PAUSE {}ms ALL ({:.1}G)",
                    ms(length),
                    length.as_secs_f64() / g.as_secs_f64()
                );
                self.note_fault(kind, None, detail, now, planned_end)?;
                self.server
                    .pause(length)
                    .map_err(|e| format!("CLIENT PAUSE failed: {e}"))?;
            }
            FaultKind::Kill => {
                let id = victim.unwrap_or_default();
                let addrs = self.workers[&id].link.upstream_addrs();
                let detail = format!("CLIENT KILL ADDR x{}", addrs.len());
                self.note_fault(kind, victim, detail, now, planned_end)?;
                for addr in addrs {
                    // The connection may have gone meanwhile: not an error.
                    let _ = self.server.command(&[
                        "CLIENT",
                        "KILL",
                        "ADDR",
                        &addr.to_string(),
                        "SKIPME",
                        "yes",
                    ]);
                }
            }
            FaultKind::Latency => {
                let id = victim.unwrap_or_default();
                let rtt = [g / 2, g, g.mul_f64(1.5), g][a];
                let latency = Latency {
                    one_way: rtt / 2,
                    jitter: rtt / 4,
                };
                let detail = format!(
                    "rtt {}ms +-{}ms ({:.1}G) for {:.1}L",
                    ms(rtt),
                    ms(rtt / 2),
                    rtt.as_secs_f64() / g.as_secs_f64(),
                    li(length)
                );
                let f = self.note_fault(kind, victim, detail, now, planned_end)?;
                self.workers[&id].link.set_latency(Some(latency));
                self.later(planned_end, Some(f), Action::ClearLatency { id });
            }
            FaultKind::Blackhole => {
                let id = victim.unwrap_or_default();
                let detail = format!(
                    "{:.1}L then {}",
                    li(length),
                    if coin { "reset" } else { "late delivery" }
                );
                let f = self.note_fault(kind, victim, detail, now, planned_end)?;
                self.workers[&id].link.blackhole(planned_end + l);
                self.later(
                    planned_end,
                    Some(f),
                    Action::LiftBlackhole { id, reset: coin },
                );
            }
            FaultKind::Reset => {
                let id = victim.unwrap_or_default();
                let f = self.note_fault(
                    kind,
                    victim,
                    "next registration's reply lost".into(),
                    now,
                    planned_end,
                )?;
                self.workers[&id].link.arm_reset();
                self.later(planned_end, Some(f), Action::DisarmReset { id });
            }
            FaultKind::Flush => {
                self.note_fault(kind, None, "SCRIPT FLUSH".into(), now, now)?;
                self.server
                    .command(&["SCRIPT", "FLUSH"])
                    .map_err(|e| format!("SCRIPT FLUSH failed: {e}"))?;
            }
            FaultKind::Flushall => {
                self.note_fault(kind, None, "FLUSHALL".into(), now, now)?;
                self.server
                    .command(&["FLUSHALL"])
                    .map_err(|e| format!("FLUSHALL failed: {e}"))?;
            }
            FaultKind::Churn => {
                let spacing = l.mul_f64(x / 2.0);
                let detail = format!(
                    "{} workers, one every {:.1}L",
                    base_alive.len(),
                    li(spacing)
                );
                let f = self.note_fault(kind, None, detail, now, planned_end)?;
                for (k, (seat, id)) in base_alive.into_iter().enumerate() {
                    let at = now + spacing * k as u32;
                    self.later(at, Some(f), Action::Cancel { id });
                    self.later(at, Some(f), Action::Spawn { seat });
                }
            }
            FaultKind::Burst => {
                let seats: Vec<usize> = (self.args.workers as usize..self.seats.len())
                    .filter(|&s| self.seats[s].current.is_none())
                    .collect();
                let detail = format!("+{} workers for {:.1}L", seats.len(), li(length));
                let f = self.note_fault(kind, None, detail, now, planned_end)?;
                for seat in seats {
                    self.spawn(seat)?;
                    if let Some(id) = self.seats[seat].current {
                        self.later(planned_end, Some(f), Action::Cancel { id });
                    }
                }
            }
        }
        Ok(Some(planned_end))
    }

    // --- the end -------------------------------------------------------

    fn shutdown(mut self) -> Result<Report, String> {
        let shutdown = Instant::now();
        let shutdown_us = self.rec.us(shutdown);
        // Undo what is still in force (a lifted blackhole, no latency), and
        // start nobody new.
        self.pending
            .retain(|p| !matches!(p.action, Action::Spawn { .. }));
        for p in std::mem::take(&mut self.pending) {
            self.act(p, shutdown)?;
        }
        let ids: Vec<u64> = self.victims();
        for id in ids {
            self.send(id, Control::Cancel);
        }
        self.wait_all(shutdown + self.interval * 2 + Duration::from_secs(2))?;
        let stuck: Vec<u64> = self
            .workers
            .iter()
            .filter(|(_, w)| !w.gone)
            .map(|(id, _)| *id)
            .collect();
        for &id in &stuck {
            self.send(id, Control::Crash);
        }
        self.wait_all(Instant::now() + Duration::from_secs(1))?;
        let end = Instant::now();
        let stuck: Vec<u64> = self
            .workers
            .iter()
            .filter(|(_, w)| !w.gone)
            .map(|(id, _)| *id)
            .collect();
        for id in stuck {
            let name = self.names.get(&id).cloned().unwrap_or_default();
            self.notes.push(format!(
                "worker {name} did not stop; recorded as crashed at the end"
            ));
            self.left(id, LeaveHow::Crash, end)?;
        }
        self.reap();
        self.rec.flush()?;
        let end_us = self.rec.us(end);

        let records = &self.rec.records;
        let checker = Checker::new(records, Some(end_us));
        let sink = self.sink.stats();
        let stale_us: Vec<u64> = sink.stale.iter().map(|&t| self.rec.us(t)).collect();
        let kinds = per_kind(&checker, &self.faults, &stale_us, shutdown_us);
        let steady = checker.coverage_in(self.settled_us.unwrap_or(shutdown_us), shutdown_us);
        let name = |id: u64| {
            self.names
                .get(&id)
                .cloned()
                .unwrap_or_else(|| format!("#{id}"))
        };
        let sink_violations = sink
            .violations
            .iter()
            .map(|v| {
                format!(
                    "{} at {} us: task {} token {} by {} after token {} by {}",
                    v.what,
                    self.rec.us(v.at),
                    v.task,
                    v.token,
                    name(v.writer),
                    v.newest_token,
                    name(v.newest_writer)
                )
            })
            .collect();
        if let Some(path) = &self.args.svg {
            let intervals = (self.args.duration * 1000.0 / self.args.interval as f64) as u32;
            let options = TimelineOptions::default()
                .with_end_us(end_us)
                .with_interval(self.interval)
                .with_width((intervals * 4).clamp(1200, 24_000))
                // Long runs: the fault markers only, or the labels pile up.
                .with_joins_and_leaves(self.args.duration <= 120.0);
            let title = format!(
                "lease-chaos: adapter {}, {} workers, L = {} ms, faults {}, seed {}",
                self.args.adapter.as_str(),
                self.args.workers,
                self.args.interval,
                self.args.faults,
                self.args.seed
            );
            std::fs::write(path, svg_with(records, &title, &options))
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        }
        let summary = checker.summary();
        Ok(Report {
            setup: Setup {
                adapter: self.args.adapter.as_str(),
                mode: self.args.mode.to_string(),
                workers: self.args.workers as usize,
                interval_ms: self.args.interval,
                seconds: end.saturating_duration_since(self.rec.origin).as_secs_f64(),
                seed: self.args.seed,
                faults: self.args.faults.to_string(),
            },
            summary,
            steady,
            sink,
            kinds,
            notes: self.notes,
            sink_violations,
            proxy: self.proxy_counts,
            long_mid_stalls: self.long_mid_stalls,
        })
    }

    /// Receives messages until every worker is gone or `deadline` passes.
    fn wait_all(&mut self, deadline: Instant) -> Result<(), String> {
        while self.workers.values().any(|w| !w.gone) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            if let Ok(msg) = self.rx.recv_timeout(left) {
                self.receive(msg)?;
            }
        }
        Ok(())
    }
}
