//! The README's lease-redis example, compiled by CI: one worker of the group
//! `mail-sender` against `REDIS_URL` (default `redis://127.0.0.1:6379/`).
//! `cargo run -p lease-redis --example redis_quickstart`
// README begin
use lease_redis::{Assignment, Options, StreamExt, connect, discover};
use std::time::Duration;

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt::init(); // RUST_LOG=lease=debug shows the library's decisions
    if let Err(e) = run().await {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or("redis://127.0.0.1:6379/".into());
    let options = Options::new("mail-sender", Duration::from_secs(5));
    let mut assignments = discover(connect(&url).await?, options)?;
    while let Some(assignment) = assignments.next().await {
        match assignment {
            // Check before each task: `owns` is false once the lease ran out.
            Assignment::Held(lease) => work_on(move |task_id| lease.owns(task_id)),
            Assignment::Idle(idle) => eprintln!("holding nothing: {}", idle.reason),
        }
    }
    Ok(())
}
// README end

fn work_on(owns: impl Fn(u64) -> bool) {
    let mine = (0..20).filter(|&id| owns(id)).count();
    println!("{mine} of the first 20 tasks are mine");
}
