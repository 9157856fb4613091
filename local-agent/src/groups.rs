//! The process groups of running agents, so nothing an agent started outlives Berth.
//!
//! `PR_SET_PDEATHSIG` reaches only the agent itself; what it started stays in its
//! process group. Two things cover a Berth that dies mid-run (a SIGKILL, a crash):
//!
//! - a [`Watcher`] per agent, a tiny `sh` outside the group that blocks reading a pipe
//!   only Berth holds; when Berth dies the pipe closes and it kills the group;
//! - a [`GroupRecord`] per agent under `$BERTH_HOME/run/agents/`, written and synced
//!   right after the spawn and held under `flock` for the run, so
//!   [`stop_leftovers`] at the next start stops whatever the watcher did not.
//!
//! A process group is named by its leader's pid and the leader's start time (field 22
//! of `/proc/<pid>/stat`): a pgid whose leader now has another start time is someone
//! else's and is never signalled. While any member of a group lives the kernel keeps
//! its number allocated, so members found without a leader belong to the recorded
//! group.

use rustix::fs::{FlockOperation, Mode, OFlags};
use rustix::process::{Pid, Signal};
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::process::{Child, ChildStdin, Command};

/// How long a killed group may take to disappear before Berth stops waiting.
const GONE_WITHIN: Duration = Duration::from_secs(2);

/// The watcher's script. The agent writes its pid (its pgid) into the pipe before its
/// exec; the watcher notes the leader's start time, blocks until the pipe closes, then
/// kills the group unless its number now leads another process.
const WATCH: &str = r#"exec 2>/dev/null; read -r p || exit 0
start() { [ -r /proc/$p/stat ] && read -r l < /proc/$p/stat && set -- ${l##*") "} && shift 19 && echo "$1"; }
s=$(start); read -r _; now=$(start)
[ -z "$now" ] || [ "$now" = "$s" ] || exit 0
kill -s KILL -- -$p"#;

/// The durable record of one agent's process group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Group {
    pub pgid: i32,
    /// The leader's start time, in clock ticks since boot.
    pub start: u64,
    /// Where the agent ran, as shown to the user (`~/code/app`).
    pub dir: String,
}

/// A record file held (locked) by this process for the life of the run.
#[derive(Debug)]
pub struct GroupRecord {
    path: PathBuf,
    start: u64,
    _file: File,
}

/// What [`stop_leftovers`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StopReport {
    /// Groups killed: where their agent ran, and how many processes were left.
    pub stopped: Vec<(String, usize)>,
    /// Records left alone because a live Berth process holds them.
    pub in_use: Vec<PathBuf>,
}

/// The start time of `pid` (field 22 of `/proc/<pid>/stat`), if it exists.
pub fn start_time(pid: i32) -> Option<u64> {
    stat(pid).map(|s| s.start)
}

struct Stat {
    state: char,
    pgrp: i32,
    start: u64,
}

fn stat(pid: i32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses; it ends at the last ')'.
    let (_, rest) = text.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(Stat {
        state: fields.first()?.chars().next()?,
        pgrp: fields.get(2)?.parse().ok()?,
        start: fields.get(19)?.parse().ok()?,
    })
}

/// The live (not zombie) processes of group `pgid`.
pub fn members(pgid: i32) -> Vec<i32> {
    let Some(id) = Pid::from_raw(pgid) else {
        return Vec::new();
    };
    if rustix::process::test_kill_process_group(id).is_err() {
        return Vec::new();
    }
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| stat(*pid).is_some_and(|s| s.pgrp == pgid && s.state != 'Z'))
        .collect()
}

/// Whether `group` is still the recorded group: its leader is gone (its number stays
/// taken while members live) or is the same process.
fn is_recorded(group: &Group) -> bool {
    start_time(group.pgid).is_none_or(|start| start == group.start)
}

/// SIGKILLs group `pgid` and waits (up to [`GONE_WITHIN`]) until no member is left.
/// Returns whether it is gone.
pub fn kill_and_wait(pgid: i32) -> bool {
    let Some(id) = Pid::from_raw(pgid) else {
        return true;
    };
    let _ = rustix::process::kill_process_group(id, Signal::KILL);
    let deadline = Instant::now() + GONE_WITHIN;
    loop {
        if members(pgid).is_empty() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

impl GroupRecord {
    /// Writes and syncs the record of `group` as `<dir>/<pgid>-<start>.json`, locked.
    pub fn create(dir: &Path, group: &Group) -> std::io::Result<GroupRecord> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(format!("{}-{}.json", group.pgid, group.start));
        let mut file = File::from(rustix::fs::open(
            &path,
            OFlags::CREATE | OFlags::TRUNC | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::RUSR | Mode::WUSR,
        )?);
        rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive)?;
        file.write_all(serde_json::to_string(group)?.as_bytes())?;
        file.sync_data()?;
        File::open(dir)?.sync_all()?;
        Ok(GroupRecord {
            path,
            start: group.start,
            _file: file,
        })
    }

    /// The recorded leader's start time.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// Deletes the record: its group is gone.
    pub fn remove(self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Stops every process group recorded by a Berth that is no longer running and deletes
/// the records. Run at startup, before directories are restored: a survivor could
/// write into a directory after it was. A record whose group is gone, or whose pgid
/// now leads another process, is just deleted.
pub fn stop_leftovers(dir: &Path) -> StopReport {
    let mut report = StopReport::default();
    let abandoned = crate::journal::abandoned(dir, "json");
    report.in_use = abandoned.in_use;
    for (file, _lock) in abandoned.files {
        // A torn record (a crash while writing it) names no group to stop.
        let group = std::fs::read_to_string(&file)
            .ok()
            .and_then(|t| serde_json::from_str::<Group>(&t).ok());
        if let Some(group) = group.filter(is_recorded) {
            let left = members(group.pgid).len();
            if left > 0 {
                if !kill_and_wait(group.pgid) {
                    tracing::warn!(pgid = group.pgid, "a leftover process group did not stop");
                }
                report.stopped.push((group.dir, left));
            }
        }
        let _ = std::fs::remove_file(&file);
    }
    report
}

/// A process outside the agent's group that kills the group should Berth die: it
/// waits for the end of a pipe that only Berth holds.
#[derive(Debug)]
pub struct Watcher {
    child: Child,
    _pipe: ChildStdin,
}

impl Watcher {
    /// Starts a watcher waiting for the pid of the group's leader on [`Watcher::pipe`].
    /// It runs in its own process group, so a terminal's signals to Berth's group leave
    /// it alone.
    pub fn start() -> std::io::Result<Watcher> {
        let mut child = Command::new("/bin/sh")
            .args(["-c", WATCH])
            .env_clear()
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()?;
        let pipe = child
            .stdin
            .take()
            .ok_or_else(|| std::io::Error::other("the watcher has no stdin"))?;
        Ok(Watcher { child, _pipe: pipe })
    }

    /// The write end of the watcher's pipe (close-on-exec): the agent writes
    /// [`pid_line`] of its own pid into it between fork and exec.
    pub fn pipe(&self) -> i32 {
        self._pipe.as_raw_fd()
    }

    /// Stops the watcher without it acting (it is killed before its pipe closes).
    pub async fn stop(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }
}

/// `pid` in decimal and a newline, in a stack buffer (no allocation: it is written
/// between fork and exec): the bytes and how many of them are used.
pub fn pid_line(pid: i32) -> ([u8; 12], usize) {
    let mut digits = [0u8; 11];
    let mut n = pid.unsigned_abs();
    let mut len = 0;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let mut line = [0u8; 12];
    for i in 0..len {
        line[i] = digits[len - 1 - i];
    }
    line[len] = b'\n';
    (line, len + 1)
}

#[cfg(test)]
mod tests {
    use super::pid_line;

    #[test]
    fn pid_lines_are_decimal_and_end_in_a_newline() {
        for (pid, text) in [
            (1, "1\n"),
            (10, "10\n"),
            (4194304, "4194304\n"),
            (i32::MAX, "2147483647\n"),
        ] {
            let (line, len) = pid_line(pid);
            assert_eq!(std::str::from_utf8(&line[..len]), Ok(text));
        }
    }
}
