//! `berth session log ID [--follow] [--json]`: a session's transcript, as `berth chat`
//! shows it, on stdout, for reading and for scripts.
//!
//! The transcript comes from the session's event stream with `?follow=false`, which
//! ends after the events stored when it was asked for; `--follow` keeps the stream open
//! and prints each new event as it comes (until Ctrl-C). `--json` prints each event as
//! one JSON document a line, as the stream carries it (`{seq, task_id, kind, at,
//! payload}`), after a first line with the session document.

use super::view::View;
use crate::cli::client::{Client, encode};
use crate::cli::commands::agent_policy;
use crate::cli::error::CliError;
use crate::cli::render;
use crate::cli::setup::{berth_home, runtime};
use hyper::Method;
use serde_json::{Value, json};
use std::path::PathBuf;

/// Runs `berth session log` against the server of `home`.
pub fn main(home: Option<PathBuf>, id: &str, follow: bool, json: bool) -> Result<u8, CliError> {
    let client = Client::new(&berth_home(home)?);
    runtime()?.block_on(run(&client, id, follow, json))
}

async fn run(client: &Client, id: &str, follow: bool, json: bool) -> Result<u8, CliError> {
    let session = client
        .get(&format!("/api/v1/sessions/{}", encode(id)))
        .await?;
    let full = session["id"].as_str().unwrap_or(id).to_owned();
    if json {
        println!("{}", json!({ "session": session }));
    } else {
        let policy = agent_policy(client, &session).await;
        render::header(&session, &client.machine(), policy.as_deref());
    }
    let mut view = View {
        // Every event is one already stored or arriving now: none is "another
        // terminal's" relink to announce.
        opened_at: String::from("\u{10ffff}"),
        ..View::default()
    };
    let path = format!(
        "/api/v1/sessions/{}/events{}",
        encode(&full),
        if follow { "" } else { "?follow=false" }
    );
    let mut stream = client
        .stream(
            Method::GET,
            &path,
            None,
            &[("accept", "text/event-stream".into())],
        )
        .await?;
    while let Some(ev) = stream.next().await? {
        let Ok(data) = serde_json::from_str::<Value>(&ev.data) else {
            continue;
        };
        if json {
            println!("{data}");
            continue;
        }
        view.event(&ev.event, &data);
        for line in std::mem::take(&mut view.lines) {
            println!("{}", line.text);
        }
    }
    Ok(0)
}
