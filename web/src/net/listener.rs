//! The TCP listeners Berth serves HTTP on, plain or TLS.
//!
//! A TLS listener completes each handshake in its own task (with a time limit), so a
//! slow or silent client never holds up the next connection, and hands finished
//! streams to the server. A client speaking plain HTTP to it gets a short `400`
//! saying the port speaks https, instead of a silent close.

use axum::serve::Listener;
use rustls::ServerConfig;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// How long a client has to finish the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// What a plain-HTTP request on a TLS port is answered.
const PLAIN_ON_TLS: &[u8] = b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: 60\r\n\r\nthis port speaks https:// only; use https:// in the address\n";

/// A listener of the web API: plain TCP, or TLS over it.
#[derive(Debug)]
pub enum WebListener {
    Plain(TcpListener),
    Tls(TlsListener),
}

impl WebListener {
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        match self {
            WebListener::Plain(l) => l.local_addr(),
            WebListener::Tls(l) => Ok(l.addr),
        }
    }

    /// `https` or `http`.
    pub fn scheme(&self) -> &'static str {
        match self {
            WebListener::Plain(_) => "http",
            WebListener::Tls(_) => "https",
        }
    }
}

/// TLS over a TCP listener. See the module documentation.
#[derive(Debug)]
pub struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    addr: SocketAddr,
    acceptor: tokio::task::JoinHandle<()>,
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.acceptor.abort();
    }
}

impl TlsListener {
    pub fn new(tcp: TcpListener, config: ServerConfig) -> io::Result<TlsListener> {
        let addr = tcp.local_addr()?;
        let tls = TlsAcceptor::from(Arc::new(config));
        let (tx, ready) = mpsc::channel(64);
        let acceptor = tokio::spawn(async move {
            loop {
                let (stream, peer) = match tcp.accept().await {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::debug!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                };
                if tx.is_closed() {
                    return;
                }
                let _ = stream.set_nodelay(true);
                let (tls, tx) = (tls.clone(), tx.clone());
                tokio::spawn(async move {
                    if let Some(stream) = handshake(&tls, stream, peer).await {
                        let _ = tx.send((stream, peer)).await;
                    }
                });
            }
        });
        Ok(TlsListener {
            ready,
            addr,
            acceptor,
        })
    }
}

async fn handshake(
    tls: &TlsAcceptor,
    mut stream: TcpStream,
    peer: SocketAddr,
) -> Option<TlsStream<TcpStream>> {
    // A TLS client speaks first with a handshake record (0x16); a letter is plain HTTP.
    let mut first = [0u8; 1];
    let peeked = tokio::time::timeout(HANDSHAKE_TIMEOUT, stream.peek(&mut first)).await;
    if let Ok(Ok(1)) = peeked
        && first[0].is_ascii_alphabetic()
    {
        let _ = stream.write_all(PLAIN_ON_TLS).await;
        let _ = stream.shutdown().await;
        tracing::debug!(%peer, "plain HTTP on the TLS listener: refused");
        return None;
    }
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.accept(stream)).await {
        Ok(Ok(s)) => Some(s),
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "TLS handshake failed");
            None
        }
        Err(_) => {
            tracing::debug!(%peer, "TLS handshake timed out");
            None
        }
    }
}

impl Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(c) => c,
            // The acceptor ended: nothing more will come.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.addr)
    }
}
