//! TLS for Berth's outgoing calls and its listeners: rustls with the `ring` provider.
//!
//! `ring` rather than `aws-lc-rs` (rustls' default) because aws-lc-rs builds a large C
//! library with cmake, minutes on a two-core machine; `ring` needs only a C compiler
//! and builds in seconds, and offers the same TLS 1.2/1.3 suites Berth needs.
//!
//! Outgoing calls trust the system's roots (`rustls-native-certs`: the OS store, or
//! `SSL_CERT_FILE`/`SSL_CERT_DIR`) plus, when given, a private CA (`BERTH_CA_FILE`,
//! `--ca-file`, `ca_file` in the user settings). Listeners take a PEM certificate chain
//! and key (`--tls-cert`, `--tls-key`).

use rustls::crypto::CryptoProvider;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The environment variable naming a private CA (PEM) trusted for every outgoing call.
pub const CA_FILE_ENV: &str = "BERTH_CA_FILE";

/// A certificate, key or CA file Berth could not use.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {what} {path}: {source}")]
    Read {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{what} {path} holds no PEM {expected}")]
    Empty {
        what: &'static str,
        path: PathBuf,
        expected: &'static str,
    },
    #[error("{what} {path} is not usable: {message}")]
    Invalid {
        what: &'static str,
        path: PathBuf,
        message: String,
    },
    #[error("the TLS configuration cannot be built: {0}")]
    Config(String),
}

impl TlsError {
    /// What to do about it.
    pub fn hint(&self) -> &'static str {
        match self {
            TlsError::Read { .. } => "check the path and its permissions",
            TlsError::Empty { .. } | TlsError::Invalid { .. } => {
                "give PEM files: the certificate chain (-----BEGIN CERTIFICATE-----) and its private key (-----BEGIN PRIVATE KEY----- or an RSA/EC key)"
            }
            TlsError::Config(_) => "check the certificate and key belong together",
        }
    }
}

/// The crypto provider every configuration uses (never the process default, so two
/// providers linked in by accident cannot make Berth fail at run time).
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        what,
        path: path.to_owned(),
        source,
    })
}

/// The certificates of a PEM file (a CA, or a chain).
pub fn certificates(
    what: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read(what, path)?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::Invalid {
            what,
            path: path.to_owned(),
            message: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::Empty {
            what,
            path: path.to_owned(),
            expected: "certificate",
        });
    }
    Ok(certs)
}

/// The roots outgoing calls trust: the system's, plus `extra_ca`'s certificates.
/// The system's roots. Linux and others: the OS store (`SSL_CERT_FILE`/`SSL_CERT_DIR`,
/// else the distribution's bundle). macOS: the PEM bundle the system keeps at
/// `/etc/ssl/cert.pem` (or `SSL_CERT_FILE`), read as a file: the keychain would need
/// Apple's Security framework, which a cross-compiled build cannot link.
#[cfg(not(target_os = "macos"))]
fn system_roots() -> Vec<rustls_pki_types::CertificateDer<'static>> {
    rustls_native_certs::load_native_certs().certs
}

#[cfg(target_os = "macos")]
fn system_roots() -> Vec<rustls_pki_types::CertificateDer<'static>> {
    let file = std::env::var_os("SSL_CERT_FILE")
        .filter(|v| !v.is_empty())
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from("/etc/ssl/cert.pem"));
    certificates("the system's CA bundle", &file).unwrap_or_default()
}

/// Returns the store and how many system roots were found.
pub fn roots(extra_ca: Option<&Path>) -> Result<(RootCertStore, usize), TlsError> {
    let mut store = RootCertStore::empty();
    let (system, _ignored) = store.add_parsable_certificates(system_roots());
    if let Some(path) = extra_ca {
        for cert in certificates("the CA file", path)? {
            store.add(cert).map_err(|e| TlsError::Invalid {
                what: "the CA file",
                path: path.to_owned(),
                message: e.to_string(),
            })?;
        }
    }
    Ok((store, system))
}

/// The client configuration of every outgoing call: HTTP/1.1 over TLS 1.2 or 1.3,
/// verified against [`roots`].
pub fn client_config(extra_ca: Option<&Path>) -> Result<ClientConfig, TlsError> {
    let (roots, _) = roots(extra_ca)?;
    // ALPN is the connector's business (it offers what it enables: HTTP/1.1).
    Ok(ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// A listener's configuration from a PEM certificate chain and private key.
pub fn server_config(cert: &Path, key: &Path) -> Result<ServerConfig, TlsError> {
    let chain = certificates("the certificate file", cert)?;
    let key_bytes = read("the key file", key)?;
    let key = PrivateKeyDer::from_pem_slice(&key_bytes).map_err(|e| TlsError::Invalid {
        what: "the key file",
        path: key.to_owned(),
        message: e.to_string(),
    })?;
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| TlsError::Config(e.to_string()))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// The TLS failure behind an error, if there is one: the certificate problem or
/// handshake failure, as one line. Walks the whole `source` chain, looking inside I/O
/// errors too (where connectors put rustls' errors).
pub fn tls_problem(err: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = next {
        if let Some(t) = e.downcast_ref::<rustls::Error>() {
            return Some(describe(t));
        }
        // An I/O error's `source()` skips the error it wraps (connectors wrap rustls'
        // error in one, sometimes twice): look at the wrapped error itself.
        next = match e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => e.source(),
        };
    }
    None
}

/// Whether a TLS failure is about the peer's certificate (as opposed to, say, a
/// protocol mismatch), judged from [`tls_problem`]'s text.
pub fn is_certificate_problem(problem: &str) -> bool {
    problem.contains("certificate")
}

fn describe(e: &rustls::Error) -> String {
    use rustls::CertificateError as C;
    // rustls' errors are non-exhaustive: name the common certificate problems, and
    // say anything else as rustls does.
    let rustls::Error::InvalidCertificate(cert) = e else {
        return format!("TLS failed: {e}");
    };
    let why = if matches!(cert, C::UnknownIssuer) {
        "it is signed by an unknown issuer".to_owned()
    } else if matches!(cert, C::NotValidForName | C::NotValidForNameContext { .. }) {
        "it is not valid for this host name".to_owned()
    } else if matches!(cert, C::Expired | C::ExpiredContext { .. }) {
        "it has expired".to_owned()
    } else {
        format!("{cert:?}")
    };
    format!("the server's certificate is not trusted: {why}")
}
