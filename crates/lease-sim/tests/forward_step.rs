//! Rule 17 (docs/protocol.md): a forward step of the server clock smaller
//! than the gap, replayed with three real workers, the simulator's store and
//! a scripted network (`driver`: every execution and delivery is chosen
//! here, nothing is random).
//!
//! `L` = 1 s, `G` = 0.15 s, `Ranked`, consistent mapping. Times in seconds;
//! "server" times are relative to the epoch's interval 0, and equal true
//! time until the step.
//!
//! 1. C, D, A (spreads 0.5, 0.55, 0.6 of the band: they fire at 0.200,
//!    0.205, 0.210 into each interval, and sort in that order) join at 0.30,
//!    0.31, 0.32 and settle at positions 0, 1, 2 of `n = 3`. Every request
//!    takes 0.5 ms each way unless said otherwise.
//! 2. D crashes at 7.5, after its registration in 7, which reserved its
//!    place in 8 (rule 19): closed 8 still counts it, at position 1. A's
//!    registration in 9 (sent 9.210, executed 9.2105) renews `T(2, 3)`
//!    until `9.210 + floor(1.7895 s · 0.999) − 1 µs` = **10.997709**.
//! 3. Closed 9 is `{C: 0, A: 2}` of size 2, so A is a filler at position 1
//!    in 10, and closed 10 is `{C: 0, A: 1}`.
//! 4. Interval 10: A's requests execute, their replies are lost (A keeps
//!    `T(2, 3)` to its deadline). C's first request (sent 10.200, executed
//!    10.2005) implies `p9 = (0, 2)`; its reply is held. C's retries (10.270,
//!    10.360, 10.490) are lost; the last one in the band (10.700) is held in
//!    the network until the server reads 11.002.
//! 5. At true 10.5 the server clock steps forward by `J`.
//! 6. The held retry executes at server 11.002: wrong interval (its 0.3 s
//!    round trip cannot tell a step). C re-aims at once, still naming 10;
//!    that executes at server 11.003, wrong again, and its 1 ms round trip
//!    moves the offset by `J` without flagging it (`J + 1 ms ≤ G`). C re-aims
//!    at once naming 11: it executes at server 11.004, true `11.004 − J`.
//! 7. The held reply of step 4 arrives when that request executes (after the
//!    second wrong-interval answer, so nothing it clears is still needed), so
//!    C's previous reply is `(10, p9 = (0, 2))`, and the reply from 11 implies
//!    `p10 = (0, 2)`: agreement, at true `11.0045 − J`.
//!
//! Without rule 17 (`NegativeControl::GrantFromEarlyRegistration`) that reply
//! grants `T(0, 2)` while A still holds `T(2, 3)`: 668 task ids of 0..4096
//! for `J − 6.791 ms` (23.209 ms at `J` = 0.03 L), in both handover modes,
//! and for every `J` from 0.01 L to 0.149 L. With it the reply executed
//! 0.004 L into its interval grants nothing; C registers again from
//! `11.15` and is granted after A's lease has ended.
//!
//! The round trips are 1 ms so that every step of the sweep stays below
//! what they can tell (`J + u ≤ G`, `u` the two samples' mean round trip);
//! with 2 ms round trips a step of 0.149 L is detected, which is the other
//! test here: the first re-aim takes 1 ms each way, its precise sample
//! flags the step and C stands down (rule 10), and the held reply of step 4
//! arrives after the stand-down (when the request naming 11 executes, at
//! server 11.005). The stand-down forgets the requests in flight, so that
//! reply seeds nothing, and only with both switches off
//! (`NegativeControl::KeepRequestsAcrossStandDown` too) does C's early reply
//! grant, at true 10.8565, for 141.209 ms of overlap.

mod driver;

use std::time::Instant;

use driver::{
    Action, At, Driver, HALF_TRIP, K0, L, Net, Outcome, Overlap, ReplyAt, Route, SERVER_EPOCH_US,
    Sent, View, token_at,
};
use lease_core::NegativeControl;
use lease_core::{Mode, Options};
use lease_history::{Record, ReleaseReason};

/// Workers, in join order.
const C: usize = 0;
const D: usize = 1;
const A: usize = 2;
/// True instant of A's deadline (step 2 of the module docs).
const A_DEADLINE: u64 = 10_997_709;
/// Task ids of 0..4096 in both `T(0, 2)` and `T(2, 3)` under jump hash
/// (task sets; checked against lease-history's own mapping below).
const SHARED: u32 = 668;
/// The same under modulo (whole pairs): `t ≡ 0 (mod 2)` and `t ≡ 2 (mod
/// 3)`, i.e. `t ≡ 2 (mod 6)`, 683 ids of 0..4096.
const SHARED_MODULO: u32 = 683;

/// The shared count of the mode's mapping.
fn shared(incremental: bool) -> u32 {
    if incremental { SHARED } else { SHARED_MODULO }
}
const H: u64 = HALF_TRIP;

/// Server microseconds of `s` seconds after the epoch's interval 0.
fn server(s_us: u64) -> i64 {
    SERVER_EPOCH_US + s_us as i64
}

/// The scripted network of the module docs.
struct Script {
    /// One way of C's first re-aim after the boundary.
    reaim_half: u64,
    /// C's first request in 10 was sent.
    first_sent: bool,
}

impl Script {
    /// The server instant at which C's held reply from 10 is delivered: when
    /// its request naming 11 executes.
    fn held_reply_at(&self) -> i64 {
        server(11 * L + 6 * H + 2 * self.reaim_half)
    }
}

impl Net for Script {
    fn route(&mut self, s: &Sent, v: &View) -> Route {
        let boundary = server(11 * L);
        let in_10 = (10 * L..11 * L).contains(&s.at);
        match s.worker {
            A if in_10 => Route {
                exec: Some(At::True(s.at + H)),
                ..Route::default()
            },
            C if s.named == K0 + 10 && v.server < boundary => {
                if !self.first_sent {
                    self.first_sent = true;
                    Route {
                        exec: Some(At::True(s.at + H)),
                        replies: vec![ReplyAt::At(At::Server(self.held_reply_at()))],
                        ..Route::default()
                    }
                } else if s.at < 10 * L + 6 * L / 10 {
                    Route::lost()
                } else {
                    Route {
                        exec: Some(At::Server(boundary + 4 * H as i64)),
                        slot: Some(0),
                        replies: vec![ReplyAt::After(H)],
                        ..Route::default()
                    }
                }
            }
            C if s.named == K0 + 10 => Route {
                exec: Some(At::True(s.at + self.reaim_half)),
                replies: vec![ReplyAt::After(self.reaim_half)],
                ..Route::default()
            },
            _ => Route::prompt(s.at),
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Switches {
    /// `NegativeControl::GrantFromEarlyRegistration`: rule 17 off.
    early: bool,
    /// `NegativeControl::KeepRequestsAcrossStandDown`: rule 10's forgetting off.
    keep: bool,
}

const FIXED: Switches = Switches {
    early: false,
    keep: false,
};
const RULE_17_OFF: Switches = Switches {
    early: true,
    keep: false,
};

fn run(j: u64, incremental: bool, switches: Switches, reaim_half: u64) -> Outcome {
    let control = match (switches.early, switches.keep) {
        (true, true) => Some(NegativeControl::EarlyGrantsAndKeptRequests),
        (true, false) => Some(NegativeControl::GrantFromEarlyRegistration),
        (false, true) => Some(NegativeControl::KeepRequestsAcrossStandDown),
        (false, false) => None,
    };
    let options = Options {
        negative_control: control,
        ..driver::options(Mode::Ranked, 0.15, incremental)
    };
    let net = Script {
        reaim_half,
        first_sent: false,
    };
    let mut d = Driver::new(net, 13 * L, Instant::now());
    for (w, spread) in [0.5, 0.55, 0.6].into_iter().enumerate() {
        d.join(
            3 * L / 10 + w as u64 * L / 100,
            options.clone(),
            token_at(spread, w),
        );
    }
    d.schedule(7 * L + L / 2, Action::Crash(D));
    d.schedule(10 * L + L / 2, Action::ClockStep(j as i64));
    d.run()
}

/// C's executions from interval 10 on, as `(named, server, status)`.
fn c_execs(o: &Outcome) -> Vec<(u64, i64, i64)> {
    o.execs
        .iter()
        .filter(|e| e.worker == C && e.at >= 10 * L)
        .map(|e| (e.named - K0, e.server, e.reply[0]))
        .collect()
}

/// The schedule of the module docs happened: C's first four executions from
/// interval 10 on.
fn assert_shape(o: &Outcome, reaim_half: u64) {
    let got = c_execs(o);
    let reaim = 11 * L + 5 * H + reaim_half;
    let expected = [
        (10, server(10 * L + 200_000 + H), 1),
        (10, server(11 * L + 4 * H), 0),
        (10, server(reaim), 0),
        (11, server(reaim + reaim_half + H), 1),
    ];
    assert_eq!(got[..4], expected, "C's executions: {got:?}");
}

fn c_grants(o: &Outcome) -> Vec<(u64, u64)> {
    o.history
        .iter()
        .filter_map(|r| match r {
            Record::Own {
                worker,
                token,
                at_us,
                ..
            } if worker == "w0" => Some((*token - K0, *at_us)),
            _ => None,
        })
        .collect()
}

fn modes() -> [(bool, &'static str); 2] {
    [(false, "whole-pair"), (true, "incremental")]
}

#[test]
fn the_expected_overlap_is_the_common_tasks_of_t_0_2_and_t_2_3() {
    // lease-history's jump hash is written independently of lease-core's.
    use lease_history::Mapping;
    use lease_history::tasks::owner;
    let by_history = (0..4096u64)
        .filter(|&t| owner(Mapping::Consistent, t, 2) == 0 && owner(Mapping::Consistent, t, 3) == 2)
        .count() as u32;
    let by_core = driver::common(
        lease_core::ownership::Mapping::Consistent,
        [0, 2, 0, 2],
        [2, 3, 2, 3],
    );
    assert_eq!((by_history, by_core), (SHARED, SHARED));
    let modulo = (0..4096u64)
        .filter(|&t| owner(Mapping::Modulo, t, 2) == 0 && owner(Mapping::Modulo, t, 3) == 2)
        .count() as u32;
    assert_eq!(modulo, SHARED_MODULO);
}

#[test]
fn without_rule_17_a_step_of_a_fifth_of_the_gap_lets_two_workers_hold_common_tasks_in_both_modes() {
    let j = 30_000;
    for (incremental, mode) in modes() {
        let o = run(j, incremental, RULE_17_OFF, H);
        assert_shape(&o, H);
        let grant = 11 * L + 9 * H - j;
        assert!(
            c_grants(&o).contains(&(11, grant)),
            "{mode}: C was not granted from the early reply: {:?}",
            c_grants(&o)
        );
        assert_eq!(
            o.overlaps,
            [Overlap {
                a: C,
                b: A,
                shared: shared(incremental),
                start: grant,
                end: A_DEADLINE,
            }],
            "{mode}"
        );
        assert_eq!(A_DEADLINE - grant, 23_209);
        // The checker sees it too, on the history alone.
        let s = &o.summary;
        if incremental {
            let t = s.tasks.as_ref().expect("a task-set history");
            assert!(t.violation_count >= 1, "{mode}: {s}");
            assert_eq!(t.violations[0].overlap_us, 23_209, "{mode}: {s}");
        } else {
            assert!(s.violation_count >= 1, "{mode}: {s}");
            assert_eq!(s.violations[0].overlap_us, 23_209, "{mode}: {s}");
        }
    }
}

#[test]
fn with_rule_17_the_same_schedule_grants_only_after_the_old_lease_ended_in_both_modes() {
    let j = 30_000;
    for (incremental, mode) in modes() {
        let o = run(j, incremental, FIXED, H);
        assert_shape(&o, H);
        assert_eq!(o.overlaps, [], "{mode}");
        assert!(o.summary.is_ok(), "{mode}: {}", o.summary);
        // The early reply granted nothing; the second registration, from
        // G + the skew's uncertainty into 11 on the new offset, did.
        let (token, at) = *c_grants(&o)
            .iter()
            .find(|&&(token, _)| token == 11)
            .expect("C granted from 11");
        assert_eq!(token, 11);
        assert!(
            at > A_DEADLINE && at >= 11 * L + 150_000 - j,
            "{mode}: {at}"
        );
        assert_eq!(o.rejected, 0);
    }
}

#[test]
fn every_forward_step_from_a_hundredth_to_just_under_the_gap_overlaps_without_rule_17_and_never_with_it()
 {
    for (incremental, mode) in modes() {
        for j in (10..=149).map(|ms| ms * 1000) {
            let broken = run(j, incremental, RULE_17_OFF, H);
            let grant = 11 * L + 9 * H - j;
            assert_eq!(
                broken.overlaps,
                [Overlap {
                    a: C,
                    b: A,
                    shared: shared(incremental),
                    start: grant,
                    end: A_DEADLINE,
                }],
                "{mode}, J = {j} us"
            );
            assert_eq!(A_DEADLINE - grant, j - 6_791);
            assert!(!broken.summary.is_ok(), "{mode}, J = {j} us");
            let fixed = run(j, incremental, FIXED, H);
            assert_eq!(fixed.overlaps, [], "{mode}, J = {j} us");
            assert!(
                fixed.summary.is_ok(),
                "{mode}, J = {j} us: {}",
                fixed.summary
            );
        }
    }
}

#[test]
fn a_detected_step_stands_down_and_the_forgotten_reply_seeds_nothing_unless_both_rules_are_off() {
    let j = 149_000;
    let slow = 2 * H;
    let stand_down = 11 * L + 5 * H + 2 * slow - j;
    for (incremental, mode) in modes() {
        for (early, keep) in [(false, false), (true, false), (false, true), (true, true)] {
            let o = run(j, incremental, Switches { early, keep }, slow);
            let what = format!("{mode}, rule 17 off {early}, forgetting off {keep}");
            assert_shape(&o, slow);
            // C stood down on the precise re-aim's answer.
            let stood_down = o.history.iter().any(|r| {
                matches!(r, Record::Release { worker, reason: Some(ReleaseReason::Clock), at_us, .. }
                    if worker == "w0" && *at_us == stand_down)
            });
            assert!(stood_down, "{what}: no stand-down at {stand_down}");
            if early && keep {
                let grant = 11 * L + 7 * H + 2 * slow - j;
                assert_eq!(
                    o.overlaps,
                    [Overlap {
                        a: C,
                        b: A,
                        shared: shared(incremental),
                        start: grant,
                        end: A_DEADLINE,
                    }],
                    "{what}"
                );
                assert_eq!(A_DEADLINE - grant, 141_209);
                assert!(!o.summary.is_ok(), "{what}");
            } else {
                assert_eq!(o.overlaps, [], "{what}");
                assert!(o.summary.is_ok(), "{what}: {}", o.summary);
            }
        }
    }
}
