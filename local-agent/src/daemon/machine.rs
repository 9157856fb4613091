//! This machine's identity as a daemon: a uuid created once and kept in
//! `$BERTH_HOME/machine-id`.
//!
//! A daemon token is bound to the first machine id that registers with it, so the id
//! must survive restarts: it is written whole or not at all (temporary file, fsync,
//! rename) and never rewritten once it exists.

use berth_core::MachineId;
use std::io;
use std::path::{Path, PathBuf};

/// The file name inside Berth's home.
pub const MACHINE_ID_FILE: &str = "machine-id";

/// Why the machine id could not be read or created.
#[derive(Debug, thiserror::Error)]
pub enum MachineIdError {
    #[error("cannot {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path} does not hold a machine id (found {found:?})")]
    Corrupt { path: PathBuf, found: String },
}

impl MachineIdError {
    /// What to do about it.
    pub fn hint(&self) -> &'static str {
        match self {
            MachineIdError::Io { .. } => {
                "check the permissions of Berth's home (--home / BERTH_HOME)"
            }
            MachineIdError::Corrupt { .. } => {
                "restore the file, or remove it: this machine then registers as a new one and \
                 needs a new token (`berth daemon token create NAME` on the server)"
            }
        }
    }
}

fn io_err<'a>(
    action: &'static str,
    path: &'a Path,
) -> impl FnOnce(io::Error) -> MachineIdError + 'a {
    move |source| MachineIdError::Io {
        action,
        path: path.to_owned(),
        source,
    }
}

/// Creates `home` (0700), or makes an existing one 0700 ([`berth_host::private`]).
pub fn ensure_home(home: &Path) -> Result<(), MachineIdError> {
    berth_host::private::dir(home).map_err(io_err("create", home))
}

/// The machine id kept in `home`, created (uuid v4, file mode 0600) on first use.
pub fn load_or_create(home: &Path) -> Result<MachineId, MachineIdError> {
    ensure_home(home)?;
    let path = home.join(MACHINE_ID_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => return parse(&path, &text),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err("read", &path)(e)),
    }
    let id = uuid::Uuid::new_v4().to_string();
    berth_host::private::write_atomic(&path, format!("{id}\n").as_bytes())
        .map_err(io_err("write", &path))?;
    parse(&path, &id)
}

/// The id in the file: a uuid, in its hyphenated form (which is always a machine id).
fn parse(path: &Path, text: &str) -> Result<MachineId, MachineIdError> {
    let id = text.trim();
    let corrupt = || MachineIdError::Corrupt {
        path: path.to_owned(),
        found: id.chars().take(64).collect(),
    };
    let uuid = uuid::Uuid::parse_str(id).map_err(|_| corrupt())?;
    MachineId::parse(&uuid.hyphenated().to_string()).map_err(|_| corrupt())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "berth-machine-{name}-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p)
            .map(|m| m.permissions().mode() & 0o777)
            .unwrap_or(0)
    }

    #[test]
    fn created_once_private_and_reused() {
        let home = temp("once").join("nested-home");
        let first = load_or_create(&home).expect("create");
        assert!(uuid::Uuid::parse_str(first.as_str()).is_ok(), "{first}");
        assert_eq!(mode(&home), 0o700);
        assert_eq!(mode(&home.join(MACHINE_ID_FILE)), 0o600);
        let second = load_or_create(&home).expect("reuse");
        assert_eq!(first, second);
        let leftovers: Vec<_> = std::fs::read_dir(&home)
            .map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert_eq!(leftovers, vec![std::ffi::OsString::from(MACHINE_ID_FILE)]);
        let _ = std::fs::remove_dir_all(home.parent().unwrap_or(&home));
    }

    #[test]
    fn a_damaged_file_is_not_replaced() {
        let home = temp("corrupt");
        ensure_home(&home).expect("home");
        let path = home.join(MACHINE_ID_FILE);
        std::fs::write(&path, "not a uuid\n").expect("write");
        assert!(matches!(
            load_or_create(&home),
            Err(MachineIdError::Corrupt { found, .. }) if found == "not a uuid"
        ));
        assert_eq!(
            std::fs::read_to_string(&path).ok().as_deref(),
            Some("not a uuid\n")
        );
        let _ = std::fs::remove_dir_all(&home);
    }
}
