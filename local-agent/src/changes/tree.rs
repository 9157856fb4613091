//! A directory's tree at one moment ([`Snapshot`]), and the glob escaping that names
//! its large files to git.

/// A directory's tree at one moment, and the large files left out of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub tree: String,
    /// Files over the cap, with their size and modification time.
    pub large: Vec<(String, u64, i64)>,
    /// The nested repositories (work trees relative to the directory) git listed as
    /// links, carried from one snapshot to the next while their `.git` is there: the
    /// guard looks at their control files ([`crate::inject::sidecar::guard`]).
    pub nested: Vec<String>,
}

pub(super) fn escape_glob(p: &str) -> String {
    let mut out = String::new();
    for c in p.chars() {
        if matches!(c, '*' | '?' | '[' | '\\' | '!' | '#') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

pub(super) fn unescape_glob(p: &str) -> String {
    let mut out = String::new();
    let mut esc = false;
    for c in p.chars() {
        if c == '\\' && !esc {
            esc = true;
            continue;
        }
        esc = false;
        out.push(c);
    }
    out
}
