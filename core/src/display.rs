//! Privacy-stripped display of paths.
//!
//! Wherever a session appears — the CLI header, the web UI, a screenshot someone
//! shares — its directory is shown in this form: the user's home becomes `~`, another
//! user's home shows `…` instead of a name, and the account name never appears.

use crate::context::Context;
use crate::path::{LocalPath, Root};
use std::borrow::Cow;

/// The placeholder that stands wherever a user name would have been.
///
/// Not a character a user name can hold, so redaction can never spell a name anew.
pub const USER_PLACEHOLDER: &str = "…";

/// Directories under a homes container that belong to no single user.
const SHARED_HOMES: [&str; 5] = ["Shared", "Public", "Default", "Default User", "All Users"];

/// The privacy-stripped form of `path`.
///
/// Guarantees: the result never contains the context's user name (compared without
/// regard to case), and never the text of the home directory.
pub fn display(ctx: &Context, path: &LocalPath) -> String {
    let sep = path.platform().separator();
    let name = ctx.user_name();
    let parts = path.parts();
    let mut out = String::with_capacity(path.as_str().len() + 4);
    // `skip`: components replaced by `~`; `masked`: the index of another user's home.
    let (skip, masked) = match ctx.home.as_ref().filter(|h| path.starts_with(h)) {
        Some(home) => {
            out.push('~');
            if parts.len() > home.parts().len() {
                out.push(sep);
            }
            (home.parts().len(), None)
        }
        None => {
            match path.root() {
                Root::Slash => out.push('/'),
                Root::Drive(letter) => {
                    out.push(*letter);
                    out.push_str(":\\");
                }
                Root::Unc { server, share } => {
                    out.push_str("\\\\");
                    push_redacted(&mut out, server, name);
                    out.push('\\');
                    push_redacted(&mut out, share, name);
                    out.push('\\');
                }
                Root::Device { marker } => {
                    out.push_str("\\\\");
                    out.push(*marker);
                    out.push('\\');
                }
            }
            (0, is_homes_container(path).then_some(1))
        }
    };
    for (i, part) in parts.iter().enumerate().skip(skip) {
        if i > skip {
            out.push(sep);
        }
        if masked == Some(i) {
            out.push_str(USER_PLACEHOLDER);
        } else {
            push_redacted(&mut out, part, name);
        }
    }
    out
}

/// Free text (an agent's output, a tool's input, an error message) with the same
/// rule applied to every path in it: the home directory becomes `~`, another user's
/// home under `/home/` or `/Users/` shows `…` for the name, and the account name is
/// replaced wherever it appears, as in [`display`].
///
/// This is the one redaction rule of everything served outside the control socket.
/// Guarantees: the result never contains the context's user name (compared without
/// regard to case) nor the text of its home directory. Text with nothing to redact is
/// returned as it is, without copying.
pub fn redact_text<'a>(ctx: &Context, text: &'a str) -> Cow<'a, str> {
    let name = ctx.user_name();
    let home = ctx
        .home
        .as_ref()
        .map(LocalPath::as_str)
        .filter(|h| h.len() > 1);
    let has_home = home.is_some_and(|h| text.contains(h));
    let has_homes = text.contains("/home/") || text.contains("/Users/");
    let has_name = name.is_some_and(|n| contains_folded(text, n));
    if !(has_home || has_homes || has_name) {
        return Cow::Borrowed(text);
    }
    let mut step = Cow::Borrowed(text);
    if let (true, Some(home)) = (has_home, home) {
        step = Cow::Owned(replace_home(&step, home));
    }
    if has_homes {
        step = Cow::Owned(mask_other_homes(&step));
    }
    let mut out = String::with_capacity(step.len());
    push_redacted(&mut out, &step, name);
    Cow::Owned(out)
}

/// Free text with each of `homes` shown as `~`: the homes of other machines (a remote
/// daemon's, as it said at registration), whose paths [`redact_text`] with this
/// machine's context cannot recognize when they lie outside `/home` and `/Users`.
/// Longer homes first, so one inside another is never half replaced; a home followed
/// by more of a name (`/home/alice2`) is left alone. Text naming none of them is
/// returned as it is, without copying.
pub fn replace_homes<'a>(homes: &[LocalPath], text: &'a str) -> Cow<'a, str> {
    let mut homes: Vec<&str> = homes
        .iter()
        .map(LocalPath::as_str)
        .filter(|h| h.len() > 1 && text.contains(*h))
        .collect();
    if homes.is_empty() {
        return Cow::Borrowed(text);
    }
    homes.sort_by_key(|h| std::cmp::Reverse(h.len()));
    let mut out = text.to_owned();
    for home in homes {
        out = replace_home(&out, home);
    }
    Cow::Owned(out)
}

/// Every string value inside `value` (not its object keys) through [`replace_homes`].
pub fn replace_homes_json(homes: &[LocalPath], value: &mut serde_json::Value) {
    match value {
        serde_json::Value::String(s) => {
            if let Cow::Owned(r) = replace_homes(homes, s) {
                *s = r;
            }
        }
        serde_json::Value::Array(items) => {
            items.iter_mut().for_each(|v| replace_homes_json(homes, v));
        }
        serde_json::Value::Object(map) => {
            map.values_mut().for_each(|v| replace_homes_json(homes, v));
        }
        serde_json::Value::Null | serde_json::Value::Bool(_) | serde_json::Value::Number(_) => {}
    }
}

/// Every string value inside `value` (not its object keys) through [`redact_text`].
pub fn redact_json(ctx: &Context, value: &mut serde_json::Value) {
    match value {
        serde_json::Value::String(s) => {
            if let Cow::Owned(r) = redact_text(ctx, s) {
                *s = r;
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(|v| redact_json(ctx, v)),
        serde_json::Value::Object(map) => map.values_mut().for_each(|v| redact_json(ctx, v)),
        serde_json::Value::Null | serde_json::Value::Bool(_) | serde_json::Value::Number(_) => {}
    }
}

/// A character that can continue a path component: after the home's text it means the
/// text names another directory (`/home/alice2`), not the home.
fn continues_name(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '_' | '-' | '.')
}

fn replace_home(text: &str, home: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(home) {
        let after = &rest[at + home.len()..];
        out.push_str(&rest[..at]);
        if after.chars().next().is_some_and(continues_name) {
            out.push_str(home);
        } else {
            out.push('~');
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

/// `/home/<name>` and `/Users/<name>` with the name masked, shared folders kept.
fn mask_other_homes(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    loop {
        let found = ["/home/", "/Users/"]
            .iter()
            .filter_map(|m| rest.find(m).map(|at| (at, m.len())))
            .min();
        let Some((at, len)) = found else { break };
        out.push_str(&rest[..at + len]);
        let tail = &rest[at + len..];
        let end = tail
            .find(|c: char| !continues_name(c))
            .unwrap_or(tail.len());
        let who = &tail[..end];
        if who.is_empty() || SHARED_HOMES.iter().any(|s| s.eq_ignore_ascii_case(who)) {
            rest = tail;
            continue;
        }
        out.push_str(USER_PLACEHOLDER);
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// Whether `text` contains `name`, compared without regard to case.
fn contains_folded(text: &str, name: &str) -> bool {
    if name.is_empty() {
        return false;
    }
    if name.is_ascii() {
        let (hay, needle) = (text.as_bytes(), name.as_bytes());
        return hay
            .windows(needle.len())
            .any(|w| w.eq_ignore_ascii_case(needle));
    }
    text.to_lowercase().contains(&name.to_lowercase())
}

/// Whether the path lies under `/home/<x>`, `/Users/<x>` or `<drive>:\Users\<x>` with
/// `<x>` an individual user's directory.
fn is_homes_container(path: &LocalPath) -> bool {
    let parts = path.parts();
    let container = match (path.root(), parts.first()) {
        (Root::Slash, Some(first)) => first == "home" || first == "Users",
        (Root::Drive(_), Some(first)) => first.eq_ignore_ascii_case("Users"),
        (Root::Slash | Root::Drive(_) | Root::Unc { .. } | Root::Device { .. }, _) => false,
    };
    container
        && parts
            .get(1)
            .is_some_and(|who| !SHARED_HOMES.iter().any(|s| s.eq_ignore_ascii_case(who)))
}

/// Appends `text` with every case-insensitive occurrence of `name` replaced by the
/// placeholder. Left to right and non-overlapping, so no occurrence survives: the
/// placeholder cannot be part of a name.
fn push_redacted(out: &mut String, text: &str, name: Option<&str>) {
    let Some(name) = name.filter(|n| !n.is_empty()) else {
        out.push_str(text);
        return;
    };
    if name.is_ascii() {
        // Bytes of an ASCII name can only match ASCII bytes, never the inside of a
        // multi-byte character, so a byte search is exact (and allocation-free).
        let (hay, needle) = (text.as_bytes(), name.as_bytes());
        let mut start = 0;
        let mut i = 0;
        while i + needle.len() <= hay.len() {
            if hay[i..i + needle.len()].eq_ignore_ascii_case(needle) {
                out.push_str(&text[start..i]);
                out.push_str(USER_PLACEHOLDER);
                i += needle.len();
                start = i;
            } else {
                i += 1;
            }
        }
        out.push_str(&text[start..]);
        return;
    }
    let fold = |c: char| c.to_lowercase().next().unwrap_or(c);
    let hay: Vec<char> = text.chars().collect();
    let needle: Vec<char> = name.chars().map(fold).collect();
    let mut i = 0;
    while i < hay.len() {
        let end = i + needle.len();
        if !needle.is_empty()
            && end <= hay.len()
            && hay[i..end]
                .iter()
                .map(|c| fold(*c))
                .eq(needle.iter().copied())
        {
            out.push_str(USER_PLACEHOLDER);
            i = end;
        } else {
            out.push(hay[i]);
            i += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::Platform;
    use proptest::prelude::*;

    #[test]
    fn another_machines_home_shows_as_tilde_wherever_it_lies() {
        let homes = [
            LocalPath::parse(Platform::Linux, "/tmp/x/home/ann").unwrap(),
            LocalPath::parse(Platform::Linux, "/tmp/x/home/ann/inner").unwrap(),
            LocalPath::parse(Platform::Linux, "/").unwrap(),
        ];
        assert_eq!(
            replace_homes(&homes, "cwd=/tmp/x/home/ann/.local/share/berth/scratch/s1"),
            "cwd=~/.local/share/berth/scratch/s1"
        );
        assert_eq!(
            replace_homes(&homes, "in /tmp/x/home/ann/inner/a"),
            "in ~/a"
        );
        assert_eq!(
            replace_homes(&homes, "/tmp/x/home/ann2/a and /tmp/x/home/ann"),
            "/tmp/x/home/ann2/a and ~"
        );
        assert!(matches!(
            replace_homes(&homes, "/etc/hosts"),
            Cow::Borrowed(_)
        ));
    }

    fn ctx(p: Platform, home: &str) -> Context {
        Context::new(p).with_home(LocalPath::parse(p, home).unwrap())
    }
    fn show(c: &Context, s: &str) -> String {
        display(c, &LocalPath::parse(c.platform, s).unwrap())
    }

    #[test]
    fn table() {
        let linux = ctx(Platform::Linux, "/home/alice");
        let mac = ctx(Platform::Macos, "/Users/Alice");
        let win = ctx(Platform::Windows, "C:\\Users\\alice");
        let cases = [
            (&linux, "/home/alice", "~"),
            (&linux, "/home/alice/code/app", "~/code/app"),
            (&linux, "/home/bob/code", "/home/…/code"),
            (&linux, "/srv/alice-data/x", "/srv/…-data/x"),
            (&linux, "/opt/tools", "/opt/tools"),
            (&linux, "/home/alicex", "/home/…"),
            (&mac, "/users/alice/Code", "~/Code"),
            (&mac, "/Users/Shared/x", "/Users/Shared/x"),
            (&win, "c:\\users\\ALICE\\code", "~\\code"),
            (&win, "D:\\Users\\bob\\x", "D:\\Users\\…\\x"),
            (&win, "D:\\work", "D:\\work"),
        ];
        for (c, input, want) in cases {
            assert_eq!(show(c, input), want, "{input}");
        }
    }

    #[test]
    fn without_a_home_nothing_is_stripped_but_other_homes() {
        let c = Context::new(Platform::Linux);
        assert_eq!(show(&c, "/home/bob/x"), "/home/…/x");
        assert_eq!(show(&c, "/srv/x"), "/srv/x");
    }

    #[test]
    fn free_text_table() {
        let c = ctx(Platform::Linux, "/home/alice");
        let cases = [
            ("wrote /home/alice/code/app/a.rs", "wrote ~/code/app/a.rs"),
            ("HOME=/home/alice PWD=/home/alice/x", "HOME=~ PWD=~/x"),
            ("\"cwd\":\"/home/alice\"", "\"cwd\":\"~\""),
            ("/home/alice2/x", "/home/…/x"),
            (
                "see /home/bob/notes and /Users/Shared/x",
                "see /home/…/notes and /Users/Shared/x",
            ),
            ("hello Alice, bye", "hello …, bye"),
            ("nothing to see", "nothing to see"),
            ("/srv/app", "/srv/app"),
        ];
        for (input, want) in cases {
            assert_eq!(redact_text(&c, input), want, "{input}");
        }
        assert!(matches!(redact_text(&c, "plain"), Cow::Borrowed(_)));
    }

    #[test]
    fn json_strings_are_redacted_and_keys_kept() {
        let c = ctx(Platform::Linux, "/home/alice").with_user("alice");
        let mut v = serde_json::json!({"alice": ["/home/alice/a", 1, {"k": "alice"}], "n": null});
        redact_json(&c, &mut v);
        assert_eq!(
            v,
            serde_json::json!({"alice": ["~/a", 1, {"k": "…"}], "n": null})
        );
    }

    fn name() -> impl Strategy<Value = String> {
        "[a-zA-Z_][a-zA-Z0-9_.-]{1,12}"
    }
    fn component() -> impl Strategy<Value = String> {
        "[a-zA-Z0-9 ._-]{1,10}"
    }

    proptest! {
        /// No display form ever contains the user's name, wherever the name appears.
        #[test]
        fn display_never_contains_the_user_name(
            user in name(),
            platform in prop_oneof![Just(Platform::Linux), Just(Platform::Macos), Just(Platform::Windows)],
            under_home in any::<bool>(),
            before in proptest::collection::vec(component(), 0..4),
            after in proptest::collection::vec(component(), 0..4),
            splice in any::<bool>(),
        ) {
            let (home_text, sep) = match platform {
                Platform::Linux => (format!("/home/{user}"), "/"),
                Platform::Macos => (format!("/Users/{user}"), "/"),
                Platform::Windows => (format!("C:\\Users\\{user}"), "\\"),
            };
            let home = LocalPath::parse(platform, &home_text);
            prop_assume!(home.is_ok());
            let c = Context::new(platform).with_home(home.unwrap());
            let mut text = if under_home { home_text } else if platform.is_windows() { String::from("D:") } else { String::new() };
            for p in &before { text.push_str(sep); text.push_str(p); }
            if splice { text.push_str(sep); text.push_str(&format!("x{}y", user.to_uppercase())); }
            for p in &after { text.push_str(sep); text.push_str(p); }
            if text.is_empty() || text.ends_with(':') { text.push_str(sep); }
            if let Ok(path) = LocalPath::parse(platform, &text) {
                let shown = display(&c, &path);
                prop_assert!(!shown.to_lowercase().contains(&user.to_lowercase()), "{text} -> {shown}");
            }
        }

        /// Free text never keeps the user's name or home, whatever surrounds them.
        #[test]
        fn redacted_text_never_contains_the_user_name(
            user in name(),
            words in proptest::collection::vec("[a-zA-Z0-9 /._:\"=-]{0,12}", 0..6),
        ) {
            let c = ctx(Platform::Linux, &format!("/home/{user}"));
            let mut text = String::new();
            for (i, w) in words.iter().enumerate() {
                text.push_str(w);
                if i % 2 == 0 { text.push_str(&format!("/home/{user}")); } else { text.push_str(&user.to_uppercase()); }
            }
            let shown = redact_text(&c, &text);
            prop_assert!(!shown.to_lowercase().contains(&user.to_lowercase()), "{text} -> {shown}");
        }
    }
}
