//! The simulator's store against the real scripts: seeded random sequences
//! of operations played through `ranked.lua` (protocol revision 3),
//! `arrival.lua` and `leave.lua` on a real `redis-server` and through
//! [`SimStore`] at the same server time, with identical replies and
//! identical key contents required after every operation. The simulator
//! proves what the scripts do only while the two agree (rules 2, 3, 12, 15,
//! 16, 18 and 19 of docs/protocol.md).
//!
//! # Time
//!
//! The server's `TIME` moves and cannot be set, so the interval is long
//! (`L` = 600 s; Ranked keys live `5L`, Arrival keys `3L`) and the virtual
//! interval numbers are driven by the keys: a registration of virtual
//! interval `v` names `P{N}:v`, `P{N}:(v-1)`, `P{N}:(v+1)` (its reservation)
//! and `P{N}:(v-2)` (the older set), and `ARGV[3]` names the server's
//! interval `k` (read from the last `TIME`), so the scripts take exactly
//! their product paths while `v` advances once a round, sometimes by two or
//! three (intervals nobody registered in), and after a third of the rounds
//! the members in neither `v - 1` nor `v` (not even reserved) register into
//! `v - 1` again and then into `v`, as after a backward step of the server
//! clock that reopened `v - 1` (rule 10; this is what carries one position
//! to two members of a set, rule 15's duplicate clause). The store runs each
//! operation at the time the server's reply carries (`sec`, `usec`), so
//! both compute the same `k`; requests with intervals of 1 ms, 7 ms, 1 s and
//! 300 s compare that computation where the server's own interval moves
//! between operations. Should the 600-s interval end during a run (about
//! one run in 300), the operations aimed at the old one get the
//! wrong-interval answer on both sides, which is compared like any other
//! reply; otherwise the sequences, and the operation count, are the same on
//! every run. Keys do not expire within a run; TTLs are compared for
//! presence and, within a tolerance, for their value.
//!
//! # What the operations cover
//!
//! - Ranked groups of 1 to 40 tokens under modulo and under jump hash
//!   (`:consistent` rules, which read inheritance): churn (presence per
//!   round from all to a third, newcomers, tokens gone for good), so
//!   members miss one interval (their reservation keeps their position:
//!   registered = 0) or more (fillers fill their holes, the survivors and
//!   the fillers inherit their positions), returnees sending their last
//!   position, repeats, wrong-interval requests, other rules, other interval
//!   lengths, numbers no client sends, another mode's script on the same
//!   keys, restarts.
//! - Older pairs (rule 19): the one the member's reply from `v - 1` told
//!   (right), `-1` when it has none or drops it, well-formed but wrong,
//!   malformed (read as `-1`, or odd numbers the script accepts), and
//!   omitted (six arguments).
//! - Graceful leaves (open, late, far) of tokens that registered in the
//!   open interval (their reservation goes) and of tokens that did not
//!   (their entry in the open set goes, with its filler cache).
//! - Callers that declare fewer keys than the script takes (eight for a
//!   registration, seven for a leave: 3, 5 or 7, and 3 or 6; revision 2
//!   declared five): the key-count error, after the prelude for a
//!   registration, before anything for a leave.
//! - Named registrations (rule 18), with restarts, old processes still
//!   registering, and seeded member records.
//! - Arrival groups, with the Ranked and leave scripts on their counters.
//!
//! # What is compared
//!
//! After every operation: the reply (an integer array, or an error of the
//! same kind: WRONGTYPE, the key-count error, the TTL error, another ERR),
//! the type, content (members with their scores, counters, the rules
//! record, the member record and filler caches) and expiry of every key it
//! declares (a registration's eight: `k`, `k-1`, the rules and member
//! records, the filler cache of `k-1`, `k+1`, `k-2` and the filler cache of
//! `k`; a leave's eight: `c`, `c+1`, the rules record, `c+2`, the three
//! sets' caches and the member record; fewer for a
//! caller that declares fewer), and the number of keys (the scripts touch
//! nothing else). After every round and before every restart (`FLUSHALL` on
//! the server, [`SimStore::flush`] on the store): the whole key space.

use std::collections::BTreeMap;

use lease_core::{Mode, Script};
use lease_sim::{Peek, SimStore, StoreError};
use lease_testkit::RedisServer;
use rand::seq::{IndexedRandom as _, SliceRandom as _};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use redis::{RedisResult, Value};

const L_MS: i64 = 600_000;
/// The key TTL Ranked workers send (`5L`), and Arrival workers (`3L`).
const TTL_MS: i64 = 5 * L_MS;
const ARRIVAL_TTL_MS: i64 = 3 * L_MS;
const RANKED: &str = "3:600000:ranked:modulo";
const CONSISTENT: &str = "3:600000:ranked:consistent";
const ARRIVAL: &str = "1:600000:arrival:modulo";
/// Records of other rules (a group's own is skipped when drawn), some
/// unreadable (rule 12: refused with `-1` fields), two whose version a
/// double does not hold exactly (the script reads it with `tonumber`; the
/// second is beyond an integer reply's range), and revision 2's.
const OTHER_RULES: [&str; 14] = [
    "3:300000:ranked:modulo",
    "1:600000:arrival:modulo",
    "3:600000:ranked:consistent",
    "3:600000:ranked:modulo",
    "2:600000:ranked:modulo",
    "2:600000:ranked:consistent",
    "junk",
    "",
    "3:x:ranked:modulo",
    "3:600000:Ranked:ring",
    "3:600000:ranked:modulo:extra",
    "ranked:consistent",
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
/// Older pairs no client sends: some read as none (`position >= 0` and
/// `size > position` fail), some odd numbers the script takes.
const ODD_OLDER: [(&str, &str); 12] = [
    ("x", "3"),
    ("2.5", "4"),
    ("3", "3"),
    ("-1", "5"),
    ("1", "inf"),
    ("0x1", "0x4"),
    ("", ""),
    ("1e0", "2e0"),
    ("-0", "2"),
    ("4", "-1"),
    (" 1", "3 "),
    ("nan", "nan"),
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
    /// A registration script of `mode` naming the keys of virtual interval
    /// `v`.
    Register {
        mode: Mode,
        v: i64,
        /// How many of the eight keys it declares (eight, as workers do;
        /// three for some Arrival callers; 3, 5 or 7 for the Ranked callers
        /// that get the key-count error).
        keys: usize,
        interval_ms: i64,
        /// `ARGV[2]`: the keys' TTL in ms (`5L`, or `3L` for Arrival, but for
        /// the odd ones).
        ttl: String,
        /// `ARGV[3]`: the interval the caller expects (a number as text).
        expected: String,
        rules: String,
        token: String,
        sent: String,
        /// `ARGV[8]`, `ARGV[9]`: the older pair (Ranked); `None`: six
        /// arguments only (no member name either).
        older: Option<[String; 2]>,
        /// What the older pair is, for the tally.
        kind: OlderKind,
    },
    /// A Ranked registration under member name `member` (rule 18) by
    /// `token`, naming the keys of virtual interval `v`.
    Named {
        v: i64,
        expected: i64,
        rules: &'static str,
        token: String,
        sent: String,
        member: String,
        older: [String; 2],
        kind: OlderKind,
    },
    /// The leave script naming the keys of `first`, `first+1`, `first+2`
    /// and interval `c`.
    Leave {
        first: i64,
        /// How many of the eight keys it declares.
        keys: usize,
        /// `ARGV[2]`: the interval the caller believes open.
        c: String,
        rules: String,
        token: String,
        /// `ARGV[5]`: the interval of the caller's newest processed reply
        /// (rule 19), or not sent.
        replied: Option<String>,
    },
}

/// What a registration sends as its older pair (rule 19).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum OlderKind {
    /// The pair its reply from `v - 1` told it.
    Right,
    /// `-1`, though its reply from `v - 1` told it a pair.
    Dropped,
    /// `-1`: no reply from `v - 1` (or no position in it).
    Unknown,
    /// A well-formed pair, not the one it was told.
    Wrong,
    /// [`ODD_OLDER`].
    Odd,
    /// Not sent at all (six arguments).
    Omitted,
}

fn key(k: i64) -> String {
    format!("{{g}}:{k}")
}

fn fillers(k: i64) -> String {
    format!("{{g}}:{k}:fillers")
}

impl Op {
    /// The declared keys: of a registration for `v`, `[v, v-1, rules,
    /// members, fillers of v-1, v+1, v-2]`; of a leave, `[first, first+1,
    /// rules, first+2, their fillers]`; the first ones of them for a caller
    /// that declares fewer.
    fn keys(&self) -> Vec<String> {
        let (mut all, count) = match self {
            Op::Register { v, keys, .. } => (registration_keys(*v), *keys),
            Op::Named { v, .. } => (registration_keys(*v), 8),
            Op::Leave { first, keys, .. } => (
                vec![
                    key(*first),
                    key(first + 1),
                    "{g}:rules".into(),
                    key(first + 2),
                    fillers(*first),
                    fillers(first + 1),
                    fillers(first + 2),
                    "{g}:members".into(),
                ],
                *keys,
            ),
        };
        all.truncate(count);
        all
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
                older,
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
                    if let Some([position, size]) = older {
                        args.extend([String::new(), position.clone(), size.clone()]);
                    }
                }
                args
            }
            Op::Named {
                expected,
                rules,
                token,
                sent,
                member,
                older: [position, size],
                ..
            } => vec![
                L_MS.to_string(),
                TTL_MS.to_string(),
                expected.to_string(),
                (*rules).to_owned(),
                token.clone(),
                sent.clone(),
                member.clone(),
                position.clone(),
                size.clone(),
            ],
            Op::Leave {
                c,
                rules,
                token,
                replied,
                ..
            } => {
                let mut args = vec![L_MS.to_string(), c.clone(), rules.clone(), token.clone()];
                args.extend(replied.clone());
                args
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

    /// Whether a Ranked registration script runs (the broken variants of
    /// the negative controls replace it).
    fn is_ranked_registration(&self) -> bool {
        matches!(
            self,
            Op::Register {
                mode: Mode::Ranked,
                ..
            } | Op::Named { .. }
        )
    }
}

fn registration_keys(v: i64) -> Vec<String> {
    vec![
        key(v),
        key(v - 1),
        "{g}:rules".into(),
        "{g}:members".into(),
        fillers(v - 1),
        key(v + 1),
        key(v - 2),
        fillers(v),
    ]
}

/// What the sequences reached, counted from the store's state before each
/// operation and the reply.
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
    /// Counted replies with a position, by the older pair sent (rule 19).
    older: BTreeMap<OlderKind, u64>,
    /// Counted replies whose entry in `k-1` was a reservation
    /// (registered = 0).
    reserved_entries: u64,
    /// Counted replies with the position in `k-2` read: a keeper's, or -1.
    older_read_keeper: u64,
    older_read_none: u64,
    /// Counted replies under jump hash with a position, and those that
    /// inherited positions (and how many).
    consistent: u64,
    inherited_replies: u64,
    inherited_positions: u64,
    arrivals: u64,
    wrong_interval: u64,
    refused: u64,
    /// Leaves that removed the token, and of them: late ones (the request
    /// executed in the interval after the one it named), those that took
    /// the reservation out of `x+1` (the token had registered in the open
    /// `x`) and those that took its entry out of `x`.
    left: u64,
    left_late: u64,
    left_reservation: u64,
    /// Registrations into a reopened set that changed their entry's base
    /// score there and deleted its filler cache (`KEYS[8]`).
    cache_base_changed: u64,
    left_marked: u64,
    left_after_reply: u64,
    /// Leaves of a token in neither set (`removed` = 0).
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
    /// Fillers that read their position from the filler cache, that wrote
    /// it (no cache), and that wrote it over a cache of another size (a
    /// reopened set); leaves that deleted a cache (rule 15).
    cache_hits: u64,
    cache_written: u64,
    cache_stale: u64,
    cache_dropped: u64,
    /// Error replies by kind (WRONGTYPE: a script of one mode on the
    /// other's keys; the key-count error: fewer keys than the script takes).
    errors: BTreeMap<String, u64>,
    flushes: u64,
    /// Operations per (mode, group size).
    sizes: BTreeMap<(&'static str, usize), u64>,
}

/// A ranked registration, by the state before it (rule 15).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Shape {
    /// In the closed set with a score carrying a position below its size
    /// (`p`, a registration's), the first member carrying it.
    Keeper,
    /// The same through a reservation (`p + 0.25`): it missed the closed
    /// interval (registered = 0).
    ReservedKeeper,
    /// In the closed set carrying a position below its size that an
    /// earlier member carries too (the two versions of a reopened interval
    /// carried one position twice): a filler.
    DuplicateKeeper,
    /// In the closed set carrying a position equal to its size: a filler
    /// (the group shrank).
    CarriedAtSize,
    /// In the closed set with an integer score above its size.
    CarriedPastSize,
    /// In the closed set as a returnee (`2^32 + p + 0.5`, or its
    /// reservation): a filler.
    ReturneeFiller,
    /// In the closed set as a newcomer (`2^40`, or its reservation).
    NewcomerFiller,
    /// Not in the closed set, sending a last position.
    Returnee,
    /// Not in the closed set, sending -1 (or what is not a position).
    Newcomer,
    /// Registered in the open set already: its ZADD writes its score again.
    Repeat,
}

impl Shape {
    fn is_filler(self) -> bool {
        matches!(
            self,
            Shape::DuplicateKeeper
                | Shape::CarriedAtSize
                | Shape::CarriedPastSize
                | Shape::ReturneeFiller
                | Shape::NewcomerFiller
        )
    }
}

/// A returnee's score starts here (`2^32`), a newcomer's is `2^40`.
const RETURNEE: f64 = 4_294_967_296.0;
const NEWCOMER: f64 = 1_099_511_627_776.0;

/// The position a score carries in a set of size `s` (`ranked.lua`'s
/// `carried`): `p` or `p + 0.25`, `0 <= p < s`.
fn carried(score: f64, s: usize) -> Option<usize> {
    let p = score.floor();
    let frac = score - p;
    (p >= 0.0 && p < s as f64 && (frac == 0.0 || frac == 0.25)).then_some(p as usize)
}

/// Whether a score is a reservation's (it ends in `.25` or `.75`).
fn is_reserved(score: f64) -> bool {
    let frac = score - score.floor();
    frac == 0.25 || frac == 0.75
}

/// Whether the member at index `i` of `set` (Redis order) keeps the
/// position its score carries: it is the first member carrying it.
fn keeps(set: &[(f64, String)], i: usize) -> bool {
    let Some(p) = carried(set[i].0, set.len()) else {
        return false;
    };
    let p = p as f64;
    set.iter().position(|(s, _)| *s >= p && *s <= p + 0.25) == Some(i)
}

/// The store's state an operation's tally needs, read before it.
#[derive(Default)]
struct Before {
    shape: Option<Shape>,
    sent_score: bool,
    takeover: bool,
    /// A registration's filler cache of `k-1`: `Some(true)` there and
    /// computed for the set's present size, `Some(false)` for another.
    cache: Option<bool>,
    /// A registration's: whether the filler cache of `k` (`KEYS[8]`) is
    /// there (a backward step reopened `k` after it was read closed).
    open_cache: bool,
    /// A leave's: the token's score in each of its three sets, and
    /// whether each set's cache is there.
    scores: [Option<f64>; 3],
    caches: [bool; 3],
}

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
    /// (the negative controls).
    broken_ranked: Option<String>,
}

/// An error reply's kind: WRONGTYPE, the key-count error, the TTL error,
/// or its code.
fn server_error_kind(e: &redis::RedisError) -> String {
    let code = e.code().unwrap_or("?");
    let detail = e.detail().unwrap_or("");
    if code == "WRONGTYPE" {
        "WRONGTYPE".into()
    } else if detail.contains(" keys") {
        "ERR keys".into()
    } else if detail.contains("key TTL") {
        "ERR ttl".into()
    } else {
        code.to_owned()
    }
}

fn store_error_kind(e: StoreError) -> String {
    match e {
        StoreError::WrongType => "WRONGTYPE".into(),
        StoreError::KeyCount => "ERR keys".into(),
        StoreError::BadArguments("ttl") => "ERR ttl".into(),
        StoreError::BadArguments(_) => "ERR".into(),
    }
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

    /// Loads a broken variant of `ranked.lua`, run instead of it from now
    /// on (a negative control).
    fn break_ranked(&mut self, source: &str) {
        let sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(source)
            .query(&mut self.conn)
            .expect("SCRIPT LOAD");
        self.broken_ranked = Some(sha);
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
            if r.content != s.content && std::env::var_os("DBGSET").is_some() {
                let set = r.name.trim_end_matches(":fillers").to_owned();
                eprintln!("SET {set}: {:?}", self.store.scores(&set));
            }
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
            "{}: {what}: key count differs (server {:?}, store {:?})",
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
            "{}: {what}: key names differ",
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

    /// `member`'s score in the store's set `key`.
    fn score(&self, key: &str, member: &str) -> Option<f64> {
        let set = self.store.scores(key)?;
        set.into_iter().find(|(_, m)| m == member).map(|(s, _)| s)
    }

    /// Whether `member` is in the store's set `key`, and with a
    /// registration's (base) score.
    fn entry(&self, key: &str, member: &str) -> Option<bool> {
        let set = self.store.scores(key)?;
        let (score, _) = set.iter().find(|(_, m)| m == member)?;
        Some(!is_reserved(*score))
    }

    /// Classifies a ranked registration from the store's state before it.
    fn classify(&self, op: &Op) -> Option<Shape> {
        let Op::Register {
            mode: Mode::Ranked,
            keys: 8,
            token,
            sent,
            ..
        } = op
        else {
            return None;
        };
        let keys = op.keys();
        let (open, closed) = (&keys[0], &keys[1]);
        if self.entry(open, token) == Some(true) {
            return Some(Shape::Repeat);
        }
        let set = self.store.scores(closed).unwrap_or_default();
        let size = set.len();
        let Some(at) = set.iter().position(|(_, m)| m == token) else {
            return Some(match sent.parse::<i64>() {
                Ok(p) if p >= 0 => Shape::Returnee,
                _ => Shape::Newcomer,
            });
        };
        let score = set[at].0;
        Some(match carried(score, size) {
            Some(_) if keeps(&set, at) && is_reserved(score) => Shape::ReservedKeeper,
            Some(_) if keeps(&set, at) => Shape::Keeper,
            Some(_) => Shape::DuplicateKeeper,
            None if carried(score, size + 1) == Some(size) => Shape::CarriedAtSize,
            None if score < RETURNEE => Shape::CarriedPastSize,
            None if score < NEWCOMER => Shape::ReturneeFiller,
            None => Shape::NewcomerFiller,
        })
    }

    /// What the tally of `op` needs of the store's state before it.
    fn before(&self, op: &Op) -> Before {
        let keys = op.keys();
        let mut before = Before {
            shape: self.classify(op),
            sent_score: self.sends_its_score(op),
            takeover: self.takes_over(op),
            ..Before::default()
        };
        let hash = |name: &str| match self.store.peek(name) {
            Some(Peek::Fields(f)) => Some(f),
            _ => None,
        };
        match op {
            Op::Leave { token, .. } if keys.len() >= 7 => {
                for (i, set) in [0, 1, 3].into_iter().enumerate() {
                    before.scores[i] = self.score(&keys[set], token);
                    before.caches[i] = hash(&keys[4 + i]).is_some();
                }
            }
            Op::Register { keys: 8, .. } | Op::Named { .. } => {
                // The counted size (rule 19: left entries are not).
                let size = self
                    .store
                    .scores(&keys[1])
                    .map_or(0, |s| s.iter().filter(|(sc, _)| *sc >= 0.0).count())
                    .to_string();
                before.cache =
                    hash(&keys[4]).map(|f| f.iter().any(|(k, v)| k == "#" && *v == size));
                before.open_cache = hash(&keys[7]).is_some();
            }
            _ => {}
        }
        before
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
            let sha = match &self.broken_ranked {
                Some(broken) if op.is_ranked_registration() => broken.as_str(),
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
                Err(e) => Err(server_error_kind(&e)),
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
            let before = self.before(op);
            let keys = op.keys();
            let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
            let args = op.args();
            let sim = match op {
                Op::Leave { .. } => self.store.execute_leave(self.now_us, &refs, &args),
                Op::Register { mode, .. } => self.store.execute(*mode, self.now_us, &refs, &args),
                Op::Named { .. } => self.store.execute(Mode::Ranked, self.now_us, &refs, &args),
            };
            let sim = sim.map_err(store_error_kind);
            assert_eq!(real, sim, "{}: {op:?}: replies differ", self.context);
            let (states, dbsize) = parse_dump(dump);
            self.compare_keys(&states, dbsize, &format!("after {op:?}"));
            self.count(op, &before, &real, &states);
            replies.push(real);
        }
        replies
    }

    /// Whether `token` is a filler of the closed set `op` reads (in it, and
    /// not the first member carrying a position below its size).
    fn fills(&self, op: &Op, token: &str) -> bool {
        let set = self.store.scores(&op.keys()[1]).unwrap_or_default();
        set.iter()
            .position(|(_, m)| m == token)
            .is_some_and(|at| !keeps(&set, at))
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
    /// digits of the position its score in the closed set carries: the
    /// path `ranked.lua` tries first (the store does not look at it).
    fn sends_its_score(&self, op: &Op) -> bool {
        let Op::Register {
            mode: Mode::Ranked,
            keys: 8,
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
                set.iter().any(|(s, m)| {
                    m == token
                        && carried(*s, set.len()).is_some()
                        && sent.parse::<f64>() == Ok(s.floor())
                })
            })
    }

    fn count(
        &mut self,
        op: &Op,
        before: &Before,
        reply: &Result<Vec<i64>, String>,
        after: &[KeyState],
    ) {
        let t = &mut self.tally;
        t.ops += 1;
        let r = match reply {
            Ok(r) => r,
            Err(kind) => {
                *t.errors.entry(kind.clone()).or_default() += 1;
                return;
            }
        };
        match (r[0], op) {
            (0, _) => t.wrong_interval += 1,
            (2, _) => t.refused += 1,
            (1, Op::Leave { .. }) if r[4] == 0 => t.left_absent += 1,
            (1, Op::Leave { c, replied, .. }) => {
                t.left += 1;
                // The open interval is the first named set or the second.
                let x = usize::from(c.parse() != Ok(r[1]));
                if x == 1 {
                    t.left_late += 1;
                }
                // Rule 19: a reservation (no reply from x) is removed, a
                // registration (or a reservation after a reply from x)
                // becomes a left entry and its reservation in x+1 goes.
                // (A `c` that Lua reads as a number and Rust does not, such
                // as " 7", names the other set: the token was there.)
                let Some(score) = before.scores[x].or(before.scores[1 - x]) else {
                    unreachable!("a leave removed a token from no set");
                };
                let replied_open = replied.as_deref() == Some(r[1].to_string().as_str());
                let from = if is_reserved(score) && !replied_open {
                    t.left_reservation += 1;
                    x
                } else {
                    t.left_marked += 1;
                    if is_reserved(score) {
                        t.left_after_reply += 1;
                    }
                    x + 1
                };
                if before.caches[x] {
                    t.cache_dropped += 1;
                }
                if after[[0, 1, 3][from]].content == Content::Missing {
                    t.left_emptied += 1;
                }
            }
            (
                1,
                Op::Register {
                    mode: Mode::Arrival,
                    ..
                },
            ) => t.arrivals += 1,
            (1 | 3, Op::Register { .. } | Op::Named { .. }) => {
                // The set member: the token, or the member name's.
                let (member, rules, kind) = match op {
                    Op::Register {
                        token, rules, kind, ..
                    } => (token.clone(), rules.as_str(), *kind),
                    Op::Named {
                        member,
                        rules,
                        kind,
                        ..
                    } => (format!("m:{member}"), *rules, *kind),
                    Op::Leave { .. } => unreachable!(),
                };
                if before.open_cache && after[7].content == Content::Missing {
                    t.cache_base_changed += 1;
                }
                if let Op::Named { .. } = op {
                    match r[0] {
                        1 if before.takeover => t.named_takeovers += 1,
                        1 => t.named_held += 1,
                        _ => t.named_in_use += 1,
                    }
                }
                if r[4] >= 0 {
                    *t.older.entry(kind).or_default() += 1;
                    if r[6] == 0 {
                        t.reserved_entries += 1;
                    }
                    let unsent = matches!(
                        kind,
                        OlderKind::Dropped | OlderKind::Unknown | OlderKind::Omitted
                    );
                    if r[7] >= 0 {
                        t.older_read_keeper += 1;
                    } else if unsent {
                        t.older_read_none += 1;
                    }
                    if rules.ends_with(":consistent") {
                        t.consistent += 1;
                        if r.len() > 9 {
                            t.inherited_replies += 1;
                            t.inherited_positions += r.len() as u64 - 9;
                        }
                    }
                }
                if let Some(shape) = before.shape {
                    *t.shapes.entry(shape).or_default() += 1;
                    match (shape, before.sent_score) {
                        (Shape::Keeper | Shape::ReservedKeeper, false) => {
                            t.keepers_sending_other += 1;
                        }
                        (Shape::DuplicateKeeper, true) => t.duplicates_sending_score += 1,
                        _ => {}
                    }
                    if shape.is_filler() && r[4] >= 0 {
                        t.filled += 1;
                    }
                }
                // A filler's position comes from the filler cache. A repeat
                // reads the closed set as a first registration does: what
                // counts is the member's place there.
                let filler = before.shape.is_some_and(Shape::is_filler)
                    || (r[4] >= 0
                        && matches!(before.shape, Some(Shape::Repeat) | None)
                        && self.fills(op, &member));
                let t = &mut self.tally;
                if filler {
                    match before.cache {
                        Some(true) => t.cache_hits += 1,
                        Some(false) => t.cache_stale += 1,
                        None => t.cache_written += 1,
                    }
                }
            }
            _ => panic!("{}: unexpected reply {r:?}", self.context),
        }
    }
}

/// One worker of a ranked sequence: its token, the last position it got,
/// and its last counted reply.
struct Member {
    token: String,
    last: i64,
    /// The virtual interval of its last counted reply, and the position and
    /// size of the closed set that reply read.
    reply: Option<(i64, i64, i64)>,
}

impl Member {
    fn new(rng: &mut ChaCha8Rng) -> Self {
        Self {
            token: token(rng),
            last: -1,
            reply: None,
        }
    }

    /// A counted reply from virtual interval `v`.
    fn learn(&mut self, v: i64, r: &[i64]) {
        self.reply = Some((v, r[4], r[5]));
        if r[4] >= 0 {
            self.last = r[4];
        }
    }

    /// The last position it sends: now and then one no client sends.
    fn sent(&self, rng: &mut ChaCha8Rng) -> String {
        if rng.random_bool(0.04) {
            ODD_SENT[rng.random_range(0..ODD_SENT.len())].to_owned()
        } else {
            self.last.to_string()
        }
    }

    /// The older pair it sends registering in `v` (rule 19): the pair its
    /// reply from `v - 1` told it (its position in closed `v - 2` and that
    /// set's size), else -1; now and then the pair dropped, a wrong one,
    /// an odd one, or (`omit`) none at all.
    fn older(&self, v: i64, rng: &mut ChaCha8Rng, omit: bool) -> (Option<[String; 2]>, OlderKind) {
        let known = self
            .reply
            .filter(|&(rv, p, _)| rv == v - 1 && p >= 0)
            .map(|(_, p, n)| (p, n));
        let pair = |a: i64, b: i64| Some([a.to_string(), b.to_string()]);
        let roll = rng.random_range(0..100);
        if roll < 4 {
            if omit && rng.random_bool(0.5) {
                return (None, OlderKind::Omitted);
            }
            let (a, b) = ODD_OLDER[rng.random_range(0..ODD_OLDER.len())];
            return (Some([a.to_owned(), b.to_owned()]), OlderKind::Odd);
        }
        let wrong = |rng: &mut ChaCha8Rng, not: Option<(i64, i64)>| {
            let o = rng.random_range(0..6);
            let mut m = o + rng.random_range(1..=4);
            if Some((o, m)) == not {
                m += 1;
            }
            pair(o, m)
        };
        match known {
            Some(_) if roll < 14 => (pair(-1, -1), OlderKind::Dropped),
            Some((p, n)) if roll < 24 => (wrong(rng, Some((p, n))), OlderKind::Wrong),
            Some((p, n)) => (pair(p, n), OlderKind::Right),
            None if roll < 14 => (wrong(rng, None), OlderKind::Wrong),
            None => (pair(-1, -1), OlderKind::Unknown),
        }
    }
}

fn token(rng: &mut ChaCha8Rng) -> String {
    format!("{:032x}", rng.random::<u128>())
}

/// Rules other than `own`, drawn from [`OTHER_RULES`].
fn other_rules(rng: &mut ChaCha8Rng, own: &str) -> String {
    loop {
        let rules = OTHER_RULES[rng.random_range(0..OTHER_RULES.len())];
        if rules != own {
            return rules.to_owned();
        }
    }
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
    FewKeys,
}

const EXTRAS: [(Extra, u32); 8] = [
    (Extra::Repeat, 30),
    (Extra::WrongInterval, 12),
    (Extra::Leave, 30),
    (Extra::OtherRules, 5),
    (Extra::OtherInterval, 4),
    (Extra::OtherMode, 1),
    (Extra::OddNumbers, 4),
    (Extra::FewKeys, 3),
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

/// A ranked group of `n` tokens under `rules` over `rounds` virtual
/// intervals: churn (presence per round from all to a third, newcomers,
/// tokens gone for good), returnees sending their last position, older
/// pairs right, dropped, wrong, odd and omitted, repeats, wrong-interval
/// requests, graceful leaves (open, late, far; before and after the
/// token's registration), other rules, other interval lengths, another
/// mode's script on the same keys, callers with fewer keys, restarts.
fn ranked_sequence(h: &mut Harness, seed: u64, n: usize, rounds: usize, rules: &'static str) {
    let consistent = u64::from(rules == CONSISTENT);
    let mut rng = ChaCha8Rng::seed_from_u64(seed << 8 | n as u64 | consistent << 7);
    let mut members: Vec<Member> = (0..n).map(|_| Member::new(&mut rng)).collect();
    let mut v = 1000;
    let mut foreign = false;
    let before = h.tally.ops;
    for round in 0..rounds {
        h.context = format!("ranked {rules} seed {seed} n {n} round {round} v {v}");
        // Churn: newcomers, and tokens that leave for good (the group keeps
        // at least half its size).
        if rng.random_bool(0.2) {
            for _ in 0..rng.random_range(1..=n.div_ceil(4)) {
                members.push(Member::new(&mut rng));
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
            let sent = m.sent(&mut rng);
            let (older, kind) = m.older(v, &mut rng, true);
            let register = |expected: i64, rules: &str, sent: String| Op::Register {
                mode: Mode::Ranked,
                v,
                keys: 8,
                interval_ms: L_MS,
                ttl: TTL_MS.to_string(),
                expected: expected.to_string(),
                rules: rules.to_owned(),
                token: m.token.clone(),
                sent,
                older: older.clone(),
                kind,
            };
            // The newest reply a leaving worker processed: from the open
            // interval (it may hold a lease from it), from the one before,
            // none, or an old caller that sends nothing.
            let replied = match rng.random_range(0..8) {
                0..3 => Some(k.to_string()),
                3..5 => Some((k - 1).to_string()),
                5..7 => Some("-1".to_owned()),
                _ => None,
            };
            let leave = |first: i64, keys: usize, c: String, rules: &str| Op::Leave {
                first,
                keys,
                c,
                rules: rules.to_owned(),
                token: m.token.clone(),
                replied: replied.clone(),
            };
            let op = match extra {
                None | Some(Extra::Repeat) => register(k, rules, sent),
                Some(Extra::WrongInterval) => {
                    let d = [-2, -1, 1, 3][rng.random_range(0..4)];
                    register(k + d, rules, sent)
                }
                Some(Extra::OtherRules) => {
                    let other = other_rules(&mut rng, rules);
                    if rng.random_bool(0.5) {
                        register(k, &other, sent)
                    } else {
                        leave(v, 8, k.to_string(), &other)
                    }
                }
                Some(Extra::OtherInterval) => {
                    // The script computes k from ARGV[1], down to the
                    // millisecond. The expected interval is one already
                    // over, so that the outcome (refused, or the
                    // wrong-interval answer) does not depend on when the
                    // request runs, and the sequence stays deterministic.
                    let l = [1, 7, 1000, 300_000][rng.random_range(0..4)];
                    let mut op = register(h.k(l) - 1, &format!("3:{l}:ranked:modulo"), sent);
                    if let Op::Register { interval_ms, .. } = &mut op {
                        *interval_ms = l;
                    }
                    op
                }
                Some(Extra::OtherMode) => Op::Register {
                    mode: Mode::Arrival,
                    v,
                    keys: [3, 8][rng.random_range(0..2)],
                    interval_ms: L_MS,
                    ttl: ARRIVAL_TTL_MS.to_string(),
                    expected: k.to_string(),
                    rules: rules.to_owned(),
                    token: String::new(),
                    sent,
                    older: None,
                    kind: OlderKind::Omitted,
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
                    let odd_ttl = ["abc", "+5", "007", "3000000.0", "0"][rng.random_range(0..5)];
                    match rng.random_range(0..3) {
                        which @ 0..2 => {
                            let mut op = register(k, rules, sent);
                            if let Op::Register { expected, ttl, .. } = &mut op {
                                if which == 0 {
                                    *expected = odd;
                                } else {
                                    *ttl = odd_ttl.to_owned();
                                }
                            }
                            op
                        }
                        // KEYS[2] is v for a c that reads as k - 1.
                        _ => leave(
                            if odd.starts_with(&(k - 1).to_string()) {
                                v - 1
                            } else {
                                v
                            },
                            8,
                            odd,
                            rules,
                        ),
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
                    leave(first, 8, c.to_string(), rules)
                }
                Some(Extra::FewKeys) => {
                    // Revision 2 declared five keys; three, the revision
                    // before. A registration fails after the prelude, a
                    // leave before anything.
                    if rng.random_bool(0.6) {
                        let mut op = register(k, rules, sent);
                        if let Op::Register { keys, .. } = &mut op {
                            *keys = [3, 5, 7][rng.random_range(0..3)];
                        }
                        op
                    } else {
                        leave(v, [3, 6][rng.random_range(0..2)], k.to_string(), rules)
                    }
                }
            };
            ops.push(op);
        }
        // Each worker remembers its last counted reply.
        for ((&(i, _), op), reply) in events.iter().zip(&ops).zip(h.play(&ops)) {
            if let (Ok(r), Op::Register { rules: sent, .. }) = (&reply, op) {
                if r[0] == 1 && sent == rules && r.len() >= 9 {
                    members[i].learn(v, r);
                }
                if r[0] == 2 && sent == rules {
                    foreign = true;
                }
            }
        }
        h.compare_all("after the round");
        if rng.random_bool(0.45) {
            reopen(h, &mut members, v, &mut rng, rules);
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
/// the members that registered in neither `v - 1` nor `v` (stalled or cut
/// off through the step: at most reserved in `v - 1`) register into the
/// reopened `v - 1`, then into `v`, as a worker that missed both does after
/// the step. A member whose entry in `v - 1` is a reservation overwrites it
/// with a registration of another base score: the closed set's scores
/// change without its size, and the registration deletes its filler cache
/// (`KEYS[8]`; see
/// `leave_script::a_reopened_set_whose_scores_change_without_growing_keeps_positions_a_permutation`).
/// Members already in `v` carry positions from the first version
/// of `v - 1`, these from the second, and the two can carry one position
/// twice: a member whose hole in the first version a filler took keeps it
/// in the second. So closed `v` can hold duplicate positions below its size
/// (rule 15's duplicate clause), read in the next round.
fn reopen(h: &mut Harness, members: &mut [Member], v: i64, rng: &mut ChaCha8Rng, rules: &str) {
    let late: Vec<usize> = (0..members.len())
        .filter(|&i| {
            let t = &members[i].token;
            h.entry(&key(v - 1), t) != Some(true) && h.entry(&key(v), t).is_none()
        })
        .collect();
    if late.is_empty() {
        return;
    }
    // The first version of v - 1's members that are not in v (their entry
    // in v - 1 is only a reservation): a leave takes them out of v - 1.
    let first_version: Vec<String> = h
        .store
        .scores(&key(v - 1))
        .unwrap_or_default()
        .into_iter()
        .map(|(_, m)| m)
        .filter(|m| h.entry(&key(v), m).is_none())
        .collect();
    h.tally.reopened += 1;
    let k = h.k(L_MS);
    let context = h.context.clone();
    for into in [v - 1, v] {
        h.context = format!("{context}, reopened into {into}");
        let ops: Vec<Op> = late
            .iter()
            .map(|&i| {
                let (older, kind) = members[i].older(into, rng, false);
                Op::Register {
                    mode: Mode::Ranked,
                    v: into,
                    keys: 8,
                    interval_ms: L_MS,
                    ttl: TTL_MS.to_string(),
                    expected: k.to_string(),
                    rules: rules.to_owned(),
                    token: members[i].token.clone(),
                    sent: members[i].last.to_string(),
                    older,
                    kind,
                }
            })
            .collect();
        for (&i, reply) in late.iter().zip(h.play(&ops)) {
            if let Ok(r) = reply
                && r[0] == 1
            {
                members[i].learn(into, &r);
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
                keys: 8,
                c: k.to_string(),
                rules: rules.to_owned(),
                token: m.clone(),
                replied: Some("-1".to_owned()),
            }]);
            h.compare_all("after a leave from the reopened set");
        }
        // The fillers of the first version of v - 1 register into v again
        // (a retry after a timeout): they find the cache written for the
        // first version, of another size now.
        if into == v - 1 {
            let listed = match h.store.peek(&fillers(v - 1)) {
                Some(Peek::Fields(fields)) => fields,
                _ => Vec::new(),
            };
            let ops: Vec<Op> = members
                .iter()
                .filter(|m| listed.iter().any(|(field, _)| *field == m.token))
                .map(|m| Op::Register {
                    mode: Mode::Ranked,
                    v,
                    keys: 8,
                    interval_ms: L_MS,
                    ttl: TTL_MS.to_string(),
                    expected: k.to_string(),
                    rules: rules.to_owned(),
                    token: m.token.clone(),
                    sent: m.last.to_string(),
                    older: Some(["-1".into(), "-1".into()]),
                    kind: OlderKind::Dropped,
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
/// anonymous ones in one group under `rules`: restarts (a new token under
/// a name, the old one sometimes still registering), names absent for
/// rounds, and member records seeded as other intervals would have left
/// them (the server's interval is 600 s long, so only seeded records are
/// older).
fn named_sequence(h: &mut Harness, seed: u64, n: usize, rounds: usize, rules: &'static str) {
    let consistent = u64::from(rules == CONSISTENT);
    let mut rng = ChaCha8Rng::seed_from_u64(seed << 8 | n as u64 | 0x40 | consistent << 7);
    let mut names: Vec<Name> = (0..n)
        .map(|i| Name {
            member: format!("web-{i}"),
            current: Member::new(&mut rng),
            old: None,
        })
        .collect();
    let mut anonymous: Vec<Member> = (0..n.div_ceil(2)).map(|_| Member::new(&mut rng)).collect();
    let mut v = 9000;
    let before = h.tally.ops;
    for round in 0..rounds {
        h.context = format!("named {rules} seed {seed} n {n} round {round} v {v}");
        let k = h.k(L_MS);
        for name in &mut names {
            if rng.random_bool(0.2) {
                // A restart: a new token that knows the name's last
                // position (persisted), not its last reply.
                let mut fresh = Member::new(&mut rng);
                fresh.last = name.current.last;
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
                let m = match (anon, old) {
                    (true, _) => &anonymous[i],
                    (false, true) => names[i].old.as_ref().expect("an old process"),
                    (false, false) => &names[i].current,
                };
                let (older, kind) = m.older(v, &mut rng, anon);
                if anon {
                    return Op::Register {
                        mode: Mode::Ranked,
                        v,
                        keys: 8,
                        interval_ms: L_MS,
                        ttl: TTL_MS.to_string(),
                        expected: k.to_string(),
                        rules: rules.to_owned(),
                        token: m.token.clone(),
                        sent: m.last.to_string(),
                        older,
                        kind,
                    };
                }
                Op::Named {
                    v,
                    expected: k,
                    rules,
                    token: m.token.clone(),
                    sent: m.last.to_string(),
                    member: names[i].member.clone(),
                    older: older.expect("a named registration sends its pair"),
                    kind,
                }
            })
            .collect();
        for (&(i, old, anon), reply) in events.iter().zip(h.play(&ops)) {
            let Ok(r) = reply else { continue };
            if r[0] == 1 || r[0] == 3 {
                let m = match (anon, old) {
                    (true, _) => &mut anonymous[i],
                    (false, true) => names[i].old.as_mut().expect("an old process"),
                    (false, false) => &mut names[i].current,
                };
                m.learn(v, &r);
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

/// An arrival group of about `n` registrations an interval (declaring
/// eight keys or three), with empty intervals, wrong-interval requests,
/// other rules, and the ranked and leave scripts on its counters
/// (WRONGTYPE), and restarts.
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
            let keys = [3, 8][rng.random_range(0..2)];
            let register = |expected: i64, rules: &str| Op::Register {
                mode: Mode::Arrival,
                v,
                keys,
                interval_ms: L_MS,
                ttl: ARRIVAL_TTL_MS.to_string(),
                expected: expected.to_string(),
                rules: rules.to_owned(),
                token: String::new(),
                sent: String::new(),
                older: None,
                kind: OlderKind::Omitted,
            };
            let op = match rng.random_range(0..100) {
                0..85 => register(k, ARRIVAL),
                85..92 => register(k + [-1, 1, 2][rng.random_range(0..3)], ARRIVAL),
                92..96 => register(k, &other_rules(&mut rng, ARRIVAL)),
                96..98 => Op::Leave {
                    first: v,
                    keys: 8,
                    c: k.to_string(),
                    rules: ARRIVAL.to_owned(),
                    token: token(&mut rng),
                    replied: None,
                },
                _ => Op::Register {
                    mode: Mode::Ranked,
                    v,
                    keys: 8,
                    interval_ms: L_MS,
                    ttl: TTL_MS.to_string(),
                    expected: k.to_string(),
                    rules: ARRIVAL.to_owned(),
                    token: token(&mut rng),
                    sent: "-1".into(),
                    older: Some(["-1".into(), "-1".into()]),
                    kind: OlderKind::Unknown,
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

/// The rules of seed `seed`'s groups: modulo for odd seeds, jump hash (the
/// rules under which registrations read inheritance) for even ones.
fn rules_of(seed: u64) -> &'static str {
    if seed % 2 == 1 { RANKED } else { CONSISTENT }
}

/// The store and the three scripts give the same replies and leave the same
/// keys over thousands of seeded operations, for groups of 1 to 40, through
/// every shape the scripts distinguish.
#[test]
fn the_store_and_the_scripts_agree_on_every_reply_and_key() {
    let server = RedisServer::start().expect("redis-server");
    let mut h = Harness::new(&server);
    for seed in [1, 2, 3, 4] {
        for n in [1, 2, 5, 16, 40] {
            ranked_sequence(&mut h, seed, n, 24, rules_of(seed));
        }
    }
    for seed in [1, 2] {
        for n in [1, 2, 5, 16, 40] {
            arrival_sequence(&mut h, seed, n, 20);
        }
    }
    for seed in [1, 2, 3] {
        for n in [1, 3, 8] {
            named_sequence(&mut h, seed, n, 25, rules_of(seed));
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
    let older = |k: OlderKind| t.older.get(&k).copied().unwrap_or(0);
    let errors = |k: &str| t.errors.get(k).copied().unwrap_or(0);
    for (what, count) in [
        ("keepers", shape(Shape::Keeper)),
        (
            "keepers through a reservation",
            shape(Shape::ReservedKeeper),
        ),
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
        ("registered = 0 (a reserved entry)", t.reserved_entries),
        ("older pairs sent right", older(OlderKind::Right)),
        ("older pairs dropped", older(OlderKind::Dropped)),
        ("older pairs unknown", older(OlderKind::Unknown)),
        ("older pairs wrong", older(OlderKind::Wrong)),
        ("older pairs odd", older(OlderKind::Odd)),
        ("older pairs omitted", older(OlderKind::Omitted)),
        ("older positions read: a keeper's", t.older_read_keeper),
        ("older positions read: none", t.older_read_none),
        ("counted registrations under jump hash", t.consistent),
        ("replies with inherited positions", t.inherited_replies),
        ("arrivals", t.arrivals),
        ("wrong-interval answers", t.wrong_interval),
        ("refusals", t.refused),
        ("leaves that removed", t.left),
        ("late leaves that removed", t.left_late),
        ("leaves that removed a reservation", t.left_reservation),
        (
            "leaves that turned a registration into a left entry",
            t.left_marked,
        ),
        (
            "leaves that kept a reservation as left after a reply",
            t.left_after_reply,
        ),
        ("leaves of an absent token", t.left_absent),
        ("leaves that emptied a set", t.left_emptied),
        ("WRONGTYPE errors", errors("WRONGTYPE")),
        ("key-count errors", errors("ERR keys")),
        ("TTL errors", errors("ERR ttl")),
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
        ("leaves that deleted a filler cache", t.cache_dropped),
        (
            "registrations that changed a base score and deleted a filler cache",
            t.cache_base_changed,
        ),
    ] {
        assert!(count >= 5, "only {count} {what}: {t:?}");
    }
}

/// Plays ranked sequences (seeds 1 to 3, groups of 5, 16 and 40) under
/// `rules` through `broken`, a variant of `ranked.lua`, against the store;
/// returns the failure message (`None`: no difference found).
fn difference_with(broken: &str, rules: Option<&'static str>) -> Option<String> {
    let server = RedisServer::start().expect("redis-server");
    let mut h = Harness::new(&server);
    h.break_ranked(broken);
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        for seed in [1, 2, 3] {
            for n in [5, 16, 40] {
                ranked_sequence(&mut h, seed, n, 30, rules.unwrap_or(rules_of(seed)));
            }
        }
    }));
    let panic = caught.err()?;
    Some(
        panic
            .downcast_ref::<String>()
            .map_or_else(String::new, String::clone),
    )
}

/// The negative control of the filler cache's size check (rule 15): a
/// `ranked.lua` that reads a filler's cached position whatever size the
/// cache was computed for answers, after a reopened set grew, from the set
/// it was before; the comparison with the store, which computes every
/// position from the set, catches it.
#[test]
fn a_script_that_reads_a_filler_cache_of_another_size_is_caught() {
    let source = Script::for_mode(Mode::Ranked).source();
    let check = "cached[1] == string.format('%d', size) and cached[2]";
    assert!(source.contains(check), "the size check is in ranked.lua");
    let message = difference_with(&source.replace(check, "cached[2]"), None)
        .expect("the broken script is caught");
    assert!(message.contains("differ"), "{message}");
}

/// The negative control of inheritance (rule 19): a `ranked.lua` that
/// inherits a position of closed `k-2` whose keeper is in the set of `k-1`
/// (it may hold a lease from `k-1`) answers other positions than the
/// store; the comparison catches it.
#[test]
fn a_script_that_inherits_a_present_keepers_position_is_caught() {
    let source = Script::for_mode(Mode::Ranked).source();
    let check = "holder ~= member and not redis.call('ZSCORE', KEYS[2], holder)";
    assert!(
        source.contains(check),
        "the presence check is in ranked.lua"
    );
    let message = difference_with(&source.replace(check, "holder ~= member"), Some(CONSISTENT))
        .expect("the broken script is caught");
    assert!(message.contains("replies differ"), "{message}");
}

/// The negative control of the cache of `k` (rule 15 under rule 19): a
/// `ranked.lua` whose registration does not delete the filler cache of the
/// set it writes when it changes its entry's base score there (a reopened
/// set whose reservation becomes a registration of another base, the size
/// unchanged) leaves a cache that answers from the set as it was; the
/// comparison with the store catches it.
#[test]
fn a_script_that_keeps_the_cache_of_a_set_whose_base_scores_changed_is_caught() {
    let source = Script::for_mode(Mode::Ranked).source();
    let check = "  redis.call('DEL', KEYS[8])\n";
    assert!(source.contains(check), "the deletion is in ranked.lua");
    let message =
        difference_with(&source.replace(check, "\n"), None).expect("the broken script is caught");
    assert!(message.contains("differ"), "{message}");
}
