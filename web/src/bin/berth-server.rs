//! `berth-server [--listen ADDR] [--home DIR]`: the cloud build's server.
//!
//! No executor: it cannot reach a local path. Its whole API is on one TCP listener,
//! writes authenticated by `Authorization: Bearer <token>` (the token in
//! `$BERTH_HOME/serve.json`), reads by the bearer token or the cookie.

use berth_web::server::{ServeInfo, Server, ServerOptions, new_token};
use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "usage: berth-server [--listen ADDR] [--home DIR]";
const DEFAULT_LISTEN: &str = "127.0.0.1:4733";

#[derive(Debug)]
struct Args {
    listen: String,
    home: PathBuf,
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
    while let Some(a) = args.next() {
        match a.as_str() {
            "--listen" => listen = args.next().ok_or("--listen needs an address")?,
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
    Ok(Args { listen, home })
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match parse(std::env::args().skip(1)) {
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
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    // A team's server: daemons on the members' machines run its tasks (never in
    // place: this build has no binding). Tokens: `POST /api/v1/daemon/tokens`.
    let server = Server::open(
        &args.home,
        ServerOptions {
            daemons: Some(berth_web::daemon::DaemonConfig::from_env()),
            ..ServerOptions::default()
        },
    )
    .await?;
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let addr = listener.local_addr()?;
    let token = new_token()?;
    let url = format!("http://{addr}");
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
    let stop = server.shutdown_handle();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::spawn(async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        stop.shutdown().await;
    });
    server.serve_cloud(listener, token).await?;
    Ok(())
}
