//! The simulated Redis as a turmoil host (`lease_sim::turmoil`): RESP over
//! turmoil's TCP, a real redis-rs connection, malformed input, and a
//! reconnecting connection across a bounce of the host.

use std::time::Duration;

use lease_core::{Mode, Script};
use lease_sim::SimRedisConfig;
use lease_sim::turmoil::{TurmoilConnection, connect, serve};
use redis::{ErrorKind, ServerErrorKind, Value};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

fn sim() -> turmoil::Sim<'static> {
    let mut sim = turmoil::Builder::new()
        .simulation_duration(Duration::from_secs(30))
        .build();
    sim.host("redis", || serve(6379, SimRedisConfig::new(1)));
    sim
}

#[test]
fn a_multiplexed_connection_over_a_turmoil_stream() {
    let mut sim = sim();
    sim.client("app", async {
        let mut conn = connect("redis:6379").await?;
        let pong: String = redis::cmd("PING").query_async(&mut conn).await?;
        assert_eq!(pong, "PONG");
        let ranked = Script::for_mode(Mode::Ranked);
        let e = redis::cmd("EVALSHA")
            .arg(ranked.sha1())
            .arg(3)
            .arg(&["a", "b", "c"][..])
            .query_async::<Value>(&mut conn)
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Server(ServerErrorKind::NoScript));
        let sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(ranked.source())
            .query_async(&mut conn)
            .await?;
        assert_eq!(sha, ranked.sha1());
        // Arguments the script rejects: an error reply, the connection stays.
        let e = redis::cmd("EVALSHA")
            .arg(ranked.sha1())
            .arg(3)
            .arg(&["a", "b", "c", "x"][..])
            .query_async::<Value>(&mut conn)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("bad script arguments"), "{e}");
        let pong: String = redis::cmd("PING").query_async(&mut conn).await?;
        assert_eq!(pong, "PONG");
        Ok(())
    });
    sim.run().unwrap();
}

#[test]
fn malformed_input_is_a_protocol_error_and_the_connection_closes() {
    let mut sim = sim();
    sim.client("app", async {
        let mut stream = turmoil::net::TcpStream::connect("redis:6379").await?;
        stream.write_all(b"*1\r\n$x\r\n").await?;
        let mut reply = Vec::new();
        stream.read_to_end(&mut reply).await?;
        let reply = String::from_utf8_lossy(&reply);
        assert!(reply.starts_with("-ERR Protocol error"), "{reply}");
        // Not an array of bulk strings: an error reply too.
        let mut stream = turmoil::net::TcpStream::connect("redis:6379").await?;
        stream.write_all(b":1\r\n").await?;
        let mut reply = [0u8; 64];
        let read = stream.read(&mut reply).await?;
        assert!(reply[..read].starts_with(b"-ERR Protocol error"));
        Ok(())
    });
    sim.run().unwrap();
}

#[test]
fn a_turmoil_connection_reconnects_after_a_bounce() {
    let mut sim = sim();
    sim.client("app", async {
        let mut conn = TurmoilConnection::new("redis:6379", Duration::from_millis(500));
        let pong: String = redis::cmd("PING").query_async(&mut conn).await?;
        assert_eq!(pong, "PONG");
        tokio::time::sleep(Duration::from_secs(2)).await; // the host is bounced meanwhile
        let mut answered = false;
        for _ in 0..5 {
            if let Ok(pong) = redis::cmd("PING").query_async::<String>(&mut conn).await {
                assert_eq!(pong, "PONG");
                answered = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(answered, "no answer after the bounce");
        Ok(())
    });
    while sim.elapsed() < Duration::from_secs(1) {
        sim.step().unwrap();
    }
    sim.bounce("redis");
    sim.run().unwrap();
}
