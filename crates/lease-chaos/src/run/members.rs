//! The `restart-member` fault (rule 18): workers register under their
//! seat's member name, and a member restart starts a new process under the
//! same name at once, or before the old one is gone.

use std::time::Instant;

use lease_chaos::harness::{Control, WorkerId};
use lease_core::{Member, Mode};
use rand::Rng as _;

use super::{Action, Chaos, ChaosError, Draw, Instance};
use crate::faults::FaultKind;

impl Chaos<'_> {
    /// Whether workers register under their seat's member name: when the
    /// run may draw `restart-member` (Ranked only; Arrival has no names).
    fn members(&self) -> bool {
        self.args.mode == Mode::Ranked && self.args.faults.0.contains(&FaultKind::RestartMember)
    }

    /// Starts a process for `seat` under the history name `name` (the seat's
    /// name, or a name of its own while another process of the seat still
    /// runs), with the seat's member name when the run uses them.
    pub(crate) fn spawn_instance(
        &mut self,
        seat: usize,
        name: &str,
    ) -> Result<WorkerId, ChaosError> {
        let member = if self.members() {
            Member::new(&self.seats[seat].name).ok()
        } else {
            None
        };
        let (endpoint, link) = match &self.cluster {
            Some(cluster) => (Err(cluster.urls()), None),
            None => {
                let link = self
                    .proxy
                    .link(self.rng.random())
                    .map_err(ChaosError::Proxy)?;
                (Ok(link.url()), Some(link))
            }
        };
        let id = self.harness.spawn_member(name, member, endpoint)?;
        self.names.insert(id, name.to_owned());
        self.instances.insert(id, Instance { seat, link });
        Ok(id)
    }

    /// A member restart: with `d.coin`, a new process for the victim's seat
    /// starts now (under the seat's member name, its own history name) and
    /// the old one is crashed `length` later; otherwise the old one is
    /// crashed now and the seat's new process starts as soon as it is gone.
    pub(crate) fn restart_member(
        &mut self,
        id: WorkerId,
        d: &Draw,
        length: std::time::Duration,
        now: Instant,
    ) -> Result<(), ChaosError> {
        let Some(seat) = self.instances.get(&id).map(|i| i.seat) else {
            return Ok(());
        };
        let early = d.coin && self.members();
        let detail = if early {
            format!(
                "new process first, old one crashed {:.1}L later",
                self.in_l(length)
            )
        } else {
            "crashed, new process at once".to_owned()
        };
        let f = self.note_fault(d.kind, Some(id), detail, now, now + length)?;
        if early {
            // A history name of its own: the checker must see two processes.
            let name = format!("{}.{}", self.seats[seat].name, self.names.len());
            let new = self.spawn_instance(seat, &name)?;
            self.seats[seat].current = Some(new);
            self.later(now + length, Some(f), Action::Crash { id });
        } else {
            self.harness.control(id, Control::Crash);
            self.later(now, Some(f), Action::Spawn { seat });
        }
        Ok(())
    }
}
