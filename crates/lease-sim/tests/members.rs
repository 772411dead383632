//! Rule 18, member names (Ranked): a restarted process under the same
//! member name returns to its position, so nobody else moves; two live
//! processes with one name never both hold (the later one is refused with
//! `IdleReason::MemberInUse`); and, as the negative control, a process that
//! grants while another holds its name is caught by the checker.

mod common;

use common::*;
use lease_core::{Assignment, Event, Handover, IdleReason, Mode, NegativeControl, Options};
use lease_sim::{Action, Faults, Network, RunConfig, Sim, SimConfig, WorkerId, random_run};

fn named(name: &str) -> Options {
    classic(Options::new("g", L), Mode::Ranked)
        .with_member(name)
        .expect("a valid member name")
}

/// `n` workers named `m0..` joining in the first interval.
fn named_group(seed: u64, n: usize, network: Network) -> (Sim, Vec<WorkerId>) {
    let mut cfg = SimConfig::new(seed, classic(Options::new("g", L), Mode::Ranked));
    cfg.network = network;
    let mut sim = Sim::new(cfg).expect("valid options");
    let ws = (0..n)
        .map(|k| {
            let at = L.mul_f64(k as f64 / n as f64 + 0.01 * (seed % 10) as f64);
            sim.schedule_join_with(at, named(&format!("m{k}")))
                .expect("valid options")
        })
        .collect();
    (sim, ws)
}

/// A member restarted at once (a crash, or a cancel with the new process
/// started at the same instant) comes back to its own index, and every
/// other worker keeps its index: nothing moves. Without member names the
/// last worker takes the hole (`hole_filling.rs`).
#[test]
fn a_restarted_member_returns_to_its_index_and_nobody_moves() {
    for seed in 1..=6u64 {
        let (mut sim, ws) = named_group(seed, 5, Network::ideal(L));
        run_until_settled(&mut sim, &ws, L * 10).expect("settles");
        let before = indices(&sim, &ws);
        let at = before.iter().position(|&i| i == Some(1)).unwrap();
        let old = ws[at];
        sim.act(if seed % 2 == 0 {
            Action::Crash(old)
        } else {
            Action::Cancel(old)
        });
        let new = sim
            .schedule_join_with(sim.now(), named(&format!("m{at}")))
            .expect("valid options");
        sim.run_for(L / 100);
        let mut now_ws = ws.clone();
        now_ws[at] = new;
        run_until_settled(&mut sim, &now_ws, L * 6).expect("settles again on n = 5");
        assert_eq!(indices(&sim, &now_ws), before, "seed {seed}: someone moved");
        let s = sim.check();
        assert!(s.is_ok(), "seed {seed}: {s}");
    }
}

/// Two live processes with one member name: the second is refused with an
/// idle value naming the member, never holds while the first registers,
/// and takes over (the same index) once the first has crashed.
#[test]
fn of_two_processes_with_one_name_the_second_is_refused_until_the_first_is_gone() {
    for seed in 1..=6u64 {
        let (mut sim, ws) = named_group(seed, 3, Network::ideal(L));
        run_until_settled(&mut sim, &ws, L * 10).expect("settles");
        let before = indices(&sim, &ws);
        let twin = sim
            .schedule_join_with(sim.now(), named("m1"))
            .expect("valid options");
        let start = sim.now();
        sim.run_for(L * 8);
        let observed = sim.drain_observed();
        assert_eq!(
            first_own(&observed, twin, start),
            None,
            "seed {seed}: the twin held"
        );
        let refused = observed.iter().any(|o| {
            o.worker == twin
                && matches!(&o.event, Event::Assignment(Assignment::Idle(i))
                    if matches!(i.reason, IdleReason::MemberInUse(why) if why.member.as_str() == "m1"))
        });
        assert!(refused, "seed {seed}: no member-in-use idle value");
        assert_eq!(
            indices(&sim, &ws),
            before,
            "seed {seed}: the first process lost its lease"
        );
        sim.act(Action::Crash(ws[1]));
        let after = [ws[0], twin, ws[2]];
        run_until_settled(&mut sim, &after, L * 6).expect("the twin takes over");
        assert_eq!(indices(&sim, &after), before, "seed {seed}");
        let s = sim.check();
        assert!(s.is_ok(), "seed {seed}: {s}");
    }
}

fn member_runs(seeds: std::ops::Range<u64>, handover: Handover, control: bool) -> (usize, u64) {
    let mut violating = 0;
    let mut refusals = 0;
    for seed in seeds {
        let cfg = RunConfig {
            handover,
            faults: Faults {
                within_guarantee: true,
                ..Faults::default()
            },
            members: true,
            customize: if control {
                |o| o.with_negative_control(NegativeControl::GrantWhileMemberInUse)
            } else {
                std::convert::identity
            },
            ..RunConfig::new(seed, 5, 150)
        };
        let report = random_run(&cfg).expect("valid options");
        let s = &report.summary;
        let tasks_bad = s
            .tasks
            .as_ref()
            .is_some_and(|t| t.violation_count + t.fencing_count > 0);
        if !s.is_ok() || s.violation_count + s.fencing_count > 0 || tasks_bad {
            violating += 1;
            assert!(control, "seed {seed} {handover}: {s}");
        }
        refusals += report
            .observed
            .iter()
            .filter(|o| {
                matches!(&o.event, Event::Assignment(Assignment::Idle(i))
                    if matches!(i.reason, IdleReason::MemberInUse(_)))
            })
            .count() as u64;
    }
    (violating, refusals)
}

/// Random runs with member names, churn, member restarts (at once, later,
/// and up to an interval before the old process is gone) and every fault
/// within the guarantee: exclusive and fenced, per pair and per task, in
/// both handovers, and the runs do reach two live processes with one name.
#[test]
fn member_restarts_keep_every_run_exclusive_and_fenced() {
    for handover in [Handover::TaskSets, Handover::WholePairs] {
        let (violating, refusals) = member_runs(1..31, handover, false);
        assert_eq!(violating, 0);
        eprintln!("{handover}: {refusals} member-in-use refusals");
        assert!(refusals >= 10, "only {refusals} member-in-use refusals");
    }
}

/// The negative control: a process that grants from registrations under a
/// name another process holds (`NegativeControl::GrantWhileMemberInUse`)
/// overlaps the old process's last lease, and the checker catches it.
#[test]
fn granting_while_another_process_holds_the_name_is_caught_by_the_checker() {
    let (violating, _) = member_runs(1..31, Handover::TaskSets, true);
    eprintln!("control caught in {violating}/30");
    assert!(violating >= 3, "caught in only {violating}/30");
    // And in the targeted shape: the new process starts while the old one
    // still registers.
    let mut caught = 0;
    for seed in 1..=6u64 {
        let (mut sim, ws) = named_group(seed, 3, Network::ideal(L));
        run_until_settled(&mut sim, &ws, L * 10).expect("settles");
        let twin = named("m1").with_negative_control(NegativeControl::GrantWhileMemberInUse);
        sim.schedule_join_with(sim.now(), twin)
            .expect("valid options");
        sim.run_for(L * 6);
        caught += usize::from(!sim.check().is_ok());
    }
    assert_eq!(caught, 6, "caught in only {caught}/6");
}

/// A member name is a Ranked feature; Arrival refuses it at construction.
#[test]
fn arrival_refuses_member_names() {
    let o: Options = Options::new("g", L)
        .with_counting(lease_core::Counting::Arrival)
        .with_member("m0")
        .expect("a valid name");
    assert!(matches!(
        o.validate(),
        Err(lease_core::OptionsError::MemberNeedsRanked)
    ));
}
