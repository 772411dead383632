//! A `redis-server` that speaks TLS, with a certificate authority the test
//! makes itself ([`TlsRedis`]).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use tempfile::TempDir;

use crate::RedisServer;
use crate::util::PortLease;

/// A [`RedisServer`] that also listens for TLS on a port of its own
/// (`--tls-port`), with a server certificate for `127.0.0.1` and
/// `localhost` signed by a private CA made for it (rcgen, an ECDSA P-256
/// key), so a test can connect with `rediss://` and trust that CA (for
/// example through `SSL_CERT_FILE`, with [`ca_path`](Self::ca_path)).
///
/// The plain port stays open: the harness's readiness probe and admin
/// commands ([`server`](Self::server)) use it; clients under test use only
/// [`url`](Self::url). Clients are not asked for certificates
/// (`--tls-auth-clients no`). A second CA that signed nothing,
/// [`other_ca_path`](Self::other_ca_path), is for tests that a client
/// trusting the wrong authority is refused.
///
/// The server needs a TLS build (`redis-server --tls-port` is accepted;
/// Debian's and Valkey's builds are).
///
/// ```no_run
/// # fn main() -> std::io::Result<()> {
/// let server = lease_testkit::TlsRedis::start()?;
/// assert!(server.url().starts_with("rediss://127.0.0.1:"));
/// // Trust the test's CA the way a user trusts a private one:
/// // SSL_CERT_FILE=<server.ca_path()>, or the CA file in code.
/// let _pem = std::fs::read(server.ca_path())?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct TlsRedis {
    // The server goes first: killed before its certificates are removed.
    server: RedisServer,
    tls_port: PortLease,
    url: String,
    certs: TempDir,
}

/// File names in the certificate directory.
const CA_FILE: &str = "ca.pem";
const OTHER_CA_FILE: &str = "other-ca.pem";
const CERT_FILE: &str = "server.pem";
const KEY_FILE: &str = "server.key";

impl TlsRedis {
    /// Makes the certificates and starts the server (plain and TLS ports
    /// both on `127.0.0.1`), waiting until it answers `PING`.
    pub fn start() -> io::Result<TlsRedis> {
        let certs = tempfile::Builder::new()
            .prefix("lease-testkit-tls-")
            .tempdir()?;
        write_certificates(certs.path()).map_err(io::Error::other)?;
        let tls_port = PortLease::pick()?;
        let path = |name: &str| certs.path().join(name).display().to_string();
        let port = tls_port.port().to_string();
        let server = RedisServer::start_with_args(&[
            "--tls-port",
            &port,
            "--tls-cert-file",
            &path(CERT_FILE),
            "--tls-key-file",
            &path(KEY_FILE),
            "--tls-ca-cert-file",
            &path(CA_FILE),
            "--tls-auth-clients",
            "no",
        ])?;
        Ok(TlsRedis {
            server,
            url: format!("rediss://127.0.0.1:{port}/"),
            tls_port,
            certs,
        })
    }

    /// `rediss://127.0.0.1:<tls port>/`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The TLS port.
    pub fn tls_port(&self) -> u16 {
        self.tls_port.port()
    }

    /// The PEM file of the CA that signed the server's certificate.
    pub fn ca_path(&self) -> PathBuf {
        self.certs.path().join(CA_FILE)
    }

    /// The PEM file of a CA that signed nothing this server presents.
    pub fn other_ca_path(&self) -> PathBuf {
        self.certs.path().join(OTHER_CA_FILE)
    }

    /// The server, for admin commands on its plain port and its controls.
    pub fn server(&self) -> &RedisServer {
        &self.server
    }

    /// The server, mutably (stop, restart, pause).
    pub fn server_mut(&mut self) -> &mut RedisServer {
        &mut self.server
    }
}

/// A CA's parameters: a CA with the usages a TLS verifier checks.
fn ca_params(name: &str) -> Result<CertificateParams, rcgen::Error> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    Ok(params)
}

/// Writes the CA, a second unrelated CA, and the server's certificate and
/// key into `dir`.
fn write_certificates(dir: &Path) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let ca_key = KeyPair::generate()?;
    let ca = ca_params("lease-testkit CA")?;
    fs::write(dir.join(CA_FILE), ca.self_signed(&ca_key)?.pem())?;
    let issuer = Issuer::new(ca, ca_key);

    let other_key = KeyPair::generate()?;
    let other = ca_params("lease-testkit unrelated CA")?.self_signed(&other_key)?;
    fs::write(dir.join(OTHER_CA_FILE), other.pem())?;

    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])?;
    params
        .distinguished_name
        .push(DnType::CommonName, "lease-testkit redis-server");
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params.signed_by(&key, &issuer)?;
    fs::write(dir.join(CERT_FILE), cert.pem())?;
    fs::write(dir.join(KEY_FILE), key.serialize_pem())?;
    Ok(())
}
