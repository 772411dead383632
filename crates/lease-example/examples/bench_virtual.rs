//! Benchmark: wall time of 25 virtual seconds of a three-worker group with
//! faults (lossy requests, a crash, a stall, a Redis restart; the scenario
//! of `tests/scenario`), each worker running the example's `work`, in each
//! way the simulated Redis is reached. Not a test: it prints figures.
//!
//! ```text
//! cargo run --release -p lease-example --example bench_virtual [runs]
//! ```

#[path = "../tests/scenario/mod.rs"]
mod scenario;

use std::time::{Duration, Instant};

use scenario::{Client, Loop, paused_runtime, scenario, some_faults, turmoil_scenario};

fn main() {
    let runs: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10);
    println!(
        "| client | runs | checker ok | wall time per 25 virtual s: median | max | last run |"
    );
    println!("|---|---|---|---|---|---|");
    for client in [
        "redis-rs (SimConnection)",
        "fred (fred_mocks)",
        "turmoil (RESP host)",
    ] {
        let mut times: Vec<Duration> = Vec::with_capacity(runs);
        let mut verdict = String::new();
        let mut ok = 0;
        for seed in 0..runs as u64 {
            let started = Instant::now();
            let (_, summary) = match client {
                "redis-rs (SimConnection)" => paused_runtime().block_on(scenario(
                    seed,
                    Loop::Example,
                    Client::RedisRs,
                    some_faults(),
                )),
                "fred (fred_mocks)" => paused_runtime().block_on(scenario(
                    seed,
                    Loop::Example,
                    Client::Fred,
                    some_faults(),
                )),
                _ => turmoil_scenario(seed, Loop::Example, some_faults()),
            };
            times.push(started.elapsed());
            ok += usize::from(summary.is_ok());
            verdict = summary.to_string();
        }
        times.sort();
        let median = times[times.len() / 2];
        let max = times[times.len() - 1];
        println!(
            "| {client} | {runs} | {ok} | {:.1} ms | {:.1} ms | `{verdict}` |",
            median.as_secs_f64() * 1e3,
            max.as_secs_f64() * 1e3
        );
    }
}
