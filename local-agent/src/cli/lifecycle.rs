//! `berth session rename | archive | unarchive | delete`: mending what was made by
//! mistake, or is done with.
//!
//! Deleting a session removes its tasks and transcript on the server, and, on this
//! machine, its tasks' change records (`berth task diff`/`undo`) from the shadow
//! repositories and its scratch directory. A worktree-mode session's worktree and
//! branch are the user's repository's, and stay.
//! A task that ran on another machine (a session bound on a remote daemon, deleted
//! from the server's machine) keeps its record there until that machine's snapshot
//! limits prune it (by count and age); deleting from that machine (its CLI goes
//! through its daemon) removes them at once. The answer counts the records it could
//! not reach (`records_elsewhere`).

use super::client::{Client, encode};
use super::error::CliError;
use super::render::{escape, print_json, short};
use berth_core::{ErrorCode, TaskId};
use berth_local_agent::ExecutorConfig;
use berth_local_agent::changes::Shadow;
use hyper::Method;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;

/// `PATCH sessions/{id}` with `body`.
async fn change(c: &Client, id: &str, body: Value) -> Result<Value, CliError> {
    c.call(
        Method::PATCH,
        &format!("/api/v1/sessions/{}", encode(id)),
        Some(&body),
    )
    .await
}

pub(super) async fn rename(c: &Client, id: &str, title: &str, json: bool) -> Result<u8, CliError> {
    if title.trim().is_empty() {
        return Err(CliError::usage(
            "the new title is empty",
            "give the title as one argument: berth session rename ID \"new title\"",
        ));
    }
    let s = change(c, id, json!({ "title": title })).await?;
    if json {
        print_json(&s);
    } else {
        println!(
            "session {} is now titled {}",
            short(&s["id"]),
            escape(s["title"].as_str().unwrap_or(""))
        );
    }
    Ok(0)
}

pub(super) async fn archive(
    c: &Client,
    id: &str,
    archived: bool,
    json: bool,
) -> Result<u8, CliError> {
    let s = change(c, id, json!({ "archived": archived })).await?;
    let sid = short(&s["id"]);
    if json {
        print_json(&s);
    } else if archived {
        println!(
            "session {sid} is archived: kept whole, left out of the lists \
             (`berth session list --all` shows it; `berth session unarchive {sid}` brings it back)"
        );
    } else {
        println!("session {sid} is back in the list");
    }
    Ok(0)
}

/// Whether the user says yes to deleting `session` with `tasks` tasks; refused where
/// nobody can be asked.
fn confirmed(session: &Value, tasks: usize) -> Result<bool, CliError> {
    let sid = short(&session["id"]);
    if !std::io::stdin().is_terminal() {
        return Err(CliError {
            code: Some(ErrorCode::ConfirmationNeeded),
            ..CliError::usage(
                format!(
                    "session {sid} was not deleted: stdin is not a terminal, so Berth cannot ask"
                ),
                format!("pass --yes to delete it without asking: berth session delete {sid} --yes"),
            )
        });
    }
    eprint!(
        "delete session {sid} ({}) with its {tasks} task{}, its transcript and its change records? [y/N] ",
        escape(session["title"].as_str().unwrap_or("")),
        if tasks == 1 { "" } else { "s" }
    );
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|e| CliError::new(format!("cannot read the answer: {e}"), "pass --yes"))?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes" | "YES" | "Yes"))
}

/// `berth session delete ID [--yes]`.
pub(super) async fn delete(c: &Client, id: &str, yes: bool, json: bool) -> Result<u8, CliError> {
    let session = c.get(&format!("/api/v1/sessions/{}", encode(id))).await?;
    let full = session["id"].as_str().unwrap_or(id).to_owned();
    let sid = short(&session["id"]);
    let tasks = c
        .get(&format!("/api/v1/tasks?session={}", encode(&full)))
        .await?;
    let tasks: Vec<Value> = tasks.as_array().cloned().unwrap_or_default();
    // A busy session is the server's to refuse (it holds the decision): no question
    // first that its answer would make moot.
    let busy = tasks.iter().any(|t| {
        serde_json::from_value::<berth_core::api::TaskStatus>(t["status"].clone())
            .is_ok_and(|s| !s.is_final())
    });
    if !yes && !busy && !confirmed(&session, tasks.len())? {
        return Err(CliError::new(
            format!("session {sid} was not deleted"),
            format!("answer y to delete it, or pass --yes: berth session delete {sid} --yes"),
        ));
    }
    let mut reply = c
        .call(
            Method::DELETE,
            &format!("/api/v1/sessions/{}", encode(&full)),
            None,
        )
        .await?;
    let (removed, elsewhere) = forget_records(c, &tasks);
    reply["records_removed"] = json!(removed);
    reply["records_elsewhere"] = json!(elsewhere);
    reply["scratch_removed"] = json!(remove_scratch(c, &full));
    if json {
        print_json(&reply);
        return Ok(0);
    }
    let n = reply["tasks"].as_array().map_or(0, Vec::len);
    println!(
        "deleted session {sid} ({}): {n} task{}, {} transcript event{}",
        escape(session["title"].as_str().unwrap_or("")),
        if n == 1 { "" } else { "s" },
        reply["events"].as_i64().unwrap_or(0),
        if reply["events"].as_i64() == Some(1) {
            ""
        } else {
            "s"
        },
    );
    if removed > 0 {
        println!(
            "removed {removed} change record{} on this machine",
            plural(removed)
        );
    }
    if elsewhere > 0 {
        println!(
            "{elsewhere} change record{} stay on the machine that ran {} (pruned there by its \
             snapshot limits, by count and age)",
            plural(elsewhere),
            if elsewhere == 1 { "it" } else { "them" }
        );
    }
    Ok(0)
}

/// Removes the session's scratch directory where this machine ran it.
fn remove_scratch(c: &Client, session: &str) -> bool {
    let (Ok(cfg), Ok(id)) = (
        ExecutorConfig::from_env(Some(c.home().to_owned())),
        berth_core::SessionId::parse(session),
    ) else {
        return false;
    };
    berth_local_agent::run::scratch::remove(&cfg.berth_home, &id).unwrap_or_else(|e| {
        eprintln!("warning: the session's scratch directory was not removed: {e}");
        false
    })
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// Drops the change records of `tasks` that are on this machine: (removed, not here).
/// A task has one when it ran in place in a bound directory (worktree tasks keep
/// theirs as commits on the session's branch). Failing to drop one is a warning: the
/// session is gone already, and pruning takes the record in time.
fn forget_records(c: &Client, tasks: &[Value]) -> (usize, usize) {
    let mut by_dir: BTreeMap<&str, Vec<TaskId>> = BTreeMap::new();
    for t in tasks {
        let recorded = t["changes"].is_object() && t["changes"]["commit"].is_null();
        if let (true, Some(dir), Some(id)) = (
            recorded,
            t["work_dir"].as_str(),
            t["id"].as_str().and_then(|i| TaskId::parse(i).ok()),
        ) {
            by_dir.entry(dir).or_default().push(id);
        }
    }
    let wanted: usize = by_dir.values().map(Vec::len).sum();
    if wanted == 0 {
        return (0, 0);
    }
    let Ok(cfg) = ExecutorConfig::from_env(Some(c.home().to_owned())) else {
        return (0, wanted);
    };
    let mut removed = 0;
    for (dir, ids) in &by_dir {
        let Some((shadow, _)) = Shadow::existing(&cfg.berth_home, Path::new(dir)) else {
            continue;
        };
        match shadow.forget(ids) {
            Ok(n) => removed += n,
            Err(e) => eprintln!(
                "warning: the change records in {} were not removed: {e}",
                escape(dir)
            ),
        }
    }
    (removed, wanted - removed)
}
