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
    /// of c, c+1, c+2]`, `ARGV = [L, c, rules, token]`. The open interval
    /// `x` (from the server time) is `c` or `c+1`; if the token's score in
    /// the set of `x` is a registration's (it registered in `x` and
    /// reserved its place in `x+1`) it leaves the set of `x+1`, if it is a
    /// reservation's it leaves the set of `x`; the filler cache of the set
    /// it left goes too.
    pub fn execute_leave(
        &mut self,
        now_us: i64,
        keys: &[&str],
        args: &[String],
    ) -> Result<Vec<i64>, StoreError> {
        if keys.len() < lease_core::KEY_COUNT {
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
        let targets: Vec<String> = match (self.leave_sabotage, open) {
            (Some(LeaveSabotage::ClientNamed), _) => vec![sets[0].to_owned()],
            (_, None) => unreachable!("answered above"),
            (None, Some(x)) => self.leave_from(sets, x, token, now_us)?.into_iter().collect(),
            (Some(LeaveSabotage::OpenAndNext), Some(x)) => {
                vec![sets[x].to_owned(), sets[x + 1].to_owned()]
            }
            (Some(LeaveSabotage::AlsoClosed), Some(x)) => {
                let mut targets: Vec<String> =
                    self.leave_from(sets, x, token, now_us)?.into_iter().collect();
                targets.push(before(sets[x]));
                targets
            }
            (Some(LeaveSabotage::InsteadClosed), Some(x)) => vec![before(sets[x])],
        };
        let mut removed = 0;
        for key in &targets {
            self.expire(key, now_us);
            let Some(entry) = self.keys.get_mut(key) else {
                continue;
            };
            let Value::Set(set) = &mut entry.value else {
                return Err(StoreError::WrongType);
            };
            let gone = set.remove(token);
            if set.is_empty() {
                // ZREM of the last member deletes the key.
                self.keys.remove(key);
            }
            if !gone {
                continue;
            }
            match sets.iter().position(|s| s == key) {
                Some(i) if open.is_some_and(|x| i == x || i == x + 1) => {
                    removed = 1;
                    self.drop_filler_cache(caches[i]);
                }
                _ => self.closed_writes += 1,
            }
        }
        Ok(vec![1, k, sec, usec, removed])
    }

    /// The set the leave takes `token` out of, the open interval being
    /// `sets[x]` (rule 19): the next one (its reservation) when its score in
    /// the open set is a registration's, the open one when it is a
    /// reservation's, none when it is not there.
    fn leave_from(
        &mut self,
        sets: [&str; 3],
        x: usize,
        token: &str,
        now_us: i64,
    ) -> Result<Option<String>, StoreError> {
        self.expire(sets[x], now_us);
        let score = match self.keys.get(sets[x]).map(|e| &e.value) {
            None => None,
            Some(Value::Set(set)) => set.score(token),
            Some(_) => return Err(StoreError::WrongType),
        };
        Ok(score.map(|score| {
            let from = if is_reserved(score) { x } else { x + 1 };
            sets[from].to_owned()
        }))
    }
}

/// The key of the interval before the one `key` names (`P{N}:x` to
/// `P{N}:(x-1)`), for the sabotaged scripts that write a closed set.
fn before(key: &str) -> String {
    let (head, num) = key.rsplit_once(':').unwrap_or((key, "0"));
    let n: i64 = num.parse().unwrap_or(0);
    format!("{head}:{}", n - 1)
}
