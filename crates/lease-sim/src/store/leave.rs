//! The leave script in the simulated store: `leave.lua` (rules 16 and 19),
//! step for step, and its deliberately wrong variants (negative controls).

use super::{SimStore, StoreError, Value, is_reserved, lua_number};

/// **Test only: breaks exclusivity.** A wrong leave script, for the
/// negative controls of rules 16 and 19 (docs/protocol.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LeaveSabotage {
    /// Removes the token from the set the script picks *and* from the
    /// closed set before the open one.
    AlsoClosed,
    /// Removes the token from the closed set before the open one only.
    InsteadClosed,
    /// Removes the token from the interval the client named (`KEYS[1]`),
    /// whatever the server's interval at execution.
    ClientNamed,
    /// Removes the token from the open set and from the next one's
    /// reservation alike, also when it registered in the open interval
    /// (rule 19: others then inherit its position of the interval before,
    /// while its lease from the open interval lives).
    OpenAndNext,
}

impl SimStore {
    /// **Test only: breaks exclusivity.** Makes the leave script wrong in
    /// the given way (negative controls).
    pub fn sabotage_leave(&mut self, sabotage: Option<LeaveSabotage>) {
        self.leave_sabotage = sabotage;
    }

    /// Leave requests that removed a token from a closed set (only a
    /// sabotaged leave script does).
    pub fn closed_set_writes(&self) -> u64 {
        self.closed_writes
    }

    /// Runs the leave script (`leave.lua`) at server time `now_us` with the
    /// keys and arguments of a [`lease_core::Transmit`] of
    /// [`lease_core::Script::leave`]: `KEYS = [c, c+1, rules, c+2, fillers
    /// of c, c+1, c+2]`, `ARGV = [L, c, rules, token, replied]`. The open
    /// interval `x` (from the server time) is `c` or `c+1`; if the token's
    /// score in the set of `x` is a registration's (or the caller processed
    /// a reply from `x`), its entry there becomes a left entry (present,
    /// not counted) and its reservation in `x+1` goes; if it is a
    /// reservation's, it leaves the set of `x`; the filler caches of the
    /// sets it changed go too.
    pub fn execute_leave(
        &mut self,
        now_us: i64,
        keys: &[&str],
        args: &[String],
    ) -> Result<Vec<i64>, StoreError> {
        if keys.len() < 7 {
            return Err(StoreError::KeyCount);
        }
        self.executed += 1;
        let interval_ms = super::int_arg(args, 0, "interval")?;
        if interval_ms <= 0 {
            return Err(StoreError::BadArguments("interval"));
        }
        let rules = args.get(2).ok_or(StoreError::BadArguments("rules"))?;
        let sec = now_us.div_euclid(1_000_000);
        let usec = now_us.rem_euclid(1_000_000);
        let k = (sec * 1000 + usec / 1000).div_euclid(interval_ms);
        self.expire(keys[2], now_us);
        match self.keys.get(keys[2]).map(|e| &e.value) {
            Some(Value::Text(recorded)) if recorded != rules => return Ok(vec![2, k, sec, usec]),
            Some(Value::Text(_)) | None => {}
            Some(_) => return Err(StoreError::WrongType),
        }
        // `c = tonumber(ARGV[2])`, read after the rules: `k == c + 1` fails
        // on what is not a number, a non-integer matches neither.
        let c = args
            .get(1)
            .and_then(|a| lua_number(a))
            .ok_or(StoreError::BadArguments("believed interval"))?;
        // The sets of c, c+1, c+2 and their caches.
        let sets = [keys[0], keys[1], keys[3]];
        let caches = [keys[4], keys[5], keys[6]];
        let open = if k as f64 == c {
            Some(0)
        } else if k as f64 == c + 1.0 {
            Some(1)
        } else {
            None
        };
        if open.is_none() && self.leave_sabotage != Some(LeaveSabotage::ClientNamed) {
            return Ok(vec![0, k, sec, usec]);
        }
        // ZSCORE of a missing token fails before anything is written.
        let token = args.get(3).ok_or(StoreError::BadArguments("token"))?;
        // `tonumber(ARGV[5]) ~= k`: the newest interval the caller processed
        // a registration reply from, if it is the open one.
        let replied_open = args.get(4).and_then(|a| lua_number(a)) == Some(k as f64);
        let mut removed = 0;
        match (self.leave_sabotage, open) {
            (Some(LeaveSabotage::ClientNamed), _) => {
                self.remove_counting(sets[0], token, now_us, open.map(|x| (x, sets)))?;
            }
            (_, None) => unreachable!("answered above"),
            (None, Some(x)) => {
                removed = self.leave_open(sets, caches, x, token, replied_open, now_us)?
            }
            (Some(LeaveSabotage::OpenAndNext), Some(x)) => {
                removed = i64::from(self.zrem(sets[x], token, now_us)?);
                self.zrem(sets[x + 1], token, now_us)?;
                self.drop_filler_cache(caches[x]);
                self.drop_filler_cache(caches[x + 1]);
            }
            (Some(LeaveSabotage::AlsoClosed), Some(x)) => {
                removed = self.leave_open(sets, caches, x, token, replied_open, now_us)?;
                self.remove_counting(&before(sets[x]), token, now_us, None)?;
            }
            (Some(LeaveSabotage::InsteadClosed), Some(x)) => {
                self.remove_counting(&before(sets[x]), token, now_us, None)?;
            }
        }
        Ok(vec![1, k, sec, usec, removed])
    }

    /// `leave.lua` in the open interval `sets[x]`: by the token's score
    /// there, a reservation's (and no reply from `x` processed) is removed;
    /// a registration's (or a reservation's with a reply from `x`) becomes a
    /// left entry (-1) and its reservation in `sets[x + 1]` goes; each set
    /// touched loses its filler cache. Returns the reply's `removed`.
    fn leave_open(
        &mut self,
        sets: [&str; 3],
        caches: [&str; 3],
        x: usize,
        token: &str,
        replied_open: bool,
        now_us: i64,
    ) -> Result<i64, StoreError> {
        self.expire(sets[x], now_us);
        let score = match self.keys.get(sets[x]).map(|e| &e.value) {
            None => None,
            Some(Value::Set(set)) => set.score(token),
            Some(_) => return Err(StoreError::WrongType),
        };
        let Some(score) = score.filter(|&s| s >= 0.0) else {
            return Ok(0);
        };
        let removed = if is_reserved(score) && !replied_open {
            i64::from(self.zrem(sets[x], token, now_us)?)
        } else {
            if let Some(Value::Set(set)) = self.keys.get_mut(sets[x]).map(|e| &mut e.value) {
                set.add(LEFT, token);
            }
            self.zrem(sets[x + 1], token, now_us)?;
            self.drop_filler_cache(caches[x + 1]);
            1
        };
        self.drop_filler_cache(caches[x]);
        Ok(removed)
    }

    /// `ZREM key member` (deleting the key when it empties): whether it
    /// removed it.
    fn zrem(&mut self, key: &str, member: &str, now_us: i64) -> Result<bool, StoreError> {
        self.expire(key, now_us);
        let Some(entry) = self.keys.get_mut(key) else {
            return Ok(false);
        };
        let Value::Set(set) = &mut entry.value else {
            return Err(StoreError::WrongType);
        };
        let gone = set.remove(member);
        if set.is_empty() {
            // ZREM of the last member deletes the key.
            self.keys.remove(key);
        }
        Ok(gone)
    }

    /// A sabotaged script's `ZREM` of `key`: counted as a write of a closed
    /// set unless `key` is the open set or the next one (`open`).
    fn remove_counting(
        &mut self,
        key: &str,
        member: &str,
        now_us: i64,
        open: Option<(usize, [&str; 3])>,
    ) -> Result<(), StoreError> {
        if !self.zrem(key, member, now_us)? {
            return Ok(());
        }
        let allowed = open.is_some_and(|(x, sets)| key == sets[x] || key == sets[x + 1]);
        if !allowed {
            self.closed_writes += 1;
        }
        Ok(())
    }
}

/// A left entry's score (rule 19): present, not counted.
const LEFT: f64 = -1.0;

/// The key of the interval before the one `key` names (`P{N}:x` to
/// `P{N}:(x-1)`), for the sabotaged scripts that write a closed set.
fn before(key: &str) -> String {
    let (head, num) = key.rsplit_once(':').unwrap_or((key, "0"));
    let n: i64 = num.parse().unwrap_or(0);
    format!("{head}:{}", n - 1)
}
