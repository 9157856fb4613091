//! Lexically valid local paths.
//!
//! A [`LocalPath`] can only hold an absolute path, normalized for a named platform:
//! `.` removed, `..` collapsed without climbing above the root, separators unified.
//! Constructing one does no I/O; it says nothing about whether the path exists or may
//! be bound (see [`crate::rules`] and the native validator for that).

use crate::code::{ErrorCode, Refusal};
use crate::platform::Platform;
use crate::quote::{QuotedChar, q};
use serde::{Deserialize, Serialize};
use std::fmt;

/// The longest input accepted, in bytes (Linux `PATH_MAX`).
pub const MAX_PATH_BYTES: usize = 4096;

/// Where an absolute path starts.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Root {
    /// POSIX `/`.
    Slash,
    /// A Windows drive, `C:\`; the letter is stored upper case.
    Drive(char),
    /// A Windows UNC share, `\\server\share\`.
    Unc { server: String, share: String },
    /// A Windows device or verbatim path, `\\?\…` or `\\.\…`; `marker` is `?` or `.`.
    Device { marker: char },
}

/// An absolute, normalized path for one platform.
///
/// Invariants: the text is non-empty, at most [`MAX_PATH_BYTES`] long as given, free of
/// NUL, absolute for its platform, and has no `.`/`..`/empty components. Normalizing is
/// idempotent: parsing [`LocalPath::as_str`] again yields an equal value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LocalPath {
    platform: Platform,
    root: Root,
    parts: Vec<String>,
    text: String,
}

impl LocalPath {
    /// Parses `input` as an absolute path on `platform`.
    pub fn parse(platform: Platform, input: &str) -> Result<LocalPath, Refusal> {
        if input.is_empty() {
            return Err(Refusal::new(
                ErrorCode::PathEmpty,
                "the path is empty",
                "give the absolute path of a project directory, e.g. ~/code/app",
            ));
        }
        if input.len() > MAX_PATH_BYTES {
            return Err(Refusal::new(
                ErrorCode::PathInvalid,
                format!(
                    "the path is {} bytes long; the limit is {MAX_PATH_BYTES}",
                    input.len()
                ),
                "give a shorter path",
            ));
        }
        if input.contains('\0') {
            return Err(Refusal::new(
                ErrorCode::PathInvalid,
                format!("the path {} contains a NUL byte", q(input)),
                "remove the NUL byte; no file name can contain one",
            ));
        }
        if platform.is_windows() {
            parse_windows(platform, input)
        } else {
            parse_posix(platform, input)
        }
    }

    /// Parses `input`, first expanding a leading `~` (alone or followed by a separator)
    /// to `home` when one is known. `~user` forms are not expanded.
    pub fn parse_with_home(
        platform: Platform,
        input: &str,
        home: Option<&LocalPath>,
    ) -> Result<LocalPath, Refusal> {
        if let Some(rest) = input.strip_prefix('~') {
            let sep_follows = rest.is_empty()
                || rest.starts_with('/')
                || (platform.is_windows() && rest.starts_with('\\'));
            if sep_follows && let Some(home) = home {
                let mut joined = home.as_str().to_owned();
                joined.push_str(rest);
                return LocalPath::parse(platform, &joined);
            }
        }
        LocalPath::parse(platform, input)
    }

    /// The platform whose rules this path follows.
    pub fn platform(&self) -> Platform {
        self.platform
    }

    /// Where the path starts.
    pub fn root(&self) -> &Root {
        &self.root
    }

    /// The normal components after the root.
    pub fn parts(&self) -> &[String] {
        &self.parts
    }

    /// The normalized text.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether this path is a root (no components).
    pub fn is_root(&self) -> bool {
        self.parts.is_empty()
    }

    /// The final component, if any.
    pub fn file_name(&self) -> Option<&str> {
        self.parts.last().map(String::as_str)
    }

    /// The parent directory, or `None` for a root.
    pub fn parent(&self) -> Option<LocalPath> {
        if self.parts.is_empty() {
            return None;
        }
        let parts = self.parts[..self.parts.len() - 1].to_vec();
        Some(LocalPath::from_parts(
            self.platform,
            self.root.clone(),
            parts,
        ))
    }

    /// This path followed by one more normal component. Returns an error if `name` is
    /// not a single normal component.
    pub fn join(&self, name: &str) -> Result<LocalPath, Refusal> {
        // A plain POSIX name needs no parse: the same value, without splitting and
        // allocating every component again (the fence joins a few dozen per run).
        let plain = !self.platform.is_windows()
            && !matches!(name, "" | "." | "..")
            && !name.contains(['/', '\0'])
            && self.text.len() + 1 + name.len() <= MAX_PATH_BYTES;
        if plain {
            let mut parts = Vec::with_capacity(self.parts.len() + 1);
            parts.extend(self.parts.iter().cloned());
            parts.push(name.to_owned());
            let mut text = String::with_capacity(self.text.len() + 1 + name.len());
            text.push_str(&self.text);
            if !self.parts.is_empty() {
                text.push('/');
            }
            text.push_str(name);
            return Ok(LocalPath {
                platform: self.platform,
                root: self.root.clone(),
                parts,
                text,
            });
        }
        let mut text = self.text.clone();
        if !self.parts.is_empty() {
            text.push(self.platform.separator());
        }
        text.push_str(name);
        let joined = LocalPath::parse(self.platform, &text)?;
        if joined.parts.len() != self.parts.len() + 1 || joined.root != self.root {
            return Err(Refusal::new(
                ErrorCode::PathInvalid,
                format!("{} is not a single file name", q(name)),
                "give one name without separators, `.` or `..`",
            ));
        }
        Ok(joined)
    }

    /// Whether `self` is `other` or lies below it, comparing names the way the
    /// platform's file system does.
    pub fn starts_with(&self, other: &LocalPath) -> bool {
        self.starts_with_case(other, self.platform.case_insensitive())
    }

    /// [`LocalPath::starts_with`] with the case rule chosen by the caller.
    pub fn starts_with_case(&self, other: &LocalPath, case_insensitive: bool) -> bool {
        self.platform.is_windows() == other.platform.is_windows()
            && roots_eq(&self.root, &other.root, case_insensitive)
            && self.parts.len() >= other.parts.len()
            && self
                .parts
                .iter()
                .zip(&other.parts)
                .all(|(a, b)| names_eq(a, b, case_insensitive))
    }

    fn from_parts(platform: Platform, root: Root, parts: Vec<String>) -> LocalPath {
        let sep = platform.separator();
        let mut text = match &root {
            Root::Slash => String::from("/"),
            Root::Drive(letter) => format!("{letter}:\\"),
            Root::Unc { server, share } => format!("\\\\{server}\\{share}\\"),
            Root::Device { marker } => format!("\\\\{marker}\\"),
        };
        for (i, part) in parts.iter().enumerate() {
            if i > 0 {
                text.push(sep);
            }
            text.push_str(part);
        }
        LocalPath {
            platform,
            root,
            parts,
            text,
        }
    }
}

/// Compares two file names, optionally ignoring case (Unicode simple lowercase).
pub fn names_eq(a: &str, b: &str, case_insensitive: bool) -> bool {
    if !case_insensitive {
        return a == b;
    }
    if a.is_ascii() && b.is_ascii() {
        return a.eq_ignore_ascii_case(b);
    }
    a.chars()
        .flat_map(char::to_lowercase)
        .eq(b.chars().flat_map(char::to_lowercase))
}

fn roots_eq(a: &Root, b: &Root, ci: bool) -> bool {
    match (a, b) {
        (Root::Slash, Root::Slash) => true,
        (Root::Drive(x), Root::Drive(y)) => x.eq_ignore_ascii_case(y),
        (
            Root::Unc {
                server: s1,
                share: h1,
            },
            Root::Unc {
                server: s2,
                share: h2,
            },
        ) => names_eq(s1, s2, ci) && names_eq(h1, h2, ci),
        (Root::Device { marker: m1 }, Root::Device { marker: m2 }) => m1 == m2,
        (Root::Slash | Root::Drive(_) | Root::Unc { .. } | Root::Device { .. }, _) => false,
    }
}

impl fmt::Display for LocalPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Serialize for LocalPath {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

/// Deserializes with the rules of [`Platform::native`]: a stored path is always one of
/// this machine's.
impl<'de> Deserialize<'de> for LocalPath {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        LocalPath::parse(Platform::native(), &text)
            .map_err(|r| serde::de::Error::custom(format!("{}: {}", r.code, r.message)))
    }
}

fn not_absolute(input: &str, hint: &str) -> Refusal {
    Refusal::new(
        ErrorCode::PathNotAbsolute,
        format!("{} is not an absolute path", q(input)),
        hint,
    )
}

/// Pushes one raw component, applying `.` and `..`.
fn push_component(parts: &mut Vec<String>, raw: &str) {
    match raw {
        "" | "." => {}
        ".." => {
            parts.pop();
        }
        name => parts.push(name.to_owned()),
    }
}

fn parse_posix(platform: Platform, input: &str) -> Result<LocalPath, Refusal> {
    if !input.starts_with('/') {
        let hint = if input.starts_with('~') {
            "write the home directory out in full, e.g. /home/you/code/app"
        } else {
            "give the full path from the root, e.g. /home/you/code/app"
        };
        return Err(not_absolute(input, hint));
    }
    let mut parts = Vec::new();
    for raw in input.split('/') {
        push_component(&mut parts, raw);
    }
    Ok(LocalPath::from_parts(platform, Root::Slash, parts))
}

const WINDOWS_RESERVED: [&str; 22] = [
    "CON", "PRN", "AUX", "NUL", "COM1", "COM2", "COM3", "COM4", "COM5", "COM6", "COM7", "COM8",
    "COM9", "LPT1", "LPT2", "LPT3", "LPT4", "LPT5", "LPT6", "LPT7", "LPT8", "LPT9",
];

fn check_windows_name(input: &str, name: &str) -> Result<(), Refusal> {
    if let Some(bad) = name
        .chars()
        .find(|c| matches!(c, '<' | '>' | ':' | '"' | '|' | '?' | '*') || (*c as u32) < 32)
    {
        return Err(Refusal::new(
            ErrorCode::PathInvalid,
            format!(
                "{} contains {}, which Windows does not allow in a name",
                q(input),
                QuotedChar(bad)
            ),
            "remove the character from the path",
        ));
    }
    let stem = name.split('.').next().unwrap_or(name).trim_end();
    if WINDOWS_RESERVED
        .iter()
        .any(|r| r.eq_ignore_ascii_case(stem))
    {
        return Err(Refusal::new(
            ErrorCode::PathInvalid,
            format!(
                "{} uses {}, a reserved device name on Windows",
                q(input),
                q(name)
            ),
            "rename that component",
        ));
    }
    Ok(())
}

fn parse_windows(platform: Platform, input: &str) -> Result<LocalPath, Refusal> {
    let is_sep = |c: char| c == '\\' || c == '/';
    let chars: Vec<char> = input.chars().take(4).collect();
    let (root, rest): (Root, &str) = if chars.len() >= 2 && is_sep(chars[0]) && is_sep(chars[1]) {
        // `\\?\…`, `\\.\…` (device) or `\\server\share\…` (UNC).
        let after = &input[2..];
        let marker = after.chars().next();
        let marker_sep = after.chars().nth(1).is_some_and(is_sep);
        match marker {
            Some(m @ ('?' | '.')) if marker_sep => (Root::Device { marker: m }, &after[2..]),
            _ => {
                let mut it = after.splitn(3, is_sep);
                let server = it.next().unwrap_or("");
                let share = it.next().unwrap_or("");
                if server.is_empty() || share.is_empty() {
                    return Err(Refusal::new(
                        ErrorCode::PathInvalid,
                        format!("{} is a UNC path without a server and share", q(input)),
                        "write a UNC path as \\\\server\\share\\folder",
                    ));
                }
                check_windows_name(input, server)?;
                check_windows_name(input, share)?;
                (
                    Root::Unc {
                        server: server.to_owned(),
                        share: share.to_owned(),
                    },
                    it.next().unwrap_or(""),
                )
            }
        }
    } else if chars.len() >= 2 && chars[0].is_ascii_alphabetic() && chars[1] == ':' {
        if chars.len() >= 3 && is_sep(chars[2]) {
            (Root::Drive(chars[0].to_ascii_uppercase()), &input[3..])
        } else {
            return Err(not_absolute(
                input,
                "a drive letter without a separator is relative to that drive's current directory; write C:\\folder",
            ));
        }
    } else if chars.first().copied().is_some_and(is_sep) {
        return Err(not_absolute(
            input,
            "a path starting with \\ is relative to the current drive; add the drive letter, e.g. C:\\folder",
        ));
    } else {
        return Err(not_absolute(
            input,
            "give the full path with its drive letter, e.g. C:\\Users\\you\\code\\app",
        ));
    };
    let device = matches!(root, Root::Device { .. });
    let mut parts = Vec::new();
    for raw in rest.split(is_sep) {
        // Device paths are taken verbatim by Windows, but Berth refuses them whole, so a
        // lexical normalization of their tail is harmless.
        if !device && raw != "." && raw != ".." {
            check_windows_name(input, raw)?;
        }
        push_component(&mut parts, raw);
    }
    Ok(LocalPath::from_parts(platform, root, parts))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(p: Platform, s: &str) -> String {
        LocalPath::parse(p, s)
            .map(|l| l.as_str().to_owned())
            .unwrap()
    }
    fn code(p: Platform, s: &str) -> ErrorCode {
        LocalPath::parse(p, s).unwrap_err().code
    }

    #[test]
    fn posix_normalization() {
        let cases = [
            ("/", "/"),
            ("//", "/"),
            ("/a/b/", "/a/b"),
            ("/a/./b", "/a/b"),
            ("/a/../b", "/b"),
            ("/../../etc", "/etc"),
            ("/a//b///c", "/a/b/c"),
            ("/a/b/..", "/a"),
            ("/a b/ü", "/a b/ü"),
        ];
        for (input, want) in cases {
            assert_eq!(ok(Platform::Linux, input), want, "{input}");
        }
    }

    #[test]
    fn windows_normalization() {
        let cases = [
            ("C:\\", "C:\\"),
            ("c:/Users/x", "C:\\Users\\x"),
            ("C:\\a\\..\\..\\b", "C:\\b"),
            ("\\\\srv\\share\\x\\..\\y", "\\\\srv\\share\\y"),
            ("\\\\?\\C:\\x", "\\\\?\\C:\\x"),
            ("\\\\.\\PhysicalDrive0", "\\\\.\\PhysicalDrive0"),
        ];
        for (input, want) in cases {
            assert_eq!(ok(Platform::Windows, input), want, "{input}");
        }
    }

    #[test]
    fn lexical_refusals() {
        let long = format!("/{}", "a".repeat(MAX_PATH_BYTES));
        let cases = [
            (Platform::Linux, "", ErrorCode::PathEmpty),
            (Platform::Linux, "code/app", ErrorCode::PathNotAbsolute),
            (Platform::Linux, "~/code", ErrorCode::PathNotAbsolute),
            (Platform::Linux, "/a\0b", ErrorCode::PathInvalid),
            (Platform::Linux, long.as_str(), ErrorCode::PathInvalid),
            (Platform::Windows, "C:foo", ErrorCode::PathNotAbsolute),
            (Platform::Windows, "\\foo", ErrorCode::PathNotAbsolute),
            (Platform::Windows, "foo", ErrorCode::PathNotAbsolute),
            (Platform::Windows, "C:\\a|b", ErrorCode::PathInvalid),
            (
                Platform::Windows,
                "C:\\code\\con.txt",
                ErrorCode::PathInvalid,
            ),
            (Platform::Windows, "\\\\server", ErrorCode::PathInvalid),
        ];
        for (p, input, want) in cases {
            assert_eq!(code(p, input), want, "{input:?}");
        }
    }

    #[test]
    fn tilde_expands_only_with_a_home() {
        let home = LocalPath::parse(Platform::Linux, "/home/alice").unwrap();
        let p = LocalPath::parse_with_home(Platform::Linux, "~/code", Some(&home)).unwrap();
        assert_eq!(p.as_str(), "/home/alice/code");
        let p = LocalPath::parse_with_home(Platform::Linux, "~", Some(&home)).unwrap();
        assert_eq!(p.as_str(), "/home/alice");
        let err = LocalPath::parse_with_home(Platform::Linux, "~bob/x", Some(&home)).unwrap_err();
        assert_eq!(err.code, ErrorCode::PathNotAbsolute);
        let err = LocalPath::parse_with_home(Platform::Linux, "~/x", None).unwrap_err();
        assert_eq!(err.code, ErrorCode::PathNotAbsolute);
    }

    #[test]
    fn starts_with_respects_case_rules() {
        let a = LocalPath::parse(Platform::Macos, "/Users/Al/Code").unwrap();
        let b = LocalPath::parse(Platform::Macos, "/users/al").unwrap();
        assert!(a.starts_with(&b));
        let a = LocalPath::parse(Platform::Linux, "/Users/Al/Code").unwrap();
        let b = LocalPath::parse(Platform::Linux, "/users/al").unwrap();
        assert!(!a.starts_with(&b));
        assert!(a.starts_with_case(&b, true));
        let c = LocalPath::parse(Platform::Linux, "/Users/Alx").unwrap();
        assert!(!c.starts_with(&LocalPath::parse(Platform::Linux, "/Users/Al").unwrap()));
    }

    #[test]
    fn join_is_parse_of_the_joined_text() {
        for base in ["/", "/srv", "/home/u/a b"] {
            let base = LocalPath::parse(Platform::Linux, base).unwrap();
            for name in [
                "x",
                ".x",
                "...",
                "a b",
                "é",
                "back\\slash",
                "x.",
                &"n".repeat(255),
            ] {
                let joined = base.join(name).unwrap();
                let parsed = LocalPath::parse(
                    Platform::Linux,
                    &format!("{}/{name}", base.as_str().trim_end_matches('/')),
                )
                .unwrap();
                assert_eq!(joined, parsed, "{base:?} + {name:?}");
            }
            for bad in ["", ".", "..", "a/b", "/", "x\0y"] {
                assert!(base.join(bad).is_err(), "{base:?} + {bad:?}");
            }
        }
        let long = LocalPath::parse(Platform::Linux, &format!("/{}", "d".repeat(4090))).unwrap();
        assert_eq!(
            long.join("toolong").unwrap_err().code,
            ErrorCode::PathInvalid
        );
    }

    #[test]
    fn join_accepts_one_name_only() {
        let base = LocalPath::parse(Platform::Linux, "/srv").unwrap();
        assert_eq!(base.join("x").unwrap().as_str(), "/srv/x");
        assert_eq!(base.join("..").unwrap_err().code, ErrorCode::PathInvalid);
        assert_eq!(base.join("a/b").unwrap_err().code, ErrorCode::PathInvalid);
        let root = LocalPath::parse(Platform::Linux, "/").unwrap();
        assert_eq!(root.join("tmp").unwrap().as_str(), "/tmp");
    }
}
