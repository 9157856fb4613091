//! The user's trust in project directories: `$BERTH_HOME/trust.json`.
//!
//! A project layer (`.berth/settings.jsonc`) comes with every clone; what it may do
//! beyond adding text and narrowing permissions needs the user's trust in its
//! directory (core's [`berth_core::settings::trust`]). Trust lives here, in Berth's
//! state and never in the directory, and only the `berth` command line writes it
//! (`berth trust`, `session link --trust`): no HTTP route, channel or daemon protocol
//! reaches this module.
//!
//! An entry names a directory by its canonical path and its identity, (device,
//! inode), taken when it was trusted. A directory later found at that path with
//! another identity (deleted and cloned again, swapped for another) is not trusted:
//! [`Trust::Replaced`], which every surface shows.
//!
//! The file is rewritten whole (a temporary file renamed into place, mode 0600), under
//! an exclusive `flock` on `trust.json.lock`, so two commands never lose each other's
//! change and a reader never sees half a file.

use berth_core::settings::trust::Trust;
use berth_core::{Platform, quote::q};
use rustix::fs::FlockOperation;
use serde::{Deserialize, Serialize};
use std::fs::{DirBuilder, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The trust list's file name in `BERTH_HOME`.
pub const TRUST_FILE: &str = "trust.json";

const VERSION: u32 = 1;

/// One trusted directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrustEntry {
    /// The canonical path.
    pub dir: String,
    pub dev: u64,
    pub ino: u64,
    /// When it was trusted (RFC 3339, UTC).
    pub trusted_at: String,
}

/// Whether a trusted directory is still the one the user trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryState {
    /// The same directory (device and inode) is at the path.
    #[serde(rename = "trusted")]
    Current,
    /// Another directory is at the path now: the entry no longer applies.
    Replaced,
    /// Nothing (or no directory) is at the path.
    Missing,
}

impl EntryState {
    pub const fn as_str(self) -> &'static str {
        match self {
            EntryState::Current => "trusted",
            EntryState::Replaced => "replaced",
            EntryState::Missing => "missing",
        }
    }
}

/// What [`TrustStore::trust`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TrustChange {
    /// The directory was not trusted before.
    Added,
    /// It was already trusted, as this very directory.
    Unchanged,
    /// An entry for the path named another directory (replaced since); it now names
    /// this one.
    Renewed,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct TrustFile {
    version: u32,
    dirs: Vec<TrustEntry>,
}

/// Why the trust list could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    #[error("cannot read the trust list {file}: {source}")]
    Read {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the trust list {file} is damaged: {why}")]
    Damaged { file: String, why: String },
    #[error("cannot write the trust list {file}: {source}")]
    Write {
        file: String,
        #[source]
        source: std::io::Error,
    },
}

impl TrustError {
    /// What the user can do about it.
    pub fn hint(&self) -> String {
        match self {
            TrustError::Damaged { file, .. } => format!(
                "fix {file} by hand, or move it aside and trust your directories again (nothing else reads it)"
            ),
            TrustError::Read { .. } | TrustError::Write { .. } => {
                "check the permissions of Berth's state directory (BERTH_HOME)".to_owned()
            }
        }
    }
}

/// The trust list of one `BERTH_HOME`.
#[derive(Debug, Clone)]
pub struct TrustStore {
    file: PathBuf,
}

/// `a` and `b` name the same path under the native platform's case rule.
fn same_path(a: &str, b: &str) -> bool {
    if Platform::native().case_insensitive() {
        a.to_lowercase() == b.to_lowercase()
    } else {
        a == b
    }
}

/// The identity of the directory at `path`, following no final symlink; `None` when
/// nothing, or something other than a directory, is there.
pub fn identity_of(path: &str) -> Option<(u64, u64)> {
    let st = rustix::fs::lstat(path).ok()?;
    (rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory)
        .then_some((crate::dir::pin::dev_of(&st), st.st_ino))
}

impl TrustEntry {
    /// Whether the directory at the entry's path is still the one trusted.
    pub fn state(&self) -> EntryState {
        match identity_of(&self.dir) {
            Some(id) if id == (self.dev, self.ino) => EntryState::Current,
            Some(_) => EntryState::Replaced,
            None => EntryState::Missing,
        }
    }
}

impl TrustStore {
    /// The trust list of the state directory `berth_home`.
    pub fn new(berth_home: &Path) -> TrustStore {
        TrustStore {
            file: berth_home.join(TRUST_FILE),
        }
    }

    /// The file holding the list.
    pub fn path(&self) -> &Path {
        &self.file
    }

    fn shown(&self) -> String {
        self.file.display().to_string()
    }

    /// Every trusted directory, in the order trusted. No file is an empty list.
    pub fn entries(&self) -> Result<Vec<TrustEntry>, TrustError> {
        let text = match std::fs::read_to_string(&self.file) {
            Ok(t) => t,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(TrustError::Read {
                    file: self.shown(),
                    source,
                });
            }
        };
        let parsed: TrustFile = serde_json::from_str(&text).map_err(|e| TrustError::Damaged {
            file: self.shown(),
            why: e.to_string(),
        })?;
        if parsed.version != VERSION {
            return Err(TrustError::Damaged {
                file: self.shown(),
                why: format!(
                    "version {} is not one this Berth reads (it reads {VERSION})",
                    parsed.version
                ),
            });
        }
        Ok(parsed.dirs)
    }

    /// Whether the directory `dir` (canonical), now with `identity`, is trusted.
    pub fn trust_of(&self, dir: &str, identity: Option<(u64, u64)>) -> Result<Trust, TrustError> {
        let entries = self.entries()?;
        Ok(match entries.iter().find(|e| same_path(&e.dir, dir)) {
            None => Trust::Untrusted,
            Some(e) if identity == Some((e.dev, e.ino)) => Trust::Trusted,
            Some(_) => Trust::Replaced,
        })
    }

    /// Trusts the directory `dir` (canonical, validated by the caller) whose identity
    /// is `identity`.
    pub fn trust(&self, dir: &str, identity: (u64, u64)) -> Result<TrustChange, TrustError> {
        self.update(|entries| {
            let entry = TrustEntry {
                dir: dir.to_owned(),
                dev: identity.0,
                ino: identity.1,
                trusted_at: berth_host::clock::now(),
            };
            match entries.iter_mut().find(|e| same_path(&e.dir, dir)) {
                Some(e) if (e.dev, e.ino) == identity => TrustChange::Unchanged,
                Some(e) => {
                    *e = entry;
                    TrustChange::Renewed
                }
                None => {
                    entries.push(entry);
                    TrustChange::Added
                }
            }
        })
    }

    /// Revokes the trust in `dir` (canonical, or as it was trusted if it is gone);
    /// the entry removed, or `None` when `dir` was not trusted.
    pub fn revoke(&self, dir: &str) -> Result<Option<TrustEntry>, TrustError> {
        self.update(|entries| {
            let i = entries.iter().position(|e| same_path(&e.dir, dir))?;
            Some(entries.remove(i))
        })
    }

    /// Reads, changes and rewrites the list under the lock. A damaged list is never
    /// overwritten.
    fn update<T>(&self, change: impl FnOnce(&mut Vec<TrustEntry>) -> T) -> Result<T, TrustError> {
        let write_err = |source| TrustError::Write {
            file: self.shown(),
            source,
        };
        if let Some(dir) = self.file.parent() {
            DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(write_err)?;
        }
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(self.file.with_extension("json.lock"))
            .map_err(write_err)?;
        rustix::fs::flock(&lock, FlockOperation::LockExclusive).map_err(|e| write_err(e.into()))?;
        let mut entries = self.entries()?;
        let out = change(&mut entries);
        let doc = TrustFile {
            version: VERSION,
            dirs: entries,
        };
        let mut bytes = serde_json::to_vec_pretty(&doc).map_err(|e| write_err(e.into()))?;
        bytes.push(b'\n');
        berth_host::private::write_atomic(&self.file, &bytes).map_err(write_err)?;
        Ok(out)
    }
}

/// "~/code/app is trusted" and the like, for messages about one entry.
pub fn describe(shown: &str, state: EntryState) -> String {
    match state {
        EntryState::Current => format!("{shown} is trusted"),
        EntryState::Replaced => format!(
            "{shown} was replaced by another directory since it was trusted; the trust no longer applies"
        ),
        EntryState::Missing => format!("{shown} no longer exists; the trust applies to nothing"),
    }
}

/// The message for a path that is not in the list.
pub fn not_trusted(shown: &str) -> String {
    format!("{} is not trusted", q(shown))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "berth-trust-{tag}-{}-{}",
            std::process::id(),
            uuid::Uuid::now_v7().simple()
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn s(p: &Path) -> &str {
        p.to_str().unwrap()
    }

    #[test]
    fn trust_revoke_and_a_replaced_directory() {
        let root = tmp("cycle");
        let store = TrustStore::new(&root.join("home"));
        let app = root.join("app");
        std::fs::create_dir(&app).unwrap();
        let id = identity_of(s(&app)).unwrap();
        assert_eq!(store.trust_of(s(&app), Some(id)).unwrap(), Trust::Untrusted);
        assert_eq!(store.trust(s(&app), id).unwrap(), TrustChange::Added);
        assert_eq!(store.trust(s(&app), id).unwrap(), TrustChange::Unchanged);
        assert_eq!(store.trust_of(s(&app), Some(id)).unwrap(), Trust::Trusted);
        assert_eq!(store.entries().unwrap()[0].state(), EntryState::Current);

        // Deleted and made again at the same path: another inode, not trusted.
        let keep = root.join("keep");
        std::fs::rename(&app, &keep).unwrap();
        std::fs::create_dir(&app).unwrap();
        let new_id = identity_of(s(&app)).unwrap();
        assert_ne!(id, new_id);
        assert_eq!(
            store.trust_of(s(&app), Some(new_id)).unwrap(),
            Trust::Replaced
        );
        assert_eq!(store.entries().unwrap()[0].state(), EntryState::Replaced);
        assert_eq!(store.trust(s(&app), new_id).unwrap(), TrustChange::Renewed);
        assert_eq!(
            store.trust_of(s(&app), Some(new_id)).unwrap(),
            Trust::Trusted
        );

        let removed = store.revoke(s(&app)).unwrap().unwrap();
        assert_eq!((removed.dev, removed.ino), new_id);
        assert_eq!(store.revoke(s(&app)).unwrap(), None);
        assert_eq!(
            store.trust_of(s(&app), Some(new_id)).unwrap(),
            Trust::Untrusted
        );
        std::fs::remove_dir(&app).unwrap();
        assert_eq!(identity_of(s(&app)), None);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn the_list_is_private_and_a_damaged_one_is_never_overwritten() {
        let root = tmp("damaged");
        let store = TrustStore::new(&root);
        store.trust("/x", (1, 2)).unwrap();
        let meta = std::fs::metadata(store.path()).unwrap();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
            0o600
        );
        std::fs::write(store.path(), "{ not json").unwrap();
        assert!(matches!(store.entries(), Err(TrustError::Damaged { .. })));
        assert!(matches!(
            store.trust("/y", (3, 4)),
            Err(TrustError::Damaged { .. })
        ));
        assert!(matches!(
            store.trust_of("/x", Some((1, 2))),
            Err(TrustError::Damaged { .. })
        ));
        assert_eq!(std::fs::read_to_string(store.path()).unwrap(), "{ not json");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_symlink_is_not_the_directory_it_points_at() {
        let root = tmp("link");
        let real = root.join("real");
        std::fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink(&real, root.join("link")).unwrap();
        assert!(identity_of(s(&real)).is_some());
        assert_eq!(identity_of(s(&root.join("link"))), None);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
