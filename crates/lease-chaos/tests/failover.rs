//! The failover faults of the `lease-chaos` binary, end to end, against a
//! real primary with a replica and a real Redis Cluster with replicas (both
//! started by the binary): failovers with and without lost writes are
//! clean, a cluster failover and slot moves are clean, and the known limit
//! (part of the group left on a deposed primary, so writes of several
//! consecutive intervals are lost) is caught as a violation.

use std::path::PathBuf;
use std::process::{Command, Output};

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "lease-chaos-failover-{}-{name}",
        std::process::id()
    ))
}

fn chaos(history: &PathBuf, args: &[&str]) -> Output {
    // Whole pairs: the report's per-pair figures.
    let output = Command::new(env!("CARGO_BIN_EXE_lease-chaos"))
        .args(["--handover", "whole-pairs"])
        .args(args)
        .arg("--history")
        .arg(history)
        .output()
        .expect("running lease-chaos");
    let _ = std::fs::remove_file(history);
    output
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The rows of the report's failover table: (kind, lost_bytes, keys,
/// violations).
fn failover_rows(out: &str) -> Vec<(String, String, String, u64)> {
    let mut rows = Vec::new();
    let mut inside = false;
    for line in out.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.first() == Some(&"at_s") && fields.get(1) == Some(&"failover") {
            inside = true;
            continue;
        }
        if inside {
            if fields.len() != 11 || fields[0].parse::<f64>().is_err() {
                break;
            }
            rows.push((
                fields[1].to_owned(),
                fields[3].to_owned(),
                fields[5].to_owned(),
                fields[9].parse().unwrap(),
            ));
        }
    }
    rows
}

fn assert_clean(output: &Output) -> String {
    let out = stdout(output);
    assert!(
        output.status.success(),
        "status {:?}\n{out}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let last = out.lines().last().unwrap_or_default().to_owned();
    assert!(last.starts_with("chaos: ok "), "{last}");
    assert!(last.contains(" violations=0 fencing=0 "), "{last}");
    out
}

#[test]
fn failovers_with_and_without_lost_writes_are_clean() {
    let output = chaos(
        &temp("failover.jsonl"),
        &[
            "--workers",
            "3",
            "--duration",
            "10",
            "--interval",
            "100",
            "--faults",
            "failover,failover-lossy",
            "--seed",
            "2",
        ],
    );
    let out = assert_clean(&output);
    let rows = failover_rows(&out);
    assert!(rows.iter().any(|r| r.0 == "failover"), "{out}");
    assert!(rows.iter().any(|r| r.0 == "failover-lossy"), "{out}");
    assert!(rows.iter().all(|r| r.3 == 0), "{out}");
    // A coordinated failover loses nothing; some lossy one lost writes.
    assert!(
        rows.iter()
            .filter(|r| r.0 == "failover")
            .all(|r| r.1 == "0"),
        "{out}"
    );
    assert!(
        rows.iter()
            .any(|r| r.0 == "failover-lossy" && r.1.parse::<u64>().unwrap() > 0),
        "{out}"
    );
}

/// The known limit, and a negative control of the checker on a real
/// server: the replica is promoted while half the group keeps writing to
/// the deposed primary for 4 intervals, so each half counts itself alone
/// and both are granted. The run must report the violation and fail.
#[test]
fn a_split_between_a_deposed_and_a_new_primary_is_caught() {
    let output = chaos(
        &temp("split.jsonl"),
        &[
            "--workers",
            "4",
            "--duration",
            "6",
            "--interval",
            "100",
            "--faults",
            "failover-split",
            "--seed",
            "1",
        ],
    );
    let out = stdout(&output);
    let last = out.lines().last().unwrap_or_default().to_owned();
    assert_eq!(output.status.code(), Some(1), "{out}");
    assert!(last.starts_with("chaos: VIOLATION "), "{last}");
    let rows = failover_rows(&out);
    assert!(!rows.is_empty(), "{out}");
    assert!(rows.iter().any(|r| r.3 > 0), "{out}");
}

#[test]
fn a_cluster_failover_and_slot_moves_are_clean() {
    let output = chaos(
        &temp("cluster.jsonl"),
        &[
            "--workers",
            "3",
            "--duration",
            "12",
            "--interval",
            "100",
            "--faults",
            "cluster-failover,reshard",
            "--seed",
            "1",
        ],
    );
    let out = assert_clean(&output);
    let rows = failover_rows(&out);
    assert!(rows.iter().any(|r| r.0 == "cluster-failover"), "{out}");
    assert!(
        rows.iter()
            .any(|r| r.0 == "reshard" && r.2.parse::<u64>().unwrap() > 0),
        "{out}"
    );
}

#[test]
fn cluster_faults_refuse_faults_that_need_one_server() {
    let output = chaos(
        &temp("usage.jsonl"),
        &["--faults", "reshard,restart", "--duration", "1"],
    );
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("restart cannot run against a Redis Cluster"),
        "{stderr}"
    );
}

/// lease-fred resolves the primary through Sentinel (`redis-sentinel://`):
/// after `SENTINEL FAILOVER` the group registers on the promoted replica
/// and holds every slot again, and the history checks clean.
#[test]
fn fred_workers_follow_a_sentinel_failover() {
    use std::time::{Duration, Instant};

    use lease_chaos::harness::{AdapterKind, Harness};
    use lease_testkit::{RedisSentinel, ReplicatedRedis, unique_name};

    let pair = ReplicatedRedis::start().unwrap();
    let sentinel =
        RedisSentinel::start(pair.primary(), "leases", 1, Duration::from_secs(20)).unwrap();
    let interval = Duration::from_millis(200);
    let options = lease_core::Options::new(unique_name("sentinel"), interval)
        .with_handover(lease_core::Handover::WholePairs);
    let mut harness = Harness::new(AdapterKind::Fred, options, Instant::now());
    for k in 0..3 {
        harness.spawn(&format!("w{k}"), sentinel.url()).unwrap();
    }
    // Every slot of n = 3 held by a valid lease.
    let covered = |harness: &mut Harness, within: Duration| {
        let deadline = Instant::now() + within;
        loop {
            while harness.next(Duration::from_millis(10)).unwrap().is_some() {}
            let now = Instant::now();
            let mut held: Vec<(u32, u32)> = harness
                .workers()
                .filter_map(|w| w.held)
                .filter(|lease| lease.is_valid_at(now))
                .map(lease_chaos::harness::whole_pair)
                .collect();
            held.sort_unstable();
            if held == [(0, 3), (1, 3), (2, 3)] {
                return;
            }
            assert!(Instant::now() < deadline, "{:?}", harness.records());
        }
    };
    covered(&mut harness, Duration::from_secs(15));
    let calls = |server: &lease_testkit::RedisServer| {
        let info: String =
            redis::from_redis_value(server.command(&["INFO", "commandstats"]).unwrap()).unwrap();
        info.lines()
            .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
            .filter_map(|l| {
                l.split("calls=")
                    .nth(1)?
                    .split(',')
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .sum::<u64>()
    };
    assert_eq!(calls(pair.replica()), 0, "a replica runs no script");
    let new = sentinel
        .failover(pair.primary().addr(), Duration::from_secs(30))
        .unwrap();
    assert_eq!(new, pair.replica().addr());
    // Sentinel reports the new primary first and demotes the old one
    // after; until then both accept writes.
    let deadline = Instant::now() + Duration::from_secs(30);
    // A probe may meet a closed connection: Sentinel's reconfiguration of
    // the old primary kills its clients (`CLIENT KILL`); ask again.
    while pair
        .primary()
        .replication()
        .map_or(true, |r| r.is_primary())
    {
        assert!(Instant::now() < deadline, "the old primary was not demoted");
        while harness.next(Duration::from_millis(10)).unwrap().is_some() {}
    }
    // Four intervals on: registrations reach the new primary, and the
    // group holds every slot.
    let until = Instant::now() + interval * 4;
    while Instant::now() < until {
        while harness.next(Duration::from_millis(10)).unwrap().is_some() {}
    }
    covered(&mut harness, Duration::from_secs(15));
    assert!(calls(pair.replica()) > 0, "the workers use the new primary");
    let (end, stuck) = harness.stop(Duration::from_secs(3), |_| {}).unwrap();
    assert!(stuck.is_empty(), "{stuck:?}");
    let end_us = harness.us(end);
    let verdict = lease_history::check(harness.records(), Some(end_us));
    assert!(verdict.is_ok(), "{verdict:?}");
}
