//! The `berth` command line: docs/api.md's contract, human output by default and one JSON
//! document with `--json`.

mod agents;
mod approvals;
mod changes;
mod chat;
mod client;
mod commands;
mod conceal;
mod daemon;
mod lifecycle;
mod serve;
mod service;
mod settings;
mod setup;
mod trust;
mod ui;
mod usage;

use berth_local_agent::front::{error, lean, render};
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

/// Runs AI coding agents in chat sessions, berthed in your own directories.
#[derive(Debug, Parser)]
#[command(name = "berth", version, about, propagate_version = true)]
pub struct Cli {
    /// Berth's state directory (default: $BERTH_HOME, else ~/.local/share/berth).
    #[arg(long, global = true, value_name = "DIR")]
    pub home: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the server: API, control socket, web UI and the embedded executor.
    Serve(ServeArgs),
    /// Validate a directory as a binding would (no server needed).
    Check {
        /// The directory (relative paths from the current directory; `~` is expanded).
        path: PathBuf,
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Register and list agents.
    #[command(subcommand)]
    Agent(AgentCmd),
    /// Create, inspect, link and unlink sessions.
    #[command(subcommand)]
    Session(SessionCmd),
    /// Chat with a session's agent: its directory always on screen, `/link` from where
    /// you stand. A plain line mode when stdin or stdout is not a terminal.
    Chat(ChatArgs),
    /// Send a message to a session; streams until its task ends.
    Send {
        /// The session: its id or a unique prefix of it.
        id: String,
        /// The message for the agent.
        message: String,
        /// Return as soon as the task is accepted, printing its id (and how to follow
        /// or cancel it).
        #[arg(long)]
        detach: bool,
        /// One JSON event per line; the last is `{"task": {...}}`.
        #[arg(long)]
        json: bool,
    },
    /// Tasks: list them, cancel one, see what one changed (diff) and put it back (undo).
    #[command(subcommand)]
    Task(TaskCmd),
    /// What agents under the `ask` policy wait for you to answer, across sessions.
    Approvals {
        /// Recent decided requests too, with who decided them and how.
        #[arg(long)]
        all: bool,
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Allow a request an agent waits on (see `berth approvals`).
    Approve {
        /// The request: its id or a unique prefix of it (`3f9c0a12-1`).
        id: String,
        /// Also allow it from now on in this session: a rule of its kind and whole
        /// command (or its one path), listed by `berth session rules`.
        #[arg(long)]
        always: bool,
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Deny a request an agent waits on (see `berth approvals`).
    Deny {
        /// The request: its id or a unique prefix of it (`3f9c0a12-1`).
        id: String,
        /// Why, in words the agent is given.
        #[arg(long)]
        reason: Option<String>,
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Token usage added up across sessions: yours (on a team server, an admin's:
    /// everyone's), grouped by agent, session or day.
    Usage {
        /// Only tasks finished since this UTC date (YYYY-MM-DD) or time
        /// (YYYY-MM-DDTHH:MM:SSZ).
        #[arg(long)]
        since: Option<String>,
        /// Group by `agent` (the default), `session` or `day`.
        #[arg(long)]
        by: Option<String>,
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Projects and their directories.
    #[command(subcommand)]
    Project(ProjectCmd),
    /// Trust a directory's project layer (its env, wider permissions), revoke that
    /// trust, or list trusted directories. Only this command (and `session link
    /// --trust`) grants it.
    Trust(TrustArgs),
    /// See the settings a session uses and where each comes from; check a settings
    /// file.
    #[command(subcommand)]
    Settings(SettingsCmd),
    /// Print shell completions: `berth completions bash > ~/.local/share/bash-completion/completions/berth`.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: Shell,
    },
    /// Run this machine as a remote executor of a Berth server, or manage the tokens
    /// daemons use (`berth daemon token ...`, on the server's machine).
    Daemon(DaemonArgs),
    /// Print the web UI's address with its token (from the running `berth serve`'s
    /// serve.json): `berth serve` shows the token only on a terminal.
    Ui {
        /// Open the address in the browser as well (xdg-open, or open on macOS).
        #[arg(long)]
        open: bool,
        /// Make a new token: the old one, and every browser signed in with it, stops
        /// working at once (the running server takes the new one at its next request).
        #[arg(long)]
        rotate: bool,
        /// Print one JSON document (`url`, `token`, `open`) instead of the address.
        #[arg(long)]
        json: bool,
    },
    /// Start `berth serve` at login: a systemd user unit (Linux) or a launchd agent
    /// (macOS), restarted when it fails.
    #[command(subcommand)]
    Service(ServiceCmd),
}

#[derive(Debug, Subcommand)]
pub enum ServiceCmd {
    /// Write the unit, enable it and start it (replacing one written before).
    Install {
        /// Print the unit instead of installing it.
        #[arg(long)]
        print: bool,
        /// With --print: the unit for this service manager (default: this machine's).
        #[arg(long, value_enum, requires = "print")]
        manager: Option<service::Manager>,
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Stop and disable the service, and remove its unit.
    Uninstall {
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Whether the unit is installed, enabled and running.
    Status {
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
pub struct ChatArgs {
    /// The session: its id or a unique prefix of it (default: a new session).
    pub session: Option<String>,
    /// For a new session: the registered agent (default: the settings' `agent`, else
    /// the only one registered).
    #[arg(long, conflicts_with = "session")]
    pub agent: Option<String>,
    /// For a new session: its title.
    #[arg(long, conflicts_with = "session")]
    pub title: Option<String>,
    /// For a new session: bind it to this directory (default: the current directory,
    /// when Berth's rules accept it; `/link` later).
    #[arg(long, value_name = "PATH", conflicts_with = "session")]
    pub dir: Option<PathBuf>,
    /// For a new session: keep it unbound (its agent works in a scratch directory),
    /// even where the current directory could be bound.
    #[arg(long, conflicts_with_all = ["session", "dir", "mode"])]
    pub no_dir: bool,
    /// For a new session's directory: in-place (the default) or worktree.
    #[arg(long, value_enum, conflicts_with = "session")]
    pub mode: Option<Mode>,
    /// The plain line mode even on a terminal: a message or /command per line.
    #[arg(long)]
    pub line: bool,
    /// Line mode, printing one JSON document per line (events as `berth send --json`).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct DaemonArgs {
    #[command(subcommand)]
    pub command: Option<DaemonCmd>,
    /// The server's listener: https://HOST:PORT (plain http:// only to a loopback
    /// address, e.g. through an ssh tunnel).
    #[arg(long, value_name = "URL", required = true)]
    pub server: Option<String>,
    /// A private CA (PEM) to trust for the server's certificate, besides the system's
    /// roots (default: $BERTH_CA_FILE, else `ca_file` in the user settings).
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// The daemon token from `berth daemon token create` (default: $BERTH_DAEMON_TOKEN).
    /// Prefer the variable or --token-file: arguments show in `ps` to every local user.
    #[arg(long, value_name = "TOKEN")]
    pub token: Option<String>,
    /// A file holding the daemon token (read once at start; keep it mode 0600).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// This machine's name on the server (default: the host name).
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// How many tasks run at once.
    #[arg(long, value_name = "N", default_value_t = berth_local_agent::daemon::DEFAULT_MAX_TASKS)]
    pub max_tasks: usize,
    /// Claim every MS milliseconds instead of long-polling (for benchmarks).
    #[arg(long, value_name = "MS", hide = true)]
    pub poll_ms: Option<u64>,
    /// A new connection for every call instead of the pooled keep-alive ones (for
    /// benchmarks).
    #[arg(long, hide = true)]
    pub no_keep_alive: bool,
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct TrustArgs {
    #[command(subcommand)]
    pub command: Option<TrustCmd>,
    /// The directory (a directory named `list` is `./list`).
    #[arg(required = true, value_name = "PATH")]
    pub path: Option<PathBuf>,
    /// Take the trust back.
    #[arg(long)]
    pub revoke: bool,
    /// Print one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum SettingsCmd {
    /// The settings the next message uses, each with the file and line it came from,
    /// and what the project layer may not set.
    Show {
        /// The session (default: a session bound to the current directory).
        #[arg(long, value_name = "ID")]
        session: Option<String>,
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Check a settings file: every error and warning with its line:column.
    Check {
        /// The file (default: your user settings, ~/.config/berth/settings.jsonc).
        file: Option<PathBuf>,
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum TrustCmd {
    /// The trusted directories, and whether each is still the one trusted.
    List {
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum DaemonCmd {
    /// Create, list and revoke daemon tokens (talks to this machine's `berth serve`).
    #[command(subcommand)]
    Token(TokenCmd),
}

#[derive(Debug, Subcommand)]
pub enum TokenCmd {
    /// Create a token for one machine; it is shown once.
    Create {
        /// The token's name, one per machine (e.g. `laptop`).
        name: String,
        /// On a team server, the member whose machine it is for (an admin's choice;
        /// default: yours).
        #[arg(long, value_name = "MEMBER")]
        member: Option<String>,
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// List tokens, their machines and whether those are online.
    List {
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a token: its machine is refused from then on.
    Revoke {
        /// The token's name.
        name: String,
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The web listener's address (loopback only by default).
    #[arg(long, default_value = "127.0.0.1:4733", value_name = "ADDR")]
    pub listen: String,
    /// Accept remote daemons on the listener.
    #[arg(long)]
    pub allow_daemons: bool,
    /// Serve https with this certificate chain (PEM); needs --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Serve plain http on a non-loopback --listen (behind a TLS-terminating proxy).
    #[arg(long, conflicts_with = "tls_cert")]
    pub insecure_http: bool,
    /// A host name browsers reach the web UI by (e.g. the name in --tls-cert); the
    /// listener refuses other `Host` headers, against DNS rebinding. Repeatable.
    #[arg(long = "web-host", value_name = "NAME")]
    pub web_hosts: Vec<String>,
    /// Serve Prometheus metrics (`GET /metrics`, no token) on this address; also
    /// BERTH_METRICS_LISTEN.
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Kind {
    Claude,
    Codex,
    Command,
    /// An Agent Client Protocol agent (`--command gemini --acp`).
    Acp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    InPlace,
    Worktree,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::InPlace => "in-place",
            Mode::Worktree => "worktree",
        }
    }
}

/// `--permissions`: core's [`berth_core::Permissions`] on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Policy {
    ReadOnly,
    /// Reads and edits inside the directory; the rest waits for your answer.
    Ask,
    Edit,
    Full,
}

impl Policy {
    pub fn permissions(self) -> berth_core::Permissions {
        match self {
            Policy::ReadOnly => berth_core::Permissions::ReadOnly,
            Policy::Ask => berth_core::Permissions::Ask,
            Policy::Edit => berth_core::Permissions::Edit,
            Policy::Full => berth_core::Permissions::Full,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum AgentCmd {
    /// Register an agent.
    Add {
        /// The agent's name, used by `session new --agent` (1-64 letters, digits, `-`, `_`).
        name: String,
        /// Which CLI drives it: claude (Claude Code), codex (Codex), or any command
        /// (required).
        #[arg(long, value_enum)]
        kind: Option<Kind>,
        /// What the agent may do: read-only, ask (what the policy leaves open waits
        /// for your answer), edit (the default, or the user settings' `permissions`)
        /// or full. Mapped onto the agent's own controls.
        #[arg(long, value_enum)]
        permissions: Option<Policy>,
        /// The program and its arguments (everything after --command).
        #[arg(long, num_args = 1.., allow_hyphen_values = true, value_name = "CMD")]
        command: Vec<String>,
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// List agents.
    List {
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Change an agent's command or permissions; it applies at the next message of
    /// every session that uses it.
    Edit {
        /// The agent's name.
        name: String,
        /// What the agent may do: read-only, ask, edit, full, or default (the user
        /// settings' `permissions`, else edit).
        #[arg(long, value_enum)]
        permissions: Option<EditPolicy>,
        /// The new program and its arguments (everything after --command: put it last).
        #[arg(long, num_args = 1.., allow_hyphen_values = true, value_name = "CMD")]
        command: Vec<String>,
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Remove an agent. Refused while a session uses it (archived ones too): delete
    /// those sessions first, or change the agent with `agent edit`.
    Remove {
        /// The agent's name.
        name: String,
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// `agent edit --permissions`: a policy, or back to the default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EditPolicy {
    ReadOnly,
    /// Reads and edits inside the directory; the rest waits for your answer.
    Ask,
    Edit,
    Full,
    /// The user settings' `permissions`, else edit.
    Default,
}

impl EditPolicy {
    /// The policy to store; `None`: the default.
    pub fn permissions(self) -> Option<berth_core::Permissions> {
        match self {
            EditPolicy::ReadOnly => Some(berth_core::Permissions::ReadOnly),
            EditPolicy::Ask => Some(berth_core::Permissions::Ask),
            EditPolicy::Edit => Some(berth_core::Permissions::Edit),
            EditPolicy::Full => Some(berth_core::Permissions::Full),
            EditPolicy::Default => None,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum SessionCmd {
    /// Create a session; with --dir it is bound to that directory.
    New {
        /// The registered agent the session talks to (see `berth agent list`).
        #[arg(long)]
        agent: Option<String>,
        /// A title, shown in lists and in the header.
        #[arg(long)]
        title: Option<String>,
        /// Bind the session to this directory, validated as `berth check` does.
        #[arg(long, value_name = "PATH")]
        dir: Option<PathBuf>,
        /// How the directory is used: in-place (the default: the agent works in it) or
        /// worktree (a git worktree of it per session).
        #[arg(long, value_enum)]
        mode: Option<Mode>,
        /// The project the session belongs to (its directory applies while the session
        /// has none of its own).
        #[arg(long)]
        project: Option<String>,
        /// Also trust the directory's project layer (as `berth trust` does).
        #[arg(long, requires = "dir")]
        trust: bool,
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// List sessions (not the archived ones unless --all).
    List {
        /// Archived sessions too, marked so.
        #[arg(long)]
        all: bool,
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Give a session a new title.
    Rename {
        /// The session: its id or a unique prefix of it.
        id: String,
        /// The new title.
        title: String,
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Archive a session: left out of `session list` and the web UI's list, kept whole
    /// (`session list --all` shows it; `session unarchive` brings it back).
    Archive {
        /// The session: its id or a unique prefix of it.
        id: String,
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Bring an archived session back into the list.
    Unarchive {
        /// The session: its id or a unique prefix of it.
        id: String,
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Delete a session: its tasks, its transcript, and its tasks' change records on
    /// this machine. Asks first on a terminal; refused while a task of it is queued or
    /// running.
    Delete {
        /// The session: its id or a unique prefix of it.
        id: String,
        /// Delete without asking (needed where stdin is not a terminal).
        #[arg(long, short)]
        yes: bool,
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Show a session, led by its binding header.
    Show {
        /// The session: its id or a unique prefix of it.
        id: String,
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// The rules a session's "always" answers made; --remove N takes one away.
    Rules {
        /// The session: its id or a unique prefix of it.
        id: String,
        /// Remove rule N (its number in the list): the session asks again.
        #[arg(long, value_name = "N")]
        remove: Option<i64>,
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Print a session's transcript, as `berth chat` shows it.
    Log {
        /// The session: its id or a unique prefix of it.
        id: String,
        /// Keep printing new events as they come (until Ctrl-C).
        #[arg(long, short)]
        follow: bool,
        /// One JSON document a line: the session, then each event as the stream
        /// carries it.
        #[arg(long)]
        json: bool,
    },
    /// Bind a session to a directory (default: the current directory).
    Link {
        /// The session: its id or a unique prefix of it.
        id: String,
        /// The directory (default: the current directory).
        path: Option<PathBuf>,
        /// in-place (the default) or worktree.
        #[arg(long, value_enum)]
        mode: Option<Mode>,
        /// Remove the binding instead.
        #[arg(long, conflicts_with_all = ["path", "mode", "trust"])]
        unlink: bool,
        /// Also trust the project layer the binding reads (as `berth trust` does).
        #[arg(long)]
        trust: bool,
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Remove a session's binding; the next message runs with the user settings alone.
    Unlink {
        /// The session: its id or a unique prefix of it.
        id: String,
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum TaskCmd {
    /// List tasks.
    List {
        /// Only this session's tasks (an id or a unique prefix).
        #[arg(long)]
        session: Option<String>,
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Cancel a task (a running agent is stopped with its process group).
    Cancel {
        /// The task: its id or a unique prefix of it.
        id: String,
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// What a task changed in its directory, as a unified diff (on the machine it ran
    /// on).
    Diff {
        /// The task: its id or a unique prefix of it.
        id: String,
        /// Only the files and their line counts.
        #[arg(long)]
        stat: bool,
        /// Print one JSON document (the changes and the diff) instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Put back the files a task changed, as they were before it (a revert commit in
    /// worktree mode). Refuses if any of them changed since, unless --force.
    Undo {
        /// The task: its id or a unique prefix of it.
        id: String,
        /// Undo even files changed since the task (those changes are lost).
        #[arg(long)]
        force: bool,
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum ProjectCmd {
    /// Create a project.
    Add {
        /// The project's name.
        name: String,
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Give a project a directory on this machine.
    Dir {
        /// The project's name.
        name: String,
        /// The directory on this machine.
        path: PathBuf,
        /// in-place (the default) or worktree.
        #[arg(long, value_enum)]
        mode: Option<Mode>,
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// Runs the parsed command; returns the process exit code.
pub fn run(cli: Cli) -> u8 {
    let json = cli.command.wants_json();
    let result = match cli.command {
        Command::Check { path, json } => commands::check(cli.home, &path, json),
        Command::Serve(args) => serve::serve(cli.home, args),
        Command::Daemon(args) => daemon::daemon(cli.home, args),
        Command::Trust(args) => trust::run(cli.home, args),
        Command::Settings(cmd) => settings::run(cli.home, cmd),
        Command::Chat(args) => chat::run(cli.home, args),
        Command::Session(SessionCmd::Log { id, follow, json }) => {
            chat::log::main(cli.home, &id, follow, json)
        }
        Command::Service(cmd) => service::run(cli.home, cmd),
        Command::Ui { open, rotate, json } => ui::run(cli.home, open, rotate, json),
        Command::Completions { shell } => {
            use clap::CommandFactory;
            use std::io::Write;
            let shell = match shell {
                Shell::Bash => clap_complete::Shell::Bash,
                Shell::Zsh => clap_complete::Shell::Zsh,
                Shell::Fish => clap_complete::Shell::Fish,
            };
            // Into a buffer first: a reader that stops early (`| head`) is not an error.
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "berth", &mut script);
            let _ = std::io::stdout().write_all(&script);
            Ok(0)
        }
        other @ (Command::Agent(_)
        | Command::Session(_)
        | Command::Send { .. }
        | Command::Task(_)
        | Command::Approvals { .. }
        | Command::Usage { .. }
        | Command::Approve { .. }
        | Command::Deny { .. }
        | Command::Project(_)) => commands::client_command(cli.home, other),
    };
    match result {
        Ok(code) => code,
        Err(e) => e.report(json),
    }
}

impl Command {
    fn wants_json(&self) -> bool {
        match self {
            Command::Serve(_)
            | Command::Completions { .. }
            | Command::Daemon(DaemonArgs { command: None, .. }) => false,
            Command::Daemon(DaemonArgs {
                command:
                    Some(DaemonCmd::Token(
                        TokenCmd::Create { json, .. }
                        | TokenCmd::List { json }
                        | TokenCmd::Revoke { json, .. },
                    )),
                ..
            }) => *json,
            Command::Check { json, .. } | Command::Send { json, .. } | Command::Ui { json, .. } => {
                *json
            }
            Command::Service(
                ServiceCmd::Install { json, .. }
                | ServiceCmd::Uninstall { json }
                | ServiceCmd::Status { json },
            ) => *json,
            Command::Chat(args) => args.json,
            Command::Trust(TrustArgs {
                command: Some(TrustCmd::List { json }),
                ..
            }) => *json,
            Command::Trust(TrustArgs { json, .. }) => *json,
            Command::Settings(SettingsCmd::Show { json, .. } | SettingsCmd::Check { json, .. }) => {
                *json
            }
            Command::Agent(
                AgentCmd::Add { json, .. }
                | AgentCmd::List { json }
                | AgentCmd::Edit { json, .. }
                | AgentCmd::Remove { json, .. },
            )
            | Command::Session(
                SessionCmd::New { json, .. }
                | SessionCmd::List { json, .. }
                | SessionCmd::Rename { json, .. }
                | SessionCmd::Archive { json, .. }
                | SessionCmd::Unarchive { json, .. }
                | SessionCmd::Delete { json, .. }
                | SessionCmd::Show { json, .. }
                | SessionCmd::Rules { json, .. }
                | SessionCmd::Log { json, .. }
                | SessionCmd::Link { json, .. }
                | SessionCmd::Unlink { json, .. },
            )
            | Command::Task(
                TaskCmd::List { json, .. }
                | TaskCmd::Cancel { json, .. }
                | TaskCmd::Diff { json, .. }
                | TaskCmd::Undo { json, .. },
            )
            | Command::Project(ProjectCmd::Add { json, .. } | ProjectCmd::Dir { json, .. })
            | Command::Approvals { json, .. }
            | Command::Usage { json, .. }
            | Command::Approve { json, .. }
            | Command::Deny { json, .. } => *json,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::CommandFactory;

    /// Every subcommand and every argument a user can see says what it is for.
    #[test]
    fn every_command_and_argument_has_help() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if arg.is_hide_set() || id == "help" || id == "version" {
                    continue;
                }
                if arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing.push(format!("{path} <{id}>"));
                }
            }
            for sub in cmd.get_subcommands() {
                let name = format!("{path} {}", sub.get_name());
                if sub.get_name() != "help" && sub.get_about().is_none() {
                    missing.push(name.clone());
                }
                walk(sub, &name, missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "berth", &mut missing);
        assert_eq!(missing, Vec::<String>::new());
    }
}
