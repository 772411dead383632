//! A simulated Redis server for the real clients: one [`SimStore`] with the
//! semantics of lease's three scripts (both registration scripts and the
//! leave script, rule 16) behind a command interpreter (`EVALSHA`, `EVAL`,
//! `SCRIPT LOAD`, `PING`), on tokio's clock, with scripted faults.
//!
//! [`SimRedis`] is the server; each client feature adds its own connection
//! type on top of it (`redis-rs`: [`SimConnection`](crate::SimConnection)).
//! Every connection of one [`SimRedis`] shares its key space, its script
//! cache, its clock and its faults.
//!
//! # Time
//!
//! The server's clock (what the scripts read with `TIME`) follows tokio's
//! clock, so paused time (`#[tokio::test(start_paused = true)]`) drives it:
//! it starts at [`SimRedisConfig::epoch_us`] when the server is created and
//! advances with `tokio::time::Instant`, plus the sum of the clock steps
//! ([`SimRedis::step_clock`]). Latency, pauses, stalls and restarts are
//! tokio timers, so a run under paused time takes no wall time waiting.
//!
//! # Faults
//!
//! Per request, drawn from a seeded generator in the order requests arrive
//! ([`RedisFaults`]): latency with jitter, a lost request (never executed,
//! never answered), a lost reply (executed, never answered), a duplicate
//! (executed twice). Scripted by the test: [`SimRedis::pause`] (requests wait
//! until the pause ends), [`SimRedis::stall`] (one connection's requests
//! wait), [`SimRedis::restart`] (the key space and the script cache are
//! flushed; requests fail with "connection refused" while it is down, as a
//! reconnecting client sees it), [`SimRedis::step_clock`].

// With the `tokio` feature alone, no client reaches the interpreter yet.
#![cfg_attr(not(any(feature = "redis-rs", feature = "fred")), allow(dead_code))]

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use lease_core::{Mode, Script};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio::time::Instant;

use crate::store::{SimStore, StoreError};

/// Per-request faults of a [`SimRedis`], drawn from its seeded generator.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RedisFaults {
    /// One-way latency of each request and of each reply.
    pub latency: Duration,
    /// Uniform extra latency in `[0, jitter)`, drawn for each direction.
    pub jitter: Duration,
    /// Probability that a request is lost: never executed, never answered.
    pub lose_requests: f64,
    /// Probability that a reply is lost: the command runs, no answer comes.
    pub lose_replies: f64,
    /// Probability that a request is duplicated: the command runs twice.
    pub duplicates: f64,
}

impl RedisFaults {
    /// No loss and a fixed one-way `latency`.
    pub fn latency(latency: Duration) -> Self {
        Self {
            latency,
            ..Self::default()
        }
    }
}

/// The configuration of a [`SimRedis`].
#[derive(Clone, Debug, PartialEq)]
pub struct SimRedisConfig {
    /// Seeds the generator that draws each request's faults.
    pub seed: u64,
    /// The server's clock when it is created, in microseconds since the Unix
    /// epoch (default: 2026-01-01T00:00:00Z).
    pub epoch_us: i64,
    /// The per-request faults, until [`SimRedis::set_faults`] changes them.
    pub faults: RedisFaults,
}

impl SimRedisConfig {
    /// A server with `seed`, a fixed epoch and no faults.
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            epoch_us: 1_767_225_600_000_000,
            faults: RedisFaults::default(),
        }
    }

    /// With these per-request faults.
    pub fn with_faults(mut self, faults: RedisFaults) -> Self {
        self.faults = faults;
        self
    }
}

/// What the server counted so far ([`SimRedis::stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// Requests received.
    pub requests: u64,
    /// Scripts executed, registrations and leave requests (a duplicate
    /// counts twice).
    pub executed: u64,
    /// Requests lost before execution.
    pub lost_requests: u64,
    /// Replies lost after execution.
    pub lost_replies: u64,
    /// Requests executed twice.
    pub duplicates: u64,
    /// Requests refused because the server was down.
    pub refused: u64,
    /// `NOSCRIPT` answers.
    pub noscript: u64,
    /// Restarts.
    pub restarts: u64,
}

/// A reply, before a client library's own types.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Reply {
    /// An array of integers (the scripts' reply).
    Integers(Vec<i64>),
    /// A bulk string (`SCRIPT LOAD`'s digest).
    Bulk(String),
    /// A simple string (`PONG`, `OK`).
    Simple(&'static str),
    /// An error reply: its code (`ERR`, `NOSCRIPT`, `WRONGTYPE`) and message.
    Error(&'static str, String),
}

/// The request was refused at the connection: the server is down.
#[cfg(feature = "redis-rs")]
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("connection refused (the simulated Redis is restarting)")]
pub(crate) struct Down;

/// Why a request answered at once ([`SimRedis::request_now`]) got no reply
/// as Redis would have given it.
#[cfg(any(feature = "redis-rs", feature = "fred"))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unanswered {
    /// The server is down (restarting).
    Down,
    /// The request or its reply was lost (the command may have run).
    Lost,
    /// The server is paused or the connection stalled: it would have waited
    /// (only for answers given at once).
    #[cfg_attr(not(feature = "fred"), allow(dead_code))]
    Held,
}

/// What becomes of one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    Deliver,
    LoseRequest,
    LoseReply,
    Duplicate,
}

#[derive(Debug)]
struct Server {
    store: SimStore,
    scripts: HashSet<String>,
    origin: Instant,
    epoch_us: i64,
    offset_us: i64,
    faults: RedisFaults,
    rng: ChaCha8Rng,
    paused_until: Option<Instant>,
    down_until: Option<Instant>,
    stalled: HashMap<String, Instant>,
    stats: ServerStats,
}

impl Server {
    fn now_us(&self) -> i64 {
        let elapsed = Instant::now().saturating_duration_since(self.origin);
        let elapsed = i64::try_from(elapsed.as_micros()).unwrap_or(i64::MAX / 4);
        self.epoch_us + elapsed + self.offset_us
    }

    fn delay(&mut self) -> Duration {
        let jitter = self.faults.jitter;
        let extra = if jitter.is_zero() {
            Duration::ZERO
        } else {
            let nanos = u64::try_from(jitter.as_nanos()).unwrap_or(u64::MAX);
            Duration::from_nanos(self.rng.random_range(0..nanos))
        };
        self.faults.latency + extra
    }

    fn draw(&mut self) -> (Fate, Duration, Duration) {
        self.stats.requests += 1;
        let f = self.faults.clone();
        let mut chance = |p: f64| p > 0.0 && self.rng.random_bool(p.min(1.0));
        let fate = if chance(f.lose_requests) {
            Fate::LoseRequest
        } else if chance(f.lose_replies) {
            Fate::LoseReply
        } else if chance(f.duplicates) {
            Fate::Duplicate
        } else {
            Fate::Deliver
        };
        let there = self.delay();
        let back = self.delay();
        (fate, there, back)
    }

    /// The instant until which requests of `conn` must wait, if later than
    /// now.
    fn held_until(&self, conn: &str) -> Option<Instant> {
        let now = Instant::now();
        [self.paused_until, self.stalled.get(conn).copied()]
            .into_iter()
            .flatten()
            .filter(|&t| t > now)
            .max()
    }

    fn execute(&mut self, args: &[Vec<u8>]) -> Reply {
        let Some(verb) = args.first() else {
            return err("ERR", "empty command".into());
        };
        match verb.to_ascii_uppercase().as_slice() {
            b"PING" => Reply::Simple("PONG"),
            // What clients send when they connect (redis-rs: `CLIENT
            // SETINFO`), answered as Redis does.
            b"CLIENT" | b"SELECT" => Reply::Simple("OK"),
            b"SCRIPT" => self.script(&args[1..]),
            b"EVALSHA" => {
                let Some(sha) = args.get(1) else {
                    return arity("evalsha");
                };
                let sha = String::from_utf8_lossy(sha).to_ascii_lowercase();
                let script = scripts().find(|s| s.sha1() == sha);
                match script {
                    Some(script) if self.scripts.contains(&sha) => self.run(script, &args[2..]),
                    _ => {
                        self.stats.noscript += 1;
                        err("NOSCRIPT", "No matching script. Please use EVAL.".into())
                    }
                }
            }
            b"EVAL" => {
                let Some(source) = args.get(1) else {
                    return arity("eval");
                };
                match known_script(source) {
                    Some(script) => {
                        self.scripts.insert(script.sha1().to_owned());
                        self.run(script, &args[2..])
                    }
                    None => unknown_script(),
                }
            }
            other => err(
                "ERR",
                format!(
                    "unknown command '{}' (the simulated Redis runs lease's scripts only)",
                    String::from_utf8_lossy(other)
                ),
            ),
        }
    }

    fn script(&mut self, args: &[Vec<u8>]) -> Reply {
        match args {
            [sub, source] if sub.eq_ignore_ascii_case(b"LOAD") => match known_script(source) {
                Some(script) => {
                    self.scripts.insert(script.sha1().to_owned());
                    Reply::Bulk(script.sha1().to_owned())
                }
                None => unknown_script(),
            },
            [sub] if sub.eq_ignore_ascii_case(b"FLUSH") => {
                self.scripts.clear();
                Reply::Simple("OK")
            }
            _ => err("ERR", "unknown SCRIPT subcommand or wrong arguments".into()),
        }
    }

    /// `numkeys k1 .. kn args..` of one of lease's scripts: a registration
    /// script or the leave script (rules 16 and 19). Seven keys are what
    /// the workers send ([`lease_core::KEY_COUNT`]); Arrival reads three,
    /// and a Ranked registration or a leave with fewer fails, as the
    /// scripts do.
    fn run(&mut self, script: &Script, rest: &[Vec<u8>]) -> Reply {
        let Some(numkeys) = rest.first() else {
            return arity("eval");
        };
        let Some(n) = std::str::from_utf8(numkeys)
            .ok()
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|&n| (3..=lease_core::KEY_COUNT).contains(&n))
        else {
            return err(
                "ERR",
                format!("lease's scripts take 3 to {} keys", lease_core::KEY_COUNT),
            );
        };
        if rest.len() < n + 1 {
            return err(
                "ERR",
                "Number of keys can't be greater than number of args".into(),
            );
        }
        let mut text = Vec::with_capacity(rest.len() - 1);
        for arg in &rest[1..] {
            match std::str::from_utf8(arg) {
                Ok(s) => text.push(s.to_owned()),
                Err(_) => return err("ERR", "an argument is not UTF-8".into()),
            }
        }
        let keys: Vec<&str> = text[..n].iter().map(String::as_str).collect();
        let args = &text[n..];
        let now_us = self.now_us();
        self.stats.executed += 1;
        let executed = if script.is_leave() {
            self.store.execute_leave(now_us, &keys, args)
        } else {
            self.store.execute(script.mode(), now_us, &keys, args)
        };
        match executed {
            Ok(values) => Reply::Integers(values),
            Err(e @ StoreError::WrongType) => {
                let text = e.to_string();
                let message = text.trim_start_matches("WRONGTYPE ").to_owned();
                err("WRONGTYPE", message)
            }
            Err(e) => {
                let text = e.to_string();
                err("ERR", text.trim_start_matches("ERR ").to_owned())
            }
        }
    }
}

fn err(code: &'static str, message: String) -> Reply {
    Reply::Error(code, message)
}

fn arity(command: &str) -> Reply {
    err(
        "ERR",
        format!("wrong number of arguments for '{command}' command"),
    )
}

fn unknown_script() -> Reply {
    err(
        "ERR",
        "unknown script (the simulated Redis runs lease's scripts only)".into(),
    )
}

/// Every script the simulated server runs: both registration scripts and
/// the leave script.
fn scripts() -> impl Iterator<Item = &'static Script> {
    [
        Script::for_mode(Mode::Ranked),
        Script::for_mode(Mode::Arrival),
        Script::leave(),
    ]
    .into_iter()
}

fn known_script(source: &[u8]) -> Option<&'static Script> {
    scripts().find(|s| s.source().as_bytes() == source)
}

/// A simulated Redis server shared by any number of connections: see the
/// [module docs](self). Cloning is cheap; clones are the same server.
///
/// Create it inside the tokio runtime whose clock it follows.
#[derive(Clone, Debug)]
pub struct SimRedis(Arc<Mutex<Server>>);

impl SimRedis {
    /// A server with `config`, started now on tokio's clock: create it inside
    /// the runtime whose clock it is to follow (outside any runtime, tokio's
    /// clock is the system's).
    pub fn new(config: SimRedisConfig) -> Self {
        Self(Arc::new(Mutex::new(Server {
            store: SimStore::new(),
            scripts: HashSet::new(),
            origin: Instant::now(),
            epoch_us: config.epoch_us,
            offset_us: 0,
            faults: config.faults,
            rng: ChaCha8Rng::seed_from_u64(config.seed),
            paused_until: None,
            down_until: None,
            stalled: HashMap::new(),
            stats: ServerStats::default(),
        })))
    }

    fn lock(&self) -> MutexGuard<'_, Server> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Replaces the per-request faults from now on.
    pub fn set_faults(&self, faults: RedisFaults) {
        self.lock().faults = faults;
    }

    /// The server stops answering for `duration` (a `DEBUG SLEEP`, a long
    /// fork): requests that arrive meanwhile run when it ends.
    pub fn pause(&self, duration: Duration) {
        let until = Instant::now() + duration;
        let mut s = self.lock();
        s.paused_until = Some(s.paused_until.map_or(until, |t| t.max(until)));
    }

    /// Requests of the connection named `connection` wait for `duration`
    /// before they reach the server (that client's network stalls), then
    /// run; other connections are not affected.
    pub fn stall(&self, connection: &str, duration: Duration) {
        let until = Instant::now() + duration;
        let mut s = self.lock();
        let t = s.stalled.entry(connection.to_owned()).or_insert(until);
        *t = (*t).max(until);
    }

    /// A restart without persistence: every key and every loaded script is
    /// gone, and requests that reach the server within `down` are refused
    /// (the client sees "connection refused").
    pub fn restart(&self, down: Duration) {
        let until = Instant::now() + down;
        let mut s = self.lock();
        s.store.flush();
        s.scripts.clear();
        s.down_until = Some(until);
        s.stats.restarts += 1;
    }

    /// Steps the server's clock by `micros` (negative: backwards), as an NTP
    /// step or a failover to a node whose clock differs.
    pub fn step_clock(&self, micros: i64) {
        let mut s = self.lock();
        s.offset_us = s.offset_us.saturating_add(micros);
    }

    /// The server's clock now, in microseconds since the Unix epoch.
    pub fn now_us(&self) -> i64 {
        self.lock().now_us()
    }

    /// What the server counted so far.
    pub fn stats(&self) -> ServerStats {
        self.lock().stats
    }

    /// Reads the key space (to inspect keys in a test).
    pub fn with_store<T>(&self, read: impl FnOnce(&SimStore) -> T) -> T {
        read(&self.lock().store)
    }

    /// One request from the connection named `conn`, through the faults.
    /// Never completes if the request or its reply is lost.
    #[cfg(feature = "redis-rs")]
    pub(crate) async fn request(&self, conn: &str, args: Vec<Vec<u8>>) -> Result<Reply, Down> {
        match self.request_timed(conn, &args).await {
            Ok(reply) => Ok(reply),
            Err(Unanswered::Down) => Err(Down),
            Err(_) => std::future::pending().await,
        }
    }

    /// One request from the connection named `conn`, through the faults,
    /// with latency, pauses and stalls on tokio's timers; a lost request or
    /// reply is `Err(Unanswered::Lost)` (after the latency it would have
    /// had), for the caller to turn into silence or a broken connection.
    #[cfg(feature = "redis-rs")]
    pub(crate) async fn request_timed(
        &self,
        conn: &str,
        args: &[Vec<u8>],
    ) -> Result<Reply, Unanswered> {
        let (fate, there, back) = self.lock().draw();
        tokio::time::sleep(there).await;
        loop {
            let until = self.lock().held_until(conn);
            match until {
                Some(t) => tokio::time::sleep_until(t).await,
                None => break,
            }
        }
        if fate == Fate::LoseRequest {
            self.lock().stats.lost_requests += 1;
            return Err(Unanswered::Lost);
        }
        let reply = {
            let mut s = self.lock();
            if s.down_until.is_some_and(|t| Instant::now() < t) {
                s.stats.refused += 1;
                return Err(Unanswered::Down);
            }
            let reply = s.execute(args);
            if fate == Fate::Duplicate {
                s.stats.duplicates += 1;
                s.execute(args);
            }
            reply
        };
        if fate == Fate::LoseReply {
            self.lock().stats.lost_replies += 1;
            return Err(Unanswered::Lost);
        }
        tokio::time::sleep(back).await;
        Ok(reply)
    }

    /// One request from `conn` answered at once, for clients whose mocking
    /// layer is synchronous (fred's): the faults that need time become
    /// immediate errors ([`Unanswered`]); a duplicate still runs twice.
    #[cfg(feature = "fred")]
    pub(crate) fn request_now(&self, conn: &str, args: &[Vec<u8>]) -> Result<Reply, Unanswered> {
        let mut s = self.lock();
        let (fate, _, _) = s.draw();
        if s.down_until.is_some_and(|t| Instant::now() < t) {
            s.stats.refused += 1;
            return Err(Unanswered::Down);
        }
        if s.held_until(conn).is_some() {
            return Err(Unanswered::Held);
        }
        match fate {
            Fate::LoseRequest => {
                s.stats.lost_requests += 1;
                Err(Unanswered::Lost)
            }
            Fate::LoseReply => {
                s.stats.lost_replies += 1;
                s.execute(args);
                Err(Unanswered::Lost)
            }
            Fate::Duplicate => {
                s.stats.duplicates += 1;
                let reply = s.execute(args);
                s.execute(args);
                Ok(reply)
            }
            Fate::Deliver => Ok(s.execute(args)),
        }
    }
}
