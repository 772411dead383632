//! The fencing sink: the store the workers write task results to.
//!
//! It keeps, per task, the newest fencing token it has seen and the worker
//! that wrote with it, and rejects a write whose token is older (the
//! fencing of docs/protocol.md). A worker writes a task only after checking, at that instant,
//! that its lease is valid, exactly as an application would; a worker frozen
//! between that check and the write wakes up with an old token, and the sink
//! must turn it away as **stale**.
//!
//! Two outcomes would mean the lease failed, and count as violations:
//!
//! - a **double write**: a write accepted for a task with the same token as
//!   the newest one, from another worker. Two workers' leases that share a
//!   task have tokens at least 2 apart, so this cannot happen;
//! - a **stale write under a valid lease**: a write rejected as stale while
//!   the writer's lease was still valid at that instant. The newer token's
//!   holder wrote earlier, while its own lease was valid; the older lease
//!   started before it and is one unbroken span, so both would have been
//!   valid together.

use std::sync::Mutex;
use std::time::Instant;

/// The most detailed violations kept (counts are exact).
const MAX_KEPT: usize = 100;

/// What became of one write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    /// Stored: the token is the newest seen for the task.
    Accepted,
    /// Rejected: an older token than the newest seen for the task.
    Stale,
    /// Accepted, but another worker already wrote with the same token: a
    /// violation.
    Double,
}

/// A write that should never have happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SinkViolation {
    /// `double write` or `stale under a valid lease`.
    pub what: &'static str,
    /// The task.
    pub task: u64,
    /// The writer (worker instance id).
    pub writer: u64,
    /// The writer's token.
    pub token: u64,
    /// Who wrote the newest token seen for the task before.
    pub newest_writer: u64,
    /// That token.
    pub newest_token: u64,
    /// When.
    pub at: Instant,
}

/// Counts and details of everything written.
#[derive(Clone, Debug, Default)]
pub struct SinkStats {
    /// Writes stored.
    pub accepted: u64,
    /// Writes rejected as stale, and when each happened.
    pub stale: Vec<Instant>,
    /// Stale writes by workers that were frozen between the validity check
    /// and the write (a stall fault "mid-task").
    pub stale_after_stall: u64,
    /// Double writes (exact count).
    pub double_writes: u64,
    /// Stale writes under a still-valid lease (exact count).
    pub stale_while_valid: u64,
    /// Writes accepted although the writer's lease had ended (a worker
    /// frozen after its check): no newer token had reached the store for
    /// the task yet, so fencing could not tell. Not a violation; the new
    /// holder's first write supersedes it.
    pub late_accepted: u64,
    /// The first violations of either kind.
    pub violations: Vec<SinkViolation>,
}

impl SinkStats {
    /// No double write and no stale write under a valid lease.
    pub fn is_ok(&self) -> bool {
        self.double_writes == 0 && self.stale_while_valid == 0
    }
}

#[derive(Clone, Copy, Debug)]
struct Newest {
    token: u64,
    writer: u64,
}

#[derive(Debug)]
struct State {
    newest: Vec<Option<Newest>>,
    stats: SinkStats,
}

/// The store (see the module documentation). Shared by every worker thread.
#[derive(Debug)]
pub struct FencingSink {
    state: Mutex<State>,
}

impl FencingSink {
    /// A sink for tasks `0..tasks`.
    pub fn new(tasks: u64) -> Self {
        let tasks = usize::try_from(tasks).unwrap_or(usize::MAX);
        Self {
            state: Mutex::new(State {
                newest: vec![None; tasks],
                stats: SinkStats::default(),
            }),
        }
    }

    /// Writes the result of `task` for `writer` with fencing `token`.
    /// `still_valid` is asked, under the sink's lock, whether the writer's
    /// lease is valid now (the store itself never uses the answer: it only
    /// classifies the write); `after_stall` says the writer was frozen
    /// between its check and this write.
    pub fn write(
        &self,
        task: u64,
        token: u64,
        writer: u64,
        after_stall: bool,
        still_valid: impl FnOnce() -> bool,
    ) -> Write {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let index = usize::try_from(task).unwrap_or(usize::MAX);
        let Some(slot) = state.newest.get(index).copied() else {
            return Write::Stale; // no such task: never stored
        };
        let now = Instant::now();
        let valid = still_valid();
        let outcome = match slot {
            Some(newest) if token < newest.token => {
                let stats = &mut state.stats;
                stats.stale.push(now);
                stats.stale_after_stall += u64::from(after_stall);
                if valid {
                    stats.stale_while_valid += 1;
                    keep(
                        stats,
                        "stale under a valid lease",
                        task,
                        token,
                        writer,
                        newest,
                        now,
                    );
                }
                return Write::Stale;
            }
            Some(newest) if token == newest.token && writer != newest.writer => {
                let stats = &mut state.stats;
                stats.double_writes += 1;
                keep(stats, "double write", task, token, writer, newest, now);
                Write::Double
            }
            _ => Write::Accepted,
        };
        state.stats.accepted += 1;
        state.stats.late_accepted += u64::from(!valid);
        state.newest[index] = Some(Newest { token, writer });
        outcome
    }

    /// A copy of the counts so far.
    pub fn stats(&self) -> SinkStats {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .stats
            .clone()
    }
}

fn keep(
    stats: &mut SinkStats,
    what: &'static str,
    task: u64,
    token: u64,
    writer: u64,
    newest: Newest,
    at: Instant,
) {
    if stats.violations.len() < MAX_KEPT {
        stats.violations.push(SinkViolation {
            what,
            task,
            writer,
            token,
            newest_writer: newest.writer,
            newest_token: newest.token,
            at,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newer_tokens_win_and_older_ones_are_stale() {
        let sink = FencingSink::new(4);
        assert_eq!(sink.write(1, 10, 7, false, || true), Write::Accepted);
        assert_eq!(sink.write(1, 10, 7, false, || true), Write::Accepted); // same writer again
        assert_eq!(sink.write(1, 12, 8, false, || true), Write::Accepted); // hand-over
        assert_eq!(sink.write(1, 10, 7, true, || false), Write::Stale); // woke up late
        assert_eq!(sink.write(2, 3, 7, false, || true), Write::Accepted); // other task
        // Frozen past its lease, but nobody newer wrote task 3 yet.
        assert_eq!(sink.write(3, 10, 7, true, || false), Write::Accepted);
        let s = sink.stats();
        assert_eq!((s.accepted, s.stale.len(), s.stale_after_stall), (5, 1, 1));
        assert_eq!(s.late_accepted, 1);
        assert!(s.is_ok(), "{s:?}");
    }

    #[test]
    fn same_token_from_another_worker_is_a_double_write() {
        let sink = FencingSink::new(4);
        sink.write(0, 5, 1, false, || true);
        assert_eq!(sink.write(0, 5, 2, false, || true), Write::Double);
        let s = sink.stats();
        assert_eq!(s.double_writes, 1);
        assert!(!s.is_ok());
        assert_eq!(s.violations[0].what, "double write");
        assert_eq!(
            (s.violations[0].newest_writer, s.violations[0].writer),
            (1, 2)
        );
    }

    #[test]
    fn stale_while_the_lease_is_still_valid_is_a_violation() {
        let sink = FencingSink::new(1);
        sink.write(0, 9, 1, false, || true);
        assert_eq!(sink.write(0, 7, 2, false, || true), Write::Stale);
        let s = sink.stats();
        assert_eq!((s.stale.len(), s.stale_while_valid), (1, 1));
        assert!(!s.is_ok());
    }

    #[test]
    fn unknown_tasks_are_never_stored() {
        let sink = FencingSink::new(1);
        assert_eq!(sink.write(5, 1, 1, false, || true), Write::Stale);
        assert_eq!(sink.stats().accepted, 0);
    }
}
