//! `discover_with_time`: the worker and its leases run on the clock given,
//! not the system's. Here a clock that runs ahead of the system clock by an
//! offset the test steps: a lease answers `is_valid()` on it, so stepping
//! it past the deadline ends the lease at once, on a real Redis.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use lease_smol::{Assignment, GroupOptions, Options, Time, Token, discover_with_time};
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
        let options = Options::from(GroupOptions::new("given-time", Duration::from_millis(200)))
            .with_token(Token::seeded(1, 0));
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
