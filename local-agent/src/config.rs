//! Where the native executor keeps its state and whom it protects.
//!
//! Everything the executor would otherwise read from the environment deep inside is
//! gathered here once, so tests (and the benchmarks) can run many executors side by
//! side in temporary directories, each with its own home, config, lock directory and
//! even its own idea of the user's home directory.

use berth_core::binding::MachineId;
use berth_core::{Context, LocalPath, Platform};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The grace period between SIGTERM and SIGKILL when a task is cancelled.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(3);

/// Briefs longer than this (bytes) cannot travel as one argument (Linux caps one
/// argument at 128 KiB) and go into a `CLAUDE.md` block instead.
pub const DEFAULT_BRIEF_ARG_LIMIT: usize = 96 * 1024;

/// Why the configuration could not be built from the environment.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(
        "cannot find the platform data directory for BERTH_HOME: {0}; set BERTH_HOME or pass --home"
    )]
    NoDataDir(String),
    #[error("{var} is set to {value:?}, which is not an absolute path")]
    NotAbsolute { var: &'static str, value: PathBuf },
}

/// The executor's explicit configuration.
#[derive(Debug, Clone)]
pub struct ExecutorConfig {
    /// `BERTH_HOME`: journals, worktrees, scratch directories.
    pub berth_home: PathBuf,
    /// The user settings directory (`BERTH_CONFIG_DIR`, default `~/.config/berth`).
    pub config_dir: PathBuf,
    /// The per-user lock directory, independent of `berth_home` (`BERTH_LOCK_DIR`).
    pub lock_dir: PathBuf,
    /// The user's home directory, as the refusal table and the display see it; also the
    /// agent's `HOME`.
    pub user_home: Option<PathBuf>,
    /// The account name kept out of every display.
    pub user_name: Option<String>,
    /// SIGTERM-to-SIGKILL grace period on cancel.
    pub grace: Duration,
    /// Briefs longer than this go into a marker block of `CLAUDE.md` for `claude`
    /// instead of `--append-system-prompt`. Tests set 0 to exercise the file path.
    pub brief_arg_limit: usize,
    pub machine_id: MachineId,
    pub machine_name: String,
}

impl ExecutorConfig {
    /// Reads the real environment: `home` (from `--home`) or `BERTH_HOME`, else the
    /// platform data dir; `BERTH_CONFIG_DIR`; `BERTH_LOCK_DIR`, else
    /// `$XDG_RUNTIME_DIR/berth-locks`, else `/tmp/berth-locks-<uid>`; `HOME`; the
    /// passwd name of the running uid (else `USER`).
    pub fn from_env(home: Option<PathBuf>) -> Result<ExecutorConfig, ConfigError> {
        let Dirs {
            user_home,
            berth_home,
            config_dir,
            lock_dir,
        } = Dirs::from_env(home)?;
        let uid = rustix::process::getuid().as_raw();
        let user_name = passwd_name(uid).or_else(|| std::env::var("USER").ok());
        Ok(ExecutorConfig {
            berth_home,
            config_dir,
            lock_dir,
            user_home,
            user_name,
            grace: DEFAULT_GRACE,
            brief_arg_limit: DEFAULT_BRIEF_ARG_LIMIT,
            machine_id: MachineId::local(),
            machine_name: hostname().unwrap_or_else(|| "this machine".to_owned()),
        })
    }

    /// A configuration rooted in `base`, for tests and benchmarks: Berth's home,
    /// config and lock directories under it, and `user_home` as the user's home.
    pub fn isolated(base: &Path, user_home: Option<PathBuf>) -> ExecutorConfig {
        ExecutorConfig {
            berth_home: base.join("berth-home"),
            config_dir: base.join("berth-config"),
            lock_dir: base.join("berth-locks"),
            user_home,
            user_name: None,
            grace: DEFAULT_GRACE,
            brief_arg_limit: DEFAULT_BRIEF_ARG_LIMIT,
            machine_id: MachineId::local(),
            machine_name: "test machine".to_owned(),
        }
    }

    /// The rules' view of this user: native platform, home, name, and Berth's own
    /// directories (home, config, locks), which are never bindable.
    pub fn context(&self) -> Context {
        let platform = Platform::native();
        let mut ctx = Context::new(platform);
        if let Some(home) = self.user_home.as_deref().and_then(local) {
            ctx = ctx.with_home(home);
        }
        if let Some(name) = &self.user_name {
            ctx = ctx.with_user(name.clone());
        }
        for dir in [&self.berth_home, &self.config_dir, &self.lock_dir] {
            if let Some(p) = local(dir) {
                ctx = ctx.with_berth_state(p);
            }
        }
        ctx
    }

    /// `$BERTH_HOME/journal`.
    pub fn journal_dir(&self) -> PathBuf {
        self.berth_home.join("journal")
    }

    /// Where the process group of every running agent is recorded.
    pub fn agents_dir(&self) -> PathBuf {
        self.berth_home.join("run").join("agents")
    }
}

/// A native path as a [`LocalPath`], if it is valid UTF-8 and absolute.
pub fn local(p: &Path) -> Option<LocalPath> {
    LocalPath::parse(Platform::native(), p.to_str()?).ok()
}

/// The account name of `uid` from `/etc/passwd`.
fn passwd_name(uid: u32) -> Option<String> {
    let text = std::fs::read_to_string("/etc/passwd").ok()?;
    text.lines().find_map(|line| {
        let mut f = line.split(':');
        let name = f.next()?;
        let _pw = f.next()?;
        (f.next()?.parse::<u32>().ok()? == uid).then(|| name.to_owned())
    })
}

/// The host name (`uname`'s node name: `gethostname` on both Linux and macOS).
fn hostname() -> Option<String> {
    let uname = rustix::system::uname();
    let h = uname.nodename().to_string_lossy();
    let h = h.trim();
    (!h.is_empty()).then(|| h.to_owned())
}

/// The directories [`ExecutorConfig::from_env`] reads from the environment, with the
/// same checks and errors, and nothing that costs more than reading a variable (no
/// password database, no host name): what the lean `berth` client needs to find the
/// control socket ([`home_from_env`]).
#[derive(Debug)]
struct Dirs {
    user_home: Option<PathBuf>,
    berth_home: PathBuf,
    config_dir: PathBuf,
    lock_dir: PathBuf,
}

impl Dirs {
    fn from_env(home: Option<PathBuf>) -> Result<Dirs, ConfigError> {
        let var = |name: &'static str| -> Result<Option<PathBuf>, ConfigError> {
            match std::env::var_os(name).filter(|v| !v.is_empty()) {
                None => Ok(None),
                Some(v) => {
                    let p = PathBuf::from(v);
                    if p.is_absolute() {
                        Ok(Some(p))
                    } else {
                        Err(ConfigError::NotAbsolute {
                            var: name,
                            value: p,
                        })
                    }
                }
            }
        };
        let user_home = var("HOME")?;
        let berth_home = match home.or(var("BERTH_HOME")?) {
            Some(h) => h,
            None => match native_data_dir(user_home.as_deref()) {
                Some(d) => d,
                None => etcetera::choose_base_strategy()
                    .map(|s| etcetera::BaseStrategy::data_dir(&s).join("berth"))
                    .map_err(|e| ConfigError::NoDataDir(e.to_string()))?,
            },
        };
        let config_dir = match var("BERTH_CONFIG_DIR")? {
            Some(d) => d,
            None => etcetera::choose_base_strategy()
                .map(|s| etcetera::BaseStrategy::config_dir(&s).join("berth"))
                .map_err(|e| ConfigError::NoDataDir(e.to_string()))?,
        };
        // The default lock directory's variables are read (and refused) only when
        // BERTH_LOCK_DIR does not name one.
        let lock_dir = match var("BERTH_LOCK_DIR")? {
            Some(d) => d,
            None => default_lock_dir(
                cfg!(target_os = "macos"),
                var("XDG_RUNTIME_DIR")?,
                var("TMPDIR")?,
                rustix::process::getuid().as_raw(),
            ),
        };
        Ok(Dirs {
            user_home,
            berth_home,
            config_dir,
            lock_dir,
        })
    }
}

/// Berth's home as [`ExecutorConfig::from_env`] finds it, refusing what it refuses
/// (a relative `HOME`, `BERTH_HOME`, … is an error there too), without reading the
/// password database or the host name.
pub fn home_from_env(home: Option<PathBuf>) -> Result<PathBuf, ConfigError> {
    Dirs::from_env(home).map(|d| d.berth_home)
}

/// macOS: Berth's state in `~/Library/Application Support/berth`, as Mac apps keep
/// theirs. Elsewhere `None`: the XDG data directory (`~/.local/share/berth`).
fn native_data_dir(home: Option<&Path>) -> Option<PathBuf> {
    if !cfg!(target_os = "macos") {
        return None;
    }
    Some(home?.join("Library/Application Support/berth"))
}

/// The per-user lock directory when `BERTH_LOCK_DIR` is unset. Linux:
/// `$XDG_RUNTIME_DIR/berth-locks`, else `/tmp/berth-locks-<uid>`. macOS has no
/// `XDG_RUNTIME_DIR`; its `$TMPDIR` is already per user (`/var/folders/…`, mode 0700).
fn default_lock_dir(
    macos: bool,
    xdg_runtime: Option<PathBuf>,
    tmpdir: Option<PathBuf>,
    uid: u32,
) -> PathBuf {
    match (macos, xdg_runtime, tmpdir) {
        (false, Some(run), _) => run.join("berth-locks"),
        (true, _, Some(tmp)) => tmp.join("berth-locks"),
        (false, None, _) | (true, _, None) => PathBuf::from(format!("/tmp/berth-locks-{uid}")),
    }
}

#[cfg(test)]
mod platform_tests {
    use super::*;

    #[test]
    fn lock_directories_follow_each_platforms_convention() {
        let run = Some(PathBuf::from("/run/user/501"));
        let tmp = Some(PathBuf::from("/var/folders/x7/abc/T"));
        assert_eq!(
            default_lock_dir(false, run.clone(), tmp.clone(), 501),
            PathBuf::from("/run/user/501/berth-locks")
        );
        assert_eq!(
            default_lock_dir(false, None, tmp.clone(), 501),
            PathBuf::from("/tmp/berth-locks-501")
        );
        assert_eq!(
            default_lock_dir(true, run, tmp, 501),
            PathBuf::from("/var/folders/x7/abc/T/berth-locks")
        );
        assert_eq!(
            default_lock_dir(true, None, None, 501),
            PathBuf::from("/tmp/berth-locks-501")
        );
    }
}
