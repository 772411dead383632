//! The I/O loop: the driver loop documented on [`lease_core::Worker`], with
//! redis-rs requests and tokio timers.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use lease_core::{Event, ReplyError, RequestId, Script, Transmit, Worker, diag};
use redis::aio::ConnectionLike;
use redis::{ErrorKind, RedisError, ServerErrorKind, Value};
use tokio::sync::mpsc::UnboundedSender;
use tokio::time::{error::Elapsed, sleep_until, timeout_at};
use tokio_util::sync::CancellationToken;

use crate::Pair;
use crate::metrics::Metrics;

/// What became of one registration request.
type Outcome = Result<Result<Value, RedisError>, Elapsed>;

/// Runs `worker` until it stops (cancellation) or the stream is dropped
/// (the receiver closes, or the task is aborted).
pub(crate) async fn run<C>(
    connection: C,
    mut worker: Worker,
    cancel: Option<CancellationToken>,
    pairs: UnboundedSender<Pair>,
) where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    // Without a token, one that is never cancelled.
    let cancel = cancel.unwrap_or_default();
    let name: Arc<str> = Arc::from(worker.name());
    let metrics = Metrics::new(&name);
    let mut in_flight = FuturesUnordered::new();
    loop {
        // Drain the outputs: transmits, then events.
        let sent_at = Instant::now();
        while let Some(t) = worker.poll_transmit() {
            let request = Request::new(&t, name.clone());
            let expires_at = tokio::time::Instant::from_std(t.expires_at);
            let conn = connection.clone();
            in_flight.push(async move {
                let outcome = timeout_at(expires_at, request.send(conn)).await;
                (request.id, sent_at, outcome)
            });
        }
        while let Some(event) = worker.poll_event() {
            metrics.event(&event);
            match event {
                Event::Pair(pair) => {
                    if pairs.send(pair).is_err() {
                        return; // the stream was dropped
                    }
                }
                Event::Released(_) => {}
                Event::Stopped => return,
            }
        }
        // Wait for cancellation, a reply or the next deadline.
        let timeout = worker.poll_timeout();
        tokio::select! {
            biased;
            () = cancel.cancelled() => worker.handle_cancel(Instant::now()),
            Some((id, sent_at, outcome)) = in_flight.next(), if !in_flight.is_empty() => {
                let now = Instant::now();
                feed(&mut worker, now, id, outcome, || metrics.latency(now - sent_at));
            }
            () = sleep_until(tokio::time::Instant::from_std(timeout.unwrap_or_else(far_future))),
                if timeout.is_some() => worker.handle_timeout(Instant::now()),
        }
    }
}

/// Feeds one request's outcome to the worker. A rejected reply is logged by
/// the worker and counts as a failed registration there.
fn feed(worker: &mut Worker, now: Instant, id: RequestId, outcome: Outcome, answered: impl Fn()) {
    match outcome {
        Ok(Ok(value)) => {
            answered();
            let _rejected = match integers(&value) {
                Some(values) => worker.handle_reply(now, id, &values),
                None => worker.handle_parsed(now, id, Err(ReplyError::NotIntegers)),
            };
        }
        Ok(Err(error)) => worker.handle_failure(now, id, &error),
        Err(_) => worker.handle_failure(now, id, &"timed out"),
    }
}

/// The reply as integers, if it is an array of integers and nothing else.
fn integers(value: &Value) -> Option<Vec<i64>> {
    match value {
        Value::Array(items) => items
            .iter()
            .map(|v| match v {
                Value::Int(i) => Some(*i),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(86_400)
}

/// A registration, owned, so it can outlive the borrow of the worker.
struct Request {
    id: RequestId,
    script: &'static Script,
    keys: [String; 2],
    args: Vec<String>,
    name: Arc<str>,
}

impl Request {
    fn new(t: &Transmit<'_>, name: Arc<str>) -> Self {
        Self {
            id: t.id,
            script: t.script,
            keys: t.keys.map(str::to_owned),
            args: t.args.to_vec(),
            name,
        }
    }

    /// `EVALSHA`, or `EVAL` with the source after `NOSCRIPT` (which loads the
    /// script on the node that owns the keys).
    async fn send<C: ConnectionLike>(&self, mut conn: C) -> Result<Value, RedisError> {
        let sha = self.script.sha1();
        match self.command("EVALSHA", sha).query_async(&mut conn).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                let value = self
                    .command("EVAL", self.script.source())
                    .query_async(&mut conn)
                    .await?;
                diag::script_loaded(&self.name, sha);
                Ok(value)
            }
            other => other,
        }
    }

    fn command(&self, verb: &str, script: &str) -> redis::Cmd {
        let mut cmd = redis::cmd(verb);
        cmd.arg(script).arg(2).arg(&self.keys).arg(&self.args);
        cmd
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_arrays_of_integers_are_integers() {
        let ints = Value::Array(vec![Value::Int(1), Value::Int(-1)]);
        assert_eq!(integers(&ints), Some(vec![1, -1]));
        let mixed = Value::Array(vec![Value::Int(1), Value::SimpleString("2".into())]);
        assert_eq!(integers(&mixed), None);
        assert_eq!(integers(&Value::Int(1)), None);
        assert_eq!(integers(&Value::Nil), None);
    }
}
