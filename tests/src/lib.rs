//! Helpers for Berth's end-to-end tests: real binaries, real homes in temporary
//! directories, real sockets.
//!
//! Every [`Berth`] gets its own `BERTH_HOME`, config dir, lock dir and `HOME` (named
//! after a fake user, so a test can assert that name never shows), and is killed when
//! dropped.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

pub mod bench;
pub mod dbus;
pub mod fake_models;
pub mod receiver;
pub mod rng;
pub mod steps;
pub mod team;
pub mod tls;
pub mod tmux;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// `berth-server`: the one `BERTH_DEPLOYED_SERVER` names (scripts/test.sh runs some
/// suites again on the deployed build), else this workspace's, built first (a no-op
/// when fresh: a binary left from an older build would fail for the wrong reason).
pub fn server_bin() -> PathBuf {
    if let Some(deployed) = std::env::var_os("BERTH_DEPLOYED_SERVER") {
        return PathBuf::from(deployed);
    }
    let status = Command::new(env!("CARGO"))
        .args(["build", "-p", "berth-web", "--bin", "berth-server"])
        .status()
        .expect("run cargo build");
    assert!(status.success(), "building berth-server failed");
    berth_bin().with_file_name("berth-server")
}

/// The `berth` binary of this build (target/<profile>/berth), built on demand with
/// the full CLI it hands most commands to (`berth-full`, next to it).
pub fn berth_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("BERTH_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<test> -> target/<profile>/berth
    let dir = exe.parent().and_then(Path::parent).expect("target dir");
    let bin = dir.join("berth");
    if !bin.exists() || !dir.join("berth-full").exists() {
        let status = Command::new(env!("CARGO"))
            .args(["build", "-p", "berth-local-agent", "--bins"])
            .status()
            .expect("run cargo build");
        assert!(status.success(), "building berth failed");
    }
    bin
}

pub use berth_test_support::TempDir;

/// One Berth installation: homes and directories for a fake user.
#[derive(Debug)]
pub struct Berth {
    pub root: TempDir,
    pub home: PathBuf,
    pub user_home: PathBuf,
    pub config: PathBuf,
    pub locks: PathBuf,
    /// Extra environment for every command, the server included (see [`Berth::env`]).
    env: Vec<(String, String)>,
    /// The umask every command starts with (see [`Berth::umask`]); else the test's.
    umask: Option<String>,
    /// The uid every command and the server run as, with copies of the binaries it
    /// can reach (see [`Berth::as_user`]); else the test's.
    user: Option<(u32, PathBuf)>,
    /// Another build's `berth` (with its `berth-full` beside it) for every command and
    /// the server (see [`Berth::use_bin`]); else [`berth_bin`].
    build: Option<PathBuf>,
    server: Option<Child>,
}

/// The fake account name: tests assert it never appears in a display.
pub const FAKE_USER: &str = "alice-7f3a";

impl Berth {
    pub fn new(tag: &str) -> Berth {
        Berth::with_locks(tag, None)
    }

    /// Like [`Berth::new`], sharing `locks` with another installation (two Berth
    /// processes of one user share the per-user lock directory).
    pub fn with_locks(tag: &str, locks: Option<&Path>) -> Berth {
        let root = TempDir::new(tag);
        let user_home = root.path().join("home").join(FAKE_USER);
        let home = user_home.join(".local/share/berth");
        let config = user_home.join(".config/berth");
        let locks = locks
            .map(Path::to_owned)
            .unwrap_or_else(|| root.path().join("locks"));
        for d in [&user_home, &config] {
            std::fs::create_dir_all(d).expect("create dirs");
        }
        Berth {
            root,
            home,
            user_home,
            config,
            locks,
            env: Vec::new(),
            umask: None,
            user: None,
            build: None,
            server: None,
        }
    }

    /// Runs another build of Berth: `bin` (a `berth`, its `berth-full` beside it) for
    /// every later command and server start, instead of [`berth_bin`]. For comparing two
    /// builds in one benchmark loop.
    pub fn use_bin(&mut self, bin: &Path) {
        self.build = Some(bin.to_owned());
    }

    /// The `berth` binary this installation starts (before [`Berth::as_user`] copies it).
    fn build(&self) -> PathBuf {
        self.build.clone().unwrap_or_else(berth_bin)
    }

    /// Sets `key=value` in the environment of every later command and server start
    /// (e.g. a webhook secret `berth serve` reads at startup).
    pub fn env(&mut self, key: &str, value: &str) {
        self.env.push((key.to_owned(), value.to_owned()));
    }

    /// Starts every later command and server with the umask `mask` (octal, e.g.
    /// `022`), through `sh -c 'umask MASK && exec berth …'`.
    pub fn umask(&mut self, mask: &str) {
        self.umask = Some(mask.to_owned());
    }

    /// Runs every later command and the server as the unprivileged `uid` (through
    /// `setpriv`, with no supplementary groups): the installation's directories become
    /// its own, and the binaries are copied where it can run them (the target directory
    /// may lie in a home it cannot enter). Call after writing the files the test needs.
    pub fn as_user(&mut self, uid: u32) {
        let bin = self.root.path().join("bin");
        std::fs::create_dir_all(&bin).expect("bin dir");
        let src = self.build();
        let dir = src.parent().expect("the binaries' directory");
        for name in ["berth", "berth-full"] {
            std::fs::copy(dir.join(name), bin.join(name)).expect("copy the binaries");
        }
        let ok = Command::new("chown")
            .args(["-R", &format!("{uid}:{uid}")])
            .arg(self.root.path())
            .status()
            .expect("chown")
            .success();
        assert!(ok, "chown {}", self.root.path().display());
        self.user = Some((uid, bin.join("berth")));
    }

    /// The unprivileged user [`Berth::as_user`] set, if any.
    pub fn uid(&self) -> Option<u32> {
        self.user.as_ref().map(|(uid, _)| *uid)
    }

    /// The `berth` this installation runs (a copy, under [`Berth::as_user`]).
    pub fn bin(&self) -> PathBuf {
        match &self.user {
            Some((_, bin)) => bin.clone(),
            None => self.build(),
        }
    }

    /// A `berth` command with this installation's environment.
    pub fn cmd(&self) -> Command {
        let mut c = match (&self.umask, &self.user) {
            (None, Some((uid, bin))) => {
                let mut c = Command::new("setpriv");
                c.args([
                    &format!("--reuid={uid}"),
                    &format!("--regid={uid}"),
                    "--clear-groups",
                    "--",
                ])
                .arg(bin);
                c
            }
            (None, None) => Command::new(self.build()),
            (Some(_), Some(_)) => panic!("Berth::umask and Berth::as_user do not combine"),
            (Some(mask), None) => {
                let mut c = Command::new("sh");
                c.arg("-c")
                    .arg(format!("umask {mask} && exec \"$0\" \"$@\""))
                    .arg(self.build());
                c
            }
        };
        c.env("BERTH_HOME", &self.home)
            .env("BERTH_CONFIG_DIR", &self.config)
            .env("BERTH_LOCK_DIR", &self.locks)
            .env("HOME", &self.user_home)
            .env("USER", FAKE_USER)
            .env_remove("XDG_RUNTIME_DIR")
            // Never the desktop of whoever runs the tests: a test that wants a bus
            // starts its own (dbus::SessionBus) and sets it with `Berth::env`.
            .env_remove("DBUS_SESSION_BUS_ADDRESS")
            .stdin(Stdio::null());
        c.envs(self.env.iter().map(|(k, v)| (k, v)));
        c
    }

    /// Runs `berth ARGS` to completion.
    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd().args(args).output().expect("run berth")
    }

    /// Runs `berth ARGS`, asserts success, and returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "berth {args:?} failed ({}):\nstdout: {}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs `berth ARGS --json`-style commands and parses stdout as one JSON document.
    pub fn json(&self, args: &[&str]) -> Value {
        let out = self.ok(args);
        serde_json::from_str(&out)
            .unwrap_or_else(|e| panic!("berth {args:?}: not JSON ({e}): {out}"))
    }

    /// Starts `berth serve` on a free loopback port and waits until it answers.
    pub fn serve(&mut self) {
        self.serve_with(&[]);
    }

    /// Starts `berth serve --listen 127.0.0.1:<free port> EXTRA…` and waits until it
    /// answers.
    pub fn serve_with(&mut self, extra: &[&str]) {
        let port = free_port();
        let listen = format!("127.0.0.1:{port}");
        let mut args = vec!["serve", "--listen", &listen];
        args.extend_from_slice(extra);
        self.start(&args);
    }

    /// A new daemon token named `name`, made with `berth daemon token create NAME --json`.
    pub fn daemon_token(&self, name: &str) -> String {
        let v = self.json(&["daemon", "token", "create", name, "--json"]);
        v["token"]
            .as_str()
            .unwrap_or_else(|| panic!("no token in {v}"))
            .to_owned()
    }

    /// Starts `BERTH_DAEMON_TOKEN=TOKEN berth daemon --server URL --name NAME` in this
    /// installation's home (the token in the environment, as `daemon token create`
    /// says: never in the command line) and waits until the CLI works through it.
    pub fn daemon(&mut self, url: &str, token: &str, name: &str) {
        self.env.retain(|(k, _)| k != "BERTH_DAEMON_TOKEN");
        self.env("BERTH_DAEMON_TOKEN", token);
        self.start(&["daemon", "--server", url, "--name", name]);
    }

    /// The web listener's URL and token of the running `berth serve`.
    pub fn serve_info(&self) -> (String, String) {
        let text = std::fs::read_to_string(self.home.join("serve.json")).expect("serve.json");
        let v: Value = serde_json::from_str(&text).expect("serve.json is JSON");
        (
            v["url"].as_str().expect("url").to_owned(),
            v["token"].as_str().expect("token").to_owned(),
        )
    }

    /// Starts a long-running `berth ARGS` (`serve` or `daemon`), logging to
    /// `serve.log`, and waits until the CLI works through this home's socket.
    pub fn start(&mut self, args: &[&str]) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.root.path().join("serve.log"))
            .expect("log file");
        let child = self
            .cmd()
            .args(args)
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("spawn berth");
        self.server = Some(child);
        self.wait_ready(args.first() == Some(&"serve"));
    }

    fn wait_ready(&mut self, serve_json: bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if (!serve_json || self.home.join("serve.json").exists())
                && self.home.join("berth.sock").exists()
                && self.run(&["session", "list", "--json"]).status.success()
            {
                return;
            }
            if let Some(c) = self.server.as_mut()
                && let Ok(Some(status)) = c.try_wait()
            {
                panic!("berth serve exited early ({status}):\n{}", self.serve_log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("berth serve did not become ready:\n{}", self.serve_log());
    }

    pub fn serve_log(&self) -> String {
        std::fs::read_to_string(self.root.path().join("serve.log")).unwrap_or_default()
    }

    /// Stops the server with a signal and waits for it to exit.
    pub fn stop(&mut self, signal: &str) -> Option<std::process::ExitStatus> {
        let mut child = self.server.take()?;
        let _ = Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(s)) = child.try_wait() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        child.wait().ok()
    }

    /// The exit code of the server (or daemon) if it has exited by itself.
    pub fn server_exit(&mut self) -> Option<i32> {
        let status = self.server.as_mut()?.try_wait().ok()??;
        self.server = None;
        Some(status.code().unwrap_or(-1))
    }

    /// The pid of the running server.
    pub fn server_pid(&self) -> Option<u32> {
        self.server.as_ref().map(Child::id)
    }
}

impl Drop for Berth {
    fn drop(&mut self) {
        if let Some(mut c) = self.server.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A TCP port free on loopback right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// Polls `f` until it returns `Some`, for at most `secs` seconds.
pub fn eventually<T>(secs: u64, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

impl Berth {
    /// `GET PATH` on the running `berth serve`'s web listener with its token; returns the
    /// status code and the body as the browser would receive it. An event stream is read
    /// until it goes quiet for a second (its stored backlog arrives at once).
    pub fn web_get(&self, path: &str) -> (u16, String) {
        use berth_test_support::http::{self, Request};
        let (url, token) = self.serve_info();
        let addr = url
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_owned();
        let mut s = std::net::TcpStream::connect(&addr).expect("connect to the web listener");
        s.set_read_timeout(Some(Duration::from_secs(1)))
            .expect("read timeout");
        let sep = if path.contains('?') { '&' } else { '?' };
        Request::get(&format!("{path}{sep}token={token}"))
            .close()
            .write_to(&mut s, &addr)
            .expect("send the request");
        http::status_and_body(&http::read_all(&mut s, Duration::from_secs(30)))
    }
}

/// An HTTP/1.1 answer's status code (0 if there is none) and its body.
pub fn status_and_body(text: &str) -> (u16, String) {
    berth_test_support::http::status_and_body(text.as_bytes())
}
