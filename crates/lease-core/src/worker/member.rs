//! Member names (rule 18): a registration under a member name that another
//! identity holds by the group's member record grants nothing, releases
//! what is held and says so once.

use crate::diag;
use crate::event::{Assignment, Event, Idle, IdleReason};
use crate::member::{Member, MemberInUse};
use crate::options::NegativeControl;

use super::Worker;

impl Worker {
    /// The member name this worker registers under, if any (rule 18).
    pub fn member(&self) -> Option<Member> {
        self.cfg.member
    }

    /// The member refusal in force: another process holds this worker's
    /// member name, and this one holds nothing until it stops (rule 18).
    pub fn member_in_use(&self) -> Option<MemberInUse> {
        self.member_in_use
    }

    /// Rule 18, on a counted answer from `k`: whether it may grant. A
    /// registration that does not hold the member name releases what is
    /// held at once and says so once per refusal (the warning and an idle
    /// value naming the member); one that holds it ends the refusal.
    pub(super) fn on_member_status(&mut self, now: i64, k: u64, holder: bool) -> bool {
        if holder || self.cfg.broken(NegativeControl::GrantWhileMemberInUse) {
            self.member_in_use = None;
            return true;
        }
        let Some(member) = self.cfg.member else {
            // Only a named registration can be answered so; an anonymous
            // worker never grants from such an answer either.
            return false;
        };
        if self.member_in_use.is_none() {
            let why = MemberInUse {
                member,
                interval: k,
            };
            diag::member_in_use(&self.cfg.name, &why);
            let reason = IdleReason::MemberInUse(why);
            if !self
                .holding
                .release_all(&self.cfg, now, reason, &mut self.events)
            {
                self.events
                    .push_back(Event::Assignment(Assignment::Idle(Idle {
                        reason,
                        since: self.clock.instant(now),
                        ended: None,
                    })));
            }
            self.member_in_use = Some(why);
        }
        false
    }
}
