//! Answers posted back: when a channel session's task ends, its final answer goes to
//! the conversation it came from (Slack `chat.postMessage` in the thread; Lark
//! `im/v1/messages` to the chat, with a tenant access token).

use super::Thread;
use super::out::{OutError, Outbound};
use crate::scheduler::TaskObserver;
use crate::store::TaskRow;
use berth_core::SessionId;
use berth_core::api::TaskStatus;
use berth_core::event::AgentEvent;
use serde_json::json;
use std::sync::Arc;

/// The longest answer posted, in characters (Slack cuts messages at 40,000).
const MAX_ANSWER_CHARS: usize = 30_000;

/// The agent's final answer of a task, from its transcript events in order: the last
/// `result` text if the agent reported one, otherwise the text it wrote after its
/// last tool call (a `command` agent's stdout lines, joined).
pub fn final_answer(events: &[AgentEvent]) -> Option<String> {
    let result = events.iter().rev().find_map(|e| {
        if let AgentEvent::Result { text: Some(t), .. } = e
            && !t.trim().is_empty()
        {
            Some(t.clone())
        } else {
            None
        }
    });
    if result.is_some() {
        return result;
    }
    let after_tools = events
        .iter()
        .rposition(|e| {
            matches!(
                e,
                AgentEvent::ToolUse { .. } | AgentEvent::ToolResult { .. }
            )
        })
        .map_or(0, |i| i + 1);
    let lines: Vec<&str> = events[after_tools..]
        .iter()
        .filter_map(|e| {
            if let AgentEvent::Text { text } = e {
                Some(text.as_str())
            } else {
                None
            }
        })
        .collect();
    let text = lines.join("\n");
    (!text.trim().is_empty()).then_some(text)
}

/// What is posted for a finished task: the answer, or what went wrong.
fn reply_text(task: &TaskRow, answer: Option<String>) -> String {
    let text = match (task.status == TaskStatus::Succeeded, answer) {
        (true, Some(a)) => a,
        (true, None) => "(the agent finished without an answer)".to_owned(),
        (false, answer) => {
            let why = task.error.as_deref().unwrap_or("no reason was given");
            let head = format!("The task ended {}: {why}", task.status.as_str());
            match answer {
                Some(a) => format!("{a}\n\n{head}"),
                None => head,
            }
        }
    };
    if text.chars().count() > MAX_ANSWER_CHARS {
        let mut cut: String = text.chars().take(MAX_ANSWER_CHARS).collect();
        cut.push_str("\n… (cut; the whole answer is in Berth's transcript)");
        cut
    } else {
        text
    }
}

/// Posts channel sessions' answers back; attached to the scheduler as a
/// [`TaskObserver`]. Holds no scheduler handle, so it keeps nothing alive.
#[derive(Debug, Clone)]
pub struct Replier {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    out: Arc<Outbound>,
    /// Sessions known to answer to no channel. A session is a channel session from its
    /// creation (`Store::channel_intake` makes both at once) or never, so one look in
    /// the store per session is enough: a task of a session seen here ends with no
    /// read and no task spawned (that look, at each task's end, overlapped the next
    /// message's dispatch).
    plain: std::sync::Mutex<std::collections::HashSet<SessionId>>,
}

/// How many sessions [`Inner::plain`] remembers; past that it starts over.
const PLAIN_SESSIONS: usize = 4096;

impl Replier {
    /// Answers go out through `out`.
    pub fn new(out: Arc<Outbound>) -> Replier {
        Replier {
            inner: Arc::new(Inner {
                out,
                plain: std::sync::Mutex::new(std::collections::HashSet::new()),
            }),
        }
    }

    fn plain(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<SessionId>> {
        self.inner
            .plain
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Posts the answer of `task` if its session is a channel session.
    async fn reply(&self, task: TaskRow) -> Result<(), OutError> {
        let store = &self.inner.out.store;
        let Some(stored) = store.channel_thread(task.session_id.clone()).await? else {
            let mut plain = self.plain();
            if plain.len() >= PLAIN_SESSIONS {
                plain.clear();
            }
            plain.insert(task.session_id.clone());
            return Ok(());
        };
        let Some(thread) = Thread::from_key(&stored.platform, &stored.thread_key) else {
            tracing::warn!(platform = %stored.platform, "a channel session of an unknown platform");
            return Ok(());
        };
        let events: Vec<AgentEvent> = store
            .task_agent_events(task.clone())
            .await?
            .into_iter()
            .filter_map(|v| serde_json::from_value(v).ok())
            .collect();
        let text = reply_text(&task, final_answer(&events));
        let text = berth_core::display::redact_text(&self.inner.out.display, &text).into_owned();
        match thread {
            Thread::Slack { channel, thread_ts } => {
                self.post_slack(&channel, &thread_ts, &text).await
            }
            Thread::Lark { chat_id } => self.post_lark(&chat_id, &text).await,
        }
    }

    async fn post_slack(&self, channel: &str, thread_ts: &str, text: &str) -> Result<(), OutError> {
        let body = json!({ "channel": channel, "thread_ts": thread_ts, "text": text });
        let posted = self.inner.out.slack("chat.postMessage", &body).await?;
        if posted.is_none() && self.inner.out.config.slack.is_some() {
            tracing::info!("no BERTH_SLACK_BOT_TOKEN: the answer is not posted back");
        }
        Ok(())
    }

    async fn post_lark(&self, chat_id: &str, text: &str) -> Result<(), OutError> {
        let body = json!({
            "receive_id": chat_id,
            "msg_type": "text",
            "content": json!({ "text": text }).to_string(),
        });
        let path = "im/v1/messages?receive_id_type=chat_id";
        let out = &self.inner.out;
        let posted = out
            .lark(hyper::Method::POST, "im/v1/messages", path, &body)
            .await?;
        if posted.is_none() && out.config.lark.is_some() {
            tracing::info!("no BERTH_LARK_APP_ID/SECRET: the answer is not posted back");
        }
        Ok(())
    }
}

impl TaskObserver for Replier {
    fn task_finished(&self, task: &TaskRow) {
        if self.plain().contains(&task.session_id) {
            return;
        }
        let this = self.clone();
        let task = task.clone();
        tokio::spawn(async move {
            let id = task.id.clone();
            if let Err(e) = this.reply(task).await {
                // The server's own log is its stderr: an answer lost must be seen.
                eprintln!("berth: the answer of task {id} could not be posted back: {e}");
                tracing::error!(task = %id, error = %e, "the answer could not be posted back");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::{AgentKind, AgentSpec};
    use crate::hooks::config::ChannelConfig;
    use crate::net::HttpClient;
    use crate::store::{ChannelIntake, NewChannelMessage, NewSessionRow, Store};
    use berth_core::resolve::Origin;

    /// A plain session is looked up once: its later tasks end with no read and no task
    /// spawned. A channel session is never taken for one, so each of its answers is
    /// still posted.
    #[tokio::test]
    async fn only_sessions_that_answer_to_no_channel_are_remembered() {
        let home = berth_test_support::TempDir::new("reply");
        let store = Store::open(home.path()).await.unwrap();
        store
            .add_agent(AgentSpec {
                name: "echo".into(),
                kind: AgentKind::Command,
                command: vec!["cat".into()],
                permissions: None,
            })
            .await
            .unwrap();
        let config = ChannelConfig {
            slack: None,
            lark: None,
            agent: None,
            member: None,
            asks: Default::default(),
        };
        let http = HttpClient::new(&crate::net::client::ClientOptions::from_env(None)).unwrap();
        let display = Arc::new(berth_core::Context::new(berth_core::Platform::Linux));
        let replier = Replier::new(Arc::new(Outbound::new(
            store.clone(),
            config,
            display,
            http,
        )));

        let plain = store
            .create_session(NewSessionRow {
                title: Some("plain".into()),
                agent: None,
                origin: Origin::Api,
                project: None,
                binding: None,
                owner: None,
            })
            .await
            .unwrap();
        let (task, _) = store
            .add_message(plain.id.to_string(), Origin::Api, "hi".into())
            .await
            .unwrap();
        assert!(!replier.plain().contains(&plain.id));
        replier.reply(task).await.unwrap();
        assert!(replier.plain().contains(&plain.id));

        let ChannelIntake::Queued { task, .. } = store
            .channel_intake(NewChannelMessage {
                platform: "slack",
                thread_key: "C1:1".into(),
                event_id: "ev1".into(),
                text: "hi".into(),
                agent: None,
                title: "slack C1:1".into(),
                owner: None,
                user: None,
            })
            .await
            .unwrap()
        else {
            panic!("the channel message was not queued");
        };
        let channel = task.session_id.clone();
        replier.reply(*task).await.unwrap();
        assert!(!replier.plain().contains(&channel));
        assert_eq!(replier.plain().len(), 1);
    }

    fn text(t: &str) -> AgentEvent {
        AgentEvent::Text { text: t.into() }
    }

    #[test]
    fn the_final_answer_is_the_result_or_the_text_after_the_last_tool() {
        let tool = AgentEvent::ToolUse {
            id: None,
            name: "bash".into(),
            input: serde_json::Value::Null,
        };
        let result = AgentEvent::Result {
            ok: true,
            text: Some("done".into()),
            usage: None,
            cost_usd: None,
        };
        let table: Vec<(Vec<AgentEvent>, Option<&str>)> = vec![
            (vec![], None),
            (vec![text("answer")], Some("answer")),
            (vec![text("a"), text("b")], Some("a\nb")),
            (
                vec![text("looking"), tool.clone(), text("found it")],
                Some("found it"),
            ),
            (
                vec![text("x"), tool.clone(), result, text("y")],
                Some("done"),
            ),
            (vec![text("x"), tool], None),
        ];
        for (events, want) in table {
            assert_eq!(final_answer(&events).as_deref(), want, "{events:?}");
        }
    }
}
