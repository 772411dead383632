//! The task universe of task-set histories, and the two mappings, written
//! here again so that the judge stays independent of `lease-core`: the
//! tasks are the buckets `0..TASKS`, and `owner(t, n)` under the consistent
//! mapping is jump consistent hash of `id_hash(t)`, exactly as lease-core's
//! `Mapping::Consistent` (pinned by the same test vectors, and compared with
//! lease-core on every bucket in this crate's tests).

use crate::record::{Mapping, Part};

/// How many tasks (buckets) a task-set history is checked over.
pub const TASKS: usize = 1024;

const WORDS: usize = TASKS / 64;

/// The multiplier of jump consistent hash's linear congruential step.
const JUMP_LCG_MUL: u64 = 2_862_933_555_777_941_757;
/// SplitMix64's increment.
const SPLITMIX_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// Jump consistent hash (Lamping & Veach, arXiv:1406.2294): the bucket in
/// `0..buckets` of `key`; zero buckets behave like one.
pub fn jump_hash(key: u64, buckets: u32) -> u32 {
    let buckets = u64::from(buckets.max(1));
    let mut key = key;
    let mut b: u64 = 0;
    let mut j: u64 = 0;
    while j < buckets {
        b = j;
        key = key.wrapping_mul(JUMP_LCG_MUL).wrapping_add(1);
        j = ((b + 1) << 31) / ((key >> 33) + 1);
    }
    u32::try_from(b).unwrap_or(u32::MAX)
}

/// The SplitMix64 output function of `id`: spreads dense ids before they
/// are hashed into buckets.
pub const fn id_hash(id: u64) -> u64 {
    let mut z = id.wrapping_add(SPLITMIX_GAMMA);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The index in `0..n` that owns task `t` under `mapping`.
pub fn owner(mapping: Mapping, t: u64, n: u32) -> u32 {
    match mapping {
        Mapping::Consistent => jump_hash(id_hash(t), n),
        Mapping::Modulo => u32::try_from(t % u64::from(n.max(1))).unwrap_or(0),
    }
}

/// A set of tasks of `0..TASKS`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TaskSet {
    words: [u64; WORDS],
}

impl Default for TaskSet {
    fn default() -> Self {
        Self { words: [0; WORDS] }
    }
}

impl TaskSet {
    /// Every task of `0..TASKS`.
    pub fn all() -> Self {
        Self {
            words: [u64::MAX; WORDS],
        }
    }

    /// `T(i, n)`: the tasks index `i` owns among `n` under `mapping`.
    pub fn pair(mapping: Mapping, i: u32, n: u32) -> Self {
        Self::part(mapping, &Part::whole(i, n, 0))
    }

    /// The tasks of one part: `T(i, n) ∩ T(pi, pn)`.
    pub fn part(mapping: Mapping, part: &Part) -> Self {
        let mut set = Self::default();
        for t in 0..TASKS {
            let t64 = t as u64;
            if owner(mapping, t64, part.n) == part.i && owner(mapping, t64, part.pn) == part.pi {
                set.insert(t);
            }
        }
        set
    }

    /// Adds task `t` (below [`TASKS`]).
    pub fn insert(&mut self, t: usize) {
        self.words[t / 64] |= 1 << (t % 64);
    }

    /// Whether task `t` is in the set.
    pub fn contains(&self, t: usize) -> bool {
        t < TASKS && self.words[t / 64] & (1 << (t % 64)) != 0
    }

    /// The union of both sets.
    pub fn union(&self, other: &TaskSet) -> TaskSet {
        let mut out = *self;
        for (w, o) in out.words.iter_mut().zip(&other.words) {
            *w |= o;
        }
        out
    }

    /// How many tasks both sets have.
    pub fn common(&self, other: &TaskSet) -> u32 {
        self.words
            .iter()
            .zip(&other.words)
            .map(|(a, b)| (a & b).count_ones())
            .sum()
    }

    /// How many tasks the set has.
    pub fn len(&self) -> u32 {
        self.words.iter().map(|w| w.count_ones()).sum()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }

    /// The tasks, in order.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        (0..TASKS).filter(|&t| self.contains(t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The vectors pinned by lease-core's ownership tests.
    #[test]
    fn id_hash_vectors() {
        assert_eq!(id_hash(0), 0xe220_a839_7b1d_cdaf);
        assert_eq!(id_hash(1), 0x910a_2dec_8902_5cc1);
        assert_eq!(id_hash(2), 0x9758_35de_1c97_56ce);
        assert_eq!(id_hash(42), 0xbdd7_3226_2feb_6e95);
        assert_eq!(id_hash(u64::MAX), 0xe4d9_7177_1b65_2c20);
    }

    #[test]
    fn jump_hash_vectors() {
        assert_eq!(jump_hash(1, 1), 0);
        assert_eq!(jump_hash(42, 57), 43);
        assert_eq!(jump_hash(256, 1024), 520);
        assert_eq!(jump_hash(3_735_883_980, 1), 0);
        assert_eq!(jump_hash(3_735_883_980, 666), 361);
        assert_eq!(jump_hash(16_045_690_984_833_335_023, 255), 237);
        assert_eq!(jump_hash(0, 60), 0);
        assert_eq!(jump_hash(1, 60), 55);
        assert_eq!(jump_hash(2, 60), 46);
        assert_eq!(jump_hash(u64::MAX, 1 << 31), 699_554_662);
        assert_eq!(jump_hash(u64::MAX, u32::MAX), 2_680_453_518);
        assert_eq!(
            jump_hash(12_345_678_901_234_567_890, u32::MAX),
            2_330_202_923
        );
        assert_eq!(jump_hash(7, 0), 0);
    }

    /// The judge's mapping is lease-core's, on every bucket and every `n`
    /// up to 64 (lease-core is a dev-dependency only).
    #[test]
    fn owner_matches_lease_core_on_every_bucket() {
        for n in 1..=64u32 {
            for t in 0..TASKS as u64 {
                assert_eq!(
                    owner(Mapping::Consistent, t, n),
                    lease_core::ownership::Mapping::Consistent.owner(t, n),
                    "t={t} n={n}"
                );
                assert_eq!(
                    owner(Mapping::Modulo, t, n),
                    lease_core::ownership::Mapping::Modulo.owner(t, n),
                    "t={t} n={n}"
                );
            }
        }
    }

    #[test]
    fn pairs_partition_the_tasks_and_parts_intersect() {
        for n in [1, 2, 3, 7] {
            let sets: Vec<TaskSet> = (0..n)
                .map(|i| TaskSet::pair(Mapping::Consistent, i, n))
                .collect();
            let total: u32 = sets.iter().map(TaskSet::len).sum();
            assert_eq!(total as usize, TASKS);
            let all = sets.iter().fold(TaskSet::default(), |a, s| a.union(s));
            assert_eq!(all.len() as usize, TASKS);
        }
        // Growing 2 -> 3 under jump hash: T(0, 3) is inside T(0, 2).
        let old = TaskSet::pair(Mapping::Consistent, 0, 2);
        let new = TaskSet::pair(Mapping::Consistent, 0, 3);
        assert_eq!(new.common(&old), new.len());
        let part = TaskSet::part(Mapping::Consistent, &Part::intersection(2, 3, 0, 2, 1));
        assert_eq!(part.common(&new), 0);
        assert_eq!(part.len() + new.len(), old.len());
        assert!(TaskSet::default().is_empty());
    }
}
