//! `/diff [N]`: which task, and its lines as the transcript shows them (added green,
//! removed red, the rest dim; PgUp/PgDn scroll). The text is the agent's: every line
//! goes through [`inert`], so a file's escape sequences never reach the terminal.

use super::super::error::CliError;
use super::super::render::{inert, short};
use super::Said;
use super::view::Style;
use berth_core::api::TaskStatus;
use berth_core::patch::DiffDoc;
use serde_json::Value;

/// The task `/diff` shows, from the session's tasks (oldest first): the last that
/// ended; `N`, the Nth as `/tasks` numbers them; else the one whose id starts so.
pub fn pick(tasks: &Value, which: Option<&str>) -> Result<String, CliError> {
    let all: Vec<&Value> = tasks.as_array().into_iter().flatten().collect();
    let id = |t: &Value| t["id"].as_str().map(str::to_owned);
    let found = match which {
        None => all
            .iter()
            .rev()
            .find(|t| {
                serde_json::from_value::<TaskStatus>(t["status"].clone())
                    .is_ok_and(TaskStatus::is_final)
            })
            .and_then(|t| id(t)),
        Some(n) if n.parse::<usize>().is_ok() => n
            .parse::<usize>()
            .ok()
            .and_then(|n| n.checked_sub(1))
            .and_then(|i| all.get(i))
            .and_then(|t| id(t)),
        Some(prefix) => {
            let hits: Vec<String> = all
                .iter()
                .filter_map(|t| id(t))
                .filter(|t| t.starts_with(prefix))
                .collect();
            if hits.len() > 1 {
                return Err(CliError::usage(
                    format!(
                        "{} tasks of this session start with {}",
                        hits.len(),
                        inert(prefix)
                    ),
                    "give more of the id, or its number from /tasks",
                ));
            }
            hits.into_iter().next()
        }
    };
    found.ok_or_else(|| match which {
        None => CliError::usage(
            "this session has no finished task to show",
            "send a message first",
        ),
        Some(w) => CliError::usage(
            format!(
                "this session has no task {} (it has {})",
                inert(w),
                all.len()
            ),
            "/tasks lists them, numbered",
        ),
    })
}

/// The transcript lines of task `task`'s diff document (`GET tasks/{id}/diff?format=json`).
pub fn lines(task: &str, doc: &Value) -> Said {
    let doc: DiffDoc = match serde_json::from_value(doc.clone()) {
        Ok(d) => d,
        Err(e) => {
            return vec![(
                Style::Alert,
                format!(
                    "the server's diff of task {} is unreadable: {e}",
                    short_id(task)
                ),
            )];
        }
    };
    if doc.diff.is_empty() {
        return vec![(
            Style::Info,
            format!(
                "task {} changed no lines Berth kept (no files, or it ran without a change record)",
                short_id(task)
            ),
        )];
    }
    let n = doc.diff.files.len();
    let mut out: Said = vec![(
        Style::Info,
        format!(
            "task {} · {n} file{} · PgUp/PgDn scroll, Esc returns",
            short_id(task),
            if n == 1 { "" } else { "s" }
        ),
    )];
    for f in &doc.diff.files {
        let what = match (&f.from, f.binary) {
            (Some(from), _) => format!("{} → {}", inert(from), inert(&f.path)),
            (None, true) => format!("{} (binary)", inert(&f.path)),
            (None, false) => inert(&f.path),
        };
        out.push((Style::Info, format!("── {} {what}", inert(&f.status))));
        let mut in_hunk = false;
        for line in f.text.lines() {
            in_hunk |= line.starts_with("@@");
            let style = match line.as_bytes().first() {
                Some(b'+') if in_hunk => Style::Added,
                Some(b'-') if in_hunk => Style::Removed,
                _ => Style::Dim,
            };
            out.push((style, inert(line)));
        }
        if f.cut_lines > 0 {
            out.push((
                Style::Alert,
                format!("… {} more lines of {} cut", f.cut_lines, inert(&f.path)),
            ));
        }
    }
    if let Some(note) = &doc.note {
        out.push((Style::Alert, format!("… {}", inert(note))));
    }
    out
}

fn short_id(task: &str) -> String {
    short(&Value::String(task.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_task_is_the_last_ended_its_number_or_its_id() {
        let tasks = json!([
            {"id": "aaa1", "status": "succeeded"},
            {"id": "bbb2", "status": "failed"},
            {"id": "ccc3", "status": "running"},
        ]);
        assert_eq!(pick(&tasks, None).unwrap(), "bbb2");
        assert_eq!(pick(&tasks, Some("1")).unwrap(), "aaa1");
        assert_eq!(pick(&tasks, Some("ccc")).unwrap(), "ccc3");
        assert!(pick(&tasks, Some("4")).is_err());
        assert!(pick(&tasks, Some("0")).is_err());
        assert!(pick(&json!([]), None).is_err());
    }

    #[test]
    fn lines_are_styled_and_a_files_escapes_are_inert() {
        let raw =
            "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-old\n+new \u{1b}[2J<script>\n";
        let doc = DiffDoc::new(
            "t1",
            berth_core::patch::TaskDiff::parse(raw.as_bytes(), false),
        );
        let said = lines("t1", &serde_json::to_value(doc).unwrap());
        let styles: Vec<Style> = said.iter().map(|(s, _)| *s).collect();
        assert_eq!(
            styles,
            [
                Style::Info,
                Style::Info,
                Style::Dim,
                Style::Dim,
                Style::Dim,
                Style::Dim,
                Style::Removed,
                Style::Added
            ]
        );
        let added = &said[7].1;
        assert!(!added.contains('\u{1b}'), "{added:?}");
        assert!(added.contains("<script>"), "text stays text: {added:?}");
    }
}
