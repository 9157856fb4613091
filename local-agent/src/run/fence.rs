//! The fence of one run: what the executor decides before the agent starts.
//!
//! From the settings' `fence` (mode, network, extra paths), the run's directory, the
//! agent kind's own state ([`Adapter::fence_state`]) and Berth's own places, this
//! builds core's [`FencePolicy`] and the kernel objects of [`crate::agent::fence::prepare`]
//! (blocking file I/O, short and bounded: called from the executor's preparation, on a
//! blocking thread or, for a scratch session, on the worker). It also gives the task its own temporary directory
//! (`$BERTH_HOME/tmp/<name>`, 0700, from [`crate::run::tmp::Tmps`]), which the agent
//! gets as `TMPDIR`, `TMP` and `TEMP`, and which goes after the run, unless the agent
//! left it empty: then the session keeps it and the fence built on it for its next
//! run ([`SessionFences`]).
//!
//! Modes (docs/fence.md, "Modes"):
//!
//! - `auto` (the default): fenced where the kernel can; elsewhere unfenced, and the
//!   transcript's `fence` event says so (`unfenced: …`);
//! - `required`: where the kernel cannot fence, the task is refused with
//!   `fence_unavailable` before anything is written into the directory;
//! - `off` (the user layer's alone): unfenced, and the `fence` event says so.

use crate::agent::adapter::Adapter;
use crate::agent::fence::{self, FenceError};
use berth_core::SessionId;
use berth_core::fence::{FenceInputs, FenceMode, FencePolicy, Network, ReadScope, WriteKind};
use berth_core::settings::FenceSettings;
use berth_core::{Context, ErrorCode, LocalPath, Permissions, Platform, Refusal, TaskId};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

/// What the run gets from the fence.
#[derive(Debug, Default)]
pub(crate) struct RunFence {
    /// The fence to apply in the agent's spawn; `None` runs it unfenced.
    pub prepared: Option<fence::Prepared>,
    /// The task's own temporary directory (only when fenced).
    pub tmp: Option<PathBuf>,
    /// Whether the run is fenced, and in what or why not: the transcript's `fence`
    /// event.
    pub fenced: bool,
    pub text: String,
    /// Warnings for the transcript (paths of the settings the fence could not use).
    pub warnings: Vec<String>,
    /// The session's hold on its kept temporary directory and fence: `tmp` is that
    /// directory, given back (or let go) by [`RunFence::end`].
    pub lease: Option<Lease>,
}

/// Why the fence stopped the run.
#[derive(Debug)]
pub(crate) enum FenceStop {
    /// `"fence": "required"` on a machine without one.
    Refused(Refusal),
    /// The fence could not be built (a path it needs, a kernel refusal).
    Failed(String),
}

/// Where the run happens, for its fence.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RunPlace<'a> {
    /// The run's directory: the bound directory in place, the worktree's, scratch.
    pub dir: &'a LocalPath,
    /// The worktree's top directory, in worktree mode: git's files in the main
    /// repository that committing there needs become writable.
    pub worktree_root: Option<&'a Path>,
}

/// What the fence of one run is made from: the settings' `fence`, Berth's places,
/// where the run happens, the agent's kind and its permissions.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FenceRun<'a> {
    pub ctx: &'a Context,
    pub settings: &'a FenceSettings,
    pub places: Places<'a>,
    pub run: RunPlace<'a>,
    pub adapter: Adapter,
    pub permissions: Permissions,
}

/// Berth's own places, for the fence.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Places<'a> {
    pub berth_home: &'a Path,
    pub lock_dir: &'a Path,
    pub config_dir: &'a Path,
    pub user_home: Option<&'a Path>,
    /// The tasks' temporary directories ([`crate::run::tmp`]).
    pub tmps: &'a Arc<crate::run::tmp::Tmps>,
    /// What the sessions' last runs leave for their next ([`SessionFences`]), and the
    /// run's session; `None` builds everything for this run alone.
    pub kept: Option<(&'a Arc<SessionFences>, &'a SessionId)>,
}

/// How many sessions keep their temporary directory and fence between runs; the one
/// that ran least recently lets go first.
const KEPT: usize = 32;

/// What a session's runs hand on to its next (Linux, where building a fence is a
/// hundred and more system calls): its temporary directory, kept while the agent
/// leaves it empty, and the fence's kernel objects, reused while the run's inputs are
/// the same and nothing they were built on changed ([`fence::Prepared::reuse`]).
///
/// A kept directory is the session's alone, empty at the start of each of its runs
/// (one that is not is let go after the run, as every directory is without a
/// session); the fence's rule is on it, so a new directory would need a new fence.
#[derive(Debug, Default)]
pub(crate) struct SessionFences {
    slots: Mutex<Vec<Slot>>,
}

#[derive(Debug)]
struct Slot {
    session: SessionId,
    /// `None` while a run of the session holds it ([`Lease`]).
    kept: Option<Kept>,
    /// When the session last ran (a count).
    used: u64,
}

#[derive(Debug)]
struct Kept {
    tmp: PathBuf,
    fence: Option<(Built, fence::Prepared)>,
}

/// What a fence was built from: its inputs and the policy they make.
#[derive(Debug)]
pub(crate) struct Built {
    inputs: Inputs,
    policy: FencePolicy,
}

/// A run's hold on what its session kept ([`SessionFences`]): given back by
/// [`RunFence::end`], and let go (the directory removed) if the run never gets there.
#[derive(Debug)]
pub(crate) struct Lease {
    fences: Arc<SessionFences>,
    tmps: Arc<crate::run::tmp::Tmps>,
    session: SessionId,
    /// What the session kept, until the run takes it ([`Lease::kept`]).
    kept: Option<Kept>,
    /// The run's directory, once it has one.
    tmp: Option<PathBuf>,
    built: Option<Built>,
    given: bool,
}

impl SessionFences {
    /// What `session` kept, taken for one run: `Err(())` while another run of it holds
    /// it (never the case under the scheduler, which runs a session's tasks in turn),
    /// `Ok(None)` when nothing is kept.
    fn take(&self, session: &SessionId) -> Result<Option<Kept>, ()> {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        let now = slots.iter().map(|s| s.used).max().unwrap_or(0) + 1;
        if let Some(slot) = slots.iter_mut().find(|s| s.session == *session) {
            slot.used = now;
            return match slot.kept.take() {
                Some(kept) => Ok(Some(kept)),
                None => Err(()),
            };
        }
        slots.push(Slot {
            session: session.clone(),
            kept: None,
            used: now,
        });
        Ok(None)
    }

    /// Gives `kept` back to `session`'s slot (or forgets the session, `None`); lets go
    /// of the least recently used idle sessions beyond [`KEPT`]. Answers the
    /// directories let go, to remove.
    fn give_back(&self, session: &SessionId, kept: Option<Kept>) -> Vec<PathBuf> {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        let mut gone = Vec::new();
        match (slots.iter().position(|s| s.session == *session), kept) {
            (Some(i), Some(kept)) => slots[i].kept = Some(kept),
            (Some(i), None) => {
                slots.swap_remove(i);
            }
            (None, Some(kept)) => gone.push(kept.tmp),
            (None, None) => {}
        }
        while slots.len() > KEPT {
            let Some(i) = slots
                .iter()
                .enumerate()
                .filter(|(_, s)| s.kept.is_some())
                .min_by_key(|(_, s)| s.used)
                .map(|(i, _)| i)
            else {
                break;
            };
            if let Some(kept) = slots.swap_remove(i).kept {
                gone.push(kept.tmp);
            }
        }
        gone
    }
}

impl Lease {
    /// `session`'s hold on what it kept; `None` while another run of it holds it
    /// (never the case under the scheduler, which runs a session's tasks in turn):
    /// that run builds everything for itself alone.
    fn take(
        fences: &Arc<SessionFences>,
        tmps: &Arc<crate::run::tmp::Tmps>,
        session: &SessionId,
    ) -> Option<Lease> {
        let kept = fences.take(session).ok()?;
        Some(Lease {
            fences: fences.clone(),
            tmps: tmps.clone(),
            session: session.clone(),
            kept,
            tmp: None,
            built: None,
            given: false,
        })
    }

    /// The kept directory, while it is still one of Berth's (the agent cannot replace
    /// it: its rules are beneath it, not on it) and still empty (a process the last
    /// run's agent left behind, outside its group, could still write there), and the
    /// fence built on it.
    fn kept(&mut self) -> (Option<PathBuf>, Option<(Built, fence::Prepared)>) {
        match self.kept.take() {
            Some(k)
                if crate::run::tmp::is_own_dir(&k.tmp) && crate::run::tmp::is_empty_dir(&k.tmp) =>
            {
                (Some(k.tmp), k.fence)
            }
            Some(k) => {
                self.tmps.let_go(&k.tmp);
                (None, None)
            }
            None => (None, None),
        }
    }

    /// Gives the directory (if `keep`) and the fence back to the session.
    fn give_back(mut self, keep: bool, prepared: Option<fence::Prepared>) {
        self.given = true;
        let kept = match (keep, self.tmp.take()) {
            (true, Some(tmp)) => Some(Kept {
                tmp,
                fence: self.built.take().zip(prepared),
            }),
            _ => None,
        };
        for tmp in self.fences.give_back(&self.session, kept) {
            self.tmps.let_go(&tmp);
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if !self.given {
            for tmp in self.fences.give_back(&self.session, None) {
                self.tmps.let_go(&tmp);
            }
            let kept = self.kept.take().map(|k| k.tmp);
            for tmp in self.tmp.take().into_iter().chain(kept) {
                self.tmps.let_go(&tmp);
            }
        }
    }
}

impl RunFence {
    /// After the run, once its agent's group is gone: the session keeps its directory
    /// if the agent left it empty; otherwise (or without a session) the directory goes.
    /// A problem is returned as a line for the transcript.
    pub(crate) async fn end(&mut self, tmps: &Arc<crate::run::tmp::Tmps>) -> Option<String> {
        let tmp = self.tmp.take()?;
        let lease = self.lease.take();
        if let Some(lease) = lease {
            if crate::run::tmp::is_empty_dir(&tmp) {
                lease.give_back(true, self.prepared.take());
                return None;
            }
            lease.give_back(false, None);
        }
        tmps.release(&tmp).await
    }
}

/// A fence's inputs ([`FenceInputs`]), owned: what a kept fence was built from.
#[derive(Debug)]
struct Inputs {
    dir: LocalPath,
    permissions: Permissions,
    tmp: LocalPath,
    berth_home: LocalPath,
    lock_dir: LocalPath,
    home: Option<LocalPath>,
    state: Vec<(LocalPath, WriteKind)>,
    write: Vec<LocalPath>,
    read_deny: Vec<LocalPath>,
    read: ReadScope,
    read_allow: Vec<LocalPath>,
    network: Network,
}

impl Inputs {
    fn of(i: &FenceInputs<'_>) -> Inputs {
        Inputs {
            dir: i.dir.clone(),
            permissions: i.permissions,
            tmp: i.tmp.clone(),
            berth_home: i.berth_home.clone(),
            lock_dir: i.lock_dir.clone(),
            home: i.home.cloned(),
            state: i.state.to_vec(),
            write: i.write.to_vec(),
            read_deny: i.read_deny.to_vec(),
            read: i.read,
            read_allow: i.read_allow.to_vec(),
            network: i.network,
        }
    }

    /// Whether `i` are these inputs (so make the same policy: [`FencePolicy::new`] is
    /// a function of them alone).
    fn same(&self, i: &FenceInputs<'_>) -> bool {
        self.dir == *i.dir
            && self.permissions == i.permissions
            && self.tmp == *i.tmp
            && self.berth_home == *i.berth_home
            && self.lock_dir == *i.lock_dir
            && self.home.as_ref() == i.home
            && self.state == i.state
            && self.write == i.write
            && self.read_deny == i.read_deny
            && self.read == i.read
            && self.read_allow == i.read_allow
            && self.network == i.network
    }
}

fn local(p: &Path) -> Option<LocalPath> {
    LocalPath::parse(Platform::native(), p.to_str()?).ok()
}

/// A settings path: `~/…` against the user's home, else absolute as written.
fn resolve(raw: &str, home: Option<&Path>) -> Option<PathBuf> {
    match (raw.strip_prefix("~/"), home) {
        (Some(rest), Some(home)) => Some(home.join(rest)),
        (Some(_), None) => None,
        (None, _) => Some(PathBuf::from(raw)),
    }
}

/// The fence of a run (see the module's documentation). `var` looks a variable up in
/// the agent's environment (the settings' `env`, then Berth's own).
pub(crate) fn for_run(
    req: &FenceRun<'_>,
    task_id: &TaskId,
    var: impl Fn(&str) -> Option<std::ffi::OsString>,
) -> Result<RunFence, FenceStop> {
    let (settings, places) = (req.settings, req.places);
    if settings.mode == FenceMode::Off {
        return Ok(RunFence {
            text: "your settings turn the fence off (\"fence\": \"off\"); the agent can read and write whatever you can".to_owned(),
            ..RunFence::default()
        });
    }
    let probe = fence::probe();
    if !probe.available() {
        return unavailable(settings.mode, &why_unavailable(probe));
    }
    // What the session's last run left, if the session keeps anything.
    let mut lease = places
        .kept
        .and_then(|(fences, session)| Lease::take(fences, places.tmps, session));
    let (kept, previous) = lease.as_mut().map(Lease::kept).unwrap_or_default();
    let tmp = match kept {
        Some(tmp) => tmp,
        None => places.tmps.take(task_id).map_err(|e| {
            FenceStop::Failed(format!(
                "cannot create the task's temporary directory under {}: {e}",
                places.tmps.live().display()
            ))
        })?,
    };
    if let Some(lease) = &mut lease {
        lease.tmp = Some(tmp.clone());
    }
    let built = build(req, &tmp, var, previous);
    match built {
        Ok((prepared, text, warnings, built)) => {
            if let Some(lease) = &mut lease {
                lease.built = Some(built);
            }
            Ok(RunFence {
                prepared: Some(prepared),
                tmp: Some(tmp),
                fenced: true,
                text,
                warnings,
                lease,
            })
        }
        Err(stop) => {
            match lease {
                // Let go: the session keeps nothing of a run that did not start.
                Some(lease) => drop(lease),
                None => {
                    let _ = std::fs::remove_dir_all(&tmp);
                }
            }
            match stop {
                Stopped::Unavailable(answer) => unavailable(settings.mode, &answer),
                Stopped::Stop(stop) => Err(stop),
            }
        }
    }
}

/// Why this machine cannot fence, for messages.
fn why_unavailable(probe: fence::Probe) -> String {
    if cfg!(target_os = "macos") {
        format!("{} is missing", fence::seatbelt::SANDBOX_EXEC)
    } else if !cfg!(target_os = "linux") {
        format!("no fence is built for {}", std::env::consts::OS)
    } else if probe.landlock_abi == 0 {
        "the kernel has no Landlock (not built, or not enabled at boot)".to_owned()
    } else {
        "the kernel cannot install seccomp filters".to_owned()
    }
}

/// The refusal of a run whose user settings require the fence on a machine without
/// one, known before anything is placed: a worktree run checks it before it adds its
/// worktree to the user's repository. (A project layer that turns `required` on is
/// known only once the directory is read; the run is refused then.)
pub(crate) fn refused_early(user: &crate::settings::UserLayer) -> Option<Refusal> {
    let probe = fence::probe();
    if probe.available() {
        return None;
    }
    match user.fence().map(|f| f.mode) {
        Ok(FenceMode::Required) => {
            match unavailable(FenceMode::Required, &why_unavailable(probe)) {
                Err(FenceStop::Refused(r)) => Some(r),
                Err(FenceStop::Failed(_)) | Ok(_) => None,
            }
        }
        Ok(_) | Err(_) => None,
    }
}

/// The run on a machine without the fence: refused under `required`, else unfenced
/// and said.
fn unavailable(mode: FenceMode, answer: &str) -> Result<RunFence, FenceStop> {
    if mode == FenceMode::Required {
        return Err(FenceStop::Refused(Refusal::new(
            ErrorCode::FenceUnavailable,
            format!(
                "the settings require the fence (\"fence\": \"required\") and this machine cannot set it up: {answer}"
            ),
            "the fence needs Linux 5.13 or later with Landlock enabled (lsm=…,landlock) and seccomp; \
             run on such a machine, or set \"fence\": \"auto\" in your user settings to run unfenced where it is missing",
        )));
    }
    Ok(RunFence {
        text: format!(
            "{answer}; the agent can read and write whatever you can (\"fence\": \"required\" refuses such runs)"
        ),
        ..RunFence::default()
    })
}

enum Stopped {
    Unavailable(String),
    Stop(FenceStop),
}

/// The fence, its description, the warnings of building it, and what it was built
/// from.
type BuiltFence = (fence::Prepared, String, Vec<String>, Built);

/// The run's fence: `previous`'s again (the session's last run's) when built from the
/// same inputs and still valid, else built anew.
fn build(
    req: &FenceRun<'_>,
    tmp: &Path,
    var: impl Fn(&str) -> Option<std::ffi::OsString>,
    previous: Option<(Built, fence::Prepared)>,
) -> Result<BuiltFence, Stopped> {
    let FenceRun {
        ctx,
        settings,
        places,
        run,
        adapter,
        permissions,
    } = *req;
    let failed = |m: String| Stopped::Stop(FenceStop::Failed(m));
    let mut lines = Vec::new();
    let home = places.user_home;
    let unusable = |p: &Path| failed(format!("{} cannot be named by the fence", p.display()));
    let mut state: Vec<(PathBuf, WriteKind)> = adapter.fence_state(home, &var);
    Adapter::create_state(&state).map_err(|e| {
        failed(format!(
            "cannot create the agent's own state ({}) for the fence: {e}",
            state
                .iter()
                .map(|(p, _)| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    })?;
    let mut read_allow = Vec::new();
    if let Some(root) = run.worktree_root {
        let (writes, common) = worktree_git(root).map_err(|e| {
            failed(format!(
                "cannot find the git files of the worktree {} for the fence: {e}",
                root.display()
            ))
        })?;
        state.extend(writes);
        // Strict reads: git in the worktree reads the main repository's `.git` (its
        // config, HEAD, refs, packs).
        if settings.read == ReadScope::Directory {
            read_allow.push(local(&common).ok_or_else(|| unusable(&common))?);
        }
    }
    let state: Vec<(LocalPath, WriteKind)> = state
        .iter()
        .map(|(p, k)| local(p).map(|l| (l, *k)).ok_or_else(|| unusable(p)))
        .collect::<Result<_, _>>()?;
    let mut write = Vec::new();
    for raw in &settings.write {
        match resolve(raw, home).as_deref().and_then(local) {
            Some(p) => write.push(p),
            None => lines.push(format!(
                "warning: fence.write {raw} is ignored: it names no path here"
            )),
        }
    }
    let mut read_deny = Vec::new();
    read_deny.push(local(places.config_dir).ok_or_else(|| unusable(places.config_dir))?);
    for raw in &settings.read_deny {
        match resolve(raw, home).as_deref().and_then(local) {
            Some(p) => read_deny.push(p),
            None => lines.push(format!(
                "warning: fence.read_deny {raw} is ignored: it names no path here"
            )),
        }
    }
    if settings.read == ReadScope::Directory {
        for raw in &settings.read_allow {
            match resolve(raw, home).as_deref().and_then(local) {
                Some(p) => read_allow.push(p),
                None => lines.push(format!(
                    "warning: fence.read {raw} is ignored: it names no path here"
                )),
            }
        }
    }
    let tmp_l = local(tmp).ok_or_else(|| unusable(tmp))?;
    let berth_home = local(places.berth_home).ok_or_else(|| unusable(places.berth_home))?;
    let lock_dir = local(places.lock_dir).ok_or_else(|| unusable(places.lock_dir))?;
    let inputs = FenceInputs {
        dir: run.dir,
        permissions,
        tmp: &tmp_l,
        berth_home: &berth_home,
        lock_dir: &lock_dir,
        home: ctx.home.as_ref(),
        state: &state,
        write: &write,
        read_deny: &read_deny,
        read: settings.read,
        read_allow: &read_allow,
        network: settings.network,
    };
    if let Some((built, prev)) = previous
        && built.inputs.same(&inputs)
        && let Some(prepared) = prev.reuse(&built.policy)
    {
        lines.extend(ignored_lines(ctx, &built.policy));
        let text = describe(ctx, &built.policy, &prepared);
        return Ok((prepared, text, lines, built));
    }
    let policy = FencePolicy::new(&inputs);
    let inputs = Inputs::of(&inputs);
    lines.extend(ignored_lines(ctx, &policy));
    // Berth's control socket: on macOS the profile names it (Linux's socket refuses
    // fenced peers itself).
    let sockets: Vec<LocalPath> = local(&places.berth_home.join(berth_core::SOCKET_FILE))
        .into_iter()
        .collect();
    let prepared = match fence::prepare(&policy, &sockets) {
        Ok(p) => p,
        Err(FenceError::Unavailable { reason }) => return Err(Stopped::Unavailable(reason)),
        Err(e) => return Err(failed(format!("{e} ({})", e.hint()))),
    };
    let text = describe(ctx, &policy, &prepared);
    Ok((prepared, text, lines, Built { inputs, policy }))
}

/// The warnings of `policy`'s `fence.write` and `fence.read` paths it ignores.
fn ignored_lines<'a>(
    ctx: &'a Context,
    policy: &'a FencePolicy,
) -> impl Iterator<Item = String> + 'a {
    let writes = policy.ignored_write.iter().map(|p| {
        format!(
            "warning: fence.write {} is ignored: it overlaps a place the fence hides",
            berth_core::display::display(ctx, p)
        )
    });
    let reads = policy.ignored_read.iter().map(|p| {
        format!(
            "warning: fence.read {} is ignored: it lies in a place the fence hides",
            berth_core::display::display(ctx, p)
        )
    });
    writes.chain(reads)
}

/// The `fence` event's text for a fenced run: core's description, the kernel's
/// mechanism, the protected paths made read-only for the run (the in-place layer), and
/// write paths that got no rule (missing).
#[cfg(target_os = "linux")]
fn describe(ctx: &Context, policy: &FencePolicy, prepared: &fence::Prepared) -> String {
    let mut line = format!(
        "{} (Landlock ABI {})",
        policy.describe(ctx),
        prepared.landlock_abi()
    );
    if let Some(binds) = prepared.binds() {
        line.push_str(&format!(
            "; read-only during the run: {}",
            binds.names().join(", ")
        ));
    }
    for p in prepared.missing() {
        line.push_str(&format!("; no rule for {}: it does not exist", p.display()));
    }
    line
}

#[cfg(not(target_os = "linux"))]
fn describe(ctx: &Context, policy: &FencePolicy, _: &fence::Prepared) -> String {
    format!("{} ({})", policy.describe(ctx), fence::probe().mechanism())
}

/// How this machine fences agents now, from the user settings' mode and the kernel's
/// answer (see [`berth_core::api::FenceStatus`]).
pub(crate) fn status(ctx: &Context, config_dir: &Path) -> berth_core::api::FenceStatus {
    let (mode, read) = match crate::settings::user_fence(ctx, config_dir) {
        Ok(f) => (f.mode, f.read),
        Err(e) => {
            return berth_core::api::FenceStatus {
                mode: "auto".to_owned(),
                available: fence::probe().available(),
                read: ReadScope::Everywhere,
                text: format!("unknown: the user settings cannot be read ({e})"),
            };
        }
    };
    let probe = fence::probe();
    let mode_name = match mode {
        FenceMode::Auto => "auto",
        FenceMode::Required => "required",
        FenceMode::Off => "off",
    };
    let why_not = if cfg!(target_os = "linux") && probe.landlock_abi == 0 {
        "the kernel has no Landlock".to_owned()
    } else {
        why_unavailable(probe)
    };
    let text = match (mode, probe.available()) {
        (FenceMode::Off, _) => {
            "OFF: your settings turn the fence off (\"fence\": \"off\"); agents run unfenced"
                .to_owned()
        }
        (_, true) => format!(
            "on ({}): every agent is kept to its directory (\"fence\": \"{mode_name}\")",
            probe.mechanism()
        ),
        (FenceMode::Auto, false) => {
            format!("UNAVAILABLE: {why_not}; agents run unfenced (\"fence\": \"auto\")")
        }
        (FenceMode::Required, false) => format!(
            "UNAVAILABLE: {why_not}; every run is refused (\"fence\": \"required\", code fence_unavailable)"
        ),
    };
    // The strict read mode, where a fence is built to hold it.
    let text = match (read, mode, probe.available()) {
        (ReadScope::Directory, FenceMode::Auto | FenceMode::Required, true) => format!(
            "{text}; reads: directory only (\"fence\": {{\"read\": \"directory\"}}: its directory, the system's and the toolchains')"
        ),
        (ReadScope::Directory, _, _) | (ReadScope::Everywhere, _, _) => text,
    };
    berth_core::api::FenceStatus {
        mode: mode_name.to_owned(),
        available: probe.available(),
        read,
        text,
    }
}

/// What git writes in the main repository when committing in the linked worktree at
/// `root` (docs/fence.md §3c): `objects/`, the branch prefix's `refs/heads/berth/` and
/// `logs/refs/heads/berth/` (created if missing), and the worktree's own
/// `worktrees/<name>/`. Nothing else of the main `.git` (its `config`, `hooks`, other
/// branches, tags) becomes writable. Also the main `.git` itself, which the strict read
/// mode must let git read.
fn worktree_git(root: &Path) -> std::io::Result<(Vec<(PathBuf, WriteKind)>, PathBuf)> {
    let pointer = std::fs::read_to_string(root.join(".git"))?;
    let gitdir = pointer
        .lines()
        .find_map(|l| l.strip_prefix("gitdir:"))
        .map(|g| PathBuf::from(g.trim()))
        .ok_or_else(|| std::io::Error::other("its .git file names no gitdir"))?;
    let gitdir = if gitdir.is_absolute() {
        gitdir
    } else {
        root.join(gitdir)
    };
    let common = std::fs::read_to_string(gitdir.join("commondir"))?;
    let common = std::fs::canonicalize(gitdir.join(common.trim()))?;
    let mut out = vec![(common.join("objects"), WriteKind::Subtree)];
    for sub in ["refs/heads/berth", "logs/refs/heads/berth"] {
        let p = common.join(sub);
        std::fs::create_dir_all(&p)?;
        out.push((p, WriteKind::Subtree));
    }
    out.push((std::fs::canonicalize(&gitdir)?, WriteKind::Subtree));
    Ok((out, common))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_paths_resolve_against_the_home() {
        let home = Path::new("/home/u");
        assert_eq!(
            resolve("~/side", Some(home)),
            Some(PathBuf::from("/home/u/side"))
        );
        assert_eq!(resolve("~/side", None), None);
        assert_eq!(resolve("/tmp/x", None), Some(PathBuf::from("/tmp/x")));
    }
}
