//! The redis-rs side of a registration, on any runtime: shared by this
//! crate's tokio driver and by `lease-smol` (which uses this crate without
//! its default `tokio` feature).

use std::future::Future;

use lease_driver::{Command, Connection, Integers};
use redis::aio::ConnectionLike;
use redis::{ErrorKind, RedisError, ServerErrorKind, Value};

/// A redis-rs connection as the driver uses it ([`Connection`]): any
/// clonable [`ConnectionLike`] (a multiplexed connection, a
/// `ConnectionManager`, the cluster async connection), cloned per request.
#[derive(Clone, Debug)]
pub struct RedisRs<C>(pub C);

impl<C> Connection for RedisRs<C>
where
    C: ConnectionLike + Clone + Send + Sync,
{
    type Error = RedisError;

    fn run<'c>(
        &'c self,
        command: Command<'_>,
    ) -> impl Future<Output = Result<Option<Integers>, RedisError>> + Send + use<'c, C> {
        // Sized once: the verb and every argument, in one buffer.
        let args = 1 + command.arguments().count();
        let bytes = command.verb.as_str().len() + command.arguments().map(str::len).sum::<usize>();
        let mut cmd = redis::Cmd::with_capacity(args, bytes);
        cmd.arg(command.verb.as_str());
        for a in command.arguments() {
            cmd.arg(a);
        }
        let mut conn = self.0.clone();
        async move {
            let value: Value = cmd.query_async(&mut conn).await?;
            Ok(integers(&value))
        }
    }

    fn is_noscript(error: &RedisError) -> bool {
        error.kind() == ErrorKind::Server(ServerErrorKind::NoScript)
    }

    fn server_info(&self) -> impl Future<Output = Result<Option<String>, RedisError>> + Send {
        let cmd = redis::cmd(lease_core::server::INFO_COMMAND);
        let mut conn = self.0.clone();
        async move {
            let value: Value = cmd.query_async(&mut conn).await?;
            Ok(text(&value))
        }
    }
}

/// The reply as text: a string, or the strings of a cluster client's
/// per-node answer (a map of node to text, or an array) joined by newlines.
fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(s) | Value::VerbatimString { text: s, .. } => Some(s.clone()),
        Value::Map(pairs) => join(pairs.iter().map(|(_, v)| v)),
        Value::Array(items) => join(items.iter()),
        _ => None,
    }
}

fn join<'a>(values: impl Iterator<Item = &'a Value>) -> Option<String> {
    let texts: Option<Vec<String>> = values.map(text).collect();
    texts.filter(|t| !t.is_empty()).map(|t| t.join("\n"))
}

/// The reply as integers, if it is an array of integers and nothing else.
fn integers(value: &Value) -> Option<Integers> {
    match value {
        Value::Array(items) => Integers::collect(items, |v| match v {
            Value::Int(i) => Some(*i),
            _ => None,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_replies_are_text_also_per_node() {
        let one = Value::BulkString(b"redis_version:7.0.15\r\n".to_vec());
        assert_eq!(text(&one).as_deref(), Some("redis_version:7.0.15\r\n"));
        let nodes = Value::Map(vec![
            (
                Value::SimpleString("a:1".into()),
                Value::BulkString(b"role:master".to_vec()),
            ),
            (
                Value::SimpleString("b:2".into()),
                Value::BulkString(b"role:slave".to_vec()),
            ),
        ]);
        assert_eq!(text(&nodes).as_deref(), Some("role:master\nrole:slave"));
        assert_eq!(text(&Value::Int(1)), None);
        assert_eq!(text(&Value::Array(vec![])), None);
        assert_eq!(text(&Value::BulkString(vec![0xff])), None);
    }

    #[test]
    fn only_arrays_of_integers_are_integers() {
        let ints = Value::Array(vec![Value::Int(1), Value::Int(-1)]);
        assert_eq!(
            integers(&ints).as_ref().map(Integers::as_slice),
            Some(&[1, -1][..])
        );
        let mixed = Value::Array(vec![Value::Int(1), Value::SimpleString("2".into())]);
        assert_eq!(integers(&mixed), None);
        assert_eq!(integers(&Value::Int(1)), None);
        assert_eq!(integers(&Value::Nil), None);
    }
}
