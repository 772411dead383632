//! A picture of a history: an SVG timeline with one row per slot.
//!
//! [`svg`] draws any history in the format of DESIGN section 6 (a simulator
//! run, a chaos run against a real Redis, a demo): time runs left to right;
//! each slot index `0..max n` is a row, and every holding of a pair is a bar
//! in the row of its `i`, coloured by worker (a stable palette keyed by the
//! worker's name). Above the rows a band shows the group size `n` in force;
//! below them a strip shows when the group was fully covered. Faults, joins
//! and leaves are vertical marked lines with labels; a stand-down is a gap in
//! a row. Overlapping holdings that the [checker](crate::checker) reports as
//! violations are outlined in red. Every bar carries a tooltip (`<title>`)
//! with the worker, pair, fencing token and times.
//!
//! The holdings are reconstructed by [`Checker`], so the picture shows
//! exactly what the checker judged.
//!
//! ```
//! use lease_sim::history::Record;
//! use lease_sim::timeline;
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

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::time::Duration;

use crate::checker::{Checker, Holding};
use crate::history::{LeaveHow, Record};

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
    /// record if `None` or earlier (as for [`crate::checker::check`]).
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
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let index = if digits > 0 && digits <= 9 {
        name[name.len() - digits..].parse::<usize>().unwrap_or(0)
    } else {
        // FNV-1a.
        name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        }) as usize
    };
    PALETTE[index % PALETTE.len()]
}

const FONT: &str = "DejaVu Sans, Verdana, Helvetica, Arial, sans-serif";
const LEFT: f64 = 78.0;
const RIGHT: f64 = 24.0;
const LANE: f64 = 15.0;
/// Width of one character of 11 px text, roughly, for fitting labels.
const CHAR_W: f64 = 6.4;

/// What a vertical marker line stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum MarkKind {
    Fault,
    Crash,
    Cancel,
    Join,
}

impl MarkKind {
    fn colour(self) -> &'static str {
        match self {
            MarkKind::Fault => "#d62728",
            MarkKind::Crash => "#111111",
            MarkKind::Cancel => "#777777",
            MarkKind::Join => "#2a9d3a",
        }
    }

    fn dash(self) -> &'static str {
        match self {
            MarkKind::Fault => "6 3",
            MarkKind::Crash => "none",
            MarkKind::Cancel => "4 3",
            MarkKind::Join => "2 3",
        }
    }

    fn legend(self) -> &'static str {
        match self {
            MarkKind::Fault => "fault",
            MarkKind::Crash => "crash",
            MarkKind::Cancel => "cancel",
            MarkKind::Join => "join",
        }
    }
}

/// One marker line, possibly standing for several records at one instant.
struct Mark {
    kind: MarkKind,
    at_us: u64,
    label: String,
}

/// Collects the marker lines: faults always, joins and leaves if asked.
/// Joins at one instant share a line (`join w0 w1 w2`).
fn marks(records: &[Record], joins_and_leaves: bool) -> Vec<Mark> {
    let mut out: Vec<Mark> = Vec::new();
    let mut joins: BTreeMap<u64, Vec<&str>> = BTreeMap::new();
    for r in records {
        match r {
            Record::Fault {
                kind,
                worker,
                detail,
                at_us,
            } => {
                let mut label = kind.clone();
                if let Some(w) = worker {
                    let _ = write!(label, " {w}");
                }
                if let Some(d) = detail {
                    let _ = write!(label, " {d}");
                }
                out.push(Mark {
                    kind: MarkKind::Fault,
                    at_us: *at_us,
                    label,
                });
            }
            Record::Join { worker, at_us } if joins_and_leaves => {
                joins.entry(*at_us).or_default().push(worker);
            }
            Record::Leave { worker, how, at_us } if joins_and_leaves => {
                let kind = match how {
                    LeaveHow::Crash => MarkKind::Crash,
                    LeaveHow::Cancel => MarkKind::Cancel,
                };
                out.push(Mark {
                    kind,
                    at_us: *at_us,
                    label: format!("{worker} {how}"),
                });
            }
            _ => {}
        }
    }
    for (at_us, workers) in joins {
        out.push(Mark {
            kind: MarkKind::Join,
            at_us,
            label: format!("join {}", workers.join(" ")),
        });
    }
    out.sort_by_key(|m| (m.at_us, m.kind));
    out
}

/// Merges marks of one kind that would be drawn less than 10 pixels after
/// the first of their group (a burst of joins at the start) into one line
/// whose label lists them all: `join w0 w1 w2`.
fn merge_close(marks: Vec<Mark>, x: impl Fn(u64) -> f64) -> Vec<Mark> {
    let mut out: Vec<Mark> = Vec::with_capacity(marks.len());
    for m in marks {
        let close = out
            .iter_mut()
            .rev()
            .take_while(|o| x(m.at_us) - x(o.at_us) < 10.0)
            .find(|o| o.kind == m.kind);
        match close {
            Some(o) if m.kind == MarkKind::Join => {
                let workers = m.label.trim_start_matches("join");
                o.label.push_str(workers);
            }
            Some(o) => {
                o.label.push_str(", ");
                o.label.push_str(&m.label);
            }
            None => out.push(m),
        }
    }
    out
}

/// Segments `[from, to)` of the group size in force: `Some(n)` when every
/// holding then has that `n`, `None` when two sizes are held at once. Gaps
/// where nothing is held are left out.
fn n_segments(holdings: &[Holding]) -> Vec<(u64, u64, Option<u32>)> {
    let mut edges: BTreeMap<u64, Vec<(u32, i32)>> = BTreeMap::new();
    for h in holdings.iter().filter(|h| h.end_us > h.start_us) {
        edges.entry(h.start_us).or_default().push((h.n, 1));
        edges.entry(h.end_us).or_default().push((h.n, -1));
    }
    let mut live: BTreeMap<u32, i32> = BTreeMap::new();
    let mut out: Vec<(u64, u64, Option<u32>)> = Vec::new();
    let mut prev: Option<u64> = None;
    for (&t, changes) in &edges {
        if let Some(p) = prev {
            let sizes: Vec<u32> = live
                .iter()
                .filter(|(_, c)| **c > 0)
                .map(|(n, _)| *n)
                .collect();
            if !sizes.is_empty() {
                let value = if sizes.len() == 1 {
                    Some(sizes[0])
                } else {
                    None
                };
                match out.last_mut() {
                    Some(last) if last.1 == p && last.2 == value => last.1 = t,
                    _ => out.push((p, t, value)),
                }
            }
        }
        for &(n, d) in changes {
            *live.entry(n).or_insert(0) += d;
        }
        prev = Some(t);
    }
    out
}

/// A "nice" tick step (1, 2 or 5 times a power of ten) in microseconds for
/// a span, aiming at about `target` ticks.
fn tick_step(span_us: u64, target: u64) -> u64 {
    let raw = (span_us / target.max(1)).max(1);
    let mut pow = 1u64;
    while pow.saturating_mul(10) <= raw {
        pow *= 10;
    }
    for m in [1, 2, 5, 10] {
        if pow.saturating_mul(m) >= raw {
            return pow.saturating_mul(m);
        }
    }
    pow.saturating_mul(10)
}

/// A time offset as an axis label: seconds, or milliseconds for short runs.
fn time_label(us: u64, step: u64) -> String {
    if step >= 1_000_000 {
        format!("{} s", us / 1_000_000)
    } else if step >= 100_000 {
        format!("{:.1} s", us as f64 / 1e6)
    } else if step >= 1_000 {
        format!("{} ms", us / 1_000)
    } else {
        format!("{us} µs")
    }
}

/// Escapes text for XML content and attribute values.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

fn secs(us: u64) -> String {
    format!("{:.3} s", us as f64 / 1e6)
}

/// The timeline of `records` (in any order) as a standalone SVG document,
/// drawn as `options` say.
pub fn svg_with(records: &[Record], title: &str, options: &TimelineOptions) -> String {
    let checker = Checker::new(records, options.end_us);
    let holdings = checker.holdings();
    let start = checker.start_us();
    let end = checker.end_us().max(start + 1);
    let span = end - start;

    let width = f64::from(options.width.max(400));
    let row_h = f64::from(options.row_height.max(12));
    let plot_w = width - LEFT - RIGHT;
    let x = |t: u64| LEFT + (t.clamp(start, end) - start) as f64 / span as f64 * plot_w;

    let rows = holdings.iter().map(|h| h.n.max(h.i + 1)).max().unwrap_or(1);

    // Marker labels go into lanes above the chart, each label in the first
    // lane where it does not run into the previous one.
    let marks = merge_close(marks(records, options.joins_and_leaves), x);
    let mut lane_ends: Vec<f64> = Vec::new();
    let mut mark_lanes = Vec::with_capacity(marks.len());
    for m in &marks {
        let x0 = x(m.at_us) + 3.0;
        let w = m.label.chars().count() as f64 * CHAR_W * 0.95;
        let x0 = x0.min(width - 4.0 - w).max(2.0);
        let lane = match lane_ends.iter().position(|&e| e + 6.0 <= x0) {
            Some(l) => l,
            None => {
                lane_ends.push(0.0);
                lane_ends.len() - 1
            }
        };
        lane_ends[lane] = x0 + w;
        mark_lanes.push((lane, x0));
    }

    let summary = checker.summary();
    let title_y = 24.0;
    let sub_y = 42.0;
    let lanes_top = 56.0;
    let band_top = lanes_top + lane_ends.len() as f64 * LANE + 6.0;
    let band_h = 20.0;
    let rows_top = band_top + band_h + 6.0;
    let rows_bottom = rows_top + f64::from(rows) * row_h;
    let cover_top = rows_bottom + 6.0;
    let cover_h = 10.0;
    let axis_y = cover_top + cover_h + 4.0;
    let legend_top = axis_y + 52.0;

    // The legend: workers in name order, then marker kinds and strips.
    let workers: BTreeSet<(u64, &str)> = records
        .iter()
        .filter_map(Record::worker)
        .map(|w| (name_order(w), w))
        .collect();
    let mut legend: Vec<(String, LegendSwatch)> = workers
        .iter()
        .map(|(_, w)| ((*w).to_owned(), LegendSwatch::Box(worker_colour(w))))
        .collect();
    let kinds: BTreeSet<MarkKind> = marks.iter().map(|m| m.kind).collect();
    for k in kinds {
        legend.push((k.legend().to_owned(), LegendSwatch::Line(k)));
    }
    legend.push(("fully covered".into(), LegendSwatch::Box(COVERED)));
    legend.push(("not covered".into(), LegendSwatch::Box(UNCOVERED)));
    if summary.violation_count > 0 {
        legend.push(("violation".into(), LegendSwatch::Outline(VIOLATION)));
    }
    let mut legend_pos = Vec::with_capacity(legend.len());
    let (mut lx, mut ly) = (LEFT, legend_top);
    for (label, _) in &legend {
        let w = 22.0 + label.chars().count() as f64 * CHAR_W + 16.0;
        if lx + w > width - RIGHT && lx > LEFT {
            lx = LEFT;
            ly += 18.0;
        }
        legend_pos.push((lx, ly));
        lx += w;
    }
    let height = ly + 20.0;

    let mut s = String::with_capacity(4096 + holdings.len() * 256);
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="{FONT}" font-size="11">"#
    );
    s.push('\n');
    let _ = writeln!(
        s,
        r##"<rect x="0" y="0" width="{width:.0}" height="{height:.0}" fill="#ffffff"/>"##
    );
    let _ = writeln!(
        s,
        r##"<text x="{LEFT}" y="{title_y}" font-size="16" font-weight="bold" fill="#222">{}</text>"##,
        esc(title)
    );
    let verdict = if summary.is_ok() {
        "checker: ok".to_owned()
    } else {
        format!(
            "checker: VIOLATION ({} overlaps, {} fencing, {} anomalies)",
            summary.violation_count, summary.fencing_count, summary.anomaly_count
        )
    };
    let _ = writeln!(
        s,
        r##"<text x="{LEFT}" y="{sub_y}" fill="{}">{} · fully covered {:.1} % of {} · {} grants, {} releases, {} faults</text>"##,
        if summary.is_ok() { "#444" } else { VIOLATION },
        esc(&verdict),
        summary.coverage.fraction() * 100.0,
        esc(&secs(span)),
        summary.owns,
        summary.releases,
        summary.faults,
    );

    // Interval grid and axis ticks.
    let step = tick_step(span, 12);
    if let Some(l) = options.interval {
        let l = l.as_micros() as u64;
        if l > 0 && (l as f64 / span as f64 * plot_w) >= 4.0 {
            let mut t = start;
            while t <= end {
                let _ = writeln!(
                    s,
                    r##"<line x1="{x:.1}" y1="{band_top:.1}" x2="{x:.1}" y2="{rows_bottom:.1}" stroke="#eeeeee" stroke-width="1"/>"##,
                    x = x(t)
                );
                t += l;
            }
        }
    }
    // Rows: alternating backgrounds and labels.
    for i in 0..rows {
        let y = rows_top + f64::from(i) * row_h;
        let fill = if i % 2 == 0 { "#f7f7f7" } else { "#ffffff" };
        let _ = writeln!(
            s,
            r##"<rect x="{LEFT}" y="{y:.1}" width="{plot_w:.1}" height="{row_h:.1}" fill="{fill}"/>"##
        );
        let label = if i == 0 {
            "slot 0 ★".to_owned()
        } else {
            format!("slot {i}")
        };
        let _ = writeln!(
            s,
            r##"<text x="{lx:.1}" y="{ty:.1}" text-anchor="end" fill="#333">{label}</text>"##,
            lx = LEFT - 8.0,
            ty = y + row_h / 2.0 + 4.0,
        );
    }
    let mut t = start;
    while t <= end {
        let xt = x(t);
        let _ = writeln!(
            s,
            r##"<line x1="{xt:.1}" y1="{rows_top:.1}" x2="{xt:.1}" y2="{rows_bottom:.1}" stroke="#dddddd" stroke-width="1"/>"##
        );
        let _ = writeln!(
            s,
            r##"<line x1="{xt:.1}" y1="{axis_y:.1}" x2="{xt:.1}" y2="{y2:.1}" stroke="#666"/><text x="{xt:.1}" y="{ly:.1}" text-anchor="middle" fill="#444">{}</text>"##,
            time_label(t - start, step),
            y2 = axis_y + 5.0,
            ly = axis_y + 17.0,
        );
        t += step;
    }
    let _ = writeln!(
        s,
        r##"<line x1="{LEFT}" y1="{axis_y:.1}" x2="{xe:.1}" y2="{axis_y:.1}" stroke="#666"/>"##,
        xe = LEFT + plot_w
    );
    let _ = writeln!(
        s,
        r##"<text x="{xe:.1}" y="{ly:.1}" text-anchor="end" fill="#666">time since the first record</text>"##,
        xe = LEFT + plot_w,
        ly = axis_y + 30.0,
    );

    // The n band.
    let _ = writeln!(
        s,
        r##"<text x="{lx:.1}" y="{ty:.1}" text-anchor="end" fill="#333">n</text>"##,
        lx = LEFT - 8.0,
        ty = band_top + band_h / 2.0 + 4.0,
    );
    for (a, b, n) in n_segments(holdings) {
        let (xa, xb) = (x(a), x(b));
        let (fill, text) = match n {
            Some(n) => ("#e3e8ef", format!("n = {n}")),
            None => ("#f8c9c9", "mixed n".to_owned()),
        };
        let _ = write!(
            s,
            r##"<rect x="{xa:.1}" y="{band_top:.1}" width="{w:.1}" height="{band_h:.1}" fill="{fill}" stroke="#ffffff" stroke-width="1"/>"##,
            w = (xb - xa).max(0.5)
        );
        if xb - xa > text.len() as f64 * CHAR_W + 6.0 {
            let _ = write!(
                s,
                r##"<text x="{cx:.1}" y="{ty:.1}" text-anchor="middle" fill="#333">{text}</text>"##,
                cx = (xa + xb) / 2.0,
                ty = band_top + band_h / 2.0 + 4.0,
            );
        }
        s.push('\n');
    }

    // The holdings.
    for h in holdings {
        let (xa, xb) = (x(h.start_us), x(h.end_us));
        let y = rows_top + f64::from(h.i) * row_h + 3.0;
        let w = (xb - xa).max(1.0);
        let _ = write!(
            s,
            r##"<rect class="hold" x="{xa:.1}" y="{y:.1}" width="{w:.1}" height="{bh:.1}" rx="3" fill="{c}"><title>{tip}</title></rect>"##,
            bh = row_h - 6.0,
            c = worker_colour(&h.worker),
            tip = esc(&format!(
                "{} holds ({}, {}), token {}, from {} to {} ({})",
                h.worker,
                h.i,
                h.n,
                h.token,
                secs(h.start_us - start),
                secs(h.end_us - start),
                match h.end {
                    crate::checker::HoldingEnd::Released => "released",
                    crate::checker::HoldingEnd::Left => "left",
                    crate::checker::HoldingEnd::Replaced => "replaced without release",
                    crate::checker::HoldingEnd::EndOfHistory => "still held at the end",
                }
            )),
        );
        let label = h.worker.as_str();
        let full = format!("{label} · ({}, {})", h.i, h.n);
        let text = if w > full.chars().count() as f64 * CHAR_W + 8.0 {
            Some(full)
        } else if w > label.chars().count() as f64 * CHAR_W + 6.0 {
            Some(label.to_owned())
        } else {
            None
        };
        if let Some(text) = text {
            let _ = write!(
                s,
                r##"<text x="{tx:.1}" y="{ty:.1}" fill="#ffffff" font-weight="bold" pointer-events="none">{}</text>"##,
                esc(&text),
                tx = xa + 4.0,
                ty = y + (row_h - 6.0) / 2.0 + 4.0,
            );
        }
        s.push('\n');
    }
    // Violations: the overlap, outlined in the row of the later holding.
    for v in checker.violations() {
        let (xa, xb) = (x(v.start_us), x(v.start_us + v.overlap_us));
        let y = rows_top + f64::from(v.second.i) * row_h + 1.0;
        let _ = writeln!(
            s,
            r##"<rect x="{xa:.1}" y="{y:.1}" width="{w:.1}" height="{hh:.1}" fill="none" stroke="{VIOLATION}" stroke-width="2.5"><title>{}</title></rect>"##,
            esc(&v.to_string()),
            w = (xb - xa).max(3.0),
            hh = row_h - 2.0,
        );
    }

    // The coverage strip.
    let _ = writeln!(
        s,
        r##"<rect x="{LEFT}" y="{cover_top:.1}" width="{plot_w:.1}" height="{cover_h:.1}" fill="{UNCOVERED}"/>"##
    );
    for &(a, b) in checker.covered_spans() {
        let (xa, xb) = (x(a), x(b));
        let _ = writeln!(
            s,
            r##"<rect x="{xa:.1}" y="{cover_top:.1}" width="{w:.1}" height="{cover_h:.1}" fill="{COVERED}"/>"##,
            w = (xb - xa).max(0.5)
        );
    }
    let _ = writeln!(
        s,
        r##"<text x="{lx:.1}" y="{ty:.1}" text-anchor="end" fill="#333" font-size="10">covered</text>"##,
        lx = LEFT - 8.0,
        ty = cover_top + cover_h - 1.0,
    );

    // Marker lines and their labels.
    for (m, &(lane, lx)) in marks.iter().zip(&mark_lanes) {
        let xm = x(m.at_us);
        let ly = lanes_top + lane as f64 * LANE + 10.0;
        let _ = writeln!(
            s,
            r##"<line x1="{xm:.1}" y1="{y1:.1}" x2="{xm:.1}" y2="{y2:.1}" stroke="{c}" stroke-width="1.5" stroke-dasharray="{d}"/><text x="{lx:.1}" y="{ly:.1}" fill="{c}" font-size="10.5">{}</text>"##,
            esc(&m.label),
            y1 = ly + 3.0,
            y2 = cover_top + cover_h,
            c = m.kind.colour(),
            d = m.kind.dash(),
        );
    }

    // The legend.
    for ((label, swatch), &(lx, ly)) in legend.iter().zip(&legend_pos) {
        match swatch {
            LegendSwatch::Box(c) => {
                let _ = write!(
                    s,
                    r##"<rect x="{lx:.1}" y="{y:.1}" width="16" height="11" rx="2" fill="{c}"/>"##,
                    y = ly - 9.0
                );
            }
            LegendSwatch::Outline(c) => {
                let _ = write!(
                    s,
                    r##"<rect x="{lx:.1}" y="{y:.1}" width="16" height="11" fill="none" stroke="{c}" stroke-width="2"/>"##,
                    y = ly - 9.0
                );
            }
            LegendSwatch::Line(k) => {
                let _ = write!(
                    s,
                    r##"<line x1="{x1:.1}" y1="{y1:.1}" x2="{x1:.1}" y2="{y2:.1}" stroke="{c}" stroke-width="1.5" stroke-dasharray="{d}"/>"##,
                    x1 = lx + 8.0,
                    y1 = ly - 11.0,
                    y2 = ly + 3.0,
                    c = k.colour(),
                    d = k.dash(),
                );
            }
        }
        let _ = writeln!(
            s,
            r##"<text x="{tx:.1}" y="{ly:.1}" fill="#333">{}</text>"##,
            esc(label),
            tx = lx + 22.0,
        );
    }
    s.push_str("</svg>\n");
    s
}

const COVERED: &str = "#7cc47f";
const UNCOVERED: &str = "#f2b8b5";
const VIOLATION: &str = "#e00000";

enum LegendSwatch {
    Box(&'static str),
    Outline(&'static str),
    Line(MarkKind),
}

/// Sort key for worker names: by numeric suffix when there is one, so `w10`
/// comes after `w9`.
fn name_order(name: &str) -> u64 {
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    if digits > 0 && digits <= 9 {
        name[name.len() - digits..].parse().unwrap_or(u64::MAX)
    } else {
        u64::MAX
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small well-formedness check: tags balance, attributes are quoted,
    /// text holds no raw `<` and only known entities. Returns the names of
    /// the elements in document order.
    fn well_formed(doc: &str) -> Result<Vec<String>, String> {
        let mut stack: Vec<String> = Vec::new();
        let mut elements = Vec::new();
        let mut rest = doc.trim();
        let mut roots = 0;
        while !rest.is_empty() {
            if let Some(after) = rest.strip_prefix('<') {
                let end = tag_end(after).ok_or("unterminated tag")?;
                let tag = &after[..end];
                rest = &after[end + 1..];
                if let Some(name) = tag.strip_prefix('/') {
                    let open = stack.pop().ok_or(format!("stray </{name}>"))?;
                    if open != name.trim() {
                        return Err(format!("<{open}> closed by </{name}>"));
                    }
                    continue;
                }
                let self_closing = tag.ends_with('/');
                let body = tag.trim_end_matches('/');
                let name: String = body.chars().take_while(|c| !c.is_whitespace()).collect();
                if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric()) {
                    return Err(format!("bad element name in <{tag}>"));
                }
                check_attributes(&body[name.len()..])?;
                if stack.is_empty() {
                    roots += 1;
                }
                elements.push(name.clone());
                if !self_closing {
                    stack.push(name);
                }
            } else {
                let end = rest.find('<').unwrap_or(rest.len());
                check_text(&rest[..end])?;
                if stack.is_empty() && !rest[..end].trim().is_empty() {
                    return Err("text outside the root".into());
                }
                rest = &rest[end..];
            }
        }
        if !stack.is_empty() {
            return Err(format!("unclosed {stack:?}"));
        }
        if roots != 1 {
            return Err(format!("{roots} root elements"));
        }
        Ok(elements)
    }

    /// The index of the `>` ending a tag, skipping quoted values.
    fn tag_end(s: &str) -> Option<usize> {
        let mut quote = None;
        for (i, c) in s.char_indices() {
            match (quote, c) {
                (None, '"' | '\'') => quote = Some(c),
                (Some(q), c) if c == q => quote = None,
                (None, '>') => return Some(i),
                (None, '<') => return None,
                _ => {}
            }
        }
        None
    }

    fn check_attributes(mut s: &str) -> Result<(), String> {
        loop {
            s = s.trim_start();
            if s.is_empty() {
                return Ok(());
            }
            let eq = s.find('=').ok_or(format!("attribute without value: {s}"))?;
            let name = &s[..eq];
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == ':')
            {
                return Err(format!("bad attribute name {name:?}"));
            }
            let value = &s[eq + 1..];
            let q = value.chars().next().ok_or("missing value")?;
            if q != '"' && q != '\'' {
                return Err(format!("unquoted value for {name}"));
            }
            let close = value[1..].find(q).ok_or("unterminated value")?;
            check_text(&value[1..1 + close])?;
            if value[1..1 + close].contains('<') {
                return Err("< in attribute".into());
            }
            s = &value[close + 2..];
        }
    }

    fn check_text(s: &str) -> Result<(), String> {
        let mut rest = s;
        while let Some(at) = rest.find('&') {
            let entity = &rest[at..];
            let ok = ["&amp;", "&lt;", "&gt;", "&quot;", "&#39;", "&apos;"]
                .iter()
                .any(|e| entity.starts_with(e));
            if !ok {
                return Err(format!("bad entity at {entity:.10}"));
            }
            rest = &rest[at + 1..];
        }
        if s.contains('>') && s.contains("<") {
            return Err("markup in text".into());
        }
        Ok(())
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
