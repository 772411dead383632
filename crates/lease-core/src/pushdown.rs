//! Push-down predicates: a lease as a condition a task source evaluates
//! itself, so that a worker reading a table fetches only its own rows
//! instead of reading every row and asking [`crate::Lease::owns`] of each.
//!
//! The predicate is a set of **buckets**: for a bucket count `B`, task `t`
//! is in bucket `t % B`, and a [`Buckets`] value lists the buckets
//! `0..B` that a lease (or a part of it, or a change between two values)
//! holds. [`Buckets::postgres`] writes it as a PostgreSQL condition with
//! bound parameters, `(id % $1) = ANY($2)`.
//!
//! # What a bucket set guarantees, per mapping
//!
//! * [`Mapping::Consistent`] (task sets, the default): jump hash spreads
//!   the ids of one bucket over every worker, so no bucket is ever whole in
//!   one lease. The bucket number is used **as the task id**: the lease
//!   holds bucket `b` exactly when it covers id `b`, and task `t` is
//!   *bucketed-held* when its bucket `t % B` is held. Bucketed ownership is
//!   exclusive like ownership itself, but it is a different split of the
//!   tasks from [`crate::Lease::owns`]`(t)`: **every worker of the group
//!   must decide ownership by bucket with the same `B`**, that is assign
//!   each task to `t % B` and ask about the bucket, never about `t` itself
//!   ([`Buckets::contains_task`], or `lease.owns(t % B)`). One worker that
//!   asks `owns(t)` while another filters by buckets breaks exclusivity.
//! * [`Mapping::Modulo`] (whole pairs): a bucket is held when **every** id
//!   in it is in the lease, so the bucketed tasks are always a subset of
//!   the lease's own tasks and workers may mix bucket filters with
//!   `owns(t)`. The subset is all of them exactly when every group size
//!   `n` in the lease divides `B`; otherwise it is empty (the ids of a
//!   bucket fall on several workers). Under whole pairs the direct
//!   predicate `t % n = i` ([`crate::Lease::pair`]) needs no `B` at all.
//!
//! In both cases the set is a snapshot of one value of the stream: the task
//! source must run the query while the lease is valid
//! ([`crate::Lease::is_valid`]) and stop using its rows at the deadline of
//! the part that holds them ([`crate::PartLease::deadline`]); fence writes
//! with the part's token ([`crate::PartLease::buckets`] gives each part's
//! own buckets for that).
//!
//! # What `B` costs, and which `B` to choose
//!
//! Computing a set is `O(B)` membership tests (each `O(log n)` under jump
//! hash) per value of the stream, and the list has about `B / n` entries,
//! which travel with every query as an array parameter. Bucketing rounds
//! the split to whole buckets: with `B` buckets over `n` workers each
//! worker's share is `1 / n` give or take a relative `sqrt(n / B)`, and a join
//! moves whole buckets, about `B / (n + 1)` of them, which is near the
//! ideal `1 / (n + 1)` of the tasks only when `B` is much larger than `n`
//! (say `B ≥ 100·n`; 1,024 or 4,096 for groups of up to a few dozen).
//! `B` is one of the group's conventions like the mapping: changing it
//! re-deals every task, so pick it once, larger than the group will grow.
//!
//! ```
//! use lease_core::pushdown::Buckets;
//!
//! let owned = Buckets::from_owned(8, vec![1, 5]).unwrap();
//! assert!(owned.contains_task(13) && !owned.contains_task(14));
//! let sql = owned.postgres("jobs.id", 1).unwrap();
//! assert_eq!(sql.sql(), "((jobs.id)::bigint % $1::bigint) = ANY($2::bigint[])");
//! assert_eq!((sql.count(), sql.buckets()), (8, &[1_i64, 5][..]));
//! ```

use std::fmt::Write as _;

use crate::ownership::Mapping;
use crate::part::Part;

/// The largest bucket count accepted: a set is computed in `O(B)` and a
/// list holds up to `B` entries, so an unbounded count would let one option
/// allocate without limit.
pub const MAX_BUCKETS: u32 = 1 << 24;

/// Above this, the least common multiple of the group sizes in a modulo
/// holding is not enumerated (its cost is linear in it), and a bucket is
/// counted as held only when one part holds all of it.
const MAX_MODULO_PERIOD: u64 = 1 << 22;

/// Why a bucket set or a predicate could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PushdownError {
    /// A bucket count of 0 or above [`MAX_BUCKETS`].
    #[error("bucket count {0} is outside 1..={MAX_BUCKETS}")]
    BucketCount(u32),
    /// A listed bucket that is not below the count.
    #[error("bucket {bucket} is not below the bucket count {count}")]
    Bucket {
        /// The bucket.
        bucket: u32,
        /// The count.
        count: u32,
    },
    /// A column that is not a plain or qualified SQL identifier: it is
    /// written into the statement, not bound, so only identifiers are
    /// accepted.
    #[error(
        "column {0:?} is not a plain or qualified identifier (letters, digits, _ and $, \
         parts separated by dots, or double-quoted parts)"
    )]
    Column(String),
    /// A first placeholder number of 0.
    #[error("placeholders are numbered from $1")]
    Placeholder,
}

/// The buckets `0..count` a lease, a part or a change holds, sorted: the
/// push-down form of a task set (see the [module docs](self) for what it
/// guarantees under each mapping).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Buckets {
    count: u32,
    owned: Vec<u32>,
}

impl Buckets {
    /// A set from its parts: the bucket count and the held buckets (sorted
    /// and deduplicated here), each below the count. For sets a program
    /// received from elsewhere (a file `lease run` wrote); a lease computes
    /// its own with [`crate::Lease::buckets`].
    pub fn from_owned(count: u32, mut owned: Vec<u32>) -> Result<Self, PushdownError> {
        check_count(count)?;
        owned.sort_unstable();
        owned.dedup();
        if let Some(&bucket) = owned.iter().find(|&&b| b >= count) {
            return Err(PushdownError::Bucket { bucket, count });
        }
        Ok(Self { count, owned })
    }

    /// The bucket count `B`.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// The held buckets, ascending.
    pub fn owned(&self) -> &[u32] {
        &self.owned
    }

    /// How many buckets are held.
    pub fn len(&self) -> usize {
        self.owned.len()
    }

    /// Whether no bucket is held.
    pub fn is_empty(&self) -> bool {
        self.owned.is_empty()
    }

    /// Whether bucket `bucket` is held.
    pub fn contains(&self, bucket: u32) -> bool {
        self.owned.binary_search(&bucket).is_ok()
    }

    /// Whether task `id`'s bucket, `id % B`, is held: the check a worker
    /// that filters by buckets makes, the same on every worker.
    pub fn contains_task(&self, id: u64) -> bool {
        let bucket = id % u64::from(self.count);
        // bucket < count <= u32::MAX.
        u32::try_from(bucket).is_ok_and(|b| self.contains(b))
    }

    /// The share of the buckets held, in `[0, 1]`: the share of the tasks
    /// when the ids are spread evenly over the buckets.
    pub fn share(&self) -> f64 {
        self.owned.len() as f64 / f64::from(self.count)
    }

    /// The buckets held here and not in `other` (which should have the same
    /// count; a bucket beyond `other`'s count is not in `other`).
    pub fn minus(&self, other: &Buckets) -> Buckets {
        Buckets {
            count: self.count,
            owned: self
                .owned
                .iter()
                .copied()
                .filter(|&b| !other.contains(b))
                .collect(),
        }
    }

    /// The set as a PostgreSQL condition on the integer column `column`
    /// with two bound parameters, numbered from `$first`:
    /// `((column)::bigint % $first::bigint) = ANY($first+1::bigint[])`,
    /// with [`Predicate::count`] and [`Predicate::buckets`] as their
    /// values (`i64` and `i64[]`, what tokio-postgres, node-postgres and
    /// libpq bind as `bigint` and `bigint[]`).
    ///
    /// The casts let the column be `smallint`, `integer` or `bigint`; ids
    /// must not be negative (PostgreSQL's `%` keeps the dividend's sign, so
    /// a negative id is in no bucket and is never selected). The column is
    /// written into the text, so it must be an identifier (`id`,
    /// `jobs.id`, `"Jobs"."Id"`); anything else is refused. An empty set
    /// gives a condition that holds for no row.
    pub fn postgres(&self, column: &str, first: usize) -> Result<Predicate, PushdownError> {
        check_column(column)?;
        if first == 0 {
            return Err(PushdownError::Placeholder);
        }
        let mut sql = String::new();
        let _ = write!(
            sql,
            "(({column})::bigint % ${first}::bigint) = ANY(${}::bigint[])",
            first + 1
        );
        Ok(Predicate {
            sql,
            count: i64::from(self.count),
            buckets: self.owned.iter().map(|&b| i64::from(b)).collect(),
        })
    }
}

/// A PostgreSQL condition and the values of its two placeholders
/// ([`Buckets::postgres`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Predicate {
    sql: String,
    count: i64,
    buckets: Vec<i64>,
}

impl Predicate {
    /// The condition, to put in a `WHERE` clause (in parentheses it is
    /// safe to combine with `AND` / `OR`).
    pub fn sql(&self) -> &str {
        &self.sql
    }

    /// The first parameter's value: the bucket count.
    pub fn count(&self) -> i64 {
        self.count
    }

    /// The second parameter's value: the held buckets.
    pub fn buckets(&self) -> &[i64] {
        &self.buckets
    }
}

fn check_count(count: u32) -> Result<(), PushdownError> {
    if count == 0 || count > MAX_BUCKETS {
        return Err(PushdownError::BucketCount(count));
    }
    Ok(())
}

/// Accepts `part(.part)*` where a part is an unquoted identifier
/// (`[A-Za-z_][A-Za-z0-9_$]*`) or a double-quoted one (`""` for a quote
/// inside, no NUL).
fn check_column(column: &str) -> Result<(), PushdownError> {
    let bad = || PushdownError::Column(column.to_owned());
    let mut chars = column.chars().peekable();
    loop {
        match chars.next() {
            Some('"') => {
                let mut empty = true;
                loop {
                    match chars.next() {
                        Some('"') if chars.peek() == Some(&'"') => {
                            chars.next();
                            empty = false;
                        }
                        Some('"') => break,
                        Some('\0') | None => return Err(bad()),
                        Some(_) => empty = false,
                    }
                }
                if empty {
                    return Err(bad());
                }
            }
            Some(c) if c.is_ascii_alphabetic() || c == '_' => {
                while chars
                    .peek()
                    .is_some_and(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '$')
                {
                    chars.next();
                }
            }
            _ => return Err(bad()),
        }
        match chars.next() {
            None => return Ok(()),
            Some('.') => {}
            Some(_) => return Err(bad()),
        }
    }
}

/// The buckets `0..count` held by the union of `parts` under `mapping`
/// (see the module docs for the rule of each mapping).
pub(crate) fn held(mapping: Mapping, parts: &[Part], count: u32) -> Result<Buckets, PushdownError> {
    check_count(count)?;
    let covered = |id: u64| parts.iter().any(|p| p.contains(mapping, id));
    let owned = match mapping {
        Mapping::Consistent => (0..count).filter(|&b| covered(u64::from(b))).collect(),
        Mapping::Modulo => modulo_whole_buckets(parts, count, covered),
    };
    Ok(Buckets { count, owned })
}

/// Under modulo, membership of an id in any part depends only on the id
/// modulo `M`, the least common multiple of the parts' group sizes. The ids
/// of bucket `b` are `b + kB`; modulo `M` they are exactly the residues `r`
/// with `r ≡ b (mod g)`, `g = gcd(M, B)`. So bucket `b` is whole in the
/// holding when every such residue is held, which depends on `b mod g`
/// alone: `M` membership tests in all, whatever `B`.
fn modulo_whole_buckets(parts: &[Part], count: u32, covered: impl Fn(u64) -> bool) -> Vec<u32> {
    let b = u64::from(count);
    let mut m: u64 = 1;
    for part in parts {
        let [_, n, _, pn] = part.describe();
        for size in [n, pn] {
            m = lcm(m, u64::from(size)).min(MAX_MODULO_PERIOD + 1);
        }
    }
    if m > MAX_MODULO_PERIOD {
        // Sound but possibly incomplete: a bucket all of whose ids one part
        // holds (both of its sizes divide B, and the bucket is in both of
        // its residues).
        return (0..count)
            .filter(|&bucket| {
                parts.iter().any(|p| {
                    let [i, n, pi, pn] = p.describe();
                    count.is_multiple_of(n)
                        && count.is_multiple_of(pn)
                        && bucket % n == i
                        && bucket % pn == pi
                })
            })
            .collect();
    }
    let g = gcd(m, b);
    let whole: Vec<bool> = (0..g)
        .map(|class| (class..m).step_by(g as usize).all(&covered))
        .collect();
    (0..count)
        .filter(|&bucket| whole[(u64::from(bucket) % g) as usize])
        .collect()
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a.max(1)
}

fn lcm(a: u64, b: u64) -> u64 {
    (a / gcd(a, b)).saturating_mul(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ownership::Pair;

    fn part(i: u32, n: u32, pi: u32, pn: u32) -> Part {
        Part::new(Pair::new(i, n).unwrap(), Pair::new(pi, pn).unwrap())
    }

    fn whole(i: u32, n: u32) -> Part {
        part(i, n, i, n)
    }

    /// Under jump hash the held buckets are exactly the bucket numbers the
    /// parts cover as ids, and the workers of a group hold every bucket
    /// exactly once.
    #[test]
    fn consistent_buckets_are_the_bucket_numbers_covered_and_partition_the_group() {
        let m = Mapping::Consistent;
        for n in 1..=9 {
            let mut seen = vec![0u8; 1024];
            for i in 0..n {
                let set = held(m, &[whole(i, n)], 1024).unwrap();
                for &b in set.owned() {
                    assert_eq!(m.owner(u64::from(b), n), i);
                    seen[b as usize] += 1;
                }
                for t in 0..5000u64 {
                    assert_eq!(set.contains_task(t), m.owner(t % 1024, n) == i);
                }
            }
            assert!(seen.iter().all(|&c| c == 1), "n = {n}");
        }
        // A handover holding: the union of its parts.
        let parts = [whole(1, 3), part(1, 4, 1, 3)];
        let set = held(m, &parts, 512).unwrap();
        let expected: Vec<u32> = (0..512)
            .filter(|&b| parts.iter().any(|p| p.contains(m, u64::from(b))))
            .collect();
        assert_eq!(set.owned(), expected);
    }

    /// Under modulo a held bucket has every one of its ids in the holding
    /// (checked over 0..20 B), and the buckets are all of the holding's
    /// ids exactly when every group size divides B.
    #[test]
    fn modulo_buckets_hold_every_id_in_them_and_all_ids_when_n_divides_b() {
        let m = Mapping::Modulo;
        let holdings: Vec<Vec<Part>> = vec![
            vec![whole(1, 4)],
            vec![whole(2, 3)],
            vec![part(1, 2, 0, 3), part(1, 2, 1, 3), part(1, 2, 2, 3)],
            vec![part(0, 4, 0, 6), whole(3, 4)],
            vec![part(1, 3, 2, 5)],
        ];
        for parts in &holdings {
            for count in [1u32, 2, 4, 6, 8, 12, 30, 60, 64, 7] {
                let set = held(m, parts, count).unwrap();
                let ids = 0..u64::from(count) * 20;
                let in_holding = |id: u64| parts.iter().any(|p| p.contains(m, id));
                for id in ids.clone() {
                    if set.contains_task(id) {
                        assert!(in_holding(id), "{parts:?} B={count} id={id}");
                    }
                }
                // Every bucket all of whose ids (over 20 periods of the
                // largest lcm here, 60) are held is listed.
                for b in 0..count {
                    let all = (0..60u64).all(|k| in_holding(u64::from(b) + k * u64::from(count)));
                    assert_eq!(set.contains(b), all, "{parts:?} B={count} b={b}");
                }
                let divides = parts.iter().all(|p| {
                    let [_, n, _, pn] = p.describe();
                    count.is_multiple_of(n) && count.is_multiple_of(pn)
                });
                if divides {
                    for id in ids {
                        assert_eq!(set.contains_task(id), in_holding(id));
                    }
                }
            }
        }
        // Three parts of sizes 2 and 3 whose union is T(1, 2): the union is
        // whole in bucket 1 of B = 2 though no single part is.
        assert_eq!(held(m, &holdings[2], 2).unwrap().owned(), [1]);
        // n = 3 does not divide 8: no bucket of 8 is whole in T(2, 3).
        assert!(held(m, &[whole(2, 3)], 8).unwrap().is_empty());
    }

    #[test]
    fn sets_and_predicates_refuse_bad_input() {
        assert_eq!(
            held(Mapping::Consistent, &[], 0),
            Err(PushdownError::BucketCount(0))
        );
        assert_eq!(
            Buckets::from_owned(MAX_BUCKETS + 1, vec![]),
            Err(PushdownError::BucketCount(MAX_BUCKETS + 1))
        );
        assert_eq!(
            Buckets::from_owned(4, vec![1, 4]),
            Err(PushdownError::Bucket {
                bucket: 4,
                count: 4
            })
        );
        let set = Buckets::from_owned(4, vec![3, 1, 3]).unwrap();
        assert_eq!(set.owned(), [1, 3]);
        assert_eq!(set.share(), 0.5);
        for ok in [
            "id",
            "jobs.id",
            "\"Jobs\".\"Id\"",
            "s.t.c",
            "_x$1",
            "\"a\"\"b\"",
        ] {
            assert!(set.postgres(ok, 1).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "id)",
            "id; drop table jobs",
            "1id",
            "a..b",
            "a.",
            "\"\"",
            "\"open",
            "id % 2",
            "\"a\0\"",
        ] {
            assert_eq!(
                set.postgres(bad, 1),
                Err(PushdownError::Column(bad.to_owned())),
                "{bad:?}"
            );
        }
        assert_eq!(set.postgres("id", 0), Err(PushdownError::Placeholder));
        let p = set.postgres("id", 3).unwrap();
        assert_eq!(p.sql(), "((id)::bigint % $3::bigint) = ANY($4::bigint[])");
        assert_eq!(p.buckets(), [1, 3]);
        let none = Buckets::from_owned(4, vec![]).unwrap();
        assert!(none.is_empty() && none.postgres("id", 1).unwrap().buckets().is_empty());
        assert_eq!(
            set.minus(&Buckets::from_owned(4, vec![1]).unwrap()).owned(),
            [3]
        );
    }

    /// A large lcm falls back to whole buckets of single parts, which are
    /// still whole.
    #[test]
    fn a_large_modulo_period_falls_back_to_single_parts() {
        let m = Mapping::Modulo;
        let parts = [part(5, 2003, 7, 2011), whole(3, 4)];
        let set = held(m, &parts, 64).unwrap();
        assert_eq!(
            set.owned(),
            (0..64).filter(|b| b % 4 == 3).collect::<Vec<_>>()
        );
    }
}
