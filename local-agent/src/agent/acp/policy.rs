//! `session/request_permission`, answered at once from the agent's Berth policy and
//! the tool call's kind: nothing is left pending (a pending request is a stuck agent).
//!
//! | policy | allows | rejects |
//! |---|---|---|
//! | `read-only` | `read`, `search`, `think`, `fetch` | everything else (`edit`, `delete`, `move`, `execute`, `other`…) |
//! | `edit` | those, and `edit`/`delete`/`move` inside the run's directory; `execute` where the fence confines it | changes outside the directory; `execute` unfenced |
//! | `ask` | `read`, `search`, `think`, and `edit` inside the run's directory | what a deny rule of the user's `ask` settings names; the rest (`execute`, `fetch`, `delete`, `move`, changes outside, `other`) is put to a person, unless an allow rule lets it through |
//! | `full` | everything | — |
//!
//! `switch_mode` (an agent leaving a plan mode on its own) is rejected under every
//! policy: Berth sets the mode. The answer picks an option by its kind, never by its
//! id (agents name them differently): `allow_once` before `allow_always`, so each call
//! is judged again, and `reject_once` before `reject_always`.

use berth_core::Permissions;
use berth_core::approval::{AskRules, Judgement, Subject};
use serde_json::Value;
use std::path::Path;

/// Berth's answer to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow,
    /// Rejected, and why (the denial's message).
    Reject(String),
    /// Put to a person (the `ask` policy).
    Ask,
}

/// The kinds an ACP tool call may have that only look.
const LOOKS: &[&str] = &["read", "search", "think", "fetch"];
/// The kinds that change files.
const CHANGES: &[&str] = &["edit", "delete", "move"];

/// The decision for a tool call of `kind` acting on `paths` (running `command`, for
/// `execute`). `rules` are the user's `ask` rules, read under `ask` only.
pub fn decide(
    permissions: Permissions,
    fenced: bool,
    call: Subject<'_>,
    work_dir: &Path,
    rules: &AskRules,
) -> Decision {
    let (kind, paths) = (call.kind, call.paths);
    if kind == "switch_mode" {
        return Decision::Reject("Berth sets the agent's mode from its policy".to_owned());
    }
    match permissions {
        Permissions::Ask => match berth_core::approval::judge(rules, call, |p| inside(work_dir, p))
        {
            Judgement::Allow { .. } => Decision::Allow,
            Judgement::Deny { rule } => {
                Decision::Reject(format!("refused by your ask rule \"{rule}\""))
            }
            Judgement::Ask => Decision::Ask,
        },
        Permissions::Full => Decision::Allow,
        Permissions::ReadOnly if LOOKS.contains(&kind) => Decision::Allow,
        Permissions::ReadOnly => Decision::Reject(format!(
            "the agent's policy is read-only: no {kind} actions"
        )),
        Permissions::Edit if LOOKS.contains(&kind) => Decision::Allow,
        Permissions::Edit if CHANGES.contains(&kind) => {
            match paths.iter().find(|p| !inside(work_dir, p)) {
                Some(out) => Decision::Reject(format!(
                    "the agent's policy is edit: only inside {}, not {out}",
                    work_dir.display()
                )),
                None => Decision::Allow,
            }
        }
        Permissions::Edit if kind == "execute" && fenced => Decision::Allow,
        Permissions::Edit if kind == "execute" => Decision::Reject(
            "the agent's policy is edit and no fence confines it here: no commands".to_owned(),
        ),
        Permissions::Edit => Decision::Reject(format!(
            "the agent's policy is edit: {kind} actions need full"
        )),
    }
}

pub use crate::agent::ask::inside;

/// The option to answer with, by kind: an allow option for [`Decision::Allow`], a
/// reject option otherwise. `None` when the agent offers none of that side: the
/// request is then answered `cancelled`.
pub fn pick(options: &[Value], decision: &Decision) -> Option<String> {
    let order: &[&str] = match decision {
        Decision::Allow => &["allow_once", "allow_always"],
        Decision::Reject(_) | Decision::Ask => &["reject_once", "reject_always"],
    };
    order.iter().find_map(|kind| {
        options
            .iter()
            .find(|o| o["kind"] == *kind)
            .and_then(|o| o["optionId"].as_str())
            .map(str::to_owned)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const DIR: &str = "/home/u/code/app";

    fn decision(p: Permissions, fenced: bool, kind: &str, paths: &[&str]) -> Decision {
        let paths: Vec<String> = paths.iter().map(|s| (*s).to_owned()).collect();
        let call = Subject {
            kind,
            command: None,
            paths: &paths,
        };
        decide(p, fenced, call, Path::new(DIR), &AskRules::default())
    }

    fn d(p: Permissions, fenced: bool, kind: &str, paths: &[&str]) -> bool {
        decision(p, fenced, kind, paths) == Decision::Allow
    }

    #[test]
    fn ask_lets_looks_and_inside_edits_through_and_puts_the_rest_to_a_person() {
        let inside = "/home/u/code/app/src/x.rs";
        let outside = "/home/u/.bashrc";
        for k in ["read", "search", "think"] {
            assert_eq!(
                decision(Permissions::Ask, true, k, &[outside]),
                Decision::Allow
            );
        }
        assert_eq!(
            decision(Permissions::Ask, true, "edit", &[inside]),
            Decision::Allow
        );
        for (k, p) in [
            ("edit", outside),
            ("edit", "/home/u/code/app/../x"),
            ("delete", inside),
            ("move", inside),
            ("execute", inside),
            ("fetch", inside),
            ("other", inside),
        ] {
            assert_eq!(
                decision(Permissions::Ask, true, k, &[p]),
                Decision::Ask,
                "{k} {p}"
            );
        }
        assert!(matches!(
            decision(Permissions::Ask, true, "switch_mode", &[]),
            Decision::Reject(_)
        ));
        let deny = AskRules {
            deny: vec![berth_core::approval::Rule::parse("execute: git push").unwrap()],
            ..AskRules::default()
        };
        let push = Subject {
            kind: "execute",
            command: Some("git push origin main"),
            paths: &[],
        };
        let Decision::Reject(why) = decide(Permissions::Ask, true, push, Path::new(DIR), &deny)
        else {
            panic!("a deny rule refuses without asking");
        };
        assert!(why.contains("execute: git push"), "{why}");
    }

    #[test]
    fn decisions_follow_the_policy_and_the_kind() {
        use Permissions::{Edit, Full, ReadOnly};
        let inside = "/home/u/code/app/src/x.rs";
        let outside = "/home/u/.bashrc";
        // read-only: looks only.
        for k in ["read", "search", "think", "fetch"] {
            assert!(d(ReadOnly, false, k, &[inside]), "{k}");
        }
        for k in ["edit", "delete", "move", "execute", "other", "switch_mode"] {
            assert!(!d(ReadOnly, true, k, &[inside]), "{k}");
        }
        // edit: changes inside only; commands only fenced.
        assert!(d(Edit, false, "edit", &[inside]));
        assert!(d(Edit, false, "delete", &["src/x.rs"]));
        assert!(!d(Edit, true, "edit", &[outside]));
        assert!(!d(Edit, true, "move", &[inside, outside]));
        assert!(!d(Edit, true, "edit", &["/home/u/code/app/../other/x"]));
        assert!(!d(Edit, true, "edit", &["/home/u/code/app2/x"]));
        assert!(d(Edit, true, "execute", &[]));
        assert!(!d(Edit, false, "execute", &[]));
        assert!(!d(Edit, true, "other", &[]));
        assert!(!d(Edit, true, "switch_mode", &[]));
        // full: everything but leaving Berth's mode.
        for k in ["edit", "execute", "other"] {
            assert!(d(Full, false, k, &[outside]), "{k}");
        }
        assert!(!d(Full, true, "switch_mode", &[]));
    }

    #[test]
    fn options_are_picked_by_kind_never_by_id() {
        let gemini = [
            json!({"optionId": "proceed_always", "kind": "allow_always"}),
            json!({"optionId": "proceed_once", "kind": "allow_once"}),
            json!({"optionId": "cancel", "kind": "reject_once"}),
        ];
        assert_eq!(
            pick(&gemini, &Decision::Allow).as_deref(),
            Some("proceed_once")
        );
        assert_eq!(
            pick(&gemini, &Decision::Reject(String::new())).as_deref(),
            Some("cancel")
        );
        let only_allow = [json!({"optionId": "ok", "kind": "allow_always"})];
        assert_eq!(pick(&only_allow, &Decision::Reject(String::new())), None);
        assert_eq!(pick(&only_allow, &Decision::Allow).as_deref(), Some("ok"));
    }
}
