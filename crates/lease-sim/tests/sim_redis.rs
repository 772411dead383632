//! The simulated Redis behind redis-rs (`SimConnection`), command by command
//! and fault by fault, under paused tokio time.

use std::time::Duration;

use lease_core::{Mode, Script};
use lease_sim::{Peek, RedisFaults, SimRedis, SimRedisConfig};
use redis::{ErrorKind, RedisError, ServerErrorKind, Value};
use tokio::time::{Instant, timeout};

const EPOCH_MS: i64 = 1_767_225_600_000;
const L: i64 = 1000;

fn ranked() -> &'static Script {
    Script::for_mode(Mode::Ranked)
}

/// A ranked registration of `token` in interval `k`: the eight keys and
/// nine arguments every worker sends (a newcomer's: no position known, no
/// member name, nothing known of closed `k-2`).
fn register(verb: &str, script: &str, k: i64, token: &str) -> redis::Cmd {
    let mut cmd = redis::cmd(verb);
    cmd.arg(script)
        .arg(lease_core::KEY_COUNT)
        .arg(format!("{{g}}:{k}"))
        .arg(format!("{{g}}:{}", k - 1))
        .arg("{g}:rules")
        .arg("{g}:members")
        .arg(format!("{{g}}:{}:fillers", k - 1))
        .arg(format!("{{g}}:{}", k + 1))
        .arg(format!("{{g}}:{}", k - 2))
        .arg(format!("{{g}}:{k}:fillers"))
        .arg(L)
        .arg(5 * L)
        .arg(k)
        .arg("3:1000:ranked:modulo")
        .arg(token)
        .arg("-1")
        .arg("")
        .arg("-1")
        .arg("-1");
    cmd
}

async fn query(cmd: &redis::Cmd, conn: &mut lease_sim::SimConnection) -> Result<Value, RedisError> {
    cmd.query_async(conn).await
}

#[tokio::test(start_paused = true)]
async fn evalsha_is_noscript_until_loaded_and_the_reply_is_the_scripts() {
    let redis = SimRedis::new(SimRedisConfig::new(1));
    let mut conn = redis.connection("a");
    let k = EPOCH_MS / L;
    let e = query(&register("EVALSHA", ranked().sha1(), k, "t1"), &mut conn)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Server(ServerErrorKind::NoScript));
    // EVAL runs and loads it.
    let v = query(&register("EVAL", ranked().source(), k, "t1"), &mut conn)
        .await
        .unwrap();
    assert_eq!(
        v,
        Value::Array(
            [1, k, EPOCH_MS / 1000, 0, -1, 0, -1, -1, -1]
                .map(Value::Int)
                .to_vec()
        )
    );
    let v = query(&register("EVALSHA", ranked().sha1(), k, "t2"), &mut conn)
        .await
        .unwrap();
    assert!(matches!(&v, Value::Array(items) if items[0] == Value::Int(1)));
    assert_eq!(
        redis.with_store(|s| s.peek(&format!("{{g}}:{k}"))),
        Some(Peek::Members(vec!["t1".into(), "t2".into()]))
    );
    // SCRIPT LOAD answers the digest; an unknown script is an error.
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(Script::for_mode(Mode::Arrival).source())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(sha, Script::for_mode(Mode::Arrival).sha1());
    let e = query(&register("EVAL", "return 1", k, "t1"), &mut conn)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("unknown script"), "{e}");
    assert_eq!(redis.stats().noscript, 1);
}

#[tokio::test(start_paused = true)]
async fn malformed_commands_are_error_replies() {
    let redis = SimRedis::new(SimRedisConfig::new(1));
    let mut conn = redis.connection("a");
    let cases = [
        redis::cmd("FLUSHALL"),
        redis::cmd("EVAL"),
        {
            let mut c = redis::cmd("EVAL");
            c.arg(ranked().source()).arg(2).arg("a").arg("b");
            c
        },
        {
            let mut c = redis::cmd("EVAL");
            c.arg(ranked().source())
                .arg(3)
                .arg("a")
                .arg("b")
                .arg("c")
                .arg("x");
            c
        },
        {
            let mut c = redis::cmd("EVAL");
            c.arg(ranked().source())
                .arg(3)
                .arg("a")
                .arg("b")
                .arg("c")
                .arg(&[0xff_u8][..]);
            c
        },
    ];
    for cmd in cases {
        let e = query(&cmd, &mut conn).await.unwrap_err();
        assert_eq!(
            e.kind(),
            ErrorKind::Server(ServerErrorKind::ResponseError),
            "{e}"
        );
    }
    let pong: String = redis::cmd("PING").query_async(&mut conn).await.unwrap();
    assert_eq!(pong, "PONG");
}

#[tokio::test(start_paused = true)]
async fn latency_pause_and_stall_are_tokio_timers() {
    let faults = RedisFaults::latency(Duration::from_millis(5));
    let redis = SimRedis::new(SimRedisConfig::new(1).with_faults(faults));
    let (mut a, mut b) = (redis.connection("a"), redis.connection("b"));
    let ping = redis::cmd("PING");
    let t = Instant::now();
    query(&ping, &mut a).await.unwrap();
    assert_eq!(t.elapsed(), Duration::from_millis(10));
    redis.pause(Duration::from_millis(100));
    let t = Instant::now();
    query(&ping, &mut a).await.unwrap();
    assert_eq!(t.elapsed(), Duration::from_millis(105));
    redis.stall("a", Duration::from_millis(200));
    let t = Instant::now();
    query(&ping, &mut b).await.unwrap();
    assert_eq!(t.elapsed(), Duration::from_millis(10), "b is not stalled");
    query(&ping, &mut a).await.unwrap();
    // sent at 10 ms, held at the server until 200 ms, answered 5 ms later
    assert_eq!(t.elapsed(), Duration::from_millis(205));
}

#[tokio::test(start_paused = true)]
async fn a_restart_flushes_keys_and_scripts_and_refuses_while_down() {
    let redis = SimRedis::new(SimRedisConfig::new(1));
    let mut conn = redis.connection("a");
    let k = EPOCH_MS / L;
    query(&register("EVAL", ranked().source(), k, "t1"), &mut conn)
        .await
        .unwrap();
    redis.restart(Duration::from_millis(300));
    assert!(redis.with_store(|s| s.is_empty()));
    let e = query(&redis::cmd("PING"), &mut conn).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Io, "{e}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let e = query(&register("EVALSHA", ranked().sha1(), k, "t1"), &mut conn)
        .await
        .unwrap_err();
    assert_eq!(
        e.kind(),
        ErrorKind::Server(ServerErrorKind::NoScript),
        "the cache is gone too"
    );
    assert_eq!(redis.stats().refused, 1);
}

#[tokio::test(start_paused = true)]
async fn lost_requests_lost_replies_and_duplicates() {
    let k = EPOCH_MS / L;
    let load = |redis: &SimRedis| {
        let mut conn = redis.connection("loader");
        async move {
            redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(ranked().source())
                .query_async::<String>(&mut conn)
                .await
                .unwrap();
        }
    };
    let members = |redis: &SimRedis| redis.with_store(|s| s.peek(&format!("{{g}}:{k}")));
    // A lost request: never answered, never executed.
    let redis = SimRedis::new(SimRedisConfig::new(1));
    load(&redis).await;
    redis.set_faults(RedisFaults {
        lose_requests: 1.0,
        ..RedisFaults::default()
    });
    let mut conn = redis.connection("a");
    let cmd = register("EVALSHA", ranked().sha1(), k, "t1");
    assert!(
        timeout(Duration::from_secs(60), query(&cmd, &mut conn))
            .await
            .is_err()
    );
    assert_eq!(members(&redis), None);
    // A lost reply: never answered, executed.
    let redis = SimRedis::new(SimRedisConfig::new(1));
    load(&redis).await;
    redis.set_faults(RedisFaults {
        lose_replies: 1.0,
        ..RedisFaults::default()
    });
    let mut conn = redis.connection("a");
    assert!(
        timeout(Duration::from_secs(60), query(&cmd, &mut conn))
            .await
            .is_err()
    );
    assert_eq!(members(&redis), Some(Peek::Members(vec!["t1".into()])));
    // Duplicates run twice: in Arrival mode the counter counts both.
    redis.set_faults(RedisFaults {
        duplicates: 1.0,
        ..RedisFaults::default()
    });
    let arrival = Script::for_mode(Mode::Arrival);
    let now_k = redis.now_us() / 1000 / L;
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(arrival.source())
        .arg(3)
        .arg(format!("{{a}}:{now_k}"))
        .arg(format!("{{a}}:{}", now_k - 1))
        .arg("{a}:rules")
        .arg(L)
        .arg(3 * L)
        .arg(now_k)
        .arg("1:1000:arrival:modulo");
    let v = query(&cmd, &mut conn).await.unwrap();
    assert!(matches!(&v, Value::Array(items) if items[4] == Value::Int(0)));
    assert_eq!(
        redis.with_store(|s| s.peek(&format!("{{a}}:{now_k}"))),
        Some(Peek::Counter(2))
    );
    let stats = redis.stats();
    assert_eq!(
        (stats.lost_requests, stats.lost_replies, stats.duplicates),
        (0, 1, 1)
    );
}

#[tokio::test(start_paused = true)]
async fn the_server_clock_follows_tokio_and_steps() {
    let redis = SimRedis::new(SimRedisConfig::new(1));
    let t0 = redis.now_us();
    assert_eq!(t0, EPOCH_MS * 1000);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(redis.now_us() - t0, 1_500_000);
    redis.step_clock(-2_000_000);
    assert_eq!(redis.now_us() - t0, -500_000);
}

/// The leave script (rules 16 and 19) is served like the registration
/// scripts: `NOSCRIPT` until loaded, then `EVALSHA` runs
/// `SimStore::execute_leave` (here t1, which registered in the open
/// interval, becomes a left entry there and loses its reservation in the
/// next), and bad arguments or a wrong key count are error replies.
#[tokio::test(start_paused = true)]
async fn the_leave_script_is_served_like_the_registration_scripts() {
    let redis = SimRedis::new(SimRedisConfig::new(1));
    let mut conn = redis.connection("a");
    let k = EPOCH_MS / L;
    for t in ["t1", "t2"] {
        query(&register("EVAL", ranked().source(), k, t), &mut conn)
            .await
            .unwrap();
    }
    let leave = Script::leave();
    let request = |verb: &str, script: &str, keys: usize, args: &[&str]| {
        let mut cmd = redis::cmd(verb);
        cmd.arg(script).arg(keys);
        let all = [
            format!("{{g}}:{k}"),
            format!("{{g}}:{}", k + 1),
            "{g}:rules".to_owned(),
            format!("{{g}}:{}", k + 2),
            format!("{{g}}:{k}:fillers"),
            format!("{{g}}:{}:fillers", k + 1),
            format!("{{g}}:{}:fillers", k + 2),
            "{g}:members".to_owned(),
        ];
        for key in all.into_iter().take(keys) {
            cmd.arg(key);
        }
        cmd.arg(args);
        cmd
    };
    let (l, c) = (L.to_string(), k.to_string());
    let args = [l.as_str(), c.as_str(), "3:1000:ranked:modulo", "t1", "-1"];
    let e = query(&request("EVALSHA", leave.sha1(), 8, &args), &mut conn)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Server(ServerErrorKind::NoScript));
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(leave.source())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(sha, leave.sha1());
    let v = query(&request("EVALSHA", leave.sha1(), 8, &args), &mut conn)
        .await
        .unwrap();
    assert_eq!(
        v,
        Value::Array([1, k, EPOCH_MS / 1000, 0, 1].map(Value::Int).to_vec())
    );
    let scores = |key: String| redis.with_store(|s| s.scores(&key));
    assert_eq!(
        scores(format!("{{g}}:{k}")),
        Some(vec![
            (-1.0, "t1".into()),
            (1_099_511_627_776.0, "t2".into())
        ]),
        "t1 present but not counted, t2 a newcomer"
    );
    assert_eq!(
        scores(format!("{{g}}:{}", k + 1)),
        Some(vec![(1_099_511_627_776.25, "t2".into())]),
        "only t2's reservation is left"
    );
    // Errors, as for the registration scripts: a believed interval that is
    // not a number, and three keys instead of eight.
    let bad = [args[0], "x", args[2], args[3], args[4]];
    for cmd in [
        request("EVAL", leave.source(), 8, &bad),
        request("EVALSHA", leave.sha1(), 3, &args),
    ] {
        let e = query(&cmd, &mut conn).await.unwrap_err();
        assert_eq!(
            e.kind(),
            ErrorKind::Server(ServerErrorKind::ResponseError),
            "{e}"
        );
    }
}
