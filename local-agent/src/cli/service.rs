//! `berth service install|uninstall|status`: `berth serve` started at login by the
//! desktop's own service manager (issue 38) — a systemd user unit on Linux, a launchd
//! agent on macOS — restarted when it fails, logging to the journal (or a log file).
//!
//! The unit runs this `berth serve` (the binary next to this one), with `--home` when
//! one was given. It names no secret: the server's token lives in its home, never on a
//! command line or in an environment the unit sets.

use super::ServiceCmd;
use super::error::CliError;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The unit's name (systemd) and the agent's label (launchd).
const UNIT: &str = "berth.service";
const LABEL: &str = "dev.berth.serve";

/// Which service manager a unit is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Manager {
    Systemd,
    Launchd,
}

impl Manager {
    /// This machine's.
    fn native() -> Manager {
        if cfg!(target_os = "macos") {
            Manager::Launchd
        } else {
            Manager::Systemd
        }
    }

    fn name(self) -> &'static str {
        match self {
            Manager::Systemd => "systemd",
            Manager::Launchd => "launchd",
        }
    }
}

/// The program the unit starts: the `berth` next to this binary (the lean front, which
/// runs `berth-full` for `serve`), else this binary itself.
fn program() -> Result<PathBuf, CliError> {
    let me = std::env::current_exe().map_err(|e| {
        CliError::new(
            format!("cannot tell where this berth is installed: {e}"),
            "run berth service install from an installed berth",
        )
    })?;
    let beside = me.with_file_name("berth");
    Ok(if beside.is_file() { beside } else { me })
}

/// The variables of this shell that choose where `berth serve` keeps its state and
/// reads its settings: paths, never secrets (tokens are read from the home).
const PATH_VARS: [&str; 2] = ["BERTH_CONFIG_DIR", "BERTH_LOCK_DIR"];

/// `PATH_VARS` set here, for the unit's environment.
fn path_env() -> Vec<(String, String)> {
    PATH_VARS
        .iter()
        .filter_map(|k| {
            let v = std::env::var(k).ok().filter(|v| !v.is_empty())?;
            Some(((*k).to_owned(), v))
        })
        .collect()
}

/// `berth serve`'s arguments in the unit: its home when one was chosen (`--home`, or
/// `BERTH_HOME` here), so the service serves the state this shell sees.
fn serve_args(home: Option<&Path>) -> Vec<String> {
    let home = home.map(Path::to_owned).or_else(|| {
        std::env::var_os("BERTH_HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from)
    });
    let home = home.as_deref();
    let mut args = vec!["serve".to_owned()];
    if let Some(h) = home {
        args.push("--home".to_owned());
        args.push(h.display().to_string());
    }
    args
}

/// One word of a systemd command line: quoted, with `\`, `"`, `%` and `$` escaped.
fn systemd_word(w: &str) -> String {
    let mut out = String::from("\"");
    for c in w.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '%' => out.push_str("%%"),
            '$' => out.push_str("$$"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The systemd user unit.
pub fn systemd_unit(program: &Path, args: &[String], env: &[(String, String)]) -> String {
    let exec: Vec<String> = std::iter::once(program.display().to_string())
        .chain(args.iter().cloned())
        .map(|w| systemd_word(&w))
        .collect();
    let env: String = env
        .iter()
        .map(|(k, v)| format!("Environment={}\n", systemd_word(&format!("{k}={v}"))))
        .collect();
    format!(
        "# Written by `berth service install`; `berth service uninstall` removes it.\n\
         [Unit]\n\
         Description=Berth: AI coding agents in your own directories (berth serve)\n\
         \n\
         [Service]\n\
         Type=simple\n\
         {env}\
         ExecStart={}\n\
         Restart=on-failure\n\
         RestartSec=2\n\
         # SIGTERM to berth serve alone first: it stops its agents and puts their\n\
         # directories back before it exits.\n\
         KillMode=mixed\n\
         TimeoutStopSec=30\n\
         \n\
         [Install]\n\
         WantedBy=default.target\n",
        exec.join(" ")
    )
}

fn xml(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The launchd agent's property list.
pub fn launchd_plist(
    program: &Path,
    args: &[String],
    env: &[(String, String)],
    log: &Path,
) -> String {
    let words: String = std::iter::once(program.display().to_string())
        .chain(args.iter().cloned())
        .map(|w| format!("    <string>{}</string>\n", xml(&w)))
        .collect();
    let env = if env.is_empty() {
        String::new()
    } else {
        let pairs: String = env
            .iter()
            .map(|(k, v)| {
                format!(
                    "    <key>{}</key>\n    <string>{}</string>\n",
                    xml(k),
                    xml(v)
                )
            })
            .collect();
        format!("  <key>EnvironmentVariables</key>\n  <dict>\n{pairs}  </dict>\n")
    };
    let log = xml(&log.display().to_string());
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <!DOCTYPE plist PUBLIC \"-//Apple//DTD PLIST 1.0//EN\" \"http://www.apple.com/DTDs/PropertyList-1.0.dtd\">\n\
         <!-- Written by `berth service install`; `berth service uninstall` removes it. -->\n\
         <plist version=\"1.0\">\n\
         <dict>\n\
         \x20 <key>Label</key>\n\
         \x20 <string>{LABEL}</string>\n\
         \x20 <key>ProgramArguments</key>\n\
         \x20 <array>\n\
         {words}\
         \x20 </array>\n\
         {env}\
         \x20 <key>RunAtLoad</key>\n\
         \x20 <true/>\n\
         \x20 <key>KeepAlive</key>\n\
         \x20 <dict>\n\
         \x20   <key>SuccessfulExit</key>\n\
         \x20   <false/>\n\
         \x20 </dict>\n\
         \x20 <key>ThrottleInterval</key>\n\
         \x20 <integer>5</integer>\n\
         \x20 <key>ExitTimeOut</key>\n\
         \x20 <integer>30</integer>\n\
         \x20 <key>StandardOutPath</key>\n\
         \x20 <string>{log}</string>\n\
         \x20 <key>StandardErrorPath</key>\n\
         \x20 <string>{log}</string>\n\
         </dict>\n\
         </plist>\n"
    )
}

fn home_dir() -> Result<PathBuf, CliError> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .ok_or_else(|| CliError::new("HOME is not set", "set HOME to your home directory"))
}

/// Where the unit file goes.
fn unit_file(manager: Manager) -> Result<PathBuf, CliError> {
    let home = home_dir()?;
    Ok(match manager {
        Manager::Systemd => std::env::var_os("XDG_CONFIG_HOME")
            .filter(|x| !x.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| home.join(".config"))
            .join("systemd/user")
            .join(UNIT),
        Manager::Launchd => home
            .join("Library/LaunchAgents")
            .join(format!("{LABEL}.plist")),
    })
}

/// Where the launchd agent logs.
fn launchd_log() -> Result<PathBuf, CliError> {
    Ok(home_dir()?.join("Library/Logs/Berth/serve.log"))
}

/// The unit's text for `manager`.
fn unit_text(manager: Manager, home: Option<&Path>) -> Result<String, CliError> {
    let program = program()?;
    let args = serve_args(home);
    let env = path_env();
    Ok(match manager {
        Manager::Systemd => systemd_unit(&program, &args, &env),
        Manager::Launchd => launchd_plist(&program, &args, &env, &launchd_log()?),
    })
}

/// Runs the service manager's command; its output, or why it failed.
fn manager_run(program: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if out.status.success() {
        Ok(text)
    } else {
        let err = String::from_utf8_lossy(&out.stderr).trim().to_owned();
        Err(format!(
            "`{program} {}` failed: {}",
            args.join(" "),
            if err.is_empty() { &text } else { &err }
        ))
    }
}

fn systemctl(args: &[&str]) -> Result<String, String> {
    let mut all = vec!["--user"];
    all.extend_from_slice(args);
    manager_run("systemctl", &all)
}

fn gui_domain() -> String {
    format!("gui/{}", rustix::process::getuid().as_raw())
}

/// Writes `text` to `file` whole (a temporary file renamed into place), 0644.
fn write_unit(file: &Path, text: &str) -> Result<(), CliError> {
    let failed = |e: std::io::Error| {
        CliError::new(
            format!("cannot write {}: {e}", file.display()),
            "check that the directory is yours and writable",
        )
    };
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir).map_err(failed)?;
    }
    let tmp = file.with_extension("berth-tmp");
    std::fs::write(&tmp, text).map_err(failed)?;
    std::fs::rename(&tmp, file).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        failed(e)
    })
}

pub fn run(home: Option<PathBuf>, cmd: ServiceCmd) -> Result<u8, CliError> {
    match cmd {
        ServiceCmd::Install {
            print,
            manager,
            json,
        } => {
            let manager = manager.unwrap_or_else(Manager::native);
            let text = unit_text(manager, home.as_deref())?;
            if print {
                if json {
                    println!(
                        "{}",
                        json!({"manager": manager.name(), "file": unit_file(manager)?, "unit": text})
                    );
                } else {
                    print!("{text}");
                }
                return Ok(0);
            }
            if manager != Manager::native() {
                return Err(CliError::usage(
                    format!(
                        "this machine runs {}, not {}",
                        Manager::native().name(),
                        manager.name()
                    ),
                    "--manager with --print shows another system's unit; install without it",
                ));
            }
            let file = unit_file(manager)?;
            install(manager, &file, &text)?;
            if json {
                println!(
                    "{}",
                    json!({"manager": manager.name(), "file": file, "installed": true})
                );
            } else {
                println!("installed {} ({})", file.display(), manager.name());
                println!("berth serve now starts at login, and again if it fails");
                match manager {
                    Manager::Systemd => println!("logs: journalctl --user -u berth"),
                    Manager::Launchd => println!("logs: {}", launchd_log()?.display()),
                }
            }
            Ok(0)
        }
        ServiceCmd::Uninstall { json } => {
            let manager = Manager::native();
            let file = unit_file(manager)?;
            let was = file.exists();
            uninstall(manager, &file)?;
            if json {
                println!(
                    "{}",
                    json!({"manager": manager.name(), "file": file, "removed": was})
                );
            } else if was {
                println!(
                    "removed {}: berth serve no longer starts at login",
                    file.display()
                );
            } else {
                println!("not installed ({} does not exist)", file.display());
            }
            Ok(0)
        }
        ServiceCmd::Status { json } => {
            let manager = Manager::native();
            let file = unit_file(manager)?;
            let installed = file.exists();
            let current = installed
                && std::fs::read_to_string(&file).ok() == unit_text(manager, home.as_deref()).ok();
            let (enabled, active) = if installed {
                state(manager)
            } else {
                (Some("not-installed".to_owned()), None)
            };
            if json {
                println!(
                    "{}",
                    json!({
                        "manager": manager.name(),
                        "file": file,
                        "installed": installed,
                        "current": current,
                        "enabled": enabled,
                        "active": active,
                    })
                );
            } else if !installed {
                println!("not installed: berth service install starts berth serve at login");
            } else {
                println!("unit      {}", file.display());
                println!(
                    "enabled   {}",
                    enabled
                        .as_deref()
                        .unwrap_or("unknown (the service manager did not answer)")
                );
                println!(
                    "running   {}",
                    active
                        .as_deref()
                        .unwrap_or("unknown (the service manager did not answer)")
                );
                if !current {
                    println!(
                        "note: the unit is not the one this berth writes (moved or updated since): berth service install rewrites it"
                    );
                }
            }
            Ok(0)
        }
    }
}

/// Whether the unit is enabled and running, as the manager says (`None`: it did not
/// answer).
fn state(manager: Manager) -> (Option<String>, Option<String>) {
    match manager {
        Manager::Systemd => {
            // Both answer with a word, and exit non-zero for "disabled"/"inactive".
            let word = |verb: &str| {
                Command::new("systemctl")
                    .args(["--user", verb, UNIT])
                    .output()
                    .ok()
                    .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
                    .filter(|w| !w.is_empty())
            };
            (word("is-enabled"), word("is-active"))
        }
        Manager::Launchd => {
            let target = format!("{}/{LABEL}", gui_domain());
            match manager_run("launchctl", &["print", &target]) {
                Ok(text) => {
                    let running = text.lines().any(|l| l.trim() == "state = running");
                    (
                        Some("loaded".to_owned()),
                        Some(if running { "running" } else { "not running" }.to_owned()),
                    )
                }
                Err(_) => (Some("not loaded".to_owned()), None),
            }
        }
    }
}

fn install(manager: Manager, file: &Path, text: &str) -> Result<(), CliError> {
    match manager {
        Manager::Systemd => {
            // The user's manager first: without one, nothing is written.
            systemctl(&["show-environment"]).map_err(|e| {
                CliError::new(
                    format!("systemd's user manager did not answer: {e}"),
                    "run it in your login session; on a machine you reach over ssh, `loginctl enable-linger $USER` keeps a user manager running",
                )
            })?;
            write_unit(file, text)?;
            let enabled = systemctl(&["daemon-reload"])
                .and_then(|_| systemctl(&["enable", "--now", UNIT]))
                .and_then(|_| systemctl(&["restart", UNIT]));
            enabled.map(|_| ()).map_err(|e| {
                CliError::new(
                    format!("{} is written, but it did not start: {e}", file.display()),
                    "journalctl --user -u berth says why; berth service uninstall removes it",
                )
            })
        }
        Manager::Launchd => {
            if let Ok(log) = launchd_log()
                && let Some(dir) = log.parent()
            {
                let _ = std::fs::create_dir_all(dir);
            }
            let domain = gui_domain();
            // A loaded agent is replaced: out first (it may not be loaded).
            let _ = manager_run("launchctl", &["bootout", &format!("{domain}/{LABEL}")]);
            write_unit(file, text)?;
            let path = file.display().to_string();
            manager_run("launchctl", &["bootstrap", &domain, &path])
                .map(|_| ())
                .map_err(|e| {
                    CliError::new(
                        format!(
                            "{} is written, but launchd did not load it: {e}",
                            file.display()
                        ),
                        "berth service uninstall removes it",
                    )
                })
        }
    }
}

fn uninstall(manager: Manager, file: &Path) -> Result<(), CliError> {
    match manager {
        Manager::Systemd => {
            if file.exists() {
                // Stopped and disabled when the manager answers; removed either way.
                let _ = systemctl(&["disable", "--now", UNIT]);
            }
        }
        Manager::Launchd => {
            let _ = manager_run(
                "launchctl",
                &["bootout", &format!("{}/{LABEL}", gui_domain())],
            );
        }
    }
    match std::fs::remove_file(file) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(CliError::new(
                format!("cannot remove {}: {e}", file.display()),
                "remove it by hand",
            ));
        }
    }
    if manager == Manager::Systemd {
        let _ = systemctl(&["daemon-reload"]);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_words_are_quoted_and_escaped() {
        assert_eq!(systemd_word("/usr/bin/berth"), "\"/usr/bin/berth\"");
        assert_eq!(
            systemd_word("/home/a b/100%$x\"\\"),
            "\"/home/a b/100%%$$x\\\"\\\\\""
        );
        let unit = systemd_unit(Path::new("/opt/my berth/berth"), &["serve".to_owned()], &[]);
        assert!(
            unit.contains("ExecStart=\"/opt/my berth/berth\" \"serve\"\n"),
            "{unit}"
        );
        let plist = launchd_plist(
            Path::new("/Apps/a&b/berth"),
            &serve_args(Some(Path::new("/x/<home>"))),
            &[],
            Path::new("/l.log"),
        );
        assert!(
            plist.contains("<string>/Apps/a&amp;b/berth</string>"),
            "{plist}"
        );
        assert!(
            plist.contains("<string>/x/&lt;home&gt;</string>"),
            "{plist}"
        );
    }
}
