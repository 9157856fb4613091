//! Berth's network edge: the one pooled HTTP client every outgoing call uses (chat
//! platforms, the daemon link), TLS for it and for the listeners.

pub mod client;
pub mod listener;
pub mod tls;

pub use client::{Body, ClientOptions, HttpClient, SendError};

/// Percent-encodes one URL path segment (an id, a prefix, a name: user input).
pub fn encode(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for b in segment.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
