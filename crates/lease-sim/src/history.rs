//! The history of a run: one JSON object per line (DESIGN section 6).
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
//! [`History`] therefore sorts by `at_us` (stably, so lines with the same
//! instant keep their file order) before anything reads it as a timeline.
//!
//! Lines are written with a fixed field order, exactly as above, so a history
//! is byte-for-byte reproducible. Reading accepts the fields in any order and
//! ignores unknown ones; blank lines are skipped.

use std::fmt;
use std::io::{self, BufRead, Write};

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
/// [`HistoryWriter`] to get the exact text.
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

/// Writes records, one JSON object per line.
///
/// Each record is assembled in memory and handed to the inner writer with one
/// `write_all`, so wrap a file in a [`std::io::BufWriter`] for throughput; call
/// [`HistoryWriter::flush`] whenever the lines written so far must be durable.
#[derive(Debug)]
pub struct HistoryWriter<W: Write> {
    inner: W,
    line: Vec<u8>,
    written: u64,
}

impl<W: Write> HistoryWriter<W> {
    /// A writer over `inner`.
    pub fn new(inner: W) -> Self {
        Self {
            inner,
            line: Vec::with_capacity(128),
            written: 0,
        }
    }

    /// Writes one record and its newline.
    pub fn write(&mut self, record: &Record) -> io::Result<()> {
        self.line.clear();
        serde_json::to_writer(&mut self.line, record).map_err(io::Error::other)?;
        self.line.push(b'\n');
        self.inner.write_all(&self.line)?;
        self.written += 1;
        Ok(())
    }

    /// Writes every record of `records`, in order.
    pub fn write_all<'a>(
        &mut self,
        records: impl IntoIterator<Item = &'a Record>,
    ) -> io::Result<()> {
        records.into_iter().try_for_each(|r| self.write(r))
    }

    /// Flushes the inner writer.
    pub fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }

    /// How many records were written.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// The inner writer.
    pub fn get_ref(&self) -> &W {
        &self.inner
    }

    /// The inner writer, mutably (writing to it directly breaks the format).
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.inner
    }

    /// Flushes and returns the inner writer.
    pub fn into_inner(mut self) -> io::Result<W> {
        self.inner.flush()?;
        Ok(self.inner)
    }
}

/// A history that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// Reading the line failed.
    #[error("history line {line}: read failed: {source}")]
    Io {
        /// 1-based line number.
        line: u64,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// The line is not a valid record.
    #[error("history line {line}: invalid record: {source}")]
    Parse {
        /// 1-based line number.
        line: u64,
        /// What was wrong with it.
        #[source]
        source: serde_json::Error,
    },
}

impl HistoryError {
    /// The 1-based number of the line at fault.
    pub fn line(&self) -> u64 {
        match self {
            HistoryError::Io { line, .. } | HistoryError::Parse { line, .. } => *line,
        }
    }
}

/// Reads every record of a history, in file order. Blank lines are skipped;
/// the first bad line stops the read with its 1-based line number.
pub fn read_history(reader: impl BufRead) -> Result<Vec<Record>, HistoryError> {
    let mut records = Vec::new();
    for (index, line) in reader.lines().enumerate() {
        let line_no = index as u64 + 1;
        let line = line.map_err(|source| HistoryError::Io {
            line: line_no,
            source,
        })?;
        if line.trim().is_empty() {
            continue;
        }
        let record = Record::from_line(&line).map_err(|source| HistoryError::Parse {
            line: line_no,
            source,
        })?;
        records.push(record);
    }
    Ok(records)
}

/// Records in time order: sorted by `at_us`, stably, so records with the same
/// instant keep the order they were written in (a handover's `release` then
/// `own` stays that way round).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct History {
    records: Vec<Record>,
}

impl History {
    /// Sorts `records` by `at_us` (stable).
    pub fn new(mut records: Vec<Record>) -> Self {
        records.sort_by_key(Record::at_us);
        Self { records }
    }

    /// Reads a history (see [`read_history`]) and sorts it.
    pub fn read(reader: impl BufRead) -> Result<Self, HistoryError> {
        read_history(reader).map(Self::new)
    }

    /// The records, in time order.
    pub fn records(&self) -> &[Record] {
        &self.records
    }

    /// The records, in time order.
    pub fn into_records(self) -> Vec<Record> {
        self.records
    }

    /// Iterates over the records in time order.
    pub fn iter(&self) -> std::slice::Iter<'_, Record> {
        self.records.iter()
    }

    /// The number of records.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether there are no records.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The earliest `at_us`, if any record exists.
    pub fn start_us(&self) -> Option<u64> {
        self.records.first().map(Record::at_us)
    }

    /// The latest `at_us`, if any record exists.
    pub fn end_us(&self) -> Option<u64> {
        self.records.last().map(Record::at_us)
    }

    /// Adds a record at its place in time (after every record with the same
    /// or an earlier instant).
    pub fn push(&mut self, record: Record) {
        let at = record.at_us();
        let index = self.records.partition_point(|r| r.at_us() <= at);
        self.records.insert(index, record);
    }

    /// Writes the records, in time order, one per line.
    pub fn write_to<W: Write>(&self, writer: &mut HistoryWriter<W>) -> io::Result<()> {
        writer.write_all(&self.records)
    }
}

impl From<Vec<Record>> for History {
    fn from(records: Vec<Record>) -> Self {
        Self::new(records)
    }
}

impl FromIterator<Record> for History {
    fn from_iter<T: IntoIterator<Item = Record>>(iter: T) -> Self {
        Self::new(iter.into_iter().collect())
    }
}

impl<'a> IntoIterator for &'a History {
    type Item = &'a Record;
    type IntoIter = std::slice::Iter<'a, Record>;

    fn into_iter(self) -> Self::IntoIter {
        self.records.iter()
    }
}

impl IntoIterator for History {
    type Item = Record;
    type IntoIter = std::vec::IntoIter<Record>;

    fn into_iter(self) -> Self::IntoIter {
        self.records.into_iter()
    }
}

impl AsRef<[Record]> for History {
    fn as_ref(&self) -> &[Record] {
        &self.records
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OWN: &str = r#"{"worker":"w3","event":"own","i":2,"n":5,"token":58391,"at_us":1234567}"#;
    const RELEASE: &str = r#"{"worker":"w3","event":"release","i":2,"n":5,"at_us":1299999}"#;

    #[test]
    fn design_lines_round_trip_byte_for_byte() {
        let own = Record::from_line(OWN).unwrap();
        let release = Record::from_line(RELEASE).unwrap();
        assert_eq!(own, Record::own("w3", 2, 5, 58391, 1_234_567));
        assert_eq!(release, Record::release("w3", 2, 5, 1_299_999));
        assert_eq!(own.to_line(), OWN);
        assert_eq!(release.to_line(), RELEASE);

        let mut w = HistoryWriter::new(Vec::new());
        w.write(&own).unwrap();
        w.write(&release).unwrap();
        w.flush().unwrap();
        assert_eq!(w.written(), 2);
        let bytes = w.into_inner().unwrap();
        let text = format!("{OWN}\n{RELEASE}\n");
        assert_eq!(String::from_utf8(bytes).unwrap(), text);
        assert_eq!(read_history(text.as_bytes()).unwrap(), vec![own, release]);
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
    fn parse_errors_report_the_line_number() {
        let text = format!("{OWN}\n\n{RELEASE}\n{{\"worker\":\"w1\",\"event\":\"own\"}}\n");
        let err = read_history(text.as_bytes()).unwrap_err();
        assert_eq!(err.line(), 4);
        assert!(matches!(err, HistoryError::Parse { line: 4, .. }));
        assert!(err.to_string().starts_with("history line 4: "), "{err}");

        let err = read_history("not json\n".as_bytes()).unwrap_err();
        assert_eq!(err.line(), 1);
        let err = read_history(format!("{OWN}\n{{\"event\":\"bogus\",\"at_us\":1}}").as_bytes())
            .unwrap_err();
        assert_eq!(err.line(), 2);
    }

    #[test]
    fn io_errors_report_the_line_number() {
        // Invalid UTF-8 on line 2 fails inside `lines()`.
        let mut bytes = format!("{OWN}\n").into_bytes();
        bytes.extend_from_slice(&[0xff, 0xfe, b'\n']);
        let err = read_history(&bytes[..]).unwrap_err();
        assert!(matches!(err, HistoryError::Io { line: 2, .. }), "{err}");
    }

    #[test]
    fn history_sorts_by_time_stably() {
        let records = vec![
            Record::own("a", 0, 1, 10, 100),
            Record::own("b", 0, 1, 12, 300),
            Record::release("a", 0, 1, 200), // written late, ended earlier
            Record::release("b", 0, 1, 300), // same instant as b's own: stays after it
        ];
        let h = History::new(records.clone());
        let order: Vec<_> = h.iter().map(|r| (r.event(), r.at_us())).collect();
        assert_eq!(
            order,
            vec![
                ("own", 100),
                ("release", 200),
                ("own", 300),
                ("release", 300)
            ]
        );
        assert_eq!(
            (h.start_us(), h.end_us(), h.len()),
            (Some(100), Some(300), 4)
        );
        assert_eq!(History::from_iter(records.clone()), h);

        let mut pushed = History::default();
        for r in records {
            pushed.push(r);
        }
        assert_eq!(pushed, h);

        let mut w = HistoryWriter::new(Vec::new());
        h.write_to(&mut w).unwrap();
        let text = String::from_utf8(w.into_inner().unwrap()).unwrap();
        assert_eq!(History::read(text.as_bytes()).unwrap(), h);
        assert_eq!(text.lines().count(), 4);
    }
}
