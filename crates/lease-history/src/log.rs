//! Reading and writing histories: one JSON object per line.
//!
//! [`HistoryWriter`] writes [`Record`]s with their fixed field order;
//! [`read_history`] reads them back in file order, reporting the first bad
//! line by number. A [`History`] is the records in time order: `release`
//! lines carry the instant a lease really ended, which may be earlier than
//! lines written before them, so everything that reads a history as a
//! timeline sorts it by `at_us` first (stably, so lines with the same
//! instant keep their file order).

use std::io::{self, BufRead, Write};

use crate::record::Record;

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
