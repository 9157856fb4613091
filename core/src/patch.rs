//! A task's changes as lines: git's unified diff, split per file and bounded.
//!
//! The machine a task ran on makes it once, at the task's end, from the change record
//! (`git diff-tree -p` of its two trees); it travels with the task's outcome (a daemon
//! sends it with `finish`) and is kept beside the task. Every view reads that: the web
//! UI's diff, `GET tasks/{id}/diff`, `berth chat`'s `/diff`. The whole diff, and undo,
//! stay with `berth task diff` and `berth task undo` on that machine.
//!
//! Bounds: a file shows its first [`MAX_FILE_LINES`] lines, a task [`MAX_BYTES`] of
//! text in all; past them the lines are cut and the cut is said, with the command that
//! shows everything. What a daemon sends is bounded again by the server
//! ([`TaskDiff::bounded`]): an outcome is another machine's word.

use serde::{Deserialize, Serialize};

/// The most text a task's diff keeps, over all its files.
pub const MAX_BYTES: usize = 512 * 1024;
/// The most lines one file's diff keeps (its header lines included).
pub const MAX_FILE_LINES: usize = 2_000;
/// The most files a diff lists; past them the rest are only counted.
pub const MAX_FILES: usize = 5_000;

/// A task's diff, per file, as the views show it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskDiff {
    pub files: Vec<FileDiff>,
    /// What the bounds left out; absent when every line is here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut: Option<Cut>,
}

/// One file's part of a diff.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileDiff {
    /// The path after the change (before it, for a deleted file).
    pub path: String,
    /// `added`, `modified`, `deleted` or `renamed` (then `from` is the old path).
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Git shows no lines for it, only that it differs.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub binary: bool,
    /// The file's lines of the unified diff, from its `diff --git` line on.
    pub text: String,
    /// Lines of this file the bounds left out.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cut_lines: u64,
}

/// What the bounds left out of a diff.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cut {
    /// The whole diff's size in bytes (at least this much when `more`).
    pub bytes: u64,
    /// Lines left out, over every file.
    pub lines: u64,
    /// Files not listed at all (past [`MAX_FILES`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub files: u64,
    /// Git's output was longer still than what was read of it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub more: bool,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl TaskDiff {
    /// Reads git's unified diff (`diff --git` sections) into files, within the bounds.
    /// `more`: the text read is only the start of git's output.
    pub fn parse(raw: &[u8], more: bool) -> TaskDiff {
        let text = String::from_utf8_lossy(raw);
        let mut sections: Vec<&str> = Vec::new();
        let mut start = None;
        let mut at = 0;
        for line in text.split_inclusive('\n') {
            if line.starts_with("diff --git ") {
                if let Some(s) = start {
                    sections.push(&text[s..at]);
                }
                start = Some(at);
            }
            at += line.len();
        }
        if let Some(s) = start {
            sections.push(&text[s..]);
        }
        let files = sections.into_iter().map(read_section).collect();
        let mut diff = TaskDiff { files, cut: None };
        diff.bound(raw.len() as u64, more);
        diff
    }

    /// The same diff within the bounds, whoever made it: a daemon's is checked again.
    pub fn bounded(mut self) -> TaskDiff {
        let shown = self.files.iter().map(|f| f.text.len() as u64).sum::<u64>();
        let bytes = self.cut.as_ref().map_or(shown, |c| c.bytes.max(shown));
        let more = self.cut.as_ref().is_some_and(|c| c.more);
        let (lines, files) = self.cut.take().map_or((0, 0), |c| (c.lines, c.files));
        self.bound(bytes, more);
        if lines > 0 || files > 0 {
            let cut = self.cut.get_or_insert_with(Cut::default);
            cut.lines = cut.lines.max(lines);
            cut.files = cut.files.max(files);
            cut.bytes = cut.bytes.max(bytes);
        }
        self
    }

    /// Cuts each file to [`MAX_FILE_LINES`], the whole to [`MAX_BYTES`] and
    /// [`MAX_FILES`]; `bytes` is the size of what was read.
    fn bound(&mut self, bytes: u64, more: bool) {
        let mut left = MAX_BYTES;
        let mut cut_lines = 0u64;
        let mut cut_files = 0u64;
        if self.files.len() > MAX_FILES {
            for f in self.files.drain(MAX_FILES..) {
                cut_files += 1;
                cut_lines += f.text.lines().count() as u64 + f.cut_lines;
            }
        }
        for f in &mut self.files {
            let mut keep = 0;
            let mut kept_lines = 0;
            let mut dropped = 0u64;
            // A prefix of whole lines: the first that does not fit ends the file, and
            // once the task's bytes are spent, every later file shows none.
            for line in f.text.split_inclusive('\n') {
                if dropped == 0 && kept_lines < MAX_FILE_LINES && keep + line.len() <= left {
                    keep += line.len();
                    kept_lines += 1;
                } else {
                    dropped += 1;
                }
            }
            if dropped > 0 {
                f.text.truncate(keep);
                f.cut_lines += dropped;
            }
            left = if dropped > 0 && kept_lines < MAX_FILE_LINES {
                0
            } else {
                left - keep
            };
            cut_lines += f.cut_lines;
        }
        self.cut = (cut_lines > 0 || cut_files > 0 || more).then_some(Cut {
            bytes,
            lines: cut_lines,
            files: cut_files,
            more,
        });
    }

    /// The same diff, its text within `max` bytes once written as JSON (escapes
    /// grow it): the last files' lines go first, said as cut. A daemon sends its diff
    /// so, inside the request size the server takes.
    pub fn fit_json(mut self, max: usize) -> TaskDiff {
        // Escaped size of a piece of text inside a JSON string.
        let size = |t: &str| serde_json::to_string(t).map_or(t.len() * 6, |j| j.len() - 2);
        let mut left = max;
        let mut dropped = 0u64;
        for f in &mut self.files {
            let fixed = size(&f.path) + f.from.as_deref().map_or(0, size) + 96;
            left = left.saturating_sub(fixed);
            let mut keep = 0;
            let mut cut = 0u64;
            for line in f.text.split_inclusive('\n') {
                let n = size(line);
                if cut == 0 && n <= left {
                    left -= n;
                    keep += line.len();
                } else {
                    cut += 1;
                    left = 0;
                }
            }
            if cut > 0 {
                f.text.truncate(keep);
                f.cut_lines += cut;
                dropped += cut;
            }
        }
        if dropped > 0 {
            let bytes = self.files.iter().map(|f| f.text.len() as u64).sum();
            let cut = self.cut.get_or_insert(Cut {
                bytes,
                ..Cut::default()
            });
            cut.lines += dropped;
        }
        self
    }

    /// No file changed.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// The diff as unified text: each file's lines, a line saying where a file was
    /// cut, and at the end what was cut in all, with `whole` (the command that shows
    /// everything, `berth task diff ID`).
    pub fn unified(&self, whole: &str) -> String {
        let mut out = String::new();
        for f in &self.files {
            out.push_str(&f.text);
            if !f.text.is_empty() && !f.text.ends_with('\n') {
                out.push('\n');
            }
            if f.cut_lines > 0 {
                out.push_str(&format!(
                    "\u{2026} {} more line{} of {} cut\n",
                    f.cut_lines,
                    if f.cut_lines == 1 { "" } else { "s" },
                    f.path
                ));
            }
        }
        if let Some(note) = self.cut_note(whole) {
            out.push_str(&format!("\u{2026} {note}\n"));
        }
        out
    }

    /// What was cut, in one sentence with `whole` (the command showing it all), or
    /// `None` for a whole diff.
    pub fn cut_note(&self, whole: &str) -> Option<String> {
        let cut = self.cut.as_ref()?;
        let size = kib(cut.bytes);
        let mut s = format!(
            "this diff is cut: {}{size} in all, {} line{} not shown",
            if cut.more { "more than " } else { "" },
            cut.lines,
            if cut.lines == 1 { "" } else { "s" }
        );
        if cut.files > 0 {
            s.push_str(&format!(
                " and {} more file{}",
                cut.files,
                if cut.files == 1 { "" } else { "s" }
            ));
        }
        s.push_str(&format!("; all of it: {whole}"));
        Some(s)
    }
}

/// `GET tasks/{id}/diff?format=json`: the task's lines per file, what was cut, and
/// the command that shows the whole diff on the machine the task ran on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiffDoc {
    pub task_id: String,
    #[serde(flatten)]
    pub diff: TaskDiff,
    /// What was cut, in words ([`TaskDiff::cut_note`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// `berth task diff ID`, run where the task ran: every line, and undo beside it.
    pub whole: String,
}

impl DiffDoc {
    pub fn new(task_id: &str, diff: TaskDiff) -> DiffDoc {
        let whole = whole_command(task_id);
        DiffDoc {
            task_id: task_id.to_owned(),
            note: diff.cut_note(&whole),
            diff,
            whole,
        }
    }
}

/// The command that shows task `task_id`'s whole diff.
pub fn whole_command(task_id: &str) -> String {
    format!("berth task diff {task_id}")
}

/// `512 KiB`, `5.0 MiB`.
fn kib(bytes: u64) -> String {
    if bytes >= 1024 * 1024 {
        format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
    } else {
        format!("{} KiB", bytes.div_ceil(1024))
    }
}

/// One `diff --git` section: its paths and status from git's header lines.
fn read_section(text: &str) -> FileDiff {
    let mut f = FileDiff {
        status: "modified".to_owned(),
        text: text.to_owned(),
        ..FileDiff::default()
    };
    let (mut minus, mut plus, mut rename_from, mut rename_to) = (None, None, None, None);
    for line in text.lines() {
        if line.starts_with("@@") {
            break;
        }
        if line.starts_with("new file mode") {
            f.status = "added".to_owned();
        } else if line.starts_with("deleted file mode") {
            f.status = "deleted".to_owned();
        } else if let Some(p) = line.strip_prefix("rename from ") {
            rename_from = Some(unquote(p));
        } else if let Some(p) = line.strip_prefix("rename to ") {
            rename_to = Some(unquote(p));
        } else if let Some(p) = line.strip_prefix("--- ") {
            minus = side(p, "a/");
        } else if let Some(p) = line.strip_prefix("+++ ") {
            plus = side(p, "b/");
        } else if line.starts_with("Binary files ") || line.starts_with("GIT binary patch") {
            f.binary = true;
        }
    }
    if let (Some(from), Some(to)) = (rename_from, rename_to) {
        f.status = "renamed".to_owned();
        f.from = Some(from);
        f.path = to;
    } else if let Some(p) = plus.or(minus) {
        f.path = p;
    } else {
        f.path = header_path(text.lines().next().unwrap_or_default());
    }
    f
}

/// The path of a `--- a/x` or `+++ b/x` line; `None` for `/dev/null`.
fn side(p: &str, prefix: &str) -> Option<String> {
    let p = p.trim_end_matches('\t');
    let p = unquote(p);
    p.strip_prefix(prefix).map(str::to_owned)
}

/// The path of `diff --git a/x b/x` when no other line names it (a binary or a mode
/// change): both sides are the same path, so the line is `a/P b/P`.
fn header_path(line: &str) -> String {
    let rest = line.strip_prefix("diff --git ").unwrap_or(line);
    if rest.starts_with('"') {
        // `"a/P" "b/P"`: the first quoted string.
        let first = quoted_prefix(rest);
        return unquote(&first)
            .strip_prefix("a/")
            .map(str::to_owned)
            .unwrap_or_default();
    }
    let half = rest.len().saturating_sub(1) / 2;
    rest.get(2..half)
        .filter(|_| rest.get(half..half + 3) == Some(" b/"))
        .map(str::to_owned)
        .unwrap_or_else(|| rest.to_owned())
}

/// The leading `"…"` of `s`, escapes and all.
fn quoted_prefix(s: &str) -> String {
    let mut out = String::from("\"");
    let mut esc = false;
    for c in s.chars().skip(1) {
        out.push(c);
        if esc {
            esc = false;
        } else if c == '\\' {
            esc = true;
        } else if c == '"' {
            break;
        }
    }
    out
}

/// A path as git quotes one with unusual bytes (`"a/caf\303\251"`): C escapes and
/// octal bytes. An unquoted path is returned as it is.
pub fn unquote(s: &str) -> String {
    let Some(inner) = s.strip_prefix('"').and_then(|s| s.strip_suffix('"')) else {
        return s.to_owned();
    };
    let mut bytes = Vec::with_capacity(inner.len());
    let mut it = inner.bytes().peekable();
    while let Some(b) = it.next() {
        if b != b'\\' {
            bytes.push(b);
            continue;
        }
        match it.next() {
            Some(b'n') => bytes.push(b'\n'),
            Some(b't') => bytes.push(b'\t'),
            Some(b'r') => bytes.push(b'\r'),
            Some(b'a') => bytes.push(7),
            Some(b'b') => bytes.push(8),
            Some(b'f') => bytes.push(12),
            Some(b'v') => bytes.push(11),
            Some(d @ b'0'..=b'7') => {
                let mut v = u32::from(d - b'0');
                for _ in 0..2 {
                    match it.peek() {
                        Some(n @ b'0'..=b'7') => {
                            v = v * 8 + u32::from(n - b'0');
                            it.next();
                        }
                        _ => break,
                    }
                }
                bytes.push(u8::try_from(v & 0xff).unwrap_or(b'?'));
            }
            Some(other) => bytes.push(other),
            None => bytes.push(b'\\'),
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "diff --git a/added.txt b/added.txt
new file mode 100644
index 0000000..3b18e51
--- /dev/null
+++ b/added.txt
@@ -0,0 +1 @@
+hello world
diff --git a/gone.txt b/gone.txt
deleted file mode 100644
index 3b18e51..0000000
--- a/gone.txt
+++ /dev/null
@@ -1 +0,0 @@
-hello world
diff --git a/img.png b/img.png
index 1111111..2222222 100644
Binary files a/img.png and b/img.png differ
diff --git a/old name.txt b/new name.txt
similarity 90%
rename from old name.txt
rename to new name.txt
index 1..2 100644
--- a/old name.txt
+++ b/new name.txt
@@ -1,2 +1,2 @@
 same
-old
+new
diff --git \"a/caf\\303\\251.txt\" \"b/caf\\303\\251.txt\"
index 1..2 100644
--- \"a/caf\\303\\251.txt\"
+++ \"b/caf\\303\\251.txt\"
@@ -1 +1 @@
-a
+b
";

    #[test]
    fn files_statuses_and_paths_come_from_gits_headers() {
        let d = TaskDiff::parse(SAMPLE.as_bytes(), false);
        let got: Vec<(&str, &str, Option<&str>, bool)> = d
            .files
            .iter()
            .map(|f| {
                (
                    f.path.as_str(),
                    f.status.as_str(),
                    f.from.as_deref(),
                    f.binary,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("added.txt", "added", None, false),
                ("gone.txt", "deleted", None, false),
                ("img.png", "modified", None, true),
                ("new name.txt", "renamed", Some("old name.txt"), false),
                ("café.txt", "modified", None, false),
            ]
        );
        assert!(d.cut.is_none());
        assert_eq!(d.unified("berth task diff t"), SAMPLE);
        assert!(d.files[0].text.ends_with("+hello world\n"));
    }

    #[test]
    fn a_long_file_is_cut_at_its_line_bound_and_said() {
        let mut raw =
            String::from("diff --git a/big b/big\n--- a/big\n+++ b/big\n@@ -0,0 +1,3000 @@\n");
        for i in 0..3000 {
            raw.push_str(&format!("+line {i}\n"));
        }
        raw.push_str("diff --git a/small b/small\n--- a/small\n+++ b/small\n@@ -1 +1 @@\n-x\n+y\n");
        let d = TaskDiff::parse(raw.as_bytes(), false);
        assert_eq!(d.files[0].text.lines().count(), MAX_FILE_LINES);
        assert_eq!(d.files[0].cut_lines, 3004 - MAX_FILE_LINES as u64);
        assert_eq!(d.files[1].cut_lines, 0, "the next file is whole");
        let text = d.unified("berth task diff abc");
        assert!(
            text.contains("\u{2026} 1004 more lines of big cut\n"),
            "{text}"
        );
        assert!(
            text.ends_with("; all of it: berth task diff abc\n"),
            "{text}"
        );
    }

    #[test]
    fn a_five_megabyte_change_is_cut_to_the_task_bound() {
        let mut raw = String::new();
        for f in 0..50 {
            raw.push_str(&format!(
                "diff --git a/f{f} b/f{f}\n--- a/f{f}\n+++ b/f{f}\n@@ -0,0 +1,1000 @@\n"
            ));
            for _ in 0..1000 {
                raw.push_str(&format!("+{}\n", "x".repeat(100)));
            }
        }
        assert!(raw.len() > 5_000_000);
        let d = TaskDiff::parse(raw.as_bytes(), false);
        let kept: usize = d.files.iter().map(|f| f.text.len()).sum();
        assert!(kept <= MAX_BYTES, "{kept}");
        assert_eq!(d.files.len(), 50, "every file is still listed");
        let cut = d.cut.clone().unwrap();
        assert_eq!(cut.bytes, raw.len() as u64);
        let shown: u64 = d.files.iter().map(|f| f.text.lines().count() as u64).sum();
        assert_eq!(shown + cut.lines, raw.lines().count() as u64);
        assert!(
            d.cut_note("berth task diff t")
                .unwrap()
                .starts_with("this diff is cut: 4.9 MiB in all"),
            "{:?}",
            d.cut_note("x")
        );
        // A daemon's diff, bounded again, stays as it is; one past the bounds is cut.
        assert!(d.clone().bounded() == d, "bounded twice, the same");
        let mut fat = d;
        fat.files[0].text = "+y\n".repeat(MAX_FILE_LINES * 2);
        let fat = fat.bounded();
        assert_eq!(fat.files[0].text.lines().count(), MAX_FILE_LINES);
        assert!(fat.files.iter().map(|f| f.text.len()).sum::<usize>() <= MAX_BYTES);
    }

    #[test]
    fn a_diff_of_escapes_fits_the_json_it_travels_in() {
        let mut raw = String::new();
        for f in 0..4 {
            raw.push_str(&format!(
                "diff --git a/f{f} b/f{f}\n--- a/f{f}\n+++ b/f{f}\n@@ -0,0 +1 @@\n"
            ));
            for _ in 0..400 {
                raw.push_str(&format!("+{}\n", "\u{1}".repeat(250)));
            }
        }
        let d = TaskDiff::parse(raw.as_bytes(), false);
        assert!(serde_json::to_string(&d).unwrap().len() > 2 * MAX_BYTES);
        let fit = d.fit_json(MAX_BYTES);
        assert!(serde_json::to_string(&fit).unwrap().len() <= MAX_BYTES + 1024);
        assert!(
            !fit.files[0].text.is_empty(),
            "the first files keep their lines"
        );
        assert!(fit.files[3].text.is_empty() && fit.files[3].cut_lines == 404);
        assert!(fit.files[0].text.ends_with('\n'), "whole lines only");
        assert!(fit.cut.unwrap().lines >= fit.files[3].cut_lines);
    }

    #[test]
    fn quoted_paths_read_as_git_wrote_them() {
        assert_eq!(unquote("\"a/tab\\there\""), "a/tab\there");
        assert_eq!(unquote("\"a/q\\\"uote\""), "a/q\"uote");
        assert_eq!(unquote("plain name"), "plain name");
        assert_eq!(
            unquote("\"a/bad\\"),
            "\"a/bad\\",
            "not a whole quoted string"
        );
        assert_eq!(
            header_path("diff --git a/some file b/some file"),
            "some file"
        );
    }
}
