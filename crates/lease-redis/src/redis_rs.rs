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
