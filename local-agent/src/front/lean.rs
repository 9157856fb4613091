//! The lean `berth` (issue 17): `berth send`, the read-only lists and `--version`,
//! answered by a small process that starts about as fast as `cat`.
//!
//! The `berth` executable is this front: it parses the few command lines it knows
//! (strictly: anything it is not sure of is not its business), talks HTTP/1.1 to the
//! control socket on a blocking socket ([`super::wire`]), and prints through the same
//! [`super::render`] code as the full CLI. Every other command line, including every
//! one clap would refuse or explain, goes to the full CLI, `berth-full`, installed
//! next to it and started with `exec` (same pid, same arguments, same `argv[0]`), so
//! help, errors and every other command are exactly clap's.
//!
//! Nothing here starts a runtime or a thread, reads the password database or builds a
//! command tree: the costs `perf` showed in the full binary's start.

use super::error::CliError;
use super::render;
use super::wire::{self, Events, Framing, Head};
use serde_json::{Value, json};
use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

/// The full CLI's executable, installed next to `berth`.
pub const FULL_BINARY: &str = "berth-full";

/// The largest JSON answer the lean client reads (a list of 10,000 sessions is about
/// 2 MB).
const MAX_ANSWER: u64 = 256 * 1024 * 1024;

/// A command the lean client runs itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// `berth send ID MESSAGE [--detach] [--json]`.
    Send {
        id: String,
        message: String,
        detach: bool,
        json: bool,
    },
    /// `berth session list [--all] [--json]`.
    SessionList { all: bool, json: bool },
    /// `berth task list [--session ID] [--json]`.
    TaskList { session: Option<String>, json: bool },
    /// `berth agent list [--json]`.
    AgentList { json: bool },
}

impl Request {
    fn json(&self) -> bool {
        match self {
            Request::Send { json, .. }
            | Request::SessionList { json, .. }
            | Request::TaskList { json, .. }
            | Request::AgentList { json } => *json,
        }
    }
}

/// What a command line asks of the lean client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// `berth --version` (or `-V`).
    Version,
    /// One of the [`Request`]s, with `--home` when given.
    Run {
        home: Option<PathBuf>,
        request: Request,
    },
}

/// The commands the lean client knows, by their subcommand words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Known {
    Send,
    SessionList,
    TaskList,
    AgentList,
}

impl Known {
    /// The command `words` name in full, if any.
    fn of(words: &[&str]) -> Option<Known> {
        match words {
            ["send", ..] => Some(Known::Send),
            ["session", "list", ..] => Some(Known::SessionList),
            ["task", "list", ..] => Some(Known::TaskList),
            ["agent", "list", ..] => Some(Known::AgentList),
            _ => None,
        }
    }
}

/// Sets `slot` once from a value that is plainly a value (not empty, not a flag);
/// `None` for anything else, which clap would have to judge.
fn once<'a>(slot: &mut Option<&'a str>, value: &'a str) -> Option<()> {
    if slot.is_some() || value.is_empty() || value.starts_with('-') {
        return None;
    }
    *slot = Some(value);
    Some(())
}

fn flag(slot: &mut bool) -> Option<()> {
    if *slot {
        return None;
    }
    *slot = true;
    Some(())
}

/// Parses `args` (with `argv[0]`) the way clap parses these commands, or returns
/// `None` when the line is not one the lean client is sure of: another command, a
/// flag it does not know, a repeated flag, a value that starts with `-`, an empty
/// argument, `--`, `--help`, text that is not UTF-8. Those go to the full CLI, whose
/// answer (the command, or clap's error) is then the only one.
pub fn parse(args: &[OsString]) -> Option<Parsed> {
    let args: Vec<&str> = args
        .iter()
        .skip(1)
        .map(|a| a.to_str())
        .collect::<Option<_>>()?;
    if let [only] = args.as_slice()
        && (*only == "--version" || *only == "-V")
    {
        return Some(Parsed::Version);
    }
    let mut home = None;
    let mut words: Vec<&str> = Vec::new();
    let (mut json, mut detach, mut session, mut all) = (false, false, None, false);
    let mut rest = args.iter().copied();
    while let Some(a) = rest.next() {
        if a == "--home" {
            once(&mut home, rest.next()?)?;
        } else if let Some(v) = a.strip_prefix("--home=") {
            once(&mut home, v)?;
        } else if a.starts_with('-') {
            // A command's own flag, valid only once its command is named in full.
            let known = Known::of(&words)?;
            match (known, a) {
                (_, "--json") => flag(&mut json)?,
                (Known::Send, "--detach") => flag(&mut detach)?,
                (Known::SessionList, "--all") => flag(&mut all)?,
                (Known::TaskList, "--session") => once(&mut session, rest.next()?)?,
                (Known::TaskList, s) if s.starts_with("--session=") => {
                    once(&mut session, &s["--session=".len()..])?;
                }
                _ => return None,
            }
        } else if a.is_empty() {
            return None;
        } else {
            words.push(a);
        }
    }
    let request = match (Known::of(&words)?, words.as_slice()) {
        (Known::Send, [_, id, message]) => Request::Send {
            id: (*id).to_owned(),
            message: (*message).to_owned(),
            detach,
            json,
        },
        (Known::SessionList, [_, _]) => Request::SessionList { all, json },
        (Known::TaskList, [_, _]) => Request::TaskList {
            session: session.map(str::to_owned),
            json,
        },
        (Known::AgentList, [_, _]) => Request::AgentList { json },
        _ => return None,
    };
    Some(Parsed::Run {
        home: home.map(PathBuf::from),
        request,
    })
}

/// Runs `args` if the lean client knows them: `Some(exit code)`, else `None` (the
/// full CLI's business).
pub fn main(args: &[OsString]) -> Option<u8> {
    match parse(args)? {
        Parsed::Version => {
            println!("berth {}", env!("CARGO_PKG_VERSION"));
            Some(0)
        }
        // With neither --home, BERTH_HOME nor HOME, the home comes from the password
        // database: the full CLI's to read (this client may be linked statically,
        // without the system's name services).
        Parsed::Run { home, .. } if home.is_none() && unset("BERTH_HOME") && unset("HOME") => None,
        Parsed::Run { home, request } => Some(run(home, request)),
    }
}

fn unset(var: &str) -> bool {
    std::env::var_os(var).is_none_or(|v| v.is_empty())
}

/// Runs one request against the server of `home` (`--home`, else the environment's);
/// prints its output, or its error as every `berth` command does. The full CLI runs
/// these commands through here too, so there is one implementation of each.
pub fn run(home: Option<PathBuf>, request: Request) -> u8 {
    let json = request.json();
    let outcome = crate::config::home_from_env(home)
        .map_err(|e| CliError::new(e.to_string(), "pass --home DIR or set BERTH_HOME"))
        .and_then(|home| execute(&mut Socket::new(&home), request));
    match outcome {
        Ok(code) => code,
        Err(e) => e.report(json),
    }
}

fn execute(c: &mut Socket, request: Request) -> Result<u8, CliError> {
    match request {
        Request::Send {
            id,
            message,
            detach,
            json,
        } => send(c, &id, message, detach, json),
        Request::SessionList { all, json } => {
            let sessions = c.get(if all {
                "/api/v1/sessions?all=true"
            } else {
                "/api/v1/sessions"
            })?;
            if json {
                render::print_json(&sessions);
            } else {
                let tasks = c.get("/api/v1/tasks").unwrap_or(Value::Null);
                render::sessions(&sessions, &tasks);
            }
            Ok(0)
        }
        Request::TaskList { session, json } => {
            let path = match session {
                Some(s) => format!("/api/v1/tasks?session={}", encode(&s)),
                None => String::from("/api/v1/tasks"),
            };
            let tasks = c.get(&path)?;
            if json {
                render::print_json(&tasks);
            } else {
                render::tasks(&tasks);
            }
            Ok(0)
        }
        Request::AgentList { json } => {
            let agents = c.get("/api/v1/agents")?;
            if json {
                render::print_json(&agents);
            } else {
                render::agents(&agents);
                // How this machine fences them (what the server's executor says).
                let caps = c.get("/api/v1/capabilities")?;
                if let Some(text) = caps["fence"]["text"].as_str() {
                    println!();
                    println!("fence: {}", render::escape(text));
                }
            }
            Ok(0)
        }
    }
}

/// Percent-encodes one path segment (ids are plain, but a prefix is user input).
fn encode(segment: &str) -> String {
    berth_web::net::encode(segment)
}

/// `berth send`: posts the message and follows its turn in the same request.
fn send(c: &mut Socket, id: &str, text: String, detach: bool, json: bool) -> Result<u8, CliError> {
    let body = json!({"text": text});
    if detach {
        let reply = c.post(&format!("/api/v1/sessions/{}/messages", encode(id)), &body)?;
        let task = &reply["task"];
        if json {
            println!("{}", json!({"task": task}));
        } else {
            let (t, s) = (
                render::short(&task["id"]),
                render::short(&task["session_id"]),
            );
            println!("task {t} queued in session {s}");
            println!("  follow it: berth session log {s} --follow");
            println!("  cancel it: berth task cancel {t}");
        }
        return Ok(0);
    }
    // Ctrl-C from here on cancels the task instead of leaving it running.
    let home = c.home.clone();
    let interrupt = super::interrupt::Interrupt::install(Box::new(move |task| {
        let path = format!("/api/v1/tasks/{}/cancel", encode(task));
        Socket::new(&home).post(&path, &json!({})).map(drop)
    }));
    let path = format!("/api/v1/sessions/{}/messages?stream=true", encode(id));
    let mut stream = c.stream("POST", &path, Some(&body))?;
    let reply: Value = match stream.next_event()? {
        Some(ev) if ev.event == "accepted" => serde_json::from_str(&ev.data).map_err(|e| {
            CliError::new(
                format!("berth answered the message with an unreadable task: {e}"),
                "check that the socket belongs to a Berth server of the same version",
            )
        })?,
        _ => {
            return Err(CliError::new(
                "berth did not accept the message in its answer",
                "check that the socket belongs to a Berth server of the same version",
            ));
        }
    };
    let task_id = reply["task"]["id"].as_str().unwrap_or_default().to_owned();
    if let Some(i) = &interrupt {
        i.task(&task_id);
    }
    let mut view = render::Stream::new(json);
    let final_task = loop {
        let Some(ev) = stream.next_event()? else {
            // The server closed the stream (it is shutting down): report what is known.
            break c.get(&format!("/api/v1/tasks/{}", encode(&task_id)))?;
        };
        let Ok(data) = serde_json::from_str::<Value>(&ev.data) else {
            continue;
        };
        if data["task_id"].as_str() != Some(task_id.as_str()) {
            continue;
        }
        if ev.event == "task" {
            break data["payload"]["task"].clone();
        }
        view.event(&ev.event, &data);
    };
    view.finish(&final_task);
    Ok(if final_task["status"] == "succeeded" {
        0
    } else if interrupt.as_ref().is_some_and(|i| i.pressed()) {
        130
    } else {
        1
    })
}

/// HTTP/1.1 on the control socket `$BERTH_HOME/berth.sock`, blocking. Trust on that
/// socket equals the user's own shell (it is 0600), so no token is sent. A connection
/// whose answer was read whole is kept for the next request.
#[derive(Debug)]
pub struct Socket {
    path: PathBuf,
    home: PathBuf,
    kept: Option<BufReader<UnixStream>>,
}

/// A live event stream (`text/event-stream`), read event by event.
pub struct EventStream {
    events: Events<Box<dyn BufRead>>,
}

impl std::fmt::Debug for EventStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EventStream")
    }
}

impl EventStream {
    /// The next event, or `None` when the server closed the stream.
    pub fn next_event(&mut self) -> Result<Option<wire::SseEvent>, CliError> {
        self.events.next_event().map_err(|e| {
            CliError::new(
                format!("the event stream broke: {e}"),
                "the task goes on; follow it with `berth task list`",
            )
        })
    }
}

fn request_failed(e: std::io::Error) -> CliError {
    CliError::new(
        format!("the request to berth failed: {e}"),
        "check `berth serve`'s output",
    )
}

fn status_code(status: u16) -> hyper::StatusCode {
    hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR)
}

impl Socket {
    pub fn new(home: &Path) -> Socket {
        Socket {
            path: home.join(berth_core::SOCKET_FILE),
            home: home.to_owned(),
            kept: None,
        }
    }

    fn connect(&self) -> Result<BufReader<UnixStream>, CliError> {
        let stream = UnixStream::connect(&self.path)
            .map_err(|e| CliError::unreachable(&self.home, &self.path, &e))?;
        Ok(BufReader::with_capacity(64 * 1024, stream))
    }

    /// Writes one request and reads its head, on the kept connection when there is
    /// one (a GET is sent again on a new one if the server had closed it meanwhile).
    fn exchange(
        &mut self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        accept: &str,
    ) -> Result<(Head, BufReader<UnixStream>), CliError> {
        let body = body.map(Value::to_string);
        let request = wire::Request {
            method,
            path,
            host: berth_core::SOCKET_FILE,
            accept,
            body: body.as_deref().map(str::as_bytes),
            headers: &[],
        };
        if let Some(mut conn) = self.kept.take() {
            let sent = request.write_to(conn.get_mut());
            match sent.and_then(|()| wire::read_head(&mut conn)) {
                Ok(head) => return Ok((head, conn)),
                Err(e) if method != "GET" => return Err(request_failed(e)),
                Err(_) => {}
            }
        }
        let mut conn = self.connect()?;
        request.write_to(conn.get_mut()).map_err(request_failed)?;
        let head = wire::read_head(&mut conn).map_err(request_failed)?;
        Ok((head, conn))
    }

    /// Sends a request and returns the JSON body of a 2xx answer; anything else
    /// becomes a [`CliError`] carrying the server's code, message and hint.
    pub fn call(
        &mut self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, CliError> {
        let (head, mut conn) = self.exchange(method, path, body, "application/json")?;
        let bytes = wire::read_body(&mut conn, head.framing, MAX_ANSWER).map_err(|e| {
            CliError::new(format!("reading berth's answer failed: {e}"), "try again")
        })?;
        if !head.close {
            self.kept = Some(conn);
        }
        CliError::answer(status_code(head.status), &bytes)
    }

    pub fn get(&mut self, path: &str) -> Result<Value, CliError> {
        self.call("GET", path, None)
    }

    pub fn post(&mut self, path: &str, body: &Value) -> Result<Value, CliError> {
        self.call("POST", path, Some(body))
    }

    /// A request answered by an event stream (200), or the server's error.
    pub fn stream(
        &mut self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<EventStream, CliError> {
        let (head, mut conn) = self.exchange(method, path, body, "text/event-stream")?;
        if head.status != 200 {
            let bytes = wire::read_body(&mut conn, head.framing, MAX_ANSWER).unwrap_or_default();
            let value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            return Err(CliError::from_body(status_code(head.status), &value));
        }
        let body: Box<dyn BufRead> = match head.framing {
            Framing::Chunked => Box::new(BufReader::new(wire::Chunked::new(conn))),
            Framing::Length(n) => Box::new(std::io::Read::take(conn, n)),
            Framing::Close => Box::new(conn),
        };
        Ok(EventStream {
            events: Events::new(body),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_line(line: &[&str]) -> Option<Parsed> {
        let args: Vec<OsString> = std::iter::once("berth")
            .chain(line.iter().copied())
            .map(OsString::from)
            .collect();
        parse(&args)
    }

    fn run_of(home: Option<&str>, request: Request) -> Option<Parsed> {
        Some(Parsed::Run {
            home: home.map(PathBuf::from),
            request,
        })
    }

    fn send(json: bool, detach: bool) -> Request {
        Request::Send {
            id: "3f9c".into(),
            message: "run the tests".into(),
            detach,
            json,
        }
    }

    #[test]
    fn the_lines_it_knows_parse_as_clap_would() {
        assert_eq!(parse_line(&["--version"]), Some(Parsed::Version));
        assert_eq!(parse_line(&["-V"]), Some(Parsed::Version));
        assert_eq!(
            parse_line(&["send", "3f9c", "run the tests"]),
            run_of(None, send(false, false))
        );
        // Flags anywhere after the command, --home anywhere (it is global).
        assert_eq!(
            parse_line(&[
                "--home",
                "/h",
                "send",
                "--json",
                "3f9c",
                "run the tests",
                "--detach"
            ]),
            run_of(Some("/h"), send(true, true))
        );
        assert_eq!(
            parse_line(&["send", "3f9c", "--home=/h", "run the tests"]),
            run_of(Some("/h"), send(false, false))
        );
        assert_eq!(
            parse_line(&["session", "list", "--json"]),
            run_of(
                None,
                Request::SessionList {
                    all: false,
                    json: true
                }
            )
        );
        assert_eq!(
            parse_line(&["session", "list", "--all"]),
            run_of(
                None,
                Request::SessionList {
                    all: true,
                    json: false
                }
            )
        );
        assert_eq!(
            parse_line(&["task", "list", "--session", "3f9c"]),
            run_of(
                None,
                Request::TaskList {
                    session: Some("3f9c".into()),
                    json: false
                }
            )
        );
        assert_eq!(
            parse_line(&["task", "list", "--json", "--session=ab"]),
            run_of(
                None,
                Request::TaskList {
                    session: Some("ab".into()),
                    json: true
                }
            )
        );
        assert_eq!(
            parse_line(&["agent", "list"]),
            run_of(None, Request::AgentList { json: false })
        );
    }

    /// Whatever clap alone can judge goes to the full CLI: its answer, help or error
    /// is then the only one a user ever sees.
    #[test]
    fn everything_else_is_the_full_clis() {
        for line in [
            &[][..],
            &["serve"],
            &["--help"],
            &["-h"],
            &["send", "--help"],
            &["help", "send"],
            &["--version", "--home", "/h"],
            &["send", "3f9c"],
            &["send", "3f9c", "a", "b"],
            &["send", "3f9c", ""],
            &["send", "", "m"],
            &["send", "3f9c", "--", "-m"],
            &["send", "3f9c", "-m"],
            &["send", "--json", "--json", "3f9c", "m"],
            &["send", "--detach", "--detach", "3f9c", "m"],
            &["--json", "send", "3f9c", "m"],
            &["session", "--json", "list"],
            &["session", "list", "extra"],
            &["session", "list", "--detach"],
            &["session", "list", "--all", "--all"],
            &["task", "list", "--all"],
            &["session", "show", "3f9c"],
            &["session", "new"],
            &["task", "list", "--session"],
            &["task", "list", "--session", "-x"],
            &["task", "list", "--session", "a", "--session", "b"],
            &["task", "cancel", "3f9c"],
            &["agent", "list", "--session", "a"],
            &["agent", "add", "x"],
            &["--home"],
            &["--home", "", "session", "list"],
            &["--home", "/a", "--home", "/b", "session", "list"],
            &["--home=", "session", "list"],
            &["sessions", "list"],
            &["session", "lis"],
        ] {
            assert_eq!(parse_line(line), None, "{line:?}");
        }
        let not_utf8 = [
            OsString::from("berth"),
            OsString::from("send"),
            OsString::from("3f9c"),
            std::os::unix::ffi::OsStringExt::from_vec(vec![0xff, 0xfe]),
        ];
        assert_eq!(parse(&not_utf8), None);
    }
}
