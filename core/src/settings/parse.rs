//! From JSONC text to a typed [`Layer`], with a position on every problem.
//!
//! The text is parsed to jsonc-parser's AST, which keeps the byte range of every value,
//! so a type error points at the offending value rather than at the file.

use super::plugin::{self, Located};
use super::{Diagnostic, Layer, Plugin, PluginEntry, SettingsError, SettingsErrorKind, Severity};
use crate::path::LocalPath;
use crate::quote::q;
use jsonc_parser::ast::{Object, ObjectProp, Value};
use jsonc_parser::common::Ranged;
use jsonc_parser::{CollectOptions, ParseOptions, parse_to_ast};
use std::collections::BTreeMap;

#[cfg(not(target_arch = "wasm32"))]
mod notify;

/// The keys a settings file may hold at its top level.
const TOP_KEYS: [&str; 11] = [
    "agent",
    "permissions",
    "prompt",
    "env",
    "plugins",
    "channels",
    "ca_file",
    "snapshots",
    "fence",
    "ask",
    "notify",
];
/// The keys of the `ask` object.
#[cfg(not(target_arch = "wasm32"))]
const ASK_KEYS: [&str; 3] = ["allow", "deny", "deadline_secs"];
/// The keys of the `fence` object.
#[cfg(not(target_arch = "wasm32"))]
const FENCE_KEYS: [&str; 5] = ["mode", "network", "write", "read_deny", "read"];
/// The keys of the `snapshots` object.
const SNAPSHOT_KEYS: [&str; 3] = ["max_file_mb", "keep", "max_age_days"];
/// The keys of the `prompt` object.
const PROMPT_KEYS: [&str; 1] = ["append"];
/// The keys of an object in the `plugins` array.
const PLUGIN_KEYS: [&str; 3] = ["plugin", "path", "enabled"];

/// Parses one settings file into a [`Layer`], stopping at the first error.
///
/// `file` is the name shown in messages (it may be a privacy-stripped display form);
/// `dir` is the directory holding the file, against which relative plugin paths are
/// resolved on `dir.platform()`. Comments and trailing commas are allowed; other JSON5
/// extensions are not, so a file means the same to Berth as to a JSONC editor. An empty
/// text (or one holding only comments) is an empty layer. Never panics, whatever the
/// input.
pub fn parse(file: &str, dir: &LocalPath, text: &str) -> Result<Layer, SettingsError> {
    first_error(read(file, dir, text))
}

/// [`parse`] for a project layer: the same, except that an `env` entry no process could
/// be given is not an error here but is left in [`Layer::unusable_env`].
///
/// A project layer's `env` applies only once its directory is trusted; until then it
/// is ignored, and an ignored key must never block a run. [`super::trust::gate`] makes
/// such an entry an ignored key without trust, and leaves it as the error it is with
/// trust.
pub fn parse_project(file: &str, dir: &LocalPath, text: &str) -> Result<Layer, SettingsError> {
    first_error(read_keeping_env(file, dir, text))
}

fn first_error(read: Read) -> Result<Layer, SettingsError> {
    match read.errors.into_iter().next() {
        Some(err) => Err(err),
        None => Ok(read.layer),
    }
}

/// Everything found in one text: the layer as far as it could be read, and all errors.
#[derive(Debug)]
pub(super) struct Read {
    pub layer: Layer,
    pub errors: Vec<SettingsError>,
}

/// Reads the whole text, collecting every error instead of stopping at the first.
pub(super) fn read(file: &str, dir: &LocalPath, text: &str) -> Read {
    let mut read = read_keeping_env(file, dir, text);
    let unusable = std::mem::take(&mut read.layer.unusable_env);
    if !unusable.is_empty() {
        read.errors.extend(unusable.into_iter().map(|u| u.error));
        super::sort_by_position(&mut read.errors, |e| (e.line, e.column));
    }
    read
}

/// [`read`], leaving the `env` entries no process could be given in
/// [`Layer::unusable_env`] rather than among the errors.
fn read_keeping_env(file: &str, dir: &LocalPath, text: &str) -> Read {
    // Editors on Windows may save a byte-order mark; it is not part of the JSON.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut reader = Reader {
        lines: Lines::new(text),
        layer: Layer::empty(file, dir),
        errors: Vec::new(),
    };
    let options = ParseOptions {
        allow_comments: true,
        allow_trailing_commas: true,
        allow_loose_object_property_names: false,
        allow_missing_commas: false,
        allow_single_quoted_strings: false,
        allow_hexadecimal_numbers: false,
        allow_unary_plus_numbers: false,
        allow_bare_decimal_point_numbers: false,
        allow_non_finite_numbers: false,
        allow_extended_string_escapes: false,
    };
    match parse_to_ast(text, &CollectOptions::default(), &options) {
        Err(err) => {
            let message = lower_first(&err.kind().to_string());
            reader.error(SettingsErrorKind::Syntax, err.range().start, message);
        }
        Ok(result) => match result.value {
            None => {}
            Some(Value::Object(object)) => reader.top(&object),
            Some(other) => reader.error(
                SettingsErrorKind::NotAnObject,
                other.range().start,
                format!(
                    "the settings must be an object like {{ \"agent\": \"...\" }}, found {}",
                    describe(&other)
                ),
            ),
        },
    }
    // Text order, so the first error reported is the first one in the file.
    let mut read = Read {
        layer: reader.layer,
        errors: reader.errors,
    };
    super::sort_by_position(&mut read.errors, |e| (e.line, e.column));
    super::sort_by_position(&mut read.layer.warnings, |w| (w.line, w.column));
    read
}

struct Reader<'t> {
    lines: Lines<'t>,
    layer: Layer,
    errors: Vec<SettingsError>,
}

impl Reader<'_> {
    fn error(&mut self, kind: SettingsErrorKind, offset: usize, message: String) {
        let (line, column) = self.lines.position(offset);
        self.errors.push(SettingsError {
            kind,
            file: self.layer.file.clone(),
            line,
            column,
            message,
        });
    }

    /// An `env` entry no process could be given: an error in the end, or, in a project
    /// layer, a key for the trust gate to judge ([`Layer::unusable_env`]).
    fn unusable_env(&mut self, name: &str, offset: usize, message: String) {
        let (line, column) = self.lines.position(offset);
        self.layer.unusable_env.push(super::UnusableEnv {
            name: name.to_owned(),
            error: SettingsError {
                kind: SettingsErrorKind::InvalidValue,
                file: self.layer.file.clone(),
                line,
                column,
                message,
            },
        });
    }

    fn warn(&mut self, offset: usize, message: String) {
        let (line, column) = self.lines.position(offset);
        self.layer.warnings.push(Diagnostic {
            severity: Severity::Warning,
            file: self.layer.file.clone(),
            line,
            column,
            message,
        });
    }

    /// Records where `key` is written, for later messages about it.
    fn mark(&mut self, key: String, offset: usize) {
        let (line, column) = self.lines.position(offset);
        self.layer.places.push((key, super::Pos { line, column }));
    }

    fn wrong_type(&mut self, key: &str, want: &str, value: &Value<'_>) {
        let message = format!("{} must be {want}, found {}", q(key), describe(value));
        self.error(SettingsErrorKind::WrongType, value.range().start, message);
    }

    /// The object's properties with repeated keys removed: the last one wins, as in
    /// JavaScript, and each earlier one gets a warning.
    fn props<'o, 'a>(&mut self, object: &'o Object<'a>, scope: &str) -> Vec<&'o ObjectProp<'a>> {
        let mut kept: Vec<&ObjectProp<'_>> = Vec::with_capacity(object.properties.len());
        for prop in &object.properties {
            if let Some(i) = kept
                .iter()
                .position(|p| p.name.as_str() == prop.name.as_str())
            {
                let earlier = kept.remove(i);
                let (line, _) = self.lines.position(prop.range.start);
                let key = scoped(scope, earlier.name.as_str());
                self.warn(
                    earlier.range.start,
                    format!(
                        "{} is set again on line {line}; this value is ignored",
                        q(&key)
                    ),
                );
            }
            kept.push(prop);
        }
        kept
    }

    fn unknown(&mut self, prop: &ObjectProp<'_>, scope: &str, known: &[&str]) {
        let name = prop.name.as_str();
        let key = scoped(scope, name);
        let hint = match suggest(name, known) {
            Some(near) => format!(" (did you mean {}?)", q(near)),
            None => String::new(),
        };
        let within = if scope.is_empty() {
            String::new()
        } else {
            format!(" in {}", q(scope))
        };
        self.warn(
            prop.range.start,
            format!(
                "unknown key {}{hint}; known keys{within}: {}",
                q(&key),
                known.join(", ")
            ),
        );
    }

    fn string(&mut self, key: &str, value: &Value<'_>) -> Option<String> {
        match value {
            Value::StringLit(lit) => Some(lit.value.to_string()),
            Value::NumberLit(_)
            | Value::BooleanLit(_)
            | Value::Object(_)
            | Value::Array(_)
            | Value::NullKeyword(_) => {
                self.wrong_type(key, "a string", value);
                None
            }
        }
    }

    fn object<'v, 'a>(&mut self, key: &str, value: &'v Value<'a>) -> Option<&'v Object<'a>> {
        match value {
            Value::Object(object) => Some(object),
            Value::StringLit(_)
            | Value::NumberLit(_)
            | Value::BooleanLit(_)
            | Value::Array(_)
            | Value::NullKeyword(_) => {
                self.wrong_type(key, "an object", value);
                None
            }
        }
    }

    fn top(&mut self, object: &Object<'_>) {
        for prop in self.props(object, "") {
            let value = &prop.value;
            if matches!(prop.name.as_str(), "agent" | "permissions") {
                self.mark(prop.name.as_str().to_owned(), prop.range.start);
            }
            match prop.name.as_str() {
                "agent" => {
                    if let Some(agent) = self.string("agent", value) {
                        if agent.is_empty() {
                            self.error(
                                SettingsErrorKind::InvalidValue,
                                value.range().start,
                                "\"agent\" is empty; name an agent, e.g. \"claude\", or remove the key"
                                    .into(),
                            );
                        } else {
                            self.layer.agent = Some(agent);
                        }
                    }
                }
                "permissions" => {
                    if let Some(text) = self.string("permissions", value) {
                        match crate::policy::Permissions::from_name(&text) {
                            Some(p) => self.layer.permissions = Some(p),
                            None => self.error(
                                SettingsErrorKind::InvalidValue,
                                value.range().start,
                                format!(
                                    "\"permissions\" is {}; use \"read-only\", \"ask\", \"edit\" or \"full\"",
                                    q(&text)
                                ),
                            ),
                        }
                    }
                }
                "prompt" => {
                    if let Some(prompt) = self.object("prompt", value) {
                        self.prompt(prompt);
                    }
                }
                "env" => {
                    if let Some(env) = self.object("env", value) {
                        self.layer.env = self.env(env);
                    }
                }
                "channels" => {
                    if let Some(channels) = self.object("channels", value) {
                        self.layer.channels = self.channels(channels);
                    }
                }
                "plugins" => self.plugins(value),
                "ca_file" => {
                    if let Some(path) = self.string("ca_file", value) {
                        if path.trim().is_empty() {
                            self.error(
                                SettingsErrorKind::InvalidValue,
                                value.range().start,
                                "\"ca_file\" is empty; name a PEM file of CA certificates, or remove the key".into(),
                            );
                        } else {
                            self.mark("ca_file".to_owned(), prop.range.start);
                            self.layer.ca_file = Some(path);
                        }
                    }
                }
                "snapshots" => {
                    if let Some(object) = self.object("snapshots", value) {
                        self.mark("snapshots".to_owned(), prop.range.start);
                        self.snapshots(object);
                    }
                }
                // The browser bundle (its size budget) leaves the fence's values to the
                // executor's own check: the key is known there, its value unchecked.
                #[cfg(not(target_arch = "wasm32"))]
                "fence" => self.fence(value, prop.range.start),
                #[cfg(target_arch = "wasm32")]
                "fence" => {}
                #[cfg(not(target_arch = "wasm32"))]
                "ask" => {
                    if let Some(object) = self.object("ask", value) {
                        self.ask(object);
                    }
                }
                #[cfg(target_arch = "wasm32")]
                "ask" => {}
                #[cfg(not(target_arch = "wasm32"))]
                "notify" => {
                    if let Some(object) = self.object("notify", value) {
                        self.mark("notify".to_owned(), prop.range.start);
                        self.notify(object);
                    }
                }
                #[cfg(target_arch = "wasm32")]
                "notify" => {}
                _ => self.unknown(prop, "", &TOP_KEYS),
            }
        }
    }

    #[cfg(not(target_arch = "wasm32"))]
    /// `fence`: a mode (`"auto"`, `"required"`, `"off"`), or an object with `mode`,
    /// `network`, `write`, `read_deny` and `read`.
    fn fence(&mut self, value: &Value<'_>, key_at: usize) {
        const MODES: [&str; 3] = ["auto", "required", "off"];
        if let Value::StringLit(_) = value {
            self.mark("fence.mode".to_owned(), key_at);
            self.layer.fence.mode = self
                .pick("fence", value, &MODES)
                .map(|i| crate::fence::FenceMode::ALL[i]);
            return;
        }
        let Some(object) = self.object("fence", value) else {
            return;
        };
        for prop in self.props(object, "fence") {
            let name = prop.name.as_str();
            let key = scoped("fence", name);
            let value = &prop.value;
            self.mark(key.clone(), prop.range.start);
            match name {
                "mode" => {
                    self.layer.fence.mode = self
                        .pick(&key, value, &MODES)
                        .map(|i| crate::fence::FenceMode::ALL[i]);
                }
                "network" => {
                    self.layer.fence.network = self
                        .pick(&key, value, &["on", "off"])
                        .map(|i| crate::fence::Network::ALL[i]);
                }
                "write" => self.layer.fence.write = self.fence_paths(&key, value),
                "read_deny" => self.layer.fence.read_deny = self.fence_paths(&key, value),
                "read" => self.fence_read(&key, value),
                _ => self.unknown(prop, "fence", &FENCE_KEYS),
            }
        }
    }

    #[cfg(not(target_arch = "wasm32"))]
    /// `fence.read`: `"everywhere"`, `"directory"`, or a list of paths (the strict mode
    /// with these extra readable places).
    fn fence_read(&mut self, key: &str, value: &Value<'_>) {
        use crate::fence::ReadScope;
        match value {
            Value::Array(_) => {
                self.layer.fence.read = Some(ReadScope::Directory);
                self.layer.fence.read_allow = self.fence_paths(key, value);
            }
            Value::StringLit(lit) => match ReadScope::from_name(&lit.value) {
                Some(scope) => self.layer.fence.read = Some(scope),
                None => {
                    let names = ReadScope::ALL.map(ReadScope::as_str);
                    let near = match suggest(&lit.value, &names) {
                        Some(near) => format!(" (did you mean {}?)", q(near)),
                        None => String::new(),
                    };
                    self.error(
                        SettingsErrorKind::InvalidValue,
                        value.range().start,
                        format!(
                            "{} is {}{near}; use \"everywhere\" (the default), \"directory\" (the agent reads only its directory, the system's and the toolchains'), or a list of paths it may read besides",
                            q(key),
                            q(&lit.value)
                        ),
                    );
                }
            },
            Value::NumberLit(_)
            | Value::BooleanLit(_)
            | Value::Object(_)
            | Value::NullKeyword(_) => {
                self.wrong_type(
                    key,
                    "\"everywhere\", \"directory\" or an array of paths",
                    value,
                );
            }
        }
    }

    #[cfg(not(target_arch = "wasm32"))]
    /// Which of `names` a string value is; an error naming them otherwise.
    fn pick(&mut self, key: &str, value: &Value<'_>, names: &[&str]) -> Option<usize> {
        let text = self.string(key, value)?;
        let found = names.iter().position(|n| *n == text);
        if found.is_none() {
            let quoted: Vec<String> = names.iter().map(|n| q(n).to_string()).collect();
            self.error(
                SettingsErrorKind::InvalidValue,
                value.range().start,
                format!("{} is {}; use {}", q(key), q(&text), quoted.join(" or ")),
            );
        }
        found
    }

    #[cfg(not(target_arch = "wasm32"))]
    /// A list of absolute paths (or `~/…`), kept as written.
    fn fence_paths(&mut self, key: &str, value: &Value<'_>) -> Vec<String> {
        self.each_string(key, value, "an array of paths", |text| {
            if text.starts_with('/') || text.starts_with("~/") {
                Ok(text.to_owned())
            } else {
                Err(" is not an absolute path (/… or ~/…)".to_owned())
            }
        })
    }

    #[cfg(not(target_arch = "wasm32"))]
    /// The strings of an array at `key`, each kept as `check` makes it; an error at the
    /// item (`key[i]` followed by `check`'s words) where `check` refuses it, and at the value
    /// when it is not an array (`want` says what it should be).
    fn each_string(
        &mut self,
        key: &str,
        value: &Value<'_>,
        want: &str,
        check: impl Fn(&str) -> Result<String, String>,
    ) -> Vec<String> {
        let Value::Array(array) = value else {
            self.wrong_type(key, want, value);
            return Vec::new();
        };
        let mut out = Vec::new();
        for (i, item) in array.elements.iter().enumerate() {
            let item_key = format!("{key}[{i}]");
            let Some(text) = self.string(&item_key, item) else {
                continue;
            };
            match check(&text) {
                Ok(kept) => out.push(kept),
                Err(why) => self.error(
                    SettingsErrorKind::InvalidValue,
                    item.range().start,
                    format!("{}{why}", q(&item_key)),
                ),
            }
        }
        out
    }

    fn prompt(&mut self, object: &Object<'_>) {
        for prop in self.props(object, "prompt") {
            match prop.name.as_str() {
                "append" => {
                    self.mark("prompt.append".to_owned(), prop.range.start);
                    self.layer.prompt.append = self.string("prompt.append", &prop.value);
                }
                _ => self.unknown(prop, "prompt", &PROMPT_KEYS),
            }
        }
    }

    /// Environment variables, refusing names and values no process could be given.
    fn env(&mut self, object: &Object<'_>) -> BTreeMap<String, String> {
        let mut env = BTreeMap::new();
        for prop in self.props(object, "env") {
            let name = prop.name.as_str();
            let bad_name = if name.is_empty() {
                Some("an environment variable name is empty".to_owned())
            } else if name.contains('=') || name.contains('\0') {
                Some(format!(
                    "the environment variable name {} contains '=' or NUL, which no process environment allows",
                    q(name)
                ))
            } else {
                None
            };
            if let Some(message) = bad_name {
                self.unusable_env(name, prop.range.start, message);
                continue;
            }
            let key = scoped("env", name);
            let Some(value) = self.string(&key, &prop.value) else {
                continue;
            };
            if value.contains('\0') {
                let message = format!(
                    "{} contains a NUL character, which no process environment allows",
                    q(&key)
                );
                self.unusable_env(name, prop.value.range().start, message);
                continue;
            }
            self.mark(key, prop.range.start);
            env.insert(name.to_owned(), value);
        }
        env
    }

    /// Channel settings: any key, string values (secrets, tokens, URLs).
    /// `snapshots`: whole numbers, each at least 1.
    fn snapshots(&mut self, object: &Object<'_>) {
        for prop in self.props(object, "snapshots") {
            let name = prop.name.as_str();
            let slot = match name {
                "max_file_mb" => &mut self.layer.snapshots.max_file_mb,
                "keep" => &mut self.layer.snapshots.keep,
                "max_age_days" => &mut self.layer.snapshots.max_age_days,
                _ => {
                    self.unknown(prop, "snapshots", &SNAPSHOT_KEYS);
                    continue;
                }
            };
            match &prop.value {
                Value::NumberLit(n) => match n.value.parse::<u64>() {
                    Ok(v) if v > 0 => *slot = Some(v),
                    Ok(_) | Err(_) => {
                        let message = format!(
                            "{} must be a whole number of at least 1, found {}",
                            q(&scoped("snapshots", name)),
                            n.value
                        );
                        self.error(
                            SettingsErrorKind::InvalidValue,
                            prop.value.range().start,
                            message,
                        );
                    }
                },
                other @ (Value::StringLit(_)
                | Value::BooleanLit(_)
                | Value::Object(_)
                | Value::Array(_)
                | Value::NullKeyword(_)) => {
                    self.wrong_type(&scoped("snapshots", name), "a number", other);
                }
            }
        }
    }

    #[cfg(not(target_arch = "wasm32"))]
    /// `ask`: `allow` and `deny`, lists of rules (`"execute: cargo test"`), and
    /// `deadline_secs`, how long a request waits for a person.
    fn ask(&mut self, object: &Object<'_>) {
        for prop in self.props(object, "ask") {
            let name = prop.name.as_str();
            let key = scoped("ask", name);
            self.mark(key.clone(), prop.range.start);
            match name {
                "allow" => self.layer.ask.allow = self.rules(&key, &prop.value),
                "deny" => self.layer.ask.deny = self.rules(&key, &prop.value),
                "deadline_secs" => match &prop.value {
                    Value::NumberLit(n) => match n.value.parse::<u64>() {
                        Ok(v) if (1..=7 * 86_400).contains(&v) => {
                            self.layer.ask.deadline_secs = Some(v);
                        }
                        Ok(_) | Err(_) => self.error(
                            SettingsErrorKind::InvalidValue,
                            prop.value.range().start,
                            format!(
                                "{} must be a whole number of seconds from 1 to 604800 (a week), found {}",
                                q(&key),
                                n.value
                            ),
                        ),
                    },
                    other @ (Value::StringLit(_)
                    | Value::BooleanLit(_)
                    | Value::Object(_)
                    | Value::Array(_)
                    | Value::NullKeyword(_)) => {
                        self.wrong_type(&key, "a number of seconds", other);
                    }
                },
                _ => self.unknown(prop, "ask", &ASK_KEYS),
            }
        }
    }

    #[cfg(not(target_arch = "wasm32"))]
    /// A list of rules, each checked (`kind`, `kind: command prefix`, `kind: /path`).
    fn rules(&mut self, key: &str, value: &Value<'_>) -> Vec<String> {
        let want = "an array of rules (\"execute: cargo test\")";
        self.each_string(key, value, want, |text| {
            crate::approval::Rule::parse(text)
                .map(|rule| rule.to_string())
                .map_err(|why| format!(": {why}"))
        })
    }

    fn channels(&mut self, object: &Object<'_>) -> BTreeMap<String, String> {
        let mut channels = BTreeMap::new();
        for prop in self.props(object, "channels") {
            let name = prop.name.as_str();
            let key = scoped("channels", name);
            if let Some(value) = self.string(&key, &prop.value) {
                self.mark(key, prop.range.start);
                channels.insert(name.to_owned(), value);
            }
        }
        channels
    }

    fn plugins(&mut self, value: &Value<'_>) {
        let Value::Array(array) = value else {
            self.wrong_type("plugins", "an array", value);
            return;
        };
        let mut entries = Vec::with_capacity(array.elements.len());
        for (index, item) in array.elements.iter().enumerate() {
            if let Some(entry) = self.plugin(index, item) {
                self.mark(format!("plugins[{}]", entries.len()), item.range().start);
                entries.push(entry);
            }
        }
        self.layer.plugins = entries;
    }

    fn plugin(&mut self, index: usize, item: &Value<'_>) -> Option<PluginEntry> {
        let key = format!("plugins[{index}]");
        match item {
            Value::StringLit(lit) => {
                let located = self.locate(lit.range.start, &lit.value)?;
                let Some(id) = located.name.clone() else {
                    self.error(
                        SettingsErrorKind::InvalidPluginPath,
                        lit.range.start,
                        format!(
                            "the plugin path {} resolves to {}, which names no file or folder",
                            q(&lit.value),
                            located.path
                        ),
                    );
                    return None;
                };
                if let Err(why) = plugin::check_id(&id) {
                    self.error(
                        SettingsErrorKind::InvalidPluginPath,
                        lit.range.start,
                        format!(
                            "{why} (taken from {}); give an id with {{ \"plugin\": \"<id>\", \"path\": ... }}",
                            located.path
                        ),
                    );
                    return None;
                }
                Some(self.add(id, located))
            }
            Value::Object(object) => self.plugin_object(&key, object),
            Value::NumberLit(_)
            | Value::BooleanLit(_)
            | Value::Array(_)
            | Value::NullKeyword(_) => {
                self.wrong_type(
                    &key,
                    "a path or an object like { \"plugin\": \"<id>\", \"enabled\": false }",
                    item,
                );
                None
            }
        }
    }

    fn plugin_object(&mut self, key: &str, object: &Object<'_>) -> Option<PluginEntry> {
        let mut id = None;
        let mut path = None;
        let mut enabled = true;
        let mut ok = true;
        for prop in self.props(object, key) {
            let value = &prop.value;
            match prop.name.as_str() {
                "plugin" => match self.string(&scoped(key, "plugin"), value) {
                    Some(text) => id = Some((text, value.range().start)),
                    None => ok = false,
                },
                "path" => match self.string(&scoped(key, "path"), value) {
                    Some(text) => path = Some((text, value.range().start)),
                    None => ok = false,
                },
                "enabled" => match value {
                    Value::BooleanLit(lit) => enabled = lit.value,
                    Value::StringLit(_)
                    | Value::NumberLit(_)
                    | Value::Object(_)
                    | Value::Array(_)
                    | Value::NullKeyword(_) => {
                        self.wrong_type(&scoped(key, "enabled"), "true or false", value);
                        ok = false;
                    }
                },
                _ => self.unknown(prop, key, &PLUGIN_KEYS),
            }
        }
        // A key of the wrong type was reported already; nothing more is certain.
        if !ok {
            return None;
        }
        let Some((id, id_at)) = id else {
            self.error(
                SettingsErrorKind::InvalidValue,
                object.range.start,
                format!(
                    "{} has no \"plugin\" id; write {{ \"plugin\": \"<id>\", ... }}",
                    q(key)
                ),
            );
            return None;
        };
        if let Err(why) = plugin::check_id(&id) {
            self.error(SettingsErrorKind::InvalidValue, id_at, why);
            return None;
        }
        if !enabled {
            if let Some((_, path_at)) = path {
                self.warn(
                    path_at,
                    format!(
                        "{} is ignored because the plugin is disabled",
                        q(&scoped(key, "path"))
                    ),
                );
            }
            return Some(PluginEntry::Remove { id });
        }
        let Some((raw, path_at)) = path else {
            self.error(
                SettingsErrorKind::InvalidValue,
                object.range.start,
                format!(
                    "plugin {} has no \"path\"; give one, or set \"enabled\": false to remove it",
                    q(&id)
                ),
            );
            return None;
        };
        let located = self.locate(path_at, &raw)?;
        Some(self.add(id, located))
    }

    fn locate(&mut self, offset: usize, raw: &str) -> Option<Located> {
        match plugin::locate(&self.layer.dir, raw) {
            Ok(located) => Some(located),
            Err(message) => {
                self.error(SettingsErrorKind::InvalidPluginPath, offset, message);
                None
            }
        }
    }

    fn add(&self, id: String, located: Located) -> PluginEntry {
        PluginEntry::Add(Plugin {
            id,
            kind: located.kind,
            path: located.path,
            declared_in: self.layer.file.clone(),
        })
    }
}

/// `scope.name`, or `name` at the top level.
fn scoped(scope: &str, name: &str) -> String {
    if scope.is_empty() {
        name.to_owned()
    } else {
        format!("{scope}.{name}")
    }
}

/// "a string", "an object", …: the kind of a JSON value, for messages.
fn describe(value: &Value<'_>) -> &'static str {
    match value {
        Value::StringLit(_) => "a string",
        Value::NumberLit(_) => "a number",
        Value::BooleanLit(_) => "a boolean",
        Value::Object(_) => "an object",
        Value::Array(_) => "an array",
        Value::NullKeyword(_) => "null",
    }
}

fn lower_first(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// The known key closest to a misspelt one, if it is within two edits.
fn suggest<'k>(name: &str, known: &[&'k str]) -> Option<&'k str> {
    if name.chars().count() > 32 {
        return None;
    }
    known
        .iter()
        .map(|k| (edit_distance(name, k), *k))
        .filter(|(d, _)| *d <= 2)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if ca == *cb {
                diagonal
            } else {
                1 + diagonal.min(above).min(row[j])
            };
            diagonal = above;
        }
    }
    row[b.len()]
}

/// Byte offset → 1-based line and character column, counting `\n`, `\r\n` and a lone
/// `\r` as one line break each (as jsonc-parser does).
#[derive(Debug)]
struct Lines<'t> {
    text: &'t str,
    starts: Vec<usize>,
}

impl<'t> Lines<'t> {
    fn new(text: &'t str) -> Lines<'t> {
        let bytes = text.as_bytes();
        let mut starts = vec![0];
        for (i, b) in bytes.iter().enumerate() {
            let ends_line = *b == b'\n' || (*b == b'\r' && bytes.get(i + 1) != Some(&b'\n'));
            if ends_line {
                starts.push(i + 1);
            }
        }
        Lines { text, starts }
    }

    fn position(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let line = self.starts.partition_point(|s| *s <= offset).max(1);
        let start = self.starts[line - 1];
        let column = match self.text.get(start..offset) {
            Some(prefix) => prefix.chars().count(),
            None => offset - start,
        };
        (line, column + 1)
    }
}

#[cfg(test)]
#[path = "parse_tests.rs"]
mod tests;
