//! The run itself: placed and prepared (on a blocking thread unless it is a scratch
//! session's, waiting for the directory's lock if another run holds it), the agent started in its fence and its
//! turn streamed, then everything undone and summarized into the task's outcome.

use super::finish::{finish, kept_note};
use super::outcome::{outcome, ran_outcome, stopped};
use super::place::place;
use super::prepare::under_lock;
use super::state::{Inner, Locked, Staged, Stop, blocking, warn};
use crate::agent::adapter::cut;
use crate::agent::adapter::{Adapter, Turn};
use crate::agent::process::{self, MAX_ENV_BRIEF};
use crate::agent::turn::{Ran, stream};
use crate::dir::lock::LockError;
use berth_core::ErrorCode;
use berth_core::api::{Denial, TaskStatus};
use berth_core::event::AgentEvent;
use berth_core::settings::trust::Trust;
use berth_web::executor::{ExecEvent, Placement, TaskOutcome, TaskSpec};
use std::sync::Arc;
use tokio::sync::{mpsc, watch};

pub(super) async fn run(
    inner: Arc<Inner>,
    task: TaskSpec,
    events: mpsc::UnboundedSender<ExecEvent>,
    mut cancel: watch::Receiver<bool>,
) -> TaskOutcome {
    let task = Arc::new(task);
    let warn = |line: String| warn(&events, line);
    // Everything before the agent starts, in one go while the directory is free (the
    // usual case): the placement, the lock, and what runs under it. A directory in use
    // is waited for here, and the rest runs after. In a bound directory or a worktree
    // that work can be long (the change record's snapshot, git): it goes to a blocking
    // thread. A scratch session's is short and bounded (its own directory, the
    // settings, the fence: a few hundred microseconds): it runs here, without the two
    // hand-offs between threads, which cost about as much again.
    let staged = {
        let (inner, task, events) = (inner.clone(), task.clone(), events.clone());
        let scratch = matches!(task.placement, Placement::Scratch);
        let stage = move || -> Result<Staged, Stop> {
            if matches!(task.placement, Placement::Worktree { .. })
                && let Some(r) = crate::run::fence::refused_early(&inner.ctx, &inner.cfg.config_dir)
            {
                self::warn(&events, format!("hint: {}", r.hint));
                return Err(Stop::Refused(r));
            }
            let place = place(&inner, &task)?;
            match inner
                .locks
                .try_acquire(place.pinned.canonical(), task.task_id.as_str())
            {
                Ok(Some(lock)) => Ok(Staged::Locked(under_lock(
                    &inner, &task, place, lock, &events,
                )?)),
                Ok(None) => Ok(Staged::Placed(Box::new(place))),
                Err(e) => Err(Stop::Failed(ErrorCode::LockFailed, e.to_string())),
            }
        };
        if scratch {
            Ok(stage())
        } else {
            blocking(stage).await
        }
    };
    let locked = match staged.and_then(|r| r) {
        Err(stop) => return stopped(stop),
        Ok(Staged::Locked(locked)) => locked,
        Ok(Staged::Placed(place)) => {
            let acquiring = inner.locks.acquire(
                place.pinned.canonical(),
                task.task_id.as_str(),
                |reason| {
                    let _ = events.send(ExecEvent::Status {
                        status: TaskStatus::WaitingLock,
                        wait_reason: Some(reason),
                    });
                },
                &mut cancel,
            );
            // The holder may be the directory's first snapshot: how far it is, said.
            let lock = with_progress(
                acquiring,
                place.pinned.path(),
                place.pinned.display(),
                &events,
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
        mut prepared,
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
    if let Some(note) = adapter.unenforced(
        &task.agent,
        prepared.policy.effective,
        prepared.fence.fenced,
    ) {
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
            ("BERTH_SESSION_ID", task.session.id.to_string()),
            ("BERTH_TASK_ID", task.task_id.to_string()),
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
            };
            crate::agent::acp::drive(proc, &ctx, &events, &mut cancel, inner.cfg.grace).await
        } else {
            stream(
                adapter,
                proc,
                resume.is_some(),
                &events,
                &mut cancel,
                inner.cfg.grace,
                prepared.fence.fenced,
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
    let prepared_repos = prepared.repos.take();
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
            (
                shadow.record(&task_id, &before, &after, &limits),
                put,
                problems,
            )
        })
        .await;
        if let Ok((recorded, put, problems)) = summarized {
            {
                match recorded {
                    Ok(c) => changes = Some(c),
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
