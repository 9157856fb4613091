//! The daemon's link to the server: the heartbeat loop and the claim loop.
//!
//! Both outlive a lost server: calls are retried with backoff while events keep
//! buffering, and a 401 registers again once ([`Daemon::reregister`]).

use super::backoff::{Backoff, LINK_BASE, LINK_CAP};
use super::remote::CallError;
use super::state::Daemon;
use std::sync::Arc;
use std::time::Duration;

/// Heartbeats until the process ends (they go on while stopping, so tasks that are
/// still reporting are not declared lost). Acts on the server's cancellations and
/// hands its decisions to the runs that wait on them.
pub(super) async fn heartbeats(d: Arc<Daemon>) {
    loop {
        tokio::time::sleep(d.heartbeat_every()).await;
        let seen = d.generation();
        let body = d.heartbeat_body();
        match d.remote.heartbeat(&body).await {
            Ok(reply) => {
                d.link_ok();
                for id in reply.cancel {
                    d.cancel(&id);
                }
                for a in reply.answers {
                    d.answer(a);
                }
            }
            Err(e) if e.is_unauthorized() => {
                if !d.is_stopping() {
                    d.reregister(seen, &e).await;
                }
            }
            Err(e) => d.link_lost(&e),
        }
    }
}

/// Claims tasks until stopping: a slot first, then a long poll (or, with `poll`, a
/// claim that answers at once, every `poll`). Each task runs in its own task.
pub(super) async fn claims(d: Arc<Daemon>, poll: Option<Duration>) {
    let mut wait = Backoff::new(LINK_BASE, LINK_CAP);
    loop {
        let permit = tokio::select! {
            p = d.permits.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => return,
            },
            () = d.stopped() => return,
        };
        let seen = d.generation();
        let hold = if poll.is_some() {
            Duration::ZERO
        } else {
            d.claim_wait()
        };
        let (seq, numbered) = d.next_claim();
        let claimed = tokio::select! {
            r = d.remote.claim(&d.instance, hold, numbered.then_some(seq)) => r,
            () = d.stopped() => return,
        };
        if !matches!(claimed, Ok(Some(_))) {
            d.claim_handled(seq);
        }
        // Registered, or the server answering again, ends a backoff early.
        let back = d.back.notified();
        tokio::pin!(back);
        back.as_mut().enable();
        let pause = match claimed {
            Ok(Some(task)) => {
                wait.reset();
                d.link_ok();
                // Tracked before the claim counts as handled: a heartbeat that counts
                // it lists the task.
                let tracked = d.track(&task.task_id);
                d.claim_handled(seq);
                tokio::spawn(super::task::run(d.clone(), task, permit, tracked));
                None
            }
            Ok(None) => {
                wait.reset();
                d.link_ok();
                poll
            }
            Err(e) if e.is_unauthorized() => {
                drop(permit);
                d.reregister(seen, &e).await;
                None
            }
            Err(e) => {
                d.link_lost(&e);
                if !matches!(e, CallError::Unreachable(_)) {
                    eprintln!("claiming failed: {e}; retrying");
                }
                let delay = wait.next_delay();
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = &mut back => {}
                    () = d.stopped() => return,
                }
                None
            }
        };
        if let Some(p) = pause {
            tokio::select! {
                () = tokio::time::sleep(p) => {}
                () = d.stopped() => return,
            }
        }
    }
}
