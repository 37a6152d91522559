//! Prometheus metrics of the API server, registered in one registry per server so that tests
//! running several servers in one process do not share counters.

use std::sync::Arc;

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

const LATENCY_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0, 60.0,
];

/// Metrics the storage backends update.
pub struct StoreMetrics {
    latency: HistogramVec,
    pub revision: IntGauge,
    pub compacted: IntGauge,
    pub compaction_failures: IntCounter,
    pub batch_size: Histogram,
    pub watchers: IntGauge,
}

impl StoreMetrics {
    pub fn observe(&self, operation: &str, seconds: f64) {
        self.latency
            .with_label_values(&[operation])
            .observe(seconds);
    }
}

pub struct Metrics {
    registry: Registry,
    pub requests: IntCounterVec,
    pub request_duration: HistogramVec,
    pub watches: IntGaugeVec,
    pub store: Arc<StoreMetrics>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let requests = IntCounterVec::new(
            Opts::new(
                "apiserver_request_total",
                "Requests by verb, resource and HTTP code",
            ),
            &["verb", "resource", "subresource", "code"],
        )
        .expect("metric");
        let request_duration = HistogramVec::new(
            HistogramOpts::new(
                "apiserver_request_duration_seconds",
                "Request latency by verb and resource",
            )
            .buckets(LATENCY_BUCKETS.to_vec()),
            &["verb", "resource", "subresource"],
        )
        .expect("metric");
        let watches = IntGaugeVec::new(
            Opts::new(
                "apiserver_registered_watchers",
                "Open watch requests by resource",
            ),
            &["resource"],
        )
        .expect("metric");
        let store = StoreMetrics {
            latency: HistogramVec::new(
                HistogramOpts::new(
                    "apiserver_storage_request_duration_seconds",
                    "Store latency by operation",
                )
                .buckets(LATENCY_BUCKETS.to_vec()),
                &["operation"],
            )
            .expect("metric"),
            revision: IntGauge::new("apiserver_storage_revision", "Newest revision of the store")
                .expect("metric"),
            compacted: IntGauge::new(
                "apiserver_storage_compacted_revision",
                "Revision history is compacted up to",
            )
            .expect("metric"),
            compaction_failures: IntCounter::new(
                "apiserver_storage_compaction_failures_total",
                "Compactions that failed (each is retried)",
            )
            .expect("metric"),
            batch_size: Histogram::with_opts(
                HistogramOpts::new(
                    "apiserver_storage_commit_batch_size",
                    "Writes committed per transaction",
                )
                .buckets(vec![
                    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0,
                ]),
            )
            .expect("metric"),
            watchers: IntGauge::new("apiserver_storage_watchers", "Open store watch streams")
                .expect("metric"),
        };
        for c in [
            Box::new(requests.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(request_duration.clone()),
            Box::new(watches.clone()),
            Box::new(store.latency.clone()),
            Box::new(store.revision.clone()),
            Box::new(store.compacted.clone()),
            Box::new(store.compaction_failures.clone()),
            Box::new(store.batch_size.clone()),
            Box::new(store.watchers.clone()),
        ] {
            registry.register(c).expect("metric registered once");
        }
        Metrics {
            registry,
            requests,
            request_duration,
            watches,
            store: Arc::new(store),
        }
    }

    /// The Prometheus text exposition of every metric.
    /// This server's metrics, then the process-wide ones (the default registry: components
    /// running in this process, such as the controllers' reconcile panics).
    pub fn render(&self) -> String {
        let mut families = self.registry.gather();
        families.extend(prometheus::default_registry().gather());
        let mut buf = Vec::new();
        TextEncoder::new()
            .encode(&families, &mut buf)
            .expect("text encoding");
        String::from_utf8(buf).expect("utf-8 metrics")
    }
}
