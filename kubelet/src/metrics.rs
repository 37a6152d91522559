//! The kubelet's own Prometheus metrics (its `/metrics`), named, labelled and bucketed as
//! upstream's `pkg/kubelet/metrics`, so that dashboards and alerts written for Kubernetes read
//! them unchanged. Each kubelet has its registry: a process may run several (hollow nodes), and
//! the all-in-one server's API server must not serve them as its own. Only `process_*` comes
//! from the process-wide default registry, which the `prometheus` crate fills when its
//! `process` feature is on.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_cri::v1 as cri;
use prometheus::proto::MetricFamily;
use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

/// Upstream's `podStartupDurationBuckets`.
const POD_START_BUCKETS: &[f64] = &[
    0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 20.0, 30.0, 45.0, 60.0, 120.0, 180.0, 240.0,
    300.0, 360.0, 480.0, 600.0, 900.0, 1200.0, 1800.0, 2700.0, 3600.0,
];

/// The `container_state` values of `kubelet_running_containers`, upstream's container states.
const CONTAINER_STATES: &[(i32, &str)] = &[
    (cri::ContainerState::ContainerCreated as i32, "created"),
    (cri::ContainerState::ContainerRunning as i32, "running"),
    (cri::ContainerState::ContainerExited as i32, "exited"),
    (cri::ContainerState::ContainerUnknown as i32, "unknown"),
];

/// What a pod worker's sync was for, upstream's `SyncPodType`: the `operation_type` of
/// `kubelet_pod_worker_duration_seconds`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncType {
    /// The first sync of a pod this kubelet has not synced before.
    Create,
    /// A sync asked for by a change (of the pod, its containers or its probes).
    Update,
    /// The periodic resync.
    Sync,
    /// A sync of a pod being deleted.
    Kill,
}

impl SyncType {
    pub fn as_str(self) -> &'static str {
        match self {
            SyncType::Create => "create",
            SyncType::Update => "update",
            SyncType::Sync => "sync",
            SyncType::Kill => "kill",
        }
    }
}

/// Runtime (CRI) call metrics, recorded by [`crate::runtime::Instrumented`] for every call.
#[derive(Clone)]
pub struct RuntimeMetrics {
    operations: IntCounterVec,
    duration: HistogramVec,
    errors: IntCounterVec,
    run_sandbox_duration: HistogramVec,
    run_sandbox_errors: IntCounterVec,
    started_pods: IntCounter,
    started_pods_errors: IntCounter,
}

impl RuntimeMetrics {
    /// One CRI call of `operation` (upstream's `operation_type`, e.g. `run_podsandbox`).
    pub fn record(&self, operation: &str, took: Duration, failed: bool) {
        self.operations.with_label_values(&[operation]).inc();
        self.duration
            .with_label_values(&[operation])
            .observe(took.as_secs_f64());
        if failed {
            self.errors.with_label_values(&[operation]).inc();
        }
    }

    /// One RunPodSandbox with `handler` (the RuntimeClass's, empty for the default): a pod
    /// started, as upstream counts `kubelet_started_pods_total`.
    pub fn record_run_sandbox(&self, handler: &str, took: Duration, failed: bool) {
        self.run_sandbox_duration
            .with_label_values(&[handler])
            .observe(took.as_secs_f64());
        self.started_pods.inc();
        if failed {
            self.run_sandbox_errors.with_label_values(&[handler]).inc();
            self.started_pods_errors.inc();
        }
    }
}

/// One kubelet's metrics.
pub struct KubeletMetrics {
    registry: Registry,
    pub runtime: RuntimeMetrics,
    running_pods: IntGauge,
    running_containers: IntGaugeVec,
    pod_start_duration: Histogram,
    pod_worker_duration: HistogramVec,
    /// When this kubelet first saw each pod (by UID) that has not been seen running yet:
    /// upstream's `kubernetes.io/config.seen`, where pod start latency counts from.
    first_seen: Mutex<HashMap<String, Instant>>,
}

fn alpha(help: &str) -> String {
    format!("[ALPHA] {help}")
}

impl KubeletMetrics {
    pub fn new(node_name: &str) -> KubeletMetrics {
        let registry = Registry::new();
        let node = IntGaugeVec::new(
            Opts::new(
                "kubelet_node_name",
                alpha("The node's name. The count is always 1."),
            ),
            &["node"],
        )
        .expect("metric");
        node.with_label_values(&[node_name]).set(1);
        let running_pods = IntGauge::new(
            "kubelet_running_pods",
            alpha("Number of pods that have a running pod sandbox"),
        )
        .expect("metric");
        let running_containers = IntGaugeVec::new(
            Opts::new(
                "kubelet_running_containers",
                alpha("Number of containers currently running"),
            ),
            &["container_state"],
        )
        .expect("metric");
        let pod_start_duration = Histogram::with_opts(
            HistogramOpts::new(
                "kubelet_pod_start_duration_seconds",
                alpha(
                    "Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run",
                ),
            )
            .buckets(POD_START_BUCKETS.to_vec()),
        )
        .expect("metric");
        let pod_worker_duration = HistogramVec::new(
            HistogramOpts::new(
                "kubelet_pod_worker_duration_seconds",
                alpha(
                    "Duration in seconds to sync a single pod. Broken down by operation type: create, update, or sync",
                ),
            ),
            &["operation_type"],
        )
        .expect("metric");
        let runtime = RuntimeMetrics {
            operations: IntCounterVec::new(
                Opts::new(
                    "kubelet_runtime_operations_total",
                    alpha("Cumulative number of runtime operations by operation type."),
                ),
                &["operation_type"],
            )
            .expect("metric"),
            duration: HistogramVec::new(
                HistogramOpts::new(
                    "kubelet_runtime_operations_duration_seconds",
                    alpha("Duration in seconds of runtime operations. Broken down by operation type."),
                )
                .buckets(prometheus::exponential_buckets(0.005, 2.5, 14).expect("buckets")),
                &["operation_type"],
            )
            .expect("metric"),
            errors: IntCounterVec::new(
                Opts::new(
                    "kubelet_runtime_operations_errors_total",
                    alpha("Cumulative number of runtime operation errors by operation type."),
                ),
                &["operation_type"],
            )
            .expect("metric"),
            run_sandbox_duration: HistogramVec::new(
                HistogramOpts::new(
                    "kubelet_run_podsandbox_duration_seconds",
                    alpha(
                        "Duration in seconds of the run_podsandbox operations. Broken down by RuntimeClass.Handler.",
                    ),
                ),
                &["runtime_handler"],
            )
            .expect("metric"),
            run_sandbox_errors: IntCounterVec::new(
                Opts::new(
                    "kubelet_run_podsandbox_errors_total",
                    alpha(
                        "Cumulative number of the run_podsandbox operation errors by RuntimeClass.Handler.",
                    ),
                ),
                &["runtime_handler"],
            )
            .expect("metric"),
            started_pods: IntCounter::new(
                "kubelet_started_pods_total",
                alpha("Cumulative number of pods started"),
            )
            .expect("metric"),
            started_pods_errors: IntCounter::new(
                "kubelet_started_pods_errors_total",
                alpha("Cumulative number of errors when starting pods"),
            )
            .expect("metric"),
        };
        for c in [
            Box::new(node) as Box<dyn prometheus::core::Collector>,
            Box::new(running_pods.clone()),
            Box::new(running_containers.clone()),
            Box::new(pod_start_duration.clone()),
            Box::new(pod_worker_duration.clone()),
            Box::new(runtime.operations.clone()),
            Box::new(runtime.duration.clone()),
            Box::new(runtime.errors.clone()),
            Box::new(runtime.run_sandbox_duration.clone()),
            Box::new(runtime.run_sandbox_errors.clone()),
            Box::new(runtime.started_pods.clone()),
            Box::new(runtime.started_pods_errors.clone()),
        ] {
            registry.register(c).expect("metric registered once");
        }
        KubeletMetrics {
            registry,
            runtime,
            running_pods,
            running_containers,
            pod_start_duration,
            pod_worker_duration,
            first_seen: Mutex::new(HashMap::new()),
        }
    }

    /// The pod with `uid` is known to this kubelet from now on, unless it was already.
    pub fn pod_seen(&self, uid: &str) {
        self.first_seen
            .lock()
            .expect("first seen")
            .entry(uid.to_string())
            .or_insert_with(Instant::now);
    }

    /// The pod went from Pending to Running: its start latency, once.
    pub fn pod_running(&self, uid: &str) {
        if let Some(seen) = self.first_seen.lock().expect("first seen").remove(uid) {
            self.pod_start_duration
                .observe(seen.elapsed().as_secs_f64());
        }
    }

    /// The pod is gone from this node.
    pub fn pod_forgotten(&self, uid: &str) {
        self.first_seen.lock().expect("first seen").remove(uid);
    }

    /// One pod sync of `kind` that took `took`.
    pub fn pod_synced(&self, kind: SyncType, took: Duration) {
        self.pod_worker_duration
            .with_label_values(&[kind.as_str()])
            .observe(took.as_secs_f64());
    }

    /// What the runtime runs, from one listing (upstream's PLEG relist): ready sandboxes, and
    /// containers by state.
    pub fn observe_runtime(&self, sandboxes: &[cri::PodSandbox], containers: &[cri::Container]) {
        let ready = sandboxes
            .iter()
            .filter(|s| s.state == cri::PodSandboxState::SandboxReady as i32)
            .count();
        self.running_pods.set(ready as i64);
        for (state, name) in CONTAINER_STATES {
            let n = containers.iter().filter(|c| c.state == *state).count();
            self.running_containers
                .with_label_values(&[name])
                .set(n as i64);
        }
    }

    /// The text exposition of `/metrics`: this kubelet's metrics and the process's.
    pub fn render(&self) -> String {
        let mut families = self.registry.gather();
        families.extend(process_families());
        encode(&families)
    }
}

/// `process_*` of this process, as the default registry's process collector reads them.
pub fn process_families() -> Vec<MetricFamily> {
    prometheus::gather()
        .into_iter()
        .filter(|f| f.name().starts_with("process_"))
        .collect()
}

/// Prometheus text exposition of `families`, leaving out the empty ones (the encoder refuses
/// them).
pub fn encode(families: &[MetricFamily]) -> String {
    let families: Vec<MetricFamily> = families
        .iter()
        .filter(|f| !f.get_metric().is_empty())
        .cloned()
        .collect();
    TextEncoder::new()
        .encode_to_string(&families)
        .expect("text encoding")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
    }

    #[test]
    fn runtime_operations_are_counted_timed_and_failures_counted() {
        let m = KubeletMetrics::new("n1");
        m.runtime
            .record("list_containers", Duration::from_millis(3), false);
        m.runtime
            .record("list_containers", Duration::from_millis(30), true);
        m.runtime
            .record_run_sandbox("", Duration::from_millis(300), true);
        let text = m.render();
        let ops = "{operation_type=\"list_containers\"}";
        assert_eq!(
            sample(&text, &format!("kubelet_runtime_operations_total{ops}")),
            Some(2.0)
        );
        assert_eq!(
            sample(
                &text,
                &format!("kubelet_runtime_operations_errors_total{ops}")
            ),
            Some(1.0)
        );
        // Upstream's buckets: 0.005 * 2.5^n, 14 of them.
        assert_eq!(
            sample(
                &text,
                "kubelet_runtime_operations_duration_seconds_bucket{operation_type=\"list_containers\",le=\"0.005\"}"
            ),
            Some(1.0)
        );
        assert!(text.contains("le=\"745.0580596923828\""), "{text}");
        assert_eq!(sample(&text, "kubelet_started_pods_total"), Some(1.0));
        assert_eq!(
            sample(&text, "kubelet_started_pods_errors_total"),
            Some(1.0)
        );
        assert_eq!(
            sample(
                &text,
                "kubelet_run_podsandbox_errors_total{runtime_handler=\"\"}"
            ),
            Some(1.0)
        );
        assert_eq!(sample(&text, "kubelet_node_name{node=\"n1\"}"), Some(1.0));
        assert!(text.contains(
            "# HELP kubelet_runtime_operations_total [ALPHA] Cumulative number of runtime operations by operation type.\n"
        ));
    }

    #[test]
    fn pod_start_is_observed_once_from_first_sight() {
        let m = KubeletMetrics::new("n1");
        m.pod_running("never-seen");
        m.pod_seen("u1");
        m.pod_seen("u1");
        m.pod_running("u1");
        m.pod_running("u1");
        let text = m.render();
        assert_eq!(
            sample(&text, "kubelet_pod_start_duration_seconds_count"),
            Some(1.0)
        );
        assert_eq!(
            sample(
                &text,
                "kubelet_pod_start_duration_seconds_bucket{le=\"0.5\"}"
            ),
            Some(1.0)
        );
        assert!(text.contains("le=\"3600\""), "{text}");
        m.pod_seen("u2");
        m.pod_forgotten("u2");
        m.pod_running("u2");
        assert_eq!(
            sample(&m.render(), "kubelet_pod_start_duration_seconds_count"),
            Some(1.0)
        );
    }

    #[test]
    fn runtime_listing_sets_running_pods_and_containers() {
        let m = KubeletMetrics::new("n1");
        let sandbox = |state: cri::PodSandboxState| cri::PodSandbox {
            state: state as i32,
            ..Default::default()
        };
        let container = |state: cri::ContainerState| cri::Container {
            state: state as i32,
            ..Default::default()
        };
        m.observe_runtime(
            &[
                sandbox(cri::PodSandboxState::SandboxReady),
                sandbox(cri::PodSandboxState::SandboxNotready),
            ],
            &[
                container(cri::ContainerState::ContainerRunning),
                container(cri::ContainerState::ContainerRunning),
                container(cri::ContainerState::ContainerExited),
            ],
        );
        let text = m.render();
        assert_eq!(sample(&text, "kubelet_running_pods"), Some(1.0));
        let state = |s: &str| {
            sample(
                &text,
                &format!("kubelet_running_containers{{container_state=\"{s}\"}}"),
            )
        };
        assert_eq!(state("running"), Some(2.0));
        assert_eq!(state("exited"), Some(1.0));
        assert_eq!(state("created"), Some(0.0));
        m.pod_synced(SyncType::Create, Duration::from_millis(20));
        assert_eq!(
            sample(
                &m.render(),
                "kubelet_pod_worker_duration_seconds_count{operation_type=\"create\"}"
            ),
            Some(1.0)
        );
    }
}
