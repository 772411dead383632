//! Redis Sentinel: `redis-server <config> --sentinel`, the same program as
//! the servers (no other package), watching one primary.

use std::fs;
use std::io;
use std::net::SocketAddr;
use std::thread;
use std::time::{Duration, Instant};

use redis::Value;
use tempfile::TempDir;

use crate::server::{RedisServer, ServerProcess, StartError, spawn_ready, temp_dir};
use crate::util::{DEFAULT_COMMAND_TIMEOUT, PortLease, Target};

/// A Sentinel on a free port of `127.0.0.1`, watching one primary under a
/// name, with a quorum of 1, `down-after-milliseconds 1000` and
/// `failover-timeout 5000`. Killed on drop.
#[derive(Debug)]
pub struct RedisSentinel {
    // The process must be killed before the directory is removed.
    process: Option<ServerProcess>,
    port: PortLease,
    target: Target,
    name: String,
    dir: TempDir,
}

impl RedisSentinel {
    /// Starts a Sentinel that watches `primary` as `name` and waits until
    /// it knows the primary's replicas (at most `timeout`; a primary
    /// without replicas is fine if `replicas` is 0).
    pub fn start(
        primary: &RedisServer,
        name: &str,
        replicas: usize,
        timeout: Duration,
    ) -> io::Result<RedisSentinel> {
        let dir = temp_dir()?;
        let addr = primary.addr();
        let config = dir.path().join("sentinel.conf");
        fs::write(
            &config,
            format!(
                "sentinel monitor {name} {} {} 1\n\
                 sentinel down-after-milliseconds {name} 1000\n\
                 sentinel failover-timeout {name} 5000\n",
                addr.ip(),
                addr.port()
            ),
        )?;
        let mut races = Vec::new();
        for _ in 0..5 {
            let port = PortLease::pick()?;
            let target = Target::local(port.port(), None);
            let args: Vec<String> = [
                config.display().to_string(),
                "--sentinel".to_owned(),
                "--port".to_owned(),
                port.port().to_string(),
                "--bind".to_owned(),
                "127.0.0.1".to_owned(),
                "--daemonize".to_owned(),
                "no".to_owned(),
                "--dir".to_owned(),
                dir.path().display().to_string(),
            ]
            .into();
            match spawn_ready(dir.path(), &target, &args, &[]) {
                Ok(process) => {
                    let sentinel = RedisSentinel {
                        process: Some(process),
                        port,
                        target,
                        name: name.to_owned(),
                        dir,
                    };
                    sentinel.wait_for_replicas(replicas, timeout)?;
                    return Ok(sentinel);
                }
                Err(StartError::PortRace(msg)) => races.push(msg),
                Err(StartError::Fatal(e)) => return Err(e),
            }
        }
        Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!("sentinel could not get a free port: {}", races.join("; ")),
        ))
    }

    /// `127.0.0.1:port` of the Sentinel.
    pub fn addr(&self) -> SocketAddr {
        self.target.addr
    }

    /// The port of the Sentinel.
    pub fn port(&self) -> u16 {
        self.port.port()
    }

    /// `redis-sentinel://127.0.0.1:port/0?sentinelServiceName=name`: the
    /// URL fred's `Config::from_url` takes to resolve the primary through
    /// this Sentinel.
    pub fn url(&self) -> String {
        format!(
            "redis-sentinel://{}/0?sentinelServiceName={}",
            self.addr(),
            self.name
        )
    }

    /// Runs one command on the Sentinel.
    pub fn command<A: AsRef<[u8]>>(&self, args: &[A]) -> io::Result<Value> {
        self.target.command(args, DEFAULT_COMMAND_TIMEOUT)
    }

    /// The primary's address as the Sentinel reports it
    /// (`SENTINEL GET-MASTER-ADDR-BY-NAME`).
    pub fn primary_addr(&self) -> io::Result<SocketAddr> {
        let (host, port): (String, String) = redis::from_redis_value(self.command(&[
            "SENTINEL",
            "GET-MASTER-ADDR-BY-NAME",
            &self.name,
        ])?)
        .map_err(io::Error::other)?;
        format!("{host}:{port}")
            .parse()
            .map_err(|e| io::Error::other(format!("{host}:{port}: {e}")))
    }

    fn wait_for_replicas(&self, replicas: usize, timeout: Duration) -> io::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let known = match self.command(&["SENTINEL", "REPLICAS", &self.name])? {
                Value::Array(items) => items.len(),
                _ => 0,
            };
            if known >= replicas {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("sentinel knows {known} of {replicas} replicas after {timeout:?}"),
                ));
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// `SENTINEL FAILOVER name` (retried while the Sentinel has no replica
    /// it can promote yet), then waits until it reports a primary other
    /// than `old` (at most `timeout`); returns the new primary.
    pub fn failover(&self, old: SocketAddr, timeout: Duration) -> io::Result<SocketAddr> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.command(&["SENTINEL", "FAILOVER", &self.name]) {
                Ok(_) => break,
                Err(e) if Instant::now() < deadline && e.to_string().contains("NOGOODSLAVE") => {
                    thread::sleep(Duration::from_millis(50));
                }
                Err(e) => return Err(e),
            }
        }
        loop {
            let now = self.primary_addr()?;
            if now != old {
                return Ok(now);
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("sentinel still reports {old} after {timeout:?}"),
                ));
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// The Sentinel's directory (its config file and log).
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }
}

impl Drop for RedisSentinel {
    fn drop(&mut self) {
        drop(self.process.take());
    }
}
