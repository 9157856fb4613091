//! Shared helpers: sandboxes under a fresh temp dir, fake agents, runs, tree hashes.
#![allow(dead_code)]

use berth_core::LocalPath;
use berth_local_agent::{ExecutorConfig, NativeExecutor};
use berth_web::executor::{
    AgentKind, AgentSpec, ExecEvent, Placement, SessionFacts, TaskOutcome, TaskSpec,
};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// The full name libtest knows a test of this binary by
/// (`suite::groups::watcher_owner`), for the tests that re-execute the binary with
/// `--exact NAME`: `module` is the test's `module_path!()`, whose first segment (the
/// crate, `all`) libtest leaves out.
pub fn test_name(module: &str, test: &str) -> String {
    match module.split_once("::") {
        Some((_crate, path)) => format!("{path}::{test}"),
        None => test.to_owned(),
    }
}

/// Entries made in and removed from the system's temporary directory, where every test
/// here makes its directories. The fence's tests (`suite::fence`) build fences on a
/// listing of that directory and compare them, so nothing may change it while one of
/// them runs: each holds it alone ([`tmp_alone`]), one at a time, and every other
/// test's directory ([`TempDir`]) holds it shared from its making to its removal.
/// Shared holders never wait for one another (a test may hold two directories), only
/// for a test that holds it alone; that one waits until no directory is left.
static TMP: Mutex<Tmp> = Mutex::new(Tmp {
    shared: 0,
    alone: false,
});
static TMP_CHANGED: Condvar = Condvar::new();

struct Tmp {
    shared: usize,
    alone: bool,
}

fn tmp_wait(until: impl Fn(&Tmp) -> bool) -> std::sync::MutexGuard<'static, Tmp> {
    let mut tmp = TMP.lock().unwrap_or_else(PoisonError::into_inner);
    while !until(&tmp) {
        tmp = TMP_CHANGED
            .wait(tmp)
            .unwrap_or_else(PoisonError::into_inner);
    }
    tmp
}

/// The temporary directory held alone (see [`TMP`]) until dropped.
#[must_use]
pub struct TmpAlone(());

pub fn tmp_alone() -> TmpAlone {
    tmp_wait(|t| !t.alone && t.shared == 0).alone = true;
    TmpAlone(())
}

impl Drop for TmpAlone {
    fn drop(&mut self) {
        TMP.lock().unwrap_or_else(PoisonError::into_inner).alone = false;
        TMP_CHANGED.notify_all();
    }
}

struct TmpShared(());

impl TmpShared {
    fn new() -> TmpShared {
        tmp_wait(|t| !t.alone).shared += 1;
        TmpShared(())
    }
}

impl Drop for TmpShared {
    fn drop(&mut self) {
        TMP.lock().unwrap_or_else(PoisonError::into_inner).shared -= 1;
        TMP_CHANGED.notify_all();
    }
}

/// `berth_test_support`'s [`TempDir`](berth_test_support::TempDir), holding the
/// temporary directory shared (see [`TMP`]) until it is removed.
pub struct TempDir {
    // Dropped in this order: the directory is removed before the hold ends.
    dir: berth_test_support::TempDir,
    _shared: TmpShared,
}

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let shared = TmpShared::new();
        TempDir {
            dir: berth_test_support::TempDir::new(tag),
            _shared: shared,
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// A fresh directory under the system temp dir (never the temp dir itself, which the
/// rules refuse), removed at drop.
pub struct Sandbox {
    pub root: PathBuf,
    _dir: TempDir,
}

impl Sandbox {
    pub fn new() -> Sandbox {
        let dir = TempDir::new("la");
        std::fs::create_dir_all(dir.path().join("usr7q")).unwrap();
        let sb = Sandbox {
            root: dir.path().to_owned(),
            _dir: dir,
        };
        std::fs::create_dir_all(sb.side()).unwrap();
        let config = sb.root.join("berth-config");
        std::fs::create_dir_all(&config).unwrap();
        std::fs::write(
            config.join("settings.jsonc"),
            format!("{{ {} }}", sb.fence()),
        )
        .unwrap();
        sb
    }

    /// Where the tests' agents leave what the test reads (logs, pids, markers): outside
    /// their directories, so declared to the fence in the user settings ([`Sandbox::fence`]).
    pub fn side(&self) -> PathBuf {
        self.root.join("side")
    }

    /// The user settings' `fence` key that lets agents write [`Sandbox::side`], for
    /// tests that write their own user settings.
    pub fn fence(&self) -> String {
        fence_for(&self.side())
    }

    pub fn home(&self) -> PathBuf {
        self.root.join("usr7q")
    }

    pub fn cfg(&self) -> ExecutorConfig {
        let mut cfg = ExecutorConfig::isolated(&self.root, Some(self.home()));
        cfg.grace = Duration::from_millis(500);
        cfg
    }

    pub fn executor(&self) -> NativeExecutor {
        NativeExecutor::new(self.cfg()).unwrap()
    }

    /// Creates `root/<rel>` as a directory.
    pub fn dir(&self, rel: &str) -> PathBuf {
        let p = self.root.join(rel);
        std::fs::create_dir_all(&p).unwrap();
        p
    }

    /// Writes an executable script at `root/bin/<name>`.
    pub fn script(&self, name: &str, body: &str) -> PathBuf {
        let p = self.dir("bin").join(name);
        std::fs::write(&p, body).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }
}

/// The user settings' `fence` key letting agents write `side`.
pub fn fence_for(side: &Path) -> String {
    format!(
        r#""fence": {{ "write": [{}] }}"#,
        serde_json::to_string(side.to_str().unwrap()).unwrap()
    )
}

pub fn lp(p: &Path) -> LocalPath {
    LocalPath::parse(berth_core::Platform::native(), p.to_str().unwrap()).unwrap()
}

pub fn agent(kind: AgentKind, command: &[&Path]) -> AgentSpec {
    AgentSpec {
        name: "test".into(),
        kind,
        command: command.iter().map(|p| p.display().to_string()).collect(),
        permissions: None,
    }
}

pub fn task(
    id: &str,
    session: &str,
    agent: AgentSpec,
    prompt: &str,
    placement: Placement,
) -> TaskSpec {
    TaskSpec {
        task_id: berth_core::TaskId::parse(id).unwrap(),
        session: SessionFacts {
            id: berth_core::SessionId::parse(session).unwrap(),
            title: "a test".into(),
            display: None,
        },
        agent,
        prompt: prompt.into(),
        placement,
        resume_id: None,
    }
}

pub fn in_place(dir: &Path) -> Placement {
    Placement::InPlace {
        dir: lp(dir),
        identity: None,
    }
}

/// Runs `task` to its end, collecting every event.
pub async fn run(exec: &NativeExecutor, task: TaskSpec) -> (TaskOutcome, Vec<ExecEvent>) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (_cancel_tx, cancel) = watch::channel(false);
    let outcome = exec.run_task(task, tx, cancel).await;
    let mut events = Vec::new();
    while let Ok(e) = rx.try_recv() {
        events.push(e);
    }
    (outcome, events)
}

/// Does what a restarted Berth does, `again` while `held` says a journal was seen in
/// use. A test's "crashed" run lived in this very process, and while another test's
/// thread spawns a child, the child holds a copy of every descriptor until its `exec`
/// closes them (`O_CLOEXEC`) — the journal's `flock` with them — so for that instant
/// a dropped journal still reads as held by a live Berth. A real restart never sees
/// that: the crashed process and its descriptors are gone.
pub fn after_restart<T>(again: impl Fn() -> T, held: impl Fn(&T) -> bool) -> T {
    for _ in 0..200 {
        let done = again();
        if !held(&done) {
            return done;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    again()
}

/// [`NativeExecutor::replay_leftovers`] as a restarted Berth runs it (see [`after_restart`]).
pub fn replay(exec: &NativeExecutor) -> berth_local_agent::inject::recover::ReplayReport {
    after_restart(|| exec.replay_leftovers(), |r| !r.in_use.is_empty())
}

/// Every file and directory under `dir` (relative path → content, or `<dir>`).
pub fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            let rel = p.strip_prefix(base).unwrap().display().to_string();
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                out.insert(rel, b"<dir>".to_vec());
                walk(base, &p, out);
            } else if ft.is_symlink() {
                out.insert(
                    rel,
                    format!("<link {}>", std::fs::read_link(&p).unwrap().display()).into_bytes(),
                );
            } else {
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// A `command` agent script that appends `start`/`end` nanosecond stamps to `log`
/// (outside the directory) around a short sleep, and writes a marker in its cwd.
pub fn stamping_agent(sb: &Sandbox, log: &Path) -> PathBuf {
    sb.script(
        "stamp.sh",
        &format!(
            "#!/bin/sh\necho \"start $(date +%s%N) $BERTH_TASK_ID\" >> {log}\nsleep 0.02\necho ran > ran-$BERTH_TASK_ID\necho \"end $(date +%s%N) $BERTH_TASK_ID\" >> {log}\n",
            log = log.display()
        ),
    )
}

/// Parses a stamp log into (start, end) intervals per task, and checks none overlap.
pub fn assert_no_overlap(log: &Path, expected: usize) {
    let text = std::fs::read_to_string(log).unwrap();
    let mut starts: BTreeMap<String, u128> = BTreeMap::new();
    let mut spans: Vec<(u128, u128, String)> = Vec::new();
    for line in text.lines() {
        let mut w = line.split_whitespace();
        let (kind, ts, id) = (
            w.next().unwrap(),
            w.next().unwrap().parse::<u128>().unwrap(),
            w.next().unwrap().to_owned(),
        );
        match kind {
            "start" => {
                starts.insert(id, ts);
            }
            _ => {
                let s = starts.remove(&id).unwrap();
                spans.push((s, ts, id));
            }
        }
    }
    assert_eq!(spans.len(), expected, "every task ran once: {text}");
    spans.sort();
    for w in spans.windows(2) {
        assert!(
            w[0].1 <= w[1].0,
            "tasks {} and {} overlapped: {:?} {:?}",
            w[0].2,
            w[1].2,
            w[0],
            w[1]
        );
    }
}
pub mod fakes;
