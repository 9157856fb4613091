//! Combining layers into the settings in force.

use super::{Layer, PluginEntry, Settings};
#[cfg(not(target_arch = "wasm32"))]
use crate::fence::{FenceMode, Network, ReadScope};

/// Merges `layers` in order (user first, then project): a later layer overrides an
/// earlier one key by key.
///
/// `agent` and `prompt.append` are replaced when a later layer sets them; `env` and
/// `channels` merge name by name. `plugins` accumulate across layers and entries in
/// order: a plugin whose id is already present replaces it in place (so the order a
/// user first chose is kept), and `{ "plugin": "<id>", "enabled": false }` removes the
/// plugin with that id declared by an earlier layer or earlier in the same array.
/// Removing an id nobody declared is not a warning: a shared project file may turn off
/// a plugin that only some users have. Every layer's warnings are kept, in order.
///
/// The fence: the first layer that names a mode sets it, and a later one can only make
/// it stricter (`off` < `auto` < `required`); `network: "off"` and `read: "directory"`
/// from any layer win; `write`, `read_deny` and `read`'s paths accumulate (the trust
/// gate keeps a project layer's `write` and `read` paths out). `notify` is laid key by
/// key (the trust gate leaves only the user layer's).
pub fn merge(layers: &[Layer]) -> Settings {
    let mut settings = Settings::default();
    #[cfg(not(target_arch = "wasm32"))]
    let mut first_fence_mode = true;
    for layer in layers {
        if let Some(agent) = &layer.agent {
            settings.agent = Some(agent.clone());
        }
        if let Some(append) = &layer.prompt.append {
            settings.prompt.append = Some(append.clone());
        }
        settings
            .env
            .extend(layer.env.iter().map(|(k, v)| (k.clone(), v.clone())));
        settings
            .channels
            .extend(layer.channels.iter().map(|(k, v)| (k.clone(), v.clone())));
        for entry in &layer.plugins {
            match entry {
                PluginEntry::Add(plugin) => {
                    match settings.plugins.iter_mut().find(|p| p.id == plugin.id) {
                        Some(slot) => *slot = plugin.clone(),
                        None => settings.plugins.push(plugin.clone()),
                    }
                }
                PluginEntry::Remove { id } => settings.plugins.retain(|p| &p.id != id),
            }
        }
        #[cfg(not(target_arch = "wasm32"))]
        {
            use crate::approval::Rule;
            let ask = &mut settings.ask;
            // Checked when the layer was read: a rule that no longer parses is skipped.
            ask.allow
                .extend(layer.ask.allow.iter().filter_map(|r| Rule::parse(r).ok()));
            ask.deny
                .extend(layer.ask.deny.iter().filter_map(|r| Rule::parse(r).ok()));
            if let Some(secs) = layer.ask.deadline_secs {
                ask.deadline_secs = Some(secs);
            }
            settings.notify.apply(&layer.notify);
        }
        #[cfg(not(target_arch = "wasm32"))]
        {
            let fence = &layer.fence;
            if let Some(mode) = fence.mode {
                // The strictest mode asked for wins (the trust gate removed a project
                // layer's "off").
                let strictness = |m: FenceMode| match m {
                    FenceMode::Off => 0,
                    FenceMode::Auto => 1,
                    FenceMode::Required => 2,
                };
                let was = settings.fence.mode;
                if first_fence_mode || strictness(mode) > strictness(was) {
                    settings.fence.mode = mode;
                }
                first_fence_mode = false;
            }
            match fence.network {
                Some(Network::Off) => settings.fence.network = Network::Off,
                Some(Network::On) | None => {}
            }
            match fence.read {
                Some(ReadScope::Directory) => settings.fence.read = ReadScope::Directory,
                Some(ReadScope::Everywhere) | None => {}
            }
            for p in &fence.read_allow {
                if !settings.fence.read_allow.contains(p) {
                    settings.fence.read_allow.push(p.clone());
                }
            }
            for p in &fence.write {
                if !settings.fence.write.contains(p) {
                    settings.fence.write.push(p.clone());
                }
            }
            for p in &fence.read_deny {
                if !settings.fence.read_deny.contains(p) {
                    settings.fence.read_deny.push(p.clone());
                }
            }
        }
        settings.warnings.extend(layer.warnings.iter().cloned());
    }
    settings
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path::LocalPath;
    use crate::platform::Platform;
    use crate::settings::{Diagnostic, Plugin, PluginKind, Prompt, Severity, parse};
    use std::collections::BTreeMap;

    const USER: &str = "~/.config/berth/settings.jsonc";
    const PROJECT: &str = "/p/app/.berth/settings.jsonc";

    fn layer(file: &str, dir: &str, text: &str) -> Layer {
        let dir = LocalPath::parse(Platform::Linux, dir).unwrap();
        parse(file, &dir, text).unwrap()
    }

    fn user(text: &str) -> Layer {
        layer(USER, "/home/u/.config/berth", text)
    }

    fn project(text: &str) -> Layer {
        layer(PROJECT, "/p/app/.berth", text)
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn plugin(id: &str, kind: PluginKind, path: &str, declared_in: &str) -> Plugin {
        Plugin {
            id: id.to_owned(),
            kind,
            path: LocalPath::parse(Platform::Linux, path).unwrap(),
            declared_in: declared_in.to_owned(),
        }
    }

    #[test]
    fn objects_merge_and_scalars_replace() {
        let settings = merge(&[
            user(
                r#"{
                  "agent": "claude",
                  "prompt": { "append": "Be brief." },
                  "env": { "A": "1", "B": "2" },
                  "channels": { "slack_bot_token": "t", "slack_api_url": "u" }
                }"#,
            ),
            project(
                r#"{
                  "prompt": { "append": "Run cargo test." },
                  "env": { "B": "3", "C": "4" },
                  "channels": { "slack_api_url": "v" }
                }"#,
            ),
        ]);
        assert_eq!(
            settings,
            Settings {
                agent: Some("claude".to_owned()),
                permissions: None,
                permissions_limit: None,
                project_trusted: false,
                prompt: Prompt {
                    append: Some("Run cargo test.".to_owned()),
                },
                env: map(&[("A", "1"), ("B", "3"), ("C", "4")]),
                plugins: vec![],
                channels: map(&[("slack_api_url", "v"), ("slack_bot_token", "t")]),
                fence: Default::default(),
                ask: Default::default(),
                notify: Default::default(),
                warnings: vec![],
            }
        );
    }

    #[test]
    fn the_strictest_fence_wins() {
        use crate::fence::{FenceMode, Network};
        let cases = [
            (r#"{}"#, r#"{}"#, FenceMode::Auto, Network::On),
            (
                r#"{ "fence": "off" }"#,
                r#"{}"#,
                FenceMode::Off,
                Network::On,
            ),
            (
                r#"{ "fence": "off" }"#,
                r#"{ "fence": "auto" }"#,
                FenceMode::Auto,
                Network::On,
            ),
            (
                r#"{ "fence": "required" }"#,
                r#"{ "fence": { "mode": "auto", "network": "off" } }"#,
                FenceMode::Required,
                Network::Off,
            ),
            (
                r#"{ "fence": { "network": "off" } }"#,
                r#"{ "fence": { "mode": "required" } }"#,
                FenceMode::Required,
                Network::Off,
            ),
        ];
        for (u, p, mode, network) in cases {
            let s = merge(&[user(u), project(p)]);
            assert_eq!((s.fence.mode, s.fence.network), (mode, network), "{u} {p}");
        }
        let s = merge(&[
            user(r#"{ "fence": { "write": ["/tmp/side"], "read_deny": ["~/a"] } }"#),
            project(r#"{ "fence": { "read_deny": ["~/b", "~/a"] } }"#),
        ]);
        assert_eq!(s.fence.write, ["/tmp/side"]);
        assert_eq!(s.fence.read_deny, ["~/a", "~/b"]);
    }

    /// `read: "directory"` from any layer wins over `"everywhere"`, in either order;
    /// the paths of `read` lists accumulate.
    #[test]
    fn the_strict_read_mode_wins_and_its_paths_accumulate() {
        use crate::fence::ReadScope::{Directory, Everywhere};
        let cases = [
            (r#"{}"#, r#"{}"#, Everywhere),
            (
                r#"{ "fence": { "read": "everywhere" } }"#,
                r#"{}"#,
                Everywhere,
            ),
            (
                r#"{ "fence": { "read": "directory" } }"#,
                r#"{}"#,
                Directory,
            ),
            (
                r#"{ "fence": { "read": "directory" } }"#,
                r#"{ "fence": { "read": "everywhere" } }"#,
                Directory,
            ),
            (
                r#"{ "fence": { "read": "everywhere" } }"#,
                r#"{ "fence": { "read": "directory" } }"#,
                Directory,
            ),
            (r#"{ "fence": { "read": ["~/sdk"] } }"#, r#"{}"#, Directory),
            (r#"{ "fence": { "read": [] } }"#, r#"{}"#, Directory),
        ];
        for (u, p, want) in cases {
            let s = merge(&[user(u), project(p)]);
            assert_eq!(s.fence.read, want, "{u} {p}");
        }
        let s = merge(&[
            user(r#"{ "fence": { "read": ["~/sdk", "/opt/x"] } }"#),
            user(r#"{ "fence": { "read": ["/opt/x", "~/docs"] } }"#),
        ]);
        assert_eq!(s.fence.read, Directory);
        assert_eq!(s.fence.read_allow, ["~/sdk", "/opt/x", "~/docs"]);
    }

    #[test]
    fn a_later_agent_replaces_and_an_absent_one_keeps() {
        let cases = [
            (r#"{ "agent": "codex" }"#, Some("codex")),
            (r#"{ "env": {} }"#, Some("claude")),
        ];
        for (text, want) in cases {
            let settings = merge(&[user(r#"{ "agent": "claude" }"#), project(text)]);
            assert_eq!(settings.agent.as_deref(), want, "{text}");
        }
    }

    #[test]
    fn plugins_accumulate_and_disable_removes_inherited() {
        let settings = merge(&[
            user(r#"{ "plugins": ["style.md", "skills/deploy", "lint.md"] }"#),
            project(
                r#"{ "plugins": [
                  "review.md",
                  { "plugin": "deploy", "enabled": false },
                  "../docs/style.md",
                  "review.md",
                ] }"#,
            ),
            project(r#"{ "plugins": [] }"#),
        ]);
        assert_eq!(
            settings.plugins,
            vec![
                plugin("style", PluginKind::Prompt, "/p/app/docs/style.md", PROJECT),
                plugin(
                    "lint",
                    PluginKind::Prompt,
                    "/home/u/.config/berth/lint.md",
                    USER
                ),
                plugin(
                    "review",
                    PluginKind::Prompt,
                    "/p/app/.berth/review.md",
                    PROJECT
                ),
            ]
        );
    }

    #[test]
    fn disable_then_re_enable_with_a_path() {
        let settings = merge(&[
            user(r#"{ "plugins": ["deploy"] }"#),
            project(
                r#"{ "plugins": [
                  { "plugin": "deploy", "enabled": false },
                  { "plugin": "deploy", "path": "/opt/skills/ship", "enabled": true },
                  { "plugin": "gone", "enabled": false },
                ] }"#,
            ),
        ]);
        assert_eq!(
            settings.plugins,
            vec![plugin(
                "deploy",
                PluginKind::Skill,
                "/opt/skills/ship",
                PROJECT
            )]
        );
    }

    #[test]
    fn disable_within_one_array_removes_the_earlier_entry() {
        let settings = merge(&[project(
            r#"{ "plugins": ["a.md", "b.md", { "plugin": "a", "enabled": false }] }"#,
        )]);
        assert_eq!(
            settings.plugins,
            vec![plugin(
                "b",
                PluginKind::Prompt,
                "/p/app/.berth/b.md",
                PROJECT
            )]
        );
    }

    #[test]
    fn warnings_from_every_layer_are_kept() {
        let settings = merge(&[user(r#"{ "x": 1 }"#), project(r#"{ "y": 1 }"#)]);
        let warning = |file: &str, key: &str| Diagnostic {
            severity: Severity::Warning,
            file: file.to_owned(),
            line: 1,
            column: 3,
            message: format!(
                "unknown key \"{key}\"; known keys: agent, permissions, prompt, env, plugins, channels, ca_file, snapshots, fence, ask, notify"
            ),
        };
        assert_eq!(
            settings.warnings,
            vec![warning(USER, "x"), warning(PROJECT, "y")]
        );
    }

    #[test]
    fn no_layers_is_the_default() {
        assert_eq!(merge(&[]), Settings::default());
    }
}
