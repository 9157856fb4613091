//! Berth's macro benchmarks (issue 7): each drives a real `berth serve` in a fresh
//! temporary home and returns [`Row`]s held against the goals the issues set.
//!
//! `scripts/bench.sh` runs them in release mode through the `berth-bench` binary and
//! regenerates `BENCHMARKS.md`; `tests/tests/suite/bench_smoke.rs` runs them with tiny
//! counts so they cannot rot. Timings are reported here, never asserted.

pub mod approvals;
pub mod chat;
pub mod dispatch;
pub mod first;
pub mod footprint;
pub mod http;
pub mod micro;
pub mod postgres;
pub mod reads;
pub mod remote;
pub mod report;
pub mod stream;
pub mod throughput;

pub use report::{Goal, Machine, Report, Row, Verdict, quantile};

use crate::Berth;
use anyhow::{Context as _, Result};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// How much work each benchmark does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `full`, `quick` or `tiny`.
    pub mode: &'static str,
    /// Round trips per dispatch variant.
    pub dispatch_messages: usize,
    /// Requests the approval benchmark answers (after its warm-up).
    pub approval_requests: usize,
    /// Message pieces the streaming benchmark times.
    pub stream_chunks: usize,
    pub throughput_sessions: usize,
    pub throughput_messages: usize,
    /// Connections submitting messages at once.
    pub submitters: usize,
    pub list_sessions: usize,
    pub list_requests: usize,
    pub transcript_lines: usize,
    pub transcript_reads: usize,
    /// Messages to the long-polling daemon, and to the one polling every second.
    pub remote_messages: usize,
    pub poll_messages: usize,
    /// berth-server on SQLite against PostgreSQL (issue 16): timed round trips per
    /// configuration, and its throughput run's sessions × messages.
    pub pg_round_trips: usize,
    pub pg_sessions: usize,
    pub pg_messages: usize,
    /// Criterion's `--warm-up-time` and `--measurement-time` for core and native, in
    /// seconds; `None` skips the micro benchmarks.
    pub criterion: Option<CriterionTimes>,
    /// The first message in a big directory (issue 37): repository sizes in files
    /// (the largest also as a plain directory), and fresh servers per size.
    pub first_files: Vec<usize>,
    pub first_reps: usize,
    /// `--compare`'s big repository, in files: the change record's steady state.
    pub compare_big_files: usize,
    /// The workspace root (Cargo.toml, target/, web/ui/pkg).
    pub workspace: PathBuf,
}

/// Criterion's time settings, in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CriterionTimes {
    pub warm_up: u32,
    pub core_measure: u32,
    pub native_measure: u32,
    /// Runs the 20,000-file `git worktree add` + `remove` (about 20 s an iteration
    /// here, and criterion takes at least 10).
    pub big_worktree: bool,
}

impl Config {
    /// The figures issue 7 names: 1,000 round trips, 100 × 20 tasks, 10,000 sessions.
    pub fn full() -> Config {
        Config {
            mode: "full",
            dispatch_messages: 1_000,
            approval_requests: 1_000,
            stream_chunks: 1_000,
            throughput_sessions: 100,
            throughput_messages: 20,
            submitters: 4,
            list_sessions: 10_000,
            list_requests: 20,
            transcript_lines: 5_000,
            transcript_reads: 5,
            remote_messages: 1_000,
            poll_messages: 20,
            pg_round_trips: 1_000,
            pg_sessions: 100,
            pg_messages: 20,
            criterion: Some(CriterionTimes {
                warm_up: 1,
                core_measure: 2,
                native_measure: 3,
                big_worktree: true,
            }),
            first_files: vec![1_000, 10_000, 100_000],
            compare_big_files: 20_000,
            first_reps: 3,
            workspace: workspace_root(),
        }
    }

    /// About two minutes: smaller counts, shorter criterion runs.
    pub fn quick() -> Config {
        Config {
            mode: "quick",
            dispatch_messages: 100,
            approval_requests: 200,
            stream_chunks: 200,
            throughput_sessions: 20,
            throughput_messages: 5,
            list_sessions: 1_000,
            transcript_reads: 3,
            remote_messages: 100,
            poll_messages: 5,
            pg_round_trips: 200,
            pg_sessions: 50,
            pg_messages: 10,
            criterion: Some(CriterionTimes {
                warm_up: 1,
                core_measure: 1,
                native_measure: 1,
                big_worktree: false,
            }),
            first_files: vec![1_000, 10_000],
            compare_big_files: 20_000,
            first_reps: 1,
            ..Config::full()
        }
    }

    /// A few of everything and no criterion: for the smoke test.
    pub fn tiny() -> Config {
        Config {
            mode: "tiny",
            dispatch_messages: 3,
            approval_requests: 5,
            stream_chunks: 10,
            throughput_sessions: 3,
            throughput_messages: 2,
            submitters: 2,
            list_sessions: 5,
            list_requests: 2,
            transcript_lines: 50,
            transcript_reads: 1,
            remote_messages: 3,
            poll_messages: 2,
            pg_round_trips: 3,
            pg_sessions: 2,
            pg_messages: 2,
            criterion: None,
            first_files: vec![20, 200],
            compare_big_files: 500,
            first_reps: 1,
            workspace: workspace_root(),
        }
    }
}

/// The workspace this crate was built in.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_owned)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// The `cat` agent every dispatch and throughput benchmark uses.
pub const CAT_AGENT: &str = "cat";

/// A served installation with the `cat` agent added.
pub fn served(tag: &str) -> Berth {
    served_with(tag, &[])
}

/// [`served`], its server and commands given `env` as well.
pub fn served_with(tag: &str, env: &[(&str, &str)]) -> Berth {
    serve_cat(Berth::new(tag), env)
}

/// [`served`] by another build of Berth: `bin`, a `berth` with its `berth-full` beside
/// it (see [`Berth::use_bin`]).
pub fn served_by(tag: &str, bin: &Path) -> Berth {
    let mut b = Berth::new(tag);
    b.use_bin(bin);
    serve_cat(b, &[])
}

fn serve_cat(mut b: Berth, env: &[(&str, &str)]) -> Berth {
    for (k, v) in env {
        b.env(k, v);
    }
    b.serve();
    b.ok(&[
        "agent",
        "add",
        CAT_AGENT,
        "--kind",
        "command",
        "--command",
        "cat",
    ]);
    b
}

/// The control socket of `b`.
pub fn socket(b: &Berth) -> PathBuf {
    b.home.join("berth.sock")
}

/// Creates an unbound session of `agent` over the API; returns its id.
pub fn new_session<S: Read + Write>(
    conn: &mut http::Conn<S>,
    agent: &str,
    title: &str,
) -> Result<String> {
    let doc = conn.json(
        "POST",
        "/api/v1/sessions",
        Some(&json!({"agent": agent, "title": title})),
    )?;
    doc["id"]
        .as_str()
        .map(str::to_owned)
        .context("session document without an id")
}

/// Posts a message; returns the task's id.
pub fn post_message<S: Read + Write>(
    conn: &mut http::Conn<S>,
    session: &str,
    text: &str,
) -> Result<String> {
    let reply = conn.json(
        "POST",
        &format!("/api/v1/sessions/{session}/messages"),
        Some(&json!({"text": text})),
    )?;
    reply["task"]["id"]
        .as_str()
        .map(str::to_owned)
        .context("message reply without a task id")
}

/// Milliseconds since `t`.
pub fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// A p50 and a p99 row for `samples` (milliseconds).
pub fn percentile_rows(
    bench: &str,
    what: &str,
    samples: &[f64],
    p50_goal: Option<Goal>,
) -> Vec<Row> {
    let n = samples.len();
    let (Some(p50), Some(p99)) = (quantile(samples, 0.5), quantile(samples, 0.99)) else {
        return vec![Row::failed(bench, &format!("{what}: no samples"))];
    };
    vec![
        Row::new(bench, &format!("{what} p50 (n={n})"), p50, "ms", p50_goal),
        Row::new(bench, &format!("{what} p99 (n={n})"), p99, "ms", None),
    ]
}

/// Prints progress to stderr.
pub fn progress(msg: impl AsRef<str>) {
    eprintln!("bench: {}", msg.as_ref());
}

fn command_output(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim_end().to_owned())
        .unwrap_or_else(|e| format!("({program} failed: {e})"))
}

/// `/proc/loadavg`'s three averages.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_owned())
}

/// The machine, as `nproc`, `free -g`, `uname -srm` and /proc/cpuinfo see it.
pub fn machine(load_before: String) -> Machine {
    let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned());
    Machine {
        cpu_model,
        nproc: std::thread::available_parallelism().map_or(1, |n| n.get()),
        memory: command_output("free", &["-g"]),
        uname: command_output("uname", &["-srm"]),
        load_before,
        load_after: load_average(),
    }
}

/// Runs one benchmark group, turning an error or a panic into a failed row so one
/// broken benchmark does not hide the others' figures.
pub fn guarded(bench: &str, f: impl FnOnce() -> Result<Vec<Row>>) -> Vec<Row> {
    let t = Instant::now();
    progress(format!("{bench}: starting"));
    let rows = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(rows)) => rows,
        Ok(Err(e)) => vec![Row::failed(bench, &format!("{e:#}"))],
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "panicked".to_owned());
            vec![Row::failed(bench, &msg)]
        }
    };
    progress(format!(
        "{bench}: done in {:.1} s",
        t.elapsed().as_secs_f64()
    ));
    rows
}

/// The benchmark groups, in the order they run.
pub const GROUPS: [&str; 11] = [
    "footprint",
    "dispatch",
    "approvals",
    "chat",
    "stream",
    "first",
    "remote",
    "throughput",
    "reads",
    "postgres",
    "micro",
];

/// Every benchmark (or the groups `only` names), in order, as one report.
pub fn run(cfg: &Config, command: &str, only: Option<&[String]>) -> Report {
    let started = Instant::now();
    let load_before = load_average();
    let date = command_output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]);
    let wanted = |g: &str| only.is_none_or(|o| o.iter().any(|x| x == g));
    let mut rows = Vec::new();
    if wanted("footprint") {
        rows.extend(guarded("footprint", || footprint::run(cfg)));
    }
    if wanted("dispatch") {
        rows.extend(guarded("dispatch", || dispatch::run(cfg)));
    }
    if wanted("approvals") {
        rows.extend(guarded("approvals", || approvals::run(cfg)));
    }
    if wanted("chat") {
        rows.extend(guarded("chat", || chat::run(cfg)));
    }
    if wanted("stream") {
        rows.extend(guarded("stream", || stream::run(cfg)));
    }
    if wanted("first") {
        rows.extend(guarded("first", || first::run(cfg)));
    }
    if wanted("remote") {
        rows.extend(guarded("remote claim", || remote::run(cfg)));
    }
    if wanted("throughput") {
        rows.extend(guarded("throughput", || throughput::run(cfg)));
    }
    if wanted("reads") {
        rows.extend(guarded("reads", || reads::run(cfg)));
    }
    if wanted("postgres") {
        rows.extend(guarded("postgres", || postgres::run(cfg)));
    }
    if let Some(times) = cfg.criterion.filter(|_| wanted("micro")) {
        rows.extend(guarded("micro", || micro::run(cfg, times)));
    }
    Report {
        command: command.to_owned(),
        mode: cfg.mode.to_owned(),
        date,
        machine: machine(load_before),
        elapsed_s: started.elapsed().as_secs_f64(),
        rows,
        notes: notes(),
    }
}

/// This build against `other` (see [`dispatch::compare`]), as one report.
pub fn compare(cfg: &Config, command: &str, other: &Path) -> Report {
    let started = Instant::now();
    let load_before = load_average();
    let date = command_output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]);
    let rows = guarded("compare", || dispatch::compare(cfg, other));
    Report {
        command: command.to_owned(),
        mode: cfg.mode.to_owned(),
        date,
        machine: machine(load_before),
        elapsed_s: started.elapsed().as_secs_f64(),
        rows,
        notes: vec![
            "**compare**: this build and the other, each a `berth serve` with one session \
             of the `cat` agent, their API round trips (as in dispatch) alternating in one \
             loop, each going first every other time: the second of a pair pays for the \
             first's tail. Three places, each its own loop: a scratch session, a session \
             bound in place to a git repository of 200 files (Berth's own git steps and the \
             guard at every message), and one of 20k files, where a message's round trip \
             is mostly the change record's steady state (the tree before and after, \
             nothing changed). The last row of each is the median of the per-iteration \
             differences."
                .to_owned(),
        ],
    }
}

/// What a reader needs to interpret the figures.
pub fn notes() -> Vec<String> {
    [
        "**dispatch**: three round trips are timed in the same loop, interleaved so each \
         sees the same load: spawning `cat` directly (pipe the message in, read it back, \
         wait); `berth send ID MSG` as a user runs it (a new CLI process each time); and \
         the API from a persistent client (POST `/api/v1/sessions/{id}/messages` on a \
         keep-alive connection to the control socket, then the session's open SSE stream \
         read until that task's `task` event). Issue 57's goals (issue 17's were 2× and \
         3×): **the API round trip at most 1.5× the bare spawn** (it is what Berth adds around the agent — the API, the \
         store's writes, the scheduler, the executor's spawn and the streaming — with \
         exactly one process start in it, like the bare spawn), and **the CLI's at most \
         2.5×** (it also starts the `berth` client process itself: the lean front, linked \
         statically by scripts/build-berth.sh, its exec, a socket connect and the request; \
         two process starts against one). The fence's cost is timed after that loop, in \
         one of its own: the fenced and the unfenced server take turns, each going first \
         every other time (the second of a pair pays for the first's tail, about 0.1 ms \
         here; in the main loop the unfenced round trip always goes second), and the row \
         is the median of the per-iteration differences. The startup rows \
         time `berth --version` and `berth session list` on an empty store next to \
         `cat /dev/null`, in a loop of their own.",
        "**chat**: Slack's side of issue 55, a fake Slack on loopback over https (a \
         throwaway CA: TLS included) answering the Web API as Slack does. A signed message \
         makes a channel session whose agent (this binary, a scripted ACP peer) asks N \
         times; each request's message is timed from the wall clock the peer read just \
         before writing the request to the one the fake read as the message arrived, and \
         each decision from just before the bench sent the signed click (Slack's \
         interactivity payload) to just after the peer read the answer. One clock, one \
         machine.",
        "**stream**: issue 56's text as it comes. A scripted ACP peer writes N message \
         chunks 5 ms apart, each carrying the wall clock it read just before writing it; \
         two clients follow the session's event stream meanwhile, one on the web listener \
         (TCP on loopback, the display rule applied) and one on the control socket, and \
         note the wall clock as each piece arrives. One clock, one machine.",
        "**remote claim**: `berth serve --allow-daemons` and two `berth daemon`s on this \
         machine, over loopback, each with a session bound in a directory on it; the \
         agent is `date +%s%N`, so its output is the moment it started. A sample is that \
         moment minus the wall clock read just before the message was posted (so it \
         includes accepting the message, the scheduler, the claim, the daemon's \
         validation, lock and spawn). Messages go one at a time; the 1 s polling daemon \
         gets fewer (each waits half a second on average).",
        "**throughput**: all messages are posted over several keep-alive connections at \
         once; the clock stops when every session's SSE stream has delivered its last \
         `task` event. A task is lost unless the task list shows it `succeeded`.",
        "**reads**: sessions are created over the API by several connections; the list \
         is timed from request to the last byte on a keep-alive connection. The \
         transcript is read over SSE from a fresh connection, from the request to the \
         last stored event.",
        "**postgres**: `berth-server` on SQLite against the same server on PostgreSQL \
         (`--database`, a throwaway cluster on loopback with fsync off), then one \
         PostgreSQL replica against two on one database (the first started leads and runs \
         every task; messages go alternately through both, daemons connect to either). The \
         round trip is one long-polling daemon, one message at a time, from the POST to \
         its task's final event on the session's stream; tasks per second is three \
         daemons and every message posted at once; the list is 10,000 sessions (1,000 in \
         quick mode), topped up by one SQL statement on PostgreSQL.",
        "**micro**: criterion's median point estimates, read from \
         `target/bench-criterion/<name>/new/estimates.json` written by this run \
         (`CRITERION_HOME`, apart from anyone's own `cargo bench`). The ≤ 1 ms goal for \
         in-place prepare + cleanup is the one `local-agent/benches/native.rs` states; \
         \"flat in size\" is held as: in-place prepare + cleanup at 20,000 files within \
         1.5× of 1,000 files. `--quick` skips the 20,000-file worktree (about 20 s an \
         iteration on this machine, at least 10 iterations).",
        "**first**: the first message in a big directory (issue 37). Each sample is a \
         fresh `berth serve` (a fresh home: no record of the directory) that binds a \
         directory in place over the API and posts the first message: at once (the \
         link's background snapshot not done yet, the message waits for it), or once that \
         snapshot is done. The agent is `date +%s%N`, so its output is the moment it \
         started; a sample is that moment minus the wall clock read just before the \
         POST. Repositories are committed and clean, as after a clone: small files, 20 to \
         a directory; the plain directory is the same files without `.git`.",
        "Medians and percentiles are nearest-rank over all samples; nothing is discarded.",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// Whether `doc` (a task document) succeeded.
pub fn succeeded(doc: &Value) -> bool {
    doc["status"] == "succeeded"
}

/// Sleeps, for benchmarks that let the server settle.
pub fn settle(d: Duration) {
    std::thread::sleep(d);
}
