//! # lease-tls
//!
//! Which certificate authorities a `rediss://` connection of lease trusts,
//! decided in one place for the `lease` command, the demo and the adapters'
//! `tls` features, the way other Rust and OpenSSL tools decide it:
//!
//! 1. a CA file given explicitly (the `lease` command's `--ca-cert PATH`);
//! 2. otherwise the file named by the `SSL_CERT_FILE` environment variable
//!    (a PEM bundle; only its certificates are trusted, as with OpenSSL);
//! 3. otherwise the system's trust store, through
//!    [rustls-native-certs](https://docs.rs/rustls-native-certs) (on Debian
//!    the `ca-certificates` bundle; it also honours `SSL_CERT_DIR`).
//!
//! The system store is read rather than a root list compiled in
//! (`webpki-roots`): it is what the operator already maintains, private CAs
//! added to it are trusted, and it does not go stale with the binary.
//!
//! Everything uses rustls with the *ring* crypto provider (not aws-lc-rs,
//! which needs cmake and a C toolchain to build). redis-rs builds its rustls
//! configuration from the process-wide default provider:
//! [`install_default_provider`] installs ring as that default if none is.
//!
//! ```
//! use lease_tls::Trust;
//!
//! // An explicit file wins over SSL_CERT_FILE, which wins over the system.
//! let trust = Trust::from_parts(None, Some("/etc/my-ca.pem".into()));
//! assert_eq!(trust, Trust::EnvFile("/etc/my-ca.pem".into()));
//! let trust = Trust::from_parts(Some("ca.pem".as_ref()), Some("/etc/my-ca.pem".into()));
//! assert_eq!(trust, Trust::File("ca.pem".into()));
//! assert_eq!(Trust::from_parts(None, None), Trust::System);
//! // A file that is not there is a typed error, not a panic.
//! assert!(Trust::File("/nonexistent/ca.pem".into()).root_store().is_err());
//! ```
#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use rustls;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use rustls::{ClientConfig, RootCertStore};

/// The environment variable naming a PEM bundle of trusted CAs.
pub const SSL_CERT_FILE: &str = "SSL_CERT_FILE";

/// Where the trusted certificate authorities come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Trust {
    /// A PEM file given explicitly (for example `--ca-cert PATH`).
    File(PathBuf),
    /// The PEM file named by `SSL_CERT_FILE`.
    EnvFile(PathBuf),
    /// The system's trust store (rustls-native-certs).
    System,
}

impl Trust {
    /// The trust for a connection: `ca_cert` if given, else `SSL_CERT_FILE`
    /// from the environment (if set and not empty), else the system's store.
    pub fn resolve(ca_cert: Option<&Path>) -> Trust {
        Trust::from_parts(ca_cert, std::env::var_os(SSL_CERT_FILE))
    }

    /// [`Trust::resolve`] with the value of `SSL_CERT_FILE` given rather
    /// than read from the environment.
    pub fn from_parts(ca_cert: Option<&Path>, ssl_cert_file: Option<OsString>) -> Trust {
        match (ca_cert, ssl_cert_file) {
            (Some(path), _) => Trust::File(path.to_owned()),
            (None, Some(file)) if !file.is_empty() => Trust::EnvFile(file.into()),
            (None, _) => Trust::System,
        }
    }

    /// The file the certificates come from, unless they are the system's.
    pub fn file(&self) -> Option<&Path> {
        match self {
            Trust::File(path) | Trust::EnvFile(path) => Some(path),
            Trust::System => None,
        }
    }

    /// The file's bytes once checked to hold at least one PEM certificate
    /// (what redis-rs's `TlsCertificates::root_cert` takes), or `None` for
    /// the system's store.
    pub fn pem(&self) -> Result<Option<Vec<u8>>, TlsError> {
        match self.file() {
            Some(path) => {
                let (bytes, _) = read_certificates(path)?;
                Ok(Some(bytes))
            }
            None => Ok(None),
        }
    }

    /// The trusted roots, as a rustls store.
    pub fn root_store(&self) -> Result<RootCertStore, TlsError> {
        let mut store = RootCertStore::empty();
        match self.file() {
            Some(path) => {
                let (_, certs) = read_certificates(path)?;
                for cert in certs {
                    store.add(cert).map_err(|source| TlsError::Rejected {
                        path: path.to_owned(),
                        source,
                    })?;
                }
            }
            None => {
                let found = rustls_native_certs::load_native_certs();
                if let Some(error) = found.errors.into_iter().next() {
                    return Err(TlsError::System(error.to_string()));
                }
                // Like redis-rs and fred: skip a system certificate that
                // rustls cannot use rather than refuse them all.
                let (_added, _ignored) = store.add_parsable_certificates(found.certs);
                if store.is_empty() {
                    return Err(TlsError::System(
                        "the system trust store holds no certificate".to_owned(),
                    ));
                }
            }
        }
        Ok(store)
    }

    /// A rustls client configuration trusting these roots, on the ring
    /// provider, without client certificates: what fred's
    /// `TlsConnector::Rustls` takes (`config.into()`).
    pub fn client_config(&self) -> Result<ClientConfig, TlsError> {
        let roots = self.root_store()?;
        let config =
            ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .map_err(TlsError::Config)?
                .with_root_certificates(roots)
                .with_no_client_auth();
        Ok(config)
    }
}

impl fmt::Display for Trust {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Trust::File(path) => write!(f, "the CA file {}", path.display()),
            Trust::EnvFile(path) => write!(f, "{SSL_CERT_FILE}={}", path.display()),
            Trust::System => f.write_str("the system's trust store"),
        }
    }
}

/// Installs rustls's ring provider as the process-wide default, unless one
/// is installed already (then nothing changes). redis-rs builds its TLS
/// configuration with the default provider; call this before opening a
/// `rediss://` client if more than one rustls provider may be compiled in.
pub fn install_default_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race to another thread installing one is fine too.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// Why the trusted certificates could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// The CA file could not be read.
    #[error("cannot read the CA file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The CA file is not PEM, or a certificate in it is malformed.
    #[error("the CA file {} is not a PEM certificate bundle: {source}", path.display())]
    Pem {
        /// The file.
        path: PathBuf,
        /// What the PEM parser said.
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    /// The CA file holds no certificate.
    #[error("the CA file {} holds no PEM certificate", path.display())]
    NoCertificates {
        /// The file.
        path: PathBuf,
    },
    /// rustls refused a certificate of the CA file as a trust anchor.
    #[error("a certificate of the CA file {} cannot be a trust anchor: {source}", path.display())]
    Rejected {
        /// The file.
        path: PathBuf,
        /// What rustls said.
        #[source]
        source: rustls::Error,
    },
    /// The system's trust store could not be read.
    #[error("cannot load the system's trust store: {0}")]
    System(String),
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Config(#[source] rustls::Error),
}

/// The file's bytes and its certificates (at least one).
fn read_certificates(path: &Path) -> Result<(Vec<u8>, Vec<CertificateDer<'static>>), TlsError> {
    let bytes = std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::Pem {
            path: path.to_owned(),
            source,
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificates {
            path: path.to_owned(),
        });
    }
    Ok((bytes, certs))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ca_pem() -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.self_signed(&key).unwrap().pem()
    }

    #[test]
    fn an_empty_ssl_cert_file_is_unset() {
        assert_eq!(Trust::from_parts(None, Some("".into())), Trust::System);
        assert_eq!(Trust::System.file(), None);
        assert_eq!(
            Trust::EnvFile("x".into()).to_string(),
            "SSL_CERT_FILE=x",
            "says where the roots come from"
        );
    }

    #[test]
    fn a_pem_bundle_becomes_a_root_store_and_a_client_config() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.pem");
        std::fs::write(&path, format!("{}{}", ca_pem(), ca_pem())).unwrap();
        let trust = Trust::File(path.clone());
        assert_eq!(trust.root_store().unwrap().len(), 2);
        assert!(trust.client_config().is_ok());
        let pem = trust.pem().unwrap().unwrap();
        assert_eq!(pem, std::fs::read(&path).unwrap());
    }

    #[test]
    fn files_without_certificates_are_typed_errors() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        assert!(matches!(
            Trust::File(missing).root_store(),
            Err(TlsError::Read { .. })
        ));
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let err = Trust::EnvFile(empty.clone()).pem().unwrap_err();
        assert!(matches!(err, TlsError::NoCertificates { .. }), "{err}");
        assert!(err.to_string().contains("empty.pem"));
        let broken = dir.path().join("broken.pem");
        std::fs::write(
            &broken,
            "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        assert!(Trust::File(broken).root_store().is_err());
    }

    #[test]
    fn the_default_provider_is_installed_once() {
        install_default_provider();
        install_default_provider();
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
    }
}
