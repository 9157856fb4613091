//! `berth-server [--listen ADDR] [--home DIR]`: the cloud build's server, a team's.
//! `berth-server member …` and `berth-server audit …` administer it (see
//! [`berth_web::admin`]).
//!
//! Every request is a member's: the token in `serve.json` is the first admin's (a new
//! one at every start), and `berth-server member add NAME` makes the others.
//!
//! No executor: it cannot reach a local path. Its whole API is on one TCP listener,
//! writes authenticated by `Authorization: Bearer <token>` (the token in
//! `$BERTH_HOME/serve.json`), reads by the bearer token or the cookie. With
//! `--tls-cert`/`--tls-key` (PEM) it speaks https only; a non-loopback listener without
//! TLS is refused unless `--insecure-http` says a proxy in front terminates TLS.
//!
//! `--database postgres://…` (or `BERTH_DATABASE_URL`) keeps the team's state in
//! PostgreSQL instead of `berth.db` in the home, so that several `berth-server`s
//! (replicas, behind any HTTP load balancer) serve one team. One of them, elected
//! through the database, leads: it runs the tasks and holds the daemons' connections;
//! the others forward those requests to the address it advertises (`--advertise URL`,
//! by default this listener's own). `BERTH_ADMIN_TOKEN` fixes the first admin's token
//! (instead of a new one at every start): replicas on one database share it.

use berth_web::net::listener::{TlsListener, WebListener};
use berth_web::server::{ServeInfo, Server, ServerOptions, new_token};
use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "usage: berth-server [--listen ADDR] [--home DIR] [--tls-cert FILE --tls-key FILE] [--insecure-http]
                    [--database postgres://USER:PASSWORD@HOST:PORT/DB [--advertise URL]]
                    [--metrics-listen ADDR] (or BERTH_METRICS_LISTEN: GET /metrics there, no token)
       berth-server member|audit … (berth-server member --help)
       berth-server healthcheck [URL] (GET, default http://127.0.0.1:4733/healthz; exit 0 on 200) | --version
BERTH_LOG=error|warn|info|debug|trace|off: what it reports on stderr (default info)";
const DEFAULT_LISTEN: &str = "127.0.0.1:4733";

#[derive(Debug)]
struct Args {
    listen: String,
    home: PathBuf,
    tls: Option<(PathBuf, PathBuf)>,
    insecure_http: bool,
    database: Option<String>,
    advertise: Option<String>,
    /// Where `GET /metrics` is served (`--metrics-listen`, `BERTH_METRICS_LISTEN`).
    metrics_listen: Option<String>,
}

fn default_home() -> Option<PathBuf> {
    if let Some(h) = std::env::var_os("BERTH_HOME") {
        return Some(PathBuf::from(h));
    }
    if let Some(d) = std::env::var_os("XDG_DATA_HOME") {
        return Some(PathBuf::from(d).join("berth"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share/berth"))
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut listen = DEFAULT_LISTEN.to_owned();
    let mut home = None;
    let (mut cert, mut key, mut insecure_http, mut advertise) = (None, None, false, None);
    let mut metrics_listen = std::env::var("BERTH_METRICS_LISTEN")
        .ok()
        .filter(|a| !a.is_empty());
    let mut database = std::env::var("BERTH_DATABASE_URL")
        .ok()
        .filter(|u| !u.is_empty());
    while let Some(a) = args.next() {
        match a.as_str() {
            "--listen" => listen = args.next().ok_or("--listen needs an address")?,
            "--tls-cert" => {
                cert = Some(PathBuf::from(
                    args.next().ok_or("--tls-cert needs a PEM file")?,
                ))
            }
            "--tls-key" => {
                key = Some(PathBuf::from(
                    args.next().ok_or("--tls-key needs a PEM file")?,
                ))
            }
            "--insecure-http" => insecure_http = true,
            "--advertise" => {
                advertise = Some(
                    args.next()
                        .ok_or("--advertise needs the URL the other replicas reach this one at")?,
                )
            }
            "--database" => {
                database = Some(
                    args.next()
                        .ok_or("--database needs a URL: postgres://USER:PASSWORD@HOST:PORT/DB")?,
                )
            }
            "--metrics-listen" => {
                metrics_listen = Some(
                    args.next()
                        .ok_or("--metrics-listen needs an address, e.g. 127.0.0.1:9464")?,
                )
            }
            "--home" => {
                home = Some(PathBuf::from(
                    args.next().ok_or("--home needs a directory")?,
                ))
            }
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unexpected argument {other:?}")),
        }
    }
    let home = home
        .or_else(default_home)
        .ok_or("no home directory: give --home DIR or set BERTH_HOME")?;
    let tls = match (cert, key) {
        (Some(c), Some(k)) => Some((c, k)),
        (None, None) => None,
        _ => return Err("--tls-cert and --tls-key go together".to_owned()),
    };
    if tls.is_some() && insecure_http {
        return Err("--insecure-http contradicts --tls-cert/--tls-key".to_owned());
    }
    Ok(Args {
        listen,
        home,
        tls,
        insecure_http,
        advertise,
        database,
        metrics_listen,
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    // A container's health check (no curl in a scratch image), and the version.
    match argv.first().map(String::as_str) {
        Some("healthcheck") => return berth_web::probe::main(&argv[1..]),
        Some("--version" | "-V") => {
            println!("berth-server {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Some(_) | None => {}
    }
    if berth_web::admin::is_admin_command(argv.first().map(String::as_str)) {
        if argv.iter().any(|a| a == "--help" || a == "-h") {
            println!("{}", berth_web::admin::USAGE);
            return ExitCode::SUCCESS;
        }
        let json = argv.iter().any(|a| a == "--json");
        let result = match berth_web::admin::parse(&argv) {
            Ok(args) => berth_web::admin::run(args, default_home()).await,
            Err(e) => Err(e),
        };
        return match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                if json {
                    println!("{}", e.to_json());
                }
                eprintln!("error: {}", e.message);
                eprintln!("hint: {}", e.hint);
                ExitCode::from(e.exit)
            }
        };
    }
    let args = match parse(argv.into_iter()) {
        Ok(a) => a,
        Err(e) if e.is_empty() => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("error: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    // A server's own account of itself (leadership, the database going away and
    // coming back, daemons going offline) on stderr; BERTH_LOG changes how much.
    match berth_web::log::settings_from_env(tracing::level_filters::LevelFilter::INFO) {
        Ok((level, format)) => berth_web::log::init(level, format),
        Err(e) => {
            eprintln!("error: {e}\nhint: {}", e.hint());
            return ExitCode::from(2);
        }
    }
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

/// Plain http is for loopback, or behind a TLS-terminating proxy (`--insecure-http`).
fn plain_allowed(args: &Args, addr: std::net::SocketAddr) -> Result<(), String> {
    if addr.ip().is_loopback() || args.tls.is_some() || args.insecure_http {
        return Ok(());
    }
    Err(format!(
        "{addr} is not a loopback address, and without TLS the bearer token and daemon tokens would cross the network in clear; \
         give --tls-cert FILE --tls-key FILE (PEM), or --insecure-http behind a TLS-terminating proxy"
    ))
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    // A team's server: daemons on the members' machines run its tasks (never in
    // place: this build has no binding). Tokens: `POST /api/v1/daemon/tokens`.
    // Channel sessions belong to a member: BERTH_CHANNEL_MEMBER, else the first admin.
    let mut channels = berth_web::hooks::ChannelConfig::from_env(&Default::default());
    if channels.member.is_none() {
        channels.member = Some(berth_web::store::FIRST_ADMIN.to_owned());
    }
    let server = Server::open(
        &args.home,
        ServerOptions {
            daemons: Some(berth_web::daemon::DaemonConfig::from_env()),
            channels: Some(channels),
            database: args.database.clone(),
            ..ServerOptions::default()
        },
    )
    .await?;
    if let Ok(addr) = args.listen.parse::<std::net::SocketAddr>() {
        plain_allowed(&args, addr)?;
    }
    let tcp = tokio::net::TcpListener::bind(&args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let addr = tcp.local_addr()?;
    let listener = match &args.tls {
        Some((cert, key)) => {
            let config = berth_web::net::tls::server_config(cert, key)
                .map_err(|e| format!("{e} ({})", e.hint()))?;
            WebListener::Tls(TlsListener::new(tcp, config)?)
        }
        None => {
            plain_allowed(&args, addr)?;
            if !addr.ip().is_loopback() {
                eprintln!(
                    "warning: serving plain http on {addr}: the bearer token, daemon tokens and every transcript cross the network in clear"
                );
            }
            WebListener::Plain(tcp)
        }
    };
    let metrics = match &args.metrics_listen {
        Some(a) => Some(bind_metrics(a).await?),
        None => None,
    };
    if args.database.is_some() && std::env::var_os("BERTH_ADMIN_TOKEN").is_none() {
        eprintln!(
            "warning: without BERTH_ADMIN_TOKEN every start makes a new first-admin token, and the one in the other replicas' serve.json stops working"
        );
    }
    let token = match std::env::var("BERTH_ADMIN_TOKEN") {
        Ok(t) if t.len() >= 32 => t,
        Ok(t) if !t.is_empty() => {
            return Err("BERTH_ADMIN_TOKEN is shorter than 32 characters; use a long random token (e.g. `openssl rand -hex 32`)".into());
        }
        _ => new_token()?,
    };
    // The token in serve.json is the first admin's.
    server
        .state()
        .store
        .ensure_first_admin(berth_web::daemon::token_hash(&token))
        .await?;
    let url = format!("{}://{addr}", listener.scheme());
    // On a shared database: the election. A process that stops leading stops: its
    // running tasks belong to the next leader's recovery.
    let advertise = args.advertise.clone().unwrap_or_else(|| url.clone());
    let mut lost = server.lead(advertise).await;
    let path = server.write_serve_json(&ServeInfo {
        url: Some(url.clone()),
        token: token.clone(),
        pid: std::process::id(),
        socket: None,
    })?;
    println!(
        "berth-server listening on {url} (token in {})",
        path.display()
    );
    if let Some(m) = &metrics {
        println!("berth-server metrics on http://{}/metrics", m.local_addr()?);
    }
    let stop = server.shutdown_handle();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let (signalled, mut stopping) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        tracing::info!("shutting down: not ready, handing over, closing the listener");
        let _ = signalled.send(());
        stop.shutdown().await;
    });
    // The accept loop runs as a task on the runtime's workers, which the listener's
    // readiness wakes anyway, not on this thread (`block_on`'s): a new connection then
    // costs no wake-up of this thread and hand-off back.
    let server = std::sync::Arc::new(server);
    if let Some(m) = metrics {
        let server = server.clone();
        tokio::spawn(async move {
            if let Err(e) = server.serve_metrics(m).await {
                tracing::error!(error = %e, "the metrics listener stopped");
            }
        });
    }
    let mut served = tokio::spawn({
        let server = server.clone();
        async move { server.serve_cloud(listener, token).await }
    });
    tokio::select! {
        served = &mut served => served.map_err(std::io::Error::other)??,
        Ok(why) = &mut lost => {
            served.abort();
            let _ = served.await;
            return Err(format!("this berth-server stopped leading ({why}); start it again to rejoin as a replica").into());
        }
        Ok(()) = &mut stopping => {
            // A shutdown: whatever it waits for (the database, a slow client), the
            // process is gone within SHUTDOWN_BOUND, and exits 0.
            match tokio::time::timeout(SHUTDOWN_BOUND, &mut served).await {
                Ok(served) => served.map_err(std::io::Error::other)??,
                Err(_) => tracing::warn!(
                    bound_s = SHUTDOWN_BOUND.as_secs(),
                    "the shutdown took too long; exiting with connections still open"
                ),
            }
        }
    }
    Ok(())
}

/// Binds `--metrics-listen`'s address; a failure says which flag to change.
async fn bind_metrics(addr: &str) -> Result<tokio::net::TcpListener, String> {
    tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        format!(
            "cannot listen on {addr} for metrics: {e}\nhint: choose another address with --metrics-listen HOST:PORT (or BERTH_METRICS_LISTEN)"
        )
    })
}

/// How long a shutdown may take, from the signal to the exit. Within it: the
/// scheduler's stop and the leadership given up (each bounded by
/// `berth_web::server::STORE_GRACE`), then the open connections' last answers.
const SHUTDOWN_BOUND: std::time::Duration = std::time::Duration::from_secs(5);
