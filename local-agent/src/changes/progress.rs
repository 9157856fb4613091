//! How far a long snapshot is, for whoever waits on it: the run about to start its
//! agent, or a run waiting for the directory while its first snapshot is taken at link
//! time. A snapshot registers itself here by directory while it runs; a waiter reads
//! it ([`of`]) and says it ([`Report::text`]).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// What a snapshot is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Reading the directory for what differs from the last record (or from the
    /// repository's index): no count yet.
    Listing,
    /// Reading the files that differ: `done` of `total`.
    Reading,
    /// Writing the trees.
    Writing,
}

/// A running snapshot's counters.
#[derive(Debug, Default)]
pub struct Progress {
    phase: AtomicU8,
    done: AtomicU64,
    total: AtomicU64,
}

impl Progress {
    pub(super) fn phase(&self, p: Phase) {
        let v = match p {
            Phase::Listing => 0,
            Phase::Reading => 1,
            Phase::Writing => 2,
        };
        self.phase.store(v, Ordering::Relaxed);
    }

    pub(super) fn total(&self, n: u64) {
        self.total.store(n, Ordering::Relaxed);
    }

    pub(super) fn done(&self, n: u64) {
        self.done.store(n, Ordering::Relaxed);
    }

    /// `n` more done (workers counting side by side).
    pub(super) fn add(&self, n: u64) {
        self.done.fetch_add(n, Ordering::Relaxed);
    }
}

/// One reading of a snapshot's progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Report {
    pub phase: Phase,
    pub done: u64,
    pub total: u64,
}

/// `41000` as `41,000`.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

impl Report {
    /// `recording ~/code/mono: 41,000 of 100,000 files` (`dir` as displayed).
    pub fn text(&self, dir: &str) -> String {
        match self.phase {
            Phase::Listing => format!("recording {dir}: looking for changed files"),
            Phase::Reading => format!(
                "recording {dir}: {} of {} files",
                grouped(self.done),
                grouped(self.total)
            ),
            Phase::Writing => format!("recording {dir}: writing the record"),
        }
    }
}

type Active = Vec<(PathBuf, Arc<Progress>)>;

static ACTIVE: Mutex<Active> = Mutex::new(Vec::new());

fn active() -> MutexGuard<'static, Active> {
    ACTIVE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A snapshot's registration; dropping it ends it.
pub(super) struct Registered {
    dir: PathBuf,
    pub(super) progress: Arc<Progress>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        active().retain(|(d, p)| !(d == &self.dir && Arc::ptr_eq(p, &self.progress)));
    }
}

/// Registers a snapshot of `dir` beginning now.
pub(super) fn register(dir: &Path) -> Registered {
    let progress = Arc::new(Progress::default());
    active().push((dir.to_owned(), progress.clone()));
    Registered {
        dir: dir.to_owned(),
        progress,
    }
}

/// How far the snapshot of `dir` running now is, if one is.
pub fn of(dir: &Path) -> Option<Report> {
    let active = active();
    let (_, p) = active.iter().find(|(d, _)| d == dir)?;
    let phase = match p.phase.load(Ordering::Relaxed) {
        0 => Phase::Listing,
        1 => Phase::Reading,
        _ => Phase::Writing,
    };
    Some(Report {
        phase,
        done: p.done.load(Ordering::Relaxed),
        total: p.total.load(Ordering::Relaxed),
    })
}

/// A wait shorter than this is not reported.
pub const FIRST_AFTER: Duration = Duration::from_millis(300);

/// Reports after the first, at most this often.
pub const EVERY: Duration = Duration::from_secs(1);

/// Runs `f` (which snapshots `dir`), calling `say` with its progress after
/// [`FIRST_AFTER`] and then every [`EVERY`] while it lasts, from another thread.
pub fn reported<T>(dir: &Path, mut say: impl FnMut(Report) + Send, f: impl FnOnce() -> T) -> T {
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        s.spawn(move || {
            let mut wait = FIRST_AFTER;
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(wait) {
                if let Some(r) = of(dir) {
                    say(r);
                }
                wait = EVERY;
            }
        });
        let out = f();
        drop(stop);
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_read_as_people_write_them() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(41_000), "41,000");
        assert_eq!(grouped(1_234_567), "1,234,567");
        let r = Report {
            phase: Phase::Reading,
            done: 41_000,
            total: 100_000,
        };
        assert_eq!(
            r.text("~/code/mono"),
            "recording ~/code/mono: 41,000 of 100,000 files"
        );
    }

    #[test]
    fn a_registration_is_seen_while_it_lasts() {
        let dir = Path::new("/berth-progress-test");
        assert_eq!(of(dir), None);
        let reg = register(dir);
        reg.progress.phase(Phase::Reading);
        reg.progress.total(10);
        reg.progress.done(4);
        assert_eq!(
            of(dir),
            Some(Report {
                phase: Phase::Reading,
                done: 4,
                total: 10
            })
        );
        drop(reg);
        assert_eq!(of(dir), None);
    }
}
