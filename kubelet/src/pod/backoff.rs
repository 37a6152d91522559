//! Upstream's exponential back-off for restarting crashed containers (and pulling images):
//! 10 s doubling to 5 min, forgotten after twice the maximum without trouble.

use std::collections::HashMap;
use std::time::Duration;

pub const INITIAL: Duration = Duration::from_secs(10);
pub const MAX: Duration = Duration::from_secs(300);

#[derive(Clone, Copy, Debug)]
struct Entry {
    backoff: Duration,
    /// When the last failure happened (nanoseconds since the epoch, as the CRI reports).
    last_update: i64,
}

/// Back-off per key; all times are nanoseconds since the epoch.
#[derive(Debug)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    entries: HashMap<String, Entry>,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new(INITIAL, MAX)
    }
}

fn expired(event: i64, last_update: i64, max: Duration) -> bool {
    event.saturating_sub(last_update) > 2 * max.as_nanos() as i64
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration) -> Self {
        Backoff {
            initial,
            max,
            entries: HashMap::new(),
        }
    }

    /// Whether a failure at `since` is still inside its back-off window at `now`.
    pub fn in_backoff_since(&self, key: &str, since: i64, now: i64) -> bool {
        let Some(e) = self.entries.get(key) else {
            return false;
        };
        if expired(now, e.last_update, self.max) {
            return false;
        }
        now.saturating_sub(since) < e.backoff.as_nanos() as i64
    }

    /// Whether the last recorded failure is still inside its back-off window at `now`.
    pub fn in_backoff(&self, key: &str, now: i64) -> bool {
        self.entries
            .get(key)
            .is_some_and(|e| self.in_backoff_since(key, e.last_update, now))
    }

    /// Records a failure at `at`, doubling the window (or starting it).
    pub fn next(&mut self, key: &str, at: i64) {
        let (initial, max) = (self.initial, self.max);
        let entry = self.entries.entry(key.to_string()).or_insert(Entry {
            backoff: Duration::ZERO,
            last_update: at,
        });
        if entry.backoff.is_zero() || expired(at, entry.last_update, max) {
            entry.backoff = initial;
        } else {
            entry.backoff = (entry.backoff * 2).min(max);
        }
        entry.last_update = at;
    }

    pub fn get(&self, key: &str) -> Duration {
        self.entries.get(key).map(|e| e.backoff).unwrap_or_default()
    }

    /// Time left in the window of a failure at `since`, for scheduling the retry.
    pub fn remaining(&self, key: &str, since: i64, now: i64) -> Option<Duration> {
        let e = self.entries.get(key)?;
        let end = since.saturating_add(e.backoff.as_nanos() as i64);
        (end > now).then(|| Duration::from_nanos((end - now) as u64))
    }

    pub fn forget_prefix(&mut self, prefix: &str) {
        self.entries.retain(|k, _| !k.starts_with(prefix));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    #[test]
    fn doubles_to_the_maximum_then_resets() {
        let mut b = Backoff::default();
        let key = "pod/c";
        // First crash: restart at once, window opens at 10 s.
        assert!(!b.in_backoff_since(key, 0, S));
        b.next(key, 0);
        assert_eq!(b.get(key), INITIAL);
        // Second crash at 12 s: inside the 10 s window until 22 s.
        assert!(b.in_backoff_since(key, 12 * S, 15 * S));
        assert!(!b.in_backoff_since(key, 12 * S, 23 * S));
        b.next(key, 12 * S);
        assert_eq!(b.get(key), Duration::from_secs(20));
        let mut at = 12 * S;
        for _ in 0..10 {
            at += 30 * S;
            b.next(key, at);
        }
        assert_eq!(b.get(key), MAX);
        assert_eq!(
            b.remaining(key, at, at + 100 * S),
            Some(Duration::from_secs(200))
        );
        // Ten quiet minutes forget the history.
        b.next(key, at + 11 * 60 * S);
        assert_eq!(b.get(key), INITIAL);
    }
}
