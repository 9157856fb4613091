//! The composer's slash commands: parsing and tab completion (paths included).

use std::path::{Path, PathBuf};

/// A command typed on the input line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Slash {
    /// `/link [PATH]`: bind to PATH (default: the shell's directory).
    Link(Option<String>),
    Unlink,
    /// `/mode in-place|worktree`.
    Mode(String),
    Cancel,
    /// `/undo`: put back what the session's last task changed.
    Undo,
    /// `/diff [N]`: the lines the session's last task (or its task N, as `/tasks`
    /// numbers them, or the task whose id starts so) changed.
    Diff(Option<String>),
    Tasks,
    Settings,
    /// `/new [TITLE]`: a new session with this one's agent and directory.
    New(Option<String>),
    Help,
    Quit,
}

/// Every command, its argument and what it does: `/help` and completion read this.
pub const COMMANDS: &[(&str, &str, &str)] = &[
    (
        "/link",
        "[PATH]",
        "bind the session to PATH (default: the directory you started berth chat in)",
    ),
    (
        "/unlink",
        "",
        "remove the binding; the agent works in its scratch directory",
    ),
    (
        "/mode",
        "in-place|worktree",
        "work in the directory itself, or in a git worktree of it",
    ),
    (
        "/cancel",
        "",
        "cancel the running task (the directory is restored)",
    ),
    (
        "/undo",
        "",
        "put back the files the last task changed, as they were before it",
    ),
    (
        "/diff",
        "[N]",
        "the lines the last task (or task N of /tasks) changed; PgUp/PgDn scroll",
    ),
    ("/tasks", "", "this session's tasks, numbered"),
    (
        "/settings",
        "",
        "the settings the next message uses, and where each comes from",
    ),
    (
        "/new",
        "[TITLE]",
        "a new session with this agent and directory",
    ),
    ("/help", "", "this list"),
    ("/quit", "", "leave (the session and its tasks go on)"),
];

const MODES: &[&str] = &["in-place", "worktree"];

/// `None` when `line` is a message (`//x` is the message `/x`); else the command or
/// why it is not one.
pub fn parse(line: &str) -> Option<Result<Slash, String>> {
    let line = line.trim();
    if !line.starts_with('/') || line.starts_with("//") {
        return None;
    }
    let (name, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
    let rest = rest.trim();
    let arg = (!rest.is_empty()).then(|| rest.to_owned());
    let none = |cmd: Slash| match &arg {
        Some(_) => Err(format!("{name} takes no argument")),
        None => Ok(cmd),
    };
    Some(match name {
        "/link" => Ok(Slash::Link(arg)),
        "/unlink" => none(Slash::Unlink),
        "/mode" => match arg.as_deref() {
            Some(m) if MODES.contains(&m) => Ok(Slash::Mode(m.to_owned())),
            _ => Err(String::from("/mode takes in-place or worktree")),
        },
        "/cancel" => none(Slash::Cancel),
        "/undo" => none(Slash::Undo),
        "/diff" => Ok(Slash::Diff(arg)),
        "/tasks" => none(Slash::Tasks),
        "/settings" => none(Slash::Settings),
        "/new" => Ok(Slash::New(arg)),
        "/help" | "/?" => none(Slash::Help),
        "/quit" | "/exit" | "/q" => none(Slash::Quit),
        other => Err(format!(
            "unknown command {other}; /help lists them (start with // to send a message that begins with /)"
        )),
    })
}

/// The message text of a line that is not a command (`//x` sends `/x`).
pub fn message_text(line: &str) -> &str {
    match line.strip_prefix("//") {
        Some(rest) => &line[line.len() - rest.len() - 1..],
        None => line,
    }
}

/// What Tab offers for the text before the cursor: how many chars to replace, and the
/// candidates (each a full replacement of those chars).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Completion {
    pub replace: usize,
    pub candidates: Vec<String>,
}

impl Completion {
    /// The replacement to insert: the only candidate, else the candidates' common
    /// prefix (`None` when that adds nothing).
    pub fn insertion(&self) -> Option<String> {
        let first = self.candidates.first()?;
        if self.candidates.len() == 1 {
            let mut one = first.clone();
            if !one.ends_with('/') {
                one.push(' ');
            }
            return Some(one);
        }
        let mut prefix: Vec<char> = first.chars().collect();
        for c in &self.candidates[1..] {
            let common = prefix
                .iter()
                .zip(c.chars())
                .take_while(|(a, b)| **a == *b)
                .count();
            prefix.truncate(common);
        }
        (prefix.len() > self.replace).then(|| prefix.into_iter().collect())
    }
}

/// Completes a command name, a mode, or a directory for `/link`. `cwd` resolves
/// relative paths, `home` expands `~`.
pub fn complete(before: &str, cwd: &Path, home: &Path) -> Completion {
    if before.contains('\n') || !before.starts_with('/') {
        return Completion::default();
    }
    let Some((name, arg)) = before.split_once(' ') else {
        return Completion {
            replace: before.chars().count(),
            candidates: COMMANDS
                .iter()
                .map(|(c, _, _)| (*c).to_owned())
                .filter(|c| c.starts_with(before))
                .collect(),
        };
    };
    let arg = arg.trim_start();
    match name {
        "/mode" => Completion {
            replace: arg.chars().count(),
            candidates: MODES
                .iter()
                .filter(|m| m.starts_with(arg))
                .map(|m| (*m).to_owned())
                .collect(),
        },
        "/link" => Completion {
            replace: arg.chars().count(),
            candidates: directories(arg, cwd, home),
        },
        _ => Completion::default(),
    }
}

/// Directories whose path starts with `typed`, written as the user typed them (`~`
/// kept), each ending in `/`. Hidden ones only when the name typed starts with `.`.
fn directories(typed: &str, cwd: &Path, home: &Path) -> Vec<String> {
    let (dir_part, name_part) = match typed.rfind('/') {
        Some(i) => (&typed[..=i], &typed[i + 1..]),
        None => ("", typed),
    };
    let base: PathBuf = if dir_part.is_empty() {
        if typed == "~" {
            return vec![String::from("~/")];
        }
        cwd.to_owned()
    } else if let Some(rest) = dir_part.strip_prefix("~/") {
        home.join(rest)
    } else if dir_part.starts_with('/') {
        PathBuf::from(dir_part)
    } else {
        cwd.join(dir_part)
    };
    let Ok(entries) = std::fs::read_dir(&base) else {
        return Vec::new();
    };
    let mut out: Vec<String> = entries
        .filter_map(Result::ok)
        .filter(|e| std::fs::metadata(e.path()).is_ok_and(|m| m.is_dir()))
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with(name_part) && (name_part.starts_with('.') || !n.starts_with('.')))
        .map(|n| format!("{dir_part}{n}/"))
        .collect();
    out.sort();
    out
}

/// `/link`'s argument as a path: `~` expanded, relative to `cwd`.
pub fn link_path(arg: Option<&str>, cwd: &Path, home: &Path) -> PathBuf {
    match arg {
        None => cwd.to_owned(),
        Some("~") => home.to_owned(),
        Some(a) => match a.strip_prefix("~/") {
            Some(rest) => home.join(rest),
            None => cwd.join(a),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_parse_and_refuse_with_a_reason() {
        assert_eq!(parse("hello"), None);
        assert_eq!(parse("//etc is a path"), None);
        assert_eq!(message_text("//etc"), "/etc");
        assert_eq!(message_text("plain"), "plain");
        assert_eq!(parse("/link"), Some(Ok(Slash::Link(None))));
        assert_eq!(
            parse(" /link ~/code/my app "),
            Some(Ok(Slash::Link(Some("~/code/my app".into()))))
        );
        assert_eq!(
            parse("/mode worktree"),
            Some(Ok(Slash::Mode("worktree".into())))
        );
        assert!(parse("/mode sideways").unwrap().is_err());
        assert!(parse("/cancel now").unwrap().is_err());
        assert!(parse("/frobnicate").unwrap().unwrap_err().contains("/help"));
        assert_eq!(parse("/q"), Some(Ok(Slash::Quit)));
        assert_eq!(parse("/diff"), Some(Ok(Slash::Diff(None))));
        assert_eq!(parse("/diff 2"), Some(Ok(Slash::Diff(Some("2".into())))));
    }

    #[test]
    fn completion_covers_names_modes_and_directories() {
        let root = std::env::temp_dir().join(format!("berth-slash-{}", std::process::id()));
        for d in ["code/app", "code/api", "code/.hidden", "docs"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::write(root.join("code/afile"), "").unwrap();
        let home = root.clone();
        let c = complete("/li", &root, &home);
        assert_eq!(c.candidates, ["/link"]);
        assert_eq!(c.insertion().as_deref(), Some("/link "));
        assert_eq!(complete("/mode w", &root, &home).candidates, ["worktree"]);
        let c = complete("/link code/a", &root, &home);
        assert_eq!(c.candidates, ["code/api/", "code/app/"]);
        assert_eq!(c.insertion().as_deref(), Some("code/ap"));
        assert_eq!(c.replace, 6);
        let c = complete("/link ~/d", &root, &home);
        assert_eq!(c.candidates, ["~/docs/"]);
        assert_eq!(c.insertion().as_deref(), Some("~/docs/"));
        assert_eq!(
            complete("/link code/.", &root, &home).candidates,
            ["code/.hidden/"]
        );
        assert_eq!(complete("hello /li", &root, &home), Completion::default());
        assert_eq!(link_path(Some("~/code"), &root, &home), root.join("code"));
        let _ = std::fs::remove_dir_all(&root);
    }
}
