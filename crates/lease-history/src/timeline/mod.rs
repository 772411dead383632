//! A picture of a history: an SVG timeline with one row per slot.
//!
//! [`svg`] draws any history in the format of docs/history-format.md (a
//! simulator run, a chaos run against a real Redis, a demo): time runs left to right;
//! each slot index `0..max n` is a row, and every holding of a pair is a bar
//! in the row of its `i`, coloured by worker (a stable palette keyed by the
//! worker's name). Above the rows a band shows the group size `n` in force;
//! below them a strip shows when the group was fully covered. Faults, joins
//! and leaves are vertical marked lines with labels; a stand-down is a gap in
//! a row. Overlapping holdings that the [checker](crate::checker) reports as
//! violations are outlined in red. Every bar carries a tooltip (`<title>`)
//! with the worker, pair, fencing token and times.
//!
//! The holdings are reconstructed by the [`Checker`](crate::Checker), so
//! the picture shows exactly what the checker judged. `layout` decides
//! where everything goes; `draw` writes the SVG.
//!
//! ```
//! use lease_history::{Record, timeline};
//!
//! let records = vec![
//!     Record::join("w0", 0),
//!     Record::own("w0", 0, 1, 7, 2_000_000),
//!     Record::fault("restart", 5_000_000),
//!     Record::release("w0", 0, 1, 5_000_000),
//! ];
//! let picture = timeline::svg(&records, "one worker, one restart");
//! assert!(picture.starts_with("<svg"));
//! assert!(picture.contains("restart"));
//! std::fs::write(std::env::temp_dir().join("timeline-doc.svg"), picture).unwrap();
//! ```

mod draw;
mod layout;

use std::time::Duration;

use crate::record::Record;

/// How [`svg_with`] draws a timeline. [`TimelineOptions::default`] gives the
/// picture [`svg`] draws.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct TimelineOptions {
    /// Width of the whole picture in pixels (at least 400 is used).
    pub width: u32,
    /// Height of one slot row in pixels (at least 12 is used).
    pub row_height: u32,
    /// Where holdings still open at the end of the history end; the latest
    /// record if `None` or earlier (as for [`crate::check`]).
    pub end_us: Option<u64>,
    /// The interval length, if known: draws a faint line at every interval
    /// boundary (counted from the first record) when they are at least 4
    /// pixels apart.
    pub interval: Option<Duration>,
    /// Draw `join` and `leave` lines as marked vertical lines (faults are
    /// always drawn).
    pub joins_and_leaves: bool,
}

impl Default for TimelineOptions {
    fn default() -> Self {
        Self {
            width: 1200,
            row_height: 30,
            end_us: None,
            interval: None,
            joins_and_leaves: true,
        }
    }
}

impl TimelineOptions {
    /// Sets the width in pixels.
    pub fn with_width(mut self, width: u32) -> Self {
        self.width = width;
        self
    }

    /// Sets the height of one slot row in pixels.
    pub fn with_row_height(mut self, row_height: u32) -> Self {
        self.row_height = row_height;
        self
    }

    /// Sets the end of the history (see [`TimelineOptions::end_us`]).
    pub fn with_end_us(mut self, end_us: u64) -> Self {
        self.end_us = Some(end_us);
        self
    }

    /// Sets the interval length, for the interval grid.
    pub fn with_interval(mut self, interval: Duration) -> Self {
        self.interval = Some(interval);
        self
    }

    /// Sets whether joins and leaves are drawn.
    pub fn with_joins_and_leaves(mut self, draw: bool) -> Self {
        self.joins_and_leaves = draw;
        self
    }
}

/// The timeline of `records` (in any order) as a standalone SVG document,
/// with the default [`TimelineOptions`].
pub fn svg(records: &[Record], title: &str) -> String {
    svg_with(records, title, &TimelineOptions::default())
}

/// The fixed palette: distinguishable on white, and white text is readable on
/// every colour.
const PALETTE: [&str; 12] = [
    "#1f77b4", "#d95f02", "#2a9d3a", "#7b3fa0", "#b8860b", "#c2185b", "#00838f", "#6d4c41",
    "#5c6bc0", "#8e8e00", "#e0457b", "#455a64",
];

/// The colour of worker `name`: names ending in a number (`w3`, `pod-12`)
/// take the palette entry of that number, so the workers of a run get
/// distinct colours in the order they were numbered; other names take one
/// by hash. The same name always gets the same colour.
pub fn worker_colour(name: &str) -> &'static str {
    let index = match numeric_suffix(name) {
        Some(k) => k as usize,
        // FNV-1a.
        None => name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        }) as usize,
    };
    PALETTE[index % PALETTE.len()]
}

/// The number a name ends in (`w3`, `pod-12`), if it ends in 1 to 9 digits.
/// Also the legend's sort key, so that `w10` comes after `w9`.
fn numeric_suffix(name: &str) -> Option<u64> {
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    (1..=9)
        .contains(&digits)
        .then(|| name[name.len() - digits..].parse().ok())
        .flatten()
}

/// The timeline of `records` (in any order) as a standalone SVG document,
/// drawn as `options` say.
pub fn svg_with(records: &[Record], title: &str, options: &TimelineOptions) -> String {
    draw::svg(&layout::Layout::new(records, title, options))
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::draw::time_label;
    use super::layout::{VIOLATION, n_segments, tick_step};
    use crate::checker::Checker;
    use crate::record::LeaveHow;
    use std::collections::BTreeSet;

    /// Parses the document with a real XML parser; returns the names of the
    /// elements in document order.
    fn well_formed(doc: &str) -> Result<Vec<String>, String> {
        let tree = roxmltree::Document::parse(doc).map_err(|e| e.to_string())?;
        Ok(tree
            .descendants()
            .filter(|n| n.is_element())
            .map(|n| n.tag_name().name().to_owned())
            .collect())
    }

    /// The texts of every `<title>` (the bars' tooltips) and `<text>`.
    fn texts(doc: &str, element: &str) -> Vec<String> {
        let tree = roxmltree::Document::parse(doc).expect("well-formed");
        tree.descendants()
            .filter(|n| n.has_tag_name(element))
            .map(|n| n.text().unwrap_or_default().to_owned())
            .collect()
    }

    fn sample() -> Vec<Record> {
        vec![
            Record::join("w0", 0),
            Record::join("w1", 0),
            Record::own("w0", 0, 2, 10, 2_000_000),
            Record::own("w1", 1, 2, 10, 2_000_000),
            Record::join("w2", 5_000_000),
            Record::release("w0", 0, 2, 7_000_000),
            Record::release("w1", 1, 2, 7_000_000),
            Record::own("w0", 0, 3, 13, 8_000_000),
            Record::own("w1", 1, 3, 13, 8_000_000),
            Record::own("w2", 2, 3, 13, 8_000_000),
            Record::Fault {
                kind: "stall".into(),
                worker: Some("w2".into()),
                detail: Some("3000ms".into()),
                at_us: 12_000_000,
            },
            Record::release("w2", 2, 3, 13_000_000),
            Record::fault("restart", 16_000_000),
            Record::leave("w1", LeaveHow::Crash, 18_000_000),
            Record::release("w1", 1, 3, 18_000_000),
        ]
    }

    #[test]
    fn the_picture_is_well_formed_with_a_bar_per_holding() {
        let records = sample();
        let doc = svg(&records, "a <sample> & \"title\"");
        let elements = well_formed(&doc).unwrap_or_else(|e| panic!("{e}\n{doc}"));
        assert_eq!(elements[0], "svg");
        // Read back by the parser: the title unescaped, a tooltip per bar.
        let text = texts(&doc, "text");
        assert!(
            text.iter().any(|t| t == "a <sample> & \"title\""),
            "{text:?}"
        );
        let tips = texts(&doc, "title");
        assert_eq!(tips.len(), 5, "{tips:?}");
        assert!(
            tips[0].starts_with("w0 holds (0, 2), token 10, from 2.000 s"),
            "{tips:?}"
        );
        let holdings = Checker::new(&records, None).holdings().len();
        assert_eq!(holdings, 5);
        assert_eq!(doc.matches(r#"<rect class="hold""#).count(), holdings);
        // The title is escaped, faults and leaves are labelled.
        assert!(doc.contains("a &lt;sample&gt; &amp; &quot;title&quot;"));
        assert!(doc.contains(">stall w2 3000ms</text>"));
        assert!(doc.contains(">restart</text>"));
        assert!(doc.contains(">w1 crash</text>"));
        assert!(doc.contains(">join w0 w1</text>"));
        assert!(doc.contains(">n = 3</text>"));
        assert!(doc.contains("checker: ok"));
    }

    /// Task sets: a part-holding's band is shaded by its share of `T(i, n)`
    /// and says so; the header and the strip read task coverage.
    #[test]
    fn task_set_holdings_are_shaded_by_their_share() {
        use crate::record::{Mapping, Part};
        let c = Mapping::Consistent;
        let own = |w: &str, i, n, parts, at| Record::own_parts(w, i, n, 12, c, parts, at);
        let records = vec![
            own("w0", 0, 2, vec![Part::whole(0, 2, 10)], 0),
            own("w1", 1, 2, vec![Part::whole(1, 2, 10)], 0),
            // w2 joins: n = 3; w0 and w1 keep T(i, 3), all of it under jump.
            own(
                "w0",
                0,
                3,
                vec![Part::intersection(0, 3, 0, 2, 12)],
                1_000_000,
            ),
            own(
                "w1",
                1,
                3,
                vec![Part::intersection(1, 3, 1, 2, 12)],
                1_000_000,
            ),
            // w2 holds T(2, 3) ∩ T(2, 3) only after w0 and w1 let go; here a
            // part of it: what it shares with T(0, 2).
            own(
                "w2",
                2,
                3,
                vec![Part::intersection(2, 3, 0, 2, 12)],
                2_000_000,
            ),
            Record::release("w0", 0, 3, 3_000_000),
            Record::release("w1", 1, 3, 3_000_000),
            Record::release("w2", 2, 3, 3_000_000),
        ];
        let doc = svg(&records, "tasks");
        well_formed(&doc).unwrap_or_else(|e| panic!("{e}\n{doc}"));
        let tips = texts(&doc, "title");
        let w2 = tips
            .iter()
            .find(|t| t.starts_with("w2 holds"))
            .expect("w2's band");
        let part = crate::tasks::TaskSet::part(c, &Part::intersection(2, 3, 0, 2, 0));
        let pair = crate::tasks::TaskSet::pair(c, 2, 3);
        let pct = format!(
            "{:.0} %",
            100.0 * f64::from(part.len()) / f64::from(pair.len())
        );
        assert!(
            w2.contains(&format!(
                "{} tasks, {pct} of T(2, 3): T(2, 3) ∩ T(0, 2) token 12",
                part.len()
            )),
            "{w2}"
        );
        assert!(doc.contains(&format!("w2 · (2, 3) · {pct}")), "{doc}");
        assert!(doc.contains(r#"fill-opacity="1.00""#));
        assert!(!part.is_empty() && part.len() < pair.len());
        assert!(doc.contains("· task coverage "), "{doc}");
    }

    #[test]
    fn hostile_names_are_escaped() {
        let records = vec![
            Record::own("<w&0>", 0, 1, 1, 0),
            Record::Fault {
                kind: "a\"b".into(),
                worker: Some("'x'".into()),
                detail: Some("<&>".into()),
                at_us: 5,
            },
            Record::release("<w&0>", 0, 1, 10),
        ];
        let doc = svg(&records, "t");
        well_formed(&doc).unwrap_or_else(|e| panic!("{e}\n{doc}"));
        let text = texts(&doc, "text");
        assert!(text.iter().any(|t| t == "a\"b 'x' <&>"), "{text:?}");
        assert!(texts(&doc, "title")[0].starts_with("<w&0> holds (0, 1)"));
    }

    #[test]
    fn empty_and_degenerate_histories_still_draw() {
        for records in [vec![], vec![Record::join("w0", 5)]] {
            let doc = svg(&records, "empty");
            well_formed(&doc).unwrap_or_else(|e| panic!("{e}\n{doc}"));
            assert_eq!(doc.matches(r#"class="hold""#).count(), 0);
        }
    }

    #[test]
    fn violations_are_outlined_and_the_verdict_says_so() {
        let records = vec![
            Record::own("w0", 0, 1, 1, 0),
            Record::own("w1", 0, 1, 2, 5),
            Record::release("w0", 0, 1, 10),
            Record::release("w1", 0, 1, 20),
        ];
        let doc = svg(&records, "overlap");
        well_formed(&doc).unwrap_or_else(|e| panic!("{e}\n{doc}"));
        assert!(doc.contains("checker: VIOLATION"));
        assert!(doc.contains(&format!(r#"stroke="{VIOLATION}" stroke-width="2.5""#)));
    }

    #[test]
    fn colours_are_stable_by_name() {
        assert_eq!(worker_colour("w3"), worker_colour("w3"));
        assert_eq!(worker_colour("w3"), PALETTE[3]);
        assert_ne!(worker_colour("w1"), worker_colour("w2"));
        assert_eq!(worker_colour("pod-a"), worker_colour("pod-a"));
        let distinct: BTreeSet<_> = (0..12).map(|i| worker_colour(&format!("w{i}"))).collect();
        assert_eq!(distinct.len(), 12);
    }

    #[test]
    fn n_segments_merge_and_flag_mixed_sizes() {
        let c = Checker::new(&sample(), None);
        let segs = n_segments(c.holdings());
        assert_eq!(
            segs,
            vec![
                (2_000_000, 7_000_000, Some(2)),
                (8_000_000, 18_000_000, Some(3))
            ]
        );
        let mixed = vec![
            Record::own("a", 0, 2, 1, 0),
            Record::own("b", 0, 3, 1, 5),
            Record::release("a", 0, 2, 10),
            Record::release("b", 0, 3, 20),
        ];
        let c = Checker::new(&mixed, None);
        assert_eq!(
            n_segments(c.holdings()),
            vec![(0, 5, Some(2)), (5, 10, None), (10, 20, Some(3))]
        );
    }

    #[test]
    fn tick_steps_are_round() {
        assert_eq!(tick_step(37_000_000, 12), 5_000_000);
        assert_eq!(tick_step(1_000_000, 10), 100_000);
        assert_eq!(tick_step(10, 12), 1);
        assert_eq!(time_label(3_000_000, 1_000_000), "3 s");
        assert_eq!(time_label(1_500_000, 500_000), "1.5 s");
    }
}
