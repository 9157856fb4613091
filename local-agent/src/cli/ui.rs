//! `berth ui`: the web UI's address with its token, for a script or a user whose
//! `berth serve` runs where its output is not seen (`berth service`, a container).
//!
//! `berth serve` prints the token only to a terminal: written anywhere else (the
//! journal of a service, a CI log) it would outlive the server in a file others may
//! read. The token lives in `$BERTH_HOME/serve.json` (0600); this command reads it
//! there, once it has checked that a server answers on this home's control socket (a
//! `serve.json` left by a server that died names a token nothing accepts).

use super::client::Client;
use super::error::CliError;
use super::render::print_json;
use super::setup::{berth_home, runtime};
use berth_web::server::{SERVE_JSON, ServeInfo};
use std::path::PathBuf;

pub fn run(home: Option<PathBuf>, json: bool) -> Result<u8, CliError> {
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
    let info: ServeInfo = serde_json::from_str(&text)
        .map_err(|e| no_ui(format!("{shown} is not a server's: {e}")))?;
    let Some(url) = info.url else {
        return Err(no_ui(format!("{shown} names no web listener")));
    };
    let url = url.trim_end_matches('/');
    let open = format!("{url}/?token={}", info.token);
    if json {
        print_json(&serde_json::json!({"url": url, "token": info.token, "open": open}));
    } else {
        println!("{open}");
    }
    Ok(0)
}
