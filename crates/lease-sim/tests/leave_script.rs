//! The leave script (`leave.lua`, rule 16) on a real `redis-server`, side by
//! side with the simulated store's re-implementation of it: it removes the
//! token from the set of the interval open at execution, whichever of the
//! two named keys that is, never from a closed set, and writes nothing when
//! the server's interval is neither or the rules differ.

use lease_core::Script;
use lease_sim::SimStore;
use lease_testkit::RedisServer;
use redis::Value;

/// A long interval, so that the test never straddles a boundary.
const L_MS: i64 = 600_000;
const RULES: &str = "2:600000:ranked:modulo";
const TOKEN: &str = "0123456789abcdef0123456789abcdef";
const OTHER: &str = "ffffffffffffffffffffffffffffffff";

fn ints(v: Value) -> Vec<i64> {
    redis::from_redis_value(v).expect("an array of integers")
}

fn key(k: i64) -> String {
    format!("{{g}}:{k}")
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

/// Runs the leave script naming `c`, on the server and on a simulated store
/// holding the same sets, and checks they agree.
fn leave(server: &RedisServer, store: &mut SimStore, c: i64, rules: &str) -> Vec<i64> {
    let (k0, now) = server_now(server);
    let keys = [key(c), key(c + 1), "{g}:rules".to_owned()];
    let args = [
        L_MS.to_string(),
        c.to_string(),
        rules.to_owned(),
        TOKEN.to_owned(),
    ];
    let mut cmd: Vec<&str> = vec!["EVAL", Script::leave().source(), "3"];
    cmd.extend(keys.iter().map(String::as_str));
    cmd.extend(args.iter().map(String::as_str));
    let real = ints(server.command(&cmd).unwrap());
    let sim = store
        .execute_leave(now, [&keys[0], &keys[1], &keys[2]], &args)
        .unwrap();
    assert_eq!(real[1], k0, "the interval did not change during the test");
    assert_eq!(real[0], sim[0], "status");
    assert_eq!(real[1], sim[1], "interval");
    assert_eq!(real[4..], sim[4..], "removed");
    real
}

/// Sets `k-1` and `k` to `{TOKEN, OTHER}` on both, with the rules record.
fn fill(server: &RedisServer, store: &mut SimStore, k: i64) {
    for m in [k - 1, k] {
        server
            .command(&["ZADD", &key(m), "0.25", TOKEN, "0.75", OTHER])
            .unwrap();
    }
    server.command(&["SET", "{g}:rules", RULES]).unwrap();
    // The same through the registration script's semantics on the store.
    let (_, now) = server_now(server);
    let k_now = now / 1000 / L_MS;
    for token in [TOKEN, OTHER] {
        for m in [k - 1, k] {
            let args = [
                L_MS.to_string(),
                (3 * L_MS).to_string(),
                m.to_string(),
                RULES.to_owned(),
                token.to_owned(),
                "2".to_owned(),
            ];
            let at = now - (k_now - m) * L_MS * 1000;
            store
                .execute(
                    lease_core::Mode::Ranked,
                    at,
                    [&key(m), &key(m - 1), "{g}:rules"],
                    &args,
                )
                .unwrap();
        }
    }
}

#[test]
fn leave_removes_from_the_open_set_only_on_redis_and_in_the_simulator() {
    let server = RedisServer::start().unwrap();
    let mut store = SimStore::new();
    let (k, _) = server_now(&server);
    fill(&server, &mut store, k);

    // Rules differ: refused, nothing written.
    let r = leave(&server, &mut store, k, "1:1000:ranked:modulo");
    assert_eq!((r[0], r.len()), (2, 4));
    // Named two intervals back: k is neither c nor c + 1; nothing written.
    let r = leave(&server, &mut store, k - 2, RULES);
    assert_eq!((r[0], r.len()), (0, 4));
    assert_eq!(members(&server, &key(k)), [TOKEN, OTHER]);
    // Named the closed interval k - 1 (the request executed late): the
    // script removes from KEYS[2], the open k, and leaves k - 1 alone.
    let r = leave(&server, &mut store, k - 1, RULES);
    assert_eq!(r[0], 1);
    assert_eq!(r[4], 1, "removed");
    assert_eq!(members(&server, &key(k)), [OTHER]);
    assert_eq!(
        members(&server, &key(k - 1)),
        [TOKEN, OTHER],
        "closed set untouched"
    );
    // Again, naming k itself: no longer a member.
    let r = leave(&server, &mut store, k, RULES);
    assert_eq!((r[0], r[4]), (1, 0));
    assert_eq!(members(&server, &key(k - 1)), [TOKEN, OTHER]);
    // A set that does not exist is not created.
    let r = leave(&server, &mut store, k + 5, RULES);
    assert_eq!(r[0], 0);
    assert_eq!(
        server
            .command(&["EXISTS", &key(k + 5), &key(k + 6)])
            .unwrap(),
        Value::Int(0)
    );
    assert_eq!(store.closed_set_writes(), 0);
}

/// Rule 15 on a real `redis-server`: `ranked.lua` computes hole-filling
/// positions from a closed set's scores, by the rule the simulator's store
/// implements (`store::tests::positions_fill_holes`).
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
        ("9007199254740992", &t[5]),
    ] {
        server.command(&["ZADD", &closed, score, tok]).unwrap();
    }
    let source = format!(
        "{}{}",
        include_str!("../../lease-core/src/scripts/prelude.lua"),
        include_str!("../../lease-core/src/scripts/ranked.lua")
    );
    assert_eq!(source, Script::for_mode(lease_core::Mode::Ranked).source());
    let mut got = Vec::new();
    for tok in &t {
        let open = key(k);
        let args = [
            L_MS.to_string(),
            (3 * L_MS).to_string(),
            k.to_string(),
            RULES.to_owned(),
            tok.clone(),
            "-1".to_owned(),
        ];
        let mut cmd: Vec<&str> = vec!["EVAL", &source, "3", &open, &closed, "{g}:rules"];
        cmd.extend(args.iter().map(String::as_str));
        let r = ints(server.command(&cmd).unwrap());
        assert_eq!(r[0], 1, "{r:?}");
        got.push((r[4], r[5]));
    }
    // The four keep 0, 1, 3, 4 (all below 6); the fillers take the free 2
    // and 5 in order: the returnee first, then the newcomer.
    assert_eq!(got, [(0, 6), (1, 6), (2, 6), (3, 6), (4, 6), (5, 6)]);
    // Carried into k as integers.
    let scores: Vec<String> = redis::from_redis_value(
        server
            .command(&["ZRANGE", &key(k), "0", "-1", "WITHSCORES"])
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        scores,
        [
            &t[0][..],
            "0",
            &t[1],
            "1",
            &t[2],
            "2",
            &t[3],
            "3",
            &t[4],
            "4",
            &t[5],
            "5"
        ]
    );
}

/// Rule 15's duplicate clause on a real `redis-server`: of two members
/// carrying one position, only the first in the set's order keeps it, and
/// the later one fills a hole before the fillers carried past the size. The
/// set and the positions (worked out by hand) are those of
/// `store::tests::of_two_members_carrying_one_position_only_the_first_keeps_it`.
#[test]
fn of_two_members_carrying_one_position_only_the_first_keeps_it_on_redis() {
    let server = RedisServer::start().unwrap();
    let (k, _) = server_now(&server);
    let t: Vec<String> = (0..6).map(|x| format!("{x:032x}")).collect();
    let closed = key(k - 1);
    for (score, tok) in [
        ("0", &t[1]),
        ("0", &t[3]),
        ("3", &t[0]),
        ("3", &t[2]),
        ("9", &t[5]),
        ("4294967297.5", &t[4]),
    ] {
        server.command(&["ZADD", &closed, score, tok]).unwrap();
    }
    let source = Script::for_mode(lease_core::Mode::Ranked).source();
    // Sent as newcomers (-1), then with the positions workers would send
    // (their carried scores; the returnee its last position, 1): the script
    // tries the sent position first, and a duplicate sending its score must
    // still be a filler.
    for sent in [["-1"; 6], ["3", "0", "3", "0", "1", "9"]] {
        let got: Vec<(i64, i64)> = t
            .iter()
            .zip(sent)
            .map(|(tok, sent)| {
                let open = key(k);
                let args = [
                    L_MS.to_string(),
                    (3 * L_MS).to_string(),
                    k.to_string(),
                    RULES.to_owned(),
                    tok.clone(),
                    sent.to_owned(),
                ];
                let mut cmd: Vec<&str> = vec!["EVAL", source, "3", &open, &closed, "{g}:rules"];
                cmd.extend(args.iter().map(String::as_str));
                let r = ints(server.command(&cmd).unwrap());
                assert_eq!(r[0], 1, "{r:?}");
                (r[4], r[5])
            })
            .collect();
        // t1 keeps 0 and t0 keeps 3; t3, t2, t5, t4 take 1, 2, 4, 5.
        assert_eq!(
            got,
            [(3, 6), (0, 6), (2, 6), (1, 6), (5, 6), (4, 6)],
            "sent {sent:?}"
        );
    }
    // Carried into k as integers.
    let scores: Vec<String> = redis::from_redis_value(
        server
            .command(&["ZRANGE", &key(k), "0", "-1", "WITHSCORES"])
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        scores,
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

/// Rule 12 on a real `redis-server`, for both registration scripts: the
/// first registration writes the rules record with a TTL of `3L`, a
/// matching one renews that TTL (here after the record was aged to 1 s;
/// in Ranked the one that creates the open set, not a repeat),
/// and one with other rules is refused and changes neither the record nor
/// its TTL.
#[test]
fn the_rules_record_is_written_renewed_and_kept_on_redis() {
    let server = RedisServer::start().unwrap();
    let pttl = || -> i64 {
        redis::from_redis_value(server.command(&["PTTL", "{g}:rules"]).unwrap()).unwrap()
    };
    let recorded = || -> Option<String> {
        redis::from_redis_value(server.command(&["GET", "{g}:rules"]).unwrap()).unwrap()
    };
    for (mode, rules, other) in [
        (lease_core::Mode::Ranked, RULES, "2:600000:arrival:modulo"),
        (lease_core::Mode::Arrival, "2:600000:arrival:modulo", RULES),
    ] {
        server.command(&["FLUSHALL"]).unwrap();
        let source = Script::for_mode(mode).source();
        let register = |rules: &str| -> Vec<i64> {
            let (k, _) = server_now(&server);
            let (open, closed) = (key(k), key(k - 1));
            let mut args = vec![
                L_MS.to_string(),
                (3 * L_MS).to_string(),
                k.to_string(),
                rules.to_owned(),
            ];
            if mode == lease_core::Mode::Ranked {
                args.extend([TOKEN.to_owned(), "-1".to_owned()]);
            }
            let mut cmd: Vec<&str> = vec!["EVAL", source, "3", &open, &closed, "{g}:rules"];
            cmd.extend(args.iter().map(String::as_str));
            ints(server.command(&cmd).unwrap())
        };
        assert_eq!(register(rules)[0], 1, "{mode}: the first registration");
        assert_eq!(recorded().as_deref(), Some(rules), "{mode}");
        assert!(pttl() > 3 * L_MS - 10_000, "{mode}: written for 3L");

        server.command(&["PEXPIRE", "{g}:rules", "1000"]).unwrap();
        if mode == lease_core::Mode::Ranked {
            // Ranked renews from the registration that creates the open
            // set only: a repeat into it renews nothing.
            assert_eq!(register(rules)[0], 1, "{mode}: a repeat");
            assert!(pttl() <= 1000, "{mode}: a repeat renews nothing");
            let (k, _) = server_now(&server);
            server.command(&["DEL", &key(k)]).unwrap();
        }
        assert_eq!(register(rules)[0], 1, "{mode}: a matching registration");
        assert_eq!(recorded().as_deref(), Some(rules), "{mode}");
        assert!(pttl() > 3 * L_MS - 10_000, "{mode}: renewed to 3L");

        server.command(&["PEXPIRE", "{g}:rules", "100000"]).unwrap();
        assert_eq!(register(other)[0], 2, "{mode}: other rules are refused");
        assert_eq!(recorded().as_deref(), Some(rules), "{mode}: kept");
        assert!(pttl() <= 100_000, "{mode}: its TTL is not renewed");
    }
}
