//! What earlier answers told the worker, and what a counted reply certifies:
//! the pair implied by a closed interval (rule 4), agreement (rule 5), the
//! incremental grant (rule 13), and the server clock's history (rule 10).

use crate::options::{Handover, Mode, NegativeControl};
#[cfg(test)]
use crate::ownership::Mapping;
use crate::ownership::Pair;
use crate::part::Part;
use crate::reply::Counted;

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
    /// backward step (only closed intervals newer than every interval seen
    /// before the step may).
    pub(super) fn is_fresh(&self, k: u64) -> bool {
        self.reopened_through
            .is_none_or(|fence| k >= fence.saturating_add(3))
    }

    /// After a backward step, fence the intervals that may be reopened.
    pub(super) fn fence_reopened(&mut self) {
        if let Some((newest, _)) = self.latest {
            let fence = self.reopened_through.map_or(newest, |f| f.max(newest));
            self.reopened_through = Some(fence);
        }
    }
}

/// Rules 5 and 13: the part a reply from `k` certifies, given `newer =
/// p(k-1)` (implied by this reply) and `older = p(k-2)`
/// ([`Memory::before`]).
///
/// - Whole pairs (rule 5): the pair, only when both are implied and equal.
/// - Task sets (rule 13): `T(p(k-1)) ∩ T(p(k-2))` whenever both are
///   implied; nothing when the intersection is empty. Load-bearing: the set
///   is the intersection, never `T(p(k-1))` alone (the negative control
///   grants that).
pub(super) fn certified_part(
    cfg: &Config,
    newer: Option<Pair>,
    older: Option<Pair>,
) -> Option<Part> {
    let newer = newer?;
    match cfg.handover {
        Handover::WholePairs => (Some(newer) == older).then(|| Part::whole(newer)),
        Handover::TaskSets if cfg.broken(NegativeControl::GrantNewestPairOnly) => {
            Some(Part::whole(newer))
        }
        Handover::TaskSets => {
            let part = Part::new(newer, older?);
            (!part.is_empty(cfg.mapping)).then_some(part)
        }
    }
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

    #[test]
    fn rule_13_grants_the_intersection_of_two_present_pairs() {
        let cfg = config(Handover::TaskSets);
        let m = cfg.mapping;
        assert_eq!(m, Mapping::Consistent);
        // Equal pairs: rule 5's whole pair.
        let whole = certified_part(&cfg, pair(1, 3), pair(1, 3)).unwrap();
        assert_eq!(whole.pair(), pair(1, 3));
        // A tail join: T(1,4) ∩ T(1,3), which is T(1,4) under jump hash.
        let part = certified_part(&cfg, pair(1, 4), pair(1, 3)).unwrap();
        assert_eq!(part.describe(), [1, 4, 1, 3]);
        assert!((0..2000).all(|id| part.contains(m, id) == (m.owner(id, 4) == 1)));
        // Either pair absent: nothing.
        assert_eq!(certified_part(&cfg, None, pair(1, 3)), None);
        assert_eq!(certified_part(&cfg, pair(1, 3), None), None);
        // An empty intersection holds nothing: an id at 1 of 4 was at 1 of 3.
        assert_eq!(certified_part(&cfg, pair(2, 3), pair(1, 4)), None);
    }

    #[test]
    fn rule_5_grants_only_equal_pairs() {
        let cfg = config(Handover::WholePairs);
        assert_eq!(
            certified_part(&cfg, pair(1, 3), pair(1, 3)).and_then(|p| p.pair()),
            pair(1, 3)
        );
        assert_eq!(certified_part(&cfg, pair(1, 4), pair(1, 3)), None);
        assert_eq!(certified_part(&cfg, pair(1, 3), None), None);
    }
}
