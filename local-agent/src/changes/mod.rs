//! What an agent changed in a bound directory, and putting it back.
//!
//! Each bound directory gets a *shadow* git repository in Berth's state,
//! `$BERTH_HOME/snapshots/<hash of the path>.git`, used with `--work-tree` set to the
//! directory and its own index as a stat cache. Before an in-place run and after it
//! (both under the directory's lock) Berth records the directory's tree there; the
//! difference is the task's change summary, and the two trees stay under
//! `refs/berth/<task>/{before,after}` for `berth task diff` and `berth task undo`.
//! Nothing is ever written into the directory or its own `.git`: git reads the work
//! tree, and writes only in the shadow repository.
//!
//! - `.gitignore` files (and the user's global excludes) are respected, as git does.
//! - Files over the size cap are not recorded; they are listed as skipped.
//! - Changes outside the directory are not tracked.
//! - Old records are pruned by count and age ([`Limits`], the user settings'
//!   `snapshots`).
//!
//! Undo restores exactly the files a task changed to their content before it. Its
//! plan is written to `$BERTH_HOME/journal/*.undo` and synced before the first file is
//! touched; a Berth that stops mid-undo finishes it at the next start
//! ([`replay_undos`]), so the directory ends either untouched or fully undone.

use crate::dir::pin::PinnedDir;
use crate::inject::journal::abandoned;
use berth_core::api::{Changes, FileChange, Skipped};
use berth_web::private;
use rustix::fs::{AtFlags, FlockOperation, Mode, OFlags};
use rustix::io::Errno;
use serde::{Deserialize, Serialize};
use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[cfg(target_os = "linux")]
pub mod watch;

/// Records dropped before their objects are pruned, together.
const PRUNE_BATCH: usize = 50;

/// Where the shadow repositories live inside Berth's home.
pub const SNAPSHOTS_DIR: &str = "snapshots";

/// How much the change record keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Files larger than this are not recorded (listed as skipped).
    pub max_file_bytes: u64,
    /// Tasks whose records are kept per directory.
    pub keep: usize,
    /// Records older than this are dropped.
    pub max_age: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_file_bytes: 10 * 1024 * 1024,
            keep: 200,
            max_age: Duration::from_secs(30 * 24 * 3600),
        }
    }
}

impl Limits {
    /// The defaults, with what the user settings' `snapshots` set.
    pub fn from_settings(s: &berth_core::settings::SnapshotLimits) -> Limits {
        let d = Limits::default();
        Limits {
            max_file_bytes: s
                .max_file_mb
                .map_or(d.max_file_bytes, |mb| mb * 1024 * 1024),
            keep: s
                .keep
                .map_or(d.keep, |k| usize::try_from(k).unwrap_or(usize::MAX)),
            max_age: s
                .max_age_days
                .map_or(d.max_age, |days| Duration::from_secs(days * 24 * 3600)),
        }
    }
}

/// Why a record or an undo could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ChangesError {
    #[error("git {args} failed: {stderr}")]
    Git { args: String, stderr: String },
    #[error("cannot run git: {0}")]
    Spawn(#[from] std::io::Error),
    #[error("{0}")]
    Other(String),
}

/// A directory's tree at one moment, and the large files left out of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub tree: String,
    /// Files over the cap, with their size and modification time.
    pub large: Vec<(String, u64, i64)>,
}

/// Where the shadow repository of `dir` lives: a hash of its path.
fn shadow_dir(berth_home: &Path, dir: &Path) -> PathBuf {
    let key = berth_web::daemon::token_hash(&dir.to_string_lossy());
    berth_home
        .join(SNAPSHOTS_DIR)
        .join(format!("{}.git", &key[..24]))
}

/// The shadow repository of one bound directory.
#[derive(Debug, Clone)]
pub struct Shadow {
    git_dir: PathBuf,
    work_tree: PathBuf,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// The directory's metadata when a snapshot was taken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Manifest {
    tree: String,
    digest: u64,
    count: usize,
    taken_ns: u128,
    large: Vec<(String, u64, i64)>,
}

/// Directories larger than this are not walked: git's own scan is then the check.
const WALK_LIMIT: usize = 4_000;

/// Timestamps are coarse (a kernel tick): an inode changed this close to the
/// manifest's time may have changed again unseen, so it makes the walk inconclusive.
const RACY_NS: u128 = 100_000_000;

/// A digest of every entry under `root` but `.git` directories (ignored files
/// included: this proves "nothing changed at all", which is stricter than git's view):
/// the path, type, size, inode, modification and change times, in a fixed order.
/// `None` when the walk fails, passes [`WALK_LIMIT`], or finds an entry changed within
/// [`RACY_NS`] of `taken_ns` or later (any write updates the change time, which no
/// one can set back).
fn walk_digest(root: &Path, taken_ns: u128) -> Option<(u64, usize)> {
    use std::hash::{Hash, Hasher};
    use std::os::unix::fs::MetadataExt;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    let mut count = 0usize;
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let mut names: Vec<std::ffi::OsString> = std::fs::read_dir(root.join(&rel))
            .ok()?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<Result<_, _>>()
            .ok()?;
        names.sort();
        for name in names {
            if name == ".git" {
                continue;
            }
            let path = rel.join(&name);
            let md = std::fs::symlink_metadata(root.join(&path)).ok()?;
            count += 1;
            if count > WALK_LIMIT {
                return None;
            }
            let changed_ns = u128::try_from(md.ctime()).ok()? * 1_000_000_000
                + u128::try_from(md.ctime_nsec()).ok()?;
            if taken_ns != u128::MAX && changed_ns + RACY_NS >= taken_ns {
                return None;
            }
            path.hash(&mut hasher);
            (md.mode(), md.len(), md.ino(), md.mtime(), md.mtime_nsec()).hash(&mut hasher);
            (md.ctime(), md.ctime_nsec()).hash(&mut hasher);
            if md.is_dir() {
                stack.push(path);
            }
        }
    }
    Some((hasher.finish(), count))
}

/// One record in the shadow repository's log: a task and when it ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Entry {
    task: String,
    at: u64,
}

impl Shadow {
    /// The shadow repository of `dir` (canonical path, identity), created if needed. A
    /// directory replaced at the same path (another device/inode) starts a new one.
    pub fn open(
        berth_home: &Path,
        dir: &Path,
        identity: (u64, u64),
    ) -> Result<Shadow, ChangesError> {
        let shadow = Shadow {
            git_dir: shadow_dir(berth_home, dir),
            work_tree: dir.to_owned(),
        };
        let stamp = format!("{} {} {}\n", identity.0, identity.1, dir.display());
        let id_file = shadow.git_dir.join("berth-identity");
        match std::fs::read_to_string(&id_file) {
            Ok(s) if s == stamp => {
                shadow.configure()?;
                return Ok(shadow);
            }
            Ok(_) => {
                // Another directory now has this path: its history is not this one's.
                std::fs::remove_dir_all(&shadow.git_dir)?;
            }
            Err(_) => {}
        }
        private::dir(shadow.git_dir.parent().unwrap_or(berth_home))?;
        // `--shared=0600`: git makes every file it writes there 0600 (objects 0400)
        // and every directory 0700, whatever the umask: the snapshots hold copies of
        // the user's files, a `.env` included.
        let out = Command::new("git")
            .args(["init", "-q", "--bare", "--shared=0600"])
            .arg(&shadow.git_dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .stdin(Stdio::null())
            .output()?;
        if !out.status.success() {
            return Err(ChangesError::Git {
                args: "init".into(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            });
        }
        shadow.configure()?;
        private::write(&id_file, stamp)?;
        Ok(shadow)
    }

    /// The shadow repository's settings, applied once per version of them.
    fn configure(&self) -> Result<(), ChangesError> {
        const VERSION: &str = "3";
        let stamp = self.git_dir.join("berth-config");
        if std::fs::read_to_string(&stamp).is_ok_and(|v| v == VERSION) {
            return Ok(());
        }
        for (k, v) in [
            ("gc.auto", "0"),
            ("core.autocrlf", "false"),
            ("core.quotepath", "false"),
            ("core.untrackedCache", "true"),
            ("core.fsmonitor", "false"),
            ("core.hooksPath", "/dev/null"),
            // Every git step reads the index (20,000 entries: 1.6 MB): no checksum
            // of it, and its compact form.
            ("index.skipHash", "true"),
            ("index.version", "4"),
            // Files 0600 and directories 0700 (see `open`); a repository made by an
            // older version also has what it already wrote tightened, once.
            ("core.sharedRepository", "0600"),
        ] {
            self.git(["config", k, v])?;
        }
        private::tighten_tree(&self.git_dir)?;
        private::write(&stamp, VERSION)?;
        Ok(())
    }

    /// The shadow repository's git directory.
    pub fn git_dir(&self) -> &Path {
        &self.git_dir
    }

    /// The shadow repository of a directory recorded earlier, if there is one.
    pub fn existing(berth_home: &Path, dir: &Path) -> Option<(Shadow, (u64, u64))> {
        let git_dir = shadow_dir(berth_home, dir);
        let stamp = std::fs::read_to_string(git_dir.join("berth-identity")).ok()?;
        let mut words = stamp.split_whitespace();
        let dev = words.next()?.parse().ok()?;
        let ino = words.next()?.parse().ok()?;
        Some((
            Shadow {
                git_dir,
                work_tree: dir.to_owned(),
            },
            (dev, ino),
        ))
    }

    fn command(&self) -> Command {
        let mut c = Command::new("git");
        c.arg("--git-dir")
            .arg(&self.git_dir)
            .arg("--work-tree")
            .arg(&self.work_tree)
            .args(["-c", "user.name=Berth", "-c", "user.email=berth@localhost"])
            .current_dir(&self.git_dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_OPTIONAL_LOCKS", "0")
            .env_remove("GIT_DIR")
            .env_remove("GIT_WORK_TREE")
            .env_remove("GIT_INDEX_FILE")
            .stdin(Stdio::null());
        c
    }

    fn git_bytes<I, S>(&self, args: I) -> Result<Vec<u8>, ChangesError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let args: Vec<std::ffi::OsString> =
            args.into_iter().map(|a| a.as_ref().to_owned()).collect();
        let out = self.command().args(&args).output()?;
        if out.status.success() {
            Ok(out.stdout)
        } else {
            Err(ChangesError::Git {
                args: args
                    .iter()
                    .map(|a| a.to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
                    .join(" "),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            })
        }
    }

    fn git<I, S>(&self, args: I) -> Result<String, ChangesError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        Ok(String::from_utf8_lossy(&self.git_bytes(args)?)
            .trim()
            .to_owned())
    }

    fn exclude_file(&self) -> PathBuf {
        self.git_dir.join("info").join("exclude")
    }

    /// Records the directory's tree now (the caller holds the directory's lock).
    ///
    /// Three passes of git: the new files (with the untracked cache, cheap), `add -A`
    /// (the index is the stat cache: only changed files are read), and `write-tree`.
    /// A file over the cap is left out before it is ever read; a tracked file that
    /// grows past it is read once, then left out from then on.
    pub fn snapshot(&self, limits: &Limits) -> Result<Snapshot, ChangesError> {
        #[cfg(target_os = "linux")]
        if let Some(snap) = watch::incremental(self, limits) {
            return Ok(snap);
        }
        self.snapshot_as(limits, true)
    }

    /// The tree before a run: on the path to the agent's start, so one git process
    /// less — a tracked file that grew past the cap since is read this once (and left
    /// out by the snapshot after the run).
    pub fn snapshot_before(&self, limits: &Limits) -> Result<Snapshot, ChangesError> {
        // A watched directory: only what the kernel reported changed is read.
        #[cfg(target_os = "linux")]
        if let Some(snap) = watch::incremental(self, limits) {
            return Ok(snap);
        }
        // Most often nothing changed since the last snapshot (the previous run's
        // end): a walk of the directory's metadata proves it without git.
        if let Some(snap) = self.unchanged() {
            return Ok(snap);
        }
        self.snapshot_as(limits, false)
    }

    fn manifest_file(&self) -> PathBuf {
        self.git_dir.join("berth-manifest.json")
    }

    /// The last snapshot, if the directory's metadata is exactly as it was then.
    fn unchanged(&self) -> Option<Snapshot> {
        let text = std::fs::read_to_string(self.manifest_file()).ok()?;
        let m: Manifest = serde_json::from_str(&text).ok()?;
        let now = walk_digest(&self.work_tree, m.taken_ns)?;
        (now.0 == m.digest && now.1 == m.count).then_some(Snapshot {
            tree: m.tree,
            large: m.large,
        })
    }

    /// How many entries the shadow index holds (its header), without running git.
    fn index_entries(&self) -> Option<u32> {
        use std::io::Read;
        let mut head = [0u8; 12];
        std::fs::File::open(self.git_dir.join("index"))
            .ok()?
            .read_exact(&mut head)
            .ok()?;
        (&head[..4] == b"DIRC").then(|| u32::from_be_bytes([head[8], head[9], head[10], head[11]]))
    }

    /// Notes the directory's metadata with the tree just written, as of `taken_ns`
    /// (when the snapshot began; see [`walk_digest`]). Only small directories get a
    /// manifest: walking a large one's
    /// metadata costs as much as git's own scan. A directory whose walk ran past the
    /// limit (a large ignored tree) is not walked again until its index changes size.
    fn note_manifest(&self, snap: &Snapshot, taken_ns: u128) {
        let entries = self.index_entries().unwrap_or(u32::MAX);
        let previous = std::fs::read_to_string(self.manifest_file()).unwrap_or_default();
        let _ = std::fs::remove_file(self.manifest_file());
        let too_big = format!("{{\"too_big_at\":{entries}}}");
        if entries as usize > WALK_LIMIT / 2 || previous == too_big {
            if previous == too_big {
                let _ = private::write(self.manifest_file(), &too_big);
            }
            return;
        }
        let Some((digest, count)) = walk_digest(&self.work_tree, u128::MAX) else {
            let _ = private::write(self.manifest_file(), &too_big);
            return;
        };
        {
            let m = Manifest {
                tree: snap.tree.clone(),
                digest,
                count,
                taken_ns,
                large: snap.large.clone(),
            };
            if let Ok(text) = serde_json::to_string(&m) {
                let _ = private::write(self.manifest_file(), text);
            }
        }
    }

    fn snapshot_as(&self, limits: &Limits, check_grown: bool) -> Result<Snapshot, ChangesError> {
        // Before git reads anything: whatever changes from here on is newer than the
        // manifest, so the next walk cannot take it for unchanged.
        let started_ns = now_ns();
        // Watching starts before the scan reads anything, for the same reason.
        #[cfg(target_os = "linux")]
        watch::begin(self);
        // Large files: those already left out (still large?), and new ones.
        let excluded: Vec<String> = std::fs::read_to_string(self.exclude_file())
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.strip_prefix('/'))
            .map(unescape_glob)
            .collect();
        let listed = self.git_bytes(["ls-files", "-z", "--others", "--exclude-standard"])?;
        let mut large = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for path in excluded.iter().map(String::as_str).chain(
            listed
                .split(|b| *b == 0)
                .filter(|p| !p.is_empty())
                .filter_map(|p| std::str::from_utf8(p).ok()),
        ) {
            if !seen.insert(path.to_owned()) {
                continue;
            }
            if let Ok(md) = std::fs::symlink_metadata(self.work_tree.join(path))
                && md.is_file()
                && md.len() > limits.max_file_bytes
            {
                use std::os::unix::fs::MetadataExt;
                large.push((path.to_owned(), md.len(), md.mtime()));
            }
        }
        let lines: String = large
            .iter()
            .map(|(p, _, _)| format!("/{}\n", escape_glob(p)))
            .collect();
        if let Some(parent) = self.exclude_file().parent() {
            private::dir(parent)?;
        }
        private::write(self.exclude_file(), lines)?;
        if !large.is_empty() {
            let mut args = vec![
                "rm".to_owned(),
                "--cached".into(),
                "-q".into(),
                "--ignore-unmatch".into(),
                "--".into(),
            ];
            args.extend(large.iter().map(|(p, _, _)| p.clone()));
            self.git(&args)?;
        }
        self.git(["add", "-A", "--ignore-errors"])?;
        // Tracked files that grew past the cap since the last snapshot.
        // The last snapshot's tree (a file, not a ref: one git process less). A tree
        // pruned since only makes the check fail, and be skipped.
        let last = std::fs::read_to_string(self.git_dir.join("berth-last")).ok();
        let changed = last
            .as_deref()
            .map(str::trim)
            .filter(|l| check_grown && !l.is_empty())
            .and_then(|l| {
                self.git_bytes(["diff-index", "--cached", "-z", "--name-only", l])
                    .ok()
            });
        if let Some(changed) = changed {
            let grown: Vec<(String, u64, i64)> = changed
                .split(|b| *b == 0)
                .filter_map(|p| std::str::from_utf8(p).ok())
                .filter(|p| !p.is_empty())
                .filter_map(|p| {
                    use std::os::unix::fs::MetadataExt;
                    let md = std::fs::symlink_metadata(self.work_tree.join(p)).ok()?;
                    (md.is_file() && md.len() > limits.max_file_bytes)
                        .then(|| (p.to_owned(), md.len(), md.mtime()))
                })
                .collect();
            if !grown.is_empty() {
                let mut args = vec!["rm", "--cached", "-q", "--ignore-unmatch", "--"];
                args.extend(grown.iter().map(|(p, _, _)| p.as_str()));
                self.git(&args)?;
                let mut lines = std::fs::read_to_string(self.exclude_file()).unwrap_or_default();
                for (p, _, _) in &grown {
                    lines.push_str(&format!("/{}\n", escape_glob(p)));
                }
                private::write(self.exclude_file(), lines)?;
                large.extend(grown);
            }
        }
        let tree = self.git(["write-tree"])?;
        private::write(self.git_dir.join("berth-last"), &tree)?;
        let snap = Snapshot { tree, large };
        self.note_manifest(&snap, started_ns);
        #[cfg(target_os = "linux")]
        watch::established(self, &snap);
        Ok(snap)
    }

    /// Keeps a task's two trees and returns what changed between them.
    pub fn record(
        &self,
        task_id: &str,
        before: &Snapshot,
        after: &Snapshot,
        limits: &Limits,
    ) -> Result<Changes, ChangesError> {
        let mut log = self.log();
        log.push(Entry {
            task: task_id.to_owned(),
            at: now_secs(),
        });
        let cut = now_secs().saturating_sub(limits.max_age.as_secs());
        let keep_from = log.len().saturating_sub(limits.keep);
        let (old, kept): (Vec<_>, Vec<_>) = log
            .into_iter()
            .enumerate()
            .partition(|(i, e)| *i < keep_from || e.at < cut);
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
        let out = child.wait_with_output()?;
        if !out.status.success() {
            return Err(ChangesError::Git {
                args: "update-ref --stdin".into(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            });
        }
        let kept: Vec<Entry> = kept.into_iter().map(|(_, e)| e).collect();
        private::write(
            self.git_dir.join("berth-log.json"),
            serde_json::to_string(&kept).unwrap_or_default(),
        )?;
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
        let mut changes = if before.tree == after.tree {
            Changes {
                files: Vec::new(),
                skipped: Vec::new(),
                commit: None,
                fenced: false,
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

    fn log(&self) -> Vec<Entry> {
        std::fs::read_to_string(self.git_dir.join("berth-log.json"))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default()
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
            if out.status.success() {
                Ok(out.stdout)
            } else {
                Err(ChangesError::Git {
                    args: format!("diff-tree {format} {before} {after}"),
                    stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
                })
            }
        };
        let status = finish(status, "--name-status")?;
        let numstat = finish(numstat, "--numstat")?;
        Ok(Changes {
            files: parse_diff(&status, &numstat),
            skipped: Vec::new(),
            commit: None,
            fenced: false,
        })
    }

    /// The trees a task's record holds: (before, after).
    pub fn task_trees(&self, task_id: &str) -> Option<(String, String)> {
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
    pub fn task_diff(&self, task_id: &str, stat: bool) -> Result<String, ChangesError> {
        let (before, after) = self.task_trees(task_id).ok_or_else(|| {
            ChangesError::Other(format!(
                "the record of task {task_id} is gone (pruned, or it never ran here)"
            ))
        })?;
        let mut args = vec!["diff", "--no-color", "-M", "--no-ext-diff"];
        if stat {
            args.push("--stat");
        }
        args.push(&before);
        args.push(&after);
        Ok(String::from_utf8_lossy(&self.git_bytes(&args)?).into_owned())
    }

    /// A blob's bytes and mode (`100755` executable) at `path` in `tree`; `None` when
    /// the path is not in it.
    fn blob(&self, tree: &str, path: &str) -> Result<Option<(String, String)>, ChangesError> {
        let line = self.git(["ls-tree", "-z", tree, "--", path])?;
        let line = line.trim_end_matches('\0');
        if line.is_empty() {
            return Ok(None);
        }
        // `<mode> blob <oid>\t<path>`
        let (meta, _) = line.split_once('\t').unwrap_or((line, ""));
        let mut parts = meta.split_whitespace();
        let mode = parts.next().unwrap_or("100644").to_owned();
        let _kind = parts.next();
        let oid = parts.next().unwrap_or_default().to_owned();
        Ok(Some((oid, mode)))
    }

    fn blob_bytes(&self, oid: &str) -> Result<Vec<u8>, ChangesError> {
        self.git_bytes(["cat-file", "blob", oid])
    }
}

fn escape_glob(p: &str) -> String {
    let mut out = String::new();
    for c in p.chars() {
        if matches!(c, '*' | '?' | '[' | '\\' | '!' | '#') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn unescape_glob(p: &str) -> String {
    let mut out = String::new();
    let mut esc = false;
    for c in p.chars() {
        if c == '\\' && !esc {
            esc = true;
            continue;
        }
        esc = false;
        out.push(c);
    }
    out
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

// ---- undo ----

/// One file to put back: its content before the task (`None`: it did not exist),
/// and what the task left there (`None`: nothing).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Restore {
    pub path: String,
    /// (blob id, mode) before the task.
    pub before: Option<(String, String)>,
    /// Blob id after the task.
    pub after: Option<String>,
}

/// The undo plan, as journaled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UndoPlan {
    pub task_id: String,
    pub dir: String,
    pub dev: u64,
    pub ino: u64,
    pub git_dir: PathBuf,
    pub files: Vec<Restore>,
}

/// What the files a task changed look like now against what it left.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub restores: Vec<Restore>,
    /// Files changed since the task (by the user or a later task).
    pub changed_since: Vec<String>,
    /// Every file is already as it was before the task (it was undone).
    pub already_undone: bool,
}

/// The undo of `task_id` in `dir`: what to restore and what changed since.
pub fn plan_undo(
    shadow: &Shadow,
    dir: &PinnedDir,
    task_id: &str,
    changes: &Changes,
) -> Result<Plan, ChangesError> {
    let (before, after) = shadow.task_trees(task_id).ok_or_else(|| {
        ChangesError::Other(format!(
            "the record of task {task_id} is gone (pruned, or made on another machine)"
        ))
    })?;
    let mut paths: Vec<String> = Vec::new();
    for f in &changes.files {
        if let Some(from) = &f.from {
            paths.push(from.clone());
        }
        paths.push(f.path.clone());
    }
    paths.sort();
    paths.dedup();
    let mut plan = Plan {
        already_undone: true,
        ..Plan::default()
    };
    for path in paths {
        let b = shadow.blob(&before, &path)?;
        let a = shadow.blob(&after, &path)?.map(|(oid, _)| oid);
        let now = current_blob(shadow, dir, &path)?;
        if now != a {
            plan.changed_since.push(path.clone());
        }
        if now != b.as_ref().map(|(oid, _)| oid.clone()) {
            plan.already_undone = false;
        }
        plan.restores.push(Restore {
            path,
            before: b,
            after: a,
        });
    }
    Ok(plan)
}

/// The blob id the file at `path` would have now (`None`: no regular file there).
fn current_blob(
    shadow: &Shadow,
    dir: &PinnedDir,
    path: &str,
) -> Result<Option<String>, ChangesError> {
    let bytes = match read_at(dir.fd(), path) {
        Ok(b) => b,
        Err(Errno::NOENT | Errno::NOTDIR) => return Ok(None),
        Err(e) => return Err(ChangesError::Other(format!("cannot read {path}: {e}"))),
    };
    let mut child = shadow
        .command()
        .args(["hash-object", "--stdin", "--no-filters"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        use std::io::Write;
        stdin.write_all(&bytes)?;
    }
    let out = child.wait_with_output()?;
    Ok(Some(String::from_utf8_lossy(&out.stdout).trim().to_owned()))
}

fn read_at(dir: impl AsFd, path: &str) -> Result<Vec<u8>, Errno> {
    let (parent, name) = crate::dir::fd::at_parent(dir.as_fd(), path)?;
    let st = rustix::fs::statat(&parent, name, AtFlags::SYMLINK_NOFOLLOW)?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(Errno::NOENT);
    }
    let fd = crate::dir::fd::open_nofollow(&parent, name, OFlags::RDONLY)?;
    crate::dir::fd::read_all(&fd)
}

/// Opens the parent of `rel`, creating missing directories (without following
/// symlinks).
fn parent_creating(dir: impl AsFd, rel: &str) -> Result<(OwnedFd, String), Errno> {
    let mut comps: Vec<&str> = rel.split('/').filter(|c| !c.is_empty()).collect();
    let last = comps.pop().ok_or(Errno::INVAL)?.to_owned();
    if last == ".." || comps.contains(&"..") {
        return Err(Errno::INVAL);
    }
    let mut fd = rustix::io::dup(dir.as_fd())?;
    for comp in comps {
        match crate::dir::fd::open_nofollow(&fd, comp, OFlags::RDONLY | OFlags::DIRECTORY) {
            Ok(next) => fd = next,
            Err(Errno::NOENT) => {
                rustix::fs::mkdirat(&fd, comp, Mode::from_raw_mode(0o755))?;
                fd = crate::dir::fd::open_nofollow(&fd, comp, OFlags::RDONLY | OFlags::DIRECTORY)?;
            }
            Err(e) => return Err(e),
        }
    }
    Ok((fd, last))
}

/// Puts one file back: its content before the task, written beside it and renamed
/// over it (so a reader never sees half a file), or removed.
fn apply_one(git: &Shadow, dir: impl AsFd, r: &Restore) -> Result<(), String> {
    match &r.before {
        None => match crate::dir::fd::at_parent(dir.as_fd(), &r.path) {
            Ok((parent, name)) => match rustix::fs::unlinkat(&parent, name, AtFlags::empty()) {
                Ok(()) | Err(Errno::NOENT) => Ok(()),
                Err(e) => Err(format!("cannot remove {}: {e}", r.path)),
            },
            Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(format!("cannot reach {}: {e}", r.path)),
        },
        Some((oid, mode)) => {
            let bytes = git
                .blob_bytes(oid)
                .map_err(|e| format!("cannot read the record of {}: {e}", r.path))?;
            let (parent, name) = parent_creating(dir.as_fd(), &r.path)
                .map_err(|e| format!("cannot reach {}: {e}", r.path))?;
            let tmp = format!(".{name}.berth-undo");
            let perm = if mode == "100755" { 0o755 } else { 0o644 };
            let fd = rustix::fs::openat(
                &parent,
                tmp.as_str(),
                OFlags::WRONLY
                    | OFlags::CREATE
                    | OFlags::TRUNC
                    | OFlags::NOFOLLOW
                    | OFlags::CLOEXEC,
                Mode::from_raw_mode(perm),
            )
            .map_err(|e| format!("cannot write beside {}: {e}", r.path))?;
            crate::dir::fd::write_all(&fd, &bytes)
                .map_err(|e| format!("cannot write {}: {e}", r.path))?;
            let _ = rustix::fs::fchmod(&fd, Mode::from_raw_mode(perm));
            rustix::fs::fsync(&fd).map_err(|e| format!("cannot sync {}: {e}", r.path))?;
            drop(fd);
            rustix::fs::renameat(&parent, tmp.as_str(), &parent, name.as_str())
                .map_err(|e| format!("cannot put {} back: {e}", r.path))?;
            Ok(())
        }
    }
}

/// An undo journal held by this process until the undo is done.
#[derive(Debug)]
pub struct UndoJournal {
    path: PathBuf,
    _file: std::fs::File,
}

impl UndoJournal {
    /// Writes and syncs the plan (and the directory entry) before anything is touched.
    pub fn write(journal_dir: &Path, plan: &UndoPlan) -> Result<UndoJournal, String> {
        private::dir(journal_dir).map_err(|e| e.to_string())?;
        let path = journal_dir.join(format!(
            "{}-{}.undo",
            std::process::id(),
            uuid::Uuid::now_v7().simple()
        ));
        let text = serde_json::to_vec(plan).map_err(|e| e.to_string())?;
        let fd = rustix::fs::open(
            &path,
            OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::RUSR | Mode::WUSR,
        )
        .map_err(|e| format!("cannot write the undo journal {}: {e}", path.display()))?;
        rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive)
            .map_err(|e| e.to_string())?;
        crate::dir::fd::write_all(&fd, &text).map_err(|e| e.to_string())?;
        rustix::fs::fsync(&fd).map_err(|e| e.to_string())?;
        std::fs::File::open(journal_dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| e.to_string())?;
        Ok(UndoJournal {
            path,
            _file: std::fs::File::from(fd),
        })
    }

    /// The undo is complete: the journal goes.
    pub fn done(self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Applies a journaled plan through the pinned directory. Idempotent: applying it
/// again (after a crash) finds the files already put back.
pub fn apply(plan: &UndoPlan, dir: impl AsFd) -> Result<(), String> {
    let shadow = Shadow {
        git_dir: plan.git_dir.clone(),
        work_tree: PathBuf::from(&plan.dir),
    };
    let mut problems = Vec::new();
    for r in &plan.files {
        if let Err(e) = apply_one(&shadow, dir.as_fd(), r) {
            problems.push(e);
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// Test hook: after this many files of an undo, stop and wait to be killed (the
/// fault test SIGKILLs the process there). `N:FILE`: FILE is created when it waits.
pub const PAUSE_AFTER_ENV: &str = "BERTH_TEST_UNDO_PAUSE_AFTER";

/// Applies a plan, journaled (see the module's docs).
pub fn undo(journal_dir: &Path, plan: &UndoPlan, dir: &PinnedDir) -> Result<(), String> {
    let journal = UndoJournal::write(journal_dir, plan)?;
    if let Some((n, marker)) = std::env::var(PAUSE_AFTER_ENV).ok().and_then(|v| {
        let (n, file) = v.split_once(':')?;
        Some((n.parse::<usize>().ok()?, PathBuf::from(file)))
    }) {
        let shadow = Shadow {
            git_dir: plan.git_dir.clone(),
            work_tree: PathBuf::from(&plan.dir),
        };
        for r in plan.files.iter().take(n) {
            apply_one(&shadow, dir.fd(), r)?;
        }
        let _ = private::write(&marker, "");
        loop {
            std::thread::sleep(std::time::Duration::from_secs(60));
        }
    }
    apply(plan, dir.fd())?;
    journal.done();
    Ok(())
}

/// Finishes every undo a Berth process left unfinished (journal files whose writer is
/// gone): the directory ends fully undone. One no longer the directory journaled is
/// left alone, its journal moved to `journal/unapplied/`. Returns the directories
/// finished.
pub fn replay_undos(journal_dir: &Path) -> Vec<String> {
    let mut done = Vec::new();
    for (file, _lock) in abandoned(journal_dir, "undo").files {
        let plan: Option<UndoPlan> = std::fs::read(&file)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
        let Some(plan) = plan else {
            // Torn before its sync: nothing was touched.
            let _ = std::fs::remove_file(&file);
            continue;
        };
        let opened = rustix::fs::open(
            plan.dir.as_str(),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        );
        let same = opened
            .as_ref()
            .ok()
            .and_then(|fd| rustix::fs::fstat(fd).ok())
            .is_some_and(|st| crate::dir::pin::dev_of(&st) == plan.dev && st.st_ino == plan.ino);
        match (opened, same) {
            (Ok(fd), true) => match apply(&plan, &fd) {
                Ok(()) => {
                    let _ = std::fs::remove_file(&file);
                    done.push(plan.dir.clone());
                }
                Err(e) => {
                    tracing::warn!(dir = %plan.dir, error = %e, "an unfinished undo could not be finished");
                    aside(journal_dir, &file);
                }
            },
            (Ok(_) | Err(_), _) => aside(journal_dir, &file),
        }
    }
    done
}

fn aside(journal_dir: &Path, file: &Path) {
    let dir = journal_dir.join("unapplied");
    let _ = private::dir(&dir);
    if let Some(name) = file.file_name() {
        let _ = std::fs::rename(file, dir.join(name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_output_parses_with_renames_and_binaries() {
        let status = b"M\x00src/a.rs\x00A\x00new.txt\x00D\x00old.txt\x00R100\x00b.txt\x00c.txt\x00M\x00img.png\x00";
        let numstat = b"3\t1\tsrc/a.rs\x002\t0\tnew.txt\x000\t4\told.txt\x000\t0\t\x00b.txt\x00c.txt\x00-\t-\timg.png\x00";
        let files = parse_diff(status, numstat);
        type Row<'a> = (&'a str, &'a str, Option<&'a str>, Option<u64>, Option<u64>);
        let got: Vec<Row<'_>> = files
            .iter()
            .map(|f| {
                (
                    f.path.as_str(),
                    f.status.as_str(),
                    f.from.as_deref(),
                    f.added,
                    f.removed,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("c.txt", "renamed", Some("b.txt"), Some(0), Some(0)),
                ("img.png", "modified", None, None, None),
                ("new.txt", "added", None, Some(2), Some(0)),
                ("old.txt", "deleted", None, Some(0), Some(4)),
                ("src/a.rs", "modified", None, Some(3), Some(1)),
            ]
        );
    }

    #[test]
    fn a_file_that_grows_past_the_cap_is_left_out_and_said_so() {
        let root = std::env::temp_dir().join(format!("berth-changes-{}", std::process::id()));
        let dir = root.join("dir");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("small.txt"), "tiny\n").unwrap();
        std::fs::write(dir.join("grows.txt"), "tiny\n").unwrap();
        let limits = Limits {
            max_file_bytes: 10,
            ..Limits::default()
        };
        let shadow = Shadow::open(&root.join("home"), &dir, (1, 2)).unwrap();
        let before = shadow.snapshot(&limits).unwrap();
        assert!(before.large.is_empty());
        std::fs::write(dir.join("grows.txt"), "now well past ten bytes\n").unwrap();
        std::fs::write(dir.join("new-big.txt"), "also well past ten bytes\n").unwrap();
        let after = shadow.snapshot(&limits).unwrap();
        let mut large: Vec<&str> = after.large.iter().map(|(p, _, _)| p.as_str()).collect();
        large.sort();
        assert_eq!(large, ["grows.txt", "new-big.txt"]);
        let changes = shadow.record("t1", &before, &after, &limits).unwrap();
        let files: Vec<(&str, &str)> = changes
            .files
            .iter()
            .map(|f| (f.path.as_str(), f.status.as_str()))
            .collect();
        // Modified, its new content not recorded, and listed as not tracked.
        assert_eq!(files, [("grows.txt", "modified")]);
        assert_eq!(
            (changes.files[0].added, changes.files[0].removed),
            (None, None)
        );
        let skipped: Vec<&str> = changes.skipped.iter().map(|s| s.path.as_str()).collect();
        assert!(skipped.contains(&"grows.txt") && skipped.contains(&"new-big.txt"));
        // Again, unchanged: still left out, nothing new to say.
        let again = shadow.snapshot(&limits).unwrap();
        assert_eq!(again.tree, after.tree);
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn the_before_snapshot_skips_git_only_when_nothing_changed() {
        let root = std::env::temp_dir().join(format!("berth-manifest-{}", std::process::id()));
        let dir = root.join("dir");
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("sub/a.txt"), "one\n").unwrap();
        let limits = Limits::default();
        let shadow = Shadow::open(&root.join("home"), &dir, (1, 2)).unwrap();
        // Fresh writes are "racy": no shortcut right after them. Written again once the
        // snapshot has begun, so the file is fresh whatever the machine's load (the
        // first write can be older than the racy window by the time a slow snapshot
        // starts).
        let first = shadow.snapshot(&limits).unwrap();
        std::fs::write(dir.join("sub/a.txt"), "one\n").unwrap();
        assert!(
            shadow.unchanged().is_none(),
            "a file changed 0 ms before the manifest"
        );
        std::thread::sleep(std::time::Duration::from_millis(150));
        // The manifest serves directories that are not watched (another OS, or the
        // first run of a new process).
        #[cfg(target_os = "linux")]
        watch::forget(shadow.git_dir());
        let second = shadow.snapshot(&limits).unwrap();
        assert_eq!(second.tree, first.tree);
        assert_eq!(shadow.unchanged().map(|s| s.tree), Some(first.tree.clone()));
        // Any change at all (an ignored file, a new empty directory) falls back to git.
        std::fs::write(dir.join("sub/a.txt"), "two\n").unwrap();
        assert!(shadow.unchanged().is_none());
        let third = shadow.snapshot_before(&limits).unwrap();
        assert_ne!(third.tree, first.tree);
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn records_are_pruned_by_count_and_age() {
        let root = std::env::temp_dir().join(format!("berth-prune-{}", std::process::id()));
        let dir = root.join("dir");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("a.txt"), "a\n").unwrap();
        let limits = Limits {
            keep: 2,
            max_age: Duration::from_secs(3600),
            ..Limits::default()
        };
        let shadow = Shadow::open(&root.join("home"), &dir, (1, 2)).unwrap();
        let snap = shadow.snapshot(&limits).unwrap();
        for task in ["t1", "t2", "t3"] {
            shadow.record(task, &snap, &snap, &limits).unwrap();
        }
        assert!(shadow.task_trees("t1").is_none(), "kept past the count");
        assert!(shadow.task_trees("t2").is_some() && shadow.task_trees("t3").is_some());
        // A record older than the age limit goes at the next record.
        let log = shadow.git_dir.join("berth-log.json");
        let mut entries = shadow.log();
        assert_eq!(entries[0].task, "t2");
        entries[0].at = 1;
        std::fs::write(&log, serde_json::to_string(&entries).unwrap()).unwrap();
        shadow.record("t4", &snap, &snap, &limits).unwrap();
        assert!(shadow.task_trees("t2").is_none(), "kept past the age");
        assert!(shadow.task_trees("t4").is_some());
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn glob_escapes_round_trip() {
        for p in ["plain.bin", "we*ird[1]?.bin", "#hash", "back\\slash"] {
            assert_eq!(unescape_glob(&escape_glob(p)), p);
        }
    }
}
