//! The write-ahead journal of everything Berth writes into a user's directory.
//!
//! One append-only file per Berth process under `$BERTH_HOME/journal/`, one JSON
//! record per line, tagged with the run it belongs to. A record is written and synced
//! *before* its action is done, so after a crash the journal names everything that may
//! have been written, and `recover::replay_leftovers` can undo it at the next start. Undoing
//! is idempotent: undoing an action that never happened finds nothing to remove. A
//! finished run appends an end mark; the file is emptied whenever no run is in flight.

use crate::dir::pin::PinnedDir;
use berth_core::TaskId;
use rustix::fs::{FlockOperation, Mode, OFlags};
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Why the journal could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("cannot write the journal {file}: {source}")]
    Write {
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// One journaled action, in the user's directory, relative to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Record {
    /// The directory the following records are relative to.
    Begin {
        task_id: String,
        dir: String,
        dev: u64,
        ino: u64,
    },
    /// `block` appended to `file` (created with exactly `block` when `created`).
    AppendBlock {
        file: String,
        block: String,
        created: bool,
    },
    /// A directory Berth created, removed again if empty.
    CreateDir { path: String },
    /// A skill folder Berth created under a name that did not exist, and exactly what
    /// it put in it. Undoing removes those entries only, a file only while it still
    /// holds what Berth wrote, then each directory only if it is empty: whatever the
    /// agent wrote there stays. (A record of an older Berth has no `entries`: only an
    /// empty folder is removed.)
    CopyTree {
        path: String,
        #[serde(default)]
        entries: Vec<Copied>,
    },
    /// The guarded paths (`.git/hooks`, `.git/config`, `.berth`) as they were before
    /// a fenced agent ran, in the snapshot file `snapshot` (under `$BERTH_HOME/guard/`):
    /// undoing puts them back as they were and removes the file.
    Guard { snapshot: String },
}

/// One entry Berth put into a skill folder, relative to the folder; a directory is
/// listed before what it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Copied {
    Dir {
        path: String,
    },
    /// A file, with the length and SHA-256 (hex) of the bytes Berth wrote.
    File {
        path: String,
        len: u64,
        sha256: String,
    },
}

/// One line of a journal file: a record of one run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Line {
    run: String,
    #[serde(flatten)]
    entry: Entry,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
enum Entry {
    Record(Record),
    End { end: bool },
}

/// The journal of this process: one append-only file under `$BERTH_HOME/journal/`,
/// created (and its name made durable) once, at the first action of the first run
/// that writes anything, then held under an exclusive `flock` for the life of the
/// process so a replay elsewhere leaves it alone. Each action then costs one sync.
#[derive(Debug)]
pub struct Journal {
    dir: PathBuf,
    state: Mutex<LogState>,
}

#[derive(Debug, Default)]
struct LogState {
    file: Option<(File, PathBuf)>,
    /// Runs begun and not yet finished.
    active: usize,
}

impl Journal {
    /// A journal writing into `dir` (no I/O until the first record).
    pub fn new(dir: PathBuf) -> Arc<Journal> {
        Arc::new(Journal {
            dir,
            state: Mutex::new(LogState::default()),
        })
    }

    /// The journal of one run of `task_id`.
    pub fn run(self: &Arc<Self>, task_id: &TaskId) -> RunJournal {
        RunJournal {
            journal: self.clone(),
            run: format!("{task_id}/{}", uuid::Uuid::now_v7().simple()),
            begun: false,
        }
    }

    /// The file in use, if one was created.
    pub fn path(&self) -> Option<PathBuf> {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.file.as_ref().map(|(_, p)| p.clone())
    }

    /// Starts making what was appended durable on a thread of its own: the caller
    /// goes on with work that may run before it is, and waits ([`Syncing::wait`])
    /// before its action.
    fn sync_later(&self) -> Result<Syncing, JournalError> {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let Some((file, path)) = state.file.as_ref() else {
            return Ok(Syncing(None));
        };
        let err = |source: std::io::Error| JournalError::Write {
            file: path.clone(),
            source,
        };
        let file = file.try_clone().map_err(err)?;
        let syncing = std::thread::Builder::new()
            .name("journal-sync".into())
            .spawn(move || file.sync_data())
            .map_err(err)?;
        Ok(Syncing(Some((path.clone(), syncing))))
    }

    fn append(
        &self,
        lines: &[Line],
        sync: bool,
        begins: bool,
        ends: bool,
    ) -> Result<(), JournalError> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.file.is_none() {
            state.file = Some(self.create()?);
        }
        let Some((file, path)) = state.file.as_mut() else {
            return Ok(());
        };
        let err = |source: std::io::Error| JournalError::Write {
            file: path.clone(),
            source,
        };
        let mut text = String::new();
        for line in lines {
            text.push_str(&serde_json::to_string(line).map_err(|e| err(e.into()))?);
            text.push('\n');
        }
        file.write_all(text.as_bytes()).map_err(err)?;
        if sync {
            file.sync_data().map_err(err)?;
        }
        if begins {
            state.active += 1;
        }
        if ends {
            state.active = state.active.saturating_sub(1);
            if state.active == 0
                && let Some((file, _)) = state.file.as_mut()
            {
                // Nothing is in flight: every line is history.
                let _ = file.set_len(0);
            }
        }
        Ok(())
    }

    fn create(&self) -> Result<(File, PathBuf), JournalError> {
        let path = self.dir.join(format!(
            "{}-{}.jsonl",
            std::process::id(),
            uuid::Uuid::now_v7().simple()
        ));
        let err = |source: std::io::Error| JournalError::Write {
            file: path.clone(),
            source,
        };
        berth_host::private::dir(&self.dir).map_err(err)?;
        let file = rustix::fs::open(
            &path,
            OFlags::CREATE
                | OFlags::EXCL
                | OFlags::WRONLY
                | OFlags::APPEND
                | OFlags::NOFOLLOW
                | OFlags::CLOEXEC,
            Mode::RUSR | Mode::WUSR,
        )
        .map(File::from)
        .map_err(|e| err(e.into()))?;
        rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive)
            .map_err(|e| err(e.into()))?;
        // The new name must survive a crash too.
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(err)?;
        Ok((file, path))
    }
}

/// The journal of one run in one directory.
#[derive(Debug)]
pub struct RunJournal {
    journal: Arc<Journal>,
    run: String,
    begun: bool,
}

impl RunJournal {
    /// Makes `record` durable; only then may its action be done. The first record
    /// of a run goes with the run's `Begin` (the directory and its identity).
    pub fn record(&mut self, dir: &PinnedDir, record: &Record) -> Result<(), JournalError> {
        self.append_record(dir, record, true)
    }

    fn append_record(
        &mut self,
        dir: &PinnedDir,
        record: &Record,
        sync: bool,
    ) -> Result<(), JournalError> {
        let line = |r: Record| Line {
            run: self.run.clone(),
            entry: Entry::Record(r),
        };
        let mut lines = Vec::with_capacity(2);
        let begins = !self.begun;
        if begins {
            let (dev, ino) = dir.identity();
            lines.push(line(Record::Begin {
                task_id: self.run.clone(),
                dir: dir.canonical().as_str().to_owned(),
                dev,
                ino,
            }));
        }
        lines.push(line(record.clone()));
        self.journal.append(&lines, sync, begins, false)?;
        self.begun = true;
        Ok(())
    }

    /// [`RunJournal::record`], its flush to the disk done on another thread while
    /// the caller prepares its action: the action may start only once
    /// [`Syncing::wait`] says the record is durable.
    pub fn record_syncing(
        &mut self,
        dir: &PinnedDir,
        record: &Record,
    ) -> Result<Syncing, JournalError> {
        self.append_record(dir, record, false)?;
        self.journal.sync_later()
    }

    /// Marks the run finished: every action has been undone.
    pub fn finish(self) -> Result<(), JournalError> {
        if !self.begun {
            return Ok(());
        }
        let end = Line {
            run: self.run.clone(),
            entry: Entry::End { end: true },
        };
        // Not synced: should the mark be lost, replay undoes again, finding nothing.
        self.journal.append(&[end], false, false, true)
    }
}

/// A record's flush to the disk, under way ([`RunJournal::record_syncing`]).
#[derive(Debug)]
#[must_use = "the record is durable only once wait says so"]
pub struct Syncing(Option<(PathBuf, std::thread::JoinHandle<std::io::Result<()>>)>);

impl Syncing {
    /// Waits until the record is on the disk.
    pub fn wait(self) -> Result<(), JournalError> {
        let Some((file, flush)) = self.0 else {
            return Ok(());
        };
        let flushed = flush
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("the journal's flush stopped")));
        flushed.map_err(|source| JournalError::Write { file, source })
    }
}

/// The runs of a journal file without an end mark: (directory, records from Begin).
pub(crate) fn unfinished_runs(file: &Path) -> Vec<(String, Vec<Record>)> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let mut runs: Vec<(String, Vec<Record>, bool)> = Vec::new();
    // A torn last line (crash while writing it) means its action never started.
    for line in text
        .lines()
        .filter_map(|l| serde_json::from_str::<Line>(l).ok())
    {
        let slot = match runs.iter().position(|(run, _, _)| *run == line.run) {
            Some(i) => i,
            None => {
                runs.push((line.run.clone(), Vec::new(), false));
                runs.len() - 1
            }
        };
        match line.entry {
            Entry::Record(r) => runs[slot].1.push(r),
            Entry::End { .. } => runs[slot].2 = true,
        }
    }
    runs.into_iter()
        .filter(|(_, _, ended)| !ended)
        .filter_map(|(_, records, _)| match records.first() {
            Some(Record::Begin { dir, .. }) => Some((dir.clone(), records)),
            Some(
                Record::AppendBlock { .. }
                | Record::CreateDir { .. }
                | Record::CopyTree { .. }
                | Record::Guard { .. },
            )
            | None => None,
        })
        .collect()
}
