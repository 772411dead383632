//! The group's rules: what every worker of one group must agree on, recorded
//! in Redis by the registration script itself (rule 12 of docs/protocol.md).
//!
//! Two workers that count on different intervals, in different modes, or
//! that map tasks to pairs differently are not exclusive even when each one
//! follows the protocol: the interval is not part of the keys, so each half of
//! a rolling deploy that changes it counts itself alone. The script records
//! the rules of the first registration under `P{N}:rules` (declared in
//! `KEYS`, same hash tag as the interval keys), refreshes the record on every
//! registration that matches it, and refuses, writing nothing, every
//! registration that does not. The record expires a few intervals after the
//! last matching registration, so a deploy that really changes the rules gets
//! through once the old workers are gone.
//!
//! What is *not* a rule: the gap. It moves the schedule and, in `Arrival`
//! mode, shortens the lease, but the exclusivity argument never uses it
//! (every lease from interval `m` ends by `(m+2)L` whatever the gap, and
//! positions in a closed interval are distinct whatever the firing times), so
//! workers with different gaps may share a group (docs/protocol.md).

use std::fmt;
use std::time::Duration;

use crate::options::Mode;
use crate::ownership::Mapping;

/// Version of the record, its first field: the revision of the mode's
/// protocol. `Arrival`, the original protocol, is revision 1. `Ranked` is
/// revision 3, whose registrations reserve their place in the next
/// interval and whose positions fill holes (rules 15 and 19): a `Ranked`
/// worker of revision 1 (plain ranks, no hole filling) or 2 (no
/// reservations) carries positions another way, so they must not share a
/// group, and the record tells them apart. A record with another version
/// is a mismatch (and is reported as unreadable).
pub(crate) const fn version_of(mode: Mode) -> u32 {
    match mode {
        Mode::Arrival => 1,
        Mode::Ranked => 3,
    }
}

/// The rules every worker of one group must share: recorded in Redis by the
/// first registration, checked by every later one.
///
/// ```
/// use std::time::Duration;
/// use lease_core::{GroupRules, Handover, Options};
///
/// let options: Options = Options::new("g", Duration::from_secs(2));
/// let rules = GroupRules::of(&options);
/// assert_eq!(rules.encode(), "3:2000:ranked:consistent");
/// assert_eq!(GroupRules::decode("3:2000:ranked:consistent"), Some(rules));
/// // Whole pairs split by modulo: another mapping, another rule.
/// let sql = GroupRules::of(&options.with_handover(Handover::WholePairs));
/// assert_eq!(sql.encode(), "3:2000:ranked:modulo");
/// // A Ranked record of another version (1: positions carried as
/// // fractions, without hole filling; 2: no reservations) is not one this
/// // version reads.
/// assert_eq!(GroupRules::decode("1:2000:ranked:modulo"), None);
/// assert_eq!(GroupRules::decode("2:2000:ranked:modulo"), None);
/// assert_eq!(sql.to_string(), "interval 2000 ms, mode ranked, mapping modulo");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GroupRules {
    /// The interval length `L`, in milliseconds.
    pub interval_ms: u64,
    /// The counting mode.
    pub mode: Mode,
    /// How tasks are split between the pairs.
    pub mapping: Mapping,
}

impl GroupRules {
    /// The rules a worker with `options` follows.
    pub fn of<C>(options: &crate::Options<C>) -> Self {
        Self {
            interval_ms: u64::try_from(options.interval.as_millis()).unwrap_or(u64::MAX),
            mode: options.mode(),
            mapping: options.mapping(),
        }
    }

    /// The interval as a duration.
    pub fn interval(&self) -> Duration {
        Duration::from_millis(self.interval_ms)
    }

    /// The record as the script stores and compares it:
    /// `version:interval_ms:mode:mapping`, e.g. `3:1000:ranked:modulo` or
    /// `1:1000:arrival:modulo` (the version is the mode's revision).
    /// Byte equality of two encodings is equality of the rules.
    pub fn encode(&self) -> String {
        format!(
            "{}:{}:{}:{}",
            version_of(self.mode),
            self.interval_ms,
            self.mode.as_str(),
            self.mapping.as_str()
        )
    }

    /// Reads a record written by [`GroupRules::encode`]; `None` if it is not
    /// one (another version, or not a record at all).
    pub fn decode(record: &str) -> Option<Self> {
        let mut fields = record.split(':');
        let version: u32 = fields.next()?.parse().ok()?;
        let interval_ms: u64 = fields.next()?.parse().ok()?;
        let mode = fields.next()?.parse().ok()?;
        let mapping = fields.next()?.parse().ok()?;
        if version != version_of(mode) || fields.next().is_some() {
            return None;
        }
        Some(Self {
            interval_ms,
            mode,
            mapping,
        })
    }
}

impl fmt::Display for GroupRules {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "interval {} ms, mode {}, mapping {}",
            self.interval_ms, self.mode, self.mapping
        )
    }
}

/// A registration refused because the group's recorded rules differ from
/// this worker's: it wrote nothing, and the worker holds nothing until the
/// record agrees (or expires, a few intervals after the last registration
/// that used it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Refusal {
    /// This worker's rules.
    pub ours: GroupRules,
    /// The rules recorded in Redis, `None` if the record is unreadable (for
    /// example written by another version of the protocol).
    pub recorded: Option<GroupRules>,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.recorded {
            Some(recorded) => write!(f, "the group runs {recorded}; this worker {}", self.ours),
            None => write!(
                f,
                "the group's rules record is unreadable; this worker runs {}",
                self.ours
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_reject_what_is_not_one() {
        for mode in [Mode::Ranked, Mode::Arrival] {
            for mapping in [Mapping::Modulo, Mapping::Consistent] {
                let r = GroupRules {
                    interval_ms: 86_400_000,
                    mode,
                    mapping,
                };
                assert_eq!(GroupRules::decode(&r.encode()), Some(r));
            }
        }
        for bad in [
            "",
            "1",
            "1:1000:ranked:modulo",
            "2:1000:arrival:modulo",
            "1:1000:ranked",
            "1:1000:ranked:modulo:x",
            "1:-5:ranked:modulo",
            "1:1000:fifo:modulo",
            "1:1000:ranked:ring",
        ] {
            assert_eq!(GroupRules::decode(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_refusal_names_both_sides() {
        let ours = GroupRules {
            interval_ms: 2000,
            mode: Mode::Ranked,
            mapping: Mapping::Modulo,
        };
        let recorded = GroupRules {
            interval_ms: 1000,
            ..ours
        };
        let msg = Refusal {
            ours,
            recorded: Some(recorded),
        }
        .to_string();
        assert!(
            msg.contains("interval 1000 ms") && msg.contains("interval 2000 ms"),
            "{msg}"
        );
    }
}
