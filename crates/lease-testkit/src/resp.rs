//! A deliberately small, blocking RESP2 client.
//!
//! It only knows how to encode a command as an array of bulk strings and how
//! to parse the five RESP2 reply types. That is all the harness needs to
//! probe readiness and run admin commands, and it keeps the crate free of
//! dependencies.

use std::fmt;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Longest status/error/integer line accepted from the server.
const MAX_LINE: u64 = 1024 * 1024;
/// Deepest array nesting accepted from the server.
const MAX_DEPTH: usize = 32;

/// A RESP2 reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RespValue {
    /// Simple string (`+OK`).
    Simple(String),
    /// Error reply (`-ERR ...`), without the leading `-`.
    Error(String),
    /// Integer reply (`:1`).
    Integer(i64),
    /// Bulk string (`$3\r\nfoo`).
    Bulk(Vec<u8>),
    /// Nil bulk string (`$-1`) or nil array (`*-1`).
    Nil,
    /// Array reply (`*2 ...`).
    Array(Vec<RespValue>),
}

impl RespValue {
    /// Text of a simple string, error, or UTF-8 bulk string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            RespValue::Simple(s) | RespValue::Error(s) => Some(s),
            RespValue::Bulk(b) => std::str::from_utf8(b).ok(),
            _ => None,
        }
    }

    /// Raw bytes of a bulk string or simple string.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            RespValue::Simple(s) => Some(s.as_bytes()),
            RespValue::Bulk(b) => Some(b),
            _ => None,
        }
    }

    /// Value of an integer reply.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            RespValue::Integer(i) => Some(*i),
            _ => None,
        }
    }

    /// Elements of an array reply.
    pub fn as_array(&self) -> Option<&[RespValue]> {
        match self {
            RespValue::Array(items) => Some(items),
            _ => None,
        }
    }

    /// `true` for [`RespValue::Nil`].
    pub fn is_nil(&self) -> bool {
        matches!(self, RespValue::Nil)
    }

    /// `true` for the simple string `OK`.
    pub fn is_ok(&self) -> bool {
        matches!(self, RespValue::Simple(s) if s == "OK")
    }
}

impl fmt::Display for RespValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RespValue::Simple(s) => write!(f, "{s}"),
            RespValue::Error(e) => write!(f, "(error) {e}"),
            RespValue::Integer(i) => write!(f, "(integer) {i}"),
            RespValue::Bulk(b) => write!(f, "{:?}", String::from_utf8_lossy(b)),
            RespValue::Nil => write!(f, "(nil)"),
            RespValue::Array(items) => {
                write!(f, "[")?;
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{item}")?;
                }
                write!(f, "]")
            }
        }
    }
}

/// Encodes a command as a RESP array of bulk strings.
pub fn encode_command<A: AsRef<[u8]>>(args: &[A]) -> Vec<u8> {
    let mut out =
        Vec::with_capacity(16 + args.iter().map(|a| a.as_ref().len() + 16).sum::<usize>());
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for arg in args {
        let arg = arg.as_ref();
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Reads one RESP2 reply from `reader`.
///
/// Error replies are returned as [`RespValue::Error`]; malformed input is an
/// [`io::ErrorKind::InvalidData`] error and a closed connection is
/// [`io::ErrorKind::UnexpectedEof`].
pub fn read_value<R: BufRead>(reader: &mut R) -> io::Result<RespValue> {
    read_value_at(reader, 0)
}

fn read_value_at<R: BufRead>(reader: &mut R, depth: usize) -> io::Result<RespValue> {
    if depth > MAX_DEPTH {
        return Err(invalid("reply nested too deeply"));
    }
    let line = read_line(reader)?;
    let (kind, rest) = match line.split_first() {
        Some((k, rest)) => (*k, rest),
        None => return Err(invalid("empty reply line")),
    };
    let text = || {
        std::str::from_utf8(rest)
            .map(str::to_owned)
            .map_err(|_| invalid("reply line is not UTF-8"))
    };
    match kind {
        b'+' => Ok(RespValue::Simple(text()?)),
        b'-' => Ok(RespValue::Error(text()?)),
        b':' => Ok(RespValue::Integer(parse_int(rest)?)),
        b'$' => {
            let len = parse_int(rest)?;
            if len == -1 {
                return Ok(RespValue::Nil);
            }
            let len = usize::try_from(len).map_err(|_| invalid("negative bulk length"))?;
            let mut buf = vec![0; len + 2];
            reader.read_exact(&mut buf).map_err(eof_context)?;
            if !buf.ends_with(b"\r\n") {
                return Err(invalid("bulk string not terminated by CRLF"));
            }
            buf.truncate(len);
            Ok(RespValue::Bulk(buf))
        }
        b'*' => {
            let len = parse_int(rest)?;
            if len == -1 {
                return Ok(RespValue::Nil);
            }
            let len = usize::try_from(len).map_err(|_| invalid("negative array length"))?;
            // Do not trust the announced length for preallocation.
            let mut items = Vec::with_capacity(len.min(1024));
            for _ in 0..len {
                items.push(read_value_at(reader, depth + 1)?);
            }
            Ok(RespValue::Array(items))
        }
        other => Err(invalid(&format!(
            "unexpected RESP type byte {:?}",
            char::from(other)
        ))),
    }
}

fn read_line<R: BufRead>(reader: &mut R) -> io::Result<Vec<u8>> {
    let mut line = Vec::new();
    let n = reader
        .by_ref()
        .take(MAX_LINE)
        .read_until(b'\n', &mut line)?;
    if n == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed by server",
        ));
    }
    if !line.ends_with(b"\r\n") {
        return Err(if line.len() as u64 >= MAX_LINE {
            invalid("reply line too long")
        } else {
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed in the middle of a reply",
            )
        });
    }
    line.truncate(line.len() - 2);
    Ok(line)
}

fn parse_int(digits: &[u8]) -> io::Result<i64> {
    std::str::from_utf8(digits)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| invalid("invalid integer in reply"))
}

fn invalid(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("RESP: {msg}"))
}

fn eof_context(e: io::Error) -> io::Error {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed in the middle of a reply",
        )
    } else {
        e
    }
}

/// A blocking connection speaking RESP2, with connect/read/write timeouts.
///
/// Every read and write is bounded by the connection timeout; a timed-out
/// read is reported as [`io::ErrorKind::TimedOut`].
#[derive(Debug)]
pub struct RespConnection {
    reader: BufReader<TcpStream>,
    timeout: Duration,
}

impl RespConnection {
    /// Connects to `addr`, using `timeout` for the connect and for every
    /// subsequent read and write.
    pub fn connect(addr: SocketAddr, timeout: Duration) -> io::Result<RespConnection> {
        let stream = TcpStream::connect_timeout(&addr, timeout)?;
        stream.set_nodelay(true)?;
        let mut conn = RespConnection {
            reader: BufReader::new(stream),
            timeout,
        };
        conn.set_timeout(timeout)?;
        Ok(conn)
    }

    /// Changes the read/write timeout.
    pub fn set_timeout(&mut self, timeout: Duration) -> io::Result<()> {
        // A zero timeout is rejected by std; treat it as "as short as possible".
        let timeout = timeout.max(Duration::from_millis(1));
        let stream = self.reader.get_ref();
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        self.timeout = timeout;
        Ok(())
    }

    /// The current read/write timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Sends one command without waiting for its reply (see
    /// [`read_reply`](Self::read_reply)).
    pub fn send<A: AsRef<[u8]>>(&mut self, args: &[A]) -> io::Result<()> {
        if args.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "empty Redis command",
            ));
        }
        let buf = encode_command(args);
        self.reader
            .get_mut()
            .write_all(&buf)
            .map_err(|e| timeout_context(e, "sending a command", self.timeout))
    }

    /// Reads the next reply. Error replies are returned as
    /// [`RespValue::Error`], not as `Err`.
    pub fn read_reply(&mut self) -> io::Result<RespValue> {
        read_value(&mut self.reader)
            .map_err(|e| timeout_context(e, "waiting for a reply", self.timeout))
    }

    /// Sends one command and reads its reply. A top-level error reply is
    /// turned into an `Err` of kind [`io::ErrorKind::Other`] whose message
    /// contains the command name and the server's error text.
    pub fn command<A: AsRef<[u8]>>(&mut self, args: &[A]) -> io::Result<RespValue> {
        self.send(args)?;
        match self.read_reply() {
            Ok(RespValue::Error(e)) => Err(io::Error::other(format!(
                "redis replied to {} with an error: {e}",
                command_name(args)
            ))),
            Ok(v) => Ok(v),
            Err(e) => Err(io::Error::new(
                e.kind(),
                format!("{} (command {})", e, command_name(args)),
            )),
        }
    }
}

pub(crate) fn command_name<A: AsRef<[u8]>>(args: &[A]) -> String {
    args.first()
        .map(|a| String::from_utf8_lossy(a.as_ref()).into_owned())
        .unwrap_or_default()
}

fn timeout_context(e: io::Error, what: &str, timeout: Duration) -> io::Error {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => io::Error::new(
            io::ErrorKind::TimedOut,
            format!("timed out after {timeout:?} {what}"),
        ),
        _ => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> io::Result<RespValue> {
        read_value(&mut &bytes[..])
    }

    #[test]
    fn encodes_bulk_array() {
        assert_eq!(
            encode_command(&["SET", "k", ""]),
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n".to_vec()
        );
    }

    #[test]
    fn parses_scalar_types() {
        assert_eq!(parse(b"+OK\r\n").unwrap(), RespValue::Simple("OK".into()));
        assert!(parse(b"+OK\r\n").unwrap().is_ok());
        assert_eq!(
            parse(b"-ERR nope\r\n").unwrap(),
            RespValue::Error("ERR nope".into())
        );
        assert_eq!(parse(b":-42\r\n").unwrap(), RespValue::Integer(-42));
        assert_eq!(
            parse(b"$5\r\na\r\nbc\r\n").unwrap(),
            RespValue::Bulk(b"a\r\nbc".to_vec())
        );
        assert_eq!(parse(b"$0\r\n\r\n").unwrap(), RespValue::Bulk(Vec::new()));
        assert_eq!(parse(b"$-1\r\n").unwrap(), RespValue::Nil);
        assert_eq!(parse(b"*-1\r\n").unwrap(), RespValue::Nil);
    }

    #[test]
    fn parses_nested_arrays() {
        let v = parse(b"*3\r\n:1\r\n*2\r\n$1\r\na\r\n$-1\r\n+x\r\n").unwrap();
        assert_eq!(
            v,
            RespValue::Array(vec![
                RespValue::Integer(1),
                RespValue::Array(vec![RespValue::Bulk(b"a".to_vec()), RespValue::Nil]),
                RespValue::Simple("x".into()),
            ])
        );
        assert_eq!(v.as_array().unwrap().len(), 3);
    }

    #[test]
    fn parses_consecutive_replies() {
        let mut input: &[u8] = b"+OK\r\n:7\r\n";
        assert!(read_value(&mut input).unwrap().is_ok());
        assert_eq!(read_value(&mut input).unwrap().as_int(), Some(7));
        assert_eq!(
            read_value(&mut input).unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
    }

    #[test]
    fn rejects_malformed_input() {
        for bad in [
            &b"?x\r\n"[..],
            b":12a\r\n",
            b"$-2\r\n",
            b"$3\r\nabcd\r\n",
            b"*-5\r\n",
            b"\r\n",
        ] {
            let err = parse(bad).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidData, "input {bad:?}");
        }
        for truncated in [&b"+OK"[..], b"$3\r\nab", b"*2\r\n:1\r\n"] {
            let err = parse(truncated).unwrap_err();
            assert_eq!(
                err.kind(),
                io::ErrorKind::UnexpectedEof,
                "input {truncated:?}"
            );
        }
    }

    #[test]
    fn rejects_excessive_nesting() {
        let input = "*1\r\n".repeat(MAX_DEPTH + 2);
        assert_eq!(
            parse(input.as_bytes()).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
    }
}
