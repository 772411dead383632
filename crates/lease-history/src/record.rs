//! One line of a history (DESIGN section 6): [`Record`].
//!
//! ```text
//! {"worker":"w3","event":"own","i":2,"n":5,"token":58391,"at_us":1234567}
//! {"worker":"w3","event":"release","i":2,"n":5,"at_us":1299999}
//! {"worker":"w3","event":"join","at_us":1000000}
//! {"worker":"w3","event":"leave","how":"crash","at_us":1400000}
//! {"event":"fault","kind":"restart","at_us":1350000}
//! ```
//!
//! `at_us` is microseconds on one clock shared by every worker of the run.
//! `own` is written when the worker's loop receives a pair; `release` carries
//! the instant the lease really ended, which may be earlier than lines written
//! before it (a stalled worker writes its deadline, not the time it woke up).
//!
//! Lines are written with a fixed field order, exactly as above, so a history
//! is byte-for-byte reproducible. Reading accepts the fields in any order and
//! ignores unknown ones, so a newer writer's optional fields do not break an
//! older reader.

use std::fmt;

use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize, Serializer};

/// How a worker left the group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LeaveHow {
    /// The process died without standing down.
    Crash,
    /// The worker was cancelled and stood down.
    Cancel,
}

impl LeaveHow {
    /// The name written in a history line.
    pub fn as_str(self) -> &'static str {
        match self {
            LeaveHow::Crash => "crash",
            LeaveHow::Cancel => "cancel",
        }
    }
}

impl fmt::Display for LeaveHow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One line of a history.
///
/// Serializes with the field order of DESIGN section 6 (`worker` first, then
/// `event`, then the rest, `at_us` last); use [`Record::to_line`] or a
/// [`HistoryWriter`](crate::HistoryWriter) to get the exact text.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Deserialize)]
#[serde(tag = "event", rename_all = "lowercase")]
pub enum Record {
    /// The worker's loop received the pair `(i, n)` with a fencing token.
    Own {
        /// The worker's name, unique within the run.
        worker: String,
        /// The index `i`.
        i: u32,
        /// The group size `n`.
        n: u32,
        /// The lease's fencing token (DESIGN section 4).
        token: u64,
        /// When the loop received the pair.
        at_us: u64,
    },
    /// The lease on `(i, n)` ended.
    Release {
        /// The worker's name.
        worker: String,
        /// The index `i` given back.
        i: u32,
        /// The group size `n` given back.
        n: u32,
        /// The instant the lease really ended (its deadline if it ran out).
        at_us: u64,
    },
    /// A fault was injected (a Redis restart, a stall, a partition, ...).
    Fault {
        /// What kind of fault, free-form (`"restart"`, `"stall"`, ...).
        kind: String,
        /// The worker it hit, if it hit one.
        #[serde(default)]
        worker: Option<String>,
        /// Free-form detail.
        #[serde(default)]
        detail: Option<String>,
        /// When it was injected.
        at_us: u64,
    },
    /// A worker started.
    Join {
        /// The worker's name.
        worker: String,
        /// When it started.
        at_us: u64,
    },
    /// A worker stopped.
    Leave {
        /// The worker's name.
        worker: String,
        /// Crash or cancel.
        how: LeaveHow,
        /// When it stopped.
        at_us: u64,
    },
}

impl Record {
    /// An `own` line.
    pub fn own(worker: impl Into<String>, i: u32, n: u32, token: u64, at_us: u64) -> Self {
        Record::Own {
            worker: worker.into(),
            i,
            n,
            token,
            at_us,
        }
    }

    /// A `release` line.
    pub fn release(worker: impl Into<String>, i: u32, n: u32, at_us: u64) -> Self {
        Record::Release {
            worker: worker.into(),
            i,
            n,
            at_us,
        }
    }

    /// A `join` line.
    pub fn join(worker: impl Into<String>, at_us: u64) -> Self {
        Record::Join {
            worker: worker.into(),
            at_us,
        }
    }

    /// A `leave` line.
    pub fn leave(worker: impl Into<String>, how: LeaveHow, at_us: u64) -> Self {
        Record::Leave {
            worker: worker.into(),
            how,
            at_us,
        }
    }

    /// A `fault` line without a worker or detail.
    pub fn fault(kind: impl Into<String>, at_us: u64) -> Self {
        Record::Fault {
            kind: kind.into(),
            worker: None,
            detail: None,
            at_us,
        }
    }

    /// The instant of the line.
    pub fn at_us(&self) -> u64 {
        match self {
            Record::Own { at_us, .. }
            | Record::Release { at_us, .. }
            | Record::Fault { at_us, .. }
            | Record::Join { at_us, .. }
            | Record::Leave { at_us, .. } => *at_us,
        }
    }

    /// The worker the line is about, if any.
    pub fn worker(&self) -> Option<&str> {
        match self {
            Record::Own { worker, .. }
            | Record::Release { worker, .. }
            | Record::Join { worker, .. }
            | Record::Leave { worker, .. } => Some(worker),
            Record::Fault { worker, .. } => worker.as_deref(),
        }
    }

    /// The `event` name: `own`, `release`, `fault`, `join` or `leave`.
    pub fn event(&self) -> &'static str {
        match self {
            Record::Own { .. } => "own",
            Record::Release { .. } => "release",
            Record::Fault { .. } => "fault",
            Record::Join { .. } => "join",
            Record::Leave { .. } => "leave",
        }
    }

    /// The line's JSON text, without the newline.
    pub fn to_line(&self) -> String {
        // Serializing plain strings and integers into memory cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Parses one line (surrounding whitespace allowed).
    pub fn from_line(line: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(line.trim())
    }
}

impl Serialize for Record {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Record::Own {
                worker,
                i,
                n,
                token,
                at_us,
            } => {
                let mut s = serializer.serialize_struct("Record", 6)?;
                s.serialize_field("worker", worker)?;
                s.serialize_field("event", "own")?;
                s.serialize_field("i", i)?;
                s.serialize_field("n", n)?;
                s.serialize_field("token", token)?;
                s.serialize_field("at_us", at_us)?;
                s.end()
            }
            Record::Release {
                worker,
                i,
                n,
                at_us,
            } => {
                let mut s = serializer.serialize_struct("Record", 5)?;
                s.serialize_field("worker", worker)?;
                s.serialize_field("event", "release")?;
                s.serialize_field("i", i)?;
                s.serialize_field("n", n)?;
                s.serialize_field("at_us", at_us)?;
                s.end()
            }
            Record::Fault {
                kind,
                worker,
                detail,
                at_us,
            } => {
                let len = 3 + usize::from(worker.is_some()) + usize::from(detail.is_some());
                let mut s = serializer.serialize_struct("Record", len)?;
                s.serialize_field("event", "fault")?;
                s.serialize_field("kind", kind)?;
                match worker {
                    Some(w) => s.serialize_field("worker", w)?,
                    None => s.skip_field("worker")?,
                }
                match detail {
                    Some(d) => s.serialize_field("detail", d)?,
                    None => s.skip_field("detail")?,
                }
                s.serialize_field("at_us", at_us)?;
                s.end()
            }
            Record::Join { worker, at_us } => {
                let mut s = serializer.serialize_struct("Record", 3)?;
                s.serialize_field("worker", worker)?;
                s.serialize_field("event", "join")?;
                s.serialize_field("at_us", at_us)?;
                s.end()
            }
            Record::Leave { worker, how, at_us } => {
                let mut s = serializer.serialize_struct("Record", 4)?;
                s.serialize_field("worker", worker)?;
                s.serialize_field("event", "leave")?;
                s.serialize_field("how", how)?;
                s.serialize_field("at_us", at_us)?;
                s.end()
            }
        }
    }
}

impl fmt::Display for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_line())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extra_kinds_have_fixed_text_and_round_trip() {
        let cases = [
            (
                Record::fault("restart", 5),
                r#"{"event":"fault","kind":"restart","at_us":5}"#,
            ),
            (
                Record::Fault {
                    kind: "stall".into(),
                    worker: Some("w1".into()),
                    detail: Some("2s".into()),
                    at_us: 6,
                },
                r#"{"event":"fault","kind":"stall","worker":"w1","detail":"2s","at_us":6}"#,
            ),
            (
                Record::join("w3", 7),
                r#"{"worker":"w3","event":"join","at_us":7}"#,
            ),
            (
                Record::leave("w3", LeaveHow::Crash, 8),
                r#"{"worker":"w3","event":"leave","how":"crash","at_us":8}"#,
            ),
            (
                Record::leave("w3", LeaveHow::Cancel, 9),
                r#"{"worker":"w3","event":"leave","how":"cancel","at_us":9}"#,
            ),
        ];
        for (record, line) in cases {
            assert_eq!(record.to_line(), line);
            assert_eq!(Record::from_line(line).unwrap(), record);
        }
    }

    #[test]
    fn reading_accepts_any_field_order_and_unknown_fields() {
        let line = r#"{"at_us":3,"event":"own","token":9,"n":2,"i":1,"worker":"a","extra":true}"#;
        assert_eq!(
            Record::from_line(line).unwrap(),
            Record::own("a", 1, 2, 9, 3)
        );
        let fault = r#"{"event":"fault","kind":"partition","at_us":4,"duration_us":100}"#;
        assert_eq!(
            Record::from_line(fault).unwrap(),
            Record::fault("partition", 4)
        );
    }
}
