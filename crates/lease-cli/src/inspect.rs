//! `lease inspect`: what a group's interval keys say right now.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use lease_core::{GroupRules, Mode, interval_key, rules_key};
use redis::{Connection, RedisError};

use crate::{CliError, Group, client, connect_error, options, redact, validate};

/// Options of `lease inspect`.
#[derive(Args, Debug)]
pub(crate) struct InspectArgs {
    #[command(flatten)]
    group: Group,

    /// The group's interval length in milliseconds. With it, the keys shown
    /// are those of intervals k, k-1, k-2 and k-3, with k computed from the
    /// server's TIME; without it, the four newest keys of the group (SCAN).
    #[arg(long, value_name = "MS")]
    interval: Option<u64>,

    /// Counting mode: ranked or arrival. Detected from the key types if not
    /// given.
    #[arg(long)]
    mode: Option<Mode>,
}

/// What one interval key holds.
#[derive(Debug, PartialEq)]
enum Content {
    Missing,
    /// Arrival: the counter.
    Counter(i64),
    /// Ranked: the members in rank order, with their scores.
    Ranked(Vec<(String, f64)>),
    Other(String),
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
            Content::Ranked(m) => Some(m.len() as i64),
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
    let group = &args.group;
    let opts = options(group, args.interval, args.mode);
    validate(&opts)?;
    let shown = redact(&group.redis);
    let client = client(group)?;
    let mut conn = client
        .get_connection_with_timeout(Duration::from_secs(3))
        .map_err(|e| connect_error(&shown, &e))?;
    let timeout = Some(Duration::from_secs(5));
    let _ = conn.set_read_timeout(timeout);
    let _ = conn.set_write_timeout(timeout);
    let failed = |e: RedisError| CliError::Runtime(format!("{shown}: {e}"));

    let (sec, usec): (u64, u64) = redis::cmd("TIME").query(&mut conn).map_err(failed)?;
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
        None => newest_keys(&mut conn, prefix, name)
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
        let content = read_key(&mut conn, &key).map_err(failed)?;
        let pttl: i64 = redis::cmd("PTTL")
            .arg(&key)
            .query(&mut conn)
            .map_err(failed)?;
        intervals.push(Interval {
            label,
            key,
            content,
            pttl,
        });
    }
    let rules = read_rules(&mut conn, &rules_key(prefix, name)).map_err(failed)?;
    let mut out = report(&shown, args, sec, usec, server_ms, &intervals);
    out.insert_str(rules_line_at(&out), &rules);
    print!("{out}");
    Ok(ExitCode::SUCCESS)
}

/// The group's rules record (rule 12), as a report line: what every worker
/// of the group must share, and how long the record lives without them.
fn read_rules(conn: &mut Connection, key: &str) -> Result<String, RedisError> {
    let record: Option<String> = redis::cmd("GET").arg(key).query(conn)?;
    let pttl: i64 = redis::cmd("PTTL").arg(key).query(conn)?;
    Ok(match record {
        None => "rules        none recorded (no registration for 3 intervals)\n".to_owned(),
        Some(r) => match GroupRules::decode(&r) {
            Some(rules) => format!(
                "rules        {rules}  ({key}, expires in {pttl} ms without a registration)\n"
            ),
            None => format!("rules        unreadable record {r:?} ({key})\n"),
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
            Content::Ranked(members)
        }
        other => Content::Other(format!("a {other}, not a lease key")),
    })
}

/// The whole report, as text.
fn report(
    shown: &str,
    args: &InspectArgs,
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
            Content::Ranked(members) => {
                let n = members.len();
                let _ = writeln!(out, "          {n} members{so_far}, in rank order:");
                let _ = writeln!(
                    out,
                    "          rank  token                             score        implies"
                );
                for (rank, (token, score)) in members.iter().enumerate() {
                    let _ = writeln!(
                        out,
                        "          {rank:>4}  {token:<32}  {score:<11.6}  ({rank}, {n}){so_far}"
                    );
                }
            }
            Content::Other(what) => {
                let _ = writeln!(out, "          unexpected: {what}");
            }
        }
    }
    if args.interval.is_some() && intervals.len() >= 3 {
        let _ = writeln!(out);
        let _ = write!(out, "{}", agreement(mode, &intervals[1], &intervals[2]));
    }
    out
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
            let before: Vec<(String, f64)> = match before {
                Content::Ranked(b) => b.clone(),
                _ => Vec::new(),
            };
            let (n1, n2) = (now.len(), before.len());
            for (rank, (token, _)) in now.iter().enumerate() {
                let verdict = match before.iter().position(|(t, _)| t == token) {
                    Some(r) if r == rank && n1 == n2 => {
                        format!("agree: holds ({rank}, {n1}) during k")
                    }
                    Some(r) => format!("({r}, {n2}) then ({rank}, {n1}): changed, holds nothing"),
                    None => format!("new in k-1 ({rank}, {n1}): holds nothing yet"),
                };
                let _ = writeln!(out, "             {token}  {verdict}");
            }
            if now.is_empty() {
                let _ = writeln!(out, "             nobody: k-1 is empty, nothing is held");
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

    #[test]
    fn scan_patterns_are_escaped() {
        assert_eq!(glob_escape("p*{a?b}:"), "p\\*{a\\?b}:");
        assert_eq!(glob_escape("[x]\\"), "\\[x\\]\\\\");
    }
}
