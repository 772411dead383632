//! `lease run` under task sets (its default) with the examples
//! `examples/lease-run/claim_rows.py` (Python, pg8000) and
//! `examples/lease-run/node/claim_rows.js` (Node, node-postgres), against a
//! private redis-server and a private PostgreSQL: the first child keeps its
//! process through the second's join (same PID before and after), follows
//! the lease file, and each holds exactly the rows of its buckets, while
//! the two lease files split the buckets. One test per language first, the
//! other joining, so the two examples also share one group.
//!
//! Needs python3 with pg8000 and node with the example's `npm ci`
//! (scripts/test.sh installs both where they are missing).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lease_testkit::{PostgresServer, RedisServer, test_interval, unique_name};
use rustix::process::{Pid, Signal, kill_process};

const LEASE: &str = env!("CARGO_BIN_EXE_lease");
const BUCKETS: u64 = 64;
const ROWS: i64 = 2000;

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/lease-run")
}

/// The worker programs.
#[derive(Clone, Copy, Debug)]
enum Worker {
    Python,
    Node,
}

impl Worker {
    /// The command line, after checking that it can run here.
    fn command(self) -> Vec<String> {
        match self {
            Worker::Python => {
                let ok = Command::new("python3")
                    .args(["-c", "import pg8000"])
                    .status()
                    .expect("python3 runs");
                assert!(
                    ok.success(),
                    "python3 has no pg8000: `python3 -m pip install pg8000` (scripts/test.sh does)"
                );
                vec![
                    "python3".into(),
                    examples().join("claim_rows.py").display().to_string(),
                ]
            }
            Worker::Node => {
                let dir = examples().join("node");
                assert!(
                    dir.join("node_modules/pg").exists(),
                    "the Node example has no node_modules: `npm ci --prefix {}` (scripts/test.sh does)",
                    dir.display()
                );
                vec![
                    "node".into(),
                    dir.join("claim_rows.js").display().to_string(),
                ]
            }
        }
    }

    fn program(self) -> &'static str {
        match self {
            Worker::Python => "python3",
            Worker::Node => "node",
        }
    }
}

fn wait_for<T>(limit: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let until = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() > until {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn start(redis: &str, name: &str, pg: &PostgresServer, dir: &Path, worker: Worker) -> Child {
    Command::new(LEASE)
        .args(["run", "--redis", redis, "--name", name, "--interval"])
        .arg(test_interval().as_millis().to_string())
        .args(["--buckets", &BUCKETS.to_string(), "--drain-timeout", "3000"])
        .arg("--lease-file")
        .arg(dir.join("lease.json"))
        .arg("--")
        .args(worker.command())
        .env("PGHOST", pg.host())
        .env("PGPORT", pg.port().to_string())
        .env("PGUSER", pg.user())
        .env("PGDATABASE", pg.dbname())
        .env("CLAIM_LOG", dir.join("claims.jsonl"))
        .env_remove("REDIS_URL")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("lease run starts")
}

/// The lease file's buckets, if it holds some.
fn buckets(dir: &Path) -> Option<BTreeSet<u64>> {
    let text = std::fs::read_to_string(dir.join("lease.json")).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v["held"].as_bool().filter(|h| *h)?;
    Some(
        v["buckets"]
            .as_array()?
            .iter()
            .filter_map(|b| b.as_u64())
            .collect(),
    )
}

/// `holder -> rows` from the table.
fn holders(pg: &PostgresServer) -> Vec<(Option<i64>, BTreeSet<i64>)> {
    let out = pg
        .psql("SELECT coalesce(holder::text, ''), string_agg(id::text, ',' ORDER BY id) FROM jobs GROUP BY holder ORDER BY holder")
        .unwrap();
    out.lines()
        .map(|line| {
            let (holder, ids) = line.split_once('|').unwrap();
            (
                holder.parse().ok(),
                ids.split(',').map(|i| i.parse().unwrap()).collect(),
            )
        })
        .collect()
}

/// What the child logged at each change it acted on: (pid, buckets held).
fn changes(dir: &Path) -> Vec<(i64, u64)> {
    std::fs::read_to_string(dir.join("claims.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let v = serde_json::from_str::<serde_json::Value>(l).ok()?;
            Some((v["pid"].as_i64()?, v["buckets"].as_u64()?))
        })
        .collect()
}

fn stop(mut run: Child) -> String {
    kill_process(Pid::from_child(&run), Signal::TERM).unwrap();
    let status = wait_for(Duration::from_secs(15), || run.try_wait().unwrap());
    let mut stderr = String::new();
    std::io::Read::read_to_string(run.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(status.is_some_and(|s| s.success()), "lease run: {stderr}");
    stderr
}

#[test]
fn a_python_child_keeps_its_process_through_a_join_and_claims_only_its_rows() {
    join(Worker::Python, Worker::Node);
}

#[test]
fn a_node_child_keeps_its_process_through_a_join_and_claims_only_its_rows() {
    join(Worker::Node, Worker::Python);
}

fn join(first: Worker, second: Worker) {
    let redis = RedisServer::start().unwrap();
    let pg = PostgresServer::start().unwrap();
    pg.psql(&format!(
        "CREATE TABLE jobs (id bigint PRIMARY KEY, holder int);
         INSERT INTO jobs SELECT g FROM generate_series(0, {}) g;",
        ROWS - 1
    ))
    .unwrap();
    let name = unique_name("run-tasks");
    let base = std::env::temp_dir().join(unique_name("lease-run-tasks"));
    let (dir_a, dir_b) = (base.join("a"), base.join("b"));
    std::fs::create_dir_all(&dir_a).unwrap();
    std::fs::create_dir_all(&dir_b).unwrap();
    let limit = test_interval() * 20 + Duration::from_secs(10);
    let all: BTreeSet<u64> = (0..BUCKETS).collect();

    // Alone, the first worker's child claims every row.
    let a = start(redis.url(), &name, &pg, &dir_a, first);
    let alone = wait_for(limit, || match holders(&pg).as_slice() {
        [(Some(pid), rows)] if rows.len() == ROWS as usize => Some(*pid),
        _ => None,
    })
    .expect("the first child claims the whole table");
    assert_eq!(buckets(&dir_a).as_ref(), Some(&all));

    // A second worker joins: both children split the table by their lease
    // files, and the first child is the same process throughout.
    let b = start(redis.url(), &name, &pg, &dir_b, second);
    let split = wait_for(limit, || {
        let (ba, bb) = (buckets(&dir_a)?, buckets(&dir_b)?);
        let rows = holders(&pg);
        let settled = ba.len() < all.len()
            && ba.is_disjoint(&bb)
            && ba.union(&bb).count() == all.len()
            && rows.len() == 2
            && rows.iter().all(|(h, _)| h.is_some());
        settled.then_some((ba, bb, rows))
    })
    .expect("the join splits the buckets and the rows");
    let (ba, bb, rows) = split;
    let of = |pid: i64| rows.iter().find(|(h, _)| *h == Some(pid)).map(|(_, r)| r);
    let rows_a = of(alone).expect("the first child still holds rows after the join");
    let pid_b = rows
        .iter()
        .find_map(|(h, _)| h.filter(|&p| p != alone))
        .unwrap();
    let rows_b = of(pid_b).unwrap();
    let in_buckets = |set: &BTreeSet<u64>| -> BTreeSet<i64> {
        (0..ROWS)
            .filter(|&r| set.contains(&(r as u64 % BUCKETS)))
            .collect()
    };
    for (who, held, set) in [
        ("the first child", rows_a, &ba),
        ("the newcomer", rows_b, &bb),
    ] {
        let expected = in_buckets(set);
        assert!(
            held == &expected,
            "{who} holds {} rows, {} of them outside its buckets, and misses {} of its {}",
            held.len(),
            held.difference(&expected).count(),
            expected.difference(held).count(),
            expected.len()
        );
    }
    assert!(!bb.is_empty());
    // The first child acted on the whole set, then on the smaller one, as
    // one process.
    let seen = changes(&dir_a);
    assert!(
        seen.iter().all(|(pid, _)| *pid == alone),
        "one process: {seen:?}"
    );
    let first_all = seen.iter().position(|(_, n)| *n == BUCKETS);
    let then_less = seen.iter().rposition(|(_, n)| *n == ba.len() as u64);
    assert!(
        matches!((first_all, then_less), (Some(x), Some(y)) if x < y),
        "the child followed the change without a restart: {seen:?}"
    );

    let (err_a, err_b) = (stop(a), stop(b));
    let started = |w: Worker| format!("started {:?}", w.program());
    assert_eq!(err_a.matches(&started(first)).count(), 1, "{err_a}");
    assert_eq!(err_b.matches(&started(second)).count(), 1, "{err_b}");
    // Stopped with `lease run`: the children are gone.
    for pid in [alone, pid_b] {
        let gone = wait_for(Duration::from_secs(5), || {
            (!Path::new(&format!("/proc/{pid}")).exists()).then_some(())
        });
        assert!(gone.is_some(), "child {pid} outlived lease run");
    }
    let _ = std::fs::remove_dir_all(&base);
}
