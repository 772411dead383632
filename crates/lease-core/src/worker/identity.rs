//! Who a worker is, and how its requests are told apart.

use std::fmt::{self, Display};

use crate::ownership::id_hash;

/// The identity of one worker run: 128 bits, new on every start, and the
/// member the worker is in each interval's sorted set (Ranked counting).
///
/// Two live workers with one identity are **one member** to the group: both
/// get its position and both hold its lease, so the lease is no longer
/// exclusive. The state machine draws no randomness itself; identities come
/// from a constructor that draws them: the adapters draw one from the
/// operating system for every start (`lease_driver::random_identity`), the
/// simulator derives one from its seed and the worker's number
/// ([`Identity::seeded`]).
///
/// Not to be confused with a lease's *fencing token* (an interval number,
/// [`crate::Lease::token_for`]) or an adapter's *cancellation token*.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Identity(u128);

impl Identity {
    /// An identity from exactly these bits. **Reused bits are the same
    /// worker**: two live workers of one group built from the same bits
    /// share one position and both hold its lease, which breaks exclusivity.
    /// Only for bits that are unique per process start (drawn at random, as
    /// `lease_driver::random_identity` does, or derived from a seed with
    /// [`Identity::seeded`]); never a constant.
    pub const fn from_bits_same_worker_if_reused(bits: u128) -> Self {
        Self(bits)
    }

    /// An identity derived from a run's `seed` and the worker's number
    /// `worker`, for deterministic runs (simulations, tests that replay):
    /// distinct worker numbers under one seed always give distinct
    /// identities, and their schedule spreads (rule 8) differ.
    ///
    /// ```
    /// use lease_core::Identity;
    /// assert_ne!(Identity::seeded(1, 0), Identity::seeded(1, 1));
    /// assert_eq!(Identity::seeded(1, 0), Identity::seeded(1, 0));
    /// ```
    pub const fn seeded(seed: u64, worker: u64) -> Self {
        // `id_hash` is a bijection, so for one seed the high halves (and so
        // the identities) of distinct worker numbers are distinct.
        let high = id_hash(worker ^ id_hash(seed));
        let low = id_hash(high ^ seed.rotate_left(32));
        Self(((high as u128) << 64) | low as u128)
    }

    /// The identity's bits.
    pub const fn bits(self) -> u128 {
        self.0
    }

    /// A number in `[0, 1)` derived from the identity: its place in the
    /// schedule's spread (rule 8), constant for the run.
    pub(crate) fn spread_fraction(self) -> f64 {
        ((self.0 >> 64) as u64) as f64 / 18_446_744_073_709_551_616.0
    }

    /// A second number in `[0, 1)` from the identity, independent of
    /// [`Identity::spread_fraction`] (the low half, mixed): where in its
    /// first interval the worker sends its first request (rule 8).
    pub(crate) fn start_fraction(self) -> f64 {
        id_hash(self.0 as u64) as f64 / 18_446_744_073_709_551_616.0
    }
}

impl Display for Identity {
    /// 32 lowercase hex digits: fixed width, so the sorted set's tie-break by
    /// member is the numeric order of identities.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// Identifies one request, so its reply or failure can be fed back with
/// [`crate::Worker::handle_reply`] or [`crate::Worker::handle_failure`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(pub(crate) u64);

impl Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}
