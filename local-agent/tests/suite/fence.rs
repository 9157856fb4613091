//! The fence, proved with real processes: an escape battery run through Berth's real
//! spawn path (`process::spawn_fenced`: the clone path, or the fork path with
//! `BERTH_SPAWN_FORK=1`, which scripts/test.sh runs too) against a fake world — a home
//! with credentials, a Berth home, a project `~/code/app` (a git repository) beside
//! `~/code/other`.
//!
//! Every escape is also run *without* the fence and must succeed there: the battery
//! proves the fence, not file permissions or a missing tool.
//!
//! **As a non-root user.** The tests run as root here (and in CI), and root hides
//! mistakes that depend on permissions. So the battery runs twice: as root, and as
//! `nobody` (65534): a copy of this test binary is started as that user (`setpriv`,
//! outside any fence) and runs the battery there, so the world, `fence::prepare`, the
//! spawn and every fence step are a non-root Berth's. (The fence of a root Berth takes
//! every capability from the agent, so the agent could not drop to `nobody` itself.)
//! The control runs `setpriv … -- sh -c …` unfenced. When not root, the battery runs as
//! the current user only.
//!
//! A kernel without Landlock fails these tests loudly, unless
//! `BERTH_FENCE_TESTS_SKIP=1` says that is expected.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// Test code: a panic is a failed test.
// Each test holds `serial()` throughout, awaits included: every async test has its own
// runtime on its own thread, so one waiting for it blocks nothing else.
// Landlock and seccomp are Linux's; the Mac's fence is a Seatbelt profile, tested as text.
#![cfg(target_os = "linux")]

use crate::common;
use berth_core::fence::{FenceInputs, FencePolicy, Network, ReadScope, WriteKind};
use berth_core::{LocalPath, Permissions, Platform};
use berth_local_agent::agent::adapter::Invocation;
use berth_local_agent::agent::fence::{self, Prepared};
use berth_local_agent::agent::groups::Watcher;
use berth_local_agent::agent::process;
use berth_test_support::TempDir;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use tokio::io::AsyncReadExt;

const NOBODY: u32 = 65534;
const SECRET: &str = "SECRET-KEY-MATERIAL";

/// Whether the fence can be tested here: fails loudly on a kernel without it, unless
/// `BERTH_FENCE_TESTS_SKIP=1`.
fn fence_available() -> bool {
    let probe = fence::probe();
    if probe.available() {
        return true;
    }
    let msg = format!(
        "THE FENCE IS UNAVAILABLE ON THIS KERNEL ({probe:?}): Landlock and seccomp filters \
         are needed (Linux 5.13+, Landlock enabled at boot)"
    );
    assert!(
        std::env::var_os("BERTH_FENCE_TESTS_SKIP").is_some_and(|v| v == "1"),
        "{msg}; set BERTH_FENCE_TESTS_SKIP=1 to skip the fence's tests knowingly"
    );
    eprintln!("SKIPPED: {msg}");
    false
}

fn is_root() -> bool {
    rustix::process::getuid().is_root()
}

/// The fake world of one test.
struct World {
    root: PathBuf,
    /// Removed at drop.
    _dir: TempDir,
    home: PathBuf,
    app: PathBuf,
    berth: PathBuf,
    locks: PathBuf,
    tmp: PathBuf,
    records: PathBuf,
}

fn write(p: &Path, text: &str) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

fn git(dir: &Path, args: &[&str]) {
    let ok = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@localhost"])
        .args(args)
        .output()
        .unwrap()
        .status
        .success();
    assert!(ok, "git {args:?}");
}

fn chown_tree(p: &Path, uid: u32) {
    let ok = Command::new("chown")
        .args(["-R", "-h", &format!("{uid}:{uid}")])
        .arg(p)
        .status()
        .unwrap()
        .success();
    assert!(ok, "chown {}", p.display());
}

impl World {
    fn new(tag: &str, owner: Option<u32>) -> World {
        let dir = TempDir::new(&format!("fence-{tag}-"));
        let root = dir.path().to_owned();
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
        let home = root.join("home");
        let app = home.join("code/app");
        let berth = home.join(".local/share/berth");
        let w = World {
            locks: root.join("locks"),
            tmp: berth.join("tmp/t1"),
            records: root.join("records"),
            root: root.clone(),
            _dir: dir,
            home: home.clone(),
            app: app.clone(),
            berth: berth.clone(),
        };
        write(&home.join(".ssh/id_ed25519"), SECRET);
        write(&home.join(".aws/credentials"), SECRET);
        write(&home.join(".bashrc"), "# bashrc\n");
        // A shell history and a snap browser profile: hidden by the fence's own table.
        write(&home.join(".bash_history"), SECRET);
        write(
            &home.join("snap/firefox/common/.mozilla/firefox/p.default/cookies.sqlite"),
            SECRET,
        );
        write(&home.join(".config/app7/conf"), "setting\n");
        // A credential directory that is a symlink: its target is hidden too.
        write(&home.join("dotfiles/kube/config"), SECRET);
        std::os::unix::fs::symlink(home.join("dotfiles/kube"), home.join(".kube")).unwrap();
        write(
            &berth.join("serve.json"),
            &format!("{{\"token\":\"{SECRET}\"}}"),
        );
        write(&berth.join("berth.db"), SECRET);
        std::fs::create_dir_all(&w.tmp).unwrap();
        write(&w.locks.join("x.lock"), SECRET);
        write(&home.join("code/other/file.txt"), "other\n");
        write(&app.join("README.md"), "# app\n");
        git(&app, &["init", "-q"]);
        git(&app, &["add", "-A"]);
        git(&app, &["commit", "-qm", "init"]);
        std::os::unix::fs::symlink("../other", app.join("link-other")).unwrap();
        std::fs::create_dir_all(&w.records).unwrap();
        if let Some(uid) = owner {
            chown_tree(&root, uid);
        }
        w
    }

    fn lp(p: &Path) -> LocalPath {
        LocalPath::parse(Platform::Linux, p.to_str().unwrap()).unwrap()
    }

    fn policy(&self, permissions: Permissions, network: Network) -> FencePolicy {
        let (dir, tmp, berth, locks, home) = (
            World::lp(&self.app),
            World::lp(&self.tmp),
            World::lp(&self.berth),
            World::lp(&self.locks),
            World::lp(&self.home),
        );
        FencePolicy::new(&FenceInputs {
            dir: &dir,
            permissions,
            tmp: &tmp,
            berth_home: &berth,
            lock_dir: &locks,
            home: Some(&home),
            state: &[],
            write: &[],
            read_deny: &[],
            read: ReadScope::Everywhere,
            read_allow: &[],
            network,
        })
    }

    /// Every file, directory and link of the world outside the places the agent may
    /// write (the project and the task's tmp) and Berth's own group records (written
    /// by the spawn), with contents.
    fn snapshot(&self) -> BTreeMap<PathBuf, String> {
        fn walk(w: &World, dir: &Path, out: &mut BTreeMap<PathBuf, String>) {
            for e in std::fs::read_dir(dir).unwrap() {
                let p = e.unwrap().path();
                if p == w.app || p == w.tmp || p == w.records {
                    continue;
                }
                let md = std::fs::symlink_metadata(&p).unwrap();
                let what = if md.is_symlink() {
                    format!("link {}", std::fs::read_link(&p).unwrap().display())
                } else if md.is_dir() {
                    walk(w, &p, out);
                    format!("dir {:o}", md.mode())
                } else {
                    format!(
                        "file {:o} {}",
                        md.mode(),
                        String::from_utf8_lossy(&std::fs::read(&p).unwrap())
                    )
                };
                out.insert(p, what);
            }
        }
        let mut out = BTreeMap::new();
        walk(self, &self.home, &mut out);
        walk(self, &self.root, &mut out);
        out
    }
}

/// The tests of this file, one at a time, and no other test of this binary making or
/// removing a directory meanwhile: each makes a world under the temporary directory,
/// and the read rules decompose every ancestor of a hidden path, so a directory made or
/// removed alongside (another test's world, or any test's sandbox) changes this test's
/// rules (and stamps) between two of its fences. Held for the whole test, the world's
/// removal included (see `common::TMP`).
fn serial() -> common::TmpAlone {
    common::tmp_alone()
}

/// Who runs an attempt.
#[derive(Debug, Clone, Copy, PartialEq)]
enum As {
    Current,
    Nobody,
}

struct Outcome {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `script` with `sh -c` through Berth's spawn, in the project, fenced or not.
async fn attempt(
    w: &World,
    fence: Option<&Prepared>,
    who: As,
    script: &str,
    extra_env: &[(&str, String)],
) -> Outcome {
    let mut args: Vec<String> = Vec::new();
    let program = match who {
        As::Current => "sh".to_owned(),
        As::Nobody => {
            args.extend(
                [
                    "--reuid=65534",
                    "--regid=65534",
                    "--clear-groups",
                    "--",
                    "sh",
                ]
                .map(String::from),
            );
            "setpriv".to_owned()
        }
    };
    args.extend(["-c".to_owned(), script.to_owned()]);
    let inv = Invocation {
        program,
        args,
        stdin: None,
        pass_prefixes: &[],
        env: Vec::new(),
        stdin_pipe: false,
    };
    let mut env: Vec<(OsString, OsString)> = vec![
        ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
        ("HOME".into(), w.home.clone().into()),
        ("TMPDIR".into(), w.tmp.clone().into()),
        ("ROOT".into(), w.root.clone().into()),
        ("LOCKS".into(), w.locks.clone().into()),
        ("BERTH_HOME".into(), w.berth.clone().into()),
    ];
    env.extend(extra_env.iter().map(|(k, v)| ((*k).into(), v.into())));
    let dir: OwnedFd = rustix::fs::open(
        &w.app,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .unwrap();
    // One watcher for the whole test process, as an executor has.
    static WATCHER: std::sync::OnceLock<Watcher> = std::sync::OnceLock::new();
    let mut proc = process::spawn_fenced(
        &inv,
        dir.as_fd(),
        env,
        &w.records,
        "~/code/app",
        WATCHER.get_or_init(Watcher::new),
        fence,
    )
    .await
    .unwrap_or_else(|e| panic!("spawn of {script:?}: {e}"));
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let mut so = proc.stdout.take().unwrap();
    let mut se = proc.stderr.take().unwrap();
    let (a, b) = tokio::join!(so.read_to_end(&mut out), se.read_to_end(&mut err));
    a.unwrap();
    b.unwrap();
    let code = proc.wait().await.unwrap();
    proc.release().await;
    Outcome {
        code,
        stdout: String::from_utf8_lossy(&out).into_owned(),
        stderr: String::from_utf8_lossy(&err).into_owned(),
    }
}

/// What an agent must never manage: (name, script). `$PORT` is a loopback listener's.
const ESCAPES: &[(&str, &str)] = &[
    ("write ~/.bashrc", r#"echo pwned >> "$HOME/.bashrc""#),
    (
        "write the sibling directory",
        r#"echo pwned > "$HOME/code/other/file.txt""#,
    ),
    (
        "write the sibling through a symlink in the directory",
        r#"echo pwned > "$HOME/code/app/link-other/file.txt""#,
    ),
    (
        "create a file in the sibling through the symlink",
        r#"echo pwned > "$HOME/code/app/link-other/new.txt""#,
    ),
    (
        "hard-link a file from outside into the directory, then write it",
        r#"ln "$HOME/.bashrc" "$HOME/code/app/hardlink" && echo pwned >> "$HOME/code/app/hardlink""#,
    ),
    (
        "move a file of the directory out of it",
        r#"mv "$HOME/code/app/README.md" "$HOME/code/other/moved.md""#,
    ),
    (
        "write outside the home",
        r#"echo pwned > "$ROOT/outside.txt""#,
    ),
    ("read ~/.ssh/id_ed25519", r#"cat "$HOME/.ssh/id_ed25519""#),
    ("read ~/.aws/credentials", r#"cat "$HOME/.aws/credentials""#),
    ("read the shell's history", r#"cat "$HOME/.bash_history""#),
    (
        "read the snap Firefox profile's cookies",
        r#"cat "$HOME/snap/firefox/common/.mozilla/firefox/p.default/cookies.sqlite""#,
    ),
    (
        "read ~/.kube/config (the directory is a symlink)",
        r#"cat "$HOME/.kube/config""#,
    ),
    (
        "read the symlinked credential directory's target",
        r#"cat "$HOME/dotfiles/kube/config""#,
    ),
    (
        "read a key through a symlink planted in the directory",
        r#"ln -s "$HOME/.ssh/id_ed25519" "$HOME/code/app/innocent" && cat "$HOME/code/app/innocent""#,
    ),
    (
        "read a key through /proc/self/root",
        r#"cat "/proc/self/root$HOME/.ssh/id_ed25519""#,
    ),
    ("read Berth's serve.json", r#"cat "$BERTH_HOME/serve.json""#),
    ("read Berth's database", r#"cat "$BERTH_HOME/berth.db""#),
    ("read Berth's lock directory", r#"cat "$LOCKS/x.lock""#),
    (
        "open a TCP connection to a loopback listener (network off)",
        r#"bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$PORT"'"#,
    ),
];

/// What a fenced agent must still do: (name, script).
const ALLOWED: &[(&str, &str)] = &[
    (
        "write, create and remove in the directory",
        r#"echo ok > "$HOME/code/app/new.txt" && mkdir -p "$HOME/code/app/target/debug" && rm "$HOME/code/app/new.txt""#,
    ),
    (
        "write in the task's tmp",
        r#"echo ok > "$TMPDIR/scratch.txt""#,
    ),
    (
        "read ordinary settings",
        r#"cat "$HOME/.bashrc" "$HOME/.config/app7/conf""#,
    ),
    (
        "list the home and /tmp",
        r#"ls -a "$HOME" /tmp > /dev/null"#,
    ),
    (
        "git commit in the directory",
        r#"echo more >> README.md && git -c safe.directory='*' -c user.name=t -c user.email=t@localhost commit -qam more"#,
    ),
    (
        "write /dev/null and stderr",
        r#"echo ok > /dev/null && echo ok >&2"#,
    ),
];

/// (NoNewPrivs, Seccomp) lines of this process.
fn own_confinement() -> (String, String) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = |k: &str| {
        status
            .lines()
            .find(|l| l.starts_with(k))
            .unwrap_or_default()
            .to_owned()
    };
    (line("NoNewPrivs:"), line("Seccomp:"))
}

fn port_env(listener: &std::net::TcpListener) -> Vec<(&'static str, String)> {
    vec![("PORT", listener.local_addr().unwrap().port().to_string())]
}

async fn battery(who: As) {
    if !fence_available() {
        return;
    }
    let owner = (who == As::Nobody).then_some(NOBODY);
    let w = World::new("battery", owner);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let env = port_env(&listener);
    let before = w.snapshot();
    let confinement = own_confinement();
    let prepared = fence::prepare(&w.policy(Permissions::Edit, Network::Off), &[]).unwrap();
    let mut failures = Vec::new();
    for (name, script) in ESCAPES {
        let out = attempt(&w, Some(&prepared), who, script, &env).await;
        if out.code == Some(0) || out.stdout.contains(SECRET) {
            failures.push(format!(
                "ESCAPED: {name}: code {:?}, stdout {:?}",
                out.code, out.stdout
            ));
        }
    }
    for (name, script) in ALLOWED {
        let out = attempt(&w, Some(&prepared), who, script, &env).await;
        if out.code != Some(0) {
            failures.push(format!(
                "BLOCKED: {name}: code {:?}, stderr {:?}",
                out.code, out.stderr
            ));
        }
    }
    assert!(failures.is_empty(), "{who:?}:\n{}", failures.join("\n"));
    assert_eq!(w.snapshot(), before, "the home outside the fence changed");
    assert_eq!(
        own_confinement(),
        confinement,
        "Berth itself must stay unconfined"
    );
    assert_eq!(
        confinement,
        ("NoNewPrivs:\t0".to_owned(), "Seccomp:\t0".to_owned()),
        "the test process started confined; the check above proves less"
    );
}

#[tokio::test]
async fn the_escape_battery_fails_every_escape() {
    let _serial = serial();
    battery(As::Current).await;
}

/// Set in the copy of this test binary that [`as_nobody`] runs: the battery runs there,
/// as the unprivileged user it was started as.
const INNER: &str = "BERTH_FENCE_BATTERY_AS_NOBODY";

/// Printed by the inner run when its battery has run to the end: without it, the outer
/// test would pass on an inner run that skipped everything.
const RAN: &str = "battery ran as uid";

#[tokio::test]
async fn the_escape_battery_as_an_unprivileged_user() {
    let _serial = serial();
    if std::env::var_os(INNER).is_some() {
        if fence_available() {
            battery(As::Current).await;
            println!("{RAN} {}", rustix::process::getuid().as_raw());
        }
        return;
    }
    if !is_root() {
        eprintln!("not root: the battery above already ran as an unprivileged user");
        return;
    }
    if !fence_available() {
        return;
    }
    as_nobody("the_escape_battery_as_an_unprivileged_user");
}

/// Runs one test of this file in a copy of its binary started as `nobody`, outside any
/// fence: the whole Berth side (the world, `fence::prepare`, the spawn and every fence
/// step in the child) then runs as an unprivileged user, as a non-root Berth does. (A
/// fenced agent of root holds no capability, so it could not drop to `nobody` itself.)
/// The copy lives in a directory `nobody` can reach: the build's own may sit under a
/// home only root enters.
fn as_nobody(test: &str) {
    let place = TempDir::new("fence-nobody-");
    let root = place.path();
    let exe = root.join("fence-test");
    std::fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
    let (home, tmp) = (root.join("home"), root.join("tmp"));
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&tmp).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755)).unwrap();
    chown_tree(&home, NOBODY);
    chown_tree(&tmp, NOBODY);
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--",
        ])
        .arg(&exe)
        .args(["--exact", &common::test_name(module_path!(), test)])
        .args(["--nocapture", "--test-threads=1"])
        .env(INNER, "1")
        .env("HOME", &home)
        .env("TMPDIR", &tmp)
        .current_dir(&tmp)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "{test} as nobody: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains(&format!("{RAN} {NOBODY}")),
        "{test} as nobody did not run its battery\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
}

/// The control: the same attempts, spawned the same way without a fence, all succeed,
/// as root and as `nobody`. Without this the battery could pass on a broken world.
#[tokio::test]
async fn without_the_fence_every_escape_succeeds() {
    let _serial = serial();
    let whos: &[As] = if is_root() {
        &[As::Current, As::Nobody]
    } else {
        &[As::Current]
    };
    for &who in whos {
        let w = World::new("control", (who == As::Nobody).then_some(NOBODY));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let env = port_env(&listener);
        let before = w.snapshot();
        for (name, script) in ESCAPES.iter().chain(ALLOWED) {
            let out = attempt(&w, None, who, script, &env).await;
            assert_eq!(
                out.code,
                Some(0),
                "{who:?}: unfenced, {name} must work: {}",
                out.stderr
            );
        }
        assert_ne!(w.snapshot(), before, "{who:?}: the escapes changed nothing");
    }
}

#[tokio::test]
async fn network_on_lets_tcp_through_and_read_only_keeps_the_directory() {
    let _serial = serial();
    if !fence_available() {
        return;
    }
    let w = World::new("modes", None);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let env = port_env(&listener);
    let on = fence::prepare(&w.policy(Permissions::Edit, Network::On), &[]).unwrap();
    let tcp = r#"bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$PORT"'"#;
    let out = attempt(&w, Some(&on), As::Current, tcp, &env).await;
    assert_eq!(out.code, Some(0), "network on: {}", out.stderr);
    let read_only = fence::prepare(&w.policy(Permissions::ReadOnly, Network::On), &[]).unwrap();
    let out = attempt(&w, Some(&read_only), As::Current, "echo x > new.txt", &env).await;
    assert_ne!(out.code, Some(0), "read-only: the directory was written");
    assert!(!w.app.join("new.txt").exists());
    let out = attempt(
        &w,
        Some(&read_only),
        As::Current,
        r#"cat README.md && echo ok > "$TMPDIR/x""#,
        &env,
    )
    .await;
    assert_eq!(out.code, Some(0), "read-only: {}", out.stderr);
}

/// The decomposition of the reads is reused between runs while no directory it
/// listed changed: a file created in the home after one run is readable in the next,
/// so is one an editor replaced by a rename, and a credential never is.
#[tokio::test]
async fn a_new_entry_in_the_home_is_readable_at_the_next_run_and_credentials_never() {
    let _serial = serial();
    if !fence_available() {
        return;
    }
    let w = World::new("reuse", None);
    let policy = w.policy(Permissions::Edit, Network::On);
    let first = fence::prepare(&policy, &[]).unwrap();
    let out = attempt(&w, Some(&first), As::Current, r#"cat "$HOME/.bashrc""#, &[]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let again = fence::prepare(&policy, &[]).unwrap();
    assert_eq!(again.rules(), first.rules());

    write(&w.home.join("new-notes.txt"), "notes\n");
    write(&w.home.join(".bashrc.new"), "# saved\n");
    std::fs::rename(w.home.join(".bashrc.new"), w.home.join(".bashrc")).unwrap();
    let second = fence::prepare(&policy, &[]).unwrap();
    for file in ["new-notes.txt", ".bashrc"] {
        let out = attempt(
            &w,
            Some(&second),
            As::Current,
            &format!(r#"cat "$HOME/{file}""#),
            &[],
        )
        .await;
        assert_eq!(out.code, Some(0), "{file}: {}", out.stderr);
    }
    let out = attempt(
        &w,
        Some(&second),
        As::Current,
        r#"cat "$HOME/.ssh/id_ed25519""#,
        &[],
    )
    .await;
    assert_ne!(out.code, Some(0), "the key was read: {}", out.stdout);
    assert!(!out.stdout.contains(SECRET));
}

/// Every fenced process carries the seccomp mark, its descendants too, even one that
/// left the agent's session by a double fork and `setsid`; Berth and unfenced agents
/// do not.
#[tokio::test]
async fn fenced_processes_carry_the_mark() {
    let _serial = serial();
    if !fence_available() {
        return;
    }
    let w = World::new("mark", None);
    let prepared = fence::prepare(&w.policy(Permissions::Edit, Network::On), &[]).unwrap();
    // The agent prints its own pid and an escapee's, waits until both were checked.
    let script = r#"echo $$; setsid sh -c 'echo $$; sleep 30' </dev/null & while [ ! -e "$TMPDIR/checked" ]; do sleep 0.05; done"#;
    for (fence, want) in [(Some(&prepared), true), (None, false)] {
        let _ = std::fs::remove_file(w.tmp.join("checked"));
        let inv = Invocation {
            program: "sh".into(),
            args: vec!["-c".into(), script.into()],
            stdin: None,
            pass_prefixes: &[],
            env: Vec::new(),
            stdin_pipe: false,
        };
        let env = vec![
            (OsString::from("PATH"), OsString::from("/usr/bin:/bin")),
            (OsString::from("TMPDIR"), OsString::from(&w.tmp)),
        ];
        let dir: OwnedFd = rustix::fs::open(
            &w.app,
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY,
            rustix::fs::Mode::empty(),
        )
        .unwrap();
        let watcher = Watcher::new();
        let mut proc =
            process::spawn_fenced(&inv, dir.as_fd(), env, &w.records, "app", &watcher, fence)
                .await
                .unwrap();
        let mut so = proc.stdout.take().unwrap();
        let mut pids = String::new();
        let mut buf = [0u8; 64];
        while pids.lines().count() < 2 {
            let n = so.read(&mut buf).await.unwrap();
            assert!(n > 0, "the agent ended early: {pids:?}");
            pids.push_str(std::str::from_utf8(&buf[..n]).unwrap());
        }
        for pid in pids.lines() {
            let pid: i32 = pid.trim().parse().unwrap();
            assert_eq!(fence::peer_is_fenced(pid), want, "pid {pid}, fenced {want}");
        }
        std::fs::write(w.tmp.join("checked"), "").unwrap();
        proc.wait().await.unwrap();
        proc.release().await;
        // The escapee is in its own session: not the group's to kill.
        let escapee: i32 = pids.lines().nth(1).unwrap().trim().parse().unwrap();
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_raw(escapee).unwrap(),
            rustix::process::Signal::KILL,
        );
    }
    assert!(!fence::peer_is_fenced(std::process::id() as i32));
}

const PROBE_CHILD: &str = "BERTH_FENCE_TEST_PROBE_CHILD";

/// Not a test on its own: the body of the child of `the_probe_hook_reports_unavailable`.
#[test]
fn probe_hook_child() {
    if std::env::var_os(PROBE_CHILD).is_none() {
        return;
    }
    assert_eq!(fence::probe(), fence::Probe::UNAVAILABLE);
    let w = World::new("probe", None);
    let err = fence::prepare(&w.policy(Permissions::Edit, Network::On), &[]).unwrap_err();
    assert!(
        matches!(err, fence::FenceError::Unavailable { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("Landlock"), "{err}");
}

/// `BERTH_FENCE_PROBE=unavailable` (read once per process, so in a child process):
/// the probe reports no fence and `prepare` refuses, on a kernel that has one.
#[test]
fn the_probe_hook_reports_unavailable() {
    let _serial = serial();
    let status = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            &common::test_name(module_path!(), "probe_hook_child"),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(PROBE_CHILD, "1")
        .env(fence::PROBE_ENV, "unavailable")
        .status()
        .unwrap();
    assert!(status.success(), "the child failed: {status}");
}

/// The fence's costs (a figure, not a test: `--ignored --nocapture`): `prepare` on the
/// fake world, and a fenced against an unfenced spawn of `true`.
#[tokio::test]
#[ignore = "a benchmark figure, run by hand"]
async fn fence_costs() {
    let _serial = serial();
    if !fence_available() {
        return;
    }
    let w = World::new("costs", None);
    let policy = w.policy(Permissions::Edit, Network::Off);
    let n = 200;
    let t = std::time::Instant::now();
    let mut prepared = None;
    for _ in 0..n {
        prepared = Some(fence::prepare(&policy, &[]).unwrap());
    }
    let prepare = t.elapsed() / n;
    let prepared = prepared.unwrap();
    // The same with this machine's real home hidden from (a realistic home's size).
    let real_home = std::fs::canonicalize(std::env::var_os("HOME").unwrap()).unwrap();
    let real = {
        let (dir, tmp, berth, locks, home) = (
            World::lp(&w.app),
            World::lp(&w.tmp),
            World::lp(&w.berth),
            World::lp(&w.locks),
            World::lp(&real_home),
        );
        FencePolicy::new(&FenceInputs {
            dir: &dir,
            permissions: Permissions::Edit,
            tmp: &tmp,
            berth_home: &berth,
            lock_dir: &locks,
            home: Some(&home),
            state: &[],
            write: &[],
            read_deny: &[],
            read: ReadScope::Everywhere,
            read_allow: &[],
            network: Network::Off,
        })
    };
    let t = std::time::Instant::now();
    let mut real_rules = 0;
    for _ in 0..n {
        real_rules = fence::prepare(&real, &[]).unwrap().rules();
    }
    let prepare_real = t.elapsed() / n;
    eprintln!(
        "fence: prepare with the real home {} hidden from: {prepare_real:?} ({real_rules} rules)",
        real_home.display()
    );
    let mut times = BTreeMap::new();
    for (label, fence) in [("unfenced", None), ("fenced", Some(&prepared))] {
        let mut samples = Vec::new();
        for _ in 0..n {
            let t = std::time::Instant::now();
            let out = attempt(&w, fence, As::Current, "exec true", &[]).await;
            samples.push(t.elapsed());
            assert_eq!(out.code, Some(0));
        }
        samples.sort();
        times.insert(
            label,
            (samples[samples.len() / 2], samples[samples.len() * 9 / 10]),
        );
    }
    eprintln!(
        "fence: prepare {prepare:?} ({} rules, {} symlinks skipped, BPF {} insns, ABI {}); \
         spawn+wait of `sh -c 'exec true'` p50/p90: unfenced {:?}/{:?}, fenced {:?}/{:?}",
        prepared.rules(),
        prepared.skipped_symlinks(),
        prepared.filter_len(),
        prepared.landlock_abi(),
        times["unfenced"].0,
        times["unfenced"].1,
        times["fenced"].0,
        times["fenced"].1,
    );
}

#[test]
fn write_rules_for_missing_state_are_reported_and_missing_directories_refused() {
    let _serial = serial();
    if !fence_available() {
        return;
    }
    let w = World::new("missing", None);
    let (dir, tmp, berth, locks, home) = (
        World::lp(&w.app),
        World::lp(&w.tmp),
        World::lp(&w.berth),
        World::lp(&w.locks),
        World::lp(&w.home),
    );
    let state = [(World::lp(&w.home.join(".claude")), WriteKind::Subtree)];
    let inputs = FenceInputs {
        dir: &dir,
        permissions: Permissions::Edit,
        tmp: &tmp,
        berth_home: &berth,
        lock_dir: &locks,
        home: Some(&home),
        state: &state,
        write: &[],
        read_deny: &[],
        read: ReadScope::Everywhere,
        read_allow: &[],
        network: Network::On,
    };
    let prepared = fence::prepare(&FencePolicy::new(&inputs), &[]).unwrap();
    assert_eq!(prepared.missing(), [w.home.join(".claude")]);
    let gone = World::lp(&w.root.join("gone"));
    let err = fence::prepare(
        &FencePolicy::new(&FenceInputs {
            tmp: &gone,
            ..inputs
        }),
        &[],
    )
    .unwrap_err();
    assert!(
        matches!(&err, fence::FenceError::Missing { path, .. } if *path == w.root.join("gone")),
        "{err}"
    );
    assert!(err.to_string().contains("temporary directory"), "{err}");
}

/// A session's next run reuses its last fence (the kernel objects are a hundred and
/// more system calls to build) only while every path it was built on is the same: a
/// rule is on a file, so a write path replaced since, a missing one that appeared, or
/// a new entry where the reads were decomposed, each makes it build anew.
#[test]
fn a_fence_is_reused_only_while_every_path_it_was_built_on_is_the_same() {
    let _serial = serial();
    if !fence_available() {
        return;
    }
    let w = World::new("reuse", None);
    let (dir, tmp, berth, locks, home) = (
        World::lp(&w.app),
        World::lp(&w.tmp),
        World::lp(&w.berth),
        World::lp(&w.locks),
        World::lp(&w.home),
    );
    let state = [(World::lp(&w.home.join(".claude")), WriteKind::Subtree)];
    let policy = FencePolicy::new(&FenceInputs {
        dir: &dir,
        permissions: Permissions::Edit,
        tmp: &tmp,
        berth_home: &berth,
        lock_dir: &locks,
        home: Some(&home),
        state: &state,
        write: &[],
        read_deny: &[],
        read: ReadScope::Everywhere,
        read_allow: &[],
        network: Network::On,
    });
    // A fence built now, and reusable at once: nothing it was built on changed in
    // between. Another process may make or remove an entry in a directory the reads
    // were decomposed in (`/tmp`, between this test's steps): that one is built again,
    // a few times at most.
    let fresh = || {
        for _ in 0..5 {
            let built = fence::prepare(&policy, &[]).unwrap();
            if built.reuse(&policy).is_some() {
                return built;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!("a fence built just now is never reusable, though nothing it was built on changed");
    };
    let first = fresh();
    let again = first.reuse(&policy).expect("nothing changed: reused");
    assert_eq!(again.rules(), first.rules());
    assert!(again.reuse(&policy).is_some(), "a reused fence is reusable");

    // The tmp directory renamed away and a new one made in its place: the old rule
    // is on the old directory, wherever it went.
    std::fs::rename(&w.tmp, w.root.join("old-tmp")).unwrap();
    std::fs::create_dir(&w.tmp).unwrap();
    assert!(first.reuse(&policy).is_none(), "the tmp was replaced");
    let second = fresh();

    // The run's directory swapped for a symlink to another.
    std::fs::rename(&w.app, w.root.join("old-app")).unwrap();
    std::os::unix::fs::symlink(w.home.join("code/other"), &w.app).unwrap();
    assert!(second.reuse(&policy).is_none(), "the directory was swapped");
    std::fs::remove_file(&w.app).unwrap();
    std::fs::rename(w.root.join("old-app"), &w.app).unwrap();
    let third = fresh();

    // A write path that was missing (so had no rule) now exists.
    std::fs::create_dir(w.home.join(".claude")).unwrap();
    assert!(third.reuse(&policy).is_none(), "the agent's state appeared");
    let fourth = fresh();

    // A new entry in the home, which the reads were decomposed in: it gets its rule
    // only from a new build.
    write(&w.home.join(".newtool/conf"), "x\n");
    assert!(fourth.reuse(&policy).is_none(), "the home has a new entry");
    fresh();
}

/// A descriptor Berth inherited without close-on-exec (from whatever started it) does
/// not reach a fenced agent: Landlock checks paths when they are opened, not
/// descriptors already open, so one open on a file outside the fence would be a way
/// out of it.
#[tokio::test]
async fn a_descriptor_berth_inherited_does_not_reach_a_fenced_agent() {
    let _serial = serial();
    if !fence_available() || !berth_local_agent::agent::spawn::supported() {
        return;
    }
    let w = World::new("inherited", None);
    let victim = w.home.join(".bashrc");
    // Without O_CLOEXEC, as a parent that leaks descriptors leaves them.
    let leaked: OwnedFd = rustix::fs::open(
        &victim,
        rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::APPEND,
        rustix::fs::Mode::empty(),
    )
    .unwrap();
    let n = std::os::fd::AsRawFd::as_raw_fd(&leaked);
    let policy = w.policy(Permissions::Edit, Network::On);
    let prepared = fence::prepare(&policy, &[]).unwrap();
    let out = attempt(
        &w,
        Some(&prepared),
        As::Current,
        &format!("echo pwn >&{n} && echo wrote; ls /proc/self/fd"),
        &[],
    )
    .await;
    assert!(
        !out.stdout.contains("wrote"),
        "the agent wrote through descriptor {n}: {} / {}",
        out.stdout,
        out.stderr
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "# bashrc\n");
    drop(leaked);
}

/// The strict read mode (`"fence": {"read": "directory"}`): an agent in `~/code/app`
/// cannot read, list or reach through a symlink the sibling project `~/code/other`,
/// nor list the home or `~/code`; it reads its directory, the system, a toolchain
/// (and runs its program), its own state (and writes it), a `fence.read` path, and
/// git works in the directory. A toolchain's credentials stay hidden. Each attempt is
/// run under the default (reading everywhere) too, as the control; the fences are
/// built strict, default, strict again, so a decomposition reused across the modes
/// (the cache keyed by the holes alone) would fail one of them.
#[tokio::test]
async fn the_strict_read_mode_reads_the_directory_the_system_and_the_toolchains_alone() {
    let _serial = serial();
    if fence_available() {
        strict_reads().await;
    }
}

/// The same as an unprivileged user: a non-root Berth builds the strict rules from
/// what it may list itself.
#[tokio::test]
async fn the_strict_read_mode_as_an_unprivileged_user() {
    let _serial = serial();
    if std::env::var_os(INNER).is_some() {
        if fence_available() {
            strict_reads().await;
            println!("{RAN} {}", rustix::process::getuid().as_raw());
        }
        return;
    }
    if is_root() && fence_available() {
        as_nobody("the_strict_read_mode_as_an_unprivileged_user");
    }
}

async fn strict_reads() {
    let w = World::new("strict", None);
    let tool = w.home.join(".cargo/bin/tool");
    write(&tool, "#!/bin/sh\necho tool-ran\n");
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    write(&w.home.join(".cargo/config.toml"), "[build]\n");
    write(&w.home.join(".cargo/credentials.toml"), SECRET);
    write(&w.home.join(".claude/notes"), "state\n");
    write(&w.home.join("sdk/include/lib.h"), "int f(void);\n");
    let (dir, tmp, berth, locks, home) = (
        World::lp(&w.app),
        World::lp(&w.tmp),
        World::lp(&w.berth),
        World::lp(&w.locks),
        World::lp(&w.home),
    );
    let state = [(World::lp(&w.home.join(".claude")), WriteKind::Subtree)];
    let read_allow = [World::lp(&w.home.join("sdk"))];
    let policy = |read: ReadScope| {
        FencePolicy::new(&FenceInputs {
            dir: &dir,
            permissions: Permissions::Edit,
            tmp: &tmp,
            berth_home: &berth,
            lock_dir: &locks,
            home: Some(&home),
            state: &state,
            write: &[],
            read_deny: &[],
            read,
            read_allow: &read_allow,
            network: Network::On,
        })
    };
    let strict = fence::prepare(&policy(ReadScope::Directory), &[]).unwrap();
    let everywhere = fence::prepare(&policy(ReadScope::Everywhere), &[]).unwrap();
    let strict_again = fence::prepare(&policy(ReadScope::Directory), &[]).unwrap();
    // (what, script, works in the strict mode, works by default)
    let rows: &[(&str, &str, bool, bool)] = &[
        (
            "read the sibling project's file",
            r#"cat "$HOME/code/other/file.txt""#,
            false,
            true,
        ),
        (
            "read the sibling through a symlink in the directory",
            r#"cat link-other/file.txt"#,
            false,
            true,
        ),
        ("list the projects", r#"ls "$HOME/code""#, false, true),
        ("list the home", r#"ls -a "$HOME""#, false, true),
        (
            "read settings no table names",
            r#"cat "$HOME/.config/app7/conf""#,
            false,
            true,
        ),
        (
            "read the directory",
            r#"cat README.md && ls -a . > /dev/null"#,
            true,
            true,
        ),
        (
            "read the system",
            r#"cat /etc/passwd > /dev/null && /usr/bin/env true && ls /usr/bin > /dev/null"#,
            true,
            true,
        ),
        (
            "read a toolchain's settings",
            r#"cat "$HOME/.cargo/config.toml""#,
            true,
            true,
        ),
        (
            "run a toolchain's program",
            r#""$HOME/.cargo/bin/tool" | grep -q tool-ran"#,
            true,
            true,
        ),
        (
            "read and write the agent's own state",
            r#"cat "$HOME/.claude/notes" && echo more >> "$HOME/.claude/notes""#,
            true,
            true,
        ),
        (
            "read a fence.read path",
            r#"cat "$HOME/sdk/include/lib.h""#,
            true,
            true,
        ),
        (
            "git in the directory",
            r#"git -c safe.directory='*' status --short && git -c safe.directory='*' log --oneline > /dev/null"#,
            true,
            true,
        ),
        (
            "read a toolchain's credentials",
            r#"cat "$HOME/.cargo/credentials.toml""#,
            false,
            false,
        ),
    ];
    let mut failures = Vec::new();
    for (fence, label, column) in [
        (&strict, "strict", 0),
        (&everywhere, "everywhere", 1),
        (&strict_again, "strict again", 0),
    ] {
        for (what, script, in_strict, by_default) in rows {
            let want = if column == 0 { *in_strict } else { *by_default };
            let out = attempt(&w, Some(fence), As::Current, script, &[]).await;
            let worked = out.code == Some(0);
            if worked != want {
                failures.push(format!(
                    "{label}: {what}: worked {worked}, want {want}: stdout {:?}, stderr {:?}",
                    out.stdout, out.stderr
                ));
            }
            if !want && (out.stdout.contains("other") || out.stdout.contains(SECRET)) {
                failures.push(format!("{label}: {what}: read {:?}", out.stdout));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(strict.rules(), strict_again.rules());
}

/// The strict mode's roots in their canonical form: a toolchain that is a symlink to
/// a directory elsewhere (as a dotfiles checkout makes it) is read where it leads, and
/// a `read_deny` on a root, or over where a root leads, hides it still; a toolchain
/// installed between two runs is readable in the second.
#[tokio::test]
async fn a_symlinked_root_is_read_where_it_leads_and_a_hole_over_a_root_holds() {
    let _serial = serial();
    if !fence_available() {
        return;
    }
    let w = World::new("strict-links", None);
    write(&w.root.join("elsewhere/rustup/settings.toml"), "x = 1\n");
    std::os::unix::fs::symlink(w.root.join("elsewhere/rustup"), w.home.join(".rustup")).unwrap();
    write(&w.root.join("elsewhere/other.txt"), "other\n");
    write(&w.home.join(".npm/_cacache/index"), "cache\n");
    write(&w.root.join("stash/pyenv/version"), "3.12\n");
    std::os::unix::fs::symlink(w.root.join("stash/pyenv"), w.home.join(".pyenv")).unwrap();
    let (dir, tmp, berth, locks, home) = (
        World::lp(&w.app),
        World::lp(&w.tmp),
        World::lp(&w.berth),
        World::lp(&w.locks),
        World::lp(&w.home),
    );
    let read_deny = [
        World::lp(&w.home.join(".npm")),
        World::lp(&w.root.join("stash")),
    ];
    let policy = FencePolicy::new(&FenceInputs {
        dir: &dir,
        permissions: Permissions::Edit,
        tmp: &tmp,
        berth_home: &berth,
        lock_dir: &locks,
        home: Some(&home),
        state: &[],
        write: &[],
        read_deny: &read_deny,
        read: ReadScope::Directory,
        read_allow: &[],
        network: Network::On,
    });
    let prepared = fence::prepare(&policy, &[]).unwrap();
    for (script, want) in [
        (r#"cat "$HOME/.rustup/settings.toml""#, true),
        (r#"cat "$ROOT/elsewhere/rustup/settings.toml""#, true),
        (r#"cat "$ROOT/elsewhere/other.txt""#, false),
        (r#"cat "$HOME/.npm/_cacache/index""#, false),
        (r#"cat "$HOME/.pyenv/version""#, false),
    ] {
        let out = attempt(&w, Some(&prepared), As::Current, script, &[]).await;
        assert_eq!(out.code == Some(0), want, "{script}: {}", out.stderr);
    }
    // A toolchain installed after one run is readable from the next: the rules are
    // made anew when a root appears (or leads elsewhere), not reused.
    let bun = r#"cat "$HOME/.bun/bin/bun""#;
    let out = attempt(&w, Some(&prepared), As::Current, bun, &[]).await;
    assert_ne!(out.code, Some(0), "no ~/.bun yet");
    write(&w.home.join(".bun/bin/bun"), "bun\n");
    let next = fence::prepare(&policy, &[]).unwrap();
    let out = attempt(&w, Some(&next), As::Current, bun, &[]).await;
    assert_eq!(out.code, Some(0), "the new toolchain: {}", out.stderr);
}
