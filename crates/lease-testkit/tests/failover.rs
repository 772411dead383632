//! Primaries, replicas and failovers on real servers: a replica gets the
//! primary's writes, Redis's coordinated `FAILOVER` swaps the roles without
//! losing one, an unplanned promotion loses what the deposed primary takes
//! afterwards, and a cluster with replicas fails over and moves a slot.

use std::time::Duration;

use lease_testkit::{REPLICATION_TIMEOUT, RedisCluster, ReplicatedRedis};
use redis::Value;

fn get(server: &lease_testkit::RedisServer, key: &str) -> Value {
    server.command(&["GET", key]).unwrap()
}

#[test]
fn a_coordinated_failover_keeps_every_write_and_swaps_roles() {
    let mut pair = ReplicatedRedis::start().unwrap();
    let (old_primary, old_replica) = (pair.primary().port(), pair.replica().port());
    assert!(pair.primary().replication().unwrap().is_primary());
    assert!(!pair.replica().replication().unwrap().is_primary());
    pair.primary().command(&["SET", "k", "1"]).unwrap();
    pair.failover().unwrap();
    assert_eq!(pair.primary().port(), old_replica);
    assert_eq!(pair.replica().port(), old_primary);
    assert_eq!(get(pair.primary(), "k"), Value::BulkString(b"1".to_vec()));
    // The old primary follows the new one, and refuses writes.
    let err = pair.replica().command(&["SET", "k", "2"]).unwrap_err();
    assert!(err.to_string().contains("READONLY"), "{err}");
    pair.primary().command(&["SET", "k", "3"]).unwrap();
    pair.replica()
        .wait_replicating(pair.primary(), REPLICATION_TIMEOUT)
        .unwrap();
    assert_eq!(get(pair.replica(), "k"), Value::BulkString(b"3".to_vec()));
}

#[test]
fn an_unplanned_promotion_loses_the_deposed_primarys_writes() {
    let mut pair = ReplicatedRedis::start().unwrap();
    pair.primary().command(&["SET", "before", "1"]).unwrap();
    pair.replica()
        .wait_replicating(pair.primary(), REPLICATION_TIMEOUT)
        .unwrap();
    pair.promote_replica().unwrap();
    // The deposed primary still takes writes; the new one never sees them.
    pair.replica().command(&["SET", "after", "1"]).unwrap();
    assert_eq!(get(pair.primary(), "after"), Value::Nil);
    assert_eq!(
        get(pair.primary(), "before"),
        Value::BulkString(b"1".to_vec())
    );
    pair.rejoin().unwrap();
    assert_eq!(get(pair.replica(), "after"), Value::Nil);
    assert!(!pair.replica().replication().unwrap().is_primary());
}

#[test]
fn a_cluster_with_replicas_fails_over_and_moves_a_slot() {
    let cluster = RedisCluster::start_with_replicas(3, 1).unwrap();
    assert_eq!(cluster.nodes().len(), 6);
    let slot = cluster.key_slot("{group}:1").unwrap();
    let master = cluster.master_of_slot(slot).unwrap();
    cluster
        .command_on(master, &["SET", "{group}:1", "v"])
        .unwrap();
    let replicas = cluster.replicas_of(master).unwrap();
    assert_eq!(replicas.len(), 1, "{replicas:?}");
    cluster.failover_to(replicas[0]).unwrap();
    assert_eq!(cluster.master_of_slot(slot).unwrap(), replicas[0]);
    assert_eq!(
        cluster
            .command_on(replicas[0], &["GET", "{group}:1"])
            .unwrap(),
        Value::BulkString(b"v".to_vec())
    );

    let other = cluster
        .masters()
        .unwrap()
        .into_iter()
        .find(|&m| m != replicas[0])
        .unwrap();
    let moved = cluster
        .migrate_slot(slot, other, Duration::from_millis(10))
        .unwrap();
    assert_eq!(moved, 1);
    assert_eq!(cluster.master_of_slot(slot).unwrap(), other);
    assert_eq!(
        cluster.command_on(other, &["GET", "{group}:1"]).unwrap(),
        Value::BulkString(b"v".to_vec())
    );
    let err = cluster
        .command_on(replicas[0], &["GET", "{group}:1"])
        .unwrap_err();
    assert!(err.to_string().contains("MOVED"), "{err}");
}

#[test]
fn sentinel_reports_the_primary_and_fails_over_to_the_replica() {
    use lease_testkit::RedisSentinel;
    let pair = ReplicatedRedis::start().unwrap();
    let sentinel =
        RedisSentinel::start(pair.primary(), "leases", 1, Duration::from_secs(20)).unwrap();
    assert_eq!(sentinel.primary_addr().unwrap(), pair.primary().addr());
    assert_eq!(
        sentinel.url(),
        format!(
            "redis-sentinel://127.0.0.1:{}/0?sentinelServiceName=leases",
            sentinel.port()
        )
    );
    let new = sentinel
        .failover(pair.primary().addr(), Duration::from_secs(30))
        .unwrap();
    assert_eq!(new, pair.replica().addr());
    assert!(pair.replica().replication().unwrap().is_primary());
}
