//! `berth-bench [--json] [--quick] [--markdown PATH]`: runs Berth's benchmarks against
//! the release `berth` named by `BERTH_BIN`, prints a table (or one JSON document),
//! and writes `BENCHMARKS.md`. `scripts/bench.sh` builds everything and runs it.

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
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--json" => json = true,
            "--quick" => quick = true,
            "--markdown" => markdown = Some(args.next().context("--markdown needs a path")?.into()),
            other => {
                bail!("unknown argument {other:?} (expected --json, --quick, --markdown PATH)")
            }
        }
    }
    if std::env::var_os("BERTH_BIN").is_none() {
        bail!("BERTH_BIN is not set: it must name the release `berth` binary");
    }
    let cfg = if quick {
        Config::quick()
    } else {
        Config::full()
    };
    let command = match (quick, json) {
        (false, false) => "scripts/bench.sh",
        (true, false) => "scripts/bench.sh --quick",
        (false, true) => "scripts/bench.sh --json",
        (true, true) => "scripts/bench.sh --json --quick",
    };
    let report = bench::run(&cfg, command);
    let path = markdown.unwrap_or_else(|| cfg.workspace.join("BENCHMARKS.md"));
    std::fs::write(&path, report.markdown())
        .with_context(|| format!("write {}", path.display()))?;
    bench::progress(format!("wrote {}", path.display()));
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
