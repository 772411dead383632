//! Writes the SVG document of a [`Layout`], one function per part of the
//! picture, top to bottom.

use std::fmt::Write as _;

use super::layout::{
    CHAR_W, COVERED, LEFT, Layout, LegendSwatch, UNCOVERED, VIOLATION, n_segments, tick_step,
};
use super::worker_colour;
use crate::checker::{Holding, HoldingEnd};
use crate::record::Mapping;
use crate::tasks::TaskSet;

const FONT: &str = "DejaVu Sans, Verdana, Helvetica, Arial, sans-serif";

/// The whole document.
pub(super) fn svg(l: &Layout<'_>) -> String {
    let mut s = String::with_capacity(4096 + l.checker.holdings().len() * 256);
    let (width, height) = (l.width, l.height);
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="{FONT}" font-size="11">"#
    );
    let _ = writeln!(
        s,
        r##"<rect x="0" y="0" width="{width:.0}" height="{height:.0}" fill="#ffffff"/>"##
    );
    header(&mut s, l);
    grid_and_axis(&mut s, l);
    n_band(&mut s, l);
    holdings(&mut s, l);
    violations(&mut s, l);
    coverage_strip(&mut s, l);
    marks(&mut s, l);
    legend(&mut s, l);
    s.push_str("</svg>\n");
    s
}

/// The title and the checker's verdict.
fn header(s: &mut String, l: &Layout<'_>) {
    let (b, summary) = (&l.bands, &l.summary);
    let _ = writeln!(
        s,
        r##"<text x="{LEFT}" y="{y}" font-size="16" font-weight="bold" fill="#222">{}</text>"##,
        esc(l.title),
        y = b.title_y,
    );
    let verdict = if summary.is_ok() {
        "checker: ok".to_owned()
    } else {
        format!(
            "checker: VIOLATION ({} overlaps, {} fencing, {} anomalies, {} past their interval's end)",
            summary.violation_count,
            summary.fencing_count,
            summary.anomaly_count,
            summary.interval_end_count
        )
    };
    let _ = writeln!(
        s,
        r##"<text x="{LEFT}" y="{y}" fill="{}">{} · {} {:.1} % of {} · {} grants, {} releases, {} faults</text>"##,
        if summary.is_ok() { "#444" } else { VIOLATION },
        esc(&verdict),
        if summary.tasks.is_some() {
            "task coverage"
        } else {
            "fully covered"
        },
        summary
            .tasks
            .as_ref()
            .map_or(summary.coverage.fraction(), |t| t.coverage)
            * 100.0,
        esc(&secs(l.scale.span)),
        summary.owns,
        summary.releases,
        summary.faults,
        y = b.sub_y,
    );
}

/// The interval grid, the slot rows with their labels, and the time axis.
fn grid_and_axis(s: &mut String, l: &Layout<'_>) {
    let (b, sc) = (&l.bands, &l.scale);
    if let Some(iv) = l.interval_us
        && iv > 0
        && (iv as f64 / sc.span as f64 * sc.plot_w) >= 4.0
    {
        let mut t = sc.start;
        while t <= sc.end {
            let _ = writeln!(
                s,
                r##"<line x1="{x:.1}" y1="{y1:.1}" x2="{x:.1}" y2="{y2:.1}" stroke="#eeeeee" stroke-width="1"/>"##,
                x = sc.x(t),
                y1 = b.band_top,
                y2 = b.rows_bottom,
            );
            t += iv;
        }
    }
    for i in 0..l.rows {
        let y = b.row_y(i);
        let fill = if i % 2 == 0 { "#f7f7f7" } else { "#ffffff" };
        let _ = writeln!(
            s,
            r##"<rect x="{LEFT}" y="{y:.1}" width="{w:.1}" height="{h:.1}" fill="{fill}"/>"##,
            w = sc.plot_w,
            h = b.row_h,
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
            ty = y + b.row_h / 2.0 + 4.0,
        );
    }
    let step = tick_step(sc.span, 12);
    let mut t = sc.start;
    while t <= sc.end {
        let xt = sc.x(t);
        let _ = writeln!(
            s,
            r##"<line x1="{xt:.1}" y1="{y1:.1}" x2="{xt:.1}" y2="{y2:.1}" stroke="#dddddd" stroke-width="1"/>"##,
            y1 = b.rows_top,
            y2 = b.rows_bottom,
        );
        let _ = writeln!(
            s,
            r##"<line x1="{xt:.1}" y1="{y1:.1}" x2="{xt:.1}" y2="{y2:.1}" stroke="#666"/><text x="{xt:.1}" y="{ly:.1}" text-anchor="middle" fill="#444">{}</text>"##,
            time_label(t - sc.start, step),
            y1 = b.axis_y,
            y2 = b.axis_y + 5.0,
            ly = b.axis_y + 17.0,
        );
        t += step;
    }
    let xe = LEFT + sc.plot_w;
    let _ = writeln!(
        s,
        r##"<line x1="{LEFT}" y1="{y:.1}" x2="{xe:.1}" y2="{y:.1}" stroke="#666"/>"##,
        y = b.axis_y,
    );
    let _ = writeln!(
        s,
        r##"<text x="{xe:.1}" y="{ly:.1}" text-anchor="end" fill="#666">time since the first record</text>"##,
        ly = b.axis_y + 30.0,
    );
}

/// The band above the rows: the group size in force, or "mixed n".
fn n_band(s: &mut String, l: &Layout<'_>) {
    let (b, sc) = (&l.bands, &l.scale);
    let ty = b.band_top + b.band_h / 2.0 + 4.0;
    let _ = writeln!(
        s,
        r##"<text x="{lx:.1}" y="{ty:.1}" text-anchor="end" fill="#333">n</text>"##,
        lx = LEFT - 8.0,
    );
    for (a, e, n) in n_segments(l.checker.holdings()) {
        let (xa, xb) = (sc.x(a), sc.x(e));
        let (fill, text) = match n {
            Some(n) => ("#e3e8ef", format!("n = {n}")),
            None => ("#f8c9c9", "mixed n".to_owned()),
        };
        let _ = write!(
            s,
            r##"<rect x="{xa:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" fill="{fill}" stroke="#ffffff" stroke-width="1"/>"##,
            y = b.band_top,
            w = (xb - xa).max(0.5),
            h = b.band_h,
        );
        if xb - xa > text.len() as f64 * CHAR_W + 6.0 {
            let _ = write!(
                s,
                r##"<text x="{cx:.1}" y="{ty:.1}" text-anchor="middle" fill="#333">{text}</text>"##,
                cx = (xa + xb) / 2.0,
            );
        }
        s.push('\n');
    }
}

/// A bar per holding, in the row of its `i`, with a tooltip and a label
/// where it fits.
/// For a task-set holding: how many tasks it holds, and that as a share of
/// `T(i, n)` (at most 1), which shades its band.
fn task_share(h: &Holding, mapping: Mapping) -> (u32, f64) {
    let mut held = TaskSet::default();
    for part in &h.parts {
        held = held.union(&TaskSet::part(mapping, part));
    }
    let pair = TaskSet::pair(mapping, h.i, h.n);
    let share = if pair.is_empty() {
        1.0
    } else {
        f64::from(held.common(&pair)) / f64::from(pair.len())
    };
    (held.len(), share.min(1.0))
}

fn holdings(s: &mut String, l: &Layout<'_>) {
    let (b, sc) = (&l.bands, &l.scale);
    let mapping = l.checker.tasks().map(|t| t.mapping);
    for h in l.checker.holdings() {
        // A task-set holding's band is shaded by the share of its pair's
        // tasks it holds (parts listed in its tooltip).
        let share = mapping
            .filter(|_| h.is_task_set())
            .map(|m| task_share(h, m));
        let (xa, xb) = (sc.x(h.start_us), sc.x(h.end_us));
        let y = b.row_y(h.i) + 3.0;
        let w = (xb - xa).max(1.0);
        let how = match h.end {
            HoldingEnd::Released => "released",
            HoldingEnd::Replaced => "replaced without release",
            HoldingEnd::EndOfHistory => "still held at the end",
        };
        let mut tip = format!(
            "{} holds ({}, {}), token {}, from {} to {} ({how})",
            h.worker,
            h.i,
            h.n,
            h.token,
            secs(h.start_us - sc.start),
            secs(h.end_us - sc.start),
        );
        if let Some((count, part)) = share {
            let parts: Vec<String> = h
                .parts
                .iter()
                .map(|p| {
                    format!(
                        "T({}, {}) ∩ T({}, {}) token {}",
                        p.i, p.n, p.pi, p.pn, p.token
                    )
                })
                .collect();
            let _ = write!(
                tip,
                "; {count} tasks, {:.0} % of T({}, {}): {}",
                part * 100.0,
                h.i,
                h.n,
                parts.join(", ")
            );
        }
        let opacity = share.map_or(1.0, |(_, part)| 0.3 + 0.7 * part);
        let _ = write!(
            s,
            r##"<rect class="hold" x="{xa:.1}" y="{y:.1}" width="{w:.1}" height="{bh:.1}" rx="3" fill="{c}" fill-opacity="{opacity:.2}"><title>{}</title></rect>"##,
            esc(&tip),
            bh = b.row_h - 6.0,
            c = worker_colour(&h.worker),
        );
        let label = h.worker.as_str();
        let full = match share {
            Some((_, part)) if part < 1.0 => {
                format!("{label} · ({}, {}) · {:.0} %", h.i, h.n, part * 100.0)
            }
            _ => format!("{label} · ({}, {})", h.i, h.n),
        };
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
                ty = y + (b.row_h - 6.0) / 2.0 + 4.0,
            );
        }
        s.push('\n');
    }
}

/// Each violation's overlap, outlined in the row of the later holding.
fn violations(s: &mut String, l: &Layout<'_>) {
    let (b, sc) = (&l.bands, &l.scale);
    for v in l.checker.violations() {
        let (xa, xb) = (sc.x(v.start_us), sc.x(v.start_us + v.overlap_us));
        let _ = writeln!(
            s,
            r##"<rect x="{xa:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" fill="none" stroke="{VIOLATION}" stroke-width="2.5"><title>{}</title></rect>"##,
            esc(&v.to_string()),
            y = b.row_y(v.second.i) + 1.0,
            w = (xb - xa).max(3.0),
            h = b.row_h - 2.0,
        );
    }
}

/// The strip below the rows: when the group was fully covered.
fn coverage_strip(s: &mut String, l: &Layout<'_>) {
    let (b, sc) = (&l.bands, &l.scale);
    let (y, h) = (b.cover_top, b.cover_h);
    let _ = writeln!(
        s,
        r##"<rect x="{LEFT}" y="{y:.1}" width="{w:.1}" height="{h:.1}" fill="{UNCOVERED}"/>"##,
        w = sc.plot_w,
    );
    // Per task for a task-set history: every task held by exactly one worker.
    let task_spans = l.checker.tasks().map(|t| t.timeline.covered_spans());
    let spans = task_spans
        .as_deref()
        .unwrap_or_else(|| l.checker.covered_spans());
    for &(a, e) in spans {
        let (xa, xb) = (sc.x(a), sc.x(e));
        let _ = writeln!(
            s,
            r##"<rect x="{xa:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" fill="{COVERED}"/>"##,
            w = (xb - xa).max(0.5)
        );
    }
    let _ = writeln!(
        s,
        r##"<text x="{lx:.1}" y="{ty:.1}" text-anchor="end" fill="#333" font-size="10">covered</text>"##,
        lx = LEFT - 8.0,
        ty = y + h - 1.0,
    );
}

/// The marker lines (faults, joins, leaves) and their labels.
fn marks(s: &mut String, l: &Layout<'_>) {
    let b = &l.bands;
    for p in &l.marks {
        let (m, lx) = (&p.mark, p.label_x);
        let xm = l.scale.x(m.at_us);
        let ly = b.lanes_top + p.lane as f64 * b.lane_h + 10.0;
        let _ = writeln!(
            s,
            r##"<line x1="{xm:.1}" y1="{y1:.1}" x2="{xm:.1}" y2="{y2:.1}" stroke="{c}" stroke-width="1.5" stroke-dasharray="{d}"/><text x="{lx:.1}" y="{ly:.1}" fill="{c}" font-size="10.5">{}</text>"##,
            esc(&m.label),
            y1 = ly + 3.0,
            y2 = b.cover_top + b.cover_h,
            c = m.kind.colour(),
            d = m.kind.dash(),
        );
    }
}

/// The legend.
fn legend(s: &mut String, l: &Layout<'_>) {
    for e in &l.legend {
        let (lx, ly) = (e.x, e.y);
        match e.swatch {
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
            esc(&e.label),
            tx = lx + 22.0,
        );
    }
}

/// A time offset as an axis label: seconds, or milliseconds for short runs.
pub(super) fn time_label(us: u64, step: u64) -> String {
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
