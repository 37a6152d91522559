//! Resource usage as upstream's kubelet reports it: the Summary API (`/stats/summary`, the
//! shape metrics-server and `kubectl top` consume) built from the CRI's container and sandbox
//! stats, or for CPU and memory alone from the containers' cgroups, and, for the node, from
//! /proc; and the same numbers as Prometheus text (`/metrics/resource`).

use std::collections::BTreeMap;
use std::path::Path;

use jiff::Timestamp;
use k8s_cri::v1 as cri;
use serde::{Deserialize, Serialize};

use crate::pod::model::keys;

/// Upstream's `statsapi.Summary`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub node: NodeStats,
    pub pods: Vec<PodStats>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStats {
    pub node_name: String,
    pub start_time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fs: Option<FsStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<RuntimeStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rlimit: Option<RlimitStats>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CpuStats {
    pub time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_nano_cores: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_core_nano_seconds: Option<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryStats {
    pub time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub working_set_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rss_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub page_faults: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub major_page_faults: Option<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InterfaceStats {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rx_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rx_errors: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tx_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tx_errors: Option<u64>,
}

/// The default interface's numbers inline, every interface in `interfaces`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkStats {
    pub time: String,
    #[serde(flatten)]
    pub default: InterfaceStats,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<InterfaceStats>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FsStats {
    pub time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub used_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inodes_free: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inodes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inodes_used: Option<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeStats {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_fs: Option<FsStats>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RlimitStats {
    pub time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub maxpid: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub curproc: Option<i64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodReference {
    pub name: String,
    pub namespace: String,
    pub uid: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessStats {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process_count: Option<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStats {
    pub pod_ref: PodReference,
    pub start_time: String,
    pub containers: Vec<ContainerStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkStats>,
    #[serde(rename = "ephemeral-storage", skip_serializing_if = "Option::is_none")]
    pub ephemeral_storage: Option<FsStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process_stats: Option<ProcessStats>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStats {
    pub name: String,
    pub start_time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rootfs: Option<FsStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logs: Option<FsStats>,
}

/// A time as metav1.Time serializes it (RFC 3339, seconds).
pub fn time(ns: i64) -> String {
    Timestamp::from_nanosecond(ns as i128)
        .unwrap_or_default()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

fn value(v: &Option<cri::UInt64Value>) -> Option<u64> {
    v.as_ref().map(|v| v.value)
}

fn cpu(c: &cri::CpuUsage) -> CpuStats {
    CpuStats {
        time: time(c.timestamp),
        usage_nano_cores: value(&c.usage_nano_cores),
        usage_core_nano_seconds: value(&c.usage_core_nano_seconds),
    }
}

fn memory(m: &cri::MemoryUsage) -> MemoryStats {
    MemoryStats {
        time: time(m.timestamp),
        available_bytes: value(&m.available_bytes),
        usage_bytes: value(&m.usage_bytes),
        working_set_bytes: value(&m.working_set_bytes),
        rss_bytes: value(&m.rss_bytes),
        page_faults: value(&m.page_faults),
        major_page_faults: value(&m.major_page_faults),
    }
}

fn network(n: &cri::NetworkUsage, now_ns: i64) -> NetworkStats {
    let iface = |i: &cri::NetworkInterfaceUsage| InterfaceStats {
        name: i.name.clone(),
        rx_bytes: value(&i.rx_bytes),
        rx_errors: value(&i.rx_errors),
        tx_bytes: value(&i.tx_bytes),
        tx_errors: value(&i.tx_errors),
    };
    NetworkStats {
        time: time(if n.timestamp > 0 { n.timestamp } else { now_ns }),
        default: n.default_interface.as_ref().map(iface).unwrap_or_default(),
        interfaces: n.interfaces.iter().map(iface).collect(),
    }
}

/// Adds `b` into `a`, field by field, keeping the later time.
fn add(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (None, None) => None,
        (x, y) => Some(x.unwrap_or(0) + y.unwrap_or(0)),
    }
}

fn sum_cpu(stats: &[&CpuStats]) -> Option<CpuStats> {
    let first = stats.first()?;
    let mut out = CpuStats {
        time: first.time.clone(),
        usage_nano_cores: None,
        usage_core_nano_seconds: None,
    };
    for s in stats {
        out.time = out.time.clone().max(s.time.clone());
        out.usage_nano_cores = add(out.usage_nano_cores, s.usage_nano_cores);
        out.usage_core_nano_seconds = add(out.usage_core_nano_seconds, s.usage_core_nano_seconds);
    }
    Some(out)
}

fn sum_memory(stats: &[&MemoryStats]) -> Option<MemoryStats> {
    let first = stats.first()?;
    let mut out = MemoryStats {
        time: first.time.clone(),
        ..Default::default()
    };
    for s in stats {
        out.time = out.time.clone().max(s.time.clone());
        out.usage_bytes = add(out.usage_bytes, s.usage_bytes);
        out.working_set_bytes = add(out.working_set_bytes, s.working_set_bytes);
        out.rss_bytes = add(out.rss_bytes, s.rss_bytes);
        out.page_faults = add(out.page_faults, s.page_faults);
        out.major_page_faults = add(out.major_page_faults, s.major_page_faults);
    }
    Some(out)
}

/// What the node itself uses, read from the host.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeSample {
    pub boot_time_ns: i64,
    pub cpu: Option<CpuStats>,
    pub memory: Option<MemoryStats>,
    pub network: Option<NetworkStats>,
    pub fs: Option<FsStats>,
    pub rlimit: Option<RlimitStats>,
}

/// Everything a summary is made of, as read at one moment.
#[derive(Clone, Debug, Default)]
pub struct Inputs {
    pub node_name: String,
    pub node: NodeSample,
    pub sandboxes: Vec<cri::PodSandbox>,
    pub sandbox_stats: Vec<cri::PodSandboxStats>,
    pub containers: Vec<cri::Container>,
    pub container_stats: Vec<cri::ContainerStats>,
    pub image_fs: Option<FsStats>,
    /// Bytes of log files by container ID.
    pub log_bytes: BTreeMap<String, u64>,
    pub now_ns: i64,
}

/// Running containers' stats read from their cgroups rather than asked of the runtime, for
/// the CPU-and-memory summary that metrics scrapes ask for every resolution, as upstream's
/// kubelet reads them through cAdvisor: on 2 cores busy starting pods, containerd's
/// ListContainerStats took 20 to 30 s and failed whole whenever a container went away during
/// it, where these reads take microseconds a container. Pods are in the cgroupfs layout the
/// kubelet gives them (`<cgroup root>/[<qos>/]pod<uid>/<container id>`).
pub fn cgroup_container_stats(
    cgroups: &Path,
    cgroup_root: &str,
    sandboxes: &[cri::PodSandbox],
    containers: &[cri::Container],
    now_ns: i64,
) -> Vec<cri::ContainerStats> {
    let uids: BTreeMap<&str, String> = sandboxes
        .iter()
        .filter_map(|sb| {
            let uid = sb
                .labels
                .get(keys::POD_UID)
                .cloned()
                .or_else(|| sb.metadata.as_ref().map(|m| m.uid.clone()))?;
            Some((sb.id.as_str(), uid))
        })
        .collect();
    let value = |v: u64| Some(cri::UInt64Value { value: v });
    containers
        .iter()
        .filter(|c| c.state == cri::ContainerState::ContainerRunning as i32)
        .filter_map(|c| {
            let uid = uids.get(c.pod_sandbox_id.as_str())?;
            let usage = crate::cgroups::pod_cgroup_candidates(cgroup_root, uid)
                .find_map(|pod| crate::cgroups::usage(cgroups, &format!("{pod}/{}", c.id)))?;
            Some(cri::ContainerStats {
                attributes: Some(cri::ContainerAttributes {
                    id: c.id.clone(),
                    metadata: c.metadata.clone(),
                    labels: c.labels.clone(),
                    annotations: c.annotations.clone(),
                }),
                cpu: Some(cri::CpuUsage {
                    timestamp: now_ns,
                    usage_core_nano_seconds: value(usage.cpu_ns),
                    usage_nano_cores: None,
                }),
                memory: Some(cri::MemoryUsage {
                    timestamp: now_ns,
                    working_set_bytes: value(usage.working_set),
                    usage_bytes: value(usage.memory_usage),
                    rss_bytes: usage.rss.and_then(value),
                    ..Default::default()
                }),
                writable_layer: None,
                swap: None,
            })
        })
        .collect()
}

/// Upstream's CRI stats provider, as a pure function: running containers of ready sandboxes,
/// grouped by pod; a pod's totals come from its sandbox stats or, without them, from the sum
/// of its containers.
pub fn summarize(inp: &Inputs) -> Summary {
    let now = time(inp.now_ns);
    let stats_by_id: BTreeMap<&str, &cri::ContainerStats> = inp
        .container_stats
        .iter()
        .filter_map(|s| s.attributes.as_ref().map(|a| (a.id.as_str(), s)))
        .collect();
    let sandbox_stats: BTreeMap<&str, &cri::PodSandboxStats> = inp
        .sandbox_stats
        .iter()
        .filter_map(|s| s.attributes.as_ref().map(|a| (a.id.as_str(), s)))
        .collect();
    let mut pods: Vec<PodStats> = Vec::new();
    let mut sandboxes: Vec<&cri::PodSandbox> = inp
        .sandboxes
        .iter()
        .filter(|s| s.state == cri::PodSandboxState::SandboxReady as i32)
        .collect();
    sandboxes.sort_by(|a, b| {
        let key = |s: &cri::PodSandbox| {
            s.metadata
                .as_ref()
                .map(|m| (m.namespace.clone(), m.name.clone()))
        };
        key(a).cmp(&key(b))
    });
    for sb in sandboxes {
        let Some(meta) = &sb.metadata else { continue };
        let uid = sb
            .labels
            .get(keys::POD_UID)
            .cloned()
            .unwrap_or_else(|| meta.uid.clone());
        // The newest running container of each name in this sandbox.
        let mut running: BTreeMap<String, &cri::Container> = BTreeMap::new();
        for c in inp.containers.iter().filter(|c| {
            c.pod_sandbox_id == sb.id && c.state == cri::ContainerState::ContainerRunning as i32
        }) {
            let name = c
                .labels
                .get(keys::CONTAINER_NAME)
                .cloned()
                .or_else(|| c.metadata.as_ref().map(|m| m.name.clone()))
                .unwrap_or_default();
            match running.get(&name) {
                Some(other) if other.created_at >= c.created_at => {}
                _ => {
                    running.insert(name, c);
                }
            }
        }
        let mut containers = Vec::new();
        let mut ephemeral_used: Option<u64> = None;
        for (name, c) in &running {
            let s = stats_by_id.get(c.id.as_str());
            let rootfs = s.and_then(|s| s.writable_layer.as_ref()).map(|w| {
                let mut fs = inp.image_fs.clone().unwrap_or_default();
                fs.time = time(w.timestamp);
                fs.used_bytes = value(&w.used_bytes);
                fs.inodes_used = value(&w.inodes_used);
                fs
            });
            let logs = inp.log_bytes.get(&c.id).map(|b| {
                let mut fs = inp.image_fs.clone().unwrap_or_default();
                fs.time = now.clone();
                fs.used_bytes = Some(*b);
                fs.inodes_used = Some(1);
                fs
            });
            for fs in [&rootfs, &logs].into_iter().flatten() {
                ephemeral_used = add(ephemeral_used, fs.used_bytes);
            }
            containers.push(ContainerStats {
                name: name.clone(),
                start_time: time(c.created_at),
                cpu: s.and_then(|s| s.cpu.as_ref()).map(cpu),
                memory: s.and_then(|s| s.memory.as_ref()).map(memory),
                rootfs,
                logs,
            });
        }
        let linux = sandbox_stats
            .get(sb.id.as_str())
            .and_then(|s| s.linux.as_ref());
        let pod_cpu = linux.and_then(|l| l.cpu.as_ref()).map(cpu).or_else(|| {
            sum_cpu(
                &containers
                    .iter()
                    .filter_map(|c| c.cpu.as_ref())
                    .collect::<Vec<_>>(),
            )
        });
        let pod_memory = linux
            .and_then(|l| l.memory.as_ref())
            .map(memory)
            .or_else(|| {
                sum_memory(
                    &containers
                        .iter()
                        .filter_map(|c| c.memory.as_ref())
                        .collect::<Vec<_>>(),
                )
            });
        pods.push(PodStats {
            pod_ref: PodReference {
                name: meta.name.clone(),
                namespace: meta.namespace.clone(),
                uid,
            },
            start_time: time(sb.created_at),
            containers,
            cpu: pod_cpu,
            memory: pod_memory,
            network: linux
                .and_then(|l| l.network.as_ref())
                .map(|n| network(n, inp.now_ns)),
            ephemeral_storage: ephemeral_used.map(|used| {
                let mut fs = inp.image_fs.clone().unwrap_or_default();
                fs.time = now.clone();
                fs.used_bytes = Some(used);
                fs.inodes_used = None;
                fs
            }),
            process_stats: linux
                .and_then(|l| l.process.as_ref())
                .map(|p| ProcessStats {
                    process_count: value(&p.process_count),
                }),
        });
    }
    Summary {
        node: NodeStats {
            node_name: inp.node_name.clone(),
            start_time: time(inp.node.boot_time_ns),
            cpu: inp.node.cpu.clone(),
            memory: inp.node.memory.clone(),
            network: inp.node.network.clone(),
            fs: inp.node.fs.clone(),
            runtime: inp
                .image_fs
                .clone()
                .map(|fs| RuntimeStats { image_fs: Some(fs) }),
            rlimit: inp.node.rlimit.clone(),
        },
        pods,
    }
}

/// Only what `only_cpu_and_memory=true` asks for, as upstream trims it.
pub fn cpu_and_memory_only(s: &Summary) -> Summary {
    Summary {
        node: NodeStats {
            node_name: s.node.node_name.clone(),
            start_time: s.node.start_time.clone(),
            cpu: s.node.cpu.clone(),
            memory: s.node.memory.clone(),
            ..Default::default()
        },
        pods: s
            .pods
            .iter()
            .map(|p| PodStats {
                pod_ref: p.pod_ref.clone(),
                start_time: p.start_time.clone(),
                containers: p
                    .containers
                    .iter()
                    .map(|c| ContainerStats {
                        name: c.name.clone(),
                        start_time: c.start_time.clone(),
                        cpu: c.cpu.clone(),
                        memory: c.memory.clone(),
                        ..Default::default()
                    })
                    .collect(),
                cpu: p.cpu.clone(),
                memory: p.memory.clone(),
                ..Default::default()
            })
            .collect(),
    }
}

// ---- the host, from /proc ----

/// Cumulative CPU time the host spent outside idle, in nanoseconds (/proc/stat).
pub fn host_cpu_ns(stat: &str) -> Option<u64> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is already in user).
    let busy = [0usize, 1, 2, 5, 6, 7]
        .iter()
        .map(|&i| v.get(i).copied().unwrap_or(0))
        .sum::<u64>();
    // /proc/stat counts USER_HZ (100 per second on Linux) ticks.
    Some(busy * 10_000_000)
}

pub fn boot_time_ns(stat: &str) -> Option<i64> {
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse::<i64>().ok())
        .map(|s| s * 1_000_000_000)
}

fn kib(meminfo: &str, key: &str) -> Option<u64> {
    meminfo
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map(|k| k * 1024)
}

/// Node memory as cAdvisor reports the root cgroup: usage is what is not free, the working
/// set is usage without inactive file pages.
pub fn host_memory(meminfo: &str, vmstat: &str, now_ns: i64) -> Option<MemoryStats> {
    let total = kib(meminfo, "MemTotal")?;
    let free = kib(meminfo, "MemFree")?;
    let inactive_file = kib(meminfo, "Inactive(file)").unwrap_or(0);
    let usage = total.saturating_sub(free);
    let working_set = usage.saturating_sub(inactive_file);
    let counter = |key: &str| {
        vmstat
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    Some(MemoryStats {
        time: time(now_ns),
        available_bytes: Some(total.saturating_sub(working_set)),
        usage_bytes: Some(usage),
        working_set_bytes: Some(working_set),
        rss_bytes: kib(meminfo, "AnonPages"),
        page_faults: counter("pgfault"),
        major_page_faults: counter("pgmajfault"),
    })
}

/// Interfaces of /proc/net/dev (without loopback); the default one is the interface of the
/// default route in /proc/net/route.
pub fn host_network(dev: &str, route: &str, now_ns: i64) -> Option<NetworkStats> {
    let default_if = route.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() > 2 && f[1] == "00000000").then(|| f[0].to_string())
    });
    let mut interfaces = Vec::new();
    for line in dev.lines().skip(2) {
        let Some((name, rest)) = line.split_once(':') else {
            continue;
        };
        let name = name.trim();
        if name == "lo" {
            continue;
        }
        let v: Vec<u64> = rest
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        if v.len() < 16 {
            continue;
        }
        interfaces.push(InterfaceStats {
            name: name.to_string(),
            rx_bytes: Some(v[0]),
            rx_errors: Some(v[2]),
            tx_bytes: Some(v[8]),
            tx_errors: Some(v[10]),
        });
    }
    let default = default_if
        .and_then(|d| interfaces.iter().find(|i| i.name == d).cloned())
        .or_else(|| interfaces.first().cloned())?;
    Some(NetworkStats {
        time: time(now_ns),
        default,
        interfaces,
    })
}

/// Size and inode counts of the filesystem holding `path`.
pub fn fs_stats(path: &Path, now_ns: i64) -> Option<FsStats> {
    let s = nix::sys::statvfs::statvfs(path).ok()?;
    let frsize = s.fragment_size() as u64;
    let blocks = s.blocks() as u64;
    let files = s.files() as u64;
    Some(FsStats {
        time: time(now_ns),
        available_bytes: Some(s.blocks_available() as u64 * frsize),
        capacity_bytes: Some(blocks * frsize),
        used_bytes: Some(blocks.saturating_sub(s.blocks_free() as u64) * frsize),
        inodes_free: Some(s.files_free() as u64),
        inodes: Some(files),
        inodes_used: Some(files.saturating_sub(s.files_free() as u64)),
    })
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// A reading of the host's cumulative CPU time, to turn the next one into a rate.
#[derive(Clone, Copy, Debug)]
pub struct CpuSample {
    pub at_ns: i64,
    pub busy_ns: u64,
}

/// The node's numbers now; `previous` turns the CPU counter into usageNanoCores.
pub fn sample_host(root: &Path, previous: Option<CpuSample>) -> (NodeSample, Option<CpuSample>) {
    let now = jiff::Timestamp::now().as_nanosecond() as i64;
    let stat = read("/proc/stat");
    let busy = host_cpu_ns(&stat);
    let sample = busy.map(|busy_ns| CpuSample {
        at_ns: now,
        busy_ns,
    });
    let nano_cores = match (previous, sample) {
        (Some(p), Some(s)) if s.at_ns > p.at_ns && s.busy_ns >= p.busy_ns => Some(
            ((s.busy_ns - p.busy_ns) as u128 * 1_000_000_000 / (s.at_ns - p.at_ns) as u128) as u64,
        ),
        _ => None,
    };
    let loadavg = read("/proc/loadavg");
    let curproc = loadavg
        .split_whitespace()
        .nth(3)
        .and_then(|f| f.split('/').nth(1))
        .and_then(|n| n.parse().ok());
    let node = NodeSample {
        boot_time_ns: boot_time_ns(&stat).unwrap_or(0),
        cpu: busy.map(|b| CpuStats {
            time: time(now),
            usage_nano_cores: nano_cores,
            usage_core_nano_seconds: Some(b),
        }),
        memory: host_memory(&read("/proc/meminfo"), &read("/proc/vmstat"), now),
        network: host_network(&read("/proc/net/dev"), &read("/proc/net/route"), now),
        fs: fs_stats(root, now),
        rlimit: Some(RlimitStats {
            time: time(now),
            maxpid: read("/proc/sys/kernel/pid_max").trim().parse().ok(),
            curproc,
        }),
    };
    (node, sample)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_readings() {
        let stat = "cpu  100 5 50 1000 7 1 2 3 0 0\ncpu0 1 1 1 1 1 1 1 1 0 0\nbtime 1700000000\n";
        assert_eq!(host_cpu_ns(stat), Some(161 * 10_000_000));
        assert_eq!(boot_time_ns(stat), Some(1_700_000_000_000_000_000));
        let meminfo = "MemTotal:       1000 kB\nMemFree:         200 kB\nMemAvailable:    700 kB\nInactive(file):  300 kB\nAnonPages:       100 kB\n";
        let m = host_memory(meminfo, "pgfault 42\npgmajfault 3\n", 0).unwrap();
        assert_eq!(m.usage_bytes, Some(800 * 1024));
        assert_eq!(m.working_set_bytes, Some(500 * 1024));
        assert_eq!(m.available_bytes, Some(500 * 1024));
        assert_eq!(m.rss_bytes, Some(100 * 1024));
        assert_eq!((m.page_faults, m.major_page_faults), (Some(42), Some(3)));
        let dev = "Inter-|   Receive                                                |  Transmit\n face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    lo: 10 1 0 0 0 0 0 0 10 1 0 0 0 0 0 0\n  eth0: 500 5 1 0 0 0 0 0 700 7 2 0 0 0 0 0\n  cni0: 5 1 0 0 0 0 0 0 6 1 0 0 0 0 0 0\n";
        let route = "Iface\tDestination\tGateway\nwlan\t0000000A\t0\neth0\t00000000\t010200C0\n";
        let n = host_network(dev, route, 0).unwrap();
        assert_eq!(n.default.name, "eth0");
        assert_eq!(n.default.rx_bytes, Some(500));
        assert_eq!(n.default.tx_errors, Some(2));
        assert_eq!(n.interfaces.len(), 2);
        let json = serde_json::to_value(&n).unwrap();
        assert_eq!(json["name"], "eth0");
        assert_eq!(json["interfaces"][1]["name"], "cni0");
    }

    #[test]
    fn running_containers_are_read_from_their_pods_cgroups() {
        let root = tempfile::tempdir().unwrap();
        let write = |cg: &str, cpu: &str, mem: &str| {
            for (controller, file, value) in [
                ("cpuacct", "cpuacct.usage", cpu),
                ("memory", "memory.usage_in_bytes", mem),
                ("memory", "memory.stat", "total_inactive_file 1000\n"),
            ] {
                let dir = root.path().join(controller).join(cg);
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(dir.join(file), value).unwrap();
            }
        };
        write("kubepods/burstable/poda_1/c1", "7000", "5000");
        write("kubepods/besteffort/podb_2/c2", "9", "3000");
        let sandbox = |id: &str, uid: &str| cri::PodSandbox {
            id: id.into(),
            metadata: Some(cri::PodSandboxMetadata {
                name: id.into(),
                uid: uid.into(),
                namespace: "ns".into(),
                attempt: 0,
            }),
            ..Default::default()
        };
        let container = |id: &str, sandbox: &str, state: cri::ContainerState| cri::Container {
            id: id.into(),
            pod_sandbox_id: sandbox.into(),
            state: state as i32,
            ..Default::default()
        };
        let running = cri::ContainerState::ContainerRunning;
        let stats = cgroup_container_stats(
            root.path(),
            "/kubepods/",
            &[
                sandbox("sa", "a-1"),
                sandbox("sb", "b-2"),
                sandbox("sc", "c-3"),
            ],
            &[
                container("c1", "sa", running),
                container("c2", "sb", running),
                // Exited, and running without a cgroup (gone meanwhile): left out.
                container("c1-old", "sa", cri::ContainerState::ContainerExited),
                container("c3", "sc", running),
            ],
            42,
        );
        let got: Vec<(String, u64, u64)> = stats
            .iter()
            .map(|s| {
                let cpu = s.cpu.as_ref().unwrap();
                assert_eq!(cpu.timestamp, 42);
                (
                    s.attributes.as_ref().unwrap().id.clone(),
                    cpu.usage_core_nano_seconds.as_ref().unwrap().value,
                    s.memory
                        .as_ref()
                        .unwrap()
                        .working_set_bytes
                        .as_ref()
                        .unwrap()
                        .value,
                )
            })
            .collect();
        assert_eq!(
            got,
            [("c1".to_string(), 7000, 4000), ("c2".to_string(), 9, 2000)]
        );
    }
}
