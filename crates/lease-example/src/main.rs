//! The example's production side: three workers of one group in this
//! process, on a real Redis, each running [`lease_example::work`] for a few
//! seconds ([`lease_example::run_group`]); then the task history is judged
//! and the verdict printed.
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run -p lease-example -- 10
//! ```
//!
//! The argument is the run's length in seconds (default 10). Exits with
//! status 1 if the checker finds a task processed twice at once or a stale
//! token accepted.

use std::process::ExitCode;
use std::time::Duration;

use lease_example::run_group;
use lease_history::work::check_tasks;
use lease_redis::Options;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<ExitCode, Box<dyn std::error::Error>> {
    let seconds: u64 = match std::env::args().nth(1) {
        Some(arg) => arg.parse()?,
        None => 10,
    };
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".to_owned());
    // A ConnectionManager reconnects after a Redis restart.
    let redis = lease_redis::redis::Client::open(url)?
        .get_connection_manager()
        .await?;
    let group = Options::new("lease-example", Duration::from_millis(500));
    let recorder = run_group(redis, group, 3, Duration::from_secs(seconds)).await?;
    let summary = check_tasks(&recorder.records());
    println!("{summary}");
    Ok(if summary.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
