//! The windows waiting to be sent: a bounded queue that drops its oldest
//! window when full, and the back-off between failed attempts.
//!
//! Bounded so that a server that is down costs a fixed amount of memory
//! however long it stays down: the newest windows are kept, as they are
//! the ones a person looking at the server will want.

use std::collections::VecDeque;
use std::time::Duration;

use super::request::Window;

/// The first wait after a failed attempt.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest wait between attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// Windows in the order they were cut, oldest first.
#[derive(Debug)]
pub struct Outbox {
    windows: VecDeque<Window>,
    capacity: usize,
    /// Failed attempts in a row (any window): the back-off grows with it
    /// and a success resets it.
    failures: u32,
}

impl Outbox {
    /// An empty outbox of at most `capacity` windows (at least 1).
    pub fn new(capacity: usize) -> Outbox {
        Outbox {
            windows: VecDeque::new(),
            capacity: capacity.max(1),
            failures: 0,
        }
    }

    /// Adds `window`; returns the oldest window if it had to make room.
    pub fn add(&mut self, window: Window) -> Option<Window> {
        let dropped = (self.windows.len() >= self.capacity)
            .then(|| self.windows.pop_front())
            .flatten();
        self.windows.push_back(window);
        dropped
    }

    /// The window to send next.
    pub fn next(&self) -> Option<&Window> {
        self.windows.front()
    }

    /// Windows waiting.
    pub fn len(&self) -> usize {
        self.windows.len()
    }

    /// Whether no window waits.
    pub fn is_empty(&self) -> bool {
        self.windows.is_empty()
    }

    /// Takes out the window `id` (sent, or refused for good), if it is
    /// still there: a full outbox may have dropped it while it was sent.
    pub fn remove(&mut self, id: &str) -> Option<Window> {
        let at = self.windows.iter().position(|w| w.id == id)?;
        self.windows.remove(at)
    }

    /// Takes out every window (given up on).
    pub fn drain(&mut self) -> Vec<Window> {
        self.windows.drain(..).collect()
    }

    /// A send succeeded: the next failure waits the shortest time again.
    pub fn succeeded(&mut self) {
        self.failures = 0;
    }

    /// A send failed: how long to wait before the next attempt, doubling
    /// from [`FIRST_BACKOFF`] up to [`MAX_BACKOFF`], times a factor in
    /// [0.5, 1) drawn from `jitter` (a random `u64`), so that many
    /// processes that lost the same server do not come back in step.
    pub fn failed(&mut self, jitter: u64) -> Duration {
        self.failures = self.failures.saturating_add(1);
        let doublings = (self.failures - 1).min(16);
        let full = FIRST_BACKOFF
            .saturating_mul(1 << doublings)
            .min(MAX_BACKOFF);
        let factor = 0.5 + (jitter >> 11) as f64 / (1u64 << 53) as f64 / 2.0;
        full.mul_f64(factor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(id: &str) -> Window {
        Window {
            pprof: vec![],
            start_unix_nanos: 0,
            end_unix_nanos: 0,
            samples: 0,
            id: id.into(),
            clock: String::new(),
        }
    }

    #[test]
    fn a_full_outbox_drops_its_oldest_window() {
        let mut o = Outbox::new(2);
        assert!(o.add(window("a")).is_none());
        assert!(o.add(window("b")).is_none());
        assert_eq!(o.add(window("c")).unwrap().id, "a");
        assert_eq!(o.next().unwrap().id, "b");
        assert_eq!(o.len(), 2);
        // Dropped while in flight: nothing to remove.
        assert!(o.remove("a").is_none());
        assert_eq!(o.remove("c").unwrap().id, "c");
        assert_eq!(o.drain().len(), 1);
        assert!(o.is_empty());
    }

    #[test]
    fn backoff_doubles_with_jitter_up_to_a_bound_and_resets() {
        let mut o = Outbox::new(1);
        let lows: Vec<Duration> = (0..8).map(|_| o.failed(0)).collect();
        assert_eq!(lows[0], Duration::from_millis(500));
        assert_eq!(lows[1], Duration::from_secs(1));
        assert_eq!(lows[7], MAX_BACKOFF / 2);
        let high = o.failed(u64::MAX);
        assert!(
            high <= MAX_BACKOFF && high > MAX_BACKOFF * 99 / 100,
            "{high:?}"
        );
        o.succeeded();
        assert_eq!(o.failed(0), Duration::from_millis(500));
    }
}
