//! Each wall of Berth's git, alone, against a repository that names a program.

use super::fence::interpreter_of;
use super::*;
use std::path::Path;

/// A repository with one committed file, made by the system's git as a user would.
fn repo(root: &Path) -> PathBuf {
    let repo = root.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    let plain = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(&repo)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
    };
    plain(&["init", "-q"]);
    std::fs::write(repo.join("a.txt"), "one\n").unwrap();
    plain(&["add", "a.txt"]);
    plain(&[
        "-c",
        "user.name=T",
        "-c",
        "user.email=t@t",
        "commit",
        "-q",
        "-m",
        "one",
    ]);
    repo
}

/// A program that leaves `marker` when it runs.
fn trap(root: &Path, marker: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let evil = root.join("evil.sh");
    std::fs::write(
        &evil,
        format!("#!/bin/sh\necho ran >> '{}'\n", marker.display()),
    )
    .unwrap();
    std::fs::set_permissions(&evil, std::fs::Permissions::from_mode(0o755)).unwrap();
    evil
}

fn set(repo: &Path, key: &str, value: &str) {
    let out = std::process::Command::new("git")
        .args(["config", key, value])
        .current_dir(repo)
        .output()
        .unwrap();
    assert!(out.status.success());
}

fn fenced() -> bool {
    crate::agent::fence::probe().landlock_abi > 0 && installed().is_some()
}

#[test]
fn the_loader_of_git_is_read_from_its_elf_header() {
    let git = installed().expect("git on PATH");
    let bytes = std::fs::read(&git.git).unwrap();
    if bytes.starts_with(b"\x7fELF") {
        let interp = interpreter_of(&bytes).expect("a dynamically linked git names its loader");
        assert!(interp.is_absolute() && interp.exists(), "{interp:?}");
    }
    assert_eq!(
        interpreter_of(b"#!/bin/sh -e\necho\n"),
        Some(PathBuf::from("/bin/sh"))
    );
    assert_eq!(interpreter_of(b"\x7fELF\x02\x01"), None);
    assert_eq!(interpreter_of(b"plain text"), None);
}

/// `diff.external` is not among the overrides: the fence alone keeps the program a
/// repository names from starting, though the step could write where it would.
#[test]
fn a_program_a_repository_names_cannot_start_inside_gits_fence() {
    if !fenced() {
        eprintln!("skipped: no Landlock here");
        return;
    }
    let tmp = berth_test_support::TempDir::new("berth-git-fence");
    let root = tmp.path();
    let repo = repo(root);
    let marks = root.join("marks");
    std::fs::create_dir_all(&marks).unwrap();
    let marker = marks.join("ran");
    set(
        &repo,
        "diff.external",
        trap(root, &marker).to_str().unwrap(),
    );
    std::fs::write(repo.join("a.txt"), "two\n").unwrap();

    // The control: the same diff by the system's git runs it.
    let out = std::process::Command::new("git")
        .args(["diff"])
        .current_dir(&repo)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(marker.exists(), "the control ran the repository's program");
    std::fs::remove_file(&marker).unwrap();

    let out = in_dir(&repo, Writes::beneath(&marks))
        .arg("diff")
        .output()
        .unwrap();
    assert!(!marker.exists(), "the fence let the program run: {out:?}");
    assert!(
        !out.status.success(),
        "git says it could not run it: {out:?}"
    );
}

/// `core.fsmonitor` and hooks are among the overrides: without the fence, the
/// configuration wall alone keeps them from running.
#[test]
fn the_configuration_wall_alone_turns_off_fsmonitor_and_hooks() {
    let tmp = berth_test_support::TempDir::new("berth-git-config");
    let root = tmp.path();
    let repo = repo(root);
    let marker = root.join("ran");
    let evil = trap(root, &marker);
    set(&repo, "core.fsmonitor", evil.to_str().unwrap());
    std::fs::copy(&evil, repo.join(".git/hooks/pre-commit")).unwrap();
    std::fs::write(repo.join("a.txt"), "two\n").unwrap();

    // The control: the system's git runs the monitor.
    let out = std::process::Command::new("git")
        .args(["status", "--porcelain"])
        .current_dir(&repo)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(marker.exists(), "the control ran core.fsmonitor");
    std::fs::remove_file(&marker).unwrap();

    let mut status = in_dir(&repo, Writes::beneath(&repo));
    status.without_fence().args(["status", "--porcelain"]);
    let out = status.output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let mut commit = in_dir(&repo, Writes::beneath(&repo));
    commit.without_fence().args([
        "-c",
        "user.name=T",
        "-c",
        "user.email=t@t",
        "commit",
        "-q",
        "-am",
        "two",
    ]);
    let out = commit.output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(!marker.exists(), "fsmonitor or the hook ran");
}

/// A step writes only where it says: a read-only step cannot touch the repository.
#[test]
fn a_step_writes_only_beneath_its_directories() {
    if !fenced() {
        eprintln!("skipped: no Landlock here");
        return;
    }
    let tmp = berth_test_support::TempDir::new("berth-git-writes");
    let repo = repo(tmp.path());
    std::fs::write(repo.join("b.txt"), "new\n").unwrap();
    let refused = run(in_dir(&repo, Writes::Nothing), ["add", "b.txt"]).unwrap_err();
    assert!(
        refused.to_string().contains("Permission denied"),
        "{refused}"
    );
    run(
        in_dir(&repo, Writes::beneath(repo.join(".git"))),
        ["add", "b.txt"],
    )
    .unwrap();
    let staged = text(
        in_dir(&repo, Writes::Nothing),
        ["diff", "--cached", "--name-only"],
    )
    .unwrap();
    assert_eq!(staged, "b.txt");
}
