//! The adapters a chaos run can drive, behind `--adapter`.
//!
//! Every adapter module has one function, `run(spec)`, called on a fresh OS
//! thread: it builds the adapter's own executor on that thread, connects to
//! the worker's proxy link, starts the adapter's pair stream with the
//! worker's cancellation token and hands it to [`crate::worker::drive`].
//! Nothing else in the run knows which adapter it is. Adding one is a module
//! here and a variant of [`AdapterKind`].

mod fred;
mod redis;
mod smol;

use std::io;
use std::thread::JoinHandle;

use crate::worker::WorkerCtx;

/// Which adapter the workers use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum AdapterKind {
    /// `lease-redis`: redis-rs on tokio (a `ConnectionManager`, which
    /// reconnects by itself), one current-thread runtime per worker.
    Redis,
    /// `lease-fred`: fred 10 on tokio (a client that reconnects at once,
    /// forever, and re-sends commands in flight), one current-thread runtime
    /// per worker.
    Fred,
    /// `lease-smol`: redis-rs (`smol-comp`) on smol, the adapter for smol and
    /// async-std users (a `ConnectionManager`), one smol executor per worker.
    Smol,
}

impl AdapterKind {
    /// The name given on the command line.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            AdapterKind::Redis => "redis",
            AdapterKind::Fred => "fred",
            AdapterKind::Smol => "smol",
        }
    }

    /// Starts a worker on its own OS thread.
    pub(crate) fn spawn(self, name: &str, spec: WorkerSpec) -> io::Result<JoinHandle<()>> {
        std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || match self {
                AdapterKind::Redis => redis::run(spec),
                AdapterKind::Fred => fred::run(spec),
                AdapterKind::Smol => smol::run(spec),
            })
    }
}

/// What an adapter needs to start one worker.
pub(crate) struct WorkerSpec {
    /// `redis://127.0.0.1:<port>/` of the worker's proxy link.
    pub(crate) url: String,
    /// The group's options (name, interval, gap, mode).
    pub(crate) options: lease_core::Options,
    /// The loop's context (control, events, sink, cancellation token).
    pub(crate) ctx: WorkerCtx,
}
