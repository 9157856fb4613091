//! Micro benchmarks (criterion): the lexical path check and resolution (berth-core),
//! native validation and in-place prepare + cleanup against a git worktree
//! (berth-local-agent). This module runs `cargo bench` with short times and reads the
//! estimates criterion writes, never its terminal output.

use super::{Config, CriterionTimes, Goal, Row, Verdict, progress};
use anyhow::{Context as _, Result, bail};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

/// A criterion benchmark's median point estimate in nanoseconds, by its full id.
pub type Estimates = BTreeMap<String, f64>;

/// Where this runner has criterion write (`CRITERION_HOME`): a directory of its own
/// under the target dir, apart from anyone's `cargo bench`.
pub fn criterion_dir(workspace: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.join("target"))
        .join("bench-criterion")
}

/// Every `<name>/new/{benchmark,estimates}.json` under `dir` written at or after
/// `since`: full id → median (ns). Older results (another run's) are ignored.
pub fn read_estimates(dir: &Path, since: SystemTime) -> Result<Estimates> {
    let mut out = Estimates::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if !p.is_dir() {
                continue;
            }
            if p.file_name().is_some_and(|n| n == "new") {
                let est = p.join("estimates.json");
                let fresh = std::fs::metadata(&est)
                    .and_then(|m| m.modified())
                    .is_ok_and(|t| t >= since);
                if !fresh {
                    continue;
                }
                let meta: Value =
                    serde_json::from_slice(&std::fs::read(p.join("benchmark.json"))?)?;
                let est: Value = serde_json::from_slice(&std::fs::read(&est)?)?;
                if let (Some(id), Some(median)) = (
                    meta["full_id"].as_str(),
                    est["median"]["point_estimate"].as_f64(),
                ) {
                    out.insert(id.to_owned(), median);
                }
            } else {
                stack.push(p);
            }
        }
    }
    Ok(out)
}

/// Runs one criterion bench with `args`, in its own process group, killed as a whole
/// if it runs past `limit`; its output goes to `log`. `exe` is the bench executable
/// `scripts/bench.sh` built (so nothing is rebuilt mid-run while others edit the
/// tree); without it, `cargo bench -p PKG --bench NAME` builds and runs it.
fn criterion_run(
    cfg: &Config,
    (pkg, bench): (&str, &str),
    exe: Option<PathBuf>,
    args: &[String],
    limit: Duration,
    log: &Path,
) -> Result<()> {
    use std::os::unix::process::CommandExt as _;
    let file = std::fs::File::create(log).with_context(|| format!("create {}", log.display()))?;
    let mut cmd = match exe {
        Some(exe) => {
            let mut c = Command::new(exe);
            c.current_dir(cfg.workspace.join(pkg.trim_start_matches("berth-")))
                .arg("--bench");
            c
        }
        None => {
            let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned()));
            c.current_dir(&cfg.workspace)
                .args(["bench", "-p", pkg, "--bench", bench, "--"]);
            c
        }
    };
    let mut child = cmd
        .args(args)
        .env("CRITERION_HOME", criterion_dir(&cfg.workspace))
        .stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file)
        .process_group(0)
        .spawn()
        .with_context(|| format!("run the {bench} bench"))?;
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait()? {
            if status.success() {
                return Ok(());
            }
            bail!("the {bench} bench failed ({status}); see {}", log.display());
        }
        if Instant::now() >= deadline {
            let _ = Command::new("kill")
                .args(["-TERM", &format!("-{}", child.id())])
                .status();
            let _ = child.wait();
            bail!(
                "the {bench} bench ran past {} s and was stopped; see {}",
                limit.as_secs(),
                log.display()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

const NS_PER_US: f64 = 1e3;
const NS_PER_MS: f64 = 1e6;

pub fn run(cfg: &Config, times: CriterionTimes) -> Result<Vec<Row>> {
    let since = SystemTime::now() - Duration::from_secs(1);
    let logs = cfg.workspace.join("target/bench-logs");
    std::fs::create_dir_all(&logs)?;
    let limit = Duration::from_secs(if cfg.mode == "full" { 300 } else { 120 });
    let warm = times.warm_up.to_string();
    let mut errors = Vec::new();
    for (pkg, bench, exe_var, measure) in [
        (
            "berth-core",
            "core",
            "BERTH_BENCH_CORE_EXE",
            times.core_measure,
        ),
        (
            "berth-local-agent",
            "native",
            "BERTH_BENCH_NATIVE_EXE",
            times.native_measure,
        ),
    ] {
        progress(format!("micro: the {bench} bench ({pkg})"));
        let mut args = vec![
            "--warm-up-time".to_owned(),
            warm.clone(),
            "--measurement-time".to_owned(),
            measure.to_string(),
        ];
        if bench == "native" && !times.big_worktree {
            // Criterion's filter is a regex over the full id: all but the big worktree.
            args.push(
                r"^(full|prepare|change record, steady|change record, 10 files|change record/first snapshot \(1k|git worktree/worktree add\+remove \(1k)"
                    .to_owned(),
            );
        }
        let exe = std::env::var_os(exe_var)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        let log = logs.join(format!("{bench}.log"));
        if let Err(e) = criterion_run(cfg, (pkg, bench), exe, &args, limit, &log) {
            errors.push(Row::failed("micro", &format!("{e:#}")));
        }
    }
    let est = read_estimates(&criterion_dir(&cfg.workspace), since)?;
    let mut rows = rows_from(&est);
    if !times.big_worktree {
        for r in &mut rows {
            if r.verdict == Verdict::NotAvailable && r.metric.contains("20k") {
                r.note = Some("skipped in --quick: the 20,000-file worktree".to_owned());
            }
        }
    }
    rows.extend(errors);
    Ok(rows)
}

/// The micro rows from criterion's estimates, held against their goals.
pub fn rows_from(est: &Estimates) -> Vec<Row> {
    let mut rows = Vec::new();
    let get = |id: &str| est.get(id).copied();
    let mut push = |id: &str, scale: f64, unit: &str, goal: Option<Goal>| match get(id) {
        Some(ns) => rows.push(Row::new("micro", id, ns / scale, unit, goal).with_note("median")),
        None => rows.push(Row::not_available("micro", id, "no estimate from this run")),
    };
    for id in [
        "lexical check, accepted (~/code/app/./src/../)",
        "lexical check, refused (/etc/nginx)",
        "lexical check, windows",
    ] {
        push(id, NS_PER_US, "µs", Some(Goal::AtMost(2.0)));
    }
    for id in ["resolution, bound session", "resolution, project directory"] {
        push(id, NS_PER_US, "µs", Some(Goal::AtMost(1.0)));
    }
    push(
        "full native validation (small dir)",
        NS_PER_US,
        "µs",
        Some(Goal::AtMost(200.0)),
    );
    for size in ["small dir", "1k-file repo", "20k-file repo"] {
        push(
            &format!("prepare+cleanup in place ({size})"),
            NS_PER_MS,
            "ms",
            Some(Goal::AtMost(1.0)),
        );
    }
    for size in ["1k-file repo", "20k-file repo"] {
        push(
            &format!("git worktree/worktree add+remove ({size})"),
            NS_PER_MS,
            "ms",
            None,
        );
    }

    for size in ["1k-file repo", "20k-file repo"] {
        push(
            &format!("change record, steady state ({size})"),
            NS_PER_MS,
            "ms",
            (size == "20k-file repo").then_some(Goal::AtMost(50.0)),
        );
        push(
            &format!("change record, 10 files edited ({size})"),
            NS_PER_MS,
            "ms",
            (size == "20k-file repo").then_some(Goal::AtMost(50.0)),
        );
        push(
            &format!("change record/first snapshot ({size})"),
            NS_PER_MS,
            "ms",
            None,
        );
    }
    // Close to flat in size: the steady state reads only what the kernel reported.
    for (kind, metric, goal) in [
        (
            "steady state",
            "change record growth, 20k / 1k files",
            Some(Goal::AtMost(1.5)),
        ),
        (
            "10 files edited",
            "change record growth, 10 files edited, 20k / 1k files",
            None,
        ),
    ] {
        let at = |size: &str| get(&format!("change record, {kind} ({size})"));
        match at("20k-file repo").zip(at("1k-file repo")) {
            Some((b, s)) => rows.push(Row::new("micro", metric, b / s, "x", goal)),
            None => rows.push(Row::not_available(
                "micro",
                metric,
                "an estimate it needs is missing",
            )),
        }
    }

    let place = |size: &str| get(&format!("prepare+cleanup in place ({size})"));
    let tree = |size: &str| get(&format!("git worktree/worktree add+remove ({size})"));
    let mut derived = |metric: &str, v: Option<f64>, goal: Option<Goal>| match v {
        Some(v) => rows.push(Row::new("micro", metric, v, "x", goal)),
        None => rows.push(Row::not_available(
            "micro",
            metric,
            "an estimate it needs is missing",
        )),
    };
    for (size, goal) in [
        ("1k-file repo", None),
        ("20k-file repo", Some(Goal::AtLeast(100.0))),
    ] {
        derived(
            &format!("worktree / in place, prepare+cleanup ({size})"),
            tree(size).zip(place(size)).map(|(w, p)| w / p),
            goal,
        );
    }
    derived(
        "in place growth, 20k / 1k files",
        place("20k-file repo")
            .zip(place("1k-file repo"))
            .map(|(b, s)| b / s),
        Some(Goal::AtMost(1.5)),
    );
    derived(
        "worktree growth, 20k / 1k files",
        tree("20k-file repo")
            .zip(tree("1k-file repo"))
            .map(|(b, s)| b / s),
        None,
    );
    rows
}
