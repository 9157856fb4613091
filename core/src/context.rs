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

    /// The account name to keep out of every display: the explicit one, else the home
    /// directory's last component. `None` when neither is known or the name is empty.
    pub fn user_name(&self) -> Option<&str> {
        self.user
            .as_deref()
            .or_else(|| self.home.as_ref().and_then(LocalPath::file_name))
            .filter(|n| !n.is_empty())
    }
}
