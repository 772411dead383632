//! What a simulated run is configured with, and what can happen in it.

use std::fmt;
use std::time::Duration;

use lease_core::Options;

use crate::net::Network;

/// Identifies a simulated worker; displayed as `w0`, `w1`, ...
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WorkerId(pub usize);

impl fmt::Display for WorkerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "w{}", self.0)
    }
}

/// Clock imperfections drawn for each worker.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Clocks {
    /// Local clock offsets are drawn from `[0, max_offset]`.
    pub max_offset: Duration,
    /// Local clock drift is drawn from `[-max_drift, max_drift]` (the core
    /// assumes at most 1e-3).
    pub max_drift: f64,
}

impl Default for Clocks {
    fn default() -> Self {
        Self {
            max_offset: Duration::from_secs(3600),
            max_drift: 5e-4,
        }
    }
}

/// What a simulation is made of.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Seed of the run's only random generator.
    pub seed: u64,
    /// Options every worker is created with.
    pub options: Options,
    /// The network, until a [`Action::SetNetwork`] changes it.
    pub network: Network,
    /// Workers' clock imperfections.
    pub clocks: Clocks,
}

impl SimConfig {
    /// A quiet simulation of group `options` with seed `seed`.
    pub fn new(seed: u64, options: Options) -> Self {
        Self {
            seed,
            options,
            network: Network::default(),
            clocks: Clocks::default(),
        }
    }
}

/// Something that happens at a scheduled instant.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Action {
    /// Start the worker (reserved by [`Sim::schedule_join`](crate::Sim::schedule_join)).
    Join(WorkerId),
    /// Cancel the worker through its token: it stands down and ends.
    Cancel(WorkerId),
    /// Drop the worker without cancellation: the process is gone.
    Crash(WorkerId),
    /// Freeze the worker's process for a while: no input reaches it, no timer
    /// fires, until it resumes.
    Stall(WorkerId, Duration),
    /// Restart the server without persistence: every key is lost and
    /// requests fail while it is down.
    Restart {
        /// How long the server is unreachable.
        down: Duration,
    },
    /// `CLIENT PAUSE`: requests queue until the pause ends.
    Pause(Duration),
    /// Step the server clock by this many microseconds (negative: back).
    ClockStep(i64),
    /// A failover that loses acknowledged writes in the current and the
    /// previous interval, each with this probability.
    LoseWrites(f64),
    /// Replace the network model.
    SetNetwork(Network),
    /// The worker's next registration meets this mishap, whatever the
    /// network's probabilities (for targeted tests).
    Mishap(WorkerId, Mishap),
}

/// A single, targeted fault on one worker's next registration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mishap {
    /// Fails at once without executing (a connection error).
    FastError,
    /// Lost before reaching the server.
    LoseRequest,
    /// Executed, but the reply is lost.
    LoseReply,
    /// Delivered and executed twice.
    Duplicate,
    /// Held this long on the way to the server, on top of the network's
    /// trip (a request that executes later than its sender expects).
    Delay(Duration),
}

impl Action {
    pub(super) fn fault_kind(&self) -> Option<&'static str> {
        Some(match self {
            Action::Stall(..) => "stall",
            Action::Restart { .. } => "restart",
            Action::Pause(_) => "pause",
            Action::ClockStep(_) => "clock-step",
            Action::LoseWrites(_) => "lose-writes",
            Action::SetNetwork(_) => "network",
            Action::Mishap(..) => "mishap",
            // Leaves and joins have lines of their own.
            Action::Crash(_) | Action::Cancel(_) | Action::Join(_) => return None,
        })
    }
}
