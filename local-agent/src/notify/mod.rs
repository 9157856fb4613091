//! Notifications of `berth serve` (issue 55): a desktop notification when a request
//! waits for you or a long task ends, and signed webhooks for `approval_requested`,
//! `task_finished` and `task_failed`.
//!
//! [`Notifier`] is a [`TaskObserver`] on the scheduler. It is called on the scheduler's
//! task, so it only shapes the [`Event`] and hands it to a queue: the desktop's
//! ([`desktop`]) and the webhook's ([`webhook`]), each drained by a task of its own.
//! Nothing it does waits on the network or the bus, and a receiver that is down never
//! delays a task.
//!
//! Its settings are the user layer's `notify` alone (a project layer's is dropped by
//! the trust gate), read when `berth serve` starts. What leaves the machine is the
//! privacy-stripped display only ([`event`]).

mod desktop;
mod event;
mod webhook;

pub use event::{Event, EventKind};
pub use webhook::Schedule;

use berth_core::Context;
use berth_core::approval::Approval;
use berth_core::settings::notify::Notify;
use berth_web::hooks::Secret;
use berth_web::net::HttpClient;
use berth_web::scheduler::TaskObserver;
use berth_web::store::TaskRow;
use std::sync::Arc;
use std::time::Duration;

/// Sends each event where the settings say; attached to the scheduler by `berth serve`.
#[derive(Debug)]
pub struct Notifier {
    desktop: Option<desktop::Desktop>,
    webhook: Option<webhook::Sender>,
    /// A finished task shows on the desktop when it ran at least this long.
    long_task: Duration,
    /// Whose home and name nothing sent may show.
    ctx: Arc<Context>,
}

/// What [`Notifier::start`] made of the settings.
#[derive(Debug)]
pub struct Started {
    /// `None` when nothing is on (no desktop, no webhook).
    pub notifier: Option<Notifier>,
    /// For the user, at start: a webhook left off, and why.
    pub warnings: Vec<String>,
    /// The webhook's receiver (scheme and host), when it is on.
    pub webhook: Option<String>,
}

impl Notifier {
    /// Starts what `notify` turns on, on the current tokio runtime: the desktop's task
    /// (unless there is no desktop to reach) and the webhook's, with its secret from
    /// `env` (`berth serve`'s environment). A webhook whose secret is missing stays
    /// off, with a warning: Berth never sends one unsigned.
    pub fn start(
        notify: &Notify,
        http: HttpClient,
        ctx: Context,
        env: impl Fn(&str) -> Option<String>,
        schedule: Schedule,
    ) -> Started {
        let mut warnings = Vec::new();
        let mut shown = None;
        let webhook = notify.webhook.as_ref().and_then(|hook| {
            match env(&hook.secret_env).filter(|s| !s.is_empty()) {
                Some(secret) => {
                    let target = webhook::Target::new(&hook.url, Secret::new(secret));
                    shown = Some(target.shown().to_owned());
                    Some(webhook::Sender::start(target, http, schedule))
                }
                None => {
                    warnings.push(format!(
                        "notify.webhook is off: the environment variable {} (its \"secret_env\") is not set or empty, and Berth never sends a webhook unsigned; set it where berth serve starts",
                        hook.secret_env
                    ));
                    None
                }
            }
        });
        let desktop = desktop::Desktop::start(notify.desktop);
        let notifier = (desktop.is_some() || webhook.is_some()).then(|| Notifier {
            desktop,
            webhook,
            long_task: Duration::from_secs(notify.long_task_secs),
            ctx: Arc::new(ctx),
        });
        Started {
            notifier,
            warnings,
            webhook: shown,
        }
    }

    /// Hands `event` to the webhook, and to the desktop when `desktop` says so.
    fn send(&self, event: &Event, desktop: Option<desktop::Message>) {
        if let (Some(d), Some(message)) = (&self.desktop, desktop) {
            d.show(message);
        }
        if let Some(w) = &self.webhook {
            w.send(webhook::Delivery {
                event: event.kind.as_str(),
                id: event.id.clone(),
                body: event.body(&self.ctx).to_string().into(),
            });
        }
    }
}

impl TaskObserver for Notifier {
    fn task_finished(&self, task: &TaskRow) {
        let Some(event) = Event::of_task(task, &self.ctx) else {
            return;
        };
        let long = event.task.duration.is_some_and(|d| d >= self.long_task);
        self.send(&event, long.then(|| desktop_message(&event)));
    }

    fn approval_asked(&self, approval: &Approval) {
        let event = Event::of_approval(approval, &self.ctx);
        self.send(&event, Some(desktop_message(&event)));
    }
}

/// What the desktop shows of `event`: what happened in the summary; the command
/// asked for (stripped, cut), or where the task ran, and what to do, in the body.
fn desktop_message(event: &Event) -> desktop::Message {
    let session = event::short(event.session.as_str());
    match (&event.approval, event.kind) {
        (Some(a), _) => {
            let mut body = String::new();
            if let Some(command) = event.command() {
                body.push_str(command);
                body.push('\n');
            }
            body.push_str(&format!("berth approve {} · session {session}", a.short_id));
            desktop::Message {
                summary: format!("Berth: the agent asks to {}", a.kind),
                body,
            }
        }
        (None, kind) => {
            let ran = event.task.duration.map(event::human).unwrap_or_default();
            let summary = match kind {
                EventKind::TaskFailed => match &event.task.error_code {
                    Some(code) => format!("Berth: a task failed ({code}) after {ran}"),
                    None => format!("Berth: a task failed after {ran}"),
                },
                EventKind::TaskFinished | EventKind::ApprovalRequested => {
                    format!("Berth: a task finished after {ran}")
                }
            };
            let place = event.task.dir.as_deref().unwrap_or("scratch");
            desktop::Message {
                summary,
                body: format!("{place} · session {session}"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_core::settings::notify::Webhook;

    fn http() -> HttpClient {
        HttpClient::new(&Default::default()).unwrap()
    }

    /// A webhook without its secret is off, said once at start; with everything off
    /// there is no observer at all.
    #[tokio::test]
    async fn a_webhook_without_its_secret_is_off_and_said_so() {
        let notify = Notify {
            desktop: false,
            webhook: Some(Webhook {
                url: "https://ntfy.example/berth/TOKEN".into(),
                secret_env: "HOOK_SECRET".into(),
            }),
            ..Notify::default()
        };
        let ctx = || Context::new(berth_core::Platform::Linux);
        let off = Notifier::start(&notify, http(), ctx(), |_| None, Schedule::default());
        assert!(off.notifier.is_none() && off.webhook.is_none());
        assert_eq!(
            off.warnings,
            [
                "notify.webhook is off: the environment variable HOOK_SECRET (its \"secret_env\") is not set or empty, and Berth never sends a webhook unsigned; set it where berth serve starts"
            ]
        );
        let empty = Notifier::start(
            &notify,
            http(),
            ctx(),
            |_| Some(String::new()),
            Schedule::default(),
        );
        assert!(empty.notifier.is_none() && empty.warnings.len() == 1);
        let on = Notifier::start(
            &notify,
            http(),
            ctx(),
            |name| (name == "HOOK_SECRET").then(|| "s".to_owned()),
            Schedule::default(),
        );
        assert!(on.notifier.is_some() && on.warnings.is_empty());
        assert_eq!(on.webhook.as_deref(), Some("https://ntfy.example"));
    }

    #[test]
    fn desktop_messages_say_what_happened_and_what_to_do() {
        let event = Event {
            id: "e".into(),
            kind: EventKind::TaskFailed,
            at: "t".into(),
            session: berth_core::SessionId::parse("3f9c0a12-0000-4000-8000-000000000001").unwrap(),
            task: event::TaskFacts {
                id: berth_core::TaskId::parse("1a2b3c4d-0000-4000-8000-000000000002").unwrap(),
                status: berth_core::api::TaskStatus::Failed,
                error_code: Some("agent_failed".into()),
                duration: Some(Duration::from_secs(75)),
                dir: Some("~/code/app".into()),
            },
            approval: None,
        };
        assert_eq!(
            desktop_message(&event),
            desktop::Message {
                summary: "Berth: a task failed (agent_failed) after 1 min 15 s".into(),
                body: "~/code/app · session 3f9c0a12".into(),
            }
        );
        let asked = Event {
            kind: EventKind::ApprovalRequested,
            approval: Some(event::ApprovalFacts {
                id: "1a2b3c4d-0000-4000-8000-000000000002-1".into(),
                short_id: "1a2b3c4d-1".into(),
                kind: "execute".into(),
                deadline: "d".into(),
                command: Some("sh ./check.sh".into()),
            }),
            ..event
        };
        assert_eq!(
            desktop_message(&asked),
            desktop::Message {
                summary: "Berth: the agent asks to execute".into(),
                body: "sh ./check.sh\nberth approve 1a2b3c4d-1 · session 3f9c0a12".into(),
            }
        );
    }
}
