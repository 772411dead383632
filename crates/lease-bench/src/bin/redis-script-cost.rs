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
//! time). Revision 2 is also measured with `F` of the `N` as fillers (carried
//! positions out of range after `F` departures), the slower path: each
//! filler reads the keepers' scores, O(N), in the one closed interval after
//! a change.
//!
//! Usage: `redis-script-cost [--calls C] [--members N] [--fillers F]`
//! (defaults 3,000 per token, 16 members, 4 fillers).

use lease_bench::redis::{command_stats, reset_stats, server_version};
use lease_bench::{Table, header, load_average};
use lease_core::{Mode, Script};
use lease_testkit::RedisServer;

const L_MS: u64 = 86_400_000;

/// Revision 1 of the Ranked counting part (plain ranks, no hole filling),
/// kept to compare against.
const REVISION_1: &str = include_str!("ranked-revision-1.lua");

fn sha1(server: &RedisServer, source: &str) -> String {
    let v = server.command(&["SCRIPT", "LOAD", source]).expect("load");
    redis::from_redis_value(v).expect("a digest")
}

/// The server's interval number now.
fn interval(server: &RedisServer) -> u64 {
    let t: Vec<String> = redis::from_redis_value(server.command(&["TIME"]).unwrap()).unwrap();
    t[0].parse::<u64>().unwrap() * 1000 / L_MS
}

/// Runs `calls` registrations per token; returns usec per call.
fn measure(
    server: &RedisServer,
    sha: &str,
    group: &str,
    rules: &str,
    scores: &[String],
    calls: usize,
) -> f64 {
    let k = interval(server);
    let open = format!("{{{group}}}:{k}");
    let closed = format!("{{{group}}}:{}", k - 1);
    let record = format!("{{{group}}}:rules");
    let tokens: Vec<String> = (0..scores.len())
        .map(|x| format!("{:032x}", 0x1000 + x))
        .collect();
    for (score, token) in scores.iter().zip(&tokens) {
        server.command(&["ZADD", &closed, score, token]).unwrap();
    }
    server.command(&["SET", &record, rules]).unwrap();
    let args_for = |token: &str, sent: &str| {
        vec![
            L_MS.to_string(),
            (3 * L_MS).to_string(),
            k.to_string(),
            rules.to_owned(),
            token.to_owned(),
            sent.to_owned(),
        ]
    };
    // Warm up (and the first ZADD into the open set).
    for token in &tokens {
        let args = args_for(token, "0");
        let mut cmd: Vec<&str> = vec!["EVALSHA", sha, "3", &open, &closed, &record];
        cmd.extend(args.iter().map(String::as_str));
        server.command(&cmd).unwrap();
    }
    reset_stats(server);
    for _ in 0..calls {
        for token in &tokens {
            let args = args_for(token, "0");
            let mut cmd: Vec<&str> = vec!["EVALSHA", sha, "3", &open, &closed, &record];
            cmd.extend(args.iter().map(String::as_str));
            let r = server.command(&cmd).unwrap();
            let r: Vec<i64> = redis::from_redis_value(r).unwrap();
            assert_eq!(r[0], 1, "{r:?}");
            assert!(r[4] >= 0, "{r:?}");
        }
    }
    let (calls, usec) = command_stats(server, "evalsha");
    usec as f64 / calls.max(1) as f64
}

fn main() {
    let mut calls = 3_000usize;
    let mut n = 16usize;
    let mut fillers = 4usize;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--calls" => calls = args.next().and_then(|s| s.parse().ok()).unwrap_or(calls),
            "--members" => n = args.next().and_then(|s| s.parse().ok()).unwrap_or(n),
            "--fillers" => fillers = args.next().and_then(|s| s.parse().ok()).unwrap_or(fillers),
            other => {
                eprintln!("unknown argument {other}");
                std::process::exit(2);
            }
        }
    }
    if n == 0 || fillers > n {
        eprintln!("--members must be at least 1 and --fillers at most --members");
        std::process::exit(2);
    }
    header(
        &format!("Real Redis: Ranked script CPU per registration, revision 2 against 1 (n = {n})"),
        &format!(
            "cargo run --release -p lease-bench --bin redis-script-cost -- --calls {calls} --members {n} --fillers {fillers}"
        ),
    );
    let server = RedisServer::start().expect("redis-server");
    println!("- redis-server {}", server_version(&server));
    println!("- load average at the start: {:.2}\n", load_average());
    let prelude = include_str!("../../../lease-core/src/scripts/prelude.lua");
    let old = sha1(&server, &format!("{prelude}{REVISION_1}"));
    let new = sha1(&server, Script::for_mode(Mode::Ranked).source());
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
    ]);
    let mut rows = Vec::new();
    // Interleaved twice, so drift in the machine's load shows.
    for round in 0..2 {
        let a = measure(
            &server,
            &old,
            &format!("old{round}"),
            "1:86400000:ranked:modulo",
            &settled_v1,
            calls,
        );
        let b = measure(
            &server,
            &new,
            &format!("new{round}"),
            "2:86400000:ranked:modulo",
            &settled_v2,
            calls,
        );
        let c = measure(
            &server,
            &new,
            &format!("holes{round}"),
            "2:86400000:ranked:modulo",
            &holes_v2,
            calls,
        );
        rows.push((a, b, c));
    }
    for (round, (a, b, c)) in rows.iter().enumerate() {
        table.row([
            format!("revision 1 (round {})", round + 1),
            format!("settled, {n}"),
            format!("{a:.2}"),
            "1.00".into(),
        ]);
        table.row([
            format!("revision 2 (round {})", round + 1),
            format!("settled, {n}"),
            format!("{b:.2}"),
            format!("{:.2}", b / a),
        ]);
        table.row([
            format!("revision 2 (round {})", round + 1),
            format!("{fillers} of {n} fill holes"),
            format!("{c:.2}"),
            format!("{:.2}", c / a),
        ]);
    }
    table.print();
    println!(
        "{} registrations per row; usec from INFO commandstats (EVALSHA).",
        calls * n
    );
}
