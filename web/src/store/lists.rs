//! The session list's documents, kept per replica between changes (PostgreSQL).
//!
//! Rendering every session is most of a list's cost on PostgreSQL: ten thousand rows
//! cross the wire and become documents on each request, however rarely the sessions
//! change. So a replica keeps the body it last wrote for each view, and writes it again
//! only once something it shows may have changed.
//!
//! # Never a stale list
//! A list must show every write that finished before it was asked for, whichever replica
//! took the write (a client creates a session through one replica and lists through
//! another). Three parts give that:
//! - **Changes announce themselves.** Triggers (migration V4; V7 adds `archived_at`)
//!   `NOTIFY` [`CHANGED`] in every transaction that writes a listed column of
//!   `sessions`, or a machine's name:
//!   whichever code or person wrote it, delivered at its commit, and every listener
//!   receives notifications in commit order. Each one counts up [`Lists::generation`].
//! - **A cached body names the generation it was read at**, loaded before the read's
//!   snapshot is taken: whatever that count includes, the snapshot does.
//! - **A hit first catches up.** The replica `NOTIFY`s a channel of its own with a
//!   fresh number and waits for its listener to hear it. That notification commits
//!   after every write the client saw finish, so once it arrives, so have theirs, and
//!   the count is current. The body is served only if the count still matches.
//!
//! Whenever the listener is not subscribed (not yet, or its connection was lost), the
//! catching up cannot happen and every list reads the database. A re-subscribed
//! listener counts up once, for whatever it missed meanwhile.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use axum::body::Bytes;
use tokio::sync::oneshot;

/// The channel the triggers notify (payload empty: identical notifications in one
/// transaction are delivered once).
pub(crate) const CHANGED: &str = "berth_sessions_changed";

/// How long a hit waits to catch up before it reads the database instead.
const CATCH_UP: Duration = Duration::from_secs(1);

/// Bodies kept: one per view and owner listed lately (a member's list is their own).
const KEPT: usize = 16;

/// Which list a body is: the view that wrote its documents, and whose sessions.
/// A kept list: its view's name and its owner (everyone's with `None`).
pub(crate) type Key = (&'static str, Option<String>);

/// A replica's lists and what it knows of changes.
#[derive(Debug)]
pub(crate) struct Lists {
    /// Change notifications heard, plus one per (re)subscription.
    generation: AtomicU64,
    /// The listener is subscribed: notifications are being heard.
    live: AtomicBool,
    /// Catch-up numbers sent, and who waits for each.
    next: AtomicU64,
    waiting: Mutex<HashMap<u64, oneshot::Sender<()>>>,
    /// Newest first.
    kept: Mutex<VecDeque<(Key, u64, Bytes)>>,
    /// This replica's catch-up channel.
    channel: String,
}

impl Lists {
    pub(crate) fn new(replica: &str) -> Lists {
        Lists {
            generation: AtomicU64::new(0),
            live: AtomicBool::new(false),
            next: AtomicU64::new(0),
            waiting: Mutex::new(HashMap::new()),
            kept: Mutex::new(VecDeque::new()),
            channel: format!("berth_lists_{replica}"),
        }
    }

    /// The channel this replica's listener hears its catch-up numbers on.
    pub(crate) fn channel(&self) -> &str {
        &self.channel
    }

    /// The listener subscribed: whatever changed while it was not is counted as a
    /// change.
    pub(crate) fn subscribed(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.live.store(true, Ordering::SeqCst);
    }

    /// The listener lost its connection: no hit until it is back, and nobody waits for
    /// a catch-up that will not come.
    pub(crate) fn lost(&self) {
        self.live.store(false, Ordering::SeqCst);
        self.waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// A change notification.
    pub(crate) fn changed(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
    }

    /// A catch-up notification of this replica's (payload: its number).
    pub(crate) fn caught_up(&self, payload: &str) {
        let Ok(n) = payload.parse::<u64>() else {
            return;
        };
        if let Some(tx) = self
            .waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&n)
        {
            let _ = tx.send(());
        }
    }

    /// The generation a read about to start may be kept at; `None` while the listener
    /// is not subscribed (the read is not kept).
    pub(crate) fn generation(&self) -> Option<u64> {
        self.live
            .load(Ordering::SeqCst)
            .then(|| self.generation.load(Ordering::SeqCst))
    }

    /// The body kept for `key`, and the generation it was read at.
    pub(crate) fn kept(&self, key: &Key) -> Option<(u64, Bytes)> {
        let kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        kept.iter()
            .find(|(k, ..)| k == key)
            .map(|(_, g, body)| (*g, body.clone()))
    }

    /// Keeps `body`, read at `generation`, for `key`.
    pub(crate) fn keep(&self, key: Key, generation: u64, body: Bytes) {
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        kept.retain(|(k, ..)| *k != key);
        kept.push_front((key, generation, body));
        kept.truncate(KEPT);
    }

    /// A fresh catch-up number and the receiver its notification completes.
    pub(crate) fn expect(&self) -> Option<(u64, oneshot::Receiver<()>)> {
        if !self.live.load(Ordering::SeqCst) {
            return None;
        }
        let n = self.next.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = oneshot::channel();
        self.waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(n, tx);
        Some((n, rx))
    }

    /// Waits for catch-up `n` (sent already); `false`: it did not come in time, or the
    /// listener was lost.
    pub(crate) async fn arrived(&self, n: u64, rx: oneshot::Receiver<()>) -> bool {
        let heard = matches!(tokio::time::timeout(CATCH_UP, rx).await, Ok(Ok(())));
        if !heard {
            self.waiting
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&n);
        }
        heard
    }
}

/// Migration V4: the triggers behind [`CHANGED`]. Only the columns a listed session
/// shows, or filters on, count (`event_seq` moves with every transcript event), and of
/// the machines only their names.
pub(crate) const TRIGGERS: &str = r#"
CREATE FUNCTION berth_sessions_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('berth_sessions_changed', '');
    RETURN NULL;
END
$$;
CREATE TRIGGER sessions_listed
    AFTER INSERT OR DELETE OR UPDATE OF id, title, agent, origin, project, created_at,
        updated_at, binding_dir, binding_display, binding_machine, binding_mode,
        binding_state, work_dir, work_dir_display, owner
    ON sessions FOR EACH STATEMENT EXECUTE FUNCTION berth_sessions_changed();
CREATE TRIGGER sessions_emptied
    AFTER TRUNCATE ON sessions FOR EACH STATEMENT EXECUTE FUNCTION berth_sessions_changed();
CREATE TRIGGER machines_listed
    AFTER INSERT OR DELETE OR UPDATE OF id, name
    ON machines FOR EACH STATEMENT EXECUTE FUNCTION berth_sessions_changed();
CREATE TRIGGER machines_emptied
    AFTER TRUNCATE ON machines FOR EACH STATEMENT EXECUTE FUNCTION berth_sessions_changed();
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_is_kept_per_view_and_owner_newest_first_and_bounded() {
        let lists = Lists::new("r");
        lists.keep(("web", None), 1, Bytes::from_static(b"a"));
        lists.keep(("control", None), 1, Bytes::from_static(b"b"));
        lists.keep(("web", Some("ann".into())), 2, Bytes::from_static(b"c"));
        assert_eq!(lists.kept(&("web", None)).unwrap().1, "a");
        assert_eq!(lists.kept(&("control", None)).unwrap().1, "b");
        assert_eq!(lists.kept(&("web", Some("ann".into()))).unwrap().0, 2);
        assert!(lists.kept(&("web", Some("bob".into()))).is_none());
        lists.keep(("web", None), 3, Bytes::from_static(b"d"));
        assert_eq!(
            lists.kept(&("web", None)).unwrap(),
            (3, Bytes::from_static(b"d"))
        );
        for i in 0..KEPT {
            lists.keep(("web", Some(i.to_string())), 4, Bytes::new());
        }
        assert!(lists.kept(&("web", None)).is_none(), "the oldest went");
        assert_eq!(lists.kept.lock().unwrap().len(), KEPT);
    }

    #[test]
    fn nothing_is_kept_or_caught_up_while_the_listener_is_away() {
        let lists = Lists::new("r");
        assert_eq!(lists.generation(), None);
        assert!(lists.expect().is_none());
        lists.subscribed();
        let g = lists.generation().unwrap();
        lists.changed();
        assert_eq!(lists.generation(), Some(g + 1));
        let (n, mut rx) = lists.expect().unwrap();
        lists.caught_up("not a number");
        lists.caught_up(&(n + 1).to_string());
        assert!(rx.try_recv().is_err());
        lists.caught_up(&n.to_string());
        assert!(rx.try_recv().is_ok());
        let (_, mut rx) = lists.expect().unwrap();
        lists.lost();
        assert_eq!(lists.generation(), None);
        assert!(matches!(
            rx.try_recv(),
            Err(oneshot::error::TryRecvError::Closed)
        ));
        lists.subscribed();
        assert_eq!(lists.generation(), Some(g + 2), "a re-subscription counts");
    }
}
