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
    /// `Arrival`: the 0-based arrival index in `k`. `Ranked`: the member's
    /// position in the closed set of `k-1`, `None` if it was not counted
    /// there.
    pub position: Option<u32>,
    /// The final count of the closed interval `k-1`, `None` if its key is
    /// missing (`Arrival` only; an absent sorted set has size 0).
    pub count: Option<u32>,
    /// `Ranked` (rule 19): whether the member's entry in closed `k-1` is its
    /// own registration there, rather than only the reservation its
    /// registration in `k-2` made. A grant from a reserved entry is short.
    /// Always `true` under `Arrival`, and when `position` is `None`.
    pub registered: bool,
    /// `Ranked` (rule 19): what the script read of the closed set of `k-2`:
    /// the member's position there when the worker did not know it, the
    /// set's size, and the positions this worker inherits.
    pub older: Older,
}

/// Largest number of inherited positions a reply names (rule 19: the
/// script looks at no more candidates).
pub const MAX_INHERITED: usize = 8;

/// What a `Ranked` reply from `k` says of the closed set of `k-2` (rule
/// 19). Empty under `Arrival`, and whenever the script did not read that
/// set (a settled worker knows its position there from its previous
/// reply).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Older {
    /// The member's position in closed `k-2`, when the worker sent none
    /// and the member keeps a position there (`None` otherwise).
    pub position: Option<u32>,
    /// The size of closed `k-2`, when the script read it.
    pub count: Option<u32>,
    inherited: [u32; MAX_INHERITED],
    inherited_len: u8,
}

impl Older {
    /// Positions of closed `k-2` that this worker inherits: their keepers
    /// there are absent from the set of `k-1` (rule 19), in ascending order.
    pub fn inherited(&self) -> &[u32] {
        &self.inherited[..usize::from(self.inherited_len)]
    }

    /// With `positions` inherited (ascending, at most [`MAX_INHERITED`]).
    pub fn with_inherited(mut self, positions: &[u32]) -> Option<Self> {
        if positions.len() > MAX_INHERITED {
            return None;
        }
        self.inherited[..positions.len()].copy_from_slice(positions);
        self.inherited_len = positions.len() as u8;
        Some(self)
    }
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
    /// Fields that cannot come together in one reply of the script (rule
    /// 19's fields about closed `k-2` without the size of that set, for
    /// example).
    #[error("reply fields are inconsistent: {0}")]
    Inconsistent(&'static str),
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
    /// // Counted in interval 10 at 3.0015 s (interval 300 ms): position 2
    /// // of 5 in closed interval 9, registered there; nothing read of
    /// // closed interval 8 (rule 19's last two fields).
    /// let reply = Reply::parse(Mode::Ranked, 300, &[1, 10, 3, 1500, 2, 5, 1, -1, -1]).unwrap();
    /// assert_eq!(reply.interval(), 10);
    /// assert!(Reply::parse(Mode::Ranked, 300, &[1, 10, 3, 1500, 5, 5, 1, -1, -1]).is_err());
    /// ```
    pub fn parse(mode: Mode, interval_ms: u64, values: &[i64]) -> Result<Reply, ReplyError> {
        let Some(&status) = values.first() else {
            return Err(ReplyError::Arity {
                got: 0,
                expected: 0,
            });
        };
        // Ranked counted replies carry rule 19's fields after the first
        // six: 9, plus up to `MAX_INHERITED` inherited positions.
        let (expected, extra) = match (status, mode) {
            (0, _) => (4, 0),
            (2, _) => (8, 0),
            (1, Mode::Arrival) => (6, 0),
            (1 | 3, Mode::Ranked) => (RANKED_FIELDS, MAX_INHERITED),
            (other, _) => return Err(ReplyError::Status(other)),
        };
        if values.len() < expected || values.len() > expected + extra {
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
        let counted = match mode {
            Mode::Arrival => {
                // INCR starts at 1, so the 0-based index is never absent.
                let index: u32 = field("position", values[4])?;
                Counted {
                    interval,
                    server_time,
                    position: Some(index),
                    count: optional("count", values[5])?,
                    registered: true,
                    older: Older::default(),
                }
            }
            Mode::Ranked => ranked_fields(interval, server_time, values)?,
        };
        let wrap = [Reply::Counted, Reply::MemberInUse][usize::from(status == 3)];
        Ok(wrap(counted))
    }
}

/// A Ranked counted reply's length without inherited positions.
const RANKED_FIELDS: usize = 9;

/// The fields of a Ranked counted reply after the server time: `position,
/// size, registered, older position, older size, inherited...` (rule 19),
/// each checked on its own and against the others.
fn ranked_fields(
    interval: u64,
    server_time: ServerMicros,
    values: &[i64],
) -> Result<Counted, ReplyError> {
    let position = optional("position", values[4])?;
    let size: u32 = field("count", values[5])?;
    if let Some(rank) = position
        && rank >= size
    {
        return Err(ReplyError::PositionNotBelowCount {
            position: rank,
            count: size,
        });
    }
    // -1 exactly when the member is absent from closed k-1.
    let registered = match (values[6], position) {
        (-1, None) => true,
        (0, Some(_)) => false,
        (1, Some(_)) => true,
        (value, _) => {
            return Err(ReplyError::OutOfRange {
                field: "registered",
                value,
            });
        }
    };
    let older_position = optional("older position", values[7])?;
    let older_count = optional("older count", values[8])?;
    // The arity check bounds their number; no allocation per reply.
    let mut buffer = [0u32; MAX_INHERITED];
    let inherited = &mut buffer[..values.len() - RANKED_FIELDS];
    for (slot, &v) in inherited.iter_mut().zip(&values[RANKED_FIELDS..]) {
        *slot = field("inherited", v)?;
    }
    let inherited = &*inherited;
    if position.is_none() && (older_position.is_some() || older_count.is_some()) {
        return Err(ReplyError::Inconsistent(
            "fields about closed k-2 for a member absent from closed k-1",
        ));
    }
    if let Some(p) = older_position {
        match older_count {
            Some(n) if p < n => {}
            Some(n) => {
                return Err(ReplyError::PositionNotBelowCount {
                    position: p,
                    count: n,
                });
            }
            None => {
                return Err(ReplyError::Inconsistent(
                    "a position in closed k-2 without its size",
                ));
            }
        }
    }
    if !inherited.is_empty() {
        let n = older_count.ok_or(ReplyError::Inconsistent(
            "inherited positions without the size of closed k-2",
        ))?;
        if inherited.windows(2).any(|w| w[0] >= w[1]) {
            return Err(ReplyError::Inconsistent(
                "inherited positions not in ascending order",
            ));
        }
        if let Some(&p) = inherited.iter().find(|&&p| p >= n) {
            return Err(ReplyError::PositionNotBelowCount {
                position: p,
                count: n,
            });
        }
        if older_position.is_some_and(|own| inherited.contains(&own)) {
            return Err(ReplyError::Inconsistent(
                "the member's own position in closed k-2 among the inherited",
            ));
        }
    }
    let older = Older {
        position: older_position,
        count: older_count,
        ..Older::default()
    }
    .with_inherited(inherited)
    .ok_or(ReplyError::Inconsistent("too many inherited positions"))?;
    Ok(Counted {
        interval,
        server_time,
        position,
        count: Some(size),
        registered,
        older,
    })
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
        match mode {
            Mode::Arrival => Reply::parse(mode, 300, &[T[0], T[1], T[2], T[3], pos, count]),
            Mode::Ranked => {
                let registered = if pos == -1 { -1 } else { 1 };
                let v = [T[0], T[1], T[2], T[3], pos, count, registered, -1, -1];
                Reply::parse(mode, 300, &v)
            }
        }
    }

    /// A Ranked counted reply from interval 10 with rule 19's fields.
    fn ranked(tail: &[i64]) -> Result<Reply, ReplyError> {
        let mut v = T.to_vec();
        v.extend(tail);
        Reply::parse(Mode::Ranked, 300, &v)
    }

    #[test]
    fn well_formed_replies_parse() {
        assert_eq!(
            counted(Mode::Ranked, 2, 5),
            Ok(Reply::Counted(Counted {
                interval: 10,
                server_time: 3_001_500,
                position: Some(2),
                count: Some(5),
                registered: true,
                older: Older::default(),
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
    fn rule_19_fields_parse_and_are_checked_against_each_other() {
        // A reserved entry, the position in k-2 from the server, and an
        // inherited position.
        let Ok(Reply::Counted(c)) = ranked(&[1, 4, 0, 4, 5, 1]) else {
            panic!("a returnee's reply parses");
        };
        assert!(!c.registered);
        assert_eq!((c.older.position, c.older.count), (Some(4), Some(5)));
        assert_eq!(c.older.inherited(), [1]);
        // Nothing of k-2 read: a settled keeper's reply.
        let Ok(Reply::Counted(c)) = ranked(&[2, 5, 1, -1, -1]) else {
            panic!("a keeper's reply parses");
        };
        assert_eq!(c.older, Older::default());
        // The size alone, with inherited positions (the worker knew its own).
        let Ok(Reply::Counted(c)) = ranked(&[1, 4, 1, -1, 5, 1, 4]) else {
            panic!("an inheriting reply parses");
        };
        assert_eq!(c.older.inherited(), [1, 4]);
        use ReplyError::*;
        for (tail, why) in [
            (&[2, 5, 2, -1, -1][..], "registered is 0 or 1"),
            (&[-1, 5, 1, -1, -1][..], "registered is -1 when absent"),
            (&[2, 5, -1, -1, -1][..], "registered is -1 only when absent"),
            (&[-1, 5, -1, 1, 5][..], "nothing of k-2 when absent"),
            (&[2, 5, 1, 1, -1][..], "a position in k-2 needs its size"),
            (
                &[2, 5, 1, 5, 5][..],
                "the position in k-2 is below its size",
            ),
            (
                &[2, 5, 1, -1, -1, 3][..],
                "inherited positions need the size",
            ),
            (
                &[2, 5, 1, -1, 5, 5][..],
                "inherited positions are below the size",
            ),
            (&[2, 5, 1, -1, 5, 3, 3][..], "inherited positions ascend"),
            (
                &[2, 5, 1, 3, 5, 3][..],
                "one's own position is not inherited",
            ),
            (
                &[2, 5, 1, -1, 5, -1][..],
                "inherited positions are positions",
            ),
        ] {
            assert!(
                matches!(
                    ranked(tail),
                    Err(Inconsistent(_) | OutOfRange { .. } | PositionNotBelowCount { .. })
                ),
                "{why}: {tail:?} gave {:?}",
                ranked(tail)
            );
        }
        // At most MAX_INHERITED inherited positions.
        let mut long = vec![2, 20, 1, -1, 20];
        long.extend((10..10 + MAX_INHERITED as i64 + 1).collect::<Vec<_>>());
        assert!(matches!(ranked(&long), Err(Arity { .. })));
        long.pop();
        assert!(ranked(&long).is_ok());
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
        // Ranked counted replies carry rule 19's three fields.
        assert!(matches!(
            p(&[1, 10, 3, 1500, 2, 5]),
            Err(Arity {
                got: 6,
                expected: 9
            })
        ));
        assert!(matches!(p(&[4, 10, 3, 1500]), Err(Status(4))));
        assert!(matches!(
            Reply::parse(Mode::Arrival, 300, &[3, 10, 3, 1500, 2, 5]),
            Err(Status(3))
        ));
        assert!(matches!(
            p(&[3, 10, 3, 1500, 5, 5, 1, -1, -1]),
            Err(PositionNotBelowCount { .. })
        ));
        assert!(matches!(
            p(&[3, 10, 3, 1500, 2, 5, 1, -1, -1]),
            Ok(Reply::MemberInUse(Counted {
                position: Some(2),
                count: Some(5),
                ..
            }))
        ));
        assert!(matches!(
            p(&[1, -10, 3, 1500, 2, 5, 1, -1, -1]),
            Err(OutOfRange { .. })
        ));
        assert!(matches!(
            p(&[1, 10, -3, 1500, 2, 5, 1, -1, -1]),
            Err(OutOfRange { .. })
        ));
        assert!(matches!(
            p(&[1, 10, 3, 1_000_000, 2, 5, 1, -1, -1]),
            Err(OutOfRange { field: "usec", .. })
        ));
        assert!(matches!(
            p(&[1, 10, i64::MAX, 0, 2, 5, 1, -1, -1]),
            Err(OutOfRange { field: "sec", .. })
        ));
        assert!(matches!(
            p(&[1, 11, 3, 1500, 2, 5, 1, -1, -1]),
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
