//! The run itself: placed and prepared (on a blocking thread unless it is a scratch
//! session's, waiting for the directory's lock if another run holds it), the agent started in its fence and its
//! turn streamed, then everything undone and summarized into the task's outcome.

use super::finish::{finish, kept_note};
use super::outcome::{outcome, ran_outcome, stopped};
use super::place::place;
use super::prepare::under_lock;
use super::state::{Inner, Locked, Place, Prepared, Staged, Stop, blocking, warn};
use crate::agent::adapter::cut;
use crate::agent::adapter::{Adapter, Turn};
use crate::agent::process::{self, MAX_ENV_BRIEF};
use crate::agent::turn::{Ran, stream};
use crate::dir::lock::LockError;
use berth_core::ErrorCode;
use berth_core::api::{Denial, TaskStatus};
use berth_core::event::AgentEvent;
use berth_core::exec::{ExecEvent, Placement, TaskOutcome, TaskSpec};
use berth_core::settings::trust::Trust;
use std::sync::Arc;
use tokio::sync::{mpsc, watch};

pub(super) async fn run(
    inner: Arc<Inner>,
    task: TaskSpec,
    events: mpsc::UnboundedSender<ExecEvent>,
    mut cancel: watch::Receiver<bool>,
) -> TaskOutcome {
    let task = Arc::new(task);
    // 1 and 2: placed, locked, prepared.
    let Locked {
        place,
        lock: _lock,
        record,
        mut prepared,
    } = *match acquire(&inner, &task, &events, &mut cancel).await {
        Ok(locked) => locked,
        Err(out) => return out,
    };
    let adapter = Adapter::for_kind(task.agent.kind);
    announce(&task, adapter, &prepared, &events);
    if let Err(r) = place.pinned.recheck() {
        // Swapped while the sidecars were written: undo them through the descriptor.
        let _ = finish(place, prepared.sidecars, &task.task_id).await;
        return TaskOutcome::refused(&r);
    }
    if *cancel.borrow() {
        let _ = finish(place, prepared.sidecars, &task.task_id).await;
        return outcome(TaskStatus::Cancelled, None);
    }
    // 3: the agent's turn.
    let (result, resume) = execute(
        &inner,
        &task,
        adapter,
        &place,
        &mut prepared,
        &events,
        &mut cancel,
    )
    .await;
    // 4: the directory restored, what changed recorded, the outcome.
    let settled = settle(&inner, &task, place, prepared, record, &events).await;
    let out = match result {
        Err((code, msg)) => TaskOutcome::failed(code, msg),
        Ok(ran) => ran_outcome(adapter, &task.agent.name, ran, resume),
    };
    conclude(out, settled, &events)
}

/// Stages 1 and 2: the task placed ([`place`]), its directory locked, and what runs
/// under the lock ([`under_lock`]). `Err` is the task's outcome when it ends here.
///
/// Everything before the agent starts, in one go while the directory is free (the
/// usual case). A directory in use is waited for here, and the rest runs after. In a
/// bound directory or a worktree that work can be long (the change record's snapshot,
/// git): it goes to a blocking thread. A scratch session's is short and bounded (its
/// own directory, the settings, the fence: a few hundred microseconds): it runs here,
/// without the two hand-offs between threads, which cost about as much again.
async fn acquire(
    inner: &Arc<Inner>,
    task: &Arc<TaskSpec>,
    events: &mpsc::UnboundedSender<ExecEvent>,
    cancel: &mut watch::Receiver<bool>,
) -> Result<Box<Locked>, TaskOutcome> {
    let staged = {
        let (inner, task, events) = (inner.clone(), task.clone(), events.clone());
        let scratch = matches!(task.placement, Placement::Scratch);
        let stage = move || -> Result<Staged, Stop> {
            // The user settings, read once for the whole run.
            let user = crate::settings::UserLayer::read(&inner.ctx, &inner.cfg.config_dir);
            if matches!(task.placement, Placement::Worktree { .. })
                && let Some(r) = crate::run::fence::refused_early(&user)
            {
                warn(&events, format!("hint: {}", r.hint));
                return Err(Stop::Refused(r));
            }
            let place = place(&inner, &task)?;
            match inner
                .locks
                .try_acquire(place.pinned.canonical(), task.task_id.as_str())
            {
                Ok(Some(lock)) => Ok(Staged::Locked(under_lock(
                    &inner, &task, place, lock, user, &events,
                )?)),
                Ok(None) => Ok(Staged::Placed(Box::new((place, user)))),
                Err(e) => Err(Stop::Failed(ErrorCode::LockFailed, e.to_string())),
            }
        };
        if scratch {
            Ok(stage())
        } else {
            blocking(stage).await
        }
    };
    match staged.and_then(|r| r) {
        Err(stop) => Err(stopped(stop)),
        Ok(Staged::Locked(locked)) => Ok(locked),
        Ok(Staged::Placed(placed)) => {
            let (place, user) = *placed;
            let acquiring = inner.locks.acquire(
                place.pinned.canonical(),
                task.task_id.as_str(),
                |reason| {
                    let _ = events.send(ExecEvent::Status {
                        status: TaskStatus::WaitingLock,
                        wait_reason: Some(reason),
                    });
                },
                cancel,
            );
            // The holder may be the directory's first snapshot: how far it is, said.
            let lock = with_progress(
                acquiring,
                place.pinned.path(),
                place.pinned.display(),
                events,
            )
            .await;
            let lock = match lock {
                Ok(l) => l,
                Err(LockError::Cancelled) => return Err(outcome(TaskStatus::Cancelled, None)),
                Err(e) => return Err(TaskOutcome::failed(ErrorCode::LockFailed, e.to_string())),
            };
            let (inner, task, events) = (inner.clone(), task.clone(), events.clone());
            let locked =
                blocking(move || under_lock(&inner, &task, place, lock, user, &events)).await;
            locked.and_then(|r| r).map_err(stopped)
        }
    }
}

/// What the preparation found that the transcript must say before the agent starts:
/// its warnings, the project settings it ignored, permissions narrowed or widened,
/// and what no policy enforces.
fn announce(
    task: &TaskSpec,
    adapter: Adapter,
    prepared: &Prepared,
    events: &mpsc::UnboundedSender<ExecEvent>,
) {
    let warn = |line: String| warn(events, line);
    for w in &prepared.warnings {
        warn(format!("warning: {w}"));
    }
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
    if let Some(note) = adapter.unenforced(
        &task.agent,
        prepared.policy.effective,
        prepared.fence.fenced,
    ) {
        warn(note);
    }
}

/// Stage 3: the agent started in its fence and its turn streamed; started afresh once
/// when it no longer knows the session it was asked to resume. Returns the turn, and
/// the resume id it ended with.
async fn execute(
    inner: &Inner,
    task: &TaskSpec,
    adapter: Adapter,
    place: &Place,
    prepared: &mut Prepared,
    events: &mpsc::UnboundedSender<ExecEvent>,
    cancel: &mut watch::Receiver<bool>,
) -> (Result<Ran, (ErrorCode, String)>, Option<String>) {
    let warn = |line: String| warn(events, line);
    let mut resume = task.resume_id.clone();
    let mut result: Result<Ran, (ErrorCode, String)> = Err((
        ErrorCode::AgentStartFailed,
        "the agent did not start".to_owned(),
    ));
    // One asker for the run: its requests are numbered across a fresh start.
    let asker = crate::agent::ask::Asker::new(
        task.task_id.clone(),
        prepared.ask.clone(),
        inner.waiting.clone(),
        events.clone(),
    );
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
            ("BERTH_SESSION_ID", task.session.id.to_string()),
            ("BERTH_TASK_ID", task.task_id.to_string()),
            (
                "BERTH_WORK_DIR",
                place.pinned.canonical().as_str().to_owned(),
            ),
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
        // Where the kernel reports the fence's denials itself, they are read from it.
        #[cfg(target_os = "linux")]
        let audit = prepared
            .fence
            .prepared
            .as_mut()
            .and_then(crate::agent::fence::listen_for_denials);
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
        #[cfg(target_os = "linux")]
        let agent_pid = proc.pgid();
        let ran = if adapter == Adapter::Acp {
            let ctx = crate::agent::acp::TurnCtx {
                turn,
                dir: place.pinned.fd(),
                asker: Some(&asker),
            };
            crate::agent::acp::drive(proc, &ctx, events, cancel, inner.cfg.grace).await
        } else {
            // Claude Code under `ask` puts its permission prompts to Berth.
            let asking = (adapter == Adapter::Claude && inv.stdin_pipe).then_some(
                crate::agent::turn::Asking {
                    asker: &asker,
                    prompt: &task.prompt,
                    work_dir: place.pinned.path(),
                },
            );
            stream(
                adapter,
                proc,
                resume.is_some(),
                events,
                cancel,
                inner.cfg.grace,
                prepared.fence.fenced,
                asking,
            )
            .await
        };
        #[cfg(target_os = "linux")]
        let mut ran = ran;
        #[cfg(target_os = "linux")]
        if let (Some(listener), Some(pid)) = (audit, agent_pid) {
            let denied = blocking(move || listener.finish(pid))
                .await
                .unwrap_or_default();
            let denied = denied.into_iter().map(|d| (d.blockers, d.target)).collect();
            for ev in ran.state.audited_denials(denied) {
                let _ = events.send(ExecEvent::Agent(ev));
            }
        }
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
    (result, resume)
}

/// What stage 4 leaves for the outcome.
struct Settled {
    branch: Option<String>,
    changes: Option<berth_core::api::Changes>,
    diff: Option<berth_core::patch::TaskDiff>,
    cleanup_error: Option<String>,
    /// What the agent wrote where the fence guards, put back.
    guarded: Vec<crate::inject::sidecar::guard::Restored>,
    fence: berth_core::api::FenceNote,
    /// The directory as shown, and as the task's `work_dir` (canonical).
    shown: String,
    work_dir: String,
}

/// Stage 4: the agent's temporary directory, the directory restored ([`finish`]), and
/// the tree after the agent recorded and its repositories' control files checked,
/// still under the lock.
async fn settle(
    inner: &Inner,
    task: &TaskSpec,
    place: Place,
    mut prepared: Prepared,
    record: Option<super::state::Record>,
    events: &mpsc::UnboundedSender<ExecEvent>,
) -> Settled {
    let warn = |line: String| warn(events, line);
    // The agent's group is gone (the turn released it): its temporary directory goes,
    // or stays for the session's next run if the agent left it empty.
    if let Some(problem) = prepared.fence.end(&inner.tmps).await {
        warn(problem);
    }
    let fenced = prepared.fence.fenced;
    let fence_note = berth_core::api::FenceNote {
        fenced,
        text: prepared.fence.text.clone(),
    };
    let shown = place.pinned.display().to_owned();
    let work_dir = place.pinned.canonical().as_str().to_owned();
    let prepared_repos = prepared.repos.take();
    let finished = finish(place, prepared.sidecars, &task.task_id).await;
    let mut guarded = Vec::new();
    let mut diff = None;
    let (branch, mut changes, cleanup_error) = match finished {
        Ok((branch, (changes, lines), problems, kept, restored)) => {
            diff = lines;
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
    // The tree after the agent, the sidecars gone, still under the lock; then the
    // control files of every repository the change record knows now (a nested one
    // the agent made included), put back where they would make git run a program.
    let repos_before = prepared_repos;
    if let Some((shadow, before, limits, path, identity)) = record {
        let task_id = task.task_id.clone();
        let summarized = blocking(move || {
            let dir = match open_pinned(&path, identity) {
                Ok(dir) => dir,
                Err(e) => return (Err(e), Vec::new(), Vec::new()),
            };
            let after = match shadow.snapshot(&limits) {
                Ok(after) => after,
                Err(e) => return (Err(e), Vec::new(), Vec::new()),
            };
            let (put, problems) = match &repos_before {
                Some(controls) => crate::inject::sidecar::guard::repos::check(
                    std::os::fd::AsFd::as_fd(&dir),
                    &path.to_string_lossy(),
                    controls,
                    &after.nested,
                ),
                None => (Vec::new(), Vec::new()),
            };
            let recorded = shadow.record(&task_id, &before, &after, &limits);
            // The lines too, for every view of the task (`berth_core::patch`).
            let recorded = recorded.map(|c| {
                let lines = (!c.files.is_empty())
                    .then(|| shadow.patch(&before.tree, &after.tree))
                    .and_then(|p| {
                        p.map_err(|e| tracing::warn!(task = %task_id, error = %e, "the task's lines could not be read"))
                            .ok()
                    });
                (c, lines)
            });
            (recorded, put, problems)
        })
        .await;
        if let Ok((recorded, put, problems)) = summarized {
            {
                match recorded {
                    Ok((c, lines)) => {
                        changes = Some(c);
                        diff = lines;
                    }
                    Err(e) => warn(format!(
                        "what the agent changed could not be summarized: {e}"
                    )),
                }
                for r in put {
                    if !guarded
                        .iter()
                        .any(|g: &crate::inject::sidecar::guard::Restored| g.path == r.path)
                    {
                        guarded.push(r);
                    }
                }
                for p in problems {
                    warn(format!("the fence's guard: {p}"));
                }
            }
        }
    }
    if let Some(c) = &mut changes {
        c.fenced = fenced;
    }
    Settled {
        branch,
        changes,
        diff,
        cleanup_error,
        guarded,
        fence: fence_note,
        shown,
        work_dir,
    }
}

/// The task's outcome from the turn's and what stage 4 found: the guard's put-backs
/// are denials by the fence, and a success they undid part of is not one.
fn conclude(
    mut out: TaskOutcome,
    settled: Settled,
    events: &mpsc::UnboundedSender<ExecEvent>,
) -> TaskOutcome {
    let guarded = &settled.guarded;
    let shown = &settled.shown;
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
                    "the agent {} {}{}, which the fence guards; Berth put it back as it was",
                    match r.what {
                        "added" => "created",
                        "removed" => "removed",
                        "replaced" => "replaced",
                        _ => "changed",
                    },
                    r.path,
                    r.why
                        .as_deref()
                        .map(|w| format!(" (it {w})"))
                        .unwrap_or_default(),
                )),
                by: denial.by.clone(),
            }));
            denial
        })
        .collect();
    if !guard_denials.is_empty() {
        out.denials.extend(guard_denials);
        if out.status == TaskStatus::Succeeded {
            // Part of what the agent did was undone: not a clean success.
            out.status = TaskStatus::Failed;
            out.code = Some(ErrorCode::PermissionDenied);
            out.error = Some(format!(
                "the agent wrote {} the fence guards (a repository's hooks or configuration, .berth); Berth put {} back",
                if guarded.len() == 1 {
                    "a path"
                } else {
                    "paths"
                },
                if guarded.len() == 1 { "it" } else { "them" },
            ));
        }
    }
    out.work_dir = Some(settled.work_dir);
    out.branch = settled.branch;
    out.fence = Some(settled.fence);
    out.changes = settled.changes;
    out.diff = settled.diff;
    if let (Some(e), None) = (settled.cleanup_error, &out.error) {
        out.error = Some(e);
    }
    out
}

/// Awaits `fut`, saying meanwhile how far a snapshot of `dir` (`display` as shown)
/// taken by someone else is, after [`progress::FIRST_AFTER`] and then every
/// [`progress::EVERY`].
async fn with_progress<T>(
    fut: impl std::future::Future<Output = T>,
    dir: &std::path::Path,
    display: &str,
    events: &mpsc::UnboundedSender<ExecEvent>,
) -> T {
    use crate::changes::progress;
    tokio::pin!(fut);
    let mut next = tokio::time::Instant::now() + progress::FIRST_AFTER;
    loop {
        tokio::select! {
            out = &mut fut => return out,
            () = tokio::time::sleep_until(next) => {
                if let Some(r) = progress::of(dir) {
                    let _ = events.send(ExecEvent::Agent(AgentEvent::Progress {
                        text: r.text(display),
                        done: r.done,
                        total: r.total,
                    }));
                }
                next += progress::EVERY;
            }
        }
    }
}

/// The directory at `path` opened again for the guard's check after the run, never
/// through a link, and only if it is still the one pinned (`identity`).
fn open_pinned(
    path: &std::path::Path,
    identity: (u64, u64),
) -> Result<std::os::fd::OwnedFd, crate::changes::ChangesError> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(crate::changes::ChangesError::Unreadable)?;
    let st = rustix::fs::fstat(&fd).map_err(crate::changes::ChangesError::Unreadable)?;
    if (crate::dir::pin::dev_of(&st), st.st_ino) != identity {
        return Err(crate::changes::ChangesError::Replaced);
    }
    Ok(fd)
}
