use super::*;
use crate::platform::Platform;

fn p(s: &str) -> LocalPath {
    LocalPath::parse(Platform::Linux, s).unwrap()
}

fn ps(list: &[&str]) -> Vec<LocalPath> {
    list.iter().map(|s| p(s)).collect()
}

fn ctx() -> Context {
    Context::new(Platform::Linux).with_home(p("/home/alice"))
}

/// The inputs of a typical run of the `command` kind in `~/code/app`.
struct Case {
    permissions: Permissions,
    home: Option<&'static str>,
    state: Vec<(LocalPath, WriteKind)>,
    write: Vec<LocalPath>,
    read_deny: Vec<LocalPath>,
    read: ReadScope,
    read_allow: Vec<LocalPath>,
    network: Network,
}

impl Default for Case {
    fn default() -> Case {
        Case {
            permissions: Permissions::Edit,
            home: Some("/home/alice"),
            state: Vec::new(),
            write: Vec::new(),
            read_deny: Vec::new(),
            read: ReadScope::Everywhere,
            read_allow: Vec::new(),
            network: Network::On,
        }
    }
}

fn policy(case: &Case) -> FencePolicy {
    let (dir, tmp) = (
        p("/home/alice/code/app"),
        p("/home/alice/.local/share/berth/tmp/t1"),
    );
    let (berth, locks) = (
        p("/home/alice/.local/share/berth"),
        p("/run/user/1000/berth"),
    );
    let home = case.home.map(p);
    FencePolicy::new(&FenceInputs {
        dir: &dir,
        permissions: case.permissions,
        tmp: &tmp,
        berth_home: &berth,
        lock_dir: &locks,
        home: home.as_ref(),
        state: &case.state,
        write: &case.write,
        read_deny: &case.read_deny,
        read: case.read,
        read_allow: &case.read_allow,
        network: case.network,
    })
}

fn hidden(policy: &FencePolicy, path: &str) -> bool {
    let path = p(path);
    policy.read_deny.iter().any(|d| path.starts_with(d))
}

/// The whole policy of the plainest run.
#[test]
fn the_policy_of_an_edit_run() {
    let got = policy(&Case::default());
    let home_deny = [
        "/home/alice/.ssh",
        "/home/alice/.gnupg",
        "/home/alice/.aws",
        "/home/alice/.azure",
        "/home/alice/.kube",
        "/home/alice/.docker",
        "/home/alice/.password-store",
        "/home/alice/.local/share/keyrings",
        "/home/alice/.Trash",
    ];
    // Then the fence's own table, row by row, then Berth's places.
    let home = p("/home/alice");
    let mut home_deny = ps(&home_deny);
    home_deny.extend(HIDDEN.iter().map(|h| under(&home, h.pattern).unwrap()));
    home_deny.extend(ps(&[
        "/home/alice/.local/share/berth",
        "/run/user/1000/berth",
    ]));
    assert_eq!(
        got,
        FencePolicy {
            dir: p("/home/alice/code/app"),
            tmp: p("/home/alice/.local/share/berth/tmp/t1"),
            write: vec![
                (p("/home/alice/code/app"), WriteKind::Subtree),
                (
                    p("/home/alice/.local/share/berth/tmp/t1"),
                    WriteKind::Subtree
                ),
            ],
            reads: Reads::Everywhere,
            read_deny: home_deny,
            protect: ps(&[
                "/home/alice/code/app/.git/hooks",
                "/home/alice/code/app/.git/config",
                "/home/alice/code/app/.berth",
            ]),
            network: Network::On,
            ignored_write: vec![],
            ignored_read: vec![],
        }
    );
}

/// What varies with the inputs, one row per case: (case, writes, reads hidden or not).
#[test]
fn the_constructor_table() {
    type Check = (&'static str, bool);
    type Row = (
        &'static str,
        Case,
        Vec<(&'static str, WriteKind)>,
        Vec<Check>,
    );
    let rows: Vec<Row> = vec![
        (
            "read-only: the directory is not writable, tmp still is",
            Case {
                permissions: Permissions::ReadOnly,
                ..Case::default()
            },
            vec![("/home/alice/.local/share/berth/tmp/t1", WriteKind::Subtree)],
            vec![("/home/alice/code/app/src/main.rs", false)],
        ),
        (
            "full: the same as edit",
            Case {
                permissions: Permissions::Full,
                network: Network::Off,
                ..Case::default()
            },
            vec![
                ("/home/alice/code/app", WriteKind::Subtree),
                ("/home/alice/.local/share/berth/tmp/t1", WriteKind::Subtree),
            ],
            vec![],
        ),
        (
            "the kind's state, a file rule among them",
            Case {
                state: vec![
                    (p("/home/alice/.claude"), WriteKind::Subtree),
                    (p("/home/alice/.claude.json"), WriteKind::File),
                ],
                ..Case::default()
            },
            vec![
                ("/home/alice/code/app", WriteKind::Subtree),
                ("/home/alice/.local/share/berth/tmp/t1", WriteKind::Subtree),
                ("/home/alice/.claude", WriteKind::Subtree),
                ("/home/alice/.claude.json", WriteKind::File),
            ],
            vec![("/home/alice/.claude/settings.json", false)],
        ),
        (
            "settings: extra writes (duplicates once), extra hidden paths",
            Case {
                write: ps(&[
                    "/home/alice/notes",
                    "/home/alice/code/app",
                    "/home/alice/notes",
                ]),
                read_deny: ps(&["/home/alice/secret", "/home/alice/.ssh"]),
                ..Case::default()
            },
            vec![
                ("/home/alice/code/app", WriteKind::Subtree),
                ("/home/alice/.local/share/berth/tmp/t1", WriteKind::Subtree),
                ("/home/alice/notes", WriteKind::Subtree),
            ],
            vec![
                ("/home/alice/secret/x", true),
                ("/home/alice/notes/x", false),
            ],
        ),
        (
            "settings: writes overlapping a hidden location are left out",
            Case {
                write: ps(&[
                    "/home/alice",
                    "/home/alice/.ssh/keys",
                    "/home/alice/.local/share/berth",
                ]),
                ..Case::default()
            },
            vec![
                ("/home/alice/code/app", WriteKind::Subtree),
                ("/home/alice/.local/share/berth/tmp/t1", WriteKind::Subtree),
            ],
            vec![("/home/alice/.ssh/id_ed25519", true)],
        ),
        (
            "no home known: only Berth's own state is hidden",
            Case {
                home: None,
                ..Case::default()
            },
            vec![
                ("/home/alice/code/app", WriteKind::Subtree),
                ("/home/alice/.local/share/berth/tmp/t1", WriteKind::Subtree),
            ],
            vec![
                ("/home/alice/.ssh/id_ed25519", false),
                ("/home/alice/.local/share/berth/serve.json", true),
                ("/run/user/1000/berth/x.lock", true),
            ],
        ),
    ];
    for (name, case, writes, reads) in rows {
        let got = policy(&case);
        let want: Vec<(LocalPath, WriteKind)> = writes.iter().map(|(s, k)| (p(s), *k)).collect();
        assert_eq!(got.write, want, "{name}");
        for (path, hide) in reads {
            assert_eq!(hidden(&got, path), hide, "{name}: {path}");
        }
        assert_eq!(got.network, case.network, "{name}");
        assert_eq!(
            got.dir_writable(),
            case.permissions != Permissions::ReadOnly,
            "{name}"
        );
    }
    let overlapping = policy(&Case {
        write: ps(&["/home/alice", "/home/alice/.ssh/keys", "/home/alice/notes"]),
        ..Case::default()
    });
    assert_eq!(
        overlapping.ignored_write,
        ps(&["/home/alice", "/home/alice/.ssh/keys"])
    );
}

/// One list: every credential directory the refusal table refuses to bind is hidden
/// from a fenced agent, except the narrowed folders, of which only the credential
/// subfolders are.
#[test]
fn the_fence_hides_every_credential_row_of_the_refusal_table() {
    let got = policy(&Case::default());
    let home = p("/home/alice");
    let rows: Vec<&crate::rules::Rule> = RULES
        .iter()
        .filter(|r| {
            r.family == Family::Posix
                && r.anchor == Anchor::Home
                && r.code == ErrorCode::CredentialDirectory
        })
        .collect();
    assert!(
        rows.len() >= 10,
        "the table's credential rows: {}",
        rows.len()
    );
    for row in rows {
        let top = under(&home, row.pattern).unwrap();
        let inside = top.join("x").unwrap();
        // The table refuses it …
        assert!(crate::rules::check(&ctx(), &inside).is_err(), "{top}");
        if NARROWED.contains(&row.pattern) {
            // … the fence hides its credential subfolders, not the folder.
            assert!(!hidden(&got, inside.as_str()), "{top} is narrowed");
            let subfolders: Vec<&Pattern> = HIDDEN
                .iter()
                .map(|h| &h.pattern)
                .filter(|e| e.starts_with(row.pattern) && e.len() > row.pattern.len())
                .collect();
            assert!(!subfolders.is_empty(), "{top}: narrowed to nothing");
            for sub in subfolders {
                let sub = under(&home, sub).unwrap();
                assert!(hidden(&got, sub.join("x").unwrap().as_str()), "{sub}");
                // And the table refuses what the fence hides there.
                assert!(crate::rules::check(&ctx(), &sub).is_err(), "{sub}");
            }
        } else {
            assert!(hidden(&got, inside.as_str()), "{top} is not hidden");
        }
    }
    // Ordinary settings in a narrowed folder stay readable.
    assert!(!hidden(&got, "/home/alice/.config/git/config"));
    assert!(!hidden(&got, "/home/alice/.gitconfig"));
    assert!(!hidden(&got, "/home/alice/.bashrc"));
}

#[test]
fn descriptions_for_humans() {
    let rows: Vec<(Case, &str)> = vec![
        (Case::default(), "~/code/app + tmp · network on"),
        (
            Case {
                network: Network::Off,
                state: vec![
                    (p("/home/alice/.claude"), WriteKind::Subtree),
                    (p("/home/alice/.claude.json"), WriteKind::File),
                ],
                write: ps(&["/srv/cache"]),
                ..Case::default()
            },
            "~/code/app + tmp + ~/.claude + ~/.claude.json + /srv/cache · network off",
        ),
        (
            Case {
                permissions: Permissions::ReadOnly,
                ..Case::default()
            },
            "~/code/app read-only + tmp · network on",
        ),
        (
            Case {
                read: ReadScope::Directory,
                ..Case::default()
            },
            "~/code/app + tmp · network on · reads: directory",
        ),
    ];
    for (case, want) in rows {
        assert_eq!(policy(&case).describe(&ctx()), want);
    }
    // Another user's home is never named.
    let bob = Context::new(Platform::Linux).with_home(p("/home/bob"));
    assert_eq!(
        policy(&Case::default()).describe(&bob),
        "/home/…/code/app + tmp · network on"
    );
}

#[test]
fn modes_and_network_spellings() {
    for m in FenceMode::ALL {
        assert_eq!(FenceMode::from_name(m.as_str()), Some(m));
        assert_eq!(
            serde_json::to_string(&m).unwrap(),
            format!("\"{}\"", m.as_str())
        );
        assert_eq!(
            serde_json::from_str::<FenceMode>(&format!("\"{m}\"")).unwrap(),
            m
        );
    }
    for n in Network::ALL {
        assert_eq!(Network::from_name(n.as_str()), Some(n));
        assert_eq!(
            serde_json::to_string(&n).unwrap(),
            format!("\"{}\"", n.as_str())
        );
    }
    assert_eq!(FenceMode::from_name("Required"), None);
    assert_eq!(Network::from_name("offline"), None);
    assert_eq!(FenceMode::default(), FenceMode::Auto);
    assert_eq!(
        serde_json::to_string(&WriteKind::Subtree).unwrap(),
        "\"subtree\""
    );
}

/// A history, a snap browser profile, a Flatpak mail profile and a Chromium fork's
/// profile are hidden from the plainest run; the project and ordinary settings are not.
#[test]
fn histories_and_profiles_are_hidden() {
    let got = policy(&Case::default());
    for path in [
        "/home/alice/.bash_history",
        "/home/alice/.zsh_history",
        "/home/alice/.local/share/fish/fish_history",
        "/home/alice/snap/firefox/common/.mozilla/firefox/x.default/cookies.sqlite",
        "/home/alice/.var/app/org.mozilla.Thunderbird/x",
        "/home/alice/.config/BraveSoftware/Brave-Browser/Default/Cookies",
        "/home/alice/Library/Application Support/Google/Chrome/Default/Cookies",
        "/home/alice/Library/Mail/V10",
        "/home/alice/.m2/settings.xml",
        "/home/alice/.gradle/gradle.properties",
    ] {
        assert!(hidden(&got, path), "{path} is readable");
    }
    for path in [
        "/home/alice/code/app/src/main.rs",
        "/home/alice/snap/code/x",
        "/home/alice/.config/git/config",
        "/home/alice/.bashrc",
        "/home/alice/Library/Application Support/Code/x",
        "/home/alice/.m2/repository/org/x.jar",
        "/home/alice/.gradle/caches/x",
    ] {
        assert!(!hidden(&got, path), "{path} is hidden");
    }
}

/// Whether `policy` lets the agent read `path`: beneath a read root or a write path,
/// and not beneath a hidden location (a write path is readable even there: the
/// task's tmp lies in Berth's hidden home).
fn readable(policy: &FencePolicy, path: &str) -> bool {
    let path = p(path);
    if policy.write.iter().any(|(w, _)| path.starts_with(w)) {
        return true;
    }
    let rooted = match &policy.reads {
        Reads::Everywhere => true,
        Reads::Only(roots) => roots.iter().any(|r| path.starts_with(r)),
    };
    rooted && !policy.read_deny.iter().any(|d| path.starts_with(d))
}

/// The strict read mode: the directory, the system, the toolchains, the agent's own
/// state and the settings' paths, never a sibling project or the home itself; the
/// hidden locations still hidden beneath every root. The default reads everywhere.
#[test]
fn the_strict_read_mode_reads_only_the_directory_the_system_and_the_toolchains() {
    let state = vec![
        (p("/home/alice/.claude"), WriteKind::Subtree),
        (p("/home/alice/.claude.json"), WriteKind::File),
    ];
    let strict = policy(&Case {
        read: ReadScope::Directory,
        state: state.clone(),
        read_allow: ps(&["/home/alice/vendor/sdk", "/home/alice/.ssh/config"]),
        ..Case::default()
    });
    let everywhere = policy(&Case {
        state,
        ..Case::default()
    });
    assert_eq!(everywhere.reads, Reads::Everywhere);
    assert_eq!(strict.read_scope(), ReadScope::Directory);
    let Reads::Only(roots) = &strict.reads else {
        panic!("strict: {:?}", strict.reads);
    };
    assert_eq!(roots[0], p("/home/alice/code/app"), "the directory first");
    // (path, readable in strict mode, readable by default)
    let rows = [
        ("/home/alice/code/app/src/main.rs", true, true),
        ("/home/alice/code/other/file.txt", false, true),
        ("/home/alice/code", false, true),
        ("/home/alice", false, true),
        ("/home/alice/.bashrc", false, true),
        ("/home/bob/code/x", false, true),
        ("/tmp/other-project/x", false, true),
        ("/mnt/disk/x", false, true),
        ("/media/alice/usb/x", false, true),
        ("/run/media/alice/usb/x", false, true),
        ("/root/x", false, true),
        ("/srv/x", false, true),
        ("/var/tmp/x", false, true),
        ("/usr/bin/env", true, true),
        ("/etc/passwd", true, true),
        ("/lib/x86_64-linux-gnu/libc.so.6", true, true),
        ("/proc/self/status", true, true),
        ("/dev/urandom", true, true),
        ("/run/systemd/resolve/stub-resolv.conf", true, true),
        ("/nix/store/x", true, true),
        ("/home/alice/.cargo/bin/cargo", true, true),
        ("/home/alice/.rustup/toolchains/x", true, true),
        ("/home/alice/.cache/pip/x", true, true),
        ("/home/alice/.local/bin/claude", true, true),
        ("/home/alice/.local/share/claude/versions/1", true, true),
        ("/home/alice/.local/share/other-app/x", false, true),
        ("/home/alice/.gitconfig", true, true),
        ("/home/alice/.config/git/ignore", true, true),
        ("/home/alice/.config/app7/conf", false, true),
        // The agent's own state, the task's tmp and the settings' extra path.
        ("/home/alice/.claude/settings.json", true, true),
        ("/home/alice/.claude.json", true, true),
        ("/home/alice/.local/share/berth/tmp/t1/x", true, true),
        ("/home/alice/vendor/sdk/lib.h", true, true),
        ("/home/alice/vendor/other/lib.h", false, true),
        // Hidden in both, beneath a toolchain root or not.
        ("/home/alice/.cargo/credentials.toml", false, false),
        ("/home/alice/.cargo/credentials", false, false),
        ("/home/alice/.ssh/config", false, false),
        ("/home/alice/.ssh/id_ed25519", false, false),
        ("/home/alice/.local/share/berth/berth.db", false, false),
        ("/run/user/1000/berth/x.lock", false, false),
    ];
    for (path, in_strict, by_default) in rows {
        assert_eq!(readable(&strict, path), in_strict, "strict: {path}");
        assert_eq!(readable(&everywhere, path), by_default, "default: {path}");
    }
    // A settings path inside a hidden location is left out, and said.
    assert_eq!(strict.ignored_read, ps(&["/home/alice/.ssh/config"]));
    assert!(everywhere.ignored_read.is_empty());
    // The holes and the writes are the default's: only the reads differ.
    assert_eq!(strict.read_deny, everywhere.read_deny);
    assert_eq!(strict.write, everywhere.write);
}

/// A read-only run reads its directory in the strict mode too; a Mac's roots are its
/// own system's; without a home no toolchain is named.
#[test]
fn the_strict_roots_follow_the_run_and_the_platform() {
    let ro = policy(&Case {
        read: ReadScope::Directory,
        permissions: Permissions::ReadOnly,
        ..Case::default()
    });
    assert!(!ro.dir_writable());
    assert!(readable(&ro, "/home/alice/code/app/README.md"));
    let homeless = policy(&Case {
        read: ReadScope::Directory,
        home: None,
        ..Case::default()
    });
    assert!(!readable(&homeless, "/home/alice/.cargo/bin/cargo"));
    assert!(readable(&homeless, "/usr/bin/env"));

    let m = |s: &str| LocalPath::parse(Platform::Macos, s).unwrap();
    let (dir, tmp, berth, locks, home) = (
        m("/Users/alice/code/app"),
        m("/Users/alice/Library/Application Support/berth/tmp/t1"),
        m("/Users/alice/Library/Application Support/berth"),
        m("/private/var/folders/xy/T/berth-locks"),
        m("/Users/alice"),
    );
    let mac = FencePolicy::new(&FenceInputs {
        dir: &dir,
        permissions: Permissions::Edit,
        tmp: &tmp,
        berth_home: &berth,
        lock_dir: &locks,
        home: Some(&home),
        state: &[],
        write: &[],
        read_deny: &[],
        read: ReadScope::Directory,
        read_allow: &[],
        network: Network::On,
    });
    let Reads::Only(roots) = &mac.reads else {
        panic!("{:?}", mac.reads);
    };
    for want in [
        "/Users/alice/code/app",
        "/System",
        "/private/etc",
        "/Users/alice/Library/Caches",
        "/Users/alice/.cargo",
    ] {
        assert!(roots.contains(&m(want)), "{want}: {roots:?}");
    }
    assert!(!roots.contains(&m("/etc")), "Seatbelt needs /private/etc");
    assert!(
        !roots
            .iter()
            .any(|r| *r == m("/Users/alice") || *r == m("/Users"))
    );
}

/// No root of the strict mode holds the user's projects (the mode's point), and none
/// lies inside a location the fence hides (it would be left out, unsaid).
#[test]
fn no_strict_root_is_a_place_of_projects_or_hidden() {
    let home = p("/home/alice");
    for forbidden in [
        "/", "/home", "/root", "/tmp", "/var/tmp", "/mnt", "/media", "/srv", "/run", "/var",
    ] {
        assert!(!SYSTEM_LINUX.contains(&forbidden), "{forbidden}");
        assert!(!SYSTEM_MACOS.contains(&forbidden), "{forbidden}");
    }
    for row in SYSTEM_MACOS {
        assert!(!row.starts_with("/Users"), "{row}");
        assert!(!row.starts_with("/Volumes"), "{row}");
    }
    let hidden = credential_patterns(Family::Posix);
    for row in TOOLCHAINS {
        assert!(!row.is_empty(), "a row must not be the home itself");
        assert!(
            !hidden.iter().any(|h| row.starts_with(h)),
            "{row:?} lies in a hidden location"
        );
        assert!(under(&home, row).is_some(), "{row:?}");
    }
}

#[test]
fn read_scope_spellings() {
    for r in ReadScope::ALL {
        assert_eq!(ReadScope::from_name(r.as_str()), Some(r));
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            format!("\"{}\"", r.as_str())
        );
    }
    assert_eq!(ReadScope::default(), ReadScope::Everywhere);
    assert_eq!(ReadScope::from_name("dir"), None);
}
