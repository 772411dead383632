//! The original's mail sender: every worker of the group `mail-sender` sends
//! the mail whose id falls in its slot (`id % n == i`), drains before it
//! adopts a new pair, and stands down on `SIGTERM` (or Ctrl-C).
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run -p lease-redis --example mail_sender
//! ```
//!
//! Start it in two or three terminals: after a few intervals each one sends
//! its own share of the mail, and stopping one hands its share to the
//! others. `RUST_LOG=lease=debug` shows what the worker is doing.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lease_redis::{Assignment, CancellationToken, Handover, Lease, Options, StreamExt, discover};
use tokio::signal::unix::{SignalKind, signal};
use tokio::task::JoinHandle;
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::from_default_env())
        .init();
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".to_owned());
    let redis = redis::Client::open(url)?.get_connection_manager().await?;

    // SIGTERM or Ctrl-C cancels the token: the stream then yields the idle
    // pair once (if a pair is held) and ends.
    let stop = CancellationToken::new();
    let mut term = signal(SignalKind::terminate())?;
    let on_signal = stop.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        on_signal.cancel();
    });

    // Mail number `t` goes to `t % n == i`: whole pairs under modulo.
    let options = Options::new("mail-sender", Duration::from_secs(5))
        .with_handover(Handover::WholePairs)
        .with_cancel(stop);
    let mut peers = discover(redis, options)?;
    let mut sender: Option<Sender> = None;
    while let Some(pair) = peers.next().await {
        // Stop taking new mail and finish what is in flight.
        if let Some(running) = sender.take() {
            running.drain().await;
        }
        let lease = match pair {
            Assignment::Held(lease) => lease,
            Assignment::Idle(idle) => {
                println!("idle ({}): sending nothing", idle.reason);
                continue;
            }
        };
        let Some(pair) = lease.pair() else {
            continue; // whole pairs: every value is one
        };
        println!(
            "sending mail {} of every {} (fencing token {})",
            pair.i(),
            pair.n(),
            lease.token()
        );
        sender = Some(Sender::start(lease));
    }
    // The stream ends only after standing down: nothing is being sent.
    println!("stopped");
    Ok(())
}

/// A running consumer of one slot.
struct Sender {
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl Sender {
    fn start(lease: Lease) -> Self {
        let stop = CancellationToken::new();
        let task = tokio::spawn(send_mail(lease, stop.clone()));
        Self { stop, task }
    }

    /// Stops taking new mail and waits for the mail in flight.
    async fn drain(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

/// Sends the mail of `lease`'s slot until told to stop. The mail source
/// here is a clock: mail number `t` is due at `t` quarter-seconds since the
/// epoch, the same for every worker.
async fn send_mail(lease: Lease, stop: CancellationToken) {
    let pair = lease.pair().expect("whole pairs");
    let (i, n) = (u64::from(pair.i()), u64::from(pair.n()));
    let mut ticks = tokio::time::interval(Duration::from_millis(250));
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let id = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64 / 250);
        // The lease may have run out while this task was not looking (a
        // stalled process): check it before each task.
        if id % n == i && lease.is_valid() {
            // A store that keeps the newest token per mail can reject a
            // stale holder's write.
            println!("sent mail #{id} (token {})", lease.token());
            tokio::time::sleep(Duration::from_millis(50)).await; // the work
        }
    }
}
