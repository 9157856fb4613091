//! `berth daemon`: this machine as a remote executor of a Berth server.
//!
//! The daemon registers with the server, long-polls it for tasks that resolve to this
//! machine, runs them on the [`NativeExecutor`] exactly as `berth serve` would, and
//! streams their events back (the protocol is `berth_web::daemon::wire`). It also
//! serves this home's control socket, so the CLI here works against it as against
//! `berth serve`: requests go to the server, except that every directory is validated
//! here, natively, before the server hears of it ([`proxy`]).
//!
//! Startup order: home and single-instance lock (a home runs a server or a daemon,
//! never both), machine id, executor and its crash recovery, control socket, then
//! registration. Nothing is claimed before leftover journals are replayed.

pub mod backoff;
mod link;
pub mod machine;
pub mod outbox;
pub mod proxy;
pub mod remote;
mod state;
mod task;
pub mod url;

use crate::config::ExecutorConfig;
use crate::run::{ExecutorError, NativeExecutor};
use berth_core::SOCKET_FILE;
use berth_web::executor::Executor;
use berth_web::server::{InstanceLock, ServerError};
use state::Daemon;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use url::ServerUrl;

/// How many tasks run at once unless told otherwise.
pub const DEFAULT_MAX_TASKS: usize = 8;
/// After a stop, how long running tasks get to report their outcomes.
pub const SEND_WAIT: Duration = Duration::from_secs(5);
/// After a stop, the longest to wait for agents to stop and directories to be
/// restored (the executor's grace period is 3 s).
pub const RESTORE_WAIT: Duration = Duration::from_secs(60);

/// What `berth daemon` was asked to do.
#[derive(Debug, Clone)]
pub struct DaemonOptions {
    pub server: ServerUrl,
    pub token: String,
    /// The machine's human name; default the host name.
    pub name: Option<String>,
    /// Claim with `wait_ms: 0` every this often instead of long-polling (benchmarks).
    pub poll: Option<Duration>,
    /// Tasks run at once (at least 1).
    pub max_tasks: usize,
    /// The client every call to the server goes through (TLS roots, private CA,
    /// keep-alive).
    pub http: berth_web::net::HttpClient,
}

/// Why the daemon could not start or had to stop.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    MachineId(#[from] machine::MachineIdError),
    #[error(transparent)]
    Lock(#[from] ServerError),
    #[error("cannot start the executor: {0}")]
    Executor(#[from] ExecutorError),
    #[error("cannot serve the control socket {path}: {source}")]
    Socket {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("something already answers on {path}")]
    SocketInUse { path: PathBuf },
    #[error("the server at {url} refused the daemon token ({message})")]
    TokenRefused { url: String, message: String },
    #[error("the server at {url} does not take daemons ({message})")]
    NotADaemonServer { url: String, message: String },
    #[error("{problem} ({url})")]
    Tls { url: String, problem: String },
}

impl DaemonError {
    /// What to do about it.
    pub fn hint(&self) -> String {
        match self {
            DaemonError::MachineId(e) => e.hint().to_owned(),
            DaemonError::Lock(ServerError::AlreadyRunning { .. }) => {
                "stop the other `berth serve` or `berth daemon` on this home, or use another --home"
                    .to_owned()
            }
            DaemonError::Lock(_) | DaemonError::Executor(_) | DaemonError::Socket { .. } => {
                "check the permissions of Berth's home (--home / BERTH_HOME) and BERTH_LOCK_DIR"
                    .to_owned()
            }
            DaemonError::SocketInUse { .. } => {
                "another berth answers on this home's socket; stop it first".to_owned()
            }
            DaemonError::TokenRefused { .. } => {
                "create one on the server with `berth daemon token create NAME` and pass it in BERTH_DAEMON_TOKEN (or --token-file FILE)"
                    .to_owned()
            }
            DaemonError::NotADaemonServer { .. } => {
                "start the server with `berth serve --allow-daemons` (or run berth-server), and pass its listener's URL"
                    .to_owned()
            }
            DaemonError::Tls { .. } => {
                "if the server's certificate comes from a private CA, pass that CA with --ca-file FILE (or BERTH_CA_FILE), PEM; check that the host name in --server is one the certificate names"
                    .to_owned()
            }
        }
    }
}

/// Runs the daemon until `stop` resolves (SIGINT/SIGTERM in the CLI) or the server
/// refuses the token. On a stop, claiming ends, running agents are cancelled (their
/// directories restored), their outcomes are sent for up to [`SEND_WAIT`], and the
/// socket file is removed.
pub async fn run(
    mut config: ExecutorConfig,
    opts: DaemonOptions,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Result<(), DaemonError> {
    let home = config.berth_home.clone();
    machine::ensure_home(&home)?;
    let _lock = InstanceLock::acquire(&home)?;
    let machine_id = machine::load_or_create(&home)?;
    config.machine_id = machine_id.clone();
    if let Some(name) = opts.name.clone() {
        config.machine_name = name;
    }
    let name = config.machine_name.clone();
    let executor = NativeExecutor::new(config)?;
    println!("berth daemon (pid {})", std::process::id());
    println!("  home            {}", home.display());
    println!("  machine         {name} ({machine_id})");
    let recovering = executor.clone();
    let notes = tokio::task::spawn_blocking(move || recovering.recover())
        .await
        .unwrap_or_else(|e| vec![format!("executor recovery failed: {e}")]);
    for note in notes {
        println!("{note}");
    }
    let socket = home.join(SOCKET_FILE);
    let listener = proxy::bind(&socket).await?;
    println!("  control socket  {}", socket.display());

    let remote = remote::Remote::new(
        opts.server.clone(),
        opts.token.clone(),
        machine_id,
        opts.http.clone(),
    );
    let max_tasks = opts.max_tasks.max(1);
    let daemon = Arc::new(Daemon::new(remote, executor, name, max_tasks));
    let serving = tokio::spawn(proxy::serve(daemon.clone(), listener));
    let stopper = daemon.clone();
    let signal = tokio::spawn(async move {
        stop.await;
        stopper.stop();
    });

    let outcome = match daemon.register_at_start().await {
        Ok(()) => {
            let beat = tokio::spawn(link::heartbeats(daemon.clone()));
            link::claims(daemon.clone(), opts.poll).await;
            eprintln!(
                "berth daemon: stopping (running agents are stopped and their directories restored)"
            );
            daemon.drain().await;
            beat.abort();
            daemon.fatal()
        }
        Err(e) => Err(e),
    };
    signal.abort();
    serving.abort();
    let _ = std::fs::remove_file(&socket);
    if outcome.is_ok() {
        println!("berth daemon: stopped");
    }
    outcome
}
