//! The benchmark report: figures held against their goals, rendered as a terminal
//! table, one JSON document, and `BENCHMARKS.md`.

use serde::Serialize;
use std::fmt::Write as _;

/// A bound a figure is held against.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "op", content = "bound", rename_all = "snake_case")]
pub enum Goal {
    AtMost(f64),
    AtLeast(f64),
}

impl Goal {
    pub fn holds(self, value: f64) -> bool {
        match self {
            Goal::AtMost(b) => value <= b,
            Goal::AtLeast(b) => value >= b,
        }
    }
}

/// Whether a row meets its goal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Meets,
    Misses,
    /// A figure reported for reference, held against nothing.
    NoGoal,
    /// Not measured; the row's note says why.
    NotAvailable,
    /// The benchmark itself failed; the row's note carries the error.
    Failed,
}

impl Verdict {
    fn label(self) -> &'static str {
        match self {
            Verdict::Meets => "yes",
            Verdict::Misses => "**NO**",
            Verdict::NoGoal => "—",
            Verdict::NotAvailable => "n/a",
            Verdict::Failed => "**FAILED**",
        }
    }
}

/// One figure.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// The benchmark group: `dispatch`, `throughput`, `reads`, `footprint`, `micro`, …
    pub bench: String,
    pub metric: String,
    pub value: Option<f64>,
    /// `ms`, `µs`, `x`, `tasks/s`, `tasks`, `MB`, `B`, `events`.
    pub unit: String,
    pub goal: Option<Goal>,
    pub verdict: Verdict,
    pub note: Option<String>,
}

impl Row {
    /// A measured figure, held against `goal` when there is one.
    pub fn new(bench: &str, metric: &str, value: f64, unit: &str, goal: Option<Goal>) -> Row {
        let verdict = match goal {
            Some(g) if g.holds(value) => Verdict::Meets,
            Some(_) => Verdict::Misses,
            None => Verdict::NoGoal,
        };
        Row {
            bench: bench.to_owned(),
            metric: metric.to_owned(),
            value: Some(value),
            unit: unit.to_owned(),
            goal,
            verdict,
            note: None,
        }
    }

    pub fn not_available(bench: &str, metric: &str, why: &str) -> Row {
        Row {
            bench: bench.to_owned(),
            metric: metric.to_owned(),
            value: None,
            unit: String::new(),
            goal: None,
            verdict: Verdict::NotAvailable,
            note: Some(why.to_owned()),
        }
    }

    pub fn failed(bench: &str, error: &str) -> Row {
        Row {
            bench: bench.to_owned(),
            metric: "(benchmark failed)".to_owned(),
            value: None,
            unit: String::new(),
            goal: None,
            verdict: Verdict::Failed,
            note: Some(error.to_owned()),
        }
    }

    pub fn with_note(mut self, note: impl Into<String>) -> Row {
        self.note = Some(note.into());
        self
    }

    fn value_text(&self) -> String {
        self.value
            .map(|v| fmt_value(v, &self.unit))
            .unwrap_or_else(|| "—".to_owned())
    }

    fn goal_text(&self) -> String {
        match self.goal {
            Some(Goal::AtMost(b)) => format!("≤ {}", fmt_value(b, &self.unit)),
            Some(Goal::AtLeast(b)) => format!("≥ {}", fmt_value(b, &self.unit)),
            None => String::new(),
        }
    }
}

/// A value with its unit, to a sensible precision.
pub fn fmt_value(v: f64, unit: &str) -> String {
    let whole = v == v.trunc() && v.abs() < 1e12;
    let digits = if whole || v.abs() >= 100.0 {
        0
    } else if v.abs() >= 10.0 {
        1
    } else if v.abs() >= 1.0 {
        2
    } else {
        3
    };
    let n = format!("{v:.digits$}");
    match unit {
        "x" => format!("{n}×"),
        "" => n,
        u => format!("{n} {u}"),
    }
}

/// Where and when the benchmarks ran.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Machine {
    pub cpu_model: String,
    pub nproc: usize,
    /// `free -g` as printed.
    pub memory: String,
    /// `uname -srm`.
    pub uname: String,
    /// `/proc/loadavg`'s 1/5/15-minute averages before and after the run.
    pub load_before: String,
    pub load_after: String,
}

/// A whole run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub command: String,
    pub mode: String,
    pub date: String,
    pub machine: Machine,
    pub elapsed_s: f64,
    pub rows: Vec<Row>,
    pub notes: Vec<String>,
}

impl Report {
    /// The run's figures as a terminal table.
    pub fn table(&self) -> String {
        let header = ["benchmark", "figure", "value", "goal", "meets"];
        let cells: Vec<[String; 5]> = self
            .rows
            .iter()
            .map(|r| {
                [
                    r.bench.clone(),
                    r.metric.clone(),
                    r.value_text(),
                    r.goal_text(),
                    r.verdict.label().trim_matches('*').to_owned(),
                ]
            })
            .collect();
        let mut widths = header.map(|h| h.chars().count());
        for row in &cells {
            for (w, c) in widths.iter_mut().zip(row) {
                *w = (*w).max(c.chars().count());
            }
        }
        let mut out = String::new();
        let line = |out: &mut String, cols: &[String]| {
            for (i, (c, w)) in cols.iter().zip(widths).enumerate() {
                let pad = w - c.chars().count();
                let sep = if i + 1 == cols.len() { "\n" } else { "  " };
                if i == 2 {
                    let _ = write!(out, "{}{c}{sep}", " ".repeat(pad));
                } else {
                    let _ = write!(out, "{c}{}{sep}", " ".repeat(pad));
                }
            }
        };
        line(&mut out, &header.map(str::to_owned));
        line(&mut out, &widths.map(|w| "-".repeat(w)));
        for row in &cells {
            line(&mut out, row);
        }
        for r in &self.rows {
            if let (Verdict::NotAvailable | Verdict::Failed, Some(n)) = (r.verdict, &r.note) {
                let _ = writeln!(out, "{} / {}: {n}", r.bench, r.metric);
            }
        }
        out
    }

    /// The whole run as `BENCHMARKS.md`.
    pub fn markdown(&self) -> String {
        let m = &self.machine;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# Benchmarks\n\n\
             Generated by `{}` — do not edit by hand; rerun the command to refresh it.\n",
            self.command
        );
        let _ = writeln!(out, "- **Date:** {}", self.date);
        let _ = writeln!(
            out,
            "- **Command:** `{}` ({} mode, {:.0} s)",
            self.command, self.mode, self.elapsed_s
        );
        let _ = writeln!(
            out,
            "- **CPU:** {} ({} cores, `nproc`)",
            m.cpu_model, m.nproc
        );
        let _ = writeln!(out, "- **System:** `{}` (`uname -srm`)", m.uname);
        let _ = writeln!(
            out,
            "- **Load average** (1/5/15 min): {} before, {} after — the machine is shared \
             with other builds, so the figures carry their noise.",
            m.load_before, m.load_after
        );
        let _ = writeln!(
            out,
            "- **Memory** (`free -g`):\n\n```\n{}\n```\n",
            m.memory.trim_end()
        );
        let _ = writeln!(
            out,
            "| benchmark | figure | value | goal | meets goal | note |"
        );
        let _ = writeln!(out, "|---|---|---:|---|---|---|");
        for r in &self.rows {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} |",
                r.bench,
                r.metric,
                r.value_text(),
                r.goal_text(),
                r.verdict.label(),
                r.note.as_deref().unwrap_or("").replace('|', "\\|")
            );
        }
        if !self.notes.is_empty() {
            let _ = writeln!(out, "\n## Notes\n");
            for n in &self.notes {
                let _ = writeln!(out, "- {n}");
            }
        }
        out
    }
}

/// The heading of BENCHMARKS.md's section that `--compare` writes and a full run
/// keeps.
pub const COMPARE_HEADING: &str = "## Before and after";

impl Report {
    /// A `--compare` run as BENCHMARKS.md's [`COMPARE_HEADING`] section.
    pub fn compare_section(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{COMPARE_HEADING}\n\nGenerated by `{}` on {} ({:.0} s; load average {} before, \
             {} after): this build and another, in one loop, each going first every other \
             message.\n",
            self.command,
            self.date,
            self.elapsed_s,
            self.machine.load_before,
            self.machine.load_after
        );
        let _ = writeln!(out, "| figure | value | note |");
        let _ = writeln!(out, "|---|---:|---|");
        for r in &self.rows {
            let _ = writeln!(
                out,
                "| {} | {} | {} |",
                r.metric,
                r.value_text(),
                r.note.as_deref().unwrap_or("").replace('|', "\\|")
            );
        }
        out
    }
}

/// `page` with its [`COMPARE_HEADING`] section (to the next `## ` heading or the end)
/// replaced by `section`, or `section` appended.
pub fn with_section(page: &str, section: &str) -> String {
    let (head, tail) = match page.find(COMPARE_HEADING) {
        Some(at) => {
            let rest = &page[at + COMPARE_HEADING.len()..];
            let end = rest.find("\n## ").map(|e| &rest[e + 1..]).unwrap_or("");
            (&page[..at], end)
        }
        None => (page, ""),
    };
    let mut out = head.trim_end().to_owned();
    out.push_str("\n\n");
    out.push_str(section.trim_end());
    out.push('\n');
    if !tail.is_empty() {
        out.push('\n');
        out.push_str(tail);
    }
    out
}

/// The [`COMPARE_HEADING`] section of `page`, if it has one.
pub fn section_of(page: &str) -> Option<String> {
    let at = page.find(COMPARE_HEADING)?;
    let rest = &page[at..];
    let end = rest[COMPARE_HEADING.len()..]
        .find("\n## ")
        .map_or(rest.len(), |e| e + COMPARE_HEADING.len() + 1);
    Some(format!("{}\n", rest[..end].trim_end()))
}

/// The `q`-quantile (0..=1) of `samples` by nearest rank; `None` when empty.
pub fn quantile(samples: &[f64], q: f64) -> Option<f64> {
    if samples.is_empty() {
        return None;
    }
    let mut s = samples.to_vec();
    s.sort_by(f64::total_cmp);
    let rank = (q * s.len() as f64).ceil().max(1.0) as usize;
    Some(s[rank.min(s.len()) - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_compare_section_is_replaced_kept_or_appended() {
        let page = "# B\n\n| a |\n\n## Notes\n\n- n\n";
        let one = with_section(page, "## Before and after\n\nx\n");
        assert_eq!(
            one,
            "# B\n\n| a |\n\n## Notes\n\n- n\n\n## Before and after\n\nx\n"
        );
        let two = with_section(&one, "## Before and after\n\ny\n");
        assert!(two.contains("\ny\n") && !two.contains("\nx\n"), "{two}");
        assert_eq!(
            section_of(&two).as_deref(),
            Some("## Before and after\n\ny\n")
        );
        let mid = "# B\n\n## Before and after\n\nx\n\n## Notes\n- n\n";
        let three = with_section(mid, "## Before and after\n\nz\n");
        assert!(
            three.contains("## Notes\n- n") && three.contains("\nz\n") && !three.contains("\nx\n"),
            "{three}"
        );
        assert_eq!(
            section_of(mid).as_deref(),
            Some("## Before and after\n\nx\n")
        );
    }

    #[test]
    fn quantiles_by_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(
            (
                quantile(&v, 0.5),
                quantile(&v, 0.99),
                quantile(&v, 1.0),
                quantile(&[], 0.5)
            ),
            (Some(50.0), Some(99.0), Some(100.0), None)
        );
    }

    #[test]
    fn rows_are_held_against_their_goals() {
        let verdicts: Vec<Verdict> = [
            Row::new("d", "ratio", 2.5, "x", Some(Goal::AtMost(3.0))),
            Row::new("d", "ratio", 3.5, "x", Some(Goal::AtMost(3.0))),
            Row::new("t", "rate", 250.0, "tasks/s", Some(Goal::AtLeast(200.0))),
            Row::new("t", "rate", 10.0, "tasks/s", None),
        ]
        .iter()
        .map(|r| r.verdict)
        .collect();
        assert_eq!(
            verdicts,
            [
                Verdict::Meets,
                Verdict::Misses,
                Verdict::Meets,
                Verdict::NoGoal
            ]
        );
    }
}
