use super::*;
use crate::platform::Platform;
use proptest::prelude::*;

fn linux() -> Context {
    Context::new(Platform::Linux)
        .with_home(LocalPath::parse(Platform::Linux, "/home/alice").unwrap())
        .with_berth_state(
            LocalPath::parse(Platform::Linux, "/home/alice/.local/share/berth").unwrap(),
        )
}
fn macos() -> Context {
    Context::new(Platform::Macos)
        .with_home(LocalPath::parse(Platform::Macos, "/Users/alice").unwrap())
}
fn windows() -> Context {
    Context::new(Platform::Windows)
        .with_home(LocalPath::parse(Platform::Windows, "C:\\Users\\alice").unwrap())
}

fn verdict(ctx: &Context, input: &str) -> Result<String, ErrorCode> {
    check_str(ctx, input)
        .map(|p| p.as_str().to_owned())
        .map_err(|r| r.code)
}

#[test]
fn linux_table() {
    use ErrorCode::*;
    let c = linux();
    let cases: &[(&str, Result<&str, ErrorCode>)] = &[
        ("/", Err(SystemRoot)),
        ("/home", Err(HomeDirectory)),
        ("/home/", Err(HomeDirectory)),
        ("/home/alice", Err(HomeDirectory)),
        ("~", Err(HomeDirectory)),
        ("/home/alice/code/..", Err(HomeDirectory)),
        ("/home/alice/.ssh", Err(CredentialDirectory)),
        ("~/.ssh/keys", Err(CredentialDirectory)),
        ("/home/alice/.SSH", Err(CredentialDirectory)),
        (
            "/home/alice/.local/share/keyrings/x",
            Err(CredentialDirectory),
        ),
        ("/home/alice/.config/berth", Err(CredentialDirectory)),
        ("/home/alice/.local/share/berth/scratch/s1", Err(BerthState)),
        ("/home/alice/.local/share", Err(BerthState)),
        ("/root", Err(HomeDirectory)),
        ("/tmp", Err(SystemRoot)),
        ("/tmp/", Err(SystemRoot)),
        ("/var", Err(SystemRoot)),
        ("/opt", Err(SystemRoot)),
        ("/etc", Err(SystemRoot)),
        ("/etc/x", Err(SystemRoot)),
        ("/ETC/x", Err(SystemRoot)),
        ("/code/../etc/passwd", Err(SystemRoot)),
        ("/proc/self/cwd", Err(SystemRoot)),
        ("/lib64/x", Err(SystemRoot)),
        ("/usr/local/src/app", Err(SystemRoot)),
        ("/private/var/folders/x", Err(SystemRoot)),
        ("/private/tmp", Err(SystemRoot)),
        ("relative/dir", Err(PathNotAbsolute)),
        ("", Err(PathEmpty)),
        ("/home/alice/code/app", Ok("/home/alice/code/app")),
        ("~/code/app/", Ok("/home/alice/code/app")),
        ("/tmp/work", Ok("/tmp/work")),
        ("/var/www/site", Ok("/var/www/site")),
        ("/opt/project", Ok("/opt/project")),
        ("/home/bob/code", Ok("/home/bob/code")),
        ("/libexec/x", Err(SystemRoot)),
        ("/code/lib", Ok("/code/lib")),
        ("/home/alice/.sshx", Ok("/home/alice/.sshx")),
    ];
    for (input, want) in cases {
        assert_eq!(verdict(&c, input), want.map(str::to_owned), "{input:?}");
    }
}

#[test]
fn macos_and_windows_tables() {
    use ErrorCode::*;
    let m = macos();
    let cases: &[(&str, Result<&str, ErrorCode>)] = &[
        ("/Users", Err(HomeDirectory)),
        ("/users/shared", Err(HomeDirectory)),
        ("/users/ALICE", Err(HomeDirectory)),
        ("/Users/alice/Library/Keychains", Err(CredentialDirectory)),
        ("/System/Library", Err(SystemRoot)),
        ("/Applications/X.app", Err(SystemRoot)),
        ("/Users/alice/Code/app", Ok("/Users/alice/Code/app")),
    ];
    for (input, want) in cases {
        assert_eq!(
            verdict(&m, input),
            want.map(str::to_owned),
            "macos {input:?}"
        );
    }
    let w = windows();
    let cases: &[(&str, Result<&str, ErrorCode>)] = &[
        ("C:\\", Err(SystemRoot)),
        ("d:/", Err(SystemRoot)),
        ("C:\\Users", Err(HomeDirectory)),
        ("c:\\users\\alice", Err(HomeDirectory)),
        (
            "C:\\Users\\alice\\AppData\\Roaming",
            Err(CredentialDirectory),
        ),
        ("C:\\Windows\\System32", Err(SystemRoot)),
        ("C:\\Program Files (x86)\\App", Err(SystemRoot)),
        ("C:\\ProgramData\\x", Err(SystemRoot)),
        ("\\\\server\\share\\code", Err(SystemRoot)),
        ("\\\\?\\C:\\code", Err(SystemRoot)),
        ("\\\\.\\PhysicalDrive0", Err(SystemRoot)),
        ("C:relative", Err(PathNotAbsolute)),
        (
            "C:\\Users\\alice\\code\\app",
            Ok("C:\\Users\\alice\\code\\app"),
        ),
        ("D:\\work\\app", Ok("D:\\work\\app")),
    ];
    for (input, want) in cases {
        assert_eq!(
            verdict(&w, input),
            want.map(str::to_owned),
            "windows {input:?}"
        );
    }
}

#[test]
fn refusals_name_the_path_and_rule_without_the_user_name() {
    let c = linux();
    let r = check_str(&c, "/home/alice/.ssh/id").unwrap_err();
    assert_eq!(
        r,
        Refusal::new(
            ErrorCode::CredentialDirectory,
            "~/.ssh/id is inside ~/.ssh, a directory of credentials and private settings",
            hint_for(ErrorCode::CredentialDirectory),
        )
    );
    let r = check_str(&c, "/etc/nginx").unwrap_err();
    assert_eq!(r.message, "/etc/nginx is inside /etc, a system directory");
    let r = check_str(&c, "/home/alice").unwrap_err();
    assert_eq!(r.message, "~ is your home directory");
}

#[test]
fn without_a_home_only_static_rules_fire() {
    let c = Context::new(Platform::Linux);
    assert_eq!(verdict(&c, "/home/alice"), Ok("/home/alice".to_owned()));
    assert_eq!(verdict(&c, "/etc"), Err(ErrorCode::SystemRoot));
    assert_eq!(verdict(&c, "~/x"), Err(ErrorCode::PathNotAbsolute));
}

const SUBTREES: [&str; 18] = [
    "/etc",
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib64",
    "/boot",
    "/dev",
    "/proc",
    "/sys",
    "/run",
    "/srv",
    "/snap",
    "/nix",
    "/System",
    "/Library",
    "/private/etc",
    "/home/alice/.ssh",
];

fn case_mix(s: &str, mask: u64) -> String {
    s.chars()
        .enumerate()
        .map(|(i, c)| {
            if mask >> (i % 64) & 1 == 1 {
                c.to_ascii_uppercase()
            } else {
                c.to_ascii_lowercase()
            }
        })
        .collect()
}

proptest! {
    /// Normalizing is idempotent: the text of a parsed path parses to the same path.
    #[test]
    fn normalizing_is_idempotent(
        platform in prop_oneof![Just(Platform::Linux), Just(Platform::Windows)],
        parts in proptest::collection::vec("[a-zA-Z0-9 ._-]{1,8}|\\.|\\.\\.|", 0..8),
        seps in proptest::collection::vec(prop_oneof![Just("/"), Just("//"), Just("\\")], 8),
    ) {
        let mut text = if platform.is_windows() { String::from("C:") } else { String::new() };
        for (i, p) in parts.iter().enumerate() {
            text.push_str(if platform.is_windows() { seps[i] } else { "/" });
            text.push_str(p);
        }
        if parts.is_empty() { text.push('/'); }
        if let Ok(once) = LocalPath::parse(platform, &text) {
            let twice = LocalPath::parse(platform, once.as_str()).unwrap();
            prop_assert_eq!(&once, &twice);
            prop_assert_eq!(once.as_str(), twice.as_str());
        }
    }

    /// Nothing under a refused subtree is ever accepted, whatever the case, the `..`
    /// or the trailing separators.
    #[test]
    fn nothing_under_a_refused_subtree_is_accepted(
        top in 0..SUBTREES.len(),
        mask in any::<u64>(),
        detour in proptest::collection::vec("[a-z]{1,6}", 0..3),
        below in proptest::collection::vec("[a-zA-Z0-9._-]{1,8}", 0..4),
        trailing in 0usize..3,
        platform in prop_oneof![Just(Platform::Linux), Just(Platform::Macos)],
    ) {
        let ctx = Context::new(platform).with_home(LocalPath::parse(platform, "/home/alice").unwrap());
        let mut text = String::new();
        for d in &detour { text.push('/'); text.push_str(d); }
        for _ in &detour { text.push_str("/.."); }
        text.push_str(&case_mix(SUBTREES[top], mask));
        for b in &below { text.push('/'); text.push_str(b); }
        text.push_str(&"/".repeat(trailing));
        let verdict = check_str(&ctx, &text);
        let refused = match &verdict {
            Err(r) => r.code == ErrorCode::SystemRoot || r.code == ErrorCode::CredentialDirectory,
            Ok(_) => false,
        };
        // `..` below the subtree may climb back out of it: only judge paths that stay in.
        let normalized = LocalPath::parse(platform, &text).unwrap();
        let top_path = LocalPath::parse(platform, SUBTREES[top]).unwrap();
        if normalized.starts_with_case(&top_path, true) {
            prop_assert!(refused, "{text:?} -> {verdict:?}");
        }
    }

    /// Every input gets a verdict; none panics.
    #[test]
    fn every_input_gets_a_verdict(input in "\\PC{0,64}", win in any::<bool>()) {
        let ctx = if win { windows() } else { linux() };
        let _ = check_str(&ctx, &input);
    }
}

/// What a Mac's `realpath` hands the rules (issue 19): `/tmp` and `/var` are links
/// into `/private`, and names compare without regard to case (APFS's default).
#[test]
fn macos_realpath_forms() {
    use ErrorCode::*;
    let m = macos();
    let cases: &[(&str, Result<&str, ErrorCode>)] = &[
        // `/tmp` → `/private/tmp`: the shared temporary directory, refused as `/tmp` is.
        ("/private/tmp", Err(SystemRoot)),
        ("/private/tmp/", Err(SystemRoot)),
        // A project made under `/tmp` is allowed, as under Linux's `/tmp`.
        ("/private/tmp/app", Ok("/private/tmp/app")),
        // `$TMPDIR` (`/var/folders/…`) → `/private/var/folders/…`: a system subtree.
        ("/private/var/folders/x7/T/app", Err(SystemRoot)),
        ("/PRIVATE/VAR/db", Err(SystemRoot)),
        ("/private/etc/ssh", Err(SystemRoot)),
        ("/private", Err(SystemRoot)),
        // Case-insensitive names: the home, its credentials, the system folders.
        ("/USERS/ALICE", Err(HomeDirectory)),
        ("/Users/ALICE/.SSH/id", Err(CredentialDirectory)),
        ("/users/alice/library/Keychains", Err(CredentialDirectory)),
        ("/system/library/x", Err(SystemRoot)),
        ("/applications/X.app", Err(SystemRoot)),
    ];
    for (input, want) in cases {
        assert_eq!(
            verdict(&m, input),
            want.map(str::to_owned),
            "macos {input:?}"
        );
    }
    // A project under the home in another case is still the user's, shown with `~`.
    let p = check_str(&m, "/users/Alice/Code/App").unwrap();
    assert_eq!(crate::display::display(&m, &p), "~/Code/App");
}
