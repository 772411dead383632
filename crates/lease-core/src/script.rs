//! The server side: one Lua script per counting mode, and the names of the
//! keys it declares (rules 1 and 2 of docs/protocol.md).
//!
//! Adapters only move bytes: they send [`Script::sha1`] with `EVALSHA`, fall
//! back to [`Script::source`] (`SCRIPT LOAD` or `EVAL`) on `NOSCRIPT`, and pass
//! the keys and arguments of a [`crate::Transmit`] unchanged.
//!
//! Each registration script is `prelude.lua` (read the clock, check the
//! group's rules record, check the interval: rules 2 and 12) followed by its
//! counting part. The leave script (`leave.lua`, rule 16) stands alone.

use std::fmt::Write as _;
use std::sync::OnceLock;

use crate::options::Mode;

/// A registration script: its source and its SHA-1 digest for `EVALSHA`.
#[derive(Debug)]
pub struct Script {
    mode: Mode,
    leave: bool,
    source: &'static str,
    sha1: OnceLock<String>,
}

static ARRIVAL: Script = Script {
    mode: Mode::Arrival,
    leave: false,
    source: concat!(
        include_str!("scripts/prelude.lua"),
        include_str!("scripts/arrival.lua")
    ),
    sha1: OnceLock::new(),
};

static RANKED: Script = Script {
    mode: Mode::Ranked,
    leave: false,
    source: concat!(
        include_str!("scripts/prelude.lua"),
        include_str!("scripts/ranked.lua")
    ),
    sha1: OnceLock::new(),
};

static LEAVE: Script = Script {
    mode: Mode::Ranked,
    leave: true,
    source: include_str!("scripts/leave.lua"),
    sha1: OnceLock::new(),
};

impl Script {
    /// The graceful-leave script (rule 16, `Ranked` mode): removes the
    /// caller's token from the set of the interval open at execution.
    pub fn leave() -> &'static Script {
        &LEAVE
    }

    /// Whether this is the leave script rather than a registration script.
    pub fn is_leave(&self) -> bool {
        self.leave
    }

    /// The script for a counting mode.
    pub fn for_mode(mode: Mode) -> &'static Script {
        match mode {
            Mode::Arrival => &ARRIVAL,
            Mode::Ranked => &RANKED,
        }
    }

    /// The counting mode this script implements (the leave script: `Ranked`).
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The Lua source, for `SCRIPT LOAD` or `EVAL`.
    pub fn source(&self) -> &'static str {
        self.source
    }

    /// The lowercase hex SHA-1 of the source, as `EVALSHA` expects it.
    pub fn sha1(&self) -> &str {
        self.sha1
            .get_or_init(|| sha1_smol::Sha1::from(self.source).digest().to_string())
    }
}

/// Writes the key of interval `k` of a group: `P{N}:k` (rule 1). The braces
/// make `{N}` the Redis Cluster hash tag, so every key of a group lands in one
/// slot; option validation guarantees neither `P` nor `N` contains a brace.
pub(crate) fn write_key(out: &mut String, prefix: &str, name: &str, k: u64) {
    out.clear();
    // Writing to a String cannot fail.
    let _ = write!(out, "{prefix}{{{name}}}:{k}");
}

/// Writes the key of a group's rules record: `P{N}:rules` (rule 12), in the
/// group's hash tag like its interval keys.
pub(crate) fn write_rules_key(out: &mut String, prefix: &str, name: &str) {
    out.clear();
    let _ = write!(out, "{prefix}{{{name}}}:rules");
}

/// Writes the key of a group's member record: `P{N}:members` (rule 18), a
/// hash from member name to its holder's identity and last interval.
pub(crate) fn write_members_key(out: &mut String, prefix: &str, name: &str) {
    out.clear();
    let _ = write!(out, "{prefix}{{{name}}}:members");
}

/// Writes the key of the filler cache of interval `k`: `P{N}:k:fillers`
/// (rule 15), a hash from each filler of the closed set of `k` to its
/// position, with the set's size under `#`, written once by the first
/// filler that reads the set closed.
pub(crate) fn write_fillers_key(out: &mut String, prefix: &str, name: &str, k: u64) {
    out.clear();
    let _ = write!(out, "{prefix}{{{name}}}:{k}:fillers");
}

/// The key of the filler cache of interval `k` of group `name` under
/// `prefix` (rule 15).
pub fn fillers_key(prefix: &str, name: &str, k: u64) -> String {
    let mut s = String::new();
    write_fillers_key(&mut s, prefix, name, k);
    s
}

/// The key of group `name`'s member record under `prefix` (rule 18).
pub fn members_key(prefix: &str, name: &str) -> String {
    let mut s = String::new();
    write_members_key(&mut s, prefix, name);
    s
}

/// The key of group `name`'s rules record under `prefix` (for tools such as
/// `lease inspect`).
pub fn rules_key(prefix: &str, name: &str) -> String {
    let mut s = String::new();
    write_rules_key(&mut s, prefix, name);
    s
}

/// The key of interval `k` of group `name` under `prefix`, as a new string
/// (for tools such as `lease inspect`; the state machine reuses buffers).
pub fn interval_key(prefix: &str, name: &str, k: u64) -> String {
    let mut s = String::new();
    write_key(&mut s, prefix, name, k);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_the_group_hash_tag() {
        assert_eq!(
            interval_key("", "mail-sender", 58391),
            "{mail-sender}:58391"
        );
        assert_eq!(interval_key("prod:", "g", 7), "prod:{g}:7");
        assert_eq!(rules_key("prod:", "g"), "prod:{g}:rules");
        assert_eq!(fillers_key("prod:", "g", 7), "prod:{g}:7:fillers");
    }

    #[test]
    fn sha1_matches_a_digest_checked_by_hand() {
        // `cat prelude.lua arrival.lua | python3 -c "import hashlib,sys;
        // print(hashlib.sha1(sys.stdin.buffer.read()).hexdigest())"` (and the
        // same for ranked.lua) in src/scripts gives the same digests; Redis computes the same
        // for SCRIPT LOAD (checked by the adapter tests against a real server).
        for mode in [Mode::Arrival, Mode::Ranked] {
            let s = Script::for_mode(mode);
            assert_eq!(s.sha1().len(), 40);
            assert!(s.sha1().bytes().all(|b| b.is_ascii_hexdigit()));
            assert_eq!(s.mode(), mode);
        }
        assert_eq!(
            Script::for_mode(Mode::Arrival).sha1(),
            "6e3ec2778cbf7f480edc0f99c4a6515338b70261"
        );
        assert_eq!(
            Script::for_mode(Mode::Ranked).sha1(),
            "feead12e4ffd5b0817ceb28d615a51020b38695f"
        );
    }

    #[test]
    fn scripts_declare_every_key_they_touch() {
        for s in [
            Script::for_mode(Mode::Arrival),
            Script::for_mode(Mode::Ranked),
            Script::leave(),
        ] {
            let src = s.source();
            assert!(src.contains("KEYS[3]"), "the rules record is declared");
            // Every command names a declared key (KEYS[..]), or is TIME, or
            // is in a helper that takes the key as its first parameter,
            // `key`, whose every call passes a declared key.
            let helpers: Vec<&str> = src
                .lines()
                .filter_map(|l| l.trim().strip_prefix("local function "))
                .filter_map(|l| l.split_once("(key"))
                .map(|(name, _)| name)
                .collect();
            for line in src.lines().filter(|l| l.contains("redis.call")) {
                let in_helper = line.contains(", key,") || line.contains(", key)");
                assert!(
                    line.contains("KEYS[") || line.contains("'TIME'") || in_helper,
                    "undeclared key in {line}"
                );
            }
            for name in helpers {
                let call = format!("{name}(");
                for line in src
                    .lines()
                    .filter(|l| l.contains(&call) && !l.contains("function"))
                {
                    assert!(
                        line.contains(&format!("{name}(KEYS[")),
                        "undeclared key in {line}"
                    );
                }
            }
        }
    }
}
