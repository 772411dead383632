//! Fencing: two different workers' holdings that share a task have tokens
//! at least 2 apart, ordered as the holdings start in time ("Fencing" in
//! docs/protocol.md).

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use super::Capped;
use super::holdings::Holding;

/// Two different workers' holdings that share a task, whose tokens are less
/// than 2 apart or out of time order.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FencingViolation {
    /// The holding that started first: the one with the largest token among
    /// the earlier holdings that conflict with `later`.
    pub earlier: Holding,
    /// The holding whose token is not at least `earlier.token + 2`.
    pub later: Holding,
}

impl fmt::Display for FencingViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "fencing: token {} after {} ({} then {})",
            self.later.token, self.earlier.token, self.earlier, self.later
        )
    }
}

/// Top two entries `(token, holding index, worker id)` by token, from two
/// different workers.
#[derive(Clone, Copy, Default)]
pub(crate) struct Top2 {
    first: Option<(u64, usize, usize)>,
    second: Option<(u64, usize, usize)>,
}

impl Top2 {
    pub(crate) fn insert(&mut self, entry: (u64, usize, usize)) {
        let (token, _, worker) = entry;
        match self.first {
            None => self.first = Some(entry),
            Some(a) if a.2 == worker => {
                if token > a.0 {
                    self.first = Some(entry);
                }
            }
            Some(a) => {
                if token > a.0 {
                    self.second = Some(a);
                    self.first = Some(entry);
                } else if self.second.is_none_or(|b| token > b.0) {
                    self.second = Some(entry);
                }
            }
        }
    }

    /// The best entry from a worker other than `worker`.
    pub(crate) fn best_except(&self, worker: usize) -> Option<(u64, usize, usize)> {
        match self.first {
            Some(a) if a.2 != worker => Some(a),
            _ => self.second,
        }
    }
}

/// In order of start (then token), each holding's token must be at least 2
/// above every earlier holding of another worker that shares a task with it.
/// Keeps, per pair and per `n`, the two best tokens of two different workers.
/// `holder[k]` is the worker of `holdings[k]`.
pub(crate) fn check(holdings: &[Holding], holder: &[usize]) -> Capped<FencingViolation> {
    let mut out = Capped::default();
    // Task sets are checked per task (`tasks`), not as whole pairs.
    let mut order: Vec<usize> = (0..holdings.len())
        .filter(|&k| !holdings[k].is_task_set())
        .collect();
    order.sort_by_key(|&k| (holdings[k].start_us, holdings[k].token));
    let mut per_slot: HashMap<(u32, u32), Top2> = HashMap::new();
    let mut per_n: BTreeMap<u32, Top2> = BTreeMap::new();
    for k in order {
        let h = &holdings[k];
        let (i, n, token, w) = (h.i, h.n, h.token, holder[k]);
        let mut worst: Option<(u64, usize, usize)> =
            per_slot.get(&(n, i)).and_then(|t| t.best_except(w));
        for (_, top) in per_n.iter().filter(|(other, _)| **other != n) {
            if let Some(e) = top.best_except(w)
                && worst.is_none_or(|b| e.0 > b.0)
            {
                worst = Some(e);
            }
        }
        if let Some((best, earlier, _)) = worst
            && token < best.saturating_add(2)
        {
            out.push(FencingViolation {
                earlier: holdings[earlier].clone(),
                later: h.clone(),
            });
        }
        let entry = (token, k, w);
        per_slot.entry((n, i)).or_default().insert(entry);
        per_n.entry(n).or_default().insert(entry);
    }
    out
}
