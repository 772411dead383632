//! The example's worker, unchanged, under paused tokio time on the simulated
//! Redis: three workers for 25 virtual seconds with a crash, a stall and a
//! Redis restart (`scenario`), judged per task by
//! `lease_history::work::check_tasks`, on redis-rs (`SimConnection`) and on
//! fred (`SimRedis::fred_mocks`); a loop that skips its drain is caught; two
//! runs with one seed give byte-identical histories.

mod scenario;

use lease_example::Work;
use lease_history::work::TaskViolation;
use scenario::{Client, Loop, paused_runtime, scenario, some_faults};

#[tokio::test(start_paused = true)]
async fn the_example_worker_survives_a_crash_a_stall_and_a_restart() {
    let (history, summary) = scenario(7, Loop::Example, Client::RedisRs, some_faults()).await;
    assert!(summary.is_ok(), "{summary}\n{:?}", summary.violations);
    // The work went on: every task was processed, again and again.
    assert_eq!(summary.tasks, Work::default().tasks, "{summary}");
    assert!(summary.accepted > 1500, "{summary}");
    // w0's crash left its task unfinished; w1's stalled commit came after
    // another worker's newer one and was fenced off.
    assert!(summary.unfinished <= 1, "{summary}");
    assert!(summary.rejected >= 1, "{summary}");
    assert_eq!(summary.faults, 4);
    assert!(history.contains(r#""worker":"w2""#));
    eprintln!("{summary}");
}

#[test]
fn a_loop_that_skips_its_drain_is_caught() {
    let (_, summary) = paused_runtime().block_on(scenario(
        7,
        Loop::SkipsDrain,
        Client::RedisRs,
        some_faults(),
    ));
    let double = summary
        .violations
        .iter()
        .filter(|v| matches!(v, TaskViolation::DoubleProcessing { .. }))
        .count();
    assert!(double > 0, "{summary}");
    eprintln!("{summary}");
}

#[test]
fn two_runs_with_one_seed_give_byte_identical_histories() {
    let run = || {
        paused_runtime()
            .block_on(scenario(11, Loop::Example, Client::RedisRs, some_faults()))
            .0
    };
    let (a, b) = (run(), run());
    assert!(a.lines().count() > 1000);
    assert_eq!(a, b);
    let other = paused_runtime()
        .block_on(scenario(12, Loop::Example, Client::RedisRs, some_faults()))
        .0;
    assert_ne!(a, other, "the seed changes the run");
}

#[test]
fn the_same_worker_on_fred() {
    let (_, summary) =
        paused_runtime().block_on(scenario(7, Loop::Example, Client::Fred, some_faults()));
    assert!(summary.is_ok(), "{summary}\n{:?}", summary.violations);
    assert_eq!(summary.tasks, Work::default().tasks, "{summary}");
    assert!(summary.accepted > 1500, "{summary}");
}

#[test]
fn the_same_worker_under_turmoil() {
    let (history, summary) = scenario::turmoil_scenario(7, Loop::Example, some_faults());
    assert!(summary.is_ok(), "{summary}\n{:?}", summary.violations);
    assert_eq!(summary.tasks, Work::default().tasks, "{summary}");
    assert!(summary.accepted > 1500, "{summary}");
    assert!(
        summary.rejected >= 1,
        "w1's stalled commit is fenced off: {summary}"
    );
    assert_eq!(summary.faults, 3);
    eprintln!("{summary}");
    let again = scenario::turmoil_scenario(7, Loop::Example, some_faults()).0;
    assert_eq!(history, again, "one seed, one history");
}

#[test]
fn a_loop_that_skips_its_drain_is_caught_under_turmoil() {
    let (_, summary) = scenario::turmoil_scenario(7, Loop::SkipsDrain, some_faults());
    let double = summary
        .violations
        .iter()
        .filter(|v| matches!(v, TaskViolation::DoubleProcessing { .. }))
        .count();
    assert!(double > 0, "{summary}");
    eprintln!("{summary}");
}
