//! Agents that speak the Agent Client Protocol (ACP: JSON-RPC 2.0, one object a line
//! on the agent's stdin and stdout; stderr stays diagnostics). Berth is the client.
//!
//! One turn, in order:
//! 1. `initialize`, declaring what Berth serves: `fs.writeTextFile` (beneath the
//!    pinned directory, [`files`]) and no terminal. `fs.readTextFile` is not declared:
//!    Gemini CLI then reads a missing file through Berth before writing it, and takes
//!    any answer but content as a failed write; an agent reads natively, under the
//!    fence. A request for it is still served, beneath the directory.
//! 2. The session: `session/resume` when the agent advertises it and Berth holds its
//!    session id, else `session/load` (its replay of the history is not recorded
//!    again), else `session/new` with the run's directory as `cwd`, saying once that
//!    the conversation starts afresh.
//! 3. The mode that matches the policy, with `session/set_mode`, when the agent
//!    offers one ([`mode_for`]).
//! 4. `session/prompt`: the brief and the message. Until its answer, the agent's
//!    `session/update`s become transcript events ([`updates`]) and what it asks is
//!    answered: permissions from the policy ([`policy`]) at once, or, under `ask`,
//!    held open until a person (or a rule, or the deadline) decides, the agent's other
//!    messages read meanwhile; files beneath the directory; anything else "method not
//!    found".
//! 5. Berth's cancel sends `session/cancel`; an agent that has not answered within the
//!    grace period is stopped with its group, as every agent is.
//!
//! Bounds: `initialize` is answered within [`INIT_TIMEOUT`] and the session within
//! [`SESSION_TIMEOUT`], else the task ends `agent_start_failed`. A line that is not
//! JSON-RPC (or longer than [`rpc::MAX_LINE`]) is an error event, never a stop.

pub mod files;
pub mod policy;
pub mod rpc;
mod updates;

use crate::agent::adapter::{Turn, TurnState};
use crate::agent::process::{AgentProcess, Input};
use crate::agent::turn::Ran;
use crate::dir::lock::cancelled;
use berth_core::Permissions;
use berth_core::api::Denial;
use berth_core::event::AgentEvent;
use berth_core::exec::ExecEvent;
use berth_core::usage::Usage;
use policy::Decision;
use rpc::{Message, RpcError};
use rustix::fd::BorrowedFd;
use serde_json::{Value, json};
use std::time::Duration;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, watch};

/// How long an agent may take to answer `initialize` (Gemini CLI takes 1–2 s here).
pub const INIT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long it may take to open the session (`session/new`, `load` or `resume`;
/// Gemini CLI takes 3–5 s).
pub const SESSION_TIMEOUT: Duration = Duration::from_secs(60);

/// The resume id Berth keeps for an agent that can continue no conversation (it offers
/// neither `session/resume` nor `session/load`): the transcript said so once, and each
/// later message starts afresh without saying it again.
pub const NO_CONTINUATION: &str = "berth:no-continuation";

/// The ACP version Berth speaks.
pub const PROTOCOL_VERSION: i64 = 1;

/// What one turn works with: the turn as every adapter has it (the prompt, the brief,
/// the agent's session id from the last turn as `resume_id`, the run's directory as the
/// agent sees it, the policy, whether it is fenced), and the same directory pinned,
/// which file requests are served beneath.
#[derive(Debug, Clone, Copy)]
pub struct TurnCtx<'a> {
    pub turn: Turn<'a>,
    pub dir: BorrowedFd<'a>,
    /// Who puts requests to a person (`ask`); `None` where nobody can be asked (every
    /// such request is then rejected, said so).
    pub asker: Option<&'a crate::agent::ask::Asker>,
}

/// A request held for a person, once decided: what to answer the agent with.
#[derive(Debug)]
struct Held {
    /// The JSON-RPC id of the agent's `session/request_permission`.
    rpc: Value,
    call: String,
    tool: String,
    target: String,
    options: Vec<Value>,
    answer: berth_core::approval::Answer,
}

/// How a conversation ended.
#[derive(Debug, Default)]
pub struct Conversation {
    pub state: TurnState,
    pub cancelled: bool,
}

/// Why a call got no answer.
#[derive(Debug)]
enum NoAnswer {
    /// The agent closed its stdout (it exited).
    Closed,
    TimedOut(Duration),
    /// Berth's cancel (only while starting; a prompt is cancelled through ACP).
    Cancelled,
}

/// The mode to set for `permissions` among the agent's `available` ones, if one
/// matches and is not the current one: codex-acp's `read-only`/`auto`/`full-access`.
/// An agent without those keeps its asking mode, and Berth decides every request.
pub fn mode_for(
    permissions: Permissions,
    current: Option<&str>,
    available: &[&str],
) -> Option<String> {
    let wanted: &[&str] = match permissions {
        Permissions::ReadOnly => &["read-only"],
        // codex-acp's `auto` (0.16: approvals on request, its workspace sandbox) asks
        // for what leaves its sandbox; none of its modes asks before each command.
        // That takes `-c approval_policy="untrusted"`, with which (and with the
        // sandbox override a fenced run needs) it offers no modes, and Berth sets
        // none: it asks, and under `ask` Berth puts each request to a person.
        Permissions::Edit | Permissions::Ask => &["auto"],
        Permissions::Full => &["full-access"],
    };
    wanted
        .iter()
        .find(|m| available.contains(m))
        .filter(|m| Some(**m) != current)
        .map(|m| (*m).to_owned())
}

/// The value to set for `permissions` in an agent's mode *configuration option*
/// (ACP `configOptions`, category `mode`, set with `session/set_config_option`; for
/// an agent that offers no `modes`) among its `available` values, if one matches and
/// is not the current one: opencode's `plan` for read-only and `build` otherwise, or
/// the values [`mode_for`] names.
pub fn config_mode_for(
    permissions: Permissions,
    current: Option<&str>,
    available: &[&str],
) -> Option<String> {
    let wanted: &[&str] = match permissions {
        Permissions::ReadOnly => &["read-only", "plan"],
        Permissions::Edit | Permissions::Ask => &["auto", "build"],
        Permissions::Full => &["full-access", "build"],
    };
    wanted
        .iter()
        .find(|m| available.contains(m))
        .filter(|m| Some(**m) != current)
        .map(|m| (*m).to_owned())
}

/// The client's side of one turn, over any pair of streams.
struct Client<'c, R, W> {
    lines: Lines<R>,
    out: W,
    next_id: i64,
    ctx: &'c TurnCtx<'c>,
    events: &'c mpsc::UnboundedSender<ExecEvent>,
    st: TurnState,
    view: updates::View,
    /// Updates arriving while `session/load` replays the history are not new.
    replaying: bool,
    /// Once the prompt is cancelled, permission requests are answered `cancelled`.
    cancelling: bool,
    session: String,
    /// Requests held for a person: their waits, by JSON-RPC id, and where their
    /// decisions arrive.
    held: Vec<(Value, tokio::task::JoinHandle<()>)>,
    held_tx: mpsc::UnboundedSender<Held>,
    held_rx: mpsc::UnboundedReceiver<Held>,
}

/// The agent's stdout, a line at a time.
struct Lines<R> {
    r: R,
    buf: Vec<u8>,
    /// The line being read is over [`rpc::MAX_LINE`]: skipped to its end.
    too_long: bool,
}

/// What [`Lines::next`] read.
enum Read {
    /// A line, without its newline.
    Line(String),
    /// A line over [`rpc::MAX_LINE`], skipped.
    Skipped,
    /// The end of the stream.
    End,
}

impl<R: AsyncBufRead + Unpin> Lines<R> {
    /// The next line that is not blank.
    ///
    /// Cancel-safe: what it read of a line stays in `buf` (and `too_long`) until the
    /// line is whole, so a `select!` that drops it mid-line (a decision arriving)
    /// loses nothing.
    async fn next(&mut self) -> Read {
        loop {
            loop {
                let Ok(chunk) = self.r.fill_buf().await else {
                    return Read::End;
                };
                if chunk.is_empty() {
                    if self.buf.is_empty() && !self.too_long {
                        return Read::End;
                    }
                    break;
                }
                let (take, done) = match chunk.iter().position(|b| *b == b'\n') {
                    Some(i) => (i + 1, true),
                    None => (chunk.len(), false),
                };
                if self.buf.len() + take <= rpc::MAX_LINE {
                    self.buf.extend_from_slice(&chunk[..take]);
                } else {
                    self.too_long = true;
                    self.buf.clear();
                }
                self.r.consume(take);
                if done {
                    break;
                }
            }
            let line = std::mem::take(&mut self.buf);
            if std::mem::take(&mut self.too_long) {
                return Read::Skipped;
            }
            let text = String::from_utf8_lossy(&line);
            let text = text.trim_end_matches(['\n', '\r']);
            if text.trim().is_empty() {
                continue;
            }
            return Read::Line(text.to_owned());
        }
    }
}

/// The next held request decided; pending for ever while none is held.
async fn next_held(rx: &mut mpsc::UnboundedReceiver<Held>, holding: bool) -> Option<Held> {
    if holding {
        rx.recv().await
    } else {
        std::future::pending().await
    }
}

/// Drives one turn over `reader`/`writer` (the agent's stdout and stdin).
pub async fn converse<R, W>(
    reader: R,
    writer: W,
    ctx: &TurnCtx<'_>,
    events: &mpsc::UnboundedSender<ExecEvent>,
    cancel: &mut watch::Receiver<bool>,
    grace: Duration,
) -> Conversation
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let (held_tx, held_rx) = mpsc::unbounded_channel();
    let mut c = Client {
        lines: Lines {
            r: reader,
            buf: Vec::new(),
            too_long: false,
        },
        out: writer,
        next_id: 0,
        ctx,
        events,
        st: TurnState::default(),
        view: updates::View::default(),
        replaying: false,
        cancelling: false,
        session: String::new(),
        held: Vec::new(),
        held_tx,
        held_rx,
    };
    let cancelled = c.turn(cancel, grace).await;
    c.flush();
    // A request still held when the turn ended has nobody left to tell.
    for (_, wait) in c.held.drain(..) {
        wait.abort();
    }
    Conversation {
        state: c.st,
        cancelled,
    }
}

impl<R, W> Client<'_, R, W>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
{
    fn emit(&self, ev: AgentEvent) {
        let _ = self.events.send(ExecEvent::Agent(ev));
    }

    fn warn(&self, line: String) {
        self.emit(AgentEvent::Stderr {
            line: format!("berth: {line}"),
        });
    }

    fn start_failed(&mut self, what: String) {
        self.st.start_failed = Some(what);
    }

    /// The whole turn; whether it was cancelled.
    async fn turn(&mut self, cancel: &mut watch::Receiver<bool>, grace: Duration) -> bool {
        let init = json!({
            "protocolVersion": PROTOCOL_VERSION,
            "clientCapabilities": {
                "fs": {"readTextFile": false, "writeTextFile": true},
                "terminal": false,
            },
            "clientInfo": {"name": "berth", "title": "Berth", "version": env!("CARGO_PKG_VERSION")},
        });
        let caps = match self.call("initialize", init, INIT_TIMEOUT, cancel).await {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => {
                self.start_failed(format!("the agent refused to start: {e}"));
                return false;
            }
            Err(NoAnswer::Cancelled) => return true,
            Err(e) => {
                self.start_failed(self.no_answer("initialize", &e));
                return false;
            }
        };
        let version = caps["protocolVersion"].as_i64();
        if version != Some(PROTOCOL_VERSION) {
            self.start_failed(format!(
                "the agent speaks ACP version {}, Berth speaks {PROTOCOL_VERSION}",
                caps["protocolVersion"]
            ));
            return false;
        }
        let agent = &caps["agentCapabilities"];
        let can_resume = agent["sessionCapabilities"]["resume"].is_object();
        let can_load = agent["loadSession"] == true;
        let opened = match self.open_session(can_resume, can_load, cancel).await {
            Ok(v) => v,
            Err(cancelled) => return cancelled,
        };
        self.set_mode(&opened, cancel).await;
        self.prompt(cancel, grace).await
    }

    fn no_answer(&self, method: &str, e: &NoAnswer) -> String {
        match e {
            NoAnswer::Closed => format!("the agent exited before it answered {method}"),
            NoAnswer::TimedOut(d) => {
                format!("the agent did not answer {method} within {} s", d.as_secs())
            }
            NoAnswer::Cancelled => "cancelled".to_owned(),
        }
    }

    /// Resumes, loads or opens the session; its result (modes). `Err(cancelled)` when
    /// the turn stops here.
    async fn open_session(
        &mut self,
        can_resume: bool,
        can_load: bool,
        cancel: &mut watch::Receiver<bool>,
    ) -> Result<Value, bool> {
        let cwd = self.ctx.turn.work_dir.display().to_string();
        let continues = can_resume || can_load;
        if !continues && self.ctx.turn.resume_id != Some(NO_CONTINUATION) {
            self.warn(
                "the agent can continue no conversation (it offers neither session/resume nor session/load): this message, and each after it, starts a fresh one".to_owned(),
            );
        }
        if let Some(id) = self.ctx.turn.resume_id.filter(|_| continues) {
            let params = json!({"sessionId": id, "cwd": cwd, "mcpServers": []});
            let method = if can_resume {
                "session/resume"
            } else {
                "session/load"
            };
            self.replaying = method == "session/load";
            let answer = self.call(method, params, SESSION_TIMEOUT, cancel).await;
            self.replaying = false;
            self.view = updates::View::default();
            match answer {
                Ok(Ok(v)) => {
                    self.session = id.to_owned();
                    self.st.resume_id = Some(id.to_owned());
                    self.emit(AgentEvent::Started {
                        resume_id: Some(id.to_owned()),
                        model: None,
                    });
                    return Ok(v);
                }
                Ok(Err(e)) => self.warn(format!(
                    "the agent could not continue session {id} ({e}); starting a fresh conversation"
                )),
                Err(NoAnswer::Cancelled) => return Err(true),
                Err(e) => {
                    self.start_failed(self.no_answer(method, &e));
                    return Err(false);
                }
            }
        }
        let params = json!({"cwd": cwd, "mcpServers": []});
        match self
            .call("session/new", params, SESSION_TIMEOUT, cancel)
            .await
        {
            Ok(Ok(v)) => match v["sessionId"].as_str() {
                Some(id) if !id.is_empty() => {
                    self.session = id.to_owned();
                    let kept = if continues { id } else { NO_CONTINUATION };
                    self.st.resume_id = Some(kept.to_owned());
                    self.emit(AgentEvent::Started {
                        resume_id: Some(id.to_owned()),
                        model: v["models"]["currentModelId"].as_str().map(str::to_owned),
                    });
                    Ok(v)
                }
                _ => {
                    self.start_failed("the agent's session/new answer has no sessionId".to_owned());
                    Err(false)
                }
            },
            Ok(Err(e)) => {
                self.start_failed(format!("the agent could not open a session: {e}"));
                Err(false)
            }
            Err(NoAnswer::Cancelled) => Err(true),
            Err(e) => {
                self.start_failed(self.no_answer("session/new", &e));
                Err(false)
            }
        }
    }

    /// The mode that matches the policy: through `modes` (`session/set_mode`), or,
    /// for an agent that offers none, through its mode configuration option
    /// (`session/set_config_option`: opencode).
    async fn set_mode(&mut self, opened: &Value, cancel: &mut watch::Receiver<bool>) {
        let modes = &opened["modes"];
        let available: Vec<&str> = modes["availableModes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["id"].as_str())
            .collect();
        let (method, params, mode) = if available.is_empty() {
            let Some(option) = opened["configOptions"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|o| o["category"] == "mode" && o["type"] == "select")
            else {
                return;
            };
            let values: Vec<&str> = option["options"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v["value"].as_str())
                .collect();
            let current = option["currentValue"].as_str();
            let Some(mode) = config_mode_for(self.ctx.turn.permissions, current, &values) else {
                return;
            };
            let id = option["id"].clone();
            let params = json!({"sessionId": self.session, "configId": id, "value": mode});
            ("session/set_config_option", params, mode)
        } else {
            let current = modes["currentModeId"].as_str();
            let Some(mode) = mode_for(self.ctx.turn.permissions, current, &available) else {
                return;
            };
            let params = json!({"sessionId": self.session, "modeId": mode});
            ("session/set_mode", params, mode)
        };
        match self.call(method, params, SESSION_TIMEOUT, cancel).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => self.warn(format!("the agent refused mode {mode}: {e}")),
            Err(e) => self.warn(format!("mode {mode}: {}", self.no_answer(method, &e))),
        }
    }

    /// `session/prompt` until its answer; whether the turn was cancelled.
    async fn prompt(&mut self, cancel: &mut watch::Receiver<bool>, grace: Duration) -> bool {
        let mut blocks = Vec::new();
        if let Some(brief) = self.ctx.turn.brief.filter(|b| !b.trim().is_empty()) {
            blocks.push(json!({"type": "text", "text": brief}));
        }
        blocks.push(json!({"type": "text", "text": self.ctx.turn.prompt}));
        let id = self
            .request(
                "session/prompt",
                json!({"sessionId": self.session, "prompt": blocks}),
            )
            .await;
        let mut deadline: Option<tokio::time::Instant> = None;
        loop {
            let holding = !self.held.is_empty();
            let read = tokio::select! {
                read = self.lines.next() => read,
                Some(h) = next_held(&mut self.held_rx, holding) => {
                    self.decided(h).await;
                    continue;
                }
                () = cancelled(cancel), if !self.cancelling => {
                    self.cancelling = true;
                    deadline = Some(tokio::time::Instant::now() + grace);
                    let n = rpc::notification("session/cancel", json!({"sessionId": self.session}));
                    let _ = self.write(&n).await;
                    // What waits for a person is answered `cancelled`, as ACP asks.
                    for (rpc, wait) in std::mem::take(&mut self.held) {
                        wait.abort();
                        let a = Answer::Result(json!({"outcome": {"outcome": "cancelled"}}));
                        let _ = self.write(&a.line(&rpc)).await;
                    }
                    continue;
                }
                () = sleep_until(deadline) => {
                    self.warn(format!(
                        "the agent did not stop within {} ms of session/cancel",
                        grace.as_millis()
                    ));
                    return true;
                }
            };
            let line = match read {
                Read::Line(line) => Some(line),
                Read::End => None,
                Read::Skipped => {
                    self.skipped();
                    continue;
                }
            };
            let Some(line) = line else {
                if !self.cancelling {
                    self.st.ok = Some(false);
                    self.st.error.get_or_insert_with(|| {
                        "the agent exited before it answered session/prompt".to_owned()
                    });
                }
                return self.cancelling;
            };
            match rpc::answer_to(rpc::classify(&line), &json!(id)) {
                Ok(outcome) => {
                    self.answered(outcome);
                    return self.cancelling;
                }
                Err(msg) => self.handle(msg).await,
            }
        }
    }

    /// The prompt's answer: how the turn ended.
    fn answered(&mut self, outcome: Result<Value, RpcError>) {
        self.flush();
        let v = match outcome {
            Ok(v) => v,
            Err(e) => {
                self.st.ok = Some(false);
                self.st.error = Some(format!("the agent's turn failed: {e}"));
                let usage = self.view.usage.take();
                self.st.usage = usage.as_ref().map(|u| Usage::acp(u, self.view.cost_usd));
                self.emit(AgentEvent::Result {
                    ok: false,
                    text: Some(e.message),
                    usage,
                    cost_usd: None,
                });
                return;
            }
        };
        let reason = v["stopReason"].as_str().unwrap_or("end_turn");
        let ok = reason == "end_turn";
        if reason != "cancelled" {
            self.st.ok = Some(ok);
        }
        if !ok && reason != "cancelled" {
            self.st.error = Some(format!("the agent stopped its turn: {reason}"));
        }
        let usage = updates::usage(&v).or_else(|| self.view.usage.take());
        self.st.usage = usage.as_ref().map(|u| Usage::acp(u, self.view.cost_usd));
        self.emit(AgentEvent::Result {
            ok,
            text: self.view.last_text.clone(),
            usage,
            cost_usd: self.view.cost_usd,
        });
    }

    async fn write(&mut self, line: &[u8]) -> std::io::Result<()> {
        self.out.write_all(line).await?;
        self.out.flush().await
    }

    async fn request(&mut self, method: &str, params: Value) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        // A write that fails means the agent is gone: the read that follows says so.
        let _ = self.write(&rpc::request(id, method, params)).await;
        id
    }

    /// One request and its answer, the agent's own messages handled meanwhile.
    async fn call(
        &mut self,
        method: &str,
        params: Value,
        timeout: Duration,
        cancel: &mut watch::Receiver<bool>,
    ) -> Result<Result<Value, RpcError>, NoAnswer> {
        let id = json!(self.request(method, params).await);
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let holding = !self.held.is_empty();
            let read = tokio::select! {
                read = self.lines.next() => read,
                Some(h) = next_held(&mut self.held_rx, holding) => {
                    self.decided(h).await;
                    continue;
                }
                () = tokio::time::sleep_until(deadline) => return Err(NoAnswer::TimedOut(timeout)),
                () = cancelled(cancel) => return Err(NoAnswer::Cancelled),
            };
            let line = match read {
                Read::Line(line) => line,
                Read::End => return Err(NoAnswer::Closed),
                Read::Skipped => {
                    self.skipped();
                    continue;
                }
            };
            match rpc::answer_to(rpc::classify(&line), &id) {
                Ok(outcome) => return Ok(outcome),
                Err(msg) => self.handle(msg).await,
            }
        }
    }

    /// A line over [`rpc::MAX_LINE`] was skipped.
    fn skipped(&self) {
        self.emit(AgentEvent::Error {
            message: format!(
                "the agent wrote a line over {} MiB; Berth skipped it",
                rpc::MAX_LINE >> 20
            ),
        });
    }

    /// A message of the agent's while Berth waits for an answer.
    async fn handle(&mut self, msg: Message) {
        match msg {
            Message::Notification { method, params } => {
                if method == "session/update" && !self.replaying {
                    for ev in
                        self.view
                            .update(&params["update"], &mut self.st, self.ctx.turn.fenced)
                    {
                        self.emit(ev);
                    }
                }
            }
            Message::Request { id, method, params } => {
                // What the agent said before it asked comes first: a denial or a
                // request put to a person never jumps ahead of it.
                self.flush();
                if method == "session/request_permission"
                    && let Some(hold) = self.hold(&id, &params)
                {
                    self.held.push((id, hold));
                    return;
                }
                let answer = self.answer(&method, &params);
                let _ = self.write(&answer.line(&id)).await;
            }
            // An answer to nothing Berth waits for: a late one, ignored.
            Message::Response { .. } => {}
            Message::Invalid(why) => self.emit(AgentEvent::Error {
                message: format!("the agent wrote a line that is not JSON-RPC: {why}"),
            }),
        }
    }

    fn flush(&mut self) {
        for ev in self.view.flush() {
            self.emit(ev);
        }
    }

    /// Berth's answer to one of the agent's requests.
    fn answer(&mut self, method: &str, params: &Value) -> Answer {
        match method {
            "session/request_permission" => self.permission(params),
            "fs/write_text_file" => {
                let path = params["path"].as_str().unwrap_or_default();
                let Some(content) = params["content"].as_str() else {
                    return Answer::Error(rpc::INVALID_PARAMS, "content must be a string".into());
                };
                let done = if self.ctx.turn.permissions == Permissions::ReadOnly {
                    Err(files::FileError::ReadOnly {
                        path: path.to_owned(),
                    })
                } else {
                    files::write(self.ctx.dir, self.ctx.turn.work_dir, path, content)
                };
                match done {
                    Ok(()) => {
                        self.st.changes_applied += 1;
                        Answer::Result(Value::Null)
                    }
                    Err(e) => self.file_refused("write", path, e),
                }
            }
            "fs/read_text_file" => {
                let path = params["path"].as_str().unwrap_or_default();
                let (line, limit) = (params["line"].as_u64(), params["limit"].as_u64());
                match files::read(self.ctx.dir, self.ctx.turn.work_dir, path, line, limit) {
                    Ok(content) => Answer::Result(json!({"content": content})),
                    Err(e) => self.file_refused("read", path, e),
                }
            }
            _ => Answer::Error(
                rpc::METHOD_NOT_FOUND,
                format!("Berth does not serve {method}"),
            ),
        }
    }

    fn file_refused(&mut self, tool: &str, path: &str, e: files::FileError) -> Answer {
        if !e.is_denial() {
            return Answer::Error(rpc::NOT_FOUND, e.to_string());
        }
        let denial = Denial {
            tool: tool.to_owned(),
            target: path.to_owned(),
            by: None,
        };
        if let Some(ev) = self.st.deny(None, denial, Some(e.to_string())) {
            self.emit(ev);
        }
        Answer::Error(rpc::INTERNAL, e.to_string())
    }

    fn permission(&mut self, params: &Value) -> Answer {
        let call = &params["toolCall"];
        let id = call["toolCallId"].as_str().unwrap_or_default().to_owned();
        let tool = self.view.merge(call);
        let options: Vec<Value> = params["options"].as_array().cloned().unwrap_or_default();
        if self.cancelling {
            return Answer::Result(json!({"outcome": {"outcome": "cancelled"}}));
        }
        let no_rules = berth_core::approval::AskRules::default();
        let rules = self.ctx.asker.map_or(&no_rules, |a| a.rules());
        let call_of = updates::Subject::of(&tool);
        let mut decision = policy::decide(
            self.ctx.turn.permissions,
            self.ctx.turn.fenced,
            call_of.subject(),
            self.ctx.turn.work_dir,
            rules,
        );
        if decision == Decision::Ask {
            // Held requests never come here (see `hold`): nobody can be asked.
            decision = Decision::Reject(
                "the policy is ask, and nobody can be asked in this run".to_owned(),
            );
        }
        if let Decision::Reject(why) = &decision {
            let denial = Denial {
                tool: tool.name(),
                target: tool.target(),
                by: None,
            };
            let key = (!id.is_empty()).then_some(id.as_str());
            if let Some(ev) = self.st.deny(key, denial, Some(why.clone())) {
                self.emit(ev);
            }
        }
        match policy::pick(&options, &decision) {
            Some(option) => {
                Answer::Result(json!({"outcome": {"outcome": "selected", "optionId": option}}))
            }
            None => Answer::Result(json!({"outcome": {"outcome": "cancelled"}})),
        }
    }
}

impl<R, W> Client<'_, R, W>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
{
    /// Under `ask`, a permission request that goes to a person: sent to the server and
    /// waited for off this loop (its decision comes back through `held_rx`). `None`
    /// when it is answered at once instead.
    fn hold(&mut self, rpc: &Value, params: &Value) -> Option<tokio::task::JoinHandle<()>> {
        let asker = self.ctx.asker?;
        if self.cancelling || self.ctx.turn.permissions != Permissions::Ask {
            return None;
        }
        let call = &params["toolCall"];
        let tool = self.view.merge(call);
        let s = updates::Subject::of(&tool);
        let decision = policy::decide(
            self.ctx.turn.permissions,
            self.ctx.turn.fenced,
            s.subject(),
            self.ctx.turn.work_dir,
            asker.rules(),
        );
        if decision != Decision::Ask {
            return None;
        }
        let options: Vec<Value> = params["options"].as_array().cloned().unwrap_or_default();
        let offered = options
            .iter()
            .map(|o| berth_core::approval::ApprovalOption {
                id: o["optionId"].as_str().unwrap_or_default().to_owned(),
                name: o["name"].as_str().unwrap_or_default().to_owned(),
                kind: o["kind"].as_str().unwrap_or_default().to_owned(),
            })
            .collect();
        let (_, answer) = asker.ask(crate::agent::ask::Ask {
            kind: tool.kind.clone(),
            title: tool.name(),
            command: tool.command.clone(),
            paths: tool.paths.clone(),
            input: call.clone(),
            options: offered,
        });
        let tx = self.held_tx.clone();
        let held = Held {
            rpc: rpc.clone(),
            call: tool.id.clone(),
            tool: tool.name(),
            target: tool.target(),
            options,
            answer: berth_core::approval::Answer::cancelled(),
        };
        Some(tokio::spawn(async move {
            let answer = answer.await;
            let _ = tx.send(Held { answer, ..held });
        }))
    }

    /// A held request decided: the agent hears it (always one of its own options),
    /// and a denial is recorded with who made it.
    async fn decided(&mut self, h: Held) {
        let Some(at) = self.held.iter().position(|(id, _)| *id == h.rpc) else {
            return; // answered already (the turn was cancelled)
        };
        self.held.remove(at);
        self.flush();
        let decision = match h.answer.verdict {
            berth_core::approval::Verdict::Allow => Decision::Allow,
            berth_core::approval::Verdict::Deny => {
                let why = h
                    .answer
                    .reason
                    .clone()
                    .unwrap_or_else(|| "denied".to_owned());
                let denial = Denial {
                    tool: h.tool.clone(),
                    target: h.target.clone(),
                    by: Some(h.answer.by.as_str().to_owned()),
                };
                let key = (!h.call.is_empty()).then_some(h.call.as_str());
                if let Some(ev) = self.st.deny(key, denial, Some(why.clone())) {
                    self.emit(ev);
                }
                Decision::Reject(why)
            }
        };
        let answer = match policy::pick(&h.options, &decision) {
            Some(option) => {
                Answer::Result(json!({"outcome": {"outcome": "selected", "optionId": option}}))
            }
            None => Answer::Result(json!({"outcome": {"outcome": "cancelled"}})),
        };
        let _ = self.write(&answer.line(&h.rpc)).await;
    }
}

enum Answer {
    Result(Value),
    Error(i64, String),
}

impl Answer {
    fn line(&self, id: &Value) -> Vec<u8> {
        match self {
            Answer::Result(v) => rpc::result(id, v.clone()),
            Answer::Error(code, message) => rpc::error(id, *code, message),
        }
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// One ACP agent process, from spawn to exit: the conversation on its stdin and
/// stdout, its stderr as diagnostics, and the group stopped after the turn (its stdin
/// closed first, then terminate and kill after `grace`).
pub(crate) async fn drive(
    mut proc: AgentProcess,
    ctx: &TurnCtx<'_>,
    events: &mpsc::UnboundedSender<ExecEvent>,
    cancel: &mut watch::Receiver<bool>,
    grace: Duration,
) -> Ran {
    let (Some(stdin), Some(stdout)) = (proc.stdin.take(), proc.stdout.take()) else {
        proc.release().await;
        let state = TurnState {
            start_failed: Some("the agent's stdin or stdout is missing".to_owned()),
            ..TurnState::default()
        };
        return Ran {
            state,
            exit_code: None,
            cancelled: false,
        };
    };
    let mut err = proc
        .stderr
        .take()
        .map(|s| tokio::io::BufReader::new(s).split(b'\n'));
    let reader = tokio::io::BufReader::with_capacity(64 * 1024, stdout);
    let talk = converse_closing(reader, stdin, ctx, events, cancel, grace);
    tokio::pin!(talk);
    let conv = loop {
        tokio::select! {
            conv = &mut talk => break conv,
            line = async { err.as_mut()?.next_segment().await.ok().flatten() }, if err.is_some() => {
                match line {
                    Some(line) => stderr_line(events, &line),
                    None => err = None,
                }
            }
        }
    };
    // Stdin is closed: most agents exit on their own. The rest go with their group.
    let exit = tokio::select! {
        status = proc.wait() => status.ok().flatten(),
        () = tokio::time::sleep(grace) => proc.terminate(grace).await.ok().flatten(),
    };
    if let Some(mut e) = err {
        let drain = async {
            while let Ok(Some(line)) = e.next_segment().await {
                stderr_line(events, &line);
            }
        };
        let _ = tokio::time::timeout(grace, drain).await;
    }
    proc.release().await;
    Ran {
        state: conv.state,
        exit_code: exit,
        cancelled: conv.cancelled,
    }
}

fn stderr_line(events: &mpsc::UnboundedSender<ExecEvent>, bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    let line = text.strip_suffix('\r').unwrap_or(&text).to_owned();
    let _ = events.send(ExecEvent::Agent(AgentEvent::Stderr { line }));
}

/// [`converse`], then the agent's stdin closed (its EOF).
async fn converse_closing<R: AsyncBufRead + Unpin>(
    reader: R,
    mut stdin: Input,
    ctx: &TurnCtx<'_>,
    events: &mpsc::UnboundedSender<ExecEvent>,
    cancel: &mut watch::Receiver<bool>,
    grace: Duration,
) -> Conversation {
    let conv = converse(reader, &mut stdin, ctx, events, cancel, grace).await;
    let _ = stdin.shutdown().await;
    drop(stdin);
    conv
}

#[cfg(test)]
mod tests;
