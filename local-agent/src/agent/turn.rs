//! One agent process, from spawn to exit: its output lines parsed into events as they
//! come, cancellation (the whole group, terminate then kill), and the turn's result.

use crate::agent::adapter::{Adapter, TurnState};
use crate::agent::process::AgentProcess;
use crate::dir::lock::cancelled;
use berth_core::event::AgentEvent;
use berth_core::exec::ExecEvent;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::{mpsc, watch};

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

pub(crate) async fn stream(
    adapter: Adapter,
    mut proc: AgentProcess,
    resumed: bool,
    events: &mpsc::UnboundedSender<ExecEvent>,
    cancel: &mut watch::Receiver<bool>,
    grace: std::time::Duration,
    fenced: bool,
) -> Ran {
    let mut st = TurnState::default();
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
            line = async { lossy(out.as_mut()?.next_segment().await) }, if out.is_some() => {
                match line {
                    Some(line) => {
                        for ev in adapter.stdout_line(&line, resumed, &mut st) {
                            if let AgentEvent::Result { usage: Some(u), .. } = &ev {
                                st.usage = Some(u.clone());
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
    // Kills what is left in the group and waits it out before the directory is cleaned.
    proc.release().await;
    Ran {
        state: st,
        exit_code: exit.flatten(),
        cancelled: was_cancelled,
    }
}
