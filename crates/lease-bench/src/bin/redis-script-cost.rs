//! Real Redis on loopback: Redis CPU per registration of the `Ranked`
//! script, revision 3 (sticky return, rule 19: the shipped script) against
//! revision 2 (hole-filling positions without reservations, rule 15, kept
//! in `ranked-revision-2.lua`) and revision 1 (the fractional carry rule 15
//! replaced, kept in `ranked-revision-1.lua`), at n = 16 (or `--members
//! N`), from `INFO commandstats` (`usec / calls` of `EVALSHA`).
//!
//! Each revision is called as its workers call it (`Revision`): revision
//! 1 with 3 keys and 6 arguments, revision 2 with 5 and 6, revision 3 with
//! 8 and 9 (the key TTL 3 L, 3 L and 5 L; the rules record of its own
//! version, `v:86400000:ranked:modulo`; no member name).
//!
//! One `redis-server` (lease-testkit, a free port). Interval one day, so the
//! interval number stays put. For each variant a group is laid out as that
//! revision leaves it in a settled group: the closed set of `k-1` with its
//! `N` members' registration scores (revisions 2 and 3: each member's
//! position `p`; revision 1: its phase), the rules record, and under
//! revision 3 also the closed set of `k-2` (`ranked.lua` reads it only for
//! a worker that does not send its position there). Then every pass is one
//! interval of the group: the open set of `k` and everything after it is
//! put back as the previous interval leaves it (absent before revision 3;
//! under revision 3 every member's reservation `p.25`, made by its
//! registration in `k-1`, and no `k+1`), the closed set's filler cache is
//! deleted, and each of the `N` members registers once, sending what a
//! worker sends: its last position, and under revision 3 its position and
//! the size of `k-2` as its previous reply told it (a settled keeper sends
//! `p` and `(p, N)`, and the script reads nothing of `k-2`). So every
//! measured registration is a member's one registration of an interval:
//! revision 2's `ZADD NX` adds to the open set, revision 3's `ZADD`
//! overwrites the member's reservation and its `ZADD NX` reserves its place
//! in `k+1`, and the first registration of the pass creates a set (its TTL
//! and the rules record's). The variants take turns pass by pass, and the
//! `EVALSHA` totals are read after every pass, so a change of the machine's
//! load falls on all of them alike; each round starts on fresh keys.
//!
//! The rows: every revision on the settled set; revisions 2 and 3 with `F`
//! of the `N` as fillers (`F` departures from `N + F`: the last `F`
//! members carry positions out of range), the slower path of the one
//! closed interval after a change, whose first filler computes every
//! filler's position (O(N)) and writes the cache, and the others read
//! theirs from it (under revision 3 each member still sends its pair of
//! `k-2`, where the group had `N + F` members); revision 3 on the settled
//! set with the older pair unknown (`-1 -1`, a lost reply): the script
//! reads its position in `k-2`; and revision 2 without rule 15's duplicate
//! clause (every member carrying a position keeps it,
//! `ranked-duplicates-keep.lua`), whose keeper reads its own score
//! (`ZSCORE`) instead of the members with the score it sent
//! (`ZRANGEBYSCORE p p`): what the clause costs.
//!
//! Usage: `redis-script-cost [--calls C] [--members N] [--fillers F]
//! [--rounds R]` (defaults 3,000 passes, 16 members, 4 fillers, 2
//! interleaved rounds).

use lease_bench::redis::{command_stats, reset_stats, server_version};
use lease_bench::{Table, header, load_average};
use lease_core::{KEY_COUNT, Mode, Script, fillers_key, interval_key, members_key, rules_key};
use lease_testkit::RedisServer;
use redis::Connection;

const L_MS: u64 = 86_400_000;

/// How a worker of one protocol revision calls the Ranked script.
#[derive(Clone, Copy, Debug)]
struct Revision {
    /// Its name in the table.
    name: &'static str,
    /// The version field of its rules record (rule 12).
    version: u32,
    /// The keys a registration declares: the first this many of `k`, `k-1`,
    /// the rules record, the member record, the filler cache of `k-1`,
    /// `k+1`, `k-2` and the filler cache of `k`.
    keys: usize,
    /// The arguments it sends: the first this many of `L`, the key TTL,
    /// `k`, the rules record, the token, the last position, the member name
    /// (empty: none), the position in `k-2` and the size of `k-2`.
    args: usize,
    /// The key TTL in intervals.
    ttl: u64,
    /// A registration reserves its member's place in `k+1` (rule 19), so
    /// before a settled member registers the open set holds its
    /// reservation, its score plus 0.25.
    reserves: bool,
}

/// Plain ranks (no hole filling), rules version 1.
const REVISION_1: Revision = Revision {
    name: "revision 1",
    version: 1,
    keys: 3,
    args: 6,
    ttl: 3,
    reserves: false,
};

/// Hole-filling positions (rule 15), rules version 2.
const REVISION_2: Revision = Revision {
    name: "revision 2",
    version: 2,
    keys: 5,
    args: 6,
    ttl: 3,
    reserves: false,
};

/// Sticky return (rule 19), rules version 3: the shipped script.
const REVISION_3: Revision = Revision {
    name: "revision 3",
    version: 3,
    keys: KEY_COUNT,
    args: 9,
    ttl: 5,
    reserves: true,
};

/// Revision 1 of the Ranked counting part (plain ranks, no hole filling),
/// kept to compare against.
const REVISION_1_SOURCE: &str = include_str!("ranked-revision-1.lua");

/// Revision 2 of the Ranked counting part (before sticky return), kept to
/// compare against.
const REVISION_2_SOURCE: &str = include_str!("ranked-revision-2.lua");

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

fn run<A: AsRef<[u8]>>(conn: &mut Connection, args: &[A]) -> redis::Value {
    lease_testkit::command(conn, args).unwrap()
}

/// What one member sends besides its token, and the position it must be
/// answered with.
#[derive(Clone, Debug)]
struct Member {
    /// Its registration score in the closed set of `k-1`.
    score: String,
    /// Its last position (`ARGV[6]`).
    last: String,
    /// Its position in closed `k-2` and that set's size (revision 3,
    /// `ARGV[8]` and `ARGV[9]`), or -1 twice.
    older: (String, String),
    /// Its position in `k-1`, as the reply must say.
    position: i64,
}

/// A row of the table: a script, called as its revision's workers call it,
/// on a group laid out as that revision leaves it.
struct Case {
    revision: Revision,
    sha: String,
    /// After the revision's name in the table.
    variant: &'static str,
    /// The closed set, in the table.
    set: String,
    members: Vec<Member>,
    /// The scores of `k-2` by token (empty: none).
    older: Vec<String>,
}

/// The cases, in the order they take turns: revision 1 settled, revision
/// 2 without the duplicate clause settled, revision 2 settled and after a
/// change, revision 3 settled, after a change, and settled with the older
/// pair not sent.
const R1: usize = 0;
const R2_SHARED: usize = 1;
const R2: usize = 2;
const R2_HOLES: usize = 3;
const R3: usize = 4;
const R3_HOLES: usize = 5;
const R3_LOST: usize = 6;

/// One script on one group's keys, ready to register into the open
/// interval.
struct Variant {
    revision: Revision,
    sha: String,
    /// Every key of the group a revision-3 registration declares, in its
    /// order; a revision declares the first [`Revision::keys`].
    keys: [String; KEY_COUNT],
    rules: String,
    k: u64,
    tokens: Vec<String>,
    members: Vec<Member>,
    /// The open set as the previous interval leaves it: `ZADD` arguments,
    /// the settled members' reservations (revision 3), or none.
    open: Vec<String>,
    /// The script reads the members' positions in `k-2` (the older pair
    /// is not sent): the reply carries each.
    reads_older: bool,
}

impl Variant {
    /// Lays out `case` under group name `group`: the closed set of `k-1`,
    /// the rules record and the set of `k-2` (by token; revision 3 reads
    /// it). Then registers each member once (an unmeasured interval).
    fn new(server: &RedisServer, conn: &mut Connection, case: &Case, group: &str) -> Self {
        let revision = case.revision;
        let members = case.members.clone();
        let k = interval(server);
        let keys = [
            interval_key("", group, k),
            interval_key("", group, k - 1),
            rules_key("", group),
            members_key("", group),
            fillers_key("", group, k - 1),
            interval_key("", group, k + 1),
            interval_key("", group, k - 2),
            fillers_key("", group, k),
        ];
        let token = |i: usize| format!("{:032x}", 0x1000 + i);
        let tokens: Vec<String> = (0..members.len()).map(token).collect();
        let mut closed = vec!["ZADD".to_owned(), keys[1].clone()];
        for (m, t) in members.iter().zip(&tokens) {
            closed.extend([m.score.clone(), t.clone()]);
        }
        run(conn, &closed);
        if !case.older.is_empty() {
            let mut cmd = vec!["ZADD".to_owned(), keys[6].clone()];
            for (i, s) in case.older.iter().enumerate() {
                cmd.extend([s.clone(), token(i)]);
            }
            run(conn, &cmd);
        }
        let rules = format!("{}:{L_MS}:ranked:modulo", revision.version);
        run(conn, &["SET", &keys[2], &rules]);
        let mut open = Vec::new();
        if revision.reserves {
            open.extend(["ZADD".to_owned(), keys[0].clone()]);
            for (m, t) in members.iter().zip(&tokens) {
                open.extend([format!("{}.25", m.score), t.clone()]);
            }
        }
        let reads_older = revision.reserves && members.iter().any(|m| m.older.0 == "-1");
        let v = Variant {
            revision,
            sha: case.sha.clone(),
            keys,
            rules,
            k,
            tokens,
            members,
            open,
            reads_older,
        };
        v.pass(conn);
        v
    }

    /// Puts the open set of `k` and the set of `k+1` back as the previous
    /// interval left them, deletes the filler caches (none of it is
    /// `EVALSHA`, so none of it is measured), then each member registers
    /// once, as a worker of its revision calls the script.
    fn pass(&self, conn: &mut Connection) {
        let [open, _, _, _, closed_fillers, next, _, open_fillers] = &self.keys;
        run(conn, &["DEL", open, next, closed_fillers, open_fillers]);
        if !self.open.is_empty() {
            run(conn, &self.open);
        }
        let ttl = (self.revision.ttl * L_MS).to_string();
        let (l, k) = (L_MS.to_string(), self.k.to_string());
        let count = self.revision.keys.to_string();
        for (token, m) in self.tokens.iter().zip(&self.members) {
            let argv = [
                l.as_str(),
                &ttl,
                &k,
                &self.rules,
                token,
                &m.last,
                "",
                &m.older.0,
                &m.older.1,
            ];
            let mut cmd: Vec<&str> = vec!["EVALSHA", &self.sha, &count];
            cmd.extend(self.keys[..self.revision.keys].iter().map(String::as_str));
            cmd.extend(&argv[..self.revision.args]);
            let r: Vec<i64> = redis::from_redis_value(run(conn, &cmd)).unwrap();
            assert_eq!(r[0], 1, "{r:?}");
            assert_eq!(r[4], m.position, "{r:?}");
            if self.revision.reserves {
                assert_eq!(r[6], 1, "a registration in k-1: {r:?}");
                assert_eq!(r[7] >= 0, self.reads_older, "{r:?}");
            }
        }
    }
}

/// Runs `calls` passes of every variant, interleaved pass by pass (so load
/// on the machine falls on all alike), and returns each one's usec per
/// registration, from the `EVALSHA` totals read after every pass.
fn measure(
    server: &RedisServer,
    conn: &mut Connection,
    variants: &[Variant],
    calls: usize,
) -> Vec<f64> {
    let mut usec = vec![0u64; variants.len()];
    let mut count = vec![0u64; variants.len()];
    reset_stats(server);
    let mut last = command_stats(server, "evalsha");
    for _ in 0..calls {
        for (i, v) in variants.iter().enumerate() {
            v.pass(conn);
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

/// A settled group of `n` (revisions 2 and 3): member `p` registered at
/// `p` in `k-1` and in `k-2`, and sends `p` and `(p, n)`, or `-1 -1` when
/// `older_known` is false (its previous reply was lost).
fn settled(n: usize, older_known: bool) -> Vec<Member> {
    (0..n)
        .map(|p| Member {
            score: p.to_string(),
            last: p.to_string(),
            older: if older_known {
                (p.to_string(), n.to_string())
            } else {
                ("-1".into(), "-1".into())
            },
            position: p as i64,
        })
        .collect()
}

/// `f` departures from a settled group of `n + f` (revisions 2 and 3): the
/// members at positions `n - f .. n` of `k-2` left (they registered in
/// neither `k-2` nor `k-1`: in `k-2` they are their reservations), so of
/// the `n` left in closed `k-1` the first `n - f` keep their positions and
/// the last `f`, carrying `n .. n + f`, fill the holes in order. Each sends
/// its position in `k-2` as its last and its pair there, `(p, n + f)`.
fn holes(n: usize, f: usize) -> (Vec<Member>, Vec<String>) {
    let members = (0..n)
        .map(|r| {
            let p = if r < n - f { r } else { r + f };
            Member {
                score: p.to_string(),
                last: p.to_string(),
                older: (p.to_string(), (n + f).to_string()),
                position: r as i64,
            }
        })
        .collect();
    // k-2 by token: token i is the member at position (i < n - f ? i : i +
    // f); the departed, at n - f .. n, come after the n members.
    let mut older: Vec<String> = (0..n)
        .map(|r| if r < n - f { r } else { r + f }.to_string())
        .collect();
    older.extend((n - f..n).map(|p| format!("{p}.25")));
    (members, older)
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
        &format!(
            "Real Redis: Ranked script CPU per registration, revision 3 against 2 and 1 (n = {n})"
        ),
        &format!(
            "cargo run --release -p lease-bench --bin redis-script-cost -- --calls {calls} --members {n} --fillers {fillers} --rounds {rounds}"
        ),
    );
    let server = RedisServer::start().expect("redis-server");
    let mut conn = server.connect().expect("a connection");
    println!("- redis-server {}", server_version(&server));
    println!("- load average at the start: {:.2}\n", load_average());
    let prelude = include_str!("../../../lease-core/src/scripts/prelude.lua");
    let rev1 = (
        REVISION_1,
        sha1(&server, &format!("{prelude}{REVISION_1_SOURCE}")),
    );
    let rev2 = (
        REVISION_2,
        sha1(&server, &format!("{prelude}{REVISION_2_SOURCE}")),
    );
    let rev2_shared = (
        REVISION_2,
        sha1(&server, &format!("{prelude}{DUPLICATES_KEEP}")),
    );
    let rev3 = (
        REVISION_3,
        sha1(&server, Script::for_mode(Mode::Ranked).source()),
    );
    let settled_v1: Vec<Member> = (0..n)
        .map(|r| Member {
            score: format!("{}", (r as f64 + 0.5) / n as f64),
            last: "0".into(),
            older: ("-1".into(), "-1".into()),
            position: r as i64,
        })
        .collect();
    let (holes, holes_older) = holes(n, fillers);
    let settled_older: Vec<String> = (0..n).map(|p| p.to_string()).collect();
    let settled_set = format!("settled, {n}");
    let holes_set = format!("{fillers} of {n} fill holes");
    let case = |(revision, sha): &(Revision, String), variant, set: &str, members, older| Case {
        revision: *revision,
        sha: sha.clone(),
        variant,
        set: set.to_owned(),
        members,
        older,
    };
    // In the order of the indices `R1` .. `R3_LOST`, the order they take
    // turns in.
    let cases = [
        case(&rev1, "", &settled_set, settled_v1, vec![]),
        case(
            &rev2_shared,
            " without the duplicate clause",
            &settled_set,
            settled(n, true),
            vec![],
        ),
        case(&rev2, "", &settled_set, settled(n, true), vec![]),
        case(&rev2, "", &holes_set, holes.clone(), vec![]),
        case(
            &rev3,
            "",
            &settled_set,
            settled(n, true),
            settled_older.clone(),
        ),
        case(&rev3, "", &holes_set, holes, holes_older),
        case(
            &rev3,
            "",
            &format!("{settled_set}, position in k-2 not sent"),
            settled(n, false),
            settled_older,
        ),
    ];
    let mut measured: Vec<Vec<f64>> = Vec::new();
    for round in 0..rounds {
        let variants: Vec<Variant> = cases
            .iter()
            .enumerate()
            .map(|(i, c)| Variant::new(&server, &mut conn, c, &format!("case{i}-round{round}")))
            .collect();
        measured.push(measure(&server, &mut conn, &variants, calls));
    }
    let mut table = Table::new(&[
        "script (keys, arguments)",
        "closed set",
        "usec per registration",
        "ratio to revision 2, same closed set",
        "ratio to revision 1",
        "ratio to revision 2 without the duplicate clause",
    ]);
    // Revision 2's row of the same closed set.
    let revision_2 = [
        None,
        None,
        Some(R2),
        Some(R2_HOLES),
        Some(R2),
        Some(R2_HOLES),
        Some(R2),
    ];
    for (round, m) in measured.iter().enumerate() {
        for (i, c) in cases.iter().enumerate() {
            let r = c.revision;
            table.row([
                format!(
                    "{}{} ({}, {}; round {})",
                    r.name,
                    c.variant,
                    r.keys,
                    r.args,
                    round + 1
                ),
                c.set.clone(),
                format!("{:.2}", m[i]),
                revision_2[i].map_or(String::new(), |b| format!("{:.3}", m[i] / m[b])),
                if c.set == holes_set {
                    String::new()
                } else {
                    format!("{:.2}", m[i] / m[R1])
                },
                if i == R2 {
                    format!("{:.3}", m[R2] / m[R2_SHARED])
                } else {
                    String::new()
                },
            ]);
        }
    }
    table.print();
    let mean = |a: usize, b: usize| {
        measured.iter().map(|m| m[a] / m[b]).sum::<f64>() / measured.len() as f64
    };
    println!(
        "{} registrations per row and round; usec from INFO commandstats (EVALSHA). On average \
         over {rounds} rounds: revision 3 against revision 2, settled {:.3}, {fillers} of {n} \
         filling holes {:.3}; revision 3 with the position in k-2 not sent against sent {:.3}; \
         revision 2 against revision 2 without the duplicate clause {:.3}.",
        calls * n,
        mean(R3, R2),
        mean(R3_HOLES, R2_HOLES),
        mean(R3_LOST, R3),
        mean(R2, R2_SHARED),
    );
}
