//! The scheduler's metrics under kube-scheduler's names, labels and buckets
//! (`pkg/scheduler/metrics`), in the scheduler's registry: the attempts by result and how
//! long each took (the scheduling cycle and, for a pod placed, its binding), and the pods
//! waiting, by the queue they wait in.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, Weak};
use std::time::Duration;

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts};

use super::SCHEDULER_NAME;

/// How an attempt ended: upstream's `result` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttemptResult {
    Scheduled,
    /// No node fits the pod (or there is none).
    Unschedulable,
    /// Something else went wrong (binding the pod or its volumes failed).
    Error,
}

impl AttemptResult {
    fn label(self) -> &'static str {
        match self {
            AttemptResult::Scheduled => "scheduled",
            AttemptResult::Unschedulable => "unschedulable",
            AttemptResult::Error => "error",
        }
    }
}

/// The queues of `scheduler_pending_pods`, in the order [`PendingPods`] keeps them.
const QUEUES: [&str; 4] = ["active", "backoff", "unschedulable", "gated"];

struct Metrics {
    attempts: IntCounterVec,
    duration: HistogramVec,
    pending: IntGaugeVec,
    /// Every running scheduler's counts (tests run several in one process).
    schedulers: Mutex<Vec<Weak<PendingPods>>>,
}

static METRICS: LazyLock<&'static Metrics> = LazyLock::new(|| {
    let metrics: &'static Metrics = Box::leak(Box::new(Metrics {
        attempts: IntCounterVec::new(
            Opts::new(
                "scheduler_schedule_attempts_total",
                "Number of attempts to schedule pods, by the result. 'unschedulable' means a pod could not be scheduled, while 'error' means an internal scheduler problem.",
            ),
            &["result", "profile"],
        )
        .expect("metric"),
        duration: HistogramVec::new(
            HistogramOpts::new(
                "scheduler_scheduling_attempt_duration_seconds",
                "Scheduling attempt latency in seconds (scheduling algorithm + binding)",
            )
            .buckets(prometheus::exponential_buckets(0.001, 2.0, 15).expect("buckets")),
            &["result", "profile"],
        )
        .expect("metric"),
        pending: IntGaugeVec::new(
            Opts::new(
                "scheduler_pending_pods",
                "Number of pending pods, by the queue type. 'active' means number of pods in activeQ; 'backoff' means number of pods in backoffQ; 'unschedulable' means number of pods in unschedulableEntities that the scheduler attempted to schedule and failed; 'gated' is the number of unschedulable pods that the scheduler never attempted to schedule because they are gated.",
            ),
            &["queue"],
        )
        .expect("metric"),
        schedulers: Mutex::new(Vec::new()),
    }));
    let registry = crate::metrics::scheduler();
    crate::metrics::register(registry, &metrics.attempts);
    crate::metrics::register(registry, &metrics.duration);
    let _ = registry.register(Box::new(Pending(metrics)));
    metrics
});

/// Counts an attempt at scheduling a pod that took `elapsed`.
pub fn attempt(result: AttemptResult, elapsed: Duration) {
    let labels = [result.label(), SCHEDULER_NAME];
    METRICS.attempts.with_label_values(&labels).inc();
    METRICS
        .duration
        .with_label_values(&labels)
        .observe(elapsed.as_secs_f64());
}

/// One scheduler's waiting pods, by queue; reported summed over the running schedulers.
#[derive(Debug, Default)]
pub struct PendingPods {
    counts: [AtomicI64; 4],
}

impl PendingPods {
    /// A scheduler's counts, reported until it is dropped.
    pub fn register() -> Arc<PendingPods> {
        let pods = Arc::new(PendingPods::default());
        METRICS
            .schedulers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::downgrade(&pods));
        pods
    }

    pub fn set(&self, active: usize, backoff: usize, unschedulable: usize, gated: usize) {
        for (count, n) in self
            .counts
            .iter()
            .zip([active, backoff, unschedulable, gated])
        {
            count.store(n as i64, Ordering::Relaxed);
        }
    }
}

/// `scheduler_pending_pods`, summed when scraped.
struct Pending(&'static Metrics);

impl Collector for Pending {
    fn desc(&self) -> Vec<&Desc> {
        self.0.pending.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let mut sums = [0i64; 4];
        self.0
            .schedulers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|weak| match weak.upgrade() {
                Some(pods) => {
                    for (sum, count) in sums.iter_mut().zip(&pods.counts) {
                        *sum += count.load(Ordering::Relaxed);
                    }
                    true
                }
                None => false,
            });
        for (queue, sum) in QUEUES.iter().zip(sums) {
            self.0.pending.with_label_values(&[queue]).set(sum);
        }
        self.0.pending.collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(series: &str) -> f64 {
        let text = crate::metrics::render(crate::metrics::scheduler());
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .map_or(0.0, |v| v.parse().unwrap())
    }

    #[test]
    fn attempts_and_pending_pods_are_reported_with_upstreams_labels() {
        let before = value(
            "scheduler_schedule_attempts_total{profile=\"default-scheduler\",result=\"error\"}",
        );
        attempt(AttemptResult::Error, Duration::from_millis(3));
        assert_eq!(
            value(
                "scheduler_schedule_attempts_total{profile=\"default-scheduler\",result=\"error\"}"
            ),
            before + 1.0
        );
        assert!(
            value(
                "scheduler_scheduling_attempt_duration_seconds_bucket{profile=\"default-scheduler\",result=\"error\",le=\"+Inf\"}"
            ) >= 1.0
        );
        let gated = value("scheduler_pending_pods{queue=\"gated\"}");
        let pods = PendingPods::register();
        pods.set(1, 2, 3, 4);
        assert!(value("scheduler_pending_pods{queue=\"gated\"}") >= gated + 4.0);
        drop(pods);
        assert!(value("scheduler_pending_pods{queue=\"unschedulable\"}") >= 0.0);
    }
}
