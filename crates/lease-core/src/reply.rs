//! Parsing the script's reply into a typed [`Reply`].
//!
//! Both scripts reply with an array of integers only, so every adapter can ask
//! its client for a list of `i64` and hand it over untouched. Anything that is
//! not exactly what the script returns (wrong arity, a negative or out-of-range
//! number, a position not below its count, an interval number that does not
//! follow from the server time) is a [`ReplyError`]: never a panic, never a
//! lease.

use crate::options::Mode;
use crate::ownership::Mapping;
use crate::rules::GroupRules;

/// Server time from Redis `TIME`, in microseconds since the Unix epoch.
pub type ServerMicros = u64;

/// The latest server time a reply may carry, in seconds since the Unix epoch
/// (about the year 5138). Later is rejected as out of range.
pub const MAX_SERVER_SECONDS: u64 = 100_000_000_000;

/// A well-formed reply of the registration script.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply {
    /// The server's interval was not the one the caller named in its keys;
    /// nothing was written. Serves as a clock probe.
    WrongInterval {
        /// The server's interval number.
        interval: u64,
        /// Server time at execution.
        server_time: ServerMicros,
    },
    /// The worker was counted in `interval`.
    Counted(Counted),
    /// Ranked, under a member name (rule 18): counted under the name in
    /// `interval`, but the name is held by another identity (another
    /// process) whose last lease may still be valid, so this reply grants
    /// nothing. What it implies is still the name's position.
    MemberInUse(Counted),
    /// The group's recorded rules differ from the caller's (rule 12):
    /// nothing was written.
    Refused {
        /// The server's interval number, by the caller's interval length.
        interval: u64,
        /// Server time at execution.
        server_time: ServerMicros,
        /// The recorded rules, `None` if the record could not be read.
        recorded: Option<GroupRules>,
    },
}

impl Reply {
    /// The server's interval number at execution.
    pub fn interval(&self) -> u64 {
        match self {
            Reply::WrongInterval { interval, .. } | Reply::Refused { interval, .. } => *interval,
            Reply::Counted(c) | Reply::MemberInUse(c) => c.interval,
        }
    }

    /// Server time at execution.
    pub fn server_time(&self) -> ServerMicros {
        match self {
            Reply::WrongInterval { server_time, .. } | Reply::Refused { server_time, .. } => {
                *server_time
            }
            Reply::Counted(c) | Reply::MemberInUse(c) => c.server_time,
        }
    }
}

/// What a counted registration in interval `k` tells the worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counted {
    /// The interval `k` the registration was counted in.
    pub interval: u64,
    /// Server time at execution.
    pub server_time: ServerMicros,
    /// `Arrival`: the 0-based arrival index in `k`. `Ranked`: the token's rank
    /// in the closed set of `k-1`, `None` if it was not counted there.
    pub position: Option<u32>,
    /// The final count of the closed interval `k-1`, `None` if its key is
    /// missing (`Arrival` only; an absent sorted set has size 0).
    pub count: Option<u32>,
}

/// Why a reply was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReplyError {
    /// The array does not have the length the status calls for.
    #[error("reply has {got} elements; expected {expected}")]
    Arity {
        /// Elements received.
        got: usize,
        /// Elements expected (4, 6 or 8; 0 when the status itself is missing).
        expected: usize,
    },
    /// The first element is neither 0 (wrong interval), 1 (counted), 2
    /// (refused) nor, under Ranked counting, 3 (counted, member in use).
    #[error("reply status {0} is neither 0, 1, 2 nor 3")]
    Status(i64),
    /// A field is negative or too large.
    #[error("reply field {field} = {value} is out of range")]
    OutOfRange {
        /// Which field.
        field: &'static str,
        /// The value received.
        value: i64,
    },
    /// The interval number does not follow from the server time.
    #[error("reply interval {interval} does not match server time {server_time} us")]
    IntervalMismatch {
        /// Interval number received.
        interval: u64,
        /// Server time received.
        server_time: ServerMicros,
    },
    /// A rank is not below the size of its set.
    #[error("reply position {position} is not below its count {count}")]
    PositionNotBelowCount {
        /// Position received.
        position: u32,
        /// Count received.
        count: u32,
    },
    /// The reply is about another interval than the request named.
    #[error("reply is for interval {got}; the request named interval {expected}")]
    UnexpectedInterval {
        /// The interval the request's keys named.
        expected: u64,
        /// The interval in the reply.
        got: u64,
    },
    /// The client library could not turn the reply into integers.
    #[error("reply is not an array of integers")]
    NotIntegers,
}

fn field<T: TryFrom<i64>>(name: &'static str, value: i64) -> Result<T, ReplyError> {
    T::try_from(value).map_err(|_| ReplyError::OutOfRange { field: name, value })
}

/// `-1` means absent; anything else must fit a `u32`.
fn optional(name: &'static str, value: i64) -> Result<Option<u32>, ReplyError> {
    match value {
        -1 => Ok(None),
        v => field(name, v).map(Some),
    }
}

impl Reply {
    /// Parses the integers the script of `mode` returned, for an interval of
    /// `interval_ms` milliseconds.
    ///
    /// ```
    /// use lease_core::{Mode, Reply};
    /// // Counted in interval 10 at 3.0015 s (interval 300 ms): rank 2 of 5.
    /// let reply = Reply::parse(Mode::Ranked, 300, &[1, 10, 3, 1500, 2, 5]).unwrap();
    /// assert_eq!(reply.interval(), 10);
    /// assert!(Reply::parse(Mode::Ranked, 300, &[1, 10, 3, 1500, 5, 5]).is_err());
    /// ```
    pub fn parse(mode: Mode, interval_ms: u64, values: &[i64]) -> Result<Reply, ReplyError> {
        let Some(&status) = values.first() else {
            return Err(ReplyError::Arity {
                got: 0,
                expected: 0,
            });
        };
        let expected = match status {
            0 => 4,
            1 => 6,
            2 => 8,
            3 if mode == Mode::Ranked => 6,
            other => return Err(ReplyError::Status(other)),
        };
        if values.len() != expected {
            return Err(ReplyError::Arity {
                got: values.len(),
                expected,
            });
        }
        let interval: u64 = field("interval", values[1])?;
        let sec: u64 = field("sec", values[2])?;
        let usec: u64 = field("usec", values[3])?;
        // Redis TIME is seconds since the Unix epoch; anything past year
        // 5000 is not a clock, and bounding it keeps every microsecond
        // computation on it far from overflow.
        if sec > MAX_SERVER_SECONDS {
            return Err(ReplyError::OutOfRange {
                field: "sec",
                value: values[2],
            });
        }
        if usec >= 1_000_000 {
            return Err(ReplyError::OutOfRange {
                field: "usec",
                value: values[3],
            });
        }
        // i64 seconds cannot overflow u64 microseconds by more than this check.
        let server_time = sec
            .checked_mul(1_000_000)
            .and_then(|us| us.checked_add(usec))
            .ok_or(ReplyError::OutOfRange {
                field: "sec",
                value: values[2],
            })?;
        let ms = sec.saturating_mul(1000).saturating_add(usec / 1000);
        if interval_ms == 0 || ms / interval_ms != interval {
            return Err(ReplyError::IntervalMismatch {
                interval,
                server_time,
            });
        }
        match status {
            0 => {
                return Ok(Reply::WrongInterval {
                    interval,
                    server_time,
                });
            }
            2 => {
                return Ok(Reply::Refused {
                    interval,
                    server_time,
                    recorded: recorded_rules(&values[4..8]),
                });
            }
            _ => {}
        }
        let (position, count) = match mode {
            Mode::Arrival => {
                // INCR starts at 1, so the 0-based index is never absent.
                let index: u32 = field("position", values[4])?;
                (Some(index), optional("count", values[5])?)
            }
            Mode::Ranked => {
                let rank = optional("position", values[4])?;
                let size: u32 = field("count", values[5])?;
                if let Some(rank) = rank
                    && rank >= size
                {
                    return Err(ReplyError::PositionNotBelowCount {
                        position: rank,
                        count: size,
                    });
                }
                (rank, Some(size))
            }
        };
        let wrap = [Reply::Counted, Reply::MemberInUse][usize::from(status == 3)];
        Ok(wrap(Counted {
            interval,
            server_time,
            position,
            count,
        }))
    }
}

/// The recorded rules of a refusal, `[version, interval_ms, mode, mapping]`
/// (`-1` for what the script could not read): `None` unless all four are
/// valid.
fn recorded_rules(fields: &[i64]) -> Option<GroupRules> {
    let [version, interval_ms, mode, mapping] = fields else {
        return None;
    };
    let mode = match mode {
        0 => Mode::Arrival,
        1 => Mode::Ranked,
        _ => return None,
    };
    let mapping = match mapping {
        0 => Mapping::Modulo,
        1 => Mapping::Consistent,
        _ => return None,
    };
    let interval_ms = u64::try_from(*interval_ms).ok().filter(|&l| l > 0)?;
    (*version == i64::from(crate::rules::version_of(mode))).then_some(GroupRules {
        interval_ms,
        mode,
        mapping,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // 3.0015 s with a 300 ms interval is interval 10.
    const T: [i64; 4] = [1, 10, 3, 1500];

    fn counted(mode: Mode, pos: i64, count: i64) -> Result<Reply, ReplyError> {
        Reply::parse(mode, 300, &[T[0], T[1], T[2], T[3], pos, count])
    }

    #[test]
    fn well_formed_replies_parse() {
        assert_eq!(
            counted(Mode::Ranked, 2, 5),
            Ok(Reply::Counted(Counted {
                interval: 10,
                server_time: 3_001_500,
                position: Some(2),
                count: Some(5)
            }))
        );
        let r = counted(Mode::Ranked, -1, 0).unwrap();
        assert!(matches!(
            r,
            Reply::Counted(Counted {
                position: None,
                count: Some(0),
                ..
            })
        ));
        let r = counted(Mode::Arrival, 7, -1).unwrap();
        assert!(matches!(
            r,
            Reply::Counted(Counted {
                position: Some(7),
                count: None,
                ..
            })
        ));
        assert_eq!(
            Reply::parse(Mode::Arrival, 300, &[0, 10, 3, 1500]),
            Ok(Reply::WrongInterval {
                interval: 10,
                server_time: 3_001_500
            })
        );
    }

    #[test]
    fn refusals_parse_with_the_recorded_rules_or_none() {
        let refused = |rules: [i64; 4]| {
            let mut v = vec![2, 10, 3, 1500];
            v.extend(rules);
            Reply::parse(Mode::Ranked, 300, &v)
        };
        assert_eq!(
            refused([1, 1000, 0, 1]),
            Ok(Reply::Refused {
                interval: 10,
                server_time: 3_001_500,
                recorded: Some(GroupRules {
                    interval_ms: 1000,
                    mode: Mode::Arrival,
                    mapping: Mapping::Consistent,
                }),
            })
        );
        for unreadable in [
            [-1, -1, -1, -1],
            [2, 1000, 0, 0],
            [1, 1000, 1, 0],
            [1, 0, 1, 0],
            [1, 10, 2, 0],
        ] {
            assert!(
                matches!(
                    refused(unreadable),
                    Ok(Reply::Refused { recorded: None, .. })
                ),
                "{unreadable:?}"
            );
        }
        assert!(matches!(
            Reply::parse(Mode::Ranked, 300, &[2, 10, 3, 1500, 1, 1000]),
            Err(ReplyError::Arity {
                got: 6,
                expected: 8
            })
        ));
    }

    #[test]
    fn malformed_replies_are_errors() {
        use ReplyError::*;
        let p = |v: &[i64]| Reply::parse(Mode::Ranked, 300, v);
        assert!(matches!(p(&[]), Err(Arity { got: 0, .. })));
        assert!(matches!(p(&[1, 10, 3, 1500, 2]), Err(Arity { got: 5, .. })));
        assert!(matches!(
            p(&[0, 10, 3, 1500, 2, 5]),
            Err(Arity { got: 6, .. })
        ));
        assert!(matches!(p(&[3, 10, 3, 1500]), Err(Arity { got: 4, .. })));
        assert!(matches!(p(&[4, 10, 3, 1500]), Err(Status(4))));
        assert!(matches!(
            Reply::parse(Mode::Arrival, 300, &[3, 10, 3, 1500, 2, 5]),
            Err(Status(3))
        ));
        assert!(matches!(
            p(&[3, 10, 3, 1500, 5, 5]),
            Err(PositionNotBelowCount { .. })
        ));
        assert!(matches!(
            p(&[3, 10, 3, 1500, 2, 5]),
            Ok(Reply::MemberInUse(Counted {
                position: Some(2),
                count: Some(5),
                ..
            }))
        ));
        assert!(matches!(
            p(&[1, -10, 3, 1500, 2, 5]),
            Err(OutOfRange { .. })
        ));
        assert!(matches!(
            p(&[1, 10, -3, 1500, 2, 5]),
            Err(OutOfRange { .. })
        ));
        assert!(matches!(
            p(&[1, 10, 3, 1_000_000, 2, 5]),
            Err(OutOfRange { field: "usec", .. })
        ));
        assert!(matches!(
            p(&[1, 10, i64::MAX, 0, 2, 5]),
            Err(OutOfRange { field: "sec", .. })
        ));
        assert!(matches!(
            p(&[1, 11, 3, 1500, 2, 5]),
            Err(IntervalMismatch { .. })
        ));
        assert!(matches!(
            counted(Mode::Ranked, 5, 5),
            Err(PositionNotBelowCount { .. })
        ));
        assert!(matches!(
            counted(Mode::Ranked, -2, 5),
            Err(OutOfRange { .. })
        ));
        assert!(matches!(
            counted(Mode::Ranked, 1, -1),
            Err(OutOfRange { .. })
        ));
        assert!(matches!(
            counted(Mode::Arrival, -1, 5),
            Err(OutOfRange { .. })
        ));
        assert!(matches!(
            counted(Mode::Arrival, 1 << 40, 5),
            Err(OutOfRange { .. })
        ));
        assert!(matches!(
            Reply::parse(Mode::Ranked, 0, &[0, 10, 3, 1500]),
            Err(IntervalMismatch { .. })
        ));
    }
}
