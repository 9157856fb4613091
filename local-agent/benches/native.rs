//! Native executor benchmarks: full validation (goal ≤ 200 µs); prepare + cleanup of
//! an in-place run (validate, pin, lock, journaled sidecar write, cleanup; goal ≤ 1 ms
//! and independent of the directory's size) on a small directory and on generated
//! 1,000- and 20,000-file git repositories, against `git worktree add` + `git worktree
//! remove` of each repository (goal: in place ≥ 100× faster at 20,000 files, and flat
//! in size while the worktree grows with it).
//!
//! Generated trees live under `$TMPDIR/berth-bench-native/` and are reused across runs.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

use berth_core::LocalPath;
use berth_local_agent::ExecutorConfig;
use berth_local_agent::dir::lock::DirLocks;
use berth_local_agent::dir::validate::validate;
use berth_local_agent::inject::journal::Journal;
use berth_local_agent::inject::sidecar::Sidecars;
use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;
use tokio::sync::watch;

/// The generated repositories: (label, file count).
const REPOS: [(&str, usize); 2] = [("1k-file repo", 1_000), ("20k-file repo", 20_000)];

fn git(dir: &Path, args: &[&str]) {
    let ok = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=bench", "-c", "user.email=bench@localhost"])
        .args(args)
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(ok, "git {args:?} failed in {}", dir.display());
}

fn base() -> PathBuf {
    let base = std::env::temp_dir().join("berth-bench-native");
    std::fs::create_dir_all(base.join("home")).unwrap();
    std::fs::canonicalize(base).unwrap()
}

fn small_dir(base: &Path) -> PathBuf {
    let dir = base.join("small");
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(dir.join("README.md"), "# small\n").unwrap();
    std::fs::write(dir.join("src/main.rs"), "fn main() {}\n").unwrap();
    dir
}

fn generated_repo(base: &Path, files: usize) -> PathBuf {
    let repo = base.join(format!("repo{}k", files / 1000));
    if repo.join(".generated").exists() {
        return repo;
    }
    let _ = std::fs::remove_dir_all(&repo);
    for i in 0..files {
        let d = repo.join(format!("pkg{:03}", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&d).unwrap();
        }
        std::fs::write(d.join(format!("f{i:05}.txt")), format!("file {i}\n")).unwrap();
    }
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "generated"]);
    std::fs::write(repo.join(".git/info/exclude"), ".generated\n").unwrap();
    std::fs::write(repo.join(".generated"), "").unwrap();
    repo
}

fn lp(p: &Path) -> LocalPath {
    LocalPath::parse(berth_core::Platform::native(), p.to_str().unwrap()).unwrap()
}

fn native(c: &mut Criterion) {
    let base = base();
    let cfg = ExecutorConfig::isolated(&base.join("state"), Some(base.join("home")));
    let ctx = cfg.context();
    let small = small_dir(&base);
    let repos: Vec<(&str, PathBuf)> = REPOS
        .iter()
        .map(|&(name, files)| (name, generated_repo(&base, files)))
        .collect();
    let repo = &repos[1].1;
    let locks = DirLocks::new(cfg.lock_dir.clone()).unwrap();
    let journal = Journal::new(cfg.journal_dir());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (_tx, cancel) = watch::channel(false);
    let brief = "# Berth session\n\nYou are working in a Berth session.\n".repeat(8);

    c.bench_function("full native validation (small dir)", |b| {
        b.iter(|| validate(black_box(&ctx), black_box(small.to_str().unwrap())).unwrap())
    });

    for (name, dir) in [("small dir", &small), ("20k-file repo", repo)] {
        let input = dir.to_str().unwrap().to_owned();
        let key = lp(dir);
        c.bench_function(
            &format!("prepare+cleanup in place, no sidecar ({name})"),
            |b| {
                b.iter(|| {
                    let pinned = validate(&ctx, &input).unwrap();
                    let mut cancel = cancel.clone();
                    let lock = rt
                        .block_on(locks.acquire(&key, "bench-task", |_| {}, &mut cancel))
                        .unwrap();
                    pinned.recheck().unwrap();
                    pinned.recheck().unwrap();
                    drop(lock);
                })
            },
        );
    }
    let mut prepare = |name: &str, dir: &Path| {
        let input = dir.to_str().unwrap().to_owned();
        let key = lp(dir);
        c.bench_function(name, |b| {
            b.iter(|| {
                let pinned = validate(&ctx, &input).unwrap();
                pinned.recheck().unwrap();
                let mut cancel = cancel.clone();
                let lock = rt
                    .block_on(locks.acquire(&key, "bench-task", |_| {}, &mut cancel))
                    .unwrap();
                let mut sidecars =
                    Sidecars::new(&journal, &berth_core::TaskId::parse("bench-task").unwrap());
                sidecars.append_block(&pinned, "CLAUDE.md", &brief).unwrap();
                pinned.recheck().unwrap();
                sidecars.cleanup(&pinned).1.unwrap();
                drop(lock);
            })
        });
        assert!(!dir.join("CLAUDE.md").exists());
    };
    prepare("prepare+cleanup in place (small dir)", &small);
    for (name, dir) in &repos {
        prepare(&format!("prepare+cleanup in place ({name})"), dir);
    }

    // The change record (issue 18): what a task adds to an in-place run when nothing
    // changed (the tree before and after, and their summary), and the first snapshot
    // of a directory (a fresh shadow repository: every file hashed once).
    let limits = berth_local_agent::changes::Limits::default();
    // A directory pinned, and its shadow repository with a first snapshot taken.
    let recorded = |dir: &Path| {
        let pinned = validate(&ctx, dir.to_str().unwrap()).unwrap();
        let shadow = berth_local_agent::changes::Shadow::open(
            &cfg.berth_home,
            pinned.path(),
            pinned.identity(),
        )
        .unwrap();
        shadow.snapshot(&limits).unwrap();
        (pinned, shadow)
    };
    for (name, dir) in &repos {
        let (_, shadow) = recorded(dir);
        let mut n = 0u64;
        c.bench_function(&format!("change record, steady state ({name})"), |b| {
            b.iter(|| {
                n += 1;
                let before = shadow.snapshot_before(&limits).unwrap();
                let after = shadow.snapshot(&limits).unwrap();
                let changes = shadow
                    .record(
                        &format!("bench-{n}").parse().unwrap(),
                        &before,
                        &after,
                        &limits,
                    )
                    .unwrap();
                assert!(changes.files.is_empty());
            })
        });
    }
    // The same with ten files edited during the "task": the cost of what changed.
    for (name, dir) in &repos {
        let (pinned, shadow) = recorded(dir);
        let mut n = 0u64;
        c.bench_function(&format!("change record, 10 files edited ({name})"), |b| {
            b.iter(|| {
                n += 1;
                let before = shadow.snapshot_before(&limits).unwrap();
                for i in 0..10 {
                    let path = pinned.path().join(format!("pkg{i:03}/f{:05}.txt", i * 100));
                    std::fs::write(&path, format!("edit {n}\n")).unwrap();
                }
                let after = shadow.snapshot(&limits).unwrap();
                let changes = shadow
                    .record(
                        &format!("bench-edit-{n}").parse().unwrap(),
                        &before,
                        &after,
                        &limits,
                    )
                    .unwrap();
                assert_eq!(changes.files.len(), 10);
            })
        });
    }
    let mut first = c.benchmark_group("change record");
    first.sample_size(10);
    for (name, dir) in &repos {
        let pinned = validate(&ctx, dir.to_str().unwrap()).unwrap();
        let home = base.join("state/first-snapshot");
        first.bench_function(format!("first snapshot ({name})"), |b| {
            b.iter(|| {
                let _ = std::fs::remove_dir_all(&home);
                let shadow = berth_local_agent::changes::Shadow::open(
                    &home,
                    pinned.path(),
                    pinned.identity(),
                )
                .unwrap();
                shadow.snapshot(&limits).unwrap();
            })
        });
    }
    first.finish();
    assert!(!repos[1].1.join(".berth").exists());

    let mut group = c.benchmark_group("git worktree");
    group.sample_size(10);
    for (name, repo) in &repos {
        let wt = base.join("state/wt-bench");
        // A run stopped midway leaves its worktree behind, perhaps still locked as
        // "initializing": removed (`-f -f` takes a locked one), then forgotten.
        let _ = Command::new("git")
            .arg("-C")
            .arg(repo)
            .args(["worktree", "remove", "-f", "-f"])
            .arg(&wt)
            .stderr(std::process::Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&wt);
        let _ = Command::new("git")
            .arg("-C")
            .arg(repo)
            .args(["worktree", "prune"])
            .status();
        group.bench_function(format!("worktree add+remove ({name})"), |b| {
            b.iter(|| {
                git(
                    repo,
                    &["worktree", "add", "-q", "--detach", wt.to_str().unwrap()],
                );
                git(
                    repo,
                    &["worktree", "remove", "--force", wt.to_str().unwrap()],
                );
            })
        });
    }
    group.finish();
}

criterion_group!(benches, native);
criterion_main!(benches);
