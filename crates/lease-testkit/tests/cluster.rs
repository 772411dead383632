//! Integration test for a real Redis Cluster.

use std::io;

use lease_testkit::RedisCluster;

#[test]
fn cluster_comes_up_with_all_slots() {
    let cluster = RedisCluster::start(RedisCluster::DEFAULT_MASTERS).unwrap();
    assert_eq!(cluster.nodes().len(), 3);
    let urls = cluster.urls();
    assert_eq!(urls.len(), 3);
    for (i, url) in urls.iter().enumerate() {
        assert_eq!(
            url,
            &format!("redis://127.0.0.1:{}/", cluster.nodes()[i].port())
        );
        let info = cluster.command_on(i, &["CLUSTER", "INFO"]).unwrap();
        let info: String = redis::from_redis_value(info).unwrap();
        assert!(info.contains("cluster_state:ok"), "{info}");
        assert!(info.contains("cluster_slots_ok:16384"), "{info}");
        assert!(info.contains("cluster_known_nodes:3"), "{info}");
    }

    // Exactly one node owns a given key; the others redirect.
    let mut owners = 0;
    for i in 0..3 {
        match cluster.command_on(i, &["SET", "some-key", "v"]) {
            Ok(v) => {
                assert_eq!(v, redis::Value::Okay);
                owners += 1;
            }
            Err(e) => assert!(e.to_string().contains("MOVED"), "{e}"),
        }
    }
    assert_eq!(owners, 1);
}

#[test]
fn too_small_cluster_is_rejected() {
    let err = RedisCluster::start(2).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
}
