//! The `lease-chaos` binary end to end, against a real `redis-server` (which
//! it starts itself): a short run with every fault is clean, and a
//! deliberately wrong history (a stalled worker's release written at its
//! wake-up) is caught. Then the real-worker harness and the fault proxy as a
//! library, against real `redis-server` processes: what another test (the
//! demo, fred's lost reply) relies on.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use lease_chaos::harness::{AdapterKind, Control, Happened, Harness, WorkerId};
use lease_chaos::proxy::Proxy;
use lease_history::{LeaveHow, Record, check, read_history};
use lease_testkit::{RedisServer, command, test_interval, unique_name};

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("lease-chaos-test-{}-{name}", std::process::id()))
}

/// A run of the binary; whole pairs unless `args` name the handover (the
/// report's per-pair figures and the sabotaged sink are whole-pair ones).
fn chaos(args: &[&str]) -> Output {
    let whole: &[&str] = if args.contains(&"--handover") {
        &[]
    } else {
        &["--handover", "whole-pairs"]
    };
    Command::new(env!("CARGO_BIN_EXE_lease-chaos"))
        .args(whole)
        .args(args)
        .output()
        .expect("running lease-chaos")
}

fn last_line(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn a_short_run_with_every_fault_is_clean() {
    let history = temp("all.jsonl");
    let svg = temp("all.svg");
    let output = chaos(&[
        "--workers",
        "4",
        "--duration",
        "10",
        "--interval",
        "100",
        "--faults",
        "all",
        "--seed",
        "2",
        "--history",
        history.to_str().unwrap(),
        "--svg",
        svg.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let last = last_line(&output);
    assert!(
        output.status.success(),
        "status {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status
    );
    assert!(
        last.starts_with("chaos: ok adapter=redis mode=ranked workers=4"),
        "{last}"
    );
    for field in [
        "violations=0",
        "fencing=0",
        "double_writes=0",
        "stale_while_valid=0",
    ] {
        assert!(last.contains(field), "{field} missing: {last}");
    }

    let file = std::fs::File::open(&history).unwrap();
    let records = read_history(std::io::BufReader::new(file)).unwrap();
    let count = |event: &str| records.iter().filter(|r| r.event() == event).count();
    assert!(count("own") >= 4, "{records:?}");
    assert_eq!(count("join"), count("leave"), "every worker ended");
    assert!(count("fault") >= 1);
    assert!(records.iter().any(|r| matches!(
        r,
        Record::Fault {
            detail: Some(_),
            ..
        }
    )));
    // The history checks clean with the library checker too.
    assert!(check(&records, None).is_ok());

    let picture = std::fs::read_to_string(&svg).unwrap();
    assert!(
        picture.starts_with("<svg"),
        "{}",
        &picture[..100.min(picture.len())]
    );
    let _ = std::fs::remove_file(history);
    let _ = std::fs::remove_file(svg);
}

/// A short run of `adapter` with the faults that touch its connection.
fn adapter_runs(adapter: &str) {
    let history = temp(&format!("{adapter}.jsonl"));
    let output = chaos(&[
        "--adapter",
        adapter,
        "--workers",
        "3",
        "--duration",
        "6",
        "--interval",
        "100",
        "--faults",
        "restart,kill,reset,stall,crash",
        "--seed",
        "3",
        "--history",
        history.to_str().unwrap(),
    ]);
    let last = last_line(&output);
    assert!(
        output.status.success(),
        "{last}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        last.starts_with(&format!("chaos: ok adapter={adapter} ")),
        "{last}"
    );
    let _ = std::fs::remove_file(history);
}

#[test]
fn the_fred_adapter_runs_behind_the_same_flag() {
    adapter_runs("fred");
}

#[test]
fn the_smol_adapter_runs_behind_the_same_flag() {
    adapter_runs("smol");
}

/// Negative control: writing a stalled worker's release at the instant it
/// woke up, instead of its lease deadline, makes its holding overlap the
/// holders that took over; the checker must report it and the run fail.
#[test]
fn late_releases_of_stalled_workers_are_caught() {
    let history = temp("sabotage.jsonl");
    let output = chaos(&[
        "--workers",
        "3",
        "--duration",
        "8",
        "--interval",
        "100",
        "--faults",
        "stall",
        "--stall-intervals",
        "10",
        "--sabotage-release",
        "--history",
        history.to_str().unwrap(),
    ]);
    let last = last_line(&output);
    assert_eq!(output.status.code(), Some(1), "{last}");
    assert!(last.starts_with("chaos: VIOLATION"), "{last}");
    let _ = std::fs::remove_file(history);
}

#[test]
fn unknown_faults_are_usage_errors() {
    let output = chaos(&["--faults", "stall,meteor", "--history", "/dev/null"]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("meteor") && stderr.contains("flushall"),
        "{stderr}"
    );
}

// ----- the harness and the proxy as a library ---------------------------

/// Receives until `done` says so, for at most `within`.
fn until(harness: &mut Harness, within: Duration, mut done: impl FnMut(&Happened) -> bool) {
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "not reached within {within:?}: {:?}",
            harness.records()
        );
        if let Some(happened) = harness.next(left).expect("harness")
            && done(&happened)
        {
            return;
        }
    }
}

/// Waits until two workers both own a pair of `n = 2`.
fn both_own(harness: &mut Harness, l: Duration) {
    let mut owned = std::collections::BTreeSet::new();
    until(harness, l * 12, |h| {
        if let Happened::Own { id, lease, .. } = h
            && lease.pair().is_some_and(|p| p.n() == 2)
        {
            owned.insert(*id);
        }
        owned.len() == 2
    });
}

fn options(l: Duration) -> lease_core::Options {
    lease_core::Options::new(unique_name("harness"), l)
        .with_handover(lease_core::Handover::WholePairs)
}

#[test]
fn workers_own_stall_crash_and_stand_down_with_a_clean_history() {
    let server = RedisServer::start().expect("redis-server");
    let l = test_interval();
    let mut harness = Harness::new(AdapterKind::Redis, options(l), Instant::now());
    let a = harness.spawn("w0", server.url().to_owned()).unwrap();
    let b = harness.spawn("w1", server.url().to_owned()).unwrap();
    both_own(&mut harness, l);
    // A stall longer than a lease: the release line carries the deadline,
    // before the instant the frozen worker noticed.
    harness.control(
        a,
        Control::Stall {
            duration: l * 4,
            mid_task: false,
        },
    );
    until(
        &mut harness,
        l * 8,
        |h| matches!(h, Happened::Release { id, noticed, ended, .. } if *id == a && ended < noticed),
    );
    harness.control(b, Control::Crash);
    until(
        &mut harness,
        l * 4,
        |h| matches!(h, Happened::Left { id, how: LeaveHow::Crash, .. } if *id == b),
    );
    assert!(!harness.is_running(b));
    let (end, stuck) = harness
        .stop(l * 2 + Duration::from_secs(2), |_| {})
        .unwrap();
    assert!(stuck.is_empty(), "{stuck:?}");
    assert_eq!(harness.workers().count(), 0);

    let records = harness.records();
    let count = |event: &str| records.iter().filter(|r| r.event() == event).count();
    assert_eq!((count("join"), count("leave")), (2, 2));
    assert_eq!(count("own"), count("release"), "{records:?}");
    assert!(records.iter().any(
        |r| matches!(r, Record::Leave { how: LeaveHow::Cancel, worker, .. } if worker == "w0")
    ));
    let summary = check(records, Some(harness.us(end)));
    assert!(summary.is_ok(), "{summary}");
}

/// Negative control at the library level: releases written when the stalled
/// worker noticed, not at its lease's deadline, overlap the holder that took
/// over, and the judge reports it.
#[test]
fn sabotaged_releases_of_a_stalled_worker_are_caught() {
    let server = RedisServer::start().expect("redis-server");
    let l = test_interval();
    let mut harness =
        Harness::new(AdapterKind::Redis, options(l), Instant::now()).with_sabotaged_releases();
    let ids: Vec<WorkerId> = (0..2)
        .map(|k| {
            harness
                .spawn(&format!("w{k}"), server.url().to_owned())
                .unwrap()
        })
        .collect();
    both_own(&mut harness, l);
    // Frozen for 10 intervals: the other worker takes the whole group
    // meanwhile, then the sleeper notices its lease ended.
    harness.control(
        ids[0],
        Control::Stall {
            duration: l * 10,
            mid_task: false,
        },
    );
    until(
        &mut harness,
        l * 14,
        |h| matches!(h, Happened::Release { id, .. } if *id == ids[0]),
    );
    let (end, _) = harness
        .stop(l * 2 + Duration::from_secs(2), |_| {})
        .unwrap();
    let summary = check(harness.records(), Some(harness.us(end)));
    assert!(!summary.is_ok(), "the overlap went unseen: {summary}");
    assert!(summary.violation_count > 0, "{summary}");
}

/// The proxy in front of a real Redis: a registration whose reply is lost
/// was executed, and the same command sent again is counted as a re-send.
#[test]
fn a_lost_reply_was_executed_by_redis() {
    let server = RedisServer::start().expect("redis-server");
    let proxy = Proxy::new(server.addr()).unwrap();
    let link = proxy.link(7).unwrap();
    let client = redis::Client::open(link.url()).unwrap();
    let mut conn = client
        .get_connection_with_timeout(Duration::from_secs(2))
        .unwrap();
    let script = "return redis.call('INCR', KEYS[1])";
    let incr = |conn: &mut redis::Connection| command(conn, &["EVAL", script, "1", "counter"]);
    assert_eq!(incr(&mut conn).unwrap(), redis::Value::Int(1));
    link.lose_next_reply();
    assert!(incr(&mut conn).is_err(), "the reply must be lost");
    assert!(link.lost_reply());
    // Executed all the same.
    assert_eq!(
        server.command(&["GET", "counter"]).unwrap(),
        redis::Value::BulkString(b"2".to_vec())
    );
    let mut again = client
        .get_connection_with_timeout(Duration::from_secs(2))
        .unwrap();
    assert_eq!(incr(&mut again).unwrap(), redis::Value::Int(3));
    assert_eq!(link.resent(), 1);
    assert_eq!(link.counts(), (2, 1));
}
