//! Berth's settings: the JSONC layers, what each key means, and how layers combine.
//!
//! Two layers exist: the user layer (`settings.jsonc` in the config directory) and the
//! project layer (the nearest `.berth/settings.jsonc` at or above the bound directory,
//! stopping below the user's home). The executor reads the files; this module does no
//! I/O. It turns text into a typed [`Layer`] ([`parse`]), combines layers in order into
//! [`Settings`] ([`merge`]), names the files to look for ([`project_layer_candidates`],
//! [`user_layer_file`]) and checks a text for the browser ([`check_text`]).
//!
//! Every problem carries the file, a 1-based line and column, and a message: a syntax
//! error, a value of the wrong type or a plugin path that cannot name a file is an
//! error; an unknown or repeated key is a warning, never fatal and never silently
//! dropped.

mod layers;
mod merge;
#[cfg(not(target_arch = "wasm32"))]
pub mod notify;
mod parse;
mod plugin;
pub mod trust;

pub use layers::{PROJECT_DIR, SETTINGS_FILE, project_layer_candidates, user_layer_file};
pub use merge::merge;
pub use parse::{parse, parse_project};

use crate::path::LocalPath;
use serde::Serialize;
use std::collections::BTreeMap;

/// How serious a [`Diagnostic`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// The file cannot be used as written.
    Error,
    /// The file is used, but part of it has no effect (an unknown or repeated key).
    Warning,
}

/// One problem found in a settings file, at a place the user can jump to.
///
/// `line` and `column` are 1-based; the column counts characters (not bytes) from the
/// start of the line, the way editors show it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Diagnostic {
    pub severity: Severity,
    pub file: String,
    pub line: usize,
    pub column: usize,
    pub message: String,
}

/// What went wrong when a settings file could not be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SettingsErrorKind {
    /// The text is not JSONC.
    Syntax,
    /// The text is JSONC, but its top level is not an object.
    NotAnObject,
    /// A known key holds a value of the wrong type, e.g. `"agent": 3`.
    WrongType,
    /// A value has the right type but cannot be used, e.g. an empty plugin id or an
    /// environment variable name containing `=`.
    InvalidValue,
    /// A plugin path that is not lexically a path on the file's platform.
    InvalidPluginPath,
}

/// A settings file that cannot be used, with the place to fix it.
///
/// Displays as `file:line:column: message`, the form editors and terminals turn into a
/// link.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, thiserror::Error)]
#[error("{file}:{line}:{column}: {message}")]
pub struct SettingsError {
    pub kind: SettingsErrorKind,
    pub file: String,
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl SettingsError {
    /// The same problem as an error-severity [`Diagnostic`].
    pub fn to_diagnostic(&self) -> Diagnostic {
        Diagnostic {
            severity: Severity::Error,
            file: self.file.clone(),
            line: self.line,
            column: self.column,
            message: self.message.clone(),
        }
    }
}

/// The `prompt` object: how Berth adds to the brief it gives the agent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Prompt {
    /// Text appended to the agent's brief.
    pub append: Option<String>,
}

/// What a plugin path points at, judged from its name alone (core does no I/O).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PluginKind {
    /// A markdown prompt fragment (`*.md`).
    Prompt,
    /// A skill folder holding `SKILL.md`.
    Skill,
}

/// A plugin as declared by one layer.
///
/// `path` is absolute and normalized: a relative path in the file was resolved against
/// the directory holding that file when the file was parsed, so the value means the same
/// thing wherever it travels. `id` is never a path: it is non-empty, not `.` or `..`, and
/// holds no separator, `:` or control character, so it is safe as one folder name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Plugin {
    pub id: String,
    pub kind: PluginKind,
    pub path: LocalPath,
    /// The display name of the file that declared it.
    pub declared_in: String,
}

/// One item of a layer's `plugins` array, in file order.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case", tag = "action")]
pub enum PluginEntry {
    /// Adds the plugin, or replaces an earlier one with the same id.
    Add(Plugin),
    /// `{ "plugin": "<id>", "enabled": false }`: removes an earlier plugin with this id.
    Remove { id: String },
}

/// One parsed settings file: only the known keys, typed, plus its warnings.
///
/// A `Layer` exists only for a file with no errors; absent keys are `None` or empty.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Layer {
    /// The display name of the file, used in every message.
    pub file: String,
    /// The directory holding the file; relative plugin paths were resolved against it.
    pub dir: LocalPath,
    pub agent: Option<String>,
    /// The permission policy this layer names: a default in the user layer, a limit in
    /// a project layer (which only narrows it unless its directory is trusted).
    pub permissions: Option<crate::policy::Permissions>,
    pub prompt: Prompt,
    pub env: BTreeMap<String, String>,
    pub plugins: Vec<PluginEntry>,
    pub channels: BTreeMap<String, String>,
    /// A private CA (PEM) trusted for outgoing calls, as written (the user layer's
    /// only: a project layer's is ignored).
    pub ca_file: Option<String>,
    /// How much of each task's change record is kept (the user layer's only).
    #[serde(skip)]
    pub snapshots: SnapshotLimits,
    /// The fence: a project layer may only tighten it (see [`trust::gate`]). Not
    /// serialized: the browser bundle does not need it (nor, to keep within its size
    /// budget, carry it).
    #[cfg(not(target_arch = "wasm32"))]
    #[serde(skip)]
    pub fence: FenceLayer,
    /// The `ask` key (see [`crate::approval`]); not serialized, like `fence`.
    #[cfg(not(target_arch = "wasm32"))]
    #[serde(skip)]
    pub ask: AskLayer,
    /// The `notify` key (the user layer's only); not serialized, like `fence`.
    #[cfg(not(target_arch = "wasm32"))]
    #[serde(skip)]
    pub notify: notify::NotifyLayer,
    pub warnings: Vec<Diagnostic>,
    /// Where each key set in the file is: `agent`, `permissions`, `prompt.append`,
    /// `env.NAME`, `channels.NAME`, `notify` and `plugins[i]` (`i` indexing `plugins`), as the
    /// 1-based line and column of the key, for messages about keys that are not applied.
    /// In file order. (A list, not a map: the browser bundle parses settings too, and a
    /// map of another value type costs it kilobytes.)
    pub places: Vec<(String, Pos)>,
    /// `env` entries no process could be given, left here by [`parse_project`] alone
    /// ([`parse`] reports them as errors): whether one is an error or an ignored key
    /// depends on the project directory's trust, which [`trust::gate`] decides.
    pub unusable_env: Vec<UnusableEnv>,
}

/// An `env` entry no process environment allows: an empty name, a name holding `=` or
/// NUL, or a value holding NUL.
///
/// In the user layer, or a trusted project layer, it is an error (`error`). In an
/// untrusted project layer the whole `env` is ignored anyway, and an ignored key never
/// blocks a run, so there it is reported as ignored like the rest of `env`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct UnusableEnv {
    /// The variable's name, as written (it may hold `=` or NUL).
    pub name: String,
    /// What is wrong with it, where: the error [`parse`] reports for it.
    pub error: SettingsError,
}

/// `snapshots` in the user settings: the per-task change record's limits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SnapshotLimits {
    /// Files larger than this many MiB are not recorded.
    pub max_file_mb: Option<u64>,
    /// Tasks kept per directory.
    pub keep: Option<u64>,
    /// Days a record is kept.
    pub max_age_days: Option<u64>,
}

/// The `fence` key of one layer, as written: how the kernel keeps the agents Berth
/// starts to their directory (see [`crate::fence`]). `"fence": "auto"` is
/// `{ "mode": "auto" }`. Paths are kept as written (absolute, or `~/…` for the user's
/// home): the executor resolves them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FenceLayer {
    pub mode: Option<crate::fence::FenceMode>,
    pub network: Option<crate::fence::Network>,
    /// Extra places agents may write (the user layer's only).
    pub write: Vec<String>,
    /// Extra places agents may not read.
    pub read_deny: Vec<String>,
    /// `fence.read`: `"everywhere"`, `"directory"`, or a list of paths (the strict
    /// mode, `Directory`, with these extra readable places in `read_allow`).
    pub read: Option<crate::fence::ReadScope>,
    /// The paths of a `fence.read` list (the user layer's only).
    pub read_allow: Vec<String>,
}

impl FenceLayer {
    /// Whether the layer sets nothing of the fence.
    pub fn is_empty(&self) -> bool {
        *self == FenceLayer::default()
    }
}

/// The `ask` key of one layer, as written: rules (checked, kept in their printed
/// form) and the deadline.
#[cfg(not(target_arch = "wasm32"))]
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AskLayer {
    pub allow: Vec<String>,
    pub deny: Vec<String>,
    pub deadline_secs: Option<u64>,
}

/// The fence settings in force: the strictest mode, network and read scope any layer
/// asks for (the trust gate has removed what a project layer may not loosen), every
/// layer's `read_deny`, and the user layer's `write` and `fence.read` paths.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FenceSettings {
    pub mode: crate::fence::FenceMode,
    pub network: crate::fence::Network,
    pub write: Vec<String>,
    pub read_deny: Vec<String>,
    pub read: crate::fence::ReadScope,
    pub read_allow: Vec<String>,
}

/// A 1-based line and column in a settings file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
pub struct Pos {
    pub line: usize,
    pub column: usize,
}

impl Layer {
    /// A layer that sets nothing, as if the file held `{}`.
    pub fn empty(file: &str, dir: &LocalPath) -> Layer {
        Layer {
            file: file.to_owned(),
            dir: dir.clone(),
            agent: None,
            permissions: None,
            prompt: Prompt::default(),
            env: BTreeMap::new(),
            plugins: Vec::new(),
            channels: BTreeMap::new(),
            ca_file: None,
            snapshots: SnapshotLimits::default(),
            #[cfg(not(target_arch = "wasm32"))]
            fence: FenceLayer::default(),
            #[cfg(not(target_arch = "wasm32"))]
            ask: AskLayer::default(),
            #[cfg(not(target_arch = "wasm32"))]
            notify: notify::NotifyLayer::default(),
            warnings: Vec::new(),
            places: Vec::new(),
            unusable_env: Vec::new(),
        }
    }

    /// Where `key` was written, if it was (line 1, column 1 otherwise).
    pub fn place(&self, key: &str) -> Pos {
        self.places
            .iter()
            .rfind(|(k, _)| k == key)
            .map_or(Pos { line: 1, column: 1 }, |(_, at)| *at)
    }
}

/// The settings in force for one exchange: every layer merged, user first.
///
/// `plugins` holds each id once, in the order first declared; `warnings` holds every
/// layer's warnings in layer order, so nothing a user wrote is silently ignored.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Settings {
    pub agent: Option<String>,
    /// The user layer's default permission policy (for agents registered without one).
    /// [`merge`] leaves it unset: only the caller knows which layer is the user's.
    pub permissions: Option<crate::policy::Permissions>,
    /// The project layer's policy: without trust a limit (it narrows, never widens);
    /// from a trusted directory the policy itself. Set by the caller like `permissions`.
    pub permissions_limit: Option<crate::policy::Permissions>,
    /// Whether the project layer's directory is trusted (`berth trust`), so its
    /// `permissions` may widen the policy. Set by the caller.
    pub project_trusted: bool,
    pub prompt: Prompt,
    pub env: BTreeMap<String, String>,
    pub plugins: Vec<Plugin>,
    pub channels: BTreeMap<String, String>,
    #[serde(skip)]
    pub fence: FenceSettings,
    /// The `ask` rules in force: every layer's denies, the user layer's allows and
    /// deadline (the trust gate removes a project layer's).
    #[cfg(not(target_arch = "wasm32"))]
    #[serde(skip)]
    pub ask: crate::approval::AskRules,
    /// The notifications in force: the user layer's `notify` (the trust gate removes a
    /// project layer's).
    #[cfg(not(target_arch = "wasm32"))]
    #[serde(skip)]
    pub notify: notify::Notify,
    pub warnings: Vec<Diagnostic>,
}

/// Every error and warning in a settings text, ordered by position.
///
/// Unlike [`parse`], which stops at the first error, this reports all of them, so the
/// browser can mark each one at once. `dir` is the directory that would hold the file;
/// relative plugin paths are checked against it.
pub fn check_text(file: &str, dir: &LocalPath, text: &str) -> Vec<Diagnostic> {
    let read = parse::read(file, dir, text);
    let mut out: Vec<Diagnostic> = read
        .errors
        .iter()
        .map(SettingsError::to_diagnostic)
        .chain(read.layer.warnings)
        .collect();
    sort_by_position(&mut out, |d| (d.line, d.column));
    out
}

/// Orders items by their position in the text, keeping equal positions in order.
///
/// An insertion sort: the lists are a handful of diagnostics, and a general-purpose
/// sort instantiated per type costs the browser bundle kilobytes for nothing.
pub(crate) fn sort_by_position<T>(items: &mut [T], at: impl Fn(&T) -> (usize, usize)) {
    for i in 1..items.len() {
        let mut j = i;
        while j > 0 && at(&items[j - 1]) > at(&items[j]) {
            items.swap(j - 1, j);
            j -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::Platform;

    fn dir() -> LocalPath {
        LocalPath::parse(Platform::Linux, "/p/app/.berth").unwrap()
    }

    #[test]
    fn check_text_reports_every_problem_in_order() {
        let text = "{\n  \"agnt\": \"x\",\n  \"env\": { \"A\": 1, \"B\": true },\n}";
        let file = "s.jsonc";
        let diag = |severity, line, column, message: &str| Diagnostic {
            severity,
            file: file.to_owned(),
            line,
            column,
            message: message.to_owned(),
        };
        assert_eq!(
            check_text(file, &dir(), text),
            vec![
                diag(
                    Severity::Warning,
                    2,
                    3,
                    "unknown key \"agnt\" (did you mean \"agent\"?); known keys: agent, permissions, prompt, env, plugins, channels, ca_file, snapshots, fence, ask, notify",
                ),
                diag(
                    Severity::Error,
                    3,
                    17,
                    "\"env.A\" must be a string, found a number",
                ),
                diag(
                    Severity::Error,
                    3,
                    25,
                    "\"env.B\" must be a string, found a boolean",
                ),
            ]
        );
    }

    #[test]
    fn check_text_of_a_clean_file_is_empty() {
        assert_eq!(check_text("s", &dir(), "{ \"agent\": \"codex\" }"), vec![]);
    }

    #[test]
    fn error_displays_as_file_line_column() {
        let err = SettingsError {
            kind: SettingsErrorKind::Syntax,
            file: "~/.config/berth/settings.jsonc".to_owned(),
            line: 3,
            column: 7,
            message: "unexpected token".to_owned(),
        };
        assert_eq!(
            err.to_string(),
            "~/.config/berth/settings.jsonc:3:7: unexpected token"
        );
    }
}
