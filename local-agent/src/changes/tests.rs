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
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn glob_escapes_round_trip() {
    for p in ["plain.bin", "we*ird[1]?.bin", "#hash", "back\\slash"] {
        assert_eq!(unescape_glob(&escape_glob(p)), p);
    }
}
