//! Integration tests against real `redis-server` processes.

use std::io;
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use lease_testkit::{RedisServer, TestRedis, command, unique_name};
use redis::Value;

/// The text of a bulk or simple string reply.
fn text(v: Value) -> String {
    redis::from_redis_value(v).expect("a string reply")
}

#[test]
fn start_answers_ping() {
    let server = RedisServer::start().unwrap();
    assert_eq!(
        server.command(&["PING"]).unwrap(),
        Value::SimpleString("PONG".into())
    );
    assert_eq!(
        server.url(),
        format!("redis://127.0.0.1:{}/", server.port())
    );
    assert_eq!(server.addr().port(), server.port());
    assert!(server.addr().ip().is_loopback());
    // Persistence is off.
    let save: Vec<String> =
        redis::from_redis_value(server.command(&["CONFIG", "GET", "save"]).unwrap()).unwrap();
    assert_eq!(save[1], "");
    let aof: Vec<String> =
        redis::from_redis_value(server.command(&["CONFIG", "GET", "appendonly"]).unwrap()).unwrap();
    assert_eq!(aof[1], "no");
}

#[test]
fn set_get_through_command() {
    let server = RedisServer::start().unwrap();
    assert_eq!(server.command(&["SET", "k", "v a l"]).unwrap(), Value::Okay);
    assert_eq!(
        server.command(&["GET", "k"]).unwrap(),
        Value::BulkString(b"v a l".to_vec())
    );
    assert_eq!(server.command(&["GET", "missing"]).unwrap(), Value::Nil);
    assert_eq!(server.command(&["INCR", "n"]).unwrap(), Value::Int(1));
    let err = server.command(&["INCR", "k"]).unwrap_err();
    assert!(err.to_string().contains("not an integer"), "{err}");
    // Binary-safe arguments.
    server
        .command(&[&b"SET"[..], b"bin", b"\x00\r\n\xff"])
        .unwrap();
    assert_eq!(
        server.command(&["GET", "bin"]).unwrap(),
        Value::BulkString(b"\x00\r\n\xff".to_vec())
    );
}

#[test]
fn stop_refuses_connections_and_restart_loses_data() {
    let mut server = RedisServer::start().unwrap();
    let port = server.port();
    server.command(&["SET", "k", "v"]).unwrap();

    server.stop().unwrap();
    assert!(!server.is_running());
    let err = TcpStream::connect(server.addr()).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused);
    assert!(server.command(&["PING"]).is_err());
    server.stop().unwrap(); // idempotent

    server.start_again().unwrap();
    assert!(server.is_running());
    assert_eq!(server.port(), port);
    assert_eq!(
        server.command(&["PING"]).unwrap(),
        Value::SimpleString("PONG".into())
    );
    assert_eq!(server.command(&["GET", "k"]).unwrap(), Value::Nil);
    assert_eq!(
        server.start_again().unwrap_err().kind(),
        io::ErrorKind::AlreadyExists
    );

    server.command(&["SET", "k", "v"]).unwrap();
    server.restart().unwrap();
    assert_eq!(server.port(), port);
    assert_eq!(server.command(&["GET", "k"]).unwrap(), Value::Nil);
}

#[test]
fn start_again_after_server_exits_on_its_own() {
    let mut server = RedisServer::start().unwrap();
    // SHUTDOWN closes the connection instead of replying.
    let _ = server.command(&["SHUTDOWN", "NOSAVE"]);
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.is_running() {
        assert!(Instant::now() < deadline, "server did not exit");
        thread::sleep(Duration::from_millis(10));
    }
    server.start_again().unwrap();
    assert!(server.command(&["PING"]).is_ok());
}

#[test]
fn pause_holds_back_writes_for_the_pause() {
    let mut server = RedisServer::start().unwrap();
    // Long enough that the 20% slack (pause reply latency, scheduling) is ample.
    let pause = Duration::from_millis(1000);
    server.pause(pause).unwrap();
    let started = Instant::now();
    assert_eq!(server.command(&["SET", "k", "v"]).unwrap(), Value::Okay);
    let blocked = started.elapsed();
    assert!(
        blocked >= pause.mul_f64(0.8),
        "SET completed after {blocked:?}, during a {pause:?} pause"
    );
    assert_eq!(text(server.command(&["GET", "k"]).unwrap()), "v");
}

#[test]
fn pause_writes_can_be_lifted_early() {
    let mut server = RedisServer::start().unwrap();
    server.pause_writes(Duration::from_secs(30)).unwrap();
    // Reads still work during a WRITE pause.
    let t = Instant::now();
    assert_eq!(server.command(&["GET", "k"]).unwrap(), Value::Nil);
    assert!(t.elapsed() < Duration::from_secs(2));

    // A write sent now is held back ...
    let mut conn = server.connect().unwrap();
    conn.send_packed_command(&redis::cmd("SET").arg("k").arg("v").get_packed_command())
        .unwrap();
    conn.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let err = conn.recv_response().unwrap_err();
    assert!(err.is_timeout(), "{err}");

    // ... until unpause releases it. (redis-rs skips the late reply of a
    // command that timed out, so the next reply on `conn` is the PING's.)
    let t = Instant::now();
    server.unpause().unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(
        command(&mut conn, &["PING"]).unwrap(),
        Value::SimpleString("PONG".into())
    );
    assert!(t.elapsed() < Duration::from_secs(2));
    assert_eq!(text(server.command(&["GET", "k"]).unwrap()), "v");
}

#[test]
fn admin_commands_work() {
    let server = RedisServer::start().unwrap();
    let sha = text(server.command(&["SCRIPT", "LOAD", "return 1"]).unwrap());
    assert_eq!(
        server.command(&["EVALSHA", &sha, "0"]).unwrap(),
        Value::Int(1)
    );
    assert_eq!(server.command(&["SCRIPT", "FLUSH"]).unwrap(), Value::Okay);
    let err = server.command(&["EVALSHA", &sha, "0"]).unwrap_err();
    assert!(err.to_string().contains("NOSCRIPT"), "{err}");

    // CLIENT KILL drops another connection.
    let mut victim = server.connect().unwrap();
    let id: i64 =
        redis::from_redis_value(command(&mut victim, &["CLIENT", "ID"]).unwrap()).unwrap();
    assert_eq!(
        server
            .command(&["CLIENT", "KILL", "ID", &id.to_string()])
            .unwrap(),
        Value::Int(1)
    );
    assert!(command(&mut victim, &["PING"]).is_err());

    let info = text(server.command(&["INFO", "server"]).unwrap());
    assert!(info.contains("redis_version:"));
}

#[test]
fn servers_get_distinct_ports_and_dirs() {
    let servers: Vec<RedisServer> = thread::scope(|s| {
        let handles: Vec<_> = (0..4).map(|_| s.spawn(RedisServer::start)).collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap().unwrap())
            .collect()
    });
    for (i, a) in servers.iter().enumerate() {
        for b in &servers[i + 1..] {
            assert_ne!(a.port(), b.port());
            assert_ne!(a.dir(), b.dir());
        }
    }
    let dir = servers[0].dir().to_owned();
    assert!(servers[0].log_path().exists());
    drop(servers);
    assert!(!dir.exists(), "server directory must be removed on drop");
}

#[test]
fn shared_server_is_shared() {
    let a = TestRedis::shared();
    let b = TestRedis::shared();
    assert!(std::ptr::eq(a, b));
    let key = unique_name("shared-key");
    a.command(&["SET", &key, "1"]).unwrap();
    assert_eq!(text(b.command(&["GET", &key]).unwrap()), "1");
}

#[test]
fn external_server_cannot_be_controlled() {
    let server = RedisServer::start().unwrap();
    let mut external = TestRedis::external(server.url()).unwrap();
    assert!(!external.can_control());
    assert!(external.server().is_none());
    assert_eq!(external.url(), server.url());
    assert_eq!(external.port(), server.port());
    assert!(external.command(&["PING"]).is_ok());
    for result in [
        external.stop(),
        external.start_again(),
        external.restart(),
        external.pause(Duration::from_millis(10)),
        external.pause_writes(Duration::from_millis(10)),
        external.unpause(),
    ] {
        assert_eq!(result.unwrap_err().kind(), io::ErrorKind::Unsupported);
    }
    // Still running.
    assert!(server.command(&["PING"]).is_ok());

    // A local TestRedis can be controlled.
    let mut local = TestRedis::from(RedisServer::start().unwrap());
    assert!(local.can_control());
    local.restart().unwrap();
    assert!(local.command(&["PING"]).is_ok());
}

#[test]
fn external_with_password_and_db() {
    let server = RedisServer::start_with_args(&["--requirepass", "s3cr@t"]).unwrap();
    assert_eq!(
        server.url(),
        format!("redis://:s3cr%40t@127.0.0.1:{}/", server.port())
    );
    // The harness authenticates; a bare connection does not.
    assert!(server.command(&["PING"]).is_ok());
    let mut bare = redis::Client::open(format!("redis://{}/", server.addr()))
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(1))
        .unwrap();
    let err = command(&mut bare, &["PING"]).unwrap_err();
    assert!(err.to_string().contains("NOAUTH"), "{err}");
    let url = format!("redis://:s3cr%40t@127.0.0.1:{}/2", server.port());
    let external = TestRedis::external(&url).unwrap();
    external.command(&["SET", "k", "in-db-2"]).unwrap();
    let mut conn = external.connect().unwrap();
    command(&mut conn, &["SELECT", "0"]).unwrap();
    assert_eq!(command(&mut conn, &["GET", "k"]).unwrap(), Value::Nil);

    let wrong = format!("redis://:nope@127.0.0.1:{}/", server.port());
    assert!(TestRedis::external(&wrong).is_err());
}

#[test]
fn bad_server_args_give_a_clear_error() {
    let err = RedisServer::start_with_args(&["--no-such-option", "1"]).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("exited during startup"), "{msg}");
    assert!(
        msg.contains("no-such-option"),
        "log tail expected in: {msg}"
    );
}

#[test]
fn unpause_after_a_full_pause_returns_once_it_is_over() {
    let mut server = RedisServer::start().unwrap();
    server.pause(Duration::from_millis(300)).unwrap();
    // Redis 7.0 holds CLIENT UNPAUSE back too; it must still succeed.
    server.unpause().unwrap();
    assert_eq!(server.command(&["SET", "k", "v"]).unwrap(), Value::Okay);
}

/// A server under libfaketime: its `TIME` follows the offset set while it
/// runs, forward and back, and a restart keeps the clock. Needs libfaketime
/// and a server that runs under it (`REDIS_SERVER_BIN=valkey-server`);
/// without them the start fails with a message saying which is missing.
#[test]
fn a_fake_clock_steps_time_while_the_server_runs() {
    let mut server = match RedisServer::start_with_fake_clock() {
        Ok(s) => s,
        Err(e) => {
            // Debian's jemalloc redis-server cannot run under libfaketime:
            // the error must say so, and CI runs this test again on Valkey.
            let msg = e.to_string();
            assert!(
                msg.contains("libfaketime") || msg.contains("clock_gettime"),
                "{msg}"
            );
            return;
        }
    };
    let wall = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_micros() as i64
    };
    for offset in [2_500_000i64, -1_250_000, 0] {
        server.set_clock_offset(offset).unwrap();
        let seen = server.server_time_us().unwrap() - wall();
        assert!(
            (seen - offset).abs() < 200_000,
            "offset {offset}: TIME is {seen} us off"
        );
        assert_eq!(server.clock_offset_us(), offset);
    }
    server.set_clock_offset(-3_000_000).unwrap();
    server.restart().unwrap();
    let seen = server.server_time_us().unwrap() - wall();
    assert!(
        (seen + 3_000_000).abs() < 200_000,
        "after a restart: {seen}"
    );
}
