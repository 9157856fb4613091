//! The browser's face of `berth-core`, built without `local-binding`.
//!
//! Every export takes and returns plain strings (JSON where structured): it keeps the
//! bundle small and the JavaScript side trivial. Nothing here can express a binding
//! write; the preview works on the privacy-stripped read view.

use berth_core::api::CheckReport;
use berth_core::binding::{BindingView, MachineId};
use berth_core::display::display;
use berth_core::resolve::{Origin, ProjectDir, Request, Resolution, Runtime, resolve};
use berth_core::rules::check_str;
use berth_core::{Context, LocalPath, Platform};
use serde::{Deserialize, Serialize};
use wasm_bindgen::prelude::*;

fn context(platform: &str, home: &str) -> Result<Context, String> {
    let platform = Platform::from_name(platform)
        .ok_or_else(|| format!("unknown platform {platform:?}; use linux, macos or windows"))?;
    let mut ctx = Context::new(platform);
    if !home.is_empty() {
        let home = LocalPath::parse(platform, home).map_err(|r| r.message)?;
        ctx = ctx.with_home(home);
    }
    Ok(ctx)
}

fn json<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|e| format!("{{\"error\":{:?}}}", e.to_string()))
}

fn bad_input(message: String) -> String {
    json(&serde_json::json!({ "error": { "code": "bad_request", "message": message } }))
}

/// Checks a path lexically for `platform` (`linux`, `macos`, `windows`), with the
/// user's `home` when known (empty string if not). Returns the JSON of a
/// `CheckReport`: `{ok, code, message, canonical, display, hint}`.
#[wasm_bindgen]
pub fn check_path(platform: &str, input: &str, home: &str) -> String {
    let ctx = match context(platform, home) {
        Ok(ctx) => ctx,
        Err(message) => return bad_input(message),
    };
    let report = match check_str(&ctx, input) {
        Ok(path) => CheckReport::accepted(path.as_str().to_owned(), display(&ctx, &path)),
        Err(refusal) => {
            let parsed = LocalPath::parse_with_home(ctx.platform, input, ctx.home.as_ref()).ok();
            CheckReport::refused(
                &refusal,
                parsed.as_ref().map(|p| p.as_str().to_owned()),
                parsed.as_ref().map(|p| display(&ctx, p)),
            )
        }
    };
    json(&report)
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

/// The preview's input: the session's read view and what is known of the machines.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PreviewInput {
    origin: Origin,
    #[serde(default = "local")]
    runtime: Runtime,
    #[serde(default)]
    binding: Option<BindingView>,
    #[serde(default)]
    project_dirs: Vec<ProjectDir<String>>,
    claimer: MachineId,
    #[serde(default)]
    online: Vec<MachineId>,
}

fn local() -> Runtime {
    Runtime::Local
}

#[derive(Debug, Serialize)]
struct PreviewOutput {
    resolution: Resolution<String>,
    /// The reason, in words.
    message: String,
}

/// Where the next task of a session would run, and why: resolution on the read view.
/// Input and output are JSON; malformed input yields `{"error": {...}}`.
#[wasm_bindgen]
pub fn preview(input: &str) -> String {
    let input: PreviewInput = match serde_json::from_str(input) {
        Ok(v) => v,
        Err(e) => return bad_input(format!("the preview input is not valid: {e}")),
    };
    let resolution = resolve(&Request {
        origin: input.origin,
        runtime: input.runtime,
        binding: input.binding.as_ref(),
        project_dirs: &input.project_dirs,
        claimer: &input.claimer,
        online: &input.online,
    });
    let message = resolution.why().to_string();
    json(&PreviewOutput {
        resolution,
        message,
    })
}

/// Checks a settings text as the file `file` in directory `dir` of a `platform`
/// machine (the directory resolves relative plugin paths). Returns the JSON list of
/// diagnostics (`severity`, `file`, `line`, `column`, `message`), empty when clean.
#[wasm_bindgen]
pub fn check_settings(platform: &str, dir: &str, file: &str, text: &str) -> String {
    let Some(platform) = Platform::from_name(platform) else {
        return bad_input(format!("unknown platform {platform:?}; use linux, macos or windows"));
    };
    match LocalPath::parse(platform, dir) {
        Ok(dir) => json(&berth_core::settings::check_text(file, &dir, text)),
        Err(r) => bad_input(format!("the settings directory is not valid: {}", r.message)),
    }
}

/// Whether this build carries local bindings (always `false` for the browser bundle).
#[wasm_bindgen]
pub fn has_local_binding() -> bool {
    berth_core::LOCAL_BINDING
}
