//! Primaries and replicas: `REPLICAOF` at run time, promotion, Redis's own
//! coordinated `FAILOVER`, and the replication state of a node.
//!
//! Every server starts as a primary ([`RedisServer::start`]); roles are set
//! at run time, so a restart ([`RedisServer::restart`]) brings a node back
//! as an empty primary, as a restarted node without persistence would be.
//! [`ReplicatedRedis`] is a primary with one replica, for tests.

use std::io;
use std::net::SocketAddr;
use std::thread;
use std::time::{Duration, Instant};

use crate::server::{RedisServer, info_field};

/// Bound on waiting for a replica to catch up, or a failover to finish.
pub const REPLICATION_TIMEOUT: Duration = Duration::from_secs(15);

/// A node's replication state, from `INFO replication`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replication {
    /// `role`: `master` or `slave`.
    pub role: String,
    /// `master_repl_offset`: how far into the replication stream the node is.
    pub offset: u64,
    /// `connected_slaves` (0 on a replica).
    pub connected_replicas: u32,
    /// `master_link_status:up` (always `false` on a primary).
    pub link_up: bool,
    /// `master_port` of a replica.
    pub primary_port: Option<u16>,
}

impl Replication {
    /// Whether the node is a primary.
    pub fn is_primary(&self) -> bool {
        self.role == "master"
    }
}

impl RedisServer {
    /// The node's `INFO replication`.
    pub fn replication(&self) -> io::Result<Replication> {
        let info: String = redis::from_redis_value(self.command(&["INFO", "replication"])?)
            .map_err(io::Error::other)?;
        let field = |f: &str| info_field(&info, f);
        let role = field("role")
            .ok_or_else(|| io::Error::other(format!("INFO replication without role: {info}")))?
            .to_owned();
        Ok(Replication {
            offset: field("master_repl_offset")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            connected_replicas: field("connected_slaves")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            link_up: field("master_link_status") == Some("up"),
            primary_port: field("master_port").and_then(|v| v.parse().ok()),
            role,
        })
    }

    /// `REPLICAOF host port`: the node drops its data and replicates from
    /// `primary` (which may be a proxy in front of the primary). Returns at
    /// once; see [`wait_replicating`](Self::wait_replicating).
    pub fn replicate_from(&self, primary: SocketAddr) -> io::Result<()> {
        self.command(&[
            "REPLICAOF",
            &primary.ip().to_string(),
            &primary.port().to_string(),
        ])
        .map(drop)
    }

    /// `REPLICAOF NO ONE`: the node stops replicating and accepts writes,
    /// with the data it has (whatever its primary wrote since is lost to
    /// it).
    pub fn promote(&self) -> io::Result<()> {
        self.command(&["REPLICAOF", "NO", "ONE"]).map(drop)
    }

    /// Redis's coordinated failover from this primary to `replica` (its
    /// only replica): `FAILOVER TIMEOUT 5000`, which pauses writes here
    /// until the replica has all of them, promotes it and makes this node
    /// its replica. Returns once both report their new roles.
    pub fn failover_to_replica(&self, replica: &RedisServer) -> io::Result<()> {
        self.command(&["FAILOVER", "TIMEOUT", "5000"])?;
        let deadline = Instant::now() + REPLICATION_TIMEOUT;
        // Until the replica is a primary and this node is not.
        while !replica.replication()?.is_primary() || self.replication()?.is_primary() {
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "FAILOVER from {} to {} did not swap the roles within {REPLICATION_TIMEOUT:?}",
                        self.addr(),
                        replica.addr()
                    ),
                ));
            }
            thread::sleep(Duration::from_millis(2));
        }
        Ok(())
    }

    /// How many commands this node refused with `error` (e.g. `NOREPLICAS`)
    /// since it started, from `INFO errorstats` (Redis 6.2 and later).
    pub fn error_count(&self, error: &str) -> io::Result<u64> {
        let info: String = redis::from_redis_value(self.command(&["INFO", "errorstats"])?)
            .map_err(io::Error::other)?;
        Ok(info_field(&info, &format!("errorstat_{error}"))
            .and_then(|v| v.strip_prefix("count="))
            .and_then(|v| v.split(',').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0))
    }

    /// Waits until this replica's link is up and it has `primary`'s whole
    /// replication stream (equal offsets), at most `timeout`.
    pub fn wait_replicating(&self, primary: &RedisServer, timeout: Duration) -> io::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let (mine, theirs) = (self.replication()?, primary.replication()?);
            if mine.link_up && mine.offset > 0 && mine.offset >= theirs.offset {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "replica {} did not catch up with {} within {timeout:?}: {mine:?}, primary {theirs:?}",
                        self.addr(),
                        primary.addr()
                    ),
                ));
            }
            thread::sleep(Duration::from_millis(5));
        }
    }
}

/// A primary with one replica on free ports, for tests: the replica
/// replicates straight from the primary.
#[derive(Debug)]
pub struct ReplicatedRedis {
    primary: RedisServer,
    replica: RedisServer,
}

impl ReplicatedRedis {
    /// Starts two servers, makes the second a replica of the first and
    /// waits until it has caught up.
    pub fn start() -> io::Result<ReplicatedRedis> {
        Self::start_with_args(&[])
    }

    /// Like [`start`](Self::start), both servers with `extra_args` (e.g.
    /// `min-replicas-to-write`, which a node applies while it is a
    /// primary).
    pub fn start_with_args(extra_args: &[&str]) -> io::Result<ReplicatedRedis> {
        let primary = RedisServer::start_with_args(extra_args)?;
        let replica = RedisServer::start_with_args(extra_args)?;
        replica.replicate_from(primary.addr())?;
        replica.wait_replicating(&primary, REPLICATION_TIMEOUT)?;
        Ok(ReplicatedRedis { primary, replica })
    }

    /// The current primary.
    pub fn primary(&self) -> &RedisServer {
        &self.primary
    }

    /// The current replica.
    pub fn replica(&self) -> &RedisServer {
        &self.replica
    }

    /// Redis's coordinated failover (`FAILOVER` on the primary, Redis 6.2
    /// and later): writes are paused on the primary until the replica has
    /// every one of them, then the replica is promoted and the old primary
    /// becomes its replica. Nothing acknowledged is lost. Returns once the
    /// roles have swapped and the new replica has caught up.
    pub fn failover(&mut self) -> io::Result<()> {
        self.primary.failover_to_replica(&self.replica)?;
        std::mem::swap(&mut self.primary, &mut self.replica);
        self.replica
            .wait_replicating(&self.primary, REPLICATION_TIMEOUT)
    }

    /// An unplanned promotion: the replica stops replicating and becomes
    /// the primary; the old primary keeps running as a primary too (a
    /// *deposed* primary, still accepting writes that are lost to the new
    /// one) until [`rejoin`](Self::rejoin).
    pub fn promote_replica(&mut self) -> io::Result<()> {
        self.replica.promote()?;
        std::mem::swap(&mut self.primary, &mut self.replica);
        Ok(())
    }

    /// Makes the deposed primary a replica of the new one (it drops what it
    /// wrote meanwhile) and waits until it has caught up.
    pub fn rejoin(&mut self) -> io::Result<()> {
        self.replica.replicate_from(self.primary.addr())?;
        self.replica
            .wait_replicating(&self.primary, REPLICATION_TIMEOUT)
    }
}
