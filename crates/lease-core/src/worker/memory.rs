//! What earlier answers told the worker, and what a counted reply certifies:
//! the pair implied by a closed interval (rule 4), agreement (rule 5), the
//! incremental grant (rule 13) with what the server says of closed `k-2`
//! (rule 19), and the server clock's history (rule 10).

use crate::options::{Handover, Mode, NegativeControl};
#[cfg(test)]
use crate::ownership::Mapping;
use crate::ownership::Pair;
use crate::part::{Part, covers_whole};
use crate::reply::{Counted, MAX_INHERITED};

use super::config::Config;

/// What earlier replies told the worker (rules 4 and 5). Expiry keeps it
/// (rule 7); only a server-clock problem clears it.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Memory {
    /// Arrival: the interval of the last counted reply and the index it
    /// gave, to pair with that interval's final count one interval later.
    pub(super) held: Option<(u64, u32)>,
    /// The pair implied at the last processed reply, and that reply's
    /// interval.
    pub(super) previous: Option<(u64, Option<Pair>)>,
    /// The newest interval processed, and the local time its reply arrived.
    pub(super) newest: Option<(u64, i64)>,
    /// The last pair any reply implied: its position is what a returning
    /// worker sends (rule 15).
    pub(super) last_pair: Option<Pair>,
    /// Arrival: phase `(x + 0.5) / n` of the slot to fire in next.
    pub(super) arrival_phase: Option<f64>,
    /// Rule 17: a counted reply from this interval executed too early to
    /// grant, and the pair implied before it (`p(k-2)`), kept so that a
    /// second registration later in the same interval can grant.
    pub(super) early: Option<(u64, Option<Pair>)>,
}

impl Memory {
    /// Rule 4: the pair implied by the closed interval `k-1`, if this worker
    /// was counted there, the count is positive and the position below it.
    pub(super) fn implied(&self, mode: Mode, c: &Counted) -> Option<Pair> {
        let k = c.interval;
        let count = c.count.filter(|&n| n > 0)?;
        let position = match mode {
            // The index this worker got in k-1, paired with k-1's final count.
            Mode::Arrival => match self.held {
                Some((hk, x)) if hk + 1 == k => x,
                _ => return None,
            },
            // The position in the closed set of k-1.
            Mode::Ranked => c.position?,
        };
        Pair::new(position, count)
    }

    /// `p(k-2)` as the worker knows it before registering in `k`, to send
    /// (rule 19: the script reads it from closed `k-2` only when the worker
    /// sends none): what [`Memory::before`] would return, without the
    /// negative control and without taking anything.
    pub(super) fn older_for(&self, k: u64) -> Option<Pair> {
        match self.early {
            Some((ek, before)) if ek == k => before,
            _ => self
                .previous
                .filter(|(pk, _)| pk + 1 == k)
                .and_then(|(_, p)| p),
        }
    }

    /// `p(k-2)` for a reply from `k`: implied by the previous processed
    /// reply if that reply was from `k-1` (rule 13; the negative control
    /// takes any previous reply), or, for a second registration in an
    /// interval whose first reply was early, what certified that one.
    pub(super) fn before(&mut self, cfg: &Config, k: u64) -> Option<Pair> {
        match self.early.take() {
            Some((ek, before)) if ek == k => before,
            _ => self
                .previous
                .filter(|(pk, _)| {
                    pk + 1 == k || cfg.broken(NegativeControl::PairFromAnyPreviousReply)
                })
                .and_then(|(_, p)| p),
        }
    }

    /// Remembers a counted reply from `k` that implied `implied`.
    pub(super) fn remember(&mut self, k: u64, implied: Option<Pair>, now: i64) {
        self.previous = Some((k, implied));
        self.newest = Some((k, now));
        if implied.is_some() {
            self.last_pair = implied;
        }
    }

    /// Arrival: the index this reply gave, and the slot to fire in next.
    pub(super) fn remember_arrival(&mut self, c: &Counted) {
        if let Some(x) = c.position {
            self.held = Some((c.interval, x));
            let n = c.count.unwrap_or(0).max(x.saturating_add(1));
            self.arrival_phase = Some((f64::from(x) + 0.5) / f64::from(n));
        }
    }
}

/// What the worker knows about the server clock's history (rule 10), beyond
/// the skew estimate. Survives the memory reset of a stand-down.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct ClockHistory {
    /// The newest interval any answer named (counted, wrong-interval or
    /// refused), and the local time that answer arrived.
    pub(super) latest: Option<(u64, i64)>,
    /// After a backward step: the newest interval seen before it. Intervals
    /// up to it may have been reopened and written twice, so nothing is
    /// granted until the interval two before the current one is newer.
    pub(super) reopened_through: Option<u64>,
}

impl ClockHistory {
    /// Rule 10: an answer naming `interval`, to a request sent at local
    /// `sent_at`, shows the server clock went back: it names an interval
    /// older than one an answer named before the request was sent.
    pub(super) fn went_back(&self, interval: u64, sent_at: i64) -> bool {
        self.latest
            .is_some_and(|(newest, received)| interval < newest && sent_at >= received)
    }

    /// Rule 10: whether a reply from `k` may certify anything after a
    /// backward step: only closed intervals newer than every interval seen
    /// before the step, and one more (rule 19: a member's reservation keeps
    /// it counted one interval after its last registration, so the newest
    /// interval of the group may be one newer than the worker's own view
    /// of it). `crates/lease-sim/tests/clock_steps.rs` has the schedule
    /// that overlaps with one interval less.
    /// `short`: the fence of revision 2, three intervals (the negative
    /// control).
    pub(super) fn is_fresh(&self, k: u64, short: bool) -> bool {
        let after = if short { 3 } else { 4 };
        self.reopened_through
            .is_none_or(|fence| k >= fence.saturating_add(after))
    }

    /// After a backward step, fence the intervals that may be reopened.
    pub(super) fn fence_reopened(&mut self) {
        if let Some((newest, _)) = self.latest {
            let fence = self.reopened_through.map_or(newest, |f| f.max(newest));
            self.reopened_through = Some(fence);
        }
    }
}

/// The parts one reply certifies: the worker's own (`T(p(k-1)) ∩
/// T(p(k-2))`) and one per inherited position (rule 19), without
/// allocating.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Certified {
    parts: [Option<Part>; 1 + MAX_INHERITED],
}

impl Certified {
    pub(super) fn push(&mut self, part: Part) {
        if let Some(slot) = self.parts.iter_mut().find(|p| p.is_none()) {
            *slot = Some(part);
        }
    }

    /// The parts, in the order certified.
    pub(super) fn iter(&self) -> impl Iterator<Item = Part> + '_ {
        self.parts.iter().map_while(|p| *p)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.parts[0].is_none()
    }

    pub(super) fn contains(&self, part: Part) -> bool {
        self.iter().any(|p| p == part)
    }

    /// Keeps the parts only if `keep`.
    pub(super) fn filter(self, keep: bool) -> Self {
        if keep { self } else { Self::default() }
    }
}

/// What a reply from `k` says of closed `k-2`, beside `p(k-1)`: the
/// worker's own pair there (from its previous reply, [`Memory::before`],
/// or from the server when it had none) and the positions it inherits,
/// with that set's size (rule 19).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct OlderFactor<'a> {
    pub(super) own: Option<Pair>,
    pub(super) inherited: &'a [u32],
    pub(super) count: Option<u32>,
}

impl<'a> OlderFactor<'a> {
    /// Rule 19's second factor of a reply `c` from `k`, given what the
    /// worker's memory says (`before`): its own pair, or the server's when
    /// it had none; the inherited positions only when the server's size of
    /// closed `k-2` is the one the worker's own pair has (one version of
    /// that set: otherwise inherit nothing, which only grants less).
    ///
    /// `fresh`: the worker processed a reply since it started or last stood
    /// down for the server clock (rule 10). Until then it takes nothing of
    /// closed `k-2` from the server: after a detected step a regrant waits
    /// for two replies of its own, as the forgetting intends, not for one.
    pub(super) fn of(
        cfg: &Config,
        c: &'a Counted,
        before: Option<Pair>,
        last_known: Option<Pair>,
        fresh: bool,
    ) -> Self {
        if !fresh {
            return Self {
                own: before,
                inherited: &[],
                count: before.map(|p| p.n()),
            };
        }
        let from_server = || {
            let older = c.older;
            older
                .position
                .zip(older.count)
                .and_then(|(i, n)| Pair::new(i, n))
        };
        let own = if cfg.broken(NegativeControl::SecondFactorFromMemory) {
            before.or_else(|| {
                // The last position known, with the size of k-2, without the
                // server saying the member was there.
                c.older.count.and_then(|n| Pair::new(last_known?.i(), n))
            })
        } else {
            before.or_else(from_server)
        };
        let same_set = own.is_none_or(|p| Some(p.n()) == c.older.count);
        let inherited = if same_set { c.older.inherited() } else { &[] };
        Self {
            own,
            inherited,
            count: c.older.count,
        }
    }
}

/// Rules 5, 13 and 19: the parts a reply from `k` certifies, given `newer =
/// p(k-1)` (implied by this reply) and what it says of closed `k-2`.
///
/// - Whole pairs (rule 5): the pair, only when `p(k-2)` is implied and
///   equal (inheritance adds nothing: a whole pair needs one equal pair).
/// - Task sets (rule 13): `T(p(k-1)) ∩ T(p(k-2))` whenever both are
///   implied, and `T(p(k-1)) ∩ T(q, m)` for each position `q` of closed
///   `k-2` (size `m`) that the worker inherits (rule 19); each part only
///   when it is not empty. Load-bearing: every part is inside `T(p(k-1))`
///   and inside a position of closed `k-2` that is the worker's own or
///   inherited, never `T(p(k-1))` alone (the negative control grants
///   that).
pub(super) fn certified_parts(
    cfg: &Config,
    newer: Option<Pair>,
    older: OlderFactor<'_>,
) -> Certified {
    let mut certified = Certified::default();
    let Some(newer) = newer else {
        return certified;
    };
    match cfg.handover {
        Handover::WholePairs => {
            if Some(newer) == older.own {
                certified.push(Part::whole(newer));
            }
        }
        Handover::TaskSets if cfg.broken(NegativeControl::GrantNewestPairOnly) => {
            certified.push(Part::whole(newer));
        }
        Handover::TaskSets => {
            let inherited = older
                .count
                .into_iter()
                .flat_map(|m| older.inherited.iter().filter_map(move |&q| Pair::new(q, m)));
            let factors = older.own.into_iter().chain(inherited);
            // The own part and the inherited ones over every older position
            // that meets T(p(k-1)) are all of it: one whole part, which the
            // next agreeing reply renews (rule 11: no value for the same
            // tasks).
            let whole = !older.inherited.is_empty()
                && older.count.is_some_and(|m| {
                    let has = |q| factors.clone().any(|p| p.i() == q && p.n() == m);
                    covers_whole(newer, m, has, cfg.mapping)
                });
            if whole {
                certified.push(Part::whole(newer));
                return certified;
            }
            for pair in factors {
                let part = Part::new(newer, pair);
                if !part.is_empty(cfg.mapping) {
                    certified.push(part);
                }
            }
        }
    }
    certified
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::Options;

    fn pair(i: u32, n: u32) -> Option<Pair> {
        Pair::new(i, n)
    }

    fn config(handover: Handover) -> Config {
        let o: Options =
            Options::new("g", std::time::Duration::from_secs(1)).with_handover(handover);
        Config::new(&o).unwrap()
    }

    fn own(older: Option<Pair>) -> OlderFactor<'static> {
        OlderFactor {
            own: older,
            inherited: &[],
            count: older.map(|p| p.n()),
        }
    }

    fn one(cfg: &Config, newer: Option<Pair>, older: Option<Pair>) -> Option<Part> {
        let c = certified_parts(cfg, newer, own(older));
        assert!(c.iter().count() <= 1);
        c.iter().next()
    }

    #[test]
    fn rule_13_grants_the_intersection_of_two_present_pairs() {
        let cfg = config(Handover::TaskSets);
        let m = cfg.mapping;
        assert_eq!(m, Mapping::Consistent);
        // Equal pairs: rule 5's whole pair.
        let whole = one(&cfg, pair(1, 3), pair(1, 3)).unwrap();
        assert_eq!(whole.pair(), pair(1, 3));
        // A tail join: T(1,4) ∩ T(1,3), which is T(1,4) under jump hash.
        let part = one(&cfg, pair(1, 4), pair(1, 3)).unwrap();
        assert_eq!(part.describe(), [1, 4, 1, 3]);
        assert!((0..2000).all(|id| part.contains(m, id) == (m.owner(id, 4) == 1)));
        // Either pair absent: nothing.
        assert_eq!(one(&cfg, None, pair(1, 3)), None);
        assert_eq!(one(&cfg, pair(1, 3), None), None);
        // An empty intersection holds nothing: an id at 1 of 4 was at 1 of 3.
        assert_eq!(one(&cfg, pair(2, 3), pair(1, 4)), None);
    }

    #[test]
    fn rule_5_grants_only_equal_pairs() {
        let cfg = config(Handover::WholePairs);
        assert_eq!(
            one(&cfg, pair(1, 3), pair(1, 3)).and_then(|p| p.pair()),
            pair(1, 3)
        );
        assert_eq!(one(&cfg, pair(1, 4), pair(1, 3)), None);
        assert_eq!(one(&cfg, pair(1, 3), None), None);
        // Inheritance never makes a whole pair.
        let inheriting = OlderFactor {
            own: pair(2, 5),
            inherited: &[1],
            count: Some(5),
        };
        assert!(certified_parts(&cfg, pair(1, 4), inheriting).is_empty());
    }

    #[test]
    fn rule_19_adds_one_part_per_inherited_position_that_meets_the_new_one() {
        let cfg = config(Handover::TaskSets);
        let m = cfg.mapping;
        // Worker 4 of 5 fills the hole of 1 (crashed) in a group of 4: its
        // own part T(1,4) ∩ T(4,5) and the inherited T(1,4) ∩ T(1,5), which
        // together are all of T(1,4).
        let older = OlderFactor {
            own: pair(4, 5),
            inherited: &[1],
            count: Some(5),
        };
        let c = certified_parts(&cfg, pair(1, 4), older);
        let parts: Vec<Part> = c.iter().collect();
        assert_eq!(
            parts,
            [Part::whole(Pair::new(1, 4).unwrap())],
            "granted whole"
        );
        assert!(
            (0..4000)
                .all(|id| { parts.iter().any(|p| p.contains(m, id)) == (m.owner(id, 4) == 1) })
        );
        // Without the inherited position: only the own part.
        let older = OlderFactor {
            own: pair(4, 5),
            inherited: &[],
            count: Some(5),
        };
        let c = certified_parts(&cfg, pair(1, 4), older);
        assert_eq!(
            c.iter().map(|p| p.describe()).collect::<Vec<_>>(),
            [[1, 4, 4, 5]]
        );
        // An inherited position whose tasks never reach this one adds
        // nothing: under jump hash T(0,4) meets T(2,5) not at all.
        let older = OlderFactor {
            own: pair(0, 5),
            inherited: &[2],
            count: Some(5),
        };
        assert_eq!(certified_parts(&cfg, pair(0, 4), older).iter().count(), 1);
        // A newcomer without a position in k-2 is granted the inherited
        // position alone.
        let older = OlderFactor {
            own: None,
            inherited: &[3],
            count: Some(5),
        };
        let c = certified_parts(&cfg, pair(3, 5), older);
        assert_eq!(
            c.iter().map(|p| p.describe()).collect::<Vec<_>>(),
            [[3, 5, 3, 5]]
        );
    }
}
