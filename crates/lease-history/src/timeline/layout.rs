//! Where everything of a timeline goes: the time scale, the bands from top
//! to bottom, the marker lines and their label lanes, the legend. Nothing
//! here writes SVG; [`super::draw`] does, from a [`Layout`].

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use super::{TimelineOptions, numeric_suffix, worker_colour};
use crate::checker::{Checker, Holding, Summary};
use crate::record::{LeaveHow, Record};

pub(super) const LEFT: f64 = 78.0;
pub(super) const RIGHT: f64 = 24.0;
const LANE: f64 = 15.0;
/// Width of one character of 11 px text, roughly, for fitting labels.
pub(super) const CHAR_W: f64 = 6.4;

pub(super) const COVERED: &str = "#7cc47f";
pub(super) const UNCOVERED: &str = "#f2b8b5";
pub(super) const VIOLATION: &str = "#e00000";

/// What a vertical marker line stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum MarkKind {
    Fault,
    Crash,
    Cancel,
    Join,
}

impl MarkKind {
    pub(super) fn colour(self) -> &'static str {
        match self {
            MarkKind::Fault => "#d62728",
            MarkKind::Crash => "#111111",
            MarkKind::Cancel => "#777777",
            MarkKind::Join => "#2a9d3a",
        }
    }

    pub(super) fn dash(self) -> &'static str {
        match self {
            MarkKind::Fault => "6 3",
            MarkKind::Crash => "none",
            MarkKind::Cancel => "4 3",
            MarkKind::Join => "2 3",
        }
    }

    pub(super) fn legend(self) -> &'static str {
        match self {
            MarkKind::Fault => "fault",
            MarkKind::Crash => "crash",
            MarkKind::Cancel => "cancel",
            MarkKind::Join => "join",
        }
    }
}

/// One marker line, possibly standing for several records at one instant.
pub(super) struct Mark {
    pub(super) kind: MarkKind,
    pub(super) at_us: u64,
    pub(super) label: String,
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
pub(super) fn n_segments(holdings: &[Holding]) -> Vec<(u64, u64, Option<u32>)> {
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
pub(super) fn tick_step(span_us: u64, target: u64) -> u64 {
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

/// Maps instants to x positions: `[start, end]` onto the plot's width.
#[derive(Clone, Copy, Debug)]
pub(super) struct Scale {
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) span: u64,
    pub(super) plot_w: f64,
}

impl Scale {
    /// The x position of instant `t` (clamped to the run).
    pub(super) fn x(&self, t: u64) -> f64 {
        LEFT + (t.clamp(self.start, self.end) - self.start) as f64 / self.span as f64 * self.plot_w
    }
}

/// The y positions of the bands, top to bottom.
#[derive(Clone, Copy, Debug)]
pub(super) struct Bands {
    pub(super) title_y: f64,
    pub(super) sub_y: f64,
    pub(super) lanes_top: f64,
    pub(super) lane_h: f64,
    pub(super) band_top: f64,
    pub(super) band_h: f64,
    pub(super) rows_top: f64,
    pub(super) row_h: f64,
    pub(super) rows_bottom: f64,
    pub(super) cover_top: f64,
    pub(super) cover_h: f64,
    pub(super) axis_y: f64,
}

impl Bands {
    fn new(lanes: usize, rows: u32, row_h: f64) -> Self {
        let lanes_top = 56.0;
        let band_top = lanes_top + lanes as f64 * LANE + 6.0;
        let band_h = 20.0;
        let rows_top = band_top + band_h + 6.0;
        let rows_bottom = rows_top + f64::from(rows) * row_h;
        let cover_top = rows_bottom + 6.0;
        let cover_h = 10.0;
        Self {
            title_y: 24.0,
            sub_y: 42.0,
            lanes_top,
            lane_h: LANE,
            band_top,
            band_h,
            rows_top,
            row_h,
            rows_bottom,
            cover_top,
            cover_h,
            axis_y: cover_top + cover_h + 4.0,
        }
    }

    /// The top of slot row `i`.
    pub(super) fn row_y(&self, i: u32) -> f64 {
        self.rows_top + f64::from(i) * self.row_h
    }
}

/// A marker line with the lane and x of its label.
pub(super) struct PlacedMark {
    pub(super) mark: Mark,
    pub(super) lane: usize,
    pub(super) label_x: f64,
}

/// What a legend entry shows beside its label.
pub(super) enum LegendSwatch {
    Box(&'static str),
    Outline(&'static str),
    Line(MarkKind),
}

/// One legend entry and where it goes.
pub(super) struct LegendEntry {
    pub(super) label: String,
    pub(super) swatch: LegendSwatch,
    pub(super) x: f64,
    pub(super) y: f64,
}

/// Everything [`super::draw`] needs.
pub(super) struct Layout<'a> {
    pub(super) checker: Checker,
    pub(super) summary: Summary,
    pub(super) title: &'a str,
    pub(super) interval_us: Option<u64>,
    pub(super) width: f64,
    pub(super) height: f64,
    pub(super) rows: u32,
    pub(super) scale: Scale,
    pub(super) bands: Bands,
    pub(super) marks: Vec<PlacedMark>,
    pub(super) legend: Vec<LegendEntry>,
}

impl<'a> Layout<'a> {
    /// Lays out the timeline of `records` (in any order).
    pub(super) fn new(records: &[Record], title: &'a str, options: &TimelineOptions) -> Self {
        let checker = Checker::new(records, options.end_us);
        let start = checker.start_us();
        let end = checker.end_us().max(start + 1);
        let width = f64::from(options.width.max(400));
        let row_h = f64::from(options.row_height.max(12));
        let scale = Scale {
            start,
            end,
            span: end - start,
            plot_w: width - LEFT - RIGHT,
        };
        let rows = checker
            .holdings()
            .iter()
            .map(|h| h.n.max(h.i + 1))
            .max()
            .unwrap_or(1);
        let marks = merge_close(marks(records, options.joins_and_leaves), |t| scale.x(t));
        let (marks, lanes) = place_labels(marks, &scale, width);
        let bands = Bands::new(lanes, rows, row_h);
        let summary = checker.summary();
        let (legend, height) = legend(records, &marks, &summary, width, bands.axis_y + 52.0);
        Self {
            checker,
            summary,
            title,
            interval_us: options.interval.map(|l| l.as_micros() as u64),
            width,
            height,
            rows,
            scale,
            bands,
            marks,
            legend,
        }
    }
}

/// Puts each marker's label into the first lane above the chart where it
/// does not run into the previous label. Returns the placed marks and the
/// number of lanes.
fn place_labels(marks: Vec<Mark>, scale: &Scale, width: f64) -> (Vec<PlacedMark>, usize) {
    let mut lane_ends: Vec<f64> = Vec::new();
    let placed = marks
        .into_iter()
        .map(|mark| {
            let w = mark.label.chars().count() as f64 * CHAR_W * 0.95;
            let label_x = (scale.x(mark.at_us) + 3.0).min(width - 4.0 - w).max(2.0);
            let lane = match lane_ends.iter().position(|&e| e + 6.0 <= label_x) {
                Some(l) => l,
                None => {
                    lane_ends.push(0.0);
                    lane_ends.len() - 1
                }
            };
            lane_ends[lane] = label_x + w;
            PlacedMark {
                mark,
                lane,
                label_x,
            }
        })
        .collect();
    (placed, lane_ends.len())
}

/// The legend, from `top` down: workers in name order, then marker kinds and
/// strips, wrapped to the width. Returns the entries and the picture's
/// height below them.
fn legend(
    records: &[Record],
    marks: &[PlacedMark],
    summary: &Summary,
    width: f64,
    top: f64,
) -> (Vec<LegendEntry>, f64) {
    let workers: BTreeSet<(u64, &str)> = records
        .iter()
        .filter_map(Record::worker)
        .map(|w| (numeric_suffix(w).unwrap_or(u64::MAX), w))
        .collect();
    let mut entries: Vec<(String, LegendSwatch)> = workers
        .iter()
        .map(|(_, w)| ((*w).to_owned(), LegendSwatch::Box(worker_colour(w))))
        .collect();
    let kinds: BTreeSet<MarkKind> = marks.iter().map(|m| m.mark.kind).collect();
    for k in kinds {
        entries.push((k.legend().to_owned(), LegendSwatch::Line(k)));
    }
    entries.push(("fully covered".into(), LegendSwatch::Box(COVERED)));
    entries.push(("not covered".into(), LegendSwatch::Box(UNCOVERED)));
    if summary.violation_count > 0 {
        entries.push(("violation".into(), LegendSwatch::Outline(VIOLATION)));
    }
    let (mut x, mut y) = (LEFT, top);
    let placed = entries
        .into_iter()
        .map(|(label, swatch)| {
            let w = 22.0 + label.chars().count() as f64 * CHAR_W + 16.0;
            if x + w > width - RIGHT && x > LEFT {
                x = LEFT;
                y += 18.0;
            }
            let entry = LegendEntry {
                label,
                swatch,
                x,
                y,
            };
            x += w;
            entry
        })
        .collect();
    (placed, y + 20.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(at_us: u64, label: &str) -> Mark {
        Mark {
            kind: MarkKind::Fault,
            at_us,
            label: label.to_owned(),
        }
    }

    #[test]
    fn labels_that_would_collide_go_to_further_lanes() {
        let scale = Scale {
            start: 0,
            end: 1_000,
            span: 1_000,
            plot_w: 1_000.0,
        };
        // Three labels at one instant: three lanes; a far one reuses the first.
        let marks = vec![
            mark(100, "restart"),
            mark(100, "pause"),
            mark(100, "flush"),
            mark(900, "kill"),
        ];
        let (placed, lanes) = place_labels(marks, &scale, 1_200.0);
        let got: Vec<usize> = placed.iter().map(|p| p.lane).collect();
        assert_eq!((got, lanes), (vec![0, 1, 2, 0], 3));
        // No two labels of one lane overlap.
        for a in &placed {
            for b in placed
                .iter()
                .filter(|b| b.lane == a.lane && b.label_x > a.label_x)
            {
                let w = a.mark.label.chars().count() as f64 * CHAR_W * 0.95;
                assert!(
                    a.label_x + w + 6.0 <= b.label_x,
                    "{} runs into {}",
                    a.mark.label,
                    b.mark.label
                );
            }
        }
        // A label at the right edge is pulled inside the picture.
        let (placed, _) = place_labels(
            vec![mark(1_000, "a long label at the end")],
            &scale,
            1_200.0,
        );
        let w = "a long label at the end".len() as f64 * CHAR_W * 0.95;
        assert!(placed[0].label_x + w <= 1_200.0 - 4.0);
    }

    #[test]
    fn the_legend_wraps_to_the_width() {
        let records: Vec<Record> = (0..30)
            .map(|k| Record::join(format!("worker-{k}"), 0))
            .collect();
        let summary = Checker::new(&records, None).summary();
        let width = 600.0;
        let (entries, height) = legend(&records, &[], &summary, width, 100.0);
        // 30 workers, then the two strips.
        assert_eq!(entries.len(), 32);
        assert_eq!(entries[0].label, "worker-0", "ordered by number");
        assert_eq!(entries[10].label, "worker-10");
        let rows: BTreeSet<u64> = entries.iter().map(|e| e.y as u64).collect();
        assert!(rows.len() > 3, "{rows:?}");
        for e in &entries {
            let w = 22.0 + e.label.chars().count() as f64 * CHAR_W + 16.0;
            assert!(
                e.x == LEFT || e.x + w <= width - RIGHT,
                "{} overflows",
                e.label
            );
        }
        assert!(height > entries.last().unwrap().y);
    }
}
