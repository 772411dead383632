//! A sorted set as the simulated store keeps one: the members in Redis
//! order (by score, ties by member bytes) in an ordered tree, and an index
//! from member to score. A group of 10,000 workers registers 10,000 times
//! per interval into a set of 10,000; with the set as a sorted vector every
//! `ZADD NX`, `ZSCORE` and `ZREM` scanned or shifted the whole of it, here
//! each is `O(log n)`. The filler table of rule 15 (every filler's
//! position, a pass over the whole set) is kept until the set next changes,
//! so the fillers of one closed set compute it once between them.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use super::PositionSabotage;

/// A score ordered as Redis compares scores. The scripts write finite
/// scores only; `total_cmp` merely makes the order total (it never decides
/// between two scores the numeric comparison orders, `-0` and `0` being
/// equal to both).
#[derive(Clone, Copy, Debug)]
struct Score(f64);

impl PartialEq for Score {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Score {}
impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Score {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0
            .partial_cmp(&other.0)
            .unwrap_or_else(|| self.0.total_cmp(&other.0))
    }
}

/// Every filler of a set with its position, and the sabotage it was
/// computed under.
type FillerTable = (PositionSabotage, Arc<BTreeMap<String, usize>>);

/// A sorted set: `(score, member)` pairs, one per member.
#[derive(Clone, Debug, Default)]
pub(super) struct ZSet {
    /// Every member with its score.
    scores: HashMap<String, f64>,
    /// The same pairs in Redis order.
    order: BTreeSet<(Score, String)>,
    /// The filler table of the set as it is now, once computed.
    fillers: Option<FillerTable>,
    /// How many members have a negative score: left entries (rule 19),
    /// present but not counted.
    left: usize,
}

impl ZSet {
    /// `ZCARD`.
    pub(super) fn len(&self) -> usize {
        self.scores.len()
    }

    /// The members a closed set counts (rule 19): those with a score of 0
    /// or more (`ZCOUNT key 0 +inf`).
    pub(super) fn counted(&self) -> usize {
        self.scores.len() - self.left
    }

    /// Whether the set has no member.
    pub(super) fn is_empty(&self) -> bool {
        self.scores.is_empty()
    }

    /// `ZSCORE`.
    pub(super) fn score(&self, member: &str) -> Option<f64> {
        self.scores.get(member).copied()
    }

    /// `ZADD NX`: adds `member` with `score` unless it is a member already
    /// (whatever its score then); returns whether it added.
    pub(super) fn add_nx(&mut self, score: f64, member: &str) -> bool {
        if self.scores.contains_key(member) {
            return false;
        }
        self.scores.insert(member.to_owned(), score);
        self.order.insert((Score(score), member.to_owned()));
        self.left += usize::from(score < 0.0);
        self.fillers = None;
        true
    }

    /// `ZADD` (without `NX`): adds `member` with `score`, or gives a member
    /// already there that score; returns whether it added.
    pub(super) fn add(&mut self, score: f64, member: &str) -> bool {
        let added = match self.scores.insert(member.to_owned(), score) {
            Some(old) if Score(old) == Score(score) => return false,
            Some(old) => {
                self.order.remove(&(Score(old), member.to_owned()));
                self.left -= usize::from(old < 0.0);
                false
            }
            None => true,
        };
        self.left += usize::from(score < 0.0);
        self.order.insert((Score(score), member.to_owned()));
        self.fillers = None;
        added
    }

    /// The keeper of position `p` (rule 15): of the members whose score
    /// carries `p` (`p` or `p + 0.25`: `ZRANGEBYSCORE p p.25`), the first by
    /// member, with its score.
    pub(super) fn first_carrying(&self, p: f64) -> Option<(f64, &str)> {
        self.order
            .range((Score(p), String::new())..)
            .take_while(|(s, _)| s.0 <= p + super::RESERVED)
            .min_by(|(_, a), (_, b)| a.cmp(b))
            .map(|(s, m)| (s.0, m.as_str()))
    }

    /// `ZREM`: removes `member`; returns whether it was there.
    pub(super) fn remove(&mut self, member: &str) -> bool {
        let Some(score) = self.scores.remove(member) else {
            return false;
        };
        self.order.remove(&(Score(score), member.to_owned()));
        self.left -= usize::from(score < 0.0);
        self.fillers = None;
        true
    }

    /// The pairs in Redis order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (f64, &str)> + '_ {
        self.order.iter().map(|(s, m)| (s.0, m.as_str()))
    }

    /// The pairs in Redis order, as a vector.
    pub(super) fn to_vec(&self) -> Vec<(f64, String)> {
        self.iter().map(|(s, m)| (s, m.to_owned())).collect()
    }

    /// Keeps the members for which `keep` says so, asking in Redis order
    /// (a caller drawing random numbers draws them in that order).
    pub(super) fn retain(&mut self, mut keep: impl FnMut() -> bool) {
        let gone: Vec<String> = self
            .order
            .iter()
            .filter(|_| !keep())
            .map(|(_, m)| m.clone())
            .collect();
        for m in &gone {
            self.remove(m);
        }
    }

    /// Every filler's position under `sabotage`, by `table` from the counted
    /// pairs (scores of 0 or more, rule 19) in the order positions use (by
    /// base score, ties by member): computed once per state of the set and
    /// sabotage.
    pub(super) fn fillers(
        &mut self,
        sabotage: PositionSabotage,
        table: impl FnOnce(&[(f64, String)], PositionSabotage) -> BTreeMap<String, usize>,
    ) -> Arc<BTreeMap<String, usize>> {
        match &self.fillers {
            Some((s, t)) if *s == sabotage => t.clone(),
            _ => {
                let mut counted: Vec<(f64, String)> = self
                    .to_vec()
                    .into_iter()
                    .filter(|(s, _)| *s >= 0.0)
                    .collect();
                counted.sort_by(|(a, m), (b, n)| {
                    super::base(*a).total_cmp(&super::base(*b)).then(m.cmp(n))
                });
                let t = Arc::new(table(&counted, sabotage));
                self.fillers = Some((sabotage, t.clone()));
                t
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_are_in_redis_order_and_unique() {
        let mut z = ZSet::default();
        assert!(z.add_nx(2.0, "b"));
        assert!(z.add_nx(1.0, "z"));
        assert!(z.add_nx(2.0, "a"));
        assert!(!z.add_nx(0.0, "b"), "NX: a member keeps its score");
        let got: Vec<(f64, &str)> = z.iter().collect();
        assert_eq!(got, [(1.0, "z"), (2.0, "a"), (2.0, "b")]);
        assert_eq!(z.score("b"), Some(2.0));
        assert_eq!(z.first_carrying(2.0), Some((2.0, "a")));
        assert_eq!(z.first_carrying(1.0), Some((1.0, "z")));
        assert_eq!(z.first_carrying(0.0), None);
        assert!(z.remove("a"));
        assert!(!z.remove("a"));
        assert_eq!(z.first_carrying(2.0), Some((2.0, "b")));
        assert_eq!(z.len(), 2);
    }

    #[test]
    fn a_reservation_carries_its_position_after_a_registration_of_it() {
        let mut z = ZSet::default();
        assert!(z.add_nx(3.25, "r"));
        assert_eq!(z.first_carrying(3.0), Some((3.25, "r")));
        assert!(z.add(3.0, "s"));
        assert_eq!(
            z.first_carrying(3.0),
            Some((3.25, "r")),
            "one base (3 and 3.25 carry 3), ties by member"
        );
        // A registration overwrites its own reservation: not an addition.
        assert!(!z.add(3.0, "r"));
        assert_eq!(z.score("r"), Some(3.0));
        assert!(!z.add(3.0, "r"), "a repeat changes nothing");
        assert_eq!(z.first_carrying(3.0), Some((3.0, "r")), "ties by member");
        assert_eq!(z.first_carrying(4.0), None);
        assert_eq!(z.len(), 2);
    }

    #[test]
    fn retain_asks_in_order_and_the_filler_table_follows_changes() {
        let mut z = ZSet::default();
        for (s, m) in [(3.0, "c"), (1.0, "a"), (2.0, "b")] {
            z.add_nx(s, m);
        }
        let mut asked = 0;
        // Drops the second member in order.
        z.retain(|| {
            asked += 1;
            asked != 2
        });
        assert_eq!(z.to_vec(), [(1.0, "a".to_owned()), (3.0, "c".to_owned())]);
        let count = |z: &mut ZSet| {
            z.fillers(PositionSabotage::default(), |set, _| {
                BTreeMap::from([(String::new(), set.len())])
            })[""]
        };
        assert_eq!(count(&mut z), 2);
        z.add_nx(0.0, "d");
        assert_eq!(count(&mut z), 3, "recomputed after a change");
    }
}
