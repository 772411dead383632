//! The history a run writes (docs/history-format.md): each event of a
//! worker as its line, and the lines that close a run.

use std::time::Duration;

use lease_core::{Assignment, Event, Lease, Mapping};
use lease_history::{Part, PartEnd, Record, Renewed};

use super::{Action, Life, Observed, Sim, SimWorker, WorkerId};

impl Sim {
    /// The history so far, closed at the current instant: every lease still
    /// handed to a loop gets a release at its deadline or now, whichever is
    /// earlier (a worker stalled past its deadline holds nothing, even though
    /// it has not noticed yet).
    pub fn closed_history(&self) -> Vec<Record> {
        let mut records = self.history.clone();
        records.extend(self.closing_records());
        records
    }

    pub(super) fn closing_records(&self) -> Vec<Record> {
        self.workers
            .iter()
            .enumerate()
            .filter(|(_, sw)| matches!(sw.life, Life::Alive(_)))
            .flat_map(|(w, sw)| self.ending(WorkerId(w), sw))
            .collect()
    }

    /// The lines that end what worker `w` holds, for a worker that will
    /// not say so itself (it crashed, or the run ends now): each lease or
    /// part ends at its deadline or now, whichever is earlier (a part that
    /// ran out before now leaves the rest held from its deadline on).
    pub(super) fn ending(&self, w: WorkerId, sw: &SimWorker) -> Vec<Record> {
        let name = w.to_string();
        let Some(lease) = &sw.held else {
            return Vec::new();
        };
        if let Some((i, n)) = whole_pair(lease) {
            let end = self.true_of(sw.clock, lease.deadline()).min(self.now);
            return vec![
                Record::release(name, i, n, end).with_renewed(Renewed::Pair(renewed_in(lease))),
            ];
        }
        let live: Vec<PartEnd> = lease
            .parts()
            .iter()
            .zip(lease.history_parts())
            .map(|(l, p)| PartEnd {
                part: Part::from(p),
                end_us: self.true_of(sw.clock, l.deadline()),
                renewed: Some(l.renewed_in()),
            })
            .collect();
        Record::task_set_ending(&name, history_mapping(lease), live, self.now)
    }

    pub(super) fn record(&mut self, w: WorkerId, event: Event) {
        let at_us = self.now;
        match &event {
            Event::Assignment(Assignment::Held(lease)) => {
                if let Some((i, n)) = whole_pair(lease) {
                    let own = Record::own(w.to_string(), i, n, lease.token(), at_us);
                    let previous = self.workers[w.0].held.as_ref();
                    // A whole pair following a task set ends it.
                    let own = match previous.filter(|l| whole_pair(l).is_none()) {
                        Some(l) => own.with_renewed(renewed_parts(l)),
                        None => own,
                    };
                    self.history.push(own);
                } else {
                    // An `own` with parts replaces the holding at the instant
                    // it began (a part's end noticed late is written at that
                    // end), carrying the renewal intervals of the holding it
                    // replaces (clones share them with the worker's state).
                    let at = self
                        .true_of(self.workers[w.0].clock, lease.since())
                        .min(at_us);
                    let parts = lease.history_parts().into_iter().map(Part::from);
                    let renewed = self.workers[w.0].held.as_ref().map(renewed_parts);
                    let own =
                        Record::own_task_set(w.to_string(), history_mapping(lease), parts, at);
                    self.history.extend(own.map(|own| match renewed {
                        Some(renewed) => own.with_renewed(renewed),
                        None => own,
                    }));
                }
                self.workers[w.0].held = Some(lease.clone());
            }
            Event::Assignment(Assignment::Idle(idle)) => {
                if let Some(lease) = &idle.ended {
                    let at = self.true_of(self.workers[w.0].clock, idle.since).min(at_us);
                    // The holding it ends is the last value written, whose
                    // parts are in the order of its `held`.
                    let last = self.workers[w.0].held.take();
                    let last = last.as_ref().unwrap_or(lease);
                    let (i, n, renewed) = match whole_pair(last) {
                        Some((i, n)) => (i, n, Renewed::Pair(renewed_in(last))),
                        None => {
                            let newest = last.newest_pair();
                            let (i, n) = newest.map_or((0, 1), |p| (p.i(), p.n()));
                            (i, n, renewed_parts(last))
                        }
                    };
                    let release = match idle.reason.as_str().parse() {
                        Ok(reason) => Record::release_because(w.to_string(), i, n, reason, at),
                        Err(_) => Record::release(w.to_string(), i, n, at),
                    };
                    self.history.push(release.with_renewed(renewed));
                }
            }
            // The worker has ended (at once on a plain cancel; after its
            // drain with graceful leave).
            Event::Stopped => self.workers[w.0].life = Life::Gone,
        }
        self.observed.push(Observed {
            worker: w,
            at: Duration::from_micros(at_us),
            event,
        });
    }
}

pub(super) fn fault_detail(action: &Action) -> Option<String> {
    match action {
        Action::Stall(_, d) | Action::Pause(d) | Action::Restart { down: d } => {
            Some(format!("{}ms", d.as_millis()))
        }
        Action::ClockStep(us) => Some(format!("{}us", us)),
        Action::LoseWrites(p) => Some(format!("p={p}")),
        _ => None,
    }
}

/// The `renewed` field of a line that ends the holding `tasks` was written
/// as: each part's last renewal interval, in the order of its `held`.
fn renewed_parts(lease: &Lease) -> Renewed {
    Renewed::Parts(lease.parts().iter().map(|l| l.renewed_in()).collect())
}

/// The interval of the last renewal of a whole pair's one part.
fn renewed_in(lease: &Lease) -> u64 {
    lease.parts().first().map_or(0, |p| p.renewed_in())
}

/// `(i, n)` when the lease is written as a whole pair: one whole pair under
/// the modulo mapping (whole-pair histories); task sets, and whole pairs
/// under the consistent mapping, are written with their parts.
fn whole_pair(lease: &Lease) -> Option<(u32, u32)> {
    let pair = lease
        .pair()
        .filter(|_| lease.mapping() == Mapping::Modulo)?;
    Some((pair.i(), pair.n()))
}

/// The history's name of a lease's mapping.
fn history_mapping(lease: &Lease) -> lease_history::Mapping {
    match lease.mapping() {
        Mapping::Modulo => lease_history::Mapping::Modulo,
        Mapping::Consistent => lease_history::Mapping::Consistent,
    }
}
