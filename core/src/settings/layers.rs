//! Which files hold the settings layers. Pure: the executor reads what these name.

use crate::code::Refusal;
use crate::path::LocalPath;

/// The name of a settings file, in the config directory and in a project's `.berth`.
pub const SETTINGS_FILE: &str = "settings.jsonc";

/// The folder of a project that holds its settings file.
pub const PROJECT_DIR: &str = ".berth";

/// The user layer's file: `settings.jsonc` in `config_dir`.
///
/// Fails only if the joined path would exceed the path length limit.
pub fn user_layer_file(config_dir: &LocalPath) -> Result<LocalPath, Refusal> {
    config_dir.join(SETTINGS_FILE)
}

/// The files that may hold the project layer, nearest first: `.berth/settings.jsonc` in
/// `bound_dir` and in each ancestor. The executor reads the first that exists.
///
/// The walk stops below `home` when `bound_dir` is at or under it, so the home
/// directory's own `.berth/settings.jsonc` never counts as a project layer (the user
/// layer is the user's; it must not apply twice), and a bound home directory has no
/// project layer. Outside home the walk stops below the file-system root: a `.berth` at
/// the root belongs to no project. A candidate whose name would exceed the path length
/// limit is left out, since no file can be opened by that name.
pub fn project_layer_candidates(bound_dir: &LocalPath, home: Option<&LocalPath>) -> Vec<LocalPath> {
    let stop_depth = match home {
        Some(home) if bound_dir.starts_with(home) => home.parts().len(),
        Some(_) | None => 0,
    };
    let mut out = Vec::new();
    let mut dir = Some(bound_dir.clone());
    while let Some(current) = dir {
        if current.parts().len() <= stop_depth {
            break;
        }
        if let Ok(file) = current
            .join(PROJECT_DIR)
            .and_then(|berth| berth.join(SETTINGS_FILE))
        {
            out.push(file);
        }
        dir = current.parent();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::Platform;

    fn lp(platform: Platform, s: &str) -> LocalPath {
        LocalPath::parse(platform, s).unwrap()
    }

    fn candidates(platform: Platform, bound: &str, home: Option<&str>) -> Vec<String> {
        let home = home.map(|h| lp(platform, h));
        project_layer_candidates(&lp(platform, bound), home.as_ref())
            .into_iter()
            .map(|p| p.as_str().to_owned())
            .collect()
    }

    #[test]
    fn candidates_stop_below_home_and_root() {
        let linux = Platform::Linux;
        let home = Some("/home/u");
        let cases: [(&str, Option<&str>, &[&str]); 7] = [
            (
                "/home/u/code/app",
                home,
                &[
                    "/home/u/code/app/.berth/settings.jsonc",
                    "/home/u/code/.berth/settings.jsonc",
                ],
            ),
            (
                "/home/u/code",
                home,
                &["/home/u/code/.berth/settings.jsonc"],
            ),
            ("/home/u", home, &[]),
            (
                "/srv/work/app",
                home,
                &[
                    "/srv/work/app/.berth/settings.jsonc",
                    "/srv/work/.berth/settings.jsonc",
                    "/srv/.berth/settings.jsonc",
                ],
            ),
            ("/home", home, &["/home/.berth/settings.jsonc"]),
            ("/", home, &[]),
            (
                "/srv/app",
                None,
                &[
                    "/srv/app/.berth/settings.jsonc",
                    "/srv/.berth/settings.jsonc",
                ],
            ),
        ];
        for (bound, home, want) in cases {
            assert_eq!(candidates(linux, bound, home), want, "{bound} {home:?}");
        }
    }

    #[test]
    fn candidates_follow_the_platform_case_rule() {
        assert_eq!(
            candidates(Platform::Windows, "c:\\users\\U\\app", Some("C:\\Users\\u")),
            ["C:\\users\\U\\app\\.berth\\settings.jsonc"]
        );
        assert_eq!(
            candidates(Platform::Linux, "/Home/u/app", Some("/home/u")),
            [
                "/Home/u/app/.berth/settings.jsonc",
                "/Home/u/.berth/settings.jsonc",
                "/Home/.berth/settings.jsonc"
            ]
        );
    }

    #[test]
    fn candidates_too_long_to_name_are_left_out() {
        let deep = format!("/{}", "a".repeat(4085));
        assert_eq!(
            candidates(Platform::Linux, &deep, None),
            Vec::<String>::new()
        );
    }

    #[test]
    fn user_layer_file_is_in_the_config_dir() {
        let dir = lp(Platform::Linux, "/home/u/.config/berth");
        assert_eq!(
            user_layer_file(&dir).map(|p| p.as_str().to_owned()),
            Ok("/home/u/.config/berth/settings.jsonc".to_owned())
        );
    }
}
