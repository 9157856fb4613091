//! The guard's second part: every git control file of every repository in the
//! directory, at any depth, not only the top one's `.git/config` and `.git/hooks`.
//!
//! Git finds its configuration in more places than one file: a `.git` that is a file
//! (`gitdir: …`), a git directory's `commondir`, `config.worktree`, `info/attributes`,
//! `hooks/`, a linked worktree's admin directory, and every file an `include.path` or
//! `includeIf.<cond>.path` names. An agent may plant any of them in a repository it
//! creates (`git init` in a subdirectory, or in a directory that was none) or in one
//! that was there, and the user's next `git status` there runs what they name.
//!
//! The repositories looked at are those the change record knows (the top one, and the
//! nested ones it records as links, before and after the run), so no walk of the
//! directory is added. Before the run, [`take`] keeps each one's control files (bounded
//! like the rest of the guard); after it, [`check`] judges every control file that is
//! new or changed by core's rules (`berth_core::git`: a key that names a program, an
//! include or a pointer out of the directory, a hook that is not a sample, an attribute
//! that selects a driver) and puts back what was there, or removes it if it is new.
//! A plain `git init`, `git add` or `git commit` writes nothing those rules refuse.
//!
//! What it does not see: repositories in directories git ignores (the change record
//! does not walk them; the user's git never enters them from outside), and anything
//! that is not git's (a `Makefile`, a script the user later runs).

use super::{
    Budget, Entry, GuardError, Node, Restored, from_hex, node_at, open_dir, read_err, split,
};
use crate::dir::fd::{open_nofollow, read_all, sorted_names, write_all};
use berth_core::git::{CONTROL_FILES, HOOKS_DIR, Verdict};
use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::os::fd::{BorrowedFd, OwnedFd};

/// What a control file is to git.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A work tree's `.git`: a directory, or a file naming one.
    DotGit,
    /// A configuration file (`config`, `config.worktree`, an include's target).
    Config,
    /// `commondir`: where the rest of the git directory is.
    CommonDir,
    /// `info/attributes`.
    Attributes,
    /// A file or link in `hooks/`, or the hooks directory itself.
    Hook,
}

/// One control file as it was.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Control {
    pub kind: Kind,
    #[serde(flatten)]
    pub entry: Entry,
}

/// How deep includes and `commondir` are followed.
const MAX_DEPTH: usize = 4;

/// `rel` joined to the relative directory `base` ("" is the directory itself).
fn join(base: &str, rel: &str) -> String {
    if base.is_empty() {
        rel.to_owned()
    } else {
        format!("{base}/{rel}")
    }
}

/// Where `target` (a value from `base`'s files: absolute, or relative to `base`) lies,
/// relative to the directory whose absolute path is `root`; `None` when it lies
/// outside it. Lexical: `..` is folded, symlinks are not followed (the descriptor walk
/// that reads it refuses them).
fn resolve(root: &str, base: &str, target: &str) -> Option<String> {
    let target = target.trim();
    let full = if target.starts_with('/') {
        target.to_owned()
    } else {
        format!("{}/{}", root.trim_end_matches('/'), join(base, target))
    };
    let mut parts: Vec<&str> = Vec::new();
    for c in full.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            c => parts.push(c),
        }
    }
    let root_parts: Vec<&str> = root.split('/').filter(|c| !c.is_empty()).collect();
    if parts.len() < root_parts.len() || parts[..root_parts.len()] != root_parts[..] {
        return None;
    }
    Some(parts[root_parts.len()..].join("/"))
}

/// The bytes of a file entry.
fn bytes_of(node: &Node) -> Option<Vec<u8>> {
    match node {
        Node::File { hex, .. } => from_hex(hex),
        Node::Missing | Node::Dir { .. } | Node::Symlink { .. } | Node::Other { .. } => None,
    }
}

/// A configuration's entries, parsed by git itself (`git config --file -`, inside
/// git's fence, its includes not followed): `(key, value)`.
pub(crate) fn parse_config(bytes: &[u8]) -> Result<Vec<(String, String)>, String> {
    use std::io::Write;
    let mut c = crate::git::command(crate::git::Writes::Nothing);
    c.args(["config", "--file", "-", "--list", "--null", "--no-includes"])
        .current_dir("/")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = c.spawn().map_err(|e| format!("cannot run git: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(bytes);
    }
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_owned());
    }
    Ok(out
        .stdout
        .split(|b| *b == 0)
        .filter(|e| !e.is_empty())
        .map(|e| {
            let e = String::from_utf8_lossy(e);
            let (k, v) = e.split_once('\n').unwrap_or((&e, ""));
            (k.to_owned(), v.to_owned())
        })
        .collect())
}

/// Whether a configuration's text may hold an include (git's key names are case-blind).
fn may_include(bytes: &[u8]) -> bool {
    bytes.windows(7).any(|w| w.eq_ignore_ascii_case(b"include"))
}

/// The directory `rel` under `dir`, opened once into `dirs` (`None` when it is not
/// there or not one).
fn opened<'m>(
    dirs: &'m mut HashMap<String, Option<OwnedFd>>,
    dir: BorrowedFd<'_>,
    rel: &str,
) -> Result<Option<&'m OwnedFd>, GuardError> {
    if !dirs.contains_key(rel) {
        let fd = match open_dir(dir, rel) {
            Ok(fd) => Some(fd),
            Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP) => None,
            Err(e) => return Err(read_err(rel, e)),
        };
        dirs.insert(rel.to_owned(), fd);
    }
    Ok(dirs.get(rel).and_then(Option::as_ref))
}

/// The control files of the repositories at `repos` (work trees relative to the
/// directory `dir` whose absolute path is `root`), read without following a link.
struct Reader<'a> {
    dir: BorrowedFd<'a>,
    root: &'a str,
    budget: Budget,
    out: Vec<Control>,
    /// The directories opened so far, by their paths (`None`: not there, or not a
    /// directory): each is opened once a reading, not once for each file it holds.
    dirs: HashMap<String, Option<OwnedFd>>,
}

impl Reader<'_> {
    fn push(&mut self, kind: Kind, rel: &str) -> Result<Node, GuardError> {
        self.push_read(kind, rel, true)
    }

    /// [`Reader::push`]; with `read` false, a file's bytes are not read (its kind and
    /// mode are): for a file whose bytes cannot make git run anything.
    fn push_read(&mut self, kind: Kind, rel: &str, read: bool) -> Result<Node, GuardError> {
        if let Some(c) = self.out.iter().find(|c| c.entry.path == rel) {
            return Ok(c.entry.node.clone());
        }
        let (parent_rel, name) = split(rel);
        let node = match opened(&mut self.dirs, self.dir, parent_rel)? {
            Some(parent) => {
                let budget = read.then_some(&mut self.budget);
                node_at(parent, name, rel, budget)?
            }
            None => Node::Missing,
        };
        self.out.push(Control {
            kind,
            entry: Entry {
                path: rel.to_owned(),
                node: node.clone(),
            },
        });
        Ok(node)
    }

    fn repo(&mut self, at: &str) -> Result<(), GuardError> {
        let dot_git = join(at, ".git");
        let gitdir = match self.push(Kind::DotGit, &dot_git)? {
            Node::Dir { .. } => Some(dot_git),
            node @ Node::File { .. } => bytes_of(&node).and_then(|b| {
                let text = String::from_utf8_lossy(&b).into_owned();
                let target = text.strip_prefix("gitdir:")?.trim().to_owned();
                resolve(self.root, at, &target)
            }),
            Node::Missing | Node::Symlink { .. } | Node::Other { .. } => None,
        };
        if let Some(g) = gitdir {
            self.gitdir(&g, 0)?;
        }
        Ok(())
    }

    fn gitdir(&mut self, g: &str, depth: usize) -> Result<(), GuardError> {
        if depth > MAX_DEPTH {
            return Ok(());
        }
        for name in CONTROL_FILES {
            let rel = join(g, name);
            let kind = match *name {
                "commondir" => Kind::CommonDir,
                "info/attributes" => Kind::Attributes,
                _ => Kind::Config,
            };
            let node = self.push(kind, &rel)?;
            match kind {
                Kind::CommonDir => {
                    if let Some(common) = bytes_of(&node)
                        .and_then(|b| resolve(self.root, g, &String::from_utf8_lossy(&b)))
                    {
                        self.gitdir(&common, depth + 1)?;
                    }
                }
                Kind::Config => {
                    if let Some(b) = bytes_of(&node) {
                        self.includes(g, &b, depth)?;
                    }
                }
                Kind::DotGit | Kind::Attributes | Kind::Hook => {}
            }
        }
        let hooks = join(g, HOOKS_DIR);
        if let Node::Dir { .. } = self.push(Kind::Hook, &hooks)? {
            for name in self.names(&hooks)? {
                // A sample is never run, whatever it holds: only its name matters
                // (renamed to a hook's, it is a new file, and judged), so it is not
                // read at every run.
                let runs = berth_core::git::hook_runs(&name);
                self.push_read(Kind::Hook, &join(&hooks, &name), runs)?;
            }
        }
        // Submodules' git directories, each a repository of its own.
        let modules = join(g, "modules");
        for name in self.names(&modules)? {
            self.gitdir(&join(&modules, &name), depth + 1)?;
        }
        // Linked worktrees' admin directories: each has its own `commondir` and
        // `config.worktree`.
        let worktrees = join(g, "worktrees");
        for name in self.names(&worktrees)? {
            let admin = join(&worktrees, &name);
            self.push(Kind::CommonDir, &join(&admin, "commondir"))?;
            self.push(Kind::Config, &join(&admin, "config.worktree"))?;
        }
        Ok(())
    }

    /// The files a configuration (in the git directory `g`) includes, when they lie in
    /// the directory.
    fn includes(&mut self, g: &str, bytes: &[u8], depth: usize) -> Result<(), GuardError> {
        if depth > MAX_DEPTH || !may_include(bytes) {
            return Ok(());
        }
        let Ok(entries) = parse_config(bytes) else {
            return Ok(());
        };
        for (k, v) in entries {
            if let Verdict::Includes(target) = berth_core::git::config_entry(&k, &v)
                && let Some(rel) = resolve(self.root, g, &target)
            {
                let node = self.push(Kind::Config, &rel)?;
                if let Some(b) = bytes_of(&node) {
                    let (base, _) = split(&rel);
                    self.includes(base, &b, depth + 1)?;
                }
            }
        }
        Ok(())
    }

    /// The names in the directory `rel`, none if it is not one.
    fn names(&mut self, rel: &str) -> Result<Vec<String>, GuardError> {
        let (parent_rel, name) = split(rel);
        let Ok(Some(parent)) = opened(&mut self.dirs, self.dir, parent_rel) else {
            return Ok(Vec::new());
        };
        match open_nofollow(parent, name, OFlags::RDONLY | OFlags::DIRECTORY) {
            Ok(fd) => {
                let names = sorted_names(&fd).map_err(|e| read_err(rel, e))?;
                self.dirs.insert(rel.to_owned(), Some(fd));
                Ok(names)
            }
            Err(_) => Ok(Vec::new()),
        }
    }
}

/// The control files of the top repository (always, even where there is none yet)
/// and of each nested one in `nested` (work trees relative to the directory `dir`,
/// whose absolute path is `root`), as they are now.
pub fn take(
    dir: BorrowedFd<'_>,
    root: &str,
    nested: &[String],
) -> Result<Vec<Control>, GuardError> {
    let mut r = Reader {
        dir,
        root,
        budget: Budget {
            bytes: 0,
            entries: 0,
        },
        out: Vec::new(),
        dirs: HashMap::new(),
    };
    r.repo("")?;
    for at in nested {
        r.repo(at)?;
    }
    Ok(r.out)
}

/// Why a control file as it is now would make git run a program (or look for its
/// configuration out of the directory); `None` if it would not.
fn judge(c: &Control, root: &str) -> Option<String> {
    let base = split(&c.entry.path).0;
    match (&c.kind, &c.entry.node) {
        (_, Node::Missing) => None,
        (Kind::DotGit, Node::Dir { .. }) => None,
        (Kind::DotGit, node @ Node::File { .. }) => {
            let text = bytes_of(node).map(|b| String::from_utf8_lossy(&b).into_owned())?;
            let target = text.strip_prefix("gitdir:").map(str::trim).unwrap_or("");
            match resolve(root, base, target) {
                Some(_) => None,
                None => Some(format!("points git at {target}, outside the directory")),
            }
        }
        (Kind::DotGit, Node::Symlink { target }) => Some(format!(
            "is a link to {target}: git would read its configuration there"
        )),
        (Kind::CommonDir, node @ Node::File { .. }) => {
            let text = bytes_of(node).map(|b| String::from_utf8_lossy(&b).trim().to_owned())?;
            // Git writes one only for a linked worktree (`worktrees/NAME/commondir`,
            // naming the git directory that holds it); any other moves where git
            // reads a repository's configuration, hooks and objects.
            let (parent, _) = split(base);
            let home = parent
                .strip_suffix("/worktrees")
                .or_else(|| (parent == "worktrees").then_some(""));
            match (resolve(root, base, &text), home) {
                (None, _) => Some(format!("points git at {text}, outside the directory")),
                (Some(at), Some(home)) if at == home => None,
                (Some(_), _) => Some(format!(
                    "points git at {text} for the repository's configuration, hooks and objects"
                )),
            }
        }
        (Kind::Config, node @ Node::File { .. }) => {
            let bytes = bytes_of(node)?;
            match parse_config(&bytes) {
                Err(e) => Some(format!("is a configuration git cannot read ({e})")),
                Ok(entries) => {
                    entries
                        .iter()
                        .find_map(|(k, v)| match berth_core::git::config_entry(k, v) {
                            // A submodule's git directory names its work tree: inside
                            // the directory, that is git's own doing.
                            Verdict::RunsProgram(_)
                                if k.eq_ignore_ascii_case("core.worktree")
                                    && resolve(root, base, v).is_some() =>
                            {
                                None
                            }
                            Verdict::Inert => None,
                            Verdict::RunsProgram(why) => Some(why),
                            Verdict::Includes(target) => resolve(root, base, &target)
                                .is_none()
                                .then(|| format!("{k} includes {target}, outside the directory")),
                        })
                }
            }
        }
        (Kind::Attributes, node @ Node::File { .. }) => {
            let text = bytes_of(node).map(|b| String::from_utf8_lossy(&b).into_owned())?;
            text.lines().find_map(berth_core::git::attributes_line)
        }
        (Kind::Hook, Node::Dir { .. }) => None,
        (Kind::Hook, Node::File { .. } | Node::Symlink { .. } | Node::Other { .. }) => {
            let name = split(&c.entry.path).1;
            berth_core::git::hook_runs(name).then(|| "is a hook git runs".to_owned())
        }
        // Anything else where git expects a file: git reads nothing from it.
        (
            Kind::Config | Kind::CommonDir | Kind::Attributes,
            Node::Dir { .. } | Node::Symlink { .. } | Node::Other { .. },
        ) => match &c.entry.node {
            Node::Symlink { target } => {
                Some(format!("is a link to {target}: git would read it there"))
            }
            Node::Missing | Node::Dir { .. } | Node::File { .. } | Node::Other { .. } => None,
        },
        (Kind::DotGit, Node::Other { .. }) => None,
    }
}

/// After the run: every control file of the repositories known before (`before`, from
/// [`take`]) and of those the change record knows now (`nested`) that is new or
/// changed, and would make git run a program, is put back as it was (removed if it is
/// new). Returns what was put back, and what could not be.
pub fn check(
    dir: BorrowedFd<'_>,
    root: &str,
    before: &[Control],
    nested: &[String],
) -> (Vec<Restored>, Vec<String>) {
    let mut done = Vec::new();
    let mut problems = Vec::new();
    // The nested work trees: those read before, then those the change record knows.
    let mut known: Vec<String> = Vec::new();
    let befores = before
        .iter()
        .filter(|c| c.kind == Kind::DotGit)
        .map(|c| split(&c.entry.path).0);
    for at in befores.chain(nested.iter().map(String::as_str)) {
        if !at.is_empty() && !known.iter().any(|k| k == at) {
            known.push(at.to_owned());
        }
    }
    // Until nothing more changes: putting back a pointer changes what is read next.
    for _ in 0..=MAX_DEPTH {
        let now = match take(dir, root, &known) {
            Ok(now) => now,
            Err(e) => {
                problems.push(format!("the repositories' control files: {e}"));
                break;
            }
        };
        let mut acted = false;
        for c in &now {
            let was = before
                .iter()
                .find(|b| b.entry.path == c.entry.path)
                .map_or(&Node::Missing, |b| &b.entry.node);
            if same(was, &c.entry.node) {
                continue;
            }
            let Some(why) = judge(c, root) else {
                continue;
            };
            match put_back(dir, &c.entry.path, was) {
                Ok(what) => {
                    acted = true;
                    done.push(Restored {
                        path: c.entry.path.clone(),
                        what,
                        why: Some(why),
                    });
                }
                Err(e) => problems.push(format!(
                    "{}: {why}, and cannot be put back: {e}",
                    c.entry.path
                )),
            }
        }
        if !acted {
            break;
        }
    }
    (done, problems)
}

/// Whether two readings of a control file are the same (a directory's mode aside).
fn same(a: &Node, b: &Node) -> bool {
    match (a, b) {
        (Node::Dir { .. }, Node::Dir { .. }) => true,
        // Their bytes and mode: a stamp says only when each was read.
        (
            Node::File {
                mode: m1, hex: h1, ..
            },
            Node::File {
                mode: m2, hex: h2, ..
            },
        ) => m1 == m2 && h1 == h2,
        _ => a == b,
    }
}

/// Puts `rel` back to `was` (removes what is there if `was` is missing): what the
/// agent had done, `added` or `changed`.
fn put_back(dir: BorrowedFd<'_>, rel: &str, was: &Node) -> Result<&'static str, Errno> {
    let (p, name) = split(rel);
    let parent = open_dir(dir, p)?;
    let st = rustix::fs::statat(&parent, name, AtFlags::SYMLINK_NOFOLLOW)?;
    let flags = if rustix::fs::FileType::from_raw_mode(st.st_mode as _)
        == rustix::fs::FileType::Directory
    {
        AtFlags::REMOVEDIR
    } else {
        AtFlags::empty()
    };
    super::remove_tree(&parent, name, flags)?;
    match was {
        Node::Missing => Ok("added"),
        Node::File { mode, hex, .. } => {
            let bytes = from_hex(hex).ok_or(Errno::INVAL)?;
            let fd = rustix::fs::openat(
                &parent,
                name,
                OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(*mode as _),
            )?;
            write_all(&fd, &bytes)?;
            rustix::fs::fchmod(&fd, Mode::from_raw_mode(*mode as _))?;
            let _ = rustix::fs::fsync(&fd);
            Ok("changed")
        }
        Node::Symlink { target } => {
            rustix::fs::symlinkat(target.as_str(), &parent, name)?;
            Ok("changed")
        }
        Node::Dir { mode } => {
            rustix::fs::mkdirat(&parent, name, Mode::from_raw_mode(*mode as _))?;
            Ok("changed")
        }
        // A FIFO or a device Berth cannot make again.
        Node::Other { .. } => Err(Errno::NOTSUP),
    }
}

/// Reads a file under `dir` without following links (tests and callers that need one
/// control file's bytes).
#[allow(dead_code)]
fn read_file(dir: BorrowedFd<'_>, rel: &str) -> Result<Vec<u8>, Errno> {
    let (p, name) = split(rel);
    let parent = open_dir(dir, p)?;
    read_all(&open_nofollow(&parent, name, OFlags::RDONLY)?)
}

#[cfg(test)]
mod tests;
