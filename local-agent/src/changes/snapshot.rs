//! A directory's tree at one moment, recorded in its shadow repository: skipped at
//! once when a walk proves nothing changed since the last one (the manifest), else
//! `git add` with the shadow's index as the stat cache, large files left out.

use super::error::ChangesError;
use super::index;
use super::limits::Limits;
use super::progress::{self, Phase, Progress};
use super::shadow::Shadow;
use super::tree::{Snapshot, unescape_glob};
#[cfg(target_os = "linux")]
use super::watch;
use berth_host::private;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub(super) fn now_ns() -> u128 {
    super::since_epoch().as_nanos()
}

/// The directory's metadata when a snapshot was taken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Manifest {
    pub(super) tree: String,
    pub(super) digest: u64,
    pub(super) count: usize,
    pub(super) taken_ns: u128,
    pub(super) large: Vec<(String, u64, i64)>,
}

/// The entries of a NUL-separated listing that git shows as `dir/`: nested
/// repositories (names that are not UTF-8 or hold a newline are left out).
pub(super) fn dirs_of(listing: &[u8]) -> Vec<String> {
    listing
        .split(|b| *b == 0)
        .filter_map(|p| p.strip_suffix(b"/"))
        .filter_map(|p| std::str::from_utf8(p).ok())
        .filter(|p| !p.is_empty() && !p.contains('\n'))
        .map(str::to_owned)
        .collect()
}

/// Directories larger than this are not walked: git's own scan is then the check.
pub(super) const WALK_LIMIT: usize = 4_000;

/// Timestamps are coarse (a kernel tick): an inode changed this close to the
/// manifest's time may have changed again unseen, so it makes the walk inconclusive.
pub(super) const RACY_NS: u128 = 100_000_000;

/// A digest of every entry under `root` but `.git` directories (ignored files
/// included: this proves "nothing changed at all", which is stricter than git's view):
/// the path, type, size, inode, modification and change times, in a fixed order.
/// `None` when the walk fails, passes [`WALK_LIMIT`], or finds an entry changed within
/// [`RACY_NS`] of `taken_ns` or later (any write updates the change time, which no
/// one can set back).
pub(super) fn walk_digest(root: &Path, taken_ns: u128) -> Option<(u64, usize)> {
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

impl Shadow {
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

    pub(super) fn manifest_file(&self) -> PathBuf {
        self.git_dir.join("berth-manifest.json")
    }

    /// The last snapshot, if the directory's metadata is exactly as it was then.
    pub(super) fn unchanged(&self) -> Option<Snapshot> {
        let text = std::fs::read_to_string(self.manifest_file()).ok()?;
        let m: Manifest = serde_json::from_str(&text).ok()?;
        let now = walk_digest(&self.work_tree, m.taken_ns)?;
        (now.0 == m.digest && now.1 == m.count).then(|| Snapshot {
            tree: m.tree,
            large: m.large,
            nested: self.nested(&[]),
        })
    }

    /// The file that carries the nested repositories from one snapshot to the next.
    fn nested_file(&self) -> PathBuf {
        self.git_dir.join("berth-nested")
    }

    /// The nested repositories now: those the last snapshots found and `found` (what
    /// this one's listing showed as `dir/`), while each still holds a `.git`. Git lists
    /// a nested repository as `dir/` until it is recorded as a link, never after, so
    /// the list is carried in the shadow's directory (most directories have none: one
    /// failed open).
    pub(super) fn nested(&self, found: &[String]) -> Vec<String> {
        let before = std::fs::read_to_string(self.nested_file()).unwrap_or_default();
        let mut all: std::collections::BTreeSet<String> =
            before.lines().map(str::to_owned).collect();
        all.extend(found.iter().cloned());
        all.retain(|p| std::fs::symlink_metadata(self.work_tree.join(p).join(".git")).is_ok());
        let now: String = all.iter().map(|p| format!("{p}\n")).collect();
        if now != before {
            let _ = if now.is_empty() {
                std::fs::remove_file(self.nested_file())
            } else {
                private::write(self.nested_file(), &now)
            };
        }
        all.into_iter().collect()
    }

    /// How many entries the shadow index holds (its header), without running git.
    pub(super) fn index_entries(&self) -> Option<u32> {
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
    pub(super) fn note_manifest(&self, snap: &Snapshot, taken_ns: u128) {
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

    pub(super) fn snapshot_as(
        &self,
        limits: &Limits,
        check_grown: bool,
    ) -> Result<Snapshot, ChangesError> {
        // Before git reads anything: whatever changes from here on is newer than the
        // manifest, so the next walk cannot take it for unchanged.
        let started_ns = now_ns();
        if !self.recorded() {
            return self.first(limits, started_ns);
        }
        // A full scan of a large directory takes a while too: said, without a count.
        let _registered = progress::register(&self.work_tree);
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
        self.write_excludes(&large)?;
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
        self.add_all(&[])?;
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
                self.add_excludes(grown.iter().map(|(p, _, _)| (p.as_str(), false)))?;
                large.extend(grown);
            }
        }
        let tree = self.write_tree()?;
        let nested = self.nested(&dirs_of(&listed));
        self.established(tree, large, nested, started_ns)
    }

    /// `git add -A --ignore-errors` (after `pre`, git's own options). A nested
    /// repository without a commit checked out stops git whole (it has nothing to
    /// record as a link): each one git names is left out for this snapshot (the
    /// shadow's exclude file, rewritten by the next) and git runs again.
    pub(super) fn add_all(&self, pre: &[&str]) -> Result<(), ChangesError> {
        const TRIES: usize = 8;
        let mut args: Vec<&str> = pre.to_vec();
        args.extend(["add", "-A", "--ignore-errors"]);
        for _ in 0..TRIES {
            let Err(err) = self.git(&args) else {
                return Ok(());
            };
            let text = err.to_string();
            let empty: Vec<&str> = text
                .split("error: '")
                .skip(1)
                .filter_map(|rest| rest.split_once("/' does not have a commit checked out"))
                .map(|(path, _)| path)
                .filter(|p| !p.is_empty() && !p.contains('\n'))
                .collect();
            if empty.is_empty() {
                return Err(err);
            }
            self.add_excludes(empty.into_iter().map(|p| (p, true)))?;
        }
        self.git(&args).map(|_| ())
    }

    /// `git write-tree`; a seeded shadow's trees name blobs it does not hold (see
    /// [`super::seed`]).
    pub(super) fn write_tree(&self) -> Result<String, ChangesError> {
        if self.seeded_from().is_some() {
            self.git(["write-tree", "--missing-ok"])
        } else {
            self.git(["write-tree"])
        }
    }

    fn established(
        &self,
        tree: String,
        large: Vec<(String, u64, i64)>,
        nested: Vec<String>,
        started_ns: u128,
    ) -> Result<Snapshot, ChangesError> {
        private::write(self.git_dir.join("berth-last"), &tree)?;
        let snap = Snapshot {
            tree,
            large,
            nested,
        };
        self.note_manifest(&snap, started_ns);
        #[cfg(target_os = "linux")]
        watch::established(self, &snap);
        Ok(snap)
    }

    /// The first snapshot of a directory: its shadow index seeded from the
    /// repository's own when there is one ([`super::seed`]); then only the files that
    /// differ from it (all of them, without a seed) are read, counted as they go
    /// ([`super::progress`]), and the trees are written as one pack.
    fn first(&self, limits: &Limits, started_ns: u128) -> Result<Snapshot, ChangesError> {
        use std::os::unix::ffi::OsStrExt;
        use std::os::unix::fs::MetadataExt;
        let registered = progress::register(&self.work_tree);
        let progress = &registered.progress;
        progress.phase(Phase::Listing);
        // Where the time goes, for the debug log: (phase, milliseconds).
        let mut clock = std::time::Instant::now();
        let mut phases: Vec<(&str, u128)> = Vec::new();
        let mut lap = |name: &'static str| {
            phases.push((name, clock.elapsed().as_millis()));
            clock = std::time::Instant::now();
        };
        // The seed reads only the repository's index, not the directory: the watch
        // (which must begin before the scan reads anything) starts meanwhile, on a
        // thread of its own (the seed's large buffers stay on this one).
        let (seeded, seed_ms, watch_ms) = std::thread::scope(|s| {
            #[cfg(target_os = "linux")]
            let watching = s.spawn(|| {
                let t = std::time::Instant::now();
                watch::begin(self);
                t.elapsed().as_millis()
            });
            let t = std::time::Instant::now();
            let seeded = (!self.git_dir.join("index").exists()).then(|| {
                // While the watch is still being set up, the seed also packs its
                // trees: they are the snapshot's when nothing differs from the index
                // (a clean checkout). Otherwise they are written again below.
                self.seed(limits)
            });
            let seed_ms = t.elapsed().as_millis();
            #[cfg(target_os = "linux")]
            let watch_ms = watching.join().unwrap_or_else(|_| {
                tracing::warn!(dir = %self.work_tree.display(), "the watch's thread panicked: each run scans");
                0
            });
            #[cfg(not(target_os = "linux"))]
            let watch_ms = {
                let _ = s;
                0
            };
            (seeded, seed_ms, watch_ms)
        });
        let mut prepacked = false;
        match seeded {
            Some(Ok((n, packed))) => {
                prepacked = packed;
                tracing::debug!(dir = %self.work_tree.display(), entries = n, "seeded from the repository's index")
            }
            Some(Err(why)) => {
                tracing::debug!(dir = %self.work_tree.display(), %why, "not seeded")
            }
            None => {}
        }
        lap("seed and watch");
        // Three listings at once (each reads the index; the first two also the
        // directory): what is tracked there but ignored here (a full scan would not
        // record it), what is new, and what changed or went since the index.
        let seeded = self.seeded_from().is_some();
        let (ignored, others, changed) = std::thread::scope(|s| {
            let ignored = s.spawn(|| {
                if seeded {
                    self.git_bytes([
                        "ls-files",
                        "-z",
                        "--cached",
                        "--ignored",
                        "--exclude-standard",
                    ])
                } else {
                    Ok(Vec::new())
                }
            });
            let changed = s.spawn(|| self.git_bytes(["ls-files", "-z", "--modified", "--deleted"]));
            let others = self.git_bytes(["ls-files", "-z", "--others", "--exclude-standard"]);
            let joined = |h: std::thread::ScopedJoinHandle<'_, Result<Vec<u8>, ChangesError>>| {
                h.join().unwrap_or_else(|_| {
                    Err(ChangesError::Spawn(std::io::Error::other(
                        "a listing's thread panicked",
                    )))
                })
            };
            (joined(ignored), others, joined(changed))
        });
        let (ignored, others, changed) = (ignored?, others?, changed?);
        let mut gone: Vec<&[u8]> = ignored
            .split(|b| *b == 0)
            .filter(|p| !p.is_empty())
            .collect();
        let tracked_ignored: std::collections::HashSet<&[u8]> = gone.iter().copied().collect();
        let listed: Vec<u8> = [others, changed].concat();
        let found = dirs_of(&listed);
        let paths: std::collections::BTreeSet<&[u8]> = listed
            .split(|b| *b == 0)
            .filter(|p| !p.is_empty())
            // A nested repository is listed as `dir/`: it is recorded as a link.
            .map(|p| p.strip_suffix(b"/").unwrap_or(p))
            // Tracked there but ignored here: left out, changed or not.
            .filter(|p| !tracked_ignored.contains(p))
            .collect();
        let mut update: Vec<&[u8]> = Vec::new();
        let mut large = Vec::new();
        for path in paths {
            let full = self.work_tree.join(std::ffi::OsStr::from_bytes(path));
            match std::fs::symlink_metadata(&full) {
                // Gone: `--remove` takes it out.
                Err(_) => update.push(path),
                Ok(md) if md.is_file() && md.len() > limits.max_file_bytes => {
                    match std::str::from_utf8(path) {
                        Ok(p) => {
                            large.push((p.to_owned(), md.len(), md.mtime()));
                            gone.push(path);
                        }
                        Err(_) => update.push(path),
                    }
                }
                // What cannot be read is left out, as `git add --ignore-errors` does.
                Ok(md) if md.is_file() && std::fs::File::open(&full).is_err() => gone.push(path),
                Ok(_) => update.push(path),
            }
        }
        self.write_excludes(&large)?;
        // Nothing recorded nor seeded: every file is read, on every core if many.
        let fresh = !self.git_dir.join("index").exists();
        let gone_count = gone.len();
        if !gone.is_empty() {
            let input: Vec<u8> = gone
                .iter()
                .flat_map(|p| p.iter().copied().chain([0]))
                .collect();
            self.git_input(
                ["update-index", "--force-remove", "-z", "--stdin"],
                &input,
                None,
            )?;
        }
        lap("listings");
        progress.phase(Phase::Reading);
        progress.total(update.len() as u64);
        let bulk = fresh && super::bulk::worth(update.len());
        let read = bulk
            && self
                .check_in(&update, limits.max_file_bytes, progress)
                .inspect_err(|why| {
                    tracing::debug!(dir = %self.work_tree.display(), %why, "read by git instead");
                    progress.done(0);
                })
                .is_ok();
        if !read && self.feed_updates(&update, progress).is_err() {
            // A file changed under the scan (say, became unreadable), or a nested
            // repository without a commit: git's own way.
            self.add_all(&["-c", "core.bigFileThreshold=1"])?;
        }
        lap("reading");
        progress.phase(Phase::Writing);
        // The index is still the seed's: its trees are already packed.
        let unchanged = prepacked && gone_count == 0 && update.is_empty();
        if !unchanged && let Err(e) = self.pack_trees() {
            tracing::debug!(error = %e, "the first snapshot's trees are written one by one");
        }
        lap("tree pack");
        let tree = self.write_tree()?;
        lap("write-tree");
        let nested = self.nested(&found);
        let snap = self.established(tree, large, nested, started_ns);
        lap("established");
        tracing::debug!(dir = %self.work_tree.display(), read = update.len(), ?phases,
            seed_ms, watch_ms, "first snapshot (ms per phase; the seed and the watch at once)");
        snap
    }

    /// `git update-index --add --remove` on `paths`, counting them into `progress` as
    /// git takes them.
    fn feed_updates(&self, paths: &[&[u8]], progress: &Progress) -> Result<(), ChangesError> {
        use std::io::Write;
        use std::process::Stdio;
        if paths.is_empty() {
            return Ok(());
        }
        let mut child = self
            .command()
            // Every new blob into one pack as it is read (git's bulk check-in, as for
            // a large file), not one file each: thousands of files a second more.
            .args(["-c", "core.bigFileThreshold=1"])
            .args(["update-index", "--add", "--remove", "-z", "--stdin"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()?;
        let Some(stdin) = child.stdin.take() else {
            return Err(ChangesError::Spawn(std::io::Error::other(
                "git took no input",
            )));
        };
        // A small pipe: the count is what git has taken, give or take a page of paths
        // (64 KB would be thousands ahead of it).
        #[cfg(target_os = "linux")]
        let _ = rustix::pipe::fcntl_setpipe_size(&stdin, 4096);
        let mut stdin = std::io::BufWriter::with_capacity(4096, stdin);
        for (i, p) in paths.iter().enumerate() {
            if stdin
                .write_all(p)
                .and_then(|()| stdin.write_all(&[0]))
                .is_err()
            {
                break;
            }
            if i.is_multiple_of(64) {
                progress.done(i as u64);
            }
        }
        drop(stdin);
        progress.done(paths.len() as u64);
        crate::git::check(
            child.wait_with_output()?,
            "update-index --add --remove --stdin",
        )?;
        Ok(())
    }

    /// Writes every tree of the shadow index as one pack (a first snapshot's thousands
    /// of trees cost seconds as loose objects); `write-tree` then finds them there.
    fn pack_trees(&self) -> Result<(), String> {
        let file = self.git_dir.join("index");
        if !file.exists() {
            // Nothing recorded: the empty tree, which git writes itself.
            return Ok(());
        }
        let bytes = std::fs::read(&file).map_err(|e| e.to_string())?;
        let parsed = index::parse(&bytes).map_err(|e| e.to_string())?;
        let trees = index::trees(&parsed.entries).ok_or("an entry no tree holds")?;
        self.git_input(["index-pack", "--stdin"], &index::pack(&trees), None)
            .map_err(|e| e.to_string())?;
        Ok(())
    }
}
