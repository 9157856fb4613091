//! The native executor: runs a task in place, in a worktree or in scratch.
//!
//! `validate → pin → lock → settings → brief and sidecars (journaled) → re-check →
//! spawn → stream → clean up (through the pinned descriptor) → unlock → outcome`. The
//! future returned by [`Executor::run`] never resolves before the directory is restored
//! and the lock released.

use crate::adapter::{Adapter, Turn};
use crate::brief::{self, WorkMode};
use crate::config::ExecutorConfig;
use crate::groups::{self, StopReport, Watcher};
use crate::journal::{self, Journal, ReplayReport};
use crate::lock::{DirLock, DirLocks, LockError};
use crate::pin::{PinnedDir, pin_owned};
use crate::process;
use crate::sidecar::Sidecars;
use crate::turn::{MAX_ENV_BRIEF, Ran, cut, stream};
use crate::worktree::{self, Worktree};
use crate::{scratch, settings, validate};
use berth_core::api::{Denial, TaskStatus};
use berth_core::binding::MachineId;
use berth_core::event::AgentEvent;
use berth_core::policy::Policy;
use berth_core::settings::trust::Trust;
use berth_core::{Context, ErrorCode, LocalPath, Permissions, Refusal};
use berth_web::executor::{
    BoxFuture, DirIdentity, ExecEvent, Executor, Placement, TaskOutcome, TaskSpec, ValidatedDir,
};
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

#[derive(Debug)]
struct Inner {
    cfg: ExecutorConfig,
    ctx: Context,
    locks: DirLocks,
    journal: Arc<Journal>,
    /// One process-group watcher for every agent this executor starts.
    watcher: Watcher,
}

/// Where a task runs, pinned.
#[derive(Debug)]
struct Place {
    pinned: PinnedDir,
    mode: WorkMode,
    /// The bound directory, for the project settings layer.
    bound: Option<LocalPath>,
    worktree: Option<Worktree>,
}

/// What was prepared in the directory before the agent starts.
#[derive(Debug)]
struct Prepared {
    sidecars: Sidecars,
    /// The brief, when it travels with the invocation.
    brief_arg: Option<String>,
    brief_text: String,
    env: std::collections::BTreeMap<String, String>,
    warnings: Vec<String>,
    /// The run's permission policy, and where it came from.
    policy: Policy,
    /// What became of the project layer's keys, when one was read.
    project: Option<berth_core::settings::trust::ProjectLayerReport>,
    /// The run's fence, its temporary directory, and its lines for the transcript.
    fence: crate::run_fence::RunFence,
}

enum Stop {
    Refused(Refusal),
    Failed(ErrorCode, String),
}

impl From<Refusal> for Stop {
    fn from(r: Refusal) -> Stop {
        Stop::Refused(r)
    }
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
        Ok(NativeExecutor {
            inner: Arc::new(Inner {
                cfg,
                ctx,
                locks,
                journal,
                watcher: Watcher::new(),
            }),
        })
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
        let mut report = journal::replay_leftovers(&journal_dir);
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

    /// Runs one task to its end (see [`Executor::run`]).
    pub async fn run_task(
        &self,
        task: TaskSpec,
        events: mpsc::UnboundedSender<ExecEvent>,
        cancel: watch::Receiver<bool>,
    ) -> TaskOutcome {
        run(self.inner.clone(), task, events, cancel).await
    }
}

impl Executor for NativeExecutor {
    fn fence(&self) -> Option<berth_core::api::FenceStatus> {
        Some(crate::run_fence::status(
            &self.inner.ctx,
            &self.inner.cfg.config_dir,
        ))
    }

    fn machine(&self) -> (MachineId, String) {
        (
            self.inner.cfg.machine_id.clone(),
            self.inner.cfg.machine_name.clone(),
        )
    }

    fn run(
        &self,
        task: TaskSpec,
        events: mpsc::UnboundedSender<ExecEvent>,
        cancel: watch::Receiver<bool>,
    ) -> BoxFuture<'static, TaskOutcome> {
        Box::pin(run(self.inner.clone(), task, events, cancel))
    }

    fn recover(&self) -> Vec<String> {
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
            lines.extend(crate::run_fence::sweep_tmp(&self.inner.cfg.berth_home));
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

    fn validate(&self, dir: &str) -> Result<ValidatedDir, Refusal> {
        self.validate_dir(dir).map(|p| p.to_validated())
    }
}

fn outcome(status: TaskStatus, error: Option<String>) -> TaskOutcome {
    TaskOutcome {
        status,
        exit_code: None,
        error,
        code: None,
        work_dir: None,
        work_dir_display: None,
        resume_id: None,
        branch: None,
        denials: Vec::new(),
        changes: None,
        fence: None,
    }
}

fn stopped(stop: Stop) -> TaskOutcome {
    match stop {
        Stop::Refused(r) => TaskOutcome::refused(&r),
        Stop::Failed(code, msg) => TaskOutcome::failed(code, msg),
    }
}

/// A session id used as a directory name must be one plain component.
fn session_component(id: &str) -> Result<&str, Refusal> {
    let ok = !id.is_empty()
        && id.len() <= 128
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'));
    if ok {
        Ok(id)
    } else {
        Err(Refusal::new(
            ErrorCode::PathInvalid,
            format!("the session id {id:?} cannot name a directory"),
            "session ids are letters, digits, '-' and '_'",
        ))
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, Stop> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Stop::Failed(ErrorCode::Internal, format!("internal error: {e}")))
}

/// A binding stores the canonical path it was validated as, and the directory's
/// (device, inode). If that path now resolves elsewhere (replaced by a symlink, or a
/// parent was) or names another directory (one put in its place), it is not the
/// directory the user linked: refuse rather than run there.
fn same_as_linked(
    ctx: &Context,
    pinned: &PinnedDir,
    linked: &LocalPath,
    identity: Option<DirIdentity>,
) -> Result<(), Stop> {
    let same_inode = identity.is_none_or(|id| pinned.identity() == (id.dev, id.ino));
    if pinned.canonical() == linked && same_inode {
        Ok(())
    } else {
        let shown = berth_core::display::display(ctx, linked);
        Err(Stop::Refused(crate::pin::path_changed(&shown)))
    }
}

/// Validates a linked directory. A binding's directory that is no longer at its path
/// (renamed away, moved, deleted) is reported as `path_changed`, the code of a swap:
/// the path no longer leads to the directory that was linked.
fn validate_linked(
    ctx: &Context,
    dir: &LocalPath,
    identity: Option<DirIdentity>,
) -> Result<PinnedDir, Stop> {
    match validate::validate(ctx, dir.as_str()) {
        Err(r) if r.code == ErrorCode::NotFound && identity.is_some() => Err(Stop::Refused(
            crate::pin::path_changed(&berth_core::display::display(ctx, dir)),
        )),
        other => Ok(other?),
    }
}

fn place(inner: &Inner, task: &TaskSpec) -> Result<Place, Stop> {
    let ctx = &inner.ctx;
    match &task.placement {
        Placement::InPlace { dir, identity } => {
            let pinned = validate_linked(ctx, dir, *identity)?;
            same_as_linked(ctx, &pinned, dir, *identity)?;
            Ok(Place {
                bound: Some(pinned.canonical().clone()),
                pinned,
                mode: WorkMode::InPlace,
                worktree: None,
            })
        }
        Placement::Worktree { dir, identity } => {
            let session = session_component(&task.session.id)?;
            let bound = validate_linked(ctx, dir, *identity)?;
            same_as_linked(ctx, &bound, dir, *identity)?;
            let wt = worktree::ensure(bound.path(), &inner.cfg.berth_home, session).map_err(
                |e| match e.refusal(bound.display()) {
                    Some(r) => Stop::Refused(r),
                    None => Stop::Failed(ErrorCode::PrepareFailed, e.to_string()),
                },
            )?;
            Ok(Place {
                pinned: pin_owned(ctx, &wt.work_dir)?,
                bound: Some(bound.canonical().clone()),
                mode: WorkMode::Worktree,
                worktree: Some(wt),
            })
        }
        Placement::Scratch => {
            let session = session_component(&task.session.id)?;
            let dir = scratch::ensure(&inner.cfg.berth_home, session).map_err(|e| {
                Stop::Failed(
                    ErrorCode::PrepareFailed,
                    format!("cannot create the scratch directory: {e}"),
                )
            })?;
            Ok(Place {
                pinned: pin_owned(ctx, &dir)?,
                bound: None,
                mode: WorkMode::Scratch,
                worktree: None,
            })
        }
    }
}

fn prepare(inner: &Inner, task: &TaskSpec, place: &Place) -> Result<Prepared, Stop> {
    let trust = crate::trust::TrustStore::new(&inner.cfg.berth_home);
    let mut loaded = settings::load(
        &inner.ctx,
        &inner.cfg.config_dir,
        place.bound.as_ref(),
        &trust,
    )
    .map_err(|e| Stop::Failed(ErrorCode::PrepareFailed, e.to_string()))?;
    let mut warnings: Vec<String> = loaded
        .settings
        .warnings
        .iter()
        .map(|d| format!("{}:{}:{}: {}", d.file, d.line, d.column, d.message))
        .chain(loaded.notes.iter().cloned())
        .collect();
    let adapter = Adapter::for_kind(task.agent.kind);
    let policy = Policy::decide(
        task.agent.permissions,
        loaded.settings.permissions,
        loaded.settings.permissions_limit,
        loaded.settings.project_trusted,
    );
    if let (Some(asked), Some(report)) = (policy.widening_ignored, &loaded.project) {
        let at = report
            .keys
            .iter()
            .find(|k| k.key == "permissions")
            .map(|k| (k.line, k.column))
            .unwrap_or((1, 1));
        let message =
            berth_core::settings::trust::widening_ignored(asked, policy.effective, report.trust);
        loaded.add_ignored(berth_core::settings::trust::KeyVerdict {
            key: "permissions".to_owned(),
            line: at.0,
            column: at.1,
            verdict: berth_core::settings::trust::Verdict::NeedsTrust,
            message,
        });
    }
    let project = loaded.project;
    let settings = loaded.settings;
    // The fence, before anything is written into the directory: a run that must be
    // fenced and cannot be is refused with the directory untouched.
    let fence = crate::run_fence::for_run(
        &inner.ctx,
        &settings.fence,
        crate::run_fence::Places {
            berth_home: &inner.cfg.berth_home,
            lock_dir: &inner.cfg.lock_dir,
            config_dir: &inner.cfg.config_dir,
            user_home: inner.cfg.user_home.as_deref(),
        },
        crate::run_fence::RunPlace {
            dir: place.pinned.canonical(),
            worktree_root: place.worktree.as_ref().map(|w| w.root.as_path()),
        },
        &task.task_id,
        adapter,
        policy.effective,
        |name| {
            settings
                .env
                .get(name)
                .map(Into::into)
                .or_else(|| std::env::var_os(name))
        },
    )
    .map_err(|stop| match stop {
        crate::run_fence::FenceStop::Refused(r) => Stop::Refused(r),
        crate::run_fence::FenceStop::Failed(m) => Stop::Failed(ErrorCode::PrepareFailed, m),
    })?;
    let mut sidecars = Sidecars::new(&inner.journal, &task.task_id);
    let result = (|| {
        // Where every skill would go, and whether the brief needs its file, are
        // settled before anything is written: a run refused for a name it cannot
        // write through leaves the directory untouched.
        let mut skills: Vec<(String, &std::path::Path)> = Vec::new();
        for plugin in &settings.plugins {
            if plugin.kind != berth_core::settings::PluginKind::Skill {
                continue;
            }
            let Some(base) = adapter.skills_dir() else {
                warnings.push(format!(
                    "skill {} is not installed: a command agent reads no skill folders",
                    plugin.id
                ));
                continue;
            };
            let source = std::path::Path::new(plugin.path.as_str());
            if !source.join("SKILL.md").is_file() {
                warnings.push(format!(
                    "skill {} declared in {} has no SKILL.md at {}",
                    plugin.id, plugin.declared_in, plugin.path
                ));
                continue;
            }
            let taken: Vec<String> = skills.iter().map(|(rel, _)| rel.clone()).collect();
            let rel = sidecars.skill_place(&place.pinned, base, &plugin.id, &taken)?;
            skills.push((rel, source));
        }
        let names: Vec<String> = skills.iter().map(|(rel, _)| rel.clone()).collect();
        let brief = brief::compose(
            &task.session,
            place.mode,
            place.pinned.display(),
            place.worktree.as_ref().map(|w| w.branch.as_str()),
            &settings,
            &names,
        );
        warnings.extend(brief.warnings);
        let brief_file = match adapter.brief_file() {
            Some(file) if brief.text.len() > inner.cfg.brief_arg_limit => {
                sidecars.check_block(&place.pinned, file)?;
                Some(file)
            }
            Some(_) | None => None,
        };
        for (rel, source) in &skills {
            sidecars.install_skill_at(&place.pinned, rel, source)?;
        }
        let brief_arg = match brief_file {
            Some(file) => {
                sidecars.append_block(&place.pinned, file, &brief.text)?;
                None
            }
            None => Some(brief.text.clone()),
        };
        // Last before the agent: the guard's snapshot of what a fenced agent that may
        // write its directory must not leave written there (.git/hooks, .git/config,
        // .berth). Read-only, the kernel refuses every write there already; a scratch
        // directory is Berth's own, and no settings are read from it.
        if fence.fenced
            && policy.effective != Permissions::ReadOnly
            && place.mode != WorkMode::Scratch
        {
            match sidecars.guard(&place.pinned, &inner.cfg.berth_home.join("guard")) {
                Ok(()) => {}
                Err(crate::sidecar::SidecarError::Guard(e)) => warnings.push(format!(
                    "the fence cannot guard .git/hooks, .git/config and .berth in this run ({e}); the agent may change them"
                )),
                Err(e) => return Err(e),
            }
        }
        Ok::<_, crate::sidecar::SidecarError>((brief_arg, brief.text))
    })();
    match result {
        Ok((brief_arg, brief_text)) => Ok(Prepared {
            sidecars,
            brief_arg,
            brief_text,
            env: settings.env,
            warnings,
            policy,
            project,
            fence,
        }),
        Err(e) => {
            if let Some(tmp) = &fence.tmp {
                let _ = std::fs::remove_dir_all(tmp);
            }
            let undone = sidecars.cleanup(&place.pinned);
            let refusal = e.refusal(place.pinned.display());
            let mut msg = e.to_string();
            if let (_, Err(u)) = undone {
                msg.push_str(&format!("; {u}"));
            }
            match refusal {
                Some(r) => Err(Stop::Refused(r)),
                None => Err(Stop::Failed(ErrorCode::PrepareFailed, msg)),
            }
        }
    }
}

/// The change record of an in-place run: the directory's shadow, its tree before the
/// agent, the limits it was taken with, and the directory (path, identity).
type Record = (
    crate::changes::Shadow,
    crate::changes::Snapshot,
    crate::changes::Limits,
    std::path::PathBuf,
    (u64, u64),
);

/// A run's directory once placed: locked with everything done under the lock, or only
/// placed, its lock held by someone else.
enum Staged {
    Locked(Box<Locked>),
    Placed(Box<Place>),
}

/// A run ready to start its agent: its directory, held, recorded and prepared.
struct Locked {
    place: Place,
    lock: DirLock,
    record: Option<Record>,
    prepared: Prepared,
}

/// What runs under the directory's lock before the agent starts (blocking): the
/// recheck that it is still the directory pinned, the change record's first snapshot
/// (in place; a worktree's changes are its turn's commit), before the sidecars; then
/// the preparation.
fn under_lock(
    inner: &Inner,
    task: &TaskSpec,
    place: Place,
    lock: DirLock,
    events: &mpsc::UnboundedSender<ExecEvent>,
) -> Result<Box<Locked>, Stop> {
    place.pinned.recheck().map_err(Stop::Refused)?;
    let record = if place.mode == WorkMode::InPlace {
        let limits = settings::snapshot_limits(&inner.cfg);
        let (path, identity) = (place.pinned.path().to_owned(), place.pinned.identity());
        let started = (|| -> Result<_, crate::changes::ChangesError> {
            let shadow = crate::changes::Shadow::open(&inner.cfg.berth_home, &path, identity)?;
            let before = shadow.snapshot_before(&limits)?;
            Ok((shadow, before))
        })();
        match started {
            Ok((shadow, before)) => Some((shadow, before, limits, path, identity)),
            Err(e) => {
                warn(
                    events,
                    format!("what the agent changes will not be summarized (no undo): {e}"),
                );
                None
            }
        }
    } else {
        None
    };
    let prepared = prepare(inner, task, &place).inspect_err(|stop| {
        // A task's outcome carries no hint: the refusal's goes to its transcript.
        if let Stop::Refused(r) = stop {
            warn(events, format!("hint: {}", r.hint));
        }
    })?;
    Ok(Box::new(Locked {
        place,
        lock,
        record,
        prepared,
    }))
}

/// A line of Berth's own in the run's stderr stream (`berth: …`).
fn warn(events: &mpsc::UnboundedSender<ExecEvent>, line: String) {
    let _ = events.send(ExecEvent::Agent(AgentEvent::Stderr {
        line: format!("berth: {line}"),
    }));
}

async fn run(
    inner: Arc<Inner>,
    task: TaskSpec,
    events: mpsc::UnboundedSender<ExecEvent>,
    mut cancel: watch::Receiver<bool>,
) -> TaskOutcome {
    let task = Arc::new(task);
    let warn = |line: String| warn(&events, line);
    // Everything before the agent starts, in one hand-off to a blocking thread while
    // the directory is free (the usual case): the placement, the lock, and what runs
    // under it. A directory in use is waited for here, and the rest runs after.
    let staged = {
        let (inner, task, events) = (inner.clone(), task.clone(), events.clone());
        blocking(move || -> Result<Staged, Stop> {
            if matches!(task.placement, Placement::Worktree { .. })
                && let Some(r) = crate::run_fence::refused_early(&inner.ctx, &inner.cfg.config_dir)
            {
                self::warn(&events, format!("hint: {}", r.hint));
                return Err(Stop::Refused(r));
            }
            let place = place(&inner, &task)?;
            match inner
                .locks
                .try_acquire(place.pinned.canonical(), &task.task_id)
            {
                Ok(Some(lock)) => Ok(Staged::Locked(under_lock(
                    &inner, &task, place, lock, &events,
                )?)),
                Ok(None) => Ok(Staged::Placed(Box::new(place))),
                Err(e) => Err(Stop::Failed(ErrorCode::LockFailed, e.to_string())),
            }
        })
        .await
    };
    let locked = match staged.and_then(|r| r) {
        Err(stop) => return stopped(stop),
        Ok(Staged::Locked(locked)) => locked,
        Ok(Staged::Placed(place)) => {
            let lock = inner
                .locks
                .acquire(
                    place.pinned.canonical(),
                    &task.task_id,
                    |reason| {
                        let _ = events.send(ExecEvent::Status {
                            status: TaskStatus::WaitingLock,
                            wait_reason: Some(reason),
                        });
                    },
                    &mut cancel,
                )
                .await;
            let lock = match lock {
                Ok(l) => l,
                Err(LockError::Cancelled) => return outcome(TaskStatus::Cancelled, None),
                Err(e) => return TaskOutcome::failed(ErrorCode::LockFailed, e.to_string()),
            };
            let (inner, task, events) = (inner.clone(), task.clone(), events.clone());
            let locked = blocking(move || under_lock(&inner, &task, *place, lock, &events)).await;
            match locked.and_then(|r| r) {
                Ok(locked) => locked,
                Err(stop) => return stopped(stop),
            }
        }
    };
    let Locked {
        place,
        lock: _lock,
        record,
        prepared,
    } = *locked;
    for w in &prepared.warnings {
        warn(format!("warning: {w}"));
    }
    let adapter = Adapter::for_kind(task.agent.kind);
    if let Some(report) = &prepared.project
        && (report.trust == Trust::Replaced || report.ignored().next().is_some())
    {
        let _ = events.send(ExecEvent::Agent(AgentEvent::Ignored {
            file: report.file.clone(),
            dir: report.dir.clone(),
            trust: report.trust,
            keys: report.ignored().cloned().collect(),
            hint: report.hint.clone(),
        }));
    }
    if let Some(limit) = prepared.policy.narrowed_by_project() {
        warn(format!(
            "permissions {limit}: the project settings narrow the agent's {}",
            prepared.policy.requested
        ));
    }
    if let Some(wider) = prepared.policy.widened_by_project() {
        warn(format!(
            "permissions {wider}: the trusted project settings widen the agent's {}",
            prepared.policy.requested
        ));
    }
    if let Some(note) = adapter.unenforced(&task.agent, prepared.policy.effective) {
        warn(note);
    }
    let work_dir = place.pinned.canonical().as_str().to_owned();
    let mut resume = task.resume_id.clone();
    if let Err(r) = place.pinned.recheck() {
        // Swapped while the sidecars were written: undo them through the descriptor.
        let _ = finish(place, prepared.sidecars, &task.task_id).await;
        return TaskOutcome::refused(&r);
    }
    if *cancel.borrow() {
        let _ = finish(place, prepared.sidecars, &task.task_id).await;
        return outcome(TaskStatus::Cancelled, None);
    }
    let mut result: Result<Ran, (ErrorCode, String)> = Err((
        ErrorCode::AgentStartFailed,
        "the agent did not start".to_owned(),
    ));
    for attempt in 0..2 {
        let turn = Turn {
            prompt: &task.prompt,
            brief: prepared.brief_arg.as_deref(),
            resume_id: resume.as_deref(),
            work_dir: place.pinned.path(),
            permissions: prepared.policy.effective,
            fenced: prepared.fence.prepared.is_some(),
        };
        let inv = match adapter.invocation(&task.agent, &turn) {
            Ok(i) => i,
            Err(e) => {
                result = Err((ErrorCode::AgentStartFailed, e.to_string()));
                break;
            }
        };
        let berth_env = [
            ("BERTH_SESSION_ID", task.session.id.clone()),
            ("BERTH_TASK_ID", task.task_id.clone()),
            ("BERTH_WORK_DIR", work_dir.clone()),
            (
                "BERTH_BRIEF",
                cut(&prepared.brief_text, MAX_ENV_BRIEF).to_owned(),
            ),
        ];
        let mut env = process::agent_env(
            &inv,
            inner.cfg.user_home.as_deref(),
            &prepared.env,
            &berth_env,
        );
        if let Some(tmp) = &prepared.fence.tmp {
            // The task's own temporary directory, in place of Berth's: the fence lets
            // the agent write there and nowhere else outside its directory.
            env.retain(|(k, _)| !matches!(k.to_str(), Some("TMPDIR" | "TMP" | "TEMP")));
            for k in ["TMPDIR", "TMP", "TEMP"] {
                env.push((k.into(), tmp.into()));
            }
        }
        let _ = events.send(ExecEvent::Status {
            status: TaskStatus::Running,
            wait_reason: None,
        });
        // The fence's event: every run says whether, and how, its agent is fenced.
        if attempt == 0 {
            let _ = events.send(ExecEvent::Agent(AgentEvent::Fence {
                fenced: prepared.fence.fenced,
                text: prepared.fence.text.clone(),
            }));
            for line in &prepared.fence.warnings {
                warn(line.clone());
            }
        }
        let proc = match process::spawn_fenced(
            &inv,
            place.pinned.fd(),
            env,
            &inner.cfg.agents_dir(),
            place.pinned.display(),
            &inner.watcher,
            prepared.fence.prepared.as_ref(),
        )
        .await
        {
            Ok(p) => p,
            Err(e) => {
                result = Err((e.code(), e.to_string()));
                break;
            }
        };
        let ran = stream(
            adapter,
            proc,
            resume.is_some(),
            &events,
            &mut cancel,
            inner.cfg.grace,
            prepared.fence.fenced,
        )
        .await;
        if ran.state.stale_resume && !ran.cancelled && resume.is_some() {
            warn(format!(
                "the agent no longer knows session {}; starting a fresh conversation",
                resume.as_deref().unwrap_or_default()
            ));
            resume = None;
            continue;
        }
        result = Ok(ran);
        break;
    }
    // The agent's group is gone (the turn released it): its temporary directory goes.
    if let Some(tmp) = &prepared.fence.tmp
        && let Some(problem) = crate::run_fence::remove_tmp(tmp).await
    {
        warn(problem);
    }
    let fenced = prepared.fence.fenced;
    let fence_note = berth_core::api::FenceNote {
        fenced,
        text: prepared.fence.text.clone(),
    };
    let shown = place.pinned.display().to_owned();
    let finished = finish(place, prepared.sidecars, &task.task_id).await;
    let mut guarded = Vec::new();
    let (branch, mut changes, cleanup_error) = match finished {
        Ok((branch, changes, problems, kept, restored)) => {
            for p in &problems {
                tracing::warn!(task = %task.task_id, problem = %p, "cleanup after the agent");
                warn(p.clone());
            }
            if let Some(note) = kept_note(&kept) {
                warn(note);
            }
            guarded = restored;
            (branch, changes, problems.into_iter().next())
        }
        Err(stop) => (
            None,
            None,
            Some(match stop {
                Stop::Refused(r) => r.message,
                Stop::Failed(_, m) => m,
            }),
        ),
    };
    // What the agent wrote where the fence guards, put back: denials by the fence.
    let guard_denials: Vec<Denial> = guarded
        .iter()
        .map(|r| {
            let denial = Denial {
                tool: "write".to_owned(),
                target: format!("{shown}/{}", r.path),
                by: Some("fence".to_owned()),
            };
            let _ = events.send(ExecEvent::Agent(AgentEvent::Denied {
                tool: denial.tool.clone(),
                target: denial.target.clone(),
                message: Some(format!(
                    "the agent {} {}, which the fence guards; Berth put it back as it was",
                    match r.what {
                        "added" => "created",
                        "removed" => "removed",
                        "replaced" => "replaced",
                        _ => "changed",
                    },
                    r.path
                )),
                by: denial.by.clone(),
            }));
            denial
        })
        .collect();
    // The tree after the agent, the sidecars gone, still under the lock.
    if let Some((shadow, before, limits, path, identity)) = record {
        let task_id = task.task_id.clone();
        let summarized = blocking(move || -> Result<_, crate::changes::ChangesError> {
            let now = rustix::fs::statat(
                rustix::fs::CWD,
                &path,
                rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
            )
            .map_err(|e| crate::changes::ChangesError::Other(e.to_string()))?;
            if (crate::pin::dev_of(&now), now.st_ino) != identity {
                return Err(crate::changes::ChangesError::Other(
                    "the directory was replaced during the run".into(),
                ));
            }
            let after = shadow.snapshot(&limits)?;
            shadow.record(&task_id, &before, &after, &limits)
        })
        .await;
        match summarized {
            Ok(Ok(c)) => changes = Some(c),
            Ok(Err(e)) => warn(format!(
                "what the agent changed could not be summarized: {e}"
            )),
            Err(_) => {}
        }
    }
    let mut out = match result {
        Err((code, msg)) => TaskOutcome::failed(code, msg),
        Ok(ran) => ran_outcome(adapter, &task.agent.name, ran, resume),
    };
    if !guard_denials.is_empty() {
        out.denials.extend(guard_denials);
        if out.status == TaskStatus::Succeeded {
            // Part of what the agent did was undone: not a clean success.
            out.status = TaskStatus::Failed;
            out.code = Some(ErrorCode::PermissionDenied);
            out.error = Some(format!(
                "the agent wrote {} the fence guards (.git/hooks, .git/config, .berth); Berth put {} back",
                if guarded.len() == 1 {
                    "a path"
                } else {
                    "paths"
                },
                if guarded.len() == 1 { "it" } else { "them" },
            ));
        }
    }
    out.work_dir = Some(work_dir);
    out.branch = branch;
    if let Some(c) = &mut changes {
        c.fenced = fenced;
    }
    out.fence = Some(fence_note);
    out.changes = changes;
    if let (Some(e), None) = (cleanup_error, &out.error) {
        out.error = Some(e);
    }
    out
}

/// The line that tells what cleanup left in a folder Berth installed because the
/// agent wrote it (the change summary lists those files too, unless ignored).
fn kept_note(kept: &[String]) -> Option<String> {
    const SHOWN: usize = 10;
    if kept.is_empty() {
        return None;
    }
    let mut list = kept[..kept.len().min(SHOWN)].join(", ");
    if kept.len() > SHOWN {
        list.push_str(&format!(" and {} more", kept.len() - SHOWN));
    }
    Some(format!(
        "kept {list}: not Berth's (written during the run inside a skill folder Berth installed); Berth removed only its own files"
    ))
}

/// How a turn that ran ended: its status, stable code, error, and denials.
///
/// A turn in which the agent's permission system denied actions and nothing that
/// could change files went through is `permission_denied`, whatever the agent said:
/// it must not look like a clean success.
fn ran_outcome(adapter: Adapter, agent: &str, ran: Ran, resume: Option<String>) -> TaskOutcome {
    let ok = adapter.succeeded(&ran.state, ran.exit_code);
    let (status, code, error) = if ran.cancelled {
        (TaskStatus::Cancelled, None, None)
    } else if ran.state.all_denied() && adapter != Adapter::Command {
        // A command agent has no permission system: what the fence refused it is
        // listed, and its exit code says how the turn went.
        let what: Vec<String> = ran
            .state
            .denials
            .iter()
            .take(3)
            .map(|d| format!("{} {}", d.tool, d.target).trim_end().to_owned())
            .collect();
        let more = ran.state.denials.len().saturating_sub(what.len());
        let more = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        (
            TaskStatus::Failed,
            Some(ErrorCode::PermissionDenied),
            Some(format!(
                "the agent {agent:?} was denied {}{more}, and nothing it tried to change went through",
                what.join(", ")
            )),
        )
    } else if ok {
        (TaskStatus::Succeeded, None, None)
    } else {
        let code = if ran.state.error.is_some() || ran.state.ok == Some(false) {
            ErrorCode::AgentError
        } else {
            ErrorCode::AgentExited
        };
        let error = ran
            .state
            .error
            .clone()
            .unwrap_or_else(|| match ran.exit_code {
                Some(c) => format!("the agent exited with code {c}"),
                None => "the agent was killed by a signal".to_owned(),
            });
        (TaskStatus::Failed, Some(code), Some(error))
    };
    TaskOutcome {
        status,
        exit_code: ran.exit_code,
        error,
        code,
        work_dir: None,
        work_dir_display: None,
        resume_id: ran.state.resume_id.or(resume),
        branch: None,
        denials: ran.state.denials,
        changes: None,
        fence: None,
    }
}

/// Cleans up after the agent: re-checks the pin (a swap is reported, and cleanup goes
/// through the descriptor, so it touches only the directory Berth wrote in), undoes
/// the sidecars, commits a worktree turn. Returns the branch and any problems.
/// What [`finish`] leaves: the worktree's branch and its turn's changes, problems, what
/// cleanup kept because Berth did not write it (relative paths), and the guarded paths
/// it put back.
type Finished = (
    Option<String>,
    Option<berth_core::api::Changes>,
    Vec<String>,
    Vec<String>,
    Vec<crate::sidecar::guard::Restored>,
);

async fn finish(place: Place, sidecars: Sidecars, task_id: &str) -> Result<Finished, Stop> {
    // Nothing written to undo and no turn to commit: one `stat` (the recheck, which the
    // run also does on this thread before it starts), not worth a hand-off to a
    // blocking thread and back on the way to the task's end.
    if sidecars.is_empty() && place.worktree.is_none() {
        return Ok(wrap_up(place, sidecars, task_id));
    }
    let task_id = task_id.to_owned();
    blocking(move || wrap_up(place, sidecars, &task_id)).await
}

/// What [`finish`] does: checks the directory is still the one pinned, undoes the
/// sidecars, commits a worktree's turn.
fn wrap_up(place: Place, sidecars: Sidecars, task_id: &str) -> Finished {
    let mut problems = Vec::new();
    if let Err(r) = place.pinned.recheck() {
        problems.push(r.message);
    }
    let (undone, cleaned) = sidecars.cleanup(&place.pinned);
    if let Err(e) = cleaned {
        problems.push(e.to_string());
    }
    let (kept, guarded) = (undone.kept, undone.guarded);
    let mut changes = None;
    let branch = place.worktree.as_ref().map(|wt| {
        match worktree::commit_turn(wt, task_id) {
            Ok(Some(commit)) => match worktree::commit_changes(wt, &commit) {
                Ok(c) => changes = Some(c),
                Err(e) => problems.push(format!("cannot summarize the turn's commit: {e}")),
            },
            Ok(None) => changes = Some(berth_core::api::Changes::default()),
            Err(e) => {
                problems.push(format!("cannot commit the turn on {}: {e}", wt.branch));
            }
        }
        wt.branch.clone()
    });
    (branch, changes, problems, kept, guarded)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapter::TurnState;

    fn replay(adapter: Adapter, stdout: &str) -> TurnState {
        let mut st = TurnState::default();
        for l in stdout.lines() {
            adapter.stdout_line(l, false, &mut st);
        }
        st
    }

    #[test]
    fn a_turn_whose_every_write_was_denied_fails_with_permission_denied() {
        let state = replay(
            Adapter::Claude,
            include_str!("../tests/fixtures/real/claude-write-denied.jsonl"),
        );
        let ran = Ran {
            state,
            exit_code: Some(0),
            cancelled: false,
        };
        let out = ran_outcome(Adapter::Claude, "claude", ran, None);
        assert_eq!(
            (out.status, out.code, out.error.as_deref()),
            (
                TaskStatus::Failed,
                Some(ErrorCode::PermissionDenied),
                Some(
                    "the agent \"claude\" was denied Write /home/alice/code/app/hello.txt, and nothing it tried to change went through"
                )
            )
        );
        assert_eq!(out.denials.len(), 1);
    }

    #[test]
    fn failures_carry_their_codes() {
        let ran = |state: TurnState, exit_code| Ran {
            state,
            exit_code,
            cancelled: false,
        };
        let ok = replay(
            Adapter::Claude,
            include_str!("../tests/fixtures/real/claude-write-ok.jsonl"),
        );
        let out = ran_outcome(Adapter::Claude, "c", ran(ok, Some(0)), None);
        assert_eq!((out.status, out.code), (TaskStatus::Succeeded, None));
        let out = ran_outcome(
            Adapter::Command,
            "c",
            ran(TurnState::default(), Some(2)),
            None,
        );
        assert_eq!(
            (out.status, out.code, out.error.as_deref()),
            (
                TaskStatus::Failed,
                Some(ErrorCode::AgentExited),
                Some("the agent exited with code 2")
            )
        );
        let failed = TurnState {
            ok: Some(false),
            error: Some("API Error: 529".into()),
            ..TurnState::default()
        };
        let out = ran_outcome(Adapter::Claude, "c", ran(failed, Some(1)), None);
        assert_eq!(out.code, Some(ErrorCode::AgentError));
    }
}
