//! `berth agent add | edit | remove`: the agents the server runs.

use super::client::{Client, encode};
use super::error::CliError;
use super::render::print_json;
use super::{EditPolicy, Kind, Policy};
use berth_core::ErrorCode;
use hyper::Method;
use serde_json::{Value, json};

/// The options of `agent add` and `agent edit` that `--command`, which takes every
/// word after it, would take as the agent's own when they come after it.
const OWN_OPTIONS: &[&str] = &["--kind", "--permissions", "--json", "--home"];

/// The words of `--command`, or why they are not what the user meant: one of
/// [`OWN_OPTIONS`] among them was meant for Berth, and the agent would be registered
/// wrong. A command that starts with `--` is taken as it is, `--` dropped (for an
/// agent whose own program takes such an option).
pub(super) fn command_words(command: Vec<String>) -> Result<Vec<String>, CliError> {
    if command.first().is_some_and(|w| w == "--") {
        return Ok(command.into_iter().skip(1).collect());
    }
    let swallowed = command.iter().find_map(|w| {
        OWN_OPTIONS
            .iter()
            .find(|o| w == *o || w.strip_prefix(**o).is_some_and(|r| r.starts_with('=')))
    });
    match swallowed {
        None => Ok(command),
        Some(option) => Err(CliError {
            code: Some(ErrorCode::OptionInCommand),
            ..CliError::usage(
                format!(
                    "{option} came after --command, so it would be part of the agent's \
                     command ({}), not an option of berth",
                    command.join(" ")
                ),
                format!(
                    "put --command last (it takes every word after it), as in berth agent add \
                     NAME --kind command --permissions edit --command CMD [ARG...]; if the \
                     agent's own program takes {option}, start its command with --: \
                     --command -- CMD {option} ..."
                ),
            )
        }),
    }
}

/// `berth agent add`.
pub(super) async fn add(
    c: &Client,
    name: String,
    kind: Option<Kind>,
    permissions: Option<Policy>,
    command: Vec<String>,
    json: bool,
) -> Result<u8, CliError> {
    let command = command_words(command)?;
    let Some(kind) = kind else {
        return Err(CliError::usage(
            "berth agent add needs --kind",
            "e.g. berth agent add NAME --kind claude (or codex, command, acp)",
        ));
    };
    let adapter = match kind {
        Kind::Claude => berth_local_agent::agent::adapter::Adapter::Claude,
        Kind::Codex => berth_local_agent::agent::adapter::Adapter::Codex,
        Kind::Command => berth_local_agent::agent::adapter::Adapter::Command,
        Kind::Acp => berth_local_agent::agent::adapter::Adapter::Acp,
    };
    let kind = match kind {
        Kind::Claude => "claude",
        Kind::Codex => "codex",
        Kind::Command => "command",
        Kind::Acp => "acp",
    };
    let permissions = permissions.map(Policy::permissions);
    if kind == "command" && command.is_empty() {
        return Err(CliError::usage(
            "a command agent needs --command CMD [ARG...]",
            "e.g. berth agent add echo --kind command --command sh -c 'cat'",
        ));
    }
    if kind == "acp" && command.is_empty() {
        return Err(CliError::usage(
            "an ACP agent needs --command CMD [ARG...]: how to start it speaking ACP",
            "e.g. berth agent add gemini --kind acp --command gemini --acp",
        ));
    }
    let agent = c
        .post(
            "/api/v1/agents",
            &json!({"name": name, "kind": kind, "command": command,
                    "permissions": permissions.map(|p| p.as_str())}),
        )
        .await?;
    if json {
        print_json(&agent);
        return Ok(0);
    }
    println!(
        "added agent {} ({kind})",
        agent["name"].as_str().unwrap_or(&name)
    );
    permissions_note(&agent, adapter, permissions, fences(c).await);
    missing_program(&name, &command, kind);
    Ok(0)
}

/// Warns when the agent's program is not on this machine (a typo, a tool not
/// installed): it would only show at the first message, as `agent_not_found`. The
/// program is looked up as the agent's start does: a path as it is, a bare name on
/// `PATH`. Built-in kinds with no `--command` start their own CLI (`claude`, `codex`).
fn missing_program(name: &str, command: &[String], kind: &str) {
    let program = match (command.first(), kind) {
        (Some(p), _) => p.as_str(),
        (None, "claude") => "claude",
        (None, "codex") => "codex",
        (None, _) => return,
    };
    let found = if program.contains('/') {
        std::path::Path::new(program).is_file()
    } else {
        std::env::var_os("PATH")
            .is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(program).is_file()))
    };
    if !found {
        super::render::warn(
            &format!(
                "{program} is not installed here (not a file, and not on PATH): the agent {name} cannot start until it is"
            ),
            &format!(
                "install it, or point the agent at it: berth agent edit {name} --command PATH"
            ),
        );
    }
}

/// What the agent may do, as its adapter maps it (or a warning where it can't).
fn permissions_note(
    agent: &Value,
    adapter: berth_local_agent::agent::adapter::Adapter,
    permissions: Option<berth_core::Permissions>,
    fenced: bool,
) {
    let shown = permissions.unwrap_or(berth_core::Permissions::DEFAULT);
    let origin = if permissions.is_some() {
        ""
    } else {
        " (the default; the user settings' \"permissions\" may change it)"
    };
    let unenforced = serde_json::from_value(agent.clone())
        .ok()
        .and_then(|spec| adapter.unenforced(&spec, shown, fenced));
    match unenforced {
        Some(note) => eprintln!("warning: {note}"),
        None => println!(
            "permissions {shown}{origin}: {}",
            adapter.policy_note(shown)
        ),
    }
}

/// `berth agent edit NAME [--permissions P] [--command CMD ...]`.
pub(super) async fn edit(
    c: &Client,
    name: String,
    permissions: Option<EditPolicy>,
    command: Vec<String>,
    json: bool,
) -> Result<u8, CliError> {
    let command = command_words(command)?;
    if command.is_empty() && permissions.is_none() {
        return Err(CliError::usage(
            "berth agent edit needs --permissions or --command",
            format!(
                "e.g. berth agent edit {name} --permissions read-only, or \
                 berth agent edit {name} --command CMD [ARG...] (last)"
            ),
        ));
    }
    let mut body = serde_json::Map::new();
    if !command.is_empty() {
        body.insert("command".into(), json!(command));
    }
    if let Some(p) = permissions {
        body.insert(
            "permissions".into(),
            json!(p.permissions().map(|p| p.as_str())),
        );
    }
    let agent = c
        .call(
            Method::PATCH,
            &format!("/api/v1/agents/{}", encode(&name)),
            Some(&Value::Object(body)),
        )
        .await?;
    if json {
        print_json(&agent);
        return Ok(0);
    }
    let words: Vec<&str> = agent["command"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    println!("changed agent {name}; it applies at the next message of each session using it");
    if !words.is_empty() {
        println!("command: {}", super::render::escape(&words.join(" ")));
    }
    let spec: Option<berth_web::executor::AgentSpec> = serde_json::from_value(agent.clone()).ok();
    if let Some(spec) = spec {
        let adapter = berth_local_agent::agent::adapter::Adapter::for_kind(spec.kind);
        permissions_note(&agent, adapter, spec.permissions, fences(c).await);
    }
    Ok(0)
}

/// `berth agent remove NAME`: refused while sessions use it (`agent_in_use`).
pub(super) async fn remove(c: &Client, name: String, json: bool) -> Result<u8, CliError> {
    let agent = c
        .call(
            Method::DELETE,
            &format!("/api/v1/agents/{}", encode(&name)),
            None,
        )
        .await?;
    if json {
        print_json(&agent);
    } else {
        println!("removed agent {name}");
    }
    Ok(0)
}

/// Whether the server's machine fences its agents now (`GET capabilities`' fence: on
/// and available).
pub(super) async fn fences(c: &Client) -> bool {
    let Ok(caps) = c.get("/api/v1/capabilities").await else {
        return false;
    };
    caps["fence"]["available"] == true && caps["fence"]["mode"] != "off"
}

#[cfg(test)]
mod tests {
    use super::command_words;
    use berth_core::ErrorCode;

    fn words(w: &[&str]) -> Vec<String> {
        w.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn an_option_of_berth_inside_the_command_is_refused_unless_after_a_double_dash() {
        for swallowed in [
            &["cat", "--kind", "command"][..],
            &["cat", "--permissions=full"],
            &["cat", "--json"],
        ] {
            let e = command_words(words(swallowed)).unwrap_err();
            assert_eq!(
                (e.code.map(ErrorCode::as_str), e.exit),
                (Some("option_in_command"), 2),
                "{swallowed:?}"
            );
            assert!(e.hint.starts_with("put --command last"), "{}", e.hint);
        }
        assert_eq!(
            command_words(words(&["--", "tool", "--json"])).unwrap(),
            words(&["tool", "--json"])
        );
        assert_eq!(
            command_words(words(&["sh", "-c", "cat --kinder"])).unwrap(),
            words(&["sh", "-c", "cat --kinder"])
        );
        assert_eq!(
            command_words(words(&["tool", "--kinds"])).unwrap(),
            words(&["tool", "--kinds"])
        );
    }
}
