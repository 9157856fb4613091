//! `berth-server member …` and `berth-server audit …`: a team server's admin commands.
//!
//! They speak to the running server's API as its first admin (the token in
//! `$BERTH_HOME/serve.json`), so every change takes effect at once — a removed
//! member's machines go offline — and is recorded in the audit trail like any other.
//! With https, the server's certificate is verified (the system's roots, plus
//! `--ca-file` or `BERTH_CA_FILE`).

use crate::net::client::{HttpClient, full};
use crate::net::{ClientOptions, SendError};
use berth_core::api::ErrorBody;
use http_body_util::{BodyExt, Limited};
use hyper::{Method, Request, header};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub const USAGE: &str = "usage:
  berth-server member add NAME [--admin] [--json]     a member and their API token (shown once)
  berth-server member list [--json]
  berth-server member remove NAME [--json]            revokes their tokens, takes their machines offline
  berth-server member token rotate NAME [--json]      a new token; the old one stops working
  berth-server audit [--member NAME] [--json]         who changed what, when and from where
options: --home DIR (the server's BERTH_HOME), --ca-file FILE (a private CA for https)";

/// An admin command's failure: what went wrong and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminError {
    pub message: String,
    pub hint: String,
    /// The server's stable code, when it answered one: its spelling as the server
    /// sent it (an [`berth_core::ErrorCode`]'s, or another version's code, shown as is).
    pub code: Option<String>,
    /// 1 for a refusal or failure, 2 for bad usage.
    pub exit: u8,
}

impl AdminError {
    fn new(message: impl Into<String>, hint: impl Into<String>) -> AdminError {
        AdminError {
            message: message.into(),
            hint: hint.into(),
            code: None,
            exit: 1,
        }
    }

    fn usage(message: impl Into<String>) -> AdminError {
        AdminError {
            exit: 2,
            ..AdminError::new(message, USAGE)
        }
    }

    pub fn to_json(&self) -> Value {
        json!({"error": {"code": self.code.as_deref().unwrap_or("admin"), "message": self.message, "hint": self.hint}})
    }
}

/// One admin command, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Add { name: String, admin: bool },
    List,
    Remove { name: String },
    Rotate { name: String },
    Audit { member: Option<String> },
}

/// A parsed command line: the command, `--json`, `--home`, `--ca-file`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Args {
    pub command: Command,
    pub json: bool,
    pub home: Option<PathBuf>,
    pub ca_file: Option<PathBuf>,
}

/// Whether `first` starts an admin command (else `berth-server` serves).
pub fn is_admin_command(first: Option<&str>) -> bool {
    matches!(first, Some("member" | "audit"))
}

pub fn parse(args: &[String]) -> Result<Args, AdminError> {
    let mut words = Vec::new();
    let (mut json, mut admin, mut home, mut ca_file, mut member) = (false, false, None, None, None);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--json" => json = true,
            "--admin" => admin = true,
            "--home" => {
                home =
                    Some(PathBuf::from(it.next().ok_or_else(|| {
                        AdminError::usage("--home needs a directory")
                    })?));
            }
            "--ca-file" => {
                ca_file =
                    Some(PathBuf::from(it.next().ok_or_else(|| {
                        AdminError::usage("--ca-file needs a PEM file")
                    })?));
            }
            "--member" => {
                member = Some(
                    it.next()
                        .ok_or_else(|| AdminError::usage("--member needs a name"))?
                        .clone(),
                );
            }
            flag if flag.starts_with('-') => {
                return Err(AdminError::usage(format!("unknown option {flag}")));
            }
            word => words.push(word.to_owned()),
        }
    }
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    let command = match words.as_slice() {
        ["member", "add", name] => Command::Add {
            name: (*name).to_owned(),
            admin,
        },
        ["member", "list"] => Command::List,
        ["member", "remove", name] => Command::Remove {
            name: (*name).to_owned(),
        },
        ["member", "token", "rotate", name] => Command::Rotate {
            name: (*name).to_owned(),
        },
        ["audit"] => Command::Audit { member },
        other => {
            return Err(AdminError::usage(format!(
                "not a command: berth-server {}",
                other.join(" ")
            )));
        }
    };
    if admin && !matches!(command, Command::Add { .. }) {
        return Err(AdminError::usage("--admin goes with member add"));
    }
    Ok(Args {
        command,
        json,
        home,
        ca_file,
    })
}

/// The running server's URL and first-admin token, from `serve.json`.
fn server(home: &Path) -> Result<(String, String), AdminError> {
    let path = home.join(crate::server::SERVE_JSON);
    let text = std::fs::read_to_string(&path).map_err(|e| {
        AdminError::new(
            format!("cannot read {}: {e}", path.display()),
            "start berth-server first (with the same --home or BERTH_HOME)",
        )
    })?;
    let info: Value = serde_json::from_str(&text).map_err(|e| {
        AdminError::new(
            format!("{} is not valid: {e}", path.display()),
            "restart berth-server; it writes the file again",
        )
    })?;
    match (info["url"].as_str(), info["token"].as_str()) {
        (Some(url), Some(token)) => Ok((url.trim_end_matches('/').to_owned(), token.to_owned())),
        _ => Err(AdminError::new(
            format!("{} has no url and token", path.display()),
            "this home belongs to berth serve, not berth-server; pass berth-server's --home",
        )),
    }
}

async fn call(
    client: &HttpClient,
    method: Method,
    url: &str,
    token: &str,
    body: Option<Value>,
) -> Result<Value, AdminError> {
    let mut req = Request::builder()
        .method(method)
        .uri(url)
        .header(header::AUTHORIZATION, format!("Bearer {token}"));
    if body.is_some() {
        req = req.header(header::CONTENT_TYPE, "application/json");
    }
    let req = req
        .body(full(body.map(|b| b.to_string()).unwrap_or_default()))
        .map_err(|e| AdminError::new(format!("{url} is not usable: {e}"), "check serve.json"))?;
    let resp = tokio::time::timeout(Duration::from_secs(30), client.send(req))
        .await
        .map_err(|_| AdminError::new(format!("{url} did not answer in 30 s"), "check the server"))?
        .map_err(|e| {
            let hint = match &e {
                SendError::Tls { .. } => {
                    "pass --ca-file FILE (or set BERTH_CA_FILE) with the CA that signed the server's certificate"
                }
                SendError::Connect { .. } | SendError::Io { .. } | SendError::Request(_) => {
                    "start berth-server (with the same --home or BERTH_HOME)"
                }
            };
            AdminError::new(e.to_string(), hint)
        })?;
    let status = resp.status();
    let bytes = Limited::new(resp.into_body(), 8 << 20)
        .collect()
        .await
        .map_err(|e| AdminError::new(format!("the answer was cut off: {e}"), "try again"))?
        .to_bytes();
    let value: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    if status.is_success() {
        return Ok(value);
    }
    Err(match ErrorBody::parse(&bytes) {
        Some(body) => AdminError {
            message: body.error.message,
            hint: body.error.hint,
            code: Some(body.error.code),
            exit: 1,
        },
        None => AdminError::new(
            format!("the server answered {status}"),
            "see berth-server's output",
        ),
    })
}

fn table(rows: Vec<Vec<String>>) {
    let cols = rows.first().map_or(0, Vec::len);
    let mut widths = vec![0; cols];
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    for r in rows {
        let mut line = String::new();
        for (i, c) in r.iter().enumerate() {
            if i + 1 == r.len() {
                line.push_str(c);
            } else {
                line.push_str(&format!("{c:<w$}  ", w = widths[i]));
            }
        }
        println!("{}", line.trim_end());
    }
}

/// A value as one line for the terminal: controls and bidirectional characters escaped.
fn text(v: &Value) -> String {
    berth_core::quote::escape(v.as_str().unwrap_or("-")).into_owned()
}

/// Runs an admin command against the server in `home`; prints its answer.
pub async fn run(args: Args, default_home: Option<PathBuf>) -> Result<(), AdminError> {
    let home =
        args.home.clone().or(default_home).ok_or_else(|| {
            AdminError::usage("no home directory: give --home DIR or set BERTH_HOME")
        })?;
    let (url, token) = server(&home)?;
    let mut opts = ClientOptions::from_env(None);
    if let Some(ca) = &args.ca_file {
        opts.ca_file = Some(ca.clone());
    }
    let client = HttpClient::new(&opts)
        .map_err(|e| AdminError::new(e.to_string(), "check --ca-file (a PEM certificate)"))?;
    let enc = crate::net::encode;
    let api = format!("{url}/api/v1");
    let (method, path, body) = match &args.command {
        Command::Add { name, admin } => (
            Method::POST,
            "/members".to_owned(),
            Some(json!({"name": name, "admin": admin})),
        ),
        Command::List => (Method::GET, "/members".to_owned(), None),
        Command::Remove { name } => (Method::DELETE, format!("/members/{}", enc(name)), None),
        Command::Rotate { name } => (Method::POST, format!("/members/{}/token", enc(name)), None),
        Command::Audit { member } => {
            let q = member
                .as_deref()
                .map(|m| format!("?member={}", enc(m)))
                .unwrap_or_default();
            (Method::GET, format!("/audit{q}"), None)
        }
    };
    let out = call(&client, method, &format!("{api}{path}"), &token, body).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
        return Ok(());
    }
    match &args.command {
        Command::Add { .. } | Command::Rotate { .. } => {
            let name = text(&out["name"]);
            let role = if out["admin"] == true { " (admin)" } else { "" };
            if matches!(args.command, Command::Add { .. }) {
                println!("added member {name}{role}");
            } else {
                println!("new token for {name}{role}; the old one no longer works");
            }
            println!("token: {}", text(&out["token"]));
            println!(
                "it is shown once: give it to {name}. They send it as `Authorization: Bearer TOKEN`, open {url}/?token=TOKEN, and make daemon tokens for their machines with POST /api/v1/daemon/tokens"
            );
        }
        Command::Remove { .. } => println!(
            "removed member {}: their tokens are revoked and their machines are offline; their sessions' tasks wait",
            text(&out["name"])
        ),
        Command::List => {
            let mut rows = vec![vec![
                "NAME".to_owned(),
                "ROLE".to_owned(),
                "CREATED".to_owned(),
                "REMOVED".to_owned(),
            ]];
            for m in out.as_array().into_iter().flatten() {
                rows.push(vec![
                    text(&m["name"]),
                    if m["admin"] == true {
                        "admin"
                    } else {
                        "member"
                    }
                    .to_owned(),
                    text(&m["created_at"]),
                    text(&m["removed_at"]),
                ]);
            }
            table(rows);
        }
        Command::Audit { .. } => {
            let mut rows = vec![vec![
                "AT".to_owned(),
                "MEMBER".to_owned(),
                "ACTION".to_owned(),
                "TARGET".to_owned(),
                "VIA".to_owned(),
            ]];
            for a in out.as_array().into_iter().flatten() {
                rows.push(vec![
                    text(&a["at"]),
                    text(&a["member"]),
                    text(&a["action"]),
                    text(&a["target"]),
                    text(&a["via"]),
                ]);
            }
            table(rows);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Result<Args, AdminError> {
        parse(&s.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
    }

    #[test]
    fn commands_parse_and_bad_usage_exits_2() {
        assert_eq!(
            args("member add ann --admin --json").unwrap().command,
            Command::Add {
                name: "ann".into(),
                admin: true
            }
        );
        assert_eq!(
            args("audit --member bob").unwrap().command,
            Command::Audit {
                member: Some("bob".into())
            }
        );
        assert_eq!(
            args("member token rotate ann").unwrap().command,
            Command::Rotate { name: "ann".into() }
        );
        assert_eq!(args("member list --admin").unwrap_err().exit, 2);
        assert_eq!(args("member frob").unwrap_err().exit, 2);
        assert!(is_admin_command(Some("member")));
        assert!(!is_admin_command(Some("--listen")));
    }
}
