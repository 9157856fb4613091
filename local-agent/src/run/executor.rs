//! The executor of this machine ([`NativeExecutor`]): its state, and what the server
//! asks of it (run a task, recover after a crash, validate a directory, say how agents
//! are fenced), as its own methods. The server's `Executor` trait is implemented on
//! it outside the runner (`crate::serve`), by calling these.

use super::execute::run;
use super::state::Inner;
use crate::agent::groups::{self, StopReport, Watcher};
use crate::config::ExecutorConfig;
use crate::dir::lock::{DirLocks, LockError};
use crate::dir::pin::PinnedDir;
use crate::dir::validate;
use crate::inject::journal::Journal;
use crate::inject::recover::{self, ReplayReport};
use berth_core::binding::MachineId;
use berth_core::exec::{DirIdentity, ExecEvent, TaskOutcome, TaskSpec, ValidatedDir};
use berth_core::{Context, Refusal};
use std::os::unix::fs::DirBuilderExt;
use std::sync::Arc;
use tokio::sync::{mpsc, watch};

/// Why the executor could not start.
#[derive(Debug, thiserror::Error)]
pub enum ExecutorError {
    #[error("cannot create Berth's home {dir}: {source}")]
    Home {
        dir: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Lock(#[from] LockError),
}

/// The executor of this machine. Cheap to clone; clones share the lock table and the
/// journal.
///
/// Agents are spawned from the thread polling [`NativeExecutor::run_task`], and Linux
/// delivers the parent-death signal when that *thread* exits: poll it on a runtime
/// whose threads live as long as the agents (a multi-thread runtime's workers, or the
/// thread of a current-thread runtime), never inside `spawn_blocking`.
#[derive(Debug, Clone)]
pub struct NativeExecutor {
    inner: Arc<Inner>,
}

impl NativeExecutor {
    /// Creates Berth's home (0700) and takes the lock directory into use. Does not
    /// replay journals: call [`NativeExecutor::replay_leftovers`] once at startup,
    /// before the first task.
    pub fn new(cfg: ExecutorConfig) -> Result<NativeExecutor, ExecutorError> {
        for dir in [cfg.berth_home.clone(), cfg.journal_dir()] {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&dir)
                .map_err(|source| ExecutorError::Home { dir, source })?;
        }
        let locks = DirLocks::new(cfg.lock_dir.clone())?;
        let ctx = cfg.context();
        let journal = Journal::new(cfg.journal_dir());
        let tmps = Arc::new(crate::run::tmp::Tmps::new(&cfg.berth_home));
        Ok(NativeExecutor {
            inner: Arc::new(Inner {
                cfg,
                ctx,
                locks,
                journal,
                watcher: Watcher::new(),
                tmps,
                fences: Arc::default(),
                waiting: crate::agent::ask::Waiting::default(),
            }),
        })
    }

    /// Hands a decision to the run waiting on request `id`; `false` if none does.
    pub fn answer_request(&self, id: &str, answer: berth_core::approval::Answer) -> bool {
        self.inner.waiting.answer(id, answer)
    }

    pub fn config(&self) -> &ExecutorConfig {
        &self.inner.cfg
    }

    /// The rules' view of this user.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// Full native validation of `input` (absolute, or starting with `~`), pinned.
    pub fn validate_dir(&self, input: &str) -> Result<PinnedDir, Refusal> {
        validate::validate(&self.inner.ctx, input)
    }

    /// Restores every directory left with Berth's files by a run that never finished.
    pub fn replay_leftovers(&self) -> ReplayReport {
        let journal_dir = self.inner.cfg.journal_dir();
        let mut report = recover::replay_leftovers(&journal_dir);
        // An undo a Berth left half done is finished (see `changes`).
        report
            .restored
            .extend(crate::changes::replay_undos(&journal_dir));
        report
    }

    /// Kills what agents of a Berth that stopped mid-task left running. Call at
    /// startup before [`NativeExecutor::replay_leftovers`]: a survivor could write into
    /// a directory after it was restored.
    pub fn stop_leftover_agents(&self) -> StopReport {
        groups::stop_leftovers(&self.inner.cfg.agents_dir())
    }

    /// Runs one task to its end, reporting progress on `events`. When `cancel` turns
    /// `true` it stops the agent (its whole process group), restores the directory and
    /// returns `cancelled`; it never returns before the directory is restored.
    pub async fn run_task(
        &self,
        task: TaskSpec,
        events: mpsc::UnboundedSender<ExecEvent>,
        cancel: watch::Receiver<bool>,
    ) -> TaskOutcome {
        run(self.inner.clone(), task, events, cancel).await
    }

    /// How this machine fences the agents it runs now. Reads the user settings.
    pub fn fence_status(&self) -> Option<berth_core::api::FenceStatus> {
        Some(crate::run::fence::status(
            &self.inner.ctx,
            &self.inner.cfg.config_dir,
        ))
    }

    /// This machine's id and human name.
    pub fn this_machine(&self) -> (MachineId, String) {
        (
            self.inner.cfg.machine_id.clone(),
            self.inner.cfg.machine_name.clone(),
        )
    }

    /// Restores whatever interrupted runs left behind: stops their agents, sweeps
    /// their temporary directories, replays their journals. Blocking; call once at
    /// startup, before the first task. One line per action, for the operator.
    pub fn recover_leftovers(&self) -> Vec<String> {
        let groups = self.stop_leftover_agents();
        let stopped = groups.stopped.iter().map(|(dir, n)| {
            let what = if *n == 1 { "process" } else { "processes" };
            format!("stopped {n} {what} left by an interrupted task in {dir}")
        });
        let held = groups.in_use.iter().map(|record| {
            format!(
                "left the agent record {} alone: another Berth process holds it",
                record.display()
            )
        });
        let mut lines: Vec<String> = stopped.chain(held).collect();
        // The temporary directories of tasks that never finished; not while another
        // Berth process on this home may be running tasks.
        if groups.in_use.is_empty() {
            lines.extend(self.inner.tmps.sweep());
        }
        let report = self.replay_leftovers();
        let restored = report
            .restored
            .iter()
            .map(|dir| format!("restored {dir}, left mid-run by an interrupted task"));
        let skipped = report.skipped.iter().map(|(journal, why)| {
            format!(
                "could not apply the journal {} (moved to unapplied/): {why}",
                journal.display()
            )
        });
        let in_use = report.in_use.iter().map(|journal| {
            format!(
                "left the journal {} alone: another Berth process holds it",
                journal.display()
            )
        });
        let kept = report.kept.iter().map(|path| {
            format!(
                "kept {path}: written by an interrupted task's agent inside a skill folder Berth installed, so not Berth's to remove"
            )
        });
        let guarded = report.guarded.iter().map(|what| {
            format!(
                "put back {what}: an interrupted task's fenced agent wrote there, and the fence guards it"
            )
        });
        lines.extend(
            restored
                .chain(kept)
                .chain(guarded)
                .chain(skipped)
                .chain(in_use),
        );
        lines
    }

    /// Validates a directory natively, as a binding would use it. Blocking.
    pub fn validate_binding(&self, dir: &str) -> Result<ValidatedDir, Refusal> {
        self.validate_dir(dir).map(|p| p.to_validated())
    }

    /// Whether a directory bound here still holds, looked at now: `Missing` when `dir`
    /// names no directory, `Changed` when it names another than `identity`; `None`
    /// when it holds or cannot be told. Blocking (a `stat`).
    pub fn look_at(
        &self,
        dir: &str,
        identity: Option<DirIdentity>,
    ) -> Option<berth_core::binding::BindingState> {
        look(dir, identity)
    }

    /// A directory was just bound in place: takes the change record's first snapshot
    /// on a thread of its own, if it was never taken. Returns at once.
    pub fn warm_up(&self, dir: &ValidatedDir) {
        let (inner, input) = (self.inner.clone(), dir.canonical.as_str().to_owned());
        let identity = (dir.identity.dev, dir.identity.ino);
        let spawned = std::thread::Builder::new()
            .name("berth-first-snapshot".into())
            .spawn(move || first_snapshot(&inner, &input, identity));
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "no thread for the first snapshot: it is taken at the first run");
        }
    }
}

/// [`NativeExecutor::look_at`]: the bound path `dir` names no directory (`missing`), or no
/// longer the one linked (`changed`: it resolves elsewhere, or another directory was
/// put in its place), as a run would find it; `None` when it holds, or cannot be told
/// (a path not readable here is left to the run to refuse, in its own words).
fn look(dir: &str, identity: Option<DirIdentity>) -> Option<berth_core::binding::BindingState> {
    use berth_core::binding::BindingState;
    use std::os::unix::fs::MetadataExt;
    let meta = match std::fs::metadata(dir) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Some(BindingState::Missing);
        }
        Err(_) => return None,
    };
    if !meta.is_dir() {
        return Some(BindingState::Missing);
    }
    let replaced = identity.is_some_and(|id| (id.dev, id.ino) != (meta.dev(), meta.ino()));
    let moved = std::fs::canonicalize(dir).is_ok_and(|c| c.as_os_str() != dir);
    (replaced || moved).then_some(BindingState::Changed)
}

/// The change record's first snapshot of a directory just bound (see
/// [`NativeExecutor::warm_up`]): only if it was never recorded, only if it is still the
/// directory validated, and only if no run holds it (the lock is taken, never waited
/// for: a run that comes meanwhile waits, and reads this snapshot's progress).
fn first_snapshot(inner: &Inner, input: &str, identity: (u64, u64)) {
    let Ok(pinned) = validate::validate(&inner.ctx, input) else {
        return;
    };
    if pinned.identity() != identity {
        return;
    }
    let path = pinned.path();
    if let Some((shadow, recorded)) = crate::changes::Shadow::existing(&inner.cfg.berth_home, path)
        && recorded == identity
        && shadow.recorded()
    {
        return;
    }
    let Ok(Some(_lock)) = inner
        .locks
        .try_acquire(pinned.canonical(), crate::dir::lock::FIRST_SNAPSHOT)
    else {
        return;
    };
    if pinned.recheck().is_err() {
        return;
    }
    let limits = crate::settings::user_snapshots(&inner.cfg)
        .map_or_else(crate::changes::Limits::default, |s| {
            crate::changes::Limits::from_settings(&s)
        });
    let started = std::time::Instant::now();
    let taken = crate::changes::Shadow::open(&inner.cfg.berth_home, path, identity)
        .and_then(|shadow| shadow.snapshot(&limits));
    match taken {
        Ok(_) => {
            tracing::info!(dir = %pinned.display(), took_ms = started.elapsed().as_millis() as u64, "first snapshot taken")
        }
        Err(e) => {
            tracing::warn!(dir = %pinned.display(), error = %e, "no first snapshot: the first run takes it")
        }
    }
}
