//! Reading the settings in force for one exchange.
//!
//! Read afresh at every task: the user layer (`settings.jsonc` in the config
//! directory), then the project layer (the first existing of core's candidates for the
//! bound directory), merged by core. Linking or unlinking therefore applies at the
//! next message, with no reload.
//!
//! The project layer is sorted by trust first ([`berth_core::settings::trust::gate`],
//! with the trust list of [`crate::settings::trust`]): what an untrusted directory may not set
//! never reaches the merge, and the report says which keys were left out and why.
//!
//! Before that, two rules about the file itself, since a repository (or another local
//! user) chooses what it is: every settings file and prompt fragment is read through
//! [`input::read`] (a regular file, at most [`input::MAX_SETTINGS`] bytes: never a
//! `/dev/zero` or a FIFO), and a project layer that someone other than the user or root
//! may have written is not read at all ([`owner`], git's `safe.directory` reasoning),
//! and is reported as ignored.

pub mod input;
mod owner;
pub mod trust;

use crate::config::local;
use crate::settings::trust::{TrustStore, identity_of};
use berth_core::display::display;
use berth_core::settings::trust::{
    Gated, KeyVerdict, ProjectLayerReport, Trust, Verdict, WHOLE_FILE, gate, outside_project,
    trust_command,
};
use berth_core::settings::{self, Layer, PluginEntry, Settings, SettingsError};
use berth_core::{Context, ErrorCode, LocalPath, Platform};
use input::{InputError, Limit, MAX_SETTINGS};
use owner::Foreign;
use std::path::Path;

/// The settings in force for one exchange, and what became of the project layer.
#[derive(Debug, Clone, Default)]
pub struct Loaded {
    pub settings: Settings,
    /// The project layer read, if any: its directory's trust and every key's verdict.
    pub project: Option<ProjectLayerReport>,
    /// Problems that made Berth treat the directory as untrusted (a damaged trust
    /// list), for the user to see.
    pub notes: Vec<String>,
}

impl Loaded {
    /// Adds a verdict found after loading (a widening the policy refused), and the hint
    /// that goes with it.
    pub fn add_ignored(&mut self, key: KeyVerdict) {
        if let Some(report) = &mut self.project {
            report.keys.push(key);
            set_hint(report);
        }
    }
}

fn set_hint(report: &mut ProjectLayerReport) {
    if report.keys.iter().any(|k| k.verdict == Verdict::NeedsTrust) {
        report.hint = Some(trust_command(&report.dir));
    }
}

/// Why the settings could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SettingsLoadError {
    /// The file is not a regular file, too large, or cannot be read.
    #[error("{0}")]
    Input(#[from] InputError),
    #[error("the settings file {0}")]
    Invalid(#[from] SettingsError),
}

impl SettingsLoadError {
    /// The stable code: [`InputError::code`]'s, or `settings_invalid` for a file that
    /// is read but cannot be used as written.
    pub fn code(&self) -> ErrorCode {
        match self {
            SettingsLoadError::Input(e) => e.code(),
            SettingsLoadError::Invalid(_) => ErrorCode::SettingsInvalid,
        }
    }

    /// What to do about it: the code's hint ([`ErrorCode::hint`]).
    pub fn hint(&self) -> &'static str {
        self.code().hint().unwrap_or_default()
    }
}

/// The layers a run bound to a directory reads: the user layer, then the project
/// layer with only what its directory's trust allows, and that layer's report.
#[derive(Debug, Default)]
struct Layers {
    user: Option<Layer>,
    project: Option<(Layer, ProjectLayerReport)>,
    /// Why a project layer was treated as untrusted beyond its trust (a damaged list).
    notes: Vec<String>,
}

impl Layers {
    fn in_order(&self) -> Vec<Layer> {
        self.user
            .iter()
            .chain(self.project.as_ref().map(|(l, _)| l))
            .cloned()
            .collect()
    }
}

/// The user layer (`settings.jsonc` in the config directory), if there is one.
fn user_layer(ctx: &Context, config_dir: &Path) -> Result<Option<Layer>, SettingsLoadError> {
    match local(&config_dir.join(settings::SETTINGS_FILE)) {
        Some(file) => read_layer(ctx, &file),
        None => Ok(None),
    }
}

/// The fence settings of the user layer alone (no directory's project layer).
pub(crate) fn user_fence(
    ctx: &Context,
    config_dir: &Path,
) -> Result<berth_core::settings::FenceSettings, SettingsLoadError> {
    Ok(settings::merge(user_layer(ctx, config_dir)?.as_slice()).fence)
}

/// The user layer as a run reads it: once, when the task is placed; its snapshot
/// limits, its fence and the merged settings all come from that one reading.
#[derive(Debug)]
pub struct UserLayer(Result<Option<Layer>, SettingsLoadError>);

impl UserLayer {
    /// Reads `settings.jsonc` in `config_dir` (a missing file is no layer).
    pub fn read(ctx: &Context, config_dir: &Path) -> UserLayer {
        UserLayer(user_layer(ctx, config_dir))
    }

    /// Its `snapshots` (`None` when the file is missing or cannot be read: the run
    /// reports that problem itself, from [`load_with`]).
    pub fn snapshots(&self) -> Option<berth_core::settings::SnapshotLimits> {
        match &self.0 {
            Ok(Some(layer)) => Some(layer.snapshots),
            Ok(None) | Err(_) => None,
        }
    }

    /// Its fence settings, as the user layer alone sets them.
    pub fn fence(&self) -> Result<berth_core::settings::FenceSettings, &SettingsLoadError> {
        let layer = self.0.as_ref()?;
        Ok(settings::merge(layer.as_slice()).fence)
    }
}

/// Reads both layers for `bound` (none for scratch runs): the first existing project
/// candidate, sorted under the trust `trust` records for its directory.
fn read_layers(
    ctx: &Context,
    user: UserLayer,
    bound: Option<&LocalPath>,
    trust: &TrustStore,
) -> Result<Layers, SettingsLoadError> {
    let mut layers = Layers {
        user: user.0?,
        ..Layers::default()
    };
    if let Some(bound) = bound {
        for file in settings::project_layer_candidates(bound, ctx.home.as_ref()) {
            let Some(dir) = file.parent() else {
                continue;
            };
            let shown = display(ctx, &file);
            match look(ctx, &file, &shown)? {
                Candidate::Missing => continue,
                Candidate::Foreign(why) => {
                    let layer = Layer::empty(&shown, &dir);
                    layers.project =
                        Some(foreign_layer(ctx, layer, &why, trust, &mut layers.notes));
                }
                Candidate::Read(bytes) => {
                    let text = bytes.into_text(&shown)?;
                    let layer = settings::parse_project(&shown, &dir, &text)?;
                    layers.project =
                        Some(sort_project_layer(ctx, layer, trust, &mut layers.notes)?);
                }
            }
            break;
        }
    }
    Ok(layers)
}

/// What one project layer candidate holds.
enum Candidate {
    /// No file by that name (the walk goes on to the next folder up).
    Missing,
    /// A file another user may have written: not read.
    Foreign(Foreign),
    /// The file's bytes, read by the bounded reader.
    Read(input::Bytes),
}

/// Looks at a project layer candidate: whether it exists, whose it is ([`owner`]), and
/// its bytes if it is the user's (or root's) and a regular file within the limit.
fn look(ctx: &Context, file: &LocalPath, shown: &str) -> Result<Candidate, SettingsLoadError> {
    let path = Path::new(file.as_str());
    let io = |source: std::io::Error| InputError::Io {
        file: shown.to_owned(),
        source,
    };
    let missing = |e: &std::io::Error| {
        matches!(
            e.kind(),
            std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
        )
    };
    match std::fs::symlink_metadata(path) {
        Err(e) if missing(&e) => return Ok(Candidate::Missing),
        Err(e) => return Err(io(e).into()),
        Ok(_) => {}
    }
    match owner::check_before_reading(ctx, path) {
        Err(e) if missing(&e) => return Ok(Candidate::Missing),
        Err(e) => return Err(io(e).into()),
        Ok(Some(why)) => return Ok(Candidate::Foreign(why)),
        Ok(None) => {}
    }
    let bytes = match input::read(path, shown, Limit::Whole(MAX_SETTINGS)) {
        // A symbolic link to nothing: no layer here, as before.
        Err(e) if e.is_missing() => return Ok(Candidate::Missing),
        Err(e) => return Err(e.into()),
        Ok(bytes) => bytes,
    };
    Ok(match owner::check_read(ctx, path, &bytes) {
        Some(why) => Candidate::Foreign(why),
        None => Candidate::Read(bytes),
    })
}

/// Loads and merges the layers for a task bound to `bound` (none for scratch runs),
/// the project layer sorted under the trust `trust` records for its directory.
pub fn load(
    ctx: &Context,
    config_dir: &Path,
    bound: Option<&LocalPath>,
    trust: &TrustStore,
) -> Result<Loaded, SettingsLoadError> {
    load_with(ctx, UserLayer::read(ctx, config_dir), bound, trust)
}

/// [`load`] with the user layer a run read already.
pub fn load_with(
    ctx: &Context,
    user: UserLayer,
    bound: Option<&LocalPath>,
    trust: &TrustStore,
) -> Result<Loaded, SettingsLoadError> {
    let layers = read_layers(ctx, user, bound, trust)?;
    let mut merged = settings::merge(&layers.in_order());
    // The user layer sets a default; a project layer narrows it, or, trusted, sets it
    // (core's Policy).
    merged.permissions = layers.user.as_ref().and_then(|l| l.permissions);
    merged.permissions_limit = layers.project.as_ref().and_then(|(l, _)| l.permissions);
    merged.project_trusted = layers
        .project
        .as_ref()
        .is_some_and(|(_, r)| r.trust == Trust::Trusted);
    Ok(Loaded {
        settings: merged,
        project: layers.project.map(|(_, r)| r),
        notes: layers.notes,
    })
}

/// The project directory holding `layer` (the directory holding its `.berth`; the
/// bound path is canonical, so is every ancestor), and the trust recorded for it.
fn project_trust(layer: &Layer, store: &TrustStore, notes: &mut Vec<String>) -> (LocalPath, Trust) {
    let root = layer.dir.parent().unwrap_or_else(|| layer.dir.clone());
    let trust = match store.trust_of(root.as_str(), identity_of(root.as_str())) {
        Ok(t) => t,
        Err(e) => {
            notes.push(format!(
                "{e}; the project layer {} is treated as untrusted ({})",
                layer.file,
                e.hint()
            ));
            Trust::Untrusted
        }
    };
    (root, trust)
}

/// The trust in the project directory holding `layer`, the layer with only what that
/// trust allows, and the report of every key. Fails only for what a trusted layer sets
/// and no process could be given (an `env` name holding NUL, …): untrusted, such a key
/// is ignored like the rest of `env`, and never blocks the run.
fn sort_project_layer(
    ctx: &Context,
    layer: Layer,
    store: &TrustStore,
    notes: &mut Vec<String>,
) -> Result<(Layer, ProjectLayerReport), SettingsLoadError> {
    let (root, trust) = project_trust(&layer, store, notes);
    let mut gated = gate(&layer, trust);
    if let Some(unusable) = gated.layer.unusable_env.first() {
        return Err(unusable.error.clone().into());
    }
    if trust != Trust::Trusted {
        escape_check(ctx, &root, &layer, &mut gated, trust);
    }
    let mut report = ProjectLayerReport {
        file: layer.file.clone(),
        dir: display(ctx, &root),
        trust,
        keys: gated.keys,
        hint: None,
    };
    set_hint(&mut report);
    Ok((gated.layer, report))
}

/// A project layer another user may have written ([`owner`]): nothing of it applies
/// (`layer` is empty), and the report says why, as one ignored key for the whole file.
fn foreign_layer(
    ctx: &Context,
    layer: Layer,
    why: &Foreign,
    store: &TrustStore,
    notes: &mut Vec<String>,
) -> (Layer, ProjectLayerReport) {
    let (root, trust) = project_trust(&layer, store, notes);
    let report = ProjectLayerReport {
        file: layer.file.clone(),
        dir: display(ctx, &root),
        trust,
        keys: vec![KeyVerdict {
            key: WHOLE_FILE.to_owned(),
            line: 1,
            column: 1,
            verdict: Verdict::Foreign,
            message: why.message(),
        }],
        // Trust does not lift this: no `berth trust` hint.
        hint: None,
    };
    (layer, report)
}

/// Plugins of an untrusted project layer must stay inside the project once symbolic
/// links are resolved: a `review.md` that links to `~/.ssh/...` is not text of the
/// repository's. Such a plugin is dropped and its verdict becomes "needs trust".
fn escape_check(
    ctx: &Context,
    root: &LocalPath,
    original: &Layer,
    gated: &mut Gated,
    trust: Trust,
) {
    let real_root = std::fs::canonicalize(root.as_str()).ok();
    for (i, entry) in original.plugins.iter().enumerate() {
        let PluginEntry::Add(plugin) = entry else {
            continue;
        };
        let key = format!("plugins[{i}]");
        let Some(verdict) = gated
            .keys
            .iter_mut()
            .find(|k| k.key == key && k.verdict == Verdict::Applied)
        else {
            continue;
        };
        let real = std::fs::canonicalize(plugin.path.as_str()).ok();
        let inside = match (&real, &real_root) {
            // Missing: nothing is read, and the brief reports the missing file.
            (None, _) => true,
            (Some(real), Some(real_root)) => real.starts_with(real_root),
            (Some(_), None) => false,
        };
        if inside {
            continue;
        }
        let shown = real
            .as_ref()
            .and_then(|r| r.to_str())
            .and_then(|r| LocalPath::parse(Platform::native(), r).ok())
            .map_or_else(|| display(ctx, &plugin.path), |r| display(ctx, &r));
        verdict.verdict = Verdict::NeedsTrust;
        verdict.message = outside_project(&key, &shown, trust);
        if let Some(at) = gated.layer.plugins.iter().position(|e| e == entry) {
            gated.layer.plugins.remove(at);
        }
    }
}

/// The project layer file a session bound to `bound` reads: the nearest existing
/// candidate (one that cannot be read, too: runs fail on it), none if another user may
/// have written it. The directory holding its `.berth` is the one trust is given to.
pub fn project_layer_file(ctx: &Context, bound: &LocalPath) -> Option<LocalPath> {
    for file in settings::project_layer_candidates(bound, ctx.home.as_ref()) {
        match look(ctx, &file, &display(ctx, &file)) {
            Ok(Candidate::Missing) => continue,
            Ok(Candidate::Foreign(_)) => return None,
            Ok(Candidate::Read(_)) | Err(_) => return Some(file),
        }
    }
    None
}

/// The user layer's file: bounded like every settings file, parsed strictly (the
/// user's own words: a mistake in them is an error).
fn read_layer(ctx: &Context, file: &LocalPath) -> Result<Option<Layer>, SettingsLoadError> {
    let shown = display(ctx, file);
    let text = match input::read(Path::new(file.as_str()), &shown, Limit::Whole(MAX_SETTINGS)) {
        Ok(read) => read.into_text(&shown)?,
        Err(e) if e.is_missing() => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let Some(dir) = file.parent() else {
        return Ok(None);
    };
    Ok(Some(settings::parse(&shown, &dir, &text)?))
}

/// The user settings' `ca_file` (a private CA for outgoing calls), resolved: a leading
/// `~/` against the user's home, a relative path against the config directory.
pub fn user_ca_file(
    cfg: &crate::config::ExecutorConfig,
) -> Result<Option<std::path::PathBuf>, SettingsLoadError> {
    let Some(layer) = user_layer(&cfg.context(), &cfg.config_dir)? else {
        return Ok(None);
    };
    Ok(layer
        .ca_file
        .map(|raw| match (raw.strip_prefix("~/"), &cfg.user_home) {
            (Some(rest), Some(home)) => home.join(rest),
            _ => cfg.config_dir.join(&raw),
        }))
}

/// The user settings' `snapshots` (`None` when the file is missing or cannot be read:
/// the run reports that problem itself).
pub fn user_snapshots(
    cfg: &crate::config::ExecutorConfig,
) -> Option<berth_core::settings::SnapshotLimits> {
    UserLayer::read(&cfg.context(), &cfg.config_dir).snapshots()
}

/// One value in force, and where it was written.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Sourced {
    /// `agent`, `permissions`, `prompt.append`, `env.NAME`, `plugins.ID`,
    /// `channels.NAME`, `ca_file`.
    pub key: String,
    /// The value as JSON (a plugin: its path).
    pub value: serde_json::Value,
    /// The file that set it (display form), and where in it.
    pub file: String,
    pub line: usize,
    pub column: usize,
}

/// The settings a run bound to a directory would use, value by value, with where each
/// came from; what a later layer removed; what the project layer may not set.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Explained {
    pub values: Vec<Sourced>,
    /// Plugins an earlier layer added and a later one turned off: the plugin key, and
    /// where it was turned off.
    pub removed: Vec<Sourced>,
    pub project_layer: Option<ProjectLayerReport>,
    /// Unknown or repeated keys, and trust problems, as `file:line:column: message`.
    pub warnings: Vec<String>,
}

/// [`load`], explained: every value in force with the file, line and column that set
/// it (later layers win key by key, as in [`settings::merge`]).
pub fn explain(
    ctx: &Context,
    config_dir: &Path,
    bound: Option<&LocalPath>,
    trust: &TrustStore,
) -> Result<Explained, SettingsLoadError> {
    let read = read_layers(ctx, UserLayer::read(ctx, config_dir), bound, trust)?;
    let layers = read.in_order();
    let mut out = Explained {
        warnings: read.notes,
        project_layer: read.project.map(|(_, r)| r),
        ..Explained::default()
    };
    let mut values: Vec<Sourced> = Vec::new();
    let set = |values: &mut Vec<Sourced>,
               key: String,
               value: serde_json::Value,
               layer: &Layer,
               place: &str| {
        let at = layer.place(place);
        let entry = Sourced {
            key,
            value,
            file: layer.file.clone(),
            line: at.line,
            column: at.column,
        };
        match values.iter_mut().find(|v| v.key == entry.key) {
            Some(slot) => *slot = entry,
            None => values.push(entry),
        }
    };
    for layer in &layers {
        out.warnings.extend(
            layer
                .warnings
                .iter()
                .map(|d| format!("{}:{}:{}: {}", d.file, d.line, d.column, d.message)),
        );
        if let Some(agent) = &layer.agent {
            set(
                &mut values,
                "agent".into(),
                agent.as_str().into(),
                layer,
                "agent",
            );
        }
        if let Some(p) = layer.permissions {
            set(
                &mut values,
                "permissions".into(),
                p.as_str().into(),
                layer,
                "permissions",
            );
        }
        if let Some(text) = &layer.prompt.append {
            set(
                &mut values,
                "prompt.append".into(),
                text.as_str().into(),
                layer,
                "prompt.append",
            );
        }
        for (k, v) in &layer.env {
            let key = format!("env.{k}");
            set(&mut values, key.clone(), v.as_str().into(), layer, &key);
        }
        for (k, v) in &layer.channels {
            let key = format!("channels.{k}");
            // Channel settings are secrets: their presence, never their value.
            let shown = if k.contains("url") || k.contains("agent") {
                v.as_str().into()
            } else {
                "(set)".into()
            };
            set(&mut values, key.clone(), shown, layer, &key);
        }
        if let Some(ca) = &layer.ca_file {
            set(
                &mut values,
                "ca_file".into(),
                ca.as_str().into(),
                layer,
                "ca_file",
            );
        }
        for (i, entry) in layer.plugins.iter().enumerate() {
            let place = format!("plugins[{i}]");
            match entry {
                PluginEntry::Add(p) => {
                    set(
                        &mut values,
                        format!("plugins.{}", p.id),
                        display(ctx, &p.path).into(),
                        layer,
                        &place,
                    );
                }
                PluginEntry::Remove { id } => {
                    let key = format!("plugins.{id}");
                    if let Some(i) = values.iter().position(|v| v.key == key) {
                        values.remove(i);
                        let at = layer.place(&place);
                        out.removed.push(Sourced {
                            key,
                            value: serde_json::Value::Null,
                            file: layer.file.clone(),
                            line: at.line,
                            column: at.column,
                        });
                    }
                }
            }
        }
    }
    // The fence: the strictest mode and network any layer asks for, the paths of every
    // layer (a project layer's were gated already), each from the last layer that set
    // what is in force.
    let fence = settings::merge(&layers).fence;
    let last = |f: &dyn Fn(&Layer) -> bool| layers.iter().rev().find(|l| f(l));
    if let Some(l) = last(&|l| l.fence.mode == Some(fence.mode)) {
        set(
            &mut values,
            "fence.mode".into(),
            fence.mode.as_str().into(),
            l,
            "fence.mode",
        );
    }
    if let Some(l) = last(&|l| l.fence.network == Some(fence.network)) {
        set(
            &mut values,
            "fence.network".into(),
            fence.network.as_str().into(),
            l,
            "fence.network",
        );
    }
    if let Some(l) = last(&|l| l.fence.read == Some(fence.read)) {
        let value = if fence.read_allow.is_empty() {
            serde_json::json!(fence.read.as_str())
        } else {
            serde_json::json!(fence.read_allow)
        };
        set(&mut values, "fence.read".into(), value, l, "fence.read");
    }
    for (key, list) in [
        ("fence.write", &fence.write),
        ("fence.read_deny", &fence.read_deny),
    ] {
        let field = |l: &Layer| {
            if key == "fence.write" {
                !l.fence.write.is_empty()
            } else {
                !l.fence.read_deny.is_empty()
            }
        };
        if let Some(l) = last(&field) {
            set(&mut values, key.into(), serde_json::json!(list), l, key);
        }
    }
    out.values = values;
    Ok(out)
}
