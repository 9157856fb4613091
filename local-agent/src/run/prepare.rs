//! What runs before the agent, under the directory's lock: the recheck, the change
//! record's first snapshot (in place), the settings and their trust, the fence, then
//! the brief and the sidecars (journaled) and the guard's snapshot.

use super::state::{Inner, Locked, Place, Prepared, Stop, warn};
use crate::agent::adapter::Adapter;
use crate::dir::lock::DirLock;
use crate::inject::brief::{self, WorkMode};
use crate::inject::sidecar::Sidecars;
use crate::settings;
use berth_core::event::AgentEvent;
use berth_core::exec::{ExecEvent, TaskSpec};
use berth_core::policy::Policy;
use berth_core::{ErrorCode, Permissions};
use tokio::sync::mpsc;

/// `nested`: the nested repositories the change record knows, for the guard.
fn prepare(
    inner: &Inner,
    task: &TaskSpec,
    place: &Place,
    user: settings::UserLayer,
    nested: &[String],
) -> Result<Prepared, Stop> {
    let trust = crate::settings::trust::TrustStore::new(&inner.cfg.berth_home);
    let mut loaded = settings::load_with(&inner.ctx, user, place.bound.as_ref(), &trust)
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
    let fence = crate::run::fence::for_run(
        &crate::run::fence::FenceRun {
            ctx: &inner.ctx,
            settings: &settings.fence,
            places: crate::run::fence::Places {
                berth_home: &inner.cfg.berth_home,
                lock_dir: &inner.cfg.lock_dir,
                config_dir: &inner.cfg.config_dir,
                user_home: inner.cfg.user_home.as_deref(),
                tmps: &inner.tmps,
                kept: Some((&inner.fences, &task.session.id)),
            },
            run: crate::run::fence::RunPlace {
                dir: place.pinned.canonical(),
                worktree_root: place.worktree.as_ref().map(|w| w.root.as_path()),
            },
            adapter,
            permissions: policy.effective,
        },
        &task.task_id,
        |name| {
            settings
                .env
                .get(name)
                .map(Into::into)
                .or_else(|| std::env::var_os(name))
        },
    )
    .map_err(|stop| match stop {
        crate::run::fence::FenceStop::Refused(r) => Stop::Refused(r),
        crate::run::fence::FenceStop::Failed(m) => Stop::Failed(ErrorCode::PrepareFailed, m),
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
        let mut repos = None;
        if fence.fenced
            && policy.effective != Permissions::ReadOnly
            && place.mode != WorkMode::Scratch
        {
            match sidecars.guard(&place.pinned, &inner.cfg.berth_home.join("guard"), nested) {
                Ok(controls) => repos = Some(controls),
                Err(crate::inject::sidecar::SidecarError::Guard(e)) => warnings.push(format!(
                    "the fence cannot guard the directory's git control files and .berth in this run ({e}); the agent may change them"
                )),
                Err(e) => return Err(e),
            }
        }
        Ok::<_, crate::inject::sidecar::SidecarError>((brief_arg, brief.text, repos))
    })();
    match result {
        Ok((brief_arg, brief_text, repos)) => Ok(Prepared {
            repos,
            sidecars,
            brief_arg,
            brief_text,
            env: settings.env,
            ask: settings.ask,
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

/// What runs under the directory's lock before the agent starts (blocking): the
/// recheck that it is still the directory pinned, the change record's first snapshot
/// (in place; a worktree's changes are its turn's commit), before the sidecars; then
/// the preparation.
pub(super) fn under_lock(
    inner: &Inner,
    task: &TaskSpec,
    place: Place,
    lock: DirLock,
    user: settings::UserLayer,
    events: &mpsc::UnboundedSender<ExecEvent>,
) -> Result<Box<Locked>, Stop> {
    place.pinned.recheck().map_err(Stop::Refused)?;
    let record = if place.mode == WorkMode::InPlace {
        let limits = user
            .snapshots()
            .map_or_else(crate::changes::Limits::default, |s| {
                crate::changes::Limits::from_settings(&s)
            });
        let (path, identity) = (place.pinned.path().to_owned(), place.pinned.identity());
        let display = place.pinned.display().to_owned();
        let progress_events = events.clone();
        // A first snapshot of a large directory takes a while: it is said, and how far.
        let started = crate::changes::progress::reported(
            &path,
            |r| {
                let _ = progress_events.send(ExecEvent::Agent(AgentEvent::Progress {
                    text: r.text(&display),
                    done: r.done,
                    total: r.total,
                }));
            },
            || -> Result<_, crate::changes::ChangesError> {
                let shadow = crate::changes::Shadow::open(&inner.cfg.berth_home, &path, identity)?;
                let before = shadow.snapshot_before(&limits)?;
                Ok((shadow, before))
            },
        );
        match started {
            Ok((shadow, before)) => {
                // Said once per directory: the snapshots are exact, only slower.
                #[cfg(target_os = "linux")]
                if let Some(notice) = crate::changes::watch::notice(shadow.git_dir()) {
                    warn(
                        events,
                        format!("warning: {}: {notice}", place.pinned.display()),
                    );
                    warn(
                        events,
                        "hint: raise the limit, e.g. sudo sysctl fs.inotify.max_user_watches=524288"
                            .to_owned(),
                    );
                }
                Some((shadow, before, limits, path, identity))
            }
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
    let nested = record.as_ref().map_or(&[][..], |r| r.1.nested.as_slice());
    let prepared = prepare(inner, task, &place, user, nested).inspect_err(|stop| {
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
