//! Graceful leave (rule 16 of docs/protocol.md): a cancelled worker removes
//! itself from the interval open when its request executes, registers no
//! more, and serves what it holds until each part's drain end.

use crate::diag;
use crate::event::{Event, IdleReason};
use crate::options::Mode;
use crate::reply::{Reply, ReplyError};

use super::request::Pending;
use super::{Lifecycle, Worker};

/// A graceful leave under way.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Leaving {
    /// Leave requests sent so far: one, and one retry after a wrong-interval
    /// answer, a failure or a timeout.
    sent: u8,
    /// The leave request in flight.
    pub(super) in_flight: Option<Pending>,
    /// No leave request will be sent or awaited any more.
    done: bool,
}

/// What the leave script answered.
#[derive(Clone, Copy, Debug)]
pub(super) struct LeaveAnswer {
    /// The server's interval was neither of the two named: nothing written.
    /// Otherwise the identity was removed, was not a member, or the rules
    /// differ: nothing more to do.
    wrong_interval: bool,
    /// The server's interval at execution.
    interval: u64,
    /// Server time at execution, in microseconds.
    server: i64,
}

impl Worker {
    fn leaving(&mut self) -> Option<&mut Leaving> {
        match &mut self.lifecycle {
            Lifecycle::Leaving(l) => Some(l),
            _ => None,
        }
    }

    pub(super) fn is_leave_request(&self, id: super::RequestId) -> bool {
        matches!(&self.lifecycle, Lifecycle::Leaving(l) if l.in_flight.is_some_and(|p| p.id == id))
    }

    /// Stops registering, keeps what is held until its drain ends, and sends
    /// the leave request.
    pub(super) fn start_leaving(&mut self, now: i64) {
        self.pending.clear();
        self.ready = None;
        self.schedule.fire_at = None;
        self.lifecycle = Lifecycle::Leaving(Leaving::default());
        self.holding.drain_all(&self.cfg, now, &mut self.events);
        self.send_leave(now);
        self.maybe_finish_leaving(now);
    }

    /// The leave request, or its one retry: keys of the interval `c` the
    /// worker believes open and of `c + 1` and `c + 2` (the script takes the
    /// worker out of whichever is open at execution, and out of its
    /// reservation in the next, or answers wrong-interval).
    fn send_leave(&mut self, now: i64) {
        let c = self.interval_to_name(now);
        let floor = (self.cfg.l / 20).max(1000).min(self.cfg.l);
        let t = self.rtt.timeout(self.cfg.l / 2).max(floor).min(self.cfg.l);
        let id = super::RequestId(self.next_id);
        let Some(leaving) = self.leaving() else {
            return;
        };
        if leaving.done || leaving.in_flight.is_some() {
            return;
        }
        if leaving.sent >= 2 {
            leaving.done = true;
            return;
        }
        leaving.sent += 1;
        leaving.in_flight = Some(Pending {
            id,
            sent_at: now,
            interval: c,
            timeout_at: now + t,
            timed_out: false,
            give_up_at: now + t,
        });
        self.next_id += 1;
        // Rule 19: the newest interval whose reply it processed, so that the
        // script keeps it present in that interval even if a failover lost
        // its registration there (it may hold a lease from it).
        let replied = self.memory.newest.map(|(k, _)| k);
        self.buffers.leave(&self.cfg, c, self.identity, replied);
        self.ready = Some((id, now + t));
    }

    /// The leave request timed out.
    pub(super) fn on_leave_timeout(&mut self, now: i64) {
        if let Some(leaving) = self.leaving()
            && leaving.in_flight.is_some_and(|p| p.timeout_at <= now)
        {
            leaving.in_flight = None;
            self.send_leave(now);
        }
        self.maybe_finish_leaving(now);
    }

    /// The leave request `id` failed.
    pub(super) fn on_leave_failure(&mut self, now: i64, id: super::RequestId) {
        if let Some(leaving) = self.leaving()
            && leaving.in_flight.is_some_and(|p| p.id == id)
        {
            leaving.in_flight = None;
            self.send_leave(now);
        }
        self.maybe_finish_leaving(now);
    }

    /// The leave request was answered (or the answer was malformed). Rule
    /// 10 applies to it too: what is still served ends at once if the server
    /// clock jumped or went back.
    pub(super) fn on_leave_answer(&mut self, now: i64, values: &[i64]) -> Result<(), ReplyError> {
        let answer = parse_leave(self.cfg.interval_ms, values);
        let Some(leaving) = self.leaving() else {
            return Ok(());
        };
        let Some(req) = leaving.in_flight.take() else {
            return Ok(());
        };
        let answer = match answer {
            Ok(answer) => answer,
            Err(e) => {
                diag::reply_rejected(&self.cfg.name, &e);
                self.send_leave(now);
                self.maybe_finish_leaving(now);
                return Err(e);
            }
        };
        if !answer.wrong_interval {
            leaving.done = true;
        }
        let went_back = self.history.went_back(answer.interval, req.sent_at);
        let by = self
            .skew
            .observe(req.sent_at, now, answer.server, self.cfg.g, 8 * self.cfg.l);
        if went_back || by.is_some() {
            diag::server_clock_moved(&self.cfg.name, by.unwrap_or(0), answer.interval);
            self.holding
                .release_all(&self.cfg, now, IdleReason::ServerClock, &mut self.events);
        }
        if answer.wrong_interval {
            // Aim the one retry with this clock sample.
            self.send_leave(now);
        }
        self.maybe_finish_leaving(now);
        Ok(())
    }

    /// Rule 16 ends when what was held has drained and the leave request is
    /// answered or given up: then [`Event::Stopped`].
    pub(super) fn maybe_finish_leaving(&mut self, now: i64) {
        let ready = self.ready.is_some();
        if !self.holding.is_empty() {
            return;
        }
        let Some(leaving) = self.leaving() else {
            return;
        };
        if !leaving.done && (leaving.in_flight.is_some() || ready) {
            return;
        }
        if !leaving.done {
            self.send_leave(now);
            if self.ready.is_some() {
                return;
            }
        }
        self.stop(diag::StopReason::Abort);
    }

    /// The worker stops: nothing is sent after this.
    pub(super) fn stop(&mut self, reason: diag::StopReason) {
        self.lifecycle = Lifecycle::Stopped;
        self.pending.clear();
        self.ready = None;
        self.schedule.fire_at = None;
        self.events.push_back(Event::Stopped);
        diag::discover_stopped(&self.cfg.name, reason);
    }
}

/// Parses the leave script's reply: `{0|2, k, sec, usec}` or `{1, k, sec,
/// usec, removed}`, with the time checks of [`Reply::parse`].
fn parse_leave(interval_ms: u64, values: &[i64]) -> Result<LeaveAnswer, ReplyError> {
    let status = values.first().copied().unwrap_or(-1);
    let expected = match status {
        0 | 2 => 4,
        1 => 5,
        -1 if values.is_empty() => {
            return Err(ReplyError::Arity {
                got: 0,
                expected: 0,
            });
        }
        other => return Err(ReplyError::Status(other)),
    };
    if values.len() != expected {
        return Err(ReplyError::Arity {
            got: values.len(),
            expected,
        });
    }
    if status == 1 && !matches!(values[4], 0 | 1) {
        return Err(ReplyError::OutOfRange {
            field: "removed",
            value: values[4],
        });
    }
    // The clock fields, checked as a wrong-interval answer would be.
    let time = Reply::parse(
        Mode::Ranked,
        interval_ms,
        &[0, values[1], values[2], values[3]],
    )?;
    Ok(LeaveAnswer {
        wrong_interval: status == 0,
        interval: time.interval(),
        server: i64::try_from(time.server_time()).unwrap_or(i64::MAX),
    })
}
