//! `berth settings show [--session ID] [--json]` and `berth settings check [FILE]`:
//! which settings a session's next message uses and where each value comes from, and a
//! file's problems with their `line:column`. Read here, in the user's shell: the files
//! are on this machine.

use super::SettingsCmd;
use super::client::{Client, encode};
use super::error::CliError;
use super::render::print_json;
use super::render::{escape, inert, project_layer_lines};
use super::setup::runtime;
use berth_core::display::display;
use berth_core::settings::{Severity, check_text};
use berth_core::{LocalPath, Platform};
use berth_local_agent::ExecutorConfig;
use berth_local_agent::settings::input::{self, Limit, MAX_SETTINGS};
use berth_local_agent::settings::trust::TrustStore;
use berth_local_agent::settings::{Explained, explain};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

pub fn run(home: Option<PathBuf>, cmd: SettingsCmd) -> Result<u8, CliError> {
    let cfg = ExecutorConfig::from_env(home)
        .map_err(|e| CliError::new(e.to_string(), "pass --home DIR or set BERTH_HOME"))?;
    match cmd {
        SettingsCmd::Show { session, json } => show(&cfg, session.as_deref(), json),
        SettingsCmd::Check { file, json } => check(&cfg, file.as_deref(), json),
    }
}

/// The directory whose project layer applies: the session's binding on this machine
/// (`None` for an unbound session), else the current directory.
fn bound_dir(
    cfg: &ExecutorConfig,
    session: Option<&str>,
) -> Result<(Option<LocalPath>, String), CliError> {
    let Some(id) = session else {
        let cwd = std::env::current_dir()
            .and_then(std::fs::canonicalize)
            .map_err(|e| {
                CliError::new(
                    format!("cannot read the current directory: {e}"),
                    "cd into an existing directory",
                )
            })?;
        let dir = cwd
            .to_str()
            .and_then(|s| LocalPath::parse(Platform::native(), s).ok())
            .ok_or_else(|| {
                CliError::new(
                    "the current directory's path is not valid UTF-8",
                    "cd elsewhere",
                )
            })?;
        let shown = display(&cfg.context(), &dir);
        return Ok((
            Some(dir),
            format!("a session bound to {shown} (the current directory)"),
        ));
    };
    let client = Client::new(&cfg.berth_home);
    let s = runtime()?.block_on(client.get(&format!("/api/v1/sessions/{}", encode(id))))?;
    session_dir(&client.machine(), &s)
}

/// The directory whose project layer applies to a session (`None` when unbound), and
/// the session in words; refused when it is bound on another machine.
fn session_dir(here: &str, s: &Value) -> Result<(Option<LocalPath>, String), CliError> {
    let short = s["id"]
        .as_str()
        .unwrap_or("?")
        .chars()
        .take(8)
        .collect::<String>();
    let b = &s["binding"];
    if b.is_null() {
        return Ok((
            None,
            format!("session {short} (not bound: your user settings alone)"),
        ));
    }
    if b["daemon"].as_str() != Some(here) {
        return Err(CliError::new(
            format!(
                "session {short} is bound on machine {}, whose files this machine cannot read",
                b["daemon_name"].as_str().unwrap_or("?")
            ),
            "run berth settings show on that machine",
        ));
    }
    let dir = b["dir"]
        .as_str()
        .and_then(|d| LocalPath::parse(Platform::native(), d).ok())
        .ok_or_else(|| {
            CliError::new(
                "the session's binding has no usable directory",
                "link it again",
            )
        })?;
    Ok((
        Some(dir),
        format!("session {short} ({})", b["display"].as_str().unwrap_or("")),
    ))
}

/// `/settings` in `berth chat`: [`show`]'s text for a session document already read.
pub(super) fn session_lines(
    cfg: &ExecutorConfig,
    here: &str,
    session: &Value,
) -> Result<Vec<String>, CliError> {
    let (bound, what) = session_dir(here, session)?;
    let explained = explained(cfg, bound.as_ref())?;
    Ok(explained_lines(&what, &explained))
}

fn explained(cfg: &ExecutorConfig, bound: Option<&LocalPath>) -> Result<Explained, CliError> {
    let trust = TrustStore::new(&cfg.berth_home);
    explain(&cfg.context(), &cfg.config_dir, bound, &trust).map_err(|e| CliError {
        code: Some(e.code()),
        ..CliError::new(e.to_string(), e.hint())
    })
}

fn show(cfg: &ExecutorConfig, session: Option<&str>, json: bool) -> Result<u8, CliError> {
    let (bound, what) = bound_dir(cfg, session)?;
    let explained = explained(cfg, bound.as_ref())?;
    if json {
        let defaults: Vec<Value> = defaults(&explained)
            .map(|(key, value)| json!({"key": key, "value": value}))
            .collect();
        print_json(&json!({"for": what, "settings": explained, "defaults": defaults}));
    } else {
        for line in explained_lines(&what, &explained) {
            println!("{line}");
        }
    }
    Ok(0)
}

/// What Berth falls back to for a key no settings file sets, as people read it.
const DEFAULTS: [(&str, &str); 7] = [
    (
        "agent",
        "the only agent registered, else the server's default",
    ),
    (
        "permissions",
        "the agent's own, as registered (berth agent list)",
    ),
    (
        "fence.mode",
        "auto: fenced where the kernel can, said where not",
    ),
    ("fence.network", "on"),
    (
        "fence.read",
        "everywhere but credentials, histories and profiles",
    ),
    (
        "snapshots",
        "files up to 10 MiB, 200 tasks a directory, 30 days",
    ),
    ("ca_file", "the system's roots ($BERTH_CA_FILE)"),
];

/// The [`DEFAULTS`] in force: those of keys no file set.
fn defaults(e: &Explained) -> impl Iterator<Item = (&'static str, &'static str)> + '_ {
    DEFAULTS
        .into_iter()
        .filter(|(key, _)| !e.values.iter().any(|v| v.key == *key))
}

fn explained_lines(what: &str, e: &Explained) -> Vec<String> {
    let mut out = vec![format!("settings the next message of {} uses", inert(what))];
    if e.values.is_empty() {
        out.push(String::from("  (none set: Berth's defaults)"));
    }
    let width = e
        .values
        .iter()
        .map(|v| v.key.len())
        .max()
        .unwrap_or(0)
        .min(28);
    for v in &e.values {
        let value = match v.value.as_str() {
            Some(s) => {
                let one: String = s.replace('\n', "\\n").chars().take(60).collect();
                format!("{one:?}")
            }
            None => v.value.to_string(),
        };
        out.push(format!(
            "  {:<width$}  {}   {}:{}:{}",
            v.key,
            inert(&value),
            inert(&v.file),
            v.line,
            v.column
        ));
    }
    for r in &e.removed {
        out.push(format!(
            "  {:<width$}  removed by {}:{}:{}",
            r.key,
            inert(&r.file),
            r.line,
            r.column
        ));
    }
    if let Some(report) = &e.project_layer {
        out.extend(project_layer_lines(report, false));
    }
    let defaults: Vec<_> = defaults(e).collect();
    if !defaults.is_empty() {
        out.push(String::from("defaults (set in no file):"));
        let width = defaults.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
        for (key, value) in defaults {
            out.push(format!("  {key:<width$}  {value}"));
        }
    }
    for w in &e.warnings {
        out.push(format!("warning: {}", inert(w)));
    }
    out
}

fn check(cfg: &ExecutorConfig, file: Option<&Path>, json: bool) -> Result<u8, CliError> {
    let path = match file {
        Some(f) if f.is_absolute() => f.to_owned(),
        Some(f) => std::env::current_dir()
            .map_err(|e| {
                CliError::new(
                    format!("cannot read the current directory: {e}"),
                    "give an absolute path",
                )
            })?
            .join(f),
        None => cfg.config_dir.join(berth_core::settings::SETTINGS_FILE),
    };
    let ctx = cfg.context();
    let text_path = path
        .to_str()
        .ok_or_else(|| CliError::usage("the path is not valid UTF-8", "rename it"))?;
    let local = LocalPath::parse(Platform::native(), text_path)
        .map_err(|r| CliError::usage(r.message.clone(), r.hint))?;
    let shown = display(&ctx, &local);
    // No user settings is not a problem: Berth runs on its defaults.
    if file.is_none() && !path.exists() && std::fs::symlink_metadata(&path).is_err() {
        if json {
            print_json(&json!({
                "file": shown, "ok": true, "exists": false, "diagnostics": [],
            }));
        } else {
            println!(
                "ok: no user settings ({} does not exist): Berth uses its defaults; \
                 berth settings show lists them",
                escape(&shown)
            );
        }
        return Ok(0);
    }
    // Bounded like every settings read: `settings check /dev/zero` answers at once.
    let text = input::read(&path, &shown, Limit::Whole(MAX_SETTINGS))
        .and_then(|read| read.into_text(&shown))
        .map_err(|e| {
            let hint = if file.is_none() && e.is_missing() {
                "you have no user settings yet; create the file, or name one: berth settings check FILE"
            } else if e.is_missing() {
                "check the path"
            } else {
                e.hint()
            };
            CliError {
                code: Some(e.code()),
                ..CliError::new(e.to_string(), hint)
            }
        })?;
    let dir = local.parent().unwrap_or_else(|| local.clone());
    let diagnostics = check_text(&shown, &dir, &text);
    let errors = diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .count();
    if json {
        print_json(&json!({"file": shown, "ok": errors == 0, "diagnostics": diagnostics}));
    } else {
        for d in &diagnostics {
            let level = match d.severity {
                Severity::Error => "error",
                Severity::Warning => "warning",
            };
            println!(
                "{}:{}:{}: {level}: {}",
                escape(&d.file),
                d.line,
                d.column,
                inert(&d.message)
            );
        }
        if diagnostics.is_empty() {
            println!("ok: {} has no problems", escape(&shown));
        } else {
            let warnings = diagnostics.len() - errors;
            println!(
                "{}: {errors} error(s), {warnings} warning(s)",
                escape(&shown)
            );
        }
    }
    Ok(if errors == 0 { 0 } else { 1 })
}
