//! `discover_with_time`: the worker and its leases run on the clock given,
//! not the system's. First a clock that runs ahead of the system clock by an
//! offset the test steps: a lease answers `is_valid()` on it, so stepping
//! it past the deadline ends the lease at once, on a real Redis. Then
//! tokio's paused clock: lease-smol's workers on the simulated Redis in
//! virtual time.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use lease_smol::{Assignment, Handover, Identity, Options, Time, discover_with_time};
use lease_testkit::RedisServer;

/// The system clock plus an offset (milliseconds) the test sets.
#[derive(Clone, Default)]
struct Ahead(Arc<AtomicU64>);

impl Time for Ahead {
    fn now(&self) -> Instant {
        Instant::now() + Duration::from_millis(self.0.load(Ordering::SeqCst))
    }

    fn sleep_until(&self, at: Instant) -> impl Future<Output = ()> + Send + use<> {
        let ahead = self.0.clone();
        async move {
            // Re-read the offset after each wait, so a step wakes the timer
            // no later than its next check.
            loop {
                let now = Instant::now() + Duration::from_millis(ahead.load(Ordering::SeqCst));
                if now >= at {
                    return;
                }
                smol::Timer::after((at - now).min(Duration::from_millis(20))).await;
            }
        }
    }
}

#[test]
fn leases_answer_on_the_clock_given() {
    let server = RedisServer::start().expect("redis-server (scripts/test.sh installs it)");
    smol::block_on(async {
        let client = redis::Client::open(server.url()).unwrap();
        let redis = client.get_multiplexed_async_connection().await.unwrap();
        let time = Ahead::default();
        let options = Options::new("given-time", Duration::from_millis(200))
            .with_identity(Identity::seeded(1, 0));
        let spawn = |worker| smol::spawn(worker).detach();
        let mut stream = discover_with_time(redis, options, spawn, time.clone()).unwrap();
        let lease = loop {
            match stream.next().await {
                Some(Assignment::Held(lease)) => break lease,
                Some(Assignment::Idle(_)) => continue,
                None => panic!("the stream ended"),
            }
        };
        assert!(lease.is_valid());
        assert!(lease.deadline() > time.now());
        // Ten seconds on the worker's clock, none on the system's: the lease
        // has run out, whatever the system clock says.
        time.0.store(10_000, Ordering::SeqCst);
        assert!(!lease.is_valid());
        assert!(
            lease.is_valid_at(Instant::now()),
            "on the system clock it would still hold"
        );
    });
}

/// tokio's clock and timers, as a [`Time`]: with `discover_with_time` and
/// `tokio::spawn`, lease-smol's worker runs under paused tokio time.
#[derive(Clone, Copy)]
struct TokioTime;

impl Time for TokioTime {
    fn now(&self) -> Instant {
        tokio::time::Instant::now().into_std()
    }

    fn sleep_until(&self, at: Instant) -> impl Future<Output = ()> + Send + use<> {
        tokio::time::sleep_until(at.into())
    }
}

/// Three lease-smol workers on the simulated Redis (`SimConnection`), on
/// paused tokio time through the clock given: 25 virtual seconds with a
/// restart, judged by `lease_history::check`.
#[tokio::test(start_paused = true)]
async fn smol_workers_on_the_simulated_redis_in_virtual_time() {
    use lease_history::{Record, check};
    use lease_sim::{SimRedis, SimRedisConfig};

    let t0 = tokio::time::Instant::now();
    let micros = move |at: Instant| at.saturating_duration_since(t0.into_std()).as_micros() as u64;
    let redis = SimRedis::new(SimRedisConfig::new(5));
    let history = Arc::new(std::sync::Mutex::new(Vec::new()));
    let stop = lease_smol::CancelToken::new();
    let mut loops = Vec::new();
    for w in 0..3u64 {
        let name = format!("w{w}");
        let options = Options::new("smol-sim", Duration::from_millis(500))
            .with_handover(Handover::WholePairs)
            .with_graceful_leave(false)
            .with_cancel(stop.clone())
            .with_identity(Identity::seeded(5, w));
        let spawn = |worker| drop(tokio::spawn(worker));
        let mut stream =
            discover_with_time(redis.connection(&name), options, spawn, TokioTime).unwrap();
        let history = history.clone();
        loops.push(tokio::spawn(async move {
            while let Some(assignment) = stream.next().await {
                let now = micros(TokioTime.now());
                let mut h = history.lock().unwrap();
                match assignment {
                    Assignment::Held(l) => {
                        let p = l.pair().expect("whole pairs");
                        h.push(Record::own(&name, p.i(), p.n(), l.token(), now));
                    }
                    Assignment::Idle(idle) => {
                        if let Some(l) = idle.ended {
                            let p = l.pair().expect("whole pairs");
                            h.push(Record::release(&name, p.i(), p.n(), micros(idle.since)));
                        }
                    }
                }
            }
        }));
    }
    tokio::time::sleep_until(t0 + Duration::from_secs(12)).await;
    redis.restart(Duration::from_millis(500));
    tokio::time::sleep_until(t0 + Duration::from_secs(25)).await;
    stop.cancel();
    for l in loops {
        l.await.unwrap();
    }
    let records = history.lock().unwrap().clone();
    let summary = check(&records, Some(25_000_000));
    assert!(summary.is_ok(), "{summary}");
    assert!(summary.owns >= 6, "{summary}");
    assert!(summary.coverage.fraction() > 0.7, "{summary}");
    assert!(redis.stats().restarts == 1 && redis.stats().executed > 100);
}
