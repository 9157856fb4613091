//! The browser's face of `berth-core`, built without `local-binding`.
//!
//! Every export takes and returns plain strings (JSON where structured): it keeps the
//! bundle small and the JavaScript side trivial. Nothing here can express a binding
//! write; the preview works on the privacy-stripped read view.

mod input;
mod json;

use berth_core::display::display;
use berth_core::resolve::{Reason, Request, Resolution, resolve};
use berth_core::rules::check_str;
use berth_core::settings::{Diagnostic, Severity};
use berth_core::{Context, LocalPath, Platform};
use json::{Obj, bad_request};
use wasm_bindgen::prelude::*;

fn platform(name: &str) -> Result<Platform, String> {
    Platform::from_name(name)
        .ok_or_else(|| format!("unknown platform {name:?}; use linux, macos or windows"))
}

fn context(platform_name: &str, home: &str) -> Result<Context, String> {
    let platform = platform(platform_name)?;
    let mut ctx = Context::new(platform);
    if !home.is_empty() {
        let home = LocalPath::parse(platform, home).map_err(|r| r.message)?;
        ctx = ctx.with_home(home);
    }
    Ok(ctx)
}

/// Checks a path lexically for `platform` (`linux`, `macos`, `windows`), with the
/// user's `home` when known (empty string if not). Returns the JSON of a
/// `CheckReport`: `{ok, code, message, canonical, display, hint}`.
#[wasm_bindgen]
pub fn check_path(platform: &str, input: &str, home: &str) -> String {
    let ctx = match context(platform, home) {
        Ok(ctx) => ctx,
        Err(message) => return bad_request(&message),
    };
    match check_str(&ctx, input) {
        Ok(path) => {
            let shown = display(&ctx, &path);
            Obj::new()
                .bool("ok", true)
                .raw("code", "null")
                .str("message", &format!("{shown} can be bound"))
                .str("canonical", path.as_str())
                .str("display", &shown)
                .end()
        }
        Err(refusal) => {
            let parsed = LocalPath::parse_with_home(ctx.platform, input, ctx.home.as_ref()).ok();
            Obj::new()
                .bool("ok", false)
                .str("code", refusal.code.as_str())
                .str("message", &refusal.message)
                .opt_str("canonical", parsed.as_ref().map(LocalPath::as_str))
                .opt_str(
                    "display",
                    parsed.as_ref().map(|p| display(&ctx, p)).as_deref(),
                )
                .str("hint", &refusal.hint)
                .end()
        }
    }
}

/// The privacy-stripped form of a path, or the input unchanged if it is not a valid
/// absolute path.
#[wasm_bindgen]
pub fn display_path(platform: &str, input: &str, home: &str) -> String {
    let Ok(ctx) = context(platform, home) else {
        return input.to_owned();
    };
    match LocalPath::parse_with_home(ctx.platform, input, ctx.home.as_ref()) {
        Ok(path) => display(&ctx, &path),
        Err(_) => input.to_owned(),
    }
}

fn reason_json(why: &Reason) -> String {
    let o = Obj::new().str("reason", why.code());
    match why {
        Reason::OriginNeverLocal { origin } | Reason::BoundOriginCannotBind { origin } => {
            o.str("origin", origin.as_str())
        }
        Reason::BoundMachineOffline { machine } | Reason::BoundElsewhere { machine } => {
            o.str("machine", machine.as_str())
        }
        Reason::CloudRuntime
        | Reason::BoundInCloud
        | Reason::SessionBinding
        | Reason::ProjectDirectory
        | Reason::NoDirectory => o,
    }
    .end()
}

fn resolution_json(r: &Resolution<String>) -> String {
    let o = Obj::new().str("kind", r.kind());
    let o = match r {
        Resolution::InPlace { dir, machine, .. } | Resolution::Worktree { dir, machine, .. } => {
            o.str("dir", dir).str("machine", machine.as_str())
        }
        Resolution::Wait { machine, code, .. } => o
            .str("machine", machine.as_str())
            .str("code", code.as_str()),
        Resolution::Refuse { code, .. } => o.str("code", code.as_str()),
        Resolution::Scratch { .. } => o,
    };
    o.raw("why", &reason_json(r.why())).end()
}

/// Where the next task of a session would run, and why: resolution on the read view.
///
/// Input: `{origin, runtime?, binding?: {display, daemon, daemon_name, mode, state},
/// project_dirs?: [{machine, dir, mode}], claimer, online?: [id]}`. Output:
/// `{resolution: {kind, dir?, machine?, code?, why: {reason, ...}}, message}`, or
/// `{"error": {...}}` for malformed input.
#[wasm_bindgen]
pub fn preview(input: &str) -> String {
    let parsed = json::parse(input).and_then(input::preview_input);
    let input = match parsed {
        Ok(v) => v,
        Err(e) => return bad_request(&format!("the preview input is not valid: {e}")),
    };
    let resolution = resolve(&Request {
        origin: input.origin,
        runtime: input.runtime,
        binding: input.binding.as_ref(),
        project_dirs: &input.project_dirs,
        claimer: Some(&input.claimer),
        online: &input.online,
    });
    Obj::new()
        .raw("resolution", &resolution_json(&resolution))
        .str("message", &resolution.why().to_string())
        .end()
}

fn diagnostic_json(d: &Diagnostic) -> String {
    let severity = match d.severity {
        Severity::Error => "error",
        Severity::Warning => "warning",
    };
    Obj::new()
        .str("severity", severity)
        .str("file", &d.file)
        .num("line", d.line)
        .num("column", d.column)
        .str("message", &d.message)
        .end()
}

/// Checks a settings text as the file `file` in directory `dir` of a `platform`
/// machine (the directory resolves relative plugin paths). Returns the JSON list of
/// diagnostics (`severity`, `file`, `line`, `column`, `message`), empty when clean.
#[wasm_bindgen]
pub fn check_settings(platform_name: &str, dir: &str, file: &str, text: &str) -> String {
    let dir = match platform(platform_name)
        .and_then(|p| LocalPath::parse(p, dir).map_err(|r| r.message))
    {
        Ok(dir) => dir,
        Err(e) => return bad_request(&format!("the settings directory is not valid: {e}")),
    };
    json::array(
        berth_core::settings::check_text(file, &dir, text)
            .iter()
            .map(diagnostic_json),
    )
}

/// Whether this build carries local bindings (always `false` for the browser bundle).
#[wasm_bindgen]
pub fn has_local_binding() -> bool {
    berth_core::LOCAL_BINDING
}
