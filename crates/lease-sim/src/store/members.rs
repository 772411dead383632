//! Rule 18 in the simulated store: the member record of `ranked.lua`
//! (`HGET`, `HSET`, `PEXPIRE` on `P{N}:members`), step for step.

use super::{Entry, SimStore, StoreError, Value};

impl SimStore {
    /// **Test only: breaks exclusivity.** With `true`, a registration under
    /// a member name takes the name over from another identity at once,
    /// without waiting two intervals after that identity's last
    /// registration (the negative control of rule 18).
    pub fn sabotage_members(&mut self, on: bool) {
        self.sabotage_members = on;
    }

    /// Test only: writes `value` under `name` in the member record `key`,
    /// as `HSET key name value` and `PEXPIRE key ttl_ms` do (for the
    /// differential test, which seeds records the scripts would write in
    /// other intervals).
    pub fn set_member_record(
        &mut self,
        key: &str,
        name: &str,
        value: &str,
        now_us: i64,
        ttl_ms: i64,
    ) {
        self.expire(key, now_us);
        let entry = self.keys.entry(key.to_owned()).or_insert(Entry {
            value: Value::Hash(Default::default()),
            expires_at: i64::MAX,
        });
        if let Value::Hash(h) = &mut entry.value {
            h.insert(name.to_owned(), value.to_owned());
        }
        self.pexpire(key, now_us, ttl_ms);
    }

    /// Rule 18 for a Ranked registration of `token` in `k` with `args`:
    /// the sorted-set member (the token, or `m:` and the member name,
    /// `ARGV[7]`) and the reply's status (1, or 3 when another token holds
    /// the name).
    pub(super) fn member_of(
        &mut self,
        key: &str,
        args: &[String],
        token: &str,
        k: i64,
        now_us: i64,
        ttl_ms: i64,
    ) -> Result<(i64, String), StoreError> {
        // `if ARGV[7] and ARGV[7] ~= ''`: an empty name is no name.
        match args.get(6).filter(|name| !name.is_empty()) {
            Some(name) => Ok((
                self.member_status(key, name, token, k, now_us, ttl_ms)?,
                format!("m:{name}"),
            )),
            None => Ok((1, token.to_owned())),
        }
    }

    /// The member record's step of `ranked.lua` for `token` registering
    /// under `name` in interval `k`: the reply's status, 1 if the token
    /// holds the name (the record then names it with interval `k`), 3 if
    /// another token registered under it in `k` or `k - 1`. The record's
    /// TTL is renewed either way.
    pub(super) fn member_status(
        &mut self,
        key: &str,
        name: &str,
        token: &str,
        k: i64,
        now_us: i64,
        ttl_ms: i64,
    ) -> Result<i64, StoreError> {
        self.expire(key, now_us);
        let record = match self.keys.get(key).map(|e| &e.value) {
            None => None,
            Some(Value::Hash(h)) => h.get(name).cloned(),
            Some(_) => return Err(StoreError::WrongType),
        };
        // `string.match(record, '^(%x+):(%d+)$')`.
        let parsed = record.as_deref().and_then(|r| {
            let (holder, last) = r.split_once(':')?;
            let hex = !holder.is_empty() && holder.bytes().all(|b| b.is_ascii_hexdigit());
            let digits = !last.is_empty() && last.bytes().all(|b| b.is_ascii_digit());
            (hex && digits).then(|| (holder.to_owned(), last.parse::<f64>().unwrap_or(f64::MAX)))
        });
        let status = match parsed {
            Some((holder, last))
                if holder != token && last + 2.0 > k as f64 && !self.sabotage_members =>
            {
                3
            }
            other => {
                // Never move the record's interval back.
                let j = match other {
                    Some((holder, last)) if holder == token && last > k as f64 => last as i64,
                    _ => k,
                };
                let entry = self.keys.entry(key.to_owned()).or_insert(Entry {
                    value: Value::Hash(Default::default()),
                    expires_at: i64::MAX,
                });
                let Value::Hash(h) = &mut entry.value else {
                    return Err(StoreError::WrongType);
                };
                h.insert(name.to_owned(), format!("{token}:{j}"));
                1
            }
        };
        self.pexpire(key, now_us, ttl_ms);
        Ok(status)
    }
}
