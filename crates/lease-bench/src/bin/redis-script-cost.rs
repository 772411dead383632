//! Real Redis on loopback: Redis CPU per registration of the `Ranked`
//! script, revision 2 (hole-filling positions, rule 15) against revision 1
//! (the fractional carry it replaced, kept in `ranked-revision-1.lua` for
//! this comparison), at n = 16 (or `--members N`), from `INFO commandstats`
//! (`usec / calls` of `EVALSHA`).
//!
//! One `redis-server` (lease-testkit, a free port). Interval one day, so the
//! interval number stays put. For each script a closed set of `N` members is
//! laid out as that revision leaves it in a settled group, the rules record
//! is set, and each of the `N` tokens registers `--calls` times into the open
//! interval (after the first, `ZADD NX` changes nothing, as in a settled
//! group's retries and re-registrations; the reads are the same every
//! time), sending the position a worker would send. The scripts take turns
//! pass by pass (one registration of every token), and the `EVALSHA` totals
//! are read after every pass, so a change of the machine's load falls on
//! all of them alike; each round starts on fresh keys. Revision 2 is also
//! measured with `F` of the `N` as fillers (carried positions out of range
//! after `F` departures), the slower path of the one closed interval after
//! a change: every pass starts without the closed set's filler cache, so
//! its first filler computes every filler's position (O(N)) and writes the
//! cache, and the others read theirs from it. Revision 2
//! without rule 15's duplicate clause (every member carrying a position
//! keeps it, `ranked-duplicates-keep.lua`) is measured on the settled set
//! too: with the clause a keeper looks up the members with the score it
//! sent (`ZRANGEBYSCORE p p`) instead of reading its own (`ZSCORE`), and
//! the last column is what that costs.
//!
//! Usage: `redis-script-cost [--calls C] [--members N] [--fillers F]
//! [--rounds R]` (defaults 3,000 per token, 16 members, 4 fillers, 2
//! interleaved rounds).

use lease_bench::redis::{command_stats, reset_stats, server_version};
use lease_bench::{Table, header, load_average};
use lease_core::{Mode, Script};
use lease_testkit::RedisServer;

const L_MS: u64 = 86_400_000;

/// Revision 1 of the Ranked counting part (plain ranks, no hole filling),
/// kept to compare against.
const REVISION_1: &str = include_str!("ranked-revision-1.lua");

/// Revision 2 without rule 15's duplicate clause (not exclusive after a
/// backward clock step; measured only).
const DUPLICATES_KEEP: &str = include_str!("ranked-duplicates-keep.lua");

fn sha1(server: &RedisServer, source: &str) -> String {
    let v = server.command(&["SCRIPT", "LOAD", source]).expect("load");
    redis::from_redis_value(v).expect("a digest")
}

/// The server's interval number now.
fn interval(server: &RedisServer) -> u64 {
    let t: Vec<String> = redis::from_redis_value(server.command(&["TIME"]).unwrap()).unwrap();
    t[0].parse::<u64>().unwrap() * 1000 / L_MS
}

/// One script on one closed set, ready to register into the open interval.
struct Variant {
    sha: String,
    open: String,
    closed: String,
    record: String,
    members: String,
    /// The filler cache of the closed set (rule 15), deleted before every
    /// pass: each pass is one interval's registrations, whose first filler
    /// computes it and the others read it.
    fillers: String,
    rules: String,
    k: u64,
    tokens: Vec<String>,
    /// The last position each token sends: the integer part of its score.
    /// In revision 2 that is what a worker sends (the position its
    /// registration in the closed interval was answered with, carried as
    /// its score there).
    sent: Vec<String>,
}

impl Variant {
    /// Lays out the closed set `scores` and the rules record for group
    /// `group`, and registers each token once (the first `ZADD` into the
    /// open set).
    fn new(server: &RedisServer, sha: &str, group: &str, rules: &str, scores: &[String]) -> Self {
        let k = interval(server);
        let v = Variant {
            sha: sha.to_owned(),
            open: format!("{{{group}}}:{k}"),
            closed: format!("{{{group}}}:{}", k - 1),
            record: format!("{{{group}}}:rules"),
            members: format!("{{{group}}}:members"),
            fillers: format!("{{{group}}}:{}:fillers", k - 1),
            rules: rules.to_owned(),
            k,
            tokens: (0..scores.len())
                .map(|x| format!("{:032x}", 0x1000 + x))
                .collect(),
            sent: scores
                .iter()
                .map(|s| format!("{}", s.parse::<f64>().unwrap_or(-1.0).floor()))
                .collect(),
        };
        for (score, token) in scores.iter().zip(&v.tokens) {
            server.command(&["ZADD", &v.closed, score, token]).unwrap();
        }
        server.command(&["SET", &v.record, rules]).unwrap();
        v.pass(server);
        v
    }

    /// Each token registers once, with the five keys a worker sends.
    fn pass(&self, server: &RedisServer) {
        server.command(&["DEL", &self.fillers]).unwrap();
        for (token, sent) in self.tokens.iter().zip(&self.sent) {
            let args = [
                L_MS.to_string(),
                (3 * L_MS).to_string(),
                self.k.to_string(),
                self.rules.clone(),
                token.clone(),
                sent.clone(),
            ];
            let mut cmd: Vec<&str> = vec![
                "EVALSHA",
                &self.sha,
                "5",
                &self.open,
                &self.closed,
                &self.record,
                &self.members,
                &self.fillers,
            ];
            cmd.extend(args.iter().map(String::as_str));
            let r = server.command(&cmd).unwrap();
            let r: Vec<i64> = redis::from_redis_value(r).unwrap();
            assert_eq!(r[0], 1, "{r:?}");
            assert!(r[4] >= 0, "{r:?}");
        }
    }
}

/// Runs `calls` passes of every variant, interleaved pass by pass (so load
/// on the machine falls on all alike), and returns each one's usec per
/// registration, from the `EVALSHA` totals read after every pass.
fn measure(server: &RedisServer, variants: &[Variant], calls: usize) -> Vec<f64> {
    let mut usec = vec![0u64; variants.len()];
    let mut count = vec![0u64; variants.len()];
    reset_stats(server);
    let mut last = command_stats(server, "evalsha");
    for _ in 0..calls {
        for (i, v) in variants.iter().enumerate() {
            v.pass(server);
            let now = command_stats(server, "evalsha");
            count[i] += now.0 - last.0;
            usec[i] += now.1 - last.1;
            last = now;
        }
    }
    usec.iter()
        .zip(&count)
        .map(|(&u, &c)| u as f64 / c.max(1) as f64)
        .collect()
}

fn main() {
    let mut calls = 3_000usize;
    let mut n = 16usize;
    let mut fillers = 4usize;
    let mut rounds = 2usize;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--calls" => calls = args.next().and_then(|s| s.parse().ok()).unwrap_or(calls),
            "--members" => n = args.next().and_then(|s| s.parse().ok()).unwrap_or(n),
            "--fillers" => fillers = args.next().and_then(|s| s.parse().ok()).unwrap_or(fillers),
            "--rounds" => rounds = args.next().and_then(|s| s.parse().ok()).unwrap_or(rounds),
            other => {
                eprintln!("unknown argument {other}");
                std::process::exit(2);
            }
        }
    }
    if n == 0 || fillers > n || rounds == 0 {
        eprintln!("--members and --rounds must be at least 1 and --fillers at most --members");
        std::process::exit(2);
    }
    header(
        &format!("Real Redis: Ranked script CPU per registration, revision 2 against 1 (n = {n})"),
        &format!(
            "cargo run --release -p lease-bench --bin redis-script-cost -- --calls {calls} --members {n} --fillers {fillers} --rounds {rounds}"
        ),
    );
    let server = RedisServer::start().expect("redis-server");
    println!("- redis-server {}", server_version(&server));
    println!("- load average at the start: {:.2}\n", load_average());
    let prelude = include_str!("../../../lease-core/src/scripts/prelude.lua");
    let old = sha1(&server, &format!("{prelude}{REVISION_1}"));
    let new = sha1(&server, Script::for_mode(Mode::Ranked).source());
    let shared = sha1(&server, &format!("{prelude}{DUPLICATES_KEEP}"));
    let settled_v1: Vec<String> = (0..n)
        .map(|r| format!("{}", (r as f64 + 0.5) / n as f64))
        .collect();
    let settled_v2: Vec<String> = (0..n).map(|r| r.to_string()).collect();
    // `fillers` departures from `n + fillers`: the last `fillers` carried
    // positions are out of range.
    let holes_v2: Vec<String> = (0..n)
        .map(|r| {
            if r < n - fillers {
                r.to_string()
            } else {
                (r + fillers).to_string()
            }
        })
        .collect();
    let mut table = Table::new(&[
        "script",
        "closed set",
        "usec per registration",
        "ratio to revision 1",
        "ratio to revision 2 without the duplicate clause",
    ]);
    let mut rows = Vec::new();
    let rules = "2:86400000:ranked:modulo";
    for round in 0..rounds {
        let variants = [
            Variant::new(
                &server,
                &old,
                &format!("old{round}"),
                "1:86400000:ranked:modulo",
                &settled_v1,
            ),
            Variant::new(
                &server,
                &shared,
                &format!("shared{round}"),
                rules,
                &settled_v2,
            ),
            Variant::new(&server, &new, &format!("new{round}"), rules, &settled_v2),
            Variant::new(&server, &new, &format!("holes{round}"), rules, &holes_v2),
        ];
        let m = measure(&server, &variants, calls);
        rows.push((m[0], m[1], m[2], m[3]));
    }
    for (round, (a, d, b, c)) in rows.iter().enumerate() {
        let round = round + 1;
        table.row([
            format!("revision 1 (round {round})"),
            format!("settled, {n}"),
            format!("{a:.2}"),
            "1.00".into(),
            String::new(),
        ]);
        table.row([
            format!("revision 2 without the duplicate clause (round {round})"),
            format!("settled, {n}"),
            format!("{d:.2}"),
            format!("{:.2}", d / a),
            "1.00".into(),
        ]);
        table.row([
            format!("revision 2 (round {round})"),
            format!("settled, {n}"),
            format!("{b:.2}"),
            format!("{:.2}", b / a),
            format!("{:.3}", b / d),
        ]);
        table.row([
            format!("revision 2 (round {round})"),
            format!("{fillers} of {n} fill holes"),
            format!("{c:.2}"),
            format!("{:.2}", c / a),
            String::new(),
        ]);
    }
    let settled: Vec<f64> = rows.iter().map(|(_, d, b, _)| b / d).collect();
    let mean = settled.iter().sum::<f64>() / settled.len() as f64;
    table.print();
    println!(
        "{} registrations per row; usec from INFO commandstats (EVALSHA). Settled, revision 2 \
         against revision 2 without the duplicate clause: {mean:.3} on average over {rounds} \
         rounds.",
        calls * n
    );
}
