//! `lease inspect`: what a group's interval keys say right now.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use lease_core::pushdown::Buckets;
use lease_core::{GroupRules, Mapping, Mode, interval_key, rules_key};
use lease_sim::{ClosedEntry, EntryKind, closed_set_positions};
use redis::{Connection, RedisError};

use crate::{CliError, Group, client, connect_error, options, redact, validate};

/// Options of `lease inspect`.
#[derive(Args, Debug)]
pub(crate) struct InspectArgs {
    #[command(flatten)]
    pub(crate) group: Group,

    /// The group's interval length in milliseconds. With it, the keys shown
    /// are those of intervals k, k-1, k-2 and k-3, with k computed from the
    /// server's TIME; without it, the four newest keys of the group (SCAN).
    #[arg(long, value_name = "MS")]
    pub(crate) interval: Option<u64>,

    /// Counting mode: ranked or arrival. Detected from the key types if not
    /// given.
    #[arg(long)]
    mode: Option<Mode>,

    /// The bucket count the group's workers use (task t is in bucket
    /// t % B): the shares of the task-set view are over buckets 0..B.
    #[arg(long, default_value_t = 1024, value_name = "B")]
    buckets: u32,
}

/// What one interval key holds.
#[derive(Debug, PartialEq)]
enum Content {
    Missing,
    /// Arrival: the counter.
    Counter(i64),
    /// Ranked: the set's entries with their positions.
    Ranked(RankedSet),
    Other(String),
}

/// A Ranked interval's set: its entries (registered, reserved and left,
/// rule 19) with the positions they have in it closed (rule 15; in the
/// open interval, the positions it would give if it closed now).
#[derive(Debug, Default, PartialEq)]
struct RankedSet {
    /// By position, then the left entries (in Redis order).
    entries: Vec<ClosedEntry>,
    /// The counted entries (registered and reserved, `ZCOUNT 0 +inf`): the
    /// `n` of every pair the set implies.
    size: u32,
    /// Each member's index in `entries` (the views look members up in
    /// three sets: linear scans were quadratic in the group's size).
    index: HashMap<String, usize>,
}

impl RankedSet {
    /// From the set's `(member, score)` pairs, as `ZRANGE WITHSCORES` lists
    /// them.
    fn new(members: &[(String, f64)]) -> Self {
        let mut entries = closed_set_positions(members);
        // Stable: the left entries stay in Redis order, after the others.
        entries.sort_by_key(|e| (e.position.is_none(), e.position));
        let size = entries.iter().filter(|e| e.position.is_some()).count();
        let index = entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.member.clone(), i))
            .collect();
        Self {
            entries,
            size: u32::try_from(size).unwrap_or(u32::MAX),
            index,
        }
    }

    /// The counted entries, by position.
    fn counted(&self) -> impl Iterator<Item = &ClosedEntry> {
        self.entries.iter().filter(|e| e.position.is_some())
    }

    /// `member`'s entry, if it has one.
    fn entry(&self, member: &str) -> Option<&ClosedEntry> {
        self.entries.get(*self.index.get(member)?)
    }

    /// The pair `(position, size)` the set implies for `member`: none for
    /// a left entry or a member without an entry.
    fn pair(&self, member: &str) -> Option<(u32, u32)> {
        Some((self.entry(member)?.position?, self.size))
    }

    /// The number of left entries.
    fn left(&self) -> usize {
        self.entries.len() - self.counted().count()
    }
}

impl Content {
    fn mode(&self) -> Option<Mode> {
        match self {
            Content::Counter(_) => Some(Mode::Arrival),
            Content::Ranked(_) => Some(Mode::Ranked),
            _ => None,
        }
    }

    fn count(&self) -> Option<i64> {
        match self {
            Content::Counter(c) => Some(*c),
            Content::Ranked(set) => Some(i64::from(set.size)),
            _ => None,
        }
    }
}

/// One interval key and what it holds.
struct Interval {
    /// `k`, `k-1`, ... relative to the server's current interval, if known.
    label: String,
    key: String,
    content: Content,
    /// `PTTL`: milliseconds, -1 for no expiry, -2 for a missing key.
    pttl: i64,
}

pub(crate) fn inspect(args: &InspectArgs) -> Result<ExitCode, CliError> {
    let (mut conn, shown) = open(args)?;
    let snapshot = gather(&mut conn, args, &shown)?;
    print!("{}", snapshot.text(args));
    Ok(ExitCode::SUCCESS)
}

/// Validates the options and opens a connection with 5 s timeouts.
pub(crate) fn open(args: &InspectArgs) -> Result<(Connection, String), CliError> {
    let group = &args.group;
    let opts = options(group, args.interval, args.mode);
    validate(&opts)?;
    Buckets::from_owned(args.buckets, Vec::new())
        .map_err(|e| CliError::Usage(format!("--buckets: {e}")))?;
    let shown = redact(&group.redis);
    let client = client(group)?;
    let conn = client
        .get_connection_with_timeout(Duration::from_secs(3))
        .map_err(|e| connect_error(&shown, &e))?;
    let timeout = Some(Duration::from_secs(5));
    let _ = conn.set_read_timeout(timeout);
    let _ = conn.set_write_timeout(timeout);
    Ok((conn, shown))
}

/// What a group's keys say at one instant.
pub(crate) struct Snapshot {
    shown: String,
    sec: u64,
    usec: u64,
    server_ms: u64,
    intervals: Vec<Interval>,
    rules: Option<GroupRules>,
    rules_line: String,
}

/// Reads the group's interval keys (k to k-3 with an interval, else the
/// four newest), their TTLs and the rules record.
pub(crate) fn gather(
    conn: &mut Connection,
    args: &InspectArgs,
    shown: &str,
) -> Result<Snapshot, CliError> {
    let group = &args.group;
    let failed = |e: RedisError| CliError::Runtime(format!("{shown}: {e}"));
    let (sec, usec): (u64, u64) = redis::cmd("TIME").query(conn).map_err(failed)?;
    let server_ms = sec * 1000 + usec / 1000;
    let (prefix, name) = (&group.prefix, &group.name);
    let ks: Vec<(u64, String)> = match args.interval {
        Some(l) => {
            let k = server_ms / l;
            (0..4)
                .filter(|d| *d <= k)
                .map(|d| {
                    let label = if d == 0 {
                        "k".to_owned()
                    } else {
                        format!("k-{d}")
                    };
                    (k - d, label)
                })
                .collect()
        }
        None => newest_keys(conn, prefix, name)
            .map_err(failed)?
            .into_iter()
            .enumerate()
            .map(|(d, k)| {
                let label = if d == 0 {
                    "newest".to_owned()
                } else {
                    format!("newest-{d}")
                };
                (k, label)
            })
            .collect(),
    };
    let mut intervals = Vec::with_capacity(ks.len());
    for (k, label) in ks {
        let key = interval_key(prefix, name, k);
        let content = read_key(conn, &key).map_err(failed)?;
        let pttl: i64 = redis::cmd("PTTL").arg(&key).query(conn).map_err(failed)?;
        intervals.push(Interval {
            label,
            key,
            content,
            pttl,
        });
    }
    let (rules_line, rules) = read_rules(conn, &rules_key(prefix, name)).map_err(failed)?;
    Ok(Snapshot {
        shown: shown.to_owned(),
        sec,
        usec,
        server_ms,
        intervals,
        rules,
        rules_line,
    })
}

impl Snapshot {
    /// The report, as text.
    pub(crate) fn text(&self, args: &InspectArgs) -> String {
        let task_sets = self.rules.is_some_and(|r| r.mapping == Mapping::Consistent);
        let mut out = report(
            &self.shown,
            args,
            task_sets,
            self.sec,
            self.usec,
            self.server_ms,
            &self.intervals,
        );
        out.insert_str(rules_line_at(&out), &self.rules_line);
        if let Some(view) = self.tasks(args) {
            let _ = writeln!(out);
            out.push_str(&view.text());
        }
        out
    }

    /// The task-set view (needs the interval, Ranked keys and a mapping:
    /// the rules record's, or the consistent one of the default handover).
    pub(crate) fn tasks(&self, args: &InspectArgs) -> Option<TaskView> {
        args.interval?;
        let [_, k1, k2, k3] = self.intervals.as_slice() else {
            return None;
        };
        let mapping = self.rules.map_or(Mapping::Consistent, |r| r.mapping);
        TaskView::new(mapping, args.buckets, &k1.content, &k2.content, &k3.content)
    }

    /// One JSON object: the server time, the interval, and the task-set
    /// view (null without one).
    pub(crate) fn json(&self, args: &InspectArgs) -> serde_json::Value {
        let view = self.tasks(args);
        serde_json::json!({
            "server_time_us": self.sec * 1_000_000 + self.usec,
            "interval_ms": args.interval,
            "k": args.interval.map(|l| self.server_ms / l),
            "rules": self.rules.map(|r| r.encode()),
            "keys": self.intervals.iter().map(|iv| serde_json::json!({
                "label": iv.label,
                "key": iv.key,
                "pttl_ms": iv.pttl,
                // A Ranked set's counted members by position (the index is
                // the position), or an Arrival counter.
                "members": match &iv.content {
                    Content::Ranked(set) => serde_json::json!(set.counted().map(|e| &e.member).collect::<Vec<_>>()),
                    Content::Counter(c) => serde_json::json!(c),
                    _ => serde_json::Value::Null,
                },
                "size": match &iv.content {
                    Content::Ranked(set) => serde_json::json!(set.size),
                    _ => serde_json::Value::Null,
                },
                "entries": match &iv.content {
                    Content::Ranked(set) => serde_json::json!(set.entries.iter().map(|e| serde_json::json!({
                        "member": e.member,
                        "score": e.score,
                        "kind": e.kind.as_str(),
                        "position": e.position,
                    })).collect::<Vec<_>>()),
                    _ => serde_json::Value::Null,
                },
            })).collect::<Vec<_>>(),
            "tasks": view.map(|v| v.json()),
        })
    }
}

/// What each worker of a Ranked group holds, as far as Redis can tell: a
/// worker's parts are its own state, but each is made of its positions in
/// the closed sets (rule 15's positions, not ranks; a left entry has none).
/// The reply to a registration in `k` certifies the part
/// `T(p(k-1)) ∩ T(p(k-2))` (under whole pairs only when the two positions
/// are equal, rule 5; under task sets any two, rule 13), and the part the
/// interval before certified, `T(p(k-2)) ∩ T(p(k-3))`, may still be
/// draining. A member whose entry in `k-1` is only a reservation is
/// granted short (rule 19): until the end of `k`. Rule 19's inherited
/// positions (a crashed keeper's, added to a survivor's part under task
/// sets) are not shown.
pub(crate) struct TaskView {
    mapping: Mapping,
    buckets: u32,
    members: Vec<Holding>,
    nobody: usize,
}

/// One member of `k-1` or `k-2`.
pub(crate) struct Holding {
    member: String,
    /// Positions `(i, n)` in `k-3`, `k-2`, `k-1`.
    positions: [Option<(u32, u32)>; 3],
    /// The part the registration in `k` is answered with, `[i, n, pi, pn]`.
    part: Option<[u32; 4]>,
    /// Buckets in that part.
    held: usize,
    /// Buckets of the part before that may still drain, beyond `held`.
    draining: usize,
    /// Its entry in `k-1` is only a reservation: a grant from `k` ends with
    /// `k` (rule 19).
    short: bool,
}

impl TaskView {
    fn new(
        mapping: Mapping,
        buckets: u32,
        k1: &Content,
        k2: &Content,
        k3: &Content,
    ) -> Option<Self> {
        let empty = RankedSet::default();
        let (r1, r2, r3) = (
            ranked_or_empty(k1, &empty)?,
            ranked_or_empty(k2, &empty)?,
            ranked_or_empty(k3, &empty)?,
        );
        let part = |newer: Option<(u32, u32)>, older: Option<(u32, u32)>| -> Option<[u32; 4]> {
            let ((i, n), (pi, pn)) = (newer?, older?);
            // Whole pairs grant equal positions only (rule 5).
            (mapping == Mapping::Consistent || (i, n) == (pi, pn)).then_some([i, n, pi, pn])
        };
        let holds = |p: Option<[u32; 4]>, b: u64| {
            p.is_some_and(|[i, n, pi, pn]| mapping.owner(b, n) == i && mapping.owner(b, pn) == pi)
        };
        // The counted members of k-1 by position, then those of k-2 not
        // counted in k-1 (what they held may still drain).
        let mut seen: Vec<&str> = r1.counted().map(|e| e.member.as_str()).collect();
        seen.extend(
            r2.counted()
                .map(|e| e.member.as_str())
                .filter(|m| r1.pair(m).is_none()),
        );
        let mut covered = vec![false; buckets as usize];
        let members = seen
            .into_iter()
            .map(|member| {
                let positions = [r3.pair(member), r2.pair(member), r1.pair(member)];
                let newest = part(positions[2], positions[1]);
                let before = part(positions[1], positions[0]);
                let (mut held, mut draining) = (0, 0);
                for b in 0..buckets {
                    let (now, then) = (holds(newest, u64::from(b)), holds(before, u64::from(b)));
                    held += usize::from(now);
                    draining += usize::from(then && !now);
                    if now || then {
                        covered[b as usize] = true;
                    }
                }
                Holding {
                    member: member.to_owned(),
                    positions,
                    part: newest,
                    held,
                    draining,
                    short: r1
                        .entry(member)
                        .is_some_and(|e| e.kind == EntryKind::Reserved),
                }
            })
            .collect();
        Some(Self {
            mapping,
            buckets,
            members,
            nobody: covered.iter().filter(|c| !**c).count(),
        })
    }

    fn share(&self, count: usize) -> f64 {
        count as f64 / f64::from(self.buckets)
    }

    fn text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "tasks        {} mapping, buckets 0..{}: the part each member's registration in k is \
             answered with, T(p(k-1)) ∩ T(p(k-2)), and what may still drain of the one before",
            self.mapping, self.buckets
        );
        let _ = writeln!(
            out,
            "             member                            k-3      k-2      k-1      part           share  draining"
        );
        let pos = |p: Option<(u32, u32)>| p.map_or("-".to_owned(), |(i, n)| format!("({i}, {n})"));
        for h in &self.members {
            let part = match h.part {
                Some([i, n, pi, pn]) if (i, n) == (pi, pn) => format!("T({i},{n})"),
                Some([i, n, pi, pn]) => format!("T({i},{n})∩T({pi},{pn})"),
                None => "nothing".to_owned(),
            };
            let short = if h.short && h.part.is_some() {
                "  short: only reserved in k-1, a grant from k ends with k (rule 19)"
            } else {
                ""
            };
            let _ = writeln!(
                out,
                "             {:<32}  {:<7}  {:<7}  {:<7}  {part:<13}  {:.3}  {:.3}{short}",
                h.member,
                pos(h.positions[0]),
                pos(h.positions[1]),
                pos(h.positions[2]),
                self.share(h.held),
                self.share(h.draining),
            );
        }
        let _ = writeln!(
            out,
            "             held by nobody: {:.3} ({} of {} buckets in no member's part or drain)",
            self.share(self.nobody),
            self.nobody,
            self.buckets
        );
        out
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "mapping": self.mapping.as_str(),
            "buckets": self.buckets,
            "members": self.members.iter().map(|h| serde_json::json!({
                "member": h.member,
                "k3": h.positions[0].map(|(i, n)| [i, n]),
                "k2": h.positions[1].map(|(i, n)| [i, n]),
                "k1": h.positions[2].map(|(i, n)| [i, n]),
                "part": h.part,
                "share": self.share(h.held),
                "draining": self.share(h.draining),
                "short": h.short,
            })).collect::<Vec<_>>(),
            "nobody": self.share(self.nobody),
        })
    }
}

/// A Ranked content's set, a missing key's as empty; `None` for another
/// content.
fn ranked_or_empty<'a>(content: &'a Content, empty: &'a RankedSet) -> Option<&'a RankedSet> {
    match content {
        Content::Ranked(set) => Some(set),
        Content::Missing => Some(empty),
        _ => None,
    }
}

/// The group's rules record (rule 12), as a report line (what every worker
/// of the group must share, and how long the record lives without them)
/// and decoded.
fn read_rules(
    conn: &mut Connection,
    key: &str,
) -> Result<(String, Option<GroupRules>), RedisError> {
    let record: Option<String> = redis::cmd("GET").arg(key).query(conn)?;
    let pttl: i64 = redis::cmd("PTTL").arg(key).query(conn)?;
    Ok(match record {
        None => (
            "rules        none recorded (no registration for 3 intervals)\n".to_owned(),
            None,
        ),
        Some(r) => match GroupRules::decode(&r) {
            Some(rules) => (
                format!(
                    "rules        {rules}  ({key}, expires in {pttl} ms without a registration)\n"
                ),
                Some(rules),
            ),
            None => (
                format!("rules        unreadable record {r:?} ({key})\n"),
                None,
            ),
        },
    })
}

/// Where the rules line goes: after the `mode` line.
fn rules_line_at(report: &str) -> usize {
    report
        .find("mode         ")
        .and_then(|at| report[at..].find('\n').map(|nl| at + nl + 1))
        .unwrap_or(report.len())
}

/// The numbers of the group's four newest interval keys, found with SCAN.
fn newest_keys(conn: &mut Connection, prefix: &str, name: &str) -> Result<Vec<u64>, RedisError> {
    let head = interval_key(prefix, name, 0);
    let head = &head[..head.len() - 1]; // without the "0"
    let pattern = format!("{}*", glob_escape(head));
    let mut cursor: u64 = 0;
    let mut found: Vec<u64> = Vec::new();
    // Bounded: at most 10,000 SCAN calls of 1,000 keys each.
    for _ in 0..10_000 {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(1000)
            .query(conn)?;
        found.extend(
            keys.iter()
                .filter_map(|key| key.strip_prefix(head)?.parse::<u64>().ok()),
        );
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
    found.sort_unstable_by(|a, b| b.cmp(a));
    found.dedup();
    found.truncate(4);
    Ok(found)
}

/// `P{N}:<k>`, for showing.
fn key_pattern(prefix: &str, name: &str) -> String {
    let key = interval_key(prefix, name, 0);
    format!("{}<k>", &key[..key.len() - 1])
}

/// Escapes the characters SCAN's MATCH treats as a pattern.
fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn read_key(conn: &mut Connection, key: &str) -> Result<Content, RedisError> {
    let kind: String = redis::cmd("TYPE").arg(key).query(conn)?;
    Ok(match kind.as_str() {
        "none" => Content::Missing,
        "string" => {
            let value: String = redis::cmd("GET").arg(key).query(conn)?;
            match value.parse() {
                Ok(c) => Content::Counter(c),
                Err(_) => Content::Other(format!("a string that is not a counter: {value:?}")),
            }
        }
        "zset" => {
            let members: Vec<(String, f64)> = redis::cmd("ZRANGE")
                .arg(key)
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES")
                .query(conn)?;
            Content::Ranked(RankedSet::new(&members))
        }
        other => Content::Other(format!("a {other}, not a lease key")),
    })
}

/// The whole report, as text.
fn report(
    shown: &str,
    args: &InspectArgs,
    task_sets: bool,
    sec: u64,
    usec: u64,
    server_ms: u64,
    intervals: &[Interval],
) -> String {
    let mut out = String::new();
    let group = &args.group;
    let detected = intervals.iter().find_map(|i| i.content.mode());
    let mode = args.mode.or(detected);
    let _ = writeln!(out, "redis        {shown}");
    let _ = writeln!(
        out,
        "group        {}   keys {}",
        group.name,
        key_pattern(&group.prefix, &group.name)
    );
    let _ = writeln!(
        out,
        "server time  {} UTC  (TIME {sec}.{usec:06})",
        utc(sec, usec)
    );
    match args.interval {
        Some(l) => {
            let into = server_ms % l;
            let _ = writeln!(
                out,
                "interval     {l} ms; now in k = {} ({into} ms in, {} ms left)",
                server_ms / l,
                l - into
            );
        }
        None => {
            let _ = writeln!(
                out,
                "interval     not given (--interval): showing the newest keys found"
            );
        }
    }
    let mode_text = match (args.mode, detected) {
        (Some(m), Some(d)) if m != d => format!("{m} (given), but the keys are {d} keys"),
        (Some(m), _) => format!("{m}"),
        (None, Some(d)) => format!("{d} (from the key types)"),
        (None, None) => "unknown (no keys)".to_owned(),
    };
    let _ = writeln!(out, "mode         {mode_text}");
    if intervals.is_empty() {
        let _ = writeln!(
            out,
            "\nNo keys: nobody has registered in this group for the last three intervals (keys \
             expire 3 intervals after they close), or the name or prefix differ."
        );
        return out;
    }
    for (index, iv) in intervals.iter().enumerate() {
        let open = args.interval.is_some() && index == 0;
        let state = if open {
            "open: still counting"
        } else if args.interval.is_some() {
            "closed: final"
        } else {
            ""
        };
        write_interval(&mut out, iv, state, open);
    }
    if args.interval.is_some() && intervals.len() >= 3 {
        let _ = writeln!(out);
        if task_sets {
            // Under task sets a changed position still holds the
            // intersection of its two pairs: the task view below says what.
            let _ = writeln!(
                out,
                "in force     task sets: each member holds the part its positions in k-1 and k-2 \
                 make (tasks, below), even when they differ"
            );
        } else {
            let _ = write!(out, "{}", agreement(mode, &intervals[1], &intervals[2]));
        }
    }
    out
}

/// One interval's key and what its content implies.
fn write_interval(out: &mut String, iv: &Interval, state: &str, open: bool) {
    let ttl = match iv.pttl {
        -2 => "no key".to_owned(),
        -1 => "no expiry (!)".to_owned(),
        ms => format!("ttl {:.1} s", ms as f64 / 1000.0),
    };
    let _ = writeln!(out);
    let _ = writeln!(out, "{:<9} {}   {}   {ttl}", iv.label, iv.key, state);
    let so_far = if open { " so far" } else { "" };
    match &iv.content {
        Content::Missing => {
            let _ = writeln!(out, "          missing: nobody registered (or it expired)");
        }
        Content::Counter(c) => {
            let _ = writeln!(out, "          counter = {c}{so_far}");
            if *c == 1 {
                let _ = writeln!(
                    out,
                    "          position 0 implies (0, 1); Arrival keeps no identities: each worker \
                     knows its own index"
                );
            } else if *c > 1 {
                let last = c - 1;
                let _ = writeln!(
                    out,
                    "          positions 0..={last} imply (0, {c}) .. ({last}, {c}); Arrival keeps no \
                     identities: each worker knows its own index"
                );
            }
        }
        Content::Ranked(set) => write_ranked(out, set, so_far, open),
        Content::Other(what) => {
            let _ = writeln!(out, "          unexpected: {what}");
        }
    }
}

/// A Ranked set's entries by position (rule 15), the left ones last: each
/// with its score, its kind (rule 19) and the pair it implies.
fn write_ranked(out: &mut String, set: &RankedSet, so_far: &str, open: bool) {
    let n = set.size;
    let left = match set.left() {
        0 => String::new(),
        l => format!(", and {l} left (not counted)"),
    };
    let _ = writeln!(out, "          {n} members{so_far}, by position{left}:");
    if set.entries.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "          position  member                            score             kind        implies"
    );
    for e in &set.entries {
        let (position, implies) = match e.position {
            Some(p) => (p.to_string(), format!("({p}, {n}){so_far}")),
            None => ("-".to_owned(), String::new()),
        };
        let line = format!(
            "          {position:>8}  {:<32}  {:<16}  {:<10}  {implies}",
            e.member,
            e.score,
            e.kind.as_str()
        );
        let _ = writeln!(out, "{}", line.trim_end());
    }
    let kinds = |kind| set.entries.iter().any(|e| e.kind == kind);
    if kinds(EntryKind::Reserved) {
        let what = if open {
            "reserved by its registration in the interval before, not registered here yet; \
             counted all the same (rule 19)"
        } else {
            "reserved by its registration in the interval before, which it did not repeat here; \
             counted at the position it carried (rule 19)"
        };
        let _ = writeln!(out, "          reserved: {what}");
    }
    if kinds(EntryKind::Left) {
        let _ = writeln!(
            out,
            "          left: left gracefully here (rule 16); not counted, no position"
        );
    }
}

/// Which pairs the closed intervals `k-1` and `k-2` certify: a worker holds a
/// pair during `k` only if both imply the same pair for it.
fn agreement(mode: Option<Mode>, k1: &Interval, k2: &Interval) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "in force     a worker holds (i, n) during k only if k-1 and k-2 imply the same pair for it:"
    );
    match (mode, &k1.content, &k2.content) {
        (_, Content::Ranked(now), before) => {
            let empty = RankedSet::default();
            let before = ranked_or_empty(before, &empty).unwrap_or(&empty);
            for e in &now.entries {
                let Some(pair) = now.pair(&e.member) else {
                    let _ = writeln!(
                        out,
                        "             {}  left k-1 gracefully: holds nothing",
                        e.member
                    );
                    continue;
                };
                let (p1, n1) = pair;
                let verdict = match before.pair(&e.member) {
                    Some(older) if older == pair && e.kind == EntryKind::Reserved => format!(
                        "agree: holds ({p1}, {n1}) during k, short: its entry in k-1 is only a \
                         reservation, so a grant from k ends with k (rule 19)"
                    ),
                    Some(older) if older == pair => format!("agree: holds ({p1}, {n1}) during k"),
                    Some((p2, n2)) => {
                        format!("({p2}, {n2}) then ({p1}, {n1}): changed, holds nothing")
                    }
                    None => format!("new in k-1 ({p1}, {n1}): holds nothing yet"),
                };
                let _ = writeln!(out, "             {}  {verdict}", e.member);
            }
            if now.entries.is_empty() {
                let _ = writeln!(out, "             nobody: k-1 is empty, nothing is held");
            } else if now.size == 0 {
                let _ = writeln!(out, "             nobody counted in k-1, nothing is held");
            }
        }
        (_, Content::Counter(c1), Content::Counter(c2)) if c1 == c2 && *c1 > 0 => {
            let _ = writeln!(
                out,
                "             counts agree ({c1} and {c2}): each worker counted in both with the same \
                 index holds (index, {c1})"
            );
        }
        (_, Content::Counter(c1), c2) => {
            let c2 = c2.count().map_or("none".to_owned(), |c| c.to_string());
            let _ = writeln!(
                out,
                "             counts differ ({c2} then {c1}): n is changing, the whole group stands down"
            );
        }
        (_, Content::Missing, _) => {
            let _ = writeln!(out, "             nobody: k-1 has no key, nothing is held");
        }
        (_, Content::Other(_), _) => {
            let _ = writeln!(out, "             unknown: k-1 is not a lease key");
        }
    }
    out
}

/// `sec.usec` since the Unix epoch as `YYYY-MM-DD HH:MM:SS.uuuuuu` (UTC).
fn utc(sec: u64, usec: u64) -> String {
    let days = (sec / 86_400) as i64;
    let rem = sec % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}.{usec:06}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_civil() {
        assert_eq!(utc(0, 0), "1970-01-01 00:00:00.000000");
        assert_eq!(utc(1_700_000_000, 42), "2023-11-14 22:13:20.000042");
        assert_eq!(utc(951_782_400, 0), "2000-02-29 00:00:00.000000");
    }

    fn interval(label: &str, members: &[(&str, f64)]) -> Interval {
        let members: Vec<(String, f64)> =
            members.iter().map(|(m, s)| ((*m).to_owned(), *s)).collect();
        Interval {
            label: label.to_owned(),
            key: format!("{{g}}:{label}"),
            content: Content::Ranked(RankedSet::new(&members)),
            pttl: 1000,
        }
    }

    /// Positions, not ranks, and the counted size: a reservation keeps
    /// its position, a left entry has none (listed last), a filler takes
    /// the free one.
    #[test]
    fn ranked_sets_show_positions_kinds_and_the_counted_size() {
        let iv = interval(
            "k-1",
            &[
                ("m:z", -1.0),
                ("m:b", 1.25),
                ("m:n", 1_099_511_627_776.0),
                ("m:a", 0.0),
            ],
        );
        let Content::Ranked(set) = &iv.content else {
            unreachable!()
        };
        assert_eq!(set.size, 3);
        assert_eq!(iv.content.count(), Some(3));
        let rows: Vec<(&str, Option<u32>)> = set
            .entries
            .iter()
            .map(|e| (e.member.as_str(), e.position))
            .collect();
        assert_eq!(
            rows,
            [
                ("m:a", Some(0)),
                ("m:b", Some(1)),
                ("m:n", Some(2)),
                ("m:z", None)
            ]
        );
        let mut out = String::new();
        write_interval(&mut out, &iv, "closed: final", false);
        assert!(
            out.contains("3 members, by position, and 1 left (not counted):"),
            "{out}"
        );
        assert!(
            out.contains("       -  m:z                               -1                left\n"),
            "{out}"
        );
    }

    /// Only left entries in k-1: nobody is counted, nobody holds anything.
    #[test]
    fn a_set_of_left_entries_holds_nothing() {
        let k1 = interval("k-1", &[("m:a", -1.0)]);
        let k2 = interval("k-2", &[("m:a", 0.0)]);
        let out = agreement(Some(Mode::Ranked), &k1, &k2);
        assert!(
            out.contains("m:a  left k-1 gracefully: holds nothing"),
            "{out}"
        );
        assert!(
            out.contains("nobody counted in k-1, nothing is held"),
            "{out}"
        );
    }

    #[test]
    fn scan_patterns_are_escaped() {
        assert_eq!(glob_escape("p*{a?b}:"), "p\\*{a\\?b}:");
        assert_eq!(glob_escape("[x]\\"), "\\[x\\]\\\\");
    }
}
