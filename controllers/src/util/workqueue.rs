//! client-go's workqueue metrics (component-base's `workqueue_*`, labelled by the queue's
//! `name` as upstream's controllers name their queues), kept for every way a controller here
//! queues keys: kube-runtime's scheduler behind [`super::runtime`], [`super::queue::KeyQueue`]
//! and the garbage collector's queues. A queue reports what happens to its keys (added, taken,
//! done, retried); this module keeps the keys waiting and in progress, so that depth, the
//! time a key waited and the work still running are upstream's figures whichever queue it is.
//!
//! A key scheduled for later (a requeue after a delay) is counted as added when its time
//! comes, as client-go's delaying queue adds it then: until then it is neither in the depth
//! nor in `workqueue_adds_total`.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, LazyLock, Mutex, Weak};
use std::time::{Duration, Instant};

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGaugeVec, Opts,
};

/// The series of every queue in the process, in the controller-manager's registry.
struct Workqueues {
    queues: Mutex<Vec<Weak<QueueMetrics>>>,
    /// Every name seen, so a queue that stopped (a controller that lost its lease) still
    /// reports an empty depth rather than vanishing.
    names: Mutex<BTreeSet<String>>,
    depth: IntGaugeVec,
    adds: IntCounterVec,
    unfinished: prometheus::GaugeVec,
    longest: prometheus::GaugeVec,
    latency: HistogramVec,
    work: HistogramVec,
    retries: IntCounterVec,
}

/// Upstream's buckets of both workqueue histograms: 10 ns to 10 s, by tens.
fn buckets() -> Vec<f64> {
    prometheus::exponential_buckets(10e-9, 10.0, 10).expect("buckets")
}

static WORKQUEUES: LazyLock<&'static Workqueues> = LazyLock::new(|| {
    let name = &["name"];
    let queues: &'static Workqueues = Box::leak(Box::new(Workqueues {
        queues: Mutex::new(Vec::new()),
        names: Mutex::new(BTreeSet::new()),
        depth: IntGaugeVec::new(
            Opts::new("workqueue_depth", "Current depth of workqueue"),
            name,
        )
        .expect("metric"),
        adds: IntCounterVec::new(
            Opts::new(
                "workqueue_adds_total",
                "Total number of adds handled by workqueue",
            ),
            name,
        )
        .expect("metric"),
        unfinished: prometheus::GaugeVec::new(
            Opts::new(
                "workqueue_unfinished_work_seconds",
                "How many seconds of work has done that is in progress and hasn't been observed by work_duration. Large values indicate stuck threads. One can deduce the number of stuck threads by observing the rate at which this increases.",
            ),
            name,
        )
        .expect("metric"),
        longest: prometheus::GaugeVec::new(
            Opts::new(
                "workqueue_longest_running_processor_seconds",
                "How many seconds has the longest running processor for workqueue been running.",
            ),
            name,
        )
        .expect("metric"),
        latency: HistogramVec::new(
            HistogramOpts::new(
                "workqueue_queue_duration_seconds",
                "How long in seconds an item stays in workqueue before being requested.",
            )
            .buckets(buckets()),
            name,
        )
        .expect("metric"),
        work: HistogramVec::new(
            HistogramOpts::new(
                "workqueue_work_duration_seconds",
                "How long in seconds processing an item from workqueue takes.",
            )
            .buckets(buckets()),
            name,
        )
        .expect("metric"),
        retries: IntCounterVec::new(
            Opts::new(
                "workqueue_retries_total",
                "Total number of retries handled by workqueue",
            ),
            name,
        )
        .expect("metric"),
    }));
    let registry = crate::metrics::controller_manager();
    let _ = registry.register(Box::new(Registered(queues)));
    crate::metrics::register(registry, &queues.latency);
    crate::metrics::register(registry, &queues.work);
    crate::metrics::register(registry, &queues.retries);
    queues
});

/// The gauges and the adds counter, computed from the live queues when scraped.
struct Registered(&'static Workqueues);

impl Collector for Registered {
    fn desc(&self) -> Vec<&Desc> {
        let q = self.0;
        [
            q.depth.desc(),
            q.adds.desc(),
            q.unfinished.desc(),
            q.longest.desc(),
        ]
        .concat()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let q = self.0;
        let now = Instant::now();
        let mut figures: HashMap<String, Figures> = q
            .names
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|n| (n.clone(), Figures::default()))
            .collect();
        q.queues
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|weak| match weak.upgrade() {
                Some(queue) => {
                    let f = queue.figures(now);
                    let sum = figures.entry(queue.name.clone()).or_default();
                    sum.depth += f.depth;
                    sum.unfinished += f.unfinished;
                    sum.longest = sum.longest.max(f.longest);
                    true
                }
                None => false,
            });
        for (name, f) in &figures {
            q.depth.with_label_values(&[name]).set(f.depth);
            q.unfinished.with_label_values(&[name]).set(f.unfinished);
            q.longest.with_label_values(&[name]).set(f.longest);
            // A queue that never added anything still shows its counter.
            q.adds.with_label_values(&[name]);
        }
        [
            q.depth.collect(),
            q.adds.collect(),
            q.unfinished.collect(),
            q.longest.collect(),
        ]
        .concat()
    }
}

#[derive(Default)]
struct Figures {
    depth: i64,
    unfinished: f64,
    longest: f64,
}

/// A key waiting: since when (or from when, for a key scheduled later), and whether it has
/// been counted in `workqueue_adds_total` yet.
struct Pending {
    at: Instant,
    counted: bool,
}

#[derive(Default)]
struct Keys {
    pending: HashMap<String, Pending>,
    /// Keys being processed, and since when.
    processing: HashMap<String, Instant>,
}

/// One queue's metrics: tell it what happens to the queue's keys.
pub struct QueueMetrics {
    name: String,
    keys: Mutex<Keys>,
    adds: IntCounter,
    latency: Histogram,
    work: Histogram,
    retries: IntCounter,
}

impl std::fmt::Debug for QueueMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueMetrics")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl QueueMetrics {
    /// The metrics of a queue upstream names `name`; several queues may share a name (their
    /// figures add up), as two of upstream's controllers share `certificate`.
    pub fn new(name: &str) -> Arc<QueueMetrics> {
        let all = *WORKQUEUES;
        let queue = Arc::new(QueueMetrics {
            name: name.to_string(),
            keys: Mutex::new(Keys::default()),
            adds: all.adds.with_label_values(&[name]),
            latency: all.latency.with_label_values(&[name]),
            work: all.work.with_label_values(&[name]),
            retries: all.retries.with_label_values(&[name]),
        });
        all.names
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_string());
        all.queues
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::downgrade(&queue));
        queue
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Keys> {
        self.keys.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `key` was added now; a key already waiting is not added twice.
    pub fn add(&self, key: &str) {
        self.add_at(key, Instant::now());
    }

    /// `key` will be added after `delay` (a requeue).
    pub fn add_after(&self, key: &str, delay: Duration) {
        self.add_at(key, Instant::now() + delay);
    }

    fn add_at(&self, key: &str, at: Instant) {
        let now = Instant::now();
        let mut keys = self.lock();
        let entry = keys
            .pending
            .entry(key.to_string())
            .or_insert(Pending { at, counted: false });
        // The earliest time wins, as the queues run a key once for all its triggers.
        if at < entry.at {
            entry.at = at;
        }
        if !entry.counted && entry.at <= now {
            entry.counted = true;
            self.adds.inc();
        }
    }

    /// A worker took `key`: how long it waited is observed.
    pub fn get(&self, key: &str) {
        let now = Instant::now();
        let mut keys = self.lock();
        match keys.pending.remove(key) {
            Some(p) => {
                if !p.counted {
                    self.adds.inc();
                }
                self.latency
                    .observe(now.saturating_duration_since(p.at).as_secs_f64());
            }
            // Taken for a trigger the queue was not told of: added just now.
            None => {
                self.adds.inc();
                self.latency.observe(0.0);
            }
        }
        keys.processing.insert(key.to_string(), now);
    }

    /// The worker finished `key`: how long it worked is observed.
    pub fn done(&self, key: &str) {
        if let Some(started) = self.lock().processing.remove(key) {
            self.work.observe(started.elapsed().as_secs_f64());
        }
    }

    /// `key` failed and will be added again after its backoff.
    pub fn retry(&self) {
        self.retries.inc();
    }

    /// `key` left the queue without being processed (its object is gone).
    pub fn forget(&self, key: &str) {
        self.lock().pending.remove(key);
    }

    /// This queue's depth and work in progress at `now`, counting the keys whose time came.
    fn figures(&self, now: Instant) -> Figures {
        let mut keys = self.lock();
        let mut depth = 0;
        for p in keys.pending.values_mut() {
            if p.at <= now {
                depth += 1;
                if !p.counted {
                    p.counted = true;
                    self.adds.inc();
                }
            }
        }
        let running = keys
            .processing
            .values()
            .map(|started| now.saturating_duration_since(*started).as_secs_f64());
        let (unfinished, longest) =
            running.fold((0.0, 0.0f64), |(sum, max), s| (sum + s, max.max(s)));
        Figures {
            depth,
            unfinished,
            longest,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(name: &str, queue: &str) -> f64 {
        let text = crate::metrics::render(crate::metrics::controller_manager());
        let prefix = format!("{name}{{name=\"{queue}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .map_or(0.0, |v| v.parse().unwrap())
    }

    #[test]
    fn keys_are_counted_once_while_they_wait_and_timed_when_taken() {
        let q = QueueMetrics::new("test_keys_waiting");
        q.add("ns/a");
        q.add("ns/a");
        q.add("ns/b");
        assert_eq!(series("workqueue_adds_total", "test_keys_waiting"), 2.0);
        assert_eq!(series("workqueue_depth", "test_keys_waiting"), 2.0);
        q.get("ns/a");
        assert_eq!(series("workqueue_depth", "test_keys_waiting"), 1.0);
        assert_eq!(
            series(
                "workqueue_queue_duration_seconds_count",
                "test_keys_waiting"
            ),
            1.0
        );
        // Added again while it is processed: it waits (and counts) once more.
        q.add("ns/a");
        assert_eq!(series("workqueue_adds_total", "test_keys_waiting"), 3.0);
        assert!(
            series(
                "workqueue_longest_running_processor_seconds",
                "test_keys_waiting"
            ) >= 0.0
        );
        q.done("ns/a");
        assert_eq!(
            series("workqueue_work_duration_seconds_count", "test_keys_waiting"),
            1.0
        );
        q.retry();
        assert_eq!(series("workqueue_retries_total", "test_keys_waiting"), 1.0);
        q.forget("ns/b");
        assert_eq!(series("workqueue_depth", "test_keys_waiting"), 1.0);
    }

    #[test]
    fn a_key_scheduled_for_later_is_added_when_its_time_comes() {
        let q = QueueMetrics::new("test_keys_later");
        q.add_after("ns/a", Duration::from_secs(3600));
        assert_eq!(series("workqueue_adds_total", "test_keys_later"), 0.0);
        assert_eq!(series("workqueue_depth", "test_keys_later"), 0.0);
        // A trigger now wins over the later time.
        q.add("ns/a");
        assert_eq!(series("workqueue_adds_total", "test_keys_later"), 1.0);
        assert_eq!(series("workqueue_depth", "test_keys_later"), 1.0);
        q.get("ns/a");
        q.done("ns/a");
        // Due already: counted when scraped.
        q.add_at("ns/b", Instant::now() - Duration::from_millis(1));
        assert_eq!(series("workqueue_adds_total", "test_keys_later"), 2.0);
        // Taken without a word of it before: added then.
        q.get("ns/c");
        assert_eq!(series("workqueue_adds_total", "test_keys_later"), 3.0);
    }

    #[test]
    fn work_in_progress_is_reported_until_done() {
        let q = QueueMetrics::new("test_in_progress");
        q.add("k");
        q.get("k");
        q.lock()
            .processing
            .insert("k".into(), Instant::now() - Duration::from_secs(5));
        assert!(series("workqueue_unfinished_work_seconds", "test_in_progress") >= 5.0);
        assert!(
            series(
                "workqueue_longest_running_processor_seconds",
                "test_in_progress"
            ) >= 5.0
        );
        q.done("k");
        assert_eq!(
            series("workqueue_unfinished_work_seconds", "test_in_progress"),
            0.0
        );
        let buckets = prometheus::exponential_buckets(10e-9, 10.0, 10).unwrap();
        assert_eq!(buckets.len(), 10);
        assert!((buckets[9] - 10.0).abs() < 1e-9);
    }
}
