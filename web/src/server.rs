//! Assembling a server: home directory, single-instance guard, store, recovery,
//! scheduler, listeners, `serve.json`, and an orderly shutdown.
//!
//! `berth serve` (the lead's CLI) and `berth-server` both build on [`Server`]; process
//! signals stay with them: on SIGINT/SIGTERM they call [`ShutdownHandle::shutdown`].

use crate::api::{self, AppState};
use crate::executor::Executor;
use crate::hooks::{ChannelConfig, Channels, Replier};
use crate::net::listener::{PlainListener, WebListener};
use crate::scheduler::{Scheduler, SchedulerConfig};
use crate::store::{LockSeen, Recovery, Store, StoreError};
use berth_core::{Context, LocalPath, Platform};
use serde::{Deserialize, Serialize};
use std::fs::{File, TryLockError};
use std::io::{self, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::net::UnixListener;
use tokio::sync::watch;

pub use crate::secret::new_token;

/// The single-instance lock file inside Berth's home.
pub const LOCK_FILE: &str = "serve.lock";
/// The control socket's file name inside Berth's home.
pub use berth_core::SOCKET_FILE;
/// Where a running server says how to reach it.
pub const SERVE_JSON: &str = "serve.json";

/// Why a server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("berth is already running on {home} ({})", match pid { Some(p) => format!("pid {p}"), None => "pid unknown".to_owned() })]
    AlreadyRunning { home: PathBuf, pid: Option<u32> },
    #[error("another server answers on {path}")]
    SocketInUse { path: PathBuf },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Tls(String),
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> ServerError + '_ {
    move |source| ServerError::Io {
        path: path.to_owned(),
        source,
    }
}

/// What `serve.json` holds (mode 0600): how a client or a browser reaches the server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServeInfo {
    /// The web listener's (or `berth-server`'s) base URL, e.g. `http://127.0.0.1:4733`.
    pub url: Option<String>,
    pub token: String,
    pub pid: u32,
    /// The control socket's path (`None` for `berth-server`).
    pub socket: Option<String>,
}

/// Options for [`Server::open`].
#[derive(Clone, Default)]
pub struct ServerOptions {
    /// The embedded executor; `None` for the cloud build.
    pub executor: Option<Arc<dyn Executor>>,
    pub scheduler: SchedulerConfig,
    /// Whose home the web listener's display forms strip; default [`native_context`].
    pub display: Option<Context>,
    /// The chat channels' secrets; `None`: [`ChannelConfig::from_env`] with no settings.
    /// `berth serve` passes `ChannelConfig::from_env(&user_settings.channels)`.
    pub channels: Option<ChannelConfig>,
    /// Accept remote daemons on the web listener (`berth serve --allow-daemons`).
    /// `berth-server` always accepts them.
    pub daemons: Option<crate::daemon::DaemonConfig>,
    /// The client answers to chat platforms go out through; `None`: one from
    /// [`crate::net::ClientOptions::from_env`] (the system's roots, `BERTH_CA_FILE`).
    pub http: Option<crate::net::HttpClient>,
    /// `postgres://…`: the store on PostgreSQL (`berth-server --database`); `None`:
    /// SQLite in the home.
    pub database: Option<String>,
    /// More observers of finished tasks and of approvals (`berth serve`'s
    /// notifications), attached before anything is scheduled.
    pub observers: Vec<Arc<dyn crate::scheduler::TaskObserver>>,
}

impl std::fmt::Debug for ServerOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerOptions")
            .field("executor", &self.executor.is_some())
            .field("scheduler", &self.scheduler)
            .field("display", &self.display)
            .field("channels", &self.channels)
            .field("daemons", &self.daemons)
            .field("http", &self.http)
            .field("database", &self.database.is_some())
            .field("observers", &self.observers.len())
            .finish()
    }
}

/// Holds `serve.lock` for the server's lifetime (the OS drops it if the process dies).
/// `berth daemon` takes the same lock: one home runs a server or a daemon, never both.
#[derive(Debug)]
pub struct InstanceLock {
    _file: File,
}

impl InstanceLock {
    /// Takes the lock of `home`, or says who holds it.
    pub fn acquire(home: &Path) -> Result<InstanceLock, ServerError> {
        let path = home.join(LOCK_FILE);
        let mut file = crate::private::open(&path).map_err(io_err(&path))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut text = String::new();
                let pid = file
                    .read_to_string(&mut text)
                    .ok()
                    .and_then(|_| text.trim().parse().ok());
                return Err(ServerError::AlreadyRunning {
                    home: home.to_owned(),
                    pid,
                });
            }
            Err(TryLockError::Error(e)) => return Err(io_err(&path)(e)),
        }
        file.set_len(0).map_err(io_err(&path))?;
        writeln!(file, "{}", std::process::id()).map_err(io_err(&path))?;
        Ok(InstanceLock { _file: file })
    }
}

/// How often a process that does not lead tries to (the leader's lock is free as soon
/// as its connection closes).
pub const LEAD_RETRY: std::time::Duration = std::time::Duration::from_secs(1);
/// How often a process that does not lead looks at the leader's lock: a resigning
/// leader is replaced within this.
pub const LEAD_POLL: std::time::Duration = std::time::Duration::from_millis(200);
/// How long a shutdown waits for the store (the tasks' records, the leadership given
/// up) when the database does not answer: then it goes on without.
pub const STORE_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// A running server's parts.
#[derive(Debug)]
pub struct Server {
    home: PathBuf,
    state: AppState,
    recovery: Recovery,
    /// What the executor restored at startup (see `Executor::recover`).
    executor_notes: Vec<String>,
    /// What the operator should know about the chat channels' configuration.
    channel_warnings: Vec<String>,
    closing: Arc<watch::Sender<bool>>,
    /// Turns `true` first at shutdown: `/readyz` answers 503.
    draining: Arc<watch::Sender<bool>>,
    /// On a database other processes may share (PostgreSQL).
    shared: bool,
    _lock: InstanceLock,
}

/// Stops a server: see [`ShutdownHandle::shutdown`].
#[derive(Debug, Clone)]
pub struct ShutdownHandle {
    scheduler: Scheduler,
    store: Store,
    draining: Arc<watch::Sender<bool>>,
    closing: Arc<watch::Sender<bool>>,
    /// On a database other processes share: tasks on daemons are left to the next
    /// leader, and the scheduler's wait is bounded.
    shared: bool,
}

impl ShutdownHandle {
    /// In this order:
    /// 1. `/readyz` answers 503 and daemon calls are turned away (they retry, and
    ///    reach the next leader);
    /// 2. scheduling stops; agents on this server's own executor are stopped (the
    ///    executor restores their directories) and their tasks recorded
    ///    `interrupted`; a task on a daemon goes on there, and whoever leads next
    ///    carries on with it;
    /// 3. on PostgreSQL, the leadership is given up at once ([`Store::resign`]);
    /// 4. live streams end (with a `retry:` hint) and the listeners stop accepting.
    ///
    /// Queued tasks stay queued for the next leader or the next start. On a shared
    /// database, the store's part is bounded by [`STORE_GRACE`] each: a database that
    /// does not answer does not hold the shutdown.
    pub async fn shutdown(&self) {
        self.draining.send_replace(true);
        if self.shared {
            self.scheduler.hand_over();
            if tokio::time::timeout(STORE_GRACE, self.scheduler.shutdown())
                .await
                .is_err()
            {
                tracing::warn!(
                    "the scheduler did not stop in time (is the database away?); going on"
                );
            }
            match tokio::time::timeout(STORE_GRACE, self.store.resign()).await {
                Ok(Ok(())) => tracing::info!("gave up the leadership"),
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "could not give up the leadership; it goes with the connection")
                }
                Err(_) => tracing::warn!(
                    "the database did not answer; the leadership goes with the connection"
                ),
            }
        } else {
            self.scheduler.shutdown().await;
        }
        self.closing.send_replace(true);
    }
}

/// The display context of the user running the server: whose home becomes `~`.
pub fn native_context() -> Context {
    let platform = Platform::native();
    let home = std::env::var("HOME")
        .ok()
        .and_then(|h| LocalPath::parse(platform, &h).ok());
    match home {
        Some(h) => Context::new(platform).with_home(h),
        None => Context::new(platform),
    }
}

impl Server {
    /// Opens `home` (created, or made, 0700: [`crate::private`]), takes the single-instance lock, opens
    /// the store, recovers from the last run (running tasks become `interrupted`,
    /// queued ones are scheduled again), and starts the scheduler.
    pub async fn open(home: &Path, opts: ServerOptions) -> Result<Server, ServerError> {
        crate::private::dir(home).map_err(io_err(home))?;
        let lock = InstanceLock::acquire(home)?;
        let store = match &opts.database {
            None => Store::open(home).await?,
            #[cfg(feature = "postgres")]
            Some(url) => Store::connect(url).await?,
            #[cfg(not(feature = "postgres"))]
            Some(_) => {
                return Err(ServerError::Store(StoreError::Unavailable(
                    "this build has no PostgreSQL support (berth-web's `postgres` feature)"
                        .to_owned(),
                )));
            }
        };
        // On a database several processes may share, the leader recovers and runs
        // tasks ([`Server::lead`]); until then this one only serves the API.
        let shared = opts.database.is_some();
        tracing::info!(store = %store.describe(), "store open");
        if let Some(exec) = &opts.executor {
            let (id, name) = exec.machine();
            store.touch_machine(id, name).await?;
        }
        let executor_notes = match &opts.executor {
            Some(exec) => {
                let exec = exec.clone();
                tokio::task::spawn_blocking(move || exec.recover())
                    .await
                    .unwrap_or_else(|e| vec![format!("executor recovery failed: {e}")])
            }
            None => Vec::new(),
        };
        let recovery = if shared {
            Recovery::default()
        } else {
            store.recover().await?
        };
        let display = opts.display.unwrap_or_else(native_context);
        let local = opts.executor.as_ref().map(|e| e.machine().0);
        let metrics = crate::metrics::Metrics::new();
        store.measure(metrics.clone());
        let scheduler = Scheduler::start(store.clone(), opts.executor, opts.scheduler);
        scheduler.measure(metrics.clone());
        let daemons = crate::daemon::Daemons::start(
            store.clone(),
            opts.daemons.unwrap_or_default(),
            opts.daemons.is_some(),
            metrics.clone(),
        )
        .await?;
        // No daemon is online before it registers: bindings on other machines show it.
        if shared {
            scheduler.follow();
        } else {
            store.mark_remote_offline(local).await?;
        }
        scheduler.attach_daemons(daemons.clone());
        let channels = opts
            .channels
            .unwrap_or_else(|| ChannelConfig::from_env(&Default::default()));
        let channel_warnings = channels.warnings();
        for w in &channel_warnings {
            tracing::warn!("{w}");
        }
        let http = match opts.http {
            Some(h) => h,
            None => crate::net::HttpClient::new(&crate::net::ClientOptions::from_env(None))
                .map_err(|e| ServerError::Tls(e.to_string()))?,
        };
        // What goes out to the platforms, one for the answers and the requests' cards.
        let out = Arc::new(crate::hooks::Outbound::new(
            store.clone(),
            channels.clone(),
            Arc::new(display.clone()),
            http.clone(),
        ));
        scheduler.observe(Arc::new(Replier::new(out.clone())));
        let cards = crate::hooks::Cards::new(out);
        scheduler.observe(Arc::new(cards.clone()));
        for o in opts.observers {
            scheduler.observe(o);
        }
        let channels = Arc::new(Channels::new(
            store.clone(),
            scheduler.clone(),
            channels,
            cards,
        ));
        for session in &recovery.pending_sessions {
            scheduler.notify(session);
        }
        let (closing, closed) = watch::channel(false);
        let (draining, drains) = watch::channel(false);
        Ok(Server {
            home: home.to_owned(),
            state: AppState {
                store,
                scheduler,
                display: Arc::new(display),
                closing: closed,
                draining: drains,
                channels,
                daemons,
                http,
                metrics,
            },
            recovery,
            executor_notes,
            channel_warnings,
            closing: Arc::new(closing),
            draining: Arc::new(draining),
            shared,
            _lock: lock,
        })
    }

    pub fn home(&self) -> &Path {
        &self.home
    }

    /// The state the routers share.
    pub fn state(&self) -> AppState {
        self.state.clone()
    }

    /// What startup recovery did to the store.
    pub fn recovery(&self) -> &Recovery {
        &self.recovery
    }

    /// What the executor restored at startup, one line per action.
    pub fn executor_notes(&self) -> &[String] {
        &self.executor_notes
    }

    /// What the chat channels' configuration leaves out (e.g. answers that cannot be
    /// posted back), one line each, for the operator.
    pub fn channel_warnings(&self) -> &[String] {
        &self.channel_warnings
    }

    /// On a shared database (`ServerOptions::database`): takes part in the election of
    /// the processes' leader, advertising `url` (how the others reach this one), until
    /// this one leads; then recovers what the last leader left (tasks it had handed to
    /// daemons carry on when those come back, others it ran become `interrupted`,
    /// queued ones run) and runs every process's work. The
    /// receiver fires if leadership is lost (the database restarted, or dropped the
    /// connection holding it): the caller should stop, and another process, or this
    /// one started again, takes over. Does nothing on SQLite.
    /// The first attempt is made before this returns: a server that can lead at once
    /// has recovered and runs tasks when its caller starts answering.
    pub async fn lead(&self, url: String) -> tokio::sync::oneshot::Receiver<String> {
        let (lost_tx, lost) = tokio::sync::oneshot::channel();
        if !self.shared {
            // One process on its own file: it has led since it opened. The sender
            // lives as long as the server.
            let closing = self.closing.clone();
            tokio::spawn(async move {
                closing.closed().await;
                drop(lost_tx);
            });
            return lost;
        }
        let state = self.state.clone();
        let draining = self.state.draining.clone();
        let local = state.scheduler.executor().map(|e| e.machine().0);
        let first = state.store.try_lead(&url).await;
        let first_led: Result<bool, ()> = first.as_ref().map(|b| *b).map_err(|_| ());
        let (tx, ready) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let store = &state.store;
            let mut wait = crate::backoff::Backoff::new(
                std::time::Duration::from_millis(200),
                std::time::Duration::from_secs(5),
            );
            let mut attempt = Some(first);
            // A leader that lost its connection (the database restarted) takes the lock
            // back within a fraction of a second: only a lock seen free for a
            // [`LEAD_RETRY`] is the leader's death. A leader that resigned (it is
            // shutting down) is replaced at the next look.
            let mut free_since: Option<std::time::Instant> = None;
            loop {
                if *draining.borrow() {
                    return;
                }
                let result = match attempt.take() {
                    Some(r) => r,
                    None => match store.leader_lock().await {
                        Ok(LockSeen::Resigned) => store.try_lead(&url).await,
                        Ok(LockSeen::Free)
                            if free_since.is_some_and(|t| t.elapsed() >= LEAD_RETRY) =>
                        {
                            store.try_lead(&url).await
                        }
                        Ok(LockSeen::Free) => {
                            free_since.get_or_insert_with(std::time::Instant::now);
                            Ok(false)
                        }
                        Ok(LockSeen::Held) => {
                            free_since = None;
                            Ok(false)
                        }
                        Err(e) => Err(e),
                    },
                };
                let pause = match result {
                    Ok(true) => break,
                    Ok(false) => {
                        wait.reset();
                        LEAD_POLL
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot take part in the leader election; retrying");
                        wait.next_delay()
                    }
                };
                tokio::time::sleep(pause).await;
            }
            tracing::info!(url = %url, "this berth-server leads: it runs the tasks");
            let recovered = async {
                let rec = store.recover().await?;
                store.mark_remote_offline(local.clone()).await?;
                state.daemons.reload_tokens().await?;
                Ok::<_, StoreError>(rec)
            };
            match recovered.await {
                Ok(rec) => {
                    for id in &rec.interrupted {
                        tracing::warn!(task = %id, "interrupted: it was running when the last leader stopped");
                    }
                    for a in &rec.adopted {
                        tracing::info!(task = %a.task.id, machine = %a.machine_name,
                            "carrying on with a task the last leader handed to a daemon");
                    }
                    // Before daemon calls are served here: the daemon that runs an
                    // adopted task finds it, rather than being told to stop it.
                    state.scheduler.adopt(rec.adopted).await;
                    state.scheduler.lead();
                    for session in &rec.pending_sessions {
                        state.scheduler.notify(session);
                    }
                    let _ = tx.send(());
                }
                Err(e) => {
                    let _ = lost_tx.send(format!("recovery as the new leader failed: {e}"));
                    return;
                }
            }
            // Leading: keep the lock. Its connection may go (the database restarted):
            // take the lock back, for as long as the database is away. Another process
            // holding it by then leads: this one stops.
            loop {
                tokio::time::sleep(std::time::Duration::from_millis(250)).await;
                if *draining.borrow() {
                    // Shutting down: the leadership is given up (`ShutdownHandle`), not
                    // taken back.
                    return;
                }
                if store.leads() {
                    continue;
                }
                tracing::warn!("the connection holding the leadership was lost; taking it back");
                loop {
                    match store.try_lead(&url).await {
                        Ok(true) => break,
                        Ok(false) => {
                            let _ = lost_tx.send(
                                "the database connection holding the leadership was lost, and another berth-server leads now".to_owned(),
                            );
                            return;
                        }
                        Err(_) => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
                    }
                }
            }
        });
        // Leading from the start: wait for the recovery. Otherwise another process
        // leads (or will), and this one serves the API meanwhile.
        if matches!(first_led, Ok(true)) {
            let _ = ready.await;
        }
        lost
    }

    /// The handle the CLI calls on SIGINT/SIGTERM.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        ShutdownHandle {
            scheduler: self.state.scheduler.clone(),
            store: self.state.store.clone(),
            draining: self.draining.clone(),
            closing: self.closing.clone(),
            shared: self.shared,
        }
    }

    /// `$BERTH_HOME/berth.sock`.
    pub fn socket_path(&self) -> PathBuf {
        self.home.join(SOCKET_FILE)
    }

    /// Binds the control socket at `path` with mode 0600. A leftover socket file is
    /// removed only after checking that nothing answers on it.
    pub async fn bind_control(&self, path: &Path) -> Result<UnixListener, ServerError> {
        if path.exists() {
            if tokio::net::UnixStream::connect(path).await.is_ok() {
                return Err(ServerError::SocketInUse {
                    path: path.to_owned(),
                });
            }
            std::fs::remove_file(path).map_err(io_err(path))?;
        }
        let listener = UnixListener::bind(path).map_err(io_err(path))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(io_err(path))?;
        Ok(listener)
    }

    fn until_closed(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.closing.subscribe();
        async move {
            let _ = rx.wait_for(|c| *c).await;
        }
    }

    /// Serves `GET /metrics` ([`crate::metrics`]) on `listener` until shutdown, without
    /// a token. Each scrape first reads what is state: the tasks waiting (from the
    /// store), the daemons online and whether this process leads.
    pub async fn serve_metrics(&self, listener: tokio::net::TcpListener) -> io::Result<()> {
        let state = self.state();
        let sample = move || {
            let state = state.clone();
            async move {
                let m = &state.metrics;
                m.set_leader(state.scheduler.leads() && state.store.leads());
                m.set_daemons_online(state.daemons.online().len());
                match state.store.waiting().await {
                    Ok(counts) => counts.into_iter().for_each(|(r, n)| m.set_waiting(r, n)),
                    Err(e) => tracing::warn!(error = %e, "could not count the waiting tasks"),
                }
            }
        };
        let metrics = self.state.metrics.clone();
        crate::metrics::serve(listener, metrics, sample, self.until_closed()).await
    }

    /// Serves the whole API on the control socket until shutdown, then removes the
    /// socket file.
    pub async fn serve_control(&self, listener: UnixListener) -> io::Result<()> {
        let path = listener
            .local_addr()
            .ok()
            .and_then(|a| a.as_pathname().map(Path::to_owned));
        // A fenced agent is refused at accept (see `peer`): the control socket is the
        // way around every policy Berth sets.
        let listener = crate::peer::Checked::new(listener, "the control socket");
        let out = axum::serve(listener, api::control_router(self.state()))
            .with_graceful_shutdown(self.until_closed())
            .await;
        if let Some(p) = path {
            let _ = std::fs::remove_file(p);
        }
        out
    }

    /// Serves the read-only web listener until shutdown. Its only writes are the
    /// signature-authenticated webhooks `POST /hooks/slack` and `POST /hooks/lark`.
    pub async fn serve_web(
        &self,
        listener: WebListener,
        token: impl Into<crate::api::WebToken>,
        allowed_hosts: Vec<String>,
    ) -> io::Result<()> {
        let tls = matches!(listener, WebListener::Tls(_));
        let router = api::web_router(self.state(), token, allowed_hosts, tls);
        self.serve_on(listener, router).await
    }

    /// Serves `router` on a TCP listener, plain or TLS: either closes the connection of
    /// a fenced agent on this machine before anything is read from it
    /// ([`crate::net::listener`]), whatever token it would show.
    async fn serve_on(&self, listener: WebListener, router: axum::Router) -> io::Result<()> {
        // Before anything else on a network listener: one server named, one way.
        let router = router.layer(axum::middleware::from_fn(api::one_target));
        match listener {
            WebListener::Plain(l) => {
                axum::serve(PlainListener::new(l)?, router)
                    .with_graceful_shutdown(self.until_closed())
                    .await
            }
            WebListener::Tls(l) => {
                axum::serve(l, router)
                    .with_graceful_shutdown(self.until_closed())
                    .await
            }
        }
    }

    /// Serves the whole API, token-guarded, on `berth-server`'s listener until shutdown,
    /// plus the signature-authenticated webhooks.
    pub async fn serve_cloud(&self, listener: WebListener, token: String) -> io::Result<()> {
        let tls = matches!(listener, WebListener::Tls(_));
        let router = api::cloud_router(self.state(), token, tls);
        self.serve_on(listener, router).await
    }

    /// Writes `serve.json` (0600, replaced atomically).
    pub fn write_serve_json(&self, info: &ServeInfo) -> Result<PathBuf, ServerError> {
        let path = self.home.join(SERVE_JSON);
        let text = serde_json::to_string_pretty(info).map_err(|e| ServerError::Io {
            path: path.clone(),
            source: io::Error::other(e),
        })?;
        crate::private::write_atomic(&path, text.as_bytes()).map_err(io_err(&path))?;
        Ok(path)
    }
}
