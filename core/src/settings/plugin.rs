//! Plugin paths and ids: resolving what a settings file wrote into an absolute path, and
//! the name a plugin is known by.
//!
//! Resolution is lexical: core cannot look at the disk, so a plugin's kind is judged
//! from its name (`*.md` is a prompt fragment, anything else a skill folder) and the
//! executor finds out whether it exists.

use super::PluginKind;
use crate::code::ErrorCode;
use crate::path::LocalPath;
use crate::quote::{QuotedChar, q};

/// The longest plugin id accepted, in characters.
const MAX_ID_CHARS: usize = 128;

/// Where a plugin path points, and the id it gives when none is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Located {
    pub path: LocalPath,
    pub kind: PluginKind,
    /// The file stem of a `*.md` fragment or the skill folder's name; `None` when the
    /// path is a root.
    pub name: Option<String>,
}

/// Resolves `raw` against `dir` (the directory holding the declaring file) on
/// `dir.platform()`. Absolute paths are taken as they are; `~` is refused rather than
/// guessed, because the file's reader may not be the user whose home it means.
pub(super) fn locate(dir: &LocalPath, raw: &str) -> Result<Located, String> {
    if raw.is_empty() {
        return Err("the plugin path is empty; give a path to a .md file or a skill folder".into());
    }
    let platform = dir.platform();
    if raw == "~" || raw.starts_with("~/") || (platform.is_windows() && raw.starts_with("~\\")) {
        return Err(format!(
            "the plugin path {} starts with \"~\", which settings do not expand; \
             write it in full or relative to {dir}",
            q(raw)
        ));
    }
    let path = match LocalPath::parse(platform, raw) {
        Ok(path) => path,
        Err(refusal) if refusal.code == ErrorCode::PathNotAbsolute => {
            if platform.is_windows() && is_windows_rooted(raw) {
                return Err(format!("{}; {}", refusal.message, refusal.hint));
            }
            let sep = platform.separator();
            LocalPath::parse(platform, &format!("{dir}{sep}{raw}"))
                .map_err(|r| format!("the plugin path {} is not usable: {}", q(raw), r.message))?
        }
        Err(refusal) => {
            return Err(format!(
                "the plugin path {} is not usable: {}",
                q(raw),
                refusal.message
            ));
        }
    };
    Ok(classify(path))
}

/// A Windows path that is relative to a drive or a drive's current directory (`\x`,
/// `C:x`): joining it to a directory would silently change its meaning.
fn is_windows_rooted(raw: &str) -> bool {
    let mut chars = raw.chars();
    let first = chars.next();
    let second = chars.next();
    matches!(first, Some('\\' | '/')) || second == Some(':')
}

fn classify(path: LocalPath) -> Located {
    let Some(name) = path.file_name().map(str::to_owned) else {
        return Located {
            path,
            kind: PluginKind::Skill,
            name: None,
        };
    };
    if name.eq_ignore_ascii_case("SKILL.md") {
        // A path to the skill's own `SKILL.md` means the folder holding it.
        if let Some(folder) = path.parent() {
            let name = folder.file_name().map(str::to_owned);
            return Located {
                path: folder,
                kind: PluginKind::Skill,
                name,
            };
        }
    }
    let md = name.len() > 3
        && name
            .get(name.len() - 3..)
            .is_some_and(|ext| ext.eq_ignore_ascii_case(".md"));
    if md {
        let stem = name[..name.len() - 3].to_owned();
        Located {
            path,
            kind: PluginKind::Prompt,
            name: Some(stem),
        }
    } else {
        Located {
            path,
            kind: PluginKind::Skill,
            name: Some(name),
        }
    }
}

/// Checks that `id` can never act as a path: the executor uses it to name a folder.
pub(super) fn check_id(id: &str) -> Result<(), String> {
    if id.is_empty() {
        return Err("the plugin id is empty".into());
    }
    if id == "." || id == ".." {
        return Err(format!("the plugin id {} is not a name", q(id)));
    }
    if let Some(bad) = id
        .chars()
        .find(|c| matches!(c, '/' | '\\' | ':') || (*c as u32) < 0x20 || *c == '\u{7f}')
    {
        return Err(format!(
            "the plugin id {} contains {}; use letters, digits, '-', '_' or '.'",
            q(id),
            QuotedChar(bad)
        ));
    }
    if id.chars().count() > MAX_ID_CHARS {
        return Err(format!(
            "the plugin id is longer than {MAX_ID_CHARS} characters"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::Platform;

    fn lp(platform: Platform, s: &str) -> LocalPath {
        LocalPath::parse(platform, s).unwrap()
    }

    fn located(platform: Platform, path: &str, kind: PluginKind, name: &str) -> Located {
        Located {
            path: lp(platform, path),
            kind,
            name: Some(name.to_owned()),
        }
    }

    #[test]
    fn resolves_against_the_declaring_directory() {
        let linux = Platform::Linux;
        let dir = lp(linux, "/p/app/.berth");
        let cases = [
            (
                "../shared/x.md",
                located(linux, "/p/app/shared/x.md", PluginKind::Prompt, "x"),
            ),
            (
                "review.md",
                located(
                    linux,
                    "/p/app/.berth/review.md",
                    PluginKind::Prompt,
                    "review",
                ),
            ),
            (
                "skills/deploy",
                located(
                    linux,
                    "/p/app/.berth/skills/deploy",
                    PluginKind::Skill,
                    "deploy",
                ),
            ),
            (
                "skills/deploy/SKILL.md",
                located(
                    linux,
                    "/p/app/.berth/skills/deploy",
                    PluginKind::Skill,
                    "deploy",
                ),
            ),
            (
                "/opt/berth/Lint.MD",
                located(linux, "/opt/berth/Lint.MD", PluginKind::Prompt, "Lint"),
            ),
            (
                "../../../../../x.md",
                located(linux, "/x.md", PluginKind::Prompt, "x"),
            ),
        ];
        for (raw, want) in cases {
            assert_eq!(locate(&dir, raw), Ok(want), "{raw}");
        }
    }

    #[test]
    fn resolves_windows_paths() {
        let win = Platform::Windows;
        let dir = lp(win, "C:\\p\\app\\.berth");
        assert_eq!(
            locate(&dir, "..\\shared/x.md"),
            Ok(located(
                win,
                "C:\\p\\app\\shared\\x.md",
                PluginKind::Prompt,
                "x"
            ))
        );
        assert_eq!(
            locate(&dir, "D:\\skills\\deploy"),
            Ok(located(
                win,
                "D:\\skills\\deploy",
                PluginKind::Skill,
                "deploy"
            ))
        );
    }

    #[test]
    fn a_root_has_no_name() {
        let dir = lp(Platform::Linux, "/p");
        assert_eq!(
            locate(&dir, ".."),
            Ok(Located {
                path: lp(Platform::Linux, "/"),
                kind: PluginKind::Skill,
                name: None,
            })
        );
    }

    #[test]
    fn refuses_paths_that_would_change_meaning() {
        let linux = lp(Platform::Linux, "/p/app/.berth");
        let win = lp(Platform::Windows, "C:\\p\\.berth");
        let cases = [
            (
                &linux,
                "",
                "the plugin path is empty; give a path to a .md file or a skill folder",
            ),
            (
                &linux,
                "~/x.md",
                "the plugin path \"~/x.md\" starts with \"~\", which settings do not expand; \
                 write it in full or relative to /p/app/.berth",
            ),
            (
                &linux,
                "a\0b",
                "the plugin path \"a\\u{0}b\" is not usable: the path \"a\\u{0}b\" contains a NUL byte",
            ),
            (
                &win,
                "\\x.md",
                "\"\\x.md\" is not an absolute path; a path starting with \\ is relative to \
                 the current drive; add the drive letter, e.g. C:\\folder",
            ),
            (
                &win,
                "C:x.md",
                "\"C:x.md\" is not an absolute path; a drive letter without a separator is \
                 relative to that drive's current directory; write C:\\folder",
            ),
            (
                &win,
                "a|b.md",
                "the plugin path \"a|b.md\" is not usable: \"C:\\p\\.berth\\a|b.md\" \
                 contains '|', which Windows does not allow in a name",
            ),
        ];
        for (dir, raw, want) in cases {
            assert_eq!(locate(dir, raw), Err(want.to_owned()), "{raw:?}");
        }
    }

    #[test]
    fn ids_are_single_names() {
        assert_eq!(check_id("review"), Ok(()));
        assert_eq!(check_id("my.review-2_x"), Ok(()));
        assert_eq!(check_id(""), Err("the plugin id is empty".to_owned()));
        assert_eq!(
            check_id(".."),
            Err("the plugin id \"..\" is not a name".to_owned())
        );
        assert_eq!(
            check_id("a/b"),
            Err(
                "the plugin id \"a/b\" contains '/'; use letters, digits, '-', '_' or '.'"
                    .to_owned()
            )
        );
        assert_eq!(
            check_id(&"x".repeat(129)),
            Err("the plugin id is longer than 128 characters".to_owned())
        );
    }
}
