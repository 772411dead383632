//! Rule 18 on every adapter against a real server: a member restarted under
//! its name returns to its tasks, and of two live processes with one member
//! name one is refused.

use lease_core::{IdleReason, Mode, Options, diag};
use lease_testkit::{TestRedis, unique_name};

use crate::{Adapter, Group, capture, intervals, pair};

fn named(group: &str, member: &str) -> Options {
    crate::options(group, Mode::Ranked)
        .with_member(member)
        .expect("a valid member name")
}

/// Scenario: three named workers settle; the one at index 1 crashes and a
/// new process with its member name starts at once. The group settles again
/// with the new process at index 1 and the two others where they were:
/// nothing moved.
pub async fn a_restarted_member_returns_to_its_tasks<A: Adapter>() {
    let conn = A::connect(TestRedis::shared().url()).await;
    let mut group = Group::<A>::default();
    let name = unique_name("member-restart");
    let ws: Vec<usize> = (0..3)
        .map(|k| group.add(&conn, 0, named(&name, &format!("m{k}"))))
        .collect();
    group
        .wait("settled", intervals(10.0), |g| g.settled(0))
        .await;
    let index = |g: &Group<A>, w: usize| g.held(w).and_then(pair).map(|(i, _)| i);
    let before: Vec<Option<u32>> = ws.iter().map(|&w| index(&group, w)).collect();
    let at = before
        .iter()
        .position(|&i| i == Some(1))
        .expect("index 1 held");
    group.crash(ws[at]);
    let new = group.add(&conn, 0, named(&name, &format!("m{at}")));
    group
        .wait("settled after the restart", intervals(10.0), |g| {
            g.settled(0)
        })
        .await;
    let mut now_ws = ws.clone();
    now_ws[at] = new;
    let after: Vec<Option<u32>> = now_ws.iter().map(|&w| index(&group, w)).collect();
    assert_eq!(after, before, "a worker moved:\n{}", group.render());
    group.check();
}

/// Scenario: two named workers settle; a second process starts under the
/// name `m1`. It is refused (`member in use`, an idle value naming `m1`)
/// and holds nothing while the first registers; once the first has crashed
/// it takes over the same index.
pub async fn of_two_processes_with_one_member_name_one_is_refused<A: Adapter>() {
    let conn = A::connect(TestRedis::shared().url()).await;
    let mut group = Group::<A>::default();
    let name = unique_name("member-twin");
    let first = group.add(&conn, 0, named(&name, "m0"));
    let second = group.add(&conn, 0, named(&name, "m1"));
    group
        .wait("settled", intervals(10.0), |g| g.settled(0))
        .await;
    let index = group.held(second).and_then(pair).map(|(i, _)| i);
    let twin = group.add(&conn, 0, named(&name, "m1"));
    group.run_for(intervals(6.0)).await;
    assert!(
        group.held(twin).is_none(),
        "the twin holds:\n{}",
        group.render()
    );
    assert!(
        group
            .records_of(twin, std::time::Instant::now() - intervals(7.0))
            .iter()
            .all(|r| r.pair.is_none()),
        "the twin was handed a lease:\n{}",
        group.render()
    );
    assert!(
        group.records_of(twin, std::time::Instant::now() - intervals(7.0))
            .iter()
            .any(|r| matches!(r.reason, Some(IdleReason::MemberInUse(why)) if why.member.as_str() == "m1")),
        "no member-in-use idle value:\n{}",
        group.render()
    );
    assert!(capture::count(&name, diag::MEMBER_IN_USE) >= 1);
    assert!(group.held(first).is_some() && group.held(second).is_some());
    group.crash(second);
    group
        .wait("the twin takes over", intervals(10.0), |g| {
            g.held(twin).and_then(pair).map(|(i, _)| i) == index
        })
        .await;
    group.check();
}
