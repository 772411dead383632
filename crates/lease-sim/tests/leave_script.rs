//! The leave script (`leave.lua`, rules 16 and 19) and the Ranked
//! registration (`ranked.lua`, revision 3) on a real `redis-server`, side
//! by side with the simulated store's re-implementation of them: every
//! script run here also runs on a [`SimStore`] at the time the script read,
//! and the two must give the same reply and hold the same keys afterwards.
//!
//! The leave takes the token out of the interval open at execution, `x`,
//! whichever of the named keys that is: out of the reservation in `x+1`
//! when the token registered in `x` (it stays counted in `x`), otherwise out
//! of its entry in `x` (with that set's filler cache). It never writes a
//! closed set, creates nothing, and writes nothing when the server's
//! interval is neither named one or the rules differ.
//!
//! The registrations name the keys of a virtual interval `m` while `ARGV[3]`
//! names the server's interval (as `differential.rs` does), so one test can
//! fill several intervals' sets through the real script.

use lease_core::{Mode, Script};
use lease_sim::{Peek, SimStore, StoreError};
use lease_testkit::RedisServer;
use redis::Value;

/// A long interval, so that the test never straddles a boundary.
const L_MS: i64 = 600_000;
/// The key TTL a Ranked worker sends (`5L`).
const TTL_MS: i64 = 5 * L_MS;
const RULES: &str = "3:600000:ranked:modulo";
const ARRIVAL: &str = "1:600000:arrival:modulo";
const TOKEN: &str = "0123456789abcdef0123456789abcdef";
const THIRD: &str = "33333333333333333333333333333333";
const NEW: &str = "77777777777777777777777777777777";
const OTHER: &str = "ffffffffffffffffffffffffffffffff";
/// A newcomer's score (`2^40`) and its reservation's.
const NEWCOMER: &str = "1099511627776";
const NEWCOMER_RESERVED: &str = "1099511627776.25";

fn ints(v: Value) -> Vec<i64> {
    redis::from_redis_value(v).expect("an array of integers")
}

fn key(k: i64) -> String {
    format!("{{g}}:{k}")
}

fn fillers(k: i64) -> String {
    format!("{{g}}:{k}:fillers")
}

/// A registration's eight keys for interval `m`, as a worker sends them.
fn registration_keys(m: i64) -> Vec<String> {
    vec![
        key(m),
        key(m - 1),
        "{g}:rules".to_owned(),
        "{g}:members".to_owned(),
        fillers(m - 1),
        key(m + 1),
        key(m - 2),
        fillers(m),
    ]
}

/// A leave's eight keys naming `c`.
fn leave_keys(c: i64) -> Vec<String> {
    vec![
        key(c),
        key(c + 1),
        "{g}:rules".to_owned(),
        key(c + 2),
        fillers(c),
        fillers(c + 1),
        fillers(c + 2),
        "{g}:members".to_owned(),
    ]
}

/// The server's interval and time now, in microseconds.
fn server_now(server: &RedisServer) -> (i64, i64) {
    let t: Vec<String> = redis::from_redis_value(server.command(&["TIME"]).unwrap()).unwrap();
    let us = t[0].parse::<i64>().unwrap() * 1_000_000 + t[1].parse::<i64>().unwrap();
    (us / 1000 / L_MS, us)
}

fn members(server: &RedisServer, k: &str) -> Vec<String> {
    redis::from_redis_value(server.command(&["ZRANGE", k, "0", "-1"]).unwrap()).unwrap()
}

/// A sorted set's `member score` pairs in order, as Redis writes them.
fn scores(server: &RedisServer, k: &str) -> Vec<String> {
    redis::from_redis_value(
        server
            .command(&["ZRANGE", k, "0", "-1", "WITHSCORES"])
            .unwrap(),
    )
    .unwrap()
}

fn exists(server: &RedisServer, k: &str) -> bool {
    server.command(&["EXISTS", k]).unwrap() == Value::Int(1)
}

/// An error's kind, as the scripts' replies (the testkit's message holds
/// the server's) and the store's errors both show it.
fn server_error_kind(message: &str) -> String {
    if message.contains("WRONGTYPE") {
        "WRONGTYPE".into()
    } else if message.contains(" keys") {
        "ERR keys".into()
    } else if message.contains("key TTL") {
        "ERR ttl".into()
    } else {
        "ERR".into()
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

/// The whole key space on both sides: the same names, and the same content
/// under each (sorted sets with their scores, hashes, strings).
fn compare(server: &RedisServer, store: &SimStore) {
    let mut names: Vec<String> =
        redis::from_redis_value(server.command(&["KEYS", "*"]).unwrap()).unwrap();
    names.sort();
    assert_eq!(names, store.key_names(), "key names");
    for name in &names {
        let kind: String =
            redis::from_redis_value(server.command(&["TYPE", name]).unwrap()).expect("a type");
        match kind.as_str() {
            "zset" => {
                let real: Vec<(String, f64)> = scores(server, name)
                    .chunks(2)
                    .map(|p| (p[0].clone(), p[1].parse().expect("a score")))
                    .collect();
                let sim: Vec<(String, f64)> = store
                    .scores(name)
                    .expect("a set")
                    .into_iter()
                    .map(|(s, m)| (m, s))
                    .collect();
                assert_eq!(real, sim, "{name}");
            }
            "hash" => {
                let flat: Vec<String> =
                    redis::from_redis_value(server.command(&["HGETALL", name]).unwrap()).unwrap();
                let mut real: Vec<(String, String)> = flat
                    .chunks(2)
                    .map(|p| (p[0].clone(), p[1].clone()))
                    .collect();
                real.sort();
                assert_eq!(Some(Peek::Fields(real)), store.peek(name), "{name}");
            }
            "string" => {
                let real: String =
                    redis::from_redis_value(server.command(&["GET", name]).unwrap()).unwrap();
                let sim = match store.peek(name) {
                    Some(Peek::Text(t)) => t,
                    Some(Peek::Counter(c)) => c.to_string(),
                    other => panic!("{name}: {other:?} in the store"),
                };
                assert_eq!(real, sim, "{name}");
            }
            other => panic!("{name}: unexpected type {other}"),
        }
    }
}

/// Runs `script` with `keys` and `args` on the server, then on the store at
/// the time the script read (the reply's; for an error, the `TIME` read
/// just before), and requires the same reply (for an error, the same kind)
/// and the same key space after.
fn run(
    server: &RedisServer,
    store: &mut SimStore,
    script: &Script,
    keys: &[String],
    args: &[String],
) -> Result<Vec<i64>, String> {
    let (_, before) = server_now(server);
    let count = keys.len().to_string();
    let mut cmd: Vec<&str> = vec!["EVAL", script.source(), &count];
    cmd.extend(keys.iter().map(String::as_str));
    cmd.extend(args.iter().map(String::as_str));
    let real = match server.command(&cmd) {
        Ok(v) => Ok(ints(v)),
        Err(e) => Err(server_error_kind(&e.to_string())),
    };
    let now = match &real {
        Ok(r) if r.len() >= 4 => r[2] * 1_000_000 + r[3],
        _ => before,
    };
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let sim = if script.is_leave() {
        store.execute_leave(now, &refs, args)
    } else {
        store.execute(script.mode(), now, &refs, args)
    };
    assert_eq!(real, sim.map_err(store_error_kind), "{keys:?} {args:?}");
    compare(server, store);
    real
}

/// A Ranked registration of `token` naming the keys of interval `m`, with
/// `rules`, the last position `sent` and the older pair `older`, on both.
fn register_with(
    server: &RedisServer,
    store: &mut SimStore,
    m: i64,
    rules: &str,
    token: &str,
    sent: &str,
    older: (i64, i64),
) -> Result<Vec<i64>, String> {
    let (k, _) = server_now(server);
    let args = [
        L_MS.to_string(),
        TTL_MS.to_string(),
        k.to_string(),
        rules.to_owned(),
        token.to_owned(),
        sent.to_owned(),
        String::new(),
        older.0.to_string(),
        older.1.to_string(),
    ];
    run(
        server,
        store,
        Script::for_mode(Mode::Ranked),
        &registration_keys(m),
        &args,
    )
}

/// [`register_with`] under the test's rules with no older pair, counted:
/// the fields after the server time.
fn register(server: &RedisServer, store: &mut SimStore, m: i64, token: &str) -> Vec<i64> {
    let r = register_with(server, store, m, RULES, token, "-1", (-1, -1)).expect("counted");
    assert_eq!(r[0], 1, "{r:?}");
    r[4..].to_vec()
}

/// Runs the leave script naming `c` on both.
fn leave(server: &RedisServer, store: &mut SimStore, c: i64, token: &str, rules: &str) -> Vec<i64> {
    let (k0, _) = server_now(server);
    let args = [
        L_MS.to_string(),
        c.to_string(),
        rules.to_owned(),
        token.to_owned(),
    ];
    let r = run(server, store, Script::leave(), &leave_keys(c), &args).expect("a reply");
    assert_eq!(r[1], k0, "the interval did not change during the test");
    r
}

/// `k-1`: TOKEN, THIRD and OTHER register (newcomers; fillers 0, 1, 2 of
/// closed `k-1`), reserving `k`; `k`: TOKEN and OTHER register (carrying 0
/// and 2), reserving `k+1`. THIRD misses `k`: its entry there is its
/// reservation.
fn fill(server: &RedisServer, store: &mut SimStore, k: i64) {
    server.command(&["FLUSHALL"]).unwrap();
    store.flush();
    for token in [TOKEN, THIRD, OTHER] {
        assert_eq!(register(server, store, k - 1, token), [-1, 0, -1, -1, -1]);
    }
    assert_eq!(register(server, store, k, TOKEN), [0, 3, 1, -1, 0]);
    assert_eq!(register(server, store, k, OTHER), [2, 3, 1, -1, 0]);
    assert_eq!(
        scores(server, &key(k)),
        [TOKEN, "0", OTHER, "2", THIRD, NEWCOMER_RESERVED]
    );
    assert_eq!(scores(server, &key(k + 1)), [TOKEN, "0.25", OTHER, "2.25"]);
}

#[test]
fn leave_marks_a_registered_entry_left_or_removes_a_reservation_on_redis_and_in_the_simulator() {
    let server = RedisServer::start().unwrap();
    let mut store = SimStore::new();
    let (k, _) = server_now(&server);
    fill(&server, &mut store, k);

    // Rules differ: refused, nothing written.
    let r = leave(&server, &mut store, k, TOKEN, "1:1000:ranked:modulo");
    assert_eq!((r[0], r.len()), (2, 4));
    // Named two intervals back: k is neither c nor c + 1; nothing written.
    let r = leave(&server, &mut store, k - 2, TOKEN, RULES);
    assert_eq!((r[0], r.len()), (0, 4));
    // Named the closed interval k - 1 (the request executed late): the
    // open interval is k. TOKEN registered in k, so its entry there becomes
    // a left entry (-1: present, not counted) and its reservation in k + 1
    // goes; k - 1 is untouched.
    let r = leave(&server, &mut store, k - 1, TOKEN, RULES);
    assert_eq!((r[0], r[4]), (1, 1), "removed");
    assert_eq!(
        scores(&server, &key(k)),
        [TOKEN, "-1", OTHER, "2", THIRD, NEWCOMER_RESERVED]
    );
    assert_eq!(members(&server, &key(k + 1)), [OTHER]);
    assert_eq!(
        members(&server, &key(k - 1)),
        [TOKEN, THIRD, OTHER],
        "closed set untouched"
    );
    // THIRD did not register in k: its entry there (its reservation) goes.
    let r = leave(&server, &mut store, k, THIRD, RULES);
    assert_eq!((r[0], r[4]), (1, 1));
    assert_eq!(members(&server, &key(k)), [TOKEN, OTHER]);
    assert_eq!(members(&server, &key(k + 1)), [OTHER]);
    // A second and a third leave of TOKEN in k (retries): its entry is a
    // left entry, so nothing more changes.
    for _ in 0..2 {
        let r = leave(&server, &mut store, k, TOKEN, RULES);
        assert_eq!((r[0], r[4]), (1, 0));
        assert_eq!(scores(&server, &key(k)), [TOKEN, "-1", OTHER, "2"]);
    }
    assert_eq!(members(&server, &key(k - 1)), [TOKEN, THIRD, OTHER]);
    // A set that does not exist is not created.
    let r = leave(&server, &mut store, k + 5, TOKEN, RULES);
    assert_eq!(r[0], 0);
    for m in k + 5..=k + 7 {
        assert!(!exists(&server, &key(m)), "{m}");
    }
    let r = leave(&server, &mut store, k, NEW, RULES);
    assert_eq!((r[0], r[4]), (1, 0));
    assert!(!exists(&server, &key(k + 2)));
    assert_eq!(store.closed_set_writes(), 0);
}

/// The leave deletes the filler cache of the set it removes from: here the
/// open set `k`, whose cache a registration into `k + 1` wrote (as after a
/// backward step of the server clock, rule 10, the set was read closed).
#[test]
fn leave_deletes_the_filler_cache_of_the_set_it_removes_from_on_redis() {
    let server = RedisServer::start().unwrap();
    let mut store = SimStore::new();
    let (k, _) = server_now(&server);
    fill(&server, &mut store, k);
    // NEW joins k as a newcomer; closed k (size 4): TOKEN keeps 0, OTHER 2;
    // the fillers THIRD (a reservation of a newcomer's score) and NEW, of
    // one base score (2^40), in member order, take 1 and 3. NEW,
    // registering into k + 1, writes k's cache.
    assert_eq!(register(&server, &mut store, k, NEW), [-1, 3, -1, -1, -1]);
    assert_eq!(register(&server, &mut store, k + 1, NEW), [3, 4, 1, -1, 3]);
    let cache: Vec<String> =
        redis::from_redis_value(server.command(&["HGETALL", &fillers(k)]).unwrap()).unwrap();
    assert_eq!(cache, ["#", "4", THIRD, "1", NEW, "3"]);
    let r = leave(&server, &mut store, k, THIRD, RULES);
    assert_eq!((r[0], r[4]), (1, 1));
    assert!(!exists(&server, &fillers(k)), "the cache went with THIRD");
    assert_eq!(members(&server, &key(k)), [TOKEN, OTHER, NEW]);
    assert_eq!(
        scores(&server, &key(k + 1)),
        [TOKEN, "0.25", OTHER, "2.25", NEW, "3"]
    );
}

/// Rule 15 on a real `redis-server`: `ranked.lua` computes hole-filling
/// positions from a closed set's scores, by the rule the simulator's store
/// implements (`store::tests::positions_fill_holes`), and reserves each
/// registration's place in the next interval.
#[test]
fn ranked_positions_fill_holes_on_redis() {
    let server = RedisServer::start().unwrap();
    let (k, _) = server_now(&server);
    let t: Vec<String> = (0..6).map(|x| format!("{x:032x}")).collect();
    // Closed k-1 (size 6): four carried positions 0, 1, 3, 4, a returnee
    // whose last position was 2, and a newcomer.
    let closed = key(k - 1);
    for (score, tok) in [
        ("0", &t[0]),
        ("1", &t[1]),
        ("3", &t[3]),
        ("4", &t[4]),
        ("4294967298.5", &t[2]),
        (NEWCOMER, &t[5]),
    ] {
        server.command(&["ZADD", &closed, score, tok]).unwrap();
    }
    let source = format!(
        "{}{}",
        include_str!("../../lease-core/src/scripts/prelude.lua"),
        include_str!("../../lease-core/src/scripts/ranked.lua")
    );
    assert_eq!(source, Script::for_mode(Mode::Ranked).source());
    let keys = registration_keys(k);
    let mut got = Vec::new();
    for tok in &t {
        let args = [
            L_MS.to_string(),
            TTL_MS.to_string(),
            k.to_string(),
            RULES.to_owned(),
            tok.clone(),
            "-1".to_owned(),
            String::new(),
            "-1".to_owned(),
            "-1".to_owned(),
        ];
        let mut cmd: Vec<&str> = vec!["EVAL", &source, "8"];
        cmd.extend(keys.iter().map(String::as_str));
        cmd.extend(args.iter().map(String::as_str));
        let r = ints(server.command(&cmd).unwrap());
        assert_eq!(r[0], 1, "{r:?}");
        // Registered in k-1; closed k-2 read (missing: size 0).
        assert_eq!(r[6..], [1, -1, 0], "{r:?}");
        got.push((r[4], r[5]));
    }
    // The four keep 0, 1, 3, 4 (all below 6); the fillers take the free 2
    // and 5 in order: the returnee first, then the newcomer.
    assert_eq!(got, [(0, 6), (1, 6), (2, 6), (3, 6), (4, 6), (5, 6)]);
    // Carried into k as integers, and reserved in k+1.
    let mut expected = Vec::new();
    let mut reserved = Vec::new();
    for (i, tok) in t.iter().enumerate() {
        expected.extend([tok.clone(), i.to_string()]);
        reserved.extend([tok.clone(), format!("{i}.25")]);
    }
    assert_eq!(scores(&server, &key(k)), expected);
    assert_eq!(scores(&server, &key(k + 1)), reserved);
}

/// Rule 15's duplicate clause on a real `redis-server`: of two members
/// carrying one position (a registration's `p` or a reservation's `p +
/// 0.25`), only the first in the set's order keeps it, and the later one
/// fills a hole before the fillers carried past the size. The set and the
/// positions (worked out by hand) are those of
/// `store::tests::of_two_members_carrying_one_position_only_the_first_keeps_it`.
#[test]
fn of_two_members_carrying_one_position_only_the_first_keeps_it_on_redis() {
    let server = RedisServer::start().unwrap();
    let (k, _) = server_now(&server);
    let t: Vec<String> = (0..6).map(|x| format!("{x:032x}")).collect();
    let closed = key(k - 1);
    for (score, tok) in [
        ("0", &t[1]),
        ("0.25", &t[3]),
        ("3.25", &t[0]),
        ("3.25", &t[2]),
        ("9", &t[5]),
        ("4294967297.5", &t[4]),
    ] {
        server.command(&["ZADD", &closed, score, tok]).unwrap();
    }
    let source = Script::for_mode(Mode::Ranked).source();
    let keys = registration_keys(k);
    // Sent as newcomers (-1), then with the positions workers would send
    // (their carried positions; the returnee its last position, 1): the
    // script tries the sent position first, and a duplicate sending it
    // must still be a filler.
    for sent in [["-1"; 6], ["3", "0", "3", "0", "1", "9"]] {
        let got: Vec<(i64, i64, i64)> = t
            .iter()
            .zip(sent)
            .map(|(tok, sent)| {
                let args = [
                    L_MS.to_string(),
                    TTL_MS.to_string(),
                    k.to_string(),
                    RULES.to_owned(),
                    tok.clone(),
                    sent.to_owned(),
                    String::new(),
                    "-1".to_owned(),
                    "-1".to_owned(),
                ];
                let mut cmd: Vec<&str> = vec!["EVAL", source, "8"];
                cmd.extend(keys.iter().map(String::as_str));
                cmd.extend(args.iter().map(String::as_str));
                let r = ints(server.command(&cmd).unwrap());
                assert_eq!(r[0], 1, "{r:?}");
                (r[4], r[5], r[6])
            })
            .collect();
        // t1 keeps 0 and t0 keeps 3; t3, t2, t5, t4 take 1, 2, 4, 5. The
        // reservations' members (t0, t2, t3) read registered = 0.
        assert_eq!(
            got,
            [
                (3, 6, 0),
                (0, 6, 1),
                (2, 6, 0),
                (1, 6, 0),
                (5, 6, 1),
                (4, 6, 1)
            ],
            "sent {sent:?}"
        );
    }
    // Carried into k as integers.
    assert_eq!(
        scores(&server, &key(k)),
        [
            &t[1][..],
            "0",
            &t[3],
            "1",
            &t[2],
            "2",
            &t[0],
            "3",
            &t[5],
            "4",
            &t[4],
            "5"
        ]
    );
}

/// Four workers settled in virtual intervals `m0` to `m0 + 2` under jump
/// hash; then `crashed` (if any) registers no more, and the others
/// register in `m0 + 3` and `m0 + 4`, sending the older pairs their replies
/// told them. On the server and the store alike.
fn settle(server: &RedisServer, store: &mut SimStore, m0: i64, crashed: Option<usize>) {
    server.command(&["FLUSHALL"]).unwrap();
    store.flush();
    for i in 0..4 {
        reg(server, store, m0, i, "-1", (-1, -1));
    }
    // Fillers of closed m0 (closed m0 - 1 missing: size 0).
    for i in 0..4 {
        assert_eq!(
            reg(server, store, m0 + 1, i, "-1", (-1, -1)),
            [i as i64, 4, 1, -1, 0]
        );
    }
    for m in m0 + 2..=m0 + 4 {
        for i in 0..4 {
            if m > m0 + 2 && Some(i) == crashed {
                continue;
            }
            // Settled: its own position again, no size shrank (in m0 + 4
            // the crashed one still counts in closed m0 + 3, through its
            // reservation), so nothing more is read.
            let p = i as i64;
            let r = reg(server, store, m, i, &p.to_string(), (p, 4));
            assert_eq!(r, [p, 4, 1, -1, -1], "{m}");
        }
    }
}

const CONSISTENT: &str = "3:600000:ranked:consistent";

/// Token `i` of four, registering under jump hash on both: the fields
/// after the server time.
fn reg(
    server: &RedisServer,
    store: &mut SimStore,
    m: i64,
    i: usize,
    sent: &str,
    older: (i64, i64),
) -> Vec<i64> {
    let token = format!("{i:032x}");
    let r = register_with(server, store, m, CONSISTENT, &token, sent, older).unwrap();
    assert_eq!(r[0], 1, "{r:?}");
    r[4..].to_vec()
}

/// Rule 19 on a real `redis-server`: a member that misses one interval
/// keeps its position through its reservation and reads registered = 0,
/// its older pair, unsent, read from closed `k-2`; under jump hash the
/// filler of a crashed member's hole inherits its position, the survivors
/// not a present keeper's. Each step runs on the store too.
#[test]
fn reservations_older_pairs_and_inheritance_on_redis_and_in_the_simulator() {
    let server = RedisServer::start().unwrap();
    let mut store = SimStore::new();
    let (k, _) = server_now(&server);
    let m0 = k - 10;
    // t1 misses m0 + 3 and comes back in m0 + 4: in closed m0 + 3 it keeps
    // 1 through its reservation (registered = 0); its older pair is read
    // from closed m0 + 2, where it kept 1 of 4.
    settle(&server, &mut store, m0, Some(1));
    assert_eq!(
        reg(&server, &mut store, m0 + 4, 1, "1", (-1, -1)),
        [1, 4, 0, 1, 4]
    );
    // t1 crashed for good: in m0 + 5, closed m0 + 4 = {t0: 0, t2: 2, t3: 3}.
    // t3 fills the hole 1 and inherits 1 of closed m0 + 3, whose keeper t1
    // is not in m0 + 4; t0 and t2 do not inherit 3, kept by t3, which is.
    settle(&server, &mut store, m0, Some(1));
    assert_eq!(
        reg(&server, &mut store, m0 + 5, 0, "0", (0, 4)),
        [0, 3, 1, -1, 4]
    );
    assert_eq!(
        reg(&server, &mut store, m0 + 5, 2, "2", (2, 4)),
        [2, 3, 1, -1, 4]
    );
    assert_eq!(
        reg(&server, &mut store, m0 + 5, 3, "3", (3, 4)),
        [1, 3, 1, -1, 4, 1]
    );
    assert_eq!(
        reg(&server, &mut store, m0 + 5, 3, "3", (-1, -1)),
        [1, 3, 1, 3, 4, 1]
    );
    // t1, back in m0 + 6: absent from closed m0 + 5, a returnee.
    assert_eq!(
        reg(&server, &mut store, m0 + 6, 1, "1", (-1, -1)),
        [-1, 3, -1, -1, -1]
    );
    // t3 crashed instead: every survivor inherits its position 3.
    settle(&server, &mut store, m0, Some(3));
    for i in 0..3 {
        let p = i as i64;
        assert_eq!(
            reg(&server, &mut store, m0 + 5, i, &p.to_string(), (p, 4)),
            [p, 3, 1, -1, 4, 3]
        );
    }
}

/// Closed `k-2` is read only for an unsent older pair or for inheritance:
/// a key of another type there fails those registrations only, on the
/// server and in the store alike (`store::tests::closed_k_minus_2_is_read_only_when_the_script_reads_it`).
#[test]
fn closed_k_minus_2_is_read_only_when_the_script_reads_it_on_redis() {
    let server = RedisServer::start().unwrap();
    let mut store = SimStore::new();
    let (k, _) = server_now(&server);
    let r = register_with(&server, &mut store, k - 1, ARRIVAL, TOKEN, "-1", (-1, -1)).unwrap();
    assert_eq!(r[4..], [-1, 0, -1, -1, -1]);
    // An Arrival counter in k - 2 (the same rules string).
    let args = [
        L_MS.to_string(),
        (3 * L_MS).to_string(),
        k.to_string(),
        ARRIVAL.to_owned(),
    ];
    let r = run(
        &server,
        &mut store,
        Script::for_mode(Mode::Arrival),
        &registration_keys(k - 2),
        &args,
    );
    assert_eq!(r.unwrap()[4..], [0, -1]);
    let r = register_with(&server, &mut store, k, ARRIVAL, TOKEN, "-1", (0, 1)).unwrap();
    assert_eq!(r[4..], [0, 1, 1, -1, -1]);
    let r = register_with(&server, &mut store, k, ARRIVAL, TOKEN, "-1", (-1, -1));
    assert_eq!(r, Err("WRONGTYPE".into()));
    // Fewer than eight keys: the prelude's writes stay, then the error.
    server.command(&["FLUSHALL"]).unwrap();
    store.flush();
    let args = [
        L_MS.to_string(),
        TTL_MS.to_string(),
        k.to_string(),
        RULES.to_owned(),
        TOKEN.to_owned(),
        "-1".to_owned(),
    ];
    let keys = &registration_keys(k)[..3];
    let r = run(
        &server,
        &mut store,
        Script::for_mode(Mode::Ranked),
        keys,
        &args,
    );
    assert_eq!(r, Err("ERR keys".into()));
    assert!(exists(&server, "{g}:rules"));
    let leave_args = [L_MS.to_string(), k.to_string(), RULES.into(), TOKEN.into()];
    let r = run(
        &server,
        &mut store,
        Script::leave(),
        &leave_keys(k)[..5],
        &leave_args,
    );
    assert_eq!(r, Err("ERR keys".into()));
}

/// Rule 12 on a real `redis-server`, for both registration scripts: the
/// first registration writes the rules record with the TTL it sends (5L
/// for Ranked, 3L for Arrival), a matching one renews that TTL when it
/// creates a set (here after the record was aged to 1 s; in Ranked the one
/// that creates the open set or, through its reservation, the next one,
/// not a repeat), and one with other rules is refused and changes neither
/// the record nor its TTL.
#[test]
fn the_rules_record_is_written_renewed_and_kept_on_redis() {
    let server = RedisServer::start().unwrap();
    let pttl = || -> i64 {
        redis::from_redis_value(server.command(&["PTTL", "{g}:rules"]).unwrap()).unwrap()
    };
    let recorded = || -> Option<String> {
        redis::from_redis_value(server.command(&["GET", "{g}:rules"]).unwrap()).unwrap()
    };
    for (mode, rules, other, ttl) in [
        (Mode::Ranked, RULES, ARRIVAL, TTL_MS),
        (Mode::Arrival, ARRIVAL, RULES, 3 * L_MS),
    ] {
        server.command(&["FLUSHALL"]).unwrap();
        let source = Script::for_mode(mode).source();
        let register = |rules: &str| -> Vec<i64> {
            let (k, _) = server_now(&server);
            let keys = registration_keys(k);
            let mut args = vec![
                L_MS.to_string(),
                ttl.to_string(),
                k.to_string(),
                rules.to_owned(),
            ];
            if mode == Mode::Ranked {
                args.extend([TOKEN, "-1", "", "-1", "-1"].map(str::to_owned));
            }
            let mut cmd: Vec<&str> = vec!["EVAL", source, "8"];
            cmd.extend(keys.iter().map(String::as_str));
            cmd.extend(args.iter().map(String::as_str));
            ints(server.command(&cmd).unwrap())
        };
        assert_eq!(register(rules)[0], 1, "{mode}: the first registration");
        assert_eq!(recorded().as_deref(), Some(rules), "{mode}");
        assert!(pttl() > ttl - 10_000, "{mode}: written for its TTL");

        server.command(&["PEXPIRE", "{g}:rules", "1000"]).unwrap();
        if mode == Mode::Ranked {
            // Ranked renews from a write that creates a set only: a repeat
            // into the open set, whose reservation is there, renews
            // nothing.
            assert_eq!(register(rules)[0], 1, "{mode}: a repeat");
            assert!(pttl() <= 1000, "{mode}: a repeat renews nothing");
            // The reservation that creates the next set renews it.
            let (k, _) = server_now(&server);
            server.command(&["DEL", &key(k + 1)]).unwrap();
            assert_eq!(register(rules)[0], 1, "{mode}: a reservation");
            assert!(pttl() > ttl - 10_000, "{mode}: renewed by the reservation");
            server.command(&["PEXPIRE", "{g}:rules", "1000"]).unwrap();
            server.command(&["DEL", &key(k)]).unwrap();
        }
        assert_eq!(register(rules)[0], 1, "{mode}: a matching registration");
        assert_eq!(recorded().as_deref(), Some(rules), "{mode}");
        assert!(pttl() > ttl - 10_000, "{mode}: renewed");

        server.command(&["PEXPIRE", "{g}:rules", "100000"]).unwrap();
        assert_eq!(register(other)[0], 2, "{mode}: other rules are refused");
        assert_eq!(recorded().as_deref(), Some(rules), "{mode}: kept");
        assert!(pttl() <= 100_000, "{mode}: its TTL is not renewed");
    }
}

/// Rule 15 after a backward step of the server clock (rule 10), where
/// revision 3 lets a closed set change without growing: a registration's
/// `ZADD` (no `NX`) overwrites a reservation in a reopened set. Positions
/// must stay a permutation of the set; the filler cache, checked by its
/// size only, still holds the fillers' positions of the set before the
/// change.
///
/// Ignored: `ranked.lua` fails it today (the store, which computes every
/// position from the set, passes): x reads position 1 from the stale
/// cache while y, now carrying 1 as a registration, keeps 1 (rule 15's
/// permutation broken). The differential test's reopened intervals leave
/// such registrations out for that reason.
#[test]
fn a_reopened_set_whose_scores_change_without_growing_keeps_positions_a_permutation() {
    let server = RedisServer::start().unwrap();
    let mut store = SimStore::new();
    let (k, _) = server_now(&server);
    let (a, x, y) = ("0".repeat(32), "7".repeat(32), "f".repeat(32));
    let m = k - 5;
    // m: a and y join (newcomers: fillers 0 and 1 of closed m).
    assert_eq!(register(&server, &mut store, m, &a), [-1, 0, -1, -1, -1]);
    assert_eq!(register(&server, &mut store, m, &y), [-1, 0, -1, -1, -1]);
    // m + 1: a registers (0); x joins; y misses it (its entry there is its
    // reservation, 2^40 + 0.25).
    assert_eq!(register(&server, &mut store, m + 1, &a), [0, 2, 1, -1, 0]);
    assert_eq!(
        register(&server, &mut store, m + 1, &x),
        [-1, 2, -1, -1, -1]
    );
    // m + 2: x, a filler of closed m + 1 = {a: 0, x: 2^40, y: 2^40 + 0.25},
    // takes 1 and writes the cache {#: 3, x: 1, y: 2}.
    assert_eq!(register(&server, &mut store, m + 2, &x), [1, 3, 1, -1, 2]);
    // The step reopens m + 1: y registers into it, carrying 1 (its
    // position in closed m). Its score there goes from its reservation's
    // to 1; the size stays 3, and so does the cache.
    assert_eq!(register(&server, &mut store, m + 1, &y), [1, 2, 1, -1, 0]);
    // Closed m + 1 = {a: 0, y: 1, x: 2^40}: y keeps 1 ...
    assert_eq!(register(&server, &mut store, m + 2, &y), [1, 3, 1, -1, 2]);
    // ... and x, the only filler, takes 2 (a retry of its registration).
    assert_eq!(register(&server, &mut store, m + 2, &x), [2, 3, 1, -1, 2]);
}
