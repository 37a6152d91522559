//! Functions' metrics under Knative Serving's names and labels, so that dashboards and
//! alerts written for Knative read minik8s's unchanged: the router plays the queue-proxy
//! (`revision_request_*`, every request a revision serves) and the activator
//! (`activator_request_*`, the requests it held while the revision had no pod), the
//! autoscaler its own (`autoscaler_*_pods`, the KPA's windows). Knative has no counter of
//! cold starts, so that one is minik8s's: `minik8s_revision_cold_starts_total`.
//!
//! One registry per process, apart from the process's default one: every node's function
//! gateway serves it at `/metrics` (the router's series of that node, and the autoscaler's
//! where the knative-lite controllers run), without the metrics of the other components
//! that share the process in an all-in-one server.

use std::sync::LazyLock;
use std::time::Duration;

use http::StatusCode;
use kube::ResourceExt;
use prometheus::{
    Encoder, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

use crate::serving::{Revision, labels};

/// Knative's request latency buckets, in milliseconds (`defaultLatencyDistribution`).
pub const LATENCY_BUCKETS_MS: &[f64] = &[
    5.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 150.0, 200.0, 250.0, 300.0, 350.0, 400.0, 450.0,
    500.0, 600.0, 700.0, 800.0, 900.0, 1000.0, 2000.0, 5000.0, 10000.0, 20000.0, 50000.0, 100000.0,
];

/// Knative's labels of a revision's series (`metrics.CommonRevisionKeys`).
const REVISION_KEYS: &[&str] = &[
    "namespace_name",
    "service_name",
    "configuration_name",
    "revision_name",
];
const REQUEST_KEYS: &[&str] = &[
    "namespace_name",
    "service_name",
    "configuration_name",
    "revision_name",
    "response_code",
    "response_code_class",
];

/// Knative's value of a label it has no value for (`metricskey.ValueUnknown`).
const UNKNOWN: &str = "unknown";

/// Whom a series is about: a revision, and the Service and Configuration it belongs to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RevisionLabels {
    pub namespace: String,
    pub service: String,
    pub configuration: String,
    pub revision: String,
}

impl RevisionLabels {
    /// From the revision's own labels, as Knative tags its measurements.
    pub fn of(rev: &Revision) -> RevisionLabels {
        let get = |k: &str| {
            rev.labels()
                .get(k)
                .filter(|v| !v.is_empty())
                .cloned()
                .unwrap_or_else(|| UNKNOWN.into())
        };
        RevisionLabels {
            namespace: rev.namespace().unwrap_or_default(),
            service: get(labels::SERVICE),
            configuration: get(labels::CONFIGURATION),
            revision: rev.name_any(),
        }
    }

    /// For a revision known by name only.
    pub fn named(namespace: &str, revision: &str) -> RevisionLabels {
        RevisionLabels {
            namespace: namespace.into(),
            service: UNKNOWN.into(),
            configuration: UNKNOWN.into(),
            revision: revision.into(),
        }
    }

    fn values(&self) -> [&str; 4] {
        [
            &self.namespace,
            &self.service,
            &self.configuration,
            &self.revision,
        ]
    }
}

/// How a cold start brought the revision its first pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColdStart {
    /// A warm pod of the namespace's pool, loaded with the function.
    Pool,
    /// The revision's Deployment, scaled from zero.
    Deployment,
}

impl ColdStart {
    fn as_str(self) -> &'static str {
        match self {
            ColdStart::Pool => "pool",
            ColdStart::Deployment => "deployment",
        }
    }
}

/// One autoscaler tick's numbers for a revision.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Scaling {
    pub desired: i32,
    pub requested: i32,
    pub actual: i32,
    /// The averages over the stable and panic windows, and the target per pod, of the
    /// revision's metric (concurrency or requests per second).
    pub stable: f64,
    pub panic: f64,
    pub target: f64,
    pub rps: bool,
    pub panicking: bool,
}

pub struct Metrics {
    registry: Registry,
    revision_requests: IntCounterVec,
    revision_latencies: HistogramVec,
    activator_requests: IntCounterVec,
    activator_latencies: HistogramVec,
    cold_starts: IntCounterVec,
    desired_pods: IntGaugeVec,
    requested_pods: IntGaugeVec,
    actual_pods: IntGaugeVec,
    panic_mode: IntGaugeVec,
    stable_concurrency: GaugeVec,
    panic_concurrency: GaugeVec,
    target_concurrency: GaugeVec,
    stable_rps: GaugeVec,
    panic_rps: GaugeVec,
    target_rps: GaugeVec,
}

fn counter(registry: &Registry, name: &str, help: &str, keys: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help), keys).expect("a valid metric");
    registry
        .register(Box::new(c.clone()))
        .expect("registered once");
    c
}

fn histogram(registry: &Registry, name: &str, help: &str) -> HistogramVec {
    let h = HistogramVec::new(
        HistogramOpts::new(name, help).buckets(LATENCY_BUCKETS_MS.to_vec()),
        REQUEST_KEYS,
    )
    .expect("a valid metric");
    registry
        .register(Box::new(h.clone()))
        .expect("registered once");
    h
}

fn int_gauge(registry: &Registry, name: &str, help: &str) -> IntGaugeVec {
    let g = IntGaugeVec::new(Opts::new(name, help), REVISION_KEYS).expect("a valid metric");
    registry
        .register(Box::new(g.clone()))
        .expect("registered once");
    g
}

fn gauge(registry: &Registry, name: &str, help: &str) -> GaugeVec {
    let g = GaugeVec::new(Opts::new(name, help), REVISION_KEYS).expect("a valid metric");
    registry
        .register(Box::new(g.clone()))
        .expect("registered once");
    g
}

impl Metrics {
    fn new() -> Metrics {
        let r = Registry::new();
        Metrics {
            revision_requests: counter(
                &r,
                "revision_request_count",
                "The number of requests that are routed to queue-proxy",
                REQUEST_KEYS,
            ),
            revision_latencies: histogram(
                &r,
                "revision_request_latencies",
                "The response time in millisecond",
            ),
            activator_requests: counter(
                &r,
                "activator_request_count",
                "The number of requests that are routed to Activator",
                REQUEST_KEYS,
            ),
            activator_latencies: histogram(
                &r,
                "activator_request_latencies",
                "The response time in millisecond",
            ),
            cold_starts: counter(
                &r,
                "minik8s_revision_cold_starts_total",
                "Requests that found their revision without a pod and brought it one, by where the pod came from (pool or deployment)",
                &[REVISION_KEYS, &["source"]].concat(),
            ),
            desired_pods: int_gauge(
                &r,
                "autoscaler_desired_pods",
                "Number of pods autoscaler wants to allocate",
            ),
            requested_pods: int_gauge(
                &r,
                "autoscaler_requested_pods",
                "Number of pods autoscaler requested from Kubernetes",
            ),
            actual_pods: int_gauge(
                &r,
                "autoscaler_actual_pods",
                "Number of pods that are allocated currently",
            ),
            panic_mode: int_gauge(
                &r,
                "autoscaler_panic_mode",
                "1 if autoscaler is in panic mode, 0 otherwise",
            ),
            stable_concurrency: gauge(
                &r,
                "autoscaler_stable_request_concurrency",
                "Average of requests count per observed pod over the stable window",
            ),
            panic_concurrency: gauge(
                &r,
                "autoscaler_panic_request_concurrency",
                "Average of requests count per observed pod over the panic window",
            ),
            target_concurrency: gauge(
                &r,
                "autoscaler_target_concurrency_per_pod",
                "The desired number of concurrent requests for each pod",
            ),
            stable_rps: gauge(
                &r,
                "autoscaler_stable_requests_per_second",
                "Average requests-per-second per observed pod over the stable window",
            ),
            panic_rps: gauge(
                &r,
                "autoscaler_panic_requests_per_second",
                "Average requests-per-second per observed pod over the panic window",
            ),
            target_rps: gauge(
                &r,
                "autoscaler_target_requests_per_second",
                "The desired requests-per-second for each pod",
            ),
            registry: r,
        }
    }

    /// A request answered with `status` after `elapsed`; `held`: it waited for the
    /// revision's first pod (the activator's).
    pub fn request(&self, who: &RevisionLabels, status: StatusCode, elapsed: Duration, held: bool) {
        let code = status.as_u16().to_string();
        let class = format!("{}xx", status.as_u16() / 100);
        let [ns, svc, cfg, rev] = who.values();
        let values = [ns, svc, cfg, rev, code.as_str(), class.as_str()];
        let ms = elapsed.as_secs_f64() * 1000.0;
        self.revision_requests.with_label_values(&values).inc();
        self.revision_latencies
            .with_label_values(&values)
            .observe(ms);
        if held {
            self.activator_requests.with_label_values(&values).inc();
            self.activator_latencies
                .with_label_values(&values)
                .observe(ms);
        }
    }

    pub fn cold_start(&self, who: &RevisionLabels, source: ColdStart) {
        let [ns, svc, cfg, rev] = who.values();
        self.cold_starts
            .with_label_values(&[ns, svc, cfg, rev, source.as_str()])
            .inc();
    }

    /// The autoscaler's view of a revision after a tick.
    pub fn scaling(&self, who: &RevisionLabels, s: &Scaling) {
        let v = who.values();
        self.desired_pods
            .with_label_values(&v)
            .set(i64::from(s.desired));
        self.requested_pods
            .with_label_values(&v)
            .set(i64::from(s.requested));
        self.actual_pods
            .with_label_values(&v)
            .set(i64::from(s.actual));
        self.panic_mode
            .with_label_values(&v)
            .set(i64::from(s.panicking));
        let (stable, panic, target) = if s.rps {
            (&self.stable_rps, &self.panic_rps, &self.target_rps)
        } else {
            (
                &self.stable_concurrency,
                &self.panic_concurrency,
                &self.target_concurrency,
            )
        };
        stable.with_label_values(&v).set(s.stable);
        panic.with_label_values(&v).set(s.panic);
        target.with_label_values(&v).set(s.target);
    }

    /// Drops the autoscaler's series of a revision it no longer scales.
    pub fn forget(&self, who: &RevisionLabels) {
        let v = who.values();
        for g in [
            &self.desired_pods,
            &self.requested_pods,
            &self.actual_pods,
            &self.panic_mode,
        ] {
            let _ = g.remove_label_values(&v);
        }
        for g in [
            &self.stable_concurrency,
            &self.panic_concurrency,
            &self.target_concurrency,
            &self.stable_rps,
            &self.panic_rps,
            &self.target_rps,
        ] {
            let _ = g.remove_label_values(&v);
        }
    }

    /// The Prometheus text exposition of every series.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut out) {
            tracing::warn!(error = %e, "encoding the functions' metrics failed");
        }
        out
    }
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// This process's functions metrics.
pub fn metrics() -> &'static Metrics {
    &METRICS
}

/// The content type of [`Metrics::encode`]'s text.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_count(text: &str, name: &str, revision: &str) -> Option<f64> {
        text.lines()
            .find(|l| l.starts_with(name) && l.contains(&format!("revision_name=\"{revision}\"")))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    }

    #[test]
    fn knative_names_and_labels() {
        let mut rev = Revision::new("hello-00001", Default::default());
        rev.metadata.namespace = Some("team-a".into());
        rev.metadata.labels = Some(
            [
                (labels::SERVICE.to_string(), "hello".to_string()),
                (labels::CONFIGURATION.to_string(), "hello".to_string()),
            ]
            .into(),
        );
        let who = RevisionLabels::of(&rev);
        let m = metrics();
        m.request(&who, StatusCode::OK, Duration::from_millis(30), false);
        m.request(
            &who,
            StatusCode::SERVICE_UNAVAILABLE,
            Duration::from_millis(3),
            true,
        );
        m.cold_start(&who, ColdStart::Pool);
        m.scaling(
            &who,
            &Scaling {
                desired: 2,
                requested: 2,
                actual: 1,
                stable: 1.5,
                panic: 3.0,
                target: 1.0,
                rps: false,
                panicking: true,
            },
        );
        let text = String::from_utf8(m.encode()).unwrap();
        assert!(text.contains(
            "revision_request_count{configuration_name=\"hello\",namespace_name=\"team-a\",response_code=\"200\",response_code_class=\"2xx\",revision_name=\"hello-00001\",service_name=\"hello\"} 1"
        ), "{text}");
        assert!(text.contains(
            "activator_request_count{configuration_name=\"hello\",namespace_name=\"team-a\",response_code=\"503\",response_code_class=\"5xx\",revision_name=\"hello-00001\",service_name=\"hello\"} 1"
        ), "{text}");
        // 30 ms falls in Knative's 40 ms bucket, not its 20 ms one.
        let bucket = |le: &str| {
            text.lines()
                .find(|l| {
                    l.starts_with("revision_request_latencies_bucket")
                        && l.contains("revision_name=\"hello-00001\"")
                        && l.contains("response_code=\"200\"")
                        && l.contains(&format!("le=\"{le}\""))
                })
                .and_then(|l| l.rsplit(' ').next())
                .map(str::to_string)
        };
        assert_eq!(bucket("20").as_deref(), Some("0"), "{text}");
        assert_eq!(bucket("40").as_deref(), Some("1"), "{text}");
        assert_eq!(
            sample_count(&text, "autoscaler_desired_pods", "hello-00001"),
            Some(2.0)
        );
        assert_eq!(
            sample_count(&text, "autoscaler_panic_mode", "hello-00001"),
            Some(1.0)
        );
        assert_eq!(
            sample_count(&text, "minik8s_revision_cold_starts_total", "hello-00001"),
            Some(1.0)
        );
        m.forget(&who);
        let text = String::from_utf8(m.encode()).unwrap();
        assert_eq!(
            sample_count(&text, "autoscaler_desired_pods", "hello-00001"),
            None
        );
        // A revision known by name only is Knative's "unknown" service.
        assert_eq!(RevisionLabels::named("ns", "r").service, "unknown");
    }
}
