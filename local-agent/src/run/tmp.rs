//! The fenced tasks' temporary directories: `$BERTH_HOME/tmp/<name>` (0700), the only
//! place outside its directory where a fenced agent may write, given as `TMPDIR`, `TMP`
//! and `TEMP`, empty when the run starts, and gone once the run is over unless the
//! agent left it empty: then its session keeps it for its next run, with the fence
//! built on it ([`crate::run::fence::SessionFences`], at most 32 sessions), and it goes
//! when the session lets go of it ([`Tmps::let_go`]).
//!
//! Creating a directory and removing one are among the slowest system calls of a run
//! on ext4 (about 0.1 ms each on the machines Berth is measured on, against 0.01 ms for
//! a rename), and both used to sit on the path from the message to the task's end.
//! [`Tmps`] moves them off it:
//!
//! - empty directories are made ahead, in `$BERTH_HOME/tmp-ready/`; a run renames one
//!   to `tmp/<name>` (`RENAME_NOREPLACE`: never over another run's directory), or
//!   makes its own where none is ready (the first run, many at once, a filesystem
//!   without that rename);
//! - after the run, its directory is renamed out of `tmp/` to `$BERTH_HOME/tmp-done/`
//!   (removed in place where that fails), and a blocking thread empties `tmp-done/`
//!   and makes the next ready directories.
//!
//! `tmp/` therefore holds the directories of the runs in progress and the sessions'
//! kept ones (empty); what is left in any of the three by a Berth that stopped goes at
//! the next start ([`Tmps::sweep`]), reported where it was not empty.

use berth_core::TaskId;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// How many empty directories wait in `tmp-ready/`.
const READY: usize = 2;

/// The temporary directories of one Berth home (see the module's documentation).
#[derive(Debug)]
pub(crate) struct Tmps {
    /// `$BERTH_HOME/tmp`, `tmp-ready`, `tmp-done`.
    live: PathBuf,
    ready_dir: PathBuf,
    done_dir: PathBuf,
    /// Directories made ahead, in `ready_dir`, not yet given to a run.
    ready: Mutex<Vec<PathBuf>>,
    /// Whether the three directories were made (with Berth's modes) by this process.
    made: AtomicBool,
    /// Names of the ready directories: `<pid>-<n>`.
    next: AtomicU64,
    /// The background tidy: whether one runs, and whether it is asked to run again.
    tidy: Mutex<Tidy>,
}

#[derive(Debug, Default)]
struct Tidy {
    running: bool,
    again: bool,
}

impl Tmps {
    pub(crate) fn new(berth_home: &Path) -> Tmps {
        Tmps {
            live: berth_home.join("tmp"),
            ready_dir: berth_home.join("tmp-ready"),
            done_dir: berth_home.join("tmp-done"),
            ready: Mutex::new(Vec::new()),
            made: AtomicBool::new(false),
            next: AtomicU64::new(0),
            tidy: Mutex::new(Tidy::default()),
        }
    }

    /// `$BERTH_HOME/tmp`, where the runs' directories are.
    pub(crate) fn live(&self) -> &Path {
        &self.live
    }

    /// Makes `tmp/`, `tmp-ready/` and `tmp-done/` (0700) once per process; again
    /// whenever a call finds one missing.
    fn make_bases(&self) -> std::io::Result<()> {
        if self.made.load(Ordering::Acquire) {
            return Ok(());
        }
        for d in [&self.live, &self.ready_dir, &self.done_dir] {
            berth_host::private::dir(d)?;
        }
        self.made.store(true, Ordering::Release);
        Ok(())
    }

    /// The task's temporary directory, new and empty, 0700: a ready one renamed into
    /// place, else made here. Its name is short (the task id's last 12 characters):
    /// sockets the agent binds there must fit `sun_path` (108 bytes).
    pub(crate) fn take(&self, task_id: &TaskId) -> std::io::Result<PathBuf> {
        self.make_bases()?;
        let names = names(task_id);
        let spare = self.ready.lock().unwrap_or_else(|p| p.into_inner()).pop();
        if let Some(spare) = spare {
            for name in &names {
                let path = self.live.join(name);
                match rustix::fs::renameat_with(
                    rustix::fs::CWD,
                    &spare,
                    rustix::fs::CWD,
                    &path,
                    rustix::fs::RenameFlags::NOREPLACE,
                ) {
                    Ok(()) => return Ok(path),
                    // Another run's directory has that name: the next name.
                    Err(rustix::io::Errno::EXIST) => continue,
                    // Gone, or no such rename here: made in place below.
                    Err(_) => break,
                }
            }
            // Unused: emptied with the finished ones.
            let _ = std::fs::remove_dir(&spare);
        }
        let mut last = None;
        for name in &names {
            let path = self.live.join(name);
            let mut made = make(&path);
            if matches!(&made, Err(e) if e.kind() == std::io::ErrorKind::NotFound) {
                // `tmp/` went away under a running Berth: made again.
                self.made.store(false, Ordering::Release);
                self.make_bases()?;
                made = make(&path);
            }
            match made {
                Ok(()) => return Ok(path),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| std::io::Error::other("no name for the directory")))
    }

    /// Takes the run's directory `tmp` out of `tmp/` once its agent's group is gone:
    /// renamed to `tmp-done/` and removed there by a blocking thread, or removed here
    /// where the rename fails. A problem is returned as a line for the transcript.
    pub(crate) async fn release(self: &std::sync::Arc<Self>, tmp: &Path) -> Option<String> {
        let moved = self.to_done(tmp);
        let problem = if moved { None } else { remove_now(tmp).await };
        self.tidy();
        problem
    }

    /// Renames `tmp` into `tmp-done/` (never over another); whether it moved.
    fn to_done(&self, tmp: &Path) -> bool {
        tmp.file_name().is_some_and(|name| {
            rustix::fs::renameat_with(
                rustix::fs::CWD,
                tmp,
                rustix::fs::CWD,
                self.done_dir.join(name),
                rustix::fs::RenameFlags::NOREPLACE,
            )
            .is_ok()
        })
    }

    /// Lets go of a directory a session kept between its runs
    /// ([`crate::run::fence::SessionFences`]), no run in it: as [`Tmps::release`],
    /// without waiting (removed in place, on this thread, only where the rename fails).
    pub(crate) fn let_go(self: &std::sync::Arc<Self>, tmp: &Path) {
        let moved = self.to_done(tmp);
        if moved {
            self.tidy();
        } else {
            let _ = std::fs::remove_dir_all(tmp);
        }
    }

    /// Empties `tmp-done/` and refills `tmp-ready/`, on a blocking thread (inline
    /// outside a runtime); one at a time, again if asked meanwhile.
    pub(crate) fn tidy(self: &std::sync::Arc<Self>) {
        {
            let mut t = self.tidy.lock().unwrap_or_else(|p| p.into_inner());
            if t.running {
                t.again = true;
                return;
            }
            t.running = true;
        }
        let this = self.clone();
        let work = move || {
            loop {
                this.tidy_once();
                let mut t = this.tidy.lock().unwrap_or_else(|p| p.into_inner());
                if t.again {
                    t.again = false;
                    continue;
                }
                t.running = false;
                break;
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn_blocking(work);
            }
            Err(_) => work(),
        }
    }

    fn tidy_once(&self) {
        if let Ok(entries) = std::fs::read_dir(&self.done_dir) {
            for e in entries.flatten() {
                let _ = remove_entry(&e);
            }
        }
        if self.make_bases().is_err() {
            return;
        }
        loop {
            if self.ready.lock().unwrap_or_else(|p| p.into_inner()).len() >= READY {
                return;
            }
            let n = self.next.fetch_add(1, Ordering::Relaxed);
            let path = self.ready_dir.join(format!("{}-{n}", std::process::id()));
            match make(&path) {
                Ok(()) => self
                    .ready
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(path),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(_) => return,
            }
        }
    }

    /// Removes every task's temporary directory under `tmp/` (at startup, when no task
    /// of this home runs: those left by a Berth that stopped mid-run), one line per
    /// directory removed or left; and, silently, the empty ones (sessions' kept
    /// directories) and what `tmp-ready/` and `tmp-done/` hold (empty directories, and
    /// finished runs' ones already taken out of `tmp/`).
    pub(crate) fn sweep(&self) -> Vec<String> {
        self.ready.lock().unwrap_or_else(|p| p.into_inner()).clear();
        for d in [&self.ready_dir, &self.done_dir] {
            if let Ok(entries) = std::fs::read_dir(d) {
                for e in entries.flatten() {
                    let _ = remove_entry(&e);
                }
            }
        }
        let Ok(entries) = std::fs::read_dir(&self.live) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for e in entries.flatten() {
            let path = e.path();
            // A session's kept directory, empty: nothing was interrupted there.
            if is_empty_dir(&path) {
                let _ = std::fs::remove_dir(&path);
                continue;
            }
            out.push(match remove_entry(&e) {
                Ok(()) => format!(
                    "removed {}, an interrupted task's temporary directory",
                    path.display()
                ),
                Err(err) => format!(
                    "could not remove {}, an interrupted task's temporary directory: {err}",
                    path.display()
                ),
            });
        }
        out
    }
}

/// The names a task's directory may take, in order: the id's last 12 characters, the
/// whole id, then one of this process.
fn names(task_id: &TaskId) -> Vec<String> {
    // A task id is letters, digits, '-' and '_' only: one plain name as it is.
    let clean = task_id.to_string();
    let start = clean.char_indices().rev().nth(11).map_or(0, |(i, _)| i);
    [
        clean[start..].to_owned(),
        clean,
        format!("{}-{}", std::process::id(), task_id.as_str().len()),
    ]
    .into_iter()
    .filter(|n| !n.is_empty())
    .collect()
}

/// Whether the directory `tmp` holds nothing (one `getdents`): what a session keeps
/// for its next run. Unreadable counts as not empty.
pub(crate) fn is_empty_dir(tmp: &Path) -> bool {
    std::fs::read_dir(tmp).is_ok_and(|mut d| d.next().is_none())
}

/// Whether `tmp` is still a directory of this user's, 0700, not a symlink: a kept
/// directory is used again only then.
pub(crate) fn is_own_dir(tmp: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(tmp).is_ok_and(|m| {
        m.is_dir() && m.uid() == rustix::process::geteuid().as_raw() && m.mode() & 0o777 == 0o700
    })
}

/// Makes the one directory `path`, 0700.
fn make(path: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new().mode(0o700).create(path)
}

/// Removes one entry of a directory Berth made: a directory with what it holds, else
/// the entry itself; never through a symlink.
fn remove_entry(e: &std::fs::DirEntry) -> std::io::Result<()> {
    match e.file_type()? {
        t if t.is_dir() => std::fs::remove_dir_all(e.path()),
        _ => std::fs::remove_file(e.path()),
    }
}

/// Removes `tmp` where it is: an empty one here, a full one on a blocking thread.
async fn remove_now(tmp: &Path) -> Option<String> {
    match std::fs::remove_dir(tmp) {
        Ok(()) => return None,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(_) => {}
    }
    let owned = tmp.to_owned();
    match tokio::task::spawn_blocking(move || std::fs::remove_dir_all(&owned)).await {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(format!(
            "could not remove the task's temporary directory {}: {e}",
            tmp.display()
        )),
        Err(e) => Some(format!("internal error: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::sync::Arc;

    fn home(tag: &str) -> PathBuf {
        let h = std::env::temp_dir().join(format!("berth-run-tmp-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&h);
        std::fs::create_dir_all(&h).unwrap();
        h
    }

    fn id() -> TaskId {
        TaskId::parse("t_01HZZZZZZZZZZZZZZZZZZZZZZZ").unwrap()
    }

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    fn names_in(d: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .map(|r| {
                r.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }

    #[test]
    fn the_tmp_name_is_short_and_unique() {
        let h = home("names");
        let tmps = Tmps::new(&h);
        let a = tmps.take(&id()).unwrap();
        let b = tmps.take(&id()).unwrap();
        assert_ne!(a, b);
        assert_eq!(a.file_name().unwrap().len(), 12);
        assert_eq!(a.parent(), Some(tmps.live()));
        let _ = std::fs::remove_dir_all(&h);
    }

    #[test]
    fn a_ready_directory_is_renamed_into_place_never_over_a_running_one() {
        let h = home("ready");
        let tmps = Arc::new(Tmps::new(&h));
        tmps.tidy(); // outside a runtime: inline
        assert_eq!(names_in(&h.join("tmp-ready")).len(), READY);
        let ready_before = tmps.ready.lock().unwrap().clone();
        // A run holds the short name: the ready one takes the next name, and the
        // running one is untouched.
        std::fs::create_dir(h.join("tmp").join("ZZZZZZZZZZZZ")).unwrap();
        std::fs::write(h.join("tmp/ZZZZZZZZZZZZ/theirs"), "x").unwrap();
        let a = tmps.take(&id()).unwrap();
        assert_eq!(a, h.join("tmp").join(id().as_str()));
        assert!(h.join("tmp/ZZZZZZZZZZZZ/theirs").exists());
        assert_eq!(mode(&a), 0o700);
        assert!(names_in(&a).is_empty());
        assert_eq!(names_in(&h.join("tmp-ready")).len(), READY - 1);
        assert!(
            !ready_before.last().unwrap().exists(),
            "the ready one was used"
        );
        let _ = std::fs::remove_dir_all(&h);
    }

    #[tokio::test]
    async fn a_released_directory_leaves_tmp_at_once_and_is_removed_after() {
        let h = home("release");
        let tmps = Arc::new(Tmps::new(&h));
        let t = tmps.take(&id()).unwrap();
        std::fs::create_dir(t.join("sub")).unwrap();
        std::fs::write(t.join("sub/f"), "x").unwrap();
        std::os::unix::fs::symlink("/", t.join("root")).unwrap();
        assert_eq!(tmps.release(&t).await, None);
        assert!(!t.exists());
        assert!(names_in(tmps.live()).is_empty());
        // The tidy runs on a blocking thread: tmp-done empties, tmp-ready fills.
        for _ in 0..500 {
            if names_in(&h.join("tmp-done")).is_empty()
                && names_in(&h.join("tmp-ready")).len() == READY
            {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(names_in(&h.join("tmp-done")).is_empty());
        assert_eq!(names_in(&h.join("tmp-ready")).len(), READY);
        let _ = std::fs::remove_dir_all(&h);
    }

    #[tokio::test]
    async fn without_the_side_directories_a_run_still_gets_and_loses_its_own() {
        let h = home("fallback");
        let tmps = Arc::new(Tmps::new(&h));
        let t = tmps.take(&id()).unwrap();
        // Someone removed tmp-done: the release removes in place.
        std::fs::remove_dir_all(h.join("tmp-done")).unwrap();
        std::fs::write(t.join("f"), "x").unwrap();
        assert_eq!(tmps.release(&t).await, None);
        assert!(!t.exists());
        let _ = std::fs::remove_dir_all(&h);
    }

    #[test]
    fn the_sweep_reports_what_interrupted_runs_left_in_tmp_alone() {
        let h = home("sweep");
        let tmps = Arc::new(Tmps::new(&h));
        tmps.tidy();
        let stale = tmps.take(&id()).unwrap();
        std::fs::write(stale.join("left"), "x").unwrap();
        // A session's kept directory, empty: removed without a word.
        let kept = tmps.take(&id()).unwrap();
        std::fs::create_dir(h.join("tmp-done/old")).unwrap();
        let lines = tmps.sweep();
        assert!(!kept.exists());
        assert_eq!(
            lines,
            vec![format!(
                "removed {}, an interrupted task's temporary directory",
                stale.display()
            )]
        );
        for d in ["tmp", "tmp-ready", "tmp-done"] {
            assert!(names_in(&h.join(d)).is_empty(), "{d}");
        }
        // Nothing ready is remembered: the next run makes its own.
        assert!(tmps.take(&id()).is_ok());
        let _ = std::fs::remove_dir_all(&h);
    }
}
