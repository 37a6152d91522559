//! The garbage collector's work queues hold object uids, not typed keys: its items span every
//! kind, so kube-runtime's per-kind `Controller` does not fit. Semantics follow client-go's
//! rate-limited workqueue: an item is queued once, never processed by two workers at a time
//! (a re-add while it is processed runs it again afterwards), and failures back off
//! exponentially per item.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;

use crate::util::workqueue::QueueMetrics;

const BASE_DELAY: Duration = Duration::from_millis(5);
const MAX_DELAY: Duration = Duration::from_secs(60);

#[derive(Default)]
struct State {
    queued: HashSet<String>,
    processing: HashSet<String>,
    dirty: HashSet<String>,
    failures: HashMap<String, u32>,
}

#[derive(Clone)]
pub struct WorkQueue {
    tx: mpsc::UnboundedSender<String>,
    rx: Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<String>>>,
    state: Arc<Mutex<State>>,
    /// Upstream's `workqueue_*` series of the queue, when it has a name.
    metrics: Option<Arc<QueueMetrics>>,
}

impl Default for WorkQueue {
    fn default() -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        WorkQueue {
            tx,
            rx: Arc::new(tokio::sync::Mutex::new(rx)),
            state: Arc::default(),
            metrics: None,
        }
    }
}

impl WorkQueue {
    /// A queue with upstream's workqueue metrics under `name`.
    pub fn named(name: &str) -> Self {
        WorkQueue {
            metrics: Some(QueueMetrics::new(name)),
            ..Self::default()
        }
    }

    pub fn add(&self, uid: &str) {
        let mut s = self.state.lock().expect("queue lock");
        let added = if s.processing.contains(uid) {
            s.dirty.insert(uid.to_string())
        } else if s.queued.insert(uid.to_string()) {
            // The receiver lives as long as the queue.
            let _ = self.tx.send(uid.to_string());
            true
        } else {
            false
        };
        if let (true, Some(m)) = (added, &self.metrics) {
            m.add(uid);
        }
    }

    pub fn add_after(&self, uid: &str, delay: Duration) {
        let queue = self.clone();
        let uid = uid.to_string();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            queue.add(&uid);
        });
    }

    /// Requeues a failed item after its own exponential backoff.
    pub fn add_rate_limited(&self, uid: &str) {
        if let Some(m) = &self.metrics {
            m.retry();
        }
        let failures = {
            let mut s = self.state.lock().expect("queue lock");
            let n = s.failures.entry(uid.to_string()).or_default();
            *n = n.saturating_add(1);
            *n
        };
        let delay = BASE_DELAY
            .saturating_mul(2u32.saturating_pow(failures.saturating_sub(1).min(20)))
            .min(MAX_DELAY);
        self.add_after(uid, delay);
    }

    /// Clears an item's backoff after it succeeded.
    pub fn forget(&self, uid: &str) {
        self.state.lock().expect("queue lock").failures.remove(uid);
    }

    /// The next item; the caller marks it `done` when finished.
    pub async fn get(&self) -> String {
        let uid = {
            let mut rx = self.rx.lock().await;
            rx.recv().await.expect("the queue holds its own sender")
        };
        let mut s = self.state.lock().expect("queue lock");
        s.queued.remove(&uid);
        s.processing.insert(uid.clone());
        if let Some(m) = &self.metrics {
            m.get(&uid);
        }
        uid
    }

    pub fn done(&self, uid: &str) {
        if let Some(m) = &self.metrics {
            m.done(uid);
        }
        let mut s = self.state.lock().expect("queue lock");
        s.processing.remove(uid);
        // Added while it was processed (and counted then): queued now.
        if s.dirty.remove(uid) && s.queued.insert(uid.to_string()) {
            let _ = self.tx.send(uid.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_item_is_queued_once_and_rerun_when_added_while_processed() {
        let q = WorkQueue::default();
        q.add("a");
        q.add("a");
        q.add("b");
        assert_eq!(q.get().await, "a");
        q.add("a");
        assert_eq!(q.get().await, "b");
        q.done("b");
        q.done("a");
        assert_eq!(q.get().await, "a");
        q.done("a");
        let nothing = tokio::time::timeout(Duration::from_millis(20), q.get()).await;
        assert!(nothing.is_err(), "a was queued twice");
    }
}
