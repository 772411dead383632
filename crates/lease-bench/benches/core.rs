//! Time per call of each `handle_*` input (and the `poll_*` outputs) of the
//! core's state machine, on a worker of a settled group driven by hand
//! ([`lease_bench::steady`]). Each measurement times only the call named;
//! the rest of the registration around it runs untimed, so every sample is
//! taken in steady state. `clock overhead` is the cost of the two
//! `Instant::now()` around each timed call, included in every figure.
//!
//! `cargo bench -p lease-bench --bench core`

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use lease_bench::steady::{EXEC, RTT, Sent, Steady};
use lease_core::{Mode, Reply};

const L: Duration = Duration::from_millis(100);

fn steady(mode: Mode) -> Steady {
    let mut s = Steady::new(mode, L, 2, 5);
    for _ in 0..100 {
        s.register();
    }
    s
}

/// Times `f` alone, `iters` times, each inside one steady-state registration.
fn timed(s: &mut Steady, iters: u64, mut f: impl FnMut(&mut Steady, &mut Duration)) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        f(s, &mut total);
    }
    total
}

fn measure<T>(total: &mut Duration, f: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let out = black_box(f());
    *total += start.elapsed();
    out
}

/// Answers `sent` promptly, untimed.
fn answer(s: &mut Steady, sent: &Sent, reply: &mut Vec<i64>) {
    s.reply_into(sent, sent.at + EXEC, reply);
    s.worker
        .handle_reply(sent.at + RTT, sent.id, reply)
        .expect("well-formed");
    s.drain();
}

fn bench_worker(c: &mut Criterion) {
    let mut g = c.benchmark_group("worker");
    g.bench_function("clock overhead", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                measure(&mut total, || ());
            }
            total
        });
    });
    for mode in [Mode::Ranked, Mode::Arrival] {
        let mut reply = Vec::with_capacity(8);
        g.bench_function(format!("handle_timeout, registration due ({mode})"), |b| {
            let mut s = steady(mode);
            b.iter_custom(|iters| {
                timed(&mut s, iters, |s, total| {
                    let at = s.worker.poll_timeout().expect("a timer");
                    measure(total, || s.worker.handle_timeout(at));
                    let sent = s.take(at).expect("a registration");
                    answer(s, &sent, &mut reply);
                })
            });
        });
        g.bench_function(format!("handle_reply, renewal ({mode})"), |b| {
            let mut s = steady(mode);
            b.iter_custom(|iters| {
                timed(&mut s, iters, |s, total| {
                    let sent = s.fire();
                    s.reply_into(&sent, sent.at + EXEC, &mut reply);
                    measure(total, || {
                        s.worker.handle_reply(sent.at + RTT, sent.id, &reply)
                    })
                    .expect("well-formed");
                    s.drain();
                })
            });
        });
        g.bench_function(format!("handle_failure, retry scheduled ({mode})"), |b| {
            let mut s = steady(mode);
            b.iter_custom(|iters| {
                timed(&mut s, iters, |s, total| {
                    let sent = s.fire();
                    let at = sent.at + RTT;
                    measure(total, || {
                        s.worker.handle_failure(at, sent.id, &"connection reset")
                    });
                    // The retry, answered: the lease is renewed all the same.
                    let retry = s.fire();
                    answer(s, &retry, &mut reply);
                })
            });
        });
    }
    let mut reply = Vec::with_capacity(8);
    g.bench_function("handle_timeout, nothing due (ranked)", |b| {
        let mut s = steady(Mode::Ranked);
        b.iter_custom(|iters| {
            timed(&mut s, iters, |s, total| {
                let sent = s.fire();
                answer(s, &sent, &mut reply);
                let now = s.now();
                measure(total, || s.worker.handle_timeout(now));
            })
        });
    });
    g.bench_function("poll_transmit (ranked)", |b| {
        let mut s = steady(Mode::Ranked);
        b.iter_custom(|iters| {
            timed(&mut s, iters, |s, total| {
                let at = s.worker.poll_timeout().expect("a timer");
                s.worker.handle_timeout(at);
                let id = measure(total, || s.worker.poll_transmit().map(|t| t.id)).expect("due");
                let sent = Sent {
                    id,
                    k: s.server_interval(at),
                    at,
                };
                answer(s, &sent, &mut reply);
            })
        });
    });
    g.bench_function("poll_timeout (ranked)", |b| {
        let mut s = steady(Mode::Ranked);
        b.iter_custom(|iters| {
            timed(&mut s, iters, |s, total| {
                let sent = s.fire();
                answer(s, &sent, &mut reply);
                measure(total, || s.worker.poll_timeout());
            })
        });
    });
    g.bench_function("poll_event, none (ranked)", |b| {
        let mut s = steady(Mode::Ranked);
        b.iter_custom(|iters| {
            timed(&mut s, iters, |s, total| {
                let sent = s.fire();
                answer(s, &sent, &mut reply);
                measure(total, || s.worker.poll_event());
            })
        });
    });
    g.bench_function("handle_cancel, lease held (ranked)", |b| {
        b.iter_batched(
            || {
                let s = Steady::new(Mode::Ranked, L, 2, 5);
                let now = s.now();
                (s, now)
            },
            |(mut s, now)| {
                s.worker.handle_cancel(now);
                s
            },
            BatchSize::SmallInput,
        );
    });
    g.finish();

    c.bench_function("Reply::parse, counted (ranked)", |b| {
        let values = [1, 17_000_001, 1_700_000, 150_100, 2, 5];
        b.iter(|| Reply::parse(Mode::Ranked, 100, black_box(&values)));
    });
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30)
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench_worker
}
criterion_main!(benches);
