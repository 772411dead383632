//! The one real-worker harness: real adapter workers, each on an OS thread
//! and an executor of its own (so that a stall freezes exactly one), driven
//! by the caller (stall, crash, cancel), with the history (docs/history-format.md)
//! recorded as it happens.
//!
//! The chaos run and `lease-demo --redis` both drive their workers through
//! a [`Harness`]. What the harness records:
//!
//! - `join` when a worker is started;
//! - `own` at the instant the worker's loop received the pair (the worker
//!   thread stamps it);
//! - `release` at the instant the lease really ended: the earlier of the
//!   instant the loop was handed the idle pair and the lease's deadline, so
//!   a stalled worker writes its deadline, not its wake-up, and never before
//!   the `own` it closes;
//! - `leave` when a worker's stream ended after cancellation, or it died on
//!   a crash order or could not start, its lease (if any) released then at
//!   the latest.
//!
//! Every instant is the host's monotonic clock in microseconds since the
//! harness's origin.

mod adapters;
mod worker;

use std::collections::BTreeMap;
use std::fs::File;
use std::io::BufWriter;
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use futures::channel::mpsc::UnboundedSender;
use lease_core::{IdleReason, Lease};
use lease_history::Part;
use lease_history::{HistoryWriter, LeaveHow, PartEnd, Record};
use tokio_util::sync::CancellationToken;

pub use adapters::AdapterKind;
pub use worker::{Control, Work};

use adapters::{Endpoint, WorkerSpec};
use worker::{Msg, WorkerCtx};

/// Why the harness could not go on.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// A worker thread could not be started.
    #[error("cannot start a worker thread: {0}")]
    Thread(#[source] std::io::Error),
    /// The history file could not be written.
    #[error("writing the history: {0}")]
    History(#[source] std::io::Error),
}

/// A worker of a harness, unique over its life (a restarted seat gets a new
/// one).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WorkerId(pub u64);

/// What a worker did, as the harness recorded it.
#[derive(Clone, Debug)]
pub enum Happened {
    /// Its loop received a pair.
    Own {
        /// The worker.
        id: WorkerId,
        /// Its name in the history.
        name: String,
        /// The lease.
        lease: Lease,
        /// When the loop received it.
        at: Instant,
    },
    /// Its lease ended.
    Release {
        /// The worker.
        id: WorkerId,
        /// Its name in the history.
        name: String,
        /// The lease that ended.
        lease: Lease,
        /// When the loop was handed the idle pair.
        noticed: Instant,
        /// When the lease really ended (the release line's instant).
        ended: Instant,
        /// Why it ended, as the adapter's stream said.
        reason: Option<IdleReason>,
    },
    /// It ended: its stream ended after cancellation, or it died.
    Left {
        /// The worker.
        id: WorkerId,
        /// Its name in the history.
        name: String,
        /// Cancel or crash.
        how: LeaveHow,
        /// When.
        at: Instant,
    },
    /// It could not start (recorded as a crash).
    Failed {
        /// The worker.
        id: WorkerId,
        /// Its name in the history.
        name: String,
        /// Why.
        error: String,
    },
}

/// One running worker.
struct Live {
    name: String,
    control: UnboundedSender<Control>,
    thread: Option<JoinHandle<()>>,
    held: Option<(Lease, u64)>,
    /// The task set its loop holds (incremental handover).
    held_tasks: Option<Lease>,
    /// The thread said it ended (or was given up on).
    gone: bool,
    /// A crash or cancel order was sent.
    leaving: bool,
}

/// A worker as the caller may look at it.
#[derive(Clone, Copy, Debug)]
pub struct WorkerView<'a> {
    /// The worker.
    pub id: WorkerId,
    /// Its name in the history.
    pub name: &'a str,
    /// The lease its loop holds, if any (it may have run out).
    pub held: Option<&'a Lease>,
    /// The task set its loop holds, if any (incremental handover; parts
    /// may have run out).
    pub tasks: Option<&'a Lease>,
    /// A crash or cancel order was sent to it.
    pub leaving: bool,
}

/// The real-worker harness (see the module documentation).
pub struct Harness {
    adapter: AdapterKind,
    options: lease_core::Options,
    work: Option<Work>,
    origin: Instant,
    records: Vec<Record>,
    out: Option<HistoryWriter<BufWriter<File>>>,
    last_flush: Instant,
    sabotage_release: bool,
    tx: Sender<Msg>,
    rx: Receiver<Msg>,
    workers: BTreeMap<WorkerId, Live>,
    next_id: u64,
}

impl Harness {
    /// A harness of `adapter` workers of the group `options`, with the
    /// history's clock starting at `origin`.
    pub fn new(adapter: AdapterKind, options: lease_core::Options, origin: Instant) -> Self {
        let (tx, rx) = mpsc::channel();
        Self {
            adapter,
            options,
            work: None,
            origin,
            records: Vec::new(),
            out: None,
            last_flush: origin,
            sabotage_release: false,
            tx,
            rx,
            workers: BTreeMap::new(),
            next_id: 0,
        }
    }

    /// Workers do `work` while they hold a pair (by default they do none).
    pub fn with_work(mut self, work: Work) -> Self {
        self.work = Some(work);
        self
    }

    /// Also writes the history to `out` as it happens (flushed every second
    /// and at [`Harness::stop`]).
    pub fn with_history_file(mut self, out: HistoryWriter<BufWriter<File>>) -> Self {
        self.out = Some(out);
        self
    }

    /// Negative control: writes a release at the instant the loop noticed
    /// it, not at the lease's deadline, so a stalled worker's holding
    /// overlaps its successor's (the checker must object).
    pub fn with_sabotaged_releases(mut self) -> Self {
        self.sabotage_release = true;
        self
    }

    /// The adapter the workers use.
    pub fn adapter(&self) -> AdapterKind {
        self.adapter
    }

    /// The history's origin.
    pub fn origin(&self) -> Instant {
        self.origin
    }

    /// `at` in history microseconds.
    pub fn us(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.origin).as_micros()).unwrap_or(u64::MAX)
    }

    /// Adds a record of the caller's (a fault, say) to the history.
    pub fn record(&mut self, record: Record) -> Result<(), HarnessError> {
        if let Some(out) = &mut self.out {
            out.write(&record).map_err(HarnessError::History)?;
        }
        self.records.push(record);
        if self.last_flush.elapsed() >= Duration::from_secs(1) {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), HarnessError> {
        self.last_flush = Instant::now();
        match &mut self.out {
            Some(out) => out.flush().map_err(HarnessError::History),
            None => Ok(()),
        }
    }

    /// The history so far, in the order it was written.
    pub fn records(&self) -> &[Record] {
        &self.records
    }

    /// Starts a worker named `name` (its name in the history) that connects
    /// to `url`, and records its `join`.
    pub fn spawn(&mut self, name: &str, url: String) -> Result<WorkerId, HarnessError> {
        self.spawn_to(name, None, Endpoint::Url(url))
    }

    /// Like [`Harness::spawn`] (or [`Harness::spawn_cluster`] with `urls`),
    /// registering under `member` (rule 18) when one is given.
    pub fn spawn_member(
        &mut self,
        name: &str,
        member: Option<lease_core::Member>,
        endpoint: Result<String, Vec<String>>,
    ) -> Result<WorkerId, HarnessError> {
        let endpoint = match endpoint {
            Ok(url) => Endpoint::Url(url),
            Err(urls) => Endpoint::Cluster(urls),
        };
        self.spawn_to(name, member, endpoint)
    }

    /// Starts a worker named `name` that connects to the Redis Cluster of
    /// which `urls` are nodes (the adapter's cluster client: redis-rs's
    /// cluster connection, fred's clustered config; lease-smol has none),
    /// and records its `join`.
    pub fn spawn_cluster(
        &mut self,
        name: &str,
        urls: Vec<String>,
    ) -> Result<WorkerId, HarnessError> {
        self.spawn_to(name, None, Endpoint::Cluster(urls))
    }

    fn spawn_to(
        &mut self,
        name: &str,
        member: Option<lease_core::Member>,
        endpoint: Endpoint,
    ) -> Result<WorkerId, HarnessError> {
        let id = WorkerId(self.next_id);
        self.next_id += 1;
        let (control, inbox) = futures::channel::mpsc::unbounded();
        let ctx = WorkerCtx {
            id: id.0,
            control: inbox,
            events: self.tx.clone(),
            work: self.work.clone(),
            cancel: CancellationToken::new(),
        };
        let mut options = self.options.clone();
        options.member = member;
        let spec = WorkerSpec {
            endpoint,
            options,
            ctx,
        };
        let at = self.us(Instant::now());
        self.record(Record::join(name, at))?;
        let thread = self
            .adapter
            .spawn(name, spec)
            .map_err(HarnessError::Thread)?;
        self.workers.insert(
            id,
            Live {
                name: name.to_owned(),
                control,
                thread: Some(thread),
                held: None,
                held_tasks: None,
                gone: false,
                leaving: false,
            },
        );
        Ok(id)
    }

    /// Sends `control` to worker `id`, if it is still running.
    pub fn control(&mut self, id: WorkerId, control: Control) {
        if let Some(w) = self.workers.get_mut(&id).filter(|w| !w.gone) {
            if matches!(control, Control::Crash | Control::Cancel) {
                w.leaving = true;
            }
            let _ = w.control.unbounded_send(control);
        }
    }

    /// The running workers (not ended), by id.
    pub fn workers(&self) -> impl Iterator<Item = WorkerView<'_>> {
        self.workers
            .iter()
            .filter(|(_, w)| !w.gone)
            .map(|(&id, w)| WorkerView {
                id,
                name: &w.name,
                held: w.held.as_ref().map(|(lease, _)| lease),
                tasks: w.held_tasks.as_ref(),
                leaving: w.leaving,
            })
    }

    /// Whether worker `id` is still running.
    pub fn is_running(&self, id: WorkerId) -> bool {
        self.workers.get(&id).is_some_and(|w| !w.gone)
    }

    /// What happened next, waiting at most `timeout` (zero: only what has
    /// already arrived), recorded in the history.
    pub fn next(&mut self, timeout: Duration) -> Result<Option<Happened>, HarnessError> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let msg = if left.is_zero() {
                self.rx.try_recv().ok()
            } else {
                self.rx.recv_timeout(left).ok()
            };
            let Some(msg) = msg else { return Ok(None) };
            if let Some(happened) = self.receive(msg)? {
                return Ok(Some(happened));
            }
        }
    }

    fn receive(&mut self, msg: Msg) -> Result<Option<Happened>, HarnessError> {
        let (id, how, at) = match msg {
            Msg::Pair {
                id,
                tasks: Some(tasks),
                ..
            } => return self.tasks(WorkerId(id), tasks),
            Msg::Pair {
                id,
                pair,
                reason,
                at,
                ..
            } => return self.pair(WorkerId(id), pair, reason, at),
            Msg::Ended { id, at } => (id, LeaveHow::Cancel, at),
            Msg::Crashed { id, at } => (id, LeaveHow::Crash, at),
            Msg::Failed { id, error } => {
                let id = WorkerId(id);
                let Some(name) = self.left(id, LeaveHow::Crash, Instant::now())? else {
                    return Ok(None);
                };
                return Ok(Some(Happened::Failed { id, name, error }));
            }
        };
        let id = WorkerId(id);
        Ok(self
            .left(id, how, at)?
            .map(|name| Happened::Left { id, name, how, at }))
    }

    fn pair(
        &mut self,
        id: WorkerId,
        pair: Option<Lease>,
        reason: Option<IdleReason>,
        at: Instant,
    ) -> Result<Option<Happened>, HarnessError> {
        let at_us = self.us(at);
        let Some(w) = self.workers.get_mut(&id).filter(|w| !w.gone) else {
            return Ok(None); // crashed: nothing it says counts any more
        };
        let name = w.name.clone();
        match pair {
            Some(lease) => {
                // A second pair without the idle one in between is written
                // as it came: the checker reports it.
                w.held = Some((lease.clone(), at_us));
                let (i, n) = whole_pair(&lease);
                self.record(Record::own(&name, i, n, lease.token(), at_us))?;
                Ok(Some(Happened::Own {
                    id,
                    name,
                    lease,
                    at,
                }))
            }
            None => {
                if let Some(tasks) = w.held_tasks.take() {
                    self.end_tasks(&name, &tasks, at)?;
                    return Ok(None);
                }
                let Some((lease, own_us)) = w.held.take() else {
                    return Ok(None);
                };
                let ended = if self.sabotage_release {
                    at
                } else {
                    at.min(lease.deadline())
                };
                self.release(&name, &lease, own_us, ended, reason)?;
                Ok(Some(Happened::Release {
                    id,
                    name,
                    lease,
                    noticed: at,
                    ended,
                    reason,
                }))
            }
        }
    }

    /// A task set received (incremental handover): an `own` with its parts
    /// at the instant the holding began (it replaces the previous one).
    fn tasks(&mut self, id: WorkerId, tasks: Lease) -> Result<Option<Happened>, HarnessError> {
        let at_us = self.us(tasks.since());
        let Some(w) = self.workers.get_mut(&id).filter(|w| !w.gone) else {
            return Ok(None);
        };
        let name = w.name.clone();
        let parts = tasks.history_parts().into_iter().map(Part::from);
        w.held_tasks = Some(tasks.clone());
        if let Some(record) = Record::own_task_set(&name, history_mapping(&tasks), parts, at_us) {
            self.record(record)?;
        }
        Ok(None)
    }

    /// The lines ending the task set `tasks`, at `at` at the latest (each
    /// part at its own deadline if that is earlier).
    fn end_tasks(&mut self, name: &str, tasks: &Lease, at: Instant) -> Result<(), HarnessError> {
        let parts: Vec<PartEnd> = tasks
            .parts()
            .iter()
            .zip(tasks.history_parts())
            .map(|(l, p)| PartEnd {
                part: Part::from(p),
                end_us: self.us(l.deadline()),
                renewed: Some(l.renewed_in()),
            })
            .collect();
        let at_us = self.us(at);
        for record in Record::task_set_ending(name, history_mapping(tasks), parts, at_us) {
            self.record(record)?;
        }
        Ok(())
    }

    /// The release line of `lease` held since `own_us`, which ended at
    /// `ended`, with the stand-down's reason when the stream gave one.
    fn release(
        &mut self,
        name: &str,
        lease: &Lease,
        own_us: u64,
        ended: Instant,
        reason: Option<IdleReason>,
    ) -> Result<(), HarnessError> {
        let at_us = self.us(ended).max(own_us);
        let (i, n) = whole_pair(lease);
        let record = match reason.and_then(|r| r.as_str().parse().ok()) {
            Some(reason) => Record::release_because(name, i, n, reason, at_us),
            None => Record::release(name, i, n, at_us),
        };
        self.record(record)
    }

    /// Worker `id` ended at `at`: its lease (if any) ends then, at the
    /// latest. Returns its name, or `None` if it had already ended.
    fn left(
        &mut self,
        id: WorkerId,
        how: LeaveHow,
        at: Instant,
    ) -> Result<Option<String>, HarnessError> {
        let Some(w) = self.workers.get_mut(&id).filter(|w| !w.gone) else {
            return Ok(None);
        };
        w.gone = true;
        let (name, held) = (w.name.clone(), w.held.take());
        if let Some(tasks) = w.held_tasks.take() {
            self.end_tasks(&name, &tasks, at)?;
        }
        if let Some((lease, own_us)) = held {
            self.release(&name, &lease, own_us, at.min(lease.deadline()), None)?;
        }
        let at_us = self.us(at);
        self.record(Record::leave(&name, how, at_us))?;
        Ok(Some(name))
    }

    /// Joins the threads of workers that ended and forgets them; returns
    /// their ids.
    pub fn reap(&mut self) -> Vec<WorkerId> {
        let done: Vec<WorkerId> = self
            .workers
            .iter()
            .filter(|(_, w)| w.gone && w.thread.as_ref().is_none_or(JoinHandle::is_finished))
            .map(|(id, _)| *id)
            .collect();
        for id in &done {
            if let Some(mut w) = self.workers.remove(id)
                && let Some(thread) = w.thread.take()
            {
                let _ = thread.join();
            }
        }
        done
    }

    /// Receives until every worker has ended or `deadline` passes; `seen`
    /// is told what happened meanwhile.
    fn wait_all(
        &mut self,
        deadline: Instant,
        seen: &mut impl FnMut(Happened),
    ) -> Result<(), HarnessError> {
        while self.workers.values().any(|w| !w.gone) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            if let Some(happened) = self.next(left)? {
                seen(happened);
            }
        }
        Ok(())
    }

    /// Stands every running worker down: cancels them, waits up to `grace`,
    /// crashes the ones still running, waits a second more, and records the
    /// ones that still did not stop as crashed at the end. `seen` is told
    /// everything that happened meanwhile. Returns the end of the history
    /// and the names of the workers that did not stop.
    pub fn stop(
        &mut self,
        grace: Duration,
        mut seen: impl FnMut(Happened),
    ) -> Result<(Instant, Vec<String>), HarnessError> {
        let running: Vec<WorkerId> = self.workers().map(|w| w.id).collect();
        for id in running {
            self.control(id, Control::Cancel);
        }
        self.wait_all(Instant::now() + grace, &mut seen)?;
        let stuck: Vec<WorkerId> = self.workers().map(|w| w.id).collect();
        for &id in &stuck {
            self.control(id, Control::Crash);
        }
        self.wait_all(Instant::now() + Duration::from_secs(1), &mut seen)?;
        let end = Instant::now();
        let stuck: Vec<WorkerId> = self.workers().map(|w| w.id).collect();
        let mut names = Vec::new();
        for id in stuck {
            if let Some(name) = self.left(id, LeaveHow::Crash, end)? {
                names.push(name);
            }
        }
        self.reap();
        self.flush()?;
        Ok((end, names))
    }
}

/// The history's name of a task set's mapping.
/// The pair of a whole-pair lease (the harness hands whole pairs here and
/// task sets to `tasks`); a lease of parts reports its newest pair.
pub fn whole_pair(lease: &Lease) -> (u32, u32) {
    lease
        .pair()
        .or_else(|| lease.newest_pair())
        .map_or((0, 1), |p| (p.i(), p.n()))
}

fn history_mapping(tasks: &Lease) -> lease_history::Mapping {
    match tasks.mapping() {
        lease_core::ownership::Mapping::Modulo => lease_history::Mapping::Modulo,
        lease_core::ownership::Mapping::Consistent => lease_history::Mapping::Consistent,
    }
}
