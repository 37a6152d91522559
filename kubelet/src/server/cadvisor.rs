//! `/metrics/cadvisor`: what upstream's kubelet serves from its embedded cAdvisor, under
//! cAdvisor's names and labels (`container, id, image, name, namespace, pod`), so that
//! kube-prometheus's rules and dashboards work unchanged. Read where cAdvisor reads it: the
//! cgroup (v1, cgroupfs layout) of the node, of every pod, of each pod's sandbox and of its
//! running containers, and the network namespace of each sandbox (`/proc/<pid>/net/dev` of a
//! process in the sandbox's cgroup). As with containerd under cAdvisor, a pod's network
//! counters are the sandbox's alone (`container=""`, the pause image), so that summing a pod's
//! series does not count its traffic once per container; the pod's own cgroup is the series
//! with neither `container` nor `image`; `id="/"` is the whole node.

use std::path::Path;

use k8s_cri::v1 as cri;

use super::exposition::{Families, Family};
use super::node_exporter::{NetDev, parse_net_dev};
use crate::cgroups::{self, Usage};
use crate::pod::model::keys;

/// The machine as cAdvisor reports it, with the identities it labels machine metrics with.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Machine {
    pub cpu_cores: u64,
    pub physical_cores: u64,
    pub sockets: u64,
    pub memory_bytes: u64,
    pub boot_id: String,
    pub machine_id: String,
    pub system_uuid: String,
}

impl Machine {
    /// From `/proc/cpuinfo` and `/proc/meminfo`.
    pub fn read(cpuinfo: &str, meminfo: &str) -> Machine {
        let mut cpu_cores = 0;
        let mut cores = std::collections::BTreeSet::new();
        let mut sockets = std::collections::BTreeSet::new();
        let mut socket = String::new();
        for line in cpuinfo.lines() {
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            match key.trim() {
                "processor" => cpu_cores += 1,
                "physical id" => {
                    socket = value.trim().to_string();
                    sockets.insert(socket.clone());
                }
                "core id" => {
                    cores.insert((socket.clone(), value.trim().to_string()));
                }
                _ => {}
            }
        }
        let memory_bytes = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024);
        Machine {
            cpu_cores,
            physical_cores: cores.len() as u64,
            sockets: sockets.len() as u64,
            memory_bytes,
            ..Default::default()
        }
    }

    /// This machine: `/proc`'s CPUs and memory, and its boot, machine and system IDs.
    pub fn local(proc: &Path) -> Machine {
        let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
        let mut m = Machine::read(&read(&proc.join("cpuinfo")), &read(&proc.join("meminfo")));
        m.boot_id = read(&proc.join("sys/kernel/random/boot_id")).trim().into();
        m.machine_id = read(Path::new("/etc/machine-id")).trim().into();
        m.system_uuid = read(Path::new("/sys/class/dmi/id/product_uuid"))
            .trim()
            .into();
        m
    }
}

/// The labels cAdvisor gives a cgroup in the kubelet (upstream's
/// `containerPrometheusLabelsFunc`): empty where a cgroup has no such thing.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Labels {
    /// The cgroup's path.
    pub id: String,
    /// The runtime's name for it (containerd's: the container ID).
    pub name: String,
    pub image: String,
    pub namespace: String,
    pub pod: String,
    pub container: String,
}

/// One cgroup as read.
#[derive(Clone, Debug, PartialEq)]
pub struct Reading {
    pub labels: Labels,
    pub usage: Usage,
    /// Seconds since the epoch.
    pub start_time: Option<f64>,
    /// The cgroup's own network namespace's interfaces (none when it shares another's).
    pub network: Vec<NetDev>,
}

/// Where a scrape reads from, and what the runtime runs.
pub struct Scan<'a> {
    /// The cgroup v1 mount (`/sys/fs/cgroup`), with one directory per controller.
    pub cgroups: &'a Path,
    /// The kubelet's cgroup root (`/kubepods`).
    pub cgroup_root: &'a str,
    /// procfs (`/proc`).
    pub proc: &'a Path,
    pub sandboxes: &'a [cri::PodSandbox],
    pub containers: &'a [cri::Container],
}

/// Interfaces cAdvisor leaves out of container network stats.
const IGNORED_INTERFACES: &[&str] = &["lo", "veth", "docker", "nerdctl"];

fn interfaces(net_dev: &str) -> Vec<NetDev> {
    parse_net_dev(net_dev)
        .into_iter()
        .filter(|d| !IGNORED_INTERFACES.iter().any(|p| d.device.starts_with(p)))
        .collect()
}

fn seconds(ns: i64) -> Option<f64> {
    (ns > 0).then(|| ns as f64 / 1e9)
}

impl Scan<'_> {
    /// The interfaces of the network namespace of a process in `cgroup`, unless that is the
    /// kubelet's own (a host-network pod).
    fn network_of(&self, cgroup: &str) -> Vec<NetDev> {
        let procs = self
            .cgroups
            .join("cpuacct")
            .join(cgroup.trim_start_matches('/'))
            .join("cgroup.procs");
        let Some(pid) = std::fs::read_to_string(procs)
            .ok()
            .and_then(|s| s.lines().next().map(|l| l.trim().to_string()))
            .filter(|p| !p.is_empty())
        else {
            return Vec::new();
        };
        let ns = |p: &str| std::fs::read_link(self.proc.join(p).join("ns/net")).ok();
        if ns(&pid).is_none() || ns(&pid) == ns("self") {
            return Vec::new();
        }
        interfaces(
            &std::fs::read_to_string(self.proc.join(&pid).join("net/dev")).unwrap_or_default(),
        )
    }

    /// Every cgroup cAdvisor would report for this node's pods, and the node's own.
    pub fn collect(&self) -> Vec<Reading> {
        let mut out = Vec::new();
        if let Some(usage) = cgroups::usage(self.cgroups, "/") {
            out.push(Reading {
                labels: Labels {
                    id: "/".into(),
                    ..Default::default()
                },
                usage,
                start_time: None,
                network: interfaces(
                    &std::fs::read_to_string(self.proc.join("self/net/dev")).unwrap_or_default(),
                ),
            });
        }
        let running = cri::ContainerState::ContainerRunning as i32;
        for sb in self
            .sandboxes
            .iter()
            .filter(|s| s.state == cri::PodSandboxState::SandboxReady as i32)
        {
            let Some(meta) = &sb.metadata else { continue };
            let uid = sb.labels.get(keys::POD_UID).unwrap_or(&meta.uid);
            let Some((pod_cgroup, pod_usage)) =
                cgroups::pod_cgroup_candidates(self.cgroup_root, uid)
                    .find_map(|cg| cgroups::usage(self.cgroups, &cg).map(|u| (cg, u)))
            else {
                continue;
            };
            let pod_labels = Labels {
                id: pod_cgroup.clone(),
                namespace: meta.namespace.clone(),
                pod: meta.name.clone(),
                ..Default::default()
            };
            out.push(Reading {
                labels: pod_labels.clone(),
                usage: pod_usage,
                start_time: seconds(sb.created_at),
                network: Vec::new(),
            });
            let sandbox_cgroup = format!("{pod_cgroup}/{}", sb.id);
            if let Some(usage) = cgroups::usage(self.cgroups, &sandbox_cgroup) {
                out.push(Reading {
                    labels: Labels {
                        id: sandbox_cgroup.clone(),
                        name: sb.id.clone(),
                        image: crate::containerd::SANDBOX_IMAGE.into(),
                        ..pod_labels.clone()
                    },
                    usage,
                    start_time: seconds(sb.created_at),
                    network: self.network_of(&sandbox_cgroup),
                });
            }
            for c in self
                .containers
                .iter()
                .filter(|c| c.pod_sandbox_id == sb.id && c.state == running)
            {
                let cgroup = format!("{pod_cgroup}/{}", c.id);
                let Some(usage) = cgroups::usage(self.cgroups, &cgroup) else {
                    continue;
                };
                let image = c
                    .image
                    .as_ref()
                    .map(|i| match i.user_specified_image.as_str() {
                        "" => i.image.clone(),
                        named => named.to_string(),
                    })
                    .unwrap_or_default();
                let container = c
                    .labels
                    .get(keys::CONTAINER_NAME)
                    .cloned()
                    .or_else(|| c.metadata.as_ref().map(|m| m.name.clone()))
                    .unwrap_or_default();
                out.push(Reading {
                    labels: Labels {
                        id: cgroup,
                        name: c.id.clone(),
                        image,
                        container,
                        ..pod_labels.clone()
                    },
                    usage,
                    start_time: seconds(c.created_at),
                    network: Vec::new(),
                });
            }
        }
        out
    }
}

/// The labels of a reading's samples, as cAdvisor's, and `extra`.
fn labels<'a>(r: &'a Reading, extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let l = &r.labels;
    let mut labels = vec![
        ("container", l.container.as_str()),
        ("id", l.id.as_str()),
        ("image", l.image.as_str()),
        ("name", l.name.as_str()),
        ("namespace", l.namespace.as_str()),
        ("pod", l.pod.as_str()),
    ];
    labels.extend_from_slice(extra);
    labels
}

/// A family with one sample per reading that has `value`.
fn per_cgroup(
    mut family: Family,
    readings: &[Reading],
    now_ms: i64,
    extra: &[(&str, &str)],
    value: impl Fn(&Reading) -> Option<f64>,
) -> Family {
    for r in readings {
        if let Some(v) = value(r) {
            family.sample(&labels(r, extra), v, Some(now_ms));
        }
    }
    family
}

/// Interface counters of cAdvisor's network metrics: name, help, the counter.
type InterfaceCounter = (&'static str, &'static str, fn(&NetDev) -> u64);

const NETWORK: &[InterfaceCounter] = &[
    (
        "container_network_receive_bytes_total",
        "Cumulative count of bytes received",
        |d| d.receive_bytes(),
    ),
    (
        "container_network_receive_packets_total",
        "Cumulative count of packets received",
        |d| d.receive_packets(),
    ),
    (
        "container_network_receive_packets_dropped_total",
        "Cumulative count of packets dropped while receiving",
        |d| d.receive_drop(),
    ),
    (
        "container_network_receive_errors_total",
        "Cumulative count of errors encountered while receiving",
        |d| d.receive_errs(),
    ),
    (
        "container_network_transmit_bytes_total",
        "Cumulative count of bytes transmitted",
        |d| d.transmit_bytes(),
    ),
    (
        "container_network_transmit_packets_total",
        "Cumulative count of packets transmitted",
        |d| d.transmit_packets(),
    ),
    (
        "container_network_transmit_packets_dropped_total",
        "Cumulative count of packets dropped while transmitting",
        |d| d.transmit_drop(),
    ),
    (
        "container_network_transmit_errors_total",
        "Cumulative count of errors encountered while transmitting",
        |d| d.transmit_errs(),
    ),
];

/// The exposition: `readings` (`None`: the runtime could not be listed, a scrape error) and
/// the machine, container samples stamped `now_ms`.
pub fn render(readings: Option<&[Reading]>, machine: &Machine, now_ms: i64) -> String {
    let mut out = Families::default();
    let none: &[Reading] = &[];
    let rs = readings.unwrap_or(none);
    let ns = |v: Option<u64>| v.map(|v| v as f64 / 1e9);
    out.push(per_cgroup(
        Family::counter(
            "container_cpu_usage_seconds_total",
            "Cumulative cpu time consumed in seconds.",
        ),
        rs,
        now_ms,
        &[("cpu", "total")],
        |r| ns(Some(r.usage.cpu_ns)),
    ));
    out.push(per_cgroup(
        Family::counter(
            "container_cpu_user_seconds_total",
            "Cumulative user cpu time consumed in seconds.",
        ),
        rs,
        now_ms,
        &[],
        |r| ns(r.usage.cpu_user_ns),
    ));
    out.push(per_cgroup(
        Family::counter(
            "container_cpu_system_seconds_total",
            "Cumulative system cpu time consumed in seconds.",
        ),
        rs,
        now_ms,
        &[],
        |r| ns(r.usage.cpu_system_ns),
    ));
    out.push(per_cgroup(
        Family::gauge(
            "container_memory_cache",
            "Number of bytes of page cache memory.",
        ),
        rs,
        now_ms,
        &[],
        |r| r.usage.cache.map(|v| v as f64),
    ));
    out.push(per_cgroup(
        Family::gauge("container_memory_rss", "Size of RSS in bytes."),
        rs,
        now_ms,
        &[],
        |r| r.usage.rss.map(|v| v as f64),
    ));
    out.push(per_cgroup(
        Family::gauge(
            "container_memory_usage_bytes",
            "Current memory usage in bytes, including all memory regardless of when it was accessed",
        ),
        rs,
        now_ms,
        &[],
        |r| Some(r.usage.memory_usage as f64),
    ));
    out.push(per_cgroup(
        Family::gauge(
            "container_memory_working_set_bytes",
            "Current working set in bytes.",
        ),
        rs,
        now_ms,
        &[],
        |r| Some(r.usage.working_set as f64),
    ));
    for (name, help, counter) in NETWORK {
        let mut family = Family::counter(name, help);
        for r in rs {
            for dev in &r.network {
                let labels = labels(r, &[("interface", dev.device.as_str())]);
                family.sample(&labels, counter(dev) as f64, Some(now_ms));
            }
        }
        out.push(family);
    }
    out.push(per_cgroup(
        Family::gauge(
            "container_start_time_seconds",
            "Start time of the container since unix epoch in seconds.",
        ),
        rs,
        now_ms,
        &[],
        |r| r.start_time,
    ));
    let mut error = Family::gauge(
        "container_scrape_error",
        "1 if there was an error while getting container metrics, 0 otherwise",
    );
    error.sample(&[], if readings.is_some() { 0.0 } else { 1.0 }, None);
    out.push(error);
    let ids = [
        ("boot_id", machine.boot_id.as_str()),
        ("machine_id", machine.machine_id.as_str()),
        ("system_uuid", machine.system_uuid.as_str()),
    ];
    for (name, help, value) in [
        (
            "machine_cpu_cores",
            "Number of logical CPU cores.",
            machine.cpu_cores,
        ),
        (
            "machine_cpu_physical_cores",
            "Number of physical CPU cores.",
            machine.physical_cores,
        ),
        (
            "machine_cpu_sockets",
            "Number of CPU sockets.",
            machine.sockets,
        ),
        (
            "machine_memory_bytes",
            "Amount of memory installed on the machine.",
            machine.memory_bytes,
        ),
    ] {
        let mut f = Family::gauge(name, help);
        f.sample(&ids, value as f64, None);
        out.push(f);
    }
    out.encode()
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// A cgroup v1 tree with usage files for `cgroup`.
    fn cgroup(root: &Path, cgroup: &str, cpu_ns: u64, memory: u64, procs: &str) {
        let rel = cgroup.trim_start_matches('/');
        let cpu = root.join("cpuacct").join(rel);
        let mem = root.join("memory").join(rel);
        std::fs::create_dir_all(&cpu).unwrap();
        std::fs::create_dir_all(&mem).unwrap();
        std::fs::write(cpu.join("cpuacct.usage"), format!("{cpu_ns}\n")).unwrap();
        std::fs::write(cpu.join("cpuacct.stat"), "user 10\nsystem 5\n").unwrap();
        std::fs::write(cpu.join("cgroup.procs"), procs).unwrap();
        std::fs::write(mem.join("memory.usage_in_bytes"), format!("{memory}\n")).unwrap();
        std::fs::write(
            mem.join("memory.stat"),
            "total_cache 300\ntotal_rss 200\ntotal_inactive_file 100\n",
        )
        .unwrap();
    }

    const NET_DEV: &str = "Inter-|   Receive                                                |  Transmit\n face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    lo: 10 1 0 0 0 0 0 0 10 1 0 0 0 0 0 0\n  eth0: 500 5 1 2 0 0 0 0 700 7 3 4 0 0 0 0\n";

    fn sandbox(id: &str, uid: &str) -> cri::PodSandbox {
        cri::PodSandbox {
            id: id.into(),
            metadata: Some(cri::PodSandboxMetadata {
                name: "web".into(),
                uid: uid.into(),
                namespace: "ns".into(),
                attempt: 0,
            }),
            state: cri::PodSandboxState::SandboxReady as i32,
            created_at: 1_700_000_000_000_000_000,
            ..Default::default()
        }
    }

    fn container(id: &str, sandbox: &str, name: &str) -> cri::Container {
        cri::Container {
            id: id.into(),
            pod_sandbox_id: sandbox.into(),
            state: cri::ContainerState::ContainerRunning as i32,
            created_at: 1_700_000_010_000_000_000,
            labels: HashMap::from([(keys::CONTAINER_NAME.to_string(), name.to_string())]),
            image: Some(cri::ImageSpec {
                image: "sha256:abc".into(),
                user_specified_image: "nginx:1.27".into(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn cgroups_and_sandbox_network_under_cadvisors_names() {
        let dir = tempfile::tempdir().unwrap();
        let (cgroups, proc) = (dir.path().join("cgroup"), dir.path().join("proc"));
        cgroup(&cgroups, "/", 9_000_000_000, 1 << 30, "1\n");
        cgroup(
            &cgroups,
            "/kubepods/burstable/poda_1",
            3_000_000_000,
            4000,
            "",
        );
        cgroup(
            &cgroups,
            "/kubepods/burstable/poda_1/sb1",
            1_000_000,
            100,
            "42\n",
        );
        cgroup(
            &cgroups,
            "/kubepods/burstable/poda_1/c1",
            2_500_000_000,
            3000,
            "43\n",
        );
        // The sandbox's process in a network namespace of its own; the kubelet's.
        for (pid, ns, dev) in [("42", "net:[2]", NET_DEV), ("self", "net:[1]", NET_DEV)] {
            std::fs::create_dir_all(proc.join(pid).join("ns")).unwrap();
            std::fs::create_dir_all(proc.join(pid).join("net")).unwrap();
            std::os::unix::fs::symlink(ns, proc.join(pid).join("ns/net")).unwrap();
            std::fs::write(proc.join(pid).join("net/dev"), dev).unwrap();
        }
        let sandboxes = [sandbox("sb1", "a-1"), sandbox("gone", "b-2")];
        let containers = [
            container("c1", "sb1", "nginx"),
            container("c9", "sb1", "nocgroup"),
        ];
        let readings = Scan {
            cgroups: &cgroups,
            cgroup_root: "/kubepods",
            proc: &proc,
            sandboxes: &sandboxes,
            containers: &containers,
        }
        .collect();
        let ids: Vec<&str> = readings.iter().map(|r| r.labels.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "/",
                "/kubepods/burstable/poda_1",
                "/kubepods/burstable/poda_1/sb1",
                "/kubepods/burstable/poda_1/c1"
            ]
        );
        let machine = Machine::read(
            "processor\t: 0\nphysical id\t: 0\ncore id\t: 0\nprocessor\t: 1\nphysical id\t: 0\ncore id\t: 0\n",
            "MemTotal:       2048 kB\n",
        );
        assert_eq!(
            (
                machine.cpu_cores,
                machine.physical_cores,
                machine.sockets,
                machine.memory_bytes
            ),
            (2, 1, 1, 2 << 20)
        );
        let text = render(Some(&readings), &machine, 1234);
        let c = "container=\"nginx\",id=\"/kubepods/burstable/poda_1/c1\",image=\"nginx:1.27\",name=\"c1\",namespace=\"ns\",pod=\"web\"";
        for line in [
            "container_cpu_usage_seconds_total{container=\"nginx\",cpu=\"total\",id=\"/kubepods/burstable/poda_1/c1\",image=\"nginx:1.27\",name=\"c1\",namespace=\"ns\",pod=\"web\"} 2.5 1234".into(),
            format!("container_cpu_user_seconds_total{{{c}}} 0.1 1234"),
            format!("container_memory_usage_bytes{{{c}}} 3000 1234"),
            format!("container_memory_working_set_bytes{{{c}}} 2900 1234"),
            format!("container_memory_rss{{{c}}} 200 1234"),
            format!("container_memory_cache{{{c}}} 300 1234"),
            format!("container_start_time_seconds{{{c}}} 1700000010 1234"),
            // The pod's cgroup: no container, no image.
            "container_memory_usage_bytes{container=\"\",id=\"/kubepods/burstable/poda_1\",image=\"\",name=\"\",namespace=\"ns\",pod=\"web\"} 4000 1234".into(),
            // The pod's traffic, on its sandbox, loopback left out.
            format!(
                "container_network_receive_bytes_total{{container=\"\",id=\"/kubepods/burstable/poda_1/sb1\",image=\"{}\",interface=\"eth0\",name=\"sb1\",namespace=\"ns\",pod=\"web\"}} 500 1234",
                crate::containerd::SANDBOX_IMAGE
            ),
            "container_network_transmit_errors_total{container=\"\",id=\"/\",image=\"\",interface=\"eth0\",name=\"\",namespace=\"\",pod=\"\"} 3 1234".into(),
            "container_cpu_usage_seconds_total{container=\"\",cpu=\"total\",id=\"/\",image=\"\",name=\"\",namespace=\"\",pod=\"\"} 9 1234".into(),
            "container_scrape_error 0".into(),
            "machine_memory_bytes{boot_id=\"\",machine_id=\"\",system_uuid=\"\"} 2097152".into(),
        ] {
            assert!(text.contains(&format!("{line}\n")), "{line}\n{text}");
        }
        assert!(!text.contains("interface=\"lo\""));
        assert_eq!(
            text.matches("container_network_receive_bytes_total{")
                .count(),
            2
        );
        // The runtime could not be listed: a scrape error, the machine all the same.
        let failed = render(None, &machine, 1234);
        assert!(failed.contains("container_scrape_error 1\n"));
        assert!(failed.contains("machine_cpu_cores{"));
        assert!(!failed.contains("container_cpu_usage_seconds_total"));
    }

    #[test]
    fn a_host_network_sandbox_has_no_network_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let (cgroups, proc) = (dir.path().join("cgroup"), dir.path().join("proc"));
        cgroup(&cgroups, "/kubepods/poda_1", 1, 1, "");
        cgroup(&cgroups, "/kubepods/poda_1/sb1", 1, 1, "42\n");
        for pid in ["42", "self"] {
            std::fs::create_dir_all(proc.join(pid).join("ns")).unwrap();
            std::fs::create_dir_all(proc.join(pid).join("net")).unwrap();
            std::os::unix::fs::symlink("net:[1]", proc.join(pid).join("ns/net")).unwrap();
            std::fs::write(proc.join(pid).join("net/dev"), NET_DEV).unwrap();
        }
        let readings = Scan {
            cgroups: &cgroups,
            cgroup_root: "/kubepods",
            proc: &proc,
            sandboxes: &[sandbox("sb1", "a-1")],
            containers: &[],
        }
        .collect();
        assert_eq!(readings.len(), 2);
        assert!(readings.iter().all(|r| r.network.is_empty()));
    }

    /// This machine's own cgroups and procfs, where they are cgroup v1 (as the kubelet
    /// needs): the node's series are there and move.
    #[test]
    fn the_real_node() {
        let cgroups = Path::new("/sys/fs/cgroup");
        if !cgroups.join("cpuacct/cpuacct.usage").is_file() {
            return;
        }
        let scan = Scan {
            cgroups,
            cgroup_root: "/kubepods",
            proc: Path::new("/proc"),
            sandboxes: &[],
            containers: &[],
        };
        let first = scan.collect();
        assert_eq!(first[0].labels.id, "/");
        // Burn some CPU: the node's counter moves.
        let mut x = 0u64;
        let started = std::time::Instant::now();
        while started.elapsed() < std::time::Duration::from_millis(50) {
            x = x.wrapping_mul(31).wrapping_add(7);
        }
        std::hint::black_box(x);
        let second = scan.collect();
        assert!(second[0].usage.cpu_ns > first[0].usage.cpu_ns);
        let machine = Machine::local(Path::new("/proc"));
        assert!(machine.cpu_cores > 0 && machine.memory_bytes > 0);
    }
}
