//! The agent's brief: what Berth tells the agent besides the user's message.
//!
//! Session facts, where the agent works and how, the settings' `prompt.append`, the
//! markdown prompt-fragment plugins, and a note that the user may be editing the same
//! directory. Built afresh for every exchange from the settings read for it.

use berth_core::exec::SessionFacts;
use berth_core::settings::{PluginKind, Settings};

/// The largest prompt fragment read, in bytes; longer ones are cut with a note. Only
/// a regular file is read ([`crate::settings::input`]): a fragment linked to
/// `/dev/zero` or a FIFO is a warning, never a hang.
const MAX_FRAGMENT: usize = 64 * 1024;

/// How the agent works, for the brief.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkMode {
    InPlace,
    Worktree,
    Scratch,
}

/// A composed brief, and what could not go into it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Brief {
    pub text: String,
    /// Problems the user should see (a missing fragment file, …).
    pub warnings: Vec<String>,
}

/// Composes the brief for one exchange.
///
/// `work_display` is the privacy-stripped place the agent works in; `skills` the
/// skill folders made available for this run (relative paths).
pub fn compose(
    session: &SessionFacts,
    mode: WorkMode,
    work_display: &str,
    branch: Option<&str>,
    settings: &Settings,
    skills: &[String],
) -> Brief {
    let mut warnings = Vec::new();
    let mut text = String::from("# Berth session\n\n");
    text.push_str(&format!(
        "You are working in a Berth session (id {}",
        session.id
    ));
    if !session.title.is_empty() {
        text.push_str(&format!(", titled {:?}", session.title));
    }
    text.push_str(").\n");
    match mode {
        WorkMode::InPlace => {
            text.push_str(&format!(
                "Your working directory is the user's own directory {work_display}. \
                 The user may be editing files in it at the same time: read a file again \
                 before changing it, and never revert changes you did not make.\n"
            ));
        }
        WorkMode::Worktree => {
            text.push_str(&format!(
                "Your working directory is {work_display}, a git worktree of the user's \
                 repository{}; your changes are committed there after each turn.\n",
                branch
                    .map(|b| format!(" on branch {b}"))
                    .unwrap_or_default()
            ));
            if let Some(bound) = &session.display {
                text.push_str(&format!(
                    "The user's own checkout is {bound}; they may be editing it meanwhile.\n"
                ));
            }
        }
        WorkMode::Scratch => {
            text.push_str(&format!(
                "Your working directory is a scratch directory ({work_display}) kept for \
                 this session; it is not a directory of the user's.\n"
            ));
        }
    }
    if !skills.is_empty() {
        text.push_str(&format!(
            "Skills provided for this run: {}.\n",
            skills.join(", ")
        ));
    }
    if let Some(append) = settings
        .prompt
        .append
        .as_deref()
        .filter(|a| !a.trim().is_empty())
    {
        text.push('\n');
        text.push_str(append.trim_end());
        text.push('\n');
    }
    for plugin in &settings.plugins {
        match plugin.kind {
            PluginKind::Prompt => match crate::settings::input::read(
                std::path::Path::new(plugin.path.as_str()),
                "its file",
                crate::settings::input::Limit::Prefix(MAX_FRAGMENT as u64),
            ) {
                Ok(read) => {
                    let cut = read.cut;
                    let body = String::from_utf8_lossy(&read.bytes);
                    text.push_str(&format!(
                        "\n## {} (plugin)\n\n{}\n",
                        plugin.id,
                        body.trim_end()
                    ));
                    if cut {
                        warnings.push(format!(
                            "plugin {} ({}) is longer than {MAX_FRAGMENT} bytes; the rest was left out",
                            plugin.id, plugin.declared_in
                        ));
                    }
                }
                Err(e) => warnings.push(format!(
                    "plugin {} declared in {} cannot be read: {e}",
                    plugin.id, plugin.declared_in
                )),
            },
            PluginKind::Skill => {}
        }
    }
    Brief { text, warnings }
}
