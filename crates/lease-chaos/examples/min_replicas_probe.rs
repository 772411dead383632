//! How long a primary with `min-replicas-to-write 1` keeps acknowledging
//! writes after a partition cuts it off from its only replica
//! (docs/operations.md, "Replication, Sentinel and failover").
//!
//! The replica replicates through a link of the chaos proxy; the link is
//! blackholed (every byte held, the end of the connection too, as a
//! partition holds them), and a `SET` goes to the primary every 10 ms until
//! one is refused with `NOREPLICAS`. Prints the time from the cut to the
//! first refusal, for each `min-replicas-max-lag` given (seconds; default 1
//! and 2), three cuts each.
//!
//! ```text
//! cargo run --release -p lease-chaos --example min_replicas_probe [-- 1 2]
//! ```

use std::time::{Duration, Instant};

use lease_chaos::proxy::Proxy;
use lease_testkit::{REPLICATION_TIMEOUT, RedisServer};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let lags: Vec<u32> = std::env::args()
        .skip(1)
        .map(|a| a.parse())
        .collect::<Result<_, _>>()?;
    let lags = if lags.is_empty() { vec![1, 2] } else { lags };
    for lag in lags {
        let args = [
            "--min-replicas-to-write",
            "1",
            "--min-replicas-max-lag",
            &lag.to_string(),
            "--repl-diskless-sync-delay",
            "0",
        ];
        let primary = RedisServer::start_with_args(&args)?;
        let replica = RedisServer::start_with_args(&args)?;
        let proxy = Proxy::new(primary.addr())?;
        let link = proxy.link(1)?;
        replica.replicate_from(link.addr())?;
        replica.wait_replicating(&primary, REPLICATION_TIMEOUT)?;
        let mut conn = primary.connect()?;
        for cut in 0..3 {
            // Acknowledged writes, then the cut.
            lease_testkit::command(&mut conn, &["SET", "k", "0"])?;
            let at = Instant::now();
            link.blackhole(at + Duration::from_secs(3600));
            let mut acknowledged = 0u32;
            let refused_after = loop {
                match lease_testkit::command(&mut conn, &["SET", "k", "1"]) {
                    Ok(_) => acknowledged += 1,
                    Err(e) if e.to_string().contains("NOREPLICAS") => break at.elapsed(),
                    Err(e) => return Err(e.into()),
                }
                if at.elapsed() > Duration::from_secs(u64::from(lag) + 10) {
                    return Err("no NOREPLICAS within max-lag + 10 s".into());
                }
                std::thread::sleep(Duration::from_millis(10));
            };
            println!(
                "min_replicas_probe: max-lag {lag} s, cut {cut}: first NOREPLICAS {:.0} ms after the cut, {acknowledged} writes acknowledged meanwhile",
                refused_after.as_secs_f64() * 1000.0
            );
            link.reset_all();
            link.lift_blackhole();
            replica.wait_replicating(&primary, REPLICATION_TIMEOUT)?;
        }
    }
    Ok(())
}
