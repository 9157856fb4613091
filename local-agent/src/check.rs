//! `berth check PATH`: full native validation without a server.

use crate::config::ExecutorConfig;
use crate::dir::validate::validate;
use crate::settings;
use crate::settings::trust::TrustStore;
use berth_core::api::CheckReport;
use berth_core::display::display;
use berth_core::settings::trust::ProjectLayerReport;
use berth_core::{LocalPath, rules};
use std::path::Path;

/// Validates `input` as a binding would, with the real environment (`BERTH_HOME`,
/// `HOME`, …). A relative `input` is resolved against `cwd`; `~` is expanded.
pub fn check(input: &str, cwd: &Path) -> CheckReport {
    match ExecutorConfig::from_env(None) {
        Ok(cfg) => check_with(&cfg, input, cwd),
        Err(e) => CheckReport {
            ok: false,
            code: None,
            message: e.to_string(),
            canonical: None,
            display: None,
            hint: Some("fix the environment variable and try again".to_owned()),
            project_layer: None,
        },
    }
}

/// [`check`] with an explicit configuration (the CLI's `--home`, tests).
pub fn check_with(cfg: &ExecutorConfig, input: &str, cwd: &Path) -> CheckReport {
    let ctx = cfg.context();
    let absolute = if input.is_empty() || input.starts_with('/') || input.starts_with('~') {
        input.to_owned()
    } else {
        cwd.join(input).to_string_lossy().into_owned()
    };
    match validate(&ctx, &absolute) {
        Ok(pinned) => {
            let mut report = CheckReport::accepted(
                pinned.canonical().as_str().to_owned(),
                pinned.display().to_owned(),
            );
            // What the project layer would do in a run bound here.
            let trust = TrustStore::new(&cfg.berth_home);
            match settings::load(&ctx, &cfg.config_dir, Some(pinned.canonical()), &trust) {
                Ok(loaded) => report.project_layer = loaded.project,
                Err(e) => {
                    report.message.push_str(&format!(
                        "; but its settings cannot be used, and every run would fail: {e}"
                    ));
                    report.hint = Some("fix the settings file".to_owned());
                }
            }
            report
        }
        Err(r) => {
            let lexical: Option<LocalPath> = rules::check_str(&ctx, &absolute).ok().or_else(|| {
                LocalPath::parse_with_home(ctx.platform, &absolute, ctx.home.as_ref()).ok()
            });
            let shown = lexical.as_ref().map(|p| display(&ctx, p));
            CheckReport::refused(&r, lexical.map(|p| p.as_str().to_owned()), shown)
        }
    }
}

/// What the project layer of a session bound to `dir` (canonical) does, under the
/// trust recorded now: `Ok(None)` when the directory has no project layer.
pub fn project_layer(
    cfg: &ExecutorConfig,
    dir: &str,
) -> Result<Option<ProjectLayerReport>, String> {
    let bound = LocalPath::parse(berth_core::Platform::native(), dir).map_err(|r| r.message)?;
    let trust = TrustStore::new(&cfg.berth_home);
    settings::load(&cfg.context(), &cfg.config_dir, Some(&bound), &trust)
        .map(|loaded| loaded.project)
        .map_err(|e| e.to_string())
}
