use super::tree::{escape_glob, unescape_glob};
use super::*;
use std::time::Duration;

fn tid(id: &str) -> berth_core::TaskId {
    berth_core::TaskId::parse(id).unwrap()
}

#[test]
fn diff_output_parses_with_renames_and_binaries() {
    let status = b"M\x00src/a.rs\x00A\x00new.txt\x00D\x00old.txt\x00R100\x00b.txt\x00c.txt\x00M\x00img.png\x00";
    let numstat = b"3\t1\tsrc/a.rs\x002\t0\tnew.txt\x000\t4\told.txt\x000\t0\t\x00b.txt\x00c.txt\x00-\t-\timg.png\x00";
    let files = parse_diff(status, numstat);
    type Row<'a> = (&'a str, &'a str, Option<&'a str>, Option<u64>, Option<u64>);
    let got: Vec<Row<'_>> = files
        .iter()
        .map(|f| {
            (
                f.path.as_str(),
                f.status.as_str(),
                f.from.as_deref(),
                f.added,
                f.removed,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("c.txt", "renamed", Some("b.txt"), Some(0), Some(0)),
            ("img.png", "modified", None, None, None),
            ("new.txt", "added", None, Some(2), Some(0)),
            ("old.txt", "deleted", None, Some(0), Some(4)),
            ("src/a.rs", "modified", None, Some(3), Some(1)),
        ]
    );
}

#[test]
fn a_file_that_grows_past_the_cap_is_left_out_and_said_so() {
    let root = std::env::temp_dir().join(format!("berth-changes-{}", std::process::id()));
    let dir = root.join("dir");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("small.txt"), "tiny\n").unwrap();
    std::fs::write(dir.join("grows.txt"), "tiny\n").unwrap();
    let limits = Limits {
        max_file_bytes: 10,
        ..Limits::default()
    };
    let shadow = Shadow::open(&root.join("home"), &dir, (1, 2)).unwrap();
    let before = shadow.snapshot(&limits).unwrap();
    assert!(before.large.is_empty());
    std::fs::write(dir.join("grows.txt"), "now well past ten bytes\n").unwrap();
    std::fs::write(dir.join("new-big.txt"), "also well past ten bytes\n").unwrap();
    let after = shadow.snapshot(&limits).unwrap();
    let mut large: Vec<&str> = after.large.iter().map(|(p, _, _)| p.as_str()).collect();
    large.sort();
    assert_eq!(large, ["grows.txt", "new-big.txt"]);
    let changes = shadow.record(&tid("t1"), &before, &after, &limits).unwrap();
    let files: Vec<(&str, &str)> = changes
        .files
        .iter()
        .map(|f| (f.path.as_str(), f.status.as_str()))
        .collect();
    // Modified, its new content not recorded, and listed as not tracked.
    assert_eq!(files, [("grows.txt", "modified")]);
    assert_eq!(
        (changes.files[0].added, changes.files[0].removed),
        (None, None)
    );
    let skipped: Vec<&str> = changes.skipped.iter().map(|s| s.path.as_str()).collect();
    assert!(skipped.contains(&"grows.txt") && skipped.contains(&"new-big.txt"));
    // Again, unchanged: still left out, nothing new to say.
    let again = shadow.snapshot(&limits).unwrap();
    assert_eq!(again.tree, after.tree);
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn the_before_snapshot_skips_git_only_when_nothing_changed() {
    let root = std::env::temp_dir().join(format!("berth-manifest-{}", std::process::id()));
    let dir = root.join("dir");
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::fs::write(dir.join("sub/a.txt"), "one\n").unwrap();
    let limits = Limits::default();
    let shadow = Shadow::open(&root.join("home"), &dir, (1, 2)).unwrap();
    // Fresh writes are "racy": no shortcut right after them. Written again once the
    // snapshot has begun, so the file is fresh whatever the machine's load (the
    // first write can be older than the racy window by the time a slow snapshot
    // starts).
    let first = shadow.snapshot(&limits).unwrap();
    std::fs::write(dir.join("sub/a.txt"), "one\n").unwrap();
    assert!(
        shadow.unchanged().is_none(),
        "a file changed 0 ms before the manifest"
    );
    std::thread::sleep(std::time::Duration::from_millis(150));
    // The manifest serves directories that are not watched (another OS, or the
    // first run of a new process).
    #[cfg(target_os = "linux")]
    watch::forget(shadow.git_dir());
    let second = shadow.snapshot(&limits).unwrap();
    assert_eq!(second.tree, first.tree);
    assert_eq!(shadow.unchanged().map(|s| s.tree), Some(first.tree.clone()));
    // Any change at all (an ignored file, a new empty directory) falls back to git.
    std::fs::write(dir.join("sub/a.txt"), "two\n").unwrap();
    assert!(shadow.unchanged().is_none());
    let third = shadow.snapshot_before(&limits).unwrap();
    assert_ne!(third.tree, first.tree);
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn records_are_pruned_by_count_and_age() {
    let root = std::env::temp_dir().join(format!("berth-prune-{}", std::process::id()));
    let dir = root.join("dir");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("a.txt"), "a\n").unwrap();
    let limits = Limits {
        keep: 2,
        max_age: Duration::from_secs(3600),
        ..Limits::default()
    };
    let shadow = Shadow::open(&root.join("home"), &dir, (1, 2)).unwrap();
    let snap = shadow.snapshot(&limits).unwrap();
    for task in ["t1", "t2", "t3"] {
        shadow.record(&tid(task), &snap, &snap, &limits).unwrap();
    }
    assert!(
        shadow.task_trees(&tid("t1")).is_none(),
        "kept past the count"
    );
    assert!(shadow.task_trees(&tid("t2")).is_some() && shadow.task_trees(&tid("t3")).is_some());
    // A record older than the age limit goes at the next record.
    let log = shadow.git_dir.join("berth-log.json");
    let mut entries = shadow.log();
    assert_eq!(entries[0].task, "t2");
    entries[0].at = 1;
    std::fs::write(&log, serde_json::to_string(&entries).unwrap()).unwrap();
    shadow.record(&tid("t4"), &snap, &snap, &limits).unwrap();
    assert!(shadow.task_trees(&tid("t2")).is_none(), "kept past the age");
    assert!(shadow.task_trees(&tid("t4")).is_some());
    // With a larger `keep`, records go a tenth of it at a time: 20 kept and up to 2
    // more; the 23rd record drops the 3 oldest at once.
    let limits = Limits { keep: 20, ..limits };
    let mut sizes = Vec::new();
    for i in 0..24 {
        shadow
            .record(&tid(&format!("b{i}")), &snap, &snap, &limits)
            .unwrap();
        sizes.push(shadow.log().len());
    }
    // t3, t4, then b0.. : 23 records at b20, back to 20; 23 again at b23.
    assert_eq!(sizes[18..], [21, 22, 20, 21, 22, 20]);
    assert!(shadow.task_trees(&tid("b3")).is_none() && shadow.task_trees(&tid("b4")).is_some());
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn glob_escapes_round_trip() {
    for p in ["plain.bin", "we*ird[1]?.bin", "#hash", "back\\slash"] {
        assert_eq!(unescape_glob(&escape_glob(p)), p);
    }
}

/// Issue 37: the first snapshot of a repository, seeded from its own index.
mod seeded {
    use super::*;
    use berth_test_support::TempDir;
    use std::path::Path;

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = std::process::Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    }

    fn write(dir: &Path, rel: &str, text: &str) {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    /// Every entry under `dir/.git`: path, size, modification time.
    fn git_state(dir: &Path) -> Vec<(String, u64, std::time::SystemTime)> {
        let mut out = Vec::new();
        let mut stack = vec![dir.join(".git")];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let e = e.unwrap();
                let md = std::fs::symlink_metadata(e.path()).unwrap();
                out.push((
                    e.path().display().to_string(),
                    md.len(),
                    md.modified().unwrap(),
                ));
                if md.is_dir() {
                    stack.push(e.path());
                }
            }
        }
        out.sort();
        out
    }

    /// A committed repository, then, as a user's would be at link time: modified,
    /// deleted, untracked, ignored, tracked-but-ignored, executable, symlinked, large,
    /// staged-only, filtered and nested files.
    fn messy_repo(dir: &Path) {
        std::fs::create_dir_all(dir).unwrap();
        git(dir, &["init", "-q"]);
        for i in 0..40 {
            write(
                dir,
                &format!("src/m{}/f{i}.rs", i % 4),
                &format!("fn f{i}() {{}}\n"),
            );
        }
        write(dir, "README.md", "hello\n");
        write(dir, "gone.txt", "bye\n");
        write(dir, ".gitignore", "*.log\ntarget/\n");
        write(dir, "forced.log", "tracked although ignored\n");
        write(dir, "big.bin", &"x".repeat(2048));
        write(dir, ".gitattributes", "*.lfs filter=fake\n");
        write(dir, "data.lfs", "converted content\n");
        write(dir, "run.sh", "#!/bin/sh\n");
        std::os::unix::fs::symlink("README.md", dir.join("readme-link")).unwrap();
        git(dir, &["add", "-A"]);
        git(dir, &["add", "-f", "forced.log"]);
        git(dir, &["commit", "-q", "-m", "start"]);
        // After the commit: what the user left in the directory.
        write(dir, "README.md", "hello, changed\n");
        std::fs::remove_file(dir.join("gone.txt")).unwrap();
        write(dir, "new/untracked.txt", "new\n");
        write(dir, "debug.log", "ignored\n");
        write(dir, "target/out.o", "ignored dir\n");
        write(dir, "forced.log", "tracked although ignored, and changed\n");
        write(dir, "staged.txt", "staged only\n");
        git(dir, &["add", "staged.txt"]);
        write(dir, "staged.txt", "staged, then changed\n");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.join("run.sh"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        let nested = dir.join("vendor/lib");
        std::fs::create_dir_all(&nested).unwrap();
        git(&nested, &["init", "-q"]);
        write(&nested, "lib.c", "int x;\n");
        git(&nested, &["add", "-A"]);
        git(&nested, &["commit", "-q", "-m", "lib"]);
    }

    /// The same files, no `.git`: its snapshot is a full scan.
    fn copy_without_git(from: &Path, to: &Path) {
        let out = std::process::Command::new("cp")
            .args(["-a"])
            .arg(from)
            .arg(to)
            .output()
            .unwrap();
        assert!(out.status.success());
        std::fs::remove_dir_all(to.join(".git")).unwrap();
    }

    fn limits() -> Limits {
        Limits {
            max_file_bytes: 1024,
            ..Limits::default()
        }
    }

    #[test]
    fn a_seeded_first_snapshot_is_the_full_scans_tree() {
        let tmp = TempDir::new("berth-seeded");
        let repo = tmp.path().join("repo");
        messy_repo(&repo);
        let plain = tmp.path().join("plain");
        copy_without_git(&repo, &plain);
        let dot_git = git_state(&repo);

        let seeded = Shadow::open(&tmp.path().join("home-a"), &repo, (1, 1)).unwrap();
        let snap = seeded.snapshot(&limits()).unwrap();
        assert!(
            seeded.seeded_from().is_some(),
            "the repository's index was not used"
        );
        let full = Shadow::open(&tmp.path().join("home-b"), &plain, (1, 2)).unwrap();
        let want = full.snapshot(&limits()).unwrap();
        assert!(full.seeded_from().is_none());
        assert_eq!(snap, want, "seeded and full first snapshots differ");
        // What a full scan records and the seed does not hold, read from the files.
        let listed = seeded
            .git(["ls-tree", "-r", "--name-only", &snap.tree])
            .unwrap();
        for p in [
            "README.md",
            "new/untracked.txt",
            "staged.txt",
            "data.lfs",
            "vendor/lib",
        ] {
            assert!(listed.lines().any(|l| l == p), "{p} missing:\n{listed}");
        }
        for p in [
            "gone.txt",
            "debug.log",
            "forced.log",
            "target/out.o",
            "big.bin",
        ] {
            assert!(!listed.lines().any(|l| l == p), "{p} recorded:\n{listed}");
        }
        assert_eq!(
            git_state(&repo),
            dot_git,
            "the repository's .git was touched"
        );
    }

    /// A clean checkout (nothing differs from its index): the seed's trees, packed
    /// while the watch begins, are the snapshot's; the next run's change is recorded
    /// against them.
    #[test]
    fn a_clean_checkouts_seeded_snapshot_is_the_full_scans_tree() {
        let tmp = TempDir::new("berth-seeded-clean");
        let repo = tmp.path().join("repo");
        std::fs::create_dir_all(&repo).unwrap();
        git(&repo, &["init", "-q"]);
        for i in 0..60 {
            write(
                &repo,
                &format!("src/m{}/d{}/f{i}.rs", i % 3, i % 5),
                &format!("// {i}\n"),
            );
        }
        write(&repo, "README.md", "hello\n");
        git(&repo, &["add", "-A"]);
        git(&repo, &["commit", "-q", "-m", "start"]);
        let plain = tmp.path().join("plain");
        copy_without_git(&repo, &plain);
        let dot_git = git_state(&repo);

        let seeded = Shadow::open(&tmp.path().join("home-a"), &repo, (2, 1)).unwrap();
        let snap = seeded.snapshot(&limits()).unwrap();
        assert!(seeded.seeded_from().is_some());
        let full = Shadow::open(&tmp.path().join("home-b"), &plain, (2, 2)).unwrap();
        let want = full.snapshot(&limits()).unwrap();
        assert_eq!(snap, want, "seeded and full first snapshots differ");
        let head = git(&repo, &["rev-parse", "HEAD^{tree}"]);
        assert_eq!(
            snap.tree,
            head.trim(),
            "a clean checkout's snapshot is HEAD's tree"
        );
        // Every tree of it is in the shadow's own objects (diffs read them there).
        let trees = seeded
            .git(["ls-tree", "-r", "-t", "-d", &snap.tree])
            .unwrap();
        assert!(trees.lines().count() >= 15, "{trees}");

        write(&repo, "src/m1/d1/f1.rs", "// changed\n");
        let next = seeded.snapshot(&limits()).unwrap();
        let diff = seeded
            .git(["diff", "--name-only", &snap.tree, &next.tree])
            .unwrap();
        assert_eq!(diff, "src/m1/d1/f1.rs");
        assert_eq!(
            git_state(&repo),
            dot_git,
            "the repository's .git was touched"
        );
    }

    #[test]
    fn undo_after_a_seeded_first_snapshot_is_byte_identical() {
        let tmp = TempDir::new("berth-seeded-undo");
        let repo = tmp.path().join("repo");
        messy_repo(&repo);
        let dot_git = git_state(&repo);
        let files = |dir: &Path| {
            let mut out = std::collections::BTreeMap::new();
            let mut stack = vec![dir.to_owned()];
            while let Some(d) = stack.pop() {
                for e in std::fs::read_dir(&d).unwrap() {
                    let p = e.unwrap().path();
                    let md = std::fs::symlink_metadata(&p).unwrap();
                    if p.file_name().is_some_and(|n| n == ".git") {
                        continue;
                    }
                    if md.is_dir() {
                        stack.push(p);
                    } else if md.is_symlink() {
                        out.insert(
                            p.clone(),
                            std::fs::read_link(&p)
                                .unwrap()
                                .into_os_string()
                                .into_encoded_bytes(),
                        );
                    } else {
                        out.insert(p.clone(), std::fs::read(&p).unwrap());
                    }
                }
            }
            out
        };
        let home = tmp.path().join("home");
        let canonical =
            berth_core::LocalPath::parse(berth_core::Platform::native(), repo.to_str().unwrap())
                .unwrap();
        let pinned = crate::dir::pin::PinnedDir::open(canonical, "repo".into()).unwrap();
        let shadow = Shadow::open(&home, &repo, pinned.identity()).unwrap();
        let before = shadow.snapshot_before(&limits()).unwrap();
        assert!(shadow.seeded_from().is_some());
        let at_start = files(&repo);
        // The "agent": changes seeded (never hashed) files, and adds and removes.
        write(&repo, "src/m1/f1.rs", "rewritten\n");
        std::fs::remove_file(repo.join("src/m2/f2.rs")).unwrap();
        std::fs::rename(repo.join("src/m3/f3.rs"), repo.join("src/moved.rs")).unwrap();
        write(&repo, "added.txt", "added\n");
        let after = shadow.snapshot(&limits()).unwrap();
        let changes = shadow
            .record(&tid("t1"), &before, &after, &limits())
            .unwrap();
        assert_eq!(changes.files.len(), 4, "{changes:?}");
        let plan = plan_undo(&shadow, &pinned, &tid("t1"), &changes).unwrap();
        assert!(plan.changed_since.is_empty() && !plan.already_undone);
        let (dev, ino) = pinned.identity();
        let undo_plan = UndoPlan {
            task_id: tid("t1"),
            dir: repo.to_str().unwrap().to_owned(),
            dev,
            ino,
            git_dir: shadow.git_dir().to_owned(),
            files: plan.restores,
        };
        undo(&home.join("journal"), &undo_plan, &pinned).unwrap();
        assert_eq!(files(&repo), at_start, "undo is not byte-identical");
        assert_eq!(
            git_state(&repo),
            dot_git,
            "the repository's .git was touched"
        );
    }

    #[test]
    fn a_damaged_or_locked_index_is_read_safely() {
        let tmp = TempDir::new("berth-seeded-damaged");
        let repo = tmp.path().join("repo");
        messy_repo(&repo);
        let plain = tmp.path().join("plain");
        copy_without_git(&repo, &plain);
        let want = Shadow::open(&tmp.path().join("home-p"), &plain, (1, 2))
            .unwrap()
            .snapshot(&limits())
            .unwrap();
        // Locked (another git is writing it): the index itself is whole, and read.
        std::fs::write(repo.join(".git/index.lock"), "").unwrap();
        let locked = Shadow::open(&tmp.path().join("home-l"), &repo, (1, 1)).unwrap();
        assert_eq!(locked.snapshot(&limits()).unwrap(), want);
        assert!(locked.seeded_from().is_some());
        std::fs::remove_file(repo.join(".git/index.lock")).unwrap();
        // Damaged: not seeded, and the snapshot is a full scan, still exact.
        let index = repo.join(".git/index");
        let mut bytes = std::fs::read(&index).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0xff;
        std::fs::write(&index, &bytes).unwrap();
        let damaged = Shadow::open(&tmp.path().join("home-d"), &repo, (1, 1)).unwrap();
        assert_eq!(damaged.snapshot(&limits()).unwrap(), want);
        assert!(damaged.seeded_from().is_none());
    }
}

/// Issue 57: a plain directory's first record read in parallel (blobs straight into
/// one pack, the index written here) is the record git's own one-thread read makes:
/// the same tree, the same index entries with the same stat data, nothing left for
/// git to read again.
#[test]
fn the_parallel_first_record_is_the_one_git_makes() {
    use std::os::unix::fs::PermissionsExt;
    let root = std::env::temp_dir().join(format!("berth-bulk-{}", std::process::id()));
    let dir = root.join("dir");
    for i in 0..(bulk::FROM + 500) {
        let sub = dir.join(format!("d{}/e{}", i % 17, i % 5));
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(
            sub.join(format!("f{i}.txt")),
            format!("file {i}\n").repeat(i % 7),
        )
        .unwrap();
    }
    std::fs::write(dir.join("run.sh"), "#!/bin/sh\necho hi\n").unwrap();
    std::fs::set_permissions(dir.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("d1/e1/f1.txt", dir.join("link")).unwrap();
    std::os::unix::fs::symlink("/nowhere/at/all", dir.join("dangling")).unwrap();
    std::fs::write(dir.join("caf\u{e9} \u{2603}.md"), "unicode\n").unwrap();
    std::fs::write(dir.join("dup-a"), "same\n").unwrap();
    std::fs::write(dir.join("dup-b"), "same\n").unwrap();
    std::fs::write(dir.join(".gitignore"), "*.log\n").unwrap();
    std::fs::write(dir.join("noise.log"), "ignored\n").unwrap();
    std::fs::write(dir.join("big.bin"), vec![7u8; 4096]).unwrap();
    let limits = Limits {
        max_file_bytes: 1024,
        ..Limits::default()
    };
    let record = |home: &str, by_git: bool| {
        bulk::BY_GIT.with(|b| b.set(by_git));
        let shadow = Shadow::open(&root.join(home), &dir, (1, 2)).unwrap();
        let snap = shadow.snapshot(&limits).unwrap();
        bulk::BY_GIT.with(|b| b.set(false));
        let staged = shadow.git(["ls-files", "-s"]).unwrap();
        let stat = shadow.git(["ls-files", "--debug"]).unwrap();
        let packs = std::fs::read_dir(shadow.git_dir.join("objects/pack"))
            .unwrap()
            .count();
        (shadow, snap, staged, stat, packs)
    };
    let (_, by_git, git_staged, git_stat, _) = record("sequential", true);
    assert_eq!(bulk::READ_HERE.with(std::cell::Cell::get), 0);
    let (ours, parallel, staged, stat, packs) = record("parallel", false);
    assert_eq!(
        bulk::READ_HERE.with(std::cell::Cell::get),
        1,
        "read here, not by git"
    );
    assert_eq!(parallel.tree, by_git.tree, "the same tree");
    assert_eq!(parallel.large, by_git.large, "the same files left out");
    assert_eq!(staged, git_staged, "the same entries");
    assert_eq!(stat, git_stat, "the same stat data");
    assert!(
        staged.contains("100755 ") && staged.contains("120000 "),
        "{staged}"
    );
    assert!(!staged.contains("noise.log") && !staged.contains("big.bin"));
    assert!(packs >= 2, "the blobs went into a pack (with its index)");
    // Nothing for git to read again: every file is stat-clean, the next record the same.
    assert_eq!(ours.git(["diff-files", "--name-only"]).unwrap(), "");
    assert_eq!(ours.snapshot(&limits).unwrap().tree, parallel.tree);
    // Every object is whole: git checks the pack it did not write.
    assert_eq!(ours.git(["fsck", "--no-dangling", "--strict"]).unwrap(), "");
    let _ = std::fs::remove_dir_all(&root);
}
