//! What the rules know of the user they protect.

use crate::path::LocalPath;
use crate::platform::Platform;

/// The facts the refusal table and the display need beyond the path itself: whose
/// home it is, under which name, and where Berth keeps its own state.
///
/// Built by the native side from the real environment, and by the browser from what
/// the server tells it. Every field is optional where a surface may not know it; a rule
/// that needs an unknown fact simply does not fire (the native validator, which always
/// knows them, runs every rule again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Context {
    pub platform: Platform,
    pub home: Option<LocalPath>,
    /// The account name; defaults to the home directory's last component.
    pub user: Option<String>,
    /// Berth's own directories (its home, config, lock directory): never bindable.
    pub berth_state: Vec<LocalPath>,
}

impl Context {
    /// A context that knows only the platform.
    pub fn new(platform: Platform) -> Context {
        Context {
            platform,
            home: None,
            user: None,
            berth_state: Vec::new(),
        }
    }

    /// Sets the home directory (parsed for this context's platform).
    pub fn with_home(mut self, home: LocalPath) -> Context {
        self.home = Some(home);
        self
    }

    /// Sets the account name explicitly.
    pub fn with_user(mut self, user: impl Into<String>) -> Context {
        self.user = Some(user.into());
        self
    }

    /// Adds one of Berth's own state directories.
    pub fn with_berth_state(mut self, dir: LocalPath) -> Context {
        self.berth_state.push(dir);
        self
    }

    /// The display context for paths of another machine, whose user's home is `home`
    /// (`None`: not known), as this machine serves them: that home shows as `~`, this
    /// context's home gets no rule (on the other machine it names some other
    /// directory, and `~` there would be a wrong label), and this context's account
    /// name and other users' homes stay masked as everywhere.
    ///
    /// The name is kept explicitly: a name taken from this context's home would
    /// otherwise be lost with it, and the other home's last component put in its place.
    pub fn for_machine(&self, home: Option<LocalPath>) -> Context {
        Context {
            platform: home.as_ref().map_or(self.platform, LocalPath::platform),
            home,
            user: self.user_name().map(str::to_owned),
            berth_state: Vec::new(),
        }
    }

    /// The account name to keep out of every display: the explicit one, else the home
    /// directory's last component. `None` when neither is known or the name is empty.
    pub fn user_name(&self) -> Option<&str> {
        self.user
            .as_deref()
            .or_else(|| self.home.as_ref().and_then(LocalPath::file_name))
            .filter(|n| !n.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::display::redact_text;

    fn path(p: &str) -> LocalPath {
        LocalPath::parse(Platform::Linux, p).unwrap()
    }

    #[test]
    fn another_machines_paths_show_by_its_home_or_raw_never_by_this_ones() {
        let server = Context::new(Platform::Linux).with_home(path("/srv/sam"));
        let laptop = server.for_machine(Some(path("/home/alice")));
        let unknown = server.for_machine(None);
        assert_eq!(laptop.home, Some(path("/home/alice")));
        assert_eq!(unknown.home, None);
        for ctx in [&laptop, &unknown] {
            assert_eq!(
                ctx.user_name(),
                Some("sam"),
                "the server's name stays masked"
            );
        }
        // (text, by the laptop's home, by no home)
        let cases = [
            ("/srv/berth/proj", "/srv/berth/proj", "/srv/berth/proj"),
            ("/srv/sam/proj", "/srv/…/proj", "/srv/…/proj"),
            (
                "cwd=/home/alice/code/app",
                "cwd=~/code/app",
                "cwd=/home/…/code/app",
            ),
            (
                "/home/bob/x and /tmp/y",
                "/home/…/x and /tmp/y",
                "/home/…/x and /tmp/y",
            ),
        ];
        for (text, by_laptop, by_none) in cases {
            assert_eq!(redact_text(&laptop, text), by_laptop, "{text}");
            assert_eq!(redact_text(&unknown, text), by_none, "{text}");
        }
    }

    #[test]
    fn an_explicit_name_is_kept_and_the_other_homes_platform_taken() {
        let server = Context::new(Platform::Linux)
            .with_home(path("/srv/berth"))
            .with_user("sam")
            .with_berth_state(path("/srv/berth/.local/share/berth"));
        let home = LocalPath::parse(Platform::Windows, r"C:\Users\ann").unwrap();
        assert_eq!(
            server.for_machine(Some(home.clone())),
            Context {
                platform: Platform::Windows,
                home: Some(home),
                user: Some("sam".to_owned()),
                berth_state: Vec::new(),
            }
        );
    }
}
