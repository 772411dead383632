//! Interval ends: every held lease and part ends by the end of the interval
//! after the one it was last renewed in (rule 6 and step 1 of "Why it is
//! exclusive" in docs/protocol.md).
//!
//! A lease last granted or renewed by a registration executed in interval `m`
//! ends before the server clock reads `(m+2)L`, on a server clock that
//! advances with true time from that registration on. The history says what
//! the check needs when it carries `clock` lines (the server clock's reading
//! at an instant of the history, and `L`) and a `renewed` field on the line
//! that ends a holding (`m`, one per part for a task set).
//!
//! For a holding (or part) that ends at history instant `E`, the server
//! clock read `s(E)`, extrapolated from the latest `clock` line at or before
//! `E`. Forward steps of the server clock smaller than the gap are within
//! the guarantee and let a lease outlive `(m+2)L` on the stepped clock by
//! up to the step, so the check is on the unstepped clock: the forward steps
//! between the registration and `E` are taken off `s(E)`. The registration's
//! instant is not in the history, only that the server clock read at least
//! `mL` then; the check takes off every forward step after the first instant
//! the server clock read `mL` (`R0`), which is at or before the registration,
//! so it never blames a legitimate lease. A backward step between `R0` and
//! `E` voids the check for that holding (the interval numbers repeat; rule
//! 10 of docs/protocol.md), and so does the lack of a `clock` line before
//! `E`. A holding that lasts nothing (a `release` before its `own`) holds no
//! task and is not checked.

use std::fmt;

use super::Capped;
use super::holdings::{Holding, Line};
use crate::record::{Part, Record, Renewed};

/// A lease or part still held after the end of the interval after its last
/// renewal, on the server clock without the forward steps the history
/// records since that interval began.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct IntervalEndViolation {
    /// The holding.
    pub holding: Holding,
    /// The part at fault, for a task set; `None` for a whole pair.
    pub part: Option<Part>,
    /// The interval `m` it was last granted or renewed in.
    pub renewed: u64,
    /// The interval length `L` in microseconds.
    pub interval_us: u64,
    /// The server clock's reading when the holding ended (stepped).
    pub end_server_us: u64,
    /// The forward steps of the server clock taken off it.
    pub steps_us: u64,
}

impl IntervalEndViolation {
    /// `(m+2)L`: when the lease should have ended, in server time.
    pub fn limit_server_us(&self) -> u64 {
        self.renewed
            .saturating_add(2)
            .saturating_mul(self.interval_us)
    }

    /// How long it was held past that limit, on the unstepped clock.
    pub fn late_us(&self) -> u64 {
        self.end_server_us
            .saturating_sub(self.steps_us)
            .saturating_sub(self.limit_server_us())
    }
}

impl fmt::Display for IntervalEndViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "held {} us past ({} + 2)L: {}",
            self.late_us(),
            self.renewed,
            self.holding
        )?;
        if let Some(p) = self.part {
            write!(
                f,
                ", part [{}, {}, {}, {}, {}]",
                p.i, p.n, p.pi, p.pn, p.token
            )?;
        }
        write!(
            f,
            " (L = {} us, server clock {} us at the end, forward steps {} us)",
            self.interval_us, self.end_server_us, self.steps_us
        )
    }
}

/// What the interval-end check found.
#[derive(Clone, Debug, Default)]
pub(crate) struct IntervalEnds {
    pub(crate) violations: Capped<IntervalEndViolation>,
    /// Leases and parts checked.
    pub(crate) checked: u64,
    /// Leases and parts with a renewal interval that could not be checked:
    /// no `clock` line before their end, or a backward step of the server
    /// clock since their interval began.
    pub(crate) voided: u64,
}

/// One `clock` line, with the step it records.
#[derive(Clone, Copy, Debug)]
struct Point {
    at_us: u64,
    server_us: u64,
    interval_us: u64,
    /// The server clock's reading minus what the previous line extrapolates
    /// to (0 for the first line): a step of the server clock.
    step_us: i128,
}

/// The server clock as the `clock` lines describe it.
struct ServerClock {
    points: Vec<Point>,
}

impl ServerClock {
    fn new(lines: &[Line<'_>]) -> Self {
        let mut points: Vec<Point> = Vec::new();
        for line in lines {
            if let Record::Clock {
                interval_us,
                server_us,
                ..
            } = *line.record
            {
                let at_us = line.at_us;
                let step_us = points.last().map_or(0, |p| {
                    i128::from(server_us) - (i128::from(p.server_us) + i128::from(at_us - p.at_us))
                });
                points.push(Point {
                    at_us,
                    server_us,
                    interval_us,
                    step_us,
                });
            }
        }
        Self { points }
    }

    /// The latest line at or before `at_us`.
    fn in_force(&self, at_us: u64) -> Option<&Point> {
        let k = self.points.partition_point(|p| p.at_us <= at_us);
        k.checked_sub(1).map(|k| &self.points[k])
    }

    /// The first instant at which the server clock read at least `server_us`
    /// (the first line's instant if it already did), if it ever did.
    fn first_reading(&self, server_us: u64) -> Option<u64> {
        for (k, p) in self.points.iter().enumerate() {
            if p.server_us >= server_us {
                return Some(p.at_us);
            }
            let at = p.at_us.saturating_add(server_us - p.server_us);
            if self.points.get(k + 1).is_none_or(|next| at <= next.at_us) {
                return Some(at);
            }
        }
        None
    }

    /// Checks a lease from interval `m` that ended at `end_us`: `None` if it
    /// cannot be checked, else the server clock's reading at the end and
    /// the forward steps to take off it.
    fn judge(&self, m: u64, end_us: u64) -> Option<(u64, u64, u64)> {
        let point = self.in_force(end_us)?;
        let l = point.interval_us;
        let end_server_us = point.server_us.saturating_add(end_us - point.at_us);
        let from = self.first_reading(m.saturating_mul(l)).unwrap_or(end_us);
        let mut steps_us: u64 = 0;
        for p in self
            .points
            .iter()
            .filter(|p| p.at_us > from && p.at_us <= end_us)
        {
            if p.step_us < 0 {
                return None;
            }
            steps_us = steps_us.saturating_add(u64::try_from(p.step_us).unwrap_or(u64::MAX));
        }
        Some((l, end_server_us, steps_us))
    }
}

/// Checks every holding that carries renewal intervals against the end of
/// the interval after them.
pub(crate) fn check(lines: &[Line<'_>], holdings: &[Holding]) -> IntervalEnds {
    let clock = ServerClock::new(lines);
    let mut out = IntervalEnds::default();
    for h in holdings.iter().filter(|h| h.end_us > h.start_us) {
        let each: Vec<(Option<Part>, u64)> = match &h.renewed {
            None => continue,
            Some(Renewed::Pair(m)) => vec![(None, *m)],
            Some(Renewed::Parts(ms)) => h
                .parts
                .iter()
                .map(|p| Some(*p))
                .zip(ms.iter().copied())
                .collect(),
        };
        for (part, m) in each {
            let Some((interval_us, end_server_us, steps_us)) = clock.judge(m, h.end_us) else {
                out.voided += 1;
                continue;
            };
            out.checked += 1;
            let v = IntervalEndViolation {
                holding: h.clone(),
                part,
                renewed: m,
                interval_us,
                end_server_us,
                steps_us,
            };
            if end_server_us.saturating_sub(steps_us) > v.limit_server_us() {
                out.violations.push(v);
            }
        }
    }
    out
}
