//! The process groups of running agents, so nothing an agent started outlives Berth.
//!
//! `PR_SET_PDEATHSIG` reaches only the agent itself; what it started stays in its
//! process group. Two things cover a Berth that dies mid-run (a SIGKILL, a crash):
//!
//! - one [`Watcher`] per executor, a tiny `sh` outside every agent's group that reads a
//!   pipe only Berth holds: each agent registers its group there (`+PGID`, written by
//!   the agent itself right before its exec, so nothing it starts is unwatched), Berth
//!   tells it the leader's start time (`=PGID:START`) and unregisters it once gone
//!   (`-PGID`); when Berth dies the pipe closes and the watcher kills every group still
//!   registered whose leader, if any, still has that start time;
//! - a [`GroupRecord`] per agent under `$BERTH_HOME/run/agents/`, written right after
//!   the spawn and held under `flock` for the run, so [`stop_leftovers`] at the next
//!   start stops whatever the watcher did not. It is not synced: it only matters
//!   while the agent's processes live, and they live only while the kernel that
//!   holds the record in its page cache does (a power loss takes both).
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
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long a killed group may take to disappear before Berth stops waiting.
const GONE_WITHIN: Duration = Duration::from_secs(2);

/// The watcher's script. Each line is one of:
///
/// - `+PGID`: an agent, about to exec (written by the agent itself): watch its group;
/// - `=PGID:START`: Berth read that leader's start time (on Linux, right after the
///   spawn, while the leader is its unreaped child, so the number cannot have been
///   reused): note it on the newest entry of that group without one;
/// - `-PGID`: that group is gone: forget the oldest such entry.
///
/// At end of file (Berth is gone) it kills each group still noted, unless its number
/// now leads a process with another start time than the one noted. A group registered
/// but not yet confirmed (Berth died within the spawn) is killed if its number names a
/// group. Only shell builtins run per line: a registration costs no fork.
///
/// The start time is read by the watcher only at the end: `read` takes a file one byte
/// per system call, so reading a `stat` line at each registration cost the watcher
/// about 250 system calls per agent, on the CPU the agent was starting on. `shift`
/// past the end would end the shell, so a stat line cut short (a command name holding
/// a newline) is checked first: it gives no start time, like a leader that is gone.
#[cfg(target_os = "linux")]
const WATCH_START: &str = r#"exec 2>/dev/null; set -f; g=
start() { t=; [ -r /proc/$1/stat ] && read -r l < /proc/$1/stat && set -- ${l##*") "} && [ $# -ge 20 ] && shift 19 && t=$1; }
noted() { t=; }
"#;

/// macOS has no `/proc`: the start time comes from `ps` (a fork), in the format
/// Berth does not use, so the watcher notes it itself at each registration and Berth
/// sends no `=` line. The rest of the script is the same.
#[cfg(not(target_os = "linux"))]
const WATCH_START: &str = r#"exec 2>/dev/null; set -f; g=
start() { t=$(ps -o lstart= -p "$1" | tr -s ' ' _); }
noted() { start "$1"; }
"#;

const WATCH_LOOP: &str = r#"while read -r line; do
  p=${line#?}
  case $line in
    +*) case $p in ''|*[!0-9]*) continue;; esac
        noted "$p"; g="$g $p:$t";;
    =*) q=${p%%:*}; s=${p#*:}
        case $q in ''|*[!0-9]*) continue;; esac
        case $s in ''|*[!0-9]*) continue;; esac
        n= d=; for e in $g; do n="$n $e"; [ "$e" = "$q:" ] && d=$n; done
        [ -n "$d" ] && g="${d% *} $q:$s${n#"$d"}";;
    -*) case $p in ''|*[!0-9]*) continue;; esac
        n= d=; for e in $g; do if [ -z "$d" ] && [ "${e%%:*}" = "$p" ]; then d=1; else n="$n $e"; fi; done; g=$n;;
  esac
done
for e in $g; do p=${e%%:*}; s=${e#*:}; start "$p"; { [ -z "$t" ] || [ -z "$s" ] || [ "$t" = "$s" ]; } && kill -s KILL -- -$p; done"#;

/// The watcher's whole script: how this platform reads a start time, then the loop.
fn watch_script() -> String {
    format!("{WATCH_START}{WATCH_LOOP}")
}

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

/// The start time of `pid`, if it exists: field 22 of `/proc/<pid>/stat` on Linux
/// (clock ticks since boot), `ps -o lstart=` on macOS (seconds since the epoch). Only
/// ever compared with another reading on the same machine.
pub fn start_time(pid: i32) -> Option<u64> {
    stat(pid).map(|s| s.start)
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Stat {
    state: char,
    pgrp: i32,
    start: u64,
}

#[cfg(target_os = "linux")]
fn stat(pid: i32) -> Option<Stat> {
    // Read into a buffer it fits (a few hundred bytes): one read and the end, not
    // `read_to_string`'s size probe and doubling reads from 32 bytes (this runs at
    // every spawn).
    let mut file = std::fs::File::open(format!("/proc/{pid}/stat")).ok()?;
    let mut buf = [0u8; 4096];
    let mut len = 0;
    while len < buf.len() {
        match std::io::Read::read(&mut file, &mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    // A command name need not be UTF-8; the fields after it are.
    let text = String::from_utf8_lossy(&buf[..len]);
    // The command name may hold spaces and parentheses; it ends at the last ')'.
    let (_, rest) = text.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(Stat {
        state: fields.first()?.chars().next()?,
        pgrp: fields.get(2)?.parse().ok()?,
        start: fields.get(19)?.parse().ok()?,
    })
}

/// macOS: one `ps` line, `STAT PGID LSTART` (`S 4242 Tue Dec  1 05:33:08 2026`).
#[cfg(not(target_os = "linux"))]
fn stat(pid: i32) -> Option<Stat> {
    let out = std::process::Command::new("ps")
        .args(["-o", "stat=,pgid=,lstart=", "-p", &pid.to_string()])
        .stderr(Stdio::null())
        .output()
        .ok()?;
    parse_ps(String::from_utf8_lossy(&out.stdout).lines().next()?)
}

/// Parses `STAT PGID LSTART` as `ps` prints it.
#[cfg_attr(target_os = "linux", allow(dead_code))]
fn parse_ps(line: &str) -> Option<Stat> {
    let mut words = line.split_whitespace();
    let state = words.next()?.chars().next()?;
    let pgrp = words.next()?.parse().ok()?;
    let rest: Vec<&str> = words.collect();
    Some(Stat {
        state,
        pgrp,
        start: parse_lstart(&rest.join(" "))?,
    })
}

/// `Tue Dec  1 05:33:08 2026` (ps's `lstart`, local time) as seconds since the epoch
/// of that local clock: comparable with another reading, which is all it is for.
#[cfg_attr(target_os = "linux", allow(dead_code))]
fn parse_lstart(s: &str) -> Option<u64> {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let w: Vec<&str> = s.split_whitespace().collect();
    let [_, month, day, time, year] = w.as_slice() else {
        return None;
    };
    let m = MONTHS.iter().position(|x| x == month)? as i64 + 1;
    let d: i64 = day.parse().ok()?;
    let y: i64 = year.parse().ok()?;
    let mut hms = time.split(':').map(|x| x.parse::<i64>().ok());
    let (h, mi, se) = (hms.next()??, hms.next()??, hms.next()??);
    // Days from civil (Howard Hinnant).
    let (y2, m2) = if m <= 2 { (y - 1, m + 9) } else { (y, m - 3) };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let doy = (153 * m2 + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    u64::try_from(days * 86_400 + h * 3600 + mi * 60 + se).ok()
}

/// The live (not zombie) processes of group `pgid`.
pub fn members(pgid: i32) -> Vec<i32> {
    let Some(id) = Pid::from_raw(pgid) else {
        return Vec::new();
    };
    if rustix::process::test_kill_process_group(id).is_err() {
        return Vec::new();
    }
    members_listed(pgid)
}

/// macOS: every process's pid, group and state from one `ps`.
#[cfg(not(target_os = "linux"))]
fn members_listed(pgid: i32) -> Vec<i32> {
    let Ok(out) = std::process::Command::new("ps")
        .args(["-axo", "pid=,pgid=,stat="])
        .stderr(Stdio::null())
        .output()
    else {
        return Vec::new();
    };
    parse_ps_table(&String::from_utf8_lossy(&out.stdout), pgid)
}

/// The pids of `pgid`'s live members in `ps -axo pid=,pgid=,stat=` output.
#[cfg_attr(target_os = "linux", allow(dead_code))]
fn parse_ps_table(text: &str, pgid: i32) -> Vec<i32> {
    text.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let pid: i32 = w.next()?.parse().ok()?;
            let group: i32 = w.next()?.parse().ok()?;
            let state = w.next()?.chars().next()?;
            (group == pgid && state != 'Z').then_some(pid)
        })
        .collect()
}

#[cfg(target_os = "linux")]
fn members_listed(pgid: i32) -> Vec<i32> {
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
    /// Writes the record of `group` as `<dir>/<pgid>-<start>.json`, locked. No fsync:
    /// a record outlives a crashed Berth in the page cache, and nothing it names
    /// survives a crash of the machine.
    pub fn create(dir: &Path, group: &Group) -> std::io::Result<GroupRecord> {
        berth_host::private::dir(dir)?;
        let path = dir.join(format!("{}-{}.json", group.pgid, group.start));
        let mut file = File::from(rustix::fs::open(
            &path,
            OFlags::CREATE | OFlags::TRUNC | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::RUSR | Mode::WUSR,
        )?);
        rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive)?;
        file.write_all(serde_json::to_string(group)?.as_bytes())?;
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
    let abandoned = crate::dir::lock::abandoned(dir, "json");
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

/// The executor's watcher: one process outside every agent's group that kills the
/// groups still registered should Berth die (it waits for the end of a pipe that only
/// Berth holds). Started at the first [`Watcher::pipe`], and again there if it died.
/// Dropping it stops the process without it acting.
#[derive(Debug, Default)]
pub struct Watcher {
    running: Mutex<Option<Running>>,
}

#[derive(Debug)]
struct Running {
    child: std::process::Child,
    pipe: Arc<WatchPipe>,
}

/// The write end of a watcher's pipe: close-on-exec and non-blocking (a watcher that
/// stopped reading fails a registration instead of hanging a spawn). It stays open
/// while any holder lives, so a descriptor number handed to a child is never reused
/// under it.
#[derive(Debug)]
pub struct WatchPipe(OwnedFd);

impl Watcher {
    pub fn new() -> Watcher {
        Watcher::default()
    }

    /// The pipe of the running watcher, starting one if none runs yet or it died.
    pub fn pipe(&self) -> std::io::Result<Arc<WatchPipe>> {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(r) = running.as_mut()
            && matches!(r.child.try_wait(), Ok(None))
        {
            return Ok(r.pipe.clone());
        }
        let fresh = Running::start()?;
        let pipe = fresh.pipe.clone();
        // A watcher found dead was reaped by `try_wait`.
        *running = Some(fresh);
        Ok(pipe)
    }

    /// The watcher's pid, if one was started and has not been found dead.
    pub fn pid(&self) -> Option<u32> {
        let running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        running.as_ref().map(|r| r.child.id())
    }
}

impl Running {
    /// Starts the watcher in its own process group, so a terminal's signals to Berth's
    /// group leave it alone.
    fn start() -> std::io::Result<Running> {
        let mut child = std::process::Command::new("/bin/sh")
            .args(["-c", &watch_script()])
            .env_clear()
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()?;
        let Some(stdin) = child.stdin.take() else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(std::io::Error::other("the watcher has no stdin"));
        };
        let fd = OwnedFd::from(stdin);
        rustix::fs::fcntl_setfl(&fd, OFlags::NONBLOCK)?;
        Ok(Running {
            child,
            pipe: Arc::new(WatchPipe(fd)),
        })
    }
}

impl Drop for Running {
    /// Kills the watcher before its pipe closes, so it does not act.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl WatchPipe {
    /// The raw descriptor, for a child to write its [`Line::watch`] between fork and
    /// exec. Valid while `self` lives.
    pub fn raw(&self) -> i32 {
        self.0.as_raw_fd()
    }

    /// Writes `line` in one `write` (atomic: it is shorter than `PIPE_BUF`).
    pub fn send(&self, line: &Line) -> std::io::Result<()> {
        let bytes = line.as_bytes();
        if rustix::io::write(&self.0, bytes)? == bytes.len() {
            Ok(())
        } else {
            Err(std::io::Error::other("a short write to the watcher's pipe"))
        }
    }
}

/// One line of the watcher's protocol, on the stack (a child writes it between fork and
/// exec, where nothing may allocate).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Line {
    /// The longest line: `=`, a pgid (10 digits), `:`, a start time (20), a newline.
    bytes: [u8; 33],
    len: usize,
}

impl Line {
    /// `+PGID`: watch this group.
    pub fn watch(pgid: i32) -> Line {
        Line::begin(b'+', pgid).end()
    }

    /// `-PGID`: this group is gone; forget it.
    pub fn forget(pgid: i32) -> Line {
        Line::begin(b'-', pgid).end()
    }

    /// `=PGID:START`: the start time of the group's leader, read by Berth while the
    /// leader is its unreaped child.
    pub fn confirm(pgid: i32, start: u64) -> Line {
        let mut line = Line::begin(b'=', pgid);
        line.push(b':');
        line.push_decimal(start);
        line.end()
    }

    /// The sign and the pgid, without the newline.
    fn begin(sign: u8, pgid: i32) -> Line {
        let mut line = Line {
            bytes: [0u8; 33],
            len: 0,
        };
        line.push(sign);
        line.push_decimal(u64::from(pgid.unsigned_abs()));
        line
    }

    fn end(mut self) -> Line {
        self.push(b'\n');
        self
    }

    fn push(&mut self, byte: u8) {
        self.bytes[self.len] = byte;
        self.len += 1;
    }

    /// Appends `n` in decimal, without allocating.
    fn push_decimal(&mut self, mut n: u64) {
        let mut digits = [0u8; 20];
        let mut len = 0;
        loop {
            digits[len] = b'0' + (n % 10) as u8;
            len += 1;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        for &d in digits[..len].iter().rev() {
            self.push(d);
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// macOS's `ps` output (the data `proc_pidinfo` would give), parsed on any host.
    #[test]
    fn ps_output_parses_into_state_group_and_start() {
        let s = parse_ps("Ss   4242 Tue Dec  1 05:33:08 2026").unwrap();
        assert_eq!((s.state, s.pgrp), ('S', 4242));
        // 2026-12-01T05:33:08 as seconds on that clock.
        assert_eq!(s.start, 1_796_103_188);
        assert_eq!(parse_lstart("Thu Jan  1 00:00:00 1970"), Some(0));
        assert_eq!(
            parse_lstart("Sat Feb 29 12:00:01 2020"),
            Some(1_582_977_601)
        );
        assert_eq!(parse_lstart("Tue Smarch 1 05:33:08 2026"), None);
        assert_eq!(parse_ps("Z+ 7 nonsense"), None);
        let table = "  501   500 S\n  502   500 Z\n  503   777 R+\n  504   500 R\n";
        assert_eq!(parse_ps_table(table, 500), [501, 504]);
    }
    use super::Line;

    #[test]
    fn lines_are_a_sign_a_decimal_pgid_and_a_newline() {
        for (line, text) in [
            (Line::watch(1), "+1\n"),
            (Line::forget(10), "-10\n"),
            (Line::watch(4194304), "+4194304\n"),
            (Line::forget(i32::MAX), "-2147483647\n"),
            (Line::confirm(4242, 0), "=4242:0\n"),
            (
                Line::confirm(i32::MAX, u64::MAX),
                "=2147483647:18446744073709551615\n",
            ),
        ] {
            assert_eq!(std::str::from_utf8(line.as_bytes()), Ok(text));
        }
    }
}
