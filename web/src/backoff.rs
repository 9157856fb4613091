//! Capped exponential backoff with jitter: the one retry schedule of every loop that
//! tries again (the daemon's calls, the scheduler's and the server's store writes
//! while the database is away, the HTTP client's connects, PostgreSQL's listener).
//!
//! Jitter keeps many daemons (or many tasks of one daemon, or many replicas) that lost
//! the same thing at the same moment from coming back in lockstep.

use std::time::Duration;

/// The delays before successive retries: `base`, `2·base`, … capped at `cap`, each
/// plus up to a fifth of itself at random.
#[derive(Debug, Clone)]
pub struct Backoff {
    base: Duration,
    cap: Duration,
    next: Duration,
    attempt: u32,
}

impl Backoff {
    pub fn new(base: Duration, cap: Duration) -> Backoff {
        Backoff {
            base,
            cap,
            next: base.min(cap),
            attempt: 0,
        }
    }

    /// The delay before the next retry; each call doubles the one after (up to the cap).
    pub fn next_delay(&mut self) -> Duration {
        let d = self.next;
        self.next = (d * 2).min(self.cap);
        self.attempt = self.attempt.saturating_add(1);
        d + jitter(d / 5)
    }

    /// How many delays were handed out since the last reset.
    pub fn attempts(&self) -> u32 {
        self.attempt
    }

    /// After a success: the next failure starts from `base` again.
    pub fn reset(&mut self) {
        self.next = self.base.min(self.cap);
        self.attempt = 0;
    }
}

/// A random duration in `[0, max]`.
fn jitter(max: Duration) -> Duration {
    let nanos = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
    if nanos == 0 {
        return Duration::ZERO;
    }
    let mut bytes = [0u8; 8];
    // Without randomness from the OS the delay is the floor: still a valid schedule.
    if crate::secret::random(&mut bytes).is_err() {
        return Duration::ZERO;
    }
    Duration::from_nanos(u64::from_le_bytes(bytes) % (nanos + 1))
}

/// A delay for people: `250ms`, `2s`, `1.5s`.
pub fn human(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms % 1000 < 50 {
        format!("{}s", ms / 1000)
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TASK_BASE: Duration = Duration::from_millis(100);
    const TASK_CAP: Duration = Duration::from_secs(5);

    #[test]
    fn doubles_from_base_to_cap_with_bounded_jitter() {
        for _ in 0..50 {
            let mut b = Backoff::new(TASK_BASE, TASK_CAP);
            let mut floor = TASK_BASE;
            for _ in 0..12 {
                let d = b.next_delay();
                assert!(d >= floor, "{d:?} < {floor:?}");
                assert!(d <= floor + floor / 5, "{d:?} > {floor:?} + 20%");
                floor = (floor * 2).min(TASK_CAP);
            }
            assert_eq!(b.attempts(), 12);
            let last = b.next_delay();
            assert!(last >= TASK_CAP && last <= TASK_CAP + TASK_CAP / 5);
            b.reset();
            let first = b.next_delay();
            assert!(first >= TASK_BASE && first <= TASK_BASE + TASK_BASE / 5);
            assert_eq!(b.attempts(), 1);
        }
    }

    #[test]
    fn jitter_varies() {
        let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(1));
        let seen: std::collections::BTreeSet<Duration> = (0..20).map(|_| b.next_delay()).collect();
        assert!(seen.len() > 1, "{seen:?}");
    }

    #[test]
    fn human_delays() {
        assert_eq!(human(Duration::from_millis(250)), "250ms");
        assert_eq!(human(Duration::from_millis(2010)), "2s");
        assert_eq!(human(Duration::from_millis(1500)), "1.5s");
    }
}
