//! Refusing servers known to break the guarantee, from what `INFO` says
//! (docs/operations.md, "Compatibility"). Pure parsing: the driver sends
//! [`INFO_COMMAND`] once when a worker starts and hands the text to
//! [`check_server`]; nothing here does I/O.
//!
//! What `INFO` can show, and so what is refused:
//!
//! - `redis_version` before 5.0 (with no `valkey_version` or
//!   `dragonfly_version` beside it): scripts replicate by their source there,
//!   and a write after `TIME` is refused (`Write commands not allowed after
//!   non deterministic commands`), so no registration could ever succeed;
//!   refused at once with the reason rather than failing every interval.
//! - `role:active-replica` (KeyDB's `active-replica yes`, which its
//!   `multi-master yes` needs too): two nodes take writes to one group's keys
//!   and the newest write wins, so two workers can be certified by two
//!   versions of one interval.
//!
//! What it cannot show, so what is not refused here: Dragonfly's
//! `disable-atomicity` script flag (set per script with `SCRIPT FLAGS` or by
//! `--default_lua_flags`; `INFO` says neither), Redis Enterprise
//! Active-Active (it reports itself as a plain Redis), and proxies or load
//! balancers in front of several primaries. Those stay in the compatibility
//! table as "known to break", for the operator to avoid.
//!
//! ```
//! use lease_core::{ServerKind, UnsupportedServer, check_server};
//!
//! let info = "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n\
//!             # Replication\r\nrole:master\r\n";
//! let server = check_server(info).unwrap();
//! assert_eq!(server.kind, ServerKind::Redis);
//! assert_eq!(server.version.map(|v| v.to_string()).as_deref(), Some("7.0.15"));
//!
//! let keydb = "redis_version:6.3.4\r\nrole:active-replica\r\n";
//! assert_eq!(check_server(keydb), Err(UnsupportedServer::ActiveReplica));
//! ```

use std::fmt;

/// The command the driver sends when a worker starts on a connection that
/// has no answer yet (the adapters share one per connection): `INFO` with no
/// section, which answers the default sections, `server` (the versions)
/// and `replication` (the role) among them, on every server version
/// (`INFO server replication`, two sections, needs Redis 7).
pub const INFO_COMMAND: &str = "INFO";

/// A server version, `major.minor.patch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    /// Major.
    pub major: u32,
    /// Minor.
    pub minor: u32,
    /// Patch.
    pub patch: u32,
}

impl Version {
    /// Parses `7.0.15` (missing parts are 0; a suffix after the numbers,
    /// like Dragonfly's `df-v1.2.3` prefix, is not a version).
    pub fn parse(text: &str) -> Option<Version> {
        let mut parts = text.trim().split('.');
        let mut next = |required: bool| match parts.next() {
            Some(p) => p.parse::<u32>().ok(),
            None if required => None,
            None => Some(0),
        };
        Some(Version {
            major: next(true)?,
            minor: next(false)?,
            patch: next(false)?,
        })
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// Which server `INFO` describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ServerKind {
    /// Redis (or a server that reports only `redis_version`).
    Redis,
    /// Valkey (`valkey_version`, or `server_name:valkey`).
    Valkey,
    /// Dragonfly (`dragonfly_version`).
    Dragonfly,
    /// `INFO` named no version at all.
    Unknown,
}

impl ServerKind {
    /// `redis`, `valkey`, `dragonfly` or `unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            ServerKind::Redis => "redis",
            ServerKind::Valkey => "valkey",
            ServerKind::Dragonfly => "dragonfly",
            ServerKind::Unknown => "unknown",
        }
    }
}

/// What `INFO` said, as far as lease cares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerInfo {
    /// Which server.
    pub kind: ServerKind,
    /// The server's own version (`valkey_version` for Valkey, else
    /// `redis_version`), if it parses.
    pub version: Option<Version>,
    /// The Redis version it claims compatibility with (`redis_version`).
    pub redis_version: Option<Version>,
    /// `role` (`master`, `slave`, ...), if reported.
    pub role: Option<String>,
}

/// A server that `INFO` shows to break the guarantee, or to refuse every
/// registration: the worker holds nothing and its stream ends
/// ([`IdleReason::UnsupportedServer`](crate::IdleReason::UnsupportedServer)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum UnsupportedServer {
    /// Redis before 5.0: a script's write after `TIME` is refused, so no
    /// registration can succeed.
    #[error(
        "Redis {version} is too old: before 5.0 a script may not write after TIME, so every \
         registration would fail; lease needs Redis 5.0 or later"
    )]
    TooOld {
        /// The server's `redis_version`.
        version: Version,
    },
    /// KeyDB active replication (`role:active-replica`, also under
    /// `multi-master`): two nodes take writes to one group's keys and keep
    /// the newest, which can give one slot to two workers.
    #[error(
        "the server is an active replica (KeyDB active-replica or multi-master): two nodes take \
         writes to one group's keys, which breaks exclusivity; point the group at one master \
         with ordinary replicas"
    )]
    ActiveReplica,
}

/// The oldest `redis_version` whose scripts may write after `TIME`.
const OLDEST: Version = Version {
    major: 5,
    minor: 0,
    patch: 0,
};

/// Reads `INFO` text (one server's, or several nodes' concatenated, as a
/// cluster client may answer) and refuses what is known to break the
/// guarantee (see the [module docs](self)); anything else passes,
/// including text without a single known field.
pub fn check_server(info: &str) -> Result<ServerInfo, UnsupportedServer> {
    let mut redis_version: Option<Version> = None;
    let mut valkey = false;
    let mut valkey_version = None;
    let mut dragonfly = false;
    let mut role = None;
    let mut active_replica = false;
    for line in info.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match key.trim() {
            // Every node of a concatenated answer counts: the oldest one
            // decides.
            "redis_version" => {
                if let Some(v) = Version::parse(value) {
                    redis_version = Some(redis_version.map_or(v, |r| r.min(v)));
                }
            }
            "valkey_version" => {
                valkey = true;
                valkey_version = Version::parse(value).or(valkey_version);
            }
            "server_name" if value.eq_ignore_ascii_case("valkey") => valkey = true,
            "dragonfly_version" => dragonfly = true,
            "role" => {
                active_replica |= value.eq_ignore_ascii_case("active-replica");
                role = Some(value.to_owned());
            }
            _ => {}
        }
    }
    let kind = if dragonfly {
        ServerKind::Dragonfly
    } else if valkey {
        ServerKind::Valkey
    } else if redis_version.is_some() {
        ServerKind::Redis
    } else {
        ServerKind::Unknown
    };
    if active_replica {
        return Err(UnsupportedServer::ActiveReplica);
    }
    if kind == ServerKind::Redis
        && let Some(version) = redis_version.filter(|v| *v < OLDEST)
    {
        return Err(UnsupportedServer::TooOld { version });
    }
    Ok(ServerInfo {
        kind,
        version: valkey_version.or(redis_version),
        redis_version,
        role,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The start of Debian's redis-server 7.0.15 answer to `INFO`.
    const REDIS_7: &str = "# Server\r\nredis_version:7.0.15\r\nredis_git_sha1:00000000\r\n\
        redis_mode:standalone\r\nos:Linux 6.1.0 x86_64\r\n\r\n# Clients\r\nconnected_clients:1\r\n\
        \r\n# Replication\r\nrole:master\r\nconnected_slaves:0\r\n";

    fn v(major: u32, minor: u32, patch: u32) -> Version {
        Version {
            major,
            minor,
            patch,
        }
    }

    #[test]
    fn versions_parse_and_order() {
        assert_eq!(Version::parse("7.0.15"), Some(v(7, 0, 15)));
        assert_eq!(Version::parse(" 8.1 "), Some(v(8, 1, 0)));
        assert_eq!(Version::parse("255.255.255"), Some(v(255, 255, 255)));
        assert_eq!(Version::parse("df-v1.2.3"), None);
        assert_eq!(Version::parse(""), None);
        assert_eq!(Version::parse("7.x"), None);
        assert!(v(4, 0, 14) < OLDEST && OLDEST <= v(5, 0, 0) && v(5, 0, 0) < v(10, 0, 0));
    }

    #[test]
    fn redis_7_passes() {
        let info = check_server(REDIS_7).unwrap();
        assert_eq!(info.kind, ServerKind::Redis);
        assert_eq!(info.version, Some(v(7, 0, 15)));
        assert_eq!(info.role.as_deref(), Some("master"));
    }

    #[test]
    fn valkey_reports_its_own_version() {
        let info = "# Server\nredis_version:7.2.4\nserver_name:valkey\nvalkey_version:8.1.8\n";
        let info = check_server(info).unwrap();
        assert_eq!(info.kind, ServerKind::Valkey);
        assert_eq!(info.version, Some(v(8, 1, 8)));
        assert_eq!(info.redis_version, Some(v(7, 2, 4)));
    }

    #[test]
    fn redis_before_5_is_refused() {
        let old = "# Server\r\nredis_version:4.0.14\r\n# Replication\r\nrole:master\r\n";
        let refused = check_server(old).unwrap_err();
        assert_eq!(
            refused,
            UnsupportedServer::TooOld {
                version: v(4, 0, 14)
            }
        );
        assert!(refused.to_string().contains("5.0"), "{refused}");
        assert!(check_server("redis_version:5.0.0\r\n").is_ok());
        // The oldest node of a cluster's concatenated answer decides.
        let nodes = "redis_version:7.0.15\r\nredis_version:3.2.1\r\n";
        assert!(matches!(
            check_server(nodes),
            Err(UnsupportedServer::TooOld { .. })
        ));
    }

    #[test]
    fn keydb_active_replicas_are_refused() {
        let keydb = "# Server\r\nredis_version:6.3.4\r\n# Replication\r\nrole:active-replica\r\n";
        assert_eq!(check_server(keydb), Err(UnsupportedServer::ActiveReplica));
        let replica = "redis_version:6.3.4\r\nrole:slave\r\n";
        assert!(check_server(replica).is_ok());
    }

    #[test]
    fn dragonfly_passes_without_its_flags_being_visible() {
        // Dragonfly claims a Redis version of its own choosing.
        let info =
            "# Server\r\nredis_version:7.4.0\r\ndragonfly_version:df-v1.27.1\r\nrole:master\r\n";
        let info = check_server(info).unwrap();
        assert_eq!(info.kind, ServerKind::Dragonfly);
        // A Dragonfly claiming an old Redis is not refused for it.
        let old = "redis_version:4.0.0\r\ndragonfly_version:df-v0.1\r\n";
        assert!(check_server(old).is_ok());
    }

    #[test]
    fn text_without_known_fields_passes() {
        for text in [
            "",
            "garbage",
            ":::\n\n",
            "redis_version:\n",
            "redis_version:abc\n",
        ] {
            let info = check_server(text).unwrap();
            assert_eq!(info.version, None, "{text:?}");
        }
        assert_eq!(check_server("").unwrap().kind, ServerKind::Unknown);
    }
}
