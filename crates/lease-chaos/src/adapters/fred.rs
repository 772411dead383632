//! `lease-fred`: fred 10 on a current-thread tokio runtime.

use fred::prelude::{Builder, ClientLike, Config, ReconnectPolicy};

use super::WorkerSpec;
use crate::worker::{drive, starting};

/// Runs one worker on this thread until it ends.
pub(super) fn run(spec: WorkerSpec) {
    let WorkerSpec {
        url,
        options,
        mut ctx,
    } = spec;
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return ctx.failed(format_args!("cannot start a runtime: {e}")),
    };
    runtime.block_on(async move {
        let mut config = match Config::from_url(&url) {
            Ok(c) => c,
            Err(e) => return ctx.failed(e),
        };
        // Keep trying the first connection too (Redis may be restarting).
        config.fail_fast = false;
        let client = match Builder::from_config(config)
            .set_policy(ReconnectPolicy::new_constant(0, 10))
            .build()
        {
            Ok(c) => c,
            Err(e) => return ctx.failed(e),
        };
        match starting(&mut ctx, client.init()).await {
            None => return,
            Some(Err(e)) => return ctx.failed(e),
            // The connection task keeps running on this runtime.
            Some(Ok(_connection)) => {}
        }
        let options = lease_fred::Options::from(options).with_cancel(ctx.cancel.clone());
        let pairs = match lease_fred::discover(client, options) {
            Ok(p) => p,
            Err(e) => return ctx.failed(e),
        };
        drive(pairs, tokio::time::sleep, ctx).await;
    });
}
