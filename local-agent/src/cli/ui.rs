//! `berth ui`: the web UI's address with its token, for a script or a user whose
//! `berth serve` runs where its output is not seen (`berth service`, a container);
//! `--open` opens it, `--rotate` makes a new token.
//!
//! `berth serve` prints the token only to a terminal: written anywhere else (the
//! journal of a service, a CI log) it would outlive the server in a file others may
//! read. The token lives in `$BERTH_HOME/web-token` (0600), where `berth serve` finds
//! it again at its next start (so a browser stays signed in), and in `serve.json`;
//! this command reads it there, once it has checked that a server answers on this
//! home's control socket (a `serve.json` left by a server that died names a token
//! nothing accepts). `--rotate` writes a new one to both; the running listener reads
//! the file again when it changes.

use super::client::Client;
use super::error::CliError;
use super::render::print_json;
use super::setup::{berth_home, runtime};
use berth_web::server::{SERVE_JSON, ServeInfo};
use std::path::{Path, PathBuf};

/// The web token's file in Berth's home.
pub const WEB_TOKEN: &str = "web-token";

pub fn run(home: Option<PathBuf>, open: bool, rotate: bool, json: bool) -> Result<u8, CliError> {
    let home = berth_home(home)?;
    let client = Client::new(&home);
    runtime()?.block_on(client.get("/api/v1/health"))?;
    let path = home.join(SERVE_JSON);
    let shown = super::render::escape(&path.display().to_string()).into_owned();
    let no_ui = |why: String| {
        CliError::new(
            format!("no web UI on this home: {why}"),
            "the web UI is `berth serve`'s: a daemon's is its server's (run `berth ui` on the server's machine); on this machine start `berth serve`",
        )
    };
    let text = std::fs::read_to_string(&path).map_err(|e| no_ui(format!("{shown}: {e}")))?;
    let mut info: ServeInfo = serde_json::from_str(&text)
        .map_err(|e| no_ui(format!("{shown} is not a server's: {e}")))?;
    let Some(url) = info.url.clone() else {
        return Err(no_ui(format!("{shown} names no web listener")));
    };
    if rotate {
        let token = fresh_token()?;
        write_token(&home.join(WEB_TOKEN), &token)?;
        info.token = token;
        let text = serde_json::to_string_pretty(&info).unwrap_or_default();
        berth_host::private::write_atomic(&path, text.as_bytes()).map_err(|e| {
            CliError::new(
                format!("the new token is in force, but {shown} could not be updated: {e}"),
                "check Berth's home; `berth ui` reads the token from there",
            )
        })?;
        if !json {
            eprintln!(
                "a new web token: the old one, and every browser signed in with it, no longer works"
            );
        }
    }
    let url = url.trim_end_matches('/');
    let address = format!("{url}/?token={}", info.token);
    if json {
        print_json(&serde_json::json!({"url": url, "token": info.token, "open": address}));
    } else {
        println!("{address}");
    }
    if open {
        open_in_browser(&address)?;
    }
    Ok(0)
}

/// The web token `berth serve` starts with: the one in `file` when it is this user's
/// private token file, else a new one written there.
pub(super) fn web_token(file: &Path) -> Result<String, CliError> {
    if let Some(token) = read_token(file) {
        return Ok(token);
    }
    let token = fresh_token()?;
    write_token(file, &token)?;
    Ok(token)
}

/// The token in `file`, if it is a regular file of this user's that nobody else may
/// read or write, holding a token Berth made (anything else is replaced, never used).
fn read_token(file: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::symlink_metadata(file).ok()?;
    let own = md.file_type().is_file()
        && md.uid() == rustix::process::geteuid().as_raw()
        && md.mode() & 0o077 == 0;
    if !own {
        return None;
    }
    let text = std::fs::read_to_string(file).ok()?;
    let token = text.trim();
    berth_web::secret::is_token(token).then(|| token.to_owned())
}

fn fresh_token() -> Result<String, CliError> {
    berth_web::server::new_token().map_err(|e| {
        CliError::new(
            format!("cannot make a token: {e}"),
            "the operating system gave no randomness; check /dev/urandom",
        )
    })
}

fn write_token(file: &Path, token: &str) -> Result<(), CliError> {
    berth_host::private::write_atomic(file, format!("{token}\n").as_bytes()).map_err(|e| {
        CliError::new(
            format!("cannot write the web token to {}: {e}", file.display()),
            "check that Berth's home is yours and writable",
        )
    })
}

/// Opens `address` with the desktop's opener, detached; says so if there is none.
fn open_in_browser(address: &str) -> Result<(), CliError> {
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    std::process::Command::new(opener)
        .arg(address)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map(drop)
        .map_err(|e| {
            CliError::new(
                format!("cannot open the browser ({opener}: {e})"),
                "open the address above yourself",
            )
        })
}
