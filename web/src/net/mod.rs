//! Berth's network edge: the one pooled HTTP client every outgoing call uses (chat
//! platforms, the daemon link), TLS for it and for the listeners.

pub mod client;
pub mod listener;
pub mod tls;

pub use client::{Body, ClientOptions, HttpClient, SendError};
