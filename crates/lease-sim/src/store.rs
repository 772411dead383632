//! A simulated Redis: the semantics of both registration scripts and of the
//! leave script (`TIME`, the group's rules record, key expiry, `INCR`/`GET`,
//! sorted sets with `ZADD NX`, `ZRANK`, `ZCARD`, `ZREM`, and the hashes of
//! the member record and the filler cache)
//! over an in-memory key space, with the server-side faults the protocol must
//! survive (restart losing every key) and one it need not (lost writes).
//!
//! The store executes a [`lease_core::Transmit`]'s keys and arguments exactly
//! as the Lua script would, and answers with the same integers.

use std::collections::{BTreeMap, HashMap};

mod fillers;
mod leave;
mod members;
mod positions;
mod ranked;
mod zset;

pub use leave::LeaveSabotage;
pub use positions::{ClosedEntry, EntryKind, closed_set_positions};
use zset::ZSet;

use lease_core::Mode;

/// One key's value.
#[derive(Clone, Debug)]
enum Value {
    /// `Arrival`: an `INCR` counter.
    Counter(i64),
    /// `Ranked`: a sorted set of `(score, member)`, kept in Redis order
    /// (by score, ties by member bytes).
    Set(ZSet),
    /// A string: the group's rules record.
    Text(String),
    /// A hash: the group's member record (rule 18).
    Hash(BTreeMap<String, String>),
}

#[derive(Clone, Debug)]
struct Entry {
    value: Value,
    /// Server time (microseconds) at which the key expires.
    expires_at: i64,
}

/// Why the store could not run a script.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The arguments are not what the scripts take.
    #[error("ERR bad script arguments: {0}")]
    BadArguments(&'static str),
    /// A key holds the other mode's type.
    #[error("WRONGTYPE Operation against a key holding the wrong kind of value")]
    WrongType,
    /// Fewer keys than the script takes (the Ranked registration and the
    /// leave script take [`lease_core::KEY_COUNT`]).
    #[error("ERR lease: the script takes more keys")]
    KeyCount,
}

/// The simulated server's key space.
#[derive(Clone, Debug, Default)]
pub struct SimStore {
    keys: HashMap<String, Entry>,
    executed: u64,
    /// A sabotaged leave script, if any.
    leave_sabotage: Option<LeaveSabotage>,
    /// Leave requests that removed a token from a closed set (only a
    /// sabotaged script does).
    closed_writes: u64,
    /// Test only: fillers take their rank among the fillers as position,
    /// ignoring the keepers' (the negative control of rule 15).
    sabotage_positions: bool,
    /// Test only: every member with an integer score below the set's size
    /// keeps it, duplicates included (the negative control of rule 15's
    /// duplicate clause).
    sabotage_duplicate_keepers: bool,
    /// The rules record is not checked (the negative control of rule 12).
    sabotage_rules: bool,
    /// Test only: a new identity takes over a member name at once (the
    /// negative control of rule 18).
    sabotage_members: bool,
    /// Test only: the filler cache is used whatever size it was computed
    /// for (the negative control of rule 15's cache check).
    sabotage_filler_cache: bool,
    /// Test only: inheritance takes positions whose keepers are present in
    /// the set of `k-1` too (the negative control of rule 19).
    sabotage_inheritance: bool,
}

impl SimStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Scripts executed so far.
    pub fn executed(&self) -> u64 {
        self.executed
    }

    /// Number of keys currently present (expired keys included until touched).
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether the key space is empty.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// **Test only: breaks exclusivity.** With `true`, positions are
    /// computed wrongly from now on: a filler takes its rank among the
    /// fillers instead of the free position of that rank, so it can collide
    /// with a keeper (the negative control of rule 15).
    pub fn sabotage_positions(&mut self, on: bool) {
        self.sabotage_positions = on;
    }

    /// **Test only: breaks exclusivity.** With `true`, every member of a
    /// closed set whose carried score is an integer `p` below the set's size
    /// keeps `p`, even when an earlier member carries the same score (two
    /// versions of an interval reopened by a backward step of the server
    /// clock carry one position twice): both keep it in every later
    /// interval (the negative control of rule 15's duplicate clause).
    pub fn sabotage_duplicate_keepers(&mut self, on: bool) {
        self.sabotage_duplicate_keepers = on;
    }

    /// **Test only: breaks exclusivity.** With `true`, the scripts neither
    /// check nor write the group's rules record (rule 12): workers with
    /// other rules count themselves alone.
    pub fn sabotage_rules(&mut self, on: bool) {
        self.sabotage_rules = on;
    }

    /// A restart without persistence: every key is gone.
    pub fn flush(&mut self) {
        self.keys.clear();
    }

    /// Runs the registration script of `mode` at server time `now_us`
    /// (microseconds since the Unix epoch) with `keys` and `args` as a
    /// [`lease_core::Transmit`] carries them (`KEYS` and `ARGV`, in order);
    /// returns the script's reply. `Arrival` reads the first three keys;
    /// `Ranked` takes all [`lease_core::KEY_COUNT`] (as the script does, it
    /// answers a refusal or a wrong-interval reply before it looks at the
    /// key count, and fails after the prelude, whose only write, the rules
    /// record when it is missing, stays).
    pub fn execute(
        &mut self,
        mode: Mode,
        now_us: i64,
        keys: &[&str],
        args: &[String],
    ) -> Result<Vec<i64>, StoreError> {
        self.executed += 1;
        let rules_key = *keys.get(2).ok_or(StoreError::KeyCount)?;
        let interval_ms = int_arg(args, 0, "interval")?;
        if interval_ms <= 0 {
            return Err(StoreError::BadArguments("interval"));
        }
        let rules = args.get(3).ok_or(StoreError::BadArguments("rules"))?;
        let sec = now_us.div_euclid(1_000_000);
        let usec = now_us.rem_euclid(1_000_000);
        let k = (sec * 1000 + usec / 1000).div_euclid(interval_ms);
        // The group's rules (rule 12): checked before anything is written.
        self.expire(rules_key, now_us);
        match self.keys.get(rules_key).map(|e| &e.value) {
            Some(Value::Text(recorded)) if recorded != rules && !self.sabotage_rules => {
                let mut reply = vec![2, k, sec, usec];
                reply.extend(recorded_fields(recorded));
                return Ok(reply);
            }
            Some(Value::Text(_)) | None => {}
            Some(_) => return Err(StoreError::WrongType),
        }
        // `k ~= tonumber(ARGV[3])`: what is not a number is never k.
        if args.get(2).and_then(|a| lua_number(a)) != Some(k as f64) {
            return Ok(vec![0, k, sec, usec]);
        }
        // The prelude refuses, before any write, a TTL that is not a
        // positive integer as Redis writes one, of at most 15 digits.
        let ttl_ms = args
            .get(1)
            .filter(|a| a.len() <= 15)
            .and_then(|a| redis_integer(a))
            .filter(|&t| t > 0)
            .ok_or(StoreError::BadArguments("ttl"))?;
        // The prelude's last step: the record's first write (kept by Redis
        // when the counting part then fails).
        let recorded = self.write_rules_record(rules_key, rules, now_us, ttl_ms);
        if mode == Mode::Ranked && keys.len() < lease_core::KEY_COUNT {
            // ranked.lua's first line, after the whole prelude (its SET of
            // a missing rules record included).
            return Err(StoreError::KeyCount);
        }
        self.expire(keys[0], now_us);
        self.expire(keys[1], now_us);
        let (status, counted) = match mode {
            Mode::Arrival => (
                1,
                self.count_arrival([keys[0], keys[1], keys[2]], recorded, now_us, ttl_ms)?
                    .to_vec(),
            ),
            Mode::Ranked => {
                let keys: [&str; lease_core::KEY_COUNT] = std::array::from_fn(|i| keys[i]);
                self.count_ranked(keys, args, recorded, k, now_us, ttl_ms)?
            }
        };
        let mut reply = vec![status, k, sec, usec];
        reply.extend(counted);
        Ok(reply)
    }

    /// The rules record's first write: a record that is there holds
    /// exactly these rules (checked before), and the counting part renews
    /// it (`refresh_rules`); otherwise SET writes it. Returns whether it
    /// was there.
    fn write_rules_record(&mut self, key: &str, rules: &str, now_us: i64, ttl_ms: i64) -> bool {
        let recorded = self.keys.contains_key(key);
        if !recorded {
            self.keys.insert(
                key.to_owned(),
                Entry {
                    value: Value::Text(rules.to_owned()),
                    expires_at: now_us.saturating_add(ttl_ms.saturating_mul(1000)),
                },
            );
        }
        recorded
    }

    /// Arrival's count: INCR of `k`'s counter; replies `x - 1` and the
    /// count of `k-1` (-1 when it is gone).
    fn count_arrival(
        &mut self,
        keys: [&str; 3],
        recorded: bool,
        now_us: i64,
        ttl_ms: i64,
    ) -> Result<[i64; 2], StoreError> {
        if recorded {
            self.pexpire(keys[2], now_us, ttl_ms);
        }
        let entry = self.keys.entry(keys[0].to_owned()).or_insert(Entry {
            value: Value::Counter(0),
            expires_at: 0,
        });
        let Value::Counter(x) = &mut entry.value else {
            return Err(StoreError::WrongType);
        };
        *x += 1;
        let x = *x;
        self.pexpire(keys[0], now_us, ttl_ms);
        let prev = match self.keys.get(keys[1]).map(|e| &e.value) {
            None => -1,
            Some(Value::Counter(c)) => *c,
            Some(_) => return Err(StoreError::WrongType),
        };
        Ok([x - 1, prev])
    }

    /// `PEXPIRE key ttl_ms`: a TTL of zero or less deletes the key, as
    /// Redis does with an expiry time already past.
    fn pexpire(&mut self, key: &str, now_us: i64, ttl_ms: i64) {
        if ttl_ms <= 0 {
            self.keys.remove(key);
        } else if let Some(entry) = self.keys.get_mut(key) {
            entry.expires_at = now_us.saturating_add(ttl_ms.saturating_mul(1000));
        }
    }

    fn expire(&mut self, key: &str, now_us: i64) {
        if self.keys.get(key).is_some_and(|e| e.expires_at <= now_us) {
            self.keys.remove(key);
        }
    }

    /// A failover that lost acknowledged writes: each registration counted in
    /// the keys `keys` is lost with probability `p` (the counter drops, or
    /// the member disappears). Outside the guarantee when it hits two
    /// consecutive intervals; the simulator uses it to show that limit.
    pub fn lose_writes(&mut self, keys: &[String], mut lose: impl FnMut() -> bool) -> u64 {
        let mut lost = 0;
        for key in keys {
            let Some(entry) = self.keys.get_mut(key) else {
                continue;
            };
            match &mut entry.value {
                Value::Counter(c) => {
                    let before = *c;
                    *c = (0..before).filter(|_| !lose()).count() as i64;
                    lost += (before - *c) as u64;
                }
                Value::Set(set) => {
                    let before = set.len();
                    set.retain(|| !lose());
                    lost += (before - set.len()) as u64;
                }
                Value::Text(_) | Value::Hash(_) => {}
            }
        }
        lost
    }

    /// The raw content of a key, for inspection in tests: a counter's value,
    /// or a sorted set's members in order.
    pub fn peek(&self, key: &str) -> Option<Peek> {
        self.keys.get(key).map(|e| match &e.value {
            Value::Counter(c) => Peek::Counter(*c),
            Value::Set(s) => Peek::Members(s.iter().map(|(_, m)| m.to_owned()).collect()),
            Value::Text(t) => Peek::Text(t.clone()),
            Value::Hash(h) => Peek::Fields(h.clone().into_iter().collect()),
        })
    }

    /// A sorted set's `(score, member)` pairs in Redis order, for inspection
    /// in tests (`None` if the key is missing or holds another type).
    pub fn scores(&self, key: &str) -> Option<Vec<(f64, String)>> {
        match &self.keys.get(key)?.value {
            Value::Set(set) => Some(set.to_vec()),
            _ => None,
        }
    }

    /// The server time (microseconds) at which a key expires, for
    /// inspection in tests; every key the scripts write has one.
    pub fn expires_at(&self, key: &str) -> Option<i64> {
        self.keys.get(key).map(|e| e.expires_at)
    }

    /// The names of the keys present (expired keys included until touched),
    /// sorted.
    pub fn key_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.keys.keys().cloned().collect();
        names.sort();
        names
    }
}

/// Scores of returnees start here (`2^32`), after every carried position.
const RETURNEE: f64 = 4_294_967_296.0;
/// A newcomer's score (`2^40`), after every returnee.
const NEWCOMER: f64 = 1_099_511_627_776.0;
/// What a reservation adds to the score it carries (rule 19): base scores
/// end in `.0` or `.5`, reservations in `.25` or `.75`.
const RESERVED: f64 = 0.25;

/// Test-only ways of computing rule 15's positions wrongly (negative
/// controls).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct PositionSabotage {
    /// A filler takes its rank among the fillers, ignoring the keepers'.
    fillers_ignore_keepers: bool,
    /// Every member carrying a position `p < s` keeps `p`, duplicates
    /// included.
    duplicates_keep: bool,
}

/// The position a score carries in a set of size `s`, if it carries one
/// below `s` (rule 15, revision 3): an integer `p`, or `p + 0.25` (a
/// reservation of `p`), `0 <= p < s`; as `ranked.lua`'s `carried`.
fn carried(score: f64, s: usize) -> Option<usize> {
    let p = score.floor();
    let frac = score - p;
    (p >= 0.0 && p < s as f64 && (frac == 0.0 || frac == RESERVED)).then_some(p as usize)
}

/// Whether `score` carries a position a member of a set of size `s` can
/// keep.
fn keepable(score: f64, s: usize) -> bool {
    carried(score, s).is_some()
}

/// Rule 19: whether a score is a reservation's (`ranked.lua`'s `reserved`).
fn is_reserved(score: f64) -> bool {
    let frac = score - score.floor();
    frac == RESERVED || frac == 0.5 + RESERVED
}

/// A score without its reservation mark (`ranked.lua`'s `base`): positions
/// order members by base score, ties by member, so a registration that
/// overwrites its own reservation changes no position.
fn base(score: f64) -> f64 {
    if is_reserved(score) {
        score - RESERVED
    } else {
        score
    }
}

/// Whether the member at `rank` of `set` (in the order positions use: by
/// base score, ties by member), with `score`, is the first member carrying
/// its position (every member with a lower base comes before it).
fn first_carrying(set: &[(f64, String)], rank: usize, score: f64) -> bool {
    set.partition_point(|(sc, _)| base(*sc) < score.floor()) == rank
}

/// Whether a member with `score` of a set of size `s` keeps the position it
/// carries (rule 15): `first` says whether it is the first member carrying
/// it in Redis order; under the duplicate-keepers sabotage every member
/// carrying a position keeps it.
fn keeps(score: f64, s: usize, first: bool, sabotage: PositionSabotage) -> bool {
    keepable(score, s) && (sabotage.duplicates_keep || first)
}

/// Rule 15, as `ranked.lua` computes it: the position of `token` in the
/// closed set `set` (its counted members by base score, ties by member) of
/// size `s`. The first member carrying a
/// position `p < s` (score `p` or `p + 0.25`) keeps `p`; the others, in the
/// set's order, take the free positions in ascending order, so the
/// positions are a permutation of `0..s`. The script tries the position the
/// worker sent first (its score in a settled group); that only picks its
/// path, so it is not an input here.
fn hole_filled(set: &[(f64, String)], token: &str, sabotage: PositionSabotage) -> Option<usize> {
    let s = set.len();
    let rank = set.iter().position(|(_, m)| m == token)?;
    let score = set[rank].0;
    if sabotage.duplicates_keep {
        return hole_filled_keeping_duplicates(set, rank, sabotage.fillers_ignore_keepers);
    }
    if let Some(p) = carried(score, s)
        && first_carrying(set, rank, score)
    {
        return Some(p);
    }
    let mut kept = vec![false; s];
    let mut filler_rank = None;
    let mut fillers = 0;
    for (i, (sc, _)) in set.iter().enumerate() {
        match carried(*sc, s) {
            Some(p) if !kept[p] => kept[p] = true,
            _ => {
                if i == rank {
                    filler_rank = Some(fillers);
                }
                fillers += 1;
            }
        }
    }
    let j = filler_rank?;
    if sabotage.fillers_ignore_keepers {
        return (j < s).then_some(j);
    }
    (0..s).filter(|&p| !kept[p]).nth(j)
}

/// Rule 15 without the duplicate clause (the negative control of
/// [`SimStore::sabotage_duplicate_keepers`]): every member carrying a
/// position `p < s` keeps `p`, so two members carrying one position share
/// it; a filler takes the free position of its rank among the members with
/// scores of `s` or more.
fn hole_filled_keeping_duplicates(
    set: &[(f64, String)],
    rank: usize,
    fillers_ignore_keepers: bool,
) -> Option<usize> {
    let s = set.len();
    let score = set[rank].0;
    if let Some(p) = carried(score, s) {
        return Some(p);
    }
    let in_range = |sc: f64| sc >= 0.0 && sc < s as f64;
    let keepers = set.iter().filter(|(sc, _)| in_range(*sc)).count();
    let kept: Vec<usize> = set.iter().filter_map(|(sc, _)| carried(*sc, s)).collect();
    let j = rank.checked_sub(keepers)?;
    if fillers_ignore_keepers {
        return (j < s).then_some(j);
    }
    (0..s).filter(|p| !kept.contains(p)).nth(j)
}

/// A refusal's four fields from a recorded rules record, as the script's
/// `string.match(rules, '^(%d+):(%d+):(%a+):(%a+)$')` reads them: version,
/// interval, mode code (0 arrival, 1 ranked), mapping code (0 modulo, 1
/// consistent); `-1` for what cannot be read.
fn recorded_fields(record: &str) -> [i64; 4] {
    let parts: Vec<&str> = record.split(':').collect();
    // `tonumber` gives a double, which Redis turns into an integer reply
    // with a C cast: digits beyond 2^53 round, and a value of 2^63 or more
    // is out of range, which x86-64 answers with i64::MIN (other machines
    // saturate, as Rust's `as` does).
    let number = |s: &str| {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse::<f64>().ok())
            .flatten()
            .map(|x| {
                if cfg!(target_arch = "x86_64") && x >= 9_223_372_036_854_775_808.0 {
                    i64::MIN
                } else {
                    x as i64
                }
            })
    };
    let word = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphabetic());
    let &[v, l, m, p] = parts.as_slice() else {
        return [-1; 4];
    };
    let (Some(v), Some(l)) = (number(v), number(l)) else {
        return [-1; 4];
    };
    if !word(m) || !word(p) {
        return [-1; 4];
    }
    let code = |s: &str| match s {
        "arrival" | "modulo" => 0,
        "ranked" | "consistent" => 1,
        _ => -1,
    };
    [v, l, code(m), code(p)]
}

/// A string as the scripts' `tonumber` reads it (Lua 5.1 over C's
/// `strtod`): a decimal number (exponent, `inf` and `nan` included) or a
/// hexadecimal integer, with optional spaces around; `None` for anything
/// else. Hexadecimal fractions, which `strtod` also reads, are left out: no
/// client sends them.
fn lua_number(text: &str) -> Option<f64> {
    // C's isspace: space, \t, \n, \v, \f, \r.
    let t = text.trim_matches(|c: char| matches!(c, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r'));
    let (negative, digits) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    if let Some(hex) = digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        if hex.is_empty() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let value = hex.bytes().fold(0.0_f64, |acc, b| {
            acc * 16.0 + f64::from((b as char).to_digit(16).unwrap_or(0))
        });
        return Some(if negative { -value } else { value });
    }
    // Rust's grammar for f64 is strtod's decimal one: sign, digits with an
    // optional point and exponent, or inf, infinity, nan in any case.
    t.parse().ok()
}

/// A string as Redis reads an integer argument (`string2ll`): an optional
/// minus sign and digits without a leading zero, within `i64`.
fn redis_integer(text: &str) -> Option<i64> {
    let digits = text.strip_prefix('-').unwrap_or(text);
    let canonical = digits == "0" || digits.bytes().next().is_some_and(|b| b != b'0');
    if !canonical || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// Argument `i` of a script as an integer, or what it should have been.
fn int_arg(args: &[String], i: usize, what: &'static str) -> Result<i64, StoreError> {
    args.get(i)
        .and_then(|a| a.parse::<i64>().ok())
        .ok_or(StoreError::BadArguments(what))
}

/// A key's content, as [`SimStore::peek`] shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Peek {
    /// An `INCR` counter.
    Counter(i64),
    /// Sorted-set members in rank order.
    Members(Vec<String>),
    /// A string (the group's rules record).
    Text(String),
    /// A hash's fields and values, by field (the group's member record).
    Fields(Vec<(String, String)>),
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: i64 = 300;
    /// The key TTL a Ranked worker sends (`5L`) and an Arrival one (`3L`).
    const TTL: i64 = 5 * L;
    const ARRIVAL_TTL: i64 = 3 * L;
    const RULES: &str = "3:300:ranked:modulo";
    const CONSISTENT: &str = "3:300:ranked:consistent";
    const ARRIVAL: &str = "1:300:arrival:modulo";

    /// Server time `ms` into interval `k`, in microseconds.
    fn at(k: i64, ms: i64) -> i64 {
        (k * L + ms) * 1000
    }

    fn set(k: i64) -> String {
        format!("{{g}}:{k}")
    }

    fn fillers(k: i64) -> String {
        format!("{{g}}:{k}:fillers")
    }

    /// A registration's eight keys for interval `k`, as a worker sends them.
    fn keys(k: i64) -> Vec<String> {
        vec![
            set(k),
            set(k - 1),
            "{g}:rules".into(),
            "{g}:members".into(),
            fillers(k - 1),
            set(k + 1),
            set(k - 2),
            fillers(k),
        ]
    }

    /// A leave's eight keys naming interval `c`, as a worker sends them
    /// (the script reads the first seven).
    fn leave_keys(c: i64) -> Vec<String> {
        vec![
            set(c),
            set(c + 1),
            "{g}:rules".into(),
            set(c + 2),
            fillers(c),
            fillers(c + 1),
            fillers(c + 2),
            "{g}:members".into(),
        ]
    }

    fn refs(keys: &[String]) -> Vec<&str> {
        keys.iter().map(String::as_str).collect()
    }

    /// A Ranked registration's nine arguments, anonymous: `[L, 5L, k,
    /// rules, token, sent, '', older position, older size]`.
    fn ranked_args(k: i64, rules: &str, token: &str, sent: &str, older: (i64, i64)) -> Vec<String> {
        vec![
            L.to_string(),
            TTL.to_string(),
            k.to_string(),
            rules.to_owned(),
            token.to_owned(),
            sent.to_owned(),
            String::new(),
            older.0.to_string(),
            older.1.to_string(),
        ]
    }

    fn arrival_args(k: i64) -> Vec<String> {
        vec![
            L.to_string(),
            ARRIVAL_TTL.to_string(),
            k.to_string(),
            ARRIVAL.to_owned(),
        ]
    }

    /// A counted registration of `token` in `k`, `ms` into the interval,
    /// under `rules` with the older pair `older`: the reply's fields after
    /// the server time (position and size of `k-1`, registered, position
    /// and size of `k-2`, inherited positions).
    fn register_as(
        s: &mut SimStore,
        rules: &str,
        k: i64,
        ms: i64,
        token: &str,
        sent: &str,
        older: (i64, i64),
    ) -> Vec<i64> {
        let r = s
            .execute(
                Mode::Ranked,
                at(k, ms),
                &refs(&keys(k)),
                &ranked_args(k, rules, token, sent, older),
            )
            .unwrap();
        assert_eq!(r[..2], [1, k], "{r:?}");
        r[4..].to_vec()
    }

    /// [`register_as`] under modulo, with no older pair.
    fn register(s: &mut SimStore, k: i64, ms: i64, token: &str, sent: &str) -> Vec<i64> {
        register_as(s, RULES, k, ms, token, sent, (-1, -1))
    }

    /// The leave script naming `c`, at server time `now_us`.
    fn leave(s: &mut SimStore, now_us: i64, c: i64, token: &str) -> Vec<i64> {
        let args = [
            L.to_string(),
            c.to_string(),
            RULES.to_owned(),
            token.to_owned(),
        ];
        s.execute_leave(now_us, &refs(&leave_keys(c)), &args)
            .unwrap()
    }

    /// `n` tokens, in ascending (Redis) order.
    fn tokens(n: usize) -> Vec<String> {
        (0..n).map(|x| format!("{x:032x}")).collect()
    }

    fn scored(pairs: &[(f64, &String)]) -> Option<Vec<(f64, String)>> {
        Some(pairs.iter().map(|(s, m)| (*s, (*m).clone())).collect())
    }

    #[test]
    fn wrong_interval_writes_nothing() {
        let mut s = SimStore::new();
        let r = s
            .execute(Mode::Arrival, at(10, 5), &refs(&keys(9)), &arrival_args(9))
            .unwrap();
        assert_eq!(r, vec![0, 10, 3, 5000]);
        let args = ranked_args(9, RULES, &"a".repeat(32), "-1", (-1, -1));
        let r = s
            .execute(Mode::Ranked, at(10, 5), &refs(&keys(9)), &args)
            .unwrap();
        assert_eq!(r, vec![0, 10, 3, 5000]);
        assert!(s.is_empty());
    }

    #[test]
    fn arrival_counts_by_arrival() {
        let mut s = SimStore::new();
        // Workers declare eight keys; the script reads the first three.
        let eight = keys(10);
        let r1 = s
            .execute(Mode::Arrival, at(10, 1), &refs(&eight), &arrival_args(10))
            .unwrap();
        let r2 = s
            .execute(
                Mode::Arrival,
                at(10, 2),
                &refs(&eight[..3]),
                &arrival_args(10),
            )
            .unwrap();
        assert_eq!(r1[4..], [0, -1]);
        assert_eq!(r2[4..], [1, -1]);
        let r3 = s
            .execute(
                Mode::Arrival,
                at(11, 1),
                &refs(&keys(11)),
                &arrival_args(11),
            )
            .unwrap();
        assert_eq!(r3[4..], [0, 2]);
        assert_eq!(s.key_names(), ["{g}:10", "{g}:11", "{g}:rules"]);
        // Keys expire 3 intervals after their last write.
        s.execute(
            Mode::Arrival,
            at(14, 10),
            &refs(&keys(14)),
            &arrival_args(14),
        )
        .unwrap();
        assert_eq!(s.peek("{g}:10"), Some(Peek::Counter(2)));
        assert_eq!(s.expires_at("{g}:10"), Some(at(10, 2) + ARRIVAL_TTL * 1000));
        s.expire("{g}:10", at(10, 2) + ARRIVAL_TTL * 1000);
        assert_eq!(s.peek("{g}:10"), None);
    }

    /// Scores (revision 3): a newcomer `2^40`, a returnee `2^32 + p +
    /// 0.5`, a member of closed `k-1` its position there; each registration
    /// also reserves its place in `k+1` with the same score plus 0.25.
    #[test]
    fn ranked_carries_order_and_reserves_the_next_interval() {
        let mut s = SimStore::new();
        let (a, b, c) = ("a".repeat(32), "b".repeat(32), "c".repeat(32));
        // Newcomers (no closed set 9): position -1, size 0, nothing else
        // read.
        for t in [&c, &a, &b] {
            assert_eq!(register(&mut s, 10, 1, t, "-1"), [-1, 0, -1, -1, -1]);
        }
        // A repeat sending the same writes the same score: nothing changes.
        assert_eq!(register(&mut s, 10, 2, &a, "-1"), [-1, 0, -1, -1, -1]);
        assert_eq!(
            s.scores("{g}:10"),
            scored(&[(NEWCOMER, &a), (NEWCOMER, &b), (NEWCOMER, &c)])
        );
        let reserved = NEWCOMER + RESERVED;
        assert_eq!(
            s.scores("{g}:11"),
            scored(&[(reserved, &a), (reserved, &b), (reserved, &c)]),
            "each reserved its place in 11"
        );
        // A repeat sending a position counts as a returnee's: the ZADD (no
        // NX) rewrites its score in 10, the reservation (NX) stays.
        assert_eq!(register(&mut s, 10, 3, &a, "0"), [-1, 0, -1, -1, -1]);
        assert_eq!(
            s.scores("{g}:10"),
            scored(&[(RETURNEE + 0.5, &a), (NEWCOMER, &b), (NEWCOMER, &c)])
        );
        assert_eq!(
            s.scores("{g}:11"),
            scored(&[(reserved, &a), (reserved, &b), (reserved, &c)])
        );
        // c registers first in 11. No score of closed 10 carries a position
        // below 3: all three are fillers and take 0, 1, 2 in the set's
        // order (a, b, c). Registered (c's entry in 10 is a registration);
        // closed 9 is read for its older pair: missing, size 0.
        assert_eq!(register(&mut s, 11, 1, &c, "0.01"), [2, 3, 1, -1, 0]);
        // The first filler wrote every filler's position, expiring with 10.
        assert_eq!(
            s.peek(&fillers(10)),
            Some(Peek::Fields(vec![
                ("#".into(), "3".into()),
                (a.clone(), "0".into()),
                (b.clone(), "1".into()),
                (c.clone(), "2".into()),
            ]))
        );
        let created = Some(at(10, 1) + TTL * 1000);
        assert_eq!(s.expires_at("{g}:10"), created);
        assert_eq!(s.expires_at(&fillers(10)), created);
        assert_eq!(register(&mut s, 11, 2, &a, "0.9"), [0, 3, 1, -1, 0]);
        // A newcomer in 11 lands after both, before b's reservation.
        let d = "0".repeat(32);
        assert_eq!(register(&mut s, 11, 3, &d, "-1"), [-1, 3, -1, -1, -1]);
        assert_eq!(
            s.peek("{g}:11"),
            Some(Peek::Members(vec![a.clone(), c.clone(), d.clone(), b]))
        );
        assert_eq!(
            s.scores("{g}:12"),
            scored(&[(0.25, &a), (2.25, &c), (NEWCOMER + RESERVED, &d)])
        );
    }

    /// Rule 15: when a member leaves, the others keep their positions and
    /// only the one whose position is now out of range moves, into the hole;
    /// a returnee and a newcomer fill what is left, in that order.
    #[test]
    fn positions_fill_holes() {
        let t = tokens(6);
        let mut s = SimStore::new();
        for tok in &t[..5] {
            register(&mut s, 10, 1, tok, "-1");
        }
        // In 11, t2 leaves before registering: its reservation goes. The
        // others, fillers of closed 10 (all newcomers), take 0..5 in order.
        assert_eq!(leave(&mut s, at(11, 1), 11, &t[2]), [1, 11, 3, 301_000, 1]);
        let got: Vec<Vec<i64>> = [0, 1, 3, 4]
            .iter()
            .map(|&i| register(&mut s, 11, 2, &t[i], "-1")[..2].to_vec())
            .collect();
        assert_eq!(got, [[0, 5], [1, 5], [3, 5], [4, 5]]);
        // Closed 11 has four members: t0, t1, t3 keep 0, 1, 3; t4 (4 >= 4)
        // moves into the hole, 2.
        let got: Vec<Vec<i64>> = [0, 1, 3, 4]
            .iter()
            .map(|&i| register(&mut s, 12, 1, &t[i], "-1")[..2].to_vec())
            .collect();
        assert_eq!(got, [[0, 4], [1, 4], [3, 4], [2, 4]]);
        // In 12 a returnee t2 (last position 2) and a newcomer t5 join.
        assert_eq!(register(&mut s, 12, 2, &t[2], "2"), [-1, 4, -1, -1, -1]);
        assert_eq!(register(&mut s, 12, 2, &t[5], "-1"), [-1, 4, -1, -1, -1]);
        assert_eq!(
            s.scores("{g}:12"),
            scored(&[
                (0.0, &t[0]),
                (1.0, &t[1]),
                (2.0, &t[4]),
                (3.0, &t[3]),
                (RETURNEE + 2.5, &t[2]),
                (NEWCOMER, &t[5]),
            ])
        );
        // Closed 12 (size 6): the four keep 0..3; the returnee takes 4 and
        // the newcomer 5.
        let got: Vec<Vec<i64>> = [2, 5, 4]
            .iter()
            .map(|&i| register(&mut s, 13, 1, &t[i], "-1")[..2].to_vec())
            .collect();
        assert_eq!(got, [[4, 6], [5, 6], [2, 6]]);
    }

    /// Rule 15's duplicate clause: of two members carrying one position
    /// (two versions of a reopened interval), only the first in the set's
    /// order keeps it, a reservation (`p + 0.25`) carrying `p` as a
    /// registration does; the later one is a filler, before the fillers
    /// with scores of the size or more. The expected positions are worked
    /// out by hand in the comments; `leave_script.rs` checks `ranked.lua`
    /// on the same set.
    #[test]
    fn of_two_members_carrying_one_position_only_the_first_keeps_it() {
        let t = tokens(6);
        // Size 6, in Redis order: t1 carries 0 and t3 reserved 0; t0 and t2
        // reserved 3 (a tie, by member); t5 carried 9 (past the size); t4
        // is a returnee whose last position was 1.
        let set: Vec<(f64, String)> = [
            (0.0, &t[1]),
            (0.25, &t[3]),
            (3.25, &t[0]),
            (3.25, &t[2]),
            (9.0, &t[5]),
            (RETURNEE + 1.5, &t[4]),
        ]
        .into_iter()
        .map(|(s, m)| (s, m.clone()))
        .collect();
        let positions = |sabotage| -> Vec<Option<usize>> {
            t.iter()
                .map(|tok| hole_filled(&set, tok, sabotage))
                .collect()
        };
        // Keepers t1 (0) and t0 (3); free 1, 2, 4, 5 go to the fillers in
        // order: t3, t2, t5, t4.
        let right = positions(PositionSabotage::default());
        assert_eq!(right, [3, 0, 2, 1, 5, 4].map(Some));
        let mut sorted: Vec<usize> = right.iter().flatten().copied().collect();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..6).collect::<Vec<_>>(), "a permutation");
        // Without the clause, t2 and t3 keep 3 and 0 beside t0 and t1, and
        // the two fillers take the free 1 and 2.
        let shared = positions(PositionSabotage {
            duplicates_keep: true,
            ..PositionSabotage::default()
        });
        assert_eq!(shared, [3, 0, 3, 0, 2, 1].map(Some));
        assert_eq!(
            hole_filled(&set, &"f".repeat(32), PositionSabotage::default()),
            None
        );
    }

    /// A set's TTL and the rules record's renewal come from the ZADD that
    /// creates the set: the first registration's in `k` (and its
    /// reservation's in `k+1`), then the reservation of each interval's
    /// first registration, which creates `k+1`.
    #[test]
    fn only_the_writes_that_create_a_set_set_ttls() {
        let mut s = SimStore::new();
        let (a, b) = ("a".repeat(32), "b".repeat(32));
        register(&mut s, 10, 1, &a, "-1");
        let created = Some(at(10, 1) + TTL * 1000);
        assert_eq!(s.expires_at("{g}:10"), created);
        assert_eq!(
            s.expires_at("{g}:11"),
            created,
            "the reservation created 11"
        );
        assert_eq!(s.expires_at("{g}:rules"), created, "written with the TTL");
        // Another member and a repeat create nothing: no TTL moves.
        register(&mut s, 10, 50, &b, "-1");
        register(&mut s, 10, 60, &a, "-1");
        for key in ["{g}:10", "{g}:11", "{g}:rules"] {
            assert_eq!(s.expires_at(key), created, "{key}");
        }
        // b in 11 (a filler of closed 10: a 0, b 1): its registration
        // lands in the set a reservation created, which keeps its TTL; its
        // reservation creates 12, which renews the record.
        assert_eq!(register(&mut s, 11, 1, &b, "1"), [1, 2, 1, -1, 0]);
        let renewed = Some(at(11, 1) + TTL * 1000);
        assert_eq!(s.expires_at("{g}:11"), created);
        assert_eq!(s.expires_at("{g}:12"), renewed);
        assert_eq!(s.expires_at("{g}:rules"), renewed);
        // A TTL that is not a positive integer writes nothing.
        for ttl in ["0", "-5", "+5", "007", "1.5", "1234567890123456"] {
            let mut bad = ranked_args(13, RULES, &a, "0", (-1, -1));
            bad[1] = ttl.to_owned();
            let r = s.execute(Mode::Ranked, at(13, 1), &refs(&keys(13)), &bad);
            assert_eq!(r, Err(StoreError::BadArguments("ttl")), "{ttl}");
            assert_eq!(s.peek("{g}:13"), None, "{ttl}");
            assert_eq!(s.peek("{g}:14"), None, "{ttl}");
        }
        assert_eq!(s.expires_at("{g}:rules"), renewed);
    }

    #[test]
    fn bad_arguments_and_wrong_types_are_errors() {
        let mut s = SimStore::new();
        assert!(
            s.execute(Mode::Arrival, at(10, 1), &["a", "b", "c"], &[])
                .is_err()
        );
        s.execute(
            Mode::Arrival,
            at(10, 1),
            &refs(&keys(10)),
            &arrival_args(10),
        )
        .unwrap();
        // A Ranked registration (with the recorded rules) reading the
        // counter of 10 as its closed set.
        let args = ranked_args(11, ARRIVAL, "x", "2", (-1, -1));
        let r = s.execute(Mode::Ranked, at(11, 1), &refs(&keys(11)), &args);
        assert_eq!(r, Err(StoreError::WrongType));
    }

    /// Ranked's registration takes eight keys and the leave script seven: a
    /// registration with fewer fails after the prelude (a refusal or a
    /// wrong-interval answer comes first, and the prelude's write of a
    /// missing rules record stays, as Redis keeps a script's writes before
    /// an error reply); a leave with fewer fails before anything.
    #[test]
    fn fewer_keys_than_the_script_takes_is_an_error_after_the_prelude() {
        let mut s = SimStore::new();
        let tok = "a".repeat(32);
        let eight = keys(10);
        let args = ranked_args(10, RULES, &tok, "-1", (-1, -1));
        let r = s.execute(Mode::Ranked, at(11, 1), &refs(&eight[..3]), &args);
        assert_eq!(r, Ok(vec![0, 11, 3, 301_000]), "the wrong interval first");
        assert!(s.is_empty());
        let r = s.execute(Mode::Ranked, at(10, 1), &refs(&eight[..3]), &args);
        assert_eq!(r, Err(StoreError::KeyCount));
        assert_eq!(s.key_names(), ["{g}:rules"], "the prelude wrote the record");
        assert_eq!(s.peek("{g}:rules"), Some(Peek::Text(RULES.to_owned())));
        // Five keys, as revision 2 declared: the same error.
        let r = s.execute(Mode::Ranked, at(10, 2), &refs(&eight[..5]), &args);
        assert_eq!(r, Err(StoreError::KeyCount));
        // Seven, without the filler cache of k: the same error.
        let r = s.execute(Mode::Ranked, at(10, 2), &refs(&eight[..7]), &args);
        assert_eq!(r, Err(StoreError::KeyCount));
        // Other rules: refused first.
        let mut other = args.clone();
        other[3] = "2:300:ranked:modulo".into();
        let r = s.execute(Mode::Ranked, at(10, 3), &refs(&eight[..3]), &other);
        assert_eq!(r, Ok(vec![2, 10, 3, 3000, 3, 300, 1, 0]));
        let leave_args = [L.to_string(), "10".into(), RULES.into(), tok.clone()];
        let r = s.execute_leave(at(10, 4), &refs(&leave_keys(10)[..3]), &leave_args);
        assert_eq!(r, Err(StoreError::KeyCount));
        assert_eq!(s.key_names(), ["{g}:rules"]);
        // With eight, counted.
        assert_eq!(register(&mut s, 10, 5, &tok, "-1"), [-1, 0, -1, -1, -1]);
    }

    #[test]
    fn other_rules_are_refused_and_write_nothing_until_the_record_expires() {
        let mut s = SimStore::new();
        register(&mut s, 10, 1, &"a".repeat(32), "2");
        assert_eq!(s.peek("{g}:rules"), Some(Peek::Text(RULES.to_owned())));
        // A worker at 600 ms: refused, with the recorded rules as integers.
        let b = "b".repeat(32);
        let other_args = |k: i64| {
            let mut args = ranked_args(k, "3:600:ranked:modulo", &b, "2", (-1, -1));
            args[0] = "600".into();
            args[1] = "3000".into();
            args
        };
        let r = s
            .execute(Mode::Ranked, at(10, 2), &refs(&keys(5)), &other_args(5))
            .unwrap();
        assert_eq!(r[0], 2);
        assert_eq!(r[4..], [3, 300, 1, 0]);
        assert_eq!(s.peek("{g}:5"), None, "nothing written");
        assert_eq!(s.peek("{g}:rules"), Some(Peek::Text(RULES.to_owned())));
        // 5L (the TTL the first registration wrote it with) after it, the
        // record is gone, and the other rules are recorded instead.
        let later = at(10, 1) + TTL * 1000;
        let k6 = (later / 1000) / 600;
        let r = s
            .execute(Mode::Ranked, later, &refs(&keys(k6)), &other_args(k6))
            .unwrap();
        assert_eq!(r[0], 1);
        assert_eq!(
            s.peek("{g}:rules"),
            Some(Peek::Text("3:600:ranked:modulo".into()))
        );
    }

    /// What `tonumber` gives for the last positions the differential test
    /// sends, and how Redis reads its odd TTLs
    /// (`crates/lease-sim/tests/differential.rs` checks the store against
    /// the real scripts with each of them).
    #[test]
    fn numbers_are_read_as_the_script_and_redis_read_them() {
        for (text, number) in [
            ("7", Some(7.0)),
            (" 7", Some(7.0)),
            ("8 ", Some(8.0)),
            ("2.5", Some(2.5)),
            ("1e3", Some(1000.0)),
            ("-3", Some(-3.0)),
            ("0x10", Some(16.0)),
            ("-0x10", Some(-16.0)),
            ("inf", Some(f64::INFINITY)),
            ("x", None),
            ("", None),
            ("0x", None),
            ("1e", None),
        ] {
            assert_eq!(lua_number(text), number, "{text:?}");
        }
        // TTLs as Redis reads an integer argument.
        for (text, ttl) in [
            ("1800000", Some(1_800_000)),
            ("0", Some(0)),
            ("-5", Some(-5)),
            ("+5", None),
            ("007", None),
            ("1800000.0", None),
            ("abc", None),
        ] {
            assert_eq!(redis_integer(text), ttl, "{text:?}");
        }
        // What is not a number is a newcomer, as in the script.
        let mut s = SimStore::new();
        let tok = "a".repeat(32);
        register(&mut s, 10, 1, &tok, "x");
        assert_eq!(s.scores("{g}:10"), scored(&[(NEWCOMER, &tok)]));
        assert_eq!(s.scores("{g}:11"), scored(&[(NEWCOMER + RESERVED, &tok)]));
    }

    #[test]
    fn unreadable_records_refuse_with_minus_ones() {
        assert_eq!(recorded_fields("1:300:ranked:modulo"), [1, 300, 1, 0]);
        assert_eq!(recorded_fields("2:300:arrival:consistent"), [2, 300, 0, 1]);
        assert_eq!(recorded_fields("1:300:ranked:ring"), [1, 300, 1, -1]);
        assert_eq!(recorded_fields("garbage"), [-1; 4]);
        assert_eq!(recorded_fields("1:x:ranked:modulo"), [-1; 4]);
        // Read as doubles, as the script's tonumber does.
        assert_eq!(
            recorded_fields("9007199254740993:300:ranked:modulo"),
            [9_007_199_254_740_992, 300, 1, 0]
        );
    }

    /// Rule 19's reservation: a member that misses one interval is still in
    /// that closed set at its position (its reservation, `p + 0.25`), so
    /// nobody fills its hole; back, it keeps its position and reads
    /// registered = 0 (its entry there was only a reservation). One that
    /// misses two has no place left.
    #[test]
    fn a_reservation_keeps_a_member_that_misses_one_interval_at_its_position() {
        let t = tokens(3);
        let mut s = SimStore::new();
        for tok in &t {
            register(&mut s, 10, 1, tok, "-1");
        }
        // 11: fillers of closed 10 take 0, 1, 2; 12: each keeps its own.
        for (i, tok) in t.iter().enumerate() {
            assert_eq!(register(&mut s, 11, 1, tok, "-1")[..2], [i as i64, 3]);
        }
        for (i, tok) in t.iter().enumerate() {
            let r = register_as(&mut s, RULES, 12, 1, tok, &i.to_string(), (i as i64, 3));
            assert_eq!(r, [i as i64, 3, 1, -1, -1]);
        }
        // 13: t1 misses its registration; t0 and t2 register (their older
        // pair, from their reply in 12: position i of 3 in closed 11).
        for i in [0, 2] {
            let r = register_as(&mut s, RULES, 13, 1, &t[i], &i.to_string(), (i as i64, 3));
            assert_eq!(r, [i as i64, 3, 1, -1, -1]);
        }
        assert_eq!(
            s.scores("{g}:13"),
            scored(&[(0.0, &t[0]), (1.25, &t[1]), (2.0, &t[2])]),
            "t1's reservation from 12 holds position 1 in 13"
        );
        // 14: t1 is back, sending its last position 1 and no older pair
        // (its last reply is from 12). In closed 13 (size 3) it keeps 1,
        // through its reservation: registered = 0. Its older pair is read
        // from closed 12: it keeps 1 there, of 3.
        assert_eq!(register(&mut s, 14, 1, &t[1], "1"), [1, 3, 0, 1, 3]);
        // The same through the set's score (no position sent).
        assert_eq!(register(&mut s, 14, 2, &t[1], "-1"), [1, 3, 0, 1, 3]);
        assert_eq!(
            register_as(&mut s, RULES, 14, 3, &t[0], "0", (0, 3)),
            [0, 3, 1, -1, -1]
        );
        // t2 misses 14: its reservation from 13 keeps it in closed 14.
        assert_eq!(
            s.scores("{g}:14"),
            scored(&[(0.0, &t[0]), (1.0, &t[1]), (2.25, &t[2])])
        );
        assert_eq!(
            s.scores("{g}:15"),
            scored(&[(0.25, &t[0]), (1.25, &t[1])]),
            "registrations reserve: t2 has no place in 15"
        );
        // 15: t1's entry in closed 14 is a registration again.
        assert_eq!(
            register_as(&mut s, RULES, 15, 1, &t[1], "1", (1, 3)),
            [1, 3, 1, -1, -1]
        );
        register_as(&mut s, RULES, 15, 1, &t[0], "0", (0, 3));
        // 16: t2, absent from closed 15, returns as a returnee.
        assert_eq!(register(&mut s, 16, 1, &t[2], "2"), [-1, 2, -1, -1, -1]);
        assert_eq!(
            s.scores("{g}:16").map(|set| set[2].clone()),
            Some((RETURNEE + 2.5, t[2].clone()))
        );
    }

    /// Rule 19's older pair: when a worker does not send its position and
    /// size in closed `k-2` (or sends what is not one: `position >= 0` and
    /// `size > position`), the script reads them: the size always, the
    /// position only a keeper's (a filler's is not in its score). A pair
    /// sent is trusted (under modulo, nothing more is read).
    #[test]
    fn the_older_pair_is_read_from_closed_k_minus_2_when_not_sent() {
        let t = tokens(3);
        let mut s = SimStore::new();
        for tok in &t[..2] {
            register(&mut s, 10, 1, tok, "-1");
        }
        for tok in &t[..2] {
            register(&mut s, 11, 1, tok, "-1");
        }
        // 12: closed 10 holds t0 and t1 as newcomers (fillers): no
        // position, size 2.
        assert_eq!(register(&mut s, 12, 1, &t[0], "0"), [0, 2, 1, -1, 2]);
        assert_eq!(register(&mut s, 12, 1, &t[1], "1"), [1, 2, 1, -1, 2]);
        assert_eq!(register(&mut s, 12, 1, &t[2], "-1"), [-1, 2, -1, -1, -1]);
        // 13: closed 11 = {t0: 0, t1: 1}, both keepers.
        assert_eq!(register(&mut s, 13, 1, &t[0], "0"), [0, 3, 1, 0, 2]);
        // t2 is a filler of closed 12 (2) and absent from 11.
        assert_eq!(register(&mut s, 13, 1, &t[2], "-1"), [2, 3, 1, -1, 2]);
        // Pairs that are not one are read as -1.
        for older in [(5, 2), (1, 1), (-1, 5), (1, -1)] {
            let r = register_as(&mut s, RULES, 13, 2, &t[1], "1", older);
            assert_eq!(r, [1, 3, 1, 1, 2], "{older:?}");
        }
        // The right pair (its reply in 12: position 1 of 2), or a wrong
        // one: trusted, not read.
        for older in [(1, 2), (0, 2), (7, 9)] {
            let r = register_as(&mut s, RULES, 13, 3, &t[1], "1", older);
            assert_eq!(r, [1, 3, 1, -1, -1], "{older:?}");
        }
    }

    /// The script reads closed `k-2` only for a pair the worker did not
    /// send, or for inheritance: a key of another type there fails those
    /// registrations only (after the writes to `k` and `k+1`, which stay).
    #[test]
    fn closed_k_minus_2_is_read_only_when_the_script_reads_it() {
        let mut s = SimStore::new();
        let tok = "a".repeat(32);
        let args = |k: i64, older: (i64, i64)| ranked_args(k, ARRIVAL, &tok, "-1", older);
        let r = s.execute(Mode::Ranked, at(9, 1), &refs(&keys(9)), &args(9, (-1, -1)));
        assert_eq!(r.unwrap()[4..], [-1, 0, -1, -1, -1]);
        // An Arrival counter in 8 (the same rules string).
        s.execute(Mode::Arrival, at(8, 1), &refs(&keys(8)), &arrival_args(8))
            .unwrap();
        let r = s.execute(Mode::Ranked, at(10, 1), &refs(&keys(10)), &args(10, (0, 1)));
        assert_eq!(r.unwrap()[4..], [0, 1, 1, -1, -1]);
        let r = s.execute(
            Mode::Ranked,
            at(10, 2),
            &refs(&keys(10)),
            &args(10, (-1, -1)),
        );
        assert_eq!(r, Err(StoreError::WrongType));
        assert_eq!(s.scores("{g}:11"), scored(&[(0.25, &tok)]));
    }

    /// Four settled workers under `rules`; `crashed` registers last in 12,
    /// the others in 13 and 14, sending the older pairs their replies told
    /// them.
    fn crash(rules: &str, crashed: usize) -> (SimStore, Vec<String>) {
        let t = tokens(4);
        let mut s = SimStore::new();
        for tok in &t {
            register_as(&mut s, rules, 10, 1, tok, "-1", (-1, -1));
        }
        // 11: fillers of closed 10 take 0..4 (closed 9 missing: size 0).
        for (i, tok) in t.iter().enumerate() {
            let r = register_as(&mut s, rules, 11, 1, tok, "-1", (-1, -1));
            assert_eq!(r, [i as i64, 4, 1, -1, 0]);
        }
        for k in 12..=14 {
            for (i, tok) in t.iter().enumerate() {
                if k > 12 && i == crashed {
                    continue;
                }
                let r = register_as(&mut s, rules, k, 1, tok, &i.to_string(), (i as i64, 4));
                // Settled (its own position again, no size shrank): no
                // inheritance read. In 14 the crashed one still counts in
                // closed 13, through its reservation.
                assert_eq!(r, [i as i64, 4, 1, -1, -1], "{k}");
            }
        }
        (s, t)
    }

    /// Rule 19's inheritance, under jump hash: t1 crashes after registering
    /// in 12. Its reservation holds position 1 in closed 13; in closed 14 it
    /// is gone, so in 15 t3 (3 >= 3) fills the hole 1, and inherits
    /// position 1 of closed 13, whose keeper t1 is not in the set of 14.
    /// The survivors t0 and t2 see candidate 3 (at or beyond the new size),
    /// whose keeper t3 is in the set of 14: not inherited.
    #[test]
    fn the_filler_of_a_crashed_members_hole_inherits_its_position() {
        let (mut s, t) = crash(CONSISTENT, 1);
        assert_eq!(
            s.scores("{g}:14"),
            scored(&[(0.0, &t[0]), (2.0, &t[2]), (3.0, &t[3])])
        );
        // [position in 14, size, registered, position in 13 (sent, so not
        // read), size of 13 (read for inheritance), inherited...]
        assert_eq!(
            register_as(&mut s, CONSISTENT, 15, 1, &t[0], "0", (0, 4)),
            [0, 3, 1, -1, 4]
        );
        assert_eq!(
            register_as(&mut s, CONSISTENT, 15, 1, &t[2], "2", (2, 4)),
            [2, 3, 1, -1, 4]
        );
        assert_eq!(
            register_as(&mut s, CONSISTENT, 15, 1, &t[3], "3", (3, 4)),
            [1, 3, 1, -1, 4, 1]
        );
        // Without its pair, t3 reads it (it kept 3 in closed 13): the same.
        assert_eq!(
            register_as(&mut s, CONSISTENT, 15, 2, &t[3], "3", (-1, -1)),
            [1, 3, 1, 3, 4, 1]
        );
        // The negative control: inheriting a present keeper's position.
        s.sabotage_inheritance(true);
        assert_eq!(
            register_as(&mut s, CONSISTENT, 15, 3, &t[0], "0", (0, 4)),
            [0, 3, 1, -1, 4, 3]
        );
        s.sabotage_inheritance(false);
        // Under modulo nothing is inherited, nor is closed 13 read.
        let (mut s, t) = crash(RULES, 1);
        assert_eq!(
            register_as(&mut s, RULES, 15, 1, &t[3], "3", (3, 4)),
            [1, 3, 1, -1, -1]
        );
    }

    /// When the crashed member kept the last position, every survivor
    /// inherits it (it is at the new size, a candidate for all of them).
    #[test]
    fn survivors_inherit_a_crashed_last_members_position() {
        let (mut s, t) = crash(CONSISTENT, 3);
        for (i, tok) in t[..3].iter().enumerate() {
            let r = register_as(
                &mut s,
                CONSISTENT,
                15,
                1,
                tok,
                &i.to_string(),
                (i as i64, 4),
            );
            assert_eq!(r, [i as i64, 3, 1, -1, 4, 3], "{i}");
        }
    }

    /// Rule 19's leave, derived by hand: a member that registered in the
    /// open interval becomes a left entry there (present, not counted) and
    /// loses its reservation; a member with only a reservation there loses
    /// it; a member that processed a reply from the open interval is kept
    /// as a left entry even if its entry there is a reservation (its
    /// registration may have been lost); a repeat changes nothing more.
    #[test]
    fn a_leave_leaves_a_left_entry_after_a_registration_else_removes_the_reservation() {
        let t = tokens(3);
        let mut s = SimStore::new();
        register(&mut s, 10, 1, &t[0], "-1");
        register(&mut s, 10, 1, &t[1], "-1");
        assert_eq!(leave(&mut s, at(10, 5), 10, &t[0]), [1, 10, 3, 5000, 1]);
        assert_eq!(
            s.scores("{g}:10"),
            scored(&[(-1.0, &t[0]), (NEWCOMER, &t[1])]),
            "t0 registered in 10: a left entry"
        );
        assert_eq!(
            s.scores("{g}:11"),
            scored(&[(NEWCOMER + RESERVED, &t[1])]),
            "its reservation went"
        );
        // Again (a retry): a left entry changes nothing more.
        assert_eq!(leave(&mut s, at(10, 6), 10, &t[0]), [1, 10, 3, 6000, 0]);
        assert_eq!(s.scores("{g}:10").map(|set| set.len()), Some(2));
        // t1 leaves in 11 (named 10, executed late), before registering
        // there: its entry in the open 11 is a reservation, and goes (the
        // set empties: the key is gone). Closed 10 is untouched.
        assert_eq!(leave(&mut s, at(11, 5), 10, &t[1]), [1, 11, 3, 305_000, 1]);
        assert_eq!(s.scores("{g}:11"), None);
        assert_eq!(s.scores("{g}:10").map(|set| set.len()), Some(2));
        assert_eq!(leave(&mut s, at(11, 6), 11, &t[1]), [1, 11, 3, 306_000, 0]);
        assert_eq!(s.key_names(), ["{g}:10", "{g}:rules"]);
        // Other rules, or an interval neither named: nothing written.
        let args = [
            L.to_string(),
            "10".into(),
            "3:300:ranked:consistent".into(),
            t[0].clone(),
        ];
        let r = s.execute_leave(at(11, 7), &refs(&leave_keys(10)), &args);
        assert_eq!(r, Ok(vec![2, 11, 3, 307_000]));
        assert_eq!(leave(&mut s, at(11, 7), 9, &t[0]), [0, 11, 3, 307_000]);
        // t2, a newcomer in 11, registers in 12: closed 11 counts it alone
        // (t1's reservation went), a filler at 0, and it writes the cache
        // of 11. A backward step of the server clock reopens 11 (rule 10)
        // and t2's leave runs there: its entry in 11 is a registration, so
        // it becomes a left entry, and the cache computed from 11 goes.
        register(&mut s, 11, 8, &t[2], "-1");
        // Position 0 of 1, registered, nothing of closed 10 kept (t1 is a
        // newcomer there, counted: the size 1 read for its unknown pair).
        assert_eq!(register(&mut s, 12, 8, &t[2], "-1"), [0, 1, 1, -1, 1]);
        assert!(s.peek(&fillers(11)).is_some());
        assert_eq!(leave(&mut s, at(11, 9), 11, &t[2]), [1, 11, 3, 309_000, 1]);
        assert_eq!(s.peek(&fillers(11)), None);
        assert_eq!(s.scores("{g}:11"), scored(&[(-1.0, &t[2])]));
        assert_eq!(s.closed_set_writes(), 0);
    }

    /// Rule 19: a worker that processed a reply from the open interval
    /// (`ARGV[5]`) is kept there as a left entry even when its entry is a
    /// reservation: a failover may have lost its registration, and its
    /// lease from that interval lives on.
    #[test]
    fn a_leave_after_a_processed_reply_keeps_a_reserved_entry_as_left() {
        let t = tokens(1);
        let mut s = SimStore::new();
        register(&mut s, 10, 1, &t[0], "-1");
        let args = |replied: i64| {
            [
                L.to_string(),
                "11".to_owned(),
                RULES.to_owned(),
                t[0].clone(),
                replied.to_string(),
            ]
        };
        let mut other = s.clone();
        // No reply from 11 processed: the reservation in 11 goes.
        let r = other.execute_leave(at(11, 5), &refs(&leave_keys(11)), &args(10));
        assert_eq!(r, Ok(vec![1, 11, 3, 305_000, 1]));
        assert_eq!(other.scores("{g}:11"), None);
        // A reply from 11 processed: a left entry.
        let r = s.execute_leave(at(11, 5), &refs(&leave_keys(11)), &args(11));
        assert_eq!(r, Ok(vec![1, 11, 3, 305_000, 1]));
        assert_eq!(s.scores("{g}:11"), scored(&[(-1.0, &t[0])]));
    }

    /// The negative control of rule 19's leave: removing the open entry and
    /// the reservation alike takes a member that registered in `x` out of
    /// `x` (instead of leaving a left entry).
    #[test]
    fn the_open_and_next_sabotage_removes_both() {
        let t = tokens(1);
        let mut s = SimStore::new();
        register(&mut s, 10, 1, &t[0], "-1");
        s.sabotage_leave(Some(LeaveSabotage::OpenAndNext));
        assert_eq!(leave(&mut s, at(10, 5), 10, &t[0]), [1, 10, 3, 5000, 1]);
        assert_eq!(s.scores("{g}:10"), None);
        assert_eq!(s.scores("{g}:11"), None);
    }

    /// `(member, score)` pairs of the set at `key`, as `ZRANGE WITHSCORES`
    /// lists them.
    fn zrange(s: &SimStore, key: &str) -> Vec<(String, f64)> {
        s.scores(key)
            .unwrap_or_default()
            .into_iter()
            .map(|(score, m)| (m, score))
            .collect()
    }

    /// Asserts that the store answers a registration in `k` of `member`
    /// (`reply`, the fields after the server time) as
    /// [`closed_set_positions`] reads closed `k-1` (`entries`): the
    /// position (-1 for a left entry or none), the size, and whether the
    /// entry is registered.
    fn agrees(entries: &[ClosedEntry], member: &str, reply: &[i64], why: &str) {
        let size = entries.iter().filter(|e| e.position.is_some()).count() as i64;
        let entry = entries.iter().find(|e| e.member == member);
        let want = entry.and_then(|e| e.position).map_or(-1, i64::from);
        assert_eq!(reply[..2], [want, size], "{why}: {member} in {entries:?}");
        if let Some(e) = entry.filter(|e| e.position.is_some()) {
            let registered = i64::from(e.kind == EntryKind::Registered);
            assert_eq!(reply[2], registered, "{why}: {member} in {entries:?}");
        }
    }

    /// [`closed_set_positions`] against the store on random closed sets
    /// (keepers, duplicates, carried positions beyond the size,
    /// reservations, returnees, newcomers, left entries), written into the
    /// store as closed `k-1`: every member registering in `k`, one after
    /// the other (the first filler writes the filler cache, the others
    /// read it), gets the position the function gives it.
    #[test]
    fn closed_set_positions_are_the_stores_on_random_sets() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(19);
        let (mut fillers, mut reserved, mut left) = (0, 0, 0);
        for round in 0..2000 {
            let n = rng.random_range(0..10_usize);
            let mut closed = ZSet::default();
            for member in tokens(n) {
                let p = rng.random_range(0..=n + 1) as f64;
                let score = match rng.random_range(0..7) {
                    0 => p,
                    1 => p + RESERVED,
                    2 => RETURNEE + p + 0.5,
                    3 => RETURNEE + p + 0.5 + RESERVED,
                    4 => NEWCOMER,
                    5 => NEWCOMER + RESERVED,
                    _ => -1.0,
                };
                closed.add(score, &member);
            }
            let mut s = SimStore::new();
            s.keys.insert(
                set(9),
                Entry {
                    value: Value::Set(closed),
                    expires_at: i64::MAX,
                },
            );
            let entries = closed_set_positions(&zrange(&s, &set(9)));
            assert_eq!(entries.len(), n);
            for e in &entries {
                fillers += usize::from(e.position.is_some_and(|p| f64::from(p) != e.score.floor()));
                reserved += usize::from(e.kind == EntryKind::Reserved);
                left += usize::from(e.kind == EntryKind::Left);
                let sent = e.position.map_or("-1".to_owned(), |p| p.to_string());
                let reply = register(&mut s, 10, 1, &e.member, &sent);
                agrees(&entries, &e.member, &reply, &format!("round {round}"));
            }
            // Registrations in 10 write 10 and 11, never the closed 9.
            assert_eq!(closed_set_positions(&zrange(&s, &set(9))), entries);
        }
        assert!(fillers > 1000 && reserved > 1000 && left > 1000);
    }

    /// [`closed_set_positions`] against the store on the sets a random
    /// group writes: workers register (sending the last position they
    /// learnt), miss registrations, leave gracefully and come back as new
    /// incarnations; every registration's reply in `k` is what the function
    /// reads of closed `k-1`.
    #[test]
    fn closed_set_positions_are_the_stores_on_sets_a_random_group_writes() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(15);
        let mut s = SimStore::new();
        let mut next = 0;
        let mut fresh = || {
            next += 1;
            format!("{next:032x}")
        };
        // Each worker's token and the last position it learnt.
        let mut workers: Vec<(String, i64)> = (0..6).map(|_| (fresh(), -1)).collect();
        let (mut checked, mut kinds) = (0, std::collections::HashSet::new());
        for k in 10..200 {
            let entries = closed_set_positions(&zrange(&s, &set(k - 1)));
            kinds.extend(entries.iter().map(|e| e.kind));
            for (i, (token, sent)) in workers.iter_mut().enumerate() {
                let roll = rng.random_range(0..100);
                if roll < 20 {
                    continue; // misses this registration
                }
                let reply = register(&mut s, k, 1 + i as i64, token, &sent.to_string());
                agrees(&entries, token, &reply, &format!("k {k}"));
                checked += 1;
                if reply[0] >= 0 {
                    *sent = reply[0];
                }
                if roll >= 95 {
                    leave(&mut s, at(k, 200), k, token);
                    *token = fresh();
                    *sent = -1;
                }
            }
        }
        assert!(checked > 800, "{checked}");
        assert_eq!(kinds.len(), 3, "{kinds:?}");
    }
}
