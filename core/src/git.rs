//! Git's ways of running a program, as data: what Berth's own git steps override, and
//! what in a repository's control files would make the user's git run one.
//!
//! A git configuration is code: `core.fsmonitor`, hooks, filters, textconv, editors,
//! credential helpers and a dozen more keys name programs git runs on its own. An agent
//! that may write its directory may write such a file anywhere in it (a nested
//! repository's `.git/config`, a `commondir` pointing at a config of its own). Two
//! things follow, both kept here once so that every git step and every guard reads the
//! same rules:
//!
//! - Berth's own git runs with [`OVERRIDES`] (and no system or global configuration):
//!   the keys below that a repository could set are turned off for it. The executor also
//!   fences that git (it may execute git alone), so a key missed here is still no way
//!   out.
//! - After a fenced run, a control file the agent wrote is judged by [`config_entry`],
//!   [`attributes_line`] and [`hook_runs`]: what would make the user's next `git status`
//!   run a program is put back.

/// Every git Berth runs gets these as `-c key=value`, which outranks every file a
/// repository has and is passed on to the gits it starts (submodules):
/// no fsmonitor, no hooks, no transport at all, no credential helper, no signing,
/// no submodule recursion, no automatic maintenance, no attributes file of the user's,
/// and Git LFS's filter (the one most repositories name) neither required nor run.
pub const OVERRIDES: &[(&str, &str)] = &[
    ("core.fsmonitor", "false"),
    ("core.hooksPath", "/dev/null"),
    ("core.attributesFile", "/dev/null"),
    ("protocol.allow", "never"),
    ("credential.helper", ""),
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("log.showSignature", "false"),
    ("submodule.recurse", "false"),
    ("diff.ignoreSubmodules", "all"),
    ("status.submoduleSummary", "false"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
    ("filter.lfs.required", "false"),
    ("filter.lfs.process", ""),
    ("filter.lfs.smudge", ""),
    ("filter.lfs.clean", ""),
];

/// The environment variables git reads that Berth's git must not inherit from whoever
/// started Berth: every variable whose name starts with this.
pub const ENV_PREFIX: &str = "GIT_";

/// Key names (the last part of `section[.subsection].name`, lowercased) that name a
/// program in any section where git knows them.
const PROGRAM_NAMES: &[&str] = &[
    "alternaterefscommand",
    "askpass",
    "cccmd",
    "clean",
    "cmd",
    "command",
    "defaultkeycommand",
    "difffilter",
    "driver",
    "editor",
    "external",
    "fsmonitor",
    "gitproxy",
    "helper",
    "hookspath",
    "packobjectshook",
    "process",
    "program",
    "receivepack",
    "sendmailcmd",
    "smtpserver",
    "smudge",
    "sshcommand",
    "textconv",
    "tocmd",
    "uploadpack",
    "viewer",
    "browser",
    "pager",
];

/// Sections where `path` names a program (`difftool.<tool>.path`, …).
const PROGRAM_PATH_SECTIONS: &[&str] = &["difftool", "mergetool", "browser", "man", "lfs"];

/// Sections any of whose keys may run or redirect something: config-based hooks,
/// trace output written to any file.
const WHOLE_SECTIONS: &[&str] = &["hook", "trace2"];

/// Git's built-in diff drivers (`userdiff.c`): an attribute `diff=<one of these>` runs
/// nothing.
const BUILTIN_DIFF: &[&str] = &[
    "ada", "bash", "bibtex", "cpp", "csharp", "css", "dts", "elixir", "fortran", "fountain",
    "golang", "html", "java", "kotlin", "markdown", "matlab", "objc", "pascal", "perl", "php",
    "python", "ruby", "rust", "scheme", "tex",
];

/// Git's built-in merge drivers.
const BUILTIN_MERGE: &[&str] = &["text", "binary", "union"];

/// What a configuration entry does that matters here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing that runs a program.
    Inert,
    /// It would make git run a program (or write or redirect outside the repository's
    /// control): the reason, naming the key.
    RunsProgram(String),
    /// An `include.path` / `includeIf.<cond>.path`: the file it names is configuration
    /// too, to be judged in turn.
    Includes(String),
}

/// Whether `value` is one of git's booleans (`true`, `no`, `1`, an empty value, …).
fn is_bool(value: &str) -> bool {
    matches!(
        value.trim().to_ascii_lowercase().as_str(),
        "" | "true" | "false" | "yes" | "no" | "on" | "off" | "1" | "0"
    )
}

/// Judges one configuration entry as `git config --list` prints it: `key` is
/// `section.name` or `section.subsection.name` (section and name in any case), `value`
/// its value.
pub fn config_entry(key: &str, value: &str) -> Verdict {
    let lower = key.to_ascii_lowercase();
    let (section, rest) = lower.split_once('.').unwrap_or((lower.as_str(), ""));
    let (sub, name) = rest.rsplit_once('.').unwrap_or(("", rest));
    let runs = |why: &str| Verdict::RunsProgram(format!("{key} {why}"));
    let value_t = value.trim();
    match (section, name) {
        ("include" | "includeif", "path") => return Verdict::Includes(value.to_owned()),
        // `true` starts git's own daemon (git itself); any other value is a program.
        ("core", "fsmonitor") if is_bool(value) => return Verdict::Inert,
        ("core", "worktree") => return runs("moves the work tree git uses elsewhere"),
        ("core", "attributesfile") => {
            return runs("names an attributes file, which selects filter and diff programs");
        }
        ("alias", _) if value_t.starts_with('!') => return runs("runs a shell command"),
        ("submodule", "update") if value_t.starts_with('!') => {
            return runs("runs a shell command");
        }
        // `pager.<cmd> = true` only turns the pager on; any other value names one.
        ("pager", _) if !is_bool(value) => return runs("names a pager program"),
        ("pager", _) => return Verdict::Inert,
        ("protocol", "allow") if sub.is_empty() || sub == "ext" => {
            return if value_t.eq_ignore_ascii_case("never") {
                Verdict::Inert
            } else {
                runs("allows remote helpers and ext:: commands")
            };
        }
        ("remote", "vcs") => return runs("names a remote helper program"),
        _ => {}
    }
    if WHOLE_SECTIONS.contains(&section) {
        return runs("runs or writes outside git's control");
    }
    if name == "path" && PROGRAM_PATH_SECTIONS.contains(&section) {
        return runs("names a program");
    }
    if PROGRAM_NAMES.contains(&name) {
        return runs("names a program git runs");
    }
    Verdict::Inert
}

/// Why an attributes line (`info/attributes`) would make git run a program: it selects
/// a filter, or a diff or merge driver git does not build in (only a configuration can
/// define one, and such a driver is a program).
pub fn attributes_line(line: &str) -> Option<String> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    // The pattern first (possibly quoted), then the attributes.
    let attrs = if let Some(rest) = line.strip_prefix('"') {
        rest.split_once('"').map_or("", |(_, a)| a)
    } else {
        line.split_once(char::is_whitespace).map_or("", |(_, a)| a)
    };
    for attr in attrs.split_whitespace() {
        let Some((name, value)) = attr.split_once('=') else {
            continue;
        };
        let custom = match name {
            "filter" => true,
            "diff" => !BUILTIN_DIFF.contains(&value),
            "merge" => !BUILTIN_MERGE.contains(&value),
            _ => false,
        };
        if custom {
            return Some(format!("{attr} selects a driver program"));
        }
    }
    None
}

/// Whether git would run a file of this name in a hooks directory: every name but the
/// samples `git init` writes (`*.sample`).
pub fn hook_runs(name: &str) -> bool {
    !name.ends_with(".sample")
}

/// The files of a git directory that decide what git runs or where it looks, relative
/// to it. `hooks` is a directory: each file in it is a hook.
pub const CONTROL_FILES: &[&str] = &["config", "config.worktree", "commondir", "info/attributes"];

/// The hooks directory of a git directory.
pub const HOOKS_DIR: &str = "hooks";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configuration_entries_that_run_programs() {
        let runs = [
            ("core.fsmonitor", "touch /tmp/x"),
            ("core.hooksPath", "/tmp/hooks"),
            ("core.sshCommand", "sh -c x"),
            ("core.editor", "vim"),
            ("core.pager", "less"),
            ("core.askPass", "/x"),
            ("core.gitProxy", "/x"),
            ("core.worktree", "/elsewhere"),
            ("core.attributesFile", "/x"),
            ("sequence.editor", "x"),
            ("diff.external", "x"),
            ("diff.bin.textconv", "x"),
            ("diff.bin.command", "x"),
            ("filter.evil.clean", "x"),
            ("filter.Evil.Smudge", "x"),
            ("filter.evil.process", "x"),
            ("merge.evil.driver", "x"),
            ("credential.helper", "store"),
            ("credential.https://example.com.helper", "x"),
            ("gpg.program", "x"),
            ("gpg.ssh.program", "x"),
            ("gpg.ssh.defaultKeyCommand", "x"),
            ("pager.log", "sh -c x"),
            ("alias.st", "!sh -c x"),
            ("alias.s2", "  !x"),
            ("uploadpack.packObjectsHook", "x"),
            ("remote.origin.uploadpack", "x"),
            ("remote.origin.receivepack", "x"),
            ("remote.origin.vcs", "evil"),
            ("web.browser", "x"),
            ("browser.x.cmd", "x"),
            ("browser.x.path", "x"),
            ("difftool.x.cmd", "x"),
            ("mergetool.x.path", "x"),
            ("man.x.cmd", "x"),
            ("interactive.diffFilter", "x"),
            ("sendemail.smtpServer", "/usr/bin/x"),
            ("sendemail.work.toCmd", "x"),
            ("submodule.m.update", "!x"),
            ("protocol.allow", "always"),
            ("protocol.ext.allow", "user"),
            ("hook.pre-commit.command", "x"),
            ("trace2.normalTarget", "/home/u/.bashrc"),
            ("lfs.customtransfer.x.path", "x"),
        ];
        for (k, v) in runs {
            assert!(
                matches!(config_entry(k, v), Verdict::RunsProgram(_)),
                "{k}={v}"
            );
        }
        let inert = [
            ("core.repositoryformatversion", "0"),
            ("core.filemode", "true"),
            ("core.bare", "false"),
            ("core.logallrefupdates", "true"),
            ("core.fsmonitor", "false"),
            ("core.fsmonitor", "true"),
            ("user.name", "A"),
            ("remote.origin.url", "https://example.com/x.git"),
            ("remote.origin.fetch", "+refs/heads/*:refs/remotes/origin/*"),
            ("branch.main.remote", "origin"),
            ("branch.main.merge", "refs/heads/main"),
            ("submodule.m.url", "../m"),
            ("submodule.m.path", "m"),
            ("submodule.m.active", "true"),
            ("submodule.m.update", "rebase"),
            ("alias.st", "status"),
            ("pager.log", "false"),
            ("protocol.allow", "never"),
            ("init.defaultBranch", "main"),
            ("extensions.worktreeConfig", "true"),
        ];
        for (k, v) in inert {
            assert_eq!(config_entry(k, v), Verdict::Inert, "{k}={v}");
        }
        assert_eq!(
            config_entry("include.path", "../x.cfg"),
            Verdict::Includes("../x.cfg".into())
        );
        assert_eq!(
            config_entry("includeIf.gitdir:~/w/.path", "w.cfg"),
            Verdict::Includes("w.cfg".into())
        );
    }

    #[test]
    fn attributes_that_select_drivers() {
        assert!(attributes_line("* filter=evil").is_some());
        assert!(attributes_line("*.bin diff=secret").is_some());
        assert!(attributes_line("*.x text merge=ours2").is_some());
        assert!(attributes_line("\"a b\" filter=x").is_some());
        assert_eq!(attributes_line("*.rs diff=rust"), None);
        assert_eq!(attributes_line("*.png binary -diff"), None);
        assert_eq!(attributes_line("*.txt text eol=lf merge=union"), None);
        assert_eq!(attributes_line("# * filter=x"), None);
        assert_eq!(attributes_line(""), None);
    }

    #[test]
    fn hooks_and_samples() {
        assert!(hook_runs("pre-commit"));
        assert!(hook_runs("post-checkout"));
        assert!(!hook_runs("pre-commit.sample"));
    }
}
