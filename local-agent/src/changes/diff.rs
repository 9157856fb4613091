//! A task's record: its two trees kept under `refs/berth/<task>/`, the change summary
//! between them, `berth task diff`, and the pruning of old records.

use super::error::ChangesError;
use super::limits::Limits;
use super::shadow::{Shadow, now_secs};
use super::tree::Snapshot;
use berth_core::TaskId;
use berth_core::api::{Changes, FileChange, Skipped};
use berth_core::patch::TaskDiff;
use berth_host::private;
use serde::{Deserialize, Serialize};
use std::process::Stdio;

/// Records dropped before their objects are pruned, together.
pub(super) const PRUNE_BATCH: usize = 50;

/// One record in the shadow repository's log: a task and when it ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Entry {
    pub(super) task: TaskId,
    pub(super) at: u64,
}

impl Shadow {
    /// The records kept in this shadow repository, oldest first.
    pub(super) fn log(&self) -> Vec<Entry> {
        std::fs::read_to_string(self.git_dir.join("berth-log.json"))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default()
    }

    /// Keeps a task's two trees and returns what changed between them.
    pub fn record(
        &self,
        task_id: &TaskId,
        before: &Snapshot,
        after: &Snapshot,
        limits: &Limits,
    ) -> Result<Changes, ChangesError> {
        let mut log = self.log();
        log.push(Entry {
            task: task_id.clone(),
            at: now_secs(),
        });
        let cut = now_secs().saturating_sub(limits.max_age.as_secs());
        let keep_from = log.len().saturating_sub(limits.keep);
        let dropped = |i: usize, e: &Entry| i < keep_from || e.at < cut;
        // Past the limits, records go a tenth of `keep` at a time: between two such
        // drops a record starts no git at all (its refs are written as files).
        let due = log
            .iter()
            .enumerate()
            .filter(|(i, e)| dropped(*i, e))
            .count();
        let slack = limits.keep / 10;
        let (old, kept): (Vec<_>, Vec<_>) = log
            .into_iter()
            .enumerate()
            .partition(|(i, e)| due > slack && dropped(*i, e));
        // One transaction: this task's two trees in, the records past the limits out.
        let mut input = format!(
            "update refs/berth/{task_id}/before {}\nupdate refs/berth/{task_id}/after {}\n",
            before.tree, after.tree
        );
        for (_, e) in &old {
            for which in ["before", "after"] {
                input.push_str(&format!("delete refs/berth/{}/{which}\n", e.task));
            }
        }
        let kept: Vec<Entry> = kept.into_iter().map(|(_, e)| e).collect();
        if old.is_empty() {
            // Nothing to drop: the two refs are written as git writes a loose ref (a
            // lock file renamed into place), without starting git for it.
            self.write_ref(task_id, "before", &before.tree)?;
            self.write_ref(task_id, "after", &after.tree)?;
            private::write(
                self.git_dir.join("berth-log.json"),
                serde_json::to_string(&kept).unwrap_or_default(),
            )?;
        } else {
            self.drop_refs(&input, &kept)?;
        }
        // The objects only the dropped records held go in batches: a prune reads
        // every object, which would otherwise cost each task past the limit as much
        // as a full scan.
        if !old.is_empty() {
            let counter = self.git_dir.join("berth-unpruned");
            let unpruned = std::fs::read_to_string(&counter)
                .ok()
                .and_then(|t| t.trim().parse::<usize>().ok())
                .unwrap_or(0)
                + old.len();
            if unpruned >= PRUNE_BATCH {
                let _ = self.git(["prune", "--expire=now"]);
                let _ = std::fs::remove_file(&counter);
            } else {
                private::write(&counter, unpruned.to_string())?;
            }
        }
        // A seeded shadow holds the content before the task of what changed only once
        // it is copied from the repository (see `seed`).
        let lost = if before.tree == after.tree {
            Vec::new()
        } else {
            self.own_before(&before.tree, &after.tree)?
        };
        if !lost.is_empty() {
            return Err(ChangesError::Lost(lost));
        }
        let mut changes = if before.tree == after.tree {
            Changes {
                files: Vec::new(),
                skipped: Vec::new(),
                commit: None,
                fenced: false,
                undone_at: None,
            }
        } else {
            self.diff_trees(&before.tree, &after.tree)?
        };
        // A recorded file that grew past the cap is still there: modified, its new
        // content not recorded (not deleted).
        for f in &mut changes.files {
            if f.status == "deleted" && after.large.iter().any(|(p, _, _)| *p == f.path) {
                f.status = String::from("modified");
                f.added = None;
                f.removed = None;
            }
        }
        // Large files new or changed during the task: not recorded, and said so.
        for (path, size, mtime) in &after.large {
            let same = before
                .large
                .iter()
                .any(|(p, s, m)| p == path && s == size && m == mtime);
            if !same {
                changes.skipped.push(Skipped {
                    path: path.clone(),
                    reason: format!(
                        "{} MB, over the {} MB cap",
                        size.div_ceil(1024 * 1024),
                        limits.max_file_bytes / (1024 * 1024)
                    ),
                });
            }
        }
        Ok(changes)
    }

    /// Drops the records of `tasks` (a deleted session's): their refs and their log
    /// entries; the objects only they held go with the next prune. Returns how many
    /// of them had a record here.
    pub fn forget(&self, tasks: &[TaskId]) -> Result<usize, ChangesError> {
        let here: Vec<&TaskId> = tasks
            .iter()
            .filter(|t| self.task_trees(t).is_some())
            .collect();
        let log = self.log();
        let kept: Vec<Entry> = log
            .iter()
            .filter(|e| !tasks.contains(&e.task))
            .cloned()
            .collect();
        if here.is_empty() && kept.len() == log.len() {
            return Ok(0);
        }
        let mut input = String::new();
        for t in &here {
            for which in ["before", "after"] {
                input.push_str(&format!("delete refs/berth/{t}/{which}\n"));
            }
        }
        self.drop_refs(&input, &kept)?;
        Ok(here.len())
    }

    /// `refs/berth/<task>/<which>` set to `oid` as a loose ref.
    fn write_ref(&self, task_id: &TaskId, which: &str, oid: &str) -> Result<(), ChangesError> {
        if oid.len() != 40 || !oid.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(ChangesError::Spawn(std::io::Error::other(format!(
                "{oid:?} is not an object id"
            ))));
        }
        let dir = self
            .git_dir
            .join("refs")
            .join("berth")
            .join(task_id.as_str());
        // Private like the rest of the shadow (git would honour the umask).
        private::dir(&dir)?;
        let lock = dir.join(format!("{which}.lock"));
        private::write(&lock, format!("{oid}\n"))?;
        std::fs::rename(&lock, dir.join(which))?;
        Ok(())
    }

    /// Deletes the refs `input` names (`update-ref --stdin` lines) and writes the log
    /// of the records `kept`: what pruning and forgetting a record share.
    fn drop_refs(&self, input: &str, kept: &[Entry]) -> Result<(), ChangesError> {
        let mut child = self
            .command()
            .args(["update-ref", "--stdin"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()?;
        if let Some(mut s) = child.stdin.take() {
            use std::io::Write;
            s.write_all(input.as_bytes())?;
        }
        crate::git::check(child.wait_with_output()?, "update-ref --stdin")?;
        private::write(
            self.git_dir.join("berth-log.json"),
            serde_json::to_string(kept).unwrap_or_default(),
        )?;
        Ok(())
    }

    /// The summary of two trees: status and line counts per file, renames found.
    pub fn diff_trees(&self, before: &str, after: &str) -> Result<Changes, ChangesError> {
        // The two passes run side by side.
        let start = |format: &str| {
            self.command()
                .args(["diff-tree", "-r", "-z", "-M", format, before, after])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
        };
        let (status, numstat) = (start("--name-status")?, start("--numstat")?);
        let finish = |child: std::process::Child, format: &str| {
            let out = child.wait_with_output()?;
            crate::git::check(out, &format!("diff-tree {format} {before} {after}"))
                .map_err(ChangesError::from)
        };
        let status = finish(status, "--name-status")?;
        let numstat = finish(numstat, "--numstat")?;
        Ok(Changes {
            files: parse_diff(&status, &numstat),
            skipped: Vec::new(),
            commit: None,
            fenced: false,
            undone_at: None,
        })
    }

    /// The trees a task's record holds: (before, after).
    pub fn task_trees(&self, task_id: &TaskId) -> Option<(String, String)> {
        let get = |w: &str| {
            self.git([
                "rev-parse",
                "--verify",
                "-q",
                &format!("refs/berth/{task_id}/{w}"),
            ])
            .ok()
            .filter(|s| !s.is_empty())
        };
        Some((get("before")?, get("after")?))
    }

    /// `git diff` of a task, unified or `--stat`.
    pub fn task_diff(&self, task_id: &TaskId, stat: bool) -> Result<String, ChangesError> {
        let (before, after) = self
            .task_trees(task_id)
            .ok_or_else(|| ChangesError::RecordGone {
                task: task_id.to_string(),
                why: "pruned, or it never ran here",
            })?;
        let mut args = vec!["diff", "--no-color", "-M", "--no-ext-diff"];
        if stat {
            args.push("--stat");
        }
        args.push(&before);
        args.push(&after);
        Ok(String::from_utf8_lossy(&self.git_bytes(&args)?).into_owned())
    }
}

/// The most of git's patch text read for a task's lines: past it the rest is only said.
pub const PATCH_READ: usize = 16 * berth_core::patch::MAX_BYTES;

/// The arguments of `git diff-tree` for a task's lines: a plain patch, renames found,
/// no program of the repository's (external diff, text conversion) and paths as UTF-8.
pub const PATCH_ARGS: &[&str] = &[
    "-c",
    "core.quotePath=false",
    "diff-tree",
    "-r",
    "-p",
    "-M",
    "--no-color",
    "--no-ext-diff",
    "--no-textconv",
];

impl Shadow {
    /// A task's lines between two trees, bounded ([`berth_core::patch`]).
    pub fn patch(&self, before: &str, after: &str) -> Result<TaskDiff, ChangesError> {
        let (raw, more) = crate::git::run_capped(
            self.command(),
            PATCH_ARGS.iter().copied().chain([before, after]),
            PATCH_READ,
        )?;
        Ok(TaskDiff::parse(&raw, more))
    }
}

/// Joins `diff-tree -z --name-status` and `--numstat` outputs into file changes.
pub fn parse_diff(status: &[u8], numstat: &[u8]) -> Vec<FileChange> {
    let fields = |b: &[u8]| -> Vec<String> {
        b.split(|c| *c == 0)
            .map(|f| String::from_utf8_lossy(f).into_owned())
            .collect()
    };
    let mut files = Vec::new();
    let s = fields(status);
    let mut i = 0;
    while i < s.len() {
        let code = s[i].trim();
        if code.is_empty() {
            i += 1;
            continue;
        }
        let kind = code.chars().next().unwrap_or('M');
        if matches!(kind, 'R' | 'C') && i + 2 < s.len() {
            files.push(FileChange {
                path: s[i + 2].clone(),
                status: String::from(if kind == 'R' { "renamed" } else { "added" }),
                from: (kind == 'R').then(|| s[i + 1].clone()),
                added: None,
                removed: None,
            });
            i += 3;
        } else if i + 1 < s.len() {
            let status = match kind {
                'A' => "added",
                'D' => "deleted",
                _ => "modified",
            };
            files.push(FileChange {
                path: s[i + 1].clone(),
                status: status.to_owned(),
                from: None,
                added: None,
                removed: None,
            });
            i += 2;
        } else {
            break;
        }
    }
    // numstat: `A\tR\tpath\0`, or for a rename `A\tR\t\0from\0to\0`.
    let n = fields(numstat);
    let mut j = 0;
    while j < n.len() {
        let f = &n[j];
        if f.is_empty() {
            j += 1;
            continue;
        }
        let mut parts = f.splitn(3, '\t');
        let (a, r, path) = (
            parts.next().unwrap_or(""),
            parts.next().unwrap_or(""),
            parts.next().unwrap_or(""),
        );
        let (path, step) = if path.is_empty() && j + 2 < n.len() {
            (n[j + 2].clone(), 3)
        } else {
            (path.to_owned(), 1)
        };
        if let Some(fc) = files.iter_mut().find(|fc| fc.path == path) {
            fc.added = a.parse().ok();
            fc.removed = r.parse().ok();
        }
        j += step;
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    files
}
