//! The server's address as `berth daemon --server` takes it: `https://host[:port]`, or
//! `http://` to a loopback address.
//!
//! Parsed by `http`'s URI parser (the one hyper sends with), then held to what a base
//! URL may be: a scheme, a host and a port, nothing else. Plain `http://` is refused
//! for any host that is not loopback: the daemon's token and every transcript would
//! cross the network in clear.

use hyper::Uri;
use std::fmt;
use std::net::IpAddr;

/// A server base URL. The port defaults to 443 for https and 80 for http.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerUrl {
    tls: bool,
    /// As written in the URL, lower-cased; an IPv6 address keeps its brackets.
    host: String,
    port: u16,
}

/// Why a `--server` value is not a usable URL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error(
        "{url} is plain http to {host}, which is not a loopback address: the daemon token and every transcript would cross the network in clear"
    )]
    PlainHttp { url: String, host: String },
    #[error("{url} is not an https:// (or loopback http://) URL")]
    Scheme { url: String },
    #[error("{url} has more than scheme, host and port ({rest:?})")]
    Extra { url: String, rest: String },
    #[error("{url} has no valid host")]
    Host { url: String },
    #[error("{url} has no valid port")]
    Port { url: String },
    #[error("{url} is not a URL: {why}")]
    Syntax { url: String, why: String },
}

impl UrlError {
    /// What to do instead.
    pub fn hint(&self) -> &'static str {
        match self {
            UrlError::PlainHttp { .. } => {
                "serve the server over TLS (berth serve --tls-cert FILE --tls-key FILE, or berth-server's) and pass --server https://HOST:PORT (--ca-file FILE for a private CA), or tunnel over ssh (ssh -L 4733:127.0.0.1:4733 server) and pass --server http://127.0.0.1:4733"
            }
            UrlError::Scheme { .. }
            | UrlError::Extra { .. }
            | UrlError::Host { .. }
            | UrlError::Port { .. }
            | UrlError::Syntax { .. } => {
                "pass the server's listener as https://HOST:PORT, e.g. --server https://berth.example.com:4733"
            }
        }
    }
}

/// Whether `host` (as in a URL: brackets around IPv6) is this machine.
fn is_loopback(host: &str) -> bool {
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    host == "localhost"
        || host.ends_with(".localhost")
        || bare.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

impl ServerUrl {
    /// Parses `https://host[:port][/]` or `http://` to loopback; refuses user info,
    /// paths, queries and fragments.
    pub fn parse(text: &str) -> Result<ServerUrl, UrlError> {
        let url = text.trim().to_owned();
        let lower = url.to_ascii_lowercase();
        let tls = if lower.starts_with("https://") {
            true
        } else if lower.starts_with("http://") {
            false
        } else {
            return Err(UrlError::Scheme { url });
        };
        let after = &url[if tls { 8 } else { 7 }..];
        if let Some(i) = after.find(['@', '?', '#']) {
            return Err(UrlError::Extra {
                rest: after[i..].to_owned(),
                url,
            });
        }
        let uri: Uri = url.parse().map_err(|e: hyper::http::uri::InvalidUri| {
            let why = e.to_string();
            if why.contains("port") {
                UrlError::Port { url: url.clone() }
            } else {
                UrlError::Syntax {
                    url: url.clone(),
                    why,
                }
            }
        })?;
        let path = uri.path();
        if !(path.is_empty() || path == "/") {
            return Err(UrlError::Extra {
                rest: path.to_owned(),
                url,
            });
        }
        let authority = uri
            .authority()
            .ok_or_else(|| UrlError::Host { url: url.clone() })?;
        let host = authority.host().to_ascii_lowercase();
        let host_ok = if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            v6.parse::<std::net::Ipv6Addr>().is_ok()
        } else {
            !host.is_empty()
                && host
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
        };
        if !host_ok {
            return Err(UrlError::Host { url });
        }
        // The port's own text: `Authority::port` gives none for one past 65535.
        let port_text = authority.as_str()[authority.host().len()..].strip_prefix(':');
        let port = match port_text {
            None if tls => 443,
            None => 80,
            Some(p) => match p.parse::<u16>() {
                Ok(n) if n > 0 && p.chars().all(|c| c.is_ascii_digit()) => n,
                _ => return Err(UrlError::Port { url }),
            },
        };
        if !tls && !is_loopback(&host) {
            return Err(UrlError::PlainHttp { url, host });
        }
        Ok(ServerUrl { tls, host, port })
    }

    /// Whether the server is reached over TLS.
    pub fn is_tls(&self) -> bool {
        self.tls
    }

    /// `host:port`.
    pub fn authority(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

impl fmt::Display for ServerUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.tls { "https" } else { "http" };
        write!(f, "{scheme}://{}:{}", self.host, self.port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_https_anywhere_and_http_on_loopback() {
        let cases = [
            ("https://berth.example.com", "https://berth.example.com:443"),
            ("https://10.0.0.5:4733/", "https://10.0.0.5:4733"),
            (
                "  HTTPS://Build-Box.lan:8443 ",
                "https://build-box.lan:8443",
            ),
            ("http://127.0.0.1:4733", "http://127.0.0.1:4733"),
            ("http://127.0.0.1:4733/", "http://127.0.0.1:4733"),
            ("http://localhost", "http://localhost:80"),
            ("http://[::1]:4733", "http://[::1]:4733"),
            ("http://127.8.9.10:1", "http://127.8.9.10:1"),
            ("https://[2001:db8::1]:4733", "https://[2001:db8::1]:4733"),
        ];
        for (input, want) in cases {
            let u = ServerUrl::parse(input).unwrap_or_else(|e| panic!("{input}: {e}"));
            assert_eq!(u.to_string(), want, "{input}");
        }
    }

    #[test]
    fn refuses_plain_http_off_loopback_and_everything_but_host_and_port() {
        for input in [
            "http://10.0.0.5:4733",
            "http://berth.example.com",
            "http://[2001:db8::1]:4733",
            "http://0.0.0.0:4733",
            "http://localhost.example.com:1",
        ] {
            let e = ServerUrl::parse(input).expect_err(input);
            assert!(matches!(e, UrlError::PlainHttp { .. }), "{input}: {e:?}");
            assert!(e.hint().contains("--tls-cert"), "{}", e.hint());
        }
        let bad = [
            ("ftp://x:1", "scheme"),
            ("127.0.0.1:4733", "scheme"),
            ("https://x:1/api", "extra"),
            ("https://x:1?a=b", "extra"),
            ("https://user@x:1", "extra"),
            ("https://x:1#f", "extra"),
            ("https://:4733", "host"),
            ("https://[::1", "syntax"),
            ("https://[zz::1]:1", "host"),
            ("https://x:0", "port"),
            ("https://x:65536", "port"),
            ("https://x:", "port"),
            ("https://x y:1", "syntax"),
        ];
        for (input, kind) in bad {
            let got = match ServerUrl::parse(input) {
                Err(UrlError::Scheme { .. }) => "scheme",
                Err(UrlError::Extra { .. }) => "extra",
                Err(UrlError::Host { .. }) => "host",
                Err(UrlError::Port { .. }) => "port",
                Err(UrlError::Syntax { .. }) => "syntax",
                Err(UrlError::PlainHttp { .. }) => "plain",
                Ok(_) => "ok",
            };
            assert_eq!(got, kind, "{input}");
        }
    }
}
