//! The kubelet's Prometheus endpoints, all authorized as `nodes/metrics`: `/metrics` (its own,
//! [`crate::metrics`]), `/metrics/cadvisor` ([`super::cadvisor`]), `/metrics/node` (the node
//! exporter's, [`super::node_exporter`]) and `/metrics/resource`, what metrics-server scrapes:
//! upstream's resource metrics (stable names, labels and help), drawn from the same
//! CPU-and-memory summary as `/stats/summary` and `kubectl top`, each sample stamped with the
//! time it was measured.

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
use jiff::Timestamp;

use super::exposition::{Families, Family};
use super::stats::{ContainerStats, CpuStats, MemoryStats, PodStats, Summary};
use super::{KubeletServer, SummaryScope, cadvisor, collect_summary, node_exporter};

/// A value and when it was measured, when there is one.
type Reading = Option<(f64, Option<i64>)>;

fn millis(t: &str) -> Option<i64> {
    t.parse::<Timestamp>().ok().map(|t| t.as_millisecond())
}

fn cpu_seconds(c: &Option<CpuStats>) -> Reading {
    c.as_ref().and_then(|c| {
        c.usage_core_nano_seconds
            .map(|n| (n as f64 / 1e9, millis(&c.time)))
    })
}

fn working_set(m: &Option<MemoryStats>) -> Reading {
    m.as_ref()
        .and_then(|m| m.working_set_bytes.map(|b| (b as f64, millis(&m.time))))
}

fn per_container(
    name: &str,
    help: &str,
    counter: bool,
    s: &Summary,
    field: impl Fn(&ContainerStats) -> Reading,
) -> Family {
    let mut f = if counter {
        Family::counter(name, help)
    } else {
        Family::gauge(name, help)
    };
    for p in &s.pods {
        for c in &p.containers {
            if let Some((v, ts)) = field(c) {
                let labels = [
                    ("container", c.name.as_str()),
                    ("namespace", p.pod_ref.namespace.as_str()),
                    ("pod", p.pod_ref.name.as_str()),
                ];
                f.sample(&labels, v, ts);
            }
        }
    }
    f
}

fn per_pod(
    name: &str,
    help: &str,
    counter: bool,
    s: &Summary,
    field: impl Fn(&PodStats) -> Reading,
) -> Family {
    let mut f = if counter {
        Family::counter(name, help)
    } else {
        Family::gauge(name, help)
    };
    for p in &s.pods {
        if let Some((v, ts)) = field(p) {
            let labels = [
                ("namespace", p.pod_ref.namespace.as_str()),
                ("pod", p.pod_ref.name.as_str()),
            ];
            f.sample(&labels, v, ts);
        }
    }
    f
}

/// `/metrics/resource` from the summary; `None` (it could not be read) is a scrape error.
pub fn resource(s: Option<&Summary>) -> String {
    let mut out = Families::default();
    let empty = Summary::default();
    let sum = s.unwrap_or(&empty);
    out.push(per_container(
        "container_cpu_usage_seconds_total",
        "[STABLE] Cumulative cpu time consumed by the container in core-seconds",
        true,
        sum,
        |c| cpu_seconds(&c.cpu),
    ));
    out.push(per_container(
        "container_memory_working_set_bytes",
        "[STABLE] Current working set of the container in bytes",
        false,
        sum,
        |c| working_set(&c.memory),
    ));
    out.push(per_container(
        "container_start_time_seconds",
        "[STABLE] Start time of the container since unix epoch in seconds",
        false,
        sum,
        |c| millis(&c.start_time).map(|ms| (ms as f64 / 1000.0, None)),
    ));
    let mut node_cpu = Family::counter(
        "node_cpu_usage_seconds_total",
        "[STABLE] Cumulative cpu time consumed by the node in core-seconds",
    );
    if let Some((v, ts)) = cpu_seconds(&sum.node.cpu) {
        node_cpu.sample(&[], v, ts);
    }
    out.push(node_cpu);
    let mut node_memory = Family::gauge(
        "node_memory_working_set_bytes",
        "[STABLE] Current working set of the node in bytes",
    );
    if let Some((v, ts)) = working_set(&sum.node.memory) {
        node_memory.sample(&[], v, ts);
    }
    out.push(node_memory);
    out.push(per_pod(
        "pod_cpu_usage_seconds_total",
        "[STABLE] Cumulative cpu time consumed by the pod in core-seconds",
        true,
        sum,
        |p| cpu_seconds(&p.cpu),
    ));
    out.push(per_pod(
        "pod_memory_working_set_bytes",
        "[STABLE] Current working set of the pod in bytes",
        false,
        sum,
        |p| working_set(&p.memory),
    ));
    let mut error = Family::gauge(
        "resource_scrape_error",
        "[STABLE] 1 if there was an error while getting container metrics, 0 otherwise",
    );
    error.sample(&[], if s.is_some() { 0.0 } else { 1.0 }, None);
    out.push(error);
    out.encode()
}

/// A Prometheus text exposition.
fn exposition(text: String) -> Response {
    let mut resp = text.into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    resp
}

pub(super) async fn resource_handler(State(k): State<Arc<KubeletServer>>) -> Response {
    let summary = collect_summary(&k, SummaryScope::CpuAndMemory).await;
    if let Err(e) = &summary {
        tracing::warn!(error = %e, "collecting resource metrics failed");
    }
    exposition(resource(summary.as_ref().ok()))
}

/// cAdvisor's metrics of this node's cgroups (none on a kubelet that leaves the host alone).
pub(super) async fn cadvisor_handler(State(k): State<Arc<KubeletServer>>) -> Response {
    let rt = &k.shared.runtime;
    let config = &k.shared.config;
    let proc = std::path::Path::new("/proc");
    let (sandboxes, containers) = tokio::join!(rt.list_pod_sandboxes(), rt.list_containers());
    let listed = match (sandboxes, containers) {
        (Ok(s), Ok(c)) => Some((s, c)),
        (Err(e), _) | (_, Err(e)) => {
            tracing::warn!(error = %e, "listing the runtime for cAdvisor metrics failed");
            None
        }
    };
    let readings = listed.map(|(sandboxes, containers)| match config.manage_host {
        true => cadvisor::Scan {
            cgroups: &config.cgroups_path,
            cgroup_root: &config.cgroup_root,
            proc,
            sandboxes: &sandboxes,
            containers: &containers,
        }
        .collect(),
        false => Vec::new(),
    });
    let now = jiff::Timestamp::now().as_millisecond();
    exposition(cadvisor::render(
        readings.as_deref(),
        &cadvisor::Machine::local(proc),
        now,
    ))
}

pub(super) async fn kubelet_handler(State(k): State<Arc<KubeletServer>>) -> Response {
    exposition(k.shared.metrics.render())
}

/// The node exporter's metrics of this host.
pub(super) async fn node_handler(State(k): State<Arc<KubeletServer>>) -> Response {
    let sources = node_exporter::Sources {
        proc: "/proc".into(),
        kubelet_root: k.shared.config.root_dir.clone(),
    };
    // statvfs of every filesystem may block (a hung network mount): off the async runtime.
    let collected = tokio::task::spawn_blocking(move || {
        node_exporter::collect(&sources, jiff::Timestamp::now())
    })
    .await;
    match collected {
        Ok(body) => exposition(body),
        Err(e) => super::text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::super::stats::{NodeStats, PodReference};
    use super::*;

    fn summary() -> Summary {
        Summary {
            node: NodeStats {
                node_name: "n".into(),
                cpu: Some(CpuStats {
                    time: "2024-05-01T10:00:00Z".into(),
                    usage_nano_cores: Some(5),
                    usage_core_nano_seconds: Some(2_500_000_000),
                }),
                ..Default::default()
            },
            pods: vec![PodStats {
                pod_ref: PodReference {
                    name: "p".into(),
                    namespace: "ns".into(),
                    uid: "u".into(),
                },
                containers: vec![ContainerStats {
                    name: "c".into(),
                    start_time: "2024-05-01T09:00:00Z".into(),
                    memory: Some(MemoryStats {
                        time: "2024-05-01T10:00:00Z".into(),
                        working_set_bytes: Some(1024),
                        usage_bytes: Some(2048),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }

    #[test]
    fn resource_metrics_text() {
        let text = resource(Some(&summary()));
        assert!(text.contains("node_cpu_usage_seconds_total 2.5 1714557600000\n"));
        assert!(text.contains(
            "container_memory_working_set_bytes{container=\"c\",namespace=\"ns\",pod=\"p\"} 1024 1714557600000\n"
        ));
        assert!(text.contains(
            "container_start_time_seconds{container=\"c\",namespace=\"ns\",pod=\"p\"} 1714554000\n"
        ));
        assert!(text.contains(
            "# HELP container_memory_working_set_bytes [STABLE] Current working set of the container in bytes\n"
        ));
        assert!(text.contains("resource_scrape_error 0\n"));
        // Nothing measured: no samples, and the family is left out.
        assert!(!text.contains("pod_cpu_usage_seconds_total"));
        let failed = resource(None);
        assert!(failed.contains("resource_scrape_error 1\n"));
        assert!(!failed.contains("container_"));
    }
}
