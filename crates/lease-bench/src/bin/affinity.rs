//! Affinity: the share of keys that change owner when the
//! group changes size, under plain modulo and under the consistent mapping
//! (jump hash), with the joins and departures each counting mode produces.
//!
//! - `n -> n+1`, tail join (`Ranked`: the newcomer gets index `n`):
//!   [`moved_fraction`], and with [`bucket_moves`] the share of keys that move
//!   *between settled workers* (not to the newcomer).
//! - `n -> n-1`, tail departure (the worker with index `n-1` leaves).
//! - `n -> n-1`, departure of index 0 (the indices above shift down by one:
//!   the worst case of a departure, in either counting mode), and of a
//!   uniformly random index, averaged over the `n` indices.
//! - `n -> n+1`, newcomer at a uniformly random index (`Arrival`: the
//!   newcomer's first registration lands anywhere in the arrival order, and
//!   every index after it shifts up), averaged over the `n+1` positions.
//!
//! Keys are the ids `0..KEYS`; the figures are exact counts over them.

use lease_bench::{Table, header};
use lease_core::ownership::{Mapping, Pair, bucket_moves, moved_fraction};

const KEYS: u64 = 1 << 20;
const BUCKETS: u32 = 1 << 16;
const SIZES: [u32; 7] = [2, 3, 4, 5, 8, 16, 64];

/// Share of keys whose owning *worker* changes when indices are relabelled:
/// the worker with old index `i` has new index `relabel(i)` (`None`: it left).
fn moved_relabelled(
    mapping: Mapping,
    from: u32,
    to: u32,
    relabel: impl Fn(u32) -> Option<u32>,
) -> f64 {
    let moved = (0..KEYS)
        .filter(|&id| relabel(mapping.owner(id, from)) != Some(mapping.owner(id, to)))
        .count();
    moved as f64 / KEYS as f64
}

/// With a tail join `n -> n+1`, the share of buckets that some settled worker
/// is granted (taken from another settled worker, not from the newcomer's
/// arrival): zero for a consistent mapping.
fn granted_to_settled(mapping: Mapping, n: u32) -> f64 {
    let granted: usize = (0..n)
        .map(|i| {
            bucket_moves(Pair::new(i, n), Pair::new(i, n + 1), BUCKETS, mapping)
                .granted
                .len()
        })
        .sum();
    granted as f64 / f64::from(BUCKETS)
}

fn pct(x: f64) -> String {
    format!("{:.1} %", x * 100.0)
}

fn main() {
    header(
        "Affinity: keys moved when the group changes size",
        "scripts/bench-affinity.sh",
    );
    let mut table = Table::new(&[
        "n",
        "mapping",
        "n→n+1 tail join (Ranked)",
        "…of which between settled workers",
        "n→n+1 join at a random index (Arrival)",
        "n→n−1 tail departure",
        "n→n−1 departure of index 0",
        "n→n−1 departure at a random index",
        "ideal 1/(n+1), 1/n",
    ]);
    for n in SIZES {
        for mapping in [Mapping::Modulo, Mapping::Consistent] {
            let join_tail = moved_fraction(mapping, n, n + 1, KEYS);
            let leave_tail = moved_fraction(mapping, n, n - 1, KEYS);
            let leave_head = moved_relabelled(mapping, n, n - 1, |i| i.checked_sub(1));
            let leave_random = (0..n)
                .map(|j| {
                    moved_relabelled(mapping, n, n - 1, |i| match i.cmp(&j) {
                        std::cmp::Ordering::Less => Some(i),
                        std::cmp::Ordering::Equal => None,
                        std::cmp::Ordering::Greater => Some(i - 1),
                    })
                })
                .sum::<f64>()
                / f64::from(n);
            let join_random = (0..=n)
                .map(|p| {
                    moved_relabelled(mapping, n, n + 1, |i| Some(if i < p { i } else { i + 1 }))
                })
                .sum::<f64>()
                / f64::from(n + 1);
            table.row([
                n.to_string(),
                format!("{mapping:?}"),
                pct(join_tail),
                pct(granted_to_settled(mapping, n)),
                pct(join_random),
                pct(leave_tail),
                pct(leave_head),
                pct(leave_random),
                format!(
                    "{}, {}",
                    pct(1.0 / f64::from(n + 1)),
                    pct(1.0 / f64::from(n))
                ),
            ]);
        }
    }
    table.print();
    println!("Keys: the ids 0..{KEYS}; hand-over per worker over {BUCKETS} buckets.\n");
}
