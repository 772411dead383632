//! The cost of a bucket count: for groups of 5 and 16 under the consistent
//! mapping, the smallest and largest share of the buckets a worker holds
//! and the share that moves on a join, for B = 64 to 4096 (the table of
//! docs/operations.md, "Push-down predicates").
//! `cargo run -p lease-core --example bucket_shares`

use lease_core::ownership::Mapping;

fn main() {
    println!(
        "| n | B | smallest share | largest share | ideal 1/n | moved on a join | ideal 1/(n+1) |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for n in [5u32, 16] {
        for b in [64u32, 256, 1024, 4096] {
            let owner = |size: u32| -> Vec<u32> {
                (0..b)
                    .map(|bucket| Mapping::Consistent.owner(u64::from(bucket), size))
                    .collect()
            };
            let (now, grown) = (owner(n), owner(n + 1));
            let shares: Vec<f64> = (0..n)
                .map(|i| now.iter().filter(|&&o| o == i).count() as f64 / f64::from(b))
                .collect();
            let moved =
                now.iter().zip(&grown).filter(|(a, c)| a != c).count() as f64 / f64::from(b);
            let (lo, hi) = shares
                .iter()
                .fold((1.0f64, 0.0f64), |(lo, hi), &s| (lo.min(s), hi.max(s)));
            println!(
                "| {n} | {b} | {lo:.3} | {hi:.3} | {:.3} | {moved:.3} | {:.3} |",
                1.0 / f64::from(n),
                1.0 / f64::from(n + 1)
            );
        }
    }
}
