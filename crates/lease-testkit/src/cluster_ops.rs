//! Operations on a running [`RedisCluster`]: who serves a slot, who
//! replicates whom, a manual failover (`CLUSTER FAILOVER`) and moving a slot
//! to another master (`CLUSTER SETSLOT … IMPORTING/MIGRATING`, `MIGRATE …
//! KEYS`, `CLUSTER SETSLOT … NODE`), while clients keep using the cluster.

use std::io;
use std::thread;
use std::time::{Duration, Instant};

use redis::Value;

use crate::cluster::RedisCluster;
use crate::replica::REPLICATION_TIMEOUT;

/// One line of `CLUSTER NODES`, as far as the operations need it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct NodeLine {
    id: String,
    port: u16,
    master: bool,
    /// The master's id, for a replica.
    master_id: Option<String>,
    /// Slot ranges served (inclusive), migration markers left out.
    slots: Vec<(u16, u16)>,
}

fn parse_nodes(text: &str) -> Vec<NodeLine> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 8 {
                return None;
            }
            let port = fields[1]
                .split('@')
                .next()?
                .rsplit(':')
                .next()?
                .parse()
                .ok()?;
            let flags = fields[2];
            let slots = fields[8..]
                .iter()
                .filter(|s| !s.starts_with('['))
                .filter_map(|s| match s.split_once('-') {
                    Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                    None => s.parse().ok().map(|a| (a, a)),
                })
                .collect();
            Some(NodeLine {
                id: fields[0].to_owned(),
                port,
                master: flags.split(',').any(|f| f == "master"),
                master_id: (fields[3] != "-").then(|| fields[3].to_owned()),
                slots,
            })
        })
        .collect()
}

fn string(value: Value) -> io::Result<String> {
    redis::from_redis_value(value).map_err(io::Error::other)
}

impl RedisCluster {
    /// Node `node`'s view of the cluster (`CLUSTER NODES`).
    fn view(&self, node: usize) -> io::Result<Vec<NodeLine>> {
        Ok(parse_nodes(&string(
            self.command_on(node, &["CLUSTER", "NODES"])?,
        )?))
    }

    fn index_of_port(&self, port: u16) -> io::Result<usize> {
        self.nodes()
            .iter()
            .position(|n| n.port() == port)
            .ok_or_else(|| io::Error::other(format!("no node on port {port}")))
    }

    /// Node `node`'s cluster id (`CLUSTER MYID`).
    pub fn node_id(&self, node: usize) -> io::Result<String> {
        string(self.command_on(node, &["CLUSTER", "MYID"])?)
    }

    /// The hash slot of `key` (`CLUSTER KEYSLOT`).
    pub fn key_slot(&self, key: &str) -> io::Result<u16> {
        redis::from_redis_value(self.command_on(0, &["CLUSTER", "KEYSLOT", key])?)
            .map_err(io::Error::other)
    }

    /// The node that serves `slot`, as node 0 sees it.
    pub fn master_of_slot(&self, slot: u16) -> io::Result<usize> {
        let line = self
            .view(0)?
            .into_iter()
            .find(|l| l.master && l.slots.iter().any(|&(a, b)| (a..=b).contains(&slot)))
            .ok_or_else(|| io::Error::other(format!("nobody serves slot {slot}")))?;
        self.index_of_port(line.port)
    }

    /// The replicas of master `node`, as that node sees them.
    pub fn replicas_of(&self, node: usize) -> io::Result<Vec<usize>> {
        let id = self.node_id(node)?;
        self.view(node)?
            .into_iter()
            .filter(|l| !l.master && l.master_id.as_deref() == Some(id.as_str()))
            .map(|l| self.index_of_port(l.port))
            .collect()
    }

    /// The masters, as node 0 sees them.
    pub fn masters(&self) -> io::Result<Vec<usize>> {
        self.view(0)?
            .into_iter()
            .filter(|l| l.master && !l.slots.is_empty())
            .map(|l| self.index_of_port(l.port))
            .collect()
    }

    /// Waits until every replica's link to its master is up.
    pub(crate) fn wait_replicas_up(&self, timeout: Duration) -> io::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let mut down = Vec::new();
            for node in self.nodes() {
                let r = node.replication()?;
                if !r.is_primary() && !r.link_up {
                    down.push(node.addr().to_string());
                }
            }
            if down.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "replicas not linked within {timeout:?}: {}",
                        down.join(", ")
                    ),
                ));
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// A manual failover: `CLUSTER FAILOVER` on `replica`, which waits
    /// until it has its master's whole stream (the master pauses its
    /// clients meanwhile), then takes over its master's slots; the old
    /// master becomes its replica. Returns once every node sees `replica`
    /// as a master with slots and its replica's link is up.
    pub fn failover_to(&self, replica: usize) -> io::Result<()> {
        self.command_on(replica, &["CLUSTER", "FAILOVER"])?;
        let port = self.nodes()[replica].port();
        let deadline = Instant::now() + REPLICATION_TIMEOUT;
        loop {
            let mut agreed = true;
            for node in 0..self.nodes().len() {
                let sees = self
                    .view(node)?
                    .into_iter()
                    .any(|l| l.port == port && l.master && !l.slots.is_empty());
                agreed &= sees;
            }
            if agreed && self.nodes()[replica].replication()?.is_primary() {
                break;
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("CLUSTER FAILOVER to node {replica} did not finish in time"),
                ));
            }
            thread::sleep(Duration::from_millis(10));
        }
        self.wait_replicas_up(REPLICATION_TIMEOUT)
    }

    /// Moves `slot` and its keys to master `to` while clients use it:
    /// `IMPORTING` on `to`, `MIGRATING` on the owner, `MIGRATE … KEYS` of
    /// every key in the slot, then `hold` with the slot still migrating
    /// (new keys go to `to` by `ASK`; a script whose keys are split between
    /// the two nodes gets `TRYAGAIN`), the keys written meanwhile moved, and
    /// `SETSLOT … NODE` on every master (`to` first). Returns the number of
    /// keys moved.
    pub fn migrate_slot(&self, slot: u16, to: usize, hold: Duration) -> io::Result<usize> {
        let from = self.master_of_slot(slot)?;
        if from == to {
            return Ok(0);
        }
        let (from_id, to_id) = (self.node_id(from)?, self.node_id(to)?);
        let slot_s = slot.to_string();
        self.command_on(to, &["CLUSTER", "SETSLOT", &slot_s, "IMPORTING", &from_id])?;
        self.command_on(from, &["CLUSTER", "SETSLOT", &slot_s, "MIGRATING", &to_id])?;
        let mut moved = self.move_keys(slot, from, to)?;
        if !hold.is_zero() {
            thread::sleep(hold);
            moved += self.move_keys(slot, from, to)?;
        }
        let mut masters = self.masters()?;
        masters.retain(|&m| m != to && m != from);
        for node in [to, from].into_iter().chain(masters) {
            self.command_on(node, &["CLUSTER", "SETSLOT", &slot_s, "NODE", &to_id])?;
        }
        Ok(moved)
    }

    /// `MIGRATE`s every key of `slot` from `from` to `to`.
    fn move_keys(&self, slot: u16, from: usize, to: usize) -> io::Result<usize> {
        let target = self.nodes()[to].addr();
        let mut moved = 0;
        loop {
            let keys: Vec<String> = redis::from_redis_value(self.command_on(
                from,
                &["CLUSTER", "GETKEYSINSLOT", &slot.to_string(), "100"],
            )?)
            .map_err(io::Error::other)?;
            if keys.is_empty() {
                return Ok(moved);
            }
            let mut args = vec![
                "MIGRATE".to_owned(),
                target.ip().to_string(),
                target.port().to_string(),
                String::new(),
                "0".to_owned(),
                "5000".to_owned(),
                "KEYS".to_owned(),
            ];
            moved += keys.len();
            args.extend(keys);
            self.command_on(from, &args)?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_nodes_lines_parse() {
        let text = "\
a1 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460 [5461->-b2]
b2 127.0.0.1:7001@17001 master - 0 1 2 connected 5461-10922 12000
c3 127.0.0.1:7002@17002 slave a1 0 1 1 connected
";
        let lines = parse_nodes(text);
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0].slots, vec![(0, 5460)]);
        assert!(lines[0].master);
        assert_eq!(lines[1].slots, vec![(5461, 10922), (12000, 12000)]);
        assert_eq!(lines[2].master_id.as_deref(), Some("a1"));
        assert!(!lines[2].master);
        assert_eq!(lines[2].port, 7002);
    }
}
