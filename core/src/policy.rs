//! What an agent may do where it runs: one policy for every kind of agent.
//!
//! Each agent CLI has its own controls (Claude Code's permission modes and tool
//! rules, Codex's sandbox); Berth speaks one vocabulary above them, so two kinds of
//! agent registered with the same policy may do the same things. The adapters map it
//! onto each CLI; where a CLI cannot honour it exactly, the adapter says so.

use serde::{Deserialize, Serialize};
use std::fmt;

/// An agent's permission policy, ordered from narrowest to widest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Permissions {
    /// Read and run nothing that changes files.
    ReadOnly,
    /// Read, and edit inside the working directory; everything else (commands,
    /// fetches, deletes, moves, changes outside) waits for a person's answer (see
    /// [`crate::approval`]). Narrower than `edit`: what it lets through unasked is a
    /// part of what `edit` lets through, so an untrusted project may narrow to it.
    Ask,
    /// Edit files in the working directory (the default: a bound session exists so the
    /// agent can change that directory).
    Edit,
    /// Everything the agent's CLI can do, shell commands included, without asking.
    Full,
}

impl Permissions {
    /// The policy of an agent registered without one, when the user settings name none.
    pub const DEFAULT: Permissions = Permissions::Edit;

    /// Every policy, narrowest first.
    pub const ALL: [Permissions; 4] = [
        Permissions::ReadOnly,
        Permissions::Ask,
        Permissions::Edit,
        Permissions::Full,
    ];

    /// The policy as written on the command line, in settings and in JSON.
    pub const fn as_str(self) -> &'static str {
        match self {
            Permissions::ReadOnly => "read-only",
            Permissions::Ask => "ask",
            Permissions::Edit => "edit",
            Permissions::Full => "full",
        }
    }

    /// Parses the spelling of [`Permissions::as_str`].
    pub fn from_name(name: &str) -> Option<Permissions> {
        Permissions::ALL.into_iter().find(|p| p.as_str() == name)
    }

    /// `self` narrowed by `limit`: never wider than either.
    pub fn narrowed(self, limit: Option<Permissions>) -> Permissions {
        limit.map_or(self, |l| self.min(l))
    }
}

impl fmt::Display for Permissions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where the policy of one run came from, for what Berth shows the user.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    /// What runs.
    pub effective: Permissions,
    /// What the agent (or the user settings' default) asked for.
    pub requested: Permissions,
    /// What an untrusted project layer asked for beyond `requested`, and did not get.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub widening_ignored: Option<Permissions>,
}

impl Policy {
    /// The policy of a run: the agent's own (else the user default, else
    /// [`Permissions::DEFAULT`]), then the project layer's. An untrusted project layer
    /// only narrows it; a trusted one sets it, wider or narrower.
    pub fn decide(
        agent: Option<Permissions>,
        user_default: Option<Permissions>,
        project: Option<Permissions>,
        project_trusted: bool,
    ) -> Policy {
        let requested = agent.or(user_default).unwrap_or(Permissions::DEFAULT);
        let effective = match project {
            Some(p) if project_trusted => p,
            Some(_) | None => requested.narrowed(project),
        };
        Policy {
            effective,
            requested,
            widening_ignored: project.filter(|p| !project_trusted && *p > requested),
        }
    }

    /// What runs, when the project layer narrowed the policy.
    pub fn narrowed_by_project(&self) -> Option<Permissions> {
        Some(self.effective).filter(|e| *e < self.requested)
    }

    /// What runs, when a trusted project layer widened the policy.
    pub fn widened_by_project(&self) -> Option<Permissions> {
        Some(self.effective).filter(|e| *e > self.requested)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Permissions::{Edit, Full, ReadOnly};

    #[test]
    fn spellings_round_trip() {
        for p in Permissions::ALL {
            assert_eq!(Permissions::from_name(p.as_str()), Some(p));
            assert_eq!(
                serde_json::to_value(p).unwrap(),
                serde_json::json!(p.as_str())
            );
        }
        assert_eq!(Permissions::from_name("write"), None);
    }

    #[test]
    fn a_project_layer_narrows_and_widens_only_when_trusted() {
        let table = [
            // (agent, user default, project, trusted) -> (effective, narrowed, widened, ignored)
            ((None, None, None, false), (Edit, None, None, None)),
            ((None, Some(Full), None, false), (Full, None, None, None)),
            (
                (Some(ReadOnly), Some(Full), None, false),
                (ReadOnly, None, None, None),
            ),
            (
                (Some(Edit), None, Some(Full), false),
                (Edit, None, None, Some(Full)),
            ),
            (
                (None, None, Some(Full), false),
                (Edit, None, None, Some(Full)),
            ),
            (
                (None, None, Some(Full), true),
                (Full, None, Some(Full), None),
            ),
            (
                (Some(ReadOnly), None, Some(Edit), true),
                (Edit, None, Some(Edit), None),
            ),
            (
                (Some(Full), None, Some(Edit), false),
                (Edit, Some(Edit), None, None),
            ),
            (
                (Some(Full), None, Some(Edit), true),
                (Edit, Some(Edit), None, None),
            ),
            (
                (None, None, Some(ReadOnly), false),
                (ReadOnly, Some(ReadOnly), None, None),
            ),
            (
                (Some(ReadOnly), None, Some(ReadOnly), false),
                (ReadOnly, None, None, None),
            ),
        ];
        for ((a, u, p, t), want) in table {
            let d = Policy::decide(a, u, p, t);
            assert_eq!(
                (
                    d.effective,
                    d.narrowed_by_project(),
                    d.widened_by_project(),
                    d.widening_ignored
                ),
                want,
                "{a:?} {u:?} {p:?} {t}"
            );
        }
    }
}
