//! One agent process, from spawn to exit: its output lines parsed into events as they
//! come, cancellation (the whole group, terminate then kill), and the turn's result.

use crate::agent::adapter::claude;
use crate::agent::adapter::{Adapter, TurnState};
use crate::agent::process::{AgentProcess, Input};
use crate::dir::lock::cancelled;
use berth_core::approval::{Judgement, Verdict};
use berth_core::event::AgentEvent;
use berth_core::exec::ExecEvent;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, watch};

/// Writes a line to the agent's stdin, if it is still open (a write that fails means
/// the agent is gone: its exit says so).
async fn write(input: &mut Option<Input>, line: &[u8]) {
    if let Some(stdin) = input.as_mut() {
        let _ = stdin.write_all(line).await;
        let _ = stdin.flush().await;
    }
}

/// Tells Claude Code a decision; a denial is recorded with who made it.
async fn answered(
    input: &mut Option<Input>,
    req: &claude::CanUseTool,
    answer: &berth_core::approval::Answer,
    st: &mut TurnState,
    events: &mpsc::UnboundedSender<ExecEvent>,
) {
    match answer.verdict {
        Verdict::Allow => write(input, &req.answer(true, "")).await,
        Verdict::Deny => {
            let why = answer.reason.clone().unwrap_or_else(|| "denied".to_owned());
            write(input, &req.answer(false, &why)).await;
            let denial = req.denial(answer.by.as_str());
            if let Some(ev) = st.deny(req.tool_use_id.as_deref(), denial, Some(why)) {
                let _ = events.send(ExecEvent::Agent(ev));
            }
        }
    }
}

/// What one agent process did.
pub(crate) struct Ran {
    pub state: TurnState,
    pub exit_code: Option<i32>,
    pub cancelled: bool,
}

fn lossy(segment: std::io::Result<Option<Vec<u8>>>) -> Option<String> {
    let bytes = segment.ok().flatten()?;
    let text = String::from_utf8_lossy(&bytes);
    Some(text.strip_suffix('\r').unwrap_or(&text).to_owned())
}

/// Claude Code under `ask`: who puts its permission prompts to a person, the prompt
/// (sent as the first stdin line) and the run's directory (what is inside it).
#[derive(Clone, Copy)]
pub(crate) struct Asking<'a> {
    pub asker: &'a crate::agent::ask::Asker,
    pub prompt: &'a str,
    pub work_dir: &'a std::path::Path,
}

/// A permission prompt of Claude Code's, decided.
type Decided = (claude::CanUseTool, berth_core::approval::Answer);

#[allow(clippy::too_many_arguments)]
pub(crate) async fn stream(
    adapter: Adapter,
    mut proc: AgentProcess,
    resumed: bool,
    events: &mpsc::UnboundedSender<ExecEvent>,
    cancel: &mut watch::Receiver<bool>,
    grace: std::time::Duration,
    fenced: bool,
    asking: Option<Asking<'_>>,
) -> Ran {
    let mut st = TurnState::default();
    // Under `ask`, Claude Code's stdin stays open: the prompt, then Berth's answers to
    // its permission prompts, closed after the turn's result.
    let mut input = match (asking, proc.stdin.take()) {
        (Some(a), Some(mut stdin)) => {
            let _ = stdin.write_all(&claude::user_line(a.prompt)).await;
            let _ = stdin.flush().await;
            Some(stdin)
        }
        _ => None,
    };
    let (held_tx, mut held_rx) = mpsc::unbounded_channel::<Decided>();
    let mut held: Vec<tokio::task::JoinHandle<()>> = Vec::new();
    let mut holding = 0usize;
    // Split on bytes, not UTF-8 lines: one bad byte must not stop the reading (the
    // agent would then block on a full pipe).
    let mut out = proc.stdout.take().map(|s| BufReader::new(s).split(b'\n'));
    let mut err = proc.stderr.take().map(|s| BufReader::new(s).split(b'\n'));
    let mut exit: Option<Option<i32>> = None;
    let mut was_cancelled = false;
    loop {
        if out.is_none() && err.is_none() && exit.is_some() {
            break;
        }
        tokio::select! {
            Some((req, answer)) = held_rx.recv(), if holding > 0 => {
                holding -= 1;
                answered(&mut input, &req, &answer, &mut st, events).await;
            }
            line = async { lossy(out.as_mut()?.next_segment().await) }, if out.is_some() => {
                match line {
                    Some(line) => {
                        if let (Some(a), Some(req)) = (asking, claude::can_use_tool(&line)) {
                            let ask = req.ask();
                            let inside = |p: &str| crate::agent::ask::inside(a.work_dir, p);
                            match a.asker.judge(ask.subject(), inside) {
                                Judgement::Allow { .. } => {
                                    write(&mut input, &req.answer(true, "")).await;
                                }
                                Judgement::Deny { rule } => {
                                    let answer = berth_core::approval::Answer {
                                        verdict: berth_core::approval::Verdict::Deny,
                                        by: berth_core::approval::DecidedBy::Rule,
                                        reason: Some(format!("refused by the user's ask rule \"{rule}\"")),
                                        always: false,
                                    };
                                    answered(&mut input, &req, &answer, &mut st, events).await;
                                }
                                Judgement::Ask => {
                                    let (_, answer) = a.asker.ask(ask);
                                    let tx = held_tx.clone();
                                    holding += 1;
                                    held.push(tokio::spawn(async move {
                                        let _ = tx.send((req, answer.await));
                                    }));
                                }
                            }
                            continue;
                        }
                        if asking.is_some() && claude::is_result(&line) {
                            // The turn is over: closing stdin lets Claude Code exit.
                            input = None;
                        }
                        for ev in adapter.stdout_line(&line, resumed, &mut st) {
                            if let AgentEvent::Result { usage: Some(u), cost_usd, .. } = &ev {
                                st.usage = adapter.kind().usage(u, *cost_usd);
                            }
                            // Fenced, a tool's result that names a refusal is the
                            // fence's denial, reported after it.
                            let denied = if fenced { st.fence_event(&ev) } else { None };
                            let _ = events.send(ExecEvent::Agent(ev));
                            if let Some(d) = denied {
                                let _ = events.send(ExecEvent::Agent(d));
                            }
                        }
                    }
                    None => out = None,
                }
            }
            line = async { lossy(err.as_mut()?.next_segment().await) }, if err.is_some() => {
                match line {
                    Some(line) => {
                        let mut extra = adapter.stderr_line(&line, resumed, &mut st);
                        if extra.is_none() && fenced && adapter == Adapter::Command {
                            extra = st.fence_stderr(&line);
                        }
                        let _ = events.send(ExecEvent::Agent(AgentEvent::Stderr { line }));
                        if let Some(ev) = extra {
                            let _ = events.send(ExecEvent::Agent(ev));
                        }
                    }
                    None => err = None,
                }
            }
            status = proc.wait(), if exit.is_none() => {
                exit = Some(status.ok().flatten());
                // Whatever the agent left running in its group goes with it; output
                // already in the pipes is still read.
                if let Some(pgid) = proc.pgid().and_then(rustix::process::Pid::from_raw) {
                    let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
                }
            }
            () = cancelled(cancel), if !was_cancelled && exit.is_none() => {
                was_cancelled = true;
                exit = Some(proc.terminate(grace).await.ok().flatten());
            }
        }
    }
    if st.fence_denials_dropped > 0 {
        let _ = events.send(ExecEvent::Agent(AgentEvent::Stderr {
            line: format!(
                "berth: the fence refused {} more actions, not listed (the first {} are)",
                st.fence_denials_dropped,
                crate::agent::adapter::MAX_FENCE_DENIALS
            ),
        }));
    }
    for wait in held {
        wait.abort();
    }
    drop(input);
    // Kills what is left in the group and waits it out before the directory is cleaned.
    proc.release().await;
    Ran {
        state: st,
        exit_code: exit.flatten(),
        cancelled: was_cancelled,
    }
}
