//! Requests put to a person, from the run's side (the `ask` policy).
//!
//! A run's [`Asker`] judges each request by the user's `ask` rules first (a deny
//! wins; reads and edits inside the directory go ahead); what is left is sent to the
//! server as an [`ExecEvent::Approval`] and waited for. The server decides it (a rule
//! of the session, a person, the deadline) and hands the decision back through the
//! executor's `answer`, which finds the waiting run in [`Waiting`].
//!
//! The run never waits past the deadline it announced (and a short grace for the
//! server's own word): a wait over its limit is a denial said as a timeout, never an
//! allow.

use berth_core::TaskId;
use berth_core::approval::{
    Answer, ApprovalOption, ApprovalRequest, AskRules, DEFAULT_DEADLINE_SECS, Judgement, Subject,
};
use berth_core::exec::ExecEvent;
use std::collections::HashMap;
use std::future::Future;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// How long past its deadline a run still waits for the server's timeout (which
/// records it) before it tells the agent itself.
const GRACE: Duration = Duration::from_secs(5);

/// The runs waiting for an answer, by request id: shared by the executor (which
/// hands decisions in) and every run.
#[derive(Debug, Clone, Default)]
pub struct Waiting(Arc<Mutex<HashMap<String, oneshot::Sender<Answer>>>>);

impl Waiting {
    /// Hands `answer` to the run waiting on `id`; `false` if none waits on it.
    pub fn answer(&self, id: &str, answer: Answer) -> bool {
        let waiter = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(id);
        waiter.is_some_and(|tx| tx.send(answer).is_ok())
    }

    fn insert(&self, id: String, tx: oneshot::Sender<Answer>) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, tx);
    }

    fn forget(&self, id: &str) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(id);
    }
}

/// What an agent asks, before it has an id.
#[derive(Debug, Clone)]
pub struct Ask {
    pub kind: String,
    pub title: String,
    pub command: Option<String>,
    pub paths: Vec<String>,
    pub input: serde_json::Value,
    pub options: Vec<ApprovalOption>,
}

impl Ask {
    pub fn subject(&self) -> Subject<'_> {
        Subject {
            kind: &self.kind,
            command: self.command.as_deref(),
            paths: &self.paths,
        }
    }
}

/// Whether `path` names something inside `dir` (lexically: absolute, no `..`). A
/// relative path is taken as relative to `dir`.
pub fn inside(dir: &Path, path: &str) -> bool {
    let p = Path::new(path);
    let p = if p.is_absolute() {
        p.to_path_buf()
    } else {
        dir.join(p)
    };
    !p.components()
        .any(|c| matches!(c, std::path::Component::ParentDir))
        && p.starts_with(dir)
}

/// One run's asking: its task (the requests' ids), the user's rules and deadline.
#[derive(Debug)]
pub struct Asker {
    task: TaskId,
    rules: AskRules,
    waiting: Waiting,
    events: mpsc::UnboundedSender<ExecEvent>,
    next: AtomicU32,
}

impl Asker {
    pub fn new(
        task: TaskId,
        rules: AskRules,
        waiting: Waiting,
        events: mpsc::UnboundedSender<ExecEvent>,
    ) -> Asker {
        Asker {
            task,
            rules,
            waiting,
            events,
            next: AtomicU32::new(1),
        }
    }

    /// What the rules and the policy make of a request before a person is asked.
    pub fn judge(&self, s: Subject<'_>, inside: impl Fn(&str) -> bool) -> Judgement {
        berth_core::approval::judge(&self.rules, s, inside)
    }

    /// The user's `ask` rules.
    pub fn rules(&self) -> &AskRules {
        &self.rules
    }

    /// Seconds a request waits for a person.
    pub fn deadline_secs(&self) -> u64 {
        self.rules.deadline_secs.unwrap_or(DEFAULT_DEADLINE_SECS)
    }

    /// Puts `ask` to a person: sends it to the server and returns its id and the
    /// answer to come. The future owns what it needs (it may outlive a borrow of the
    /// run): a decision from the server, else, past the deadline and its grace, a
    /// timeout; a closed channel (the executor gone) is a cancel.
    pub fn ask(&self, ask: Ask) -> (String, impl Future<Output = Answer> + Send + 'static) {
        let n = self.next.fetch_add(1, Ordering::SeqCst);
        let id = format!("{}-{n}", self.task);
        let secs = self.deadline_secs();
        let (tx, rx) = oneshot::channel();
        // Registered before it is sent: an answer given the instant it is listed finds
        // its run.
        self.waiting.insert(id.clone(), tx);
        let _ = self.events.send(ExecEvent::Approval(ApprovalRequest {
            id: id.clone(),
            kind: ask.kind,
            title: ask.title,
            command: ask.command,
            paths: ask.paths,
            input: ask.input,
            options: ask.options,
            deadline_secs: secs,
        }));
        let waiting = self.waiting.clone();
        let key = id.clone();
        let answer = async move {
            let limit = Duration::from_secs(secs) + GRACE;
            match tokio::time::timeout(limit, rx).await {
                Ok(Ok(answer)) => answer,
                Ok(Err(_)) => Answer::cancelled(),
                Err(_) => {
                    waiting.forget(&key);
                    Answer::timed_out(secs)
                }
            }
        };
        (id, answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_core::approval::{DecidedBy, Verdict};

    fn asker(secs: u64) -> (Asker, mpsc::UnboundedReceiver<ExecEvent>, Waiting) {
        let (tx, rx) = mpsc::unbounded_channel();
        let waiting = Waiting::default();
        let rules = AskRules {
            deadline_secs: Some(secs),
            ..AskRules::default()
        };
        let task = TaskId::parse("t1").unwrap();
        (Asker::new(task, rules, waiting.clone(), tx), rx, waiting)
    }

    fn ask() -> Ask {
        Ask {
            kind: "execute".into(),
            title: "Run check".into(),
            command: Some("sh ./check.sh".into()),
            paths: vec![],
            input: serde_json::json!({"command": "sh ./check.sh"}),
            options: vec![],
        }
    }

    #[tokio::test]
    async fn an_answer_reaches_the_run_that_asked_and_ids_count_up() {
        let (asker, mut rx, waiting) = asker(600);
        let (id, answer) = asker.ask(ask());
        assert_eq!(id, "t1-1");
        let Some(ExecEvent::Approval(req)) = rx.recv().await else {
            panic!("the request must be sent");
        };
        assert_eq!((req.id.as_str(), req.deadline_secs), ("t1-1", 600));
        assert!(waiting.answer(
            &id,
            Answer {
                verdict: Verdict::Allow,
                by: DecidedBy::Human,
                reason: None,
                always: false
            }
        ));
        assert_eq!(answer.await.verdict, Verdict::Allow);
        assert!(!waiting.answer(&id, Answer::cancelled()), "answered once");
        assert_eq!(asker.ask(ask()).0, "t1-2");
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_over_its_limit_is_a_timeout_never_an_allow() {
        let (asker, _rx, waiting) = asker(30);
        let (id, answer) = asker.ask(ask());
        let got = answer.await;
        assert_eq!((got.verdict, got.by), (Verdict::Deny, DecidedBy::Timeout));
        assert!(!waiting.answer(&id, Answer::cancelled()), "forgotten");
    }
}
