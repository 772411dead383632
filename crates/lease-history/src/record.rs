//! One line of a history: [`Record`]. The format is documented in
//! `docs/history-format.md`; in short:
//!
//! ```text
//! {"event":"clock","interval_us":1000000,"server_us":1700000000000000,"at_us":0}
//! {"worker":"w3","event":"own","i":2,"n":5,"token":58391,"at_us":1234567}
//! {"worker":"w3","event":"release","i":2,"n":5,"renewed":58392,"at_us":1299999}
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
//! Task sets (incremental handover): an `own` may carry the mapping and the
//! parts it holds, a `release` why the lease ended:
//!
//! ```text
//! {"worker":"w1","event":"own","i":1,"n":3,"token":60,"mapping":"consistent","held":[[1,3,1,2,58]],"at_us":1400000}
//! {"worker":"w1","event":"release","i":1,"n":3,"reason":"expired","renewed":[61],"at_us":1500000}
//! ```
//!
//! A part `[i, n, pi, pn, token]` is the tasks `t` with `owner(t, n) = i`
//! and `owner(t, pn) = pi` (all of `T(i, n)` when `(pi, pn) = (i, n)`),
//! held with `token`; an `own` with parts replaces the worker's holding at
//! that instant.
//!
//! The optional `renewed` field of a line that ends a holding (a `release`,
//! or an `own` that replaces a task set) is the interval of the registration
//! that last granted or renewed what it ends: one integer for a whole pair,
//! one per part (in the order of the ended holding's `held`) for a task set.
//! With the `clock` lines (the server clock's reading at an instant of the
//! history) it lets the checker hold every lease to the end of the interval
//! after its last renewal (rule 6 of docs/protocol.md).
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

/// How tasks are split between the `n` workers of a group (the mapping a
/// task-set `own` names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mapping {
    /// `owner(t, n) = jump_hash(id_hash(t), n)` ([`crate::tasks::owner`]).
    Consistent,
    /// `owner(t, n) = t mod n`.
    Modulo,
}

impl Mapping {
    /// The name written in a history line.
    pub fn as_str(self) -> &'static str {
        match self {
            Mapping::Consistent => "consistent",
            Mapping::Modulo => "modulo",
        }
    }
}

/// One part of a task-set holding: the tasks `t` with `owner(t, n) = i` and
/// `owner(t, pn) = pi`, held with `token`. Written as `[i, n, pi, pn, token]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(from = "(u32, u32, u32, u32, u64)", into = "(u32, u32, u32, u32, u64)")]
pub struct Part {
    /// The index under the newer pair.
    pub i: u32,
    /// The newer group size.
    pub n: u32,
    /// The index under the older pair.
    pub pi: u32,
    /// The older group size.
    pub pn: u32,
    /// The fencing token the part is held with.
    pub token: u64,
}

impl Part {
    /// All of `T(i, n)`, held with `token`.
    pub fn whole(i: u32, n: u32, token: u64) -> Self {
        Self {
            i,
            n,
            pi: i,
            pn: n,
            token,
        }
    }

    /// `T(i, n) ∩ T(pi, pn)`, held with `token`.
    pub fn intersection(i: u32, n: u32, pi: u32, pn: u32, token: u64) -> Self {
        Self {
            i,
            n,
            pi,
            pn,
            token,
        }
    }
}

impl From<(u32, u32, u32, u32, u64)> for Part {
    fn from((i, n, pi, pn, token): (u32, u32, u32, u32, u64)) -> Self {
        Self {
            i,
            n,
            pi,
            pn,
            token,
        }
    }
}

impl From<Part> for (u32, u32, u32, u32, u64) {
    fn from(p: Part) -> Self {
        (p.i, p.n, p.pi, p.pn, p.token)
    }
}

/// A part of a task set that its writer ends on the worker's behalf
/// ([`Record::task_set_ending`]): when it ends and the interval of the
/// registration that last granted or renewed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PartEnd {
    /// The part.
    pub part: Part,
    /// The instant it ends (its deadline, on the history's clock).
    pub end_us: u64,
    /// The interval it was last renewed in, if known.
    pub renewed: Option<u64>,
}

impl PartEnd {
    /// The `renewed` field of a line ending `parts`: one interval per part,
    /// if every part has one.
    fn renewed_of(parts: &[PartEnd]) -> Option<Renewed> {
        parts
            .iter()
            .map(|p| p.renewed)
            .collect::<Option<Vec<u64>>>()
            .map(Renewed::Parts)
    }
}

/// Why a lease ended, when the writer knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReleaseReason {
    /// The tasks were handed over to a newer pair.
    HandedOver,
    /// The lease's deadline passed.
    Expired,
    /// The worker was cancelled.
    Cancelled,
    /// The server's clock went wrong (a step or a jump back).
    Clock,
    /// The registration was refused (other group rules).
    Refused,
}

impl std::str::FromStr for ReleaseReason {
    type Err = UnknownReleaseReason;

    /// The names of the history (`handed-over`, `expired`, `cancelled`,
    /// `clock`, `refused`), and `server-clock` for `clock`, the name an
    /// adapter's stand-down reason has.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "handed-over" => Self::HandedOver,
            "expired" => Self::Expired,
            "cancelled" => Self::Cancelled,
            "clock" | "server-clock" => Self::Clock,
            "refused" => Self::Refused,
            other => return Err(UnknownReleaseReason(other.to_owned())),
        })
    }
}

/// A name that is not a [`ReleaseReason`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown release reason {0:?}")]
pub struct UnknownReleaseReason(pub String);

/// The interval of the registration that last granted or renewed what a
/// line ends (the `renewed` field): one number for a whole pair, one per
/// part for a task set, in the order of the ended holding's `held`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Renewed {
    /// A whole pair's lease: written as a number.
    Pair(u64),
    /// Each part of a task set, in the order of its `held`: written as an
    /// array.
    Parts(Vec<u64>),
}

/// One line of a history.
///
/// Serializes with the field order of `docs/history-format.md` (`worker`
/// first, then `event`, then the rest, `at_us` last); use
/// [`Record::to_line`] or a [`HistoryWriter`](crate::HistoryWriter) to get
/// the exact text.
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
        /// The lease's fencing token (the interval of the granting
        /// registration, docs/protocol.md "Fencing").
        token: u64,
        /// The mapping of a task-set holding; `None` for a whole pair.
        #[serde(default)]
        mapping: Option<Mapping>,
        /// The parts of a task-set holding; `None` for a whole pair.
        #[serde(default)]
        held: Option<Vec<Part>>,
        /// For an `own` that replaces the worker's task set: the renewal
        /// intervals of the holding it ends, one per part of that holding.
        #[serde(default)]
        renewed: Option<Renewed>,
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
        /// Why it ended, if the writer knows.
        #[serde(default)]
        reason: Option<ReleaseReason>,
        /// The interval of the registration that last granted or renewed
        /// the lease (one per part for a task set), if the writer knows.
        #[serde(default)]
        renewed: Option<Renewed>,
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
    /// A worker stopped: it registers no more. What it holds is ended by a
    /// `release` (a graceful leaver serves its parts after the cancel).
    Leave {
        /// The worker's name.
        worker: String,
        /// Crash or cancel.
        how: LeaveHow,
        /// When it stopped (the cancel, or the crash).
        at_us: u64,
    },
    /// The server clock read `server_us` at instant `at_us` of the history,
    /// and the group's interval is `interval_us`: written at the start and
    /// after every step of the server clock. Between two clock lines the
    /// server clock runs at the history clock's rate.
    Clock {
        /// The interval length `L` in microseconds.
        interval_us: u64,
        /// The server clock's reading, microseconds since the Unix epoch.
        server_us: u64,
        /// The instant of the history at which it read so.
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
            mapping: None,
            held: None,
            renewed: None,
            at_us,
        }
    }

    /// An `own` line of a task-set holding: the newest pair `(i, n)` with
    /// its token, the mapping and the parts held.
    pub fn own_parts(
        worker: impl Into<String>,
        i: u32,
        n: u32,
        token: u64,
        mapping: Mapping,
        held: Vec<Part>,
        at_us: u64,
    ) -> Self {
        Record::Own {
            worker: worker.into(),
            i,
            n,
            token,
            mapping: Some(mapping),
            held: Some(held),
            renewed: None,
            at_us,
        }
    }

    /// An `own` line of a task-set holding from its parts alone: `i`, `n`
    /// and `token` are those of the part with the largest token (the newest
    /// pair). `None` if there is no part.
    pub fn own_task_set(
        worker: impl Into<String>,
        mapping: Mapping,
        held: impl IntoIterator<Item = Part>,
        at_us: u64,
    ) -> Option<Self> {
        let held: Vec<Part> = held.into_iter().collect();
        let newest = *held.iter().max_by_key(|p| p.token)?;
        Some(Self::own_parts(
            worker,
            newest.i,
            newest.n,
            newest.token,
            mapping,
            held,
            at_us,
        ))
    }

    /// The lines that end a task-set holding whose worker will not say so
    /// itself (it crashed, or the run ends at `now_us`): `parts` are the
    /// parts of its last `own`, in the order of its `held`, each with the
    /// instant it ends and the interval it was last renewed in. Each part
    /// ends at its own end or `now_us`, whichever is earlier: a part that ran
    /// out first leaves the rest held from that instant on (an `own` of the
    /// rest), and the last ones end with a `release` naming the newest pair
    /// of the last `own`. Every line carries the renewal intervals of the
    /// holding it ends when every part has one. One code path for the
    /// simulator and the chaos harness.
    pub fn task_set_ending(
        worker: &str,
        mapping: Mapping,
        parts: Vec<PartEnd>,
        now_us: u64,
    ) -> Vec<Self> {
        let mut out = Vec::new();
        // The holding in force, in the order of its `held`.
        let mut held = parts;
        let mut ends: Vec<u64> = held.iter().map(|p| p.end_us.min(now_us)).collect();
        ends.sort_unstable();
        ends.dedup();
        for end in ends {
            let renewed = PartEnd::renewed_of(&held);
            let rest: Vec<PartEnd> = held.iter().filter(|p| p.end_us > end).cloned().collect();
            if end >= now_us || rest.is_empty() {
                if let Some(newest) = held.iter().map(|p| p.part).max_by_key(|p| p.token) {
                    let mut release = Self::release(worker, newest.i, newest.n, end);
                    if let Some(renewed) = renewed {
                        release = release.with_renewed(renewed);
                    }
                    out.push(release);
                }
                break;
            }
            let own = Self::own_task_set(worker, mapping, rest.iter().map(|p| p.part), end);
            out.extend(own.map(|own| match renewed {
                Some(renewed) => own.with_renewed(renewed),
                None => own,
            }));
            held = rest;
        }
        out
    }

    /// The same line with its `renewed` field set (on an `own` or a
    /// `release`; other lines have none and are returned unchanged).
    pub fn with_renewed(mut self, value: Renewed) -> Self {
        if let Record::Own { renewed, .. } | Record::Release { renewed, .. } = &mut self {
            *renewed = Some(value);
        }
        self
    }

    /// A `clock` line: the server clock read `server_us` at `at_us`, and the
    /// interval is `interval_us`.
    pub fn clock(interval_us: u64, server_us: u64, at_us: u64) -> Self {
        Record::Clock {
            interval_us,
            server_us,
            at_us,
        }
    }

    /// A `release` line.
    pub fn release(worker: impl Into<String>, i: u32, n: u32, at_us: u64) -> Self {
        Record::Release {
            worker: worker.into(),
            i,
            n,
            reason: None,
            renewed: None,
            at_us,
        }
    }

    /// A `release` line that says why the lease ended.
    pub fn release_because(
        worker: impl Into<String>,
        i: u32,
        n: u32,
        reason: ReleaseReason,
        at_us: u64,
    ) -> Self {
        Record::Release {
            worker: worker.into(),
            i,
            n,
            reason: Some(reason),
            renewed: None,
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
            | Record::Leave { at_us, .. }
            | Record::Clock { at_us, .. } => *at_us,
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
            Record::Clock { .. } => None,
        }
    }

    /// The `event` name: `own`, `release`, `fault`, `join`, `leave` or
    /// `clock`.
    pub fn event(&self) -> &'static str {
        match self {
            Record::Own { .. } => "own",
            Record::Release { .. } => "release",
            Record::Fault { .. } => "fault",
            Record::Join { .. } => "join",
            Record::Leave { .. } => "leave",
            Record::Clock { .. } => "clock",
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
                mapping,
                held,
                renewed,
                at_us,
            } => {
                let len = 6
                    + usize::from(mapping.is_some())
                    + usize::from(held.is_some())
                    + usize::from(renewed.is_some());
                let mut s = serializer.serialize_struct("Record", len)?;
                s.serialize_field("worker", worker)?;
                s.serialize_field("event", "own")?;
                s.serialize_field("i", i)?;
                s.serialize_field("n", n)?;
                s.serialize_field("token", token)?;
                optional(&mut s, "mapping", mapping)?;
                optional(&mut s, "held", held)?;
                optional(&mut s, "renewed", renewed)?;
                s.serialize_field("at_us", at_us)?;
                s.end()
            }
            Record::Release {
                worker,
                i,
                n,
                reason,
                renewed,
                at_us,
            } => {
                let len = 5 + usize::from(reason.is_some()) + usize::from(renewed.is_some());
                let mut s = serializer.serialize_struct("Record", len)?;
                s.serialize_field("worker", worker)?;
                s.serialize_field("event", "release")?;
                s.serialize_field("i", i)?;
                s.serialize_field("n", n)?;
                optional(&mut s, "reason", reason)?;
                optional(&mut s, "renewed", renewed)?;
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
                optional(&mut s, "worker", worker)?;
                optional(&mut s, "detail", detail)?;
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
            Record::Clock {
                interval_us,
                server_us,
                at_us,
            } => {
                let mut s = serializer.serialize_struct("Record", 4)?;
                s.serialize_field("event", "clock")?;
                s.serialize_field("interval_us", interval_us)?;
                s.serialize_field("server_us", server_us)?;
                s.serialize_field("at_us", at_us)?;
                s.end()
            }
        }
    }
}

/// Writes an optional field, or leaves it out.
fn optional<S: SerializeStruct, T: Serialize>(
    s: &mut S,
    key: &'static str,
    value: &Option<T>,
) -> Result<(), S::Error> {
    match value {
        Some(v) => s.serialize_field(key, v),
        None => s.skip_field(key),
    }
}

impl fmt::Display for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_line())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn release_reasons_parse_from_their_names_and_the_adapters_names() {
        for (name, reason) in [
            ("handed-over", ReleaseReason::HandedOver),
            ("expired", ReleaseReason::Expired),
            ("cancelled", ReleaseReason::Cancelled),
            ("clock", ReleaseReason::Clock),
            ("server-clock", ReleaseReason::Clock),
            ("refused", ReleaseReason::Refused),
        ] {
            assert_eq!(name.parse::<ReleaseReason>(), Ok(reason));
        }
        assert!("started".parse::<ReleaseReason>().is_err());
    }

    use super::*;

    /// A crashed worker's task set: the part that ran out first leaves the
    /// rest held from its deadline on; the rest ends at the crash, and the
    /// release names the newest pair of the last `own`. Each line carries
    /// the renewal intervals of the holding it ends, in its `held` order.
    #[test]
    fn a_task_set_ends_part_by_part() {
        let old = Part::whole(1, 3, 10);
        let new = Part::intersection(1, 4, 1, 3, 12);
        let end = |part, end_us, renewed| PartEnd {
            part,
            end_us,
            renewed,
        };
        let lines = Record::task_set_ending(
            "w1",
            Mapping::Consistent,
            vec![end(old, 500, Some(11)), end(new, 900, Some(13))],
            800,
        );
        assert_eq!(
            lines,
            vec![
                Record::own_parts("w1", 1, 4, 12, Mapping::Consistent, vec![new], 500)
                    .with_renewed(Renewed::Parts(vec![11, 13])),
                Record::release("w1", 1, 4, 800).with_renewed(Renewed::Parts(vec![13])),
            ]
        );
        // Everything ran out before the crash: one release at the last end;
        // an unknown renewal leaves the field out.
        let lines =
            Record::task_set_ending("w1", Mapping::Consistent, vec![end(old, 300, None)], 800);
        assert_eq!(lines, vec![Record::release("w1", 1, 3, 300)]);
        assert_eq!(Record::own_task_set("w1", Mapping::Consistent, [], 5), None);
    }

    #[test]
    fn clock_and_renewal_fields_have_fixed_text_and_round_trip() {
        let cases = [
            (
                Record::clock(1_000_000, 1_700_000_000_000_000, 0),
                r#"{"event":"clock","interval_us":1000000,"server_us":1700000000000000,"at_us":0}"#,
            ),
            (
                Record::release_because("w3", 2, 5, ReleaseReason::Expired, 9)
                    .with_renewed(Renewed::Pair(58392)),
                r#"{"worker":"w3","event":"release","i":2,"n":5,"reason":"expired","renewed":58392,"at_us":9}"#,
            ),
            (
                Record::own_parts(
                    "w1",
                    1,
                    3,
                    60,
                    Mapping::Consistent,
                    vec![Part::whole(1, 3, 60)],
                    7,
                )
                .with_renewed(Renewed::Parts(vec![58, 61])),
                r#"{"worker":"w1","event":"own","i":1,"n":3,"token":60,"mapping":"consistent","held":[[1,3,1,3,60]],"renewed":[58,61],"at_us":7}"#,
            ),
        ];
        for (record, line) in cases {
            assert_eq!(record.to_line(), line);
            assert_eq!(Record::from_line(line).unwrap(), record);
        }
        assert_eq!(
            Record::fault("restart", 1).with_renewed(Renewed::Pair(3)),
            Record::fault("restart", 1)
        );
        assert!(
            Record::from_line(
                r#"{"worker":"w","event":"release","i":0,"n":1,"renewed":"soon","at_us":1}"#
            )
            .is_err()
        );
    }

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

    #[test]
    fn task_set_lines_have_fixed_text_and_round_trip() {
        let own = Record::own_parts(
            "w1",
            1,
            3,
            60,
            Mapping::Consistent,
            vec![Part::intersection(1, 3, 1, 2, 58), Part::whole(1, 3, 60)],
            1_400_000,
        );
        let line = r#"{"worker":"w1","event":"own","i":1,"n":3,"token":60,"mapping":"consistent","held":[[1,3,1,2,58],[1,3,1,3,60]],"at_us":1400000}"#;
        assert_eq!(own.to_line(), line);
        assert_eq!(Record::from_line(line).unwrap(), own);
        let release = Record::release_because("w1", 1, 3, ReleaseReason::HandedOver, 5);
        let line =
            r#"{"worker":"w1","event":"release","i":1,"n":3,"reason":"handed-over","at_us":5}"#;
        assert_eq!(release.to_line(), line);
        assert_eq!(Record::from_line(line).unwrap(), release);
        // Whole-pair lines carry no parts, and read with none.
        let plain = r#"{"worker":"w1","event":"own","i":1,"n":3,"token":60,"at_us":7}"#;
        assert_eq!(
            Record::from_line(plain).unwrap(),
            Record::own("w1", 1, 3, 60, 7)
        );
        assert!(
            Record::from_line(
                r#"{"worker":"w","event":"release","i":0,"n":1,"reason":"bored","at_us":1}"#
            )
            .is_err()
        );
    }
}
