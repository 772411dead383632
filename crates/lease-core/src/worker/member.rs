//! Member names (rule 18): a registration under a member name that another
//! identity holds by the group's member record grants nothing, releases
//! what is held and says so once.

use crate::diag;
use crate::event::IdleReason;
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
            self.stand_idle(now, reason);
            self.member_in_use = Some(why);
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use crate::{Assignment, Event, Identity, IdleReason, Options, Worker};

    #[test]
    fn a_named_worker_sends_its_name_and_a_status_3_reply_grants_nothing() {
        let t0 = Instant::now();
        let o: Options = Options::new("g", Duration::from_millis(1000))
            .with_member("web-3")
            .unwrap();
        let mut w = Worker::new(&o, Identity::seeded(1, 0), t0).unwrap();
        assert_eq!(w.member().map(|m| m.to_string()), Some("web-3".into()));
        while w.poll_event().is_some() {}
        w.handle_timeout(t0);
        let probe = w.poll_transmit().expect("the probe");
        assert_eq!(probe.keys[3], "{g}:members");
        assert_eq!(probe.args.len(), 9);
        assert_eq!(probe.args[6], "web-3");
        let id = probe.id;
        // Interval 100 at 100.3 s: the probe named interval 1.
        w.handle_reply(t0, id, &[0, 100, 100, 300_000]).unwrap();
        let mut now = t0;
        let mut replied = false;
        for _ in 0..200 {
            now += Duration::from_millis(5);
            w.handle_timeout(now);
            if let Some(t) = w.poll_transmit() {
                let id = t.id;
                let k: i64 = t.args[2].parse().unwrap();
                let us = (k * 1000 + 400) * 1000;
                let reply = [3, k, us / 1_000_000, us % 1_000_000, 1, 3, 1, -1, -1];
                w.handle_reply(now, id, &reply).unwrap();
                replied = true;
                break;
            }
        }
        assert!(replied, "a registration was sent");
        let refused = std::iter::from_fn(|| w.poll_event()).any(|e| {
            matches!(e, Event::Assignment(Assignment::Idle(i))
                if matches!(i.reason, IdleReason::MemberInUse(why) if why.member.as_str() == "web-3"))
        });
        assert!(refused, "no member-in-use idle value");
        assert!(w.member_in_use().is_some());
        assert!(w.lease_at(now).is_none());
    }
}
