//! The controller: starts Redis, the proxy and the workers (through the
//! harness, which records the history), injects faults one at a time, and
//! has the history judged.
//!
//! Timing. Every instant of the history is the host's monotonic clock
//! ([`Instant`]) in microseconds since one origin taken before anything
//! starts; the harness says what it records when (`lease_chaos::harness`).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lease_chaos::harness::{AdapterKind, Control, Happened, Harness, HarnessError, Work, WorkerId};
use lease_chaos::proxy::{Latency, Link, Proxy};
use lease_chaos::sink::FencingSink;
use lease_core::{IdleReason, Lease, Mode};
use lease_history::timeline::{TimelineOptions, svg_with};
use lease_history::{Checker, HistoryWriter, Record};
use lease_testkit::{REPLICATION_TIMEOUT, RedisCluster, RedisServer};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

mod members;

use crate::Args;
use crate::faults::FaultKind;
use crate::report::{
    Cover, FailoverRun, FaultRun, Report, Setup, clock_steps, failovers, per_kind,
};

/// The group's name (its keys' hash tag is `{chaos}`).
const GROUP: &str = "chaos";

/// The least time between two manual failovers in the cluster: twice the
/// testkit's `cluster-node-timeout` of 2 s, and a margin.
const CLUSTER_VOTE_INTERVAL: Duration = Duration::from_millis(4500);

/// The group needs to be fully covered this many intervals before the next
/// fault (or the first one) is injected...
const SETTLED_INTERVALS: u32 = 2;
/// ... unless this many intervals passed since the last fault ended.
const MAX_WAIT_INTERVALS: u32 = 15;

/// Why a run could not be done (exit 2).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ChaosError {
    /// The options do not describe a valid run.
    #[error("invalid options: {0}")]
    Options(#[from] lease_core::OptionsError),
    /// Another flag is out of range.
    #[error("invalid options: {0}")]
    Usage(String),
    /// The Redis server could not be started, or a command to it failed.
    #[error("{what}: {source}")]
    Redis {
        /// What was being done.
        what: &'static str,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// The proxy could not start or open a link.
    #[error("the proxy: {0}")]
    Proxy(#[source] std::io::Error),
    /// A file could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The harness failed.
    #[error(transparent)]
    Harness(#[from] HarnessError),
}

fn redis_error(what: &'static str) -> impl FnOnce(std::io::Error) -> ChaosError {
    move |source| ChaosError::Redis { what, source }
}

/// Runs the whole chaos run of `args` and returns its report.
pub(crate) fn run(args: &Args) -> Result<Report, ChaosError> {
    let interval = Duration::from_millis(args.interval);
    let options = lease_core::Options::new(GROUP, interval).with_gap(args.gap);
    let options = match args.mode {
        Mode::Arrival => options.with_counting(lease_core::Counting::Arrival),
        Mode::Ranked => options.with_handover(args.handover),
    };
    options.validate()?;
    if !(args.duration.is_finite() && args.duration > 0.0) {
        return Err(ChaosError::Usage(format!(
            "--duration must be a positive number of seconds, got {}",
            args.duration
        )));
    }
    if args
        .stall_intervals
        .iter()
        .any(|x| !(x.is_finite() && *x > 0.0))
    {
        return Err(ChaosError::Usage("stall lengths must be positive".into()));
    }
    let kinds = &args.faults.0;
    let needs_replica = kinds.iter().any(|k| k.needs_replica());
    let needs_cluster = kinds.iter().any(|k| k.needs_cluster());
    if needs_cluster {
        if let Some(k) = kinds
            .iter()
            .find(|k| !(k.needs_cluster() || k.on_workers_only()))
        {
            return Err(ChaosError::Usage(format!(
                "{k} cannot run against a Redis Cluster (with cluster-failover or reshard only stall, crash, cancel, churn and burst)"
            )));
        }
        if args.adapter == AdapterKind::Smol {
            return Err(ChaosError::Usage(
                "the cluster faults need the redis or fred adapter (lease-smol has no cluster client here)".into(),
            ));
        }
    }
    if needs_replica && kinds.contains(&FaultKind::Clock) {
        return Err(ChaosError::Usage(
            "clock steps and failovers cannot be combined (the replica has no fake clock)".into(),
        ));
    }
    let mut server_args: Vec<String> = Vec::new();
    if needs_replica {
        // A resynchronisation must not wait for more replicas to come.
        server_args.extend(["--repl-diskless-sync-delay".into(), "0".into()]);
        if args.min_replicas_to_write > 0 {
            server_args.extend([
                "--min-replicas-to-write".into(),
                args.min_replicas_to_write.to_string(),
                "--min-replicas-max-lag".into(),
                args.min_replicas_max_lag.to_string(),
            ]);
        }
    }
    let server_args: Vec<&str> = server_args.iter().map(String::as_str).collect();
    let cluster = if needs_cluster {
        Some(
            RedisCluster::start_with_replicas(RedisCluster::DEFAULT_MASTERS, 1)
                .map_err(redis_error("cannot start a Redis Cluster with replicas"))?,
        )
    } else {
        None
    };
    let server = if cluster.is_some() {
        None
    } else if kinds.contains(&FaultKind::Clock) {
        // The clock fault steps the server's clock: libfaketime under it.
        Some(
            RedisServer::start_with_fake_clock()
                .map_err(redis_error("cannot start the server under libfaketime"))?,
        )
    } else {
        Some(
            RedisServer::start_with_args(&server_args)
                .map_err(redis_error("cannot start redis-server"))?,
        )
    };
    let upstream = match (&server, &cluster) {
        (Some(server), _) => server.addr(),
        (None, Some(cluster)) => cluster.addrs()[0],
        (None, None) => unreachable!("a server or a cluster was started"),
    };
    let proxy = Proxy::new(upstream).map_err(ChaosError::Proxy)?;
    // The replica replicates through a link of the proxy, so that the
    // replication can be cut (a blackhole holds every byte, the end of the
    // connection too, as a partition would).
    let replica = match (&server, needs_replica) {
        (Some(primary), true) => {
            let standby = RedisServer::start_with_args(&server_args)
                .map_err(redis_error("cannot start the replica"))?;
            let link = proxy.link(args.seed).map_err(ChaosError::Proxy)?;
            standby
                .replicate_from(link.addr())
                .and_then(|()| standby.wait_replicating(primary, REPLICATION_TIMEOUT))
                .map_err(redis_error("the replica did not catch up"))?;
            Some((standby, link))
        }
        _ => None,
    };
    let file = File::create(&args.history).map_err(|source| ChaosError::Write {
        path: args.history.clone(),
        source,
    })?;
    eprintln!(
        "lease-chaos: {} on {}{}, adapter {}, {} workers, interval {} ms, mode {}, faults {}, seed {}, {} s; history {}",
        if cluster.is_some() {
            "Redis Cluster (3 masters, 3 replicas)"
        } else {
            "redis-server"
        },
        upstream,
        match &replica {
            Some((standby, _)) => format!(" (replica on {})", standby.addr()),
            None => String::new(),
        },
        args.adapter,
        args.workers,
        args.interval,
        args.mode,
        args.faults,
        args.seed,
        args.duration,
        args.history.display()
    );
    let origin = Instant::now();
    let tick = (interval / 10).max(Duration::from_millis(2));
    let sink = Arc::new(FencingSink::new(args.tasks));
    let work = Work {
        sink: sink.clone(),
        tasks: args.tasks,
        tick,
    };
    let mut harness = Harness::new(args.adapter, options, origin)
        .with_work(work)
        .with_history_file(HistoryWriter::new(BufWriter::new(file)));
    if args.sabotage_release {
        harness = harness.with_sabotaged_releases();
    }
    let chaos = Chaos {
        args,
        interval,
        gap: interval.mul_f64(args.gap),
        tick,
        server,
        replica,
        cluster,
        proxy,
        sink,
        harness,
        rng: ChaCha8Rng::seed_from_u64(args.seed),
        seats: Vec::new(),
        instances: BTreeMap::new(),
        names: BTreeMap::new(),
        pending: Vec::new(),
        next_seq: 0,
        faults: Vec::new(),
        quiet_until: origin + interval * SETTLED_INTERVALS,
        last_fault_end: origin,
        covered_since: None,
        settled_us: None,
        notes: Vec::new(),
        proxy_counts: (0, 0),
        long_mid_stalls: 0,
        clock_standdowns_us: Vec::new(),
        clock_steps: Vec::new(),
        failovers: Vec::new(),
        last_cluster_failover: None,
    };
    chaos.go()
}

/// A place in the group: the base workers' seats and the burst seats. A seat
/// keeps its name across restarts of its worker.
struct Seat {
    name: String,
    current: Option<WorkerId>,
}

/// One worker instance as the controller sees it: its seat and its link
/// (none against a cluster: the workers connect to its nodes).
struct Instance {
    seat: usize,
    link: Option<Link>,
}

/// Something the controller must do later, for a fault.
#[derive(Debug)]
enum Action {
    Spawn {
        seat: usize,
    },
    Cancel {
        id: WorkerId,
    },
    Crash {
        id: WorkerId,
    },
    ClearLatency {
        id: WorkerId,
    },
    LiftBlackhole {
        id: WorkerId,
        reset: bool,
    },
    DisarmReset {
        id: WorkerId,
    },
    /// The end of a lossy failover's cut: promote the replica, switch.
    Promote {
        failover: usize,
    },
    /// The end of a split: the rest of the group moves, the deposed
    /// primary rejoins.
    EndSplit {
        failover: usize,
    },
}

struct Pending {
    at: Instant,
    seq: u64,
    fault: Option<usize>,
    action: Action,
}

/// The random draws behind one fault, all made whatever the kind, so that
/// the sequence of kinds depends on the seed alone.
struct Draw {
    kind: FaultKind,
    pick: u64,
    a: usize,
    coin: bool,
    x: f64,
}

struct Chaos<'a> {
    args: &'a Args,
    interval: Duration,
    gap: Duration,
    tick: Duration,
    /// The primary (none against a cluster).
    server: Option<RedisServer>,
    /// The replica and the proxy link it replicates through (failovers).
    replica: Option<(RedisServer, Link)>,
    cluster: Option<RedisCluster>,
    proxy: Proxy,
    sink: Arc<FencingSink>,
    harness: Harness,
    rng: ChaCha8Rng,
    seats: Vec<Seat>,
    /// The running instances' seats and links.
    instances: BTreeMap<WorkerId, Instance>,
    /// Every instance's name, for reports.
    names: BTreeMap<WorkerId, String>,
    pending: Vec<Pending>,
    next_seq: u64,
    faults: Vec<FaultRun>,
    /// No fault before this instant.
    quiet_until: Instant,
    /// When the latest fault's effect ended.
    last_fault_end: Instant,
    /// Since when the group has been fully covered, as the controller sees it.
    covered_since: Option<Instant>,
    /// When the group first settled (history microseconds).
    settled_us: Option<u64>,
    notes: Vec<String>,
    /// Proxy connections accepted and reset, over the reaped workers.
    proxy_counts: (u64, u64),
    /// Stalls between a check and a write, longer than any lease can run
    /// (2 intervals): the worker wakes with an ended lease.
    long_mid_stalls: u64,
    /// When leases ended because a worker saw the server clock move.
    clock_standdowns_us: Vec<u64>,
    /// Each clock step: its fault's index, its size and the offset after it.
    clock_steps: Vec<(usize, i64, i64)>,
    /// Each failover (of a primary or of the cluster) and what it lost.
    failovers: Vec<FailoverRun>,
    /// When the latest `CLUSTER FAILOVER` began.
    last_cluster_failover: Option<Instant>,
}

impl Chaos<'_> {
    /// The single server, for the faults that need one.
    fn server(&mut self) -> Result<&mut RedisServer, ChaosError> {
        self.server.as_mut().ok_or_else(|| {
            ChaosError::Usage("this fault needs a single server, not a cluster".into())
        })
    }

    fn l(&self, intervals: f64) -> Duration {
        self.interval.mul_f64(intervals)
    }

    /// `d` in intervals, for fault details.
    fn in_l(&self, d: Duration) -> f64 {
        d.as_secs_f64() / self.interval.as_secs_f64()
    }

    fn go(mut self) -> Result<Report, ChaosError> {
        let base = self.args.workers as usize;
        let burst = base.div_ceil(2);
        for k in 0..base + burst {
            self.seats.push(Seat {
                name: format!("w{k}"),
                current: None,
            });
        }
        for seat in 0..base {
            self.spawn(seat)?;
        }
        let end = self.harness.origin() + Duration::from_secs_f64(self.args.duration);
        loop {
            while let Some(happened) = self.harness.next(Duration::ZERO)? {
                self.seen(happened);
            }
            let now = Instant::now();
            self.run_due(now)?;
            self.reap();
            self.watch_coverage(now);
            if now >= end {
                break;
            }
            self.maybe_inject(now, end)?;
            let next = self
                .pending
                .iter()
                .map(|p| p.at)
                .min()
                .map_or(Duration::from_millis(10), |at| {
                    at.saturating_duration_since(now)
                })
                .min(Duration::from_millis(10));
            if let Some(happened) = self.harness.next(next)? {
                self.seen(happened);
            }
        }
        self.shutdown()
    }

    // --- workers -------------------------------------------------------

    /// Starts a worker on `seat`; `false` if the seat's previous worker has
    /// not ended yet.
    fn spawn(&mut self, seat: usize) -> Result<bool, ChaosError> {
        if self.seats[seat].current.is_some() {
            return Ok(false);
        }
        let name = self.seats[seat].name.clone();
        let id = self.spawn_instance(seat, &name)?;
        self.seats[seat].current = Some(id);
        Ok(true)
    }

    /// What the harness recorded: a worker that ended frees its seat, one
    /// that could not start is noted.
    fn seen(&mut self, happened: Happened) {
        let id = match happened {
            Happened::Left { id, .. } => id,
            Happened::Failed { id, name, error } => {
                self.notes.push(format!("worker {name} failed: {error}"));
                eprintln!("lease-chaos: worker {name} failed: {error}");
                id
            }
            Happened::Release {
                reason: Some(IdleReason::ServerClock),
                ended,
                ..
            } => {
                self.clock_standdowns_us.push(self.harness.us(ended));
                return;
            }
            Happened::Own { .. } | Happened::Release { .. } => return,
        };
        if let Some(seat) = self.instances.get(&id).map(|i| i.seat)
            && self.seats[seat].current == Some(id)
        {
            self.seats[seat].current = None;
        }
    }

    /// Forgets the workers whose threads ended, adding up their links'
    /// connection counts.
    fn reap(&mut self) {
        for id in self.harness.reap() {
            if let Some(link) = self.instances.remove(&id).and_then(|i| i.link) {
                let (connections, resets) = link.counts();
                self.proxy_counts.0 += connections;
                self.proxy_counts.1 += resets;
            }
        }
    }

    /// Whether every slot `0..n` of one `n` is held, validly, by exactly
    /// one live worker, as the controller sees it; in incremental mode,
    /// whether every task of the source is held by exactly one valid part.
    fn covered(&self, now: Instant) -> bool {
        if self.args.task_sets() {
            let sets: Vec<&Lease> = self.harness.workers().filter_map(|w| w.tasks).collect();
            return (0..self.args.tasks).all(|id| {
                sets.iter()
                    .filter(|t| t.parts().iter().any(|l| l.is_valid_at(now) && l.covers(id)))
                    .count()
                    == 1
            });
        }
        let held: Vec<(u32, u32)> = self
            .harness
            .workers()
            .filter_map(|w| w.held)
            .filter(|lease| lease.is_valid_at(now))
            .map(lease_chaos::harness::whole_pair)
            .collect();
        let Some(&(_, n)) = held.first() else {
            return false;
        };
        let mut seen = vec![false; n as usize];
        held.len() == n as usize
            && held
                .iter()
                .all(|&(i, m)| m == n && !std::mem::replace(&mut seen[i as usize], true))
    }

    fn watch_coverage(&mut self, now: Instant) {
        if self.covered(now) {
            self.covered_since.get_or_insert(now);
        } else {
            self.covered_since = None;
        }
    }

    fn link(&self, id: WorkerId) -> Option<&Link> {
        self.instances.get(&id).and_then(|i| i.link.as_ref())
    }

    // --- faults --------------------------------------------------------

    fn later(&mut self, at: Instant, fault: Option<usize>, action: Action) {
        self.pending.push(Pending {
            at,
            seq: self.next_seq,
            fault,
            action,
        });
        self.next_seq += 1;
    }

    /// Runs the pending actions that are due, in order.
    fn run_due(&mut self, now: Instant) -> Result<(), ChaosError> {
        loop {
            let Some(k) = self
                .pending
                .iter()
                .enumerate()
                .filter(|(_, p)| p.at <= now)
                .min_by_key(|(_, p)| (p.at, p.seq))
                .map(|(k, _)| k)
            else {
                return Ok(());
            };
            let p = self.pending.swap_remove(k);
            self.act(p, now)?;
        }
    }

    fn act(&mut self, p: Pending, now: Instant) -> Result<(), ChaosError> {
        match p.action {
            Action::Spawn { seat } => {
                if !self.spawn(seat)? {
                    // The seat's worker is still standing down: soon.
                    let at = now + Duration::from_millis(5);
                    self.later(at, p.fault, Action::Spawn { seat });
                    return Ok(());
                }
            }
            Action::Cancel { id } => self.harness.control(id, Control::Cancel),
            Action::Crash { id } => self.harness.control(id, Control::Crash),
            Action::ClearLatency { id } => {
                if let Some(link) = self.link(id) {
                    link.set_latency(None);
                }
            }
            Action::LiftBlackhole { id, reset } => {
                if let Some(link) = self.link(id) {
                    if reset {
                        link.reset_all();
                    }
                    link.lift_blackhole();
                }
            }
            Action::Promote { failover } => self.promote(failover, now)?,
            Action::EndSplit { failover } => self.end_split(failover, now)?,
            Action::DisarmReset { id } => {
                if let Some(link) = self.link(id)
                    && link.disarm()
                {
                    let name = self.names.get(&id).cloned().unwrap_or_default();
                    self.notes
                        .push(format!("reset on {name} was not used (no registration)"));
                }
            }
        }
        if let Some(f) = p.fault {
            let at_us = self.harness.us(now);
            let fault = &mut self.faults[f];
            fault.end_us = fault.end_us.max(at_us);
            self.last_fault_end = self.last_fault_end.max(now);
        }
        Ok(())
    }

    /// Injects the next fault if one is due and the group has settled.
    fn maybe_inject(&mut self, now: Instant, end: Instant) -> Result<(), ChaosError> {
        let settled = self.covered_since.is_some_and(|since| {
            now.saturating_duration_since(since) >= self.interval * SETTLED_INTERVALS
        });
        if settled && self.settled_us.is_none() {
            self.settled_us = self.covered_since.map(|since| self.harness.us(since));
        }
        let busy = !self.pending.is_empty() || now < self.quiet_until;
        let waited_long = now >= self.last_fault_end + self.interval * MAX_WAIT_INTERVALS;
        if self.args.faults.0.is_empty() || busy || !(settled || waited_long) {
            return Ok(());
        }
        if end.saturating_duration_since(now) < self.interval * 3 {
            return Ok(());
        }
        if let Some(fault_end) = self.inject(now, end)? {
            self.last_fault_end = fault_end;
            let extra = self.rng.random_range(0.0..2.0);
            let extra = self.l(extra);
            self.quiet_until = fault_end + self.interval * SETTLED_INTERVALS + extra;
        }
        Ok(())
    }

    /// Running workers that may be hit (not leaving), by id.
    fn victims(&self) -> Vec<WorkerId> {
        self.harness
            .workers()
            .filter(|w| !w.leaving)
            .map(|w| w.id)
            .collect()
    }

    /// The base seats' running workers.
    fn base_alive(&self) -> Vec<(usize, WorkerId)> {
        self.seats
            .iter()
            .enumerate()
            .take(self.args.workers as usize)
            .filter_map(|(seat, s)| s.current.map(|id| (seat, id)))
            .collect()
    }

    fn note_fault(
        &mut self,
        kind: FaultKind,
        victim: Option<WorkerId>,
        detail: String,
        now: Instant,
        planned_end: Instant,
    ) -> Result<usize, ChaosError> {
        let at_us = self.harness.us(now);
        let worker = victim.and_then(|id| self.names.get(&id).cloned());
        if self.args.verbose {
            eprintln!(
                "[{:>9.3} s] {kind} {} {detail}",
                at_us as f64 / 1e6,
                worker.as_deref().unwrap_or("-")
            );
        }
        self.harness.record(Record::Fault {
            kind: kind.as_str().to_owned(),
            worker,
            detail: Some(detail),
            at_us,
        })?;
        self.faults.push(FaultRun {
            kind,
            start_us: at_us,
            end_us: self.harness.us(planned_end),
        });
        Ok(self.faults.len() - 1)
    }

    fn draw(&mut self) -> Draw {
        let kinds = &self.args.faults.0;
        let kind = kinds[self.rng.random_range(0..kinds.len())];
        Draw {
            kind,
            pick: self.rng.random(),
            a: self.rng.random_range(0..4),
            coin: self.rng.random(),
            x: self.rng.random_range(1.0..4.0),
        }
    }

    /// How long the fault's effect lasts (zero for an instantaneous one).
    fn length(&self, d: &Draw) -> Duration {
        let (l, g) = (self.interval, self.gap);
        match d.kind {
            FaultKind::Stall => {
                let stalls = &self.args.stall_intervals;
                l.mul_f64(stalls[d.a % stalls.len()]) + self.tick
            }
            FaultKind::Crash | FaultKind::Cancel | FaultKind::RestartMember => l.mul_f64(d.x),
            FaultKind::Pause => [g.mul_f64(1.5), g * 3, l, l * 2][d.a],
            FaultKind::Latency => l.mul_f64(2.0 * d.x),
            FaultKind::Blackhole => l.mul_f64([0.5, 1.0, 2.0, 4.0][d.a]),
            FaultKind::Reset => l,
            FaultKind::Churn => l.mul_f64(d.x / 2.0) * self.base_alive().len() as u32,
            FaultKind::Burst => l.mul_f64(4.0 + 2.0 * d.x),
            FaultKind::Restart
            | FaultKind::Kill
            | FaultKind::Flush
            | FaultKind::Flushall
            | FaultKind::Clock
            | FaultKind::Failover
            | FaultKind::ClusterFailover
            | FaultKind::Reshard => Duration::ZERO,
            FaultKind::FailoverLossy => l.mul_f64([0.5, 1.0, 2.0, 3.0][d.a]),
            FaultKind::FailoverSplit => l.mul_f64(self.args.split_intervals),
        }
    }

    /// Draws a fault and injects it; returns when its effect ends, or `None`
    /// if it did not fit before the end of the run or had no victim.
    fn inject(&mut self, now: Instant, end: Instant) -> Result<Option<Instant>, ChaosError> {
        let d = self.draw();
        let victims = self.victims();
        let victim =
            (!victims.is_empty()).then(|| victims[(d.pick % victims.len() as u64) as usize]);
        let length = self.length(&d);
        if now + length + self.interval * SETTLED_INTERVALS > end {
            return Ok(None);
        }
        let planned_end = now + length;
        let on = |victim: Option<WorkerId>| victim.ok_or(());
        let injected = match d.kind {
            FaultKind::Stall => on(victim).map(|id| self.stall(id, &d, length, now)),
            FaultKind::Crash | FaultKind::Cancel => {
                on(victim).map(|id| self.leave_and_rejoin(id, &d, length, now))
            }
            FaultKind::Kill => on(victim).map(|id| self.kill(id, now, planned_end)),
            FaultKind::Latency => on(victim).map(|id| self.latency(id, &d, length, now)),
            FaultKind::Blackhole => on(victim).map(|id| self.blackhole(id, &d, length, now)),
            FaultKind::Reset => on(victim).map(|id| self.reset(id, now, planned_end)),
            FaultKind::Restart => return self.restart(now).map(Some),
            FaultKind::Pause => Ok(self.pause(length, now)),
            FaultKind::Flush => Ok(self.server_command(d.kind, &["SCRIPT", "FLUSH"], now)),
            FaultKind::Flushall => Ok(self.server_command(d.kind, &["FLUSHALL"], now)),
            FaultKind::Churn => Ok(self.churn(&d, now, planned_end)),
            FaultKind::Burst => Ok(self.burst(length, now)),
            FaultKind::RestartMember => {
                on(victim).map(|id| self.restart_member(id, &d, length, now))
            }
            FaultKind::Clock => Ok(self.clock_step(&d, now)),
            FaultKind::Failover => return self.failover(now).map(Some),
            FaultKind::FailoverLossy => Ok(self.cut_replication(d.kind, length, now)),
            FaultKind::FailoverSplit => Ok(self.cut_replication(d.kind, length, now)),
            FaultKind::ClusterFailover => {
                // Masters vote for a replica of one master once per two
                // node timeouts (4 s here): a manual failover sooner fails.
                if self
                    .last_cluster_failover
                    .is_some_and(|at| now < at + CLUSTER_VOTE_INTERVAL)
                {
                    return Ok(None);
                }
                self.last_cluster_failover = Some(now);
                return self.cluster_failover(now).map(Some);
            }
            FaultKind::Reshard => return self.reshard(&d, now).map(Some),
        };
        match injected {
            // No victim: nothing injected.
            Err(()) => Ok(None),
            Ok(result) => result.map(|()| Some(planned_end)),
        }
    }

    /// Freezes a worker's thread, at once or between a task's check and its
    /// write.
    fn stall(
        &mut self,
        id: WorkerId,
        d: &Draw,
        length: Duration,
        now: Instant,
    ) -> Result<(), ChaosError> {
        let l = self.interval;
        let duration = length - self.tick;
        let detail = format!(
            "{:.1}L={}ms{}",
            self.in_l(duration),
            duration.as_millis(),
            if d.coin { " mid-task" } else { "" }
        );
        self.note_fault(d.kind, Some(id), detail, now, now + length)?;
        if d.coin && duration > l * 2 {
            self.long_mid_stalls += 1;
        }
        self.harness.control(
            id,
            Control::Stall {
                duration,
                mid_task: d.coin,
            },
        );
        Ok(())
    }

    /// Crashes or cancels a worker; its seat gets a new one later.
    fn leave_and_rejoin(
        &mut self,
        id: WorkerId,
        d: &Draw,
        length: Duration,
        now: Instant,
    ) -> Result<(), ChaosError> {
        let Some(seat) = self.instances.get(&id).map(|i| i.seat) else {
            return Ok(());
        };
        let detail = format!("rejoins after {:.1}L", self.in_l(length));
        let f = self.note_fault(d.kind, Some(id), detail, now, now + length)?;
        let control = if d.kind == FaultKind::Crash {
            Control::Crash
        } else {
            Control::Cancel
        };
        self.harness.control(id, control);
        self.later(now + length, Some(f), Action::Spawn { seat });
        Ok(())
    }

    /// Restarts Redis without persistence; returns when it is back.
    fn restart(&mut self, now: Instant) -> Result<Instant, ChaosError> {
        let f = self.note_fault(FaultKind::Restart, None, "no persistence".into(), now, now)?;
        let t = Instant::now();
        self.server()?
            .restart()
            .map_err(redis_error("restarting redis-server failed"))?;
        let back = Instant::now();
        self.faults[f].end_us = self.harness.us(back);
        if self.args.verbose {
            eprintln!(
                "             redis-server back after {} ms",
                (back - t).as_millis()
            );
        }
        Ok(back)
    }

    /// `CLIENT PAUSE ... ALL` for longer than the gap.
    fn pause(&mut self, length: Duration, now: Instant) -> Result<(), ChaosError> {
        let detail = format!(
            "CLIENT PAUSE {}ms ALL ({:.1}G)",
            length.as_millis(),
            length.as_secs_f64() / self.gap.as_secs_f64()
        );
        self.note_fault(FaultKind::Pause, None, detail, now, now + length)?;
        self.server()?
            .pause(length)
            .map_err(redis_error("CLIENT PAUSE failed"))
    }

    /// `CLIENT KILL` every connection of a worker's link.
    fn kill(&mut self, id: WorkerId, now: Instant, planned_end: Instant) -> Result<(), ChaosError> {
        let addrs = self.link(id).map(Link::upstream_addrs).unwrap_or_default();
        let detail = format!("CLIENT KILL ADDR x{}", addrs.len());
        self.note_fault(FaultKind::Kill, Some(id), detail, now, planned_end)?;
        for addr in addrs {
            // The connection may have gone meanwhile: not an error.
            let _ = self.server()?.command(&[
                "CLIENT",
                "KILL",
                "ADDR",
                &addr.to_string(),
                "SKIPME",
                "yes",
            ]);
        }
        Ok(())
    }

    /// Latency around the gap, with jitter, on one worker's link.
    fn latency(
        &mut self,
        id: WorkerId,
        d: &Draw,
        length: Duration,
        now: Instant,
    ) -> Result<(), ChaosError> {
        let g = self.gap;
        let rtt = [g / 2, g, g.mul_f64(1.5), g][d.a];
        let latency = Latency {
            one_way: rtt / 2,
            jitter: rtt / 4,
        };
        let detail = format!(
            "rtt {}ms +-{}ms ({:.1}G) for {:.1}L",
            rtt.as_millis(),
            (rtt / 2).as_millis(),
            rtt.as_secs_f64() / g.as_secs_f64(),
            self.in_l(length)
        );
        let f = self.note_fault(d.kind, Some(id), detail, now, now + length)?;
        if let Some(link) = self.link(id) {
            link.set_latency(Some(latency));
        }
        self.later(now + length, Some(f), Action::ClearLatency { id });
        Ok(())
    }

    /// Holds one worker's traffic, then delivers it late or resets.
    fn blackhole(
        &mut self,
        id: WorkerId,
        d: &Draw,
        length: Duration,
        now: Instant,
    ) -> Result<(), ChaosError> {
        let detail = format!(
            "{:.1}L then {}",
            self.in_l(length),
            if d.coin { "reset" } else { "late delivery" }
        );
        let f = self.note_fault(d.kind, Some(id), detail, now, now + length)?;
        if let Some(link) = self.link(id) {
            link.blackhole(now + length + self.interval);
        }
        self.later(
            now + length,
            Some(f),
            Action::LiftBlackhole { id, reset: d.coin },
        );
        Ok(())
    }

    /// Loses the reply of one worker's next registration.
    fn reset(
        &mut self,
        id: WorkerId,
        now: Instant,
        planned_end: Instant,
    ) -> Result<(), ChaosError> {
        let detail = "next registration's reply lost".to_owned();
        let f = self.note_fault(FaultKind::Reset, Some(id), detail, now, planned_end)?;
        if let Some(link) = self.link(id) {
            link.lose_next_reply();
        }
        self.later(planned_end, Some(f), Action::DisarmReset { id });
        Ok(())
    }

    /// An instantaneous server command (`SCRIPT FLUSH`, `FLUSHALL`).
    fn server_command(
        &mut self,
        kind: FaultKind,
        command: &[&str],
        now: Instant,
    ) -> Result<(), ChaosError> {
        self.note_fault(kind, None, command.join(" "), now, now)?;
        self.server()?
            .command(command)
            .map(drop)
            .map_err(redis_error("a server command failed"))
    }

    /// A rolling restart of every base worker.
    fn churn(&mut self, d: &Draw, now: Instant, planned_end: Instant) -> Result<(), ChaosError> {
        let base_alive = self.base_alive();
        let spacing = self.interval.mul_f64(d.x / 2.0);
        let detail = format!(
            "{} workers, one every {:.1}L",
            base_alive.len(),
            self.in_l(spacing)
        );
        let f = self.note_fault(d.kind, None, detail, now, planned_end)?;
        for (k, (seat, id)) in base_alive.into_iter().enumerate() {
            let at = now + spacing * k as u32;
            self.later(at, Some(f), Action::Cancel { id });
            self.later(at, Some(f), Action::Spawn { seat });
        }
        Ok(())
    }

    /// Half as many workers again, who leave after a while.
    fn burst(&mut self, length: Duration, now: Instant) -> Result<(), ChaosError> {
        let seats: Vec<usize> = (self.args.workers as usize..self.seats.len())
            .filter(|&s| self.seats[s].current.is_none())
            .collect();
        let detail = format!("+{} workers for {:.1}L", seats.len(), self.in_l(length));
        let f = self.note_fault(FaultKind::Burst, None, detail, now, now + length)?;
        for seat in seats {
            self.spawn(seat)?;
            if let Some(id) = self.seats[seat].current {
                self.later(now + length, Some(f), Action::Cancel { id });
            }
        }
        Ok(())
    }

    /// Steps the server's clock by half the gap or twice it, forward or
    /// back (`d.a` picks which), from wherever earlier steps left it.
    fn clock_step(&mut self, d: &Draw, now: Instant) -> Result<(), ChaosError> {
        let gaps = [0.5, 2.0, -0.5, -2.0][d.a];
        let step = (self.gap.as_micros() as f64 * gaps) as i64;
        let offset = self.server()?.clock_offset_us() + step;
        let detail = format!(
            "{gaps:+}G ({:+} ms), offset {:+} ms",
            step / 1000,
            offset / 1000
        );
        let f = self.note_fault(FaultKind::Clock, None, detail, now, now)?;
        self.server()?
            .set_clock_offset(offset)
            .map_err(redis_error("stepping the server clock failed"))?;
        self.clock_steps.push((f, step, offset));
        Ok(())
    }

    // --- failovers ------------------------------------------------------

    /// The primary, the replica and the link the replica replicates
    /// through.
    fn pair(&mut self) -> Result<(&mut RedisServer, &mut RedisServer, &Link), ChaosError> {
        match (&mut self.server, &mut self.replica) {
            (Some(primary), Some((standby, link))) => Ok((primary, standby, link)),
            _ => Err(ChaosError::Usage(
                "a failover needs a primary with a replica".into(),
            )),
        }
    }

    /// Points the links of `ids` (every worker's, and new links, with
    /// `None`) at `to`; returns how many connections were reset.
    fn switch_links(&self, ids: Option<&[WorkerId]>, to: std::net::SocketAddr) -> usize {
        if ids.is_none() {
            self.proxy.set_upstream(to);
        }
        self.instances
            .iter()
            .filter(|(id, _)| ids.is_none_or(|ids| ids.contains(id)))
            .filter_map(|(_, i)| i.link.as_ref())
            .map(|link| link.set_upstream(to))
            .sum()
    }

    /// The replica becomes the primary (the roles swap); the deposed
    /// primary is left running, a primary still, until [`Self::rejoin`].
    fn swap_roles(&mut self) -> Result<(), ChaosError> {
        let (primary, standby, _) = self.pair()?;
        std::mem::swap(primary, standby);
        Ok(())
    }

    /// The deposed primary replicates from the new one, through the
    /// replication link (it drops what it took meanwhile). Not waited for:
    /// the next failover waits until it has caught up.
    fn rejoin(&mut self) -> Result<(), ChaosError> {
        let (primary, standby, link) = self.pair()?;
        link.set_upstream(primary.addr());
        link.lift_blackhole();
        standby
            .replicate_from(link.addr())
            .map_err(redis_error("REPLICAOF on the deposed primary failed"))
    }

    /// Writes refused with `NOREPLICAS` so far, by the primary and the
    /// replica together (`--min-replicas-to-write`).
    fn refusals(&mut self) -> Result<u64, ChaosError> {
        let (primary, standby, _) = self.pair()?;
        let count = |s: &RedisServer| {
            s.error_count("NOREPLICAS")
                .map_err(redis_error("INFO errorstats failed"))
        };
        Ok(count(primary)? + count(standby)?)
    }

    /// Redis's coordinated `FAILOVER` to the replica, then every link
    /// switched; returns when the group's connections point at the new
    /// primary.
    fn failover(&mut self, now: Instant) -> Result<Instant, ChaosError> {
        {
            let (primary, standby, _) = self.pair()?;
            standby
                .wait_replicating(primary, REPLICATION_TIMEOUT)
                .map_err(redis_error("the replica did not catch up"))?;
        }
        let refused_before = self.refusals()?;
        let detail = "FAILOVER to the replica (writes paused until it has them all), then every link switched".to_owned();
        let f = self.note_fault(FaultKind::Failover, None, detail, now, now)?;
        let (primary, standby, _) = self.pair()?;
        primary
            .failover_to_replica(standby)
            .map_err(redis_error("FAILOVER failed"))?;
        let to = standby.addr();
        self.swap_roles()?;
        self.switch_links(None, to);
        self.rejoin()?;
        let back = Instant::now();
        self.faults[f].end_us = self.harness.us(back);
        self.failovers.push(FailoverRun {
            fault: f,
            took_us: self.harness.us(back) - self.harness.us(now),
            lost_bytes: Some(0),
            refused_before,
            ..FailoverRun::default()
        });
        Ok(back)
    }

    /// Cuts the replication (a blackhole on the replica's link: the
    /// primary sees no end of the connection, as in a partition). A lossy
    /// failover promotes the replica when the cut ends; a split promotes it
    /// at once and moves half the group to it, the rest when the cut ends.
    fn cut_replication(
        &mut self,
        kind: FaultKind,
        length: Duration,
        now: Instant,
    ) -> Result<(), ChaosError> {
        let refused_before = self.refusals()?;
        {
            let (primary, standby, link) = self.pair()?;
            standby
                .wait_replicating(primary, REPLICATION_TIMEOUT)
                .map_err(redis_error("the replica did not catch up"))?;
            link.blackhole(now + Duration::from_secs(24 * 3600));
        }
        let moved: Vec<WorkerId> = self
            .instances
            .keys()
            .copied()
            .enumerate()
            .filter(|(k, _)| k % 2 == 0)
            .map(|(_, id)| id)
            .collect();
        let detail = match kind {
            FaultKind::FailoverSplit => format!(
                "KNOWN LIMIT, expected to violate: the replica promoted at once; {} of {} workers moved to it, the others left on the deposed primary for {:.1}L",
                moved.len(),
                self.instances.len(),
                self.in_l(length)
            ),
            _ => format!(
                "replication cut for {:.1}L, then the replica promoted and every link switched",
                self.in_l(length)
            ),
        };
        let f = self.note_fault(kind, None, detail, now, now + length)?;
        let failover = self.failovers.len();
        self.failovers.push(FailoverRun {
            fault: f,
            cut_us: u64::try_from(length.as_micros()).unwrap_or(u64::MAX),
            refused_before,
            ..FailoverRun::default()
        });
        if kind == FaultKind::FailoverSplit {
            let (_, standby, _) = self.pair()?;
            let promoted_at = standby
                .replication()
                .map_err(redis_error("INFO replication failed"))?
                .offset;
            standby
                .promote()
                .map_err(redis_error("REPLICAOF NO ONE failed"))?;
            let to = standby.addr();
            self.failovers[failover].promoted_offset = promoted_at;
            self.swap_roles()?;
            // New workers and half the group go to the new primary; the
            // rest keep the connections to the deposed one.
            self.proxy.set_upstream(to);
            self.switch_links(Some(&moved), to);
            self.later(now + length, Some(f), Action::EndSplit { failover });
        } else {
            self.later(now + length, Some(f), Action::Promote { failover });
        }
        Ok(())
    }

    /// The end of a lossy failover's cut: what the primary took since is
    /// counted, the replica promoted, every link switched to it, and the
    /// deposed primary rejoins as its replica.
    fn promote(&mut self, failover: usize, now: Instant) -> Result<(), ChaosError> {
        let (primary, standby, _) = self.pair()?;
        let (theirs, mine) = (
            primary
                .replication()
                .map_err(redis_error("INFO replication failed"))?,
            standby
                .replication()
                .map_err(redis_error("INFO replication failed"))?,
        );
        standby
            .promote()
            .map_err(redis_error("REPLICAOF NO ONE failed"))?;
        let to = standby.addr();
        self.swap_roles()?;
        self.switch_links(None, to);
        self.rejoin()?;
        let run = &mut self.failovers[failover];
        run.lost_bytes = Some(theirs.offset.saturating_sub(mine.offset));
        run.took_us = self.harness.us(Instant::now()) - self.harness.us(now);
        Ok(())
    }

    /// The end of a split: the workers left on the deposed primary move to
    /// the new one, and the deposed primary rejoins.
    fn end_split(&mut self, failover: usize, now: Instant) -> Result<(), ChaosError> {
        let (deposed, to) = {
            let (primary, deposed, _) = self.pair()?;
            (
                deposed
                    .replication()
                    .map_err(redis_error("INFO replication failed"))?,
                primary.addr(),
            )
        };
        // The workers left behind move now.
        self.switch_links(None, to);
        self.rejoin()?;
        let run = &mut self.failovers[failover];
        run.lost_bytes = Some(deposed.offset.saturating_sub(run.promoted_offset));
        run.took_us = self.harness.us(Instant::now()) - self.harness.us(now);
        Ok(())
    }

    /// The group's hash slot, its master and that master's replicas.
    fn group_slot(&self) -> Result<(u16, usize, Vec<usize>), ChaosError> {
        let cluster = self
            .cluster
            .as_ref()
            .ok_or_else(|| ChaosError::Usage("a cluster fault needs a Redis Cluster".into()))?;
        let tag = format!("{{{GROUP}}}");
        let slot = cluster
            .key_slot(&tag)
            .map_err(redis_error("CLUSTER KEYSLOT failed"))?;
        let master = cluster
            .master_of_slot(slot)
            .map_err(redis_error("CLUSTER NODES failed"))?;
        let replicas = cluster
            .replicas_of(master)
            .map_err(redis_error("CLUSTER NODES failed"))?;
        Ok((slot, master, replicas))
    }

    /// `CLUSTER FAILOVER` on a replica of the group's master; returns when
    /// every node sees the replica as the slot's master.
    fn cluster_failover(&mut self, now: Instant) -> Result<Instant, ChaosError> {
        let (slot, master, replicas) = self.group_slot()?;
        let Some(&replica) = replicas.first() else {
            return Err(ChaosError::Usage(format!(
                "node {master} (slot {slot}) has no replica"
            )));
        };
        let detail = format!(
            "CLUSTER FAILOVER on node {replica}, the replica of node {master} (slot {slot})"
        );
        let f = self.note_fault(FaultKind::ClusterFailover, None, detail, now, now)?;
        if let Some(cluster) = &self.cluster {
            cluster
                .failover_to(replica)
                .map_err(redis_error("CLUSTER FAILOVER failed"))?;
        }
        let back = Instant::now();
        self.faults[f].end_us = self.harness.us(back);
        self.failovers.push(FailoverRun {
            fault: f,
            took_us: self.harness.us(back) - self.harness.us(now),
            lost_bytes: Some(0),
            ..FailoverRun::default()
        });
        Ok(back)
    }

    /// Moves the group's slot to another master, holding it in the
    /// migrating state for 0, 0.25, 0.5 or 1 interval.
    fn reshard(&mut self, d: &Draw, now: Instant) -> Result<Instant, ChaosError> {
        let (slot, from, _) = self.group_slot()?;
        let masters = match &self.cluster {
            Some(cluster) => cluster
                .masters()
                .map_err(redis_error("CLUSTER NODES failed"))?,
            None => Vec::new(),
        };
        let others: Vec<usize> = masters.into_iter().filter(|&m| m != from).collect();
        let Some(&to) = others.get((d.pick % others.len().max(1) as u64) as usize) else {
            return Err(ChaosError::Usage(
                "no other master to move the slot to".into(),
            ));
        };
        let hold = self.l([0.0, 0.25, 0.5, 1.0][d.a]);
        let detail = format!(
            "slot {slot} from node {from} to node {to}, migrating for {:.2}L",
            self.in_l(hold)
        );
        let f = self.note_fault(FaultKind::Reshard, None, detail, now, now + hold)?;
        let moved = match &self.cluster {
            Some(cluster) => cluster
                .migrate_slot(slot, to, hold)
                .map_err(redis_error("moving the slot failed"))?,
            None => 0,
        };
        let back = Instant::now();
        self.faults[f].end_us = self.harness.us(back);
        self.failovers.push(FailoverRun {
            fault: f,
            took_us: self.harness.us(back) - self.harness.us(now),
            keys_moved: Some(moved),
            cut_us: u64::try_from(hold.as_micros()).unwrap_or(u64::MAX),
            lost_bytes: Some(0),
            ..FailoverRun::default()
        });
        Ok(back)
    }

    // --- the end -------------------------------------------------------

    fn shutdown(mut self) -> Result<Report, ChaosError> {
        let shutdown = Instant::now();
        let shutdown_us = self.harness.us(shutdown);
        // Undo what is still in force (a lifted blackhole, no latency), and
        // start nobody new.
        self.pending
            .retain(|p| !matches!(p.action, Action::Spawn { .. }));
        for p in std::mem::take(&mut self.pending) {
            self.act(p, shutdown)?;
        }
        let grace = self.interval * 2 + Duration::from_secs(2);
        let (end, stuck) = self.harness.stop(grace, |_| {})?;
        for name in stuck {
            self.notes.push(format!(
                "worker {name} did not stop; recorded as crashed at the end"
            ));
        }
        self.reap();
        let end_us = self.harness.us(end);

        let records = self.harness.records();
        let checker = Checker::new(records, Some(end_us));
        let sink = self.sink.stats();
        let stale_us: Vec<u64> = sink.stale.iter().map(|&t| self.harness.us(t)).collect();
        let kinds = per_kind(&checker, &self.faults, &stale_us, shutdown_us);
        let steady =
            Cover::new(&checker).coverage_in(self.settled_us.unwrap_or(shutdown_us), shutdown_us);
        let name = |id: u64| {
            self.names
                .get(&WorkerId(id))
                .cloned()
                .unwrap_or_else(|| format!("#{id}"))
        };
        let sink_violations = sink
            .violations
            .iter()
            .map(|v| {
                format!(
                    "{} at {} us: task {} token {} by {} after token {} by {}",
                    v.what,
                    self.harness.us(v.at),
                    v.task,
                    v.token,
                    name(v.writer),
                    v.newest_token,
                    name(v.newest_writer)
                )
            })
            .collect();
        if let Some(path) = &self.args.svg {
            let intervals = (self.args.duration * 1000.0 / self.args.interval as f64) as u32;
            let options = TimelineOptions::default()
                .with_end_us(end_us)
                .with_interval(self.interval)
                .with_width((intervals * 4).clamp(1200, 24_000))
                // Long runs: the fault markers only, or the labels pile up.
                .with_joins_and_leaves(self.args.duration <= 120.0);
            let title = format!(
                "lease-chaos: adapter {}, {} workers, L = {} ms, faults {}, seed {}",
                self.args.adapter,
                self.args.workers,
                self.args.interval,
                self.args.faults,
                self.args.seed
            );
            std::fs::write(path, svg_with(records, &title, &options)).map_err(|source| {
                ChaosError::Write {
                    path: path.clone(),
                    source,
                }
            })?;
        }
        let summary = checker.summary();
        // Each failover's refusals: until the next one, or the end.
        if self.replica.is_some() {
            let mut next = self.refusals()?;
            for run in self.failovers.iter_mut().rev() {
                run.refused = Some(next.saturating_sub(run.refused_before));
                next = run.refused_before;
            }
        }
        let failovers = failovers(&checker, &self.faults, &self.failovers, shutdown_us);
        let clock_steps = clock_steps(
            &checker,
            &self.faults,
            &self.clock_steps,
            &self.clock_standdowns_us,
            shutdown_us,
        );
        Ok(Report {
            setup: Setup {
                adapter: self.args.adapter.as_str(),
                mode: self.args.mode.to_string(),
                workers: self.args.workers as usize,
                interval_ms: self.args.interval,
                seconds: end
                    .saturating_duration_since(self.harness.origin())
                    .as_secs_f64(),
                seed: self.args.seed,
                faults: self.args.faults.to_string(),
            },
            summary,
            steady,
            sink,
            kinds,
            notes: self.notes,
            sink_violations,
            proxy: self.proxy_counts,
            long_mid_stalls: self.long_mid_stalls,
            clock_steps,
            failovers,
        })
    }
}
