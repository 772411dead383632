//! The simulator's store against the real scripts: seeded random sequences
//! of operations played through `ranked.lua`, `arrival.lua` and `leave.lua`
//! on a real `redis-server` and through [`SimStore`] at the same server
//! time, with identical replies and identical key contents required after
//! every operation. The simulator proves what the scripts do only while the
//! two agree (rules 2, 3, 12, 15, 16 and 18 of docs/protocol.md).
//!
//! # Time
//!
//! The server's `TIME` moves and cannot be set, so the interval is long
//! (`L` = 600 s, keys live `3L`) and the virtual interval numbers are driven
//! by the keys: a registration of virtual interval `v` names `P{N}:v` and
//! `P{N}:(v-1)`, and `ARGV[3]` names the server's interval `k` (read from
//! the last `TIME`), so the scripts take exactly their product paths while
//! `v` advances once a round, sometimes by two or three (intervals nobody
//! registered in), and after a third of the rounds the members that missed
//! both `v - 1` and `v` register into `v - 1` again and then into `v`, as
//! after a backward step of the server clock that reopened `v - 1` (rule 10;
//! this is what carries one position to two members of a set, rule 15's
//! duplicate clause). The store runs each operation at the time the server's
//! reply carries (`sec`, `usec`), so both compute the same `k`; requests
//! with intervals of 1 ms, 7 ms, 1 s and 300 s compare that computation
//! where the server's own interval moves between operations. Should the
//! 600-s interval end during a run (about one run in 300), the operations
//! aimed at the old one get the wrong-interval answer on both sides, which
//! is compared like any other reply; otherwise the sequences, and the
//! operation count, are the same on every run. Keys do not expire within a
//! run; TTLs are compared for presence and, within a tolerance, for their
//! value.
//!
//! # What is compared
//!
//! After every operation: the reply (an integer array, or an error of the
//! same kind), the type, content (members with their scores, counters, the
//! rules record) and expiry of the three declared keys, and the number of
//! keys (the scripts touch nothing else). After every round and before
//! every restart (`FLUSHALL` on the server, [`SimStore::flush`] on the
//! store): the whole key space.

use std::collections::BTreeMap;

use lease_core::{Mode, Script};
use lease_sim::{Peek, SimStore, StoreError};
use lease_testkit::RedisServer;
use rand::seq::{IndexedRandom as _, SliceRandom as _};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use redis::{RedisResult, Value};

const L_MS: i64 = 600_000;
const TTL_MS: i64 = 3 * L_MS;
const RANKED: &str = "2:600000:ranked:modulo";
const ARRIVAL: &str = "1:600000:arrival:modulo";
/// Records of other rules, some unreadable (rule 12: refused with `-1`
/// fields), two whose version a double does not hold exactly (the script
/// reads it with `tonumber`; the second is beyond an integer reply's range).
const OTHER_RULES: [&str; 11] = [
    "2:300000:ranked:modulo",
    "1:600000:arrival:modulo",
    "2:600000:ranked:consistent",
    "1:600000:ranked:modulo",
    "junk",
    "",
    "2:x:ranked:modulo",
    "3:600000:Ranked:ring",
    "2:600000:ranked:modulo:extra",
    "9007199254740993:600000:ranked:modulo",
    "99999999999999999999:600000:ranked:modulo",
];
/// Last positions a client never sends, read by `tonumber` in the script.
const ODD_SENT: [&str; 15] = [
    "x",
    "",
    "2.5",
    "-3",
    "1e3",
    "-0",
    "4294967295",
    "4294967296",
    " 7",
    "8 ",
    "0x10",
    "-0x10",
    "0x",
    "1e",
    "inf",
];
/// How far apart (ms) the server's and the store's expiry times may be: the
/// server stamps `PEXPIRE` with its own clock reading, a little after the
/// `TIME` the store uses.
const TTL_TOLERANCE_MS: i64 = 1000;

/// Dumps keys: name, type, content, `PEXPIRETIME`, then `DBSIZE`. With no
/// keys given, every key (`KEYS *`, sorted). A sorted set's content is one
/// string, `member score member score ...` (the test's members hold no
/// space), which keeps the reply small.
const INSPECT: &str = r"
local names = KEYS
if #names == 0 then
  names = redis.call('KEYS', '*')
  table.sort(names)
end
local out = {}
for i, key in ipairs(names) do
  local t = redis.call('TYPE', key)['ok']
  local body = ''
  if t == 'zset' then
    body = table.concat(redis.call('ZRANGE', key, 0, -1, 'WITHSCORES'), ' ')
  elseif t == 'string' then
    body = redis.call('GET', key)
  elseif t == 'hash' then
    body = table.concat(redis.call('HGETALL', key), ' ')
  end
  out[i] = {key, t, body, redis.call('PEXPIRETIME', key)}
end
table.insert(out, redis.call('DBSIZE'))
return out
";

/// One key as either side shows it.
#[derive(Clone, Debug, PartialEq)]
enum Content {
    Missing,
    /// A string: a counter's digits or the rules record.
    Str(String),
    /// A sorted set: `(member, score)` in Redis order.
    Set(Vec<(String, f64)>),
    /// A hash (the member record, rule 18): `(field, value)` by field.
    Hash(Vec<(String, String)>),
}

#[derive(Clone, Debug)]
struct KeyState {
    name: String,
    content: Content,
    /// The expiry, in ms since the epoch (`None`: no TTL).
    expires_ms: Option<i64>,
}

/// An operation: one script run.
#[derive(Clone, Debug)]
enum Op {
    /// A registration script of `mode` naming keys `v`, `v-1`.
    Register {
        mode: Mode,
        v: i64,
        interval_ms: i64,
        /// `ARGV[2]`: the keys' TTL in ms (`3L` but for the odd ones).
        ttl: String,
        /// `ARGV[3]`: the interval the caller expects (a number as text).
        expected: String,
        rules: String,
        token: String,
        sent: String,
    },
    /// A Ranked registration under member name `member` (rule 18) by
    /// `token`, naming keys `v`, `v-1` and the member record.
    Named {
        v: i64,
        expected: i64,
        token: String,
        sent: String,
        member: String,
    },
    /// The leave script naming keys `first`, `first+1` and interval `c`.
    Leave {
        first: i64,
        /// `ARGV[2]`: the interval the caller believes open.
        c: String,
        rules: String,
        token: String,
    },
}

impl Op {
    /// The declared keys: five, as the workers send them, or three for a
    /// registration that declares neither the member record nor the filler
    /// cache (Arrival, and Ranked callers chosen by token, so that both
    /// kinds share every group).
    fn keys(&self) -> Vec<String> {
        let key = |k: i64| format!("{{g}}:{k}");
        let fillers = |k: i64| format!("{{g}}:{k}:fillers");
        let mut keys = match self {
            Op::Register { v, .. } | Op::Named { v, .. } => {
                vec![key(*v), key(v - 1), "{g}:rules".into()]
            }
            Op::Leave { first, .. } => vec![key(*first), key(first + 1), "{g}:rules".into()],
        };
        if self.five_keys() {
            match self {
                Op::Register { v, .. } | Op::Named { v, .. } => {
                    keys.extend(["{g}:members".into(), fillers(v - 1)]);
                }
                Op::Leave { first, .. } => keys.extend([fillers(*first), fillers(first + 1)]),
            }
        }
        keys
    }

    /// Whether this operation declares all five keys. A leave always does:
    /// one that declares no filler caches cannot delete the cache of the
    /// set it removes from, and a set reopened by a backward step could
    /// then come back to the size its cache was computed for with other
    /// members (docs/protocol.md, rule 15).
    fn five_keys(&self) -> bool {
        match self {
            Op::Named { .. } | Op::Leave { .. } => true,
            Op::Register {
                mode: Mode::Arrival,
                ..
            } => false,
            Op::Register { token, .. } => token.bytes().last().is_none_or(|b| b % 3 != 0),
        }
    }

    fn args(&self) -> Vec<String> {
        match self {
            Op::Register {
                mode,
                interval_ms,
                ttl,
                expected,
                rules,
                token,
                sent,
                ..
            } => {
                let mut args = vec![
                    interval_ms.to_string(),
                    ttl.clone(),
                    expected.clone(),
                    rules.clone(),
                ];
                if *mode == Mode::Ranked {
                    args.extend([token.clone(), sent.clone()]);
                }
                args
            }
            Op::Named {
                expected,
                token,
                sent,
                member,
                ..
            } => vec![
                L_MS.to_string(),
                TTL_MS.to_string(),
                expected.to_string(),
                RANKED.to_owned(),
                token.clone(),
                sent.clone(),
                member.clone(),
            ],
            Op::Leave {
                c, rules, token, ..
            } => {
                vec![L_MS.to_string(), c.clone(), rules.clone(), token.clone()]
            }
        }
    }

    fn script(&self) -> &'static Script {
        match self {
            Op::Register { mode, .. } => Script::for_mode(*mode),
            Op::Named { .. } => Script::for_mode(Mode::Ranked),
            Op::Leave { .. } => Script::leave(),
        }
    }
}

/// What the sequences reached, counted from the store's state before each
/// operation that got through (status 1).
#[derive(Debug, Default)]
struct Tally {
    ops: u64,
    /// Ranked registrations that got through, by [`Shape`].
    shapes: BTreeMap<Shape, u64>,
    /// Fillers (of any kind) given a position.
    filled: u64,
    /// Keepers that sent another last position than their score (the
    /// script's first try misses), and members carrying a keeper's position
    /// that sent it (the first try finds the keeper, not them).
    keepers_sending_other: u64,
    duplicates_sending_score: u64,
    arrivals: u64,
    wrong_interval: u64,
    refused: u64,
    /// Leaves that removed the token, from `KEYS[1]`, or from `KEYS[2]`
    /// (the request executed in the interval after the one it named).
    left: u64,
    left_late: u64,
    /// Leaves of a token not in the open set (`removed` = 0).
    left_absent: u64,
    /// Leaves that removed the last member, deleting the set.
    left_emptied: u64,
    /// Named registrations (rule 18) that held the name, that took it over
    /// from another token, and that found it held by another (status 3).
    named_held: u64,
    named_takeovers: u64,
    named_in_use: u64,
    /// Backward steps that reopened an interval ([`reopen`]).
    reopened: u64,
    /// Fillers of five-key callers that read their position from the
    /// filler cache, that wrote it (no cache), and that wrote it over a
    /// cache of another size (a reopened set); fillers of three-key
    /// callers (no cache); leaves that deleted a cache (rule 15).
    cache_hits: u64,
    cache_written: u64,
    cache_stale: u64,
    fillers_uncached: u64,
    cache_dropped: u64,
    /// Error replies (WRONGTYPE: a script of one mode on the other's keys).
    errors: u64,
    flushes: u64,
    /// Operations per (mode, group size).
    sizes: BTreeMap<(&'static str, usize), u64>,
}

/// A ranked registration, by the state before it (rule 15).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Shape {
    /// In the closed set with an integer score below its size, the first
    /// member with that score.
    Keeper,
    /// In the closed set with an integer score below its size that an
    /// earlier member carries too (the two versions of a reopened interval
    /// carried one position twice): a filler.
    DuplicateKeeper,
    /// In the closed set with an integer score equal to its size: a filler
    /// (the group shrank).
    CarriedAtSize,
    /// In the closed set with an integer score above its size.
    CarriedPastSize,
    /// In the closed set as a returnee (`2^32 + p + 0.5`): a filler.
    ReturneeFiller,
    /// In the closed set as a newcomer (`2^53`): a filler.
    NewcomerFiller,
    /// Not in the closed set, sending a last position.
    Returnee,
    /// Not in the closed set, sending -1 (or what is not a position).
    Newcomer,
    /// Already in the open set: `ZADD NX` changes nothing.
    Repeat,
}

/// A returnee's score starts here (`2^32`), a newcomer's is `2^53`.
const RETURNEE: f64 = 4_294_967_296.0;
const NEWCOMER: f64 = 9_007_199_254_740_992.0;

struct Harness {
    conn: redis::Connection,
    store: SimStore,
    inspect_sha: String,
    /// The server's time at the last `TIME`, in microseconds.
    now_us: i64,
    tally: Tally,
    /// The largest expiry difference seen, in ms.
    ttl_skew_ms: i64,
    /// For failure messages: the sequence being played.
    context: String,
    /// The SHA-1 of a broken Ranked script to run instead of `ranked.lua`
    /// (the negative control of the filler cache's size check).
    broken_ranked: Option<String>,
}

fn ints(v: &Value) -> Option<Vec<i64>> {
    redis::from_redis_value_ref(v).ok()
}

/// The server's dump (see [`INSPECT`]) as key states and the key count.
fn parse_dump(v: Value) -> (Vec<KeyState>, i64) {
    let Value::Array(mut items) = v else {
        panic!("dump: {v:?}")
    };
    let dbsize: i64 = redis::from_redis_value(items.pop().expect("dbsize")).expect("dbsize");
    let keys = items
        .into_iter()
        .map(|item| {
            let (name, kind, body, when): (String, String, String, i64) =
                redis::from_redis_value(item).expect("a key's dump");
            let content = match kind.as_str() {
                "none" => Content::Missing,
                "string" => Content::Str(body),
                "hash" => {
                    let words: Vec<&str> = body.split(' ').collect();
                    let mut fields: Vec<(String, String)> = words
                        .chunks(2)
                        .map(|p| (p[0].to_owned(), p[1].to_owned()))
                        .collect();
                    fields.sort();
                    Content::Hash(fields)
                }
                "zset" => {
                    let words: Vec<&str> = body.split(' ').collect();
                    Content::Set(
                        words
                            .chunks(2)
                            .map(|p| (p[0].to_owned(), p[1].parse().expect("a score")))
                            .collect(),
                    )
                }
                other => panic!("unexpected type {other}"),
            };
            KeyState {
                name,
                content,
                expires_ms: (when >= 0).then_some(when),
            }
        })
        .collect();
    (keys, dbsize)
}

impl Harness {
    fn new(server: &RedisServer) -> Self {
        let mut conn = server.connect().expect("connect");
        for script in [
            Script::for_mode(Mode::Ranked),
            Script::for_mode(Mode::Arrival),
            Script::leave(),
        ] {
            let sha: String = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(script.source())
                .query(&mut conn)
                .expect("SCRIPT LOAD");
            assert_eq!(sha, script.sha1());
        }
        let inspect_sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(INSPECT)
            .query(&mut conn)
            .expect("SCRIPT LOAD");
        let (sec, usec): (i64, i64) = redis::cmd("TIME").query(&mut conn).expect("TIME");
        Self {
            conn,
            store: SimStore::new(),
            inspect_sha,
            now_us: sec * 1_000_000 + usec,
            tally: Tally::default(),
            ttl_skew_ms: 0,
            context: String::new(),
            broken_ranked: None,
        }
    }

    /// The server's interval at the last `TIME`, for interval length `l_ms`.
    fn k(&self, l_ms: i64) -> i64 {
        (self.now_us / 1000).div_euclid(l_ms)
    }

    fn sim_state(&self, name: &str) -> KeyState {
        let content = match self.store.peek(name) {
            None => Content::Missing,
            Some(Peek::Counter(c)) => Content::Str(c.to_string()),
            Some(Peek::Text(t)) => Content::Str(t),
            Some(Peek::Fields(f)) => Content::Hash(f),
            Some(Peek::Members(_)) => Content::Set(
                self.store
                    .scores(name)
                    .expect("a set")
                    .into_iter()
                    .map(|(s, m)| (m, s))
                    .collect(),
            ),
        };
        KeyState {
            name: name.to_owned(),
            content,
            expires_ms: self.store.expires_at(name).map(|us| us.div_euclid(1000)),
        }
    }

    fn compare_keys(&mut self, real: &[KeyState], dbsize: i64, what: &str) {
        for r in real {
            let s = self.sim_state(&r.name);
            assert_eq!(
                r.content, s.content,
                "{}: {what}: key {} differs",
                self.context, r.name
            );
            match (r.expires_ms, s.expires_ms) {
                (None, _) | (_, None) if r.content == Content::Missing => {}
                (Some(a), Some(b)) => {
                    let skew = (a - b).abs();
                    self.ttl_skew_ms = self.ttl_skew_ms.max(skew);
                    assert!(
                        skew <= TTL_TOLERANCE_MS,
                        "{}: {what}: key {} expires at {a} ms on the server, {b} ms in the store",
                        self.context,
                        r.name
                    );
                }
                (a, b) => panic!(
                    "{}: {what}: key {}: TTL {a:?} on the server, {b:?} in the store",
                    self.context, r.name
                ),
            }
        }
        assert_eq!(
            dbsize,
            self.store.len() as i64,
            "{}: {what}: key count (server {:?}, store {:?})",
            self.context,
            real.iter().map(|k| &k.name).collect::<Vec<_>>(),
            self.store.key_names()
        );
    }

    /// The whole key space on both sides.
    fn compare_all(&mut self, what: &str) {
        let dump: Value = redis::cmd("EVALSHA")
            .arg(&self.inspect_sha)
            .arg(0)
            .query(&mut self.conn)
            .expect("dump");
        let (real, dbsize) = parse_dump(dump);
        let names: Vec<&String> = real.iter().map(|k| &k.name).collect();
        assert_eq!(
            names,
            self.store.key_names().iter().collect::<Vec<_>>(),
            "{}: {what}: key names",
            self.context
        );
        self.compare_keys(&real, dbsize, what);
    }

    /// A restart without persistence on both sides.
    fn flush(&mut self) {
        self.compare_all("before the restart");
        let _: () = redis::cmd("FLUSHALL")
            .query(&mut self.conn)
            .expect("FLUSHALL");
        self.store.flush();
        self.tally.flushes += 1;
    }

    /// Classifies a ranked registration from the store's state before it.
    fn classify(&self, op: &Op) -> Option<Shape> {
        let Op::Register {
            mode: Mode::Ranked,
            token,
            sent,
            ..
        } = op
        else {
            return None;
        };
        let keys = op.keys();
        let (open, closed) = (&keys[0], &keys[1]);
        if self
            .store
            .scores(open)
            .is_some_and(|s| s.iter().any(|(_, m)| m == token))
        {
            return Some(Shape::Repeat);
        }
        let set = self.store.scores(closed).unwrap_or_default();
        let size = set.len() as f64;
        let at = set.iter().position(|(_, m)| m == token);
        Some(match at.map(|i| &set[i]) {
            Some((p, _)) if *p < size && set.iter().position(|(q, _)| q == p) < at => {
                Shape::DuplicateKeeper
            }
            Some((p, _)) if *p < size => Shape::Keeper,
            Some((p, _)) if *p == size => Shape::CarriedAtSize,
            Some((p, _)) if *p < RETURNEE => Shape::CarriedPastSize,
            Some((p, _)) if *p < NEWCOMER => Shape::ReturneeFiller,
            Some(_) => Shape::NewcomerFiller,
            None => match sent.parse::<i64>() {
                Ok(p) if p >= 0 => Shape::Returnee,
                _ => Shape::Newcomer,
            },
        })
    }

    /// Plays a round of operations on the server, in one pipeline (each
    /// followed by a dump of its declared keys), then on the store one by
    /// one; panics unless every reply and every dump agree. Returns the
    /// replies.
    fn play(&mut self, ops: &[Op]) -> Vec<Result<Vec<i64>, String>> {
        let mut pipe = redis::pipe();
        pipe.cmd("TIME");
        for op in ops {
            let keys = op.keys();
            let sha = match (op, &self.broken_ranked) {
                (
                    Op::Register {
                        mode: Mode::Ranked, ..
                    }
                    | Op::Named { .. },
                    Some(broken),
                ) => broken.as_str(),
                _ => op.script().sha1(),
            };
            pipe.cmd("EVALSHA")
                .arg(sha)
                .arg(keys.len())
                .arg(&keys[..])
                .arg(&op.args()[..]);
            pipe.cmd("EVALSHA")
                .arg(&self.inspect_sha)
                .arg(keys.len())
                .arg(&keys[..]);
        }
        let mut got = pipe
            .ignore_errors()
            .query::<Vec<RedisResult<Value>>>(&mut self.conn)
            .expect("the pipeline")
            .into_iter();
        let (sec, usec): (i64, i64) =
            redis::from_redis_value(got.next().expect("time").expect("TIME")).expect("TIME");
        self.now_us = sec * 1_000_000 + usec;
        let mut replies = Vec::with_capacity(ops.len());
        for op in ops {
            let reply = got.next().expect("a reply");
            let dump = got.next().expect("a dump").expect("the dump script");
            let real: Result<Vec<i64>, String> = match reply {
                Ok(v) => Ok(ints(&v).unwrap_or_else(|| panic!("{}: reply {v:?}", self.context))),
                Err(e) => Err(e.code().unwrap_or("?").to_owned()),
            };
            // The store runs at the time the script read. An error reply
            // carries none; the last time read before it is as good (a
            // boundary of 600 s between two commands of one pipeline would
            // show as differing replies, not pass unseen).
            if let Ok(r) = &real
                && r.len() >= 4
            {
                self.now_us = r[2] * 1_000_000 + r[3];
            }
            let shape = self.classify(op);
            let sent_score = self.sends_its_score(op);
            let takeover = self.takes_over(op);
            let keys = op.keys();
            let args = op.args();
            let cache = self.cache_before(op);
            let k = [keys[0].as_str(), keys[1].as_str(), keys[2].as_str()];
            let five: Option<[&str; 5]> = keys
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>()
                .try_into()
                .ok();
            let mode = match op {
                Op::Register { mode, .. } => *mode,
                Op::Named { .. } | Op::Leave { .. } => Mode::Ranked,
            };
            let sim = match (op, five) {
                (Op::Leave { .. }, Some(k5)) => {
                    self.store.execute_leave_with_caches(self.now_us, k5, &args)
                }
                (Op::Leave { .. }, None) => self.store.execute_leave(self.now_us, k, &args),
                (_, Some(k5)) => self.store.execute_with_caches(mode, self.now_us, k5, &args),
                (_, None) => self.store.execute(mode, self.now_us, k, &args),
            };
            let sim = sim.map_err(|e| match e {
                StoreError::WrongType => "WRONGTYPE".to_owned(),
                StoreError::BadArguments(_) => "ERR".to_owned(),
            });
            assert_eq!(real, sim, "{}: {op:?}: replies differ", self.context);
            let (states, dbsize) = parse_dump(dump);
            self.compare_keys(&states, dbsize, &format!("after {op:?}"));
            self.count(op, shape, sent_score, &real, &states);
            self.count_cache(op, shape, cache, &real);
            if let (Op::Named { .. }, Ok(r)) = (op, &real) {
                match r[0] {
                    1 if takeover => self.tally.named_takeovers += 1,
                    1 => self.tally.named_held += 1,
                    3 => self.tally.named_in_use += 1,
                    _ => {}
                }
            }
            replies.push(real);
        }
        replies
    }

    /// The filler caches an operation may read or delete, before it: for a
    /// registration, the closed set's (`Some(true)`: there and computed for
    /// the set's present size; `Some(false)`: there for another size); for
    /// a leave, whether each of its two sets' caches is there.
    fn cache_before(&self, op: &Op) -> [Option<bool>; 2] {
        let keys = op.keys();
        if keys.len() < 5 {
            return [None, None];
        }
        let size = |name: &str| self.store.scores(name).map_or(0, |s| s.len()).to_string();
        let cache = |name: &str| match self.store.peek(name) {
            Some(Peek::Fields(f)) => Some(f),
            _ => None,
        };
        match op {
            Op::Leave { .. } => [3, 4].map(|i| cache(&keys[i]).map(|_| true)),
            _ => [
                cache(&keys[4]).map(|f| f.iter().any(|(k, v)| k == "#" && *v == size(&keys[1]))),
                None,
            ],
        }
    }

    /// Counts the filler cache's paths (rule 15): hits, writes, writes over
    /// a cache of another size, fillers of three-key callers, and leaves
    /// that deleted a cache.
    fn count_cache(
        &mut self,
        op: &Op,
        shape: Option<Shape>,
        cache: [Option<bool>; 2],
        reply: &Result<Vec<i64>, String>,
    ) {
        let Ok(r) = reply else { return };
        if r[0] != 1 {
            return;
        }
        match op {
            Op::Leave { c, .. } if r[4] == 1 => {
                let t = &mut self.tally;
                let removed_from = usize::from(c.parse() != Ok(r[1]));
                if cache[removed_from].is_some() {
                    t.cache_dropped += 1;
                }
            }
            Op::Register { token, .. } => {
                // A repeat reads the closed set as a first registration
                // does: what counts is the member's place there.
                let filler = shape.is_some_and(|s| s > Shape::Keeper && s < Shape::Returnee)
                    || (shape == Some(Shape::Repeat) && r[4] >= 0 && self.fills(op, token));
                let t = &mut self.tally;
                if !filler {
                    return;
                }
                match (op.five_keys(), cache[0]) {
                    (false, _) => t.fillers_uncached += 1,
                    (true, Some(true)) => t.cache_hits += 1,
                    (true, Some(false)) => t.cache_stale += 1,
                    (true, None) => t.cache_written += 1,
                }
            }
            _ => {}
        }
    }

    /// Whether `token` is a filler of the closed set `op` reads (in it, and
    /// not the first member with an integer score below its size).
    fn fills(&self, op: &Op, token: &str) -> bool {
        let set = self.store.scores(&op.keys()[1]).unwrap_or_default();
        let size = set.len() as f64;
        set.iter().position(|(_, m)| m == token).is_some_and(|at| {
            let p = set[at].0;
            let keeps =
                p < size && p == p.floor() && set.iter().position(|(q, _)| *q == p) == Some(at);
            !keeps
        })
    }

    /// Whether a named registration finds the member record naming another
    /// token (it then takes the name over, or finds it in use).
    fn takes_over(&self, op: &Op) -> bool {
        let Op::Named { token, member, .. } = op else {
            return false;
        };
        match self.store.peek("{g}:members") {
            Some(Peek::Fields(f)) => f
                .iter()
                .any(|(name, record)| name == member && !record.starts_with(token.as_str())),
            _ => false,
        }
    }

    /// Whether a ranked registration sends, as its last position, the
    /// digits of its own score in the closed set: the path `ranked.lua`
    /// tries first (the store does not look at it).
    fn sends_its_score(&self, op: &Op) -> bool {
        let Op::Register {
            mode: Mode::Ranked,
            token,
            sent,
            ..
        } = op
        else {
            return false;
        };
        let closed = &op.keys()[1];
        !sent.is_empty()
            && sent.bytes().all(|b| b.is_ascii_digit())
            && self.store.scores(closed).is_some_and(|set| {
                set.iter()
                    .any(|(s, m)| m == token && sent.parse::<f64>() == Ok(*s))
            })
    }

    fn count(
        &mut self,
        op: &Op,
        shape: Option<Shape>,
        sent_score: bool,
        reply: &Result<Vec<i64>, String>,
        after: &[KeyState],
    ) {
        let t = &mut self.tally;
        t.ops += 1;
        let Ok(r) = reply else {
            t.errors += 1;
            return;
        };
        match (r[0], op) {
            (0, _) => t.wrong_interval += 1,
            (2, _) => t.refused += 1,
            (1 | 3, Op::Named { .. }) => {}
            (1, Op::Leave { c, .. }) => {
                if r[4] == 0 {
                    t.left_absent += 1;
                } else {
                    t.left += 1;
                    if c.parse::<i64>().is_ok_and(|c| r[1] == c + 1) {
                        t.left_late += 1;
                    }
                    let open = if c.parse() == Ok(r[1]) {
                        &after[0]
                    } else {
                        &after[1]
                    };
                    if open.content == Content::Missing {
                        t.left_emptied += 1;
                    }
                }
            }
            (
                1,
                Op::Register {
                    mode: Mode::Arrival,
                    ..
                },
            ) => t.arrivals += 1,
            (1, Op::Register { .. }) => {
                let shape = shape.expect("a ranked registration");
                *t.shapes.entry(shape).or_default() += 1;
                match (shape, sent_score) {
                    (Shape::Keeper, false) => t.keepers_sending_other += 1,
                    (Shape::DuplicateKeeper, true) => t.duplicates_sending_score += 1,
                    _ => {}
                }
                if shape > Shape::Keeper && shape < Shape::Returnee && r[4] >= 0 {
                    t.filled += 1;
                }
            }
            _ => panic!("{}: unexpected reply {r:?}", self.context),
        }
    }
}

/// One worker of a ranked sequence: its token and the last position it got.
struct Member {
    token: String,
    last: i64,
}

fn token(rng: &mut ChaCha8Rng) -> String {
    format!("{:032x}", rng.random::<u128>())
}

/// What happens in one round, besides the plain registrations.
#[derive(Clone, Copy, Debug)]
enum Extra {
    Repeat,
    WrongInterval,
    Leave,
    OtherRules,
    OtherInterval,
    OtherMode,
    OddNumbers,
}

const EXTRAS: [(Extra, u32); 7] = [
    (Extra::Repeat, 30),
    (Extra::WrongInterval, 12),
    (Extra::Leave, 30),
    (Extra::OtherRules, 5),
    (Extra::OtherInterval, 4),
    (Extra::OtherMode, 1),
    (Extra::OddNumbers, 4),
];

fn pick_extra(rng: &mut ChaCha8Rng) -> Extra {
    let total: u32 = EXTRAS.iter().map(|e| e.1).sum();
    let mut x = rng.random_range(0..total);
    for (e, w) in EXTRAS {
        if x < w {
            return e;
        }
        x -= w;
    }
    unreachable!()
}

/// A ranked group of `n` tokens over `rounds` virtual intervals: churn
/// (presence per round from all to a third, newcomers, tokens gone for
/// good), returnees sending their last position, repeats, wrong-interval
/// requests, graceful leaves (open, late, far), other rules, other interval
/// lengths, another mode's script on the same keys, restarts.
fn ranked_sequence(h: &mut Harness, seed: u64, n: usize, rounds: usize) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed << 8 | n as u64);
    let mut members: Vec<Member> = (0..n)
        .map(|_| Member {
            token: token(&mut rng),
            last: -1,
        })
        .collect();
    let mut v = 1000;
    let mut foreign = false;
    let before = h.tally.ops;
    for round in 0..rounds {
        h.context = format!("ranked seed {seed} n {n} round {round} v {v}");
        // Churn: newcomers, and tokens that leave for good (the group keeps
        // at least half its size).
        if rng.random_bool(0.2) {
            for _ in 0..rng.random_range(1..=n.div_ceil(4)) {
                members.push(Member {
                    token: token(&mut rng),
                    last: -1,
                });
            }
        }
        if members.len() > n.div_ceil(2) && rng.random_bool(0.15) {
            let i = rng.random_range(0..members.len());
            members.swap_remove(i);
        }
        let presence = [1.0, 1.0, 0.9, 0.7, 0.5, 0.3][rng.random_range(0..6)];
        let mut events: Vec<(usize, Option<Extra>)> = (0..members.len())
            .filter(|_| rng.random_bool(presence))
            .map(|i| (i, None))
            .collect();
        for _ in 0..rng.random_range(0..=members.len().div_ceil(3)) {
            events.push((
                rng.random_range(0..members.len()),
                Some(pick_extra(&mut rng)),
            ));
        }
        events.shuffle(&mut rng);
        let k = h.k(L_MS);
        let mut ops = Vec::with_capacity(events.len());
        for &(i, extra) in &events {
            let m = &members[i];
            let sent = if rng.random_bool(0.04) {
                ODD_SENT[rng.random_range(0..ODD_SENT.len())].to_owned()
            } else {
                m.last.to_string()
            };
            let register = |expected: i64, rules: &str, sent: String| Op::Register {
                mode: Mode::Ranked,
                v,
                interval_ms: L_MS,
                ttl: TTL_MS.to_string(),
                expected: expected.to_string(),
                rules: rules.to_owned(),
                token: m.token.clone(),
                sent,
            };
            let op = match extra {
                None | Some(Extra::Repeat) => register(k, RANKED, sent),
                Some(Extra::WrongInterval) => {
                    let d = [-2, -1, 1, 3][rng.random_range(0..4)];
                    register(k + d, RANKED, sent)
                }
                Some(Extra::OtherRules) => {
                    let rules = OTHER_RULES[rng.random_range(0..OTHER_RULES.len())];
                    if rng.random_bool(0.5) {
                        register(k, rules, sent)
                    } else {
                        Op::Leave {
                            first: v,
                            c: k.to_string(),
                            rules: rules.to_owned(),
                            token: m.token.clone(),
                        }
                    }
                }
                Some(Extra::OtherInterval) => {
                    // The script computes k from ARGV[1], down to the
                    // millisecond. The expected interval is one already
                    // over, so that the outcome (refused, or the
                    // wrong-interval answer) does not depend on when the
                    // request runs, and the sequence stays deterministic.
                    let l = [1, 7, 1000, 300_000][rng.random_range(0..4)];
                    Op::Register {
                        mode: Mode::Ranked,
                        v,
                        interval_ms: l,
                        ttl: TTL_MS.to_string(),
                        expected: (h.k(l) - 1).to_string(),
                        rules: format!("2:{l}:ranked:modulo"),
                        token: m.token.clone(),
                        sent,
                    }
                }
                Some(Extra::OtherMode) => Op::Register {
                    mode: Mode::Arrival,
                    v,
                    interval_ms: L_MS,
                    ttl: TTL_MS.to_string(),
                    expected: k.to_string(),
                    rules: RANKED.to_owned(),
                    token: String::new(),
                    sent,
                },
                Some(Extra::OddNumbers) => {
                    // Numbers no client sends, as the scripts' tonumber and
                    // Redis's integer arguments read them.
                    let odd = [
                        "x".to_owned(),
                        String::new(),
                        format!("{k}.0"),
                        format!(" {k}"),
                        format!("{k}.5"),
                        format!("{k}e0"),
                        format!("0x{k:x}"),
                        format!("{}.0", k - 1),
                    ];
                    let odd = odd[rng.random_range(0..odd.len())].clone();
                    let odd_ttl = ["abc", "+5", "007", "1800000.0", "0"][rng.random_range(0..5)];
                    match rng.random_range(0..3) {
                        which @ 0..2 => {
                            let mut op = register(k, RANKED, sent);
                            if let Op::Register { expected, ttl, .. } = &mut op {
                                if which == 0 {
                                    *expected = odd;
                                } else {
                                    *ttl = odd_ttl.to_owned();
                                }
                            }
                            op
                        }
                        _ => Op::Leave {
                            // KEYS[2] is v for a c that reads as k - 1.
                            first: if odd.starts_with(&(k - 1).to_string()) {
                                v - 1
                            } else {
                                v
                            },
                            c: odd,
                            rules: RANKED.to_owned(),
                            token: m.token.clone(),
                        },
                    }
                }
                Some(Extra::Leave) => {
                    // Open: c is the server's interval, v's key is KEYS[1].
                    // Late: c is the one before, v's key is KEYS[2]. Far:
                    // neither, nothing written.
                    let (first, c) = match rng.random_range(0..10) {
                        0..6 => (v, k),
                        6..9 => (v - 1, k - 1),
                        _ => (v, [k - 2, k + 1][rng.random_range(0..2)]),
                    };
                    Op::Leave {
                        first,
                        c: c.to_string(),
                        rules: RANKED.to_owned(),
                        token: m.token.clone(),
                    }
                }
            };
            ops.push(op);
        }
        // Each worker remembers the position its last reply gave.
        for ((&(i, _), op), reply) in events.iter().zip(&ops).zip(h.play(&ops)) {
            if let (Ok(r), Op::Register { rules, .. }) = (&reply, op) {
                if r[0] == 1 && rules == RANKED && r[4] >= 0 {
                    members[i].last = r[4];
                }
                if r[0] == 2 && rules == RANKED {
                    foreign = true;
                }
            }
        }
        h.compare_all("after the round");
        if rng.random_bool(0.35) {
            reopen(h, &mut members, v, &mut rng);
        }
        v += if rng.random_bool(0.1) {
            rng.random_range(2..=3)
        } else {
            1
        };
        if rng.random_bool(0.04) || (foreign && rng.random_bool(0.5)) {
            h.flush();
            foreign = false;
        }
    }
    h.flush();
    *h.tally.sizes.entry(("ranked", n)).or_default() += h.tally.ops - before;
}

/// A backward step of the server clock that reopens `v - 1` (rule 10):
/// the members in neither `v - 1` nor `v` (stalled or cut off through the
/// step) register into the reopened `v - 1`, then into `v`, as a worker
/// that missed both does after the step. Members already in `v` carry
/// positions from the first version of `v - 1`, these from the second, and
/// the two can carry one position twice: a member whose hole in the first
/// version a filler took keeps it in the second. So closed `v` can hold
/// duplicate scores below its size (rule 15's duplicate clause), read in the
/// next round.
fn reopen(h: &mut Harness, members: &mut [Member], v: i64, rng: &mut ChaCha8Rng) {
    let member_of = |h: &Harness, key: &str, token: &str| {
        h.store
            .scores(key)
            .is_some_and(|set| set.iter().any(|(_, m)| m == token))
    };
    let late: Vec<usize> = (0..members.len())
        .filter(|&i| {
            let t = &members[i].token;
            !member_of(h, &format!("{{g}}:{}", v - 1), t) && !member_of(h, &format!("{{g}}:{v}"), t)
        })
        .collect();
    if late.is_empty() {
        return;
    }
    let first_version: Vec<String> = h
        .store
        .scores(&format!("{{g}}:{}", v - 1))
        .unwrap_or_default()
        .into_iter()
        .map(|(_, m)| m)
        .collect();
    h.tally.reopened += 1;
    let k = h.k(L_MS);
    for into in [v - 1, v] {
        h.context = format!("{}, reopened into {into}", h.context);
        let ops: Vec<Op> = late
            .iter()
            .map(|&i| Op::Register {
                mode: Mode::Ranked,
                v: into,
                interval_ms: L_MS,
                ttl: TTL_MS.to_string(),
                expected: k.to_string(),
                rules: RANKED.to_owned(),
                token: members[i].token.clone(),
                sent: members[i].last.to_string(),
            })
            .collect();
        for (&i, reply) in late.iter().zip(h.play(&ops)) {
            if let Ok(r) = reply
                && r[0] == 1
                && r[4] >= 0
            {
                members[i].last = r[4];
            }
        }
        h.compare_all("after the reopened round");
        // A member of the first version of v - 1 leaves the reopened set:
        // its size can come back to the one a filler cache was computed
        // for, with other members (the leave deletes the cache).
        if into == v - 1
            && rng.random_bool(0.5)
            && let Some(m) = first_version.choose(rng)
        {
            h.play(&[Op::Leave {
                first: v - 1,
                c: k.to_string(),
                rules: RANKED.to_owned(),
                token: m.clone(),
            }]);
            h.compare_all("after a leave from the reopened set");
        }
        // The fillers of the first version of v - 1 register into v again
        // (a retry after a timeout): they find the cache written for the
        // first version, of another size now.
        if into == v - 1 {
            let listed = match h.store.peek(&format!("{{g}}:{}:fillers", v - 1)) {
                Some(Peek::Fields(fields)) => fields,
                _ => Vec::new(),
            };
            let ops: Vec<Op> = members
                .iter()
                .filter(|m| listed.iter().any(|(field, _)| *field == m.token))
                .map(|m| Op::Register {
                    mode: Mode::Ranked,
                    v,
                    interval_ms: L_MS,
                    ttl: TTL_MS.to_string(),
                    expected: k.to_string(),
                    rules: RANKED.to_owned(),
                    token: m.token.clone(),
                    sent: m.last.to_string(),
                })
                .collect();
            h.play(&ops);
            h.compare_all("after the retries into the next set");
        }
    }
}

/// A member name's processes in [`named_sequence`]: the current one and,
/// for a few rounds after a restart, the one before it.
struct Name {
    member: String,
    current: Member,
    old: Option<Member>,
}

/// Member-record values the scripts never write, and records that name
/// another token with its last interval at, one or two before, or well
/// before the server's interval (`{k}` and `{t}` are replaced).
const SEEDED_RECORDS: [&str; 10] = [
    "{t}:{k}",
    "{t}:{k-1}",
    "{t}:{k-2}",
    "{t}:{k-7}",
    "{t}:{k+3}",
    "junk",
    "ABCDEF0123:{k}",
    "{t}:",
    ":{k}",
    "{t}:{k}:9",
];

/// Ranked registrations under member names (rule 18), mixed with
/// anonymous ones in one group: restarts (a new token under a name, the
/// old one sometimes still registering), names absent for rounds, and
/// member records seeded as other intervals would have left them (the
/// server's interval is 600 s long, so only seeded records are older).
fn named_sequence(h: &mut Harness, seed: u64, n: usize, rounds: usize) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed << 8 | n as u64 | 0x40);
    let mut names: Vec<Name> = (0..n)
        .map(|i| Name {
            member: format!("web-{i}"),
            current: Member {
                token: token(&mut rng),
                last: -1,
            },
            old: None,
        })
        .collect();
    let mut anonymous: Vec<Member> = (0..n.div_ceil(2))
        .map(|_| Member {
            token: token(&mut rng),
            last: -1,
        })
        .collect();
    let mut v = 9000;
    let before = h.tally.ops;
    for round in 0..rounds {
        h.context = format!("named seed {seed} n {n} round {round} v {v}");
        let k = h.k(L_MS);
        for name in &mut names {
            if rng.random_bool(0.2) {
                let fresh = Member {
                    token: token(&mut rng),
                    last: name.current.last,
                };
                name.old = Some(std::mem::replace(&mut name.current, fresh));
            } else if rng.random_bool(0.3) {
                name.old = None;
            }
            if rng.random_bool(0.15) {
                let other = token(&mut rng);
                let record = SEEDED_RECORDS[rng.random_range(0..SEEDED_RECORDS.len())]
                    .replace("{t}", &other)
                    .replace("{k-1}", &(k - 1).to_string())
                    .replace("{k-2}", &(k - 2).to_string())
                    .replace("{k-7}", &(k - 7).to_string())
                    .replace("{k+3}", &(k + 3).to_string())
                    .replace("{k}", &k.to_string());
                let _: () = redis::pipe()
                    .cmd("HSET")
                    .arg("{g}:members")
                    .arg(&name.member)
                    .arg(&record)
                    .ignore()
                    .cmd("PEXPIRE")
                    .arg("{g}:members")
                    .arg(TTL_MS)
                    .ignore()
                    .query(&mut h.conn)
                    .expect("HSET");
                h.store
                    .set_member_record("{g}:members", &name.member, &record, h.now_us, TTL_MS);
            }
        }
        let presence = [1.0, 0.9, 0.6][rng.random_range(0..3)];
        // (name index or anonymous index, old process, anonymous)
        let mut events: Vec<(usize, bool, bool)> = Vec::new();
        for (i, name) in names.iter().enumerate() {
            if rng.random_bool(presence) {
                events.push((i, false, false));
            }
            if name.old.is_some() && rng.random_bool(0.5) {
                events.push((i, true, false));
            }
        }
        for i in 0..anonymous.len() {
            if rng.random_bool(presence) {
                events.push((i, false, true));
            }
        }
        events.shuffle(&mut rng);
        let ops: Vec<Op> = events
            .iter()
            .map(|&(i, old, anon)| {
                if anon {
                    return Op::Register {
                        mode: Mode::Ranked,
                        v,
                        interval_ms: L_MS,
                        ttl: TTL_MS.to_string(),
                        expected: k.to_string(),
                        rules: RANKED.to_owned(),
                        token: anonymous[i].token.clone(),
                        sent: anonymous[i].last.to_string(),
                    };
                }
                let name = &names[i];
                let m = if old {
                    name.old.as_ref().expect("an old process")
                } else {
                    &name.current
                };
                Op::Named {
                    v,
                    expected: k,
                    token: m.token.clone(),
                    sent: m.last.to_string(),
                    member: name.member.clone(),
                }
            })
            .collect();
        for (&(i, old, anon), reply) in events.iter().zip(h.play(&ops)) {
            let Ok(r) = reply else { continue };
            if (r[0] == 1 || r[0] == 3) && r[4] >= 0 {
                let m = match (anon, old) {
                    (true, _) => &mut anonymous[i],
                    (false, true) => names[i].old.as_mut().expect("an old process"),
                    (false, false) => &mut names[i].current,
                };
                m.last = r[4];
            }
        }
        h.compare_all("after the round");
        v += if rng.random_bool(0.15) {
            rng.random_range(2..=3)
        } else {
            1
        };
        if rng.random_bool(0.04) {
            h.flush();
        }
    }
    h.flush();
    *h.tally.sizes.entry(("named", n)).or_default() += h.tally.ops - before;
}

/// An arrival group of about `n` registrations an interval, with empty
/// intervals, wrong-interval requests, other rules, and the ranked and leave
/// scripts on its counters (WRONGTYPE), and restarts.
fn arrival_sequence(h: &mut Harness, seed: u64, n: usize, rounds: usize) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed << 8 | n as u64 | 0x80);
    let mut v = 5000;
    let mut foreign = false;
    let before = h.tally.ops;
    for round in 0..rounds {
        h.context = format!("arrival seed {seed} n {n} round {round} v {v}");
        let count = if rng.random_bool(0.1) {
            0
        } else {
            rng.random_range(n.div_ceil(2)..=n + 1)
        };
        let k = h.k(L_MS);
        let mut ops = Vec::new();
        for _ in 0..count + rng.random_range(0..=n.div_ceil(4)) {
            let register = |expected: i64, rules: &str| Op::Register {
                mode: Mode::Arrival,
                v,
                interval_ms: L_MS,
                ttl: TTL_MS.to_string(),
                expected: expected.to_string(),
                rules: rules.to_owned(),
                token: String::new(),
                sent: String::new(),
            };
            let op = match rng.random_range(0..100) {
                0..85 => register(k, ARRIVAL),
                85..92 => register(k + [-1, 1, 2][rng.random_range(0..3)], ARRIVAL),
                92..96 => register(k, OTHER_RULES[rng.random_range(0..OTHER_RULES.len())]),
                96..98 => Op::Leave {
                    first: v,
                    c: k.to_string(),
                    rules: ARRIVAL.to_owned(),
                    token: token(&mut rng),
                },
                _ => Op::Register {
                    mode: Mode::Ranked,
                    v,
                    interval_ms: L_MS,
                    ttl: TTL_MS.to_string(),
                    expected: k.to_string(),
                    rules: ARRIVAL.to_owned(),
                    token: token(&mut rng),
                    sent: "-1".into(),
                },
            };
            ops.push(op);
        }
        if h.play(&ops).iter().any(|r| matches!(r, Ok(r) if r[0] == 2)) {
            foreign = true;
        }
        h.compare_all("after the round");
        v += if rng.random_bool(0.1) { 2 } else { 1 };
        if rng.random_bool(0.05) || (foreign && rng.random_bool(0.5)) {
            h.flush();
            foreign = false;
        }
    }
    h.flush();
    *h.tally.sizes.entry(("arrival", n)).or_default() += h.tally.ops - before;
}

/// The store and the three scripts give the same replies and leave the same
/// keys over thousands of seeded operations, for groups of 1 to 40, through
/// every shape the scripts distinguish.
#[test]
fn the_store_and_the_scripts_agree_on_every_reply_and_key() {
    let server = RedisServer::start().expect("redis-server");
    let mut h = Harness::new(&server);
    for seed in [1, 2, 3] {
        for n in [1, 2, 5, 16, 40] {
            ranked_sequence(&mut h, seed, n, 30);
        }
    }
    for seed in [1, 2] {
        for n in [1, 2, 5, 16, 40] {
            arrival_sequence(&mut h, seed, n, 20);
        }
    }
    for seed in [1, 2, 3] {
        for n in [1, 3, 8] {
            named_sequence(&mut h, seed, n, 25);
        }
    }
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query(&mut h.conn)
        .expect("INFO");
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .unwrap_or("?")
            .to_owned()
    };
    let server_name = match field("server_name").as_str() {
        "?" => "redis".to_owned(),
        name => name.to_owned(),
    };
    let version = match field("valkey_version").as_str() {
        "?" => field("redis_version"),
        v => v.to_owned(),
    };
    let t = &h.tally;
    eprintln!(
        "differential: {} operations on {server_name} {version}, identical on the server \
         and the store (expiry within {} ms)\n{t:?}",
        t.ops, h.ttl_skew_ms
    );
    assert!(t.ops >= 5000, "{t:?}");
    let shape = |s: Shape| t.shapes.get(&s).copied().unwrap_or(0);
    for (what, count) in [
        ("keepers", shape(Shape::Keeper)),
        (
            "later members carrying a keeper's position",
            shape(Shape::DuplicateKeeper),
        ),
        ("carried at the closed size", shape(Shape::CarriedAtSize)),
        (
            "carried past the closed size",
            shape(Shape::CarriedPastSize),
        ),
        ("returnee fillers", shape(Shape::ReturneeFiller)),
        ("newcomer fillers", shape(Shape::NewcomerFiller)),
        ("returnees", shape(Shape::Returnee)),
        ("newcomers", shape(Shape::Newcomer)),
        ("repeats", shape(Shape::Repeat)),
        ("fillers given a position", t.filled),
        (
            "keepers sending another position than their score",
            t.keepers_sending_other,
        ),
        (
            "later members carrying a keeper's position that sent it",
            t.duplicates_sending_score,
        ),
        ("arrivals", t.arrivals),
        ("wrong-interval answers", t.wrong_interval),
        ("refusals", t.refused),
        ("leaves that removed", t.left),
        ("late leaves that removed", t.left_late),
        ("leaves of an absent token", t.left_absent),
        ("leaves that emptied a set", t.left_emptied),
        ("error replies", t.errors),
        ("restarts", t.flushes),
        ("reopened intervals", t.reopened),
        ("named registrations that held their name", t.named_held),
        (
            "named registrations that took a name over",
            t.named_takeovers,
        ),
        (
            "named registrations that found their name in use",
            t.named_in_use,
        ),
        ("fillers that read the filler cache", t.cache_hits),
        ("fillers that wrote the filler cache", t.cache_written),
        ("fillers that found a cache of another size", t.cache_stale),
        ("fillers of three-key callers", t.fillers_uncached),
        ("leaves that deleted a filler cache", t.cache_dropped),
    ] {
        assert!(count >= 5, "only {count} {what}: {t:?}");
    }
}

/// The negative control of the filler cache's size check (rule 15): a
/// `ranked.lua` that reads a filler's cached position whatever size the
/// cache was computed for answers, after a reopened set grew, from the set
/// it was before; the comparison with the store, which computes every
/// position from the set, catches it.
#[test]
fn a_script_that_reads_a_filler_cache_of_another_size_is_caught() {
    let server = RedisServer::start().expect("redis-server");
    let mut h = Harness::new(&server);
    let source = Script::for_mode(Mode::Ranked).source();
    let check = "cached[1] == string.format('%d', size) and cached[2]";
    assert!(source.contains(check), "the size check is in ranked.lua");
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(source.replace(check, "cached[2]"))
        .query(&mut h.conn)
        .expect("SCRIPT LOAD");
    h.broken_ranked = Some(sha);
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        for seed in [1, 2, 3] {
            for n in [5, 16, 40] {
                ranked_sequence(&mut h, seed, n, 30);
            }
        }
    }));
    let panic = caught.expect_err("the broken script is caught");
    let message = panic.downcast_ref::<String>().map_or("", String::as_str);
    assert!(message.contains("differ"), "{message}");
}
