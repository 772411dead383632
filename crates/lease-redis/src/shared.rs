//! One server check per connection: clones of a [`Shared`] connection share
//! the server's answer to `INFO`, so thousands of workers started on one
//! connection send it once, not once each.

use std::sync::Arc;

use futures_util::lock::Mutex;
use redis::aio::ConnectionLike;
use redis::{Arg, Cmd, Pipeline, RedisFuture, Value};

/// A redis-rs connection whose clones share one answer to `INFO`.
///
/// Every worker checks the server once when it starts
/// ([`lease_core::check_server`], from `INFO`): on a plain connection a
/// process that starts 30,000 groups sends 30,000 `INFO` commands at once,
/// each a few kilobytes of text that Redis builds on its one thread. Through
/// a `Shared` connection (what [`connect`](crate::connect) returns) the first
/// `INFO` is sent and its successful reply kept; every later one, from any
/// clone, gets that reply without a round trip, and those asked while the
/// first is in flight wait for it. An error is not kept (the next caller
/// asks again). Only the bare command `INFO` (no section named) is
/// answered this way; every other command, `INFO server` included, goes to
/// the server unchanged.
///
/// ```
/// # fn f(redis: lease_redis::redis::aio::MultiplexedConnection) {
/// let shared = lease_redis::Shared::new(redis);
/// let for_another_worker = shared.clone(); // same kept answer
/// # drop((shared, for_another_worker));
/// # }
/// ```
#[derive(Clone)]
pub struct Shared<C> {
    conn: C,
    info: Arc<Mutex<Option<Value>>>,
}

impl<C> Shared<C> {
    /// `conn`, with an answer to `INFO` not yet kept.
    pub fn new(conn: C) -> Self {
        Self {
            conn,
            info: Arc::new(Mutex::new(None)),
        }
    }

    /// The connection inside.
    pub fn inner(&self) -> &C {
        &self.conn
    }

    /// The connection inside, dropping the kept answer.
    pub fn into_inner(self) -> C {
        self.conn
    }
}

impl<C: std::fmt::Debug> std::fmt::Debug for Shared<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").field("conn", &self.conn).finish()
    }
}

/// Whether `cmd` is the bare `INFO` the server check sends.
fn is_bare_info(cmd: &Cmd) -> bool {
    let mut args = cmd.args_iter();
    args.len() == 1
        && matches!(args.next(), Some(Arg::Simple(verb)) if verb.eq_ignore_ascii_case(b"INFO"))
}

impl<C: ConnectionLike + Send> ConnectionLike for Shared<C> {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        if !is_bare_info(cmd) {
            return self.conn.req_packed_command(cmd);
        }
        let kept = Arc::clone(&self.info);
        let conn = &mut self.conn;
        Box::pin(async move {
            // Held across the round trip: callers that come meanwhile wait
            // for this answer instead of sending their own.
            let mut kept = kept.lock().await;
            if let Some(value) = kept.as_ref() {
                return Ok(value.clone());
            }
            let value = conn.req_packed_command(cmd).await?;
            *kept = Some(value.clone());
            Ok(value)
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.conn.req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.conn.get_db()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_bare_info_is_kept() {
        assert!(is_bare_info(&redis::cmd("INFO")));
        assert!(is_bare_info(&redis::cmd("info")));
        assert!(!is_bare_info(redis::cmd("INFO").arg("server")));
        assert!(!is_bare_info(&redis::cmd("EVALSHA")));
        assert!(!is_bare_info(&redis::cmd("INFOS")));
    }
}
