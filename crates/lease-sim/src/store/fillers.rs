//! Rule 15's filler cache in the simulated store: `ranked.lua`'s
//! `filler_position` (`HMGET`, `ZRANGE`, `DEL`, `HSET`, `PTTL`, `PEXPIRE` on
//! `P{N}:k:fillers`), step for step, and the leave script's `DEL` of it.

use std::collections::BTreeMap;

use super::{Entry, PositionSabotage, SimStore, Value, first_carrying, hole_filled, keeps};

/// The cache's field that holds the size of the set it was computed from.
const SIZE_FIELD: &str = "#";

impl SimStore {
    /// **Test only: breaks exclusivity.** With `true`, a filler listed in
    /// the filler cache takes its position from it whatever size the cache
    /// was computed for, as a script without the cache's size check would:
    /// a closed set reopened by a backward clock step and grown since the
    /// cache was written is answered from the set it was before.
    pub fn sabotage_filler_cache(&mut self, on: bool) {
        self.sabotage_filler_cache = on;
    }

    /// The position of `member`, a filler of the closed set `closed` (rule
    /// 15), computed from the set (the reference the script's cached answer
    /// is compared with), and the filler cache `cache` kept as the script
    /// keeps it: left alone when it was computed for a set of this size and
    /// lists the member, otherwise written afresh for every filler of the
    /// set, expiring with it. An empty `cache` (a caller that declares no
    /// fifth key) writes nothing. Under [`SimStore::sabotage_filler_cache`]
    /// the cached position is answered whatever size it was computed for.
    pub(super) fn filler_position(
        &mut self,
        closed: &str,
        cache: &str,
        member: &str,
        now_us: i64,
        ttl_ms: i64,
        sabotage: PositionSabotage,
    ) -> Option<usize> {
        let Some(Entry {
            value: Value::Set(set),
            expires_at: set_expires,
        }) = self.keys.get_mut(closed)
        else {
            return None;
        };
        let set_expires = *set_expires;
        let size = set.counted().to_string();
        // Kept with the set until it changes: the fillers of one closed set
        // (all of a cold start's) read one table.
        let table = set.fillers(sabotage, filler_table);
        let fresh = table.get(member).copied();
        if cache.is_empty() {
            return fresh;
        }
        self.expire(cache, now_us);
        if let Some(Entry {
            value: Value::Hash(fields),
            ..
        }) = self.keys.get(cache)
            && let Some(cached) = fields.get(member)
        {
            if fields.get(SIZE_FIELD) == Some(&size) {
                return fresh;
            }
            if self.sabotage_filler_cache {
                return cached.parse().ok();
            }
        }
        let mut fields: BTreeMap<String, String> = table
            .iter()
            .map(|(m, p)| (m.clone(), p.to_string()))
            .collect();
        fields.insert(SIZE_FIELD.to_owned(), size);
        let expires_at = if set_expires > now_us {
            set_expires
        } else {
            now_us.saturating_add(ttl_ms.saturating_mul(1000))
        };
        self.keys.insert(
            cache.to_owned(),
            Entry {
                value: Value::Hash(fields),
                expires_at,
            },
        );
        fresh
    }

    /// The leave script's `DEL` of the filler cache of the set it removed a
    /// member from (a missing key deletes nothing).
    pub(super) fn drop_filler_cache(&mut self, cache: &str) {
        if !cache.is_empty() {
            self.keys.remove(cache);
        }
    }
}

/// Whether the member at `rank` of `set` (in Redis order) keeps its score
/// as its position ([`keeps`]).
fn is_keeper(set: &[(f64, String)], rank: usize, sabotage: PositionSabotage) -> bool {
    let score = set[rank].0;
    keeps(score, set.len(), first_carrying(set, rank, score), sabotage)
}

/// Every filler of `set` with its position. Without a sabotage in one pass
/// (the script's: keepers first, then the fillers in order take the free
/// positions ascending); under a sabotage member by member, through the
/// sabotaged [`hole_filled`].
pub(super) fn filler_table(
    set: &[(f64, String)],
    sabotage: PositionSabotage,
) -> BTreeMap<String, usize> {
    let fillers = (0..set.len()).filter(|&r| !is_keeper(set, r, sabotage));
    if sabotage.fillers_ignore_keepers || sabotage.duplicates_keep {
        return fillers
            .filter_map(|r| Some((set[r].1.clone(), hole_filled(set, &set[r].1, sabotage)?)))
            .collect();
    }
    let mut kept = vec![false; set.len()];
    for r in 0..set.len() {
        if is_keeper(set, r, sabotage) {
            // A keeper's score carries its position (`p` or `p + 0.25`).
            kept[set[r].0.floor() as usize] = true;
        }
    }
    let mut free = (0..set.len()).filter(|&p| !kept[p]);
    fillers
        .filter_map(|r| Some((set[r].1.clone(), free.next()?)))
        .collect()
}
