//! The `metrics` feature: what a recorder sees over a grant and an expiry.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures::StreamExt;
use lease_redis::metrics::{
    EXPIRIES, INDEX, IS_OWNER, REFUSALS, REGISTRATION_SECONDS, REPLICAS, STAND_DOWNS,
};
use lease_redis::{Options, discover};
use lease_testkit::{RedisServer, test_interval, unique_name};
use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};

/// One metric's state: a value (counter, gauge) and samples (histogram).
#[derive(Default)]
struct Cell {
    value: Mutex<f64>,
    samples: Mutex<Vec<f64>>,
}

impl CounterFn for Cell {
    fn increment(&self, value: u64) {
        *self.value.lock().unwrap() += value as f64;
    }

    fn absolute(&self, value: u64) {
        let mut v = self.value.lock().unwrap();
        *v = v.max(value as f64);
    }
}

impl GaugeFn for Cell {
    fn increment(&self, value: f64) {
        *self.value.lock().unwrap() += value;
    }

    fn decrement(&self, value: f64) {
        *self.value.lock().unwrap() -= value;
    }

    fn set(&self, value: f64) {
        *self.value.lock().unwrap() = value;
    }
}

impl HistogramFn for Cell {
    fn record(&self, value: f64) {
        self.samples.lock().unwrap().push(value);
    }
}

/// Keeps every metric by (metric name, `name` label).
#[derive(Default)]
struct Store(Mutex<HashMap<(String, String), Arc<Cell>>>);

impl Store {
    fn cell(&self, key: &Key) -> Arc<Cell> {
        let group = key
            .labels()
            .find(|l| l.key() == "name")
            .map(|l| l.value().to_owned())
            .unwrap_or_default();
        let mut map = self.0.lock().unwrap();
        map.entry((key.name().to_owned(), group))
            .or_default()
            .clone()
    }

    fn value(&self, metric: &str, group: &str) -> f64 {
        let map = self.0.lock().unwrap();
        map.get(&(metric.to_owned(), group.to_owned()))
            .map_or(f64::NAN, |c| *c.value.lock().unwrap())
    }

    fn samples(&self, metric: &str, group: &str) -> usize {
        let map = self.0.lock().unwrap();
        map.get(&(metric.to_owned(), group.to_owned()))
            .map_or(0, |c| c.samples.lock().unwrap().len())
    }
}

struct TestRecorder(&'static Store);

impl Recorder for TestRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.0.cell(key))
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.0.cell(key))
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(self.0.cell(key))
    }
}

fn store() -> &'static Store {
    static STORE: OnceLock<&'static Store> = OnceLock::new();
    STORE.get_or_init(|| {
        let store: &'static Store = Box::leak(Box::default());
        metrics::set_global_recorder(TestRecorder(store)).expect("one recorder");
        store
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owner_gauges_expiries_and_latency_are_recorded() {
    let metrics = store();
    let l = test_interval();
    let mut server = RedisServer::start().expect("redis-server");
    let client = redis::Client::open(server.url()).expect("url");
    let conn = client.get_connection_manager().await.expect("connection");
    let name = unique_name("metrics");
    let mut pairs = discover(conn, Options::new(&name, l)).expect("options");
    let next = async |pairs: &mut lease_redis::Discover| {
        tokio::time::timeout(l * 14, pairs.next())
            .await
            .expect("a pair in time")
            .expect("the stream goes on")
    };

    assert!(next(&mut pairs).await.is_idle(), "the opening idle value");
    let lease = next(&mut pairs).await.into_lease().expect("a lease");
    assert_eq!(metrics.value(IS_OWNER, &name), 1.0);
    assert_eq!(
        metrics.value(INDEX, &name),
        f64::from(lease.pair().expect("a lone worker holds (0, 1)").i())
    );
    assert_eq!(metrics.value(REPLICAS, &name), 1.0);
    assert!(metrics.samples(REGISTRATION_SECONDS, &name) >= 3);
    assert_eq!(metrics.value(STAND_DOWNS, &name), 0.0);

    // Longer than a lease lasts: it expires.
    server.pause(l * 4).expect("pause");
    assert!(next(&mut pairs).await.is_idle(), "idle after the expiry");
    assert_eq!(metrics.value(IS_OWNER, &name), 0.0);
    assert_eq!(metrics.value(INDEX, &name), -1.0);
    assert_eq!(metrics.value(REPLICAS, &name), -1.0);
    assert_eq!(metrics.value(STAND_DOWNS, &name), 1.0);
    assert_eq!(metrics.value(EXPIRIES, &name), 1.0);

    // Back after the pause, then dropped: not an owner any more.
    assert!(!next(&mut pairs).await.is_idle(), "a lease after the pause");
    assert_eq!(metrics.value(IS_OWNER, &name), 1.0);
    drop(pairs);
    // The worker's task is aborted on drop, asynchronously.
    for _ in 0..100 {
        if metrics.value(IS_OWNER, &name) == 0.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(metrics.value(IS_OWNER, &name), 0.0);
    assert_eq!(metrics.value(EXPIRIES, &name), 1.0);
}

/// A worker whose rules differ from the group's recorded ones counts one
/// refusal (not one per refused registration) and holds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_is_counted_once() {
    let metrics = store();
    let l = test_interval();
    let server = RedisServer::start().expect("redis-server");
    let client = redis::Client::open(server.url()).expect("url");
    let conn = client.get_connection_manager().await.expect("connection");
    let name = unique_name("refusals");
    let group = discover(conn.clone(), Options::new(&name, l)).expect("options");
    tokio::time::sleep(l * 2).await;
    let mut other = discover(conn, Options::new(&name, l * 2)).expect("options");
    let first = tokio::time::timeout(l * 4, other.next())
        .await
        .expect("in time");
    assert!(first.is_some_and(|a| a.is_idle()), "the opening idle value");
    let refused = tokio::time::timeout(l * 8, other.next())
        .await
        .expect("in time")
        .expect("the stream goes on");
    assert!(
        matches!(&refused, lease_redis::Assignment::Idle(i)
            if matches!(i.reason, lease_redis::IdleReason::Refused(_))),
        "{refused:?}"
    );
    // Several more refused registrations (one every 2 L): still one refusal.
    tokio::time::sleep(l * 8).await;
    assert_eq!(metrics.value(REFUSALS, &name), 1.0);
    drop(group);
}
