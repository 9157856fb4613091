//! The first snapshot of a git repository, seeded from the repository's own index.
//!
//! A first snapshot used to hash every file: 100,000 files took 10 to 17 seconds. But
//! the repository's index already holds, for every tracked file, the stat data git
//! last saw and the blob id of its content. The shadow index starts as a copy of those
//! entries (its own file, version 2, in Berth's state), so that only what differs from
//! them is read: the first snapshot costs about what `git status` does.
//!
//! What is copied, and what is not:
//! - entries git itself would not trust from stat data alone are left out, and their
//!   files hashed as in a full scan: conflicts, sparse-checkout and intent-to-add
//!   entries, submodules, files over the size cap, and files whose attributes convert
//!   their content (`filter`, `ident`, `working-tree-encoding`);
//! - a repository that converts line endings by configuration (`core.autocrlf`), uses
//!   SHA-256, a split index or its own `info/attributes` is not seeded at all;
//! - the copy keeps the index file's modification time, so git's "racily clean" check
//!   (an entry changed in the same tick the index was written) works as it did there.
//!
//! The repository's objects are never written, and not read by the snapshot: its trees
//! name the seeded blob ids (`write-tree --missing-ok`). The content of a file the
//! agent then changes is copied into the shadow repository when its record is kept
//! ([`Shadow::own_before`]), by a pack git rehashes on the way in, so an object the
//! repository does not have, or has wrong, is never taken for the file's content.
//!
//! The index is the user's own: it is read as git reads it, and trusted as `git
//! status` trusts it. A malformed one is refused ([`super::index`]) and the snapshot is
//! then a full scan.

use super::error::ChangesError;
use super::index::{self, Entry, MAX_INDEX_BYTES};
use super::limits::Limits;
use super::shadow::Shadow;
use berth_host::private;
use std::path::{Path, PathBuf};

/// The file in the shadow repository that marks it seeded: the repository's objects
/// directory, where the content of seeded entries is read from when it is needed.
pub(super) const SEED_FILE: &str = "berth-seed";

/// A repository's own index and objects, for a work tree.
struct Repo {
    index: PathBuf,
    objects: PathBuf,
    configs: Vec<PathBuf>,
    info: PathBuf,
}

/// `<work tree>/.git`: a directory, or a file naming one (a linked worktree, a
/// submodule), whose `commondir` holds the objects.
fn locate(work_tree: &Path) -> Result<Repo, String> {
    let dot_git = work_tree.join(".git");
    let md = std::fs::symlink_metadata(&dot_git).map_err(|_| "not a git repository")?;
    let git_dir = if md.is_dir() {
        dot_git
    } else if md.is_file() && md.len() < 4096 {
        let text = std::fs::read_to_string(&dot_git).map_err(|e| e.to_string())?;
        let target = text
            .strip_prefix("gitdir:")
            .map(str::trim)
            .ok_or(".git is a file that names no git directory")?;
        work_tree.join(target)
    } else {
        return Err(".git is neither a directory nor a gitdir file".into());
    };
    let common = match std::fs::read_to_string(git_dir.join("commondir")) {
        Ok(c) => git_dir.join(c.trim()),
        Err(_) => git_dir.clone(),
    };
    Ok(Repo {
        index: git_dir.join("index"),
        objects: common.join("objects"),
        configs: vec![git_dir.join("config"), common.join("config")],
        info: common.join("info").join("attributes"),
    })
}

/// Why a repository's configuration keeps its index from being copied: line endings
/// converted by configuration (the shadow repository converts none), or another hash.
fn config_refuses(files: &[PathBuf]) -> Option<String> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let xdg = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| home.as_ref().map(|h| h.join(".config")));
    let globals = [
        home.map(|h| h.join(".gitconfig")),
        xdg.map(|x| x.join("git").join("config")),
    ];
    for file in files.iter().cloned().chain(globals.into_iter().flatten()) {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        for line in text.lines() {
            let line: String = line
                .split(['#', ';'])
                .next()
                .unwrap_or_default()
                .chars()
                .filter(|c| !c.is_whitespace())
                .collect::<String>()
                .to_ascii_lowercase();
            if let Some(v) = line.strip_prefix("autocrlf=")
                && v != "false"
            {
                return Some(format!("{} sets core.autocrlf", file.display()));
            }
            if let Some(v) = line.strip_prefix("objectformat=")
                && v != "sha1"
            {
                return Some(format!("{} uses the {v} object format", file.display()));
            }
        }
    }
    None
}

/// Whether a path from an index is one a tree may hold and a work tree may have:
/// relative, no empty, `.` or `..` component, nothing under a `.git`.
fn sound_path(name: &[u8]) -> bool {
    !name.is_empty()
        && name
            .split(|b| *b == b'/')
            .all(|c| !c.is_empty() && c != b"." && c != b".." && !c.eq_ignore_ascii_case(b".git"))
}

impl Shadow {
    /// Starts the shadow index of a repository's first snapshot as a copy of the
    /// repository's own index (see the module): returns how many entries were copied,
    /// and whether their trees were packed into the shadow too (they are the
    /// snapshot's when nothing in the directory differs from the index), or why none
    /// were copied (the snapshot is then a full scan).
    pub(super) fn seed(&self, limits: &Limits) -> Result<(usize, bool), String> {
        let repo = locate(&self.work_tree)?;
        if let Some(why) = config_refuses(&repo.configs) {
            return Err(why);
        }
        if std::fs::metadata(&repo.info).is_ok_and(|m| m.len() > 0) {
            return Err(format!("{} is not read by the shadow", repo.info.display()));
        }
        let md = std::fs::symlink_metadata(&repo.index).map_err(|e| e.to_string())?;
        if !md.is_file() || md.len() > MAX_INDEX_BYTES {
            return Err(format!(
                "{} is not an index Berth reads",
                repo.index.display()
            ));
        }
        let modified = md.modified().map_err(|e| e.to_string())?;
        let bytes = std::fs::read(&repo.index).map_err(|e| e.to_string())?;
        let parsed = index::parse(&bytes).map_err(|e| format!("{}: {e}", repo.index.display()))?;
        drop(bytes);
        let cap = limits.max_file_bytes;
        let mut kept: Vec<Entry> = parsed
            .entries
            .into_iter()
            .filter(|e| {
                e.stage == 0
                    && !e.virtual_entry
                    && matches!(e.mode(), 0o100644 | 0o100755 | 0o120000)
                    && u64::from(e.size()) <= cap
                    && sound_path(&e.name)
            })
            .collect();
        // Content that attributes convert: hashed from the file, as a full scan does.
        if kept
            .iter()
            .any(|e| e.name.ends_with(b"/.gitattributes") || e.name == b".gitattributes")
            || self.global_attributes()
        {
            let converted = self.converted(&kept).map_err(|e| e.to_string())?;
            kept.retain(|e| !converted.contains(&e.name));
        }
        let count = kept.len();
        let file = self.git_dir.join("index");
        let tmp = self.git_dir.join("index.berth-seed");
        private::write(&tmp, index::write(&kept)).map_err(|e| e.to_string())?;
        // The repository's index time: git re-reads an entry modified in its tick.
        std::fs::File::options()
            .write(true)
            .open(&tmp)
            .and_then(|f| f.set_modified(modified))
            .map_err(|e| e.to_string())?;
        private::write(
            self.git_dir.join(SEED_FILE),
            repo.objects.display().to_string(),
        )
        .map_err(|e| e.to_string())?;
        std::fs::rename(&tmp, &file).map_err(|e| e.to_string())?;
        // From the entries at hand: the index is not read back.
        let trees = index::trees(&kept);
        drop(kept);
        let packed = trees.is_some_and(|trees| {
            let pack = index::pack(&trees);
            drop(trees);
            self.git_input(["index-pack", "--stdin"], &pack, None)
                .is_ok()
        });
        Ok((count, packed))
    }

    /// Whether the user's global attributes file exists (it applies to every path).
    fn global_attributes(&self) -> bool {
        let xdg = std::env::var_os("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")));
        xdg.is_some_and(|x| x.join("git").join("attributes").exists())
    }

    /// The paths among `entries` whose content git converts on the way in.
    fn converted(
        &self,
        entries: &[Entry],
    ) -> Result<std::collections::HashSet<Vec<u8>>, ChangesError> {
        let mut input = Vec::new();
        for e in entries {
            input.extend_from_slice(&e.name);
            input.push(0);
        }
        let out = self.git_input(
            [
                "check-attr",
                "-z",
                "--stdin",
                "filter",
                "ident",
                "working-tree-encoding",
            ],
            &input,
            None,
        )?;
        // `<path> NUL <attribute> NUL <value> NUL`, for each path and attribute.
        let mut converted = std::collections::HashSet::new();
        let mut fields = out.split(|b| *b == 0);
        while let (Some(path), Some(attr), Some(value)) =
            (fields.next(), fields.next(), fields.next())
        {
            let inert = value == b"unspecified" || value == b"unset";
            // `-filter` and `-ident` convert nothing; any encoding does.
            if !inert || (attr == b"working-tree-encoding" && value != b"unspecified") {
                converted.insert(path.to_vec());
            }
        }
        Ok(converted)
    }

    /// The repository's objects directory, when this shadow was seeded from it.
    pub(super) fn seeded_from(&self) -> Option<PathBuf> {
        std::fs::read_to_string(self.git_dir.join(SEED_FILE))
            .ok()
            .map(|p| PathBuf::from(p.trim()))
    }

    /// Copies into the shadow repository the content, before the task, of each file
    /// that changed between `before` and `after` and is not there yet (it was a seeded
    /// entry): what the summary, `berth task diff` and undo read. The copy is a pack
    /// from the repository's objects that git rehashes as it unpacks it, so only
    /// genuine content arrives. Returns the paths whose content could not be found.
    pub(super) fn own_before(
        &self,
        before: &str,
        after: &str,
    ) -> Result<Vec<String>, ChangesError> {
        let Some(objects) = self.seeded_from() else {
            return Ok(Vec::new());
        };
        let raw = self.git_bytes(["diff-tree", "-r", "-z", "--no-renames", before, after])?;
        // `:<old mode> <new mode> <old id> <new id> <status> NUL <path> NUL`
        let mut wanted: Vec<(String, String)> = Vec::new();
        let mut fields = raw.split(|b| *b == 0);
        while let (Some(meta), Some(path)) = (fields.next(), fields.next()) {
            let meta = String::from_utf8_lossy(meta);
            let mut words = meta.trim_start_matches(':').split(' ');
            let (Some(mode), Some(_), Some(oid)) = (words.next(), words.next(), words.next())
            else {
                continue;
            };
            if matches!(mode, "100644" | "100755" | "120000") && oid.bytes().any(|b| b != b'0') {
                wanted.push((oid.to_owned(), String::from_utf8_lossy(path).into_owned()));
            }
        }
        let missing = |wanted: &[(String, String)]| -> Result<Vec<(String, String)>, ChangesError> {
            let input: String = wanted.iter().map(|(o, _)| format!("{o}\n")).collect();
            let out = self.git_input(["cat-file", "--batch-check"], input.as_bytes(), None)?;
            let out = String::from_utf8_lossy(&out);
            Ok(wanted
                .iter()
                .zip(out.lines())
                .filter(|(_, line)| line.ends_with(" missing"))
                .map(|(w, _)| w.clone())
                .collect())
        };
        if wanted.is_empty() {
            return Ok(Vec::new());
        }
        let absent = missing(&wanted)?;
        if absent.is_empty() {
            return Ok(Vec::new());
        }
        let input: String = absent.iter().map(|(o, _)| format!("{o}\n")).collect();
        // pack-objects stops at the first object it cannot read: each is packed on its
        // own when the batch fails.
        let batch = self
            .git_input(
                ["pack-objects", "--stdout", "-q"],
                input.as_bytes(),
                Some(&objects),
            )
            .map(|pack| vec![pack])
            .or_else(|_| -> Result<Vec<Vec<u8>>, ChangesError> {
                Ok(absent
                    .iter()
                    .filter_map(|(o, _)| {
                        self.git_input(
                            ["pack-objects", "--stdout", "-q"],
                            format!("{o}\n").as_bytes(),
                            Some(&objects),
                        )
                        .ok()
                    })
                    .collect())
            })?;
        for pack in batch {
            self.git_input(["unpack-objects", "-q"], &pack, None)?;
        }
        Ok(missing(&absent)?.into_iter().map(|(_, p)| p).collect())
    }
}
