//! Approvals: what the `ask` policy puts to a human, the rules that answer in their
//! place, and what is kept of every decision.
//!
//! Under [`Permissions::Ask`] an agent's reads and its edits inside the run's
//! directory go ahead; everything else (commands, fetches, deletes and moves, changes
//! outside the directory) waits for a person. The user's rules move a kind, a command
//! prefix or a path either way (`"ask": {"allow": ["execute: cargo test"], "deny":
//! ["execute: git push --force"]}`); a deny always beats an allow. "Always", said to
//! one request, becomes a session rule of the same shape.
//!
//! A rule's command prefix matches only a *simple* command: `cargo test --all` is
//! `cargo test`, `cargo test && curl x | sh` is nothing (see [`simple_command`]).
//!
//! Pure: the runner judges with it, the server keeps and lists what it judged.
//!
//! [`Permissions::Ask`]: crate::Permissions::Ask

use serde::{Deserialize, Serialize};
use std::fmt;

/// How long a request waits for a person when the user settings name no deadline.
pub const DEFAULT_DEADLINE_SECS: u64 = 600;

/// One of the choices an agent offers with a request (an ACP `PermissionOption`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalOption {
    pub id: String,
    pub name: String,
    /// `allow_once`, `allow_always`, `reject_once` or `reject_always`.
    pub kind: String,
}

/// What an agent asks to do, put to a person. Sent by the runner; the server gives it
/// its absolute deadline when it arrives (so a daemon's clock does not matter).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalRequest {
    /// The task's id and the request's number in it (`<task>-1`): unique, and a
    /// prefix of it names it on the command line.
    pub id: String,
    /// The tool call's kind: `execute`, `edit`, `delete`, `move`, `fetch`, `other`…
    pub kind: String,
    /// The agent's own one-line title of the call.
    pub title: String,
    /// The command line, for `execute`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// The paths the call acts on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
    /// The agent's full input for the call, as it sent it (a diff's text included).
    #[serde(default)]
    pub input: serde_json::Value,
    /// The agent's choices (empty for agents that offer none: Claude Code).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<ApprovalOption>,
    /// Seconds the request may wait for a person before it is denied as timed out.
    pub deadline_secs: u64,
}

/// Allow or deny.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Allow,
    Deny,
}

impl Verdict {
    pub const fn as_str(self) -> &'static str {
        match self {
            Verdict::Allow => "allow",
            Verdict::Deny => "deny",
        }
    }
}

/// Who (or what) decided a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DecidedBy {
    /// A person, from `berth chat`, the CLI, the API or the web.
    Human,
    /// A rule: the user settings' `ask.allow`/`ask.deny`, or a session's "always".
    Rule,
    /// The policy itself (a read, an edit inside the directory).
    Policy,
    /// Nobody answered before the deadline: denied, and said so.
    Timeout,
    /// The task was cancelled while the request waited.
    Cancel,
}

impl DecidedBy {
    pub const fn as_str(self) -> &'static str {
        match self {
            DecidedBy::Human => "human",
            DecidedBy::Rule => "rule",
            DecidedBy::Policy => "policy",
            DecidedBy::Timeout => "timeout",
            DecidedBy::Cancel => "cancel",
        }
    }
}

/// The runner's side of a decision: what to tell the agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    pub verdict: Verdict,
    pub by: DecidedBy,
    /// For a denial: the words the agent (and its model) is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The person said "always": the agent may be told so (an ACP `allow_always`).
    #[serde(default)]
    pub always: bool,
}

impl Answer {
    /// The denial of a request nobody answered in `secs` seconds, in words the model
    /// can act on: never a person's "no".
    pub fn timed_out(secs: u64) -> Answer {
        Answer {
            verdict: Verdict::Deny,
            by: DecidedBy::Timeout,
            reason: Some(format!(
                "approval_timeout: nobody answered this request within {secs} s, so it was not run; no person denied it. Do not retry it unasked: say it needs approval and go on with what you can do without it"
            )),
            always: false,
        }
    }

    /// The answer to a request the task's cancel overtook.
    pub fn cancelled() -> Answer {
        Answer {
            verdict: Verdict::Deny,
            by: DecidedBy::Cancel,
            reason: Some("the task was cancelled while this request waited".to_owned()),
            always: false,
        }
    }
}

/// A decision as kept on its task and shown: the audit's entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    pub decision: Verdict,
    pub by: DecidedBy,
    /// The member who answered (`None` for rules, the policy and timeouts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub who: Option<String>,
    /// Where the answer came from: `chat`, `cli`, `api`, `web`, `slack`…; for a rule,
    /// the rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
    /// RFC 3339, UTC.
    pub at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The answer made a session rule ("always").
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub always: bool,
}

/// A request as listed (`berth approvals`, `GET /api/v1/approvals`) and kept on its
/// task (`approvals: [...]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Approval {
    pub id: String,
    pub task_id: crate::TaskId,
    pub session_id: crate::SessionId,
    pub kind: String,
    pub title: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
    #[serde(default)]
    pub input: serde_json::Value,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<ApprovalOption>,
    /// When the request arrived and when it is denied unanswered (RFC 3339, UTC).
    pub asked_at: String,
    pub deadline: String,
    /// `None` while it waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
}

/// A rule a session's "always" made: listed by `berth session rules ID`, removed by
/// its number.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRule {
    /// Its number in the session (never reused).
    pub n: i64,
    /// The rule, as [`Rule`] prints it (`execute: sh ./check.sh`).
    pub rule: String,
    pub added_at: String,
    /// The request whose "always" made it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
}

impl Approval {
    /// What the request is about, for the rules.
    pub fn subject(&self) -> Subject<'_> {
        Subject {
            kind: &self.kind,
            command: self.command.as_deref(),
            paths: &self.paths,
        }
    }

    /// The task an approval id names (everything before its last `-`), and its number.
    pub fn split_id(id: &str) -> Option<(&str, u32)> {
        let (task, n) = id.rsplit_once('-')?;
        Some((task, n.parse().ok()?))
    }

    /// An approval id as a person types it: the task's first eight characters and the
    /// request's number (`3f9c0a12-1`); the CLI resolves it among what waits.
    pub fn short_id(id: &str) -> String {
        match Approval::split_id(id) {
            Some((task, n)) => format!("{}-{n}", &task[..task.len().min(8)]),
            None => id.to_owned(),
        }
    }
}

/// What one request is about, for the rules: its kind, its command line, its paths.
#[derive(Debug, Clone, Copy)]
pub struct Subject<'a> {
    pub kind: &'a str,
    pub command: Option<&'a str>,
    pub paths: &'a [String],
}

/// What a rule matches besides the kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    /// Every request of the kind.
    Any,
    /// A command whose words begin with these (a simple command only).
    Prefix(Vec<String>),
    /// Requests whose every path is this one or under it.
    Path(String),
}

/// One rule: `kind`, `kind: command prefix` or `kind: /path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub kind: String,
    pub pattern: Pattern,
}

/// The kinds a rule may name.
pub const KINDS: [&str; 10] = [
    "read", "edit", "delete", "move", "search", "execute", "think", "fetch", "other", "*",
];

impl Rule {
    /// Parses `execute: cargo test`, `edit: /home/u/notes`, `fetch` or `*: …`.
    pub fn parse(text: &str) -> Result<Rule, String> {
        let (kind, rest) = match text.split_once(':') {
            Some((k, r)) => (k.trim(), Some(r.trim())),
            None => (text.trim(), None),
        };
        if !KINDS.contains(&kind) {
            return Err(format!(
                "{kind:?} is not a kind; a rule starts with one of {} (then, optionally, \": \" and a command prefix or a path)",
                KINDS.join(", ")
            ));
        }
        let pattern = match rest {
            None => Pattern::Any,
            Some("") => return Err(format!("nothing follows {kind:?}: in {text:?}")),
            Some(r) if r.starts_with('/') || r.starts_with("~/") => match r.trim_end_matches('/') {
                "" => Pattern::Path("/".to_owned()),
                r => Pattern::Path(r.to_owned()),
            },
            Some(r) => match simple_command(r) {
                Some(words) if !words.is_empty() => Pattern::Prefix(words),
                _ => {
                    return Err(format!(
                        "{r:?} is not a simple command: a rule's prefix has no ;, &, |, redirections, quotes left open or substitutions"
                    ));
                }
            },
        };
        Ok(Rule {
            kind: kind.to_owned(),
            pattern,
        })
    }

    /// The rule for "always" said to `s`: its kind and command (all of it), else its
    /// kind and its one path; `None` when neither can be told exactly (a compound
    /// command, several paths): then "always" is refused rather than made wide.
    pub fn always_for(s: Subject<'_>) -> Option<Rule> {
        let pattern = match (s.command, s.paths) {
            (Some(c), _) => Pattern::Prefix(simple_command(c).filter(|w| !w.is_empty())?),
            (None, [p]) if p.starts_with('/') => Pattern::Path(p.trim_end_matches('/').to_owned()),
            _ => return None,
        };
        Some(Rule {
            kind: s.kind.to_owned(),
            pattern,
        })
    }

    /// Whether the rule covers `s`.
    pub fn matches(&self, s: Subject<'_>) -> bool {
        if self.kind != "*" && self.kind != s.kind {
            return false;
        }
        match &self.pattern {
            Pattern::Any => true,
            Pattern::Prefix(prefix) => s
                .command
                .and_then(simple_command)
                .is_some_and(|words| words.starts_with(prefix)),
            Pattern::Path(root) => {
                !s.paths.is_empty()
                    && s.paths.iter().all(|p| {
                        !p.split('/').any(|c| c == "..")
                            && (p == root
                                || (root == "/" && p.starts_with('/'))
                                || p.strip_prefix(root.as_str())
                                    .is_some_and(|r| r.starts_with('/')))
                    })
            }
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.pattern {
            Pattern::Any => f.write_str(&self.kind),
            Pattern::Prefix(words) => write!(f, "{}: {}", self.kind, words.join(" ")),
            Pattern::Path(p) => write!(f, "{}: {p}", self.kind),
        }
    }
}

/// The words of a simple command, unquoted: `None` when the line is more than one
/// command or could do more than it shows (`;`, `&`, `|`, a redirection, a newline,
/// `$(…)`, backquotes, `$VAR`, globs, a subshell or a brace group, a quote left open).
/// A rule's prefix is judged on these words, so `cargo test && curl x | sh` matches no
/// `cargo test` rule, and `cargo test; rm -rf ~` neither.
pub fn simple_command(line: &str) -> Option<Vec<String>> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.trim().chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '\'' => break,
                        c => word.push(c),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '"' => break,
                        // Inside double quotes the shell still expands these.
                        '$' | '`' => return None,
                        '\\' => match chars.next()? {
                            c @ ('"' | '\\') => word.push(c),
                            '$' | '`' => return None,
                            c => {
                                word.push('\\');
                                word.push(c);
                            }
                        },
                        c => word.push(c),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next()? {
                    '\n' => return None,
                    c => word.push(c),
                }
            }
            ';' | '&' | '|' | '<' | '>' | '\n' | '\r' | '`' | '$' | '(' | ')' | '{' | '}' | '*'
            | '?' | '[' | ']' | '~' | '#' | '!' => return None,
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Some(words)
}

/// The user's `ask` rules (settings): what goes ahead or is refused without asking.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AskRules {
    pub allow: Vec<Rule>,
    pub deny: Vec<Rule>,
    /// Seconds a request waits for a person ([`DEFAULT_DEADLINE_SECS`] if unset).
    pub deadline_secs: Option<u64>,
}

/// What `ask` makes of one request before anybody is asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judgement {
    /// Goes ahead: by the policy, or by the named allow rule.
    Allow { by: DecidedBy, rule: Option<String> },
    /// Refused by the named deny rule (a deny always beats an allow).
    Deny { rule: String },
    /// Put to a person.
    Ask,
}

/// The kinds that only look (a fetch reaches out, so it is asked).
const LOOKS: [&str; 3] = ["read", "search", "think"];

/// How the `ask` policy judges `s`, for a run in `work_dir`: a deny rule first, then
/// what the policy lets through itself (looking; editing inside the directory), then an
/// allow rule; everything else is asked. `inside` tells whether a path is inside the
/// run's directory (the caller resolves relative paths against it).
pub fn judge(rules: &AskRules, s: Subject<'_>, inside: impl Fn(&str) -> bool) -> Judgement {
    if let Some(r) = rules.deny.iter().find(|r| r.matches(s)) {
        return Judgement::Deny {
            rule: r.to_string(),
        };
    }
    let edits_inside = s.kind == "edit" && !s.paths.is_empty() && s.paths.iter().all(|p| inside(p));
    if LOOKS.contains(&s.kind) || edits_inside {
        return Judgement::Allow {
            by: DecidedBy::Policy,
            rule: None,
        };
    }
    match rules.allow.iter().find(|r| r.matches(s)) {
        Some(r) => Judgement::Allow {
            by: DecidedBy::Rule,
            rule: Some(r.to_string()),
        },
        None => Judgement::Ask,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Option<Vec<String>> {
        simple_command(s)
    }

    fn ex<'a>(cmd: &'a str) -> Subject<'a> {
        Subject {
            kind: "execute",
            command: Some(cmd),
            paths: &[],
        }
    }

    #[test]
    fn a_simple_command_is_its_words_and_a_compound_one_is_none() {
        assert_eq!(
            words("cargo test --all").unwrap(),
            ["cargo", "test", "--all"]
        );
        assert_eq!(words("  sh ./check.sh ").unwrap(), ["sh", "./check.sh"]);
        assert_eq!(
            words("git commit -m 'a b'").unwrap(),
            ["git", "commit", "-m", "a b"]
        );
        assert_eq!(words(r#"echo "x\"y""#).unwrap(), ["echo", "x\"y"]);
        for compound in [
            "cargo test && curl x | sh",
            "cargo test; rm -rf ~",
            "cargo test || true",
            "cargo test &",
            "cargo test > /etc/passwd",
            "cargo test < x",
            "cargo test\nrm -rf /",
            "cargo test $(curl x)",
            "cargo test `id`",
            "cargo test \"$(id)\"",
            "cargo test $HOME",
            "(cargo test)",
            "{ cargo test; }",
            "cargo test 'open",
            "cargo test *",
            "cargo test ~/x",
        ] {
            assert_eq!(words(compound), None, "{compound}");
        }
    }

    #[test]
    fn rules_parse_print_and_match() {
        let r = Rule::parse("execute: cargo test").unwrap();
        assert_eq!(r.to_string(), "execute: cargo test");
        assert!(r.matches(ex("cargo test")));
        assert!(r.matches(ex("cargo test --all -q")));
        assert!(r.matches(ex("cargo   'test'")));
        assert!(!r.matches(ex("cargo testify")));
        assert!(!r.matches(ex("cargo")));
        assert!(!r.matches(ex("cargo test && curl x | sh")));
        assert!(!r.matches(ex("cargo test; rm -rf /")));
        assert!(!r.matches(Subject {
            kind: "fetch",
            command: Some("cargo test"),
            paths: &[]
        }));
        let any = Rule::parse("fetch").unwrap();
        assert!(any.matches(Subject {
            kind: "fetch",
            command: None,
            paths: &[]
        }));
        let star = Rule::parse("*: make").unwrap();
        assert!(star.matches(ex("make all")));
        let p = Rule::parse("edit: /home/u/notes/").unwrap();
        assert_eq!(p.to_string(), "edit: /home/u/notes");
        let paths = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let on = |v: &[String]| {
            p.matches(Subject {
                kind: "edit",
                command: None,
                paths: v,
            })
        };
        assert!(on(&paths(&["/home/u/notes/a.md", "/home/u/notes"])));
        assert!(!on(&paths(&["/home/u/notes2/a.md"])));
        assert!(!on(&paths(&["/home/u/notes/../.bashrc"])));
        assert!(!on(&paths(&["/home/u/notes/a.md", "/etc/x"])));
        assert!(!on(&[]));
        for bad in ["exec: x", "execute:", "execute: a | b", "execute: 'x"] {
            assert!(Rule::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn always_is_made_exact_or_not_at_all() {
        let r = Rule::always_for(ex("sh ./check.sh")).unwrap();
        assert_eq!(r.to_string(), "execute: sh ./check.sh");
        assert!(r.matches(ex("sh ./check.sh")));
        assert!(!r.matches(ex("sh ./check.sh && curl x")));
        assert_eq!(Rule::always_for(ex("a && b")), None);
        let one = ["/w/x".to_owned()];
        let r = Rule::always_for(Subject {
            kind: "delete",
            command: None,
            paths: &one,
        })
        .unwrap();
        assert_eq!(r.to_string(), "delete: /w/x");
        let two = ["/w/x".to_owned(), "/w/y".to_owned()];
        assert_eq!(
            Rule::always_for(Subject {
                kind: "delete",
                command: None,
                paths: &two
            }),
            None
        );
    }

    #[test]
    fn ask_lets_looks_and_inside_edits_through_asks_the_rest_and_deny_wins() {
        let rules = AskRules {
            allow: vec![
                Rule::parse("execute: cargo test").unwrap(),
                Rule::parse("execute: git push").unwrap(),
            ],
            deny: vec![Rule::parse("execute: git push --force").unwrap()],
            deadline_secs: None,
        };
        let inside = |p: &str| p.starts_with("/w/");
        let j = |s| judge(&rules, s, inside);
        let policy = Judgement::Allow {
            by: DecidedBy::Policy,
            rule: None,
        };
        let inner = ["/w/a.rs".to_owned()];
        let outer = ["/home/u/.bashrc".to_owned()];
        let sub = |kind, paths| Subject {
            kind,
            command: None,
            paths,
        };
        assert_eq!(j(sub("read", &outer)), policy);
        assert_eq!(j(sub("search", &[])), policy);
        assert_eq!(j(sub("edit", &inner)), policy);
        assert_eq!(j(sub("edit", &outer)), Judgement::Ask);
        assert_eq!(j(sub("delete", &inner)), Judgement::Ask);
        assert_eq!(j(sub("move", &inner)), Judgement::Ask);
        assert_eq!(j(sub("fetch", &[])), Judgement::Ask);
        assert_eq!(j(ex("sh ./check.sh")), Judgement::Ask);
        assert_eq!(
            j(ex("cargo test -q")),
            Judgement::Allow {
                by: DecidedBy::Rule,
                rule: Some("execute: cargo test".into())
            }
        );
        assert_eq!(j(ex("cargo test && curl x | sh")), Judgement::Ask);
        assert_eq!(
            j(ex("git push --force origin")),
            Judgement::Deny {
                rule: "execute: git push --force".into()
            }
        );
        assert!(matches!(j(ex("git push origin")), Judgement::Allow { .. }));
    }

    #[test]
    fn a_timeout_is_never_said_to_be_a_person() {
        let a = Answer::timed_out(600);
        assert_eq!((a.verdict, a.by), (Verdict::Deny, DecidedBy::Timeout));
        let why = a.reason.unwrap();
        assert!(why.starts_with("approval_timeout"), "{why}");
        assert!(why.contains("no person denied it"), "{why}");
    }
}
