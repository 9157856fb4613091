//! Files Berth adds to a user's directory for one run, and their exact removal.
//!
//! Only two kinds exist: a block between markers appended to `CLAUDE.md`/`AGENTS.md`,
//! and skill folders copied under a name that did not exist. Every action is journaled
//! (see [`crate::inject::journal`]) before it is done, and every path is reached from the
//! pinned descriptor one component at a time without following symlinks, so neither a
//! swapped directory nor a planted link can make Berth write elsewhere. A user's file is
//! never overwritten: a block is appended and later cut out to the exact original
//! bytes; a colliding skill folder makes Berth pick another name.
//!
//! A file is written into only when it is a regular file with exactly one link, as
//! seen on the opened descriptor: a `CLAUDE.md` hard-linked to `~/.bashrc` would carry
//! the brief outside the directory ([`Obstacle`]). Removal takes away exactly what Berth
//! wrote: the files it created, while they still hold its bytes, then its directories
//! if empty; what the agent put there stays, and is reported as kept.
//!
//! The same journal carries the [`guard`]'s snapshot: what a fenced agent must not
//! leave written in its directory is put back by the same cleanup.

pub mod guard;
mod skill;
mod target;

pub use target::Obstacle;

use crate::dir::fd::{at_parent, open_nofollow, write_all};
use crate::dir::pin::PinnedDir;
use crate::inject::journal::{Copied, Journal, JournalError, Record, RunJournal};
use berth_core::{ErrorCode, Refusal, TaskId};
use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;
use skill::{DirError, open_dir, read_skill, remove_copied};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use target::{Purpose, Unwritable, cut_block, open_target, writable_target};

/// Why a sidecar could not be written.
#[derive(Debug, thiserror::Error)]
pub enum SidecarError {
    #[error(transparent)]
    Journal(#[from] JournalError),
    #[error("cannot write {path} in the directory: {source}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read the skill {source_dir}: {source}")]
    ReadSkill {
        source_dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file that would carry the brief is not one Berth may write into.
    #[error(
        "{file} in the directory {obstacle}; Berth writes its brief only into a regular file with one link"
    )]
    BriefBlocked { file: String, obstacle: Obstacle },
    /// A directory on the way to a skill folder is not a plain directory.
    #[error(
        "{path} in the directory {obstacle}; Berth installs skills only through plain directories"
    )]
    Blocked { path: String, obstacle: Obstacle },
    #[error("cleaning up left something behind: {0}")]
    Cleanup(String),
    /// The guarded paths could not be snapshotted (too large, unreadable).
    #[error("the fence cannot guard the directory's git hooks, git config and .berth: {0}")]
    Guard(guard::GuardError),
}

impl SidecarError {
    /// The refusal this error is, when it is one (`sidecar_blocked`): a name in the
    /// directory (`shown`, as displayed) that Berth will not write through.
    pub fn refusal(&self, shown: &str) -> Option<Refusal> {
        let (path, obstacle, rule, hint) = match self {
            SidecarError::BriefBlocked { file, obstacle } => (
                file,
                obstacle,
                "Berth writes the brief only into a regular file with one link, never through a link or into a special file",
                match obstacle {
                    Obstacle::HardLink { .. } => format!(
                        "give {file} a copy of its own (cp {file} {file}.own && mv {file}.own {file}), or shorten the brief (prompt.append, prompt plugins) so it travels as an argument"
                    ),
                    Obstacle::Symlink | Obstacle::Other { .. } => format!(
                        "replace {file} with a regular file, or shorten the brief (prompt.append, prompt plugins) so it travels as an argument"
                    ),
                },
            ),
            SidecarError::Blocked { path, obstacle } => (
                path,
                obstacle,
                "Berth installs skill folders only through plain directories",
                format!(
                    "replace {path} with a plain directory, or remove the skill plugin from the settings"
                ),
            ),
            SidecarError::Journal(_)
            | SidecarError::Write { .. }
            | SidecarError::ReadSkill { .. }
            | SidecarError::Cleanup(_)
            | SidecarError::Guard(_) => return None,
        };
        Some(Refusal::new(
            ErrorCode::SidecarBlocked,
            format!("{path} in {shown} {obstacle}: {rule}"),
            hint,
        ))
    }
}

/// The sidecars of one task in one directory. The journal is created lazily, so a
/// run that writes nothing (the usual case) leaves no trace at all.
#[derive(Debug)]
pub struct Sidecars {
    task_id: TaskId,
    journal: RunJournal,
    records: Vec<Record>,
    /// The guard's snapshots this run took, by their files: cleanup restores from
    /// these rather than reading the files back (the files are for a crash's recovery).
    snapshots: Vec<(String, guard::Snapshot)>,
}

impl Sidecars {
    pub fn new(journal: &Arc<Journal>, task_id: &TaskId) -> Sidecars {
        Sidecars {
            task_id: task_id.clone(),
            journal: journal.run(task_id),
            records: Vec::new(),
            snapshots: Vec::new(),
        }
    }

    /// Whether anything was (or may have been) written.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    fn journal(&mut self, dir: &PinnedDir, record: Record) -> Result<(), SidecarError> {
        self.journal.record(dir, &record)?;
        self.records.push(record);
        Ok(())
    }

    /// Checks, writing nothing, that [`Sidecars::append_block`] may write into `file`:
    /// absent, or a regular file with one link. Lets a run be refused before Berth has
    /// written anything into the directory.
    pub fn check_block(&self, dir: &PinnedDir, file: &str) -> Result<(), SidecarError> {
        open_target(dir.fd(), file, Purpose::Append)
            .map(drop)
            .map_err(|e| blocked_brief(file, e))
    }

    /// Appends `body` between markers to `file` (a name in the directory's top level),
    /// creating the file when it does not exist. Writes only into a regular file with
    /// exactly one link, checked on the descriptor written through.
    pub fn append_block(
        &mut self,
        dir: &PinnedDir,
        file: &str,
        body: &str,
    ) -> Result<(), SidecarError> {
        let werr = |source: Errno| SidecarError::Write {
            path: file.to_owned(),
            source: source.into(),
        };
        let target =
            open_target(dir.fd(), file, Purpose::Append).map_err(|e| blocked_brief(file, e))?;
        let (created, ends_with_newline) = match &target {
            None => (true, true),
            Some((fd, st)) => {
                let mut last = [0u8; 1];
                let n = if st.st_size > 0 {
                    rustix::io::pread(fd, &mut last, (st.st_size - 1) as u64).map_err(werr)?
                } else {
                    0
                };
                (false, n == 0 || last[0] == b'\n')
            }
        };
        let sep = if ends_with_newline { "" } else { "\n" };
        let lead = if created { "" } else { "\n" };
        let block = format!(
            "{sep}{lead}<!-- berth:begin {id}: added by Berth for one run and removed when it ends -->\n{body}\n<!-- berth:end {id} -->\n",
            id = self.task_id
        );
        self.journal(
            dir,
            Record::AppendBlock {
                file: file.to_owned(),
                block: block.clone(),
                created,
            },
        )?;
        let fd = match target {
            // Once more on the descriptor, right before writing through it.
            Some((fd, _)) => writable_target(&fd, Purpose::Append)
                .map(|_| fd)
                .map_err(|e| blocked_brief(file, e)),
            None => open_nofollow(
                dir.fd(),
                file,
                OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY,
            )
            .map_err(werr),
        };
        let fd = fd.inspect_err(|_| {
            // Nothing was written: there is nothing to undo (the file may be someone
            // else's now).
            self.records.pop();
        })?;
        write_all(&fd, block.as_bytes()).map_err(werr)
    }

    /// Where [`Sidecars::install_skill_at`] would put the skill `id` under `base` (e.g.
    /// `.claude/skills`): `id` or, if that exists, the first free `id-berth[-N]` not in
    /// `taken`. Writes nothing. Returns the relative path.
    pub fn skill_place(
        &self,
        dir: &PinnedDir,
        base: &str,
        id: &str,
        taken: &[String],
    ) -> Result<String, SidecarError> {
        let base = base_components(base);
        let mut parent: OwnedFd = rustix::io::dup(dir.fd()).map_err(|e| SidecarError::Write {
            path: base.join("/"),
            source: e.into(),
        })?;
        let mut exists = true;
        for (i, comp) in base.iter().enumerate() {
            let so_far = base[..=i].join("/");
            match open_dir(&parent, comp) {
                Ok(fd) => parent = fd,
                Err(DirError::Missing) => {
                    exists = false;
                    break;
                }
                Err(DirError::Blocked(obstacle)) => {
                    return Err(SidecarError::Blocked {
                        path: so_far,
                        obstacle,
                    });
                }
                Err(DirError::Io(e)) => {
                    return Err(SidecarError::Write {
                        path: so_far,
                        source: e.into(),
                    });
                }
            }
        }
        let base = base.join("/");
        let mut n = 1;
        let mut name = id.to_owned();
        loop {
            let rel = format!("{base}/{name}");
            let free = !taken.contains(&rel)
                && (!exists
                    || match rustix::fs::statat(&parent, name.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
                        Err(Errno::NOENT) => true,
                        Err(e) => {
                            return Err(SidecarError::Write {
                                path: rel,
                                source: e.into(),
                            });
                        }
                        Ok(_) => false,
                    });
            if free {
                return Ok(rel);
            }
            n += 1;
            name = if n == 2 {
                format!("{id}-berth")
            } else {
                format!("{id}-berth-{}", n - 1)
            };
        }
    }

    /// Copies the skill folder `source` to `<base>/<name>` (e.g. `.claude/skills`),
    /// where `name` is `id` or, if that exists, the first free `id-berth[-N]`. Returns
    /// the relative path written.
    pub fn install_skill(
        &mut self,
        dir: &PinnedDir,
        base: &str,
        id: &str,
        source: &Path,
    ) -> Result<String, SidecarError> {
        let rel = self.skill_place(dir, base, id, &[])?;
        self.install_skill_at(dir, &rel, source)?;
        Ok(rel)
    }

    /// Copies the skill folder `source` to `rel` (from [`Sidecars::skill_place`]),
    /// creating the directories above it. The whole skill is read first; the record
    /// of what will be written (every directory and file, each file's digest) is
    /// journaled before the first write. Fails, writing nothing more, when `rel` has
    /// been taken since.
    pub fn install_skill_at(
        &mut self,
        dir: &PinnedDir,
        rel: &str,
        source: &Path,
    ) -> Result<(), SidecarError> {
        let content = read_skill(source)?;
        let mut comps = base_components(rel);
        let Some(name) = comps.pop() else {
            return Err(SidecarError::Write {
                path: rel.to_owned(),
                source: Errno::INVAL.into(),
            });
        };
        let mut parent: OwnedFd = rustix::io::dup(dir.fd()).map_err(|e| SidecarError::Write {
            path: rel.to_owned(),
            source: e.into(),
        })?;
        for (i, comp) in comps.iter().enumerate() {
            let so_far = comps[..=i].join("/");
            let werr = |source: Errno| SidecarError::Write {
                path: so_far.clone(),
                source: source.into(),
            };
            parent = match open_dir(&parent, comp) {
                Ok(fd) => fd,
                Err(DirError::Missing) => {
                    self.journal(
                        dir,
                        Record::CreateDir {
                            path: so_far.clone(),
                        },
                    )?;
                    rustix::fs::mkdirat(&parent, *comp, Mode::from_raw_mode(0o755))
                        .map_err(werr)?;
                    open_nofollow(&parent, comp, OFlags::RDONLY | OFlags::DIRECTORY)
                        .map_err(werr)?
                }
                Err(DirError::Blocked(obstacle)) => {
                    return Err(SidecarError::Blocked {
                        path: so_far,
                        obstacle,
                    });
                }
                Err(DirError::Io(e)) => return Err(werr(e)),
            };
        }
        self.journal(
            dir,
            Record::CopyTree {
                path: rel.to_owned(),
                entries: content.iter().map(|(entry, _)| entry.clone()).collect(),
            },
        )?;
        let werr = |path: &str, source: Errno| SidecarError::Write {
            path: format!("{rel}/{path}"),
            source: source.into(),
        };
        if let Err(e) = rustix::fs::mkdirat(&parent, name, Mode::from_raw_mode(0o755)) {
            // Taken since it was found free: the folder there is not Berth's, and
            // undoing the record must not touch it.
            self.records.pop();
            return Err(werr("", e));
        }
        let root = open_nofollow(&parent, name, OFlags::RDONLY | OFlags::DIRECTORY)
            .map_err(|e| werr("", e))?;
        for (entry, bytes) in &content {
            match entry {
                Copied::Dir { path } => {
                    let (at, last) = at_parent(root.as_fd(), path).map_err(|e| werr(path, e))?;
                    rustix::fs::mkdirat(&at, last, Mode::from_raw_mode(0o755))
                        .map_err(|e| werr(path, e))?;
                }
                Copied::File { path, .. } => {
                    let (at, last) = at_parent(root.as_fd(), path).map_err(|e| werr(path, e))?;
                    let fd =
                        open_nofollow(&at, last, OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY)
                            .map_err(|e| werr(path, e))?;
                    write_all(&fd, bytes).map_err(|e| werr(path, e))?;
                }
            }
        }
        Ok(())
    }

    /// Undoes every action, newest first, through the pinned descriptor, then removes
    /// the journal. Touches nothing Berth did not write; returns what was kept because
    /// Berth did not write it (relative paths: an agent's file in a skill folder).
    pub fn cleanup(self, dir: &PinnedDir) -> (Undone, Result<(), SidecarError>) {
        let undone = undo_held(&dir.fd(), &self.records, &self.snapshots);
        if !undone.problems.is_empty() {
            // The journal stays, so the next start tries again.
            let e = SidecarError::Cleanup(undone.problems.join("; "));
            return (undone, Err(e));
        }
        let finished = self.journal.finish().map_err(SidecarError::from);
        (undone, finished)
    }

    /// Takes the snapshot of the guarded paths of `dir` (see [`guard`]) into a file
    /// under `guard_dir` and journals it: cleanup (or the next start, after a crash)
    /// puts them back as they are now. Called last before the agent starts, with the
    /// nested repositories the change record knows (work trees relative to `dir`).
    /// Returns the repositories' control files as they are, for the check after the
    /// run ([`guard::repos::check`]).
    pub fn guard(
        &mut self,
        dir: &PinnedDir,
        guard_dir: &Path,
        nested: &[String],
    ) -> Result<Vec<guard::repos::Control>, SidecarError> {
        let root = dir.path().to_string_lossy().into_owned();
        let file = guard_dir.join(format!(
            "{}-{}.json",
            self.task_id
                .as_str()
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect::<String>(),
            uuid::Uuid::now_v7().simple()
        ));
        // Journaled first, its flush to the disk overlapping the snapshot: the record
        // is durable before the agent starts, and a snapshot file that is not there
        // when a crash's recovery reads the record was never needed (the agent had
        // not started).
        let snapshot = file.display().to_string();
        let record = Record::Guard {
            snapshot: snapshot.clone(),
        };
        let syncing = self.journal.record_syncing(dir, &record)?;
        self.records.push(record);
        let snap = guard::Snapshot::take(dir.fd(), &root, nested);
        let saved = snap.map_err(SidecarError::Guard).and_then(|snap| {
            berth_host::private::dir(guard_dir)
                .and_then(|()| snap.save(&file))
                .map(|()| snap)
                .map_err(|source| {
                    // Never half a snapshot for a recovery to trip on.
                    let _ = std::fs::remove_file(&file);
                    SidecarError::Write {
                        path: file.display().to_string(),
                        source,
                    }
                })
        });
        let synced = syncing.wait();
        let snap = saved?;
        synced?;
        let repos = snap.repos.clone();
        self.snapshots.push((snapshot, snap));
        Ok(repos)
    }
}

fn blocked_brief(file: &str, e: Unwritable) -> SidecarError {
    match e {
        Unwritable::Obstacle(obstacle) => SidecarError::BriefBlocked {
            file: file.to_owned(),
            obstacle,
        },
        Unwritable::Io(e) => SidecarError::Write {
            path: file.to_owned(),
            source: e.into(),
        },
    }
}

fn base_components(base: &str) -> Vec<&str> {
    base.split('/').filter(|c| !c.is_empty()).collect()
}

/// What undoing a run's records did.
#[derive(Debug, Default)]
pub struct Undone {
    /// What could not be undone.
    pub problems: Vec<String>,
    /// What was left because Berth did not write it, relative to the directory.
    pub kept: Vec<String>,
    /// Guarded paths the agent had written, put back.
    pub guarded: Vec<guard::Restored>,
}

/// Undoes `records` (newest first) in the directory `dir`. Idempotent.
pub(crate) fn undo(dir: &impl AsFd, records: &[Record]) -> Undone {
    undo_held(dir, records, &[])
}

/// [`undo`], with the guard's snapshots already in memory (`held`, by their files).
fn undo_held(dir: &impl AsFd, records: &[Record], held: &[(String, guard::Snapshot)]) -> Undone {
    let mut out = Undone::default();
    for record in records.iter().rev() {
        let result = match record {
            Record::Begin { .. } => Ok(()),
            Record::AppendBlock {
                file,
                block,
                created,
            } => cut_block(dir.as_fd(), file, block.as_bytes(), *created),
            Record::CreateDir { path } => match at_parent(dir.as_fd(), path) {
                Ok((parent, name)) => remove_empty_dir(&parent, name).map_err(|e| e.to_string()),
                Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP) => Ok(()),
                Err(e) => Err(e.to_string()),
            },
            Record::CopyTree { path, entries } => {
                remove_copied(dir.as_fd(), path, entries, &mut out.kept).map_err(|e| e.to_string())
            }
            Record::Guard { snapshot } => {
                let snap = held.iter().find(|(f, _)| f == snapshot).map(|(_, s)| s);
                unguard(dir.as_fd(), Path::new(snapshot), snap, &mut out.guarded)
            }
        };
        if let Err(e) = result {
            out.problems.push(format!("{record:?}: {e}"));
        }
    }
    out
}

/// Puts the guarded paths back from the snapshot (`held`, or else its file), then
/// removes the file. A file that is gone was applied already.
fn unguard(
    dir: BorrowedFd<'_>,
    snapshot: &Path,
    held: Option<&guard::Snapshot>,
    out: &mut Vec<guard::Restored>,
) -> Result<(), String> {
    let loaded;
    let snap = match held {
        Some(s) => s,
        None => match guard::Snapshot::load(snapshot) {
            Ok(s) => {
                loaded = s;
                &loaded
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => {
                return Err(format!(
                    "cannot read the guard's snapshot {}: {e}",
                    snapshot.display()
                ));
            }
        },
    };
    match snap.restore(dir) {
        Ok(done) => out.extend(done),
        Err((done, why)) => {
            out.extend(done);
            return Err(format!("cannot put back what the fence guards: {why}"));
        }
    }
    match std::fs::remove_file(snapshot) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(format!(
            "cannot remove the guard's snapshot {}: {e}",
            snapshot.display()
        )),
        Ok(()) | Err(_) => Ok(()),
    }
}

/// Removes the directory `name` in `parent` if it is empty; a directory that holds
/// something (or is no longer a directory) is left.
fn remove_empty_dir(parent: &OwnedFd, name: &str) -> Result<(), Errno> {
    match rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR) {
        Ok(()) | Err(Errno::NOENT | Errno::NOTEMPTY | Errno::EXIST | Errno::NOTDIR) => Ok(()),
        Err(e) => Err(e),
    }
}
