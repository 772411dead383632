//! A process-wide `tracing` layer that keeps the `lease` events of the groups
//! a test watches. Runtime-agnostic: events are matched by their `name` field
//! (the group name), not by thread, so workers may run anywhere.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::sync::{Mutex, OnceLock};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt};

/// One captured event.
#[derive(Clone, Debug)]
pub struct Captured {
    /// Its level.
    pub level: Level,
    /// The constant message.
    pub message: String,
    /// Every field but `message`, rendered with `Debug` (strings unquoted).
    pub fields: BTreeMap<String, String>,
}

#[derive(Default)]
struct Store {
    watched: HashSet<String>,
    events: Vec<Captured>,
}

fn store() -> &'static Mutex<Store> {
    static STORE: OnceLock<Mutex<Store>> = OnceLock::new();
    STORE.get_or_init(Mutex::default)
}

fn lock() -> std::sync::MutexGuard<'static, Store> {
    store().lock().unwrap_or_else(|e| e.into_inner())
}

struct CaptureLayer;

#[derive(Default)]
struct Fields(BTreeMap<String, String>);

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

impl<S: Subscriber> Layer<S> for CaptureLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        if event.metadata().target() != lease_core::diag::TARGET {
            return;
        }
        let mut fields = Fields::default();
        event.record(&mut fields);
        let mut fields = fields.0;
        let mut store = lock();
        if !fields
            .get("name")
            .is_some_and(|n| store.watched.contains(n))
        {
            return;
        }
        let message = fields.remove("message").unwrap_or_default();
        store.events.push(Captured {
            level: *event.metadata().level(),
            message,
            fields,
        });
    }
}

/// Installs the capturing subscriber (all levels) as the global default, once
/// per process.
pub fn install() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let subscriber = tracing_subscriber::registry().with(CaptureLayer);
        tracing::subscriber::set_global_default(subscriber)
            .expect("no other global tracing subscriber in the conformance tests");
    });
}

/// Starts keeping the events of group `name`.
pub fn watch(name: &str) {
    install();
    lock().watched.insert(name.to_owned());
}

/// The events of group `name` so far, oldest first.
pub fn events(name: &str) -> Vec<Captured> {
    lock()
        .events
        .iter()
        .filter(|e| e.fields.get("name").map(String::as_str) == Some(name))
        .cloned()
        .collect()
}

/// How many events of group `name` carry `message`.
pub fn count(name: &str, message: &str) -> usize {
    lock()
        .events
        .iter()
        .filter(|e| e.message == message && e.fields.get("name").map(String::as_str) == Some(name))
        .count()
}
