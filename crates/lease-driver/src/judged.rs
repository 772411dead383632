//! The server check's judgments, kept per answer: workers that share one
//! answer to `INFO` (the adapters keep one per connection) judge it once
//! and report it once.

use std::sync::Mutex;

use lease_core::{ServerInfo, UnsupportedServer};

/// The answers remembered: a process usually talks to one server, or a few.
const KEPT: usize = 8;

/// What `check_server` said of one answer.
pub(crate) type Judgment = Result<ServerInfo, UnsupportedServer>;

static RECENT: Mutex<Vec<(String, Judgment)>> = Mutex::new(Vec::new());

/// The judgment of `text` ([`lease_core::check_server`]), and whether it is
/// new: `false` when the very same text was judged before in this process.
/// Every fresh `INFO` differs from the last (its uptime and counters move),
/// so equal text is a shared answer, and its judgment is the same.
pub(crate) fn judge(text: &str) -> (Judgment, bool) {
    let mut recent = RECENT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, judgment)) = recent.iter().find(|(t, _)| t == text) {
        return (judgment.clone(), false);
    }
    let judgment = lease_core::check_server(text);
    if recent.len() >= KEPT {
        drop(recent.remove(0));
    }
    recent.push((text.to_owned(), judgment.clone()));
    (judgment, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_answer_is_judged_once() {
        let text = "# Server\r\nredis_version:7.2.4\r\nuptime_in_seconds:12345678\r\n";
        let (first, new) = judge(text);
        assert!(new);
        assert!(first.is_ok());
        let (again, new) = judge(text);
        assert!(!new);
        assert_eq!(again, first);
        let other = "# Server\r\nredis_version:7.2.4\r\nuptime_in_seconds:12345679\r\n";
        assert!(judge(other).1, "a fresh answer is judged again");
        let old = "redis_version:4.0.9\r\nuptime_in_seconds:1\r\n";
        assert!(judge(old).0.is_err());
        assert!(judge(old).0.is_err(), "a refusal is kept too");
    }
}
