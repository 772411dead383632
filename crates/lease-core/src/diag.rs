//! Diagnostics: the messages of the original n-and-i protocol (the one
//! `Arrival` counting keeps), with its levels and attribute names, as
//! `tracing` events with target `lease` and the group name in field `name`,
//! so that dashboards built on the original's messages keep working.
//!
//! Messages are constants and every value travels in a field, so lines group
//! by message whatever the subscriber does with the rest. Nothing is printed
//! unless the application installs a subscriber, and no field ever carries a
//! Redis URL or password.
//!
//! | level | message | fields |
//! |---|---|---|
//! | error | registration failed | error, attempt, delay |
//! | warn | lease expired | interval, after |
//! | info | discover started | interval, gap, prefix, registry |
//! | info | discover stopped | reason (`abort` or `closed`) |
//! | debug | pair disagreed | i, n, pi, pn |
//! | debug | script loaded | sha |
//! | trace | registration completed | interval, index, replicas, skew |
//! | trace | lease granted | i, n |
//! | trace | lease released | i, n, reason |
//! | trace | pair agreed | i, n |
//! | trace | no pair implied | pi, pn |
//! | trace | next registration scheduled | delay, expires |
//! | trace | pair handed to the loop | i, n |
//!
//! Messages the original protocol does not have:
//!
//! | level | message | fields |
//! |---|---|---|
//! | warn | server clock moved | by, interval |
//! | warn | reply rejected | error |
//! | warn | group rules differ | ours, recorded |
//! | debug | server checked | server, version |
//! | info | server not checked | error |
//! | error | server refused | error |
//!
//! Absent numbers (the idle pair, a missing count) are recorded as `-1`.
//! Durations are recorded in milliseconds as floating-point numbers.

use std::fmt::Display;
use std::time::Duration;

use crate::ownership::Pair;

/// The `tracing` target of every event.
pub const TARGET: &str = "lease";

/// Every message this crate and its adapters emit, in the order of the tables
/// above (the original protocol's 13 first).
pub const MESSAGES: [&str; 20] = [
    REGISTRATION_FAILED,
    LEASE_EXPIRED,
    DISCOVER_STARTED,
    DISCOVER_STOPPED,
    PAIR_DISAGREED,
    SCRIPT_LOADED,
    REGISTRATION_COMPLETED,
    LEASE_GRANTED,
    LEASE_RELEASED,
    PAIR_AGREED,
    NO_PAIR_IMPLIED,
    NEXT_REGISTRATION_SCHEDULED,
    PAIR_HANDED_TO_THE_LOOP,
    SERVER_CLOCK_MOVED,
    REPLY_REJECTED,
    GROUP_RULES_DIFFER,
    MEMBER_IN_USE,
    SERVER_CHECKED,
    SERVER_NOT_CHECKED,
    SERVER_REFUSED,
];

/// error: a registration failed and will be retried.
pub const REGISTRATION_FAILED: &str = "registration failed";
/// warn: no renewal arrived before the lease deadline.
pub const LEASE_EXPIRED: &str = "lease expired";
/// info: a worker started.
pub const DISCOVER_STARTED: &str = "discover started";
/// info: a worker stopped.
pub const DISCOVER_STOPPED: &str = "discover stopped";
/// debug: two consecutive intervals implied different pairs.
pub const PAIR_DISAGREED: &str = "pair disagreed";
/// debug: the script was loaded after `NOSCRIPT`.
pub const SCRIPT_LOADED: &str = "script loaded";
/// trace: a registration was counted.
pub const REGISTRATION_COMPLETED: &str = "registration completed";
/// trace: a lease was granted.
pub const LEASE_GRANTED: &str = "lease granted";
/// trace: a lease was released.
pub const LEASE_RELEASED: &str = "lease released";
/// trace: two consecutive intervals implied the same pair.
pub const PAIR_AGREED: &str = "pair agreed";
/// trace: the newest closed interval implied no pair for this worker.
pub const NO_PAIR_IMPLIED: &str = "no pair implied";
/// trace: the next registration was scheduled.
pub const NEXT_REGISTRATION_SCHEDULED: &str = "next registration scheduled";
/// trace: a pair was handed to the worker's loop.
pub const PAIR_HANDED_TO_THE_LOOP: &str = "pair handed to the loop";
/// warn: the server clock went backwards or jumped by more than the gap.
pub const SERVER_CLOCK_MOVED: &str = "server clock moved";
/// warn: a reply was malformed or unexpected; the registration counts as failed.
pub const REPLY_REJECTED: &str = "reply rejected";
/// warn: the group's rules recorded in Redis differ from this worker's; its
/// registrations are refused and it holds nothing (rule 12).
pub const GROUP_RULES_DIFFER: &str = "group rules differ";
/// warn: another process registers under this worker's member name and
/// holds it by the group's member record; this one holds nothing (rule 18).
pub const MEMBER_IN_USE: &str = "member in use";
/// debug: the server's `INFO` was read at the start and it is not refused.
pub const SERVER_CHECKED: &str = "server checked";
/// info: the server's `INFO` could not be read at the start (an error, a
/// reply that is not text, no answer within an interval): the worker runs
/// unchecked.
pub const SERVER_NOT_CHECKED: &str = "server not checked";
/// error: the server is known to break the guarantee; the worker registers
/// nothing and its stream ends.
pub const SERVER_REFUSED: &str = "server refused";

/// `url` with any password replaced by `***` (and a user name given alone,
/// which Redis takes as a password, too), for messages that must name a
/// server: no URL with a secret ever reaches a log line or an error.
///
/// ```
/// use lease_core::diag::redact_url;
/// assert_eq!(redact_url("redis://user:secret@host:6379/0"), "redis://user:***@host:6379/0");
/// assert_eq!(redact_url("redis://secret@h"), "redis://***@h");
/// assert_eq!(redact_url("redis://127.0.0.1:6379/"), "redis://127.0.0.1:6379/");
/// ```
pub fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return url.to_owned();
    };
    let user = match rest[..at].find(':') {
        Some(colon) => format!("{}:***", &rest[..colon]),
        None => "***".to_owned(),
    };
    format!("{}{user}{}", &url[..scheme_end + 3], &rest[at..])
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn pair(pair: Option<Pair>) -> (i64, i64) {
    pair.map_or((-1, -1), |s| (i64::from(s.i()), i64::from(s.n())))
}

/// Emits `discover started` (adapters call this once when a worker starts;
/// `registry` names the client library, e.g. `redis-rs`).
pub fn discover_started(name: &str, interval: Duration, gap: f64, prefix: &str, registry: &str) {
    tracing::info!(target: TARGET, name, interval = ms(interval), gap, prefix, registry, "{}", DISCOVER_STARTED);
}

/// Why a worker stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// Cancelled through its token: stood down, then ended.
    Abort,
    /// Dropped by its owner.
    Closed,
}

impl StopReason {
    fn as_str(self) -> &'static str {
        match self {
            StopReason::Abort => "abort",
            StopReason::Closed => "closed",
        }
    }
}

/// Emits `discover stopped`.
pub fn discover_stopped(name: &str, reason: StopReason) {
    tracing::info!(target: TARGET, name, reason = reason.as_str(), "{}", DISCOVER_STOPPED);
}

/// Emits `script loaded` (adapters call this after loading the script on
/// `NOSCRIPT`).
pub fn script_loaded(name: &str, sha: &str) {
    tracing::debug!(target: TARGET, name, sha, "{}", SCRIPT_LOADED);
}

/// Emits `server checked` (the driver calls this once per answer to its
/// `INFO`, which connections share among their workers).
pub fn server_checked(name: &str, server: &crate::ServerInfo) {
    let version = server.version.map(|v| v.to_string()).unwrap_or_default();
    tracing::debug!(target: TARGET, name, server = server.kind.as_str(), version, "{}", SERVER_CHECKED);
}

/// Emits `server not checked`.
pub fn server_not_checked(name: &str, error: &dyn Display) {
    tracing::info!(target: TARGET, name, error = %error, "{}", SERVER_NOT_CHECKED);
}

/// Emits `server refused`.
pub fn server_refused(name: &str, error: &crate::UnsupportedServer) {
    tracing::error!(target: TARGET, name, error = %error, "{}", SERVER_REFUSED);
}

/// Emits `pair handed to the loop` (adapters call this when their stream
/// yields a pair).
pub fn pair_handed_to_the_loop(name: &str, held: Option<Pair>) {
    let (i, n) = pair(held);
    tracing::trace!(target: TARGET, name, i, n, "{}", PAIR_HANDED_TO_THE_LOOP);
}

pub(crate) fn registration_failed(name: &str, error: &dyn Display, attempt: u32, delay: Duration) {
    tracing::error!(target: TARGET, name, error = %error, attempt, delay = ms(delay), "{}", REGISTRATION_FAILED);
}

pub(crate) fn lease_expired(name: &str, interval: u64, after: Duration) {
    tracing::warn!(target: TARGET, name, interval, after = ms(after), "{}", LEASE_EXPIRED);
}

pub(crate) fn pair_disagreed(name: &str, now: Option<Pair>, before: Option<Pair>) {
    let (i, n) = pair(now);
    let (pi, pn) = pair(before);
    tracing::debug!(target: TARGET, name, i, n, pi, pn, "{}", PAIR_DISAGREED);
}

pub(crate) fn registration_completed(
    name: &str,
    interval: u64,
    index: Option<u32>,
    replicas: Option<u32>,
    skew_micros: i64,
) {
    let index = index.map_or(-1, i64::from);
    let replicas = replicas.map_or(-1, i64::from);
    tracing::trace!(target: TARGET, name, interval, index, replicas, skew = skew_micros as f64 / 1000.0, "{}", REGISTRATION_COMPLETED);
}

pub(crate) fn lease_granted(name: &str, pair: Pair) {
    tracing::trace!(target: TARGET, name, i = pair.i(), n = pair.n(), "{}", LEASE_GRANTED);
}

pub(crate) fn lease_released(name: &str, pair: Pair, reason: &str) {
    tracing::trace!(target: TARGET, name, i = pair.i(), n = pair.n(), reason, "{}", LEASE_RELEASED);
}

pub(crate) fn pair_agreed(name: &str, pair: Pair) {
    tracing::trace!(target: TARGET, name, i = pair.i(), n = pair.n(), "{}", PAIR_AGREED);
}

pub(crate) fn no_pair_implied(name: &str, before: Option<Pair>) {
    let (pi, pn) = pair(before);
    tracing::trace!(target: TARGET, name, pi, pn, "{}", NO_PAIR_IMPLIED);
}

pub(crate) fn next_registration_scheduled(name: &str, delay: Duration, expires: Duration) {
    tracing::trace!(target: TARGET, name, delay = ms(delay), expires = ms(expires), "{}", NEXT_REGISTRATION_SCHEDULED);
}

pub(crate) fn server_clock_moved(name: &str, by_micros: i64, interval: u64) {
    tracing::warn!(target: TARGET, name, by = by_micros as f64 / 1000.0, interval, "{}", SERVER_CLOCK_MOVED);
}

pub(crate) fn group_rules_differ(name: &str, refusal: &crate::Refusal) {
    let recorded = refusal
        .recorded
        .map_or_else(|| "unreadable".to_owned(), |r| r.to_string());
    tracing::warn!(target: TARGET, name, ours = %refusal.ours, recorded, "{}", GROUP_RULES_DIFFER);
}

pub(crate) fn member_in_use(name: &str, why: &crate::MemberInUse) {
    tracing::warn!(target: TARGET, name, member = %why.member, interval = why.interval, why = %why, "{}", MEMBER_IN_USE);
}

pub(crate) fn reply_rejected(name: &str, error: &dyn Display) {
    tracing::warn!(target: TARGET, name, error = %error, "{}", REPLY_REJECTED);
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn passwords_never_survive_redaction() {
        assert_eq!(
            redact_url("redis://user:secret@host:6379/0"),
            "redis://user:***@host:6379/0"
        );
        assert_eq!(redact_url("redis://:secret@h/"), "redis://:***@h/");
        assert_eq!(redact_url("rediss://:pw@h/"), "rediss://:***@h/");
        assert_eq!(redact_url("redis://secret@h"), "redis://***@h");
        assert_eq!(redact_url("redis://h:1/0?x=@"), "redis://h:1/0?x=@");
        assert_eq!(
            redact_url("redis://127.0.0.1:6379/"),
            "redis://127.0.0.1:6379/"
        );
        assert_eq!(redact_url("nonsense"), "nonsense");
    }
}
