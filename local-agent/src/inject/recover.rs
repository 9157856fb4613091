//! Recovery after a crash: every run a Berth that stopped mid-task left unfinished in
//! its journal ([`crate::inject::journal`]) is undone at the next start, through a
//! descriptor of the very directory it was written for.

use crate::dir::lock::abandoned;
use crate::inject::journal::{Record, unfinished_runs};
use crate::inject::sidecar;
use rustix::fs::{AtFlags, CWD, FileType, Mode, OFlags};
use std::path::{Path, PathBuf};

/// What [`replay_leftovers`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplayReport {
    /// Directories restored (canonical paths).
    pub restored: Vec<String>,
    /// Journals that could not be applied, with why; they are moved to
    /// `journal/unapplied/` for a human to look at.
    pub skipped: Vec<(PathBuf, String)>,
    /// What was left in place because Berth did not write it (an agent's file inside
    /// a skill folder Berth installed), as full paths.
    pub kept: Vec<String>,
    /// Guarded paths an interrupted task's agent had written, put back, as full paths.
    pub guarded: Vec<String>,
    /// Journals left alone because a live Berth process holds them.
    pub in_use: Vec<PathBuf>,
}

/// Undoes every run left unfinished by a Berth that stopped mid-task (a crash, a
/// SIGKILL). Run at startup, before any task. A journal still held by a live process
/// is left alone; a directory that is no longer the one journaled (another inode at
/// the path) is not touched.
pub fn replay_leftovers(journal_dir: &Path) -> ReplayReport {
    let mut report = ReplayReport::default();
    let abandoned = abandoned(journal_dir, "jsonl");
    report.in_use = abandoned.in_use;
    for (file, _lock) in abandoned.files {
        let mut problems = Vec::new();
        for (dir, records) in unfinished_runs(&file) {
            match replay_run(&dir, &records) {
                Ok(undone) => {
                    report
                        .kept
                        .extend(undone.kept.iter().map(|rel| format!("{dir}/{rel}")));
                    report.guarded.extend(
                        undone
                            .guarded
                            .iter()
                            .map(|r| format!("{dir}/{} ({})", r.path, r.what)),
                    );
                    report.restored.push(dir);
                }
                Err(why) => problems.push(why),
            }
        }
        if problems.is_empty() {
            let _ = std::fs::remove_file(&file);
        } else {
            let aside = journal_dir.join("unapplied");
            let _ = berth_host::private::dir(&aside);
            if let Some(name) = file.file_name() {
                let _ = std::fs::rename(&file, aside.join(name));
            }
            let why = problems.join("; ");
            tracing::warn!(journal = %file.display(), %why, "journal could not be applied; moved to unapplied/");
            report.skipped.push((file, why));
        }
    }
    report
}

/// Undoes one run's records in `dir`; returns what it did.
fn replay_run(dir: &str, records: &[Record]) -> Result<sidecar::Undone, String> {
    let Some(Record::Begin { dev, ino, .. }) = records.first() else {
        return Err(format!("the journal of {dir} has no begin record"));
    };
    let fd = rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| format!("{dir} cannot be opened: {e}"))?;
    let st = rustix::fs::fstat(&fd).map_err(|e| e.to_string())?;
    let again = rustix::fs::statat(CWD, dir, AtFlags::SYMLINK_NOFOLLOW);
    let same = again.is_ok_and(|a| a.st_dev == st.st_dev && a.st_ino == st.st_ino)
        && FileType::from_raw_mode(st.st_mode) == FileType::Directory;
    if !same || crate::dir::pin::dev_of(&st) != *dev || st.st_ino != *ino {
        return Err(format!(
            "{dir} is no longer the directory the journal was written for"
        ));
    }
    let undone = sidecar::undo(&fd, &records[1..]);
    if undone.problems.is_empty() {
        Ok(undone)
    } else {
        Err(undone.problems.join("; "))
    }
}
