//! `berth serve`: the server with the embedded native executor.
//!
//! Order matters: leftover journals are replayed (directories restored after a crash)
//! before the server takes work; the single-instance lock is taken before anything
//! listens; `serve.json` is written only once every listener is bound.

use super::ServeArgs;
use super::error::CliError;
use berth_local_agent::{ExecutorConfig, NativeExecutor};
use berth_web::api::loopback_hosts;
use berth_web::net::listener::{TlsListener, WebListener};
use berth_web::server::{ServeInfo, Server, ServerOptions};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;

pub fn serve(home: Option<PathBuf>, args: ServeArgs) -> Result<u8, CliError> {
    init_log()?;
    sealed()?;
    let config = ExecutorConfig::from_env(home)
        .map_err(|e| CliError::new(e.to_string(), "pass --home DIR or set BERTH_HOME"))?;
    runtime()?.block_on(run(config, args))
}

/// Makes the long-running process non-dumpable ([`super::conceal::seal`]): its
/// environment, secrets included, is then unreadable to the user's other processes and
/// agents. A kernel that refuses is an error: Berth does not run with its secrets open.
pub(super) fn sealed() -> Result<(), CliError> {
    super::conceal::seal().map_err(|e| {
        CliError::new(
            format!("cannot make this process's environment private (prctl PR_SET_DUMPABLE): {e}"),
            "run berth on a Linux kernel that allows PR_SET_DUMPABLE (every supported one does)",
        )
    })
}

/// What the long-running commands (`serve`, `daemon`) report beyond their own lines:
/// warnings and errors on stderr (the store retrying, a daemon going offline);
/// `BERTH_LOG` changes how much.
pub(super) fn init_log() -> Result<(), CliError> {
    let (level, format) =
        berth_web::log::settings_from_env(tracing::level_filters::LevelFilter::WARN)
            .map_err(|e| CliError::usage(e.to_string(), e.hint()))?;
    berth_web::log::init(level, format);
    Ok(())
}

/// The runtime of the long-running commands (`serve`, `daemon`): one worker, with
/// blocking work on tokio's blocking threads. On the two-core machines Berth is sized
/// for, a second worker bought some throughput (about an eighth more tasks per second
/// with 100 busy sessions, far above the goal) and cost every message's round trip
/// about 0.1 ms: the steps of one task hopped between the two workers, each hop a
/// wake-up on the other core, which the agent itself needs (`scripts/bench.sh
/// --compare`).
pub(super) fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| {
            CliError::new(
                format!("cannot start the async runtime: {e}"),
                "check the system's limits",
            )
        })
}

/// Refuses plain http on an address off loopback, before anything starts.
fn check_listen(args: &ServeArgs, addr: std::net::SocketAddr) -> Result<(), CliError> {
    if addr.ip().is_loopback() || args.tls_cert.is_some() || args.insecure_http {
        return Ok(());
    }
    Err(CliError::new(
        format!(
            "--listen {addr} is not a loopback address, and plain http there would send the web token, daemon tokens and transcripts in clear"
        ),
        "give --tls-cert FILE --tls-key FILE (PEM) to serve https, or --insecure-http if a TLS-terminating proxy is in front",
    ))
}

async fn run(config: ExecutorConfig, args: ServeArgs) -> Result<u8, CliError> {
    if let Ok(addr) = args.listen.parse() {
        check_listen(&args, addr)?;
    }
    let home = config.berth_home.clone();
    // Chat-channel secrets: the environment first, then `channels` in the user
    // settings. A broken settings file stops the server with its line:column rather
    // than starting with channels silently off.
    let user_settings = berth_local_agent::settings::load(
        &config.context(),
        &config.config_dir,
        None,
        &berth_local_agent::settings::trust::TrustStore::new(&config.berth_home),
    )
    .map_err(|e| {
        CliError::new(
            e.to_string(),
            "fix the settings file, then start berth serve again",
        )
    })?
    .settings;
    for w in &user_settings.warnings {
        eprintln!("warning: {}:{}:{}: {}", w.file, w.line, w.column, w.message);
    }
    // Notifications (issue 55): the user layer's `notify`, started before the server
    // so that the first event finds them; off, with a warning, for a webhook whose
    // secret is missing.
    let http = http_client(&config, None, false)?;
    let notify = berth_local_agent::notify::Notifier::start(
        &user_settings.notify,
        http.clone(),
        config.context(),
        |name| std::env::var(name).ok(),
        berth_local_agent::notify::Schedule::default(),
    );
    for w in &notify.warnings {
        eprintln!("warning: {w}");
    }
    let mut channels = berth_web::hooks::ChannelConfig::from_env(&user_settings.channels);
    // One user, no members: channel sessions are the user's own, and run on this
    // machine (BERTH_CHANNEL_MEMBER is berth-server's).
    channels.member = None;
    // Requests on the chat platforms (issue 55): a desktop session's go to the user
    // `notify` names, as a direct message; `notify.answerers` may answer them too.
    let n = &user_settings.notify;
    channels.asks = berth_web::hooks::AskRouting {
        slack_user: n.slack.clone(),
        lark_user: n.lark.clone(),
        slack_answerers: n.answerers.slack.clone(),
        lark_answerers: n.answerers.lark.clone(),
    };
    let executor = NativeExecutor::new(config).map_err(|e| {
        CliError::new(
            format!("cannot start the executor: {e}"),
            "check BERTH_HOME and BERTH_LOCK_DIR",
        )
    })?;
    // The server calls the executor's recovery (replaying leftover journals) once it
    // holds the instance lock and before it schedules anything: a second `berth serve`
    // never touches a running one's directories, and no task runs in a directory still
    // being restored.
    let server = Server::open(
        &home,
        ServerOptions {
            executor: Some(Arc::new(executor)),
            channels: Some(channels),
            daemons: args
                .allow_daemons
                .then(berth_web::daemon::DaemonConfig::from_env),
            http: Some(http),
            observers: notify
                .notifier
                .map(|n| Arc::new(n) as Arc<dyn berth_web::scheduler::TaskObserver>)
                .into_iter()
                .collect(),
            ..ServerOptions::default()
        },
    )
    .await
    .map_err(server_error)?;
    for note in server.executor_notes() {
        println!("{note}");
    }
    for warning in server.channel_warnings() {
        eprintln!("warning: {warning}");
    }
    let recovery = server.recovery();
    if !recovery.interrupted.is_empty() {
        println!(
            "{} task(s) that were running when berth stopped are marked interrupted",
            recovery.interrupted.len()
        );
    }

    let socket_path = server.socket_path();
    let control = server
        .bind_control(&socket_path)
        .await
        .map_err(server_error)?;
    let tcp = tokio::net::TcpListener::bind(&args.listen)
        .await
        .map_err(|e| {
            CliError::new(
                format!("cannot listen on {}: {e}", args.listen),
                "choose another address with --listen 127.0.0.1:PORT",
            )
        })?;
    let addr = tcp.local_addr().map_err(|e| {
        CliError::new(
            format!("cannot read the listener's address: {e}"),
            "try again",
        )
    })?;
    let listener = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => {
            let config = berth_web::net::tls::server_config(cert, key)
                .map_err(|e| CliError::new(e.to_string(), e.hint()))?;
            let tls = TlsListener::new(tcp, config).map_err(|e| {
                CliError::new(format!("cannot serve TLS on {addr}: {e}"), "try again")
            })?;
            WebListener::Tls(tls)
        }
        _ => {
            check_listen(&args, addr)?;
            if args.insecure_http && !addr.ip().is_loopback() {
                eprintln!(
                    "warning: serving plain http on {addr}, not loopback: the web token, daemon tokens and every transcript cross the network in clear"
                );
            }
            WebListener::Plain(tcp)
        }
    };
    if !addr.ip().is_loopback() {
        eprintln!(
            "warning: the web listener is on {addr}, not loopback: anyone who can reach it and holds the token can read your sessions"
        );
    }
    let metrics_listen = args.metrics_listen.clone().or_else(|| {
        std::env::var("BERTH_METRICS_LISTEN")
            .ok()
            .filter(|a| !a.is_empty())
    });
    let metrics = match &metrics_listen {
        Some(a) => Some(tokio::net::TcpListener::bind(a).await.map_err(|e| {
            CliError::new(
                format!("cannot listen on {a} for metrics: {e}"),
                "choose another address with --metrics-listen 127.0.0.1:PORT (or BERTH_METRICS_LISTEN)",
            )
        })?),
        None => None,
    };
    // The web token outlasts a restart (the browser's cookie keeps working) until
    // `berth ui --rotate` writes a new one, which the listener takes at once.
    let token_file = home.join(super::ui::WEB_TOKEN);
    let token = super::ui::web_token(&token_file)?;
    let url = format!("{}://{addr}", listener.scheme());
    let info = ServeInfo {
        url: Some(url.clone()),
        token: token.clone(),
        pid: std::process::id(),
        socket: Some(socket_path.display().to_string()),
    };
    let json_path = server.write_serve_json(&info).map_err(server_error)?;
    println!("berth serve (pid {})", std::process::id());
    println!("  home            {}", home.display());
    println!("  control socket  {}", socket_path.display());
    // The token only to a terminal: anywhere else (a service's journal, a CI log) it
    // would outlive the server in a file others may read. `berth ui` prints it.
    if std::io::stdout().is_terminal() {
        println!("  web UI          {url}/?token={token}");
    } else {
        println!("  web UI          {url}/ (its address with the token: `berth ui`)");
    }
    println!("  token           in {}", json_path.display());
    if let Some(to) = &notify.webhook {
        println!("  webhook         events signed and posted to {to}");
    }
    if let Some(addr) = metrics.as_ref().and_then(|m| m.local_addr().ok()) {
        println!("  metrics         http://{addr}/metrics");
    }
    if args.allow_daemons {
        println!(
            "  daemons         accepted on {url} (`BERTH_DAEMON_TOKEN=... berth daemon --server {url}`)"
        );
        if addr.ip().is_loopback() {
            println!(
                "                  only from this machine: other machines need a non-loopback --listen (e.g. --listen 0.0.0.0:4733)"
            );
        }
    }

    let stop = server.shutdown_handle();
    tokio::spawn(async move {
        wait_for_signal().await;
        eprintln!(
            "berth serve: stopping (running agents are stopped and their directories restored)"
        );
        stop.shutdown().await;
    });
    let mut hosts = loopback_hosts(addr);
    for name in &args.web_hosts {
        let name = name.trim().to_ascii_lowercase();
        hosts.push(format!("{name}:{}", addr.port()));
        // A browser leaves the scheme's default port out of `Host`.
        let default = if args.tls_cert.is_some() { 443 } else { 80 };
        if addr.port() == default {
            hosts.push(name);
        }
    }
    // Each listener's accept loop runs as a task on the runtime's workers: a thread
    // that the socket's readiness wakes anyway. Awaited here, on the thread of
    // `block_on`, every new connection (each `berth send`) cost a wake-up of this
    // thread and a hand-off back to a worker, about 0.2 ms.
    let server = std::sync::Arc::new(server);
    let control = tokio::spawn({
        let server = server.clone();
        async move { server.serve_control(control).await }
    });
    let web = tokio::spawn({
        let server = server.clone();
        async move {
            let token = berth_web::api::WebToken::in_file(token, token_file);
            server.serve_web(listener, token, hosts).await
        }
    });
    if let Some(m) = metrics {
        let server = server.clone();
        tokio::spawn(async move {
            if let Err(e) = server.serve_metrics(m).await {
                eprintln!("warning: the metrics listener stopped: {e}");
            }
        });
    }
    let (a, b) = tokio::join!(control, web);
    let (a, b) = (
        a.map_err(std::io::Error::other).flatten(),
        b.map_err(std::io::Error::other).flatten(),
    );
    let _ = std::fs::remove_file(home.join("serve.json"));
    a.and(b).map_err(|e| {
        CliError::new(
            format!("the server stopped with an error: {e}"),
            "see the messages above",
        )
    })?;
    println!("berth serve: stopped");
    Ok(0)
}

fn server_error(e: berth_web::server::ServerError) -> CliError {
    let hint = match &e {
        berth_web::server::ServerError::AlreadyRunning { .. } => {
            "stop the other `berth serve` or `berth daemon` on this home, or use another --home"
        }
        berth_web::server::ServerError::SocketInUse { .. } => {
            "another server answers on this home's socket; stop it first"
        }
        berth_web::server::ServerError::Io { .. } | berth_web::server::ServerError::Store(_) => {
            "check the home directory's permissions and free space"
        }
        berth_web::server::ServerError::Tls(_) => {
            "check BERTH_CA_FILE (or ca_file in your settings): it must be a PEM file of CA certificates"
        }
    };
    CliError::new(e.to_string(), hint)
}

/// The pooled client of outgoing calls: the system's roots plus a private CA from
/// `flag` (`--ca-file`), else `BERTH_CA_FILE`, else `ca_file` in the user settings.
pub(super) fn http_client(
    config: &ExecutorConfig,
    flag: Option<&std::path::Path>,
    no_keep_alive: bool,
) -> Result<berth_web::net::HttpClient, CliError> {
    let settings_ca = berth_local_agent::settings::user_ca_file(config)
        .map_err(|e| CliError::new(e.to_string(), "fix the settings file"))?;
    let mut opts = berth_web::net::ClientOptions::from_env(settings_ca.as_deref());
    if let Some(f) = flag {
        opts.ca_file = Some(f.to_owned());
    }
    if no_keep_alive {
        opts.idle = std::time::Duration::ZERO;
    }
    berth_web::net::HttpClient::new(&opts).map_err(|e| CliError::new(e.to_string(), e.hint()))
}

pub(super) async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    match (term, int) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
