//! The adapter conformance suite: the same scenarios, against real
//! `redis-server` processes, for every adapter.
//!
//! An adapter's test file implements [`Adapter`] (connect, discover, cancel,
//! sleep) and instantiates the whole suite with [`conformance_suite!`],
//! giving a function that runs a future to completion on its runtime:
//!
//! ```ignore
//! struct Fred;
//! impl lease_conformance::Adapter for Fred { /* ... */ }
//! fn run<F: std::future::Future>(f: F) -> F::Output { /* block on it */ }
//! lease_conformance::conformance_suite!(Fred, run);
//! ```
//!
//! The scenarios only use `futures`, `std` and the adapter's `sleep` and
//! cancellation token, so they run on any runtime; that runtime must keep
//! the workers running while a scenario blocks briefly on a synchronous
//! `lease-testkit` call (a tokio multi-thread runtime, smol's or async-std's
//! global executor). Every scenario records what each worker's loop was
//! handed, and when, and ends by having that history judged by the checker
//! of `lease-history` ([`history::violations`]); set `CONFORMANCE_HISTORY=1`
//! to print every history.
pub mod capture;
pub mod history;
mod members;
#[cfg(feature = "redis-rs")]
pub mod redis_rs;
pub mod server;
pub mod tls;

pub use members::{
    a_restarted_member_returns_to_its_tasks, of_two_processes_with_one_member_name_one_is_refused,
};
pub use server::the_server_is_checked_once_per_connection;

use std::future::Future;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::future::select;
use futures::stream::LocalBoxStream;
use lease_core::diag;
use lease_core::{Assignment, Counting, Handover, IdleReason, Lease, Mode, Options, OptionsError};
use lease_testkit::{RedisCluster, RedisServer, TestRedis, test_interval, unique_name};

use self::history::Hold;

/// What the suite needs from an adapter.
pub trait Adapter: 'static {
    /// A connection the workers of a scenario share. Made by
    /// [`Adapter::connect`], it must reconnect by itself after the server
    /// restarts.
    type Conn: Clone;

    /// The `registry` field of the adapter's `discover started` event.
    const REGISTRY: &'static str;

    /// Connects to the single server at `url`.
    fn connect(url: &str) -> impl Future<Output = Self::Conn>;

    /// Connects to the Redis Cluster whose nodes are at `urls`.
    fn connect_cluster(urls: &[String]) -> impl Future<Output = Self::Conn>;

    /// The adapter's cancellation token; a new one is not cancelled.
    type Cancel: Clone + Default;

    /// Cancels `token`.
    fn cancel(token: &Self::Cancel);

    /// Starts a worker; cancelling `cancel` must stand it down (idle value
    /// once if held, then the end of the stream).
    fn discover(
        conn: &Self::Conn,
        options: Options,
        cancel: Self::Cancel,
    ) -> Result<LocalBoxStream<'static, Assignment>, OptionsError>;

    /// Sleeps on the adapter's runtime.
    fn sleep(duration: Duration) -> impl Future<Output = ()>;
}

/// Generates one `#[test]` per scenario for `$adapter`, each running its
/// future with `$run` (a function `fn<F: Future>(F) -> F::Output`).
#[macro_export]
macro_rules! conformance_suite {
    ($adapter:ty, $run:path) => {
        $crate::conformance_suite!(@tests $adapter, $run,
            one_worker_owns_alone,
            four_workers_settle_ranked,
            four_workers_settle_arrival,
            join_ranked_keeps_indices,
            join_arrival,
            leave_by_cancellation,
            graceful_leave_serves_until_the_drain_ends,
            crash_without_cancellation,
            redis_restart,
            redis_paused_longer_than_the_gap,
            script_flush,
            redis_cluster,
            groups_and_prefixes_are_isolated,
            bad_options_are_rejected,
            every_diagnostic_is_emitted,
            workers_with_other_rules_are_refused_until_the_group_leaves,
            the_server_is_checked_once_per_connection,
            a_restarted_member_returns_to_its_tasks,
            of_two_processes_with_one_member_name_one_is_refused,
        );
    };
    (@tests $adapter:ty, $run:path, $($scenario:ident),+ $(,)?) => {
        $(
            #[test]
            fn $scenario() {
                $run($crate::$scenario::<$adapter>());
            }
        )+
    };
}

/// The interval the suite runs at.
fn l() -> Duration {
    test_interval()
}

/// `k` intervals of the suite's interval ([`test_interval`]).
pub fn intervals(k: f64) -> Duration {
    l().mul_f64(k)
}

/// One worker of a [`Group`].
struct Member<C> {
    team: usize,
    name: String,
    stream: Option<LocalBoxStream<'static, Assignment>>,
    cancel: C,
    /// The last pair handed to the loop (`None` before the first).
    current: Option<Option<Lease>>,
    /// The stream ended.
    ended: bool,
    /// Dropped without cancellation.
    crashed: bool,
}

/// One item handed to a worker's loop.
#[derive(Clone, Debug)]
pub struct Record {
    /// The worker.
    pub worker: usize,
    /// What it was handed: the lease, or `None` for an idle value.
    pub pair: Option<Lease>,
    /// Why it was idle, for an idle value.
    pub reason: Option<IdleReason>,
    /// When.
    pub at: Instant,
}

/// Workers of one or more groups ("teams"), all polled by the scenario, with
/// the history of everything their loops were handed.
pub struct Group<A: Adapter> {
    members: Vec<Member<A::Cancel>>,
    history: Vec<Record>,
    next_poll: usize,
    _adapter: std::marker::PhantomData<A>,
}

impl<A: Adapter> Default for Group<A> {
    fn default() -> Self {
        Self {
            members: Vec::new(),
            history: Vec::new(),
            next_poll: 0,
            _adapter: std::marker::PhantomData,
        }
    }
}

impl<A: Adapter> Group<A> {
    /// Starts a worker in `team` and returns its number.
    pub fn add(&mut self, conn: &A::Conn, team: usize, options: Options) -> usize {
        capture::watch(&options.name);
        let cancel = A::Cancel::default();
        let name = options.name.clone();
        let stream = A::discover(conn, options, cancel.clone()).expect("valid options");
        self.members.push(Member {
            team,
            name,
            stream: Some(stream),
            cancel,
            current: None,
            ended: false,
            crashed: false,
        });
        self.members.len() - 1
    }

    /// Starts `count` workers of `team` with `options`.
    pub fn add_many(&mut self, conn: &A::Conn, team: usize, options: &Options, count: usize) {
        for _ in 0..count {
            self.add(conn, team, options.clone());
        }
    }

    /// Cancels worker `w` through its token.
    pub fn cancel(&mut self, w: usize) {
        A::cancel(&self.members[w].cancel);
    }

    /// Drops worker `w`'s stream without cancelling it: a crash.
    pub fn crash(&mut self, w: usize) {
        self.members[w].stream = None;
        self.members[w].crashed = true;
    }

    fn alive(&self, team: usize) -> impl Iterator<Item = (usize, &Member<A::Cancel>)> {
        self.members
            .iter()
            .enumerate()
            .filter(move |(_, m)| m.team == team && !m.ended && !m.crashed)
    }

    /// The pair worker `w` holds now, if any (`None` also if its last lease
    /// has run out).
    pub fn held(&self, w: usize) -> Option<&Lease> {
        self.members[w]
            .current
            .as_ref()
            .and_then(Option::as_ref)
            .filter(|l| l.is_valid())
    }

    /// Every live worker of `team` holds a valid lease, all with `n` equal to
    /// their number and distinct `i`.
    pub fn settled(&self, team: usize) -> bool {
        let alive: Vec<usize> = self.alive(team).map(|(w, _)| w).collect();
        let n = alive.len();
        let mut seen = vec![false; n];
        alive.iter().all(|&w| match self.held(w).and_then(pair) {
            Some((i, m)) if m as usize == n && (i as usize) < n => {
                !std::mem::replace(&mut seen[i as usize], true)
            }
            _ => false,
        })
    }

    /// Worker `w`'s loop was last handed the idle pair.
    pub fn is_idle(&self, w: usize) -> bool {
        matches!(self.members[w].current, Some(None))
    }

    /// The loop of every live worker of `team` was last handed the idle pair.
    pub fn all_idle(&self, team: usize) -> bool {
        self.alive(team).all(|(w, _)| self.is_idle(w))
    }

    /// `(worker, i)` of every live worker of `team` that holds a lease.
    pub fn indices(&self, team: usize) -> Vec<(usize, u32)> {
        self.alive(team)
            .filter_map(|(w, _)| self.held(w).and_then(pair).map(|(i, _)| (w, i)))
            .collect()
    }

    /// The records of worker `w` after `since`.
    pub fn records_of(&self, w: usize, since: Instant) -> Vec<&Record> {
        self.history
            .iter()
            .filter(|r| r.worker == w && r.at >= since)
            .collect()
    }

    /// How many records the workers of `team` received after `since`.
    pub fn changes_since(&self, team: usize, since: Instant) -> usize {
        self.history
            .iter()
            .filter(|r| r.at >= since && self.members[r.worker].team == team)
            .count()
    }

    /// Whether worker `w`'s stream has ended.
    pub fn ended(&self, w: usize) -> bool {
        self.members[w].ended
    }

    /// Polls every stream once, round robin, recording what arrives.
    fn poll_members(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let count = self.members.len();
        for k in 0..count {
            let w = (self.next_poll + k) % count;
            let member = &mut self.members[w];
            let Some(stream) = member.stream.as_mut() else {
                continue;
            };
            match stream.as_mut().poll_next(cx) {
                Poll::Ready(Some(assignment)) => {
                    let reason = match &assignment {
                        Assignment::Idle(idle) => Some(idle.reason),
                        Assignment::Held(_) => None,
                    };
                    let pair = assignment.into_lease();
                    member.current = Some(pair.clone());
                    self.history.push(Record {
                        worker: w,
                        pair,
                        reason,
                        at: Instant::now(),
                    });
                    self.next_poll = w + 1;
                    return Poll::Ready(());
                }
                Poll::Ready(None) => {
                    member.stream = None;
                    member.ended = true;
                    return Poll::Ready(());
                }
                Poll::Pending => {}
            }
        }
        Poll::Pending
    }

    /// Records until `done` holds; panics after `within`.
    pub async fn wait(&mut self, what: &str, within: Duration, done: impl Fn(&Self) -> bool) {
        let deadline = Instant::now() + within;
        while !done(self) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                panic!(
                    "{what}: not reached within {within:?} (interval {:?}); history:\n{}",
                    l(),
                    self.render()
                );
            }
            self.step(left.min(l() / 4)).await;
        }
    }

    /// Records for `duration`.
    pub async fn run_for(&mut self, duration: Duration) {
        let until = Instant::now() + duration;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            self.step(left).await;
        }
    }

    /// Records at most one item, waiting at most `limit`.
    async fn step(&mut self, limit: Duration) {
        let next = std::future::poll_fn(|cx| self.poll_members(cx));
        let sleep = A::sleep(limit);
        futures::pin_mut!(next, sleep);
        let _ = select(next, sleep).await;
    }

    /// The holds of the history: from the instant a lease was handed to the
    /// loop until the worker was handed something else or the lease's
    /// deadline (as the worker last moved it), whichever is earlier.
    pub fn holds(&self) -> Vec<Hold> {
        let mut holds = Vec::new();
        for (x, r) in self.history.iter().enumerate() {
            let Some(lease) = &r.pair else { continue };
            let next = self.history[x + 1..]
                .iter()
                .find(|later| later.worker == r.worker)
                .map(|later| later.at);
            let end = next.map_or(lease.deadline(), |t| t.min(lease.deadline()));
            let (i, n) = pair(lease).expect("the suite runs whole pairs");
            holds.push(Hold {
                team: self.members[r.worker].team,
                worker: r.worker,
                i,
                n,
                token: lease.token(),
                start: r.at,
                end: end.max(r.at),
            });
        }
        holds
    }

    /// The history, one line per record, for failure messages.
    pub fn render(&self) -> String {
        let t0 = self.history.first().map_or_else(Instant::now, |r| r.at);
        let mut out = String::new();
        for r in &self.history {
            let at = r.at.saturating_duration_since(t0);
            let pair = match &r.pair {
                Some(l) => format!(
                    "{:?} token {} valid for {:?}",
                    pair(l),
                    l.token(),
                    l.deadline().saturating_duration_since(r.at)
                ),
                None => match r.reason {
                    Some(reason) => format!("idle ({reason})"),
                    None => "idle".to_owned(),
                },
            };
            out += &format!(
                "  {at:>10.3?} team {} worker {}: {pair}\n",
                self.members[r.worker].team, r.worker
            );
        }
        out
    }

    /// The checks every scenario ends with: the exclusive lease held, every
    /// stream started with the idle pair and only changed, and no reply was
    /// ever rejected.
    pub fn check(&self) {
        if std::env::var_os("CONFORMANCE_HISTORY").is_some() {
            eprintln!("history:\n{}", self.render());
        }
        let violations = history::violations(&self.holds());
        assert!(
            violations.is_empty(),
            "exclusivity violated:\n{}\nhistory:\n{}",
            violations
                .iter()
                .map(|(team, s)| {
                    let found = s.violations.iter().map(ToString::to_string);
                    let fencing = s.fencing.iter().map(ToString::to_string);
                    let anomalies = s.anomalies.iter().map(ToString::to_string);
                    let lines: Vec<String> = found.chain(fencing).chain(anomalies).collect();
                    format!("team {team}: {s}\n  {}", lines.join("\n  "))
                })
                .collect::<Vec<_>>()
                .join("\n"),
            self.render()
        );
        for (w, m) in self.members.iter().enumerate() {
            let records: Vec<&Record> = self.history.iter().filter(|r| r.worker == w).collect();
            if let Some(first) = records.first() {
                assert!(
                    first.pair.is_none() && first.reason == Some(IdleReason::Started),
                    "worker {w} did not start with the idle value"
                );
            }
            for two in records.windows(2) {
                let changed = match (&two[0].pair, &two[1].pair) {
                    // An idle value follows another only to say "refused"
                    // (rule 12) or "member in use" (rule 18).
                    (None, None) => {
                        matches!(
                            two[1].reason,
                            Some(IdleReason::Refused(_) | IdleReason::MemberInUse(_))
                        ) && two[0].reason != two[1].reason
                    }
                    (Some(a), Some(b)) => a.token() != b.token() || pair(a) != pair(b),
                    _ => true,
                };
                assert!(
                    changed,
                    "worker {w} was handed the same pair twice:\n{}",
                    self.render()
                );
            }
            let rejected = capture::count(&m.name, diag::REPLY_REJECTED);
            assert_eq!(rejected, 0, "replies were rejected for group {}", m.name);
        }
    }
}

// ----- scenarios ---------------------------------------------------------

/// Options of the scenarios in `mode`: whole pairs and a cancel that does
/// not leave (the shape the scenarios measure: pairs, indices, the slot a
/// departure leaves); the default task sets run in the chaos suite.
pub fn options(name: &str, mode: Mode) -> Options {
    let o = Options::new(name, l());
    match mode {
        Mode::Ranked => o
            .with_handover(Handover::WholePairs)
            .with_graceful_leave(false),
        Mode::Arrival => o.with_counting(Counting::Arrival),
    }
}

/// The whole pair `(i, n)` a lease holds.
pub fn pair(lease: &Lease) -> Option<(u32, u32)> {
    lease.pair().map(|p| (p.i(), p.n()))
}

async fn shared<A: Adapter>() -> A::Conn {
    A::connect(TestRedis::shared().url()).await
}

/// Settles `count` workers of one group on the shared server and checks they
/// stay settled.
async fn settle_and_stay<A: Adapter>(mode: Mode, count: usize) {
    let conn = shared::<A>().await;
    let mut group = Group::<A>::default();
    group.add_many(&conn, 0, &options(&unique_name("settle"), mode), count);
    group
        .wait("settled", intervals(10.0), |g| g.settled(0))
        .await;
    let before = group.indices(0);
    let since = Instant::now();
    group.run_for(intervals(5.0)).await;
    assert_eq!(
        group.changes_since(0, since),
        0,
        "a settled group changed pairs:\n{}",
        group.render()
    );
    assert!(group.settled(0));
    assert_eq!(group.indices(0), before);
    group.check();
}

/// Scenario 1: a lone worker owns `(0, 1)` within about three intervals.
pub async fn one_worker_owns_alone<A: Adapter>() {
    let conn = shared::<A>().await;
    let mut group = Group::<A>::default();
    let w = group.add(&conn, 0, options(&unique_name("alone"), Mode::Ranked));
    group
        .wait("(0, 1) held", intervals(3.5), |g| {
            g.held(w).and_then(pair) == Some((0, 1))
        })
        .await;
    let lease = group.held(w).expect("held").clone();
    assert!(lease.is_leader());
    assert!(lease.token() > 0);
    group.check();
}

/// Scenarios 2 and 12: four workers settle on `0..4` of `n = 4` and stay.
pub async fn four_workers_settle_ranked<A: Adapter>() {
    settle_and_stay::<A>(Mode::Ranked, 4).await;
}

/// Scenarios 2 and 12, in the original protocol's counting mode (Arrival).
pub async fn four_workers_settle_arrival<A: Adapter>() {
    settle_and_stay::<A>(Mode::Arrival, 4).await;
}

/// Scenario 3: three settled workers, a fourth joins, all settle on `n = 4`;
/// in `Ranked` mode the settled ones keep their indices.
async fn join<A: Adapter>(mode: Mode) {
    let conn = shared::<A>().await;
    let mut group = Group::<A>::default();
    let o = options(&unique_name("join"), mode);
    group.add_many(&conn, 0, &o, 3);
    group
        .wait("three settled", intervals(10.0), |g| g.settled(0))
        .await;
    let before = group.indices(0);
    let newcomer = group.add(&conn, 0, o);
    group
        .wait("four settled", intervals(10.0), |g| g.settled(0))
        .await;
    if mode == Mode::Ranked {
        let after: Vec<(usize, u32)> = group
            .indices(0)
            .into_iter()
            .filter(|(w, _)| *w != newcomer)
            .collect();
        assert_eq!(after, before, "settled workers moved:\n{}", group.render());
        assert_eq!(group.held(newcomer).and_then(pair).map(|(i, _)| i), Some(3));
    }
    group.check();
}

/// Scenario 3 in `Ranked` mode.
pub async fn join_ranked_keeps_indices<A: Adapter>() {
    join::<A>(Mode::Ranked).await;
}

/// Scenario 3 in `Arrival` mode.
pub async fn join_arrival<A: Adapter>() {
    join::<A>(Mode::Arrival).await;
}

/// Scenario 4: a worker leaves through its cancellation token: its stream
/// yields the idle pair once, then ends; the others settle on `n - 1`.
pub async fn leave_by_cancellation<A: Adapter>() {
    let conn = shared::<A>().await;
    let mut group = Group::<A>::default();
    group.add_many(&conn, 0, &options(&unique_name("leave"), Mode::Ranked), 3);
    group
        .wait("three settled", intervals(10.0), |g| g.settled(0))
        .await;
    let since = Instant::now();
    group.cancel(1);
    group
        .wait("cancelled stream ended", intervals(2.0), |g| g.ended(1))
        .await;
    let after: Vec<bool> = group
        .records_of(1, since)
        .iter()
        .map(|r| r.pair.is_some())
        .collect();
    assert_eq!(
        after,
        [false],
        "after cancellation: idle once, then the end"
    );
    let reasons: Vec<_> = group
        .records_of(1, since)
        .iter()
        .map(|r| r.reason)
        .collect();
    assert_eq!(
        reasons,
        [Some(IdleReason::Cancelled)],
        "the stand-down says why"
    );
    group
        .wait("two settled", intervals(10.0), |g| g.settled(0))
        .await;
    group.check();
}

/// Scenario 4b (rule 16): with graceful leave, the cancelled worker removes
/// itself from the group and keeps its lease, valid, after the cancel; its
/// stream yields the idle value (cancelled) once the lease has drained, then
/// ends; the others settle on `n - 1`, never overlapping it (the history
/// check).
pub async fn graceful_leave_serves_until_the_drain_ends<A: Adapter>() {
    let conn = shared::<A>().await;
    let mut group = Group::<A>::default();
    let options = options(&unique_name("graceful"), Mode::Ranked).with_graceful_leave(true);
    group.add_many(&conn, 0, &options, 3);
    group
        .wait("three settled", intervals(10.0), |g| g.settled(0))
        .await;
    let since = Instant::now();
    group.cancel(1);
    group.run_for(intervals(0.2)).await;
    assert!(
        group.held(1).is_some() && !group.ended(1),
        "the leaving worker still serves its lease"
    );
    group
        .wait("cancelled stream ended", intervals(3.0), |g| g.ended(1))
        .await;
    let reasons: Vec<_> = group
        .records_of(1, since)
        .iter()
        .map(|r| (r.pair.is_some(), r.reason))
        .collect();
    assert_eq!(
        reasons,
        [(false, Some(IdleReason::Cancelled))],
        "after the drain: idle once, then the end"
    );
    group
        .wait("two settled", intervals(10.0), |g| g.settled(0))
        .await;
    group.check();
}

/// Scenario 5: a worker's stream is dropped without cancellation; the
/// others settle on `n - 1`.
pub async fn crash_without_cancellation<A: Adapter>() {
    let conn = shared::<A>().await;
    let mut group = Group::<A>::default();
    group.add_many(&conn, 0, &options(&unique_name("crash"), Mode::Ranked), 3);
    group
        .wait("three settled", intervals(10.0), |g| g.settled(0))
        .await;
    group.crash(0);
    group
        .wait("two settled", intervals(10.0), |g| g.settled(0))
        .await;
    group.check();
}

/// Scenario 6: Redis restarts (all data lost); the group stands down at most
/// briefly and settles again.
pub async fn redis_restart<A: Adapter>() {
    let mut server = RedisServer::start().expect("redis-server");
    let conn = A::connect(server.url()).await;
    let mut group = Group::<A>::default();
    group.add_many(&conn, 0, &options(&unique_name("restart"), Mode::Ranked), 3);
    group
        .wait("settled", intervals(10.0), |g| g.settled(0))
        .await;
    server.restart().expect("restart");
    let restarted = Instant::now();
    group
        .wait("idle or changed after the restart", intervals(4.0), |g| {
            g.changes_since(0, restarted) > 0
        })
        .await;
    group
        .wait("settled after the restart", intervals(12.0), |g| {
            g.settled(0)
        })
        .await;
    group.check();
}

/// Scenario 7: Redis is paused for longer than a lease can last: every
/// worker goes idle (the lease expires), then the group settles again.
pub async fn redis_paused_longer_than_the_gap<A: Adapter>() {
    let mut server = RedisServer::start().expect("redis-server");
    let conn = A::connect(server.url()).await;
    let mut group = Group::<A>::default();
    let name = unique_name("pause");
    group.add_many(&conn, 0, &options(&name, Mode::Ranked), 2);
    group
        .wait("settled", intervals(10.0), |g| g.settled(0))
        .await;
    // A Ranked lease lasts until the end of the interval after its
    // registration's: pausing for 4 intervals makes it run out.
    server.pause(intervals(4.0)).expect("pause");
    group
        .wait("all idle during the pause", intervals(4.0), |g| {
            g.all_idle(0)
        })
        .await;
    assert!(
        capture::count(&name, diag::LEASE_EXPIRED) > 0,
        "no lease expired"
    );
    for w in 0..2 {
        let last = group.records_of(w, Instant::now() - intervals(4.0));
        assert!(
            last.iter().any(|r| r.reason == Some(IdleReason::Expired)),
            "worker {w}'s stand-down says the lease expired:\n{}",
            group.render()
        );
    }
    group
        .wait("settled after the pause", intervals(14.0), |g| g.settled(0))
        .await;
    group.check();
}

/// Scenario 8: `SCRIPT FLUSH` while a group is settled: the adapter reloads
/// the script (`script loaded`) and the group is settled afterwards.
pub async fn script_flush<A: Adapter>() {
    let server = RedisServer::start().expect("redis-server");
    let conn = A::connect(server.url()).await;
    let mut group = Group::<A>::default();
    let name = unique_name("flush");
    group.add_many(&conn, 0, &options(&name, Mode::Ranked), 2);
    group
        .wait("settled", intervals(10.0), |g| g.settled(0))
        .await;
    let loaded = capture::count(&name, diag::SCRIPT_LOADED);
    server.command(&["SCRIPT", "FLUSH"]).expect("SCRIPT FLUSH");
    group
        .wait("script loaded again", intervals(3.0), |_| {
            capture::count(&name, diag::SCRIPT_LOADED) > loaded
        })
        .await;
    group
        .wait("settled after the flush", intervals(10.0), |g| g.settled(0))
        .await;
    let sha = capture::events(&name)
        .into_iter()
        .rfind(|e| e.message == diag::SCRIPT_LOADED)
        .and_then(|e| e.fields.get("sha").cloned());
    assert_eq!(
        sha.as_deref(),
        Some(lease_core::Script::for_mode(Mode::Ranked).sha1())
    );
    group.check();
}

/// Scenario 9: a group on a Redis Cluster settles.
pub async fn redis_cluster<A: Adapter>() {
    let cluster = RedisCluster::start(RedisCluster::DEFAULT_MASTERS).expect("cluster");
    let conn = A::connect_cluster(&cluster.urls()).await;
    let mut group = Group::<A>::default();
    for (team, mode) in [(0, Mode::Ranked), (1, Mode::Arrival)] {
        group.add_many(&conn, team, &options(&unique_name("cluster"), mode), 3);
    }
    group
        .wait("settled on the cluster", intervals(10.0), |g| {
            g.settled(0) && g.settled(1)
        })
        .await;
    group.check();
}

/// Scenario 10: groups with the same name under different prefixes, and
/// different names under one prefix, are independent.
pub async fn groups_and_prefixes_are_isolated<A: Adapter>() {
    let conn = shared::<A>().await;
    let mut group = Group::<A>::default();
    let (x, y) = (unique_name("iso-x"), unique_name("iso-y"));
    let teams = [(&x, "a:", 2), (&x, "b:", 3), (&y, "a:", 1), (&x, "", 1)];
    for (team, (name, prefix, count)) in teams.into_iter().enumerate() {
        let o = options(name, Mode::Ranked).with_prefix(prefix);
        group.add_many(&conn, team, &o, count);
    }
    group
        .wait("every group settled on its own n", intervals(10.0), |g| {
            (0..teams.len()).all(|t| g.settled(t))
        })
        .await;
    group.check();
}

/// Scenario 11: invalid options are rejected with typed errors.
pub async fn bad_options_are_rejected<A: Adapter>() {
    let conn = shared::<A>().await;
    let cases = [
        (Options::new("", l()), OptionsError::EmptyName),
        (Options::new("a{b}", l()), OptionsError::NameHasBrace('{')),
        (
            Options::new("g", l()).with_gap(0.7),
            OptionsError::GapOutOfRange(0.7),
        ),
        (
            Options::new("g", Duration::ZERO),
            OptionsError::IntervalTooShort(Duration::ZERO),
        ),
    ];
    for (options, expected) in cases {
        match A::discover(&conn, options.clone(), A::Cancel::default()) {
            Err(e) => assert_eq!(e, expected, "{options:?}"),
            Ok(_) => panic!("accepted {options:?}"),
        }
    }
}

/// The original's 13 messages, their levels and fields (besides `name`).
const TABLE: [(&str, tracing::Level, &[&str]); 13] = {
    use tracing::Level as L;
    [
        (
            diag::REGISTRATION_FAILED,
            L::ERROR,
            &["error", "attempt", "delay"],
        ),
        (diag::LEASE_EXPIRED, L::WARN, &["interval", "after"]),
        (
            diag::DISCOVER_STARTED,
            L::INFO,
            &["interval", "gap", "prefix", "registry"],
        ),
        (diag::DISCOVER_STOPPED, L::INFO, &["reason"]),
        (diag::PAIR_DISAGREED, L::DEBUG, &["i", "n", "pi", "pn"]),
        (diag::SCRIPT_LOADED, L::DEBUG, &["sha"]),
        (
            diag::REGISTRATION_COMPLETED,
            L::TRACE,
            &["interval", "index", "replicas", "skew"],
        ),
        (diag::LEASE_GRANTED, L::TRACE, &["i", "n"]),
        (diag::LEASE_RELEASED, L::TRACE, &["i", "n", "reason"]),
        (diag::PAIR_AGREED, L::TRACE, &["i", "n"]),
        (diag::NO_PAIR_IMPLIED, L::TRACE, &["pi", "pn"]),
        (
            diag::NEXT_REGISTRATION_SCHEDULED,
            L::TRACE,
            &["delay", "expires"],
        ),
        (diag::PAIR_HANDED_TO_THE_LOOP, L::TRACE, &["i", "n"]),
    ]
};

/// Scenario 13: over a run with a grant, a release, an expiry, failures,
/// `NOSCRIPT` recovery and a cancel, every message of the original protocol's table
/// appears with its level and exactly its fields, and no field carries the
/// Redis URL.
pub async fn every_diagnostic_is_emitted<A: Adapter>() {
    let mut server =
        RedisServer::start_with_args(&["--requirepass", "s3cret-pw"]).expect("redis-server");
    let url = server.url().to_owned();
    let conn = A::connect(&url).await;
    let mut group = Group::<A>::default();
    let name = unique_name("diag");
    let w = group.add(&conn, 0, options(&name, Mode::Ranked).with_prefix("d:"));
    let dropped = group.add(&conn, 1, options(&unique_name("diag-drop"), Mode::Ranked));
    let held = |g: &Group<A>| g.held(w).is_some();
    group.wait("granted", intervals(4.0), held).await;

    // An expiry: pause longer than the lease lasts.
    server.pause(intervals(4.0)).expect("pause");
    group
        .wait("expired", intervals(4.0), |g| g.is_idle(w))
        .await;
    group
        .wait("granted after the pause", intervals(14.0), held)
        .await;

    // Failures while the server is down (two intervals, so that at least
    // one registration falls due), then NOSCRIPT on the new server.
    let dropped_name = group.members[dropped].name.clone();
    let failed = capture::count(&name, diag::REGISTRATION_FAILED);
    let loaded = || {
        capture::count(&name, diag::SCRIPT_LOADED)
            + capture::count(&dropped_name, diag::SCRIPT_LOADED)
    };
    let loaded_before = loaded();
    server.stop().expect("stop");
    group.run_for(intervals(2.0)).await;
    server.start_again().expect("start again");
    let restarted = Instant::now();
    group
        .wait("granted after the restart", intervals(14.0), |g| {
            g.records_of(w, restarted)
                .iter()
                .any(|r| r.pair.as_ref().is_some_and(Lease::is_valid))
                && held(g)
        })
        .await;

    assert!(
        capture::count(&name, diag::REGISTRATION_FAILED) > failed,
        "no registration failed while the server was down"
    );
    assert!(loaded() > loaded_before, "the script was not loaded again");

    group.crash(dropped);
    group.cancel(w);
    group
        .wait("cancelled and dropped", intervals(2.0), |g| {
            g.ended(w) && capture::count(&dropped_name, diag::DISCOVER_STOPPED) > 0
        })
        .await;
    group.check();

    let events = capture::events(&name);
    for (message, level, fields) in TABLE {
        let seen: Vec<&capture::Captured> =
            events.iter().filter(|e| e.message == message).collect();
        assert!(!seen.is_empty(), "{message:?} never emitted");
        for e in seen {
            assert_eq!(e.level, level, "level of {message:?}");
            let mut expected: Vec<&str> = fields.to_vec();
            expected.push("name");
            expected.sort_unstable();
            let got: Vec<&str> = e.fields.keys().map(String::as_str).collect();
            assert_eq!(got, expected, "fields of {message:?}");
        }
    }
    let started = events
        .iter()
        .find(|e| e.message == diag::DISCOVER_STARTED)
        .expect("started");
    assert_eq!(started.fields["registry"], A::REGISTRY);
    assert_eq!(started.fields["prefix"], "d:");
    let stopped = |n: &str| {
        capture::events(n)
            .into_iter()
            .filter(|e| e.message == diag::DISCOVER_STOPPED)
            .map(|e| e.fields["reason"].clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(stopped(&name), ["abort"]);
    assert_eq!(stopped(&group.members[dropped].name), ["closed"]);
    let expired = events.iter().any(|e| e.message == diag::LEASE_EXPIRED);
    assert!(expired);

    for e in events
        .iter()
        .chain(&capture::events(&group.members[dropped].name))
    {
        for (field, value) in &e.fields {
            assert!(
                !value.contains(&url) && !value.contains("redis://") && !value.contains("s3cret"),
                "{:?} field {field} = {value:?} carries the URL or password",
                e.message
            );
        }
    }
}

/// Scenario (rule 12): a group at `L` is settled; a worker at `2L` and one
/// in the other counting mode join the same group name. Both are refused
/// (their idle value names the recorded rules) and write nothing, so no
/// instant has two holders of one slot; once the first group has left and
/// its rules record has expired, one of the newcomers' rules is recorded and
/// that newcomer takes over, while the other stays refused.
pub async fn workers_with_other_rules_are_refused_until_the_group_leaves<A: Adapter>() {
    let conn = shared::<A>().await;
    let mut group = Group::<A>::default();
    let name = unique_name("rules");
    let first = options(&name, Mode::Ranked);
    group.add_many(&conn, 0, &first, 2);
    group
        .wait("settled at L", intervals(10.0), |g| g.settled(0))
        .await;
    // A team per set of rules: fencing tokens are interval numbers, which
    // are only comparable under one interval length. Exclusivity across the
    // teams is checked at the end: no two holds of different rules overlap.
    let longer = group.add(
        &conn,
        1,
        Options {
            interval: l() * 2,
            ..options(&name, Mode::Ranked)
        },
    );
    let other_mode = group.add(&conn, 2, options(&name, Mode::Arrival));
    let refused = |g: &Group<A>, w: usize| {
        g.history.iter().any(|r| {
            r.worker == w
                && matches!(r.reason, Some(IdleReason::Refused(f))
                    if f.recorded.is_some_and(|rec| rec.interval_ms == l().as_millis() as u64
                        && rec.mode == Mode::Ranked))
        })
    };
    group
        .wait("both newcomers refused", intervals(8.0), |g| {
            refused(g, longer) && refused(g, other_mode)
        })
        .await;
    group.run_for(intervals(4.0)).await;
    assert!(
        group.held(longer).is_none() && group.held(other_mode).is_none(),
        "a refused worker holds nothing:\n{}",
        group.render()
    );
    let differ: Vec<capture::Captured> = capture::events(&name)
        .into_iter()
        .filter(|e| e.message == diag::GROUP_RULES_DIFFER)
        .collect();
    assert!(differ.len() >= 2, "one warning per refused worker");
    for e in &differ {
        assert_eq!(e.level, tracing::Level::WARN);
        let fields: Vec<&str> = e.fields.keys().map(String::as_str).collect();
        assert_eq!(fields, ["name", "ours", "recorded"]);
        assert!(e.fields["recorded"].contains(&format!("interval {} ms", l().as_millis())));
    }
    for w in [0, 1] {
        group.cancel(w);
    }
    group
        .wait("a newcomer takes over", intervals(20.0), |g| {
            g.held(longer).is_some() || g.held(other_mode).is_some()
        })
        .await;
    group.run_for(intervals(4.0)).await;
    assert!(
        group.held(longer).is_none() || group.held(other_mode).is_none(),
        "only one set of rules is recorded at a time:\n{}",
        group.render()
    );
    let holds = group.holds();
    for a in &holds {
        for b in holds.iter().filter(|b| b.team != a.team) {
            assert!(
                a.end <= b.start || b.end <= a.start,
                "workers {} and {} of different rules held leases at the same time:\n{}",
                a.worker,
                b.worker,
                group.render()
            );
        }
    }
    group.check();
}
