//! The kubelet's Prometheus endpoints, in upstream's metric names so dashboards and suites
//! written for Kubernetes read them unchanged: `/metrics/resource` (what metrics-server
//! scrapes), `/metrics/cadvisor` (per-container usage as cAdvisor names it) and `/metrics`
//! (the kubelet's own gauges). All three are drawn from one stats summary, so they agree
//! with `/stats/summary` and `kubectl top`; labels this kubelet cannot know (cAdvisor's
//! `id`, `image`) are left out rather than filled with guesses.

use std::fmt::Write as _;

use jiff::Timestamp;

use super::stats::{ContainerStats, CpuStats, MemoryStats, PodStats, Summary};

/// One sample: its `{labels}`, its value, and when it was measured (ms since the epoch).
type Sample = (String, f64, Option<i64>);

/// A value and when it was measured, when there is one.
type Reading = Option<(f64, Option<i64>)>;

/// A Prometheus text exposition being written.
#[derive(Default)]
struct Text(String);

impl Text {
    /// A metric family; `help` carries upstream's stability prefix where it has one.
    fn family(&mut self, name: &str, kind: &str, help: &str, samples: Vec<Sample>) {
        let out = &mut self.0;
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for (labels, v, ts) in samples {
            let _ = match ts {
                Some(ts) => writeln!(out, "{name}{labels} {v} {ts}"),
                None => writeln!(out, "{name}{labels} {v}"),
            };
        }
    }
}

fn millis(t: &str) -> Option<i64> {
    t.parse::<Timestamp>().ok().map(|t| t.as_millisecond())
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn container_labels(p: &PodStats, c: &ContainerStats) -> String {
    format!(
        "{{container=\"{}\",namespace=\"{}\",pod=\"{}\"}}",
        escape(&c.name),
        escape(&p.pod_ref.namespace),
        escape(&p.pod_ref.name)
    )
}

fn cpu_seconds(c: &Option<CpuStats>) -> Reading {
    c.as_ref().and_then(|c| {
        c.usage_core_nano_seconds
            .map(|n| (n as f64 / 1e9, millis(&c.time)))
    })
}

fn memory(m: &Option<MemoryStats>, field: fn(&MemoryStats) -> Option<u64>) -> Reading {
    m.as_ref()
        .and_then(|m| field(m).map(|b| (b as f64, millis(&m.time))))
}

/// Every container's `field`, labelled.
fn per_container(s: &Summary, field: impl Fn(&ContainerStats) -> Reading) -> Vec<Sample> {
    s.pods
        .iter()
        .flat_map(|p| {
            p.containers
                .iter()
                .filter_map(|c| field(c).map(|(v, ts)| (container_labels(p, c), v, ts)))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// `/metrics/resource`: upstream's resource metrics, each sample stamped with the time it was
/// measured.
pub fn resource(s: Option<&Summary>) -> String {
    let mut out = Text::default();
    let empty = Summary::default();
    let sum = s.unwrap_or(&empty);
    let working_set = |m: &Option<MemoryStats>| memory(m, |m| m.working_set_bytes);
    let pod_labels = |p: &PodStats| {
        format!(
            "{{namespace=\"{}\",pod=\"{}\"}}",
            escape(&p.pod_ref.namespace),
            escape(&p.pod_ref.name)
        )
    };
    out.family(
        "container_cpu_usage_seconds_total",
        "counter",
        "[STABLE] Cumulative cpu time consumed by the container in core-seconds",
        per_container(sum, |c| cpu_seconds(&c.cpu)),
    );
    out.family(
        "container_memory_working_set_bytes",
        "gauge",
        "[STABLE] Current working set of the container in bytes",
        per_container(sum, |c| working_set(&c.memory)),
    );
    out.family(
        "container_start_time_seconds",
        "gauge",
        "[STABLE] Start time of the container since unix epoch in seconds",
        per_container(sum, |c| {
            millis(&c.start_time).map(|ms| (ms as f64 / 1000.0, None))
        }),
    );
    let node = |v: Reading| -> Vec<Sample> {
        v.map(|(v, ts)| (String::new(), v, ts))
            .into_iter()
            .collect()
    };
    out.family(
        "node_cpu_usage_seconds_total",
        "counter",
        "[STABLE] Cumulative cpu time consumed by the node in core-seconds",
        node(cpu_seconds(&sum.node.cpu)),
    );
    out.family(
        "node_memory_working_set_bytes",
        "gauge",
        "[STABLE] Current working set of the node in bytes",
        node(working_set(&sum.node.memory)),
    );
    let per_pod = |field: &dyn Fn(&PodStats) -> Reading| -> Vec<Sample> {
        sum.pods
            .iter()
            .filter_map(|p| field(p).map(|(v, ts)| (pod_labels(p), v, ts)))
            .collect()
    };
    out.family(
        "pod_cpu_usage_seconds_total",
        "counter",
        "[STABLE] Cumulative cpu time consumed by the pod in core-seconds",
        per_pod(&|p| cpu_seconds(&p.cpu)),
    );
    out.family(
        "pod_memory_working_set_bytes",
        "gauge",
        "[STABLE] Current working set of the pod in bytes",
        per_pod(&|p| working_set(&p.memory)),
    );
    out.family(
        "resource_scrape_error",
        "gauge",
        "[STABLE] 1 if there was an error while getting container metrics, 0 otherwise",
        vec![(String::new(), if s.is_some() { 0.0 } else { 1.0 }, None)],
    );
    out.0
}

/// The machine as cAdvisor reports it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Machine {
    pub cpu_cores: u64,
    pub memory_bytes: u64,
}

impl Machine {
    /// From `/proc/cpuinfo` and `/proc/meminfo`.
    pub fn read(cpuinfo: &str, meminfo: &str) -> Machine {
        let cpu_cores = cpuinfo
            .lines()
            .filter(|l| l.starts_with("processor"))
            .count() as u64;
        let memory_bytes = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024);
        Machine {
            cpu_cores,
            memory_bytes,
        }
    }
}

/// `/metrics/cadvisor`: per-container usage under cAdvisor's names, and the machine.
pub fn cadvisor(s: Option<&Summary>, machine: Machine) -> String {
    let mut out = Text::default();
    let empty = Summary::default();
    let sum = s.unwrap_or(&empty);
    out.family(
        "container_cpu_usage_seconds_total",
        "counter",
        "Cumulative cpu time consumed in seconds.",
        per_container(sum, |c| cpu_seconds(&c.cpu)),
    );
    out.family(
        "container_memory_usage_bytes",
        "gauge",
        "Current memory usage in bytes, including all memory regardless of when it was accessed",
        per_container(sum, |c| memory(&c.memory, |m| m.usage_bytes)),
    );
    out.family(
        "container_memory_working_set_bytes",
        "gauge",
        "Current working set in bytes.",
        per_container(sum, |c| memory(&c.memory, |m| m.working_set_bytes)),
    );
    out.family(
        "container_memory_rss",
        "gauge",
        "Size of RSS in bytes.",
        per_container(sum, |c| memory(&c.memory, |m| m.rss_bytes)),
    );
    out.family(
        "container_start_time_seconds",
        "gauge",
        "Start time of the container since unix epoch in seconds.",
        per_container(sum, |c| {
            millis(&c.start_time).map(|ms| (ms as f64 / 1000.0, None))
        }),
    );
    out.family(
        "machine_cpu_cores",
        "gauge",
        "Number of logical CPU cores.",
        vec![(String::new(), machine.cpu_cores as f64, None)],
    );
    out.family(
        "machine_memory_bytes",
        "gauge",
        "Amount of memory installed on the machine.",
        vec![(String::new(), machine.memory_bytes as f64, None)],
    );
    out.0
}

/// `/metrics`: the kubelet's own gauges, from the same summary (pods with a running
/// sandbox and their running containers).
pub fn kubelet(node_name: &str, s: Option<&Summary>, process_start: Timestamp) -> String {
    let mut out = Text::default();
    out.family(
        "kubelet_node_name",
        "gauge",
        "[ALPHA] The node's name. The count is always 1.",
        vec![(format!("{{node=\"{}\"}}", escape(node_name)), 1.0, None)],
    );
    if let Some(sum) = s {
        out.family(
            "kubelet_running_pods",
            "gauge",
            "[ALPHA] Number of pods that have a running pod sandbox",
            vec![(String::new(), sum.pods.len() as f64, None)],
        );
        let containers: usize = sum.pods.iter().map(|p| p.containers.len()).sum();
        out.family(
            "kubelet_running_containers",
            "gauge",
            "[ALPHA] Number of containers currently running",
            vec![(
                "{container_state=\"running\"}".to_string(),
                containers as f64,
                None,
            )],
        );
    }
    out.family(
        "process_start_time_seconds",
        "gauge",
        "[ALPHA] Start time of the process since unix epoch in seconds.",
        vec![(
            String::new(),
            process_start.as_millisecond() as f64 / 1000.0,
            None,
        )],
    );
    out.0
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
        assert!(text.contains("# TYPE pod_cpu_usage_seconds_total counter\n"));
        assert!(text.contains("resource_scrape_error 0\n"));
        assert!(resource(None).contains("resource_scrape_error 1\n"));
    }

    #[test]
    fn cadvisor_and_kubelet_text() {
        let machine = Machine::read(
            "processor\t: 0\nmodel name\t: x\nprocessor\t: 1\n",
            "MemTotal:       2048 kB\nMemFree: 1 kB\n",
        );
        assert_eq!((machine.cpu_cores, machine.memory_bytes), (2, 2048 * 1024));
        let text = cadvisor(Some(&summary()), machine);
        assert!(text.contains(
            "container_memory_usage_bytes{container=\"c\",namespace=\"ns\",pod=\"p\"} 2048 1714557600000\n"
        ));
        assert!(text.contains("machine_cpu_cores 2\n"));
        assert!(text.contains("machine_memory_bytes 2097152\n"));
        let start: Timestamp = "2024-05-01T09:00:00Z".parse().unwrap();
        let text = kubelet("n", Some(&summary()), start);
        assert!(text.contains("kubelet_node_name{node=\"n\"} 1\n"));
        assert!(text.contains("kubelet_running_pods 1\n"));
        assert!(text.contains("kubelet_running_containers{container_state=\"running\"} 1\n"));
        assert!(text.contains("process_start_time_seconds 1714554000\n"));
    }
}
