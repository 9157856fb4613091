//! Requests a run puts to a person (the `ask` policy): a rule of the session answers
//! at once, a person through [`Scheduler::answer`], and the deadline otherwise. Each is
//! decided once in the store, then handed to the run that waits on it.

use super::{Inner, Scheduler};
use crate::clock;
use crate::executor::Executor;
use crate::store::{StoreError, TaskRow};
use berth_core::approval::{
    Answer, Approval, ApprovalRequest, DecidedBy, Decision, Rule, SessionRule, Verdict,
};
use berth_core::{ErrorCode, SessionId, TaskId};
use std::sync::Arc;

/// A request as it arrives at the server: its deadline counted from now, on this
/// server's clock (a daemon's may differ).
pub(crate) fn arrived(task: &TaskId, session: &SessionId, req: ApprovalRequest) -> Approval {
    let now = clock::now_millis();
    let wait = i64::try_from(req.deadline_secs.saturating_mul(1000)).unwrap_or(i64::MAX);
    Approval {
        id: req.id,
        task_id: task.clone(),
        session_id: session.clone(),
        kind: req.kind,
        title: req.title,
        command: req.command,
        paths: req.paths,
        input: req.input,
        options: req.options,
        asked_at: clock::format_millis(now),
        deadline: clock::format_millis(now.saturating_add(wait)),
        decision: None,
    }
}

/// A person's answer, as a surface hands it in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HumanAnswer {
    pub verdict: Verdict,
    /// Allow this and what a session rule made from it matches, from now on.
    pub always: bool,
    pub reason: Option<String>,
    /// The member who answered (`None` on `berth serve`: its one user).
    pub who: Option<String>,
    /// `cli`, `chat`, `api`, `web`…
    pub via: String,
}

fn decision(verdict: Verdict, by: DecidedBy, reason: Option<String>) -> Decision {
    Decision {
        decision: verdict,
        by,
        who: None,
        via: None,
        at: clock::now(),
        reason,
        always: false,
    }
}

/// What the run is told of a decision: a person's deny without a reason is said to
/// be a person's, so the model does not take it for a failure to retry.
fn answer_of(d: &Decision) -> Answer {
    let reason = d.reason.clone().or_else(|| {
        (d.decision == Verdict::Deny && d.by == DecidedBy::Human).then(|| {
            format!(
                "denied by {} (a person said no to this request)",
                d.who.as_deref().unwrap_or("the user")
            )
        })
    });
    Answer {
        verdict: d.decision,
        by: d.by,
        reason,
        always: d.always,
    }
}

/// The session's rule that covers `a`, if one does.
fn covering<'r>(rules: &'r [SessionRule], a: &Approval) -> Option<&'r SessionRule> {
    rules
        .iter()
        .find(|r| Rule::parse(&r.rule).is_ok_and(|rule| rule.matches(a.subject())))
}

/// A request just recorded: answered at once by a rule of its session, else left to
/// a person until its deadline, when it is denied as timed out.
pub(super) async fn pending(inner: &Arc<Inner>, executor: &Arc<dyn Executor>, a: &Approval) {
    match inner.store.session_rules(&a.session_id).await {
        Ok(rules) => {
            if let Some(r) = covering(&rules, a) {
                let mut d = decision(Verdict::Allow, DecidedBy::Rule, None);
                d.via = Some(format!("session rule {}: {}", r.n, r.rule));
                if let Err(e) = decide(inner, a.id.clone(), None, d).await {
                    tracing::warn!(approval = %a.id, error = %e, "a session rule could not answer");
                }
                return;
            }
        }
        Err(e) => {
            tracing::warn!(task = %a.task_id, error = %e, "could not read the session's rules")
        }
    }
    for o in inner.observers() {
        o.approval_asked(a);
    }
    let deadline = clock::parse_millis(&a.deadline).unwrap_or(0);
    let asked = clock::parse_millis(&a.asked_at).unwrap_or(0);
    let secs = u64::try_from((deadline - asked) / 1000).unwrap_or(0);
    let wait = u64::try_from(deadline - clock::now_millis()).unwrap_or(0);
    let (inner, id) = (inner.clone(), a.id.clone());
    let executor = executor.clone();
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
        let timed_out = Answer::timed_out(secs);
        let d = decision(Verdict::Deny, DecidedBy::Timeout, timed_out.reason);
        match decide(&inner, id.clone(), None, d).await {
            Ok(_) => {}
            // Answered meanwhile, or its task is gone: nothing to time out.
            Err(StoreError::Approval { .. } | StoreError::UnknownTask { .. }) => {}
            Err(e) => {
                tracing::error!(approval = %id, error = %e, "could not record a timeout");
                // The run must not wait for ever: it hears the timeout all the same.
                if let Ok(task) = crate::store::approval_task(&id) {
                    executor.answer(&task, &id, Answer::timed_out(secs));
                }
            }
        }
    });
}

/// Decides request `id` in the store (exactly once) and hands the decision to the run
/// that waits on it.
async fn decide(
    inner: &Arc<Inner>,
    id: String,
    owner: Option<berth_core::Member>,
    d: Decision,
) -> Result<(Approval, TaskRow), StoreError> {
    let (a, task) = inner.store.decide_approval(id, owner, d).await?;
    if let Some(d) = &a.decision {
        if let Some(m) = inner.metrics.get() {
            m.approval_decided(d);
        }
        {
            let running = inner.running.lock().await;
            if let Some(executor) = running.get(&task.id).and_then(|r| r.executor.as_ref()) {
                executor.answer(&task.id, &a.id, answer_of(d));
            }
        }
        for o in inner.observers() {
            o.approval_decided(&a);
        }
    }
    Ok((a, task))
}

/// Requests of a run that ended while they waited: decided as cancelled, so none is
/// listed as waiting for an answer nobody can give any more.
pub(super) async fn settle_left(inner: &Arc<Inner>, task: &TaskId) {
    let Ok(row) = inner.store.task(task).await else {
        return;
    };
    for a in row.approvals.iter().filter(|a| a.decision.is_none()) {
        let d = decision(
            Verdict::Deny,
            DecidedBy::Cancel,
            Some("the task ended while this request waited".to_owned()),
        );
        if let Err(e) = inner.store.decide_approval(a.id.clone(), None, d).await {
            tracing::warn!(approval = %a.id, error = %e, "could not close a request");
        }
    }
}

impl Scheduler {
    /// A person's answer to request `id` (its full id), from a session of `owner`
    /// (any with `None`). Decided once: a second answer is `already_decided`, one after
    /// the deadline `expired`. With `always`, the session keeps a rule made of the
    /// request (its kind and whole command, or its one path), and refuses to make one
    /// wider: `no_exact_rule` for a compound command.
    pub async fn answer(
        &self,
        id: &str,
        owner: Option<berth_core::Member>,
        human: HumanAnswer,
    ) -> Result<Approval, StoreError> {
        let rule = if human.always && human.verdict == Verdict::Allow {
            let a = self
                .inner
                .store
                .approval(id.to_owned(), owner.clone())
                .await?;
            match Rule::always_for(a.subject()) {
                Some(rule) => Some(rule),
                None => {
                    return Err(StoreError::Approval {
                        code: ErrorCode::NoExactRule,
                        message: format!(
                            "\"always\" would need a rule for {:?}, and no exact one can be made of it (a compound command, or several paths): it would allow more than you saw",
                            a.command.as_deref().unwrap_or(&a.title)
                        ),
                    });
                }
            }
        } else {
            None
        };
        // Kept as the person gave it (or none): the words the agent hears without
        // one are made when it is told (`answer_of`).
        let reason = human.reason.clone();
        let d = Decision {
            decision: human.verdict,
            by: DecidedBy::Human,
            who: human.who.clone(),
            via: Some(human.via.clone()),
            at: clock::now(),
            reason,
            always: rule.is_some(),
        };
        let (a, task) = decide(&self.inner, id.to_owned(), owner, d).await?;
        if let Some(rule) = rule {
            self.inner
                .store
                .add_session_rule(&task.session_id, rule.to_string(), Some(a.id.clone()))
                .await?;
        }
        Ok(a)
    }
}
