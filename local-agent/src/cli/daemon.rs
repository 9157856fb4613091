//! `berth daemon`: run this machine as a remote executor, and `berth daemon token`:
//! the tokens daemons present, managed on the server's own control socket.

use super::client::{Client, encode};
use super::error::CliError;
use super::render;
use super::render::print_json;
use super::setup::{berth_home, runtime};
use super::{DaemonArgs, DaemonCmd, TokenCmd};
use berth_core::ErrorCode;
use berth_local_agent::ExecutorConfig;
use berth_local_agent::daemon::url::{ServerUrl, UrlError};
use berth_local_agent::daemon::{self, DaemonOptions};
use hyper::Method;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The environment variable read when `--token` is not given.
const TOKEN_ENV: &str = "BERTH_DAEMON_TOKEN";

pub fn daemon(home: Option<PathBuf>, args: DaemonArgs) -> Result<u8, CliError> {
    if let Some(DaemonCmd::Token(cmd)) = args.command {
        return token(home, cmd);
    }
    // First of all: the token out of /proc/PID/cmdline (only while dumpable can a
    // user's process open its own memory), then the environment private.
    if let Some(flag) = &args.token
        && let Err(e) = super::conceal::scrub_command_line(flag)
    {
        render::warn(
            &format!("cannot remove the daemon token from this process's command line: {e}"),
            &format!("pass it in {TOKEN_ENV} or with --token-file FILE instead"),
        );
    }
    super::serve::init_log()?;
    super::serve::sealed()?;
    let Some(server) = args.server else {
        return Err(CliError::usage(
            "berth daemon needs --server URL",
            "pass the server's listener, e.g. BERTH_DAEMON_TOKEN=TOKEN berth daemon --server https://berth.example.com:4733",
        ));
    };
    let server = ServerUrl::parse(&server).map_err(|e| match e {
        UrlError::PlainHttp { .. } => CliError {
            code: Some(ErrorCode::PlainHttp),
            ..CliError::new(e.to_string(), e.hint())
        },
        UrlError::Scheme { .. }
        | UrlError::Extra { .. }
        | UrlError::Host { .. }
        | UrlError::Port { .. }
        | UrlError::Syntax { .. } => CliError::usage(e.to_string(), e.hint()),
    })?;
    let token = daemon_token(args.token, args.token_file.as_deref())?;
    if token.chars().any(|c| !c.is_ascii_graphic()) {
        return Err(CliError::usage(
            "the daemon token has characters a token never has",
            "copy the token exactly as `berth daemon token create` printed it",
        ));
    }
    let poll = match args.poll_ms {
        Some(0) => {
            return Err(CliError::usage(
                "--poll-ms must be at least 1",
                "leave it out to long-poll",
            ));
        }
        Some(ms) => Some(Duration::from_millis(ms)),
        None => None,
    };
    if args.max_tasks == 0 {
        return Err(CliError::usage(
            "--max-tasks must be at least 1",
            "leave it out for the default (8)",
        ));
    }
    let name = args.name.map(|n| n.trim().to_owned());
    if name.as_deref() == Some("") {
        return Err(CliError::usage(
            "--name is empty",
            "leave it out to use the host name",
        ));
    }
    let config = ExecutorConfig::from_env(home)
        .map_err(|e| CliError::new(e.to_string(), "pass --home DIR or set BERTH_HOME"))?;
    let http = super::serve::http_client(&config, args.ca_file.as_deref(), args.no_keep_alive)?;
    let opts = DaemonOptions {
        server,
        token,
        name,
        poll,
        max_tasks: args.max_tasks,
        http,
    };
    super::serve::runtime()?
        .block_on(daemon::run(config, opts, super::serve::wait_for_signal()))
        .map_err(|e| CliError::new(e.to_string(), e.hint()))?;
    Ok(0)
}

/// The largest token file read (a token is 64 hex characters).
const TOKEN_FILE_LIMIT: u64 = 4096;

/// The daemon token: `--token-file`, `--token` (with a warning: it shows in `ps`), or
/// `BERTH_DAEMON_TOKEN`, trimmed; an empty or missing one is a usage error.
fn daemon_token(flag: Option<String>, file: Option<&Path>) -> Result<String, CliError> {
    let token = match (flag, file) {
        (Some(_), Some(_)) => {
            return Err(CliError::usage(
                "--token and --token-file both give the daemon token",
                "pass one of them (better: --token-file, or BERTH_DAEMON_TOKEN)",
            ));
        }
        (None, Some(file)) => Some(read_token_file(file)?),
        (Some(token), None) => {
            render::warn(
                "--token puts the daemon token in this process's command line, which every local user can read (ps, /proc/PID/cmdline) until berth overwrites it as it starts",
                &format!("pass it in {TOKEN_ENV} or with --token-file FILE instead"),
            );
            Some(token)
        }
        (None, None) => std::env::var(TOKEN_ENV).ok(),
    };
    token
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty())
        .ok_or_else(|| {
            CliError::usage(
                format!("berth daemon needs a daemon token: {TOKEN_ENV} or --token-file FILE"),
                format!(
                    "create one on the server with `berth daemon token create NAME`, then run {TOKEN_ENV}=TOKEN berth daemon --server URL"
                ),
            )
        })
}

/// Reads a token file: a regular file of at most [`TOKEN_FILE_LIMIT`] bytes. One that
/// other users may read is used, with a warning.
fn read_token_file(file: &Path) -> Result<String, CliError> {
    use std::io::Read;
    use std::os::unix::fs::PermissionsExt;
    let shown = render::escape(&file.display().to_string()).into_owned();
    let unreadable = |e: std::io::Error| {
        CliError::usage(
            format!("cannot read the token file {shown}: {e}"),
            "pass a file holding the token `berth daemon token create` printed",
        )
    };
    let f = std::fs::File::open(file).map_err(unreadable)?;
    let meta = f.metadata().map_err(unreadable)?;
    if !meta.is_file() || meta.len() > TOKEN_FILE_LIMIT {
        return Err(CliError::usage(
            format!(
                "the token file {shown} is not a regular file of at most {TOKEN_FILE_LIMIT} bytes"
            ),
            "pass a file holding the token `berth daemon token create` printed",
        ));
    }
    if meta.permissions().mode() & 0o077 != 0 {
        render::warn(
            &format!("the token file {shown} can be read by other users"),
            &format!("chmod 600 {shown}"),
        );
    }
    let mut text = String::new();
    f.take(TOKEN_FILE_LIMIT)
        .read_to_string(&mut text)
        .map_err(unreadable)?;
    Ok(text)
}

/// `berth daemon token ...` over this home's control socket.
fn token(home: Option<PathBuf>, cmd: TokenCmd) -> Result<u8, CliError> {
    let home = berth_home(home)?;
    let client = Client::new(&home);
    runtime()?.block_on(token_command(&client, &home, cmd))
}

async fn token_command(c: &Client, home: &Path, cmd: TokenCmd) -> Result<u8, CliError> {
    const TOKENS: &str = berth_web::daemon::wire::TOKENS;
    match cmd {
        TokenCmd::Create { name, member, json } => {
            let created = c
                .post(TOKENS, &json!({"name": name, "member": member}))
                .await?;
            if json {
                print_json(&created);
                return Ok(0);
            }
            let token = created["token"].as_str().unwrap_or_default();
            println!("{token}");
            let url = server_url(home).unwrap_or_else(|| "http://SERVER:PORT".to_owned());
            eprintln!(
                "this token for {} is shown only once; on that machine run:",
                created["name"].as_str().unwrap_or(&name)
            );
            // In the environment, not the command line: a process's arguments are
            // readable by every local user (`ps`, /proc/PID/cmdline), its environment
            // only by its own user.
            eprintln!("  {TOKEN_ENV}={token} berth daemon --server {url}");
            eprintln!(
                "(or save it in a file only you can read and pass --token-file FILE; never --token, which shows it in `ps`)"
            );
            Ok(0)
        }
        TokenCmd::List { json } => {
            let tokens = c.get(TOKENS).await?;
            if json {
                print_json(&tokens);
            } else {
                render::daemon_tokens(&tokens);
            }
            Ok(0)
        }
        TokenCmd::Revoke { name, json } => {
            let info = c
                .call(Method::DELETE, &format!("{TOKENS}/{}", encode(&name)), None)
                .await?;
            if json {
                print_json(&info);
            } else {
                let machine = info["machine_name"]
                    .as_str()
                    .map(|m| format!(" (machine {})", render::inert(m)))
                    .unwrap_or_default();
                println!(
                    "revoked the daemon token {name}{machine}; its daemon is refused from now on"
                );
            }
            Ok(0)
        }
    }
}

/// The running server's listener URL, from `serve.json`.
fn server_url(home: &Path) -> Option<String> {
    let text = std::fs::read_to_string(home.join(berth_web::server::SERVE_JSON)).ok()?;
    let v: Value = serde_json::from_str(&text).ok()?;
    v["url"].as_str().map(str::to_owned)
}
