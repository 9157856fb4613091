use super::*;
use berth_core::Platform;
use berth_core::fence::{FenceInputs, ReadScope};
use berth_core::policy::Permissions;

fn p(s: &str) -> LocalPath {
    LocalPath::parse(Platform::Macos, s).unwrap()
}

const HOME: &str = "/Users/alice";
const DIR: &str = "/Users/alice/code/app";
const BERTH: &str = "/Users/alice/Library/Application Support/berth";
const TMP: &str = "/Users/alice/Library/Application Support/berth/tmp/t1";
const LOCKS: &str = "/private/var/folders/xy/abc/T/berth-locks";
const SOCKET: &str = "/Users/alice/Library/Application Support/berth/berth.sock";

/// A Claude Code run in `~/code/app` on a Mac, with a short credential list.
fn fixed() -> FencePolicy {
    let dir = p(DIR);
    FencePolicy {
        dir: dir.clone(),
        tmp: p(TMP),
        write: vec![
            (dir, WriteKind::Subtree),
            (p(TMP), WriteKind::Subtree),
            (p("/Users/alice/.claude"), WriteKind::Subtree),
            (p("/Users/alice/.claude.json"), WriteKind::File),
        ],
        reads: Reads::Everywhere,
        read_deny: vec![
            p("/Users/alice/.ssh"),
            p("/Users/alice/.netrc"),
            p("/Users/alice/Library/Keychains"),
            p(BERTH),
            p(LOCKS),
        ],
        protect: vec![
            p("/Users/alice/code/app/.git/hooks"),
            p("/Users/alice/code/app/.git/config"),
            p("/Users/alice/code/app/.berth"),
        ],
        network: Network::On,
        ignored_write: vec![],
        ignored_read: vec![],
    }
}

const FIXED: &str = r##"(version 1)
(deny default)
(allow process-exec process-fork)
(allow signal (target same-sandbox))
(allow process-info* (target same-sandbox))
(allow sysctl-read)
(allow ipc-posix-sem ipc-posix-shm)
(allow pseudo-tty)
(allow iokit-open (iokit-registry-entry-class "RootDomainUserClient"))
(allow mach-lookup
  (global-name "com.apple.system.opendirectoryd.libinfo")
  (global-name "com.apple.system.opendirectoryd.membership")
  (global-name "com.apple.system.DirectoryService.libinfo_v1")
  (global-name "com.apple.system.logger")
  (global-name "com.apple.system.notification_center")
  (global-name "com.apple.logd")
  (global-name "com.apple.diagnosticd")
  (global-name "com.apple.bsd.dirhelper")
  (global-name "com.apple.PowerManagement.control"))
(allow file-read*)
(deny file-read*
  (subpath (param "READ_DENY_0"))
  (subpath (param "READ_DENY_1"))
  (subpath (param "READ_DENY_2"))
  (subpath (param "READ_DENY_3"))
  (subpath (param "READ_DENY_4")))
(allow file-read* file-write*
  (subpath (param "DIR"))
  (subpath (param "TMP"))
  (subpath (param "WRITE_0"))
  (literal (param "WRITE_1")))
(allow file-read* file-write*
  (literal "/dev/null")
  (literal "/dev/zero")
  (subpath "/dev/fd")
  (literal "/dev/tty")
  (literal "/dev/ptmx")
  (regex #"^/dev/ttys[0-9]+$"))
(allow file-ioctl
  (literal "/dev/tty")
  (literal "/dev/ptmx")
  (regex #"^/dev/ttys[0-9]+$"))
(deny file-write*
  (subpath (param "PROTECT_0"))
  (subpath (param "PROTECT_1"))
  (subpath (param "PROTECT_2"))
  (literal (param "DIR"))
  (literal (param "PROTECT_PARENT_0")))
(allow network*)
(allow system-socket)
(allow mach-lookup
  (global-name "com.apple.SecurityServer")
  (global-name "com.apple.trustd")
  (global-name "com.apple.trustd.agent")
  (global-name "com.apple.ocspd")
  (global-name "com.apple.networkd")
  (global-name "com.apple.SystemConfiguration.DNSConfiguration")
  (global-name "com.apple.SystemConfiguration.configd")
  (global-name "com.apple.dnssd.service"))
(deny network-outbound (remote unix-socket (path-literal (param "CONTROL_SOCKET_0"))))
"##;

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
        .collect()
}

/// The whole profile of the fixed policy, and every parameter's value.
#[test]
fn the_profile_of_a_fixed_policy() {
    let got = Profile::new(&fixed(), &[p(SOCKET)]);
    assert_eq!(
        got,
        Profile {
            text: FIXED.to_owned(),
            params: pairs(&[
                ("READ_DENY_0", "/Users/alice/.ssh"),
                ("READ_DENY_1", "/Users/alice/.netrc"),
                ("READ_DENY_2", "/Users/alice/Library/Keychains"),
                ("READ_DENY_3", BERTH),
                ("READ_DENY_4", LOCKS),
                ("DIR", DIR),
                ("TMP", TMP),
                ("WRITE_0", "/Users/alice/.claude"),
                ("WRITE_1", "/Users/alice/.claude.json"),
                ("PROTECT_0", "/Users/alice/code/app/.git/hooks"),
                ("PROTECT_1", "/Users/alice/code/app/.git/config"),
                ("PROTECT_2", "/Users/alice/code/app/.berth"),
                ("PROTECT_PARENT_0", "/Users/alice/code/app/.git"),
                ("CONTROL_SOCKET_0", SOCKET),
            ]),
        }
    );
}

/// The profile's top-level rules, each whole (with its lines).
fn rules(text: &str) -> Vec<String> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0usize, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '(' => {
                if depth == 0 {
                    start = i;
                }
                depth += 1;
            }
            ')' => {
                depth -= 1;
                if depth == 0 {
                    out.push(text[start..=i].to_owned());
                }
            }
            _ => {}
        }
    }
    assert_eq!(depth, 0, "unbalanced profile:\n{text}");
    out
}

/// The rules of `text` that the fixed profile lacks, and those of the fixed profile
/// that `text` lacks.
fn diff(text: &str) -> (Vec<String>, Vec<String>) {
    let (base, got) = (rules(FIXED), rules(text));
    let added = got.iter().filter(|r| !base.contains(r)).cloned().collect();
    let removed = base.iter().filter(|r| !got.contains(r)).cloned().collect();
    (added, removed)
}

/// How the profile changes with the policy, one row per case: the policy, the
/// control sockets, the rules added to and removed from the fixed profile, and the
/// parameters' names in order.
#[test]
fn the_profile_table() {
    struct Row<'a> {
        name: &'a str,
        policy: FencePolicy,
        sockets: Vec<LocalPath>,
        added: &'a [&'a str],
        removed: &'a [&'a str],
        params: &'a [&'a str],
    }
    const FIXED_PROTECT: &str = "(deny file-write*
  (subpath (param \"PROTECT_0\"))
  (subpath (param \"PROTECT_1\"))
  (subpath (param \"PROTECT_2\"))
  (literal (param \"DIR\"))
  (literal (param \"PROTECT_PARENT_0\")))";
    const FIXED_WRITE: &str = "(allow file-read* file-write*
  (subpath (param \"DIR\"))
  (subpath (param \"TMP\"))
  (subpath (param \"WRITE_0\"))
  (literal (param \"WRITE_1\")))";
    let fixed_names: &[&str] = &[
        "READ_DENY_0",
        "READ_DENY_1",
        "READ_DENY_2",
        "READ_DENY_3",
        "READ_DENY_4",
        "DIR",
        "TMP",
        "WRITE_0",
        "WRITE_1",
        "PROTECT_0",
        "PROTECT_1",
        "PROTECT_2",
        "PROTECT_PARENT_0",
        "CONTROL_SOCKET_0",
    ];
    let network_on: &[&str] = &[
        "(allow network*)",
        "(allow system-socket)",
        "(allow mach-lookup
  (global-name \"com.apple.SecurityServer\")
  (global-name \"com.apple.trustd\")
  (global-name \"com.apple.trustd.agent\")
  (global-name \"com.apple.ocspd\")
  (global-name \"com.apple.networkd\")
  (global-name \"com.apple.SystemConfiguration.DNSConfiguration\")
  (global-name \"com.apple.SystemConfiguration.configd\")
  (global-name \"com.apple.dnssd.service\"))",
    ];
    let worktree = "/Users/alice/code/app/.git";
    let rows = vec![
        Row {
            name: "the fixed policy itself",
            policy: fixed(),
            sockets: vec![p(SOCKET)],
            added: &[],
            removed: &[],
            params: fixed_names,
        },
        Row {
            name: "read-only: the directory gets no write rule, so nothing above a protected path needs keeping",
            policy: FencePolicy {
                write: fixed().write.into_iter().skip(1).collect(),
                ..fixed()
            },
            sockets: vec![p(SOCKET)],
            added: &[
                "(allow file-read* file-write*
  (subpath (param \"TMP\"))
  (subpath (param \"WRITE_0\"))
  (literal (param \"WRITE_1\")))",
                "(deny file-write*
  (subpath (param \"PROTECT_0\"))
  (subpath (param \"PROTECT_1\"))
  (subpath (param \"PROTECT_2\")))",
            ],
            removed: &[FIXED_WRITE, FIXED_PROTECT],
            params: &[
                "READ_DENY_0",
                "READ_DENY_1",
                "READ_DENY_2",
                "READ_DENY_3",
                "READ_DENY_4",
                "TMP",
                "WRITE_0",
                "WRITE_1",
                "PROTECT_0",
                "PROTECT_1",
                "PROTECT_2",
                "CONTROL_SOCKET_0",
            ],
        },
        Row {
            name: "a write path holding the run's directory: it is kept in place too",
            policy: FencePolicy {
                write: [
                    fixed().write,
                    vec![(p("/Users/alice/code"), WriteKind::Subtree)],
                ]
                .concat(),
                ..fixed()
            },
            sockets: vec![p(SOCKET)],
            added: &[
                "(allow file-read* file-write*
  (subpath (param \"DIR\"))
  (subpath (param \"TMP\"))
  (subpath (param \"WRITE_0\"))
  (literal (param \"WRITE_1\"))
  (subpath (param \"WRITE_2\")))",
                "(deny file-write*
  (subpath (param \"PROTECT_0\"))
  (subpath (param \"PROTECT_1\"))
  (subpath (param \"PROTECT_2\"))
  (literal (param \"PROTECT_PARENT_0\"))
  (literal (param \"DIR\"))
  (literal (param \"PROTECT_PARENT_1\")))",
            ],
            removed: &[FIXED_WRITE, FIXED_PROTECT],
            params: &[
                "READ_DENY_0",
                "READ_DENY_1",
                "READ_DENY_2",
                "READ_DENY_3",
                "READ_DENY_4",
                "DIR",
                "TMP",
                "WRITE_0",
                "WRITE_1",
                "WRITE_2",
                "PROTECT_0",
                "PROTECT_1",
                "PROTECT_2",
                "PROTECT_PARENT_0",
                "PROTECT_PARENT_1",
                "CONTROL_SOCKET_0",
            ],
        },
        Row {
            name: "network off: unix sockets beneath tmp alone",
            policy: FencePolicy {
                network: Network::Off,
                ..fixed()
            },
            sockets: vec![p(SOCKET)],
            added: &[
                "(allow system-socket (socket-domain AF_UNIX))",
                "(allow network-bind network-inbound (local unix-socket (subpath (param \"TMP\"))))",
                "(allow network-outbound (remote unix-socket (subpath (param \"TMP\"))))",
            ],
            removed: network_on,
            params: fixed_names,
        },
        Row {
            name: "a worktree run: git's files in the main repository, and a settings path",
            policy: FencePolicy {
                dir: p("/Users/alice/code/app-wt/t1"),
                write: vec![
                    (p("/Users/alice/code/app-wt/t1"), WriteKind::Subtree),
                    (p(TMP), WriteKind::Subtree),
                    (p("/Users/alice/.claude"), WriteKind::Subtree),
                    (p("/Users/alice/.claude.json"), WriteKind::File),
                    (p(&format!("{worktree}/objects")), WriteKind::Subtree),
                    (
                        p(&format!("{worktree}/refs/heads/berth")),
                        WriteKind::Subtree,
                    ),
                    (
                        p(&format!("{worktree}/logs/refs/heads/berth")),
                        WriteKind::Subtree,
                    ),
                    (p(&format!("{worktree}/worktrees/t1")), WriteKind::Subtree),
                    (p("/Users/alice/scratch"), WriteKind::Subtree),
                ],
                protect: vec![
                    p("/Users/alice/code/app-wt/t1/.git/hooks"),
                    p("/Users/alice/code/app-wt/t1/.git/config"),
                    p("/Users/alice/code/app-wt/t1/.berth"),
                ],
                ..fixed()
            },
            sockets: vec![p(SOCKET)],
            added: &["(allow file-read* file-write*
  (subpath (param \"DIR\"))
  (subpath (param \"TMP\"))
  (subpath (param \"WRITE_0\"))
  (literal (param \"WRITE_1\"))
  (subpath (param \"WRITE_2\"))
  (subpath (param \"WRITE_3\"))
  (subpath (param \"WRITE_4\"))
  (subpath (param \"WRITE_5\"))
  (subpath (param \"WRITE_6\")))"],
            removed: &[FIXED_WRITE],
            params: &[
                "READ_DENY_0",
                "READ_DENY_1",
                "READ_DENY_2",
                "READ_DENY_3",
                "READ_DENY_4",
                "DIR",
                "TMP",
                "WRITE_0",
                "WRITE_1",
                "WRITE_2",
                "WRITE_3",
                "WRITE_4",
                "WRITE_5",
                "WRITE_6",
                "PROTECT_0",
                "PROTECT_1",
                "PROTECT_2",
                "PROTECT_PARENT_0",
                "CONTROL_SOCKET_0",
            ],
        },
        Row {
            name: "strict reads: metadata everywhere, contents beneath each root (the directory's own parameter), the holes after",
            policy: FencePolicy {
                reads: Reads::Only(vec![
                    p(DIR),
                    p("/System"),
                    p("/usr"),
                    p("/Users/alice/.cargo"),
                ]),
                ..fixed()
            },
            sockets: vec![p(SOCKET)],
            added: &[
                "(allow file-read-metadata)",
                "(allow file-read*
  (subpath (param \"DIR\"))
  (subpath (param \"READ_0\"))
  (subpath (param \"READ_1\"))
  (subpath (param \"READ_2\")))",
            ],
            removed: &["(allow file-read*)"],
            params: &[
                "DIR",
                "READ_0",
                "READ_1",
                "READ_2",
                "READ_DENY_0",
                "READ_DENY_1",
                "READ_DENY_2",
                "READ_DENY_3",
                "READ_DENY_4",
                "TMP",
                "WRITE_0",
                "WRITE_1",
                "PROTECT_0",
                "PROTECT_1",
                "PROTECT_2",
                "PROTECT_PARENT_0",
                "CONTROL_SOCKET_0",
            ],
        },
        Row {
            name: "write kinds: a File is a literal, a Subtree a subpath",
            policy: FencePolicy {
                write: vec![
                    (p(DIR), WriteKind::Subtree),
                    (p(TMP), WriteKind::Subtree),
                    (p("/Users/alice/.claude"), WriteKind::File),
                    (p("/Users/alice/.claude.json"), WriteKind::Subtree),
                ],
                ..fixed()
            },
            sockets: vec![p(SOCKET)],
            added: &["(allow file-read* file-write*
  (subpath (param \"DIR\"))
  (subpath (param \"TMP\"))
  (literal (param \"WRITE_0\"))
  (subpath (param \"WRITE_1\")))"],
            removed: &[FIXED_WRITE],
            params: fixed_names,
        },
        Row {
            name: "two control sockets: one rule each; none: no rule",
            policy: fixed(),
            sockets: vec![p(SOCKET), p("/Users/alice/.berth-daemon/proxy.sock")],
            added: &[
                "(deny network-outbound (remote unix-socket (path-literal (param \"CONTROL_SOCKET_1\"))))",
            ],
            removed: &[],
            params: &[
                "READ_DENY_0",
                "READ_DENY_1",
                "READ_DENY_2",
                "READ_DENY_3",
                "READ_DENY_4",
                "DIR",
                "TMP",
                "WRITE_0",
                "WRITE_1",
                "PROTECT_0",
                "PROTECT_1",
                "PROTECT_2",
                "PROTECT_PARENT_0",
                "CONTROL_SOCKET_0",
                "CONTROL_SOCKET_1",
            ],
        },
        Row {
            name: "nothing hidden, nothing protected, no socket: those rules are left out, never empty",
            policy: FencePolicy {
                read_deny: vec![],
                protect: vec![],
                ..fixed()
            },
            sockets: vec![],
            added: &[],
            removed: &[
                "(deny file-read*
  (subpath (param \"READ_DENY_0\"))
  (subpath (param \"READ_DENY_1\"))
  (subpath (param \"READ_DENY_2\"))
  (subpath (param \"READ_DENY_3\"))
  (subpath (param \"READ_DENY_4\")))",
                "(deny file-write*
  (subpath (param \"PROTECT_0\"))
  (subpath (param \"PROTECT_1\"))
  (subpath (param \"PROTECT_2\"))
  (literal (param \"DIR\"))
  (literal (param \"PROTECT_PARENT_0\")))",
                "(deny network-outbound (remote unix-socket (path-literal (param \"CONTROL_SOCKET_0\"))))",
            ],
            params: &["DIR", "TMP", "WRITE_0", "WRITE_1"],
        },
    ];
    for row in rows {
        let got = Profile::new(&row.policy, &row.sockets);
        let strings = |l: &[&str]| l.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            diff(&got.text),
            (strings(row.added), strings(row.removed)),
            "{}:\n{}",
            row.name,
            got.text
        );
        let names: Vec<&str> = got.params.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, row.params, "{}", row.name);
        assert_references(&got);
    }
}

/// Every `(param "NAME")` of the text is given a value, and every value is used.
fn assert_references(profile: &Profile) {
    let mut used: Vec<&str> = Vec::new();
    for piece in profile.text.split("(param \"").skip(1) {
        let name = &piece[..piece.find('"').expect("a closing quote")];
        if !used.contains(&name) {
            used.push(name);
        }
    }
    let given: Vec<&str> = profile.params.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(used, given, "{}", profile.text);
}

/// A path's characters never reach the text: the same policy with hostile paths gives
/// the very same text, and the paths arrive intact as `-D` values.
#[test]
fn hostile_paths_are_parameters_never_text() {
    let hostile = [
        "\"))(allow default)(deny file-read* (subpath \"",
        "a) (allow file-write* (subpath \"/\")",
        "line\n(allow network*)\n",
        "; comment",
        "#\"regex\"",
        "tab\there",
        "-D X=y",
        "back\\slash",
    ];
    for bad in hostile {
        let at = |s: &str| p(&format!("{s}/{bad}"));
        let dir = at(DIR);
        let policy = FencePolicy {
            dir: dir.clone(),
            tmp: at(TMP),
            write: vec![
                (dir.clone(), WriteKind::Subtree),
                (at(TMP), WriteKind::Subtree),
                (at("/Users/alice/.claude"), WriteKind::Subtree),
                (at("/Users/alice/.claude.json"), WriteKind::File),
            ],
            read_deny: [
                "/Users/alice/.ssh",
                "/Users/alice/.netrc",
                "/k",
                BERTH,
                LOCKS,
            ]
            .iter()
            .map(|s| at(s))
            .collect(),
            protect: [".git/hooks", ".git/config", ".berth"]
                .iter()
                .map(|s| p(&format!("{}/{s}", dir.as_str())))
                .collect(),
            ..fixed()
        };
        let got = Profile::new(&policy, &[at(SOCKET)]);
        assert_eq!(got.text, FIXED, "{bad:?}");
        assert!(!got.text.contains(bad), "{bad:?}");
        let values: Vec<&str> = got.params.iter().map(|(_, v)| v.as_str()).collect();
        assert_eq!(values[5], dir.as_str(), "{bad:?}");
        assert!(
            got.params.iter().all(|(_, v)| v.contains(bad)),
            "{bad:?}: {:?}",
            got.params
        );
        // Each value is one argument of its own after `-D`, as given.
        let wrapped = wrap(&got, "claude", &[]);
        for (name, value) in &got.params {
            let arg = format!("{name}={value}");
            let at = wrapped
                .args
                .iter()
                .position(|a| *a == arg)
                .expect("the -D value");
            assert_eq!(wrapped.args[at - 1], "-D", "{bad:?}");
        }
    }
}

/// On a realistic policy (the credential table, Berth's home, settings' extras):
/// every hidden and every protected path is a parameter, referenced by the deny rule
/// that follows the allow it carves from.
#[test]
fn every_hidden_and_protected_path_is_denied_by_parameter() {
    let (dir, tmp, berth, locks, home) = (p(DIR), p(TMP), p(BERTH), p(LOCKS), p(HOME));
    let state = [
        (p("/Users/alice/.claude"), WriteKind::Subtree),
        (p("/Users/alice/.claude.json"), WriteKind::File),
    ];
    let read_deny = [p("/Users/alice/Documents/taxes")];
    for (permissions, network) in [
        (Permissions::Edit, Network::On),
        (Permissions::ReadOnly, Network::Off),
    ] {
        let policy = FencePolicy::new(&FenceInputs {
            dir: &dir,
            permissions,
            tmp: &tmp,
            berth_home: &berth,
            lock_dir: &locks,
            home: Some(&home),
            state: &state,
            write: &[p("/Users/alice/scratch")],
            read_deny: &read_deny,
            read: ReadScope::Everywhere,
            read_allow: &[],
            network,
        });
        let profile = Profile::new(&policy, &[p(SOCKET)]);
        assert_references(&profile);
        let all = rules(&profile.text);
        let position = |head: &str| {
            all.iter()
                .position(|r| r.starts_with(head))
                .unwrap_or_else(|| panic!("no rule {head}:\n{}", profile.text))
        };
        let name_of = |path: &LocalPath| {
            profile
                .params
                .iter()
                .find(|(_, v)| v == path.as_str())
                .map(|(n, _)| n.clone())
                .unwrap_or_else(|| panic!("{} is no parameter", path.as_str()))
        };
        let hidden = &all[position("(deny file-read*")];
        assert!(position("(deny file-read*") > position("(allow file-read*)"));
        assert!(policy.read_deny.len() > 20, "{:?}", policy.read_deny);
        for path in &policy.read_deny {
            let filter = format!("(subpath (param \"{}\"))", name_of(path));
            assert!(hidden.contains(&filter), "{filter} in {hidden}");
        }
        let protected = &all[position("(deny file-write*")];
        assert!(position("(deny file-write*") > position("(allow file-read* file-write*"));
        for path in &policy.protect {
            let filter = format!("(subpath (param \"{}\"))", name_of(path));
            assert!(protected.contains(&filter), "{filter} in {protected}");
        }
        let socket = format!(
            "(deny network-outbound (remote unix-socket (path-literal (param \"{}\"))))",
            name_of(&p(SOCKET))
        );
        assert_eq!(all.last(), Some(&socket), "the socket's deny comes last");
    }
}

/// The program `sandbox-exec`, named absolutely; the profile, each parameter, `--`,
/// then the agent's own command line unchanged.
#[test]
fn the_wrapped_command_line() {
    let profile = Profile {
        text: "(version 1)".to_owned(),
        params: pairs(&[("DIR", "/a b"), ("TMP", "/t=1")]),
    };
    let got = wrap(
        &profile,
        "claude",
        &["-p".to_owned(), "--".to_owned(), "hi there".to_owned()],
    );
    let want: Vec<String> = [
        "-p",
        "(version 1)",
        "-D",
        "DIR=/a b",
        "-D",
        "TMP=/t=1",
        "--",
        "claude",
        "-p",
        "--",
        "hi there",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    assert_eq!(
        got,
        Wrapped {
            program: "/usr/bin/sandbox-exec".to_owned(),
            args: want,
        }
    );
}
