//! The few values of the user's own git configuration that Berth's git honours, read
//! through the same walls as every other git step (`git config` runs nothing): the
//! global excludes file (so the change record ignores what the user's git ignores)
//! and the name and e-mail a worktree's commits are made with. Read again whenever one
//! of the global files changes.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The values, as `git config --global` gives them (with its includes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserGit {
    pub excludes_file: Option<PathBuf>,
    pub name: Option<String>,
    pub email: Option<String>,
}

/// The global files' stamps (path, modification time and size), to know when to read
/// again.
type Stamp = Vec<(PathBuf, Option<(std::time::SystemTime, u64)>)>;

fn stamp() -> Stamp {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let xdg = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| home.as_ref().map(|h| h.join(".config")));
    [
        home.map(|h| h.join(".gitconfig")),
        xdg.map(|x| x.join("git").join("config")),
    ]
    .into_iter()
    .flatten()
    .map(|p| {
        let md = std::fs::metadata(&p)
            .ok()
            .and_then(|m| Some((m.modified().ok()?, m.len())));
        (p, md)
    })
    .collect()
}

/// The user's values now (cached while the global files are unchanged).
pub fn user() -> UserGit {
    static CACHE: Mutex<Option<(Stamp, UserGit)>> = Mutex::new(None);
    let now = stamp();
    let mut cache = CACHE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((s, v)) = cache.as_ref()
        && *s == now
    {
        return v.clone();
    }
    let values = read();
    *cache = Some((now, values.clone()));
    values
}

fn read() -> UserGit {
    let mut c = super::command(super::Writes::Nothing);
    c.with_global_config().current_dir("/");
    let Ok(out) = super::run(
        c,
        [
            "config",
            "--global",
            "--includes",
            "--null",
            "--get-regexp",
            r"^(core\.excludesfile|user\.name|user\.email)$",
        ],
    ) else {
        return UserGit::default();
    };
    let mut v = UserGit::default();
    for entry in out.split(|b| *b == 0).filter(|e| !e.is_empty()) {
        let entry = String::from_utf8_lossy(entry);
        let (key, value) = entry.split_once('\n').unwrap_or((&entry, ""));
        match key {
            "core.excludesfile" => v.excludes_file = Some(expand(value)),
            "user.name" => v.name = Some(value.to_owned()),
            "user.email" => v.email = Some(value.to_owned()),
            _ => {}
        }
    }
    v
}

/// A leading `~/` as git expands it in a path value.
fn expand(value: &str) -> PathBuf {
    match (value.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => Path::new(&home).join(rest),
        _ => PathBuf::from(value),
    }
}
