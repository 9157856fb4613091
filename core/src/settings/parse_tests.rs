use super::*;
use crate::platform::Platform;
use crate::settings::{PluginKind, Pos, Prompt};
use proptest::prelude::*;

const FILE: &str = "/p/app/.berth/settings.jsonc";

fn dir() -> LocalPath {
    LocalPath::parse(Platform::Linux, "/p/app/.berth").unwrap()
}

fn lp(s: &str) -> LocalPath {
    LocalPath::parse(Platform::Linux, s).unwrap()
}

fn err(kind: SettingsErrorKind, line: usize, column: usize, message: &str) -> SettingsError {
    SettingsError {
        kind,
        file: FILE.to_owned(),
        line,
        column,
        message: message.to_owned(),
    }
}

fn warning(line: usize, column: usize, message: &str) -> Diagnostic {
    Diagnostic {
        severity: Severity::Warning,
        file: FILE.to_owned(),
        line,
        column,
        message: message.to_owned(),
    }
}

fn add(id: &str, kind: PluginKind, path: &str) -> PluginEntry {
    PluginEntry::Add(Plugin {
        id: id.to_owned(),
        kind,
        path: lp(path),
        declared_in: FILE.to_owned(),
    })
}

#[test]
fn comments_and_trailing_commas_parse() {
    let text = r#"
// Berth settings for app
{
  "agent": "claude", // the default
  "permissions": "read-only",
  /* a block
     comment */
  "prompt": { "append": "Run the tests.", },
  "env": { "RUST_LOG": "debug", "CI": "1", },
  "plugins": [
    "review.md",
    "../shared/x.md",
    "skills/deploy",
    { "plugin": "lint", "enabled": false },
    { "plugin": "fmt", "path": "/opt/fmt/SKILL.md", "enabled": true },
  ],
  "channels": { "slack_bot_token": "xoxb-1", "channel_agent": "codex" },
}
"#;
    let want = Layer {
        file: FILE.to_owned(),
        dir: dir(),
        agent: Some("claude".to_owned()),
        permissions: Some(crate::policy::Permissions::ReadOnly),
        prompt: Prompt {
            append: Some("Run the tests.".to_owned()),
        },
        env: [("CI", "1"), ("RUST_LOG", "debug")]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .into(),
        plugins: vec![
            add("review", PluginKind::Prompt, "/p/app/.berth/review.md"),
            add("x", PluginKind::Prompt, "/p/app/shared/x.md"),
            add("deploy", PluginKind::Skill, "/p/app/.berth/skills/deploy"),
            PluginEntry::Remove {
                id: "lint".to_owned(),
            },
            add("fmt", PluginKind::Skill, "/opt/fmt"),
        ],
        channels: [("channel_agent", "codex"), ("slack_bot_token", "xoxb-1")]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .into(),
        ca_file: None,
        snapshots: Default::default(),
        fence: Default::default(),
        ask: Default::default(),
        notify: Default::default(),
        warnings: vec![],
        unusable_env: vec![],
        places: [
            ("agent", 4, 3),
            ("permissions", 5, 3),
            ("prompt.append", 8, 15),
            ("env.RUST_LOG", 9, 12),
            ("env.CI", 9, 33),
            ("plugins[0]", 11, 5),
            ("plugins[1]", 12, 5),
            ("plugins[2]", 13, 5),
            ("plugins[3]", 14, 5),
            ("plugins[4]", 15, 5),
            ("channels.slack_bot_token", 17, 17),
            ("channels.channel_agent", 17, 46),
        ]
        .map(|(k, line, column)| (k.to_owned(), crate::settings::Pos { line, column }))
        .into(),
    };
    assert_eq!(parse(FILE, &dir(), text), Ok(want));
}

#[test]
fn empty_text_is_an_empty_layer() {
    for text in ["", "  \n", "// nothing yet\n", "\u{feff}"] {
        assert_eq!(
            parse(FILE, &dir(), text),
            Ok(Layer::empty(FILE, &dir())),
            "{text:?}"
        );
    }
}

#[test]
fn syntax_errors_point_at_the_token() {
    let cases = [
        (
            "{\n  \"agent\": \"claude\",\n  \"env\": { \"A\" \"1\" }\n}",
            err(
                SettingsErrorKind::Syntax,
                3,
                16,
                "expected colon after the string or word in object property",
            ),
        ),
        (
            "{\n  \"agent\": \"claude\"\n  \"env\": {}\n}",
            err(SettingsErrorKind::Syntax, 2, 20, "expected comma"),
        ),
        (
            "{ 'agent': 'x' }",
            err(
                SettingsErrorKind::Syntax,
                1,
                3,
                "single-quoted strings are not allowed",
            ),
        ),
        (
            "{ \"agent\": \"x\" ",
            err(SettingsErrorKind::Syntax, 1, 1, "unterminated object"),
        ),
        (
            "\u{feff}{\r\n\"é\": 0x1 }",
            err(
                SettingsErrorKind::Syntax,
                2,
                6,
                "hexadecimal numbers are not allowed",
            ),
        ),
    ];
    for (text, want) in cases {
        assert_eq!(parse(FILE, &dir(), text), Err(want), "{text:?}");
    }
}

#[test]
fn the_top_level_must_be_an_object() {
    let cases = [
        ("[]", 1, 1, "an array"),
        ("\n  \"claude\"", 2, 3, "a string"),
        ("null", 1, 1, "null"),
    ];
    for (text, line, column, found) in cases {
        let message =
            format!("the settings must be an object like {{ \"agent\": \"...\" }}, found {found}");
        assert_eq!(
            parse(FILE, &dir(), text),
            Err(err(SettingsErrorKind::NotAnObject, line, column, &message)),
            "{text:?}"
        );
    }
}

#[test]
fn wrong_types_are_errors_at_the_value() {
    use SettingsErrorKind::{InvalidValue, WrongType};
    let cases = [
        (
            "{\n  \"agent\": 3\n}",
            err(
                WrongType,
                2,
                12,
                "\"agent\" must be a string, found a number",
            ),
        ),
        (
            "{ \"agent\": \"\" }",
            err(
                InvalidValue,
                1,
                12,
                "\"agent\" is empty; name an agent, e.g. \"claude\", or remove the key",
            ),
        ),
        (
            "{ \"prompt\": \"x\" }",
            err(
                WrongType,
                1,
                13,
                "\"prompt\" must be an object, found a string",
            ),
        ),
        (
            "{ \"prompt\": { \"append\": [] } }",
            err(
                WrongType,
                1,
                25,
                "\"prompt.append\" must be a string, found an array",
            ),
        ),
        (
            "{ \"env\": [] }",
            err(
                WrongType,
                1,
                10,
                "\"env\" must be an object, found an array",
            ),
        ),
        (
            "{ \"env\": { \"A\": null } }",
            err(WrongType, 1, 17, "\"env.A\" must be a string, found null"),
        ),
        (
            "{ \"env\": { \"A=B\": \"1\" } }",
            err(
                InvalidValue,
                1,
                12,
                "the environment variable name \"A=B\" contains '=' or NUL, which no process environment allows",
            ),
        ),
        (
            "{ \"env\": { \"\": \"1\" } }",
            err(InvalidValue, 1, 12, "an environment variable name is empty"),
        ),
        (
            "{ \"env\": { \"A\": \"x\\u0000\" } }",
            err(
                InvalidValue,
                1,
                17,
                "\"env.A\" contains a NUL character, which no process environment allows",
            ),
        ),
        (
            "{ \"channels\": { \"slack_bot_token\": 1 } }",
            err(
                WrongType,
                1,
                36,
                "\"channels.slack_bot_token\" must be a string, found a number",
            ),
        ),
        (
            "{ \"plugins\": {} }",
            err(
                WrongType,
                1,
                14,
                "\"plugins\" must be an array, found an object",
            ),
        ),
        (
            "{ \"plugins\": [\"a.md\", 7] }",
            err(
                WrongType,
                1,
                23,
                "\"plugins[1]\" must be a path or an object like { \"plugin\": \"<id>\", \"enabled\": false }, found a number",
            ),
        ),
        (
            "{ \"plugins\": [{ \"plugin\": \"x\", \"enabled\": \"no\" }] }",
            err(
                WrongType,
                1,
                43,
                "\"plugins[0].enabled\" must be true or false, found a string",
            ),
        ),
        (
            "{ \"plugins\": [{ \"plugin\": 1, \"path\": \"a\" }] }",
            err(
                WrongType,
                1,
                27,
                "\"plugins[0].plugin\" must be a string, found a number",
            ),
        ),
    ];
    for (text, want) in cases {
        assert_eq!(parse(FILE, &dir(), text), Err(want), "{text:?}");
    }
}

#[test]
fn plugin_mistakes_are_errors_at_the_item() {
    use SettingsErrorKind::{InvalidPluginPath, InvalidValue};
    let cases = [
        (
            "{ \"plugins\": [{ \"enabled\": false }] }",
            err(
                InvalidValue,
                1,
                15,
                "\"plugins[0]\" has no \"plugin\" id; write { \"plugin\": \"<id>\", ... }",
            ),
        ),
        (
            "{ \"plugins\": [{ \"plugin\": \"x\" }] }",
            err(
                InvalidValue,
                1,
                15,
                "plugin \"x\" has no \"path\"; give one, or set \"enabled\": false to remove it",
            ),
        ),
        (
            "{ \"plugins\": [{ \"plugin\": \"../x\", \"path\": \"a\" }] }",
            err(
                InvalidValue,
                1,
                27,
                "the plugin id \"../x\" contains '/'; use letters, digits, '-', '_' or '.'",
            ),
        ),
        (
            "{ \"plugins\": [\n  \"\"\n] }",
            err(
                InvalidPluginPath,
                2,
                3,
                "the plugin path is empty; give a path to a .md file or a skill folder",
            ),
        ),
        (
            "{ \"plugins\": [\"../../../..\"] }",
            err(
                InvalidPluginPath,
                1,
                15,
                "the plugin path \"../../../..\" resolves to /, which names no file or folder",
            ),
        ),
        (
            "{ \"plugins\": [\"a\\\\b:c\"] }",
            err(
                InvalidPluginPath,
                1,
                15,
                "the plugin id \"a\\b:c\" contains '\\'; use letters, digits, '-', '_' or '.' (taken from /p/app/.berth/a\\b:c); give an id with { \"plugin\": \"<id>\", \"path\": ... }",
            ),
        ),
    ];
    for (text, want) in cases {
        assert_eq!(parse(FILE, &dir(), text), Err(want), "{text:?}");
    }
}

#[test]
fn unknown_and_repeated_keys_are_warnings() {
    let text = r#"{
  "agnet": "x",
  "prompt": { "apend": "y", "append": "z" },
  "agent": "a",
  "agent": "b",
  "plugins": [{ "plugin": "p", "enabled": false, "path": "p.md", "why": 1 }],
  "completely_different": {},
}"#;
    let mut want = Layer::empty(FILE, &dir());
    want.agent = Some("b".to_owned());
    want.prompt.append = Some("z".to_owned());
    want.plugins = vec![PluginEntry::Remove { id: "p".to_owned() }];
    want.warnings = vec![
        warning(
            2,
            3,
            "unknown key \"agnet\" (did you mean \"agent\"?); known keys: agent, permissions, prompt, env, plugins, channels, ca_file, snapshots, fence, ask, notify",
        ),
        warning(
            3,
            15,
            "unknown key \"prompt.apend\" (did you mean \"append\"?); known keys in \"prompt\": append",
        ),
        warning(
            4,
            3,
            "\"agent\" is set again on line 5; this value is ignored",
        ),
        warning(
            6,
            58,
            "\"plugins[0].path\" is ignored because the plugin is disabled",
        ),
        warning(
            6,
            66,
            "unknown key \"plugins[0].why\"; known keys in \"plugins[0]\": plugin, path, enabled",
        ),
        warning(
            7,
            3,
            "unknown key \"completely_different\"; known keys: agent, permissions, prompt, env, plugins, channels, ca_file, snapshots, fence, ask, notify",
        ),
    ];
    // The place of a repeated key is that of the value kept.
    want.places = [
        ("prompt.append", 3, 29),
        ("agent", 5, 3),
        ("plugins[0]", 6, 15),
    ]
    .map(|(k, line, column)| (k.to_owned(), crate::settings::Pos { line, column }))
    .into();
    assert_eq!(parse(FILE, &dir(), text), Ok(want));
}

#[test]
fn later_duplicate_wins_even_when_the_earlier_is_wrong() {
    let text = "{ \"agent\": 1, \"agent\": \"b\" }";
    let mut want = Layer::empty(FILE, &dir());
    want.agent = Some("b".to_owned());
    want.warnings = vec![warning(
        1,
        3,
        "\"agent\" is set again on line 1; this value is ignored",
    )];
    want.places = [(
        "agent".to_owned(),
        crate::settings::Pos {
            line: 1,
            column: 15,
        },
    )]
    .into();
    assert_eq!(parse(FILE, &dir(), text), Ok(want));
}

#[test]
fn windows_plugin_paths_resolve_on_windows_rules() {
    let dir = LocalPath::parse(Platform::Windows, "C:\\p\\app\\.berth").unwrap();
    let layer = parse("s", &dir, r#"{ "plugins": ["..\\shared\\x.md"] }"#).unwrap();
    assert_eq!(
        layer.plugins,
        vec![PluginEntry::Add(Plugin {
            id: "x".to_owned(),
            kind: PluginKind::Prompt,
            path: LocalPath::parse(Platform::Windows, "C:\\p\\app\\shared\\x.md").unwrap(),
            declared_in: "s".to_owned(),
        })]
    );
}

#[test]
fn positions_count_characters_and_every_line_break() {
    let lines = Lines::new("ab\r\ncé\rx\ny");
    let cases = [
        (0, (1, 1)),
        (2, (1, 3)),
        (4, (2, 1)),
        (7, (2, 3)),
        (8, (3, 1)),
        (10, (4, 1)),
        (99, (4, 2)),
    ];
    for (offset, want) in cases {
        assert_eq!(lines.position(offset), want, "{offset}");
    }
}

proptest! {
    #[test]
    fn parse_never_panics(text in any::<String>()) {
        let _ = parse(FILE, &dir(), &text);
    }

    #[test]
    fn parse_never_panics_on_near_settings(
        text in r#"\{("(agent|prompt|append|env|plugins|plugin|path|enabled|channels|A|\.\./x\.md|/|~|)"|[\[\]{}:,\n ]|true|false|null|1|//c\n){0,40}"#
    ) {
        let _ = parse(FILE, &dir(), &text);
        let win = LocalPath::parse(Platform::Windows, "C:\\p").unwrap();
        let _ = parse(FILE, &win, &text);
    }
}

#[test]
fn snapshot_limits_are_whole_positive_numbers() {
    let layer = parse(
        FILE,
        &dir(),
        r#"{ "snapshots": { "max_file_mb": 5, "keep": 50, "max_age_days": 7 } }"#,
    )
    .unwrap();
    assert_eq!(
        layer.snapshots,
        crate::settings::SnapshotLimits {
            max_file_mb: Some(5),
            keep: Some(50),
            max_age_days: Some(7)
        }
    );
    for (text, want) in [
        (
            r#"{ "snapshots": { "keep": 0 } }"#,
            "\"snapshots.keep\" must be a whole number of at least 1, found 0",
        ),
        (r#"{ "snapshots": { "keep": 1.5 } }"#, "found 1.5"),
        (
            r#"{ "snapshots": { "keep": "10" } }"#,
            "\"snapshots.keep\" must be a number",
        ),
        (r#"{ "snapshots": 3 }"#, "\"snapshots\" must be an object"),
    ] {
        let err = parse(FILE, &dir(), text).unwrap_err();
        assert!(err.message.contains(want), "{text}: {}", err.message);
    }
    let layer = parse(FILE, &dir(), r#"{ "snapshots": { "kept": 3 } }"#).unwrap();
    assert!(
        layer.warnings[0].message.contains("did you mean \"keep\""),
        "{:?}",
        layer.warnings
    );
}

#[test]
fn the_fence_read_key_as_a_scope_or_a_list() {
    use crate::fence::ReadScope;
    for (text, read, allow) in [
        (
            r#"{ "fence": { "read": "directory" } }"#,
            Some(ReadScope::Directory),
            vec![],
        ),
        (
            r#"{ "fence": { "read": "everywhere" } }"#,
            Some(ReadScope::Everywhere),
            vec![],
        ),
        (
            r#"{ "fence": { "read": ["~/sdk", "/opt/data"] } }"#,
            Some(ReadScope::Directory),
            vec!["~/sdk", "/opt/data"],
        ),
        (r#"{ "fence": { "mode": "auto" } }"#, None, vec![]),
    ] {
        let l = parse(FILE, &dir(), text).unwrap();
        assert_eq!(l.fence.read, read, "{text}");
        assert_eq!(l.fence.read_allow, allow, "{text}");
    }
    let text = "{\n  \"fence\": {\n    \"read\": \"nowhere\"\n  }\n}";
    let err = parse(FILE, &dir(), text).unwrap_err();
    assert_eq!(
        (err.kind, err.line, err.column),
        (SettingsErrorKind::InvalidValue, 3, 13),
        "{err}"
    );
    let l = parse(FILE, &dir(), "{\n  \"fence\": { \"read\": [] }\n}").unwrap();
    assert_eq!(
        l.place("fence.read"),
        Pos {
            line: 2,
            column: 14
        }
    );
}

#[test]
fn the_fence_key_as_a_mode_or_an_object() {
    let l = parse(FILE, &dir(), r#"{ "fence": "required" }"#).unwrap();
    assert_eq!(l.fence.mode, Some(crate::fence::FenceMode::Required));
    assert_eq!(l.place("fence.mode"), Pos { line: 1, column: 3 });
    let l = parse(
        FILE,
        &dir(),
        r#"{ "fence": { "mode": "off", "network": "off", "write": ["/tmp/x", "~/y"], "read_deny": ["~/z"] } }"#,
    )
    .unwrap();
    assert_eq!(l.fence.mode, Some(crate::fence::FenceMode::Off));
    assert_eq!(l.fence.network, Some(crate::fence::Network::Off));
    assert_eq!(l.fence.write, ["/tmp/x", "~/y"]);
    assert_eq!(l.fence.read_deny, ["~/z"]);
    for (text, want) in [
        (
            r#"{ "fence": "sometimes" }"#,
            "\"fence\" is \"sometimes\"; use \"auto\" or \"required\" or \"off\"",
        ),
        (
            r#"{ "fence": { "network": "maybe" } }"#,
            "\"fence.network\" is \"maybe\"; use \"on\" or \"off\"",
        ),
        (
            r#"{ "fence": { "write": ["rel/path"] } }"#,
            "\"fence.write[0]\" is not an absolute path (/… or ~/…)",
        ),
        (
            r#"{ "fence": { "write": "/tmp" } }"#,
            "\"fence.write\" must be an array of paths, found a string",
        ),
        (
            r#"{ "fence": true }"#,
            "\"fence\" must be an object, found a boolean",
        ),
        (
            r#"{ "fence": { "read": "directroy" } }"#,
            "\"fence.read\" is \"directroy\" (did you mean \"directory\"?); use \"everywhere\" (the default), \"directory\" (the agent reads only its directory, the system's and the toolchains'), or a list of paths it may read besides",
        ),
        (
            r#"{ "fence": { "read": true } }"#,
            "\"fence.read\" must be \"everywhere\", \"directory\" or an array of paths, found a boolean",
        ),
        (
            r#"{ "fence": { "read": ["sdk"] } }"#,
            "\"fence.read[0]\" is not an absolute path (/… or ~/…)",
        ),
    ] {
        let err = parse(FILE, &dir(), text).unwrap_err();
        assert_eq!(err.message, want, "{text}");
    }
    let l = parse(FILE, &dir(), r#"{ "fence": { "mod": "off" } }"#).unwrap();
    assert!(
        l.warnings[0]
            .message
            .ends_with("known keys in \"fence\": mode, network, write, read_deny, read"),
        "{:?}",
        l.warnings
    );
    assert!(
        l.warnings[0]
            .message
            .contains("unknown key \"fence.mod\" (did you mean \"mode\"?)"),
        "{:?}",
        l.warnings
    );
}
