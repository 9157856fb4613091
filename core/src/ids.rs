//! The ids of Berth's domain objects: sessions, tasks and machines, each its own type.
//!
//! An id is parsed once, where it comes in (an HTTP path or body, a CLI argument, a
//! daemon's request, a database row), and carried typed from there on: a [`SessionId`]
//! cannot be passed where a [`TaskId`] is wanted, and every id held is one that may
//! name a file or a directory (a session's scratch directory, a task's journal) as a
//! single plain component. In JSON each is a plain string.
//!
//! What Berth generates fits the rule: sessions and tasks are uuid strings, machines a
//! uuid (a daemon's) or a short name (`local`, the embedded executor's). A user's
//! *prefix* of an id (`berth session show 3f9c`) is not an id: it stays a string until
//! the store resolves it to one.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The longest id accepted, in bytes.
pub const MAX_ID_LEN: usize = 128;

/// Which kind of id a value was meant to be, for [`IdError`]'s message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IdKind {
    Session,
    Task,
    Machine,
}

impl IdKind {
    pub const fn as_str(self) -> &'static str {
        match self {
            IdKind::Session => "session",
            IdKind::Task => "task",
            IdKind::Machine => "machine",
        }
    }
}

impl fmt::Display for IdKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a value is not an id of its kind: the rule it breaks, with the value (cut short
/// when too long to show).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("a {kind} id cannot be empty")]
    Empty { kind: IdKind },
    #[error("the {kind} id {shown:?}… is {len} bytes long; an id has at most {MAX_ID_LEN}")]
    TooLong {
        kind: IdKind,
        /// The id's first characters.
        shown: String,
        len: usize,
    },
    #[error(
        "the {kind} id {id:?} holds {found:?}; an id is ASCII letters, digits, '-' and '_' only"
    )]
    Character {
        kind: IdKind,
        id: String,
        found: char,
    },
}

impl IdError {
    /// The kind of id the value was meant to be.
    pub const fn kind(&self) -> IdKind {
        match self {
            IdError::Empty { kind }
            | IdError::TooLong { kind, .. }
            | IdError::Character { kind, .. } => *kind,
        }
    }
}

/// Checks `id` against the rule every id follows: 1 to [`MAX_ID_LEN`] bytes of ASCII
/// letters, digits, `-` and `_`.
fn check(kind: IdKind, id: &str) -> Result<(), IdError> {
    if id.is_empty() {
        return Err(IdError::Empty { kind });
    }
    if id.len() > MAX_ID_LEN {
        return Err(IdError::TooLong {
            kind,
            shown: id.chars().take(16).collect(),
            len: id.len(),
        });
    }
    match id
        .chars()
        .find(|&c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_')))
    {
        Some(found) => Err(IdError::Character {
            kind,
            id: id.to_owned(),
            found,
        }),
        None => Ok(()),
    }
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $kind:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            /// Which kind of id this is.
            pub const KIND: IdKind = $kind;

            /// Parses an id, refusing what breaks the rule (see the module's notes).
            pub fn parse(id: &str) -> Result<$name, IdError> {
                check($kind, id)?;
                Ok($name(id.to_owned()))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// An id the browser bundle was given, taken as it is: there it is a label
            /// in a preview (the bundle names no file and runs nothing), and checking it
            /// would cost the bundle's size budget, as the fence's values would
            /// (`settings::parse` skips those there too). Only in the wasm build.
            #[cfg(target_arch = "wasm32")]
            pub fn label(id: String) -> $name {
                $name(id)
            }

            /// The id's text, given up.
            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl TryFrom<String> for $name {
            type Error = IdError;
            fn try_from(id: String) -> Result<$name, IdError> {
                check($kind, &id)?;
                Ok($name(id))
            }
        }

        impl TryFrom<&str> for $name {
            type Error = IdError;
            fn try_from(id: &str) -> Result<$name, IdError> {
                $name::parse(id)
            }
        }

        impl std::str::FromStr for $name {
            type Err = IdError;
            fn from_str(id: &str) -> Result<$name, IdError> {
                $name::parse(id)
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        /// An id is one plain path component (a scratch directory, a journal's name).
        impl AsRef<std::path::Path> for $name {
            fn as_ref(&self) -> &std::path::Path {
                std::path::Path::new(&self.0)
            }
        }

        /// An id is a valid environment value (`BERTH_SESSION_ID`, `BERTH_TASK_ID`).
        impl AsRef<std::ffi::OsStr> for $name {
            fn as_ref(&self) -> &std::ffi::OsStr {
                std::ffi::OsStr::new(&self.0)
            }
        }

        /// Hashes and compares as its text, so maps keyed by the id look up by `&str`.
        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                &self.0 == other
            }
        }
    };
}

id_type!(
    /// A session's id (a uuid string, made by the store).
    SessionId,
    IdKind::Session
);

id_type!(
    /// A task's id (a uuid string, made by the store).
    TaskId,
    IdKind::Task
);

id_type!(
    /// A machine that runs tasks: the local executor of `berth serve` or a remote
    /// daemon (a uuid the daemon keeps in its home).
    MachineId,
    IdKind::Machine
);

impl MachineId {
    /// The embedded executor's machine, `berth serve`'s own: `local`.
    pub fn local() -> MachineId {
        MachineId("local".to_owned())
    }
}

/// A member of a team server, by name: a session's owner, a caller, whose sessions a
/// list is scoped to. A name is checked where it comes in (`berth-server member add`);
/// one read back from the store is taken as stored. In JSON a plain string.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Member(String);

impl Member {
    pub fn new(name: impl Into<String>) -> Member {
        Member(name.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<&str> for Member {
    fn from(name: &str) -> Member {
        Member::new(name)
    }
}

impl From<String> for Member {
    fn from(name: String) -> Member {
        Member(name)
    }
}

impl std::ops::Deref for Member {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Member {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_berth_generates_parses() {
        for id in [
            "0192f3a1-7c2e-4d10-9a4b-5c6d7e8f9a0b",
            "m-1",
            "local",
            "laptop-0198c2",
            "task-7",
            "t1",
            "A_b-9",
            &"x".repeat(MAX_ID_LEN),
        ] {
            assert_eq!(
                SessionId::parse(id).map(|s| s.to_string()),
                Ok(id.to_owned())
            );
            assert_eq!(TaskId::parse(id).map(|s| s.to_string()), Ok(id.to_owned()));
            assert_eq!(
                MachineId::parse(id).map(|s| s.to_string()),
                Ok(id.to_owned())
            );
        }
    }

    #[test]
    fn each_rule_is_refused_with_the_kind_named() {
        assert_eq!(
            SessionId::parse(""),
            Err(IdError::Empty {
                kind: IdKind::Session
            })
        );
        assert_eq!(
            TaskId::parse(&"a".repeat(MAX_ID_LEN + 1)),
            Err(IdError::TooLong {
                kind: IdKind::Task,
                shown: "a".repeat(16),
                len: MAX_ID_LEN + 1,
            })
        );
        assert_eq!(
            MachineId::parse("../evil"),
            Err(IdError::Character {
                kind: IdKind::Machine,
                id: "../evil".into(),
                found: '.',
            })
        );
        for bad in ["a/b", "a b", "a.b", "é", "a\n", "a\0"] {
            assert!(SessionId::parse(bad).is_err(), "{bad:?}");
        }
        let e = SessionId::parse("a/b").unwrap_err();
        assert_eq!(
            e.to_string(),
            "the session id \"a/b\" holds '/'; an id is ASCII letters, digits, '-' and '_' only"
        );
        assert_eq!(e.kind(), IdKind::Session);
    }

    #[test]
    fn json_is_a_plain_string_and_is_checked() {
        let id = TaskId::parse("t-1").unwrap();
        assert_eq!(serde_json::to_string(&id).unwrap(), "\"t-1\"");
        assert_eq!(serde_json::from_str::<TaskId>("\"t-1\"").unwrap(), id);
        let err = serde_json::from_str::<TaskId>("\"t/1\"").unwrap_err();
        assert!(err.to_string().contains("task id"), "{err}");
    }

    #[test]
    fn looks_up_by_text() {
        let mut map = std::collections::HashMap::new();
        map.insert(SessionId::parse("s1").unwrap(), 1);
        assert_eq!(map.get("s1"), Some(&1));
        assert!(SessionId::parse("s1").unwrap() == "s1");
    }
}
