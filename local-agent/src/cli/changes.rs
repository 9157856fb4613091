//! `berth task diff ID` and `berth task undo ID`: what a task changed in its directory,
//! and putting it back. Both run here, on the machine that holds the directory (its
//! change record lives in this machine's Berth home); the server only records that an
//! undo happened, in the session's transcript.

use super::client::{Client, encode};
use super::error::CliError;
use super::render::inert;
use super::render::{print_json, short};
use berth_core::api::Changes;
use berth_core::{ErrorCode, TaskId};
use berth_local_agent::ExecutorConfig;
use berth_local_agent::changes::{self, Shadow, UndoPlan};
use serde_json::{Value, json};
use std::path::Path;

fn config(c: &Client) -> Result<ExecutorConfig, CliError> {
    ExecutorConfig::from_env(Some(c.home().to_owned()))
        .map_err(|e| CliError::new(e.to_string(), "pass --home DIR or set BERTH_HOME"))
}

/// The task and its change record, or why it has none.
async fn task_changes(c: &Client, id: &str) -> Result<(Value, Changes, String), CliError> {
    let task = c.get(&format!("/api/v1/tasks/{}", encode(id))).await?;
    let tid = short(&task["id"]);
    let Some(work_dir) = task["work_dir"].as_str().map(str::to_owned) else {
        return Err(CliError::new(
            format!(
                "task {tid} did not run ({}), so it changed nothing",
                task["status"].as_str().unwrap_or("?")
            ),
            "berth task list shows the tasks that ran",
        ));
    };
    let changes: Option<Changes> = serde_json::from_value(task["changes"].clone())
        .ok()
        .flatten();
    let Some(changes) = changes else {
        return Err(CliError::new(
            format!(
                "task {tid} has no change record: it ran in its session's scratch directory, not in a bound one"
            ),
            "only tasks that ran in a bound directory (in place or in a worktree) have one",
        ));
    };
    Ok((task, changes, work_dir))
}

/// The id of the task the server answered with (`id`, as typed, if it named none),
/// parsed where it comes in.
fn task_id(task: &Value, id: &str) -> Result<TaskId, CliError> {
    TaskId::parse(task["id"].as_str().unwrap_or(id)).map_err(|e| {
        CliError::new(
            format!("the server answered with a task that has no valid id: {e}"),
            "check that the berth serving this socket is the same version as this CLI",
        )
    })
}

fn git_in(dir: &str, args: &[&str]) -> Result<String, CliError> {
    use berth_local_agent::git::{self, GitError};
    // Read-only: a diff or a `rev-parse` writes nothing.
    match git::run(
        git::in_dir(std::path::Path::new(dir), git::Writes::Nothing),
        args,
    ) {
        Ok(out) => Ok(String::from_utf8_lossy(&out).into_owned()),
        Err(e @ GitError::Spawn(_)) => Err(CliError::new(e.to_string(), "install git")),
        Err(e @ GitError::Failed { .. }) => Err(CliError::new(
            e.to_string(),
            "the worktree may have been removed; berth session show tells where the session works",
        )),
    }
}

/// The shadow repository holding a task's record, on this machine.
fn shadow_for(
    cfg: &ExecutorConfig,
    tid: &str,
    work_dir: &str,
) -> Result<(Shadow, (u64, u64)), CliError> {
    Shadow::existing(&cfg.berth_home, Path::new(work_dir)).ok_or_else(|| {
        CliError::new(
            format!("task {tid}'s change record is not on this machine"),
            "run this on the machine the task ran on (the session's machine)",
        )
    })
}

pub async fn diff(c: &Client, id: &str, stat: bool, json: bool) -> Result<u8, CliError> {
    let (task, changes, work_dir) = task_changes(c, id).await?;
    let tid = short(&task["id"]);
    let text = match &changes.commit {
        Some(commit) => {
            let parent = format!("{commit}^");
            // No external diff and no textconv: programs the worktree's configuration
            // could name (the fence of Berth's git would refuse them anyway).
            let mut args = vec!["diff", "--no-color", "--no-ext-diff", "--no-textconv", "-M"];
            if stat {
                args.push("--stat");
            }
            args.extend([parent.as_str(), commit.as_str()]);
            git_in(&work_dir, &args)?
        }
        None if changes.files.is_empty() => String::new(),
        None => {
            let cfg = config(c)?;
            let (shadow, _) = shadow_for(&cfg, &tid, &work_dir)?;
            shadow.task_diff(&task_id(&task, id)?, stat).map_err(|e| {
                CliError::new(
                    e.to_string(),
                    "the record may have been pruned (settings: snapshots)",
                )
            })?
        }
    };
    if json {
        print_json(&json!({"task": task["id"], "changes": changes, "diff": text}));
        return Ok(0);
    }
    if changes.files.is_empty() {
        println!("task {tid} changed no files");
    }
    print!("{text}");
    for s in &changes.skipped {
        eprintln!("not tracked: {} ({})", inert(&s.path), inert(&s.reason));
    }
    Ok(0)
}

pub async fn undo(c: &Client, id: &str, force: bool, json: bool) -> Result<u8, CliError> {
    let undone = undo_task(c, id, force).await?;
    if json {
        print_json(&json!({"task": undone.task_id, "restored": undone.restored}));
    } else {
        for line in &undone.lines {
            println!("{line}");
        }
    }
    if let Some(w) = &undone.warning {
        eprintln!("warning: {w}");
    }
    Ok(0)
}

/// What an undo did, for the CLI and the chat's `/undo`.
#[derive(Debug)]
pub struct Undone {
    pub task_id: TaskId,
    /// Every path written back (a rename: both its paths).
    pub restored: Vec<String>,
    /// For people: one line for the task, then one per file it changed (a rename is one).
    pub lines: Vec<String>,
    /// The files are back, but something after that did not work.
    pub warning: Option<String>,
}

/// Undoes task `id` (a prefix): its files as they were before it, or a revert commit
/// in worktree mode; the transcript records it.
pub async fn undo_task(c: &Client, id: &str, force: bool) -> Result<Undone, CliError> {
    let (task, changes, work_dir) = task_changes(c, id).await?;
    let task_id = task_id(&task, id)?;
    let tid = short(&task["id"]);
    if changes.files.is_empty() {
        return Err(CliError::new(
            format!("task {tid} changed no files, so there is nothing to undo"),
            "berth task list --session ID shows the session's tasks",
        ));
    }
    let session = c
        .get(&format!(
            "/api/v1/sessions/{}",
            encode(task["session_id"].as_str().unwrap_or(""))
        ))
        .await?;
    let b = &session["binding"];
    let sid = short(&session["id"]);
    if b.is_null() {
        return Err(CliError::new(
            format!(
                "session {sid} is no longer bound; task {tid} ran in {}",
                inert(&work_dir)
            ),
            format!("link it back first: berth session link {sid} {work_dir}"),
        ));
    }
    if b["daemon"].as_str() != Some(c.machine().as_str()) {
        return Err(CliError::new(
            format!(
                "session {sid} is bound on machine {}, not this one",
                inert(b["daemon_name"].as_str().unwrap_or("?"))
            ),
            "run berth task undo on that machine",
        ));
    }
    let cfg = config(c)?;
    let files: Vec<String> = changes.files.iter().map(|f| f.path.clone()).collect();
    let (files, revert) = match &changes.commit {
        Some(commit) => (
            files,
            Some(undo_commit(&cfg, &tid, &work_dir, commit).await?),
        ),
        None => {
            if b["dir"].as_str() != Some(work_dir.as_str()) {
                return Err(CliError::new(
                    format!(
                        "session {sid} is now bound to {}; task {tid} changed {}",
                        inert(b["display"].as_str().unwrap_or("?")),
                        inert(&work_dir)
                    ),
                    format!("link it back first (berth session link {sid} {work_dir}), then undo"),
                ));
            }
            (
                undo_in_place(&cfg, &task_id, &tid, &work_dir, &changes, force).await?,
                None,
            )
        }
    };
    // The transcript names the task's files, one per change (a rename once).
    let changed: Vec<&str> = changes.files.iter().map(|f| f.path.as_str()).collect();
    let recorded = c
        .post(
            &format!("/api/v1/tasks/{}/undone", encode(task_id.as_str())),
            &json!({"files": changed, "forced": force, "commit": revert}),
        )
        .await;
    let n = changes.files.len();
    let mut lines = vec![format!(
        "undid task {tid}: {n} file{} put back as before it",
        if n == 1 { "" } else { "s" }
    )];
    for f in &changes.files {
        let path = inert(&f.path);
        lines.push(match (f.status.as_str(), &f.from) {
            ("added", _) => format!("  removed       {path}"),
            ("renamed", Some(from)) => format!("  renamed back  {path} \u{2192} {}", inert(from)),
            _ => format!("  restored      {path}"),
        });
    }
    Ok(Undone {
        task_id,
        restored: files,
        lines,
        warning: recorded.err().map(|e| {
            format!(
                "the files are back, but the transcript could not record it: {}",
                e.message
            )
        }),
    })
}

async fn lock_dir(
    cfg: &ExecutorConfig,
    dir: &berth_core::LocalPath,
    tid: &str,
) -> Result<berth_local_agent::dir::lock::DirLock, CliError> {
    let locks = berth_local_agent::dir::lock::DirLocks::new(cfg.lock_dir.clone())
        .map_err(|e| CliError::new(e.to_string(), "check BERTH_LOCK_DIR"))?;
    let (_tx, mut never) = tokio::sync::watch::channel(false);
    locks
        .acquire(
            dir,
            &format!("undo-{tid}"),
            |why| eprintln!("{why}"),
            &mut never,
        )
        .await
        .map_err(|e| CliError::new(e.to_string(), "try again"))
}

async fn undo_in_place(
    cfg: &ExecutorConfig,
    task_id: &TaskId,
    tid: &str,
    work_dir: &str,
    changes: &Changes,
    force: bool,
) -> Result<Vec<String>, CliError> {
    // An undo a Berth left half done is finished first.
    changes::replay_undos(&cfg.journal_dir());
    let (shadow, identity) = shadow_for(cfg, tid, work_dir)?;
    let pinned = berth_local_agent::dir::validate::validate(&cfg.context(), work_dir)
        .map_err(CliError::from_refusal)?;
    if pinned.identity() != identity {
        return Err(CliError::from_refusal(
            berth_local_agent::dir::pin::path_changed(pinned.display()),
        ));
    }
    let _lock = lock_dir(cfg, pinned.canonical(), tid).await?;
    pinned.recheck().map_err(CliError::from_refusal)?;
    let plan = changes::plan_undo(&shadow, &pinned, task_id, changes).map_err(|e| {
        CliError::new(
            e.to_string(),
            "the record may have been pruned (settings: snapshots)",
        )
    })?;
    if plan.already_undone {
        return Err(CliError::new(
            format!(
                "task {tid}'s changes are already undone: its files are as they were before it"
            ),
            "nothing to do",
        ));
    }
    if !plan.changed_since.is_empty() && !force {
        return Err(CliError {
            code: Some(ErrorCode::ChangedSince),
            ..CliError::new(
                format!(
                    "{} changed since task {tid} (by you or a later task): {}",
                    if plan.changed_since.len() == 1 {
                        "this file"
                    } else {
                        "these files"
                    },
                    plan.changed_since.join(", ")
                ),
                format!(
                    "undoing would lose those changes; berth task undo {tid} --force does it anyway"
                ),
            )
        });
    }
    let files: Vec<String> = plan.restores.iter().map(|r| r.path.clone()).collect();
    let undo_plan = UndoPlan {
        task_id: task_id.clone(),
        dir: pinned.canonical().as_str().to_owned(),
        dev: identity.0,
        ino: identity.1,
        git_dir: shadow.git_dir().to_owned(),
        files: plan.restores,
    };
    changes::undo(&cfg.journal_dir(), &undo_plan, &pinned).map_err(|e| {
        CliError::new(
            format!("the undo stopped: {e}"),
            "fix the cause and run it again; a restart of berth finishes it",
        )
    })?;
    Ok(files)
}

/// Reverts a worktree turn's commit on the session's branch, under the worktree's
/// lock; returns the revert commit.
async fn undo_commit(
    cfg: &ExecutorConfig,
    tid: &str,
    work_dir: &str,
    commit: &str,
) -> Result<String, CliError> {
    let dir = berth_core::LocalPath::parse(berth_core::Platform::native(), work_dir)
        .map_err(CliError::from_refusal)?;
    let _lock = lock_dir(cfg, &dir, tid).await?;
    let root = git_in(work_dir, &["rev-parse", "--show-toplevel"])?;
    berth_local_agent::run::worktree::revert(Path::new(root.trim()), commit).map_err(|e| {
        CliError::new(
            format!("task {tid}'s commit cannot be reverted cleanly: {e}"),
            "later turns changed the same lines; revert it by hand in the worktree, or merge as is",
        )
    })
}
