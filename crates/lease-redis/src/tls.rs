//! `rediss://` clients (feature `tls`): redis-rs over rustls (ring provider),
//! trusting what [`Trust`] names. Shared with `lease-smol` (feature `tls`)
//! and the `lease` command.

pub use lease_tls::{TlsError, Trust, install_default_provider};
use redis::{Client, RedisError, TlsCertificates};

/// Why [`client`] could not open a client.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The trusted certificates could not be loaded.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// redis-rs refused the URL or the TLS parameters.
    #[error(transparent)]
    Redis(#[from] RedisError),
}

/// A redis-rs client for `url`: for `rediss://` (and `valkeys://`) URLs, one
/// that trusts `trust` ([`Trust::resolve`]: a given CA file, else
/// `SSL_CERT_FILE`, else the system's store); a plain `redis://` URL gets a
/// plain client and `trust` is not read.
///
/// `redis::Client::open("rediss://...")` with this crate's `tls` feature
/// already trusts `SSL_CERT_FILE` or the system's store (redis-rs reads them
/// through rustls-native-certs); this function adds a CA file given in code
/// or on a command line, checks that file before anything connects, and
/// installs rustls's ring provider as the process default if none is
/// ([`lease_tls::install_default_provider`]).
///
/// ```no_run
/// use std::path::Path;
/// use lease_redis::redis::aio::ConnectionManager;
/// use lease_redis::tls::{self, Trust};
///
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// let trust = Trust::resolve(Some(Path::new("/etc/lease/redis-ca.pem")));
/// let client = tls::client("rediss://redis.internal:6380/", &trust)?;
/// let redis = ConnectionManager::new(client).await?;
/// # let _ = redis;
/// # Ok(())
/// # }
/// ```
pub fn client(url: &str, trust: &Trust) -> Result<Client, ClientError> {
    if !is_tls_url(url) {
        return Ok(Client::open(url)?);
    }
    lease_tls::install_default_provider();
    match trust.pem()? {
        Some(root_cert) => {
            let certificates = TlsCertificates {
                client_tls: None,
                root_cert: Some(root_cert),
            };
            Ok(Client::build_with_tls(url, certificates)?)
        }
        None => Ok(Client::open(url)?),
    }
}

/// Whether `url` asks for TLS (`rediss://` or `valkeys://`).
pub fn is_tls_url(url: &str) -> bool {
    let scheme = url.split_once("://").map_or("", |(scheme, _)| scheme);
    scheme.eq_ignore_ascii_case("rediss") || scheme.eq_ignore_ascii_case("valkeys")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_urls_are_told_apart() {
        assert!(is_tls_url("rediss://h:6380/"));
        assert!(is_tls_url("VALKEYS://h/"));
        assert!(!is_tls_url("redis://h/"));
        assert!(!is_tls_url("rediss"));
    }

    #[test]
    fn a_missing_ca_file_fails_before_connecting_and_plain_urls_ignore_it() {
        let trust = Trust::File("/nonexistent/ca.pem".into());
        let err = client("rediss://127.0.0.1:1/", &trust).unwrap_err();
        assert!(
            matches!(err, ClientError::Tls(TlsError::Read { .. })),
            "{err}"
        );
        assert!(client("redis://127.0.0.1:1/", &trust).is_ok());
    }
}
