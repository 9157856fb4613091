//! A running task's events on their way to the server.
//!
//! Events are numbered from 0 per task in the order the executor reports them. The
//! outbox keeps every event the server has not acknowledged; a batch always starts at
//! the first unacknowledged one, so resending after a lost answer is the same as
//! sending (the server keeps only numbers it has not seen).

use berth_web::daemon::wire::{EventBatch, WireEvent};
use std::collections::VecDeque;

/// A batch stops growing past this many bytes of JSON (the server takes 1 MiB).
pub const BATCH_BYTES: usize = 256 * 1024;

/// The server holds fewer events than it acknowledged before: those are gone from the
/// outbox and cannot be sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the server holds {received} events but had acknowledged {acknowledged}")]
pub struct Lost {
    pub received: u64,
    pub acknowledged: u64,
}

/// The unacknowledged events of one task.
#[derive(Debug, Default)]
pub struct Outbox {
    /// How many events the server acknowledged: the number of `events[0]`.
    acknowledged: u64,
    /// Each event with the size of its JSON.
    events: VecDeque<(WireEvent, usize)>,
}

impl Outbox {
    pub fn new() -> Outbox {
        Outbox::default()
    }

    /// Queues the next event; returns its number.
    pub fn push(&mut self, event: WireEvent) -> u64 {
        let size = serde_json::to_vec(&event).map(|v| v.len()).unwrap_or(0);
        self.events.push_back((event, size));
        self.total() - 1
    }

    /// How many events the task has produced so far (the next number).
    pub fn total(&self) -> u64 {
        self.acknowledged + self.events.len() as u64
    }

    /// How many events the server has acknowledged.
    pub fn acknowledged(&self) -> u64 {
        self.acknowledged
    }

    /// Whether some event still waits for the server's acknowledgement.
    pub fn has_pending(&self) -> bool {
        !self.events.is_empty()
    }

    /// The next batch: unacknowledged events from the first, at least one and at most
    /// about `max_bytes` of JSON. `None` when everything is acknowledged.
    pub fn batch(&self, max_bytes: usize) -> Option<EventBatch> {
        let mut size = 0;
        let mut events = Vec::new();
        for (event, n) in &self.events {
            if !events.is_empty() && size + n > max_bytes {
                break;
            }
            size += n;
            events.push(event.clone());
        }
        (!events.is_empty()).then_some(EventBatch {
            first: self.acknowledged,
            events,
        })
    }

    /// The server holds `received` events: drop those, keep the rest to send. A count
    /// past what was produced acknowledges everything; one below an earlier
    /// acknowledgement is an error (those events were dropped here).
    pub fn ack(&mut self, received: u64) -> Result<(), Lost> {
        if received < self.acknowledged {
            return Err(Lost {
                received,
                acknowledged: self.acknowledged,
            });
        }
        let drop = usize::try_from(received - self.acknowledged)
            .unwrap_or(usize::MAX)
            .min(self.events.len());
        self.events.drain(..drop);
        self.acknowledged += drop as u64;
        Ok(())
    }

    /// Forgets every event (the server no longer expects the task).
    pub fn clear(&mut self) {
        self.acknowledged = self.total();
        self.events.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_core::event::AgentEvent;

    fn text(t: &str) -> WireEvent {
        WireEvent::Agent {
            event: AgentEvent::Text { text: t.into() },
        }
    }

    fn texts(b: &EventBatch) -> (u64, Vec<String>) {
        let t = b
            .events
            .iter()
            .map(|e| match e {
                WireEvent::Agent {
                    event: AgentEvent::Text { text },
                } => text.clone(),
                other @ (WireEvent::Agent { .. }
                | WireEvent::Status { .. }
                | WireEvent::Approval { .. }) => {
                    format!("{other:?}")
                }
            })
            .collect();
        (b.first, t)
    }

    #[test]
    fn numbers_from_zero_and_resends_what_is_not_acknowledged() {
        let mut o = Outbox::new();
        assert_eq!(o.batch(BATCH_BYTES), None);
        assert_eq!(o.push(text("a")), 0);
        assert_eq!(o.push(text("b")), 1);
        assert_eq!(o.push(text("c")), 2);
        let b = o.batch(BATCH_BYTES).map(|b| texts(&b));
        assert_eq!(b, Some((0, vec!["a".into(), "b".into(), "c".into()])));
        // The answer was lost: the same batch goes again.
        assert_eq!(o.batch(BATCH_BYTES).map(|b| texts(&b)), b);
        // The server kept two of them.
        assert_eq!(o.ack(2), Ok(()));
        assert_eq!(o.acknowledged(), 2);
        assert_eq!(o.push(text("d")), 3);
        assert_eq!(
            o.batch(BATCH_BYTES).map(|b| texts(&b)),
            Some((2, vec!["c".into(), "d".into()]))
        );
        // A repeated acknowledgement changes nothing.
        assert_eq!(o.ack(2), Ok(()));
        assert_eq!(o.total(), 4);
        assert_eq!(o.ack(4), Ok(()));
        assert!(!o.has_pending());
        assert_eq!(o.batch(BATCH_BYTES), None);
        assert_eq!(o.total(), 4);
    }

    #[test]
    fn acknowledgements_are_bounded_both_ways() {
        let mut o = Outbox::new();
        o.push(text("a"));
        o.push(text("b"));
        assert_eq!(o.ack(1), Ok(()));
        assert_eq!(
            o.ack(0),
            Err(Lost {
                received: 0,
                acknowledged: 1
            })
        );
        assert_eq!(o.ack(99), Ok(()));
        assert_eq!((o.acknowledged(), o.total()), (2, 2));
        assert_eq!(o.push(text("c")), 2);
    }

    #[test]
    fn batches_are_cut_by_size_but_never_empty() {
        let mut o = Outbox::new();
        let big = "x".repeat(300);
        for _ in 0..5 {
            o.push(text(&big));
        }
        let b = o.batch(700).map(|b| (b.first, b.events.len()));
        assert_eq!(b, Some((0, 2)));
        assert_eq!(o.batch(10).map(|b| b.events.len()), Some(1));
        assert_eq!(o.ack(4), Ok(()));
        assert_eq!(
            o.batch(700).map(|b| (b.first, b.events.len())),
            Some((4, 1))
        );
    }

    #[test]
    fn clear_drops_everything_but_keeps_the_numbering() {
        let mut o = Outbox::new();
        o.push(text("a"));
        o.clear();
        assert!(!o.has_pending());
        assert_eq!(o.push(text("b")), 1);
    }
}
