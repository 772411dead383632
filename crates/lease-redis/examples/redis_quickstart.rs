//! The README's lease-redis example, compiled by CI: one worker of the group
//! `mail-sender` against `REDIS_URL` (default `redis://127.0.0.1:6379/`).
//! `cargo run -p lease-redis --example redis_quickstart`
// README begin
use std::time::Duration;

use lease_redis::redis::aio::ConnectionManager;
use lease_redis::{Assignment, Options, StreamExt, discover};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or("redis://127.0.0.1:6379/".into());
    // A ConnectionManager reconnects after a Redis restart (a plain
    // multiplexed connection would fail forever).
    let redis = ConnectionManager::new(lease_redis::redis::Client::open(url)?).await?;
    let mut assignments = discover(redis, Options::new("mail-sender", Duration::from_secs(5)))?;
    while let Some(assignment) = assignments.next().await {
        drain().await; // stop taking new work, finish what is in flight
        match assignment {
            // Check before each task: `owns` is false once the lease ran out.
            Assignment::Held(lease) => run(move |task_id| lease.owns(task_id)),
            // Incremental handover (HandoverMode::Incremental): a task set.
            Assignment::Tasks(tasks) => run(move |task_id| tasks.owns(task_id)),
            Assignment::Idle(idle) => eprintln!("holding nothing: {}", idle.reason),
        }
    }
    Ok(())
}
// README end

async fn drain() {}

fn run(owns: impl Fn(u64) -> bool) {
    let mine = (0..20).filter(|&id| owns(id)).count();
    println!("{mine} of the first 20 tasks are mine");
}
