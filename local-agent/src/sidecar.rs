//! Files Berth adds to a user's directory for one run, and their exact removal.
//!
//! Only two kinds exist: a block between markers appended to `CLAUDE.md`/`AGENTS.md`,
//! and skill folders copied under a name that did not exist. Every action is journaled
//! (see [`crate::journal`]) before it is done, and every path is reached from the
//! pinned descriptor one component at a time without following symlinks, so neither a
//! swapped directory nor a planted link can make Berth write elsewhere. A user's file is
//! never overwritten: a block is appended and later cut out to the exact original
//! bytes; a colliding skill folder makes Berth pick another name.

use crate::journal::{Journal, JournalError, Record, RunJournal};
use crate::pin::PinnedDir;
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

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
    #[error(
        "{path} exists in the directory but is not a plain directory; Berth will not write through it"
    )]
    Blocked { path: String },
    #[error("cleaning up left something behind: {0}")]
    Cleanup(String),
}

/// The sidecars of one task in one directory. The journal is created lazily, so a
/// run that writes nothing (the usual case) leaves no trace at all.
#[derive(Debug)]
pub struct Sidecars {
    task_id: String,
    journal: RunJournal,
    records: Vec<Record>,
}

impl Sidecars {
    pub fn new(journal: &Arc<Journal>, task_id: &str) -> Sidecars {
        Sidecars {
            task_id: task_id.to_owned(),
            journal: journal.run(task_id),
            records: Vec::new(),
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

    /// Appends `body` between markers to `file` (a name in the directory's top level),
    /// creating the file when it does not exist.
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
        let existing = rustix::fs::statat(dir.fd(), file, AtFlags::SYMLINK_NOFOLLOW);
        let (created, ends_with_newline) = match existing {
            Err(Errno::NOENT) => (true, true),
            Err(e) => return Err(werr(e)),
            Ok(st) if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile => {
                return Err(SidecarError::Blocked {
                    path: file.to_owned(),
                });
            }
            Ok(st) => {
                let fd = open_nofollow(dir.fd(), file, OFlags::RDONLY).map_err(werr)?;
                let mut last = [0u8; 1];
                let n = if st.st_size > 0 {
                    rustix::io::pread(&fd, &mut last, (st.st_size - 1) as u64).map_err(werr)?
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
        let flags = if created {
            OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY
        } else {
            OFlags::WRONLY | OFlags::APPEND
        };
        let fd = open_nofollow(dir.fd(), file, flags).map_err(werr)?;
        write_all(&fd, block.as_bytes()).map_err(werr)
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
        let mut parent: OwnedFd = rustix::io::dup(dir.fd()).map_err(|e| SidecarError::Write {
            path: base.to_owned(),
            source: e.into(),
        })?;
        let mut so_far = String::new();
        for comp in base.split('/').filter(|c| !c.is_empty()) {
            if !so_far.is_empty() {
                so_far.push('/');
            }
            so_far.push_str(comp);
            let werr = |source: Errno| SidecarError::Write {
                path: so_far.clone(),
                source: source.into(),
            };
            match rustix::fs::statat(&parent, comp, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => {}
                Ok(_) => return Err(SidecarError::Blocked { path: so_far }),
                Err(Errno::NOENT) => {
                    self.journal(
                        dir,
                        Record::CreateDir {
                            path: so_far.clone(),
                        },
                    )?;
                    rustix::fs::mkdirat(&parent, comp, Mode::from_raw_mode(0o755)).map_err(werr)?;
                }
                Err(e) => return Err(werr(e)),
            }
            parent =
                open_nofollow(&parent, comp, OFlags::RDONLY | OFlags::DIRECTORY).map_err(werr)?;
        }
        let mut name = id.to_owned();
        let mut n = 1;
        loop {
            match rustix::fs::statat(&parent, name.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
                Err(Errno::NOENT) => break,
                Err(e) => {
                    return Err(SidecarError::Write {
                        path: format!("{so_far}/{name}"),
                        source: e.into(),
                    });
                }
                Ok(_) => {
                    n += 1;
                    name = if n == 2 {
                        format!("{id}-berth")
                    } else {
                        format!("{id}-berth-{}", n - 1)
                    };
                }
            }
        }
        let rel = format!("{so_far}/{name}");
        self.journal(dir, Record::CopyTree { path: rel.clone() })?;
        copy_tree(source, &parent, &name, &rel)?;
        Ok(rel)
    }

    /// Undoes every action, newest first, through the pinned descriptor, then removes
    /// the journal. Touches nothing Berth did not write.
    pub fn cleanup(self, dir: &PinnedDir) -> Result<(), SidecarError> {
        let problems = undo(&dir.fd(), &self.records);
        if !problems.is_empty() {
            // The journal stays, so the next start tries again.
            return Err(SidecarError::Cleanup(problems.join("; ")));
        }
        Ok(self.journal.finish()?)
    }
}

/// Undoes `records` (newest first) in the directory `dir`; returns what could not be
/// undone. Idempotent.
pub(crate) fn undo(dir: &impl AsFd, records: &[Record]) -> Vec<String> {
    let mut problems = Vec::new();
    for record in records.iter().rev() {
        let result = match record {
            Record::Begin { .. } => Ok(()),
            Record::AppendBlock {
                file,
                block,
                created,
            } => cut_block(dir.as_fd(), file, block.as_bytes(), *created),
            Record::CreateDir { path } => match at_parent(dir.as_fd(), path) {
                Ok((parent, name)) => {
                    match rustix::fs::unlinkat(&parent, name, AtFlags::REMOVEDIR) {
                        Ok(()) | Err(Errno::NOENT | Errno::NOTEMPTY | Errno::EXIST) => Ok(()),
                        Err(e) => Err(e),
                    }
                }
                Err(Errno::NOENT) => Ok(()),
                Err(e) => Err(e),
            },
            Record::CopyTree { path } => match at_parent(dir.as_fd(), path) {
                Ok((parent, name)) => remove_tree(&parent, name),
                Err(Errno::NOENT) => Ok(()),
                Err(e) => Err(e),
            },
        };
        if let Err(e) = result {
            problems.push(format!("{record:?}: {e}"));
        }
    }
    problems
}

fn cut_block(dir: BorrowedFd<'_>, file: &str, block: &[u8], created: bool) -> Result<(), Errno> {
    let (parent, name) = match at_parent(dir, file) {
        Ok(x) => x,
        Err(Errno::NOENT) => return Ok(()),
        Err(e) => return Err(e),
    };
    let fd = match open_nofollow(&parent, name, OFlags::RDWR) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(()),
        Err(e) => return Err(e),
    };
    let content = read_all(&fd)?;
    let Some(at) = find_last(&content, block) else {
        return Ok(());
    };
    let mut kept = Vec::with_capacity(content.len() - block.len());
    kept.extend_from_slice(&content[..at]);
    kept.extend_from_slice(&content[at + block.len()..]);
    if created && kept.is_empty() {
        return rustix::fs::unlinkat(&parent, name, AtFlags::empty());
    }
    // In place, so the user's file keeps its inode, mode and links.
    let mut off = 0;
    while off < kept.len() {
        off += rustix::io::pwrite(&fd, &kept[off..], off as u64)?;
    }
    rustix::fs::ftruncate(&fd, kept.len() as u64)
}

fn find_last(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || needle.len() > hay.len() {
        return None;
    }
    (0..=hay.len() - needle.len())
        .rev()
        .find(|&i| &hay[i..i + needle.len()] == needle)
}

/// Opens the parent of `rel` (components separated by `/`), walking without
/// following symlinks; returns it with the last component.
pub(crate) fn at_parent<'r>(
    dir: BorrowedFd<'_>,
    rel: &'r str,
) -> Result<(OwnedFd, &'r str), Errno> {
    let mut comps: Vec<&str> = rel.split('/').filter(|c| !c.is_empty()).collect();
    let last = comps.pop().ok_or(Errno::INVAL)?;
    if last == ".." || comps.contains(&"..") {
        return Err(Errno::INVAL);
    }
    let mut fd = rustix::io::dup(dir)?;
    for comp in comps {
        fd = open_nofollow(&fd, comp, OFlags::RDONLY | OFlags::DIRECTORY)?;
    }
    Ok((fd, last))
}

pub(crate) fn open_nofollow(dir: impl AsFd, name: &str, flags: OFlags) -> Result<OwnedFd, Errno> {
    rustix::fs::openat(
        dir,
        name,
        flags | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    )
}

pub(crate) fn write_all(fd: &OwnedFd, mut bytes: &[u8]) -> Result<(), Errno> {
    while !bytes.is_empty() {
        let n = rustix::io::write(fd, bytes)?;
        bytes = &bytes[n..];
    }
    Ok(())
}

pub(crate) fn read_all(fd: &OwnedFd) -> Result<Vec<u8>, Errno> {
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let n = rustix::io::pread(fd, &mut buf, out.len() as u64)?;
        if n == 0 {
            return Ok(out);
        }
        out.extend_from_slice(&buf[..n]);
    }
}

fn remove_tree(parent: &OwnedFd, name: &str) -> Result<(), Errno> {
    let st = match rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(Errno::NOENT) => return Ok(()),
        Err(e) => return Err(e),
    };
    if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
        return rustix::fs::unlinkat(parent, name, AtFlags::empty());
    }
    let fd = open_nofollow(parent, name, OFlags::RDONLY | OFlags::DIRECTORY)?;
    let mut names = Vec::new();
    for entry in rustix::fs::Dir::read_from(&fd)? {
        let entry = entry?;
        let n = entry.file_name().to_string_lossy().into_owned();
        if n != "." && n != ".." {
            names.push(n);
        }
    }
    for n in names {
        remove_tree(&fd, &n)?;
    }
    rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR)
}

fn copy_tree(source: &Path, parent: &OwnedFd, name: &str, rel: &str) -> Result<(), SidecarError> {
    let werr = |source: Errno| SidecarError::Write {
        path: rel.to_owned(),
        source: source.into(),
    };
    let rerr = |e: std::io::Error| SidecarError::ReadSkill {
        source_dir: source.to_owned(),
        source: e,
    };
    rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(0o755)).map_err(werr)?;
    let dest = open_nofollow(parent, name, OFlags::RDONLY | OFlags::DIRECTORY).map_err(werr)?;
    for entry in std::fs::read_dir(source).map_err(rerr)? {
        let entry = entry.map_err(rerr)?;
        let kind = entry.file_type().map_err(rerr)?;
        let Some(child) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        let child_rel = format!("{rel}/{child}");
        if kind.is_dir() {
            copy_tree(&entry.path(), &dest, &child, &child_rel)?;
        } else if kind.is_file() {
            let bytes = std::fs::read(entry.path()).map_err(rerr)?;
            let fd = open_nofollow(
                &dest,
                &child,
                OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY,
            )
            .map_err(werr)?;
            write_all(&fd, &bytes).map_err(werr)?;
        }
        // Symlinks in a skill are not copied: they could point anywhere.
    }
    Ok(())
}
