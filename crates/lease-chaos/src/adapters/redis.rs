//! `lease-redis`: redis-rs on a current-thread tokio runtime.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use super::WorkerSpec;
use crate::worker::drive;

/// Runs one worker on this thread until it ends.
pub(super) fn run(spec: WorkerSpec) {
    let WorkerSpec { url, options, ctx } = spec;
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return ctx.failed(format_args!("cannot start a runtime: {e}")),
    };
    runtime.block_on(async move {
        let client = match redis::Client::open(url.as_str()) {
            Ok(c) => c,
            Err(e) => return ctx.failed(e),
        };
        // Lazy: the first registration connects, and a failed connection is
        // a failed registration that the worker retries, as after a restart.
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_min_delay(Duration::from_millis(10))
            .set_max_delay(Duration::from_millis(200))
            .set_number_of_retries(4);
        let conn = match ConnectionManager::new_lazy_with_config(client, config) {
            Ok(c) => c,
            Err(e) => return ctx.failed(e),
        };
        let options = lease_redis::Options::from(options).with_cancel(ctx.cancel.clone());
        let pairs = match lease_redis::discover(conn, options) {
            Ok(p) => p,
            Err(e) => return ctx.failed(e),
        };
        drive(pairs, tokio::time::sleep, ctx).await;
    });
}
