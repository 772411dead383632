//! What the driver needs of a Redis client: one script command in, its
//! reply as integers out.

use std::fmt::Display;
use std::future::Future;

/// Which of the two script commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    /// `EVALSHA sha1 ..`: the first attempt.
    EvalSha,
    /// `EVAL source ..`: after `NOSCRIPT`; it also loads the script on the
    /// node that owns the keys.
    Eval,
}

impl Verb {
    /// `EVALSHA` or `EVAL`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::EvalSha => "EVALSHA",
            Verb::Eval => "EVAL",
        }
    }
}

/// One script command to run: `verb script 8 keys[0] .. keys[7] args..`
/// (every request declares [`lease_core::KEY_COUNT`] keys).
///
/// It borrows the worker's buffers only for the call to
/// [`Connection::run`]: the client encodes it there (its own copy is the
/// only one made), and the future it returns must not borrow it.
#[derive(Clone, Copy, Debug)]
pub struct Command<'a> {
    /// `EVALSHA` or `EVAL`.
    pub verb: Verb,
    /// The script's SHA-1 (`EVALSHA`) or its source (`EVAL`).
    pub script: &'static str,
    /// `KEYS`.
    pub keys: [&'a str; lease_core::KEY_COUNT],
    /// `ARGV`.
    pub args: &'a [String],
}

impl<'a> Command<'a> {
    /// Every argument after the verb, for clients that build commands from
    /// strings: the script, the key count, the keys, the arguments.
    pub fn arguments(&self) -> impl Iterator<Item = &'a str> + use<'a> {
        [self.script, KEY_COUNT_TEXT]
            .into_iter()
            .chain(self.keys)
            .chain(self.args.iter().map(String::as_str))
    }
}

/// [`lease_core::KEY_COUNT`] as the text a command carries.
const KEY_COUNT_TEXT: &str = "8";
// The text must name the count (a single digit): checked at compile time.
const _: () = assert!(
    KEY_COUNT_TEXT.len() == 1
        && (KEY_COUNT_TEXT.as_bytes()[0] - b'0') as usize == lease_core::KEY_COUNT,
    "KEY_COUNT_TEXT must name KEY_COUNT"
);

/// A script's reply as integers, held inline (no heap allocation): at most
/// [`Integers::CAPACITY`] values (the scripts reply at most 17: a Ranked
/// registration's nine and [`lease_core::MAX_INHERITED`] positions).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Integers {
    len: usize,
    values: [i64; Integers::CAPACITY],
}

impl Integers {
    /// The most values held.
    pub const CAPACITY: usize = 24;

    /// The integers of `items`, if each item is one (`Some` from `integer`)
    /// and there are at most [`Integers::CAPACITY`]; `None` otherwise (the
    /// worker then rejects the reply as not an array of integers).
    ///
    /// ```
    /// use lease_driver::Integers;
    /// let ints = Integers::collect([1, -1].iter(), |v| Some(*v)).unwrap();
    /// assert_eq!(ints.as_slice(), &[1, -1]);
    /// assert!(Integers::collect(["1"].iter(), |_| None::<i64>).is_none());
    /// assert!(Integers::collect(0..25, Some).is_none());
    /// ```
    pub fn collect<T>(
        items: impl IntoIterator<Item = T>,
        mut integer: impl FnMut(T) -> Option<i64>,
    ) -> Option<Self> {
        let mut out = Self {
            len: 0,
            values: [0; Self::CAPACITY],
        };
        for item in items {
            let slot = out.values.get_mut(out.len)?;
            *slot = integer(item)?;
            out.len += 1;
        }
        Some(out)
    }

    /// The values.
    pub fn as_slice(&self) -> &[i64] {
        &self.values[..self.len]
    }
}

impl std::fmt::Debug for Integers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.as_slice().fmt(f)
    }
}

/// A Redis client as the driver uses it: runs one script command and
/// returns its reply as integers. Each adapter implements it for its client.
pub trait Connection: Send + Sync {
    /// The client's error.
    type Error: Display + Send;

    /// Runs `command`: encodes it now (the returned future borrows the
    /// connection only, not the command). The reply is `Some` if it is an
    /// array of integers and nothing else ([`Integers::collect`]), `None`
    /// if it is anything else (the worker then rejects it); a client that
    /// converts leniently (strings of digits) must not.
    fn run<'c>(
        &'c self,
        command: Command<'_>,
    ) -> impl Future<Output = Result<Option<Integers>, Self::Error>> + Send + use<'c, Self>;

    /// Whether `error` is Redis's `NOSCRIPT` (the script cache lacks it).
    fn is_noscript(error: &Self::Error) -> bool;

    /// Runs [`lease_core::server::INFO_COMMAND`] (`INFO`, default sections)
    /// and returns its text: `Some` if the reply is text (a cluster client's
    /// per-node answers may be joined into one text), `None` if it is
    /// anything else. The driver calls it once when the worker starts and
    /// refuses a server [`lease_core::check_server`] refuses.
    ///
    /// The default returns `None` at once (no check): for connections that
    /// are not a Redis server's, such as a simulator's.
    fn server_info(&self) -> impl Future<Output = Result<Option<String>, Self::Error>> + Send {
        std::future::ready(Ok(None))
    }
}
