//! A throwaway PKI made inside the tests, and a small https server for fakes.
//!
//! [`Pki::generate`] writes a CA (`ca.pem`) and a server certificate for `localhost`,
//! `127.0.0.1` and `::1` signed by it (`cert.pem`, `key.pem`). Nothing is taken from
//! the machine's trust store: a client trusts these only when given `ca.pem`.
//!
//! [`HttpsFake`] serves HTTP/1.1 over rustls on loopback from plain threads (not
//! Berth's own listener code), answering each request with a handler's JSON and
//! recording it, for the chat platforms' fakes.

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The files of one test PKI.
#[derive(Debug, Clone)]
pub struct Pki {
    /// The CA certificate clients are told to trust.
    pub ca: PathBuf,
    /// The server's certificate chain (leaf, then the CA).
    pub cert: PathBuf,
    /// The server's private key.
    pub key: PathBuf,
}

impl Pki {
    /// Makes a CA named `name` and a loopback server certificate in `dir`.
    pub fn generate(dir: &Path, name: &str) -> Pki {
        std::fs::create_dir_all(dir).expect("pki dir");
        let ca_key = KeyPair::generate().expect("CA key");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, format!("{name} test CA"));
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca = CertifiedIssuer::self_signed(ca_params, ca_key).expect("CA certificate");

        let key = KeyPair::generate().expect("server key");
        let mut params = CertificateParams::new(vec![
            "localhost".to_owned(),
            "127.0.0.1".to_owned(),
            "::1".to_owned(),
        ])
        .expect("server params");
        params
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params.signed_by(&key, &ca).expect("server certificate");

        let pki = Pki {
            ca: dir.join("ca.pem"),
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
        };
        std::fs::write(&pki.ca, ca.pem()).expect("write ca.pem");
        std::fs::write(&pki.cert, format!("{}{}", cert.pem(), ca.pem())).expect("cert.pem");
        std::fs::write(&pki.key, key.serialize_pem()).expect("key.pem");
        pki
    }

    /// A rustls server configuration for this PKI's certificate.
    pub fn server_config(&self) -> rustls::ServerConfig {
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&self.cert)
            .expect("cert.pem")
            .collect::<Result<_, _>>()
            .expect("certificates");
        let key = PrivateKeyDer::from_pem_file(&self.key).expect("key.pem");
        rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .expect("server config")
    }

    /// A rustls client configuration that trusts only this PKI's CA.
    pub fn client_config(&self) -> rustls::ClientConfig {
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(&self.ca).expect("ca.pem") {
            roots.add(cert.expect("CA certificate")).expect("add CA");
        }
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth()
    }
}

impl crate::Berth {
    /// `berth serve` over TLS with `pki`'s certificate, on a free loopback port, with
    /// `extra` arguments.
    pub fn serve_tls(&mut self, pki: &Pki, extra: &[&str]) {
        let (cert, key) = (
            pki.cert.to_str().expect("utf-8 path").to_owned(),
            pki.key.to_str().expect("utf-8 path").to_owned(),
        );
        let mut args = vec!["--tls-cert", cert.as_str(), "--tls-key", key.as_str()];
        args.extend_from_slice(extra);
        self.serve_with(&args);
    }
}

/// One request an [`HttpsFake`] received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    pub method: String,
    pub path: String,
    pub authorization: Option<String>,
    pub body: String,
}

type Handler = dyn Fn(&Received) -> String + Send + Sync;

/// An https server on loopback answering every request with `handler`'s JSON.
pub struct HttpsFake {
    port: u16,
    received: Arc<Mutex<Vec<Received>>>,
}

impl std::fmt::Debug for HttpsFake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpsFake")
            .field("port", &self.port)
            .finish()
    }
}

impl HttpsFake {
    pub fn start(
        pki: &Pki,
        handler: impl Fn(&Received) -> String + Send + Sync + 'static,
    ) -> HttpsFake {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the fake");
        let port = listener.local_addr().expect("addr").port();
        let config = Arc::new(pki.server_config());
        let received: Arc<Mutex<Vec<Received>>> = Arc::default();
        let handler: Arc<Handler> = Arc::new(handler);
        let log = received.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(tcp) = conn else { break };
                let (config, handler, log) = (config.clone(), handler.clone(), log.clone());
                std::thread::spawn(move || {
                    let Ok(server) = rustls::ServerConnection::new(config) else {
                        return;
                    };
                    let stream = rustls::StreamOwned::new(server, tcp);
                    serve_connection(stream, &*handler, &log);
                });
            }
        });
        HttpsFake { port, received }
    }

    /// `https://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    pub fn received(&self) -> Vec<Received> {
        self.received.lock().expect("log").clone()
    }
}

/// Serves keep-alive requests on one connection until the client closes it.
fn serve_connection(stream: impl Read + Write, handler: &Handler, log: &Mutex<Vec<Received>>) {
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let (method, path) = match (parts.next(), parts.next()) {
            (Some(m), Some(p)) => (m.to_owned(), p.to_owned()),
            _ => return,
        };
        let (mut length, mut authorization) = (0usize, None);
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((name, value)) = h.split_once(':') {
                match name.trim().to_ascii_lowercase().as_str() {
                    "content-length" => length = value.trim().parse().unwrap_or(0),
                    "authorization" => authorization = Some(value.trim().to_owned()),
                    _ => {}
                }
            }
        }
        let mut body = vec![0u8; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let got = Received {
            method,
            path,
            authorization,
            body: String::from_utf8_lossy(&body).into_owned(),
        };
        let answer = handler(&got);
        log.lock().expect("log").push(got);
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            answer.len()
        );
        let out = reader.get_mut();
        if out.write_all(head.as_bytes()).is_err()
            || out.write_all(answer.as_bytes()).is_err()
            || out.flush().is_err()
        {
            return;
        }
    }
}

/// `GET path` over TLS to `127.0.0.1:port`, trusting `pki`'s CA: (status, body).
pub fn https_get(pki: &Pki, port: u16, path: &str, bearer: &str) -> (u16, String) {
    let text = https_request(
        pki,
        port,
        &format!(
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {bearer}\r\nConnection: close\r\n\r\n"
        ),
    );
    crate::status_and_body(&text)
}

/// Sends `request` as it is over TLS to `127.0.0.1:port`, trusting `pki`'s CA, and
/// returns the whole answer (head and body) as text.
pub fn https_request(pki: &Pki, port: u16, request: &str) -> String {
    let tcp = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    tcp.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .expect("timeout");
    let name = rustls_pki_types::ServerName::try_from("127.0.0.1").expect("name");
    let client =
        rustls::ClientConnection::new(Arc::new(pki.client_config()), name).expect("client");
    let mut stream = rustls::StreamOwned::new(client, tcp);
    stream.write_all(request.as_bytes()).expect("request");
    let raw = berth_test_support::http::read_all(&mut stream, std::time::Duration::from_secs(30));
    String::from_utf8_lossy(&raw).into_owned()
}
