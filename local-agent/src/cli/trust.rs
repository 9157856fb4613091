//! `berth trust PATH | --revoke PATH | list`, and the trust behind `session link
//! --trust`: the user's own word, written from this shell into Berth's state and
//! nowhere else. No server route takes part, so neither the web listener, a channel
//! nor a daemon's server can grant it.

use super::error::CliError;
use super::render;
use super::setup::absolute;
use super::{TrustArgs, TrustCmd};
use berth_core::display::display;
use berth_core::settings::trust::{NEVER_FROM_PROJECT, ProjectLayerReport};
use berth_core::{ErrorCode, LocalPath, Platform, Refusal};
use berth_local_agent::ExecutorConfig;
use berth_local_agent::settings::trust::{
    EntryState, TrustChange, TrustError, TrustStore, describe,
};
use serde::Serialize;
use serde_json::json;
use std::path::PathBuf;

/// A directory just trusted, and what that changes.
#[derive(Debug, Serialize)]
pub struct Trusted {
    /// The canonical path.
    pub dir: String,
    pub display: String,
    /// `added`, `unchanged` or `renewed` (the path held another directory before).
    pub change: &'static str,
    /// What the project layer of a session bound there does now.
    pub project_layer: Option<ProjectLayerReport>,
    /// Said when the layer sessions bound there read is not this directory's own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

fn config(home: Option<PathBuf>) -> Result<ExecutorConfig, CliError> {
    ExecutorConfig::from_env(home)
        .map_err(|e| CliError::new(e.to_string(), "pass --home DIR or set BERTH_HOME"))
}

fn refusal(r: &Refusal) -> CliError {
    CliError {
        code: Some(r.code),
        ..CliError::new(r.message.clone(), r.hint.clone())
    }
}

fn store_error(e: &TrustError) -> CliError {
    CliError {
        code: Some(ErrorCode::TrustList),
        ..CliError::new(e.to_string(), e.hint())
    }
}

pub fn run(home: Option<PathBuf>, args: TrustArgs) -> Result<u8, CliError> {
    let cfg = config(home)?;
    match (args.command, args.path) {
        (Some(TrustCmd::List { json }), _) => list(&cfg, json || args.json),
        (None, Some(path)) if args.revoke => revoke(&cfg, &absolute(&path)?, args.json),
        (None, Some(path)) => {
            let t = trust_dir(&cfg, &absolute(&path)?)?;
            if args.json {
                super::render::print_json(&json!(t));
            } else {
                print_trusted(&t);
            }
            Ok(0)
        }
        (None, None) => Err(CliError::usage(
            "berth trust needs a directory",
            "berth trust PATH, berth trust --revoke PATH or berth trust list",
        )),
    }
}

/// Validates `input` as a binding would and trusts the directory.
pub fn trust_dir(cfg: &ExecutorConfig, input: &str) -> Result<Trusted, CliError> {
    let ctx = cfg.context();
    let pinned =
        berth_local_agent::dir::validate::validate(&ctx, input).map_err(|r| refusal(&r))?;
    let store = TrustStore::new(&cfg.berth_home);
    let change = store
        .trust(pinned.canonical().as_str(), pinned.identity())
        .map_err(|e| store_error(&e))?;
    let dir = pinned.canonical().as_str().to_owned();
    let project_layer = berth_local_agent::project_layer(cfg, &dir)
        .map_err(|e| CliError::new(e, "fix the settings file"))?;
    let note = project_layer.as_ref().and_then(|report| {
        (report.dir != pinned.display()).then(|| {
            format!(
                "sessions bound to {} read {}, which is {}'s: this trust does not cover it ({})",
                pinned.display(),
                report.file,
                report.dir,
                berth_core::settings::trust::trust_command(&report.dir)
            )
        })
    });
    Ok(Trusted {
        dir,
        display: pinned.display().to_owned(),
        change: match change {
            TrustChange::Added => "added",
            TrustChange::Unchanged => "unchanged",
            TrustChange::Renewed => "renewed",
        },
        project_layer,
        note,
    })
}

/// `session link … --trust`: trusts the directory whose project layer a session bound
/// to `bound` (canonical) reads, or `bound` itself when it has none yet.
pub fn trust_binding(cfg: &ExecutorConfig, bound: &str) -> Result<Trusted, CliError> {
    let ctx = cfg.context();
    let root = LocalPath::parse(Platform::native(), bound)
        .ok()
        .and_then(|b| berth_local_agent::settings::project_layer_file(&ctx, &b))
        .and_then(|file| file.parent()?.parent())
        .map_or_else(|| bound.to_owned(), |root| root.as_str().to_owned());
    trust_dir(cfg, &root)
}

pub fn print_trusted(t: &Trusted) {
    match t.change {
        "unchanged" => println!("{} was already trusted", render::escape(&t.display)),
        "renewed" => println!(
            "trusted {} (the directory there now; the one trusted before was replaced)",
            render::escape(&t.display)
        ),
        _ => println!("trusted {}", render::escape(&t.display)),
    }
    match &t.project_layer {
        Some(report) => render::project_layer(report, true),
        None => println!(
            "it has no project layer (.berth/settings.jsonc) yet; one added later applies in full, except {}",
            NEVER_FROM_PROJECT.join(", ")
        ),
    }
    if let Some(note) = &t.note {
        println!("note: {note}");
    }
}

fn revoke(cfg: &ExecutorConfig, input: &str, json: bool) -> Result<u8, CliError> {
    let ctx = cfg.context();
    let store = TrustStore::new(&cfg.berth_home);
    // The directory may be gone: try the canonical path, then the path as given.
    let mut names = Vec::new();
    if let Some(real) = std::fs::canonicalize(input)
        .ok()
        .and_then(|p| p.into_os_string().into_string().ok())
    {
        names.push(real);
    }
    if let Ok(lexical) = LocalPath::parse_with_home(Platform::native(), input, ctx.home.as_ref()) {
        names.push(lexical.as_str().to_owned());
    }
    for name in &names {
        if let Some(entry) = store.revoke(name).map_err(|e| store_error(&e))? {
            let shown = LocalPath::parse(Platform::native(), &entry.dir)
                .map_or_else(|_| entry.dir.clone(), |p| display(&ctx, &p));
            if json {
                super::render::print_json(
                    &json!({"dir": entry.dir, "display": shown, "revoked": true}),
                );
            } else {
                println!(
                    "{} is no longer trusted: its project layer's env and wider permissions are ignored from the next message on",
                    render::escape(&shown)
                );
            }
            return Ok(0);
        }
    }
    let shown = names.first().map_or_else(
        || input.to_owned(),
        |n| {
            LocalPath::parse(Platform::native(), n)
                .map_or_else(|_| n.clone(), |p| display(&ctx, &p))
        },
    );
    Err(CliError {
        code: Some(ErrorCode::NotTrusted),
        ..CliError::new(
            format!("{shown} is not trusted"),
            ErrorCode::NotTrusted.hint().unwrap_or_default(),
        )
    })
}

fn list(cfg: &ExecutorConfig, json: bool) -> Result<u8, CliError> {
    let ctx = cfg.context();
    let store = TrustStore::new(&cfg.berth_home);
    let entries = store.entries().map_err(|e| store_error(&e))?;
    let rows: Vec<(
        String,
        EntryState,
        &berth_local_agent::settings::trust::TrustEntry,
    )> = entries
        .iter()
        .map(|e| {
            let shown = LocalPath::parse(Platform::native(), &e.dir)
                .map_or_else(|_| e.dir.clone(), |p| display(&ctx, &p));
            (shown, e.state(), e)
        })
        .collect();
    if json {
        let out: Vec<_> = rows
            .iter()
            .map(|(shown, state, e)| {
                json!({"dir": e.dir, "display": shown, "state": state, "trusted_at": e.trusted_at})
            })
            .collect();
        super::render::print_json(&json!(out));
        return Ok(0);
    }
    if rows.is_empty() {
        println!(
            "no directory is trusted; project layers may add prompt text and plugins and narrow permissions, nothing more"
        );
        println!(
            "hint: berth trust PATH trusts one (berth check PATH shows what its project layer would do)"
        );
        return Ok(0);
    }
    let mut table = vec![vec![
        "DIRECTORY".to_owned(),
        "STATE".to_owned(),
        "TRUSTED AT".to_owned(),
    ]];
    for (shown, state, e) in &rows {
        table.push(vec![
            shown.clone(),
            state.as_str().to_owned(),
            e.trusted_at.clone(),
        ]);
    }
    render::table(table);
    for (shown, state, _) in &rows {
        if *state != EntryState::Current {
            println!("note: {}", render::escape_lines(&describe(shown, *state)));
        }
    }
    if rows.iter().any(|(_, s, _)| *s == EntryState::Replaced) {
        println!(
            "hint: look at a replaced directory's .berth/settings.jsonc, then berth trust it again, or berth trust --revoke it"
        );
    }
    Ok(0)
}
