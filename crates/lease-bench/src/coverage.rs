//! Window task coverage from the values the workers' loops were handed: what
//! `redis-big-group` (real Redis, stream values at wall-clock instants) and
//! `sim-big-group` (the simulator, events at virtual instants) both measure,
//! so the two tables are computed by the same code and can be compared.
//!
//! A holding starts when a worker's loop is handed a lease and ends when it
//! is handed the next value, or when the worker is crashed (it stops working
//! then, though the store still counts its registration until it runs out).
//! The coverage of a window is lease-history's [`TaskCoverage`] over these
//! holdings: the share of the tasks `0..1024` held by exactly one worker,
//! time-weighted.

use std::time::Duration;

use lease_history::checker::{Holding, HoldingEnd, TaskCoverage};
use lease_history::tasks::TaskSet;
use lease_history::{Mapping, Part};

/// The holdings of a group of workers, numbered `0..`, built from the
/// values their loops were handed; instants are microseconds from any
/// origin the caller keeps to.
#[derive(Debug)]
pub struct Holdings {
    /// The holding each worker has open, by worker number.
    open: Vec<Option<Holding>>,
    /// How many of `open` are `Some`: kept as it changes, because a cold
    /// start of 10,000 workers asks after every value.
    holding: usize,
    closed: Vec<Holding>,
    /// Values handed over that began or ended a holding: the opening idle
    /// value of a worker that never held is not a change.
    changes: u64,
    /// The group's mapping, as the newest lease named it.
    mapping: Mapping,
}

impl Default for Holdings {
    fn default() -> Self {
        Self {
            open: Vec::new(),
            holding: 0,
            closed: Vec::new(),
            changes: 0,
            mapping: Mapping::Modulo,
        }
    }
}

/// Task coverage over one window.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Window {
    /// The time-averaged share of the tasks `0..1024` held by exactly one
    /// worker.
    pub coverage: f64,
    /// Per task, the mean time held by nobody, in intervals.
    pub unheld_l: f64,
}

impl Holdings {
    /// No worker has been handed anything yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many workers hold a lease now.
    pub fn holding(&self) -> usize {
        self.holding
    }

    /// Values so far that began or ended a holding.
    pub fn changes(&self) -> u64 {
        self.changes
    }

    /// Ends worker `w`'s open holding, if any, at `at_us`, as `end` says.
    pub fn close(&mut self, w: usize, at_us: u64, end: HoldingEnd) {
        if let Some(mut h) = self.open.get_mut(w).and_then(Option::take) {
            self.holding -= 1;
            h.end_us = at_us;
            h.end = end;
            self.closed.push(h);
        }
    }

    /// Worker `w`'s loop was handed `lease` (`None`: an idle value) at
    /// `at_us`: it ends what `w` held and begins a holding of `lease`.
    pub fn yielded(&mut self, w: usize, at_us: u64, lease: Option<&lease_core::Lease>) {
        if self.open.len() <= w {
            self.open.resize(w + 1, None);
        }
        if self.open[w].is_some() || lease.is_some() {
            self.changes += 1;
        }
        self.close(w, at_us, HoldingEnd::Replaced);
        let Some(lease) = lease else { return };
        self.mapping = match lease.mapping() {
            lease_core::Mapping::Consistent => Mapping::Consistent,
            _ => Mapping::Modulo,
        };
        let parts: Vec<Part> = lease
            .history_parts()
            .into_iter()
            .map(|(i, n, pi, pn, token)| Part {
                i,
                n,
                pi,
                pn,
                token,
            })
            .collect();
        let newest = lease.newest_pair();
        self.open[w] = Some(Holding {
            worker: w.to_string(),
            i: newest.map_or(0, |p| p.i()),
            n: newest.map_or(0, |p| p.n()),
            token: lease.token(),
            start_us: at_us,
            end_us: at_us,
            end: HoldingEnd::EndOfHistory,
            parts,
            renewed: None,
        });
        self.holding += 1;
    }

    /// Every holding, the open ones cut at `at_us`.
    pub fn holdings(&self, at_us: u64) -> Vec<Holding> {
        let open = self.open.iter().flatten().cloned().map(|mut h| {
            h.end_us = at_us;
            h
        });
        self.closed.iter().cloned().chain(open).collect()
    }

    /// The first worker whose open holding covers at least one of the tasks
    /// `0..1024`: the one a crash must hit to show in the coverage.
    pub fn covering_worker(&self) -> Option<usize> {
        self.open.iter().position(|h| {
            h.as_ref().is_some_and(|h| {
                h.parts
                    .iter()
                    .any(|p| !TaskSet::part(self.mapping, p).is_empty())
            })
        })
    }

    /// The task coverage over `[from_us, to_us)`, with the holdings open
    /// then cut at `to_us`; `interval` is the unit of [`Window::unheld_l`].
    pub fn window(&self, from_us: u64, to_us: u64, interval: Duration) -> Window {
        let holdings = self.holdings(to_us);
        let c = TaskCoverage::of(&holdings, self.mapping, &TaskSet::all(), from_us, to_us);
        Window {
            coverage: c.fraction_in(from_us, to_us),
            unheld_l: c.unheld_us_in(from_us, to_us) / interval.as_micros() as f64,
        }
    }
}
