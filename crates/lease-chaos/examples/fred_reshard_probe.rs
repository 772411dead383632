//! Reproduction of what `lease-chaos --adapter fred --faults reshard` found
//! (docs/reliability.md, "Redis Cluster"): fred 10.1's clustered client
//! during a slot migration, without lease at all.
//!
//! A script over two keys of one hash tag runs every 20 ms, each call bounded
//! by 500 ms, while the tag's slot moves to another master and stays
//! migrating for 100 ms (a script whose keys are split between the two nodes
//! gets `TRYAGAIN`). Prints every call's outcome and a summary line. With
//! `PROBE_TUNED=1` the client gets 10 command attempts, 10 redirections and
//! fred's unresponsive-connection check (300 ms): it does not help.
//!
//! ```text
//! cargo run --release -p lease-chaos --example fred_reshard_probe
//! PROBE_TUNED=1 cargo run --release -p lease-chaos --example fred_reshard_probe
//! ```

use std::time::Duration;

use fred::prelude::{
    Builder, ClientLike, Config, Error, ErrorKind, LuaInterface, ReconnectPolicy, ServerConfig,
};
use fred::types::config::UnresponsiveConfig;
use lease_testkit::RedisCluster;

const CALLS: u32 = 60;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cluster = RedisCluster::start_with_replicas(3, 1)?;
    let hosts = cluster
        .addrs()
        .iter()
        .map(|a| (a.ip().to_string(), a.port()))
        .collect();
    let config = Config {
        server: ServerConfig::new_clustered(hosts),
        fail_fast: false,
        ..Config::default()
    };
    let mut builder = Builder::from_config(config);
    builder.set_policy(ReconnectPolicy::new_constant(0, 10));
    if std::env::var_os("PROBE_TUNED").is_some() {
        // More attempts and redirections, and a connection that hangs is
        // closed and reconnected.
        builder.with_connection_config(|c| {
            c.max_command_attempts = 10;
            c.max_redirections = 10;
            c.unresponsive = UnresponsiveConfig {
                max_timeout: Some(Duration::from_millis(300)),
                interval: Duration::from_millis(50),
            };
        });
    }
    let client = builder.build()?;
    client.init().await?;
    let script = "redis.call('INCR', KEYS[1]); return redis.call('INCR', KEYS[2])";
    let slot = cluster.key_slot("{g}")?;
    let calls = tokio::spawn(async move {
        let (mut ok_after, mut hung_after, mut migrated_seen) = (0u32, 0u32, false);
        for i in 0..CALLS {
            let keys = vec![
                format!("{{g}}:{}", i / 4),
                format!("{{g}}:{}", i / 4 + 1000),
            ];
            let call = client.eval::<i64, _, _, _>(script, keys, Vec::<String>::new());
            let result = tokio::time::timeout(Duration::from_millis(500), call)
                .await
                .unwrap_or_else(|_| Err(Error::new(ErrorKind::Timeout, "no reply in 500 ms")));
            println!(
                "call {i}: {:?}",
                result.as_ref().map_err(ToString::to_string)
            );
            if i >= 20 {
                migrated_seen = true;
                match result {
                    Ok(_) => ok_after += 1,
                    Err(e) if *e.kind() == ErrorKind::Timeout => hung_after += 1,
                    Err(_) => {}
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        (ok_after, hung_after, migrated_seen)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let from = cluster.master_of_slot(slot)?;
    let to = cluster
        .masters()?
        .into_iter()
        .find(|&m| m != from)
        .ok_or("no other master")?;
    let (moved, cluster) = tokio::task::spawn_blocking(move || {
        let moved = cluster.migrate_slot(slot, to, Duration::from_millis(100));
        (moved, cluster)
    })
    .await?;
    println!("slot {slot} moved from node {from} to node {to}: {moved:?} keys");
    let (ok_after, hung_after, _) = calls.await?;
    println!(
        "fred_reshard_probe: calls 20..{CALLS} (after the move): {ok_after} ok, {hung_after} without a reply in 500 ms"
    );
    drop(cluster);
    Ok(())
}
