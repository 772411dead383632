//! An independent checker of a history (DESIGN sections 3, 4 and 6).
//!
//! It rebuilds every worker's holding intervals from the `own` and `release`
//! lines and checks, knowing nothing of the protocol:
//!
//! - **exclusivity**: at every instant, all held pairs have the same `n` and
//!   distinct `i`; a worker never holds two pairs itself;
//! - **fencing**: two different workers' holdings that share a task have
//!   tokens at least 2 apart, ordered as the holdings start in time;
//! - **coverage**: the share of time during which, for some `n`, every slot
//!   `0..n` is held by exactly one worker and nothing else is held;
//! - **stand-downs**, **join-to-own** delays and counts of each kind of line.
//!
//! # How the history is read
//!
//! The records are taken in time order: sorted stably by `at_us`, as
//! [`History`](crate::history::History) keeps them, so lines with the same
//! instant keep their file order (a worker's release before its next own).
//! An `own` opens a holding `[at, ..)` for its worker; that worker's next
//! `release` closes it at the release's `at_us`, the instant the lease really
//! ended. Holdings are half-open, so a handover (a release at `t` and another
//! worker's own at `t`) is no overlap. A holding still open at the end lasts
//! until the end of the history: the latest `at_us`, or a later end passed to
//! [`check`] or [`Checker::new`]. A `leave` ends its worker's holding at the
//! leave's instant, unless the worker's `release` follows before its next
//! `own` or `join`, in which case the release's instant counts (a simulator
//! may write a crashed worker's lease deadline as its release).
//!
//! Lines that do not fit (a release with nothing held, a release of another
//! pair than the one held, a pair with `i >= n`) are [`Anomaly`]s and make the
//! result fail as violations do.
//!
//! # Cost
//!
//! Reconstruction is one pass; exclusivity and coverage are one sweep over the
//! sorted interval boundaries; the whole check is `O(E log E)` in the number
//! of records, plus `O(E·K)` for fencing where `K` is the number of distinct
//! group sizes `n` in the run (a handful). Violation counts are exact; the
//! lists keep the first [`MAX_REPORTED`] of each kind.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

use crate::history::Record;

/// The most violations, fencing violations and anomalies kept in each list
/// (counts are always exact).
pub const MAX_REPORTED: usize = 1000;

/// How a holding ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HoldingEnd {
    /// By a `release` line.
    Released,
    /// By its worker's `leave` line.
    Left,
    /// By an `own` of the same worker without a release in between (an
    /// [`ViolationKind::OwnWithoutRelease`]).
    Replaced,
    /// Still held when the history ended.
    EndOfHistory,
}

/// One worker holding one pair over `[start_us, end_us)`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Holding {
    /// The worker.
    pub worker: String,
    /// The index `i`.
    pub i: u32,
    /// The group size `n`.
    pub n: u32,
    /// The fencing token of the `own` line.
    pub token: u64,
    /// When the `own` was written.
    pub start_us: u64,
    /// When the holding ended (exclusive).
    pub end_us: u64,
    /// What ended it.
    pub end: HoldingEnd,
}

impl Holding {
    /// The length of the holding in microseconds.
    pub fn len_us(&self) -> u64 {
        self.end_us - self.start_us
    }

    /// Whether the checker counts the two pairs as sharing a task: the same
    /// pair, or any two pairs with different `n`. DESIGN section 6 treats
    /// every change of `n` as a conflict: under the plain modulo split,
    /// `(i, n)` and `(i', n')` share a task id whenever `i ≡ i' (mod gcd(n,
    /// n'))`, and under a consistent mapping (jump hash) any two may.
    pub fn shares_task_with(&self, other: &Holding) -> bool {
        self.n != other.n || self.i == other.i
    }
}

impl fmt::Display for Holding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({}, {}) token {} [{}, {}) us",
            self.worker, self.i, self.n, self.token, self.start_us, self.end_us
        )
    }
}

/// What kind of exclusivity violation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ViolationKind {
    /// Two workers held the same pair at once.
    SameSlot,
    /// Two workers held pairs with different `n` at once.
    MixedN,
    /// A worker received a pair while it still held another (no release in
    /// between).
    OwnWithoutRelease,
}

impl ViolationKind {
    /// A short name.
    pub fn as_str(self) -> &'static str {
        match self {
            ViolationKind::SameSlot => "same-slot",
            ViolationKind::MixedN => "mixed-n",
            ViolationKind::OwnWithoutRelease => "own-without-release",
        }
    }
}

/// Two holdings that must not have overlapped.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Violation {
    /// What was violated.
    pub kind: ViolationKind,
    /// The holding that started first (for `OwnWithoutRelease`, the one
    /// still held).
    pub first: Holding,
    /// The holding that started second.
    pub second: Holding,
    /// Where the overlap starts (the second holding's start).
    pub start_us: u64,
    /// How long they overlap; 0 for `OwnWithoutRelease`, whose first holding
    /// is cut at the second's start.
    pub overlap_us: u64,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} at {} us for {} us: {} vs {}",
            self.kind.as_str(),
            self.start_us,
            self.overlap_us,
            self.first,
            self.second
        )
    }
}

/// Two different workers' holdings that share a task, whose tokens are less
/// than 2 apart or out of time order.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FencingViolation {
    /// The holding that started first: the one with the largest token among
    /// the earlier holdings that conflict with `later`.
    pub earlier: Holding,
    /// The holding whose token is not at least `earlier.token + 2`.
    pub later: Holding,
}

impl fmt::Display for FencingViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "fencing: token {} after {} ({} then {})",
            self.later.token, self.earlier.token, self.earlier, self.later
        )
    }
}

/// What is wrong with an inconsistent line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AnomalyKind {
    /// A `release` while the worker held nothing.
    ReleaseWithoutOwn,
    /// A `release` of another pair than the one held (the held one is ended
    /// anyway).
    ReleaseMismatch {
        /// The index held.
        held_i: u32,
        /// The group size held.
        held_n: u32,
    },
    /// An `own` with `n == 0` or `i >= n`.
    InvalidPair,
}

/// A line that does not fit the worker's sequence of holdings.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Anomaly {
    /// What is wrong.
    pub kind: AnomalyKind,
    /// The worker of the line.
    pub worker: String,
    /// The line's `i`.
    pub i: u32,
    /// The line's `n`.
    pub n: u32,
    /// The line's `at_us`.
    pub at_us: u64,
}

impl fmt::Display for Anomaly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            AnomalyKind::ReleaseWithoutOwn => "release without own".to_string(),
            AnomalyKind::ReleaseMismatch { held_i, held_n } => {
                format!("release of another pair than ({held_i}, {held_n})")
            }
            AnomalyKind::InvalidPair => "invalid pair".to_string(),
        };
        write!(
            f,
            "{what}: {} ({}, {}) at {} us",
            self.worker, self.i, self.n, self.at_us
        )
    }
}

/// Coverage of a window `[from_us, to_us)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Coverage {
    /// Start of the window.
    pub from_us: u64,
    /// End of the window (exclusive).
    pub to_us: u64,
    /// Time during which some `n` was completely partitioned: every slot
    /// `0..n` held by exactly one worker, nothing else held.
    pub covered_us: u64,
    /// The rest of the window: the group's stand-down time.
    pub uncovered_us: u64,
}

impl Coverage {
    /// `covered_us` as a share of the window; 1.0 for an empty window.
    pub fn fraction(&self) -> f64 {
        let len = self.to_us.saturating_sub(self.from_us);
        if len == 0 {
            1.0
        } else {
            self.covered_us as f64 / len as f64
        }
    }
}

/// Releases followed by a re-own by the same worker.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StandDowns {
    /// How many releases were followed by an own of the same worker (with no
    /// leave or join in between).
    pub count: u64,
    /// The idle time between those releases and their next owns, summed.
    pub total_idle_us: u64,
    /// The longest such idle time.
    pub max_idle_us: u64,
    /// `total_idle_us` per worker (workers with at least one stand-down).
    pub per_worker_idle_us: BTreeMap<String, u64>,
}

/// One `join` and the worker's first `own` after it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct JoinToOwn {
    /// The worker.
    pub worker: String,
    /// When it joined.
    pub join_us: u64,
    /// Its first own after the join, if any before it left or rejoined.
    pub own_us: Option<u64>,
}

impl JoinToOwn {
    /// Time from join to first own.
    pub fn delay_us(&self) -> Option<u64> {
        self.own_us.map(|o| o - self.join_us)
    }
}

/// Distribution of join-to-own delays.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct JoinStats {
    /// Number of joins.
    pub joins: u64,
    /// Joins that never led to an own.
    pub never_owned: u64,
    /// Median delay (nearest rank), over joins that led to an own.
    pub p50_us: Option<u64>,
    /// 90th percentile delay (nearest rank).
    pub p90_us: Option<u64>,
    /// Longest delay.
    pub max_us: Option<u64>,
}

impl JoinStats {
    fn from_joins(joins: &[JoinToOwn]) -> Self {
        let mut delays: Vec<u64> = joins.iter().filter_map(JoinToOwn::delay_us).collect();
        delays.sort_unstable();
        Self {
            joins: joins.len() as u64,
            never_owned: (joins.len() - delays.len()) as u64,
            p50_us: percentile(&delays, 50),
            p90_us: percentile(&delays, 90),
            max_us: delays.last().copied(),
        }
    }
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[u64], pct: usize) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (pct * sorted.len()).div_ceil(100).max(1);
    sorted.get(rank - 1).copied()
}

/// Everything the checker found, in one value; [`fmt::Display`] prints one
/// line starting with `checker: ok` or `checker: VIOLATION`.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    /// Exclusivity violations (overlaps and owns without release), exact.
    pub violation_count: u64,
    /// The first [`MAX_REPORTED`] of them, in time order.
    pub violations: Vec<Violation>,
    /// Fencing violations, exact (one per offending later holding).
    pub fencing_count: u64,
    /// The first [`MAX_REPORTED`] of them.
    pub fencing: Vec<FencingViolation>,
    /// Inconsistent lines, exact.
    pub anomaly_count: u64,
    /// The first [`MAX_REPORTED`] of them.
    pub anomalies: Vec<Anomaly>,
    /// Coverage over the whole run (first record to end).
    pub coverage: Coverage,
    /// Per-worker stand-downs.
    pub stand_downs: StandDowns,
    /// Join-to-own delays.
    pub join_to_own: JoinStats,
    /// Number of `own` lines.
    pub owns: u64,
    /// Number of `release` lines.
    pub releases: u64,
    /// Number of `fault` lines.
    pub faults: u64,
    /// Number of `join` lines.
    pub joins: u64,
    /// Number of `leave` lines.
    pub leaves: u64,
}

impl Summary {
    /// No exclusivity or fencing violation and no anomaly.
    pub fn is_ok(&self) -> bool {
        self.violation_count == 0 && self.fencing_count == 0 && self.anomaly_count == 0
    }
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

struct OptMs(Option<u64>);

impl fmt::Display for OptMs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(us) => write!(f, "{:.1}", ms(us)),
            None => f.write_str("-"),
        }
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "checker: {} violations={} fencing={} anomalies={} coverage={:.4} uncovered_ms={:.1} \
             owns={} releases={} faults={} joins={} leaves={} standdowns={} standdown_idle_ms={:.1} \
             join_to_own_p50_ms={} join_to_own_p90_ms={} join_to_own_max_ms={} never_owned={}",
            if self.is_ok() { "ok" } else { "VIOLATION" },
            self.violation_count,
            self.fencing_count,
            self.anomaly_count,
            self.coverage.fraction(),
            ms(self.coverage.uncovered_us),
            self.owns,
            self.releases,
            self.faults,
            self.joins,
            self.leaves,
            self.stand_downs.count,
            ms(self.stand_downs.total_idle_us),
            OptMs(self.join_to_own.p50_us),
            OptMs(self.join_to_own.p90_us),
            OptMs(self.join_to_own.max_us),
            self.join_to_own.never_owned,
        )
    }
}

/// Checks `records` (in file order or any other: they are sorted stably by
/// `at_us` first). Holdings never released last until `end_us`, or until the
/// latest record if that is later or `end_us` is `None`.
///
/// For a [`History`](crate::history::History), pass `history.records()`.
pub fn check(records: &[Record], end_us: Option<u64>) -> Summary {
    Checker::new(records, end_us).summary()
}

/// The reconstructed holdings of a history and everything checked on them.
#[derive(Clone, Debug)]
pub struct Checker {
    holdings: Vec<Holding>,
    violation_count: u64,
    violations: Vec<Violation>,
    fencing_count: u64,
    fencing: Vec<FencingViolation>,
    anomaly_count: u64,
    anomalies: Vec<Anomaly>,
    /// Disjoint, sorted, merged spans of full coverage.
    covered: Vec<(u64, u64)>,
    /// `covered_before[k]` = total length of `covered[..k]`.
    covered_before: Vec<u64>,
    start_us: u64,
    end_us: u64,
    stand_downs: StandDowns,
    joins: Vec<JoinToOwn>,
    owns: u64,
    releases: u64,
    faults: u64,
    leaves: u64,
}

/// A holding still open during reconstruction.
struct Open {
    index: usize,
    left_at: Option<u64>,
}

#[derive(Default)]
struct WorkerState {
    open: Option<Open>,
    last_release: Option<u64>,
    pending_join: Option<usize>,
}

/// Top two entries `(token, holding index, worker id)` by token, from two
/// different workers.
#[derive(Clone, Copy, Default)]
struct Top2 {
    first: Option<(u64, usize, usize)>,
    second: Option<(u64, usize, usize)>,
}

impl Top2 {
    fn insert(&mut self, entry: (u64, usize, usize)) {
        let (token, _, worker) = entry;
        match self.first {
            None => self.first = Some(entry),
            Some(a) if a.2 == worker => {
                if token > a.0 {
                    self.first = Some(entry);
                }
            }
            Some(a) => {
                if token > a.0 {
                    self.second = Some(a);
                    self.first = Some(entry);
                } else if self.second.is_none_or(|b| token > b.0) {
                    self.second = Some(entry);
                }
            }
        }
    }

    /// The best entry from a worker other than `worker`.
    fn best_except(&self, worker: usize) -> Option<(u64, usize, usize)> {
        match self.first {
            Some(a) if a.2 != worker => Some(a),
            _ => self.second,
        }
    }
}

fn push_capped<T>(list: &mut Vec<T>, item: T) {
    if list.len() < MAX_REPORTED {
        list.push(item);
    }
}

impl Checker {
    /// Checks `records` (in any order: they are sorted stably by `at_us`
    /// first). Holdings never released last until `end_us`, or until the
    /// latest record if that is later or `end_us` is `None`.
    pub fn new(records: &[Record], end_us: Option<u64>) -> Self {
        let mut records: Vec<&Record> = records.iter().collect();
        records.sort_by_key(|r| r.at_us());
        let start_us = records.first().map_or(0, |r| r.at_us());
        let last = records.last().map_or(start_us, |r| r.at_us());
        let end_us = end_us.map_or(last, |e| e.max(last));

        let mut c = Checker {
            holdings: Vec::new(),
            violation_count: 0,
            violations: Vec::new(),
            fencing_count: 0,
            fencing: Vec::new(),
            anomaly_count: 0,
            anomalies: Vec::new(),
            covered: Vec::new(),
            covered_before: Vec::new(),
            start_us,
            end_us,
            stand_downs: StandDowns::default(),
            joins: Vec::new(),
            owns: 0,
            releases: 0,
            faults: 0,
            leaves: 0,
        };
        // Worker ids parallel to `holdings`, for fencing.
        let mut holder: Vec<usize> = Vec::new();
        // Own-without-release pairs (old, new), resolved once ends are known.
        let mut replaced: Vec<(usize, usize)> = Vec::new();
        c.reconstruct(&records, &mut holder, &mut replaced);
        for (old, new) in replaced {
            let (first, second) = (&c.holdings[old], &c.holdings[new]);
            c.violation_count += 1;
            push_capped(
                &mut c.violations,
                Violation {
                    kind: ViolationKind::OwnWithoutRelease,
                    first: first.clone(),
                    second: second.clone(),
                    start_us: second.start_us,
                    overlap_us: 0,
                },
            );
        }
        c.sweep();
        c.violations.sort_by_key(|v| v.start_us);
        c.check_fencing(&holder);
        c
    }

    fn anomaly(&mut self, kind: AnomalyKind, worker: &str, i: u32, n: u32, at_us: u64) {
        self.anomaly_count += 1;
        push_capped(
            &mut self.anomalies,
            Anomaly {
                kind,
                worker: worker.to_string(),
                i,
                n,
                at_us,
            },
        );
    }

    fn close(&mut self, open: Open, at: u64, end: HoldingEnd) {
        let h = &mut self.holdings[open.index];
        h.end_us = at.max(h.start_us);
        h.end = end;
    }

    /// One pass over the records in time order: holdings, anomalies,
    /// stand-downs, joins and counts.
    fn reconstruct(
        &mut self,
        records: &[&Record],
        holder: &mut Vec<usize>,
        replaced: &mut Vec<(usize, usize)>,
    ) {
        let mut ids: HashMap<&str, usize> = HashMap::new();
        let mut states: Vec<WorkerState> = Vec::new();
        for record in records {
            let Some(worker) = record.worker() else {
                self.faults += 1;
                continue;
            };
            let w = match ids.get(worker) {
                Some(&w) => w,
                None => {
                    let w = states.len();
                    ids.insert(worker, w);
                    states.push(WorkerState::default());
                    w
                }
            };
            match **record {
                Record::Own {
                    i, n, token, at_us, ..
                } => {
                    self.owns += 1;
                    if n == 0 || i >= n {
                        self.anomaly(AnomalyKind::InvalidPair, worker, i, n, at_us);
                    }
                    let index = self.holdings.len();
                    if let Some(open) = states[w].open.take() {
                        match open.left_at {
                            Some(left) => self.close(open, left, HoldingEnd::Left),
                            None => {
                                replaced.push((open.index, index));
                                self.close(open, at_us, HoldingEnd::Replaced);
                            }
                        }
                    }
                    let state = &mut states[w];
                    if let Some(released) = state.last_release.take() {
                        let idle = at_us - released;
                        let sd = &mut self.stand_downs;
                        sd.count += 1;
                        sd.total_idle_us += idle;
                        sd.max_idle_us = sd.max_idle_us.max(idle);
                        *sd.per_worker_idle_us.entry(worker.to_string()).or_default() += idle;
                    }
                    if let Some(j) = state.pending_join.take() {
                        self.joins[j].own_us = Some(at_us);
                    }
                    state.open = Some(Open {
                        index,
                        left_at: None,
                    });
                    self.holdings.push(Holding {
                        worker: worker.to_string(),
                        i,
                        n,
                        token,
                        start_us: at_us,
                        end_us: u64::MAX,
                        end: HoldingEnd::EndOfHistory,
                    });
                    holder.push(w);
                }
                Record::Release { i, n, at_us, .. } => {
                    self.releases += 1;
                    match states[w].open.take() {
                        Some(open) => {
                            let held = &self.holdings[open.index];
                            let (held_i, held_n) = (held.i, held.n);
                            if (held_i, held_n) != (i, n) {
                                self.anomaly(
                                    AnomalyKind::ReleaseMismatch { held_i, held_n },
                                    worker,
                                    i,
                                    n,
                                    at_us,
                                );
                            }
                            if open.left_at.is_none() {
                                states[w].last_release = Some(at_us);
                            }
                            self.close(open, at_us, HoldingEnd::Released);
                        }
                        None => self.anomaly(AnomalyKind::ReleaseWithoutOwn, worker, i, n, at_us),
                    }
                }
                Record::Join { at_us, .. } => {
                    let state = &mut states[w];
                    if let Some(open) = state.open.take_if(|o| o.left_at.is_some()) {
                        let left = open.left_at.unwrap_or(at_us);
                        self.close(open, left, HoldingEnd::Left);
                    }
                    let state = &mut states[w];
                    state.last_release = None;
                    state.pending_join = Some(self.joins.len());
                    self.joins.push(JoinToOwn {
                        worker: worker.to_string(),
                        join_us: at_us,
                        own_us: None,
                    });
                }
                Record::Leave { at_us, .. } => {
                    self.leaves += 1;
                    let state = &mut states[w];
                    if let Some(open) = &mut state.open {
                        open.left_at.get_or_insert(at_us);
                    }
                    state.last_release = None;
                    state.pending_join = None;
                }
                Record::Fault { .. } => self.faults += 1,
            }
        }
        let end = self.end_us;
        for state in &mut states {
            if let Some(open) = state.open.take() {
                match open.left_at {
                    Some(left) => self.close(open, left, HoldingEnd::Left),
                    None => self.close(open, end, HoldingEnd::EndOfHistory),
                }
            }
        }
    }

    /// Exclusivity and coverage: one sweep over the sorted boundaries of the
    /// holdings of positive length (ends before starts at the same instant,
    /// so half-open intervals that touch do not overlap).
    fn sweep(&mut self) {
        let mut bounds: Vec<(u64, bool, usize)> = Vec::with_capacity(2 * self.holdings.len());
        for (k, h) in self.holdings.iter().enumerate() {
            if h.end_us > h.start_us {
                bounds.push((h.start_us, true, k));
                bounds.push((h.end_us, false, k));
            }
        }
        bounds.sort_unstable();

        // Active holdings as (n, i, index), for listing conflicts in order.
        let mut active: BTreeSet<(u32, u32, usize)> = BTreeSet::new();
        let mut per_n: HashMap<u32, u64> = HashMap::new();
        let mut per_slot: HashMap<(u32, u32), u64> = HashMap::new();
        // Per n: how many slots i < n are held by exactly one holding.
        let mut exactly_one: HashMap<u32, u64> = HashMap::new();
        let mut covered_since: Option<u64> = None;

        let mut k = 0;
        while k < bounds.len() {
            let t = bounds[k].0;
            while k < bounds.len() && bounds[k].0 == t {
                let (_, is_start, idx) = bounds[k];
                k += 1;
                let (i, n) = (self.holdings[idx].i, self.holdings[idx].n);
                if is_start {
                    self.conflicts(&active, &per_n, &per_slot, idx);
                    active.insert((n, i, idx));
                    *per_n.entry(n).or_default() += 1;
                    let count = per_slot.entry((n, i)).or_default();
                    *count += 1;
                    if i < n {
                        let one = exactly_one.entry(n).or_default();
                        match *count {
                            1 => *one += 1,
                            2 => *one -= 1,
                            _ => {}
                        }
                    }
                } else {
                    active.remove(&(n, i, idx));
                    *per_n.entry(n).or_default() -= 1;
                    let count = per_slot.entry((n, i)).or_default();
                    *count -= 1;
                    if i < n {
                        let one = exactly_one.entry(n).or_default();
                        match *count {
                            0 => *one -= 1,
                            1 => *one += 1,
                            _ => {}
                        }
                    }
                }
            }
            let total = active.len() as u64;
            let full = total > 0
                && u32::try_from(total)
                    .ok()
                    .and_then(|n| exactly_one.get(&n))
                    .is_some_and(|&one| one == total);
            match (full, covered_since) {
                (true, None) => covered_since = Some(t),
                (false, Some(since)) => {
                    self.push_covered(since, t);
                    covered_since = None;
                }
                _ => {}
            }
        }
        // Every holding has ended by the last boundary, so nothing is still
        // covered here; kept for safety.
        if let Some(since) = covered_since {
            self.push_covered(since, self.end_us);
        }
        let mut total = 0;
        self.covered_before = self
            .covered
            .iter()
            .map(|&(a, b)| {
                let before = total;
                total += b - a;
                before
            })
            .collect();
        self.covered_before.push(total);
    }

    fn push_covered(&mut self, from: u64, to: u64) {
        if to <= from {
            return;
        }
        match self.covered.last_mut() {
            Some(last) if last.1 == from => last.1 = to,
            _ => self.covered.push((from, to)),
        }
    }

    /// Counts, and lists up to the cap, the active holdings that conflict with
    /// holding `idx`, which starts now.
    fn conflicts(
        &mut self,
        active: &BTreeSet<(u32, u32, usize)>,
        per_n: &HashMap<u32, u64>,
        per_slot: &HashMap<(u32, u32), u64>,
        idx: usize,
    ) {
        let (i, n) = (self.holdings[idx].i, self.holdings[idx].n);
        let other_n = active.len() as u64 - per_n.get(&n).copied().unwrap_or(0);
        let same = per_slot.get(&(n, i)).copied().unwrap_or(0);
        if other_n + same == 0 {
            return;
        }
        self.violation_count += other_n + same;
        let room = MAX_REPORTED.saturating_sub(self.violations.len());
        if room == 0 {
            return;
        }
        let others = active
            .range(..(n, 0, 0))
            .chain(active.range((n, i, 0)..=(n, i, usize::MAX)))
            .chain(
                active
                    .range((n.saturating_add(1), 0, 0)..)
                    .filter(|_| n < u32::MAX),
            )
            .take(room)
            .map(|&(_, _, other)| other)
            .collect::<Vec<_>>();
        for other in others {
            let (first, second) = (&self.holdings[other], &self.holdings[idx]);
            let kind = if first.n == second.n {
                ViolationKind::SameSlot
            } else {
                ViolationKind::MixedN
            };
            self.violations.push(Violation {
                kind,
                first: first.clone(),
                second: second.clone(),
                start_us: second.start_us,
                overlap_us: first.end_us.min(second.end_us) - second.start_us,
            });
        }
    }

    /// Fencing: in order of start (then token), each holding's token must be
    /// at least 2 above every earlier holding of another worker that shares a
    /// task with it. Keeps, per pair and per `n`, the two best tokens of two
    /// different workers.
    fn check_fencing(&mut self, holder: &[usize]) {
        let mut order: Vec<usize> = (0..self.holdings.len()).collect();
        order.sort_by_key(|&k| (self.holdings[k].start_us, self.holdings[k].token));
        let mut per_slot: HashMap<(u32, u32), Top2> = HashMap::new();
        let mut per_n: BTreeMap<u32, Top2> = BTreeMap::new();
        for k in order {
            let h = &self.holdings[k];
            let (i, n, token, w) = (h.i, h.n, h.token, holder[k]);
            let mut worst: Option<(u64, usize, usize)> =
                per_slot.get(&(n, i)).and_then(|t| t.best_except(w));
            for (_, top) in per_n.iter().filter(|(other, _)| **other != n) {
                if let Some(e) = top.best_except(w)
                    && worst.is_none_or(|b| e.0 > b.0)
                {
                    worst = Some(e);
                }
            }
            if let Some((best, earlier, _)) = worst
                && token < best.saturating_add(2)
            {
                self.fencing_count += 1;
                if self.fencing.len() < MAX_REPORTED {
                    self.fencing.push(FencingViolation {
                        earlier: self.holdings[earlier].clone(),
                        later: self.holdings[k].clone(),
                    });
                }
            }
            let entry = (token, k, w);
            per_slot.entry((n, i)).or_default().insert(entry);
            per_n.entry(n).or_default().insert(entry);
        }
    }

    /// Every holding, in order of start.
    pub fn holdings(&self) -> &[Holding] {
        &self.holdings
    }

    /// The instant of the first record (0 for an empty history).
    pub fn start_us(&self) -> u64 {
        self.start_us
    }

    /// The end of the history: the latest record, or the end passed in.
    pub fn end_us(&self) -> u64 {
        self.end_us
    }

    /// Exclusivity violations, exact count.
    pub fn violation_count(&self) -> u64 {
        self.violation_count
    }

    /// The first [`MAX_REPORTED`] exclusivity violations, by start.
    pub fn violations(&self) -> &[Violation] {
        &self.violations
    }

    /// Fencing violations, exact count.
    pub fn fencing_count(&self) -> u64 {
        self.fencing_count
    }

    /// The first [`MAX_REPORTED`] fencing violations, by the later
    /// holding's start.
    pub fn fencing_violations(&self) -> &[FencingViolation] {
        &self.fencing
    }

    /// Inconsistent lines, exact count.
    pub fn anomaly_count(&self) -> u64 {
        self.anomaly_count
    }

    /// The first [`MAX_REPORTED`] inconsistent lines, in time order.
    pub fn anomalies(&self) -> &[Anomaly] {
        &self.anomalies
    }

    /// The spans `[from, to)` of full coverage, sorted, disjoint and not
    /// touching.
    pub fn covered_spans(&self) -> &[(u64, u64)] {
        &self.covered
    }

    /// Coverage over the whole run, `[start_us, end_us)`.
    pub fn coverage(&self) -> Coverage {
        self.coverage_in(self.start_us, self.end_us)
    }

    /// Coverage over `[from_us, to_us)` (empty if `to_us <= from_us`).
    pub fn coverage_in(&self, from_us: u64, to_us: u64) -> Coverage {
        let to_us = to_us.max(from_us);
        let covered_us = self.covered_until(to_us) - self.covered_until(from_us);
        Coverage {
            from_us,
            to_us,
            covered_us,
            uncovered_us: to_us - from_us - covered_us,
        }
    }

    /// Total covered time before instant `t`.
    fn covered_until(&self, t: u64) -> u64 {
        // Spans that start before t.
        let k = self.covered.partition_point(|&(a, _)| a < t);
        if k == 0 {
            return 0;
        }
        let (a, b) = self.covered[k - 1];
        self.covered_before[k - 1] + b.min(t) - a
    }

    /// Releases followed by a re-own by the same worker.
    pub fn stand_downs(&self) -> &StandDowns {
        &self.stand_downs
    }

    /// Every `join`, in time order, with the worker's first own after it.
    pub fn join_to_own(&self) -> &[JoinToOwn] {
        &self.joins
    }

    /// Everything above in one value.
    pub fn summary(&self) -> Summary {
        Summary {
            violation_count: self.violation_count,
            violations: self.violations.clone(),
            fencing_count: self.fencing_count,
            fencing: self.fencing.clone(),
            anomaly_count: self.anomaly_count,
            anomalies: self.anomalies.clone(),
            coverage: self.coverage(),
            stand_downs: self.stand_downs.clone(),
            join_to_own: JoinStats::from_joins(&self.joins),
            owns: self.owns,
            releases: self.releases,
            faults: self.faults,
            joins: self.joins.len() as u64,
            leaves: self.leaves,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{History, LeaveHow};

    fn own(w: &str, i: u32, n: u32, token: u64, at: u64) -> Record {
        Record::own(w, i, n, token, at)
    }

    fn rel(w: &str, i: u32, n: u32, at: u64) -> Record {
        Record::release(w, i, n, at)
    }

    fn checker(records: Vec<Record>) -> Checker {
        Checker::new(&records, None)
    }

    #[test]
    fn two_workers_partitioning_two_slots_are_ok_and_covered() {
        let c = checker(vec![
            own("a", 0, 2, 10, 100),
            own("b", 1, 2, 10, 100),
            rel("a", 0, 2, 1000),
            rel("b", 1, 2, 1000),
        ]);
        let s = c.summary();
        assert!(s.is_ok(), "{s}");
        assert_eq!(
            (s.violation_count, s.fencing_count, s.anomaly_count),
            (0, 0, 0)
        );
        let cov = c.coverage_in(100, 1000);
        assert_eq!((cov.covered_us, cov.uncovered_us), (900, 0));
        assert_eq!(cov.fraction(), 1.0);
        assert_eq!(s.coverage, cov);
        assert_eq!(c.covered_spans(), &[(100, 1000)]);
        // A window reaching outside the run is uncovered there.
        let wide = c.coverage_in(0, 1100);
        assert_eq!((wide.covered_us, wide.uncovered_us), (900, 200));
        assert_eq!((s.owns, s.releases), (2, 2));
        assert!(
            s.to_string()
                .starts_with("checker: ok violations=0 fencing=0 ")
        );
    }

    #[test]
    fn same_slot_overlap_is_a_violation_with_its_length() {
        let c = checker(vec![
            own("a", 0, 2, 10, 100),
            own("b", 0, 2, 12, 300),
            rel("a", 0, 2, 500),
            rel("b", 0, 2, 900),
        ]);
        assert_eq!(c.violation_count(), 1);
        let v = &c.violations()[0];
        assert_eq!(v.kind, ViolationKind::SameSlot);
        assert_eq!(
            (v.first.worker.as_str(), v.second.worker.as_str()),
            ("a", "b")
        );
        assert_eq!((v.start_us, v.overlap_us), (300, 200));
        assert_eq!(c.fencing_count(), 0);
        let s = c.summary();
        assert!(!s.is_ok());
        assert!(
            s.to_string()
                .starts_with("checker: VIOLATION violations=1 "),
            "{s}"
        );
        // The overlap is not coverage: two holders of one slot, none of 1.
        assert_eq!(c.coverage().covered_us, 0);
    }

    #[test]
    fn overlap_across_different_n_is_a_violation() {
        let c = checker(vec![
            own("a", 0, 2, 10, 0),
            own("b", 2, 3, 12, 400),
            rel("a", 0, 2, 500),
            rel("b", 2, 3, 800),
        ]);
        assert_eq!(c.violation_count(), 1);
        let v = &c.violations()[0];
        assert_eq!(v.kind, ViolationKind::MixedN);
        assert_eq!((v.start_us, v.overlap_us), (400, 100));
        assert_eq!((v.first.n, v.second.n), (2, 3));
    }

    #[test]
    fn overlap_counts_are_exact_for_many_holders() {
        // Three holders of one slot at once: three overlapping pairs.
        let c = checker(vec![
            own("a", 0, 1, 1, 0),
            own("b", 0, 1, 3, 10),
            own("c", 0, 1, 5, 20),
            rel("a", 0, 1, 100),
            rel("b", 0, 1, 100),
            rel("c", 0, 1, 100),
        ]);
        assert_eq!(c.violation_count(), 3);
        let lens: Vec<_> = c.violations().iter().map(|v| v.overlap_us).collect();
        assert_eq!(lens, vec![90, 80, 80]);
    }

    #[test]
    fn back_to_back_handover_is_not_a_violation() {
        for records in [
            vec![
                own("a", 0, 1, 10, 0),
                rel("a", 0, 1, 500),
                own("b", 0, 1, 12, 500),
                rel("b", 0, 1, 900),
            ],
            // Same instant, the other way round in the file.
            vec![
                own("a", 0, 1, 10, 0),
                own("b", 0, 1, 12, 500),
                rel("a", 0, 1, 500),
                rel("b", 0, 1, 900),
            ],
        ] {
            let c = checker(records);
            let s = c.summary();
            assert!(s.is_ok(), "{s}");
            assert_eq!(s.coverage.covered_us, 900);
            assert_eq!(c.covered_spans(), &[(0, 900)]);
        }
    }

    #[test]
    fn late_written_release_with_earlier_instant_is_paired_by_time() {
        // a stalled: its lease ended at 500 (its deadline) but it only wrote
        // the release after b had already taken the slot at 600.
        let c = checker(vec![
            own("a", 0, 1, 10, 0),
            own("b", 0, 1, 12, 600),
            rel("a", 0, 1, 500),
            rel("b", 0, 1, 1000),
        ]);
        let s = c.summary();
        assert!(s.is_ok(), "{s}");
        assert_eq!(c.holdings()[0].end_us, 500);
        assert_eq!(c.holdings()[0].end, HoldingEnd::Released);
        assert_eq!((s.coverage.covered_us, s.coverage.uncovered_us), (900, 100));
        assert_eq!(s.coverage.fraction(), 0.9);
        assert_eq!(c.covered_spans(), &[(0, 500), (600, 1000)]);
        assert_eq!(s.stand_downs.count, 0);

        // Had the release really come at its line's place (after b's own), the
        // holdings would overlap: the instant, not the file order, decides.
        let c = checker(vec![
            own("a", 0, 1, 10, 0),
            own("b", 0, 1, 12, 600),
            rel("a", 0, 1, 700),
            rel("b", 0, 1, 1000),
        ]);
        assert_eq!(c.violation_count(), 1);
        assert_eq!(c.violations()[0].overlap_us, 100);
    }

    #[test]
    fn fencing_tokens_must_be_two_apart_and_ordered() {
        let run = |t1: u64, t2: u64| {
            checker(vec![
                own("a", 0, 1, t1, 0),
                rel("a", 0, 1, 100),
                own("b", 0, 1, t2, 100),
                rel("b", 0, 1, 200),
            ])
        };
        let c = run(10, 11);
        assert_eq!(c.fencing_count(), 1);
        let f = &c.fencing_violations()[0];
        assert_eq!((f.earlier.token, f.later.token), (10, 11));
        assert_eq!(
            (f.earlier.worker.as_str(), f.later.worker.as_str()),
            ("a", "b")
        );
        assert_eq!(c.violation_count(), 0);
        assert!(!c.summary().is_ok());
        assert!(c.summary().to_string().contains(" fencing=1 "));

        assert_eq!(run(10, 12).fencing_count(), 0);
        assert!(run(10, 12).summary().is_ok());
        assert_eq!(run(10, 10).fencing_count(), 1);
        assert_eq!(
            run(20, 12).fencing_count(),
            1,
            "a later lease with a smaller token"
        );

        // Different n always shares a task.
        let c = checker(vec![
            own("a", 0, 2, 10, 0),
            rel("a", 0, 2, 100),
            own("b", 1, 3, 11, 100),
            rel("b", 1, 3, 200),
        ]);
        assert_eq!(c.fencing_count(), 1);
        // Same n, different i: no shared task, no constraint.
        let c = checker(vec![
            own("a", 0, 2, 10, 0),
            rel("a", 0, 2, 100),
            own("b", 1, 2, 10, 100),
            rel("b", 1, 2, 200),
        ]);
        assert_eq!(c.fencing_count(), 0);
        // The same worker may go on with the next token.
        let c = checker(vec![
            own("a", 0, 1, 10, 0),
            rel("a", 0, 1, 100),
            own("a", 0, 1, 11, 150),
            rel("a", 0, 1, 200),
        ]);
        assert_eq!(c.fencing_count(), 0);
        // The check is against the largest earlier token of another worker,
        // even when a third worker's lease came in between.
        let c = checker(vec![
            own("a", 0, 1, 30, 0),
            rel("a", 0, 1, 100),
            own("b", 0, 2, 40, 100),
            rel("b", 0, 2, 200),
            own("a", 0, 1, 41, 200),
            rel("a", 0, 1, 300),
        ]);
        assert_eq!(c.fencing_count(), 1);
        assert_eq!(c.fencing_violations()[0].earlier.worker, "b");
    }

    #[test]
    fn coverage_stand_downs_and_join_to_own_by_hand() {
        // a, b hold n=2 until 1000/1200; c joins at 900; all three re-own
        // on n=3 at 2000, 2100, 2050; c ends first at 2800.
        let history = History::new(vec![
            Record::join("a", 0),
            Record::join("b", 0),
            own("a", 0, 2, 5, 0),
            own("b", 1, 2, 5, 0),
            Record::join("c", 900),
            rel("a", 0, 2, 1000),
            Record::fault("restart", 1100),
            rel("b", 1, 2, 1200),
            own("a", 0, 3, 9, 2000),
            own("c", 2, 3, 9, 2050),
            own("b", 1, 3, 9, 2100),
            Record::join("d", 2500),
            rel("c", 2, 3, 2800),
            rel("a", 0, 3, 3000),
            rel("b", 1, 3, 3000),
        ]);
        let c = Checker::new(history.records(), None);
        let s = c.summary();
        assert!(s.is_ok(), "{s}");
        // Full: [0, 1000) on n=2, [2100, 2800) on n=3.
        assert_eq!(c.covered_spans(), &[(0, 1000), (2100, 2800)]);
        assert_eq!((s.coverage.from_us, s.coverage.to_us), (0, 3000));
        assert_eq!(
            (s.coverage.covered_us, s.coverage.uncovered_us),
            (1700, 1300)
        );
        let w = c.coverage_in(500, 2500);
        assert_eq!((w.covered_us, w.uncovered_us), (900, 1100));
        assert_eq!(w.fraction(), 0.45);
        assert_eq!(c.coverage_in(1000, 2100).covered_us, 0);
        assert_eq!(c.coverage_in(2500, 2500).fraction(), 1.0);

        assert_eq!(s.stand_downs.count, 2);
        assert_eq!(s.stand_downs.total_idle_us, 1000 + 900);
        assert_eq!(s.stand_downs.max_idle_us, 1000);
        assert_eq!(s.stand_downs.per_worker_idle_us["a"], 1000);
        assert_eq!(s.stand_downs.per_worker_idle_us["b"], 900);

        let delays: Vec<_> = c
            .join_to_own()
            .iter()
            .map(|j| (j.worker.as_str(), j.delay_us()))
            .collect();
        assert_eq!(
            delays,
            vec![
                ("a", Some(0)),
                ("b", Some(0)),
                ("c", Some(1150)),
                ("d", None)
            ]
        );
        assert_eq!(
            s.join_to_own,
            JoinStats {
                joins: 4,
                never_owned: 1,
                p50_us: Some(0),
                p90_us: Some(1150),
                max_us: Some(1150),
            }
        );
        assert_eq!(
            (s.owns, s.releases, s.faults, s.joins, s.leaves),
            (5, 5, 1, 4, 0)
        );
        assert_eq!(
            s.to_string(),
            "checker: ok violations=0 fencing=0 anomalies=0 coverage=0.5667 uncovered_ms=1.3 \
             owns=5 releases=5 faults=1 joins=4 leaves=0 standdowns=2 standdown_idle_ms=1.9 \
             join_to_own_p50_ms=0.0 join_to_own_p90_ms=1.1 join_to_own_max_ms=1.1 never_owned=1"
        );
    }

    #[test]
    fn unreleased_holding_lasts_until_the_end() {
        let history = vec![own("a", 0, 1, 1, 100), Record::fault("stall", 400)];
        let c = Checker::new(&history, None);
        assert_eq!(c.holdings()[0].end_us, 400);
        assert_eq!(c.holdings()[0].end, HoldingEnd::EndOfHistory);
        assert_eq!(c.coverage().covered_us, 300);
        let c = Checker::new(&history, Some(1000));
        assert_eq!(c.holdings()[0].end_us, 1000);
        assert_eq!(c.coverage().covered_us, 900);
        assert_eq!(c.coverage().uncovered_us, 0);
        // An earlier end than the last record does not cut the history.
        assert_eq!(Checker::new(&history, Some(200)).end_us(), 400);
        // An empty history is ok and trivially covered.
        let empty = check(&[], None);
        assert!(empty.is_ok());
        assert_eq!(empty.coverage.fraction(), 1.0);
    }

    #[test]
    fn own_without_release_is_a_violation() {
        let c = checker(vec![
            own("a", 0, 2, 1, 0),
            own("a", 1, 2, 1, 100),
            rel("a", 1, 2, 200),
        ]);
        assert_eq!(c.violation_count(), 1);
        let v = &c.violations()[0];
        assert_eq!(v.kind, ViolationKind::OwnWithoutRelease);
        assert_eq!(
            (v.first.i, v.first.end_us, v.first.end),
            (0, 100, HoldingEnd::Replaced)
        );
        assert_eq!((v.second.i, v.start_us), (1, 100));
        assert_eq!(c.anomaly_count(), 0);
    }

    #[test]
    fn inconsistent_lines_are_anomalies() {
        let c = checker(vec![
            rel("a", 0, 1, 10),
            own("b", 0, 2, 1, 20),
            rel("b", 1, 2, 30),
            own("c", 3, 3, 5, 40),
            rel("c", 3, 3, 50),
        ]);
        let kinds: Vec<_> = c.anomalies().iter().map(|a| a.kind).collect();
        assert_eq!(
            kinds,
            vec![
                AnomalyKind::ReleaseWithoutOwn,
                AnomalyKind::ReleaseMismatch {
                    held_i: 0,
                    held_n: 2
                },
                AnomalyKind::InvalidPair,
            ]
        );
        // The mismatched release still ends b's holding.
        assert_eq!(c.holdings()[0].end_us, 30);
        let s = c.summary();
        assert_eq!(s.anomaly_count, 3);
        assert!(!s.is_ok());
        assert!(
            s.to_string()
                .starts_with("checker: VIOLATION violations=0 fencing=0 anomalies=3"),
            "{s}"
        );
    }

    #[test]
    fn leave_ends_a_holding_unless_a_release_follows() {
        let base = vec![
            Record::join("a", 0),
            own("a", 0, 1, 1, 0),
            Record::leave("a", LeaveHow::Crash, 100),
            own("b", 0, 1, 3, 200),
            rel("b", 0, 1, 400),
        ];
        let c = checker(base.clone());
        assert!(c.summary().is_ok(), "{}", c.summary());
        assert_eq!(
            (c.holdings()[0].end_us, c.holdings()[0].end),
            (100, HoldingEnd::Left)
        );
        assert_eq!(c.summary().leaves, 1);

        // The simulator wrote the crashed worker's lease deadline as its
        // release: that instant counts, and here it overlaps b.
        let mut late = base.clone();
        late.push(rel("a", 0, 1, 250));
        let c = checker(late);
        assert_eq!(c.holdings()[0].end_us, 250);
        assert_eq!(c.violation_count(), 1);
        assert_eq!(c.violations()[0].overlap_us, 50);

        // A rejoin ends the old holding at the leave; no stand-down counted.
        let mut rejoin = base;
        rejoin.push(Record::join("a", 500));
        rejoin.push(own("a", 0, 1, 5, 600));
        rejoin.push(rel("a", 0, 1, 700));
        let c = checker(rejoin);
        assert!(c.summary().is_ok(), "{}", c.summary());
        assert_eq!(c.stand_downs().count, 0);
        assert_eq!(c.join_to_own()[1].delay_us(), Some(100));
    }

    #[test]
    fn large_history_checks_quickly() {
        // 5 workers rotate through 5 slots for 20,000 intervals: 200,000
        // records, every handover back to back.
        let (workers, intervals, len) = (5u32, 20_000u64, 1_000u64);
        let mut records = Vec::new();
        for k in 0..intervals {
            for w in 0..workers {
                let i = (w + k as u32) % workers;
                let name = format!("w{w}");
                records.push(own(&name, i, workers, 2 * k, k * len));
                records.push(rel(&name, i, workers, (k + 1) * len));
            }
        }
        let history = History::new(records);
        let s = check(history.records(), None);
        assert!(s.is_ok(), "{s}");
        assert_eq!(s.coverage.fraction(), 1.0);
        assert_eq!(s.owns, u64::from(workers) * intervals);
        assert_eq!(s.stand_downs.count, u64::from(workers) * (intervals - 1));
        assert_eq!(s.stand_downs.total_idle_us, 0);
    }
}
