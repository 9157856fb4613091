//! The TCP listeners Berth serves HTTP on, plain or TLS.
//!
//! Both accept in a task of their own and give each connection a task of its own,
//! which first closes it if its peer is a fenced agent on this machine
//! ([`crate::peer::tcp`]: lookups in `/proc`, on the blocking pool, never on the
//! accept loop), then, for TLS, completes the handshake (with a time limit), so a slow
//! or silent client never holds up the next connection; finished streams go to the
//! server. A client speaking plain HTTP to a TLS listener gets a short `400` saying the
//! port speaks https, instead of a silent close.

use axum::serve::Listener;
use rustls::ServerConfig;
use std::future::Future;
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

/// A listener of the web API: plain TCP, or TLS over it. A plain one is served
/// through [`PlainListener`], so both refuse a fenced peer.
#[derive(Debug)]
pub enum WebListener {
    Plain(TcpListener),
    Tls(TlsListener),
}

impl WebListener {
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        match self {
            WebListener::Plain(l) => l.local_addr(),
            WebListener::Tls(l) => Ok(l.0.addr),
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

/// The connections of a TCP listener whose peer is not a fenced agent
/// ([`crate::peer::tcp::refuse`]), each made ready by `admit` in its own task (see the
/// module documentation). The one home of that check for every TCP listener that
/// serves the API.
struct Admitted<T> {
    ready: mpsc::Receiver<(T, SocketAddr)>,
    addr: SocketAddr,
    acceptor: tokio::task::JoinHandle<()>,
}

impl<T> std::fmt::Debug for Admitted<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admitted")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl<T> Drop for Admitted<T> {
    fn drop(&mut self) {
        self.acceptor.abort();
    }
}

impl<T: Send + 'static> Admitted<T> {
    fn spawn<F, Fut>(tcp: TcpListener, admit: F) -> io::Result<Admitted<T>>
    where
        F: Fn(TcpStream, SocketAddr) -> Fut + Clone + Send + 'static,
        Fut: Future<Output = Option<T>> + Send + 'static,
    {
        let addr = tcp.local_addr()?;
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
                // Small writes (an SSE event, an answer's last bytes) go out at once,
                // never held for the peer's delayed ACK.
                let _ = stream.set_nodelay(true);
                let (admit, tx) = (admit.clone(), tx.clone());
                tokio::spawn(async move {
                    if crate::peer::tcp::refuse(&stream).await {
                        return;
                    }
                    if let Some(io) = admit(stream, peer).await {
                        let _ = tx.send((io, peer)).await;
                    }
                });
            }
        });
        Ok(Admitted {
            ready,
            addr,
            acceptor,
        })
    }

    async fn next(&mut self) -> (T, SocketAddr) {
        match self.ready.recv().await {
            Some(c) => c,
            // The acceptor ended: nothing more will come.
            None => std::future::pending().await,
        }
    }
}

/// Plain HTTP over a TCP listener, a fenced peer refused. See the module documentation.
#[derive(Debug)]
pub struct PlainListener(Admitted<TcpStream>);

impl PlainListener {
    pub fn new(tcp: TcpListener) -> io::Result<PlainListener> {
        Admitted::spawn(tcp, |stream, _| async move { Some(stream) }).map(PlainListener)
    }
}

impl Listener for PlainListener {
    type Io = TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        self.0.next().await
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.0.addr)
    }
}

/// TLS over a TCP listener, a fenced peer refused before its handshake. See the module
/// documentation.
#[derive(Debug)]
pub struct TlsListener(Admitted<TlsStream<TcpStream>>);

impl TlsListener {
    pub fn new(tcp: TcpListener, config: ServerConfig) -> io::Result<TlsListener> {
        let tls = TlsAcceptor::from(Arc::new(config));
        Admitted::spawn(tcp, move |stream, peer| {
            let tls = tls.clone();
            async move { handshake(&tls, stream, peer).await }
        })
        .map(TlsListener)
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
        self.0.next().await
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.0.addr)
    }
}
