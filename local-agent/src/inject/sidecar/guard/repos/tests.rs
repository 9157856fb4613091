//! The repositories' control files, tried as a hostile agent would plant them: each
//! trap is set with the real git, the guard's check runs, then the user's own
//! `git status` and `git add -A` run in every repository there; none may run the
//! agent's command.

use super::*;
use rustix::fs::{Mode, OFlags};
use std::fs;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Command;

struct World {
    root: PathBuf,
    /// The directory the agent works in.
    dir: PathBuf,
    /// Where a trap's command leaves its mark: outside the directory.
    marker: PathBuf,
}

impl Drop for World {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}

fn world(name: &str) -> World {
    let root = std::env::temp_dir().join(format!(
        "berth-repos-{name}-{}-{}",
        std::process::id(),
        uuid::Uuid::now_v7().simple()
    ));
    let dir = root.join("app");
    fs::create_dir_all(&dir).unwrap();
    World {
        marker: root.join("MARKER"),
        root,
        dir,
    }
}

/// The user's (and the agent's) own git: no global or system configuration, so only
/// what the directory holds decides what it runs.
fn git(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .output()
        .unwrap()
}

fn ok(dir: &Path, args: &[&str]) {
    let out = git(dir, args);
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn dirfd(p: &Path) -> OwnedFd {
    rustix::fs::open(p, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap()
}

impl World {
    fn root_str(&self) -> String {
        self.dir.to_string_lossy().into_owned()
    }

    /// A command that leaves the marker (an absolute path, outside the directory).
    fn trap(&self) -> String {
        format!("touch {}", self.marker.display())
    }

    fn before(&self, nested: &[&str]) -> Vec<Control> {
        let nested: Vec<String> = nested.iter().map(|s| s.to_string()).collect();
        take(dirfd(&self.dir).as_fd(), &self.root_str(), &nested).unwrap()
    }

    fn check(&self, before: &[Control], nested: &[&str]) -> Vec<Restored> {
        let nested: Vec<String> = nested.iter().map(|s| s.to_string()).collect();
        let (done, problems) = check(dirfd(&self.dir).as_fd(), &self.root_str(), before, &nested);
        assert!(problems.is_empty(), "{problems:?}");
        done
    }

    /// The user's next `git status` and `git add -A` in each repository, then: no
    /// marker.
    fn user_runs_git(&self, repos: &[&str]) {
        for r in repos {
            let at = if r.is_empty() {
                self.dir.clone()
            } else {
                self.dir.join(r)
            };
            let _ = git(&at, &["status"]);
            let _ = git(&at, &["add", "-A"]);
        }
        assert!(
            !self.marker.exists(),
            "the agent's command ran in the user's git"
        );
    }
}

/// A repository with one commit at `at`.
fn committed(at: &Path) {
    fs::create_dir_all(at).unwrap();
    ok(at, &["init", "-q"]);
    fs::write(at.join("f.txt"), "x\n").unwrap();
    ok(at, &["add", "-A"]);
    ok(at, &["commit", "-q", "-m", "one"]);
}

fn paths(done: &[Restored]) -> Vec<&str> {
    done.iter().map(|r| r.path.as_str()).collect()
}

#[test]
fn a_nested_repositorys_fsmonitor_is_taken_away() {
    let w = world("nested");
    committed(&w.dir);
    let before = w.before(&[]);
    // The agent: a repository in a new subdirectory, with a monitor that is a command.
    let sub = w.dir.join("tools/vendor");
    fs::create_dir_all(&sub).unwrap();
    ok(&sub, &["init", "-q"]);
    ok(&sub, &["config", "core.fsmonitor", &w.trap()]);
    // The trap is live: without the guard the user's git runs it.
    let probe = world("nested-probe");
    fs::create_dir_all(probe.dir.join("x")).unwrap();
    ok(&probe.dir.join("x"), &["init", "-q"]);
    ok(
        &probe.dir.join("x"),
        &["config", "core.fsmonitor", &probe.trap()],
    );
    let _ = git(&probe.dir.join("x"), &["status"]);
    assert!(
        probe.marker.exists(),
        "the trap is not live: this test proves nothing"
    );

    let done = w.check(&before, &["tools/vendor"]);
    assert_eq!(paths(&done), ["tools/vendor/.git/config"]);
    assert!(
        done[0].why.as_deref().unwrap().contains("core.fsmonitor"),
        "{done:?}"
    );
    w.user_runs_git(&["", "tools/vendor"]);
    // Checked again: nothing more to do.
    assert!(w.check(&before, &["tools/vendor"]).is_empty());
}

#[test]
fn commondir_out_of_the_directory_and_into_a_planted_config_is_removed() {
    let w = world("commondir");
    committed(&w.dir);
    let before = w.before(&[]);
    // Outside: a git directory of the agent's making (the fence would refuse the
    // write, so this one stands for any directory git may be pointed at).
    let evil = w.root.join("evil");
    fs::create_dir_all(&evil).unwrap();
    fs::write(
        evil.join("config"),
        format!("[core]\n\tfsmonitor = {}\n", w.trap()),
    )
    .unwrap();
    fs::write(
        w.dir.join(".git/commondir"),
        format!("{}\n", evil.display()),
    )
    .unwrap();
    let done = w.check(&before, &[]);
    assert_eq!(paths(&done), [".git/commondir"]);
    assert!(done[0].why.as_deref().unwrap().contains("outside"));
    w.user_runs_git(&[""]);

    // Inside: commondir names a directory in the work tree holding a config.
    let inner = w.dir.join("docs/common");
    fs::create_dir_all(&inner).unwrap();
    fs::write(
        inner.join("config"),
        format!("[core]\n\thooksPath = /tmp\n\tfsmonitor = {}\n", w.trap()),
    )
    .unwrap();
    fs::write(w.dir.join(".git/commondir"), "../docs/common\n").unwrap();
    let done = w.check(&before, &[]);
    assert!(paths(&done).contains(&"docs/common/config"), "{done:?}");
    w.user_runs_git(&[""]);
}

#[test]
fn a_fresh_repository_in_a_plain_directory_keeps_no_trap() {
    let w = world("fresh");
    fs::write(w.dir.join("notes.txt"), "n\n").unwrap();
    let before = w.before(&[]);
    ok(&w.dir, &["init", "-q"]);
    ok(&w.dir, &["config", "core.fsmonitor", &w.trap()]);
    let done = w.check(&before, &[]);
    assert_eq!(paths(&done), [".git/config"]);
    w.user_runs_git(&[""]);
}

#[test]
fn a_dot_git_file_pointing_out_is_removed() {
    let w = world("gitfile");
    let evil = w.root.join("evil.git");
    fs::create_dir_all(&evil).unwrap();
    ok(&evil, &["init", "-q", "--bare"]);
    ok(&evil, &["config", "core.bare", "false"]);
    ok(&evil, &["config", "core.fsmonitor", &w.trap()]);
    committed(&w.dir);
    let before = w.before(&["sub"]);
    fs::create_dir_all(w.dir.join("sub")).unwrap();
    fs::write(
        w.dir.join("sub/.git"),
        format!("gitdir: {}\n", evil.display()),
    )
    .unwrap();
    let done = w.check(&before, &["sub"]);
    assert_eq!(paths(&done), ["sub/.git"]);
    w.user_runs_git(&["", "sub"]);
}

#[test]
fn an_include_a_hook_an_attribute_and_a_submodules_config_are_put_back() {
    let w = world("more");
    committed(&w.dir);
    let before = w.before(&[]);
    // An include of a file in the work tree that names a pager... and a monitor.
    fs::write(
        w.dir.join("team.gitconfig"),
        format!("[core]\n\tfsmonitor = {}\n", w.trap()),
    )
    .unwrap();
    ok(&w.dir, &["config", "include.path", "../team.gitconfig"]);
    // An include of a file outside.
    ok(
        &w.dir,
        &[
            "config",
            "includeIf.onbranch:main.path",
            "/etc/evil.gitconfig",
        ],
    );
    // A hook git runs on commit.
    fs::write(
        w.dir.join(".git/hooks/post-checkout"),
        format!("#!/bin/sh\n{}\n", w.trap()),
    )
    .unwrap();
    // An attribute that selects a filter driver.
    fs::create_dir_all(w.dir.join(".git/info")).unwrap();
    fs::write(w.dir.join(".git/info/attributes"), "* filter=evil\n").unwrap();
    // A submodule's git directory under .git/modules.
    let module = w.dir.join(".git/modules/lib");
    fs::create_dir_all(&module).unwrap();
    ok(&module, &["init", "-q", "--bare"]);
    ok(&module, &["config", "core.fsmonitor", &w.trap()]);

    let done = w.check(&before, &[]);
    let got = paths(&done);
    for want in [
        ".git/config",
        ".git/hooks/post-checkout",
        ".git/info/attributes",
        ".git/modules/lib/config",
    ] {
        assert!(got.contains(&want), "{want} not put back: {done:?}");
    }
    let config = fs::read_to_string(w.dir.join(".git/config")).unwrap();
    assert!(!config.contains("include"), "{config}");
    w.user_runs_git(&[""]);
}

#[test]
fn plain_git_work_by_the_agent_is_untouched() {
    let w = world("plain");
    committed(&w.dir);
    // The user's own nested repository, with a monitor they chose: not the agent's.
    let mine = w.dir.join("mine");
    committed(&mine);
    ok(&mine, &["config", "core.fsmonitor", "true"]);
    let before = w.before(&["mine"]);
    // The agent: a commit in the top repository, a new nested repository with a
    // commit, a branch and a tag, an ordinary config value.
    fs::write(w.dir.join("g.txt"), "y\n").unwrap();
    ok(&w.dir, &["add", "-A"]);
    ok(&w.dir, &["commit", "-q", "-m", "two"]);
    ok(&w.dir, &["branch", "feature"]);
    ok(&w.dir, &["config", "user.name", "Agent"]);
    committed(&w.dir.join("new"));
    ok(&w.dir.join("new"), &["tag", "v1"]);
    let done = w.check(&before, &["mine", "new"]);
    assert!(done.is_empty(), "{done:?}");
    assert!(
        fs::read_to_string(mine.join(".git/config"))
            .unwrap()
            .contains("fsmonitor = true")
    );
}

#[test]
fn resolve_keeps_paths_inside_the_directory() {
    assert_eq!(resolve("/w/app", ".git", "../x").as_deref(), Some("x"));
    assert_eq!(resolve("/w/app", ".git", "../../x"), None);
    assert_eq!(resolve("/w/app", "", "/w/app/a/b").as_deref(), Some("a/b"));
    assert_eq!(resolve("/w/app", "", "/w/apple/b"), None);
    assert_eq!(resolve("/w/app", "a", "/etc/passwd"), None);
}

#[test]
fn a_worktree_the_agent_adds_is_untouched() {
    let w = world("worktree");
    committed(&w.dir);
    let before = w.before(&[]);
    ok(&w.dir, &["worktree", "add", "-q", "wt", "-b", "side"]);
    let done = w.check(&before, &["wt"]);
    assert!(done.is_empty(), "{done:?}");
    ok(&w.dir.join("wt"), &["status"]);
}

#[test]
fn a_submodule_the_agent_adds_is_untouched() {
    let w = world("submodule");
    committed(&w.dir);
    let lib = w.root.join("lib");
    committed(&lib);
    let before = w.before(&[]);
    let out = Command::new("git")
        .args(["-c", "protocol.file.allow=always", "submodule", "add", "-q"])
        .arg(&lib)
        .arg("vendor/lib")
        .current_dir(&w.dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let done = w.check(&before, &["vendor/lib"]);
    assert!(done.is_empty(), "{done:?}");
}

#[test]
fn a_sample_is_not_read_and_one_made_a_hook_is_removed() {
    use std::os::unix::fs::PermissionsExt;
    let w = world("sample");
    committed(&w.dir);
    let hooks = w.dir.join(".git/hooks");
    fs::create_dir_all(&hooks).unwrap();
    fs::write(hooks.join("pre-commit.sample"), "#!/bin/sh\nexit 0\n").unwrap();
    let before = w.before(&[]);
    let sample = before
        .iter()
        .find(|c| c.entry.path == ".git/hooks/pre-commit.sample")
        .expect("the sample is listed");
    // Git never runs a sample: its bytes are not read (nor kept) at every run.
    assert!(
        matches!(&sample.entry.node, Node::File { hex, .. } if hex.is_empty()),
        "{sample:?}"
    );
    // The agent edits the sample (harmless alone), then makes it a hook git runs.
    fs::write(
        hooks.join("pre-commit.sample"),
        format!("#!/bin/sh\n{}\n", w.trap()),
    )
    .unwrap();
    fs::rename(hooks.join("pre-commit.sample"), hooks.join("pre-commit")).unwrap();
    fs::set_permissions(hooks.join("pre-commit"), fs::Permissions::from_mode(0o755)).unwrap();
    let done = w.check(&before, &[]);
    assert_eq!(paths(&done), [".git/hooks/pre-commit"], "{done:?}");
    assert!(!hooks.join("pre-commit").exists());
    ok(&w.dir, &["commit", "-q", "--allow-empty", "-m", "two"]);
    assert!(
        !w.marker.exists(),
        "the agent's hook ran in the user's commit"
    );
}
