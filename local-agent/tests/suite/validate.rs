//! Native validation: every bad input refused with its exact code, nothing written in
//! a refused directory, symlinks judged by where they land.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

use crate::common;

use berth_core::ErrorCode;
use berth_core::api::CheckReport;
use berth_local_agent::check_with;
use common::{Sandbox, tree};
use std::os::unix::fs::symlink;
use std::process::Command;

#[test]
fn bad_inputs_are_refused_with_their_exact_codes() {
    let sb = Sandbox::new();
    let exec = sb.executor();
    let root = sb.root.display().to_string();
    let file = sb.root.join("file.txt");
    std::fs::write(&file, "x").unwrap();
    let loop_a = sb.root.join("loop-a");
    symlink(sb.root.join("loop-b"), &loop_a).unwrap();
    symlink(&loop_a, sb.root.join("loop-b")).unwrap();
    symlink(sb.home(), sb.root.join("to-home")).unwrap();
    symlink("/etc", sb.root.join("to-etc")).unwrap();
    let foreign = sb.dir("foreign");
    std::os::unix::fs::chown(&foreign, Some(65534), Some(65534)).unwrap();
    let state = sb.dir("berth-home/inside");
    let long = format!("/{}", "a".repeat(5000));
    let cases: Vec<(String, ErrorCode)> = vec![
        ("code/app".into(), ErrorCode::PathNotAbsolute),
        ("".into(), ErrorCode::PathEmpty),
        (format!("{root}/a\0b"), ErrorCode::PathInvalid),
        (long, ErrorCode::PathInvalid),
        (
            format!("{root}/{}etc", "../".repeat(12)),
            ErrorCode::SystemRoot,
        ),
        (sb.home().display().to_string(), ErrorCode::HomeDirectory),
        ("~".into(), ErrorCode::HomeDirectory),
        ("~/.ssh".into(), ErrorCode::CredentialDirectory),
        ("/".into(), ErrorCode::SystemRoot),
        ("/etc/x".into(), ErrorCode::SystemRoot),
        ("/proc/self/cwd".into(), ErrorCode::SystemRoot),
        (file.display().to_string(), ErrorCode::NotADirectory),
        (format!("{root}/missing"), ErrorCode::NotFound),
        (format!("{root}/file.txt/below"), ErrorCode::NotFound),
        (foreign.display().to_string(), ErrorCode::NotOwner),
        (format!("{root}/to-home"), ErrorCode::HomeDirectory),
        (format!("{root}/to-etc"), ErrorCode::SystemRoot),
        (loop_a.display().to_string(), ErrorCode::PathInvalid),
        (state.display().to_string(), ErrorCode::BerthState),
    ];
    let mut got = Vec::new();
    for (input, _) in &cases {
        let r = exec.validate_dir(input).map(|_| ()).unwrap_err();
        assert!(
            !r.message.is_empty() && !r.hint.is_empty(),
            "{input:?}: {r:?}"
        );
        got.push((input.clone(), r.code));
    }
    assert_eq!(got, cases);
    // Nothing was written in the refused directories that exist.
    assert!(tree(&sb.home()).is_empty());
    assert!(tree(&foreign).is_empty());
    assert!(tree(&state).is_empty());
    let _ = std::fs::remove_dir(&foreign);
}

#[test]
fn a_link_is_refused_under_the_rule_it_lands_in_with_a_clear_message() {
    let sb = Sandbox::new();
    symlink(sb.home(), sb.root.join("to-home")).unwrap();
    let r = sb
        .executor()
        .validate_dir(&format!("{}/to-home", sb.root.display()))
        .unwrap_err();
    assert_eq!(r.code, ErrorCode::HomeDirectory);
    assert_eq!(
        r.message,
        format!(
            "{}/to-home resolves to ~; ~ is your home directory",
            sb.root.display()
        )
    );
}

#[test]
fn a_read_only_directory_is_not_writable() {
    let sb = Sandbox::new();
    let dir = sb.dir("frozen");
    // As root, permission bits do not stop writes; the immutable flag does.
    let frozen = Command::new("chattr").arg("+i").arg(&dir).status();
    if !frozen.is_ok_and(|s| s.success()) {
        eprintln!(
            "SKIPPED: chattr +i is not available here, so no directory is read-only for root"
        );
        return;
    }
    let r = sb.executor().validate_dir(dir.to_str().unwrap());
    let _ = Command::new("chattr").arg("-i").arg(&dir).status();
    let r = r.map(|_| ()).unwrap_err();
    assert_eq!(r.code, ErrorCode::NotWritable, "{r:?}");
    assert!(tree(&dir).is_empty(), "the probe left nothing behind");
}

#[test]
fn a_symlink_to_an_ordinary_directory_is_accepted_by_its_canonical_path() {
    let sb = Sandbox::new();
    let real = sb.dir("code/app");
    symlink(&real, sb.root.join("app-link")).unwrap();
    let pinned = sb
        .executor()
        .validate_dir(&format!("{}/app-link", sb.root.display()))
        .unwrap();
    assert_eq!(pinned.canonical().as_str(), real.to_str().unwrap());
    assert!(tree(&real).is_empty(), "the probe was removed");
}

#[test]
fn check_resolves_relative_paths_and_reports_canonical_and_display() {
    let sb = Sandbox::new();
    let cfg = sb.cfg();
    let real = sb.dir("work/app");
    let report = check_with(&cfg, "work/./app", &sb.root);
    let canonical = real.display().to_string();
    assert_eq!(report, CheckReport::accepted(canonical.clone(), canonical));
    let in_home = sb.dir("usr7q/code/app");
    let report = check_with(&cfg, "~/code/app", &sb.root);
    assert_eq!(
        report,
        CheckReport::accepted(in_home.display().to_string(), "~/code/app".to_owned())
    );
    let report = check_with(&cfg, "missing", &sb.root);
    assert_eq!(report.code, Some(ErrorCode::NotFound));
    assert!(!report.ok);
    assert_eq!(
        report.canonical,
        Some(format!("{}/missing", sb.root.display()))
    );
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["code"], "not_found");
}
