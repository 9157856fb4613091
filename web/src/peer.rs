//! Who is at the other end of one of Berth's sockets, as the server's listeners use it.
//!
//! The looking (a peer's seccomp filters, the TCP tables, [`refuse`]) lives in
//! `berth-host` ([`berth_host::peer`]), where the runner reaches it too (the fence
//! counts the same filters); it is re-exported here. What stays is the server's own:
//! [`Checked`], the unix listener that applies [`refuse`] on every accept and serves
//! as axum's listener.

pub use berth_host::peer::{peer_is_fenced, refuse, seccomp_filters, tcp};

use tokio::net::{UnixListener, UnixStream};

/// A unix listener that closes, on accept, every connection [`refuse`] refuses.
#[derive(Debug)]
pub struct Checked {
    listener: UnixListener,
    /// The socket, for the log.
    name: String,
}

impl Checked {
    pub fn new(listener: UnixListener, name: impl Into<String>) -> Checked {
        Checked {
            listener,
            name: name.into(),
        }
    }

    /// The next connection from a peer that is not fenced.
    pub async fn accept(&mut self) -> std::io::Result<(UnixStream, tokio::net::unix::SocketAddr)> {
        loop {
            let (stream, addr) = self.listener.accept().await?;
            if refuse(&stream, &self.name) {
                drop(stream);
                continue;
            }
            return Ok((stream, addr));
        }
    }
}

impl axum::serve::Listener for Checked {
    type Io = UnixStream;
    type Addr = tokio::net::unix::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match Checked::accept(self).await {
                Ok(accepted) => return accepted,
                // As axum's own listener does: a failed accept (out of descriptors)
                // is retried after a pause.
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(50)).await,
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.listener.local_addr()
    }
}
