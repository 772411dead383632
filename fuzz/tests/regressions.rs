//! Findings of the fuzz targets in `lease-core`, as plain tests of the public
//! API (stable toolchain, no fuzzer): `cargo test` in `fuzz/`. Both failed
//! on 3a226c4 and pass since bcad847. See `regressions/README.md` and
//! docs/fuzzing.md.

use std::time::{Duration, Instant};

use lease_core::{Event, Options, Token, Worker};

/// `fuzz/regressions/core_inputs/server-time-near-i64-max` (found by
/// `core_inputs`): a wrong-interval reply whose server time was within about
/// one interval of `i64::MAX` us passed `Reply::parse`, then
/// `Worker::handle_reply` overflowed in `band_end_server` ("attempt to
/// multiply with overflow"). A bad reply must be an error, never a panic;
/// since bcad847 `Reply::parse` rejects `sec > MAX_SERVER_SECONDS`.
#[test]
fn reply_with_server_time_near_i64_max_does_not_panic() {
    let t0 = Instant::now();
    let options = Options::new("fuzz", Duration::from_millis(141));
    let mut w = Worker::new(&options, Token::new(0), t0).unwrap();
    w.handle_timeout(t0);
    let id = w.poll_transmit().unwrap().id;
    // Server time i64::MAX us = 9223372036854 s + 775807 us; interval 141 ms.
    let reply = [0, 65_413_986_076_984, 9_223_372_036_854, 775_807];
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        w.handle_reply(t0, id, &reply)
    }));
    let result = outcome.unwrap_or_else(|_| panic!("handle_reply panicked on {reply:?}"));
    assert!(result.is_err(), "an absurd server time is accepted");
}

/// `fuzz/regressions/core_inputs/ranked-silent-after-wrong-interval` (found
/// by `core_inputs`, invariant "poll_timeout is None only after Stopped"): a
/// `Ranked` worker could go silent for ever: not stopped, `poll_timeout()`
/// `None`, never sending again.
///
/// Cause (worker.rs, `process`, before bcad847): in `Ranked` mode a reply
/// whose interval equals the newest one seen returned early ("nothing new")
/// without rescheduling; when it answered the only live request,
/// `maybe_send` had already cleared `schedule.fire_at`. Such a reply is a
/// wrong-interval answer to the registration aimed at `k+1` when the skew
/// estimate is ahead by more than `G + spread`, which the skew check
/// accepts (it allows `G + rtt/2` of slack since 0a07fd1).
///
/// The run below is physically consistent: server clock = local clock +
/// constant, monotone; L = 1 s, g = 0.15, token 0 (no spread). Requests take
/// 360 ms up and 40 ms down (a slow Redis command, or a client stalled
/// between `poll_transmit` and the write), so the skew estimate is 160 ms
/// ahead; then one request is fast.
#[test]
fn ranked_worker_never_goes_silent() {
    const K0: i64 = 1_700_000_000;
    // The reply of a registration executed at local time `local` ms: the
    // server clock reads K0 * L + local - 300 ms.
    let values = |counted: bool, local: i64| -> Vec<i64> {
        let us = K0 * 1_000_000 + (local - 300) * 1000;
        let v = vec![
            i64::from(counted),
            us / 1_000_000,
            us / 1_000_000,
            us % 1_000_000,
        ];
        if counted {
            [v, vec![-1, 0]].concat()
        } else {
            v
        }
    };
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let mut w = Worker::new(
        &Options::new("g", Duration::from_secs(1)),
        Token::new(0),
        t0,
    )
    .unwrap();
    w.handle_timeout(at(0));
    let probe = w.poll_transmit().unwrap().id;
    // The probe executes at local 360 ms, its reply is back at 400.
    w.handle_reply(at(400), probe, &values(false, 360)).unwrap();
    let r1 = w.poll_transmit().unwrap();
    assert_eq!(r1.args[2], K0.to_string());
    let r1 = r1.id;
    // #1: sent at 400, executes at 760, back at 800: counted in K0.
    w.handle_reply(at(800), r1, &values(true, 760)).unwrap();
    let next = w.poll_timeout().unwrap();
    assert_eq!(
        next,
        at(1290),
        "aimed at K0+1 plus G by a skew estimate 160 ms ahead"
    );
    w.handle_timeout(next);
    let r2 = w.poll_transmit().unwrap();
    assert_eq!(r2.args[2], (K0 + 1).to_string());
    let r2 = r2.id;
    // #2 is fast: executes at 1290 (server 990 ms into K0), back at 1300.
    w.handle_reply(at(1300), r2, &values(false, 1290)).unwrap();
    while w.poll_event().is_some_and(|e| e != Event::Stopped) {}
    assert!(!w.is_stopped());
    assert!(
        w.poll_timeout().is_some(),
        "not stopped, yet nothing is scheduled"
    );
    w.handle_timeout(at(10_000));
    assert!(
        w.poll_transmit().is_some(),
        "no registration in the next 9 s"
    );
}
