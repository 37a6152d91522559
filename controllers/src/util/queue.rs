//! A work queue of keys with client-go's semantics: a key waits at most once however often it
//! is added, one key is never processed by two workers at once (added while processing, it is
//! processed again afterwards), and failures come back after a per-key exponential backoff
//! (5 ms doubling to 1000 s, client-go's default controller rate limiter).
//!
//! `kube::runtime::Controller` only reconciles objects its cache still holds; controllers that
//! must act on the deletion of the object they are keyed by (the Endpoints controller deletes
//! a deleted Service's Endpoints) use this queue with reflectors instead.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use super::workqueue::QueueMetrics;

const BASE_DELAY: Duration = Duration::from_millis(5);
const MAX_DELAY: Duration = Duration::from_secs(1000);

#[derive(Default)]
struct State {
    queue: VecDeque<String>,
    /// Keys waiting to be processed (in `queue`, or re-added while processing).
    dirty: HashSet<String>,
    processing: HashSet<String>,
    failures: HashMap<String, u32>,
}

#[derive(Clone, Default)]
pub struct KeyQueue {
    state: Arc<Mutex<State>>,
    notify: Arc<Notify>,
    /// upstream's `workqueue_*` series of the queue, when it has a name.
    metrics: Option<Arc<QueueMetrics>>,
}

impl std::fmt::Debug for KeyQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyQueue").finish_non_exhaustive()
    }
}

impl KeyQueue {
    pub fn new() -> Self {
        Self::default()
    }

    /// A queue with upstream's workqueue metrics under `name`.
    pub fn named(name: &str) -> Self {
        KeyQueue {
            metrics: Some(QueueMetrics::new(name)),
            ..Self::default()
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn add(&self, key: impl Into<String>) {
        let key = key.into();
        let mut s = self.lock();
        if !s.dirty.insert(key.clone()) {
            return;
        }
        if let Some(m) = &self.metrics {
            m.add(&key);
        }
        if !s.processing.contains(&key) {
            s.queue.push_back(key);
            drop(s);
            self.notify.notify_one();
        }
    }

    pub fn add_after(&self, key: impl Into<String>, delay: Duration) {
        let key = key.into();
        let queue = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            queue.add(key);
        });
    }

    /// Adds `key` again after its backoff, which doubles with each failure until [`forget`].
    ///
    /// [`forget`]: KeyQueue::forget
    pub fn add_rate_limited(&self, key: &str) {
        if let Some(m) = &self.metrics {
            m.retry();
        }
        let n = {
            let mut s = self.lock();
            let n = s.failures.entry(key.to_string()).or_insert(0);
            *n += 1;
            *n
        };
        let delay = BASE_DELAY
            .checked_mul(1u32 << (n - 1).min(30))
            .unwrap_or(MAX_DELAY)
            .min(MAX_DELAY);
        self.add_after(key, delay);
    }

    pub fn forget(&self, key: &str) {
        self.lock().failures.remove(key);
    }

    /// The next key to process; call [`done`](KeyQueue::done) with it when finished.
    pub async fn next(&self) -> String {
        loop {
            let notified = self.notify.notified();
            {
                let mut s = self.lock();
                if let Some(key) = s.queue.pop_front() {
                    s.dirty.remove(&key);
                    s.processing.insert(key.clone());
                    if let Some(m) = &self.metrics {
                        m.get(&key);
                    }
                    if !s.queue.is_empty() {
                        self.notify.notify_one();
                    }
                    return key;
                }
            }
            notified.await;
        }
    }

    pub fn done(&self, key: &str) {
        if let Some(m) = &self.metrics {
            m.done(key);
        }
        let mut s = self.lock();
        s.processing.remove(key);
        if s.dirty.contains(key) {
            s.queue.push_back(key.to_string());
            drop(s);
            self.notify.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_key_waits_once_and_is_redone_when_added_while_processing() {
        let q = KeyQueue::new();
        q.add("a");
        q.add("a");
        q.add("b");
        let first = q.next().await;
        assert_eq!(first, "a");
        q.add("a");
        assert_eq!(q.next().await, "b");
        q.done("b");
        // "a" is still being processed: not handed out again until done.
        assert!(q.lock().queue.is_empty());
        q.done("a");
        assert_eq!(q.next().await, "a");
    }

    #[tokio::test]
    async fn a_named_queue_reports_upstreams_workqueue_metrics() {
        let series = |name: &str| {
            let text = crate::metrics::render(crate::metrics::controller_manager());
            let prefix = format!("{name}{{name=\"test_key_queue\"}} ");
            text.lines()
                .find_map(|l| l.strip_prefix(&prefix))
                .map_or(0.0, |v| v.parse::<f64>().unwrap())
        };
        let q = KeyQueue::named("test_key_queue");
        q.add("a");
        q.add("a");
        assert_eq!(series("workqueue_adds_total"), 1.0);
        assert_eq!(series("workqueue_depth"), 1.0);
        assert_eq!(q.next().await, "a");
        assert_eq!(series("workqueue_depth"), 0.0);
        q.add_rate_limited("a");
        q.done("a");
        assert_eq!(series("workqueue_work_duration_seconds_count"), 1.0);
        assert_eq!(series("workqueue_retries_total"), 1.0);
    }

    #[tokio::test]
    async fn failures_back_off_exponentially() {
        let q = KeyQueue::new();
        for _ in 0..3 {
            q.add_rate_limited("k");
        }
        assert_eq!(q.lock().failures["k"], 3);
        assert_eq!(q.next().await, "k");
        q.forget("k");
        assert!(!q.lock().failures.contains_key("k"));
    }
}
