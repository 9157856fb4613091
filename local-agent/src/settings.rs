//! Reading the settings in force for one exchange.
//!
//! Read afresh at every task: the user layer (`settings.jsonc` in the config
//! directory), then the project layer (the first existing of core's candidates for the
//! bound directory), merged by core. Linking or unlinking therefore applies at the
//! next message, with no reload.

use crate::config::local;
use berth_core::display::display;
use berth_core::settings::{self, Layer, Settings, SettingsError};
use berth_core::{Context, LocalPath};
use std::io::ErrorKind;
use std::path::Path;

/// Why the settings could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SettingsLoadError {
    #[error("cannot read the settings file {file}: {source}")]
    Read {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the settings file {0}")]
    Invalid(#[from] SettingsError),
}

/// Loads and merges the layers for a task bound to `bound` (none for scratch runs).
pub fn load(
    ctx: &Context,
    config_dir: &Path,
    bound: Option<&LocalPath>,
) -> Result<Settings, SettingsLoadError> {
    let mut layers = Vec::new();
    let mut user_permissions = None;
    let mut project_permissions = None;
    if let Some(file) = local(&config_dir.join(settings::SETTINGS_FILE))
        && let Some(layer) = read_layer(ctx, &file)?
    {
        user_permissions = layer.permissions;
        layers.push(layer);
    }
    if let Some(bound) = bound {
        for file in settings::project_layer_candidates(bound, ctx.home.as_ref()) {
            if let Some(layer) = read_layer(ctx, &file)? {
                project_permissions = layer.permissions;
                layers.push(layer);
                break;
            }
        }
    }
    let mut merged = settings::merge(&layers);
    // The user layer sets a default; a project layer can only narrow (core's Policy).
    merged.permissions = user_permissions;
    merged.permissions_limit = project_permissions;
    Ok(merged)
}

fn read_layer(ctx: &Context, file: &LocalPath) -> Result<Option<Layer>, SettingsLoadError> {
    let shown = display(ctx, file);
    let text = match std::fs::read_to_string(file.as_str()) {
        Ok(t) => t,
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => {
            return Ok(None);
        }
        Err(source) => {
            return Err(SettingsLoadError::Read {
                file: shown,
                source,
            });
        }
    };
    let Some(dir) = file.parent() else {
        return Ok(None);
    };
    Ok(Some(settings::parse(&shown, &dir, &text)?))
}
