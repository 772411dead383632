//! The README's lease-smol example, compiled by CI: one worker of the group
//! `mail-sender` against `REDIS_URL` (default `redis://127.0.0.1:6379/`).
//! `cargo run -p lease-smol --example smol_quickstart`
// README begin
use std::time::Duration;

use lease_smol::redis::aio::ConnectionManager;
use lease_smol::{Assignment, CancelToken, Options, StreamExt, discover};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    smol::block_on(async {
        let url = std::env::var("REDIS_URL").unwrap_or("redis://127.0.0.1:6379/".into());
        let redis = ConnectionManager::new(lease_smol::redis::Client::open(url)?).await?;
        let stop = CancelToken::new(); // stop.cancel() stands the worker down
        let options = Options::new("mail-sender", Duration::from_secs(5)).with_cancel(stop);
        let mut assignments = discover(redis, options)?;
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
    })
}
// README end

async fn drain() {}

fn run(owns: impl Fn(u64) -> bool) {
    let mine = (0..20).filter(|&id| owns(id)).count();
    println!("{mine} of the first 20 tasks are mine");
}
