//! `berth usage [--since DATE] [--by agent|session|day] [--json]`: token usage added
//! up by the server (`GET usage`), and one session's (`GET sessions/{id}/usage`) for
//! `session show` and the chat's header.

use super::client::{Client, encode};
use super::error::CliError;
use super::render::{escape, print_json, short};
use berth_core::usage::{BY_HINT, SINCE_HINT, UsageBy, UsageReport, UsageTotals};
use serde_json::Value;

/// The query string `since` and `by` make, each checked here first: a bad value is
/// bad usage (exit 2) with what it takes, before any request.
fn query(since: Option<&str>, by: Option<&str>) -> Result<String, CliError> {
    let mut q = Vec::new();
    if let Some(s) = since {
        let s = berth_core::usage::since(s)
            .ok_or_else(|| CliError::usage(format!("--since {s:?} is not a date"), SINCE_HINT))?;
        q.push(format!("since={}", encode(&s)));
    }
    if let Some(b) = by {
        let b = UsageBy::parse(b).ok_or_else(|| {
            CliError::usage(format!("--by {b:?} is not a grouping of usage"), BY_HINT)
        })?;
        q.push(format!("by={}", b.as_str()));
    }
    Ok(if q.is_empty() {
        String::new()
    } else {
        format!("?{}", q.join("&"))
    })
}

pub async fn report(
    c: &Client,
    since: Option<&str>,
    by: Option<&str>,
    json: bool,
) -> Result<u8, CliError> {
    let v = c
        .get(&format!("/api/v1/usage{}", query(since, by)?))
        .await?;
    if json {
        print_json(&v);
        return Ok(0);
    }
    let r: UsageReport = serde_json::from_value(v).map_err(|e| {
        CliError::new(
            format!("the server's usage answer does not read: {e}"),
            "use a berth of the server's version, or --json",
        )
    })?;
    for line in lines(&r) {
        println!("{line}");
    }
    Ok(0)
}

/// The report for people: a line per group, then the total.
fn lines(r: &UsageReport) -> Vec<String> {
    let mut out = vec![match &r.since {
        Some(s) => format!("usage since {s}, by {}:", r.by.as_str()),
        None => format!("usage by {}:", r.by.as_str()),
    }];
    // Titles and agents' names are people's text: shown inert.
    let label = |g: &berth_core::usage::UsageGroup| match (r.by, &g.title) {
        (UsageBy::Session, Some(t)) => {
            format!("{} {}", short(&Value::from(g.key.as_str())), escape(t))
        }
        _ => escape(&g.key).into_owned(),
    };
    let labels: Vec<String> = r.groups.iter().map(label).collect();
    let width = labels
        .iter()
        .map(|l| l.chars().count())
        .max()
        .unwrap_or(0)
        .max(5);
    for (l, g) in labels.iter().zip(&r.groups) {
        out.push(format!("  {l:<width$}  {}", g.totals.line()));
    }
    if r.groups.is_empty() {
        out.push("  no task reported usage".to_owned());
    }
    out.push(format!("  {:<width$}  {}", "total", r.total.line()));
    out
}

/// One session's usage totals (`id` a full id or a unique prefix).
pub async fn of_session(c: &Client, id: &str) -> Result<UsageTotals, CliError> {
    let v = c
        .get(&format!("/api/v1/sessions/{}/usage", encode(id)))
        .await?;
    serde_json::from_value(v).map_err(|e| {
        CliError::new(
            format!("the server's usage answer does not read: {e}"),
            "use a berth of the server's version",
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_core::usage::UsageGroup;

    #[test]
    fn bad_since_and_by_are_bad_usage_with_a_hint() {
        let e = query(Some("last week"), None).unwrap_err();
        assert_eq!((e.exit, e.hint.as_str()), (2, SINCE_HINT), "{}", e.message);
        let e = query(None, Some("month")).unwrap_err();
        assert_eq!((e.exit, e.hint.as_str()), (2, BY_HINT), "{}", e.message);
        assert_eq!(query(None, None).unwrap(), "");
        assert_eq!(
            query(Some("2026-12-01T10:00:00Z"), Some("day")).unwrap(),
            "?since=2026-12-01T10%3A00%3A00.000Z&by=day"
        );
    }

    #[test]
    fn a_report_reads_as_lines() {
        let totals = |tasks, input| UsageTotals {
            tasks,
            input,
            output: 1,
            ..UsageTotals::default()
        };
        let r = UsageReport {
            since: Some("2026-12-01".into()),
            by: UsageBy::Session,
            groups: vec![UsageGroup {
                key: "0123456789abcdef".into(),
                title: Some("fix the build".into()),
                totals: totals(1, 1000),
            }],
            total: totals(1, 1000),
        };
        let mut hostile = r.clone();
        hostile.groups[0].title = Some("\u{1b}[2Jgone".into());
        assert!(
            !lines(&hostile)[1].contains('\u{1b}'),
            "{:?}",
            lines(&hostile)
        );
        assert_eq!(
            lines(&r),
            [
                "usage since 2026-12-01, by session:",
                "  01234567 fix the build  1,000 in · 1 out (1 task)",
                "  total                   1,000 in · 1 out (1 task)",
            ]
        );
    }
}
