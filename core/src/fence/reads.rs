//! Every location under the home the fence hides beyond the refusal table's credential
//! rows: one table ([`HIDDEN`]), each row with what kind of secret it holds.
//!
//! The refusal table refuses to *bind* credential directories; the fence must also keep
//! an agent from *reading* what would let it act as the user or learn what the user did:
//! credential files, shell and REPL histories (commands typed with tokens in them),
//! browser and mail profiles (cookies, saved passwords, session tokens, mail) in every
//! place Linux and macOS install them (native, snap, Flatpak, forks), and keyrings.
//! [`super::credential_patterns`] reads this table, so a row added here is hidden by
//! every fence (Landlock, Seatbelt) at once.

use super::Pattern;

/// What a hidden location holds: why an agent must not read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HiddenKind {
    /// Credential files and tokens (`~/.netrc`, `~/.config/gh`, …).
    Credential,
    /// Shell and REPL histories: commands typed by the user, tokens included.
    History,
    /// A browser profile: cookies, saved passwords, session tokens.
    Browser,
    /// A mail client's profile: mail and account passwords.
    Mail,
    /// A keyring or password store.
    Keyring,
}

impl HiddenKind {
    /// The kind as shown to people.
    pub const fn as_str(self) -> &'static str {
        match self {
            HiddenKind::Credential => "credential",
            HiddenKind::History => "history",
            HiddenKind::Browser => "browser",
            HiddenKind::Mail => "mail",
            HiddenKind::Keyring => "keyring",
        }
    }
}

/// One location the fence hides: its components under the home, and what it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hidden {
    pub pattern: Pattern,
    pub kind: HiddenKind,
}

const fn row(kind: HiddenKind, pattern: Pattern) -> Hidden {
    Hidden { pattern, kind }
}

use HiddenKind::{Browser, Credential, History, Keyring, Mail};

/// Locations the fence hides beyond the refusal table's credential rows: credential
/// files (the table refuses directories), the credential subfolders of the
/// [`super::NARROWED`] rows (`~/.config`, `~/Library`), histories, browser and mail
/// profiles, and keyrings. No row repeats a refusal-table row or lies beneath one the
/// fence already hides whole (a unit test holds that).
#[rustfmt::skip]
pub const HIDDEN: &[Hidden] = &[
    // Credential files and tokens.
    row(Credential, &[".netrc"]),
    row(Credential, &[".git-credentials"]),
    row(Credential, &[".npmrc"]),
    row(Credential, &[".pypirc"]),
    row(Credential, &[".cargo", "credentials"]),
    row(Credential, &[".cargo", "credentials.toml"]),
    // Maven's and Gradle's repository passwords and signing keys.
    row(Credential, &[".m2", "settings.xml"]),
    row(Credential, &[".m2", "settings-security.xml"]),
    row(Credential, &[".gradle", "gradle.properties"]),
    row(Credential, &[".config", "gcloud"]),
    row(Credential, &[".config", "gh"]),
    row(Credential, &[".config", "hub"]),
    row(Credential, &[".config", "op"]),
    row(Credential, &[".config", "rclone"]),
    // Shell and REPL histories.
    row(History, &[".bash_history"]),
    row(History, &[".zsh_history"]),
    row(History, &[".zhistory"]),
    row(History, &[".histfile"]),
    row(History, &[".sh_history"]),
    row(History, &[".local", "share", "fish", "fish_history"]),
    row(History, &[".python_history"]),
    row(History, &[".node_repl_history"]),
    row(History, &[".ts_node_repl_history"]),
    row(History, &[".psql_history"]),
    row(History, &[".mysql_history"]),
    row(History, &[".sqlite_history"]),
    row(History, &[".rediscli_history"]),
    row(History, &[".dbshell"]),
    row(History, &[".irb_history"]),
    row(History, &[".pry_history"]),
    row(History, &[".Rhistory"]),
    row(History, &[".lesshst"]),
    row(History, &[".viminfo"]),
    row(History, &[".local", "share", "nvim", "shada"]),
    row(History, &[".local", "state", "nvim", "shada"]),
    // Browsers on Linux: native profiles, Chromium and Firefox forks.
    row(Browser, &[".mozilla"]),
    row(Browser, &[".librewolf"]),
    row(Browser, &[".waterfox"]),
    row(Browser, &[".floorp"]),
    row(Browser, &[".zen"]),
    row(Browser, &[".config", "google-chrome"]),
    row(Browser, &[".config", "google-chrome-beta"]),
    row(Browser, &[".config", "google-chrome-unstable"]),
    row(Browser, &[".config", "chromium"]),
    row(Browser, &[".config", "BraveSoftware"]),
    row(Browser, &[".config", "vivaldi"]),
    row(Browser, &[".config", "opera"]),
    row(Browser, &[".config", "opera-beta"]),
    row(Browser, &[".config", "microsoft-edge"]),
    row(Browser, &[".config", "microsoft-edge-beta"]),
    row(Browser, &[".config", "microsoft-edge-dev"]),
    row(Browser, &[".config", "yandex-browser"]),
    row(Browser, &[".config", "falkon"]),
    row(Browser, &[".local", "share", "qutebrowser"]),
    row(Browser, &[".local", "share", "epiphany"]),
    row(Browser, &[".local", "share", "torbrowser"]),
    // Browsers as snaps and Flatpaks.
    row(Browser, &["snap", "firefox"]),
    row(Browser, &["snap", "chromium"]),
    row(Browser, &["snap", "brave"]),
    row(Browser, &["snap", "opera"]),
    row(Browser, &["snap", "vivaldi"]),
    row(Browser, &[".var", "app", "org.mozilla.firefox"]),
    row(Browser, &[".var", "app", "org.chromium.Chromium"]),
    row(Browser, &[".var", "app", "io.github.ungoogled_software.ungoogled_chromium"]),
    row(Browser, &[".var", "app", "com.brave.Browser"]),
    row(Browser, &[".var", "app", "com.google.Chrome"]),
    row(Browser, &[".var", "app", "com.microsoft.Edge"]),
    row(Browser, &[".var", "app", "com.vivaldi.Vivaldi"]),
    row(Browser, &[".var", "app", "com.opera.Opera"]),
    row(Browser, &[".var", "app", "io.gitlab.librewolf-community"]),
    row(Browser, &[".var", "app", "app.zen_browser.zen"]),
    row(Browser, &[".var", "app", "org.gnome.Epiphany"]),
    row(Browser, &[".var", "app", "org.torproject.torbrowser-launcher"]),
    // Browsers on macOS.
    row(Browser, &["Library", "Cookies"]),
    row(Browser, &["Library", "Safari"]),
    row(Browser, &["Library", "Containers", "com.apple.Safari"]),
    row(Browser, &["Library", "Application Support", "Google", "Chrome"]),
    row(Browser, &["Library", "Application Support", "Chromium"]),
    row(Browser, &["Library", "Application Support", "BraveSoftware"]),
    row(Browser, &["Library", "Application Support", "Firefox"]),
    row(Browser, &["Library", "Application Support", "Microsoft Edge"]),
    row(Browser, &["Library", "Application Support", "Vivaldi"]),
    row(Browser, &["Library", "Application Support", "com.operasoftware.Opera"]),
    row(Browser, &["Library", "Application Support", "Arc"]),
    row(Browser, &["Library", "Application Support", "zen"]),
    // Mail.
    row(Mail, &[".thunderbird"]),
    row(Mail, &[".mozilla-thunderbird"]),
    row(Mail, &["snap", "thunderbird"]),
    row(Mail, &[".var", "app", "org.mozilla.Thunderbird"]),
    row(Mail, &[".var", "app", "org.gnome.Evolution"]),
    row(Mail, &[".local", "share", "evolution"]),
    row(Mail, &[".claws-mail"]),
    row(Mail, &["Library", "Application Support", "Thunderbird"]),
    row(Mail, &["Library", "Mail"]),
    row(Mail, &["Library", "Containers", "com.apple.mail"]),
    // Keyrings and password stores (`~/.gnupg`, `~/.password-store` and
    // `~/.local/share/keyrings` are refusal-table rows, hidden through it).
    row(Keyring, &["Library", "Keychains"]),
    row(Keyring, &[".local", "share", "kwalletd"]),
    row(Keyring, &[".pki"]),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::code::ErrorCode;
    use crate::rules::{Anchor, Extent, Family, RULES};

    fn credential_rows() -> Vec<Pattern> {
        RULES
            .iter()
            .filter(|r| {
                r.family == Family::Posix
                    && r.anchor == Anchor::Home
                    && r.extent == Extent::Subtree
                    && r.code == ErrorCode::CredentialDirectory
            })
            .map(|r| r.pattern)
            .collect()
    }

    /// One table: no row twice, none repeating a refusal-table row, none beneath a row
    /// the fence already hides whole (only beneath a narrowed one), none beneath
    /// another row of its own.
    #[test]
    fn the_table_has_no_second_list_inside_it() {
        let rows = credential_rows();
        for (i, h) in HIDDEN.iter().enumerate() {
            assert!(!h.pattern.is_empty());
            for part in h.pattern {
                assert!(!part.is_empty() && !part.contains('/'), "{:?}", h.pattern);
            }
            for other in &HIDDEN[i + 1..] {
                assert_ne!(h.pattern, other.pattern, "twice");
            }
            for other in HIDDEN {
                if other.pattern != h.pattern {
                    assert!(
                        !h.pattern.starts_with(other.pattern),
                        "{:?} lies beneath {:?}",
                        h.pattern,
                        other.pattern
                    );
                }
            }
            for r in &rows {
                assert_ne!(h.pattern, *r, "a refusal-table row");
                if h.pattern.starts_with(r) {
                    assert!(
                        super::super::NARROWED.contains(r),
                        "{:?} lies beneath the hidden {r:?}",
                        h.pattern
                    );
                }
            }
        }
    }

    /// The locations the issue names are rows, of the kind it names.
    #[test]
    fn the_named_locations_are_hidden_by_kind() {
        let kind_of = |p: &[&str]| HIDDEN.iter().find(|h| h.pattern == p).map(|h| h.kind);
        let want: &[(&[&str], HiddenKind)] = &[
            (&[".bash_history"], History),
            (&[".zsh_history"], History),
            (&[".local", "share", "fish", "fish_history"], History),
            (&[".python_history"], History),
            (&[".psql_history"], History),
            (&[".viminfo"], History),
            (&["snap", "firefox"], Browser),
            (&["snap", "chromium"], Browser),
            (&["snap", "brave"], Browser),
            (&[".var", "app", "org.mozilla.firefox"], Browser),
            (&[".var", "app", "com.brave.Browser"], Browser),
            (&[".var", "app", "com.google.Chrome"], Browser),
            (&[".config", "BraveSoftware"], Browser),
            (&[".config", "vivaldi"], Browser),
            (&[".config", "microsoft-edge"], Browser),
            (&[".librewolf"], Browser),
            (&[".mozilla"], Browser),
            (
                &["Library", "Application Support", "Google", "Chrome"],
                Browser,
            ),
            (&["Library", "Safari"], Browser),
            (&[".thunderbird"], Mail),
            (&["snap", "thunderbird"], Mail),
            (&[".var", "app", "org.mozilla.Thunderbird"], Mail),
            (&["Library", "Mail"], Mail),
            (&["Library", "Keychains"], Keyring),
            (&[".netrc"], Credential),
        ];
        for (p, kind) in want {
            assert_eq!(kind_of(p), Some(*kind), "{p:?}");
        }
        for kind in [Credential, History, Browser, Mail, Keyring] {
            assert!(!kind.as_str().is_empty());
        }
    }
}
