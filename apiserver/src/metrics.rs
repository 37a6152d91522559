//! Prometheus metrics of the API server under upstream's names, labels and buckets
//! (k8s.io/apiserver's `endpoints/metrics` and `storage/etcd3/metrics`), so that dashboards and
//! alerts written for kube-apiserver read this one unchanged. They live in one registry per
//! server, so that tests running several servers in one process do not share counters;
//! `/metrics` renders it with the process-wide default registry (the watch caches' series and
//! `process_*`).
//!
//! `etcd_request_duration_seconds` keeps its upstream name for the embedded store too: it is
//! the time each storage call takes, whichever backend serves it.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

use crate::storage::{DynStore, ListOptions};

/// Latency buckets of this server's own storage histograms.
const LATENCY_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0, 60.0,
];

/// Upstream's buckets of `apiserver_request_duration_seconds`, which
/// `etcd_request_duration_seconds` shares.
pub const REQUEST_BUCKETS: &[f64] = &[
    0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0,
    10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
];

/// The `component` label of every request this server serves itself.
pub const COMPONENT: &str = "apiserver";

/// Metrics the storage backends update.
pub struct StoreMetrics {
    latency: HistogramVec,
    /// `etcd_request_duration_seconds{operation, type}`.
    etcd: HistogramVec,
    pub revision: IntGauge,
    pub compacted: IntGauge,
    pub compaction_failures: IntCounter,
    pub batch_size: Histogram,
    pub watchers: IntGauge,
}

impl StoreMetrics {
    /// A backend's own timing of `operation` (a commit, a read).
    pub fn observe(&self, operation: &str, seconds: f64) {
        self.latency
            .with_label_values(&[operation])
            .observe(seconds);
    }

    /// A storage call of `operation` on a key of `type_` (upstream's group-resource).
    pub fn observe_request(&self, operation: &str, type_: &str, seconds: f64) {
        self.etcd
            .with_label_values(&[operation, type_])
            .observe(seconds);
    }
}

/// The labels upstream's `MonitorRequest` gives a request, in the order of
/// `apiserver_request_total` without `code`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestLabels {
    pub verb: &'static str,
    pub dry_run: String,
    pub group: String,
    pub version: String,
    pub resource: String,
    pub subresource: String,
    pub scope: &'static str,
    /// [`COMPONENT`] for the API's requests; empty for the health paths, as upstream.
    pub component: &'static str,
}

impl RequestLabels {
    fn values(&self) -> [&str; 8] {
        [
            self.verb,
            &self.dry_run,
            &self.group,
            &self.version,
            &self.resource,
            &self.subresource,
            self.scope,
            self.component,
        ]
    }

    /// The labels of `apiserver_longrunning_requests` (no `dry_run`).
    fn long_running(&self) -> [&str; 7] {
        [
            self.verb,
            &self.group,
            &self.version,
            &self.resource,
            &self.subresource,
            self.scope,
            self.component,
        ]
    }
}

/// Upstream's `cleanDryRun`: the values of `dryRun` sorted and deduplicated, `invalid` when
/// one is not `All`, empty without any.
pub fn dry_run_label(query: Option<&str>) -> String {
    let Some(query) = query.filter(|q| q.contains("dryRun")) else {
        return String::new();
    };
    let mut values: Vec<String> = query
        .split('&')
        .filter_map(|kv| kv.split_once('=').or(Some((kv, ""))))
        .filter(|(k, _)| *k == "dryRun")
        .map(|(_, v)| v.to_string())
        .collect();
    if values.iter().any(|v| v != "All") {
        return "invalid".into();
    }
    values.sort();
    values.dedup();
    values.join(",")
}

/// Whether the request's maxinflight class is `mutating` (upstream: every verb but get, list
/// and watch; a non-resource request by its method).
pub fn is_mutating(verb: &str) -> bool {
    !matches!(verb, "get" | "list" | "watch")
}

/// Requests in flight by kind, reported as upstream's watermark: the most there were at
/// once over the last second or so, so that a scrape between bursts still sees them.
pub struct Inflight {
    kinds: [InflightKind; 2],
    gauge: IntGaugeVec,
}

#[derive(Default)]
struct InflightKind {
    current: AtomicI64,
    window: Mutex<Watermark>,
}

/// The highest count of the current one-second window and of the window before.
#[derive(Clone, Copy, Debug)]
struct Watermark {
    started: Instant,
    max: i64,
    previous: i64,
}

impl Default for Watermark {
    fn default() -> Self {
        Watermark {
            started: Instant::now(),
            max: 0,
            previous: 0,
        }
    }
}

const WINDOW: Duration = Duration::from_secs(1);

impl Watermark {
    /// The count changed from `before` to `after` at `now`.
    fn record(&mut self, now: Instant, before: i64, after: i64) {
        let age = now.saturating_duration_since(self.started);
        if age >= WINDOW {
            // The window closed: its maximum is the previous one's, unless nothing happened
            // for a whole window since, when the count held at `before` throughout.
            self.previous = if age < 2 * WINDOW { self.max } else { before };
            self.max = before;
            self.started = now;
        }
        self.max = self.max.max(after);
    }

    /// The highest count seen over the last window, `current` being the count now.
    fn value(&self, now: Instant, current: i64) -> i64 {
        let age = now.saturating_duration_since(self.started);
        if age < WINDOW {
            self.max.max(self.previous)
        } else if age < 2 * WINDOW {
            self.max.max(current)
        } else {
            current
        }
    }
}

/// The kinds, in the order of [`Inflight::kinds`].
const KINDS: [&str; 2] = ["readOnly", "mutating"];

/// A request counted in flight until dropped.
pub struct InflightGuard<'a> {
    kind: &'a InflightKind,
}

impl Drop for InflightGuard<'_> {
    fn drop(&mut self) {
        self.kind.change(-1);
    }
}

impl InflightKind {
    fn change(&self, delta: i64) {
        let before = self.current.fetch_add(delta, Ordering::SeqCst);
        let mut w = self.window.lock().unwrap_or_else(|e| e.into_inner());
        w.record(Instant::now(), before, before + delta);
    }
}

impl Inflight {
    fn new() -> Inflight {
        Inflight {
            kinds: Default::default(),
            gauge: IntGaugeVec::new(
                Opts::new(
                    "apiserver_current_inflight_requests",
                    "Maximal number of currently used inflight request limit of this apiserver per request kind in last second.",
                ),
                &["request_kind"],
            )
            .expect("metric"),
        }
    }

    /// Counts a request of this kind in flight while the guard lives.
    pub fn start(&self, mutating: bool) -> InflightGuard<'_> {
        let kind = &self.kinds[usize::from(mutating)];
        kind.change(1);
        InflightGuard { kind }
    }
}

impl Collector for Inflight {
    fn desc(&self) -> Vec<&Desc> {
        self.gauge.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let now = Instant::now();
        for (kind, name) in self.kinds.iter().zip(KINDS) {
            let current = kind.current.load(Ordering::SeqCst);
            let w = *kind.window.lock().unwrap_or_else(|e| e.into_inner());
            self.gauge
                .with_label_values(&[name])
                .set(w.value(now, current));
        }
        self.gauge.collect()
    }
}

pub struct Metrics {
    registry: Registry,
    /// `apiserver_request_total`.
    pub requests: IntCounterVec,
    /// `apiserver_request_duration_seconds`.
    pub request_duration: HistogramVec,
    /// `apiserver_longrunning_requests`.
    pub longrunning: IntGaugeVec,
    /// `apiserver_current_inflight_requests`.
    pub inflight: Arc<Inflight>,
    /// `apiserver_watch_events_total` and `apiserver_watch_events_sizes`.
    pub watch_events: IntCounterVec,
    pub watch_event_sizes: HistogramVec,
    /// `apiserver_storage_objects`, counted when scraped.
    storage_objects: IntGaugeVec,
    /// The backend objects are counted in (without the storage call metrics).
    counted_store: OnceLock<DynStore>,
    pub store: Arc<StoreMetrics>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

fn register(registry: &Registry, c: impl Collector + 'static) {
    registry
        .register(Box::new(c))
        .expect("metric registered once");
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let request_labels = &[
            "verb",
            "dry_run",
            "group",
            "version",
            "resource",
            "subresource",
            "scope",
            "component",
        ];
        let requests = IntCounterVec::new(
            Opts::new(
                "apiserver_request_total",
                "Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code.",
            ),
            &[request_labels.as_slice(), &["code"]].concat(),
        )
        .expect("metric");
        let request_duration = HistogramVec::new(
            HistogramOpts::new(
                "apiserver_request_duration_seconds",
                "Response latency distribution in seconds for each verb, dry run value, group, version, resource, subresource, scope and component.",
            )
            .buckets(REQUEST_BUCKETS.to_vec()),
            request_labels,
        )
        .expect("metric");
        let longrunning = IntGaugeVec::new(
            Opts::new(
                "apiserver_longrunning_requests",
                "Gauge of all active long-running apiserver requests broken out by verb, group, version, resource, scope and component. Not all requests are tracked this way.",
            ),
            &[
                "verb",
                "group",
                "version",
                "resource",
                "subresource",
                "scope",
                "component",
            ],
        )
        .expect("metric");
        let watch_events = IntCounterVec::new(
            Opts::new(
                "apiserver_watch_events_total",
                "Number of events sent in watch clients",
            ),
            &["group", "version", "kind"],
        )
        .expect("metric");
        let watch_event_sizes = HistogramVec::new(
            HistogramOpts::new(
                "apiserver_watch_events_sizes",
                "Watch event size distribution in bytes",
            )
            .buckets(prometheus::exponential_buckets(1024.0, 2.0, 8).expect("buckets")),
            &["group", "version", "kind"],
        )
        .expect("metric");
        let storage_objects = IntGaugeVec::new(
            Opts::new(
                "apiserver_storage_objects",
                "Number of stored objects at the time of last check split by kind. In case of a fetching error, the value will be -1.",
            ),
            &["resource"],
        )
        .expect("metric");
        let inflight = Arc::new(Inflight::new());
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
            etcd: HistogramVec::new(
                HistogramOpts::new(
                    "etcd_request_duration_seconds",
                    "Etcd request latency in seconds for each operation and object type.",
                )
                .buckets(REQUEST_BUCKETS.to_vec()),
                &["operation", "type"],
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
        register(&registry, requests.clone());
        register(&registry, request_duration.clone());
        register(&registry, longrunning.clone());
        register(&registry, watch_events.clone());
        register(&registry, watch_event_sizes.clone());
        register(&registry, storage_objects.clone());
        register(&registry, SharedInflight(inflight.clone()));
        register(&registry, store.latency.clone());
        register(&registry, store.etcd.clone());
        register(&registry, store.revision.clone());
        register(&registry, store.compacted.clone());
        register(&registry, store.compaction_failures.clone());
        register(&registry, store.batch_size.clone());
        register(&registry, store.watchers.clone());
        Metrics {
            registry,
            requests,
            request_duration,
            longrunning,
            inflight,
            watch_events,
            watch_event_sizes,
            storage_objects,
            counted_store: OnceLock::new(),
            store: Arc::new(store),
        }
    }

    /// A request finished with `code` after `elapsed` (upstream's `MonitorRequest`).
    pub fn observe_request(&self, labels: &RequestLabels, code: u16, elapsed: Duration) {
        let values = labels.values();
        let code = code.to_string();
        self.requests
            .with_label_values(&[values.as_slice(), &[code.as_str()]].concat())
            .inc();
        self.request_duration
            .with_label_values(&values)
            .observe(elapsed.as_secs_f64());
    }

    /// The `apiserver_longrunning_requests` series of a request.
    pub fn longrunning(&self, labels: &RequestLabels) -> IntGauge {
        self.longrunning.with_label_values(&labels.long_running())
    }

    /// Counts objects in `store` (the backend under the metered store) when scraped.
    pub fn count_objects_in(&self, store: DynStore) {
        let _ = self.counted_store.set(store);
    }

    /// Sets `apiserver_storage_objects` for each of `resources` (its label and its key root)
    /// from the store, -1 for one that could not be counted, as upstream.
    pub async fn count_objects(&self, resources: &[(String, String)]) {
        let Some(store) = self.counted_store.get() else {
            return;
        };
        for (label, root) in resources {
            let count = store
                .list(ListOptions {
                    prefix: root.clone(),
                    limit: Some(1),
                    ..Default::default()
                })
                .await
                .map_or(-1, |l| (l.kvs.len() + l.remaining) as i64);
            self.storage_objects.with_label_values(&[label]).set(count);
        }
    }

    /// The Prometheus text exposition of every metric.
    /// This server's metrics, then the process-wide ones (the default registry: the watch
    /// caches' series and `process_*`).
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

/// [`Inflight`] as the registry holds it, beside the server's handle.
struct SharedInflight(Arc<Inflight>);

impl Collector for SharedInflight {
    fn desc(&self) -> Vec<&Desc> {
        self.0.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        self.0.collect()
    }
}

/// Keeps a long-running request (a watch, logs, exec, attach, port-forward, proxy) counted
/// in `apiserver_longrunning_requests` while any clone lives, and counts it in
/// `apiserver_request_total` and `apiserver_request_duration_seconds` when the last one
/// goes, as upstream records such requests when their handler returns. The response body
/// holds one; a request extension carries another to whatever outlives the response (the
/// tunnel of an upgraded connection).
#[derive(Clone)]
pub struct LongRunning(Arc<LongRunningInner>);

struct LongRunningInner {
    metrics: Arc<Metrics>,
    labels: RequestLabels,
    gauge: IntGauge,
    started: Instant,
    code: OnceLock<u16>,
}

impl LongRunning {
    pub fn start(metrics: Arc<Metrics>, labels: RequestLabels, started: Instant) -> LongRunning {
        let gauge = metrics.longrunning(&labels);
        gauge.inc();
        LongRunning(Arc::new(LongRunningInner {
            metrics,
            labels,
            gauge,
            started,
            code: OnceLock::new(),
        }))
    }

    /// The code the response carried, counted when the request ends.
    pub fn answered(&self, code: u16) {
        let _ = self.0.code.set(code);
    }
}

impl Drop for LongRunningInner {
    fn drop(&mut self) {
        self.gauge.dec();
        if let Some(code) = self.code.get() {
            self.metrics
                .observe_request(&self.labels, *code, self.started.elapsed());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dry_run_values_are_sorted_deduplicated_or_invalid() {
        assert_eq!(dry_run_label(None), "");
        assert_eq!(dry_run_label(Some("limit=5")), "");
        assert_eq!(dry_run_label(Some("dryRun=All")), "All");
        assert_eq!(dry_run_label(Some("dryRun=All&dryRun=All")), "All");
        assert_eq!(dry_run_label(Some("dryRun=Some")), "invalid");
        assert_eq!(dry_run_label(Some("dryRun")), "invalid");
    }

    #[test]
    fn the_watermark_holds_the_highest_count_of_the_last_second() {
        let t0 = Instant::now();
        let mut w = Watermark {
            started: t0,
            max: 0,
            previous: 0,
        };
        w.record(t0, 0, 1);
        w.record(t0 + Duration::from_millis(10), 1, 2);
        w.record(t0 + Duration::from_millis(20), 2, 1);
        w.record(t0 + Duration::from_millis(30), 1, 0);
        // Both requests are gone, but two were in flight within the second.
        assert_eq!(w.value(t0 + Duration::from_millis(500), 0), 2);
        assert_eq!(w.value(t0 + Duration::from_millis(1500), 0), 2);
        // A second later with nothing new the count is what it is now.
        assert_eq!(w.value(t0 + Duration::from_millis(2500), 0), 0);
        // A new window remembers the last one's maximum for a while.
        w.record(t0 + Duration::from_millis(1200), 0, 1);
        assert_eq!(w.value(t0 + Duration::from_millis(1300), 1), 2);
        w.record(t0 + Duration::from_millis(1300), 1, 0);
        assert_eq!(w.value(t0 + Duration::from_millis(3000), 0), 1);
        assert_eq!(w.value(t0 + Duration::from_millis(4000), 0), 0);
    }

    #[test]
    fn requests_in_flight_are_counted_by_kind() {
        let m = Metrics::new();
        let reads = m.inflight.start(false);
        let _write = m.inflight.start(true);
        let _read2 = m.inflight.start(false);
        drop(reads);
        let text = m.render();
        assert!(
            text.contains("apiserver_current_inflight_requests{request_kind=\"readOnly\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("apiserver_current_inflight_requests{request_kind=\"mutating\"} 1"),
            "{text}"
        );
    }

    #[test]
    fn a_long_running_request_is_counted_when_it_ends() {
        let m = Arc::new(Metrics::new());
        let labels = RequestLabels {
            verb: "WATCH",
            resource: "pods".into(),
            version: "v1".into(),
            scope: "namespace",
            component: COMPONENT,
            ..Default::default()
        };
        let hold = LongRunning::start(m.clone(), labels.clone(), Instant::now());
        hold.answered(200);
        let tunnel = hold.clone();
        assert_eq!(m.longrunning(&labels).get(), 1);
        drop(hold);
        assert_eq!(m.longrunning(&labels).get(), 1);
        let total = |m: &Metrics| {
            m.requests
                .with_label_values(&[labels.values().as_slice(), &["200"]].concat())
                .get()
        };
        assert_eq!(total(&m), 0);
        drop(tunnel);
        assert_eq!(m.longrunning(&labels).get(), 0);
        assert_eq!(total(&m), 1);
    }
}
