//! Every member's position in a closed Ranked set (rules 15 and 19), for
//! tools that read a set from Redis (`lease inspect`): the store's own
//! computation (the keeper check of a registration, the filler table of
//! the filler cache), applied to a whole set at once.

use super::fillers::filler_table;
use super::ranked::keeper_in;
use super::zset::ZSet;
use super::{PositionSabotage, is_reserved};

/// What a member's entry in the set of an interval is (rule 19).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EntryKind {
    /// It registered in the interval: its score is a base score (an integer
    /// position `p`, a returnee's `2^32 + p + 0.5`, a newcomer's `2^40`).
    Registered,
    /// Reserved by its registration in the interval before, and not (yet)
    /// overwritten by one in this interval: a base score plus `0.25`.
    Reserved,
    /// It left gracefully in the interval (rule 16): score `-1` (any
    /// negative score), present but not counted, without a position.
    Left,
}

impl EntryKind {
    /// The kind of an entry with `score`.
    fn of(score: f64) -> Self {
        if score < 0.0 {
            Self::Left
        } else if is_reserved(score) {
            Self::Reserved
        } else {
            Self::Registered
        }
    }

    /// `"registered"`, `"reserved"` or `"left"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Registered => "registered",
            Self::Reserved => "reserved",
            Self::Left => "left",
        }
    }
}

/// One entry of a closed Ranked set, as [`closed_set_positions`] reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct ClosedEntry {
    /// The set member: the worker's token, or `m:<name>` under a member
    /// name (rule 18).
    pub member: String,
    /// Its score in the set.
    pub score: f64,
    /// Registered, reserved or left.
    pub kind: EntryKind,
    /// Its position in the closed set (rule 15), `None` for a left entry.
    /// The positions of a set are a permutation of `0..size`, `size` being
    /// the number of entries that have one (`ZCOUNT key 0 +inf`).
    pub position: Option<u32>,
}

/// Every member's position in a closed Ranked set, computed as
/// `ranked.lua` and [`SimStore`](crate::SimStore) compute it (rules 15 and
/// 19), from the set's `(member, score)` pairs as
/// `ZRANGE key 0 -1 WITHSCORES` lists them.
///
/// The set counts its entries with a score of 0 or more (registered and
/// reserved ones); its size `s` is their number. Ordered by base score (a
/// reservation's score without its `0.25`), ties by member bytes, the first
/// member carrying an integer `p < s` (score `p` or `p + 0.25`) keeps `p`
/// (a *keeper*); every other counted member (a *filler*: one carrying a
/// position a member before it carries, or one `>= s`, a returnee, a
/// newcomer) takes, in that order, the positions no keeper holds, in
/// ascending order. A left entry (a negative score, rule 19) has no
/// position. In an open set the same positions are those it would give if
/// it closed now.
///
/// Returns one entry per member, in Redis order (by score, ties by member
/// bytes). A member listed twice counts once, with its last score, as two
/// `ZADD`s would leave it. Scores are as Redis keeps them: never NaN.
///
/// ```
/// use lease_sim::{EntryKind, closed_set_positions};
///
/// let set = [
///     // Keeps position 0: it registered carrying 0.
///     ("m:a".to_owned(), 0.0),
///     // Keeps 2 through its reservation (2 + 0.25): it registered in the
///     // interval before and not in this one.
///     ("m:b".to_owned(), 2.25),
///     // A returnee that sent position 0 (2^32 + 0 + 0.5): a filler, so
///     // it takes the first position no keeper holds, 1.
///     ("m:c".to_owned(), 4_294_967_296.5),
///     // Left gracefully: not counted, no position.
///     ("m:d".to_owned(), -1.0),
/// ];
/// let entries = closed_set_positions(&set);
/// let got: Vec<(&str, EntryKind, Option<u32>)> = entries
///     .iter()
///     .map(|e| (e.member.as_str(), e.kind, e.position))
///     .collect();
/// // Redis order; the set counts 3 entries, at positions 0, 1 and 2.
/// assert_eq!(
///     got,
///     [
///         ("m:d", EntryKind::Left, None),
///         ("m:a", EntryKind::Registered, Some(0)),
///         ("m:b", EntryKind::Reserved, Some(2)),
///         ("m:c", EntryKind::Registered, Some(1)),
///     ]
/// );
/// ```
pub fn closed_set_positions(members: &[(String, f64)]) -> Vec<ClosedEntry> {
    let mut set = ZSet::default();
    for (member, score) in members {
        set.add(*score, member);
    }
    let correct = PositionSabotage::default();
    // The two paths of a registration's `position_in`: a keeper's position
    // from its own score, a filler's from the table the filler cache holds.
    let fillers = set.fillers(correct, filler_table);
    set.iter()
        .map(|(score, member)| {
            let kind = EntryKind::of(score);
            let position = match kind {
                EntryKind::Left => None,
                EntryKind::Registered | EntryKind::Reserved => {
                    keeper_in(&set, score, member, correct).or_else(|| fillers.get(member).copied())
                }
            };
            ClosedEntry {
                member: member.to_owned(),
                score,
                kind,
                // Fewer than 2^32 members, as any Redis sorted set.
                position: position.and_then(|p| u32::try_from(p).ok()),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const RETURNEE: f64 = super::super::RETURNEE;
    const NEWCOMER: f64 = super::super::NEWCOMER;

    fn pairs(set: &[(&str, f64)]) -> Vec<(String, f64)> {
        set.iter().map(|(m, s)| ((*m).to_owned(), *s)).collect()
    }

    fn positions(set: &[(&str, f64)]) -> Vec<(String, Option<u32>)> {
        closed_set_positions(&pairs(set))
            .into_iter()
            .map(|e| (e.member, e.position))
            .collect()
    }

    /// Checked by hand. Counted: a, b, c, d, e, g (size 6). By base score,
    /// ties by member: a (1), b (1.25: base 1), g (3.25: base 3), c (7),
    /// d (returnee), e (newcomer). Keepers: a keeps 1, g keeps 3. Fillers,
    /// in that order: b (1 is a's: the duplicate clause), c (7 >= 6), d,
    /// e take the free positions 0, 2, 4, 5. f left: no position.
    #[test]
    fn keepers_keep_and_fillers_take_the_free_positions_in_order() {
        let got = positions(&[
            ("a", 1.0),
            ("b", 1.25),
            ("c", 7.0),
            ("d", RETURNEE + 0.5),
            ("e", NEWCOMER),
            ("f", -1.0),
            ("g", 3.25),
        ]);
        let want = [
            ("f", None),
            ("a", Some(1)),
            ("b", Some(0)),
            ("g", Some(3)),
            ("c", Some(2)),
            ("d", Some(4)),
            ("e", Some(5)),
        ];
        let want: Vec<(String, Option<u32>)> =
            want.iter().map(|(m, p)| ((*m).to_owned(), *p)).collect();
        assert_eq!(got, want);
    }

    /// A registration and a reservation of one base: the first by member
    /// keeps it, whichever of the two it is.
    #[test]
    fn of_two_members_carrying_one_position_the_first_by_member_keeps_it() {
        assert_eq!(
            positions(&[("y", 0.0), ("x", 0.25)]),
            [("y".to_owned(), Some(1)), ("x".to_owned(), Some(0))]
        );
        assert_eq!(
            positions(&[("x", 0.0), ("y", 0.25)]),
            [("x".to_owned(), Some(0)), ("y".to_owned(), Some(1))]
        );
    }

    #[test]
    fn kinds_follow_the_score_and_a_repeated_member_counts_once() {
        let got = closed_set_positions(&pairs(&[
            ("r", RETURNEE + 1.75),
            ("n", NEWCOMER + 0.25),
            ("n", NEWCOMER),
            ("l", -1.0),
        ]));
        let kinds: Vec<(&str, EntryKind, Option<u32>)> = got
            .iter()
            .map(|e| (e.member.as_str(), e.kind, e.position))
            .collect();
        assert_eq!(
            kinds,
            [
                ("l", EntryKind::Left, None),
                ("r", EntryKind::Reserved, Some(0)),
                ("n", EntryKind::Registered, Some(1)),
            ]
        );
        assert!(closed_set_positions(&[]).is_empty());
        assert_eq!(EntryKind::Reserved.as_str(), "reserved");
    }
}
