//! One worker's loop, the same for every adapter: it consumes the adapter's
//! pair stream, does the tasks of the pair it holds (checking its lease before
//! each one and writing the result to the fencing sink), and obeys the
//! controller (stall, crash, cancel).
//!
//! Each worker runs on an OS thread of its own with an executor of its own
//! (see [`super::adapters`]); the loop itself only uses `futures`, `std` and
//! a `sleep` the adapter passes in, so it runs on any runtime. A stall blocks
//! that thread with [`std::thread::sleep`], freezing the adapter's I/O loop
//! and timers as well as the loop body, like a paused process.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use futures::channel::mpsc::UnboundedReceiver;
use futures::{FutureExt, Stream, StreamExt, select_biased};
use lease_core::{Assignment, IdleReason, Lease, Mapping};
use tokio_util::sync::CancellationToken;

use crate::sink::FencingSink;

/// What the controller tells a worker thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// Block the executor thread for this long. With `mid_task`, and a lease
    /// held, the freeze happens between a task's validity check and its
    /// write (the fencing case); otherwise at once.
    Stall {
        /// How long.
        duration: Duration,
        /// Between a task's check and its write.
        mid_task: bool,
    },
    /// Die without standing down: the pair stream is dropped.
    Crash,
    /// Stand down through the adapter's cancellation token.
    Cancel,
}

/// What a worker thread tells the controller. Every message carries the
/// worker's instance id; a thread sends nothing after `Ended`, `Crashed` or
/// `Failed`.
#[derive(Debug)]
pub(crate) enum Msg {
    /// The loop received a pair, at that instant (`reason`: why it is
    /// idle, for an idle value).
    Pair {
        id: u64,
        pair: Option<Lease>,
        /// The task set received (incremental handover), instead of a pair.
        tasks: Option<Lease>,
        reason: Option<IdleReason>,
        at: Instant,
    },
    /// The stream ended after cancellation.
    Ended { id: u64, at: Instant },
    /// The worker died on a crash order.
    Crashed { id: u64, at: Instant },
    /// The worker could not start.
    Failed { id: u64, error: String },
}

/// The work a worker's loop does while it holds a pair: tasks `0..tasks`,
/// task `t` belongs to `t % n`, each result written to the fencing sink.
#[derive(Clone, Debug)]
pub struct Work {
    /// The store the results go to.
    pub sink: Arc<FencingSink>,
    /// The task source's size.
    pub tasks: u64,
    /// How often the loop does a round of its tasks.
    pub tick: Duration,
}

/// Everything a worker's loop needs besides the pair stream.
pub(crate) struct WorkerCtx {
    /// The instance id, unique in the run.
    pub(crate) id: u64,
    pub(crate) control: UnboundedReceiver<Control>,
    pub(crate) events: Sender<Msg>,
    /// The tasks the loop does, if any.
    pub(crate) work: Option<Work>,
    /// The adapter's cancellation token.
    pub(crate) cancel: CancellationToken,
}

impl WorkerCtx {
    /// Reports that the worker could not start.
    pub(crate) fn failed(&self, error: impl std::fmt::Display) {
        let _ = self.events.send(Msg::Failed {
            id: self.id,
            error: error.to_string(),
        });
    }
}

/// Waits for `start` (an adapter connecting, say) while obeying the
/// controller: a crash or cancel order ends the worker before it started
/// (`None`, the end already reported).
pub(crate) async fn starting<T>(ctx: &mut WorkerCtx, start: impl Future<Output = T>) -> Option<T> {
    let mut start = pin!(start.fuse());
    loop {
        select_biased! {
            control = ctx.control.next() => match control {
                Some(Control::Stall { duration, .. }) => std::thread::sleep(duration),
                Some(Control::Cancel) => {
                    let _ = ctx.events.send(Msg::Ended { id: ctx.id, at: Instant::now() });
                    return None;
                }
                Some(Control::Crash) | None => {
                    let _ = ctx.events.send(Msg::Crashed { id: ctx.id, at: Instant::now() });
                    return None;
                }
            },
            value = start => return Some(value),
        }
    }
}

/// Runs the loop until the stream ends (after cancellation) or a crash
/// order. `sleep` is the adapter runtime's timer.
pub(crate) async fn drive<S, F, Fut>(pairs: S, sleep: F, mut ctx: WorkerCtx)
where
    S: Stream<Item = lease_core::Assignment> + Unpin,
    F: Fn(Duration) -> Fut,
    Fut: Future<Output = ()>,
{
    let mut pairs = pairs.fuse();
    let mut held: Option<Lease> = None;
    let mut held_tasks: Option<Lease> = None;
    let mut pending_stall: Option<Duration> = None;
    // Without work, the loop only wakes for pairs and orders.
    let tick_every = ctx
        .work
        .as_ref()
        .map_or(Duration::from_secs(3600), |w| w.tick);
    let mut tick = Box::pin(sleep(tick_every).fuse());
    loop {
        select_biased! {
            control = ctx.control.next() => match control {
                Some(Control::Stall { duration, mid_task }) => {
                    if mid_task && (held.is_some() || held_tasks.is_some()) && ctx.work.is_some() {
                        pending_stall = Some(duration);
                    } else {
                        std::thread::sleep(duration);
                    }
                }
                Some(Control::Cancel) => ctx.cancel.cancel(),
                Some(Control::Crash) | None => {
                    // Returning drops the stream: the adapter stops at once.
                    let _ = ctx.events.send(Msg::Crashed { id: ctx.id, at: Instant::now() });
                    return;
                }
            },
            pair = pairs.next() => {
                let at = Instant::now();
                match pair {
                    Some(assignment) => {
                        let reason = match &assignment {
                            Assignment::Idle(idle) => Some(idle.reason),
                            Assignment::Held(_) => None,
                        };
                        // Whole pairs under modulo go as pairs, everything
                        // else as task sets (judged per task).
                        let lease = assignment.into_lease();
                        let (pair, tasks) = match lease {
                            Some(l) if l.mapping() == Mapping::Modulo && l.pair().is_some() => (Some(l), None),
                            Some(l) => (None, Some(l)),
                            None => (None, None),
                        };
                        held_tasks.clone_from(&tasks);
                        held.clone_from(&pair);
                        if ctx.events.send(Msg::Pair { id: ctx.id, pair, tasks, reason, at }).is_err() {
                            return;
                        }
                    }
                    None => {
                        let _ = ctx.events.send(Msg::Ended { id: ctx.id, at });
                        return;
                    }
                }
            },
            () = tick => {
                tick = Box::pin(sleep(tick_every).fuse());
                if let Some(w) = &ctx.work {
                    match &held_tasks {
                        Some(tasks) => work_tasks(tasks, &mut pending_stall, w, ctx.id),
                        None => work(held.as_ref(), &mut pending_stall, w, ctx.id),
                    }
                }
            },
        }
    }
}

/// One round of tasks: every task of the held pair, each only if the lease
/// is valid at that instant, each result written to the sink with the
/// lease's token.
fn work(held: Option<&Lease>, pending_stall: &mut Option<Duration>, w: &Work, id: u64) {
    let Some(lease) = held else {
        if let Some(d) = pending_stall.take() {
            std::thread::sleep(d);
        }
        return;
    };
    let (i, n) = super::whole_pair(lease);
    let (i, n) = (u64::from(i), u64::from(n));
    let mut task = i;
    while task < w.tasks {
        if !lease.is_valid() {
            break;
        }
        // Frozen here, between the check and the write, the worker wakes up
        // with a lease that may have ended: the sink must catch it.
        let stalled = match pending_stall.take() {
            Some(d) => {
                std::thread::sleep(d);
                true
            }
            None => false,
        };
        w.sink
            .write(task, lease.token(), id, stalled, || lease.is_valid());
        task += n;
    }
    // The lease ran out before the stall's moment came: freeze anyway.
    if let Some(d) = pending_stall.take() {
        std::thread::sleep(d);
    }
}

/// One round of tasks of a task set (incremental handover): every task of
/// `0..tasks` the set owns at that instant, each result written with the
/// token of the part that holds it.
fn work_tasks(tasks: &Lease, pending_stall: &mut Option<Duration>, w: &Work, id: u64) {
    for task in 0..w.tasks {
        let Some(token) = tasks.token_for(task) else {
            continue;
        };
        let stalled = match pending_stall.take() {
            Some(d) => {
                std::thread::sleep(d);
                true
            }
            None => false,
        };
        w.sink.write(task, token, id, stalled, || tasks.owns(task));
    }
    if let Some(d) = pending_stall.take() {
        std::thread::sleep(d);
    }
}
