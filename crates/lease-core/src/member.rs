//! Member names (rule 18 of docs/protocol.md): a stable name under which a
//! worker registers, so that a restarted process (a new incarnation, with
//! its own random identity) takes back the position of the one before it.

use std::fmt;

/// The longest accepted member name, in bytes.
pub const MAX_MEMBER_LEN: usize = 64;

/// A validated member name: 1 to [`MAX_MEMBER_LEN`] bytes of ASCII letters,
/// digits, `.`, `_` and `-` (a StatefulSet pod name such as `web-3`, or a
/// host name). Stored inline, so that an [`crate::IdleReason`] can name it
/// and stay `Copy`.
///
/// ```
/// use lease_core::Member;
/// assert_eq!(Member::new("web-3").unwrap().as_str(), "web-3");
/// assert!(Member::new("web 3").is_err());
/// assert!(Member::new("").is_err());
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Member {
    len: u8,
    bytes: [u8; MAX_MEMBER_LEN],
}

/// Why a member name was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MemberError {
    /// The name is empty.
    #[error("the member name is empty; give a stable name such as a StatefulSet pod name")]
    Empty,
    /// The name is longer than [`MAX_MEMBER_LEN`].
    #[error("the member name is {len} bytes long; at most {max} bytes are allowed")]
    TooLong {
        /// Length of the name given, in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The name contains a character other than ASCII letters, digits, `.`,
    /// `_` and `-`.
    #[error(
        "the member name contains {0:?}; only ASCII letters, digits, '.', '_' and '-' are allowed"
    )]
    BadChar(char),
}

impl Member {
    /// Validates `name`.
    pub fn new(name: &str) -> Result<Self, MemberError> {
        if name.is_empty() {
            return Err(MemberError::Empty);
        }
        if let Some(c) = name
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
        {
            return Err(MemberError::BadChar(c));
        }
        if name.len() > MAX_MEMBER_LEN {
            return Err(MemberError::TooLong {
                len: name.len(),
                max: MAX_MEMBER_LEN,
            });
        }
        let mut bytes = [0; MAX_MEMBER_LEN];
        bytes[..name.len()].copy_from_slice(name.as_bytes());
        Ok(Self {
            // At most MAX_MEMBER_LEN (64), checked above.
            len: name.len() as u8,
            bytes,
        })
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        // Only ASCII was accepted, so this is always valid UTF-8.
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or("")
    }
}

impl fmt::Display for Member {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Member {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Member({:?})", self.as_str())
    }
}

/// Why a registration under a member name held nothing: another
/// incarnation (another process with the same member name) is the member's
/// holder by the group's member record, and its last lease may still be
/// valid (rule 18).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MemberInUse {
    /// The member name.
    pub member: Member,
    /// The interval of the refused registration.
    pub interval: u64,
}

impl fmt::Display for MemberInUse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "member {} is held by another process (another incarnation registered under it \
             in one of the last two intervals, so its lease may still be valid); waiting \
             until it stops registering for two intervals",
            self.member
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert_eq!(Member::new(""), Err(MemberError::Empty));
        assert_eq!(Member::new("a:b"), Err(MemberError::BadChar(':')));
        assert_eq!(Member::new("a{b}"), Err(MemberError::BadChar('{')));
        assert_eq!(Member::new("pod é"), Err(MemberError::BadChar(' ')));
        let long = "x".repeat(MAX_MEMBER_LEN + 1);
        assert_eq!(
            Member::new(&long),
            Err(MemberError::TooLong {
                len: MAX_MEMBER_LEN + 1,
                max: MAX_MEMBER_LEN
            })
        );
        let max = "x".repeat(MAX_MEMBER_LEN);
        assert_eq!(Member::new(&max).unwrap().as_str(), max);
        let m = Member::new("web-3.pods_a").unwrap();
        assert_eq!(m.to_string(), "web-3.pods_a");
        assert_eq!(format!("{m:?}"), "Member(\"web-3.pods_a\")");
    }

    #[test]
    fn the_refusal_names_the_member() {
        let why = MemberInUse {
            member: Member::new("web-3").unwrap(),
            interval: 9,
        };
        assert!(
            why.to_string()
                .contains("member web-3 is held by another process")
        );
    }
}
