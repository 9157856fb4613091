//! The benchmark runner cannot rot: every macro benchmark runs against the real
//! binary with tiny counts and must produce a well-formed report with nothing lost.
//! Timings are only reported, never asserted (they belong to `scripts/bench.sh`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

use berth_tests::bench::micro::{read_estimates, rows_from};
use berth_tests::bench::{self, Config, Report, Row, Verdict};
use serde_json::Value;
use std::time::{Duration, SystemTime};

fn report(rows: Vec<Row>) -> Report {
    Report {
        command: "bench_smoke".to_owned(),
        mode: "tiny".to_owned(),
        date: "today".to_owned(),
        machine: bench::machine(bench::load_average()),
        elapsed_s: 0.0,
        rows,
        notes: bench::notes(),
    }
}

/// The rows of one benchmark group, with its failures spelled out.
fn measured(bench: &str, rows: &[Row]) -> Vec<(String, Verdict)> {
    let failed: Vec<&Row> = rows
        .iter()
        .filter(|r| r.verdict == Verdict::Failed)
        .collect();
    assert!(failed.is_empty(), "{bench} failed: {failed:?}");
    rows.iter()
        .filter(|r| r.bench == bench)
        .map(|r| (r.metric.clone(), r.verdict))
        .collect()
}

#[test]
fn macro_benchmarks_produce_a_well_formed_report_with_nothing_lost() {
    let cfg = Config::tiny();
    let mut rows = Vec::new();
    for (name, f) in [
        ("footprint", bench::footprint::run as fn(&Config) -> _),
        ("dispatch", bench::dispatch::run),
        ("first", bench::first::run),
        ("throughput", bench::throughput::run),
        ("reads", bench::reads::run),
        ("remote claim", bench::remote::run),
        ("postgres", bench::postgres::run),
        ("stream", bench::stream::run),
    ] {
        let got = bench::guarded(name, || f(&cfg));
        assert!(!measured(name, &got).is_empty(), "{name} produced no rows");
        rows.extend(got);
    }

    // Every measured row has a finite value; the metrics the issues name are present.
    for r in &rows {
        match r.verdict {
            Verdict::Meets | Verdict::Misses | Verdict::NoGoal => {
                let v = r.value.unwrap_or(f64::NAN);
                assert!(v.is_finite() && v >= 0.0, "bad value in {r:?}");
            }
            Verdict::NotAvailable => assert!(r.note.is_some(), "{r:?} says not why"),
            Verdict::Failed => panic!("failed row {r:?}"),
        }
    }
    let metrics: Vec<&str> = rows.iter().map(|r| r.metric.as_str()).collect();
    for wanted in [
        "bare `cat` spawn p50 (n=3)",
        "`berth send` CLI round trip p50 (n=3)",
        "API round trip (persistent client) p50 (n=3)",
        "API p50 / bare spawn p50",
        "lost (tasks not `succeeded`)",
        "GET /api/v1/sessions, 5 sessions p50 (n=2)",
        "idle `berth serve` resident memory (VmRSS)",
        "long-polling daemon p50 (n=3)",
        "first message at once after binding, POST → agent start (200-file repo) p50 (n=1)",
        "first message after the link's snapshot, POST → agent start (200-file plain directory) p50 (n=1)",
        "first message at once, 200-file / 20-file repo",
        "daemon polling every 1 s p50 (n=2)",
        "API round trip, PostgreSQL, 1 server p50 (n=3)",
        "API round trip, PostgreSQL, 2 replicas, alternating p50 (n=3)",
        "GET /api/v1/sessions, 5 sessions, berth-server on PostgreSQL p50 (n=2)",
    ] {
        assert!(metrics.contains(&wanted), "no {wanted:?} in {metrics:?}");
    }
    let lost = rows
        .iter()
        .find(|r| r.metric == "lost (tasks not `succeeded`)")
        .and_then(|r| r.value);
    assert_eq!(lost, Some(0.0));
    let pg_lost = rows
        .iter()
        .find(|r| r.metric == "lost tasks (not `succeeded`), all three throughput runs")
        .and_then(|r| r.value);
    assert_eq!(pg_lost, Some(0.0));

    // The report renders: JSON with every row, a table and a page naming each figure.
    let report = report(rows);
    let json: Value = serde_json::to_value(&report).unwrap();
    assert_eq!(
        json["rows"].as_array().map(Vec::len),
        Some(report.rows.len())
    );
    let md = report.markdown();
    let table = report.table();
    for r in &report.rows {
        assert!(md.contains(&r.metric), "BENCHMARKS.md lacks {:?}", r.metric);
        assert!(table.contains(&r.metric), "the table lacks {:?}", r.metric);
    }
}

#[test]
fn micro_rows_come_from_criterion_estimates_of_this_run() {
    let dir = berth_tests::TempDir::new("bench-criterion");
    let write = |rel: &str, id: &str, median_ns: f64| {
        let d = dir.path().join(rel).join("new");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(
            d.join("benchmark.json"),
            serde_json::json!({"full_id": id, "title": id}).to_string(),
        )
        .unwrap();
        std::fs::write(
            d.join("estimates.json"),
            serde_json::json!({"median": {"point_estimate": median_ns}, "mean": {"point_estimate": 1.0}})
                .to_string(),
        )
        .unwrap();
    };
    write(
        "prepare+cleanup in place (1k-file repo)",
        "prepare+cleanup in place (1k-file repo)",
        200_000.0,
    );
    write(
        "prepare+cleanup in place (20k-file repo)",
        "prepare+cleanup in place (20k-file repo)",
        250_000.0,
    );
    write(
        "git worktree/worktree add+remove (20k-file repo)",
        "git worktree/worktree add+remove (20k-file repo)",
        500_000_000.0,
    );
    let est = read_estimates(dir.path(), SystemTime::now() - Duration::from_secs(60)).unwrap();
    assert_eq!(est.len(), 3);
    let rows = rows_from(&est);
    let find = |m: &str| {
        rows.iter()
            .find(|r| r.metric == m)
            .map(|r| (r.value, r.verdict))
    };
    assert_eq!(
        find("worktree / in place, prepare+cleanup (20k-file repo)"),
        Some((Some(2000.0), Verdict::Meets))
    );
    assert_eq!(
        find("in place growth, 20k / 1k files"),
        Some((Some(1.25), Verdict::Meets))
    );
    assert_eq!(
        find("lexical check, windows").map(|(_, v)| v),
        Some(Verdict::NotAvailable)
    );

    // Results older than the run are someone else's.
    let later = read_estimates(dir.path(), SystemTime::now() + Duration::from_secs(60)).unwrap();
    assert!(later.is_empty());
}

/// `berth-bench --compare`: this build against itself gives both round trips and their
/// paired difference (a build compared with itself: any sign); a path that is no build
/// is refused with what it needs.
#[test]
fn comparing_two_builds_gives_both_round_trips_and_their_difference() {
    let cfg = Config::tiny();
    let this = berth_tests::berth_bin();
    let rows = bench::guarded("compare", || bench::dispatch::compare(&cfg, &this));
    let got = measured("compare", &rows);
    let metrics: Vec<&str> = got.iter().map(|(m, _)| m.as_str()).collect();
    let other = format!("API round trip, {} p50 (n=3)", this.display());
    for wanted in [
        "API round trip, this build p50 (n=3)",
        other.as_str(),
        "this build − the other: p50 of the paired differences",
        "this build − the other, in a git repository (200 files): p50 of the paired differences",
        "this build − the other, in a git repository of 500 files (the change record's steady state): p50 of the paired differences",
    ] {
        assert!(metrics.contains(&wanted), "no {wanted:?} in {metrics:?}");
    }
    for r in &rows {
        assert!(r.value.is_some_and(f64::is_finite), "bad value in {r:?}");
    }

    let nowhere = this.with_file_name("no-such-dir").join("berth");
    let refused = bench::guarded("compare", || bench::dispatch::compare(&cfg, &nowhere));
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0].verdict, Verdict::Failed);
    let why = refused[0].note.as_deref().unwrap_or_default();
    assert!(
        why.contains("no-such-dir/berth is not a file") && why.contains("berth-full"),
        "{why}"
    );
}
