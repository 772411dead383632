//! The error every adapter's `connect` reports: which server, and why.

use std::fmt;
use std::time::Duration;

/// How long an adapter's `connect` waits for a first answer before it says
/// the server is unreachable: shorter than any interval worth running, so a
/// wrong address is reported at once instead of after a long retry.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// A Redis server could not be reached (or its URL was not one): the
/// address, with any password replaced by `***`, and the reason.
///
/// ```
/// use lease_driver::ConnectError;
/// let e = ConnectError::new("redis://:secret@127.0.0.1:6390/", "Connection refused (os error 111)");
/// assert_eq!(
///     e.to_string(),
///     "cannot reach Redis at redis://:***@127.0.0.1:6390/: Connection refused (os error 111)"
/// );
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectError {
    address: String,
    reason: String,
}

impl ConnectError {
    /// The error for `url` (redacted here), failing because of `reason`.
    pub fn new(url: &str, reason: impl fmt::Display) -> Self {
        Self {
            address: lease_core::diag::redact_url(url),
            reason: reason.to_string(),
        }
    }

    /// The error for `url` when nothing answered within [`CONNECT_TIMEOUT`].
    pub fn timed_out(url: &str) -> Self {
        Self::new(
            url,
            format_args!("no answer within {} s", CONNECT_TIMEOUT.as_secs()),
        )
    }

    /// The server's address, redacted.
    pub fn address(&self) -> &str {
        &self.address
    }
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot reach Redis at {}: {}", self.address, self.reason)
    }
}

impl std::error::Error for ConnectError {}
