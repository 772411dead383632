//! The quickstart's promise, downstream, on a real `redis-server`: workers
//! built with exactly the README's options (`Options::new(name, interval)`,
//! nothing else named) and a loop of two match arms get a new value only
//! when the set of tasks they may work on changes, and what they hold is
//! exclusive per task.
//!
//! Three workers start together and a fourth joins about 40 intervals later
//! (interval 200 ms; the run lasts about 100 intervals of wall clock, which
//! only sets its length: nothing here asserts on time). Each value is
//! compared with the same worker's previous value over the task ids
//! `0..4096` (membership by `Part::contains` on the value's parts), and its
//! `granted()` / `released()` deltas must be exactly the difference. Every
//! value is written as a task-set history (docs/history-format.md), and
//! lease-history's checker judges it per task.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use lease_history::{Mapping, Part, PartEnd, Record};
use lease_redis::{Assignment, Lease, Options, StreamExt, connect, discover};
use lease_testkit::{RedisServer, unique_name};
use tokio::sync::mpsc;

/// The task universe the sets are compared over.
const IDS: u64 = 4096;
const INTERVAL: Duration = Duration::from_millis(200);

/// What one worker's loop received, with the instant it arrived.
struct Received {
    worker: usize,
    at: Instant,
    seen: Seen,
}

/// A value as the loop's arm saw it.
enum Seen {
    Held(Lease),
    /// Nothing held since this instant.
    Idle(Instant),
}

/// One worker as the quickstart writes it, forwarding every value.
async fn worker(url: String, name: String, id: usize, tx: mpsc::UnboundedSender<Received>) {
    let conn = connect(&url).await.expect("connect to the test server");
    let options = Options::new(name, INTERVAL);
    let mut assignments = discover(conn, options).expect("the quickstart's options are valid");
    while let Some(assignment) = assignments.next().await {
        let at = Instant::now();
        // The quickstart's two arms: nothing else can come.
        let seen = match assignment {
            Assignment::Held(lease) => Seen::Held(lease),
            Assignment::Idle(idle) => Seen::Idle(idle.since),
        };
        let received = Received {
            worker: id,
            at,
            seen,
        };
        if tx.send(received).is_err() {
            return;
        }
    }
}

fn task_set(lease: Option<&Lease>) -> Vec<bool> {
    (0..IDS)
        .map(|id| {
            lease.is_some_and(|l| l.parts().iter().any(|p| p.part().contains(l.mapping(), id)))
        })
        .collect()
}

fn history_mapping(lease: &Lease) -> Mapping {
    match lease.mapping() {
        lease_redis::Mapping::Modulo => Mapping::Modulo,
        lease_redis::Mapping::Consistent => Mapping::Consistent,
    }
}

/// The history's lines and the judgement of each worker's values.
struct Judge {
    t0: Instant,
    records: Vec<Record>,
    /// Per worker: the previous value's task set and the lease it held.
    previous: HashMap<usize, (Vec<bool>, Option<Lease>)>,
    values: usize,
    held_after_held: usize,
    repeats: Vec<String>,
    wrong_deltas: Vec<String>,
}

impl Judge {
    fn us(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.t0).as_micros()).unwrap_or(u64::MAX)
    }

    /// The lines that end `lease` by `now_us` at the latest (each part at
    /// its own deadline if earlier).
    fn end(&mut self, worker: usize, lease: &Lease, now_us: u64) {
        let parts: Vec<PartEnd> = lease
            .parts()
            .iter()
            .zip(lease.history_parts())
            .map(|(l, p)| PartEnd {
                part: Part::from(p),
                end_us: self.us(l.deadline()),
                renewed: Some(l.renewed_in()),
            })
            .collect();
        let name = format!("w{worker}");
        self.records.extend(Record::task_set_ending(
            &name,
            history_mapping(lease),
            parts,
            now_us,
        ));
    }

    fn receive(&mut self, r: Received) {
        let at_us = self.us(r.at);
        let lease = match &r.seen {
            Seen::Held(l) => Some(l.clone()),
            Seen::Idle(_) => None,
        };
        let now = task_set(lease.as_ref());
        let Some((before, held)) = self.previous.remove(&r.worker) else {
            // The opening idle value: the stream's start, not a change.
            self.records
                .push(Record::join(format!("w{}", r.worker), at_us));
            self.previous.insert(r.worker, (now, lease));
            return;
        };
        self.values += 1;
        if now == before {
            let parts = lease.as_ref().map(Lease::history_parts);
            self.repeats
                .push(format!("w{} at {at_us} µs: parts {parts:?}", r.worker));
        }
        match (&r.seen, &held) {
            (Seen::Held(l), previous) => {
                if previous.is_some() {
                    self.held_after_held += 1;
                }
                self.check_deltas(r.worker, at_us, l, &before, &now);
                let name = format!("w{}", r.worker);
                let parts = l.history_parts().into_iter().map(Part::from);
                let since = self.us(l.since());
                self.records
                    .extend(Record::own_task_set(name, history_mapping(l), parts, since));
            }
            (Seen::Idle(since), Some(last)) => {
                let since = self.us(*since);
                self.end(r.worker, last, since);
            }
            (Seen::Idle(_), None) => {}
        }
        self.previous.insert(r.worker, (now, lease));
    }

    /// `granted()` and `released()` are exactly the tasks the value added
    /// to and took from the previous one's.
    fn check_deltas(
        &mut self,
        worker: usize,
        at_us: u64,
        l: &Lease,
        before: &[bool],
        now: &[bool],
    ) {
        let granted: Vec<u64> = l.granted().select(0..IDS).collect();
        let released: Vec<u64> = l.released().select(0..IDS).collect();
        let diff = |a: &[bool], b: &[bool]| -> Vec<u64> {
            (0..IDS)
                .filter(|&id| a[id as usize] && !b[id as usize])
                .collect()
        };
        let (want_granted, want_released) = (diff(now, before), diff(before, now));
        if granted != want_granted || released != want_released {
            self.wrong_deltas.push(format!(
                "w{worker} at {at_us} µs: granted {} (want {}), released {} (want {})",
                granted.len(),
                want_granted.len(),
                released.len(),
                want_released.len()
            ));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quickstart_loops_get_a_value_only_when_their_tasks_change_and_hold_them_alone() {
    let redis = RedisServer::start().expect("redis-server");
    let name = unique_name("quickstart-promise");
    let (tx, mut rx) = mpsc::unbounded_channel();
    let t0 = Instant::now();
    let mut workers: Vec<_> = (0..3)
        .map(|id| tokio::spawn(worker(redis.url().to_owned(), name.clone(), id, tx.clone())))
        .collect();
    let mut judge = Judge {
        t0,
        records: Vec::new(),
        previous: HashMap::new(),
        values: 0,
        held_after_held: 0,
        repeats: Vec::new(),
        wrong_deltas: Vec::new(),
    };
    let join_at = tokio::time::Instant::from_std(t0 + INTERVAL * 40);
    let end_at = tokio::time::Instant::from_std(t0 + INTERVAL * 100);
    let mut joined = false;
    loop {
        let until = if joined { end_at } else { join_at };
        tokio::select! {
            Some(r) = rx.recv() => judge.receive(r),
            () = tokio::time::sleep_until(until) => {
                if joined {
                    break;
                }
                joined = true;
                workers.push(tokio::spawn(worker(redis.url().to_owned(), name.clone(), 3, tx.clone())));
            }
        }
    }
    for w in &workers {
        w.abort();
    }
    let end_us = judge.us(Instant::now());
    while let Ok(r) = rx.try_recv() {
        judge.receive(r);
    }
    let held: Vec<(usize, Lease)> = judge
        .previous
        .iter()
        .filter_map(|(&w, (_, l))| l.clone().map(|l| (w, l)))
        .collect();
    for (w, lease) in held {
        judge.end(w, &lease, end_us);
    }

    assert!(
        judge.repeats.is_empty(),
        "{} of {} values repeat the worker's previous task set: {:?}",
        judge.repeats.len(),
        judge.values,
        &judge.repeats[..judge.repeats.len().min(5)]
    );
    assert!(
        judge.wrong_deltas.is_empty(),
        "granted/released differ from the task sets: {:?}",
        &judge.wrong_deltas[..judge.wrong_deltas.len().min(5)]
    );
    // The join was handed over step by step: some value followed another
    // without an idle one between.
    assert!(
        judge.held_after_held > 0,
        "no Held value followed another in {} values",
        judge.values
    );
    let summary = lease_history::check(&judge.records, Some(end_us));
    let tasks = summary
        .tasks
        .as_ref()
        .expect("a task-set history is judged per task");
    assert!(summary.is_ok() && tasks.is_ok(), "{summary}");
    let newcomer_held = judge
        .records
        .iter()
        .any(|r| matches!(r, Record::Own { worker, .. } if worker == "w3"));
    assert!(newcomer_held, "the fourth worker never held anything");
}
