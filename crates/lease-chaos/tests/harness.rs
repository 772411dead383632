//! The real-worker harness and the fault proxy as a library, against real
//! `redis-server` processes: what another test (the demo, fred's lost
//! reply) relies on.

use std::time::{Duration, Instant};

use lease_chaos::harness::{AdapterKind, Control, Happened, Harness, WorkerId};
use lease_chaos::proxy::Proxy;
use lease_history::{LeaveHow, Record, check};
use lease_testkit::{RedisServer, command, test_interval, unique_name};

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
            && lease.n() == 2
        {
            owned.insert(*id);
        }
        owned.len() == 2
    });
}

fn options(l: Duration) -> lease_core::Options {
    lease_core::Options::new(unique_name("harness"), l)
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
