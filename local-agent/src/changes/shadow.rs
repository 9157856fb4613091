//! The shadow repository of one bound directory: a git repository in Berth's state,
//! used with `--work-tree` set to the directory, and the one way Berth runs git on it.

use super::SNAPSHOTS_DIR;
use super::error::ChangesError;
use super::tree::escape_glob;
use crate::git;
use berth_host::private;
use sha2::{Digest, Sha256};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// Where the shadow repository of `dir` lives: a hash of its path (SHA-256 of its
/// text, in hex: the folders recorded so far are named so).
pub(super) fn shadow_dir(berth_home: &Path, dir: &Path) -> PathBuf {
    let key = hex::encode(Sha256::digest(dir.to_string_lossy().as_bytes()));
    berth_home
        .join(SNAPSHOTS_DIR)
        .join(format!("{}.git", &key[..24]))
}

/// What git may write when it records snapshots: the shadow store, all of it (one
/// fence for every directory's shadow repository).
fn store_writes(berth_home: &Path) -> git::Writes {
    git::Writes::beneath(berth_home.join(SNAPSHOTS_DIR))
}

/// The shadow repository of one bound directory.
#[derive(Debug, Clone)]
pub struct Shadow {
    pub(super) git_dir: PathBuf,
    pub(super) work_tree: PathBuf,
}

pub(super) fn now_secs() -> u64 {
    super::since_epoch().as_secs()
}

impl Shadow {
    /// The shadow repository of `dir` (canonical path, identity), created if needed. A
    /// directory replaced at the same path (another device/inode) starts a new one.
    pub fn open(
        berth_home: &Path,
        dir: &Path,
        identity: (u64, u64),
    ) -> Result<Shadow, ChangesError> {
        let shadow = Shadow {
            git_dir: shadow_dir(berth_home, dir),
            work_tree: dir.to_owned(),
        };
        let stamp = format!("{} {} {}\n", identity.0, identity.1, dir.display());
        let id_file = shadow.git_dir.join("berth-identity");
        match std::fs::read_to_string(&id_file) {
            Ok(s) if s == stamp => {
                shadow.configure()?;
                return Ok(shadow);
            }
            Ok(_) => {
                // Another directory now has this path: its history is not this one's.
                std::fs::remove_dir_all(&shadow.git_dir)?;
            }
            Err(_) => {}
        }
        private::dir(shadow.git_dir.parent().unwrap_or(berth_home))?;
        // `--shared=0600`: git makes every file it writes there 0600 (objects 0400)
        // and every directory 0700, whatever the umask: the snapshots hold copies of
        // the user's files, a `.env` included.
        let init = git::command(store_writes(berth_home));
        git::run(
            init,
            [
                OsStr::new("init"),
                OsStr::new("-q"),
                OsStr::new("--bare"),
                OsStr::new("--shared=0600"),
                shadow.git_dir.as_os_str(),
            ],
        )?;
        shadow.configure()?;
        private::write(&id_file, stamp)?;
        Ok(shadow)
    }

    /// The shadow repository's settings, applied once per version of them.
    pub(super) fn configure(&self) -> Result<(), ChangesError> {
        const VERSION: &str = "3";
        let stamp = self.git_dir.join("berth-config");
        if std::fs::read_to_string(&stamp).is_ok_and(|v| v == VERSION) {
            return Ok(());
        }
        for (k, v) in [
            ("gc.auto", "0"),
            ("core.autocrlf", "false"),
            ("core.quotepath", "false"),
            ("core.untrackedCache", "true"),
            ("core.fsmonitor", "false"),
            ("core.hooksPath", "/dev/null"),
            // Every git step reads the index (20,000 entries: 1.6 MB): no checksum
            // of it, and its compact form.
            ("index.skipHash", "true"),
            ("index.version", "4"),
            // Files 0600 and directories 0700 (see `open`); a repository made by an
            // older version also has what it already wrote tightened, once.
            ("core.sharedRepository", "0600"),
        ] {
            self.git(["config", k, v])?;
        }
        private::tighten_tree(&self.git_dir)?;
        private::write(&stamp, VERSION)?;
        Ok(())
    }

    /// Whether a snapshot was ever recorded here.
    pub fn recorded(&self) -> bool {
        self.git_dir.join("berth-last").exists()
    }

    /// The shadow repository's git directory.
    pub fn git_dir(&self) -> &Path {
        &self.git_dir
    }

    /// The shadow repository of a directory recorded earlier, if there is one.
    pub fn existing(berth_home: &Path, dir: &Path) -> Option<(Shadow, (u64, u64))> {
        let git_dir = shadow_dir(berth_home, dir);
        let stamp = std::fs::read_to_string(git_dir.join("berth-identity")).ok()?;
        let mut words = stamp.split_whitespace();
        let dev = words.next()?.parse().ok()?;
        let ino = words.next()?.parse().ok()?;
        Some((
            Shadow {
                git_dir,
                work_tree: dir.to_owned(),
            },
            (dev, ino),
        ))
    }

    /// Git on this shadow repository and its work tree, which may write only in the
    /// shadow store (never the work tree or its own `.git`).
    pub(super) fn command(&self) -> git::Git {
        let store = self.git_dir.parent().unwrap_or(&self.git_dir);
        let mut c = git::command(git::Writes::beneath(store));
        // The user's own excludes file, as their git reads it (the default one,
        // `~/.config/git/ignore`, git finds without configuration).
        if let Some(file) = git::user().excludes_file {
            let mut kv = std::ffi::OsString::from("core.excludesFile=");
            kv.push(file.as_os_str());
            c.arg("-c").arg(kv);
        }
        c.arg("--git-dir")
            .arg(&self.git_dir)
            .arg("--work-tree")
            .arg(&self.work_tree)
            .args(["-c", "user.name=Berth", "-c", "user.email=berth@localhost"])
            .current_dir(&self.git_dir)
            .env("GIT_OPTIONAL_LOCKS", "0");
        c
    }

    pub(super) fn git_bytes<I, S>(&self, args: I) -> Result<Vec<u8>, ChangesError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        Ok(git::run(self.command(), args)?)
    }

    /// Runs git with `input` on its standard input (written from a thread, so a large
    /// input and a large output cannot block each other); `alternates`, an objects
    /// directory it may also read (never write: only this command sees it).
    pub(super) fn git_input<I, S>(
        &self,
        args: I,
        input: &[u8],
        alternates: Option<&Path>,
    ) -> Result<Vec<u8>, ChangesError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        use std::io::Write;
        use std::process::Stdio;
        let args: Vec<std::ffi::OsString> =
            args.into_iter().map(|a| a.as_ref().to_owned()).collect();
        let mut cmd = self.command();
        if let Some(dir) = alternates {
            cmd.env("GIT_ALTERNATE_OBJECT_DIRECTORIES", dir);
        }
        let mut child = cmd
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let stdin = child.stdin.take();
        let out = std::thread::scope(|s| {
            s.spawn(move || {
                if let Some(mut stdin) = stdin {
                    let _ = stdin.write_all(input);
                }
            });
            child.wait_with_output()
        })?;
        let name = args
            .first()
            .map(|a| a.to_string_lossy().into_owned())
            .unwrap_or_default();
        Ok(git::check(out, &name)?)
    }

    pub(super) fn git<I, S>(&self, args: I) -> Result<String, ChangesError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        Ok(String::from_utf8_lossy(&self.git_bytes(args)?)
            .trim()
            .to_owned())
    }

    pub(super) fn exclude_file(&self) -> PathBuf {
        self.git_dir.join("info").join("exclude")
    }

    /// Writes the shadow's exclude file anew: one anchored line per file left out of
    /// the snapshots (`large`: path, size, mtime).
    pub(super) fn write_excludes(&self, large: &[(String, u64, i64)]) -> Result<(), ChangesError> {
        let lines: String = large
            .iter()
            .map(|(p, _, _)| format!("/{}\n", escape_glob(p)))
            .collect();
        let file = self.exclude_file();
        if let Some(parent) = file.parent() {
            private::dir(parent)?;
        }
        private::write(file, lines)?;
        Ok(())
    }

    /// Adds `paths` (each an anchored pattern: `/dir/` for a directory) to the
    /// exclude file.
    pub(super) fn add_excludes<'a>(
        &self,
        paths: impl IntoIterator<Item = (&'a str, bool)>,
    ) -> Result<(), ChangesError> {
        let mut lines = std::fs::read_to_string(self.exclude_file()).unwrap_or_default();
        for (p, dir) in paths {
            lines.push_str(&format!(
                "/{}{}\n",
                escape_glob(p),
                if dir { "/" } else { "" }
            ));
        }
        private::write(self.exclude_file(), lines)?;
        Ok(())
    }

    /// A blob's bytes and mode (`100755` executable) at `path` in `tree`; `None` when
    /// the path is not in it.
    pub(super) fn blob(
        &self,
        tree: &str,
        path: &str,
    ) -> Result<Option<(String, String)>, ChangesError> {
        let line = self.git(["ls-tree", "-z", tree, "--", path])?;
        let line = line.trim_end_matches('\0');
        if line.is_empty() {
            return Ok(None);
        }
        // `<mode> blob <oid>\t<path>`
        let (meta, _) = line.split_once('\t').unwrap_or((line, ""));
        let mut parts = meta.split_whitespace();
        let mode = parts.next().unwrap_or("100644").to_owned();
        let _kind = parts.next();
        let oid = parts.next().unwrap_or_default().to_owned();
        Ok(Some((oid, mode)))
    }

    pub(super) fn blob_bytes(&self, oid: &str) -> Result<Vec<u8>, ChangesError> {
        self.git_bytes(["cat-file", "blob", oid])
    }
}
