//! Per-session git worktrees of a bound repository, through the `git` CLI.
//!
//! `$BERTH_HOME/worktrees/<session>` on branch `berth/<session-short>`, created on the
//! first turn and reused after; the changes of each turn are committed on that branch,
//! so the user's checkout is never touched and the work is one `git merge` away.

use crate::git::{self, GitError, Writes};
use berth_core::{ErrorCode, Refusal, SessionId, TaskId};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// Why a worktree could not be made or committed.
#[derive(Debug, thiserror::Error)]
pub enum WorktreeError {
    #[error("{dir} is not inside a git repository")]
    NotARepo { dir: String },
    #[error(transparent)]
    Git(#[from] GitError),
    #[error("cannot create the worktree's directories: {0}")]
    Io(#[from] std::io::Error),
}

impl WorktreeError {
    /// The refusal for a directory that cannot have a worktree, if that is what this is.
    pub fn refusal(&self, display: &str) -> Option<Refusal> {
        match self {
            WorktreeError::NotARepo { .. } => Some(Refusal::new(
                ErrorCode::NotAGitRepo,
                format!("{display} is not inside a git repository, so it cannot have a worktree"),
                "link it in place (--mode in-place), or run `git init` there first",
            )),
            WorktreeError::Git(_) | WorktreeError::Io(_) => None,
        }
    }
}

/// A session's worktree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Worktree {
    /// The worktree's top directory.
    pub root: PathBuf,
    /// Where the agent works: the bound directory's counterpart inside the worktree.
    pub work_dir: PathBuf,
    pub branch: String,
    /// The repository's common git directory (objects, refs, `worktrees/`), which
    /// the worktree's steps write.
    pub common: PathBuf,
}

impl Worktree {
    /// What git may write for this worktree: the worktrees' folder (the worktree
    /// itself) and the repository's git directory.
    fn writes(&self) -> Writes {
        writes(&self.root, &self.common)
    }
}

/// What a worktree step may write: the worktrees' folder holding `root`, and the
/// repository's common git directory `common`.
fn writes(root: &Path, common: &Path) -> Writes {
    Writes::Beneath(vec![
        root.parent().unwrap_or(root).to_owned(),
        common.to_owned(),
    ])
}

/// `git -C dir args…`, writing only as `writes` says.
fn git<I, S>(dir: &Path, writes: &Writes, args: I) -> Result<String, WorktreeError>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    Ok(git::text(git::in_dir(dir, writes.clone()), args)?)
}

/// The common git directory of the repository holding `dir`, absolute.
fn common_dir(dir: &Path) -> Result<PathBuf, WorktreeError> {
    let common = git(
        dir,
        &Writes::Nothing,
        ["rev-parse", "--path-format=absolute", "--git-common-dir"],
    )?;
    Ok(PathBuf::from(common))
}

/// `-c user.name=… -c user.email=…` for a commit: the repository's own identity if it
/// has one, else the user's global one, else Berth's.
fn identity(root: &Path, writes: &Writes) -> Vec<String> {
    let local = |key: &str| git(root, writes, ["config", "--local", key]).ok();
    let user = git::user();
    let name = local("user.name")
        .or(user.name)
        .unwrap_or_else(|| "Berth".to_owned());
    let email = local("user.email")
        .or(user.email)
        .unwrap_or_else(|| "berth@localhost".to_owned());
    vec![
        "-c".to_owned(),
        format!("user.name={name}"),
        "-c".to_owned(),
        format!("user.email={email}"),
    ]
}

/// The branch of `session`: `berth/` and the session id's first 8 characters.
pub fn branch_name(session: &SessionId) -> String {
    let short: String = session.as_str().chars().take(8).collect();
    format!("berth/{short}")
}

/// Creates or reuses the worktree of `session` for the repository holding `bound`.
pub fn ensure(
    bound: &Path,
    berth_home: &Path,
    session: &SessionId,
) -> Result<Worktree, WorktreeError> {
    let not_repo = || WorktreeError::NotARepo {
        dir: bound.display().to_string(),
    };
    let read = Writes::Nothing;
    let top = git(bound, &read, ["rev-parse", "--show-toplevel"]).map_err(|_| not_repo())?;
    let prefix = git(bound, &read, ["rev-parse", "--show-prefix"]).map_err(|_| not_repo())?;
    let common = common_dir(bound).map_err(|_| not_repo())?;
    let root = berth_home.join("worktrees").join(session);
    let branch = branch_name(session);
    let usable = root.join(".git").exists()
        && git(&root, &read, ["rev-parse", "--show-toplevel"]).is_ok_and(|t| Path::new(&t) == root);
    if !usable {
        if let Some(parent) = root.parent() {
            berth_host::private::dir(parent)?;
        }
        let writes = writes(&root, &common);
        // A stale registration (the folder was deleted) would block `worktree add`.
        let _ = git(Path::new(&top), &writes, ["worktree", "prune"]);
        let exists = git(
            Path::new(&top),
            &read,
            [
                "rev-parse",
                "--verify",
                "--quiet",
                &format!("refs/heads/{branch}"),
            ],
        )
        .is_ok();
        let root_os = root.as_os_str();
        if exists {
            git(
                Path::new(&top),
                &writes,
                [
                    OsStr::new("worktree"),
                    OsStr::new("add"),
                    root_os,
                    OsStr::new(&branch),
                ],
            )?;
        } else {
            git(
                Path::new(&top),
                &writes,
                [
                    OsStr::new("worktree"),
                    OsStr::new("add"),
                    OsStr::new("-b"),
                    OsStr::new(&branch),
                    root_os,
                ],
            )?;
        }
    }
    let work_dir = if prefix.is_empty() {
        root.clone()
    } else {
        root.join(prefix.trim_end_matches('/'))
    };
    std::fs::create_dir_all(&work_dir)?;
    Ok(Worktree {
        root,
        work_dir,
        branch,
        common,
    })
}

/// Commits everything changed in the worktree on its branch; `false` when there was
/// nothing to commit.
pub fn commit_turn(wt: &Worktree, task_id: &TaskId) -> Result<Option<String>, WorktreeError> {
    let writes = wt.writes();
    git(&wt.root, &writes, ["add", "-A"])?;
    if git(&wt.root, &writes, ["status", "--porcelain"])?.is_empty() {
        return Ok(None);
    }
    let mut args = identity(&wt.root, &writes);
    args.extend(["commit", "-q", "--no-verify", "-m"].map(String::from));
    args.push(format!("berth: task {task_id}"));
    git(&wt.root, &writes, &args)?;
    Ok(Some(
        git(&wt.root, &Writes::Nothing, ["rev-parse", "HEAD"])?
            .trim()
            .to_owned(),
    ))
}

/// The change summary of a turn's commit, from git itself.
pub fn commit_changes(
    wt: &Worktree,
    commit: &str,
) -> Result<berth_core::api::Changes, WorktreeError> {
    let run = |args: &[&str]| -> Result<Vec<u8>, WorktreeError> {
        Ok(git::run(git::in_dir(&wt.root, Writes::Nothing), args)?)
    };
    let parent = format!("{commit}^");
    let status = run(&[
        "diff-tree",
        "-r",
        "-z",
        "-M",
        "--name-status",
        &parent,
        commit,
    ])?;
    let numstat = run(&["diff-tree", "-r", "-z", "-M", "--numstat", &parent, commit])?;
    Ok(berth_core::api::Changes {
        files: crate::changes::parse_diff(&status, &numstat),
        skipped: Vec::new(),
        commit: Some(commit.to_owned()),
        fenced: false,
        undone_at: None,
    })
}

/// The lines of the turn committed as `commit`, bounded ([`berth_core::patch`]).
pub fn commit_patch(
    wt: &Worktree,
    commit: &str,
) -> Result<berth_core::patch::TaskDiff, WorktreeError> {
    let parent = format!("{commit}^");
    let (raw, more) = git::run_capped(
        git::in_dir(&wt.root, Writes::Nothing),
        crate::changes::PATCH_ARGS
            .iter()
            .copied()
            .chain([parent.as_str(), commit]),
        crate::changes::PATCH_READ,
    )?;
    Ok(berth_core::patch::TaskDiff::parse(&raw, more))
}

/// Undoes a turn on the session's branch with a revert commit. A conflict (later
/// turns changed the same lines) is aborted and reported.
pub fn revert(root: &Path, commit: &str) -> Result<String, WorktreeError> {
    let writes = writes(root, &common_dir(root)?);
    let mut args = identity(root, &writes);
    args.extend(["revert", "--no-edit", commit].map(String::from));
    match git(root, &writes, &args) {
        Ok(_) => Ok(git(root, &Writes::Nothing, ["rev-parse", "HEAD"])?
            .trim()
            .to_owned()),
        Err(e) => {
            let _ = git(root, &writes, ["revert", "--abort"]);
            Err(e)
        }
    }
}

/// Removes the worktree (and keeps its branch).
pub fn remove(repo: &Path, wt: &Worktree) -> Result<(), WorktreeError> {
    git(
        repo,
        &wt.writes(),
        [
            OsStr::new("worktree"),
            OsStr::new("remove"),
            OsStr::new("--force"),
            wt.root.as_os_str(),
        ],
    )?;
    Ok(())
}
