//! A fake of the far side of the coding agents: the Anthropic Messages API and the
//! OpenAI Responses API, on loopback, so tests can drive the real `claude` and `codex`
//! binaries without a network or an account.
//!
//! The fake is a std-only HTTP/1.1 server on `127.0.0.1:0` (threads and `std::net`).
//! It reads request bodies framed by `Content-Length` or `Transfer-Encoding: chunked`,
//! keeps connections alive unless the client (or HTTP/1.0) asks to close, and streams
//! its answers as server-sent events in the providers' own formats:
//!
//! - `POST /v1/messages` (claude sends `?beta=true`): `message_start`, `ping`,
//!   `content_block_start`, `content_block_delta` (`text_delta`, `input_json_delta`),
//!   `content_block_stop`, `message_delta` (stop reason `tool_use` or `end_turn`, usage),
//!   `message_stop`. A request without `"stream": true` gets the whole message as JSON.
//! - `POST /v1/messages/count_tokens`: `{"input_tokens": N}`.
//! - `POST /v1/responses`: `response.created`, `response.in_progress`,
//!   `response.output_item.added`, `response.content_part.added`,
//!   `response.output_text.delta`/`done`, `response.content_part.done`,
//!   `response.function_call_arguments.delta`/`done` (or
//!   `response.custom_tool_call_input.delta`/`done` for a freeform tool such as
//!   `apply_patch`), `response.output_item.done`, and `response.completed` carrying the
//!   whole response object with `usage`.
//! - `HEAD`/`GET /api/hello` (claude's reachability probe): `200`.
//! - `GET /v1/models`: an empty list.
//!
//! Anything else is answered `404` with a provider-style error body (a body with a
//! `Content-Encoding` the fake cannot read, `415`), recorded with [`Recorded::known`]
//! `false`, and reported on stderr. Every request is recorded before it is answered.
//!
//! # The script
//!
//! The fake decides each answer from the request alone, so it needs no state between
//! requests and a resumed conversation behaves like a continued one. The conversation's
//! *prompt* is its last user message written by a person: for claude, the last `user`
//! message without `tool_result` blocks that has text outside harness envelopes such as
//! `<system-reminder>…</system-reminder>`; for codex, the last `message` item of role
//! `user` with text outside envelopes such as `<environment_context>…</environment_context>`.
//! (A text block that is one whole `<tag>…</tag>` element counts as an envelope.)
//!
//! Lines of the prompt that contain `berth-fake:` are directives, read in order:
//!
//! - `berth-fake: write NAME CONTENT` writes CONTENT (the rest of the line; `\n` in it is
//!   a newline, `\\` a backslash) to the file NAME relative to the agent's working
//!   directory. Claude: its `Write` tool with the absolute path (the working directory
//!   comes from the `Primary working directory:` line claude sends). opencode (on the
//!   Messages API): its `write` tool `{filePath, content}`, the directory from its
//!   `Working directory:` line. Codex: `apply_patch` when offered, else
//!   `exec_command` `{cmd}`, else `shell` `{command}`.
//! - `berth-fake: run CMD` runs the shell command CMD. Claude: `Bash` `{command}`.
//!   opencode: `bash` `{command}`. Codex: `exec_command` `{cmd}`, else `shell`.
//! - `berth-fake: say TEXT` adds TEXT to the final answer.
//! - Any other `berth-fake:` line adds `unknown directive: …` to the final answer.
//!
//! Each `write` and `run` is one tool call, one request at a time: a request carrying
//! `k` tool results after the prompt gets tool call `k + 1`. Once every call has its
//! result, the answer is the final text: for each call a line `done: NAME` (or
//! `done: CMD`), or `failed: …` when the result reports failure (claude: `is_error`;
//! codex: an exit code other than 0, or none at all as when a patch is rejected),
//! followed by the tool's result text; then every `say` TEXT. A prompt without
//! `write`/`run`/`say` directives gets `fake reply: <the prompt's first line>`. A call
//! whose tool the request does not offer is skipped with `cannot: …` in the final text.
//! `apply_patch` adds a final newline to what it writes (its format has one per line).
//!
//! The answers are deterministic apart from ids; usage numbers are estimates (a token
//! per four bytes of the request).

use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The model written into the codex configuration by [`FakeModels::codex_env`]: one in
/// codex 0.171's bundled catalogue, so codex offers its full tool set (`apply_patch`
/// as a freeform tool, `exec_command`) and reports no missing model metadata. Pass
/// `-m` with a name outside the catalogue (e.g. `gpt-fake`) for the degraded path: an
/// `error` item "Model metadata for `…` not found" and no `apply_patch`.
pub const CODEX_MODEL: &str = "gpt-5.5";

/// The longest request line or header line the fake accepts.
const MAX_LINE: usize = 64 * 1024;
/// The most headers one request may have.
const MAX_HEADERS: usize = 200;
/// The largest request body the fake accepts.
const MAX_BODY: usize = 64 * 1024 * 1024;
/// How often blocked reads wake up to look at the stop flag.
const POLL: Duration = Duration::from_millis(100);
/// How long a kept-alive connection may sit idle between requests.
const IDLE: Duration = Duration::from_secs(120);
/// How long a request may take to arrive once it has started, and a write to drain.
const STALL: Duration = Duration::from_secs(30);
/// The most connections served at once; more are closed at once.
const MAX_CONNECTIONS: usize = 64;

/// One request the fake received, in arrival order.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// The request method, e.g. `POST`.
    pub method: String,
    /// The request target as sent, query included (e.g. `/v1/messages?beta=true`).
    pub path: String,
    /// The headers as sent, names lower-cased, in order.
    pub headers: Vec<(String, String)>,
    /// The body parsed as JSON, or `Value::Null` when it is empty or not JSON.
    pub body: Value,
    /// The body as text (lossy UTF-8), whatever it was.
    pub raw_body: String,
    /// Whether the fake served the request; `false` ones (unknown routes, unreadable
    /// encodings) were answered `404` or `415`.
    pub known: bool,
}

impl Recorded {
    /// The value of header `name` (case-insensitive), if sent.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The path without its query string.
    pub fn route(&self) -> &str {
        self.path.split('?').next().unwrap_or(&self.path)
    }

    /// Whether this is a model turn: `POST /v1/messages` or `POST /v1/responses`.
    pub fn is_model_turn(&self) -> bool {
        self.method == "POST"
            && (matches!(self.route(), "/v1/messages" | "/v1/responses")
                || (self.route().ends_with(":streamGenerateContent")
                    && !gemini::is_router(&self.body)))
    }
}

/// The usage one model turn's answer reported, in Berth's terms: `input` is the
/// input not read from the cache (the Responses API's `input_tokens` less its
/// `cached_tokens`; the Messages API's `input_tokens`, which leaves the cache out).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reported {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
}

#[derive(Debug, Default)]
struct Shared {
    log: Mutex<Vec<Recorded>>,
    /// The usage each model turn's answer reported, in order.
    reported: Mutex<Vec<Reported>>,
    ids: AtomicU64,
    stop: AtomicBool,
    live: AtomicU64,
}

impl Shared {
    fn log(&self) -> MutexGuard<'_, Vec<Recorded>> {
        // A panicking connection thread cannot leave the log half-written (pushes are
        // atomic), so a poisoned lock still holds a usable log.
        self.log.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn report(&self, r: Reported) {
        self.reported
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(r);
    }

    fn id(&self, prefix: &str) -> String {
        let n = self.ids.fetch_add(1, Ordering::Relaxed) + 1;
        format!("{prefix}_fake{n:020}")
    }
}

/// A running fake model server on loopback. It serves until dropped; dropping it stops
/// the listener and waits (boundedly) for its connection threads.
#[derive(Debug)]
pub struct FakeModels {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<Vec<JoinHandle<()>>>>,
}

impl FakeModels {
    /// Binds `127.0.0.1:0` and starts serving.
    ///
    /// # Panics
    /// When loopback cannot be bound (no free port, no loopback interface): every test
    /// that needs the fake would fail anyway, and the message says why.
    pub fn start() -> FakeModels {
        FakeModels::try_start().expect("fake models: bind 127.0.0.1:0")
    }

    /// Like [`FakeModels::start`], returning the bind error instead of panicking.
    pub fn try_start() -> io::Result<FakeModels> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::default());
        let s = Arc::clone(&shared);
        let acceptor = std::thread::Builder::new()
            .name("fake-models-accept".into())
            .spawn(move || accept_loop(&listener, &s))?;
        Ok(FakeModels {
            addr,
            shared,
            acceptor: Some(acceptor),
        })
    }

    /// `http://127.0.0.1:PORT`, without a trailing slash or `/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request received so far, in arrival order (a snapshot).
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.log().clone()
    }

    /// The model turns received so far (`POST /v1/messages`, `POST /v1/responses`).
    pub fn model_turns(&self) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(Recorded::is_model_turn)
            .collect()
    }

    /// The token usage each answered model turn reported (Messages and Responses
    /// APIs), in order: what a usage total built on these turns must add up to.
    pub fn reported_usage(&self) -> Vec<Reported> {
        self.shared
            .reported
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The requests to routes the fake does not know (answered `404`).
    pub fn unknown_requests(&self) -> Vec<Recorded> {
        self.requests().into_iter().filter(|r| !r.known).collect()
    }

    /// The environment `claude` needs to talk to this fake and nothing else, with its
    /// `HOME` (and so `~/.claude` and `~/.claude.json`) in `home`. Also remove
    /// [`CLAUDE_ENV_REMOVED`] (or use [`FakeModels::configure_claude`]), so that no
    /// real credentials or provider switches of the caller's environment apply.
    ///
    /// `CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1` is what keeps claude on loopback:
    /// without it, 2.1.332 also sends `HEAD /api/hello` to the base URL and looks up
    /// outside hosts (DNS) for telemetry and error reporting.
    ///
    /// Creates `home/tmp`, the `TMPDIR`: claude keeps per-project scratch directories
    /// (`claude-<uid>/`) and its messaging socket (`cc-socks/`) there, and leaves them
    /// behind. (With a `TMPDIR` too long for a socket path it falls back to
    /// `/tmp/cc-socks-<uid>/` for the socket.)
    pub fn claude_env(&self, home: &Path) -> io::Result<Vec<(String, String)>> {
        let mut env = home_env(home)?;
        env.extend(
            [
                ("ANTHROPIC_BASE_URL", self.base_url()),
                ("ANTHROPIC_API_KEY", "sk-ant-fake-key".to_owned()),
                // One switch for auto-updates, telemetry, error reporting and feedback;
                // the others are the individual switches it stands for.
                ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".to_owned()),
                ("DISABLE_AUTOUPDATER", "1".to_owned()),
                ("DISABLE_TELEMETRY", "1".to_owned()),
                ("DISABLE_ERROR_REPORTING", "1".to_owned()),
                ("DISABLE_BUG_COMMAND", "1".to_owned()),
            ]
            .map(|(k, v)| (k.to_owned(), v)),
        );
        Ok(env)
    }

    /// The environment that points Gemini CLI at this fake: `GOOGLE_GEMINI_BASE_URL`
    /// (its gateway auth then needs no login) and `GEMINI_API_KEY`, with [`home_env`]'s
    /// home. Writes `home/.gemini/settings.json` with usage statistics and telemetry
    /// off, so it sends nothing elsewhere.
    pub fn gemini_env(&self, home: &Path) -> io::Result<Vec<(String, String)>> {
        let mut env = home_env(home)?;
        std::fs::create_dir_all(home.join(".gemini"))?;
        std::fs::write(
            home.join(".gemini/settings.json"),
            json!({"privacy": {"usageStatisticsEnabled": false},
                   "telemetry": {"enabled": false},
                   "general": {"disableAutoUpdate": true, "disableUpdateNag": true}})
            .to_string(),
        )?;
        env.extend(
            [
                ("GOOGLE_GEMINI_BASE_URL", self.base_url()),
                ("GEMINI_API_KEY", "fake-gemini-key".to_owned()),
            ]
            .map(|(k, v)| (k.to_owned(), v)),
        );
        Ok(env)
    }

    /// The environment that points opencode (`opencode acp`) at this fake, with
    /// [`home_env`]'s home: its configuration file (`OPENCODE_CONFIG`,
    /// `home/.config/opencode/opencode.json`) makes the built-in `anthropic` provider's
    /// `baseURL` `<base_url>/v1` (the Messages API, which the fake serves) with one model,
    /// `fake-model`, for both its turns and its titles; no auto-update, no sharing.
    /// `OPENCODE_DISABLE_MODELS_FETCH` keeps it from fetching its model catalogue
    /// (models.dev), `OPENCODE_DISABLE_AUTOUPDATE` from looking for a release, so it
    /// sends nothing elsewhere.
    pub fn opencode_env(&self, home: &Path) -> io::Result<Vec<(String, String)>> {
        let mut env = home_env(home)?;
        let dir = home.join(".config/opencode");
        std::fs::create_dir_all(&dir)?;
        let config = dir.join("opencode.json");
        std::fs::write(
            &config,
            json!({
                "model": "anthropic/fake-model",
                "small_model": "anthropic/fake-model",
                "autoupdate": false,
                "share": "disabled",
                "provider": {"anthropic": {
                    "options": {"baseURL": format!("{}/v1", self.base_url()),
                                "apiKey": "sk-ant-fake-key"},
                    "models": {"fake-model": {
                        "name": "Berth fake model",
                        "tool_call": true,
                        "limit": {"context": 200_000, "output": 8192},
                    }},
                }},
            })
            .to_string(),
        )?;
        env.extend(
            [
                ("OPENCODE_CONFIG", config.to_string_lossy().into_owned()),
                ("OPENCODE_DISABLE_MODELS_FETCH", "1".to_owned()),
                ("OPENCODE_DISABLE_AUTOUPDATE", "1".to_owned()),
            ]
            .map(|(k, v)| (k.to_owned(), v)),
        );
        Ok(env)
    }

    /// Applies [`FakeModels::claude_env`] to `cmd` and removes [`CLAUDE_ENV_REMOVED`].
    pub fn configure_claude(&self, cmd: &mut Command, home: &Path) -> io::Result<()> {
        for k in CLAUDE_ENV_REMOVED {
            cmd.env_remove(k);
        }
        cmd.envs(self.claude_env(home)?);
        Ok(())
    }

    /// The codex configuration that points it at this fake: a `model_provider`
    /// (`berth_fake`) whose `base_url` is `<base_url>/v1`, `wire_api = "responses"`,
    /// the key from `OPENAI_API_KEY`, the model [`CODEX_MODEL`], no retries, and the
    /// features that reach outside hosts (`plugins`, `remote_plugin`, `apps`: DNS
    /// look-ups of github.com, api.github.com and chatgpt.com) and analytics off.
    /// codex ignores `OPENAI_BASE_URL`; only a provider moves it.
    pub fn codex_config_toml(&self) -> String {
        format!(
            r#"# Written by berth-tests' fake_models: codex talks only to the fake on loopback.
model = "{CODEX_MODEL}"
model_provider = "berth_fake"
check_for_update_on_startup = false

[analytics]
enabled = false

[feedback]
enabled = false

[features]
plugins = false
remote_plugin = false
apps = false

[model_providers.berth_fake]
name = "Berth fake models"
base_url = "{}/v1"
env_key = "OPENAI_API_KEY"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
"#,
            self.base_url()
        )
    }

    /// Writes [`FakeModels::codex_config_toml`] to `home/.codex/config.toml` and returns
    /// the environment `codex` needs: `HOME` (and XDG directories, `TMPDIR`) in `home`,
    /// `CODEX_HOME` (`home/.codex`) and `OPENAI_API_KEY`. Also remove
    /// [`CODEX_ENV_REMOVED`] (or use [`FakeModels::configure_codex`]). Nothing outside
    /// `home` is touched.
    pub fn codex_env(&self, home: &Path) -> io::Result<Vec<(String, String)>> {
        let codex_home = home.join(".codex");
        std::fs::create_dir_all(&codex_home)?;
        std::fs::write(codex_home.join("config.toml"), self.codex_config_toml())?;
        let mut env = home_env(home)?;
        env.extend(
            [
                ("CODEX_HOME", codex_home.to_string_lossy().into_owned()),
                ("OPENAI_API_KEY", "sk-fake-key".to_owned()),
            ]
            .map(|(k, v)| (k.to_owned(), v)),
        );
        Ok(env)
    }

    /// Applies [`FakeModels::codex_env`] to `cmd` (writing the configuration) and removes
    /// [`CODEX_ENV_REMOVED`].
    pub fn configure_codex(&self, cmd: &mut Command, home: &Path) -> io::Result<()> {
        for k in CODEX_ENV_REMOVED {
            cmd.env_remove(k);
        }
        cmd.envs(self.codex_env(home)?);
        Ok(())
    }
}

/// Variables [`FakeModels::configure_claude`] removes: other credentials and provider
/// switches that would take claude elsewhere, and a config directory outside `HOME`.
pub const CLAUDE_ENV_REMOVED: &[&str] = &[
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "CLAUDE_CODE_USE_BEDROCK",
    "CLAUDE_CODE_USE_VERTEX",
    "CLAUDE_CODE_USE_FOUNDRY",
    "CLAUDE_CONFIG_DIR",
    "ANTHROPIC_MODEL",
    "ANTHROPIC_CUSTOM_HEADERS",
];

/// Variables [`FakeModels::configure_codex`] removes: another key, and the Rust
/// diagnostics switches that change what codex prints on stderr (with `RUST_BACKTRACE`
/// set, a failed `resume` prints a stack backtrace after its error).
pub const CODEX_ENV_REMOVED: &[&str] = &[
    "CODEX_API_KEY",
    "OPENAI_BASE_URL",
    "RUST_BACKTRACE",
    "RUST_LIB_BACKTRACE",
    "RUST_LOG",
];

/// `HOME`, the XDG directories and `TMPDIR` (`home/tmp`, created) inside `home`, so
/// neither CLI reads or writes the real user's files or litters the system temp dir.
fn home_env(home: &Path) -> io::Result<Vec<(String, String)>> {
    std::fs::create_dir_all(home.join("tmp"))?;
    let h = home.to_string_lossy().into_owned();
    Ok(vec![
        ("HOME".to_owned(), h.clone()),
        ("TMPDIR".to_owned(), format!("{h}/tmp")),
        ("XDG_CONFIG_HOME".to_owned(), format!("{h}/.config")),
        ("XDG_DATA_HOME".to_owned(), format!("{h}/.local/share")),
        ("XDG_STATE_HOME".to_owned(), format!("{h}/.local/state")),
        ("XDG_CACHE_HOME".to_owned(), format!("{h}/.cache")),
    ])
}

impl Drop for FakeModels {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(acceptor) = self.acceptor.take()
            && let Ok(conns) = acceptor.join()
        {
            // Each connection thread sees the stop flag within one read poll; a write
            // to a client that never reads gives up after the write timeout.
            for c in conns {
                let _ = c.join();
            }
        }
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) -> Vec<JoinHandle<()>> {
    let mut conns: Vec<JoinHandle<()>> = Vec::new();
    while !shared.stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => {
                conns.retain(|c| !c.is_finished());
                if shared.live.load(Ordering::SeqCst) >= MAX_CONNECTIONS as u64 {
                    eprintln!("fake models: too many connections, closing one");
                    let _ = stream.shutdown(Shutdown::Both);
                    continue;
                }
                shared.live.fetch_add(1, Ordering::SeqCst);
                let s = Arc::clone(shared);
                let spawned = std::thread::Builder::new()
                    .name("fake-models-conn".into())
                    .spawn(move || {
                        if let Err(e) = serve_connection(stream, &s) {
                            eprintln!("fake models: connection ended: {e}");
                        }
                        s.live.fetch_sub(1, Ordering::SeqCst);
                    });
                match spawned {
                    Ok(h) => conns.push(h),
                    Err(e) => {
                        shared.live.fetch_sub(1, Ordering::SeqCst);
                        eprintln!("fake models: cannot spawn a connection thread: {e}");
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => {
                eprintln!("fake models: accept failed: {e}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
    conns
}

// ---------------------------------------------------------------------------------
// HTTP/1.1
// ---------------------------------------------------------------------------------

/// A buffered reader over a socket whose reads wake up every [`POLL`] to check the stop
/// flag, and give up after a deadline.
struct Conn<'a> {
    stream: TcpStream,
    buf: Vec<u8>,
    shared: &'a Shared,
}

#[derive(Debug)]
struct Request {
    method: String,
    path: String,
    version: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim())
    }

    /// Whether the connection stays open after this request's response.
    fn keep_alive(&self) -> bool {
        let conn = self.header("connection").unwrap_or("").to_ascii_lowercase();
        let tokens: Vec<&str> = conn.split(',').map(str::trim).collect();
        if tokens.contains(&"close") {
            return false;
        }
        if self.version == "HTTP/1.0" {
            return tokens.contains(&"keep-alive");
        }
        true
    }
}

fn other(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

impl Conn<'_> {
    /// Reads more bytes into the buffer. `Ok(false)` means the peer closed the
    /// connection; an error means the deadline passed, the fake is stopping, or the
    /// socket failed.
    fn fill(&mut self, deadline: Instant) -> io::Result<bool> {
        let mut chunk = [0u8; 16 * 1024];
        loop {
            if self.shared.stop.load(Ordering::SeqCst) {
                // Stopping: as if the peer had closed the connection.
                return Ok(false);
            }
            match self.stream.read(&mut chunk) {
                Ok(0) => return Ok(false),
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    return Ok(true);
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) =>
                {
                    if Instant::now() >= deadline {
                        return Err(io::Error::new(io::ErrorKind::TimedOut, "read timed out"));
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// One CRLF- (or LF-) terminated line, without its terminator. `Ok(None)` when the
    /// peer closed the connection before sending anything of it.
    fn line(&mut self, deadline: Instant) -> io::Result<Option<String>> {
        loop {
            if let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
                let mut line: Vec<u8> = self.buf.drain(..=i).collect();
                line.pop();
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                return String::from_utf8(line)
                    .map(Some)
                    .map_err(|_| other("header line is not UTF-8"));
            }
            if self.buf.len() > MAX_LINE {
                return Err(other("header line too long"));
            }
            if !self.fill(deadline)? {
                if self.buf.is_empty() {
                    return Ok(None);
                }
                return Err(other("connection closed inside a line"));
            }
        }
    }

    fn exact(&mut self, n: usize, deadline: Instant) -> io::Result<Vec<u8>> {
        while self.buf.len() < n {
            if !self.fill(deadline)? {
                return Err(other("connection closed inside a body"));
            }
        }
        Ok(self.buf.drain(..n).collect())
    }

    /// The next request, or `None` when the peer closed an idle connection.
    fn request(&mut self) -> io::Result<Option<Request>> {
        let idle = Instant::now() + IDLE;
        // Tolerate blank lines before a request line (RFC 9112 §2.2).
        let start = loop {
            match self.line(idle)? {
                None => return Ok(None),
                Some(l) if l.is_empty() => continue,
                Some(l) => break l,
            }
        };
        let deadline = Instant::now() + STALL;
        let mut parts = start.split(' ');
        let (Some(method), Some(path), Some(version), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(other(format!("bad request line: {start:?}")));
        };
        let mut headers = Vec::new();
        loop {
            let Some(line) = self.line(deadline)? else {
                return Err(other("connection closed inside the headers"));
            };
            if line.is_empty() {
                break;
            }
            if headers.len() >= MAX_HEADERS {
                return Err(other("too many headers"));
            }
            let Some((k, v)) = line.split_once(':') else {
                return Err(other(format!("bad header line: {line:?}")));
            };
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
        let mut req = Request {
            method: method.to_owned(),
            path: path.to_owned(),
            version: version.to_owned(),
            headers,
            body: Vec::new(),
        };
        let chunked = req
            .header("transfer-encoding")
            .is_some_and(|te| te.to_ascii_lowercase().contains("chunked"));
        if chunked {
            req.body = self.chunked_body(deadline)?;
        } else if let Some(len) = req.header("content-length") {
            let len: usize = len
                .parse()
                .map_err(|_| other(format!("bad Content-Length: {len:?}")))?;
            if len > MAX_BODY {
                return Err(other("body too large"));
            }
            req.body = self.exact(len, deadline)?;
        }
        Ok(Some(req))
    }

    fn chunked_body(&mut self, deadline: Instant) -> io::Result<Vec<u8>> {
        let mut body = Vec::new();
        loop {
            let Some(size_line) = self.line(deadline)? else {
                return Err(other("connection closed inside a chunked body"));
            };
            let size_hex = size_line.split(';').next().unwrap_or("").trim();
            let size = usize::from_str_radix(size_hex, 16)
                .map_err(|_| other(format!("bad chunk size: {size_line:?}")))?;
            if size == 0 {
                // Trailers, up to the blank line.
                loop {
                    match self.line(deadline)? {
                        Some(l) if !l.is_empty() => continue,
                        _ => return Ok(body),
                    }
                }
            }
            if body.len() + size > MAX_BODY {
                return Err(other("body too large"));
            }
            body.extend(self.exact(size, deadline)?);
            let crlf = self.line(deadline)?;
            if crlf.as_deref() != Some("") {
                return Err(other("chunk not followed by CRLF"));
            }
        }
    }
}

/// What the fake sends back for one request.
enum Reply {
    /// A complete response with a fixed body.
    Full {
        status: u16,
        content_type: &'static str,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
    /// A server-sent event stream, written as one chunk per event.
    Sse {
        headers: Vec<(String, String)>,
        events: Vec<(String, Value)>,
    },
}

fn json_reply(status: u16, v: &Value) -> Reply {
    Reply::Full {
        status,
        content_type: "application/json",
        headers: Vec::new(),
        body: v.to_string().into_bytes(),
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        415 => "Unsupported Media Type",
        _ => "Status",
    }
}

fn serve_connection(stream: TcpStream, shared: &Shared) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(POLL))?;
    stream.set_write_timeout(Some(STALL))?;
    stream.set_nodelay(true)?;
    let mut conn = Conn {
        stream,
        buf: Vec::new(),
        shared,
    };
    loop {
        let req = match conn.request() {
            Ok(Some(r)) => r,
            Ok(None) => return Ok(()),
            // A kept-alive connection idle for too long: closed, no error.
            Err(e) if e.kind() == io::ErrorKind::TimedOut && conn.buf.is_empty() => {
                return Ok(());
            }
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                let body =
                    json!({"error": {"type": "invalid_request_error", "message": e.to_string()}});
                let _ = write_reply(&mut conn.stream, false, json_reply(400, &body), false);
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        let keep = req.keep_alive();
        let head_only = req.method == "HEAD";
        let reply = route(&req, shared);
        write_reply(&mut conn.stream, head_only, reply, keep)?;
        if !keep {
            let _ = conn.stream.shutdown(Shutdown::Both);
            return Ok(());
        }
    }
}

fn write_reply(out: &mut TcpStream, head_only: bool, reply: Reply, keep: bool) -> io::Result<()> {
    let connection = if keep { "keep-alive" } else { "close" };
    match reply {
        Reply::Full {
            status,
            content_type,
            headers,
            body,
        } => {
            let mut head = format!(
                "HTTP/1.1 {status} {}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: {connection}\r\n",
                reason(status),
                body.len()
            );
            for (k, v) in headers {
                head.push_str(&format!("{k}: {v}\r\n"));
            }
            head.push_str("\r\n");
            out.write_all(head.as_bytes())?;
            if !head_only {
                out.write_all(&body)?;
            }
            out.flush()
        }
        Reply::Sse { headers, events } => {
            let mut head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\ncache-control: no-cache\r\ntransfer-encoding: chunked\r\nconnection: {connection}\r\n"
            );
            for (k, v) in headers {
                head.push_str(&format!("{k}: {v}\r\n"));
            }
            head.push_str("\r\n");
            out.write_all(head.as_bytes())?;
            if head_only {
                return out.flush();
            }
            for (name, data) in events {
                // Gemini's stream has no event names: data lines only.
                let event = if name.is_empty() {
                    format!("data: {data}\r\n\r\n")
                } else {
                    format!("event: {name}\ndata: {data}\n\n")
                };
                out.write_all(format!("{:x}\r\n", event.len()).as_bytes())?;
                out.write_all(event.as_bytes())?;
                out.write_all(b"\r\n")?;
                out.flush()?;
            }
            out.write_all(b"0\r\n\r\n")?;
            out.flush()
        }
    }
}

fn route(req: &Request, shared: &Shared) -> Reply {
    let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
    let route = req.path.split('?').next().unwrap_or("");
    // A compressed body (codex can zstd its requests) would be read as no prompt at all:
    // refuse it loudly instead.
    let encoding = req
        .header("content-encoding")
        .filter(|e| !e.eq_ignore_ascii_case("identity"));
    let reply = match (req.method.as_str(), route) {
        _ if encoding.is_some() => None,
        ("POST", "/v1/messages") => Some(anthropic::messages(&body, shared)),
        ("POST", "/v1/messages/count_tokens") => Some(json_reply(
            200,
            &json!({"input_tokens": estimate_tokens(req.body.len())}),
        )),
        ("POST", "/v1/responses") => Some(openai::responses(&body, shared)),
        ("POST", r) if r.starts_with("/v1beta/models/") => gemini::route(r, &body, req.body.len()),
        ("HEAD" | "GET", "/api/hello") => Some(json_reply(200, &json!({"message": "hello"}))),
        ("GET", "/v1/models") => Some(json_reply(
            200,
            &json!({"object": "list", "data": [], "models": []}),
        )),
        _ => None,
    };
    let known = reply.is_some();
    if !known {
        eprintln!(
            "fake models: unknown route {} {} ({} body bytes{})",
            req.method,
            req.path,
            req.body.len(),
            encoding
                .map(|e| format!(", Content-Encoding {e}"))
                .unwrap_or_default()
        );
    }
    shared.log().push(Recorded {
        method: req.method.clone(),
        path: req.path.clone(),
        headers: req.headers.clone(),
        body,
        raw_body: String::from_utf8_lossy(&req.body).into_owned(),
        known,
    });
    reply.unwrap_or_else(|| {
        if let Some(e) = encoding {
            let msg = format!("the fake models server cannot read Content-Encoding {e}");
            return json_reply(415, &json!({"error": {"message": msg, "type": "invalid_request_error"}}));
        }
        let msg = format!("the fake models server has no route {} {}", req.method, req.path);
        let body = if req.path.starts_with("/v1/responses") || req.header("authorization").is_some()
        {
            json!({"error": {"message": msg, "type": "invalid_request_error", "param": null, "code": "not_found"}})
        } else {
            json!({"type": "error", "error": {"type": "not_found_error", "message": msg}})
        };
        json_reply(404, &body)
    })
}

/// A rough token count for usage numbers: four bytes a token.
fn estimate_tokens(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(4).max(1)
}

/// `s` in pieces of about `n` characters (on character boundaries), for deltas.
fn pieces(s: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    if chars.is_empty() {
        return vec![String::new()];
    }
    chars.chunks(n.max(1)).map(|c| c.iter().collect()).collect()
}

/// SSE events in order, each named by its data's `type`.
#[derive(Debug, Default)]
struct Events(Vec<(String, Value)>);

impl Events {
    fn push(&mut self, data: Value) {
        let name = data["type"].as_str().unwrap_or("message").to_owned();
        self.0.push((name, data));
    }
}

// ---------------------------------------------------------------------------------
// The script
// ---------------------------------------------------------------------------------

/// One `berth-fake:` directive of a prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Directive {
    Write { name: String, content: String },
    Run { cmd: String },
    Say { text: String },
    Unknown { line: String },
}

impl Directive {
    fn label(&self) -> String {
        match self {
            Directive::Write { name, .. } => name.clone(),
            Directive::Run { cmd } => cmd.clone(),
            Directive::Say { text } => text.clone(),
            Directive::Unknown { line } => line.clone(),
        }
    }
}

fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut it = s.chars();
    while let Some(c) = it.next() {
        if c == '\\' {
            match it.next() {
                Some('n') => out.push('\n'),
                Some('\\') => out.push('\\'),
                Some(other) => {
                    out.push('\\');
                    out.push(other);
                }
                None => out.push('\\'),
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn directives(prompt: &str) -> Vec<Directive> {
    let mut out = Vec::new();
    for line in prompt.lines() {
        let Some(at) = line.find("berth-fake:") else {
            continue;
        };
        let rest = line[at + "berth-fake:".len()..].trim();
        let (verb, args) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
        let args = args.trim_start();
        let d = match verb {
            "write" => {
                let (name, content) = args.split_once(' ').unwrap_or((args, ""));
                if name.is_empty() {
                    Directive::Unknown {
                        line: rest.to_owned(),
                    }
                } else {
                    Directive::Write {
                        name: name.to_owned(),
                        content: unescape(content),
                    }
                }
            }
            "run" if !args.is_empty() => Directive::Run {
                cmd: args.to_owned(),
            },
            "say" => Directive::Say {
                text: args.to_owned(),
            },
            _ => Directive::Unknown {
                line: rest.to_owned(),
            },
        };
        out.push(d);
    }
    out
}

/// Whether a text block is harness context rather than something a person wrote: one
/// whole `<tag>…</tag>` element (e.g. `<system-reminder>`, `<environment_context>`), or
/// codex's `# AGENTS.md instructions` block.
fn is_envelope(text: &str) -> bool {
    let t = text.trim();
    if t.starts_with("# AGENTS.md instructions") {
        return true;
    }
    let Some(rest) = t.strip_prefix('<') else {
        return false;
    };
    let Some(end) = rest.find(|c: char| c == '>' || c.is_whitespace()) else {
        return false;
    };
    let tag = &rest[..end];
    !tag.is_empty() && t.ends_with(&format!("</{tag}>"))
}

/// The plan for one request: what the prompt asks, and how far the conversation got.
/// No prompt at all is the default.
#[derive(Debug, Default)]
struct Plan {
    prompt: String,
    steps: Vec<Directive>,
    /// Tool results after the prompt, in order.
    results: Vec<ToolResult>,
}

impl Plan {
    fn new(prompt: String, results: Vec<ToolResult>) -> Plan {
        Plan {
            steps: directives(&prompt),
            prompt,
            results,
        }
    }
}

/// One tool result the agent sent back.
#[derive(Debug)]
struct ToolResult {
    text: String,
    /// Whether the tool did not do its job (denied, rejected, non-zero exit).
    failed: bool,
}

/// Whether a codex tool output reports failure: an exit code that is not 0 (`Process
/// exited with code N` from `exec_command`, `Exit code: N` from `apply_patch`), or no
/// exit code at all (the call was rejected before it ran, e.g. "patch rejected").
fn codex_output_failed(text: &str) -> bool {
    let code_after = |marker: &str| {
        let at = text.find(marker)? + marker.len();
        let digits: String = text[at..]
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '-')
            .collect();
        digits.parse::<i64>().ok()
    };
    match code_after("Process exited with code ").or_else(|| code_after("Exit code: ")) {
        Some(code) => code != 0,
        None => true,
    }
}

/// What the fake answers: a tool call, or final text.
#[derive(Debug, PartialEq)]
enum Answer {
    Tool { name: String, input: ToolInput },
    Text(String),
}

/// A tool call's input: JSON arguments, or freeform text (codex custom tools).
#[derive(Debug, PartialEq)]
enum ToolInput {
    Json(Value),
    Freeform(String),
}

/// The tools a request offers, as the fake needs to know them.
#[derive(Debug, Default)]
struct Offered {
    /// name -> whether it is a freeform (custom) tool.
    tools: HashMap<String, bool>,
}

impl Offered {
    fn has(&self, name: &str) -> bool {
        self.tools.contains_key(name)
    }
    fn freeform(&self, name: &str) -> bool {
        self.tools.get(name).copied().unwrap_or(false)
    }
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn absolute(cwd: Option<&str>, name: &str) -> String {
    match cwd {
        Some(c) if !name.starts_with('/') => format!("{}/{name}", c.trim_end_matches('/')),
        _ => name.to_owned(),
    }
}

/// Decides the answer: the next tool call of the plan, or the final text.
fn decide(
    plan: &Plan,
    offered: &Offered,
    call: impl Fn(&Directive, &Offered) -> Option<(String, ToolInput)>,
) -> Answer {
    let mut results = plan.results.iter();
    let mut text = Vec::new();
    for d in &plan.steps {
        if !matches!(d, Directive::Write { .. } | Directive::Run { .. }) {
            continue;
        }
        match call(d, offered) {
            None => text.push(format!("cannot: {} (no suitable tool offered)", d.label())),
            Some((name, input)) => match results.next() {
                Some(r) => {
                    let verb = if r.failed { "failed" } else { "done" };
                    text.push(format!("{verb}: {}", d.label()));
                    text.push(r.text.clone());
                }
                None => return Answer::Tool { name, input },
            },
        }
    }
    for d in &plan.steps {
        match d {
            Directive::Say { text: t } => text.push(t.clone()),
            Directive::Unknown { line } => text.push(format!("unknown directive: {line}")),
            Directive::Write { .. } | Directive::Run { .. } => {}
        }
    }
    if plan.steps.is_empty() {
        let first = plan.prompt.lines().next().unwrap_or("").trim();
        let first: String = first.chars().take(200).collect();
        text.push(format!("fake reply: {first}"));
    }
    Answer::Text(text.join("\n"))
}

// ---------------------------------------------------------------------------------
// Anthropic Messages API
// ---------------------------------------------------------------------------------

mod anthropic {
    use super::*;

    /// The text of a content value: a string, or the `text` of its text blocks.
    fn text_of(content: &Value) -> String {
        match content {
            Value::String(s) => s.clone(),
            Value::Array(blocks) => blocks
                .iter()
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n"),
            Value::Null | Value::Bool(_) | Value::Number(_) | Value::Object(_) => String::new(),
        }
    }

    fn blocks(m: &Value) -> Vec<Value> {
        match m.get("content") {
            Some(Value::Array(a)) => a.clone(),
            Some(Value::String(s)) => vec![json!({"type": "text", "text": s})],
            _ => Vec::new(),
        }
    }

    fn has_tool_result(m: &Value) -> bool {
        blocks(m)
            .iter()
            .any(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
    }

    /// The person's text of a user message: its text blocks outside envelopes.
    fn human_text(m: &Value) -> Option<String> {
        let texts: Vec<String> = blocks(m)
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .filter(|t| !is_envelope(t))
            .map(str::to_owned)
            .collect();
        (!texts.is_empty()).then(|| texts.join("\n"))
    }

    /// The working directory claude announces ("Primary working directory: /x"), or
    /// opencode ("Working directory: /x").
    fn cwd(body: &Value) -> Option<String> {
        let mut texts = vec![text_of(body.get("system").unwrap_or(&Value::Null))];
        if let Some(ms) = body.get("messages").and_then(Value::as_array) {
            texts.extend(
                ms.iter()
                    .map(|m| text_of(m.get("content").unwrap_or(&Value::Null))),
            );
        }
        // Claude Code's line, else opencode's (`<env>\n  Working directory: /x`).
        ["Primary working directory:", "Working directory:"]
            .iter()
            .find_map(|marker| {
                texts.iter().find_map(|t| {
                    let at = t.find(marker)?;
                    let rest = &t[at + marker.len()..];
                    let line = rest.lines().next()?.trim();
                    (!line.is_empty()).then(|| line.to_owned())
                })
            })
    }

    fn plan(body: &Value) -> Plan {
        let empty = Vec::new();
        let msgs = body
            .get("messages")
            .and_then(Value::as_array)
            .unwrap_or(&empty);
        let is_user = |m: &Value| m.get("role").and_then(Value::as_str) == Some("user");
        let prompt_at = msgs
            .iter()
            .rposition(|m| is_user(m) && !has_tool_result(m) && human_text(m).is_some());
        let Some(at) = prompt_at else {
            return Plan::default();
        };
        let prompt = human_text(&msgs[at]).unwrap_or_default();
        let results = msgs[at + 1..]
            .iter()
            .filter(|m| is_user(m))
            .flat_map(blocks)
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
            .map(|b| ToolResult {
                text: text_of(b.get("content").unwrap_or(&Value::Null)),
                failed: b.get("is_error").and_then(Value::as_bool) == Some(true),
            })
            .collect();
        Plan::new(prompt, results)
    }

    fn offered(body: &Value) -> Offered {
        let mut o = Offered::default();
        for t in body
            .get("tools")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(n) = t.get("name").and_then(Value::as_str) {
                o.tools.insert(n.to_owned(), false);
            }
        }
        o
    }

    pub(super) fn messages(body: &Value, shared: &Shared) -> Reply {
        let cwd = cwd(body);
        let answer = decide(&plan(body), &offered(body), |d, o| match d {
            Directive::Write { name, content } if o.has("Write") => Some((
                "Write".to_owned(),
                ToolInput::Json(json!({
                    "file_path": absolute(cwd.as_deref(), name),
                    "content": content,
                })),
            )),
            Directive::Run { cmd } if o.has("Bash") => Some((
                "Bash".to_owned(),
                ToolInput::Json(
                    json!({"command": cmd, "description": "Run the requested command"}),
                ),
            )),
            // opencode's tools, lower-case, its path `filePath`.
            Directive::Write { name, content } if o.has("write") => Some((
                "write".to_owned(),
                ToolInput::Json(json!({
                    "filePath": absolute(cwd.as_deref(), name),
                    "content": content,
                })),
            )),
            Directive::Run { cmd } if o.has("bash") => Some((
                "bash".to_owned(),
                ToolInput::Json(
                    json!({"command": cmd, "description": "Run the requested command"}),
                ),
            )),
            Directive::Write { .. }
            | Directive::Run { .. }
            | Directive::Say { .. }
            | Directive::Unknown { .. } => None,
        });
        let model = body
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or("claude-fake")
            .to_owned();
        let input_tokens = estimate_tokens(body.to_string().len());
        let id = shared.id("msg");
        let (block, stop_reason, output_tokens) = match &answer {
            Answer::Tool { name, input } => {
                let input = match input {
                    ToolInput::Json(v) => v.clone(),
                    ToolInput::Freeform(s) => json!({"input": s}),
                };
                let n = estimate_tokens(input.to_string().len());
                (
                    json!({"type": "tool_use", "id": shared.id("toolu"), "name": name, "input": input}),
                    "tool_use",
                    n,
                )
            }
            Answer::Text(t) => (
                json!({"type": "text", "text": t}),
                "end_turn",
                estimate_tokens(t.len()),
            ),
        };
        // Some of the input is said to come from the cache and some to go into it,
        // so the cache fields are not all zero.
        let (cache_read, cache_write) = (input_tokens / 4, input_tokens / 8);
        let usage = json!({
            "input_tokens": input_tokens,
            "cache_creation_input_tokens": cache_write,
            "cache_read_input_tokens": cache_read,
            "output_tokens": output_tokens,
            "service_tier": "standard",
        });
        shared.report(Reported {
            input: input_tokens,
            output: output_tokens,
            cache_read,
            cache_write,
        });
        let headers = vec![("request-id".to_owned(), shared.id("req"))];
        if body.get("stream").and_then(Value::as_bool) != Some(true) {
            let msg = json!({
                "id": id, "type": "message", "role": "assistant", "model": model,
                "content": [block], "stop_reason": stop_reason, "stop_sequence": null,
                "usage": usage,
            });
            return Reply::Full {
                status: 200,
                content_type: "application/json",
                headers,
                body: msg.to_string().into_bytes(),
            };
        }
        let mut events = Events::default();
        let mut start_usage = usage.clone();
        start_usage["output_tokens"] = json!(1);
        events.push(json!({"type": "message_start", "message": {
            "id": id, "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": null, "stop_sequence": null, "usage": start_usage,
        }}));
        events.push(json!({"type": "ping"}));
        // The block starts empty and fills through deltas, as the real API streams it.
        let (start, deltas) = match &answer {
            Answer::Tool { .. } => {
                let mut start = block.clone();
                start["input"] = json!({});
                let deltas = pieces(&block["input"].to_string(), 24)
                    .into_iter()
                    .map(|p| json!({"type": "input_json_delta", "partial_json": p}))
                    .collect();
                (start, deltas)
            }
            Answer::Text(t) => {
                let deltas: Vec<Value> = pieces(t, 16)
                    .into_iter()
                    .map(|p| json!({"type": "text_delta", "text": p}))
                    .collect();
                (json!({"type": "text", "text": ""}), deltas)
            }
        };
        events.push(json!({"type": "content_block_start", "index": 0, "content_block": start}));
        for delta in deltas {
            events.push(json!({"type": "content_block_delta", "index": 0, "delta": delta}));
        }
        events.push(json!({"type": "content_block_stop", "index": 0}));
        let mut end_usage = usage;
        if let Some(u) = end_usage.as_object_mut() {
            u.remove("service_tier");
        }
        events.push(json!({"type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": null}, "usage": end_usage}));
        events.push(json!({"type": "message_stop"}));
        Reply::Sse {
            headers,
            events: events.0,
        }
    }
}

// ---------------------------------------------------------------------------------
// OpenAI Responses API
// ---------------------------------------------------------------------------------

mod openai {
    use super::*;

    fn texts(item: &Value) -> Vec<String> {
        match item.get("content") {
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(parts)) => parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .map(str::to_owned)
                .collect(),
            _ => Vec::new(),
        }
    }

    fn human_text(item: &Value) -> Option<String> {
        if item
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("message")
            != "message"
            || item.get("role").and_then(Value::as_str) != Some("user")
        {
            return None;
        }
        let t: Vec<String> = texts(item)
            .into_iter()
            .filter(|t| !is_envelope(t))
            .collect();
        (!t.is_empty()).then(|| t.join("\n"))
    }

    /// The text of a tool output: a string, content parts, or `{content}`.
    fn output_text(output: &Value) -> String {
        match output {
            Value::String(s) => s.clone(),
            Value::Array(parts) => parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n"),
            Value::Object(o) => o.get("content").map(output_text).unwrap_or_default(),
            Value::Null | Value::Bool(_) | Value::Number(_) => String::new(),
        }
    }

    fn cwd(input: &[Value]) -> Option<String> {
        input.iter().flat_map(texts).find_map(|t| {
            let start = t.find("<cwd>")? + "<cwd>".len();
            let end = t[start..].find("</cwd>")? + start;
            Some(t[start..end].trim().to_owned())
        })
    }

    fn plan(input: &[Value]) -> Plan {
        let Some(at) = input.iter().rposition(|i| human_text(i).is_some()) else {
            return Plan::default();
        };
        let prompt = human_text(&input[at]).unwrap_or_default();
        let results = input[at + 1..]
            .iter()
            .filter(|i| {
                matches!(
                    i.get("type").and_then(Value::as_str),
                    Some(
                        "function_call_output"
                            | "custom_tool_call_output"
                            | "local_shell_call_output"
                    )
                )
            })
            .map(|i| {
                let output = i.get("output").unwrap_or(&Value::Null);
                let text = output_text(output);
                let failed = output.get("success").and_then(Value::as_bool) == Some(false)
                    || codex_output_failed(&text);
                ToolResult { text, failed }
            })
            .collect();
        Plan::new(prompt, results)
    }

    fn offered(body: &Value) -> Offered {
        let mut o = Offered::default();
        for t in body
            .get("tools")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let kind = t.get("type").and_then(Value::as_str).unwrap_or("");
            if let Some(n) = t.get("name").and_then(Value::as_str) {
                o.tools.insert(n.to_owned(), kind == "custom");
            }
        }
        o
    }

    fn exec(cmd: String, o: &Offered) -> Option<(String, ToolInput)> {
        if o.has("exec_command") {
            Some((
                "exec_command".to_owned(),
                ToolInput::Json(json!({"cmd": cmd})),
            ))
        } else if o.has("shell") {
            Some((
                "shell".to_owned(),
                ToolInput::Json(json!({"command": ["bash", "-lc", cmd]})),
            ))
        } else {
            None
        }
    }

    pub(super) fn responses(body: &Value, shared: &Shared) -> Reply {
        let empty = Vec::new();
        let input = body
            .get("input")
            .and_then(Value::as_array)
            .unwrap_or(&empty);
        let cwd = cwd(input);
        let answer = decide(&plan(input), &offered(body), |d, o| match d {
            Directive::Write { name, content } => {
                if o.has("apply_patch") {
                    let mut patch = format!(
                        "*** Begin Patch\n*** Add File: {}\n",
                        absolute(cwd.as_deref(), name)
                    );
                    for line in content.split('\n') {
                        patch.push('+');
                        patch.push_str(line);
                        patch.push('\n');
                    }
                    patch.push_str("*** End Patch");
                    let input = if o.freeform("apply_patch") {
                        ToolInput::Freeform(patch)
                    } else {
                        ToolInput::Json(json!({"input": patch}))
                    };
                    Some(("apply_patch".to_owned(), input))
                } else {
                    exec(
                        format!(
                            "printf '%s' {} > {}",
                            shell_quote(content),
                            shell_quote(name)
                        ),
                        o,
                    )
                }
            }
            Directive::Run { cmd } => exec(cmd.clone(), o),
            Directive::Say { .. } | Directive::Unknown { .. } => None,
        });
        let model = body
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or(super::CODEX_MODEL)
            .to_owned();
        let resp_id = shared.id("resp");
        let created_at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let input_tokens = estimate_tokens(body.to_string().len());
        let mut events = Events::default();
        let response = |status: &str, output: Value, usage: Value| {
            json!({
                "id": resp_id, "object": "response", "created_at": created_at,
                "status": status, "error": null, "incomplete_details": null,
                "instructions": null, "model": model, "output": output,
                "parallel_tool_calls": true, "previous_response_id": null,
                "store": false, "tool_choice": "auto", "tools": [], "usage": usage,
            })
        };
        let in_progress = response("in_progress", json!([]), Value::Null);
        events.push(json!({"type": "response.created", "response": in_progress}));
        events.push(json!({"type": "response.in_progress", "response": in_progress}));
        // Each output item: added empty, filled by deltas, closed by a `done` event
        // carrying the whole value, then `output_item.done` with the finished item.
        let at = |item_id: &str| json!({"item_id": item_id, "output_index": 0});
        let item = match answer {
            Answer::Text(text) => {
                let item_id = shared.id("msg");
                let part = json!({"type": "output_text", "text": text, "annotations": []});
                let mut empty_part = part.clone();
                empty_part["text"] = json!("");
                events.push(
                    json!({"type": "response.output_item.added", "output_index": 0,
                    "item": {"id": item_id, "type": "message", "status": "in_progress",
                             "role": "assistant", "content": []}}),
                );
                let mut ev = at(&item_id);
                ev["content_index"] = json!(0);
                events.push(with(
                    &ev,
                    json!({"type": "response.content_part.added", "part": empty_part}),
                ));
                for p in pieces(&text, 16) {
                    events.push(with(
                        &ev,
                        json!({"type": "response.output_text.delta", "delta": p}),
                    ));
                }
                events.push(with(
                    &ev,
                    json!({"type": "response.output_text.done", "text": text}),
                ));
                events.push(with(
                    &ev,
                    json!({"type": "response.content_part.done", "part": part}),
                ));
                json!({"id": item_id, "type": "message", "status": "completed",
                       "role": "assistant", "content": [part]})
            }
            Answer::Tool { name, input } => {
                // A function's input is a JSON string of arguments; a custom
                // (freeform) tool's is the text itself.
                let (kind, prefix, field, id_prefix, text) = match input {
                    ToolInput::Json(args) => (
                        "function_call",
                        "response.function_call_arguments",
                        "arguments",
                        "fc",
                        args.to_string(),
                    ),
                    ToolInput::Freeform(text) => (
                        "custom_tool_call",
                        "response.custom_tool_call_input",
                        "input",
                        "ctc",
                        text,
                    ),
                };
                let item_id = shared.id(id_prefix);
                let call_id = shared.id("call");
                let mut item = json!({"id": item_id, "type": kind, "status": "in_progress",
                                      "call_id": call_id, "name": name});
                item[field] = json!("");
                events.push(
                    json!({"type": "response.output_item.added", "output_index": 0, "item": item}),
                );
                for p in pieces(&text, 24) {
                    events.push(with(
                        &at(&item_id),
                        json!({"type": format!("{prefix}.delta"), "delta": p}),
                    ));
                }
                let mut done = json!({"type": format!("{prefix}.done")});
                done[field] = json!(text);
                events.push(with(&at(&item_id), done));
                item["status"] = json!("completed");
                item[field] = json!(text);
                item
            }
        };
        let output_tokens = estimate_tokens(item.to_string().len());
        events.push(json!({"type": "response.output_item.done", "output_index": 0, "item": item}));
        // A quarter of the input is said to come from the cache (the Responses API
        // counts it inside `input_tokens`).
        let cached = input_tokens / 4;
        shared.report(Reported {
            input: input_tokens - cached,
            output: output_tokens,
            cache_read: cached,
            cache_write: 0,
        });
        let usage = json!({
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens + output_tokens,
        });
        let completed = response("completed", json!([item]), usage);
        events.push(json!({"type": "response.completed", "response": completed}));
        let mut events = events.0;
        for (n, (_, data)) in events.iter_mut().enumerate() {
            data["sequence_number"] = json!(n);
        }
        Reply::Sse {
            headers: vec![("x-request-id".to_owned(), shared.id("req"))],
            events,
        }
    }

    /// `fields` with the members of `base` added.
    fn with(base: &Value, mut fields: Value) -> Value {
        if let (Some(b), Some(f)) = (base.as_object(), fields.as_object_mut()) {
            for (k, v) in b {
                f.insert(k.clone(), v.clone());
            }
        }
        fields
    }
}

// ---------------------------------------------------------------------------------
// Gemini API (Gemini CLI)
// ---------------------------------------------------------------------------------

/// `POST /v1beta/models/{model}:streamGenerateContent?alt=sse` (data-only SSE frames of
/// `GenerateContentResponse`, the last with `finishReason` and `usageMetadata`),
/// `:generateContent` (the same object once, as JSON) and `:countTokens`. Gemini CLI's
/// model router asks `:generateContent` for a JSON complexity score first; it gets a
/// low one. The prompt is the last `user` content with text outside envelopes
/// (`<session_context>…</session_context>`), the working directory the first of the
/// context's "Workspace Directories", and each `functionResponse` after the prompt is
/// one tool result. Tools: `write_file {file_path, content}`, `run_shell_command
/// {command}`.
mod gemini {
    use super::*;

    /// Whether a request is the model router's, not a turn.
    pub(super) fn is_router(body: &Value) -> bool {
        body["generationConfig"]["responseMimeType"] == "application/json"
            && body["systemInstruction"].to_string().contains("Complexity")
    }

    fn texts(content: &Value) -> Vec<String> {
        content["parts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["text"].as_str())
            .map(str::to_owned)
            .collect()
    }

    fn human_text(content: &Value) -> Option<String> {
        if content["role"] != "user" {
            return None;
        }
        let t: Vec<String> = texts(content)
            .into_iter()
            .filter(|t| !is_envelope(t))
            .collect();
        (!t.is_empty()).then(|| t.join("\n"))
    }

    fn cwd(contents: &[Value]) -> Option<String> {
        contents.iter().flat_map(texts).find_map(|t| {
            let at = t.find("Workspace Directories:")?;
            t[at..]
                .lines()
                .skip(1)
                .find_map(|l| l.trim().strip_prefix("- "))
                .map(|d| d.trim().to_owned())
        })
    }

    fn plan(contents: &[Value]) -> Plan {
        let Some(at) = contents.iter().rposition(|c| human_text(c).is_some()) else {
            return Plan::default();
        };
        let prompt = human_text(&contents[at]).unwrap_or_default();
        let mut results = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for c in &contents[at + 1..] {
            for p in c["parts"].as_array().into_iter().flatten() {
                let r = &p["functionResponse"];
                if !r.is_object() {
                    continue;
                }
                // Gemini CLI may repeat a response (seen live): one result per call.
                let id = r["id"].as_str().unwrap_or_default().to_owned();
                if !id.is_empty() && !seen.insert(id) {
                    continue;
                }
                let out = &r["response"];
                let text = out["output"]
                    .as_str()
                    .or_else(|| out["error"].as_str())
                    .map(str::to_owned)
                    .unwrap_or_else(|| out.to_string());
                let failed = out["error"].is_string()
                    || text.contains("Error")
                    || text.contains("rejected")
                    || text.contains("cancelled");
                results.push(ToolResult { text, failed });
            }
        }
        Plan::new(prompt, results)
    }

    fn offered(body: &Value) -> Offered {
        let mut o = Offered::default();
        for t in body["tools"].as_array().into_iter().flatten() {
            for f in t["functionDeclarations"].as_array().into_iter().flatten() {
                if let Some(n) = f["name"].as_str() {
                    o.tools.insert(n.to_owned(), false);
                }
            }
        }
        o
    }

    fn candidate(parts: Value, last: bool, tokens: u64) -> Value {
        let mut c = json!({"content": {"role": "model", "parts": parts}, "index": 0});
        let mut v = json!({"candidates": [], "modelVersion": "gemini-fake"});
        if last {
            c["finishReason"] = json!("STOP");
            v["usageMetadata"] = json!({"promptTokenCount": tokens, "candidatesTokenCount": 4,
                "totalTokenCount": tokens + 4});
        }
        v["candidates"] = json!([c]);
        v
    }

    pub(super) fn route(route: &str, body: &Value, len: usize) -> Option<Reply> {
        let tokens = estimate_tokens(len);
        if route.ends_with(":countTokens") {
            return Some(json_reply(200, &json!({"totalTokens": tokens})));
        }
        if is_router(body) {
            let score =
                json!({"complexity_reasoning": "a scripted fake turn", "complexity_score": 5});
            let v = candidate(json!([{"text": score.to_string()}]), true, tokens);
            return Some(json_reply(200, &v));
        }
        let empty = Vec::new();
        let contents = body["contents"].as_array().unwrap_or(&empty);
        let cwd = cwd(contents);
        let answer = decide(&plan(contents), &offered(body), |d, o| match d {
            Directive::Write { name, content } if o.has("write_file") => Some((
                "write_file".to_owned(),
                ToolInput::Json(
                    json!({"file_path": absolute(cwd.as_deref(), name), "content": content}),
                ),
            )),
            Directive::Run { cmd } if o.has("run_shell_command") => Some((
                "run_shell_command".to_owned(),
                ToolInput::Json(json!({"command": cmd, "description": "a scripted command"})),
            )),
            Directive::Write { .. }
            | Directive::Run { .. }
            | Directive::Say { .. }
            | Directive::Unknown { .. } => None,
        });
        let mut events = Vec::new();
        match answer {
            Answer::Tool { name, input } => {
                let args = match input {
                    ToolInput::Json(v) => v,
                    ToolInput::Freeform(s) => json!({"input": s}),
                };
                events.push(candidate(
                    json!([{"functionCall": {"name": name, "args": args}}]),
                    true,
                    tokens,
                ));
            }
            Answer::Text(text) => {
                let parts = pieces(&text, 40);
                let n = parts.len();
                for (i, p) in parts.into_iter().enumerate() {
                    events.push(candidate(json!([{"text": p}]), i + 1 == n, tokens));
                }
            }
        }
        if route.ends_with(":generateContent") {
            // The whole answer at once: the parts of every piece in one candidate.
            let parts: Vec<Value> = events
                .iter()
                .flat_map(|e| {
                    e["candidates"][0]["content"]["parts"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default()
                })
                .collect();
            return Some(json_reply(
                200,
                &candidate(Value::Array(parts), true, tokens),
            ));
        }
        route
            .ends_with(":streamGenerateContent")
            .then(|| Reply::Sse {
                headers: Vec::new(),
                events: events.into_iter().map(|e| (String::new(), e)).collect(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directives_parse_in_order() {
        let d = directives(
            "please\nberth-fake: write a.txt hello\\nworld\n  berth-fake: run ls -la\nberth-fake: say hi there\nberth-fake: frob",
        );
        assert_eq!(
            d,
            vec![
                Directive::Write {
                    name: "a.txt".into(),
                    content: "hello\nworld".into()
                },
                Directive::Run {
                    cmd: "ls -la".into()
                },
                Directive::Say {
                    text: "hi there".into()
                },
                Directive::Unknown {
                    line: "frob".into()
                },
            ]
        );
    }

    /// Reads one response: status line, headers, and a body framed by content-length
    /// or chunked encoding (decoded).
    fn read_response(
        r: &mut std::io::BufReader<TcpStream>,
        head: bool,
    ) -> (String, Vec<(String, String)>, String) {
        use std::io::BufRead;
        let mut status = String::new();
        r.read_line(&mut status).expect("status line");
        let mut headers = Vec::new();
        loop {
            let mut l = String::new();
            r.read_line(&mut l).expect("header");
            let l = l.trim_end();
            if l.is_empty() {
                break;
            }
            let (k, v) = l.split_once(':').expect("header colon");
            headers.push((k.to_ascii_lowercase(), v.trim().to_owned()));
        }
        let get = |k: &str| headers.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        let mut body = Vec::new();
        if head {
            // No body after a HEAD response, whatever its headers say.
        } else if get("transfer-encoding").as_deref() == Some("chunked") {
            loop {
                let mut size = String::new();
                r.read_line(&mut size).expect("chunk size");
                let n = usize::from_str_radix(size.trim(), 16).expect("hex size");
                let mut chunk = vec![0; n + 2];
                r.read_exact(&mut chunk).expect("chunk");
                if n == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..n]);
            }
        } else if let Some(n) = get("content-length") {
            let mut b = vec![0; n.parse().expect("length")];
            r.read_exact(&mut b).expect("body");
            body = b;
        }
        (
            status.trim_end().to_owned(),
            headers,
            String::from_utf8(body).expect("utf-8"),
        )
    }

    fn connect(f: &FakeModels) -> (TcpStream, std::io::BufReader<TcpStream>) {
        let s = TcpStream::connect(f.addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let r = std::io::BufReader::new(s.try_clone().expect("clone"));
        (s, r)
    }

    /// The `data:` payloads of an SSE body, checking each `event:` name matches `type`.
    fn sse_events(body: &str) -> Vec<Value> {
        body.split("\n\n")
            .filter(|e| !e.trim().is_empty())
            .map(|e| {
                let name = e
                    .lines()
                    .find_map(|l| l.strip_prefix("event: "))
                    .expect("event line");
                let data = e
                    .lines()
                    .find_map(|l| l.strip_prefix("data: "))
                    .expect("data line");
                let v: Value = serde_json::from_str(data).expect("data is JSON");
                assert_eq!(v["type"], name, "event name matches its type");
                v
            })
            .collect()
    }

    #[test]
    fn keep_alive_chunked_requests_and_close() {
        let f = FakeModels::start();
        let (mut s, mut r) = connect(&f);
        // A chunked request body, split mid-JSON, then a second request on the same
        // connection with Content-Length and Connection: close.
        let body = json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi there"}]}).to_string();
        let (a, b) = body.split_at(10);
        write!(
            s,
            "POST /v1/messages?beta=true HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{a}\r\n{:x};ext=1\r\n{b}\r\n0\r\nX-Trailer: t\r\n\r\n",
            a.len(),
            b.len()
        )
        .expect("write");
        let (status, _, text) = read_response(&mut r, false);
        assert_eq!(status, "HTTP/1.1 200 OK");
        let msg: Value = serde_json::from_str(&text).expect("JSON message");
        assert_eq!(msg["content"][0]["text"], "fake reply: hi there");
        assert_eq!(msg["stop_reason"], "end_turn");

        let count = json!({"messages": []}).to_string();
        write!(
            s,
            "POST /v1/messages/count_tokens HTTP/1.1\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{count}",
            count.len()
        )
        .expect("write");
        let (status, headers, text) = read_response(&mut r, false);
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert!(headers.contains(&("connection".into(), "close".into())));
        assert!(text.contains("input_tokens"));
        let mut rest = Vec::new();
        r.read_to_end(&mut rest).expect("closed cleanly");
        assert!(
            rest.is_empty(),
            "nothing after a Connection: close response"
        );

        let log = f.requests();
        assert_eq!(log.len(), 2);
        assert_eq!(log[0].path, "/v1/messages?beta=true");
        assert_eq!(log[0].body["messages"][0]["content"], "hi there");
        assert!(log[0].is_model_turn() && !log[1].is_model_turn());
    }

    #[test]
    fn http10_head_and_unknown_routes() {
        let f = FakeModels::start();
        let (mut s, mut r) = connect(&f);
        write!(s, "HEAD /api/hello HTTP/1.1\r\n\r\n").expect("write");
        let (status, headers, _) = read_response(&mut r, true);
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert!(headers.iter().any(|(k, _)| k == "content-length"));
        write!(s, "GET /nope HTTP/1.0\r\n\r\n").expect("write");
        let (status, _, text) = read_response(&mut r, false);
        assert_eq!(status, "HTTP/1.1 404 Not Found");
        assert!(text.contains("no route GET /nope"));
        let mut rest = Vec::new();
        r.read_to_end(&mut rest).expect("HTTP/1.0 closes");
        let unknown = f.unknown_requests();
        assert_eq!(unknown.len(), 1);
        assert_eq!(unknown[0].route(), "/nope");
    }

    #[test]
    fn anthropic_stream_calls_write_then_answers() {
        let f = FakeModels::start();
        let tools =
            json!([{"name": "Write", "input_schema": {}}, {"name": "Bash", "input_schema": {}}]);
        let prompt = json!({"role": "user", "content": [
            {"type": "text", "text": "<system-reminder>\nctx\n</system-reminder>"},
            {"type": "text", "text": "go\nberth-fake: write a.txt hi\nberth-fake: say bye"},
        ]});
        let sys = json!({"role": "system", "content": " - Primary working directory: /w/app\n"});
        let post = |messages: Value| {
            let (mut s, mut r) = connect(&f);
            let body =
                json!({"model": "claude-x", "stream": true, "tools": tools, "messages": messages})
                    .to_string();
            write!(
                s,
                "POST /v1/messages?beta=true HTTP/1.1\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .expect("write");
            let (status, headers, text) = read_response(&mut r, false);
            assert_eq!(status, "HTTP/1.1 200 OK");
            assert!(
                headers
                    .iter()
                    .any(|(k, v)| k == "content-type" && v.starts_with("text/event-stream"))
            );
            sse_events(&text)
        };
        let ev = post(json!([prompt, sys]));
        let kinds: Vec<&str> = ev.iter().filter_map(|e| e["type"].as_str()).collect();
        assert_eq!(kinds.first(), Some(&"message_start"));
        assert_eq!(kinds.last(), Some(&"message_stop"));
        let start = ev
            .iter()
            .find(|e| e["type"] == "content_block_start")
            .expect("block");
        assert_eq!(start["content_block"]["name"], "Write");
        let json: String = ev
            .iter()
            .filter_map(|e| e["delta"]["partial_json"].as_str())
            .collect();
        let input: Value = serde_json::from_str(&json).expect("input JSON");
        assert_eq!(input, json!({"file_path": "/w/app/a.txt", "content": "hi"}));
        let delta = ev
            .iter()
            .find(|e| e["type"] == "message_delta")
            .expect("delta");
        assert_eq!(delta["delta"]["stop_reason"], "tool_use");
        let id = start["content_block"]["id"].clone();

        let ev = post(json!([prompt, sys,
            {"role": "assistant", "content": [start["content_block"]]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "written"}]}]));
        let text: String = ev
            .iter()
            .filter_map(|e| e["delta"]["text"].as_str())
            .collect();
        assert_eq!(text, "done: a.txt\nwritten\nbye");
        let delta = ev
            .iter()
            .find(|e| e["type"] == "message_delta")
            .expect("delta");
        assert_eq!(delta["delta"]["stop_reason"], "end_turn");
    }

    #[test]
    fn responses_stream_calls_tools_then_answers() {
        let f = FakeModels::start();
        let env = json!({"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "<environment_context>\n  <cwd>/w/app</cwd>\n</environment_context>"}]});
        let prompt = json!({"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "berth-fake: write a.txt x\nberth-fake: run ls"}]});
        let post = |tools: Value, input: Value| {
            let (mut s, mut r) = connect(&f);
            let body = json!({"model": "gpt-x", "stream": true, "tools": tools, "input": input})
                .to_string();
            write!(
                s,
                "POST /v1/responses HTTP/1.1\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .expect("write");
            let (status, _, text) = read_response(&mut r, false);
            assert_eq!(status, "HTTP/1.1 200 OK");
            let ev = sse_events(&text);
            for (n, e) in ev.iter().enumerate() {
                assert_eq!(e["sequence_number"], n, "sequence numbers count up");
            }
            let done = ev.last().expect("events");
            assert_eq!(done["type"], "response.completed");
            assert!(done["response"]["usage"]["total_tokens"].as_u64().is_some());
            done["response"]["output"][0].clone()
        };
        let custom = json!([{"type": "custom", "name": "apply_patch"}, {"type": "function", "name": "exec_command"}]);
        let item = post(custom.clone(), json!([env, prompt]));
        assert_eq!(item["type"], "custom_tool_call");
        assert_eq!(
            item["input"],
            "*** Begin Patch\n*** Add File: /w/app/a.txt\n+x\n*** End Patch"
        );

        let plain = json!([{"type": "function", "name": "exec_command"}]);
        let item = post(plain, json!([env, prompt]));
        assert_eq!(item["type"], "function_call");
        let args: Value =
            serde_json::from_str(item["arguments"].as_str().expect("string")).expect("JSON");
        assert_eq!(args, json!({"cmd": "printf '%s' 'x' > 'a.txt'"}));

        let out1 = json!({"type": "custom_tool_call_output", "call_id": "c1", "output": "Exit code: 0\nOutput:\nok"});
        let item = post(custom.clone(), json!([env, prompt, out1]));
        let args: Value =
            serde_json::from_str(item["arguments"].as_str().expect("string")).expect("JSON");
        assert_eq!(args, json!({"cmd": "ls"}));

        let out2 = json!({"type": "function_call_output", "call_id": "c2", "output": "Process exited with code 2\nOutput:\nboom"});
        let item = post(custom, json!([env, prompt, out1, out2]));
        assert_eq!(item["type"], "message");
        assert_eq!(
            item["content"][0]["text"],
            "done: a.txt\nExit code: 0\nOutput:\nok\nfailed: ls\nProcess exited with code 2\nOutput:\nboom"
        );
    }

    #[test]
    fn missing_tools_are_reported() {
        let plan = Plan {
            prompt: "x".into(),
            steps: directives("berth-fake: run ls\nberth-fake: write a b"),
            results: Vec::new(),
        };
        let answer = decide(&plan, &Offered::default(), |_, _| None);
        assert_eq!(
            answer,
            Answer::Text(
                "cannot: ls (no suitable tool offered)\ncannot: a (no suitable tool offered)"
                    .into()
            )
        );
    }

    #[test]
    fn envelopes_are_recognised() {
        assert!(is_envelope("<system-reminder>\nx\n</system-reminder>\n"));
        assert!(is_envelope(
            "<environment_context>\n  <cwd>/w</cwd>\n</environment_context>"
        ));
        assert!(!is_envelope("<b>bold</b> and more text"));
        assert!(!is_envelope("hello"));
    }
}
