//! The simulated network between workers and the store, and the workers'
//! local clocks.

use std::time::Duration;

use rand::Rng;

/// How requests and replies travel. Every one-way trip takes
/// `latency + U(0, jitter) + Exp(tail_mean)`, plus with probability
/// `spike_probability` an extra `U(0, spike_max)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Network {
    /// Fixed one-way latency.
    pub latency: Duration,
    /// Uniform jitter added to each trip.
    pub jitter: Duration,
    /// Mean of an exponential tail added to each trip (zero for none).
    pub tail_mean: Duration,
    /// Probability that a trip gets a latency spike.
    pub spike_probability: f64,
    /// Largest spike.
    pub spike_max: Duration,
    /// Probability that a request fails at once without executing (a
    /// connection error).
    pub fast_error: f64,
    /// Probability that a request is lost before it reaches the server.
    pub lost_request: f64,
    /// Probability that the server executes a request and the reply is lost.
    pub lost_reply: f64,
    /// Probability that a request is delivered (and executed) twice, as a
    /// client that re-sends after a reconnect would.
    pub duplicate: f64,
}

impl Default for Network {
    /// A quiet local network: 0.2 ms each way, 0.1 ms jitter, no faults.
    fn default() -> Self {
        Self {
            latency: Duration::from_micros(200),
            jitter: Duration::from_micros(100),
            tail_mean: Duration::ZERO,
            spike_probability: 0.0,
            spike_max: Duration::ZERO,
            fast_error: 0.0,
            lost_request: 0.0,
            lost_reply: 0.0,
            duplicate: 0.0,
        }
    }
}

impl Network {
    /// An ideal network: one-way latency 0.2 % of the interval `l`, no faults
    /// (the "ideal" regime of docs/benchmarks.md).
    pub fn ideal(l: Duration) -> Self {
        Self {
            latency: l.mul_f64(0.002),
            jitter: Duration::ZERO,
            ..Self::default()
        }
    }

    /// A lossy network (the figures of docs/benchmarks.md): latency 1 % of `l`, 5 % fast
    /// errors, 2.5 % lost requests, 2.5 % lost replies.
    pub fn lossy(l: Duration) -> Self {
        Self {
            latency: l.mul_f64(0.01),
            jitter: Duration::ZERO,
            fast_error: 0.05,
            lost_request: 0.025,
            lost_reply: 0.025,
            ..Self::default()
        }
    }

    /// Mean round trip about `rtt`: a fixed part of 30 % and an exponential
    /// tail of 70 % each way (the latency model of docs/benchmarks.md).
    pub fn round_trip(rtt: Duration) -> Self {
        let one_way = rtt / 2;
        Self {
            latency: one_way.mul_f64(0.3),
            jitter: Duration::ZERO,
            tail_mean: one_way.mul_f64(0.7),
            ..Self::default()
        }
    }

    /// Jitter `U(0, jitter)` on top of a one-way latency of 0.5 % of `l`.
    pub fn jittery(l: Duration, jitter: Duration) -> Self {
        Self {
            latency: l.mul_f64(0.005),
            jitter,
            ..Self::default()
        }
    }

    /// Draws one one-way trip time in microseconds.
    pub(crate) fn trip(&self, rng: &mut impl Rng) -> u64 {
        let mut us = self.latency.as_micros() as f64;
        let jitter = self.jitter.as_micros() as f64;
        if jitter > 0.0 {
            us += rng.random::<f64>() * jitter;
        }
        let tail = self.tail_mean.as_micros() as f64;
        if tail > 0.0 {
            let u: f64 = rng.random::<f64>();
            us += -tail * (1.0 - u).ln();
        }
        if self.spike_probability > 0.0 && rng.random_bool(self.spike_probability.min(1.0)) {
            us += rng.random::<f64>() * self.spike_max.as_micros() as f64;
        }
        us.max(1.0) as u64
    }
}

/// A worker's local monotonic clock against true (simulated) time:
/// `local = offset + true * (1 + drift)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LocalClock {
    /// Offset in microseconds (any non-negative value: only differences
    /// matter to a monotonic clock, but the skew estimate must cope).
    pub offset_us: u64,
    /// Rate error, e.g. `5e-4` for a clock 0.05 % fast. The core assumes at
    /// most `1e-3`.
    pub drift: f64,
}

impl LocalClock {
    /// Local microseconds at true time `true_us`.
    pub fn local(&self, true_us: u64) -> u64 {
        self.offset_us + (true_us as f64 * (1.0 + self.drift)) as u64
    }

    /// The earliest true time at which the local clock reads at least
    /// `local_us` (the inverse of [`LocalClock::local`], rounded up).
    pub fn true_at_or_after(&self, local_us: u64) -> u64 {
        let since = local_us.saturating_sub(self.offset_us) as f64;
        let mut t = (since / (1.0 + self.drift)).ceil() as u64;
        while self.local(t) < local_us {
            t += 1;
        }
        t
    }

    /// The latest true time at which the local clock still reads below
    /// `local_us`, plus one: the true instant a local deadline falls at.
    pub fn true_of(&self, local_us: u64) -> u64 {
        self.true_at_or_after(local_us)
    }
}
