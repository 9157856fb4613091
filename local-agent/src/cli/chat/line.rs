//! The plain line mode of `berth chat`, for pipes and scripts: one line in, one
//! message or slash command; the agent's output streams as `berth send` prints it (or
//! one JSON document per line with `--json`). A line ending in `\` continues on the
//! next. Ctrl-C cancels the running task; at the prompt it quits. The exit code is 1
//! when any task or command failed.

use super::slash::{self, Slash};
use super::{Chat, Said, error_lines};
use crate::cli::client::encode;
use crate::cli::error::CliError;
use crate::cli::render::{self, Stream};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

pub async fn run(chat: &mut Chat, json: bool) -> Result<u8, CliError> {
    if json {
        println!("{}", json!({"session": chat.view.session}));
    } else {
        render::header(
            &chat.view.session,
            &chat.view.here,
            chat.view.policy.as_deref(),
        );
        if let Some(u) = &chat.view.usage {
            println!("usage     {}", u.line());
        }
        for l in std::mem::take(&mut chat.view.lines) {
            eprintln!("{}", l.text);
        }
    }
    let mut input = BufReader::new(tokio::io::stdin()).lines();
    let mut failed = false;
    loop {
        let mut text = String::new();
        loop {
            let next = tokio::select! {
                l = input.next_line() => l,
                _ = tokio::signal::ctrl_c() => return Ok(130),
            };
            let Some(l) = next.map_err(|e| {
                CliError::new(format!("reading stdin failed: {e}"), "check the pipe")
            })?
            else {
                if !text.is_empty() {
                    break;
                }
                return Ok(u8::from(failed));
            };
            match l.strip_suffix('\\') {
                Some(part) => {
                    text.push_str(part);
                    text.push('\n');
                }
                None => {
                    text.push_str(&l);
                    break;
                }
            }
        }
        if text.trim().is_empty() {
            continue;
        }
        match slash::parse(&text) {
            Some(Ok(Slash::Quit)) => return Ok(u8::from(failed)),
            Some(Ok(cmd)) => {
                let rebinds = matches!(
                    cmd,
                    Slash::Link(_) | Slash::Unlink | Slash::Mode(_) | Slash::New(_)
                );
                match chat.command(cmd).await {
                    Ok(said) => {
                        if json {
                            let lines: Vec<&str> = said.iter().map(|(_, t)| t.as_str()).collect();
                            println!(
                                "{}",
                                json!({"command": text.trim(), "lines": lines, "session": chat.view.session})
                            );
                        } else {
                            print_said(&said);
                            if rebinds {
                                render::header(
                                    &chat.view.session,
                                    &chat.view.here,
                                    chat.view.policy.as_deref(),
                                );
                            }
                        }
                    }
                    Err(e) => {
                        failed = true;
                        report(&e, json);
                    }
                }
            }
            Some(Err(why)) => {
                failed = true;
                report(&CliError::usage(why, "send /help for the commands"), json);
            }
            None => match follow(chat, slash::message_text(&text), json).await {
                Ok(Some(ok)) => failed |= !ok,
                Ok(None) => return Ok(130),
                Err(e) => {
                    failed = true;
                    report(&e, json);
                }
            },
        }
    }
}

fn print_said(said: &Said) {
    for (_, line) in said {
        println!("{line}");
    }
}

fn report(e: &CliError, json: bool) {
    if json {
        println!("{}", e.to_json());
    } else {
        for (_, line) in error_lines(e) {
            eprintln!("{line}");
        }
    }
}

/// Sends `text` and streams its task to the end: `Some(succeeded)`, or `None` when a
/// second Ctrl-C asked to leave.
async fn follow(chat: &mut Chat, text: &str, json: bool) -> Result<Option<bool>, CliError> {
    let reply = chat.send(text).await?;
    let task = &reply["task"];
    let task_id = task["id"].as_str().unwrap_or_default().to_owned();
    let session = chat.view.id();
    let after = reply["message_seq"].as_i64().map(|n| n - 1);
    let mut stream = chat.client.events(&session, after).await?;
    let mut view = Stream::new(json);
    let mut interrupted = false;
    let last: Value = loop {
        let ev = tokio::select! {
            ev = stream.next() => ev?,
            _ = tokio::signal::ctrl_c() => {
                if interrupted {
                    return Ok(None);
                }
                interrupted = true;
                eprintln!("cancelling task {} (Ctrl-C again to leave it running)", &task_id.chars().take(8).collect::<String>());
                chat.client
                    .post(&format!("/api/v1/tasks/{}/cancel", encode(&task_id)), &json!({}))
                    .await?;
                continue;
            }
        };
        let Some(ev) = ev else {
            break chat
                .client
                .get(&format!("/api/v1/tasks/{}", encode(&task_id)))
                .await?;
        };
        let Ok(data) = serde_json::from_str::<Value>(&ev.data) else {
            continue;
        };
        if let Some(seq) = data["seq"].as_i64() {
            chat.view.last_seq = chat.view.last_seq.max(seq);
        }
        if data["task_id"].as_str() != Some(task_id.as_str()) {
            continue;
        }
        if ev.event == "task" {
            break data["payload"]["task"].clone();
        }
        view.event(&ev.event, &data);
    };
    view.finish(&last);
    Ok(Some(last["status"] == "succeeded"))
}
