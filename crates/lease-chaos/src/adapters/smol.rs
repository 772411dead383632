//! `lease-smol`: redis-rs (`smol-comp`) on a smol executor of the worker's
//! own thread.
//!
//! The adapter's worker future runs on that executor (`discover_with`), so
//! a stall freezes it with the loop. redis-rs runs each connection's own I/O
//! task on smol's global executor; it only buffers bytes, and the frozen
//! worker sees them when it wakes, as a frozen process would.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use super::WorkerSpec;
use crate::worker::drive;

/// Runs one worker on this thread until it ends.
pub(super) fn run(spec: WorkerSpec) {
    let WorkerSpec { url, options, ctx } = spec;
    let executor = smol::Executor::new();
    smol::block_on(executor.run(async {
        let client = match redis::Client::open(url.as_str()) {
            Ok(c) => c,
            Err(e) => return ctx.failed(e),
        };
        // Lazy, as for lease-redis: a failed connection is a failed
        // registration, retried by the worker.
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_min_delay(Duration::from_millis(10))
            .set_max_delay(Duration::from_millis(200))
            .set_number_of_retries(4);
        let conn = match ConnectionManager::new_lazy_with_config(client, config) {
            Ok(c) => c,
            Err(e) => return ctx.failed(e),
        };
        // The loop cancels a tokio-util token; lease-smol has its own.
        let stop = lease_smol::CancelToken::new();
        let (cancel, relay) = (ctx.cancel.clone(), stop.clone());
        executor
            .spawn(async move {
                cancel.cancelled().await;
                relay.cancel();
            })
            .detach();
        let options = lease_smol::Options::from(options).with_cancel(stop);
        let spawn = |worker| executor.spawn(worker).detach();
        let pairs = match lease_smol::discover_with(conn, options, spawn) {
            Ok(p) => p,
            Err(e) => return ctx.failed(e),
        };
        let sleep = |d: Duration| async move {
            smol::Timer::after(d).await;
        };
        drive(pairs, sleep, ctx).await;
    }));
}
