//! Reading a file whose nature Berth does not choose: a settings layer, a prompt
//! fragment, a skill's file.
//!
//! A repository decides what its `.berth/settings.jsonc` and its plugins are: a link to
//! `/dev/zero` (endless), a FIFO (an `open` that waits for a writer forever), a file of
//! gigabytes. Every such read goes through [`read`], which
//!
//! 1. looks at what the name reaches (symbolic links followed: links inside a project
//!    are legitimate) and refuses anything but a regular file before opening it, so a
//!    device is never even opened;
//! 2. opens it without blocking (a FIFO swapped in meanwhile cannot stall the open) and
//!    checks the opened descriptor again: a regular file, and for [`Whole`] no larger
//!    than the limit;
//! 3. reads at most limit + 1 bytes, so a file that grows while it is read is caught
//!    too.
//!
//! A refusal is an [`InputError`] with a stable [`code`](InputError::code), a message
//! naming the file and the rule, and a hint.

use berth_core::ErrorCode;
use rustix::fs::{FileType, Mode, OFlags};
use std::io::Read as _;
use std::path::Path;

/// The largest settings file read, in bytes (1 MiB): a settings file is a few lines.
pub const MAX_SETTINGS: u64 = 1024 * 1024;

/// Whether a file longer than the limit is refused, or read up to the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// The whole file, or [`InputError::TooLarge`] (settings).
    Whole(u64),
    /// The first bytes, up to this many; [`Bytes::cut`] says whether there were more
    /// (prompt fragments, cut with a note).
    Prefix(u64),
}

/// What [`read`] read, and the owner and mode of the file it read them from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bytes {
    pub bytes: Vec<u8>,
    /// The file was longer than a [`Limit::Prefix`], and the rest was left out.
    pub cut: bool,
    /// The owner of the file read (the opened descriptor's, not the name's).
    pub uid: u32,
    /// Its permission bits (`0o644`, …).
    pub mode: u32,
}

impl Bytes {
    /// The bytes as text (`shown` names the file), or why they are not UTF-8.
    pub fn into_text(self, shown: &str) -> Result<String, InputError> {
        String::from_utf8(self.bytes).map_err(|e| InputError::Io {
            file: shown.to_owned(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, e.utf8_error()),
        })
    }
}

/// Why a file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The name reaches a FIFO, a device, a socket or a directory.
    #[error(
        "{file} is {kind}, not a regular file; Berth reads settings and plugins only from regular files"
    )]
    NotRegular { file: String, kind: &'static str },
    /// A [`Limit::Whole`] file longer than the limit.
    #[error("{file} is larger than {limit} bytes, the most Berth reads of a settings file")]
    TooLarge { file: String, limit: u64 },
    /// The file cannot be opened or read.
    #[error("cannot read {file}: {source}")]
    Io {
        file: String,
        #[source]
        source: std::io::Error,
    },
}

impl InputError {
    /// The stable code: `not_a_regular_file`, `file_too_large` or `unreadable`.
    pub fn code(&self) -> ErrorCode {
        match self {
            InputError::NotRegular { .. } => ErrorCode::NotARegularFile,
            InputError::TooLarge { .. } => ErrorCode::FileTooLarge,
            InputError::Io { .. } => ErrorCode::Unreadable,
        }
    }

    /// What to do about it: the code's hint ([`ErrorCode::hint`]).
    pub fn hint(&self) -> &'static str {
        self.code().hint().unwrap_or_default()
    }

    /// The file does not exist (or a folder on its way is not a folder): for a settings
    /// layer, no layer there.
    pub fn is_missing(&self) -> bool {
        matches!(self, InputError::Io { source, .. }
            if matches!(source.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory))
    }
}

/// Reads `path` (shown as `shown` in messages) if it is a regular file, within `limit`.
pub fn read(path: &Path, shown: &str, limit: Limit) -> Result<Bytes, InputError> {
    let io = |source: std::io::Error| InputError::Io {
        file: shown.to_owned(),
        source,
    };
    let not_regular = |kind| InputError::NotRegular {
        file: shown.to_owned(),
        kind,
    };
    // Before opening: a device or a FIFO is never opened.
    let kind = kind_of(FileType::from_raw_mode(
        rustix::fs::stat(path).map_err(|e| io(e.into()))?.st_mode,
    ));
    if let Some(kind) = kind {
        return Err(not_regular(kind));
    }
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
    )
    .map_err(|e| io(e.into()))?;
    let st = rustix::fs::fstat(&fd).map_err(|e| io(e.into()))?;
    if let Some(kind) = kind_of(FileType::from_raw_mode(st.st_mode)) {
        return Err(not_regular(kind));
    }
    let (max, whole) = match limit {
        Limit::Whole(max) => (max, true),
        Limit::Prefix(max) => (max, false),
    };
    let size = u64::try_from(st.st_size).unwrap_or(0);
    if whole && size > max {
        return Err(InputError::TooLarge {
            file: shown.to_owned(),
            limit: max,
        });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(size.min(max)).unwrap_or(0));
    std::fs::File::from(fd)
        .take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io)?;
    let cut = bytes.len() as u64 > max;
    if cut && whole {
        // It grew while it was read.
        return Err(InputError::TooLarge {
            file: shown.to_owned(),
            limit: max,
        });
    }
    bytes.truncate(usize::try_from(max).unwrap_or(usize::MAX));
    #[allow(clippy::useless_conversion)] // `st_mode` is a u16 on macOS, a u32 here
    let mode = u32::from(st.st_mode) & 0o7777;
    Ok(Bytes {
        bytes,
        cut,
        uid: st.st_uid,
        mode,
    })
}

/// `None` for a regular file, else what it is, for messages.
fn kind_of(t: FileType) -> Option<&'static str> {
    match t {
        FileType::RegularFile => None,
        FileType::Directory => Some("a directory"),
        FileType::Fifo => Some("a FIFO (named pipe)"),
        FileType::CharacterDevice => Some("a character device"),
        FileType::BlockDevice => Some("a block device"),
        FileType::Socket => Some("a socket"),
        FileType::Symlink => Some("a symbolic link"),
        FileType::Unknown => Some("not a file Berth knows"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(tag: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("berth-input-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn only_regular_files_within_the_limit_are_read() {
        let dir = temp("kinds");
        let fifo = dir.join("fifo");
        // mkfifo(1): rustix has no mkfifoat on macOS, where this is built too.
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.is_ok_and(|s| s.success()), "mkfifo {fifo:?}");
        let link = dir.join("zero");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        let big = dir.join("big");
        std::fs::write(&big, vec![b' '; 11]).unwrap();
        let ok = dir.join("ok");
        std::fs::write(&ok, b"0123456789").unwrap();
        let err = |p: &Path, limit| read(p, "F", limit).map(|b| b.bytes).unwrap_err();

        let e = err(&fifo, Limit::Whole(10));
        assert_eq!(e.code().as_str(), "not_a_regular_file");
        assert_eq!(
            e.to_string(),
            "F is a FIFO (named pipe), not a regular file; Berth reads settings and plugins only from regular files"
        );
        assert_eq!(
            err(&link, Limit::Prefix(10)).code().as_str(),
            "not_a_regular_file"
        );
        assert_eq!(
            err(&dir, Limit::Whole(10)).code().as_str(),
            "not_a_regular_file"
        );
        let e = err(&big, Limit::Whole(10));
        assert_eq!(
            (e.code().as_str(), e.to_string().as_str()),
            (
                "file_too_large",
                "F is larger than 10 bytes, the most Berth reads of a settings file"
            )
        );
        assert!(err(&dir.join("none"), Limit::Whole(10)).is_missing());

        let whole = read(&ok, "F", Limit::Whole(10)).unwrap();
        assert_eq!(
            (whole.bytes.as_slice(), whole.cut),
            (&b"0123456789"[..], false)
        );
        let prefix = read(&big, "F", Limit::Prefix(4)).unwrap();
        assert_eq!((prefix.bytes.len(), prefix.cut), (4, true));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
