//! The fence: what an agent may touch while it runs, as data.
//!
//! Every agent Berth starts is untrusted while it runs (docs/architecture.md,
//! "The trust model"). The kernel confines it — Landlock and seccomp on Linux, Seatbelt on macOS —
//! from one [`FencePolicy`], built here without I/O so that every surface (the
//! executor, the server, the browser) describes the same fence the same way. The
//! executor's `fence` module turns the policy into kernel objects.
//!
//! The policy is allow-only for writes and deny-listed for reads:
//!
//! - writes: the run's directory (unless the run is read-only), the task's temporary
//!   directory, the agent kind's own state, and the user settings' extra paths;
//! - reads: everything except the credential locations ([`credential_patterns`]: the
//!   refusal table's credential rows, narrowed where the table refuses a whole folder
//!   agents legitimately read, plus the fence's own table of histories, browser and
//!   mail profiles, keyrings and credential files, [`HIDDEN`]), Berth's home and lock
//!   directory, and the settings' `read_deny`. In the strict read mode
//!   ([`ReadScope::Directory`]) "everything" is only the run's directory, what the agent
//!   may write, the system's directories ([`SYSTEM_LINUX`], [`SYSTEM_MACOS`]), the
//!   toolchains under the home ([`TOOLCHAINS`]) and the settings' `fence.read` paths —
//!   with the same holes beneath each;
//! - protected inside the run's directory ([`PROTECT_IN_DIR`]): `.git/hooks`,
//!   `.git/config` and `.berth`. The kernel's allow-only rules cannot carve them out of
//!   a writable directory; the executor guards them by other means (see its module).

use crate::code::ErrorCode;
use crate::context::Context;
use crate::display::display;
use crate::path::LocalPath;
use crate::platform::Platform;
use crate::policy::Permissions;
use crate::rules::{Anchor, Extent, Family, RULES};
use serde::{Deserialize, Serialize};
use std::fmt;

mod reads;
mod roots;
pub use reads::{HIDDEN, Hidden, HiddenKind};
pub use roots::{SYSTEM_LINUX, SYSTEM_MACOS, TOOLCHAINS};

/// Whether a run must be fenced: the settings' `"fence": {"mode": …}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FenceMode {
    /// Fence where the kernel can; elsewhere run unfenced and say so visibly.
    #[default]
    Auto,
    /// Refuse to run where the kernel cannot fence.
    Required,
    /// Never fence.
    Off,
}

impl FenceMode {
    /// Every mode, in the order settings document them.
    pub const ALL: [FenceMode; 3] = [FenceMode::Auto, FenceMode::Required, FenceMode::Off];

    /// The mode as written in settings and JSON.
    pub const fn as_str(self) -> &'static str {
        match self {
            FenceMode::Auto => "auto",
            FenceMode::Required => "required",
            FenceMode::Off => "off",
        }
    }

    /// Parses the spelling of [`FenceMode::as_str`].
    pub fn from_name(name: &str) -> Option<FenceMode> {
        FenceMode::ALL.into_iter().find(|m| m.as_str() == name)
    }
}

impl fmt::Display for FenceMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether a fenced agent may open network sockets (unix sockets and socket pairs
/// always work).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Network {
    #[default]
    On,
    Off,
}

impl Network {
    /// Both settings.
    pub const ALL: [Network; 2] = [Network::On, Network::Off];

    /// The setting as written in settings and JSON.
    pub const fn as_str(self) -> &'static str {
        match self {
            Network::On => "on",
            Network::Off => "off",
        }
    }

    /// Parses the spelling of [`Network::as_str`].
    pub fn from_name(name: &str) -> Option<Network> {
        Network::ALL.into_iter().find(|n| n.as_str() == name)
    }
}

impl fmt::Display for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a fenced agent may read: the settings' `"fence": {"read": …}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReadScope {
    /// Everything but the hidden locations (the default).
    #[default]
    Everywhere,
    /// Only the run's directory, the system's directories, the agent's own state, the
    /// toolchains and the settings' extra paths: no other project of the user's.
    Directory,
}

impl ReadScope {
    /// Both scopes.
    pub const ALL: [ReadScope; 2] = [ReadScope::Everywhere, ReadScope::Directory];

    /// The scope as written in settings and JSON.
    pub const fn as_str(self) -> &'static str {
        match self {
            ReadScope::Everywhere => "everywhere",
            ReadScope::Directory => "directory",
        }
    }

    /// Parses the spelling of [`ReadScope::as_str`].
    pub fn from_name(name: &str) -> Option<ReadScope> {
        ReadScope::ALL.into_iter().find(|r| r.as_str() == name)
    }
}

impl fmt::Display for ReadScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a policy lets the agent read, besides what it may write (a write rule reads
/// too), minus the hidden locations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reads {
    /// Everything ([`ReadScope::Everywhere`]).
    Everywhere,
    /// Only what lies beneath these paths ([`ReadScope::Directory`]): the run's
    /// directory first, then the system's directories, the toolchains, the settings'
    /// paths, each once and in that order. Paths that do not exist are kept: the
    /// executor skips them.
    Only(Vec<LocalPath>),
}

/// What a write rule covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteKind {
    /// The directory and everything beneath it, every right (create, remove, rename).
    Subtree,
    /// One existing file: its content may be rewritten, nothing beside it created
    /// (e.g. Claude Code's `~/.claude.json`).
    File,
}

/// A credential location under the user's home, as components.
pub type Pattern = &'static [&'static str];

/// Rows of the refusal table that the fence narrows instead of hiding whole: agents
/// legitimately read `~/.config` (git, npm, gh's non-secret settings…) and macOS's
/// `~/Library` (caches), so only their credential subfolders ([`HIDDEN`]) are hidden.
pub const NARROWED: &[Pattern] = &[&[".config"], &["Library"]];

/// The names inside the run's directory an agent must never change: git runs hooks
/// and reads `core.*` settings Berth's own git calls would obey, and `.berth` holds the
/// project's settings.
pub const PROTECT_IN_DIR: &[Pattern] = &[&[".git", "hooks"], &[".git", "config"], &[".berth"]];

/// Every credential location the fence hides, relative to the home, for paths of
/// `family`: the refusal table's home-anchored credential subtrees except the
/// [`NARROWED`] ones, then every row of [`HIDDEN`] (histories, browser and mail
/// profiles, keyrings, credential files). Derived from both tables, so a row added to
/// either is hidden here too.
pub fn credential_patterns(family: Family) -> Vec<Pattern> {
    let mut out: Vec<Pattern> = RULES
        .iter()
        .filter(|r| {
            r.family == family
                && r.anchor == Anchor::Home
                && r.extent == Extent::Subtree
                && r.code == ErrorCode::CredentialDirectory
                && !NARROWED.contains(&r.pattern)
        })
        .map(|r| r.pattern)
        .collect();
    out.extend(HIDDEN.iter().map(|h| h.pattern));
    out
}

/// `base` followed by `parts`; `None` only if a part is not a single file name (the
/// patterns above never are that).
fn under(base: &LocalPath, parts: &[&str]) -> Option<LocalPath> {
    parts
        .iter()
        .try_fold(base.clone(), |p, part| p.join(part).ok())
}

/// What the fence of one run is built from.
#[derive(Debug, Clone, Copy)]
pub struct FenceInputs<'a> {
    /// The run's directory: the bound directory in place, or the worktree.
    pub dir: &'a LocalPath,
    /// The run's policy: `read-only` leaves [`FenceInputs::dir`] unwritable.
    pub permissions: Permissions,
    /// The task's own temporary directory (`TMPDIR`).
    pub tmp: &'a LocalPath,
    /// Berth's home (its database, sockets, `serve.json`): never readable.
    pub berth_home: &'a LocalPath,
    /// Berth's lock directory: never readable.
    pub lock_dir: &'a LocalPath,
    /// The user's home; `None` hides no credential location (none can be named).
    pub home: Option<&'a LocalPath>,
    /// The agent kind's own state (`~/.claude/`, `~/.claude.json`, `~/.codex/`), from its
    /// adapter.
    pub state: &'a [(LocalPath, WriteKind)],
    /// The user settings' `fence.write`: extra writable subtrees.
    pub write: &'a [LocalPath],
    /// The settings' `fence.read_deny`: extra hidden locations.
    pub read_deny: &'a [LocalPath],
    /// The settings' `fence.read`: everywhere, or the strict mode.
    pub read: ReadScope,
    /// The strict mode's extra readable paths (the user settings' `fence.read` list,
    /// and the executor's own: a worktree's main repository). Unused when reading
    /// everywhere.
    pub read_allow: &'a [LocalPath],
    pub network: Network,
}

/// The fence of one run: every path is absolute; nothing here has been checked
/// against the file system.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FencePolicy {
    /// The run's directory (also the first entry of `write` unless read-only).
    pub dir: LocalPath,
    /// The task's temporary directory (also in `write`).
    pub tmp: LocalPath,
    /// Where the agent may write, and how.
    pub write: Vec<(LocalPath, WriteKind)>,
    /// What the agent may read (besides `write`), before the holes of `read_deny`.
    pub reads: Reads,
    /// What the agent may not read, with everything beneath it.
    pub read_deny: Vec<LocalPath>,
    /// What inside the run's directory must stay as it was.
    pub protect: Vec<LocalPath>,
    pub network: Network,
    /// Settings' write paths left out because they overlap a hidden location (writing
    /// there would also let the agent read it), for the run's event.
    pub ignored_write: Vec<LocalPath>,
    /// Strict-mode read paths left out because they are or lie inside a hidden
    /// location, for the run's event.
    pub ignored_read: Vec<LocalPath>,
}

impl FencePolicy {
    /// The fence of one run, from its inputs (pure: no path is touched).
    ///
    /// Guarantees: `write` never holds a settings path that is, contains or lies inside
    /// a hidden location; entries are unique and in input order (directory, tmp, the
    /// kind's state, settings).
    pub fn new(inputs: &FenceInputs<'_>) -> FencePolicy {
        let mut read_deny: Vec<LocalPath> = Vec::new();
        let mut push_deny = |p: LocalPath| {
            if !read_deny.contains(&p) {
                read_deny.push(p);
            }
        };
        if let Some(home) = inputs.home {
            let family = if home.platform().is_windows() {
                Family::Windows
            } else {
                Family::Posix
            };
            credential_patterns(family)
                .into_iter()
                .filter_map(|pat| under(home, pat))
                .for_each(&mut push_deny);
        }
        push_deny(inputs.berth_home.clone());
        push_deny(inputs.lock_dir.clone());
        inputs.read_deny.iter().cloned().for_each(&mut push_deny);

        let mut write: Vec<(LocalPath, WriteKind)> = Vec::new();
        let mut push_write = |p: &LocalPath, kind: WriteKind| {
            if !write.iter().any(|(w, _)| w == p) {
                write.push((p.clone(), kind));
            }
        };
        if inputs.permissions != Permissions::ReadOnly {
            push_write(inputs.dir, WriteKind::Subtree);
        }
        push_write(inputs.tmp, WriteKind::Subtree);
        for (p, kind) in inputs.state {
            push_write(p, *kind);
        }
        let mut ignored_write = Vec::new();
        for p in inputs.write {
            let overlaps = read_deny
                .iter()
                .any(|d| p.starts_with(d) || d.starts_with(p));
            if overlaps {
                ignored_write.push(p.clone());
            } else {
                push_write(p, WriteKind::Subtree);
            }
        }

        let inside_hidden = |p: &LocalPath| read_deny.iter().any(|d| p.starts_with(d));
        let mut ignored_read = Vec::new();
        let reads = match inputs.read {
            ReadScope::Everywhere => Reads::Everywhere,
            ReadScope::Directory => {
                let mut roots: Vec<LocalPath> = vec![inputs.dir.clone()];
                let mut push_root = |p: LocalPath| {
                    if !roots.contains(&p) {
                        roots.push(p);
                    }
                };
                let system: &[&str] = match inputs.dir.platform() {
                    Platform::Linux => SYSTEM_LINUX,
                    Platform::Macos => SYSTEM_MACOS,
                    Platform::Windows => &[],
                };
                system
                    .iter()
                    .filter_map(|s| LocalPath::parse(inputs.dir.platform(), s).ok())
                    .for_each(&mut push_root);
                if let Some(home) = inputs.home {
                    TOOLCHAINS
                        .iter()
                        .filter_map(|pat| under(home, pat))
                        .filter(|p| !inside_hidden(p))
                        .for_each(&mut push_root);
                }
                for p in inputs.read_allow {
                    if inside_hidden(p) {
                        ignored_read.push(p.clone());
                    } else {
                        push_root(p.clone());
                    }
                }
                Reads::Only(roots)
            }
        };

        let protect = PROTECT_IN_DIR
            .iter()
            .filter_map(|pat| under(inputs.dir, pat))
            .collect();
        FencePolicy {
            dir: inputs.dir.clone(),
            tmp: inputs.tmp.clone(),
            write,
            reads,
            read_deny,
            protect,
            network: inputs.network,
            ignored_write,
            ignored_read,
        }
    }

    /// The read scope the policy was made in.
    pub fn read_scope(&self) -> ReadScope {
        match self.reads {
            Reads::Everywhere => ReadScope::Everywhere,
            Reads::Only(_) => ReadScope::Directory,
        }
    }

    /// Whether the agent may write the run's directory.
    pub fn dir_writable(&self) -> bool {
        self.write.iter().any(|(p, _)| *p == self.dir)
    }

    /// One line for humans, privacy-stripped by core's display rule, e.g.
    /// `~/code/app + tmp + ~/.claude · network off`; the strict read mode adds
    /// ` · reads: directory` (the default, reading everywhere, adds nothing).
    pub fn describe(&self, ctx: &Context) -> String {
        let mut out = display(ctx, &self.dir);
        if !self.dir_writable() {
            out.push_str(" read-only");
        }
        out.push_str(" + tmp");
        for (p, _) in &self.write {
            if *p != self.dir && *p != self.tmp {
                out.push_str(" + ");
                out.push_str(&display(ctx, p));
            }
        }
        out.push_str(" · network ");
        out.push_str(self.network.as_str());
        if self.read_scope() == ReadScope::Directory {
            out.push_str(" · reads: directory");
        }
        out
    }
}

#[cfg(test)]
mod tests;
