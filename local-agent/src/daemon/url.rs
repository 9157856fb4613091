//! The server's address as `berth daemon --server` takes it: plain `http://host:port`.
//!
//! There is no TLS client in the tree, so an `https://` URL is refused up front with a
//! way out (a local TLS-terminating proxy, or an ssh tunnel) rather than failing later
//! with a confusing connection error.

use std::fmt;

/// A server base URL: `http://HOST[:PORT]` with nothing after it (a trailing `/` is
/// allowed). The port defaults to 80.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerUrl {
    /// As written in the URL; an IPv6 address keeps its brackets.
    host: String,
    port: u16,
}

/// Why a `--server` value is not a usable URL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error("{url} uses TLS, which berth daemon cannot speak")]
    Tls { url: String },
    #[error("{url} is not an http:// URL")]
    Scheme { url: String },
    #[error("{url} has more than host and port ({rest:?})")]
    Extra { url: String, rest: String },
    #[error("{url} has no valid host")]
    Host { url: String },
    #[error("{url} has no valid port")]
    Port { url: String },
}

impl UrlError {
    /// What to do instead.
    pub fn hint(&self) -> &'static str {
        match self {
            UrlError::Tls { .. } => {
                "terminate TLS in a local proxy and pass its http://127.0.0.1:PORT, or tunnel \
                 over ssh (ssh -L 4733:127.0.0.1:4733 server) and pass --server http://127.0.0.1:4733"
            }
            UrlError::Scheme { .. }
            | UrlError::Extra { .. }
            | UrlError::Host { .. }
            | UrlError::Port { .. } => {
                "pass the server's listener as http://HOST:PORT, e.g. --server http://10.0.0.5:4733"
            }
        }
    }
}

impl ServerUrl {
    /// Parses `http://host[:port][/]`; refuses `https://`, user info, paths, queries.
    pub fn parse(text: &str) -> Result<ServerUrl, UrlError> {
        let url = text.trim().to_owned();
        let lower = url.to_ascii_lowercase();
        if lower.starts_with("https://") {
            return Err(UrlError::Tls { url });
        }
        if !lower.starts_with("http://") {
            return Err(UrlError::Scheme { url });
        }
        let rest = &url["http://".len()..];
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if let Some(i) = rest.find(['/', '?', '#', '@']) {
            return Err(UrlError::Extra {
                rest: rest[i..].to_owned(),
                url,
            });
        }
        let (host, port) = if let Some(v6) = rest.strip_prefix('[') {
            let Some((addr, after)) = v6.split_once(']') else {
                return Err(UrlError::Host { url });
            };
            if addr.is_empty() || !addr.chars().all(|c| c.is_ascii_hexdigit() || c == ':') {
                return Err(UrlError::Host { url });
            }
            let port = match after {
                "" => None,
                p => match p.strip_prefix(':') {
                    Some(p) => Some(p),
                    None => return Err(UrlError::Port { url }),
                },
            };
            (format!("[{addr}]"), port)
        } else {
            match rest.rsplit_once(':') {
                Some((h, p)) => (h.to_owned(), Some(p)),
                None => (rest.to_owned(), None),
            }
        };
        let host_ok = host.starts_with('[')
            || (!host.is_empty()
                && host
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_')));
        if !host_ok {
            return Err(UrlError::Host { url });
        }
        let port = match port {
            None => 80,
            Some(p) => match p.parse::<u16>() {
                Ok(n) if n > 0 && p.chars().all(|c| c.is_ascii_digit()) => n,
                _ => return Err(UrlError::Port { url }),
            },
        };
        Ok(ServerUrl {
            host: host.to_ascii_lowercase(),
            port,
        })
    }

    /// `host:port`, for the `Host` header.
    pub fn authority(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    /// The host to connect to (brackets removed from an IPv6 address) and the port.
    pub fn connect_to(&self) -> (String, u16) {
        let host = self
            .host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(&self.host);
        (host.to_owned(), self.port)
    }
}

impl fmt::Display for ServerUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http://{}:{}", self.host, self.port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str) -> (String, String) {
        let u = ServerUrl::parse(text).expect(text);
        (u.to_string(), u.authority())
    }

    #[test]
    fn accepts_host_and_port() {
        let cases = [
            ("http://127.0.0.1:4733", "http://127.0.0.1:4733"),
            ("http://127.0.0.1:4733/", "http://127.0.0.1:4733"),
            ("  HTTP://Build-Box.lan:8080 ", "http://build-box.lan:8080"),
            ("http://server", "http://server:80"),
            ("http://[::1]:4733", "http://[::1]:4733"),
        ];
        for (input, want) in cases {
            assert_eq!(ok(input).0, want, "{input}");
        }
        assert_eq!(
            ServerUrl::parse("http://[::1]:4733")
                .map(|u| u.connect_to())
                .ok(),
            Some(("::1".to_owned(), 4733))
        );
    }

    #[test]
    fn refuses_tls_and_everything_but_host_and_port() {
        let tls = ServerUrl::parse("https://berth.example.com");
        assert_eq!(
            tls,
            Err(UrlError::Tls {
                url: "https://berth.example.com".into()
            })
        );
        assert!(tls.err().is_some_and(|e| e.hint().contains("ssh")));
        let bad = [
            ("ftp://x:1", "scheme"),
            ("127.0.0.1:4733", "scheme"),
            ("http://x:1/api", "extra"),
            ("http://x:1?a=b", "extra"),
            ("http://user@x:1", "extra"),
            ("http://:4733", "host"),
            ("http://x y:1", "host"),
            ("http://[::1", "host"),
            ("http://x:0", "port"),
            ("http://x:65536", "port"),
            ("http://x:+1", "port"),
            ("http://x:", "port"),
            ("http://[::1]4733", "port"),
        ];
        for (input, kind) in bad {
            let got = match ServerUrl::parse(input) {
                Err(UrlError::Scheme { .. }) => "scheme",
                Err(UrlError::Extra { .. }) => "extra",
                Err(UrlError::Host { .. }) => "host",
                Err(UrlError::Port { .. }) => "port",
                Err(UrlError::Tls { .. }) => "tls",
                Ok(_) => "ok",
            };
            assert_eq!(got, kind, "{input}");
        }
    }
}
