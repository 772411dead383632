//! The README's lease-fred example, compiled by CI: one worker of the group
//! `mail-sender` against `REDIS_URL` (default `redis://127.0.0.1:6379/`).
//! `cargo run -p lease-fred --example fred_quickstart`
// README begin
use std::time::Duration;

use lease_fred::fred::prelude::*;
use lease_fred::{Assignment, Options, StreamExt, discover};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or("redis://127.0.0.1:6379/".into());
    let client = Builder::from_config(Config::from_url(&url)?)
        .set_policy(ReconnectPolicy::new_constant(0, 100)) // reconnect forever
        .build()?;
    client.init().await?;
    let mut assignments = discover(client, Options::new("mail-sender", Duration::from_secs(5)))?;
    while let Some(assignment) = assignments.next().await {
        drain().await; // stop taking new work, finish what is in flight
        match assignment {
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
