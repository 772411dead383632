//! Exhaustive, bounded check of the exclusivity invariant (docs/protocol.md,
//! "Why it is exclusive"): for 2 and 3 workers, over a bounded window of
//! intervals, every combination of network outcomes, stalls, server-clock
//! steps, restarts and graceful leaves of a scenario is run, and none lets
//! two workers hold a common task at any instant.
//!
//! # The model checker
//!
//! A small stateless model checker of our own. It drives the real
//! [`lease_core::Worker`] state machines and the real [`lease_sim::SimStore`]
//! through the deterministic driver of `tests/driver` (no seed, no
//! randomness, one event queue ordered by `(time, sequence)`). The worker is
//! not `Clone`, so the search is a depth-first walk over *choice sequences*
//! with replay from scratch: a run takes its choices from a prefix, then the
//! first option at every new choice point; the next run increments the
//! deepest choice that has options left. Every leaf is one complete run.
//!
//! # The choice points
//!
//! `L` = 1000 ms, gap 0.15 (and 0.05). Each worker's local clock is true
//! time (offsets and drift are left to the randomized simulations); the
//! server clock is true time plus an epoch aligned to `L` plus its steps.
//!
//! - **Before the run**, one choice each, when the scenario offers more than
//!   one option: a **step of the server clock** (none, or `J` of `G/4`,
//!   `G/2` or `2G`, forward or backward, at one of a few instants of the
//!   window); a **store restart** (none, or at one of a few instants); a
//!   **graceful leave** of one worker (none, or `Worker::handle_cancel`
//!   0.2 ms after one of its registrations is sent, while it is in flight:
//!   the leave request executes on arrival, so it lands after a prompt
//!   registration and before a [`Fate::SlowRequest`] one, which re-adds the
//!   token).
//! - **At the start of every interval of the window**, for each worker alive
//!   in it, the [`Fate`] of its link for that interval: every registration
//!   it sends during the interval shares it (so one choice can keep a worker
//!   out of an interval, which `Ranked` retries would otherwise always
//!   undo). Outside the window every request is prompt (1 ms round trip), and
//!   so is every leave request.
//!
//! The number of choice points does not depend on what the workers do, so a
//! scenario's leaf count is a product of its arities
//! ([`Scenario::expected_leaves`]); each test asserts it, so a change that
//! silently shrinks the search fails.
//!
//! # What is checked at every leaf
//!
//! 1. The history (an `own` when a loop receives a pair or a task set, a
//!    `release` at the instant it really ended) passes
//!    [`lease_history::check`]: exclusivity (per task for task-set
//!    histories), fencing, no anomaly.
//! 2. Independently, at every instant at which something happened, no two
//!    workers hold a common task: whole pairs have one `n` and distinct `i`,
//!    task sets share no id of `0..4096` (the driver's direct check).
//!
//! The oracle depends on the step chosen. Without a step, or with a forward
//! step below `G`, both must hold entirely (rule 17's claim). With a
//! backward step of each size the trees use (`G/4`, `G/2`, `2G`),
//! exclusivity must hold but fencing tokens may repeat (rule 10). Forward
//! steps of `2G` are outside the guarantee and not asserted: violating
//! leaves are counted and the first one printed. A backward step of `2G` reopens an interval after
//! some workers read it closed; the schedule in which that carried one
//! position to two workers of the next set (closed by rule 15's duplicate
//! clause) is pinned by
//! `a_backward_step_that_reopens_an_interval_never_hands_one_position_to_two_workers`.
//!
//! # Negative controls
//!
//! - `without_rule_17_the_search_finds_the_forward_step_schedule` runs three
//!   one-interval step trees (join, departure, departure with task sets)
//!   with `NegativeControl::GrantFromEarlyRegistration`: the search must find a
//!   schedule in which two workers hold one task under a forward step below
//!   `G` (and prints it), while the same trees with the rule find none.
//! - `duplicate_keepers_hand_one_position_to_two_workers_and_are_caught`
//!   replays that schedule with `SimStore::sabotage_duplicate_keepers`
//!   (every member carrying a position keeps it): two workers hold
//!   position 0 of 2 to the end of the run, and both checks catch it; a
//!   small tree around the schedule finds it by itself.
//! - `holder_measuring_from_arrival_is_caught_by_the_search` feeds the
//!   checker the spans of a deliberately broken holder that anchors every
//!   grant and renewal at the reply's *arrival* instead of its send (rule 6
//!   forbids it).
//!
//! `LEASE_SEARCH_DEEP=1` adds larger trees (wider windows, every fate).
//! Run with `--nocapture` to see the leaf counts and the time per scenario.

mod driver;

use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::time::Instant;

use driver::{
    Action, At, Driver, HALF_TRIP, K0, L, Net, Outcome, ReplyAt, Route, SERVER_EPOCH_US, Sent,
    View, token_at,
};
use lease_core::NegativeControl;
use lease_core::{Mode, Options};

/// How long a stalled worker stays frozen.
const STALL: u64 = L;

/// The outcome of a worker's registrations during one interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    /// Executed on arrival at the store, 0.5 ms after the send (as every
    /// executed outcome is unless said otherwise); the reply arrives 1 ms
    /// after the send.
    Prompt,
    /// The reply arrives just past the gap, `G + 1 ms` after the send.
    LateGap,
    /// The reply arrives `0.9 L` after the send.
    LateLong,
    /// Executed; the reply is lost.
    ReplyLost,
    /// Lost before execution.
    RequestLost,
    /// Prompt, but the worker process freezes for `L` right after the send:
    /// its reply, timers and give-ups wait until it wakes.
    Stall,
    /// Reaches the store `G + 1 ms` after the send (a slow link on the way
    /// out); the reply is prompt.
    SlowRequest,
    /// Prompt, and the reply is delivered a second time just after the
    /// server's interval ends (a duplicate across the boundary).
    DupReply,
    /// The connection stalls until the server's interval ends: the first
    /// registration executes at once but its reply comes back only 4 ms
    /// after the boundary (server clock), after the re-aims below; each
    /// retry queues behind it and only the latest one survives, executing
    /// 2 ms after the boundary (a wrong-interval answer, then re-aims that
    /// fire at once). Requests sent after the boundary are prompt.
    Straddle,
}

impl fmt::Display for Fate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Fate::Prompt => "prompt",
            Fate::LateGap => "late-gap",
            Fate::LateLong => "late-0.9L",
            Fate::ReplyLost => "reply-lost",
            Fate::RequestLost => "request-lost",
            Fate::Stall => "stall",
            Fate::SlowRequest => "slow-request",
            Fate::DupReply => "dup-reply",
            Fate::Straddle => "straddle",
        })
    }
}

/// The original outcomes.
const ALL_FATES: [Fate; 6] = [
    Fate::Prompt,
    Fate::LateGap,
    Fate::LateLong,
    Fate::ReplyLost,
    Fate::RequestLost,
    Fate::Stall,
];

/// The outcomes that change who is counted where and how long a reply takes,
/// without the short delay (for the larger trees).
const CORE_FATES: [Fate; 5] = [
    Fate::Prompt,
    Fate::LateLong,
    Fate::ReplyLost,
    Fate::RequestLost,
    Fate::Stall,
];

/// The outcomes of the clock-step trees: replies across the boundary, the
/// wrong-interval answer and its re-aims, lost replies and requests.
const STEP_FATES: [Fate; 5] = [
    Fate::Prompt,
    Fate::ReplyLost,
    Fate::RequestLost,
    Fate::Straddle,
    Fate::DupReply,
];

/// The outcomes of the graceful-leave trees: the registration executes
/// before the leave (prompt), after it (slow), or its reply is lost.
const LEAVE_FATES: [Fate; 4] = [
    Fate::Prompt,
    Fate::SlowRequest,
    Fate::ReplyLost,
    Fate::Straddle,
];

/// Every outcome (deep runs).
const EVERY_FATE: [Fate; 9] = [
    Fate::Prompt,
    Fate::LateGap,
    Fate::LateLong,
    Fate::ReplyLost,
    Fate::RequestLost,
    Fate::Stall,
    Fate::SlowRequest,
    Fate::DupReply,
    Fate::Straddle,
];

/// A step of the server clock: `by` microseconds at true `at`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ClockStep {
    at: u64,
    by: i64,
}

/// What the oracle asks of a leaf.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    /// No step, or a forward step below `G`: exclusivity and fencing.
    Guaranteed,
    /// A backward step, of each size the trees use: exclusivity (fencing
    /// tokens may repeat, rule 10).
    Backward {
        /// The step is `G` or more.
        large: bool,
    },
    /// A forward step of `G` or more: outside the guarantee (rule 17),
    /// counted, not asserted.
    BeyondForward,
}

/// One bounded search.
#[derive(Clone, Debug)]
struct Scenario {
    mode: Mode,
    incremental: bool,
    gap: f64,
    /// True join time of each worker, in microseconds.
    joins: Vec<u64>,
    /// Intervals (true time / `L`) whose link fates are choice points.
    window: Range<u64>,
    fates: &'static [Fate],
    /// A worker that crashes (not a choice), and when.
    crash: Option<(usize, u64)>,
    /// The step choice's options (empty or one: no choice point).
    steps: Vec<Option<ClockStep>>,
    /// The restart choice's options: true instants.
    restarts: Vec<Option<u64>>,
    /// The graceful-leave choice's options: a worker and the interval of
    /// the registration its cancel races.
    leaves: Vec<Option<(usize, u64)>>,
    /// The run ends here (true microseconds).
    horizon: u64,
    /// Rule 17 switched off (`NegativeControl::GrantFromEarlyRegistration`).
    sabotage_early: bool,
    /// Write the broken holder's history too.
    track_broken: bool,
    /// Every member carrying a position keeps it, duplicates included
    /// (`SimStore::sabotage_duplicate_keepers`).
    sabotage_duplicates: bool,
    /// Rule 18: worker `w` registers under member name `m{members[w]}`
    /// (empty: every worker anonymous), so two workers can be incarnations
    /// of one member.
    members: Vec<usize>,
    /// `NegativeControl::GrantWhileMemberInUse` on every worker.
    sabotage_members: bool,
}

impl Scenario {
    fn workers(&self) -> usize {
        self.joins.len()
    }

    fn g(&self) -> u64 {
        (self.gap * L as f64).round() as u64
    }

    fn options(&self) -> Options {
        let mut o = driver::options(self.mode, self.gap, self.incremental);
        o.negative_control = if self.sabotage_members {
            Some(NegativeControl::GrantWhileMemberInUse)
        } else {
            self.sabotage_early
                .then_some(NegativeControl::GrantFromEarlyRegistration)
        };
        if self.leaves.iter().any(Option::is_some) {
            o = o.with_graceful_leave(true);
        }
        o
    }

    /// The spread fraction of worker `w`'s token: `(w + 0.5) / workers`, so
    /// they fire in worker order and sort so among newcomers.
    fn spread(&self, w: usize) -> f64 {
        (w as f64 + 0.5) / self.workers() as f64
    }

    /// True instant at which worker `w` sends its scheduled registration in
    /// interval `k` (rule 8, no step before it; at least half the prompt
    /// round trip after `kL + G`, rule 17).
    fn fire_at(&self, w: usize, k: u64) -> u64 {
        let o = self.options();
        let u = (self.spread(w) * o.effective_spread() * L as f64) as u64;
        k * L + self.g() + u.max(HALF_TRIP)
    }

    /// The workers whose link for interval `k` is a choice point, with the
    /// graceful leave `leave`: joined by the end of `k`, not crashed before
    /// it, not gone after the interval of their leave.
    fn alive(&self, k: u64, leave: Option<(usize, u64)>) -> Vec<usize> {
        (0..self.workers())
            .filter(|&w| self.joins[w] < (k + 1) * L)
            .filter(|&w| !self.crash.is_some_and(|(c, at)| c == w && at < k * L))
            .filter(|&w| !leave.is_some_and(|(l, lk)| l == w && k > lk))
            .collect()
    }

    /// The number of leaves the search must visit, from the options alone.
    fn expected_leaves(&self) -> u64 {
        let arity = |n: usize| n.max(1) as u64;
        let globals = arity(self.steps.len()) * arity(self.restarts.len());
        let leaves: Vec<Option<(usize, u64)>> = if self.leaves.is_empty() {
            vec![None]
        } else {
            self.leaves.clone()
        };
        let links: u64 = leaves
            .iter()
            .map(|&leave| {
                let points: usize = self
                    .window
                    .clone()
                    .map(|k| self.alive(k, leave).len())
                    .sum();
                (self.fates.len() as u64).pow(points as u32)
            })
            .sum();
        globals * links
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}{} g={} workers={} window=[{}L,{}L) fates={}",
            self.mode,
            if self.incremental { "/incremental" } else { "" },
            self.gap,
            self.workers(),
            self.window.start,
            self.window.end,
            self.fates.len(),
        )?;
        if let Some((w, at)) = self.crash {
            write!(f, " crash=w{w}@{}L", at as f64 / L as f64)?;
        }
        if self.steps.len() > 1 {
            write!(f, " steps={}", self.steps.len())?;
        }
        match self.restarts[..] {
            [] => {}
            [Some(at)] => write!(f, " restart={}L", at as f64 / L as f64)?,
            _ => write!(f, " restarts={}", self.restarts.len())?,
        }
        if self.leaves.len() > 1 {
            write!(f, " leaves={}", self.leaves.len())?;
        }
        if self.sabotage_early {
            f.write_str(" RULE-17-OFF")?;
        }
        if self.sabotage_duplicates {
            f.write_str(" DUPLICATES-KEEP")?;
        }
        if !self.members.is_empty() {
            write!(f, " members={:?}", self.members)?;
        }
        if self.sabotage_members {
            f.write_str(" GRANT-WHILE-MEMBER-IN-USE")?;
        }
        write!(f, " horizon={}L", self.horizon as f64 / L as f64)
    }
}

/// The search's network: the choices of one replay.
struct SearchNet<'a> {
    sc: &'a Scenario,
    prefix: &'a [usize],
    /// `(chosen option, number of options)` at each choice point, in order.
    trace: Vec<(usize, usize)>,
    /// The choices, readable.
    choices: Vec<String>,
    /// The graceful leave chosen.
    leave: Option<(usize, u64)>,
    links: HashMap<(usize, u64), Fate>,
    /// A straddled link's boundary (server microseconds), once its first
    /// registration was sent.
    straddles: HashMap<(usize, u64), i64>,
}

impl SearchNet<'_> {
    fn choose(&mut self, arity: usize) -> usize {
        let c = self.prefix.get(self.trace.len()).copied().unwrap_or(0);
        self.trace.push((c, arity));
        c
    }
}

impl Net for SearchNet<'_> {
    fn route(&mut self, s: &Sent, v: &View) -> Route {
        let now = s.at;
        if s.leave {
            return Route::prompt(now);
        }
        let k = now / L;
        let fate = self
            .links
            .get(&(s.worker, k))
            .copied()
            .unwrap_or(Fate::Prompt);
        let h = HALF_TRIP;
        let executed = |replies: Vec<ReplyAt>| Route {
            exec: Some(At::True(now + h)),
            replies,
            ..Route::default()
        };
        let boundary = (v.server.div_euclid(L as i64) + 1) * L as i64;
        match fate {
            Fate::Prompt => Route::prompt(now),
            Fate::LateGap => executed(vec![ReplyAt::After(self.sc.g() + 1000 - h)]),
            Fate::LateLong => executed(vec![ReplyAt::After(L * 9 / 10 - h)]),
            Fate::ReplyLost => executed(Vec::new()),
            Fate::RequestLost => Route::lost(),
            Fate::Stall => Route {
                stall: Some(STALL),
                ..Route::prompt(now)
            },
            Fate::SlowRequest => Route {
                exec: Some(At::True(now + self.sc.g() + 1000)),
                replies: vec![ReplyAt::After(h)],
                ..Route::default()
            },
            Fate::DupReply => executed(vec![
                ReplyAt::After(h),
                ReplyAt::At(At::Server(boundary + 8 * h as i64)),
            ]),
            Fate::Straddle => match self.straddles.get(&(s.worker, k)).copied() {
                None => {
                    self.straddles.insert((s.worker, k), boundary);
                    executed(vec![ReplyAt::At(At::Server(boundary + 8 * h as i64))])
                }
                Some(b) if v.server >= b => Route::prompt(now),
                Some(b) => Route {
                    exec: Some(At::Server(b + 4 * h as i64)),
                    slot: Some(s.worker as u64),
                    replies: vec![ReplyAt::After(h)],
                    ..Route::default()
                },
            },
        }
    }

    /// At the start of interval `k` of the window: each living worker's
    /// link.
    fn hook(&mut self, k: u32, _view: &View) -> Vec<Action> {
        let k = u64::from(k);
        let fates = self.sc.fates;
        for w in self.sc.alive(k, self.leave) {
            let fate = fates[self.choose(fates.len())];
            self.choices.push(format!("w{w}@{k}L:{fate}"));
            self.links.insert((w, k), fate);
        }
        Vec::new()
    }
}

/// What one leaf produced.
struct Leaf {
    trace: Vec<(usize, usize)>,
    choices: Vec<String>,
    class: Class,
    outcome: Outcome,
}

impl Leaf {
    /// Why the leaf breaks what its class must keep, if it does.
    fn violation(&self) -> Option<String> {
        let s = &self.outcome.summary;
        let tasks = s.tasks.as_ref();
        let exclusive = s.violation_count == 0
            && s.anomaly_count == 0
            && tasks.is_none_or(|t| t.violation_count == 0)
            && self.outcome.overlaps.is_empty();
        let fenced = s.fencing_count == 0 && tasks.is_none_or(|t| t.fencing_count == 0);
        let ok = match self.class {
            Class::Guaranteed | Class::BeyondForward => exclusive && fenced,
            Class::Backward { .. } => exclusive,
        };
        (!ok).then(|| {
            format!(
                "{s}\n  direct check: {}\n  violations: {:?}\n  fencing: {:?}\n  anomalies: {:?}\n  \
                 tasks: {:?}",
                self.outcome
                    .first_overlap()
                    .unwrap_or_else(|| "no overlap".into()),
                s.violations.first(),
                s.fencing.first(),
                s.anomalies.first(),
                tasks.map(|t| (t.violations.first(), t.fencing.first())),
            )
        })
    }

    /// The schedule as lines: choices, then every execution at the store.
    fn schedule(&self) -> String {
        let mut out = format!("choices [{}]\n", self.choices.join(" "));
        for e in &self.outcome.execs {
            out.push_str(&format!("    {e}\n"));
        }
        out
    }
}

/// One replay of `sc` with the choices `prefix`.
fn replay(sc: &Scenario, prefix: &[usize], base: Instant) -> Leaf {
    let mut net = SearchNet {
        sc,
        prefix,
        trace: Vec::new(),
        choices: Vec::new(),
        leave: None,
        links: HashMap::new(),
        straddles: HashMap::new(),
    };
    let mut scheduled: Vec<(u64, Action)> = Vec::new();
    let mut class = Class::Guaranteed;
    if !sc.steps.is_empty() {
        let c = match sc.steps.len() {
            1 => 0,
            n => net.choose(n),
        };
        match sc.steps[c] {
            None => net.choices.push("no-step".into()),
            Some(step) => {
                let g = sc.g() as i64;
                class = match step.by {
                    by if by < 0 => Class::Backward { large: -by >= g },
                    by if by >= g => Class::BeyondForward,
                    _ => Class::Guaranteed,
                };
                net.choices.push(format!(
                    "step:{}{}us@{}L",
                    if step.by > 0 { "+" } else { "" },
                    step.by,
                    step.at as f64 / L as f64
                ));
                scheduled.push((step.at, Action::ClockStep(step.by)));
            }
        }
    }
    let restart = match sc.restarts.len() {
        0 => None,
        1 => sc.restarts[0],
        n => {
            let r = sc.restarts[net.choose(n)];
            net.choices.push(r.map_or_else(
                || "no-restart".into(),
                |at| format!("restart@{}L", at as f64 / L as f64),
            ));
            r
        }
    };
    if let Some(at) = restart {
        scheduled.push((at, Action::Restart));
    }
    if sc.leaves.len() > 1 {
        let leave = sc.leaves[net.choose(sc.leaves.len())];
        net.choices
            .push(leave.map_or_else(|| "no-leave".into(), |(w, k)| format!("leave:w{w}@{k}L")));
        if let Some((w, k)) = leave {
            scheduled.push((sc.fire_at(w, k) + 200, Action::Cancel(w)));
        }
        net.leave = leave;
    }
    let mut d = Driver::new(net, sc.horizon, base);
    if sc.track_broken {
        d = d.track_broken_holder();
    }
    d.store_mut()
        .sabotage_duplicate_keepers(sc.sabotage_duplicates);
    let options = sc.options();
    for (w, &at) in sc.joins.iter().enumerate() {
        let options = match sc.members.get(w) {
            Some(m) => options
                .clone()
                .with_member(&format!("m{m}"))
                .expect("a valid member name"),
            None => options.clone(),
        };
        d.join(at, options, token_at(sc.spread(w), w));
    }
    if let Some((w, at)) = sc.crash {
        d.schedule(at, Action::Crash(w));
    }
    for (at, a) in scheduled {
        d.schedule(at, a);
    }
    for k in sc.window.clone() {
        d.schedule(k * L, Action::Hook(k as u32));
    }
    let (outcome, net) = d.run_with_net();
    Leaf {
        trace: net.trace,
        choices: net.choices,
        class,
        outcome,
    }
}

/// Depth-first search over every choice sequence of `sc`, replaying each
/// from scratch; calls `visit` on every leaf and returns the number of
/// leaves.
fn explore(sc: &Scenario, mut visit: impl FnMut(&Leaf)) -> u64 {
    let base = Instant::now();
    let mut prefix: Vec<usize> = Vec::new();
    let mut leaves = 0;
    loop {
        let leaf = replay(sc, &prefix, base);
        leaves += 1;
        visit(&leaf);
        let mut path = leaf.trace;
        loop {
            match path.pop() {
                None => return leaves,
                Some((c, arity)) if c + 1 < arity => {
                    path.push((c + 1, arity));
                    break;
                }
                Some(_) => {}
            }
        }
        prefix = path.iter().map(|&(c, _)| c).collect();
    }
}

/// What a search found.
#[derive(Debug, Default)]
struct Found {
    leaves: u64,
    /// Leaves that broke what their class must keep, per class.
    guaranteed: u64,
    backward: u64,
    backward_large: u64,
    beyond_forward: u64,
    /// Leaves after a backward step whose fencing tokens repeated (allowed,
    /// rule 10).
    repeated_tokens: u64,
    /// The first violating leaf of an asserted class, as a schedule.
    first: Option<String>,
    first_beyond_forward: Option<String>,
    owns: u64,
    shared: u64,
}

/// Runs the search of `sc` and counts violating leaves per class.
fn search(sc: &Scenario) -> Found {
    let started = Instant::now();
    let mut found = Found::default();
    found.leaves = explore(sc, |leaf| {
        assert_eq!(
            leaf.outcome.rejected,
            0,
            "{sc}: a reply was rejected with choices [{}]",
            leaf.choices.join(" ")
        );
        let s = &leaf.outcome.summary;
        found.owns += s.owns;
        found.shared += leaf.outcome.shared;
        let fencing = s.fencing_count + s.tasks.as_ref().map_or(0, |t| t.fencing_count);
        if matches!(leaf.class, Class::Backward { .. }) && fencing > 0 {
            found.repeated_tokens += 1;
        }
        let Some(why) = leaf.violation() else {
            return;
        };
        let text = || format!("{}  {why}", leaf.schedule());
        match leaf.class {
            Class::Guaranteed => found.guaranteed += 1,
            Class::Backward { large: false } => found.backward += 1,
            Class::Backward { large: true } => found.backward_large += 1,
            Class::BeyondForward => {
                found.beyond_forward += 1;
                found.first_beyond_forward.get_or_insert_with(text);
                return;
            }
        }
        found.first.get_or_insert_with(text);
    });
    println!(
        "{sc}: {} leaves in {:.2?}, {} grants, {} instants with 2+ holders compared; violating \
         leaves: {} within the guarantee, {} after a backward step below G, {} after a backward \
         step of 2G; not asserted: {} after a forward step of 2G; {} leaves repeated a token \
         after a backward step (allowed)",
        found.leaves,
        started.elapsed(),
        found.owns,
        found.shared,
        found.guaranteed,
        found.backward,
        found.backward_large,
        found.beyond_forward,
        found.repeated_tokens,
    );
    if let Some(first) = &found.first_beyond_forward {
        println!("  first violating leaf with a forward step of 2G (not asserted): {first}");
    }
    found
}

/// Runs the search of `sc`, asserts that no leaf breaks what its class must
/// keep, and the leaf count.
fn assert_exclusive(sc: &Scenario) {
    let found = search(sc);
    if let Some(first) = &found.first {
        panic!("{sc}: violation: {first}");
    }
    assert!(found.owns > 0, "{sc}: nothing was ever granted");
    assert!(found.shared > 0, "{sc}: no two leases ever held at once");
    assert_eq!(
        found.leaves,
        sc.expected_leaves(),
        "{sc}: the search shrank or grew"
    );
}

fn deep() -> bool {
    std::env::var_os("LEASE_SEARCH_DEEP").is_some_and(|v| v == "1")
}

// ----- scenarios ---------------------------------------------------------

fn base(
    mode: Mode,
    gap: f64,
    joins: Vec<u64>,
    window: Range<u64>,
    fates: &'static [Fate],
) -> Scenario {
    let horizon = (window.end + 3) * L;
    Scenario {
        mode,
        incremental: false,
        gap,
        joins,
        window,
        fates,
        crash: None,
        steps: Vec::new(),
        restarts: Vec::new(),
        leaves: Vec::new(),
        horizon,
        sabotage_early: false,
        track_broken: false,
        sabotage_duplicates: false,
        members: Vec::new(),
        sabotage_members: false,
    }
}

/// `workers` (2 or 3) join in interval 0, at 0.30 L, 0.55 L and 0.80 L, and
/// own from interval 2 on; then every outcome for each of them in each
/// interval of the window, and three quiet intervals after it.
fn settled(
    mode: Mode,
    gap: f64,
    workers: usize,
    window: Range<u64>,
    fates: &'static [Fate],
) -> Scenario {
    let joins = [3 * L / 10, 55 * L / 100, 8 * L / 10][..workers].to_vec();
    base(mode, gap, joins, window, fates)
}

/// One worker owns the whole group alone; a second joins at `2.5 L`, and the
/// window covers the join and the two intervals after it: the membership
/// change where a stale `n = 1` lease meets the newcomer's `n = 2`.
fn late_joiner(mode: Mode, gap: f64) -> Scenario {
    let mut sc = base(mode, gap, vec![3 * L / 10, 5 * L / 2], 2..4, &ALL_FATES);
    sc.horizon = 7 * L;
    sc
}

/// The clock-step options: none, or `J` of `G/4`, `G/2` and `2G`, forward
/// and backward, at each of the true instants `at`.
fn steps(gap: f64, at: &[u64]) -> Vec<Option<ClockStep>> {
    let g = (gap * L as f64).round() as i64;
    let mut out = vec![None];
    for &at in at {
        for by in [g / 4, g / 2, 2 * g, -g / 4, -g / 2, -2 * g] {
            out.push(Some(ClockStep { at, by }));
        }
    }
    out
}

/// Three workers settled at positions 0, 1, 2; the middle one crashes
/// after its registration in 2 (`2.5 L`, Arrival) or in 1 (`1.5 L`,
/// Ranked, whose reservation keeps it counted in closed 2, rule 19), so
/// closed 3 holds the other two and the last becomes a filler at position 1
/// in 4. Clock steps at `3.5 L` and
/// `4.05 L` (a backward one reopens 3) and `4.5 L`, the link of each
/// survivor in `window`.
fn departure(
    mode: Mode,
    incremental: bool,
    window: Range<u64>,
    fates: &'static [Fate],
) -> Scenario {
    let mut sc = settled(mode, 0.15, 3, window, fates);
    sc.incremental = incremental;
    // D's departure shows in closed 3 in both modes: Arrival's crash at
    // 2.5 L leaves it out of 3; under Ranked its registration in an
    // interval reserves its place in the next (rule 19), so it crashes an
    // interval earlier, at 1.5 L, and closed 2 still counts it.
    sc.crash = Some((
        1,
        match mode {
            Mode::Arrival => 5 * L / 2,
            Mode::Ranked => 3 * L / 2,
        },
    ));
    sc.steps = steps(0.15, &[7 * L / 2, 4 * L + L / 20, 9 * L / 2]);
    sc
}

/// The late joiner with clock steps at `2.75 L` (a forward `2G` crosses
/// into 3), `3.05 L` (a backward `G/2` or `2G` reopens 2, the interval of
/// the join) and `3.5 L`.
fn late_joiner_steps(mode: Mode, incremental: bool, fates: &'static [Fate]) -> Scenario {
    let mut sc = late_joiner(mode, 0.15);
    sc.fates = fates;
    sc.incremental = incremental;
    sc.steps = steps(0.15, &[11 * L / 4, 3 * L + L / 20, 7 * L / 2]);
    sc
}

// ----- tests ---------------------------------------------------------------

const MODES: [Mode; 2] = [Mode::Ranked, Mode::Arrival];

#[test]
fn no_two_workers_hold_one_slot_in_any_interleaving_ranked() {
    // Three intervals of outcomes for both workers: 5^6 leaves; then two
    // intervals with the short delay too: 6^4.
    let wide = settled(Mode::Ranked, 0.15, 2, 3..6, &CORE_FATES);
    assert_eq!(wide.expected_leaves(), 15_625);
    assert_exclusive(&wide);
    let all = settled(Mode::Ranked, 0.15, 2, 3..5, &ALL_FATES);
    assert_eq!(all.expected_leaves(), 1_296);
    assert_exclusive(&all);
}

#[test]
fn no_two_workers_hold_one_slot_in_any_interleaving_arrival() {
    let wide = settled(Mode::Arrival, 0.15, 2, 3..6, &CORE_FATES);
    assert_eq!(wide.expected_leaves(), 15_625);
    assert_exclusive(&wide);
    let all = settled(Mode::Arrival, 0.15, 2, 3..5, &ALL_FATES);
    assert_eq!(all.expected_leaves(), 1_296);
    assert_exclusive(&all);
}

#[test]
fn a_stale_single_holder_never_overlaps_a_newcomer_in_any_interleaving() {
    for mode in MODES {
        let sc = late_joiner(mode, 0.15);
        assert_eq!(sc.expected_leaves(), 1_296);
        assert_exclusive(&sc);
    }
}

#[test]
fn no_two_workers_hold_one_slot_in_any_interleaving_with_a_small_gap() {
    for mode in MODES {
        let sc = settled(mode, 0.05, 2, 3..5, &ALL_FATES);
        assert_eq!(sc.expected_leaves(), 1_296);
        assert_exclusive(&sc);
    }
}

#[test]
fn three_workers_hold_distinct_slots_of_one_n_in_any_interleaving() {
    const FATES: [Fate; 4] = [
        Fate::Prompt,
        Fate::LateLong,
        Fate::ReplyLost,
        Fate::RequestLost,
    ];
    for mode in MODES {
        let one = settled(mode, 0.15, 3, 3..4, &ALL_FATES);
        assert_eq!(one.expected_leaves(), 216);
        assert_exclusive(&one);
        let two = settled(mode, 0.15, 3, 3..5, &FATES);
        assert_eq!(two.expected_leaves(), 4_096);
        assert_exclusive(&two);
    }
}

#[test]
fn a_restart_at_a_boundary_never_yields_overlapping_leases_in_any_interleaving() {
    for mode in MODES {
        // Inside the window, and at its end.
        for boundary in [4, 5] {
            let mut sc = settled(mode, 0.15, 2, 3..5, &ALL_FATES);
            sc.restarts = vec![Some(boundary * L)];
            assert_eq!(sc.expected_leaves(), 1_296);
            assert_exclusive(&sc);
        }
    }
}

/// The negative control. The broken holder anchors every grant and renewal
/// at the reply's arrival instead of its send, so a reply that arrived
/// `0.9 L` late stretches its lease `0.9 L` past what rule 6 allows. In the
/// late-joiner search, the holder of `0/1` gets its last renewal late, then
/// learns nothing in the next two intervals (its replies are lost, so it
/// never hears of the disagreement: with rule 19 its reply from 4 alone
/// would grant it `0/2`, its position in closed 2 coming from the server,
/// which ends the stale value), while the newcomer is granted `1/2`: the
/// checker must flag the mixed `n`. The real core, in the very same leaves,
/// stays exclusive.
#[test]
fn holder_measuring_from_arrival_is_caught_by_the_search() {
    let mut sc = late_joiner(Mode::Ranked, 0.15);
    // Both workers' links in 2, 3 and 4: prompt, the late renewal and the
    // lost replies.
    const FATES: [Fate; 3] = [Fate::Prompt, Fate::LateLong, Fate::ReplyLost];
    sc.window = 2..5;
    sc.fates = &FATES;
    sc.track_broken = true;
    let mut caught = 0;
    let mut first = None;
    let leaves = explore(&sc, |leaf| {
        assert!(leaf.outcome.summary.is_ok(), "{}", leaf.outcome.summary);
        if leaf.outcome.broken.violation_count > 0 {
            caught += 1;
            first.get_or_insert_with(|| {
                format!(
                    "[{}]: {:?}",
                    leaf.choices.join(" "),
                    leaf.outcome.broken.violations.first()
                )
            });
        }
    });
    println!("negative control, {sc}: {caught} of {leaves} leaves violate; first {first:?}");
    assert_eq!(leaves, sc.expected_leaves());
    assert!(
        caught > 0,
        "the search never caught the broken holder: the checker or the search is blind"
    );
}

/// The search itself: every leaf is a different choice sequence, and the
/// all-prompt leaf (the first) consumes exactly one choice per worker and
/// interval of the window.
#[test]
fn the_search_visits_each_choice_sequence_once() {
    let sc = settled(Mode::Ranked, 0.15, 2, 3..4, &ALL_FATES);
    let mut seen = std::collections::HashSet::new();
    let mut first = None;
    let leaves = explore(&sc, |leaf| {
        let choices: Vec<usize> = leaf.trace.iter().map(|&(c, _)| c).collect();
        assert!(seen.insert(choices), "a choice sequence was visited twice");
        first.get_or_insert_with(|| leaf.choices.clone());
    });
    assert_eq!(leaves, 36);
    let first = first.expect("at least one leaf");
    assert_eq!(first.join(" "), "w0@3L:prompt w1@3L:prompt");
}

/// The step trees of the join and the departure, per mode; `deep` widens
/// them.
fn join_step_trees() -> Vec<(Scenario, u64)> {
    let mut out = vec![
        (late_joiner_steps(Mode::Ranked, false, &STEP_FATES), 11_875),
        (late_joiner_steps(Mode::Arrival, false, &STEP_FATES), 11_875),
    ];
    // Task sets cost the checker more: the interval of the join and the
    // next one for the newcomer and the holder, 5^2 x 19.
    let mut incremental = late_joiner_steps(Mode::Ranked, true, &STEP_FATES);
    incremental.window = 3..4;
    out.push((incremental, 475));
    if deep() {
        out.push((late_joiner_steps(Mode::Ranked, false, &EVERY_FATE), 124_659));
        out.push((late_joiner_steps(Mode::Ranked, true, &STEP_FATES), 11_875));
        out.push((
            late_joiner_steps(Mode::Arrival, false, &EVERY_FATE),
            124_659,
        ));
    }
    out
}

fn departure_step_trees() -> Vec<(Scenario, u64)> {
    let mut out = vec![
        (departure(Mode::Ranked, false, 3..5, &STEP_FATES), 11_875),
        // Arrival has no early re-aim grant to find here; one interval.
        (departure(Mode::Arrival, false, 4..5, &STEP_FATES), 475),
        (departure(Mode::Ranked, true, 4..5, &STEP_FATES), 475),
    ];
    if deep() {
        out.push((departure(Mode::Ranked, false, 3..5, &EVERY_FATE), 124_659));
        out.push((departure(Mode::Ranked, true, 3..5, &STEP_FATES), 11_875));
        out.push((departure(Mode::Arrival, false, 3..5, &STEP_FATES), 11_875));
        out.push((departure(Mode::Arrival, false, 3..5, &EVERY_FATE), 124_659));
    }
    out
}

/// Rule 17's claim, and rule 10's for backward steps: with a step of
/// `G/4` or `G/2` forward anywhere the tree puts one, no two workers hold
/// one task and tokens stay fenced; after a backward step of any size the
/// tree uses (`G/4`, `G/2`, `2G`) they stay exclusive. Around a join: one
/// worker owns `(0, 1)`, a second joins.
#[test]
fn clock_steps_below_the_gap_never_break_exclusivity_around_a_join_in_any_interleaving() {
    for (sc, leaves) in join_step_trees() {
        assert_eq!(sc.expected_leaves(), leaves, "{sc}");
        assert_exclusive(&sc);
    }
}

/// The same after the middle one of three workers crashes (the shape of
/// the trace in docs/protocol.md, rule 17).
#[test]
fn clock_steps_below_the_gap_never_break_exclusivity_after_a_departure_in_any_interleaving() {
    for (sc, leaves) in departure_step_trees() {
        assert_eq!(sc.expected_leaves(), leaves, "{sc}");
        assert_exclusive(&sc);
    }
}

/// Rule 16 racing registrations: the last worker leaves gracefully while
/// one of its registrations is in flight (executed before the leave, after
/// it, or with its reply lost), in interval 3 or 4 or not at all, with a
/// restart mid-interval or none, in both handover modes.
#[test]
fn a_graceful_leave_racing_a_registration_never_overlaps_in_any_interleaving() {
    for incremental in [false, true] {
        let mut two = settled(Mode::Ranked, 0.15, 2, 3..5, &LEAVE_FATES);
        two.incremental = incremental;
        two.leaves = vec![None, Some((1, 3)), Some((1, 4))];
        two.restarts = vec![None, Some(9 * L / 2)];
        // (4^4 + 4^3 + 4^4) x 2.
        assert_eq!(two.expected_leaves(), 1_152);
        assert_exclusive(&two);
        // Three workers, the middle or the last one leaving in 4.
        let mut three = settled(Mode::Ranked, 0.15, 3, 4..5, &LEAVE_FATES);
        three.incremental = incremental;
        three.leaves = vec![None, Some((1, 4)), Some((2, 4))];
        assert_eq!(three.expected_leaves(), 3 * 64);
        assert_exclusive(&three);
        if deep() {
            let mut wide = settled(Mode::Ranked, 0.15, 3, 3..5, &LEAVE_FATES);
            wide.incremental = incremental;
            wide.leaves = vec![None, Some((1, 3)), Some((2, 4))];
            wide.restarts = vec![None, Some(4 * L), Some(9 * L / 2)];
            // (4^6 + 4^5 + 4^6) x 3.
            assert_eq!(wide.expected_leaves(), 27_648);
            assert_exclusive(&wide);
        }
    }
}

/// Rule 18: two settled members `m0`, `m1` and a second incarnation of `m1`
/// joining at `2.6 L`, while the first one is crashed at `2.5 L` (a
/// restart), at `3.5 L` (the new process first) or never (two live
/// processes with one name): every fate of every live worker's link in the
/// window, and no two workers hold one task.
fn member_restart(crash: Option<u64>, incremental: bool) -> Scenario {
    let mut sc = settled(Mode::Ranked, 0.15, 2, 2..4, &CORE_FATES);
    sc.incremental = incremental;
    sc.joins.push(26 * L / 10);
    sc.members = vec![0, 1, 1];
    sc.crash = crash.map(|at| (1, at));
    sc.horizon = 8 * L;
    sc
}

#[test]
fn a_member_restart_never_overlaps_the_old_incarnation_in_any_interleaving() {
    for incremental in [false, true] {
        for crash in [Some(5 * L / 2), Some(7 * L / 2), None] {
            assert_exclusive(&member_restart(crash, incremental));
        }
    }
}

/// The negative control: granting from registrations under a name another
/// incarnation holds (`NegativeControl::GrantWhileMemberInUse`) is found by
/// the search in the same trees.
#[test]
fn granting_while_another_incarnation_holds_the_name_is_caught_by_the_search() {
    for crash in [Some(7 * L / 2), None] {
        let mut sc = member_restart(crash, true);
        sc.sabotage_members = true;
        let found = search(&sc);
        assert!(found.first.is_some(), "{sc}: the search found no overlap");
    }
}

/// The power of the search: with rule 17 switched off
/// (`NegativeControl::GrantFromEarlyRegistration`), the search finds by itself a
/// schedule in which a forward step below the gap lets two workers hold one
/// task, in whole-pair mode around a join and in incremental mode after a
/// departure, and prints it; the same trees with the rule find none.
#[test]
fn without_rule_17_the_search_finds_the_forward_step_schedule() {
    let mut join = late_joiner_steps(Mode::Ranked, false, &STEP_FATES);
    join.window = 3..4;
    let departure_whole = departure(Mode::Ranked, false, 4..5, &STEP_FATES);
    let departure_tasks = departure(Mode::Ranked, true, 4..5, &STEP_FATES);
    for fixed in [join, departure_whole, departure_tasks] {
        assert_eq!(fixed.expected_leaves(), 475, "{fixed}");
        let broken = Scenario {
            sabotage_early: true,
            ..fixed.clone()
        };
        let found = search(&broken);
        assert_eq!(found.leaves, 475);
        let first = found
            .first
            .clone()
            .expect("a schedule that breaks exclusivity");
        println!(
            "{broken}: {} violating leaves; the first:\n{first}",
            found.guaranteed
        );
        assert!(found.guaranteed >= 1, "{broken}: {found:?}");
        assert!(
            first.contains("straddle") && first.contains("step:+"),
            "{first}"
        );
        let clean = search(&fixed);
        assert_eq!(clean.leaves, 475);
        assert_eq!(
            (clean.guaranteed, clean.backward, clean.backward_large),
            (0, 0, 0),
            "{fixed}: {:?}",
            clean.first
        );
    }
}

/// The schedule of the departure tree with a backward step of `2G`: the
/// backward step at true 4.05 L, C's requests in 3 lost, A's straddling
/// interval 3, then prompt links (the prefix of choices below).
fn reopening_schedule(incremental: bool, sabotage_duplicates: bool) -> Leaf {
    let mut sc = departure(Mode::Ranked, incremental, 3..5, &STEP_FATES);
    sc.steps = vec![Some(ClockStep {
        at: 4 * L + L / 20,
        by: -2 * sc.g() as i64,
    })];
    sc.sabotage_duplicates = sabotage_duplicates;
    // Long enough for A's fence after the step (rule 10: it saw 4 before
    // it, so it grants from 8).
    sc.horizon = 10 * L;
    // request-lost, straddle, prompt, prompt.
    let leaf = replay(&sc, &[2, 3, 0, 0], Instant::now());
    assert_eq!(
        leaf.choices.join(" "),
        "step:-300000us@4.05L w0@3L:request-lost w2@3L:straddle w0@4L:prompt w2@4L:prompt"
    );
    leaf
}

/// `(server time since the epoch's interval 0, position, count)` of every
/// registration of worker `w` counted in interval `k`.
fn counted(leaf: &Leaf, w: usize, k: u64) -> Vec<(i64, i64, i64)> {
    leaf.outcome
        .execs
        .iter()
        .filter(|e| e.worker == w && !e.leave && e.reply[..2] == [1, (K0 + k) as i64])
        .map(|e| (e.server - SERVER_EPOCH_US, e.reply[4], e.reply[5]))
        .collect()
}

/// Whether worker `w` was handed a pair or a task set at or after `t`.
fn granted_after(leaf: &Leaf, w: usize, t: u64) -> bool {
    let name = format!("w{w}");
    leaf.outcome.history.iter().any(|r| match r {
        lease_history::Record::Own { worker, at_us, .. } => *worker == name && *at_us >= t,
        _ => false,
    })
}

/// Rule 15's duplicate clause closed a hole the search found with a
/// backward step of `2G` before rule 19: a backward step that reopens an
/// interval after a worker registered early in the next one carried one
/// position to two members of that next set. Ranked, C, D, A at positions
/// 0, 1, 2; D crashes at `1.5 L` (its reservation keeps it in closed 2).
///
/// - In 3, C's requests are lost, but its registration in 2 reserved its
///   place: the first version of closed 3 is `{C: 0 (reserved), A: 2}`. A's
///   first registration executes, its reply is held and its last retry
///   executes at server 4.002 (wrong interval); A re-aims into 4, executing
///   at 4.003 as a filler at position 1 of 2.
/// - At true 4.05 the server clock steps back `0.3 L` (to 3.75): interval 3
///   is open again. C, standing down (rule 10), registers into the reopened
///   3, carrying 0 (its registration overwrites its reservation), then
///   into 4, from the second version of closed 3, `{C: 0, A: 2}`: C keeps
///   0 and A is a filler at 1 in both versions.
/// - So the set of 4 holds A with score 1 and C with score 0: the two
///   versions of 3 agree, and no position is carried twice (before rule
///   19, closed 3 was `{A}` in the first version and A carried 0 into 4
///   beside C's 0). From closed 4 on C is at 0 and A at 1.
#[test]
fn a_backward_step_that_reopens_an_interval_never_hands_one_position_to_two_workers() {
    for incremental in [false, true] {
        let leaf = reopening_schedule(incremental, false);
        // A in 4 before the step, from the first version of closed 3; C in
        // the reopened 3 and in 4 after it, from closed 2 and the second
        // version of 3.
        assert_eq!(counted(&leaf, 2, 4)[0], (4_003_000, 1, 2));
        assert_eq!(counted(&leaf, 0, 3), [(3_868_166, 0, 3)]);
        assert_eq!(counted(&leaf, 0, 4), [(4_167_166, 0, 2)]);
        // From closed 4 on, C is at 0 and A at 1 of 2.
        for k in 5..=7 {
            assert_eq!(counted(&leaf, 0, k)[0].1..counted(&leaf, 0, k)[0].2, 0..2);
            assert_eq!(counted(&leaf, 2, k)[0].1..counted(&leaf, 2, k)[0].2, 1..2);
        }
        // Both are granted again after the step, and never together.
        assert!(granted_after(&leaf, 0, 5 * L) && granted_after(&leaf, 2, 5 * L));
        let o = &leaf.outcome.overlaps;
        assert!(o.is_empty(), "{o:?}\n{}", leaf.schedule());
        assert!(leaf.outcome.summary.is_ok(), "{}", leaf.outcome.summary);
    }
}

/// Rule 15's duplicate clause under rule 19: with
/// `SimStore::sabotage_duplicate_keepers` (every member carrying a position
/// keeps it) the schedule above and the trees around it no longer carry a
/// position twice: a member that misses the first version of a reopened
/// interval is still there by its reservation, at the position it carries
/// into the second. The search finds no schedule with the sabotage in the
/// departure tree (the step alone, three fates for both survivors in 3 and
/// 4) or in the late joiner's step tree, and none without it. The clause
/// stays: positions must be a permutation of a closed set whatever its
/// scores, and two members carrying one position still reach one set
/// (`store::tests::of_two_members_carrying_one_position_only_the_first_keeps_it`,
/// `leave_script::of_two_members_carrying_one_position_only_the_first_keeps_it_on_redis`,
/// the differential test's duplicate keepers).
#[test]
fn duplicate_keepers_are_no_longer_reached_by_the_reopening_schedules() {
    for incremental in [false, true] {
        let leaf = reopening_schedule(incremental, true);
        assert_eq!(counted(&leaf, 2, 4)[0], (4_003_000, 1, 2));
        assert_eq!(counted(&leaf, 0, 4), [(4_167_166, 0, 2)]);
        assert!(leaf.outcome.overlaps.is_empty());
    }
    const FATES: [Fate; 3] = [Fate::Prompt, Fate::RequestLost, Fate::Straddle];
    let mut fixed = departure(Mode::Ranked, false, 3..5, &FATES);
    fixed.steps = vec![Some(ClockStep {
        at: 4 * L + L / 20,
        by: -2 * fixed.g() as i64,
    })];
    assert_eq!(fixed.expected_leaves(), 81);
    for sabotage in [true, false] {
        let sc = Scenario {
            sabotage_duplicates: sabotage,
            ..fixed.clone()
        };
        let found = search(&sc);
        assert_eq!(
            (found.leaves, found.backward_large),
            (81, 0),
            "{:?}",
            found.first
        );
    }
    let mut joiner = late_joiner_steps(Mode::Ranked, false, &STEP_FATES);
    joiner.sabotage_duplicates = true;
    let found = search(&joiner);
    assert_eq!(
        (found.leaves, found.backward_large),
        (11_875, 0),
        "{:?}",
        found.first
    );
}
