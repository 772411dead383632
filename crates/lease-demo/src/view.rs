//! What the person watching sees: a live view redrawn in place (one row per
//! slot, the workers, the latest events) on a terminal, or plain lines, one
//! per event, when the output is not a terminal.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::io::Write;
use std::time::Duration;

/// Events shown at the bottom of the live view.
const LOG_LINES: usize = 9;
/// How long an empty slot shows who stood down from it.
const STOOD_DOWN_FOR: Duration = Duration::from_secs(3);

const BOLD: &str = "\x1b[1m";
const DIM: &str = "\x1b[2m";
const RED: &str = "\x1b[31m";
const GREEN: &str = "\x1b[32m";
const YELLOW: &str = "\x1b[33m";
const RESET: &str = "\x1b[0m";

#[derive(Clone, Debug, PartialEq)]
enum State {
    Idle,
    Holding {
        i: u32,
        n: u32,
        token: u64,
        since: Duration,
    },
    Crashed,
    Ended,
}

#[derive(Clone, Debug)]
struct WorkerRow {
    state: State,
    /// Frozen until this instant.
    stalled_until: Option<Duration>,
    /// The lease it holds has run out, but the worker has not noticed yet
    /// (it is frozen).
    lapsed: bool,
}

/// The live view, or the plain-lines printer.
pub(crate) struct View {
    live: bool,
    /// Prints nothing at all (the companion run in the other handover
    /// mode).
    quiet: bool,
    header: Vec<String>,
    length: Duration,
    interval: Duration,
    now: Duration,
    workers: BTreeMap<usize, WorkerRow>,
    /// Per slot index: who stood down from it last, why (` (reason)` or
    /// empty), and when.
    stood_down: BTreeMap<u32, (usize, String, Duration)>,
    /// The `n` of the latest grant: how many slot rows to show.
    rows: u32,
    log: VecDeque<String>,
    next: Option<String>,
    drawn: usize,
}

impl View {
    /// A view; `live` redraws in place with ANSI escapes, otherwise every
    /// event is printed as a plain line.
    pub(crate) fn new(
        live: bool,
        header: Vec<String>,
        interval: Duration,
        length: Duration,
    ) -> Self {
        if !live {
            for line in &header {
                println!("{line}");
            }
        }
        Self {
            live,
            quiet: false,
            header,
            length,
            interval,
            now: Duration::ZERO,
            workers: BTreeMap::new(),
            stood_down: BTreeMap::new(),
            rows: 0,
            log: VecDeque::new(),
            next: None,
            drawn: 0,
        }
    }

    /// A view that shows and prints nothing.
    pub(crate) fn quiet(interval: Duration, length: Duration) -> Self {
        let mut view = Self::new(true, Vec::new(), interval, length);
        view.quiet = true;
        view
    }

    /// Whether the view redraws in place.
    pub(crate) fn is_live(&self) -> bool {
        self.live
    }

    pub(crate) fn set_now(&mut self, now: Duration) {
        self.now = now;
    }

    pub(crate) fn set_next(&mut self, next: Option<String>) {
        self.next = next;
    }

    /// An event, at `at`: shown in the log, or printed as a line.
    pub(crate) fn event(&mut self, at: Duration, text: &str) {
        let line = format!("{:>8.3} s  {text}", at.as_secs_f64());
        if self.live {
            self.log.push_back(line);
            while self.log.len() > LOG_LINES {
                self.log.pop_front();
            }
        } else {
            println!("{line}");
        }
    }

    pub(crate) fn started(&mut self, w: usize) {
        self.workers.insert(
            w,
            WorkerRow {
                state: State::Idle,
                stalled_until: None,
                lapsed: false,
            },
        );
    }

    pub(crate) fn own(&mut self, w: usize, i: u32, n: u32, token: u64, at: Duration) {
        self.rows = n;
        if let Some(row) = self.workers.get_mut(&w) {
            row.state = State::Holding {
                i,
                n,
                token,
                since: at,
            };
            row.lapsed = false;
        }
        self.stood_down.remove(&i);
        self.event(at, &format!("w{w} owns ({i}, {n}), fencing token {token}"));
    }

    /// The worker's loop got the idle pair; `ended_at` is when the lease
    /// really ended, `reason` why, if known.
    pub(crate) fn release(
        &mut self,
        w: usize,
        at: Duration,
        ended_at: Duration,
        reason: Option<&str>,
    ) {
        let Some(row) = self.workers.get_mut(&w) else {
            return;
        };
        let State::Holding { i, n, .. } = row.state else {
            return;
        };
        row.state = State::Idle;
        row.lapsed = false;
        self.stood_down.insert(
            i,
            (w, reason.map(|r| format!(" ({r})")).unwrap_or_default(), at),
        );
        let why = reason.map(|r| format!(": {r}")).unwrap_or_default();
        let late = if at > ended_at + Duration::from_millis(5) {
            format!(" (ended at {:.3} s, while frozen)", ended_at.as_secs_f64())
        } else {
            String::new()
        };
        self.event(at, &format!("w{w} stands down from ({i}, {n}){why}{late}"));
    }

    pub(crate) fn stalled(&mut self, w: usize, until: Duration) {
        if let Some(row) = self.workers.get_mut(&w) {
            row.stalled_until = Some(until);
        }
    }

    /// Whether the lease the worker holds has run out unnoticed.
    pub(crate) fn set_lapsed(&mut self, w: usize, lapsed: bool) {
        if let Some(row) = self.workers.get_mut(&w) {
            row.lapsed = lapsed && matches!(row.state, State::Holding { .. });
        }
    }

    /// Workers whose rows say they hold a pair.
    pub(crate) fn holders(&self) -> Vec<usize> {
        self.workers
            .iter()
            .filter(|(_, r)| matches!(r.state, State::Holding { .. }))
            .map(|(w, _)| *w)
            .collect()
    }

    pub(crate) fn crashed(&mut self, w: usize, at: Duration) {
        if let Some(row) = self.workers.get_mut(&w) {
            if let State::Holding { i, .. } = row.state {
                self.stood_down.insert(i, (w, " (crashed)".to_owned(), at));
            }
            row.state = State::Crashed;
            row.lapsed = false;
        }
    }

    pub(crate) fn ended(&mut self, w: usize) {
        if let Some(row) = self.workers.get_mut(&w) {
            row.state = State::Ended;
        }
    }

    /// Redraws the live view (nothing in plain mode).
    pub(crate) fn draw(&mut self) {
        if !self.live || self.quiet {
            return;
        }
        let width = terminal_width();
        let frame: Vec<String> = self.frame().iter().map(|l| fit(l, width)).collect();
        let mut out = String::new();
        if self.drawn > 0 {
            // Back to the first line of the previous frame.
            let _ = write!(out, "\x1b[{}F", self.drawn);
        }
        for line in &frame {
            out.push_str(line);
            out.push_str("\x1b[K\n");
        }
        out.push_str("\x1b[J");
        self.drawn = frame.len();
        let mut stdout = std::io::stdout().lock();
        let _ = stdout.write_all(out.as_bytes());
        let _ = stdout.flush();
    }

    /// The lines of one frame of the live view.
    fn frame(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for (k, h) in self.header.iter().enumerate() {
            lines.push(if k == 0 {
                format!("{BOLD}{h}{RESET}")
            } else {
                h.clone()
            });
        }
        let now = self.now;
        let k = if self.interval.is_zero() {
            0
        } else {
            (now.as_micros() / self.interval.as_micros()) as u64
        };
        let total = self.length.as_secs_f64() / self.interval.as_secs_f64().max(1e-9);
        let held: Vec<(u32, u32)> = self
            .workers
            .values()
            .filter(|r| !r.lapsed)
            .filter_map(|r| match r.state {
                State::Holding { i, n, .. } => Some((i, n)),
                _ => None,
            })
            .collect();
        let mut sizes: Vec<u32> = held.iter().map(|p| p.1).collect();
        sizes.sort_unstable();
        sizes.dedup();
        let group = match sizes.as_slice() {
            [] => format!("{YELLOW}n = -  standing down{RESET}"),
            [n] => {
                let full = held.len() == *n as usize;
                if full {
                    format!("{GREEN}n = {n}  every slot held{RESET}")
                } else {
                    format!("{YELLOW}n = {n}  {} of {n} slots held{RESET}", held.len())
                }
            }
            _ => format!("{RED}mixed n {sizes:?}: not exclusive!{RESET}"),
        };
        lines.push(format!(
            "time {:>6.1} s   interval {k:>3} of {total:.0}   {group}",
            now.as_secs_f64()
        ));
        lines.push(String::new());
        lines.push(format!(
            "{BOLD} slot  holder  fencing token  held for   n{RESET}"
        ));
        let highest = self
            .workers
            .values()
            .filter_map(|r| match r.state {
                State::Holding { i, .. } => Some(i + 1),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        for slot in 0..self.rows.max(highest).max(1) {
            let holders: Vec<(usize, &WorkerRow)> = self
                .workers
                .iter()
                .filter(|(_, r)| matches!(r.state, State::Holding { i, .. } if i == slot))
                .map(|(w, r)| (*w, r))
                .collect();
            let star = if slot == 0 { "*" } else { " " };
            if holders.is_empty() {
                let note = match self.stood_down.get(&slot) {
                    Some((w, why, at)) if now.saturating_sub(*at) < STOOD_DOWN_FOR => {
                        format!(
                            "{YELLOW}w{w} stood down {:.1} s ago{why}{RESET}",
                            now.saturating_sub(*at).as_secs_f64()
                        )
                    }
                    _ => format!("{DIM}unowned{RESET}"),
                };
                lines.push(format!("  {slot:>2}{star}   {DIM}--{RESET}      {note}"));
            }
            for (w, r) in holders {
                let State::Holding {
                    n, token, since, ..
                } = r.state
                else {
                    continue;
                };
                let lapsed = if r.lapsed {
                    format!("  {RED}lease ran out: w{w} is frozen{RESET}")
                } else {
                    String::new()
                };
                lines.push(format!(
                    "  {slot:>2}{star}   {BOLD}w{w:<5}{RESET} {token:>13}  {:>6.1} s  {n:>2}{lapsed}",
                    now.saturating_sub(since).as_secs_f64()
                ));
            }
        }
        lines.push(String::new());
        let mut workers = String::from(" workers ");
        for (w, r) in &self.workers {
            let state = match (&r.state, r.stalled_until) {
                (State::Crashed, _) => format!("{RED}crashed{RESET}"),
                (State::Ended, _) => format!("{DIM}cancelled{RESET}"),
                (_, Some(until)) if until > now => format!("{YELLOW}frozen{RESET}"),
                (State::Holding { i, n, .. }, _) => format!("({i}, {n})"),
                (State::Idle, _) => format!("{DIM}idle{RESET}"),
            };
            let _ = write!(workers, "  w{w} {state}");
        }
        lines.push(workers);
        lines.push(String::new());
        lines.push(format!("{BOLD} events{RESET}"));
        for l in &self.log {
            lines.push(l.clone());
        }
        for _ in self.log.len()..LOG_LINES {
            lines.push(String::new());
        }
        lines.push(match &self.next {
            Some(next) => format!(" {DIM}next: {next}{RESET}"),
            None => String::new(),
        });
        lines
    }
}

/// The terminal's width in columns (80 if it cannot be read).
fn terminal_width() -> usize {
    rustix::termios::tcgetwinsize(std::io::stdout())
        .map(|w| usize::from(w.ws_col))
        .ok()
        .filter(|w| *w >= 20)
        .unwrap_or(80)
}

/// `line` cut to fewer than `width` visible characters (escape sequences
/// do not count), so that no line wraps: the redraw moves the cursor up by
/// lines, and a wrapped line would make every frame drift.
fn fit(line: &str, width: usize) -> String {
    let mut out = String::with_capacity(line.len());
    let mut visible = 0;
    let mut chars = line.chars();
    let mut cut = false;
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            out.push(c);
            // Copy the whole sequence: ESC [ parameters final-letter.
            for c in chars.by_ref() {
                out.push(c);
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
            continue;
        }
        if visible + 1 >= width {
            cut = true;
            break;
        }
        out.push(c);
        visible += 1;
    }
    if cut {
        out.push_str(RESET);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_cut_to_the_width_not_counting_escapes() {
        assert_eq!(fit("hello", 80), "hello");
        assert_eq!(fit("hello world", 6), format!("hello{RESET}"));
        let coloured = format!("{BOLD}ab{RESET}cdef");
        assert_eq!(fit(&coloured, 4), format!("{BOLD}ab{RESET}c{RESET}"));
        assert_eq!(fit(&coloured, 80), coloured);
    }
}
