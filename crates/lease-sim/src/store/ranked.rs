//! Ranked counting in the simulated store: `ranked.lua`'s counting part
//! (after the prelude), step for step: the member and the reply's status
//! (rule 18), the position in closed `k-1` (rule 15), the carried score
//! written into `k` and reserved in `k+1`, and what is read of closed `k-2`
//! for a returnee and for inheritance (rule 19).

use super::zset::ZSet;
use super::{
    Entry, NEWCOMER, PositionSabotage, RESERVED, RETURNEE, SimStore, StoreError, Value, base,
    carried, is_reserved, keeps, lua_number,
};

/// The most candidates `ranked.lua` looks at for inheritance.
const CANDIDATES: usize = lease_core::MAX_INHERITED;

impl SimStore {
    /// **Test only: breaks exclusivity.** With `true`, a registration
    /// inherits every candidate position whose keeper in closed `k-2` is
    /// another member, present in the set of `k-1` or not (the negative
    /// control of rule 19's inheritance).
    pub fn sabotage_inheritance(&mut self, on: bool) {
        self.sabotage_inheritance = on;
    }

    /// Ranked's count with the eight keys of a registration (`k`, `k-1`,
    /// rules, members, fillers of `k-1`, `k+1`, `k-2`, fillers of `k`): the
    /// reply's status
    /// (3 when another incarnation holds the member name, rule 18) and the
    /// fields after the server time: position in `k-1` and its size,
    /// registered, position in `k-2` and its size, inherited positions.
    pub(super) fn count_ranked(
        &mut self,
        keys: [&str; lease_core::KEY_COUNT],
        args: &[String],
        recorded: bool,
        k: i64,
        now_us: i64,
        ttl_ms: i64,
    ) -> Result<(i64, Vec<i64>), StoreError> {
        let token = args.get(4).ok_or(StoreError::BadArguments("token"))?;
        // Rule 18: the set member and the reply's status.
        let (status, member) = self.member_of(keys[3], args, token, k, now_us, ttl_ms)?;
        // `tonumber(ARGV[6])`: what does not read as a number counts as a
        // newcomer's -1, as in the script.
        let sent = args.get(5).and_then(|a| lua_number(a)).unwrap_or(-1.0);
        let (position, entry, size) =
            self.position_in(keys[1], keys[4], &member, now_us, ttl_ms)?;
        // The server-side carry (rule 15): a member present in k-1 carries
        // its integer position; a returnee ranks after every carried
        // position, by the position it sent; a newcomer last.
        let score = match position {
            Some(p) => p as f64,
            None if (0.0..RETURNEE).contains(&sent) => RETURNEE + sent.floor() + 0.5,
            None => NEWCOMER,
        };
        // ZADD k (over its reservation), then the reservation in k+1 (NX):
        // only a ZADD that creates a set sets its TTL and renews the record.
        let rules = recorded.then_some(keys[2]);
        let added = self.zadd(keys[0], score, &member, false, now_us)?;
        self.created(keys[0], added, rules, now_us, ttl_ms);
        // An overwrite that changes the entry's base score (anything but the
        // member's own reservation of its entry in closed k-1) deletes the
        // filler cache of k (KEYS[8]).
        let same_base = entry.is_some_and(|e| !is_reserved(e) && base(e) == score);
        if !added && !same_base {
            self.drop_filler_cache(keys[7]);
        }
        let added = self.zadd(keys[5], score + RESERVED, &member, true, now_us)?;
        self.created(keys[5], added, rules, now_us, ttl_ms);
        let Some(position) = position else {
            return Ok((status, vec![-1, size as i64, -1, -1, -1]));
        };
        let registered = i64::from(!is_reserved(entry.unwrap_or(0.0)));
        let older = self.older(keys, args, &member, position, size)?;
        let mut reply = vec![
            position as i64,
            size as i64,
            registered,
            older.position,
            older.count,
        ];
        reply.extend(older.inherited.iter().map(|&q| q as i64));
        Ok((status, reply))
    }

    /// The member's position in the closed set `closed`, its score there
    /// and the set's size: a keeper's from its score, a filler's from the
    /// filler cache `cache` (computed for every filler and cached).
    fn position_in(
        &mut self,
        closed: &str,
        cache: &str,
        member: &str,
        now_us: i64,
        ttl_ms: i64,
    ) -> Result<(Option<usize>, Option<f64>, usize), StoreError> {
        let sabotage = PositionSabotage {
            fillers_ignore_keepers: self.sabotage_positions,
            duplicates_keep: self.sabotage_duplicate_keepers,
        };
        let (score, keeper, size) = match self.keys.get(closed).map(|e| &e.value) {
            None => (None, None, 0),
            Some(Value::Set(set)) => {
                // A left entry (rule 19) is not counted: no position.
                let score = set.score(member).filter(|&s| s >= 0.0);
                let keeper = score.map(|score| keeper_in(set, score, member, sabotage));
                (score, keeper, set.counted())
            }
            Some(_) => return Err(StoreError::WrongType),
        };
        let position = match keeper {
            None => None,
            Some(Some(p)) => Some(p),
            Some(None) => self.filler_position(closed, cache, member, now_us, ttl_ms, sabotage),
        };
        Ok((position, score, size))
    }

    /// `ZADD key [NX] score member`: whether it added the member.
    fn zadd(
        &mut self,
        key: &str,
        score: f64,
        member: &str,
        nx: bool,
        now_us: i64,
    ) -> Result<bool, StoreError> {
        self.expire(key, now_us);
        let entry = self.keys.entry(key.to_owned()).or_insert(Entry {
            value: Value::Set(ZSet::default()),
            expires_at: i64::MAX,
        });
        let Value::Set(set) = &mut entry.value else {
            return Err(StoreError::WrongType);
        };
        Ok(if nx {
            set.add_nx(score, member)
        } else {
            set.add(score, member)
        })
    }

    /// `ranked.lua`'s `created`: a ZADD that added the only member created
    /// the set, which then gets its TTL and renews the rules record `rules`
    /// (when the record was there before this registration).
    fn created(&mut self, key: &str, added: bool, rules: Option<&str>, now_us: i64, ttl_ms: i64) {
        let only = match self.keys.get(key).map(|e| &e.value) {
            Some(Value::Set(set)) => set.len() == 1,
            _ => false,
        };
        if added && only {
            self.pexpire(key, now_us, ttl_ms);
            if let Some(rules) = rules {
                self.pexpire(rules, now_us, ttl_ms);
            }
        }
    }

    /// What `ranked.lua` reads of closed `k-2` (rule 19) for `member` at
    /// `position` of closed `k-1` (of `size`): its own position there when
    /// the worker sent none (a keeper's only), the size when read, and, for
    /// a caller under jump hash, the candidates it inherits.
    fn older(
        &mut self,
        keys: [&str; lease_core::KEY_COUNT],
        args: &[String],
        member: &str,
        position: usize,
        size: usize,
    ) -> Result<OlderRead, StoreError> {
        let mut read = OlderRead {
            position: -1,
            count: -1,
            inherited: Vec::new(),
        };
        // Closed k-2 is read (and its type checked) only where the script
        // reads it: for a pair the worker did not send, and for
        // inheritance.
        // `tonumber(ARGV[8])`, `tonumber(ARGV[9])`: the worker's own pair in
        // k-2, used only if `own2 >= 0 and m > own2`.
        let own2 = args.get(7).and_then(|a| lua_number(a));
        let m = args.get(8).and_then(|a| lua_number(a));
        let (own2, m) = match (own2, m) {
            (Some(o), Some(m)) if o >= 0.0 && m > o => (Some(o), m),
            _ => {
                let set2 = self.sorted_set(keys[6])?;
                let len2 = set2.map_or(0, ZSet::counted);
                read.count = len2 as i64;
                let own = set2.and_then(|set| {
                    let p = carried(set.score(member)?, len2)?;
                    (set.first_carrying(p as f64)?.1 == member).then_some(p)
                });
                if let Some(p) = own {
                    read.position = p as i64;
                }
                (own.map(|p| p as f64), len2 as f64)
            }
        };
        // `string.sub(ARGV[4], -11) == ':consistent'`.
        let consistent = args.get(3).is_some_and(|r| r.ends_with(":consistent"));
        let pos = position as f64;
        if !consistent || (own2 == Some(pos) && (size as f64) >= m) {
            return Ok(read);
        }
        let set2 = self.sorted_set(keys[6])?;
        let len2 = set2.map_or(0, ZSet::counted);
        read.count = len2 as i64;
        let mut candidates = Vec::with_capacity(CANDIDATES);
        if own2 != Some(pos) {
            candidates.push(pos);
        }
        let mut q = size as f64;
        while q < m && candidates.len() < CANDIDATES {
            if Some(q) != own2 {
                candidates.push(q);
            }
            q += 1.0;
        }
        let Some(set2) = set2 else {
            return Ok(read);
        };
        let closed = self.sorted_set(keys[1])?;
        for c in candidates {
            if c >= len2 as f64 {
                continue;
            }
            let Some((_, holder)) = set2.first_carrying(c) else {
                continue;
            };
            let present = closed.is_some_and(|set| set.score(holder).is_some());
            if holder != member && (!present || self.sabotage_inheritance) {
                read.inherited.push(c as usize);
            }
        }
        Ok(read)
    }
}

impl SimStore {
    /// The sorted set at `key`, `None` when missing (as `ZCARD` and
    /// `ZSCORE` read a missing key), an error for another type.
    fn sorted_set(&self, key: &str) -> Result<Option<&ZSet>, StoreError> {
        match self.keys.get(key).map(|e| &e.value) {
            None => Ok(None),
            Some(Value::Set(set)) => Ok(Some(set)),
            Some(_) => Err(StoreError::WrongType),
        }
    }
}

/// What a registration read of closed `k-2`, as the reply's fields.
struct OlderRead {
    position: i64,
    count: i64,
    inherited: Vec<usize>,
}

/// The position `member` (with `score`) keeps in `set`, if it is a keeper
/// there (rule 15), under `sabotage`.
pub(super) fn keeper_in(
    set: &ZSet,
    score: f64,
    member: &str,
    sabotage: PositionSabotage,
) -> Option<usize> {
    let p = carried(score, set.counted())?;
    let first = set
        .first_carrying(p as f64)
        .is_some_and(|(_, m)| m == member);
    keeps(score, set.counted(), first, sabotage).then_some(p)
}
