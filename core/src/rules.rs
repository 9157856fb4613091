//! The refusal table: which paths Berth never binds, and why.
//!
//! The table is data ([`RULES`]), written once; the CLI, the server, the native
//! validator and the browser all evaluate it through [`check`]. Names are compared
//! without regard to case on every platform: a refusal is a safety rule, and refusing
//! `/ETC` on a case-sensitive Linux costs nothing while accepting `/Etc` on macOS would
//! bind `/etc`.

use crate::code::{ErrorCode, Refusal};
use crate::context::Context;
use crate::display::display;
use crate::path::{LocalPath, Root, names_eq};

/// Which path syntax a rule applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Posix,
    Windows,
}

/// Where a rule's pattern starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Anchor {
    /// POSIX `/`.
    Root,
    /// Any Windows drive, `X:\`.
    AnyDrive,
    /// The user's home directory (rule skipped when the home is unknown).
    Home,
}

/// Whether a rule refuses only the named directory or everything beneath it too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extent {
    Exact,
    Subtree,
}

/// One row of the refusal table. A pattern component ending in `*` matches any name
/// with that prefix (`lib*` covers `/lib`, `/lib64`, `/libx32`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    pub family: Family,
    pub anchor: Anchor,
    pub pattern: &'static [&'static str],
    pub extent: Extent,
    pub code: ErrorCode,
    /// Completes "… is " / "… is inside X, ": names the rule for the user.
    pub what: &'static str,
}

const fn rule(
    family: Family,
    anchor: Anchor,
    pattern: &'static [&'static str],
    extent: Extent,
    code: ErrorCode,
    what: &'static str,
) -> Rule {
    Rule {
        family,
        anchor,
        pattern,
        extent,
        code,
        what,
    }
}

use Anchor::{AnyDrive, Home, Root as Slash};
use ErrorCode::{CredentialDirectory, HomeDirectory, SystemRoot};
use Extent::{Exact, Subtree};
use Family::{Posix, Windows};

const SYSTEM: &str = "a system directory";
const CREDENTIALS: &str = "a directory of credentials and private settings";

/// The static refusal table, evaluated in order (first match wins). The rules that
/// depend on the running user — their home and its ancestors, Berth's own state — are
/// applied by [`check`] around this table.
#[rustfmt::skip]
pub const RULES: &[Rule] = &[
    // Exact refusals: roots and directories shared by everyone.
    rule(Posix, Slash, &[], Exact, SystemRoot, "the filesystem root"),
    rule(Posix, Slash, &["home"], Exact, HomeDirectory, "the directory holding every user's home"),
    rule(Posix, Slash, &["Users"], Exact, HomeDirectory, "the directory holding every user's home"),
    rule(Posix, Slash, &["Users", "Shared"], Exact, HomeDirectory, "the folder shared by every user"),
    rule(Posix, Slash, &["root"], Exact, HomeDirectory, "the superuser's home directory"),
    rule(Posix, Slash, &["tmp"], Exact, SystemRoot, "the shared temporary directory"),
    rule(Posix, Slash, &["private", "tmp"], Exact, SystemRoot, "the shared temporary directory"),
    rule(Posix, Slash, &["private"], Exact, SystemRoot, SYSTEM),
    rule(Posix, Slash, &["var"], Exact, SystemRoot, SYSTEM),
    rule(Posix, Slash, &["opt"], Exact, SystemRoot, SYSTEM),
    rule(Windows, AnyDrive, &[], Exact, SystemRoot, "a drive root"),
    rule(Windows, AnyDrive, &["Users"], Exact, HomeDirectory, "the folder holding every user's home"),
    rule(Windows, AnyDrive, &["Users", "Public"], Exact, HomeDirectory, "the folder shared by every user"),
    // Credentials under the home directory.
    rule(Posix, Home, &[".ssh"], Subtree, CredentialDirectory, CREDENTIALS),
    rule(Posix, Home, &[".gnupg"], Subtree, CredentialDirectory, CREDENTIALS),
    rule(Posix, Home, &[".aws"], Subtree, CredentialDirectory, CREDENTIALS),
    rule(Posix, Home, &[".azure"], Subtree, CredentialDirectory, CREDENTIALS),
    rule(Posix, Home, &[".kube"], Subtree, CredentialDirectory, CREDENTIALS),
    rule(Posix, Home, &[".docker"], Subtree, CredentialDirectory, CREDENTIALS),
    rule(Posix, Home, &[".config"], Subtree, CredentialDirectory, CREDENTIALS),
    rule(Posix, Home, &[".password-store"], Subtree, CredentialDirectory, CREDENTIALS),
    rule(Posix, Home, &[".local", "share", "keyrings"], Subtree, CredentialDirectory, CREDENTIALS),
    rule(Posix, Home, &["Library"], Subtree, CredentialDirectory, "the macOS per-user Library, which holds keychains and settings"),
    rule(Posix, Home, &[".Trash"], Subtree, CredentialDirectory, "the trash"),
    rule(Windows, Home, &[".ssh"], Subtree, CredentialDirectory, CREDENTIALS),
    rule(Windows, Home, &[".gnupg"], Subtree, CredentialDirectory, CREDENTIALS),
    rule(Windows, Home, &[".aws"], Subtree, CredentialDirectory, CREDENTIALS),
    rule(Windows, Home, &[".azure"], Subtree, CredentialDirectory, CREDENTIALS),
    rule(Windows, Home, &[".kube"], Subtree, CredentialDirectory, CREDENTIALS),
    rule(Windows, Home, &[".docker"], Subtree, CredentialDirectory, CREDENTIALS),
    rule(Windows, Home, &[".config"], Subtree, CredentialDirectory, CREDENTIALS),
    rule(Windows, Home, &["AppData"], Subtree, CredentialDirectory, "the per-user application data, which holds credentials and settings"),
    // System subtrees.
    rule(Posix, Slash, &["etc"], Subtree, SystemRoot, SYSTEM),
    rule(Posix, Slash, &["usr"], Subtree, SystemRoot, SYSTEM),
    rule(Posix, Slash, &["bin"], Subtree, SystemRoot, SYSTEM),
    rule(Posix, Slash, &["sbin"], Subtree, SystemRoot, SYSTEM),
    rule(Posix, Slash, &["lib*"], Subtree, SystemRoot, SYSTEM),
    rule(Posix, Slash, &["boot"], Subtree, SystemRoot, SYSTEM),
    rule(Posix, Slash, &["dev"], Subtree, SystemRoot, "the device directory"),
    rule(Posix, Slash, &["proc"], Subtree, SystemRoot, "the process file system"),
    rule(Posix, Slash, &["sys"], Subtree, SystemRoot, "the kernel's file system"),
    rule(Posix, Slash, &["run"], Subtree, SystemRoot, SYSTEM),
    rule(Posix, Slash, &["srv"], Subtree, SystemRoot, SYSTEM),
    rule(Posix, Slash, &["snap"], Subtree, SystemRoot, SYSTEM),
    rule(Posix, Slash, &["nix"], Subtree, SystemRoot, SYSTEM),
    rule(Posix, Slash, &["System"], Subtree, SystemRoot, SYSTEM),
    rule(Posix, Slash, &["Library"], Subtree, SystemRoot, SYSTEM),
    rule(Posix, Slash, &["Applications"], Subtree, SystemRoot, "the applications folder"),
    rule(Posix, Slash, &["private", "etc"], Subtree, SystemRoot, SYSTEM),
    rule(Posix, Slash, &["private", "var"], Subtree, SystemRoot, SYSTEM),
    rule(Windows, AnyDrive, &["Windows"], Subtree, SystemRoot, SYSTEM),
    rule(Windows, AnyDrive, &["Program Files*"], Subtree, SystemRoot, "the programs folder"),
    rule(Windows, AnyDrive, &["ProgramData"], Subtree, SystemRoot, SYSTEM),
];

fn pattern_eq(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => {
            name.len() >= prefix.len()
                && name.is_char_boundary(prefix.len())
                && names_eq(&name[..prefix.len()], prefix, true)
        }
        None => names_eq(pattern, name, true),
    }
}

/// How many of `path`'s components the rule's anchor covers, or `None` when the rule
/// does not apply. Allocation-free: it runs for every rule on every check.
fn anchor_of(rule: &Rule, path: &LocalPath, ctx: &Context) -> Option<usize> {
    let family = if path.platform().is_windows() {
        Family::Windows
    } else {
        Family::Posix
    };
    if rule.family != family {
        return None;
    }
    match (rule.anchor, path.root()) {
        (Anchor::Root, Root::Slash) | (Anchor::AnyDrive, Root::Drive(_)) => Some(0),
        (Anchor::Home, _) => {
            let home = ctx.home.as_ref()?;
            path.starts_with_case(home, true)
                .then(|| home.parts().len())
        }
        (Anchor::Root | Anchor::AnyDrive, _) => None,
    }
}

/// Whether `rule` refuses `path`; on a match returns the depth of the refused
/// directory (for an exact rule, the path itself; for a subtree, the subtree's top).
fn matches(rule: &Rule, path: &LocalPath, ctx: &Context) -> Option<usize> {
    let base = anchor_of(rule, path, ctx)?;
    let depth = base + rule.pattern.len();
    let parts = path.parts();
    let fits = match rule.extent {
        Extent::Exact => parts.len() == depth,
        Extent::Subtree => parts.len() >= depth,
    };
    (fits
        && parts[base..depth]
            .iter()
            .zip(rule.pattern)
            .all(|(name, pat)| pattern_eq(pat, name)))
    .then_some(depth)
}

fn prefix_of(path: &LocalPath, depth: usize) -> LocalPath {
    let mut p = path.clone();
    while p.parts().len() > depth {
        p = p.parent().unwrap_or(p);
    }
    p
}

/// The hints of the rules' own refusals; any other code gets the general one.
const HINTS: [(ErrorCode, &str); 4] = [
    (
        ErrorCode::SystemRoot,
        "bind a project directory of your own, e.g. ~/code/app",
    ),
    (
        ErrorCode::HomeDirectory,
        "bind one project directory, e.g. ~/code/app, not a directory that holds homes or your whole home",
    ),
    (
        ErrorCode::CredentialDirectory,
        "agents are kept away from credentials and settings; bind the project directory itself",
    ),
    (
        ErrorCode::BerthState,
        "Berth's own state is not a project; bind a directory outside Berth's home and config",
    ),
];

fn hint_for(code: ErrorCode) -> &'static str {
    HINTS
        .iter()
        .find(|(c, _)| *c == code)
        .map_or("choose another directory", |(_, hint)| hint)
}

fn refuse(
    ctx: &Context,
    path: &LocalPath,
    top: &LocalPath,
    code: ErrorCode,
    what: &str,
) -> Refusal {
    let shown = display(ctx, path);
    let message = if top == path {
        format!("{shown} is {what}")
    } else {
        format!("{shown} is inside {}, {what}", display(ctx, top))
    };
    Refusal::new(code, message, hint_for(code))
}

/// Applies the refusal table to a lexically valid path.
///
/// Order: device and network paths; the exact rules; the home directory itself;
/// Berth's own state; credential and system subtrees; ancestors of the home directory
/// and of Berth's state. The first rule that fires decides the code.
pub fn check(ctx: &Context, path: &LocalPath) -> Result<(), Refusal> {
    match path.root() {
        Root::Device { .. } => {
            return Err(refuse(ctx, path, path, SystemRoot, "a Windows device path"));
        }
        Root::Unc { .. } => {
            return Err(refuse(
                ctx,
                path,
                path,
                SystemRoot,
                "on a network share (a UNC path), which Berth cannot pin or lock",
            ));
        }
        Root::Slash | Root::Drive(_) => {}
    }
    let first = |extent: Extent| {
        RULES
            .iter()
            .filter(|r| r.extent == extent)
            .find_map(|r| matches(r, path, ctx).map(|depth| (r, depth)))
    };
    if let Some((r, _)) = first(Extent::Exact) {
        return Err(refuse(ctx, path, path, r.code, r.what));
    }
    let same =
        |a: &LocalPath, b: &LocalPath| a.starts_with_case(b, true) && b.starts_with_case(a, true);
    if let Some(home) = &ctx.home
        && same(path, home)
    {
        return Err(refuse(
            ctx,
            path,
            path,
            HomeDirectory,
            "your home directory",
        ));
    }
    if let Some(state) = ctx
        .berth_state
        .iter()
        .find(|s| path.starts_with_case(s, true))
    {
        return Err(refuse(
            ctx,
            path,
            state,
            ErrorCode::BerthState,
            "Berth's own state",
        ));
    }
    if let Some((r, depth)) = first(Extent::Subtree) {
        return Err(refuse(ctx, path, &prefix_of(path, depth), r.code, r.what));
    }
    if let Some(home) = &ctx.home
        && home.starts_with_case(path, true)
    {
        return Err(refuse(
            ctx,
            path,
            path,
            HomeDirectory,
            "an ancestor of your home directory",
        ));
    }
    if ctx
        .berth_state
        .iter()
        .any(|s| s.starts_with_case(path, true))
    {
        return Err(refuse(
            ctx,
            path,
            path,
            ErrorCode::BerthState,
            "an ancestor of Berth's own state",
        ));
    }
    Ok(())
}

/// Parses `input` (expanding a leading `~` against the context's home) and applies the
/// refusal table: the whole lexical verdict in one call.
pub fn check_str(ctx: &Context, input: &str) -> Result<LocalPath, Refusal> {
    let path = LocalPath::parse_with_home(ctx.platform, input, ctx.home.as_ref())?;
    check(ctx, &path)?;
    Ok(path)
}

#[cfg(test)]
mod tests;
