//! `berth-bench [--json] [--quick] [--markdown PATH] [--only GROUP,...]`: runs Berth's
//! benchmarks against the release `berth` named by `BERTH_BIN`, prints a table (or one
//! JSON document), and writes `BENCHMARKS.md`. `scripts/bench.sh` builds everything
//! and runs it. `--only` runs some groups (`footprint`, `dispatch`, `stream`, `first`, `remote`,
//! `throughput`, `reads`, `postgres`, `micro`) and writes no page unless `--markdown`
//! names one.
//!
//! `berth-bench [--json] [--quick] --compare OTHER`: only this build's API round trip
//! against another build's (`OTHER`, a `berth` with its `berth-full` beside it), in one
//! loop, in a scratch session and in a git repository (see `bench::dispatch::compare`);
//! writes only BENCHMARKS.md's "Before and after" section, which a full run keeps.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

use anyhow::{Context as _, Result, bail};
use berth_tests::bench::{self, Config, Verdict};
use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            eprintln!("hint: run the benchmarks through scripts/bench.sh");
            ExitCode::from(2)
        }
    }
}

fn run() -> Result<ExitCode> {
    let mut json = false;
    let mut quick = false;
    let mut markdown: Option<PathBuf> = None;
    let mut only: Option<Vec<String>> = None;
    let mut compare_with: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            // Not a benchmark: the scripted ACP agent the approvals group runs.
            "--acp-peer" => {
                let n = args
                    .next()
                    .context("--acp-peer needs a count")?
                    .parse()
                    .context("--acp-peer needs a count")?;
                bench::approvals::peer(n)?;
                return Ok(ExitCode::SUCCESS);
            }
            "--json" => json = true,
            "--quick" => quick = true,
            "--markdown" => markdown = Some(args.next().context("--markdown needs a path")?.into()),
            "--compare" => {
                compare_with = Some(
                    args.next()
                        .context("--compare needs the other build's `berth`")?
                        .into(),
                );
            }
            "--only" => {
                let groups: Vec<String> = args
                    .next()
                    .context("--only needs a list of groups")?
                    .split(',')
                    .map(str::to_owned)
                    .collect();
                if let Some(bad) = groups.iter().find(|g| !bench::GROUPS.contains(&g.as_str())) {
                    bail!(
                        "unknown group {bad:?} (groups: {})",
                        bench::GROUPS.join(", ")
                    );
                }
                only = Some(groups);
            }
            other => {
                bail!(
                    "unknown argument {other:?} (expected --json, --quick, --markdown PATH, \
                     --only GROUP,..., --compare OTHER)"
                )
            }
        }
    }
    if std::env::var_os("BERTH_BIN").is_none() {
        bail!("BERTH_BIN is not set: it must name the release `berth` binary");
    }
    let mut cfg = if quick {
        Config::quick()
    } else {
        Config::full()
    };
    // The first group's sizes, for a look at one of them (`100000`).
    if let Some(sizes) = std::env::var_os("BERTH_BENCH_FIRST_FILES") {
        cfg.first_files = sizes
            .to_string_lossy()
            .split(',')
            .map(|n| n.trim().parse())
            .collect::<Result<_, _>>()
            .context("BERTH_BENCH_FIRST_FILES takes counts, comma-separated")?;
    }
    let command = match (quick, json) {
        (false, false) => "scripts/bench.sh",
        (true, false) => "scripts/bench.sh --quick",
        (false, true) => "scripts/bench.sh --json",
        (true, true) => "scripts/bench.sh --json --quick",
    };
    if compare_with.is_some() && (only.is_some() || markdown.is_some()) {
        bail!("--compare runs alone: it takes neither --only nor --markdown");
    }
    let report = match &compare_with {
        Some(other) => bench::compare(
            &cfg,
            &format!("{command} --compare {}", other.display()),
            other,
        ),
        None => bench::run(&cfg, command, only.as_deref()),
    };
    let path = match (markdown, &only) {
        (Some(p), _) => Some(p),
        (None, None) => Some(cfg.workspace.join("BENCHMARKS.md")),
        (None, Some(_)) => None,
    };
    if let Some(path) = path {
        let old = std::fs::read_to_string(&path).unwrap_or_default();
        // A full run keeps the last `--compare`'s section; a `--compare` replaces only
        // that section.
        let page = if compare_with.is_some() {
            bench::report::with_section(&old, &report.compare_section())
        } else {
            match bench::report::section_of(&old) {
                Some(section) => bench::report::with_section(&report.markdown(), &section),
                None => report.markdown(),
            }
        };
        std::fs::write(&path, page).with_context(|| format!("write {}", path.display()))?;
        bench::progress(format!("wrote {}", path.display()));
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.table());
    }
    let failed = report
        .rows
        .iter()
        .any(|r| matches!(r.verdict, Verdict::Failed));
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
