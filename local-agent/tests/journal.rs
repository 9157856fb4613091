//! The journal: leftovers are replayed to the exact original bytes, but never those of
//! a Berth process still running.

mod common;

use berth_local_agent::journal::Journal;
use berth_local_agent::sidecar::Sidecars;
use common::{Sandbox, tree};

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
    let mut sidecars = Sidecars::new(&journal, "t/../1");
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
    let report = exec.replay_leftovers();
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
    let mut sidecars = Sidecars::new(&journal, "t1");
    sidecars
        .append_block(&pinned, "CLAUDE.md", "brief")
        .unwrap();
    sidecars.cleanup(&pinned).unwrap();
    let path = journal.path().unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"");
    // The user now writes a file with Berth's block text: a later replay leaves it.
    std::fs::write(dir.join("CLAUDE.md"), "mine").unwrap();
    drop(journal);
    let report = exec.replay_leftovers();
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
    let mut sidecars = Sidecars::new(&journal, "t1");
    sidecars
        .append_block(&pinned, "CLAUDE.md", "brief")
        .unwrap();
    drop((sidecars, journal));
    assert_eq!(
        exec.recover(),
        vec![format!(
            "restored {}, left mid-run by an interrupted task",
            dir.display()
        )]
    );
    assert!(!dir.join("CLAUDE.md").exists());
}
