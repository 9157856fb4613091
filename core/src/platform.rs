//! The platform a path belongs to.
//!
//! A path is always checked for the machine that will use it, not for the machine doing
//! the checking: the browser previews a binding for a daemon that may run another OS.

use serde::{Deserialize, Serialize};

/// An operating system family, as far as paths are concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Platform {
    /// POSIX paths, case-sensitive file systems.
    Linux,
    /// POSIX paths; the default file system is case-insensitive.
    Macos,
    /// Drive letters, UNC and device prefixes, `\` separators; case-insensitive.
    Windows,
}

impl Platform {
    /// The platform this code was compiled for. In the browser build this is `Linux`;
    /// browser code always names the platform explicitly instead.
    pub const fn native() -> Platform {
        if cfg!(windows) {
            Platform::Windows
        } else if cfg!(target_os = "macos") {
            Platform::Macos
        } else {
            Platform::Linux
        }
    }

    /// Whether paths use Windows syntax (drive letters, `\`).
    pub const fn is_windows(self) -> bool {
        matches!(self, Platform::Windows)
    }

    /// Whether two names that differ only in case name the same file.
    pub const fn case_insensitive(self) -> bool {
        match self {
            Platform::Linux => false,
            Platform::Macos | Platform::Windows => true,
        }
    }

    /// The separator used when printing a path.
    pub const fn separator(self) -> char {
        if self.is_windows() { '\\' } else { '/' }
    }

    /// Parses `linux`, `macos`, `windows` (and the aliases `posix`, `darwin`, `win`).
    pub fn from_name(name: &str) -> Option<Platform> {
        match name.to_ascii_lowercase().as_str() {
            "linux" | "posix" | "unix" => Some(Platform::Linux),
            "macos" | "darwin" | "mac" => Some(Platform::Macos),
            "windows" | "win" | "win32" => Some(Platform::Windows),
            _ => None,
        }
    }

    /// The lowercase name used in JSON and on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            Platform::Linux => "linux",
            Platform::Macos => "macos",
            Platform::Windows => "windows",
        }
    }
}
