//! Ownership: which worker of a group owns which task, id, key or bucket.
//!
//! A worker holding the lease on [`Pair`] `(i, n)` is "worker `i` of `n`".
//! Work is split between the `n` workers by a [`Mapping`]:
//!
//! * [`Mapping::Modulo`]: `id % n == i`. Perfectly balanced for dense ids, but
//!   changing `n` to `n + 1` moves about `n / (n + 1)` of all ids.
//! * [`Mapping::Consistent`]: jump consistent hash ([`jump_hash`], Lamping &
//!   Veach 2014) of a mixed id. Growing the group from `n` to `n + 1` moves only
//!   about `1 / (n + 1)` of all ids, **and every moved id moves to the newcomer,
//!   index `n`**. Symmetrically, shrinking from `n` to `n - 1` moves exactly the
//!   ids that were owned by index `n - 1` (the tail).
//!
//! The minimal-movement guarantee of the consistent mapping only holds for
//! changes **at the tail** of the index range. This matches how indices are
//! allocated: a newcomer joins at the tail (index `n`) and settled workers keep
//! their indices. When a worker with index `j < n - 1` departs, the last
//! worker fills its hole (rule 15 of docs/protocol.md), so only the departed
//! worker's ids and the last worker's move (see [`moved_fraction`] and
//! [`bucket_moves`] to quantify a change).
//!
//! Everything here is pure, allocation-light and platform-independent: all
//! hashes use fixed-width wrapping integer arithmetic only (no floating point,
//! no `std` hasher), so every worker in a fleet computes identical owners
//! regardless of architecture, OS, or library version.
//!
//! # Stability
//!
//! [`key_hash`], [`id_hash`] and [`jump_hash`] are part of the wire contract:
//! workers running different versions must agree on ownership. Their outputs
//! are pinned by test vectors and must never change.
//!
//! # Example
//!
//! ```
//! use lease_core::ownership::{Mapping, Pair};
//!
//! let me = Pair::new(1, 4).unwrap();
//! assert!(me.owns_modulo(5)); // 5 % 4 == 1
//! assert!(!me.is_leader());
//!
//! // Exactly one worker of the group owns any given id or key.
//! let group: Vec<Pair> = (0..4).map(|i| Pair::new(i, 4).unwrap()).collect();
//! for id in 0..100u64 {
//!     assert_eq!(group.iter().filter(|s| s.owns_id(id)).count(), 1);
//!     assert_eq!(group.iter().filter(|s| s.owns(Mapping::Modulo, id)).count(), 1);
//! }
//! assert_eq!(group.iter().filter(|s| s.owns_key(b"invoice:17")).count(), 1);
//! ```

use std::fmt;

/// Multiplier of the 64-bit linear congruential generator used by jump hash
/// (from the reference implementation in Lamping & Veach 2014).
const JUMP_LCG_MUL: u64 = 2_862_933_555_777_941_757;

/// FNV-1a 64-bit offset basis.
const FNV64_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
/// FNV-1a 64-bit prime.
const FNV64_PRIME: u64 = 0x0000_0100_0000_01b3;

/// splitmix64 increment ("golden gamma").
const SPLITMIX_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// Jump consistent hash (Lamping & Veach 2014, "A Fast, Minimal Memory,
/// Consistent Hash Algorithm", arXiv:1406.2294).
///
/// Maps `key` to a bucket in `0..buckets` such that, for any key, going from
/// `buckets` to `buckets + 1` either keeps the key's bucket or moves it to the
/// new bucket `buckets`; about `1 / (buckets + 1)` of keys move.
///
/// `key` should already be well mixed (use [`id_hash`] or [`key_hash`]);
/// [`Mapping::Consistent`] does this for you.
///
/// # Zero buckets
///
/// This function is total and never panics: `buckets == 0` has no valid
/// answer and is treated like `buckets == 1`, returning `0`. Callers that
/// hold a [`Pair`] never hit this case because a pair guarantees `n >= 1`.
///
/// # Compatibility
///
/// Uses the paper's LCG and jump rule, but evaluates the jump step
/// `floor((b + 1) * 2^31 / ((key >> 33) + 1))` in exact integer arithmetic
/// rather than in `f64`, so results are bit-identical on every platform. The
/// outputs agree with the paper's C++ reference on all published test vectors
/// (e.g. ClickHouse's `jumpConsistentHash`).
///
/// # Examples
///
/// ```
/// use lease_core::ownership::jump_hash;
///
/// // Published reference vectors.
/// assert_eq!(jump_hash(1, 1), 0);
/// assert_eq!(jump_hash(42, 57), 43);
/// assert_eq!(jump_hash(256, 1024), 520);
/// assert_eq!(jump_hash(0xDEAD_10CC, 666), 361);
///
/// // Total: zero buckets behaves like one bucket.
/// assert_eq!(jump_hash(7, 0), 0);
///
/// // Consistency: growing 10 -> 11 either keeps a key or moves it to 10.
/// for key in 0..1000u64 {
///     let before = jump_hash(key, 10);
///     let after = jump_hash(key, 11);
///     assert!(after == before || after == 10);
/// }
/// ```
#[must_use]
pub fn jump_hash(key: u64, buckets: u32) -> u32 {
    let buckets = u64::from(buckets.max(1));
    let mut key = key;
    let mut b: u64 = 0;
    let mut j: u64 = 0;
    while j < buckets {
        b = j;
        key = key.wrapping_mul(JUMP_LCG_MUL).wrapping_add(1);
        // (b + 1) <= u32::MAX and the shift adds 31 bits: < 2^63, no overflow.
        // The divisor is in 1..=2^31, so j >= b + 1 and the loop advances.
        j = ((b + 1) << 31) / ((key >> 33) + 1);
    }
    // b < buckets <= u32::MAX.
    u32::try_from(b).unwrap_or(u32::MAX)
}

/// splitmix64 output function applied to `id` (Steele, Lea & Flood 2014;
/// the `SplitMix64` generator's `next()` for state `id`).
///
/// Definition (all arithmetic wrapping modulo 2^64):
///
/// ```text
/// z = id + 0x9E3779B97F4A7C15
/// z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
/// z = (z ^ (z >> 27)) * 0x94D049BB133111EB
/// return z ^ (z >> 31)
/// ```
///
/// It is a bijection on `u64` with good avalanche, so it turns dense
/// sequential ids (`0, 1, 2, ...`) into well-spread jump hash keys. This is
/// the id mixing used by [`Mapping::Consistent`] and [`Pair::owns_id`].
/// Its output is a stability contract and never changes.
///
/// # Examples
///
/// ```
/// use lease_core::ownership::id_hash;
///
/// // First output of SplitMix64 seeded with 0 (well-known vector).
/// assert_eq!(id_hash(0), 0xE220_A839_7B1D_CDAF);
/// assert_ne!(id_hash(1), id_hash(2));
/// ```
#[must_use]
pub const fn id_hash(id: u64) -> u64 {
    let mut z = id.wrapping_add(SPLITMIX_GAMMA);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// FNV-1a 64 of `bytes` (offset basis `0xCBF29CE484222325`, prime
/// `0x100000001B3`).
const fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h = FNV64_OFFSET;
    let mut idx = 0;
    while idx < bytes.len() {
        h ^= bytes[idx] as u64;
        h = h.wrapping_mul(FNV64_PRIME);
        idx += 1;
    }
    h
}

/// Stable, platform-independent 64-bit hash of a byte key.
///
/// Defined as `id_hash(fnv1a64(bytes))`: FNV-1a 64 over the bytes (offset
/// basis `0xCBF29CE484222325`, prime `0x100000001B3`, i.e. for each byte
/// `h = (h ^ byte) * prime` wrapping), followed by the splitmix64 finaliser
/// [`id_hash`] for avalanche (FNV alone mixes its high bits poorly, and jump
/// hash consumes the high bits).
///
/// Independent of endianness, pointer width and Rust version. **Not**
/// cryptographic and not DoS-resistant: it is for partitioning trusted keys.
/// Its output is a stability contract and never changes between versions.
///
/// # Examples
///
/// ```
/// use lease_core::ownership::key_hash;
///
/// assert_eq!(key_hash(b""), 0xC381_7C01_6BA4_FF30);
/// assert_eq!(key_hash(b"a"), 0x5F29_C2AA_DD9B_8527);
/// assert_eq!(key_hash(b"foobar"), 0x5DF2_9541_3403_DE4F);
/// ```
#[must_use]
pub const fn key_hash(bytes: &[u8]) -> u64 {
    id_hash(fnv1a64(bytes))
}

/// How ids (task ids, bucket numbers) are split between the `n` workers.
///
/// # Examples
///
/// ```
/// use lease_core::ownership::Mapping;
///
/// assert_eq!(Mapping::Modulo.owner(10, 4), 2);
/// let owner = Mapping::Consistent.owner(10, 4);
/// assert!(owner < 4);
/// // Growing the group only ever moves an id to the newcomer.
/// let grown = Mapping::Consistent.owner(10, 5);
/// assert!(grown == owner || grown == 4);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Mapping {
    /// `owner = id % n`. Balanced for dense ids; a change of `n` reshuffles
    /// almost everything (about `n / (n + 1)` of ids move on `n -> n + 1`).
    #[default]
    Modulo,
    /// `owner = jump_hash(id_hash(id), n)`. Balanced in expectation; a tail
    /// change `n -> n + 1` moves about `1 / (n + 1)` of ids, all to index `n`.
    Consistent,
}

impl Mapping {
    /// Index (in `0..n`) of the worker owning `id` in a group of `n`.
    ///
    /// Total: `n == 0` has no valid owner and returns `0` (as if `n == 1`).
    ///
    /// # Examples
    ///
    /// ```
    /// use lease_core::ownership::{id_hash, jump_hash, Mapping};
    ///
    /// assert_eq!(Mapping::Modulo.owner(7, 3), 1);
    /// assert_eq!(Mapping::Consistent.owner(7, 3), jump_hash(id_hash(7), 3));
    /// assert_eq!(Mapping::Modulo.owner(7, 0), 0);
    /// ```
    #[must_use]
    pub fn owner(self, id: u64, n: u32) -> u32 {
        match self {
            Self::Modulo => modulo(id, n),
            Self::Consistent => jump_hash(id_hash(id), n),
        }
    }

    /// Index (in `0..n`) of the worker owning the byte key `key` in a group
    /// of `n`: the [`key_hash`] of the key, reduced by this mapping (`% n`
    /// or [`jump_hash`]).
    ///
    /// Total: `n == 0` has no valid owner and returns `0` (as if `n == 1`).
    ///
    /// # Examples
    ///
    /// ```
    /// use lease_core::ownership::{jump_hash, key_hash, Mapping};
    ///
    /// let h = key_hash(b"user:42");
    /// assert_eq!(Mapping::Modulo.owner_of_key(b"user:42", 8), (h % 8) as u32);
    /// assert_eq!(Mapping::Consistent.owner_of_key(b"user:42", 8), jump_hash(h, 8));
    /// ```
    #[must_use]
    pub fn owner_of_key(self, key: &[u8], n: u32) -> u32 {
        let h = key_hash(key);
        match self {
            Self::Modulo => modulo(h, n),
            Self::Consistent => jump_hash(h, n),
        }
    }
}

impl Mapping {
    /// The mapping's name in group rules records and on command lines:
    /// `modulo` or `consistent`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Modulo => "modulo",
            Self::Consistent => "consistent",
        }
    }
}

impl fmt::Display for Mapping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Mapping {
    type Err = crate::OptionsError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "modulo" => Ok(Self::Modulo),
            "consistent" => Ok(Self::Consistent),
            other => Err(crate::OptionsError::UnknownMapping(other.to_owned())),
        }
    }
}

/// `x % n` as `u32`, with `n == 0` mapped to `0`.
fn modulo(x: u64, n: u32) -> u32 {
    match x.checked_rem(u64::from(n)) {
        // The remainder is < n <= u32::MAX.
        Some(r) => u32::try_from(r).unwrap_or(0),
        None => 0,
    }
}

/// A worker's position in its group: worker `i` of `n`, with `i < n`.
///
/// The invariant `n > 0 && i < n` is enforced by [`Pair::new`]; the fields are
/// read through [`Pair::i`] and [`Pair::n`]. Ordering is by `i`, then `n`.
///
/// # Examples
///
/// ```
/// use lease_core::ownership::Pair;
///
/// let s = Pair::new(2, 5).unwrap();
/// assert_eq!((s.i(), s.n()), (2, 5));
/// assert_eq!(s.to_string(), "2/5");
/// assert!(Pair::new(5, 5).is_none());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Pair {
    i: u32,
    n: u32,
}

impl Pair {
    /// Creates pair `i` of `n`; `None` unless `n > 0` and `i < n`.
    ///
    /// # Examples
    ///
    /// ```
    /// use lease_core::ownership::Pair;
    ///
    /// assert!(Pair::new(0, 1).is_some());
    /// assert!(Pair::new(3, 4).is_some());
    /// assert!(Pair::new(4, 4).is_none());
    /// assert!(Pair::new(0, 0).is_none());
    /// ```
    #[must_use]
    pub const fn new(i: u32, n: u32) -> Option<Self> {
        if n > 0 && i < n {
            Some(Self { i, n })
        } else {
            None
        }
    }

    /// This worker's index, in `0..n`.
    ///
    /// # Examples
    ///
    /// ```
    /// # use lease_core::ownership::Pair;
    /// assert_eq!(Pair::new(1, 3).unwrap().i(), 1);
    /// ```
    #[must_use]
    pub const fn i(self) -> u32 {
        self.i
    }

    /// The group size, at least 1.
    ///
    /// # Examples
    ///
    /// ```
    /// # use lease_core::ownership::Pair;
    /// assert_eq!(Pair::new(1, 3).unwrap().n(), 3);
    /// ```
    #[must_use]
    pub const fn n(self) -> u32 {
        self.n
    }

    /// Whether this worker is the leader (index 0). Every non-empty group has
    /// exactly one leader.
    ///
    /// # Examples
    ///
    /// ```
    /// # use lease_core::ownership::Pair;
    /// assert!(Pair::new(0, 3).unwrap().is_leader());
    /// assert!(!Pair::new(2, 3).unwrap().is_leader());
    /// ```
    #[must_use]
    pub const fn is_leader(self) -> bool {
        self.i == 0
    }

    /// Whether this worker owns `task_id` under [`Mapping::Modulo`]:
    /// `task_id % n == i`.
    ///
    /// # Examples
    ///
    /// ```
    /// # use lease_core::ownership::Pair;
    /// let s = Pair::new(1, 3).unwrap();
    /// assert!(s.owns_modulo(4));
    /// assert!(!s.owns_modulo(5));
    /// ```
    #[must_use]
    pub const fn owns_modulo(self, task_id: u64) -> bool {
        // n > 0 by construction.
        task_id % (self.n as u64) == self.i as u64
    }

    /// Whether this worker owns `id` under [`Mapping::Consistent`]:
    /// `jump_hash(id_hash(id), n) == i`.
    ///
    /// # Examples
    ///
    /// ```
    /// use lease_core::ownership::{id_hash, jump_hash, Pair};
    ///
    /// let s = Pair::new(2, 4).unwrap();
    /// for id in 0..50u64 {
    ///     assert_eq!(s.owns_id(id), jump_hash(id_hash(id), 4) == 2);
    /// }
    /// ```
    #[must_use]
    pub fn owns_id(self, id: u64) -> bool {
        Mapping::Consistent.owner(id, self.n) == self.i
    }

    /// Whether this worker owns the byte key `key` under
    /// [`Mapping::Consistent`]: `jump_hash(key_hash(key), n) == i`.
    ///
    /// # Examples
    ///
    /// ```
    /// use lease_core::ownership::{jump_hash, key_hash, Pair};
    ///
    /// let s = Pair::new(0, 3).unwrap();
    /// assert_eq!(s.owns_key(b"order:9"), jump_hash(key_hash(b"order:9"), 3) == 0);
    /// ```
    #[must_use]
    pub fn owns_key(self, key: &[u8]) -> bool {
        Mapping::Consistent.owner_of_key(key, self.n) == self.i
    }

    /// Whether this worker owns `id` under `mapping`
    /// (`mapping.owner(id, n) == i`).
    ///
    /// # Examples
    ///
    /// ```
    /// use lease_core::ownership::{Mapping, Pair};
    ///
    /// let s = Pair::new(1, 4).unwrap();
    /// assert_eq!(s.owns(Mapping::Modulo, 9), s.owns_modulo(9));
    /// assert_eq!(s.owns(Mapping::Consistent, 9), s.owns_id(9));
    /// ```
    #[must_use]
    pub fn owns(self, mapping: Mapping, id: u64) -> bool {
        mapping.owner(id, self.n) == self.i
    }
}

impl fmt::Display for Pair {
    /// Formats as `i/n`, e.g. `2/5`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.i, self.n)
    }
}

/// The change in a worker's bucket set between two pairs; see [`bucket_moves`].
///
/// Each list is sorted ascending and the three lists are disjoint.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BucketMoves {
    /// Buckets owned under the new pair but not the old one: start serving.
    pub granted: Vec<u32>,
    /// Buckets owned under the old pair but not the new one: stop serving.
    pub released: Vec<u32>,
    /// Buckets owned under both pairs: keep serving without interruption.
    pub kept: Vec<u32>,
}

impl BucketMoves {
    /// Whether ownership is unchanged (nothing granted, nothing released).
    ///
    /// # Examples
    ///
    /// ```
    /// use lease_core::ownership::{bucket_moves, Mapping, Pair};
    ///
    /// let s = Pair::new(0, 2);
    /// assert!(bucket_moves(s, s, 16, Mapping::Consistent).is_unchanged());
    /// ```
    #[must_use]
    pub fn is_unchanged(&self) -> bool {
        self.granted.is_empty() && self.released.is_empty()
    }
}

/// Computes which of the buckets `0..buckets` this worker gains, loses and
/// keeps when its pair changes from `from` to `to`.
///
/// Bucket `b` is owned by pair `s` iff `mapping.owner(b as u64, s.n()) ==
/// s.i()`. `None` means "holding no pair" (before the first lease or after
/// losing it) and owns nothing. Runs in `O(buckets)` time (times `O(log n)`
/// for [`Mapping::Consistent`]) and allocates only the result.
///
/// # Examples
///
/// ```
/// use lease_core::ownership::{bucket_moves, Mapping, Pair};
///
/// // Joining: everything owned is granted.
/// let h = bucket_moves(None, Pair::new(1, 2), 6, Mapping::Modulo);
/// assert_eq!(h.granted, vec![1, 3, 5]);
/// assert!(h.released.is_empty() && h.kept.is_empty());
///
/// // A newcomer joins at the tail (index 4): worker 1 only releases buckets
/// // (to the newcomer) and is granted none.
/// let h = bucket_moves(Pair::new(1, 4), Pair::new(1, 5), 1024, Mapping::Consistent);
/// assert!(h.granted.is_empty());
/// assert!(h.released.iter().all(|&b| Mapping::Consistent.owner(b.into(), 5) == 4));
///
/// // Leaving: everything is released.
/// let h = bucket_moves(Pair::new(0, 2), None, 4, Mapping::Modulo);
/// assert_eq!(h.released, vec![0, 2]);
/// ```
#[must_use]
pub fn bucket_moves(
    from: Option<Pair>,
    to: Option<Pair>,
    buckets: u32,
    mapping: Mapping,
) -> BucketMoves {
    let owned = |pair: Option<Pair>, b: u32| pair.is_some_and(|s| s.owns(mapping, u64::from(b)));
    let mut out = BucketMoves::default();
    for b in 0..buckets {
        match (owned(from, b), owned(to, b)) {
            (false, true) => out.granted.push(b),
            (true, false) => out.released.push(b),
            (true, true) => out.kept.push(b),
            (false, false) => {}
        }
    }
    out
}

/// Fraction (in `[0, 1]`) of the ids `0..keys` whose owner under `mapping`
/// differs between a group of `from_n` and a group of `to_n` workers,
/// assuming indices are stable (changes happen at the tail). Intended for
/// benchmarks and documentation; `O(keys)`.
///
/// Returns `0.0` when `keys == 0`. Group sizes of `0` follow
/// [`Mapping::owner`] (treated as `1`).
///
/// # Examples
///
/// ```
/// use lease_core::ownership::{moved_fraction, Mapping};
///
/// // Modulo 2 -> 3 over 0..6: ids 2, 3 change owner (0->2, 1->0), as do 4, 5.
/// assert_eq!(moved_fraction(Mapping::Modulo, 2, 3, 6), 4.0 / 6.0);
///
/// // Consistent 4 -> 5 moves about 1/5 of ids.
/// let f = moved_fraction(Mapping::Consistent, 4, 5, 10_000);
/// assert!((f - 0.2).abs() < 0.03);
/// assert_eq!(moved_fraction(Mapping::Consistent, 4, 4, 10_000), 0.0);
/// ```
#[must_use]
pub fn moved_fraction(mapping: Mapping, from_n: u32, to_n: u32, keys: u64) -> f64 {
    if keys == 0 {
        return 0.0;
    }
    let moved = (0..keys)
        .filter(|&id| mapping.owner(id, from_n) != mapping.owner(id, to_n))
        .count();
    // Precision loss above 2^53 ids is irrelevant for a ratio.
    #[allow(clippy::cast_precision_loss)]
    let fraction = moved as f64 / keys as f64;
    fraction
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reference jump hash exactly as published (f64 jump step), to check
    /// that the integer evaluation in [`jump_hash`] agrees with it.
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    fn jump_hash_f64_reference(mut key: u64, buckets: i64) -> i64 {
        let (mut b, mut j) = (-1_i64, 0_i64);
        while j < buckets {
            b = j;
            key = key.wrapping_mul(JUMP_LCG_MUL).wrapping_add(1);
            j = ((b + 1) as f64 * ((1_i64 << 31) as f64 / ((key >> 33) + 1) as f64)) as i64;
        }
        b
    }

    // Test vectors for key_hash / id_hash / FNV-1a, computed independently with
    // python3 (arbitrary-precision ints, masked to 64 bits):
    //
    //   M=(1<<64)-1
    //   def fnv(b):
    //       h=0xcbf29ce484222325
    //       for x in b: h=((h^x)*0x100000001b3)&M
    //       return h
    //   def sm(z):
    //       z=(z+0x9E3779B97F4A7C15)&M
    //       z=((z^(z>>30))*0xBF58476D1CE4E5B9)&M
    //       z=((z^(z>>27))*0x94D049BB133111EB)&M
    //       return z^(z>>31)
    //   for s in [b"",b"a",b"foobar",b"task-42",b"\x00"]: print(s, hex(fnv(s)), hex(sm(fnv(s))))
    //   for i in [0,1,2,42,M]: print(i, hex(sm(i)))
    //
    // The FNV-1a values for "", "a" and "foobar" also match the published
    // FNV-1a 64 test vectors, and id_hash(0) is the well-known first output
    // of SplitMix64 seeded with 0. THESE VALUES MUST NEVER CHANGE.
    #[test]
    fn fnv1a64_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
        assert_eq!(fnv1a64(b"task-42"), 0x446f_8656_f797_58f5);
        assert_eq!(fnv1a64(b"\x00"), 0xaf63_bd4c_8601_b7df);
    }

    #[test]
    fn id_hash_vectors() {
        assert_eq!(id_hash(0), 0xe220_a839_7b1d_cdaf);
        assert_eq!(id_hash(1), 0x910a_2dec_8902_5cc1);
        assert_eq!(id_hash(2), 0x9758_35de_1c97_56ce);
        assert_eq!(id_hash(42), 0xbdd7_3226_2feb_6e95);
        assert_eq!(id_hash(u64::MAX), 0xe4d9_7177_1b65_2c20);
    }

    #[test]
    fn key_hash_vectors() {
        assert_eq!(key_hash(b""), 0xc381_7c01_6ba4_ff30);
        assert_eq!(key_hash(b"a"), 0x5f29_c2aa_dd9b_8527);
        assert_eq!(key_hash(b"foobar"), 0x5df2_9541_3403_de4f);
        assert_eq!(key_hash(b"task-42"), 0x4cdb_ee45_bf39_f18d);
        assert_eq!(key_hash(b"\x00"), 0x71b8_262b_b6e2_e086);
        // The empty key and a NUL byte must differ.
        assert_ne!(key_hash(b""), key_hash(b"\x00"));
    }

    // Published vectors (ClickHouse 00580_consistent_hashing_functions and the
    // jump_consistent_hash crate docs), plus large-bucket vectors computed with
    // the paper's algorithm in python3 (both float and exact-integer jump
    // steps give the same answers).
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
    }

    #[test]
    fn jump_hash_matches_f64_reference() {
        let mut key = 0x1234_5678_9abc_def0_u64;
        for round in 0..20_000_u32 {
            key = id_hash(key);
            let n = match round % 3 {
                0 => (round % 100) + 1,
                1 => u32::try_from(key >> 32).unwrap_or(u32::MAX).max(1),
                _ => 1 << (round % 32),
            };
            assert_eq!(
                i64::from(jump_hash(key, n)),
                jump_hash_f64_reference(key, i64::from(n)),
                "key={key} n={n}"
            );
        }
    }

    #[test]
    fn jump_hash_one_bucket_is_zero() {
        for k in (0..10_000_u64).chain([u64::MAX, u64::MAX - 1, 1 << 63]) {
            assert_eq!(jump_hash(k, 1), 0);
            assert_eq!(jump_hash(k, 0), 0);
            assert_eq!(jump_hash(id_hash(k), 1), 0);
        }
    }

    #[test]
    fn jump_hash_in_range() {
        for n in [2_u32, 3, 7, 64, 1000, 1 << 20, u32::MAX] {
            for k in 0..2_000_u64 {
                assert!(jump_hash(id_hash(k), n) < n);
                assert!(jump_hash(k, n) < n);
            }
        }
    }

    #[test]
    fn consistent_balance() {
        // Each of 8 buckets gets close to 1/8 of 80_000 ids.
        let mut counts = [0_u32; 8];
        for id in 0..80_000_u64 {
            counts[Mapping::Consistent.owner(id, 8) as usize] += 1;
        }
        for c in counts {
            assert!((9_000..11_000).contains(&c), "{counts:?}");
        }
    }

    const IDS: u64 = 100_000;

    fn owners(mapping: Mapping, n: u32) -> Vec<u32> {
        (0..IDS).map(|id| mapping.owner(id, n)).collect()
    }

    #[allow(clippy::cast_precision_loss)]
    fn frac(count: usize) -> f64 {
        count as f64 / IDS as f64
    }

    #[test]
    fn consistent_grow_moves_about_one_over_n_plus_one_all_to_newcomer() {
        let mut before = owners(Mapping::Consistent, 1);
        for n in 1..=32_u32 {
            let after = owners(Mapping::Consistent, n + 1);
            let mut moved = 0;
            for (&a, &b) in before.iter().zip(&after) {
                if a != b {
                    moved += 1;
                    assert_eq!(b, n, "moved id must go to the newcomer");
                }
            }
            let expected = 1.0 / f64::from(n + 1);
            let got = frac(moved);
            assert!(
                (got - expected).abs() <= 0.25 * expected,
                "n={n}: moved {got}, expected ~{expected}"
            );
            before = after;
        }
    }

    #[test]
    fn modulo_grow_moves_most() {
        let mut before = owners(Mapping::Modulo, 1);
        for n in 1..=32_u32 {
            let after = owners(Mapping::Modulo, n + 1);
            let moved = before.iter().zip(&after).filter(|(a, b)| a != b).count();
            let got = frac(moved);
            if n >= 2 {
                assert!(got > 0.5, "n={n}: modulo moved only {got}");
            }
            // Agrees with the public helper.
            assert!((moved_fraction(Mapping::Modulo, n, n + 1, IDS) - got).abs() < 1e-12);
            before = after;
        }
    }

    #[test]
    fn consistent_shrink_moves_exactly_the_tail_bucket() {
        for n in 2..=32_u32 {
            let before = owners(Mapping::Consistent, n);
            let after = owners(Mapping::Consistent, n - 1);
            for (&a, &b) in before.iter().zip(&after) {
                // Moved iff it was in the removed bucket n - 1.
                assert_eq!(a != b, a == n - 1, "n={n}");
            }
        }
    }

    #[test]
    fn handover_tail_join_releases_only_to_newcomer() {
        let from = Pair::new(1, 4);
        let to = Pair::new(1, 5);
        let h = bucket_moves(from, to, 4096, Mapping::Consistent);
        assert!(h.granted.is_empty());
        assert!(!h.released.is_empty());
        for &b in &h.released {
            assert_eq!(Mapping::Consistent.owner(u64::from(b), 4), 1);
            assert_eq!(Mapping::Consistent.owner(u64::from(b), 5), 4);
        }
        for &b in &h.kept {
            assert_eq!(Mapping::Consistent.owner(u64::from(b), 5), 1);
        }
        // Released + kept is exactly what 1/4 owned.
        let mut all: Vec<u32> = h.released.iter().chain(&h.kept).copied().collect();
        all.sort_unstable();
        assert_eq!(
            all,
            bucket_moves(None, from, 4096, Mapping::Consistent).granted
        );
    }

    #[test]
    fn handover_from_none_grants_exactly_owned() {
        for mapping in [Mapping::Modulo, Mapping::Consistent] {
            for n in 1..=8 {
                for i in 0..n {
                    let s = Pair::new(i, n).unwrap();
                    let h = bucket_moves(None, Some(s), 500, mapping);
                    let owned: Vec<u32> = (0..500).filter(|&b| s.owns(mapping, b.into())).collect();
                    assert_eq!(h.granted, owned);
                    assert!(h.released.is_empty() && h.kept.is_empty());
                    let back = bucket_moves(Some(s), None, 500, mapping);
                    assert_eq!(back.released, owned);
                    assert!(back.granted.is_empty() && back.kept.is_empty());
                }
            }
        }
        assert_eq!(
            bucket_moves(None, None, 100, Mapping::Modulo),
            BucketMoves::default()
        );
        assert!(bucket_moves(None, Pair::new(0, 1), 0, Mapping::Consistent).is_unchanged());
    }

    #[test]
    fn buckets_partitioned_exactly_once() {
        for mapping in [Mapping::Modulo, Mapping::Consistent] {
            let n = 7;
            let mut seen = vec![0_u8; 1000];
            for i in 0..n {
                for b in bucket_moves(None, Pair::new(i, n), 1000, mapping).granted {
                    seen[b as usize] += 1;
                }
            }
            assert!(seen.iter().all(|&c| c == 1));
        }
    }

    #[test]
    fn leader() {
        assert!(Pair::new(0, 1).unwrap().is_leader());
        assert!(Pair::new(0, 9).unwrap().is_leader());
        assert!(!Pair::new(1, 9).unwrap().is_leader());
        assert!(!Pair::new(8, 9).unwrap().is_leader());
    }

    #[test]
    fn slot_new_validates() {
        assert_eq!(Pair::new(0, 0), None);
        assert_eq!(Pair::new(1, 0), None);
        assert_eq!(Pair::new(1, 1), None);
        assert_eq!(Pair::new(5, 3), None);
        assert_eq!(Pair::new(u32::MAX, u32::MAX), None);
        let s = Pair::new(u32::MAX - 1, u32::MAX).unwrap();
        assert_eq!((s.i(), s.n()), (u32::MAX - 1, u32::MAX));
    }

    #[test]
    fn slot_ownership_methods_agree() {
        let s = Pair::new(2, 5).unwrap();
        for id in 0..1000_u64 {
            assert_eq!(s.owns_modulo(id), id % 5 == 2);
            assert_eq!(s.owns_modulo(id), s.owns(Mapping::Modulo, id));
            assert_eq!(s.owns_id(id), s.owns(Mapping::Consistent, id));
            let key = id.to_le_bytes();
            assert_eq!(s.owns_key(&key), jump_hash(key_hash(&key), 5) == 2);
        }
    }

    #[test]
    fn zero_group_is_total() {
        assert_eq!(Mapping::Modulo.owner(5, 0), 0);
        assert_eq!(Mapping::Consistent.owner(5, 0), 0);
        assert_eq!(Mapping::Modulo.owner_of_key(b"x", 0), 0);
        assert_eq!(Mapping::Consistent.owner_of_key(b"x", 0), 0);
        assert_eq!(moved_fraction(Mapping::Modulo, 3, 4, 0), 0.0);
    }
}
