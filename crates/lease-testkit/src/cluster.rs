//! A real Redis Cluster made of [`RedisServer`] nodes.

use std::fs::File;
use std::io;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::server::{RedisServer, info_field};
use crate::util::{file_tail, render_command};
use redis::Value;

/// Bound on `redis-cli --cluster create` (it normally takes about 2 s).
const CREATE_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound on waiting for `cluster_state:ok` on every node after creation.
const CONVERGE_TIMEOUT: Duration = Duration::from_secs(15);

/// Program used for `redis-cli`: `$REDIS_CLI_BIN` or `redis-cli` from `PATH`.
fn redis_cli_bin() -> String {
    std::env::var("REDIS_CLI_BIN").unwrap_or_else(|_| "redis-cli".to_owned())
}

/// A Redis Cluster on free ports of `127.0.0.1`: master-only
/// ([`start`](Self::start)) or with replicas
/// ([`start_with_replicas`](Self::start_with_replicas)).
///
/// Every node is a cluster-enabled [`RedisServer`]
/// (`--cluster-enabled yes --cluster-node-timeout 2000`, no persistence,
/// own directory) with a separately picked cluster bus port. The slots are
/// assigned with `redis-cli --cluster create … --cluster-replicas R`, and
/// [`start`](Self::start) returns once every node reports
/// `cluster_state:ok`, all 16384 slots OK and knows every other node.
///
/// All nodes are killed when the value is dropped.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// The usual number of masters (and the minimum `redis-cli` accepts).
    pub const DEFAULT_MASTERS: usize = 3;

    /// Starts `masters` nodes and joins them into a cluster (takes about
    /// 2 s, most of it `redis-cli` waiting for the nodes to meet).
    ///
    /// Fails with [`io::ErrorKind::InvalidInput`] for fewer than 3 masters,
    /// which `redis-cli --cluster create` refuses.
    pub fn start(masters: usize) -> io::Result<RedisCluster> {
        Self::start_with_replicas(masters, 0)
    }

    /// Like [`start`](Self::start), with `replicas` replicas per master
    /// (`--cluster-replicas`): `masters * (1 + replicas)` nodes. Returns
    /// once every replica's link to its master is up too. Which node ends
    /// up a replica of which master is `redis-cli`'s choice; see
    /// [`master_of_slot`](Self::master_of_slot) and
    /// [`replicas_of`](Self::replicas_of).
    pub fn start_with_replicas(masters: usize, replicas: usize) -> io::Result<RedisCluster> {
        if masters < Self::DEFAULT_MASTERS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a Redis Cluster needs at least {} masters (redis-cli --cluster create), got {masters}",
                    Self::DEFAULT_MASTERS
                ),
            ));
        }
        let nodes = start_nodes(masters * (1 + replicas))?;
        let cluster = RedisCluster { nodes };
        cluster.create(replicas)?;
        cluster.wait_until_ok()?;
        if replicas > 0 {
            cluster.wait_replicas_up(CONVERGE_TIMEOUT)?;
        }
        Ok(cluster)
    }

    /// The nodes, in creation order (node `i` initially owns the `i`-th
    /// slot range).
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// `redis://127.0.0.1:port/` of every node.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.url().to_owned()).collect()
    }

    /// Socket address of every node.
    pub fn addrs(&self) -> Vec<SocketAddr> {
        self.nodes.iter().map(RedisServer::addr).collect()
    }

    /// Runs a command on node `node` (an index into [`nodes`](Self::nodes))
    /// over a fresh connection. No redirection is followed: a key owned by
    /// another node yields an error mentioning `MOVED`.
    ///
    /// # Panics
    ///
    /// If `node` is out of range.
    pub fn command_on<A: AsRef<[u8]>>(&self, node: usize, args: &[A]) -> io::Result<Value> {
        self.nodes[node].command(args)
    }

    fn create(&self, replicas: usize) -> io::Result<()> {
        let program = redis_cli_bin();
        let mut args = vec!["--cluster".to_owned(), "create".to_owned()];
        args.extend(self.nodes.iter().map(|n| n.addr().to_string()));
        args.extend([
            "--cluster-replicas".to_owned(),
            replicas.to_string(),
            "--cluster-yes".to_owned(),
        ]);
        let rendered = render_command(&program, &args);
        let log_path = self.nodes[0].dir().join("cluster-create.log");
        let log = File::create(&log_path)?;
        let mut child = Command::new(&program)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .map_err(|e| {
                let hint = if e.kind() == io::ErrorKind::NotFound {
                    " (is redis-cli installed? set REDIS_CLI_BIN to its path)"
                } else {
                    ""
                };
                io::Error::new(e.kind(), format!("cannot run {program}: {e}{hint}"))
            })?;
        let deadline = Instant::now() + CREATE_TIMEOUT;
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "{rendered} did not finish within {CREATE_TIMEOUT:?}; output:\n{}",
                        file_tail(&log_path, 0, 30)
                    ),
                ));
            }
            thread::sleep(Duration::from_millis(20));
        };
        if !status.success() {
            return Err(io::Error::other(format!(
                "{rendered} failed ({status}); output:\n{}",
                file_tail(&log_path, 0, 30)
            )));
        }
        Ok(())
    }

    pub(crate) fn wait_until_ok(&self) -> io::Result<()> {
        let expected_nodes = self.nodes.len().to_string();
        let deadline = Instant::now() + CONVERGE_TIMEOUT;
        loop {
            let mut pending = Vec::new();
            for (i, node) in self.nodes.iter().enumerate() {
                let info = node.command(&["CLUSTER", "INFO"]);
                let info: String = info
                    .ok()
                    .and_then(|v| redis::from_redis_value(v).ok())
                    .unwrap_or_default();
                let info = info.as_str();
                let field = |f| info_field(info, f).unwrap_or("?");
                let (state, slots_ok, known) = (
                    field("cluster_state"),
                    field("cluster_slots_ok"),
                    field("cluster_known_nodes"),
                );
                if state != "ok" || slots_ok != "16384" || known != expected_nodes {
                    pending.push(format!(
                        "node {i} ({}): cluster_state:{state} cluster_slots_ok:{slots_ok} cluster_known_nodes:{known}",
                        node.addr()
                    ));
                }
            }
            if pending.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "Redis Cluster did not reach cluster_state:ok on every node within {CONVERGE_TIMEOUT:?}: {}",
                        pending.join("; ")
                    ),
                ));
            }
            thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Starts `n` cluster-enabled nodes in parallel.
fn start_nodes(n: usize) -> io::Result<Vec<RedisServer>> {
    let results: Vec<io::Result<RedisServer>> = thread::scope(|scope| {
        let handles: Vec<_> = (0..n)
            .map(|_| {
                scope.spawn(|| {
                    RedisServer::start_cluster_node(
                        [
                            "--cluster-enabled",
                            "yes",
                            "--cluster-config-file",
                            "nodes.conf",
                            "--cluster-node-timeout",
                            "2000",
                        ]
                        .into_iter()
                        .map(str::to_owned)
                        .collect(),
                    )
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(io::Error::other("cluster node start panicked")))
            })
            .collect()
    });
    // On error the nodes that did start are dropped (killed) here.
    results.into_iter().collect()
}
