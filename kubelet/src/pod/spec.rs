//! Pod and container specs translated into CRI configs, as upstream's kuberuntime does:
//! sandbox metadata, DNS and port mappings, cgroup parent, namespaces; container command,
//! environment, resources, security context, labels and the annotations that let a restarted
//! kubelet recognise what it started.

use std::collections::{BTreeMap, HashMap};

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, Pod, SecurityContext};

use super::actions::host_network;
use super::model::keys;
use crate::config::KubeletConfig;

/// `name_namespace(uid)`, the way upstream names a pod in messages.
pub fn pod_display(pod: &Pod) -> String {
    format!(
        "{}_{}({})",
        pod.metadata.name.as_deref().unwrap_or(""),
        pod.metadata.namespace.as_deref().unwrap_or(""),
        pod.metadata.uid.as_deref().unwrap_or("")
    )
}

pub fn uid(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or("")
}

/// A stable hash of a container's definition: a running container started from another
/// definition is replaced.
pub fn container_hash(c: &Container) -> String {
    let text = serde_json::to_string(c).unwrap_or_default();
    // FNV-1a: stable across processes and releases, unlike the std hasher.
    let mut h: u64 = 0xcbf29ce484222325;
    for b in text.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    format!("{h:016x}")
}

fn pod_labels(pod: &Pod) -> HashMap<String, String> {
    let mut labels: HashMap<String, String> = pod
        .metadata
        .labels
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    labels.insert(
        keys::POD_NAME.into(),
        pod.metadata.name.clone().unwrap_or_default(),
    );
    labels.insert(
        keys::POD_NAMESPACE.into(),
        pod.metadata.namespace.clone().unwrap_or_default(),
    );
    labels.insert(keys::POD_UID.into(), uid(pod).to_string());
    labels
}

/// The pod's cgroup under the QoS class parent, as upstream's cgroupfs layout.
pub fn pod_cgroup(config: &KubeletConfig, pod: &Pod) -> String {
    let qos = pod
        .status
        .as_ref()
        .and_then(|s| s.qos_class.clone())
        .unwrap_or_else(|| {
            minik8s_api::kinds::pod::qos_class(pod.spec.as_ref().expect("pod spec")).to_string()
        });
    let root = config.cgroup_root.trim_end_matches('/');
    let uid = uid(pod).replace('-', "_");
    match qos.as_str() {
        "Guaranteed" => format!("{root}/pod{uid}"),
        "BestEffort" => format!("{root}/besteffort/pod{uid}"),
        _ => format!("{root}/burstable/pod{uid}"),
    }
}

struct ResolvConf {
    servers: Vec<String>,
    searches: Vec<String>,
    options: Vec<String>,
}

/// As upstream's parseResolvConf: nameservers accumulate, the last `search` and the last
/// `options` line win, comments are skipped, and search domains lose a trailing dot.
fn parse_resolv_conf(text: &str) -> ResolvConf {
    let mut rc = ResolvConf {
        servers: Vec::new(),
        searches: Vec::new(),
        options: Vec::new(),
    };
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') {
            continue;
        }
        let mut words = line.split_whitespace();
        match words.next() {
            Some("nameserver") => rc.servers.extend(words.next().map(str::to_string)),
            Some("search") => {
                rc.searches = words
                    .map(|w| w.strip_suffix('.').unwrap_or(w).to_string())
                    .collect()
            }
            Some("options") => rc.options = words.map(str::to_string).collect(),
            _ => {}
        }
    }
    rc
}

/// Keeps the first of every repeated entry, in order.
fn omit_duplicates(items: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    items
        .into_iter()
        .filter(|i| seen.insert(i.clone()))
        .collect()
}

/// Upstream's limits (core validation, ExpandedDNSConfig): 3 nameservers, 32 search domains
/// of at most 253 characters, 2048 characters in the search line.
const MAX_NAMESERVERS: usize = 3;
const MAX_SEARCH_PATHS: usize = 32;
const MAX_SEARCH_CHARS: usize = 2048;
const MAX_DOMAIN_CHARS: usize = 253;

fn fit_searches(mut searches: Vec<String>) -> Vec<String> {
    searches.truncate(MAX_SEARCH_PATHS);
    searches.retain(|s| s.len() <= MAX_DOMAIN_CHARS);
    while !searches.is_empty() && searches.join(" ").len() > MAX_SEARCH_CHARS {
        searches.pop();
    }
    searches
}

/// DNS for the sandbox by dnsPolicy, as upstream's dns configurer (GetPodDNS).
pub fn dns_config(config: &KubeletConfig, pod: &Pod) -> cri::DnsConfig {
    let spec = pod.spec.as_ref().expect("pod spec");
    let mut policy = spec.dns_policy.as_deref().unwrap_or("ClusterFirst");
    if policy == "ClusterFirst" && host_network(pod) {
        policy = "Default";
    }
    if policy == "ClusterFirstWithHostNet" {
        policy = "ClusterFirst";
    }
    if policy == "ClusterFirst" && config.cluster_dns.is_empty() {
        policy = "Default";
    }
    let host = parse_resolv_conf(&std::fs::read_to_string(&config.resolv_conf).unwrap_or_default());
    let mut dns = match policy {
        "ClusterFirst" => {
            let d = &config.cluster_domain;
            let mut searches = Vec::new();
            if !d.is_empty() {
                let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
                searches = vec![format!("{ns}.svc.{d}"), format!("svc.{d}"), d.clone()];
            }
            searches.extend(host.searches);
            cri::DnsConfig {
                servers: config.cluster_dns.iter().map(|ip| ip.to_string()).collect(),
                searches: omit_duplicates(searches),
                options: vec!["ndots:5".into()],
            }
        }
        "None" => cri::DnsConfig::default(),
        _ => cri::DnsConfig {
            servers: host.servers,
            searches: host.searches,
            options: host.options,
        },
    };
    if let Some(extra) = &spec.dns_config {
        dns.servers
            .extend(extra.nameservers.clone().unwrap_or_default());
        dns.servers = omit_duplicates(std::mem::take(&mut dns.servers));
        dns.searches
            .extend(extra.searches.clone().unwrap_or_default());
        dns.searches = omit_duplicates(std::mem::take(&mut dns.searches));
        for o in extra.options.iter().flatten() {
            let name = o.name.clone().unwrap_or_default();
            dns.options
                .retain(|x| x.split(':').next() != Some(name.as_str()));
            dns.options.push(match &o.value {
                Some(v) => format!("{name}:{v}"),
                None => name,
            });
        }
    }
    dns.servers.truncate(MAX_NAMESERVERS);
    dns.searches = fit_searches(std::mem::take(&mut dns.searches));
    dns
}

fn namespace_options(pod: &Pod) -> cri::NamespaceOption {
    let spec = pod.spec.as_ref().expect("pod spec");
    let mode = |host: bool, pod_mode: cri::NamespaceMode| {
        if host {
            cri::NamespaceMode::Node as i32
        } else {
            pod_mode as i32
        }
    };
    cri::NamespaceOption {
        network: mode(host_network(pod), cri::NamespaceMode::Pod),
        pid: mode(
            spec.host_pid.unwrap_or(false),
            if spec.share_process_namespace.unwrap_or(false) {
                cri::NamespaceMode::Pod
            } else {
                cri::NamespaceMode::Container
            },
        ),
        ipc: mode(spec.host_ipc.unwrap_or(false), cri::NamespaceMode::Pod),
        target_id: String::new(),
        userns_options: None,
    }
}

/// How many runc shims the node's pods share.
pub const SHIM_GROUPS: u32 = 4;

/// The shim a pod's sandbox and containers run under. containerd starts one shim per pod by
/// default: a Go daemon started and torn down with every pod, about 8 ms of CPU per pod's
/// start on this project's machines (`hack/bench.sh pods`), and its memory for the pod's life.
/// A few shared shims cost that once; more than one, because a shim creates one container at
/// a time.
pub fn shim_group(pod_uid: &str) -> String {
    // FNV-1a: stable across kubelet restarts and builds, unlike std's hasher.
    let hash = pod_uid.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    format!("minik8s-{}", hash % SHIM_GROUPS)
}

/// The pod's hostname (its `hostname`, else its name, cut to 63 characters) and, with a
/// `subdomain`, its domain `<subdomain>.<namespace>.svc.<cluster domain>` (upstream's
/// GeneratePodHostNameAndDomain).
pub fn hostname_and_domain(config: &KubeletConfig, pod: &Pod) -> (String, Option<String>) {
    let spec = pod.spec.as_ref();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let mut hostname = spec
        .and_then(|s| s.hostname.clone())
        .filter(|h| !h.is_empty())
        .unwrap_or(name);
    hostname.truncate(63);
    let hostname = hostname.trim_end_matches(['-', '.']).to_string();
    let domain = spec
        .and_then(|s| s.subdomain.as_deref())
        .filter(|s| !s.is_empty())
        .map(|sub| {
            let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
            format!("{sub}.{ns}.svc.{}", config.cluster_domain)
        });
    (hostname, domain)
}

pub fn sandbox_config(config: &KubeletConfig, pod: &Pod, attempt: u32) -> cri::PodSandboxConfig {
    let spec = pod.spec.as_ref().expect("pod spec");
    let name = pod.metadata.name.clone().unwrap_or_default();
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    // As upstream's generatePodSandboxConfig: a pod on the host network has the host's UTS
    // namespace, so its sandbox names no hostname (the runtime refuses to set one there).
    let hostname = if host_network(pod) {
        String::new()
    } else {
        hostname_and_domain(config, pod).0
    };
    let port_mappings = spec
        .containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .filter(|p| p.host_port.unwrap_or(0) > 0)
        .map(|p| cri::PortMapping {
            protocol: match p.protocol.as_deref() {
                Some("UDP") => cri::Protocol::Udp as i32,
                Some("SCTP") => cri::Protocol::Sctp as i32,
                _ => cri::Protocol::Tcp as i32,
            },
            container_port: p.container_port,
            host_port: p.host_port.unwrap_or(0),
            host_ip: p.host_ip.clone().unwrap_or_default(),
        })
        .collect();
    let privileged = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .any(|c| {
            c.security_context
                .as_ref()
                .and_then(|s| s.privileged)
                .unwrap_or(false)
        });
    let psc = spec.security_context.as_ref();
    let mut annotations: HashMap<String, String> = pod
        .metadata
        .annotations
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    annotations.insert(keys::SHIM_GROUP.into(), shim_group(uid(pod)));
    annotations.insert(
        keys::RESTART_POLICY.into(),
        spec.restart_policy
            .clone()
            .unwrap_or_else(|| "Always".into()),
    );
    annotations.insert(
        keys::TERMINATION_GRACE.into(),
        spec.termination_grace_period_seconds
            .unwrap_or(30)
            .to_string(),
    );
    cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: name.clone(),
            uid: uid(pod).into(),
            namespace: ns.clone(),
            attempt,
        }),
        hostname,
        log_directory: config
            .logs_dir()
            .join(format!("{ns}_{name}_{}", uid(pod)))
            .to_string_lossy()
            .into_owned(),
        dns_config: Some(dns_config(config, pod)),
        port_mappings,
        labels: pod_labels(pod),
        annotations,
        linux: Some(cri::LinuxPodSandboxConfig {
            cgroup_parent: pod_cgroup(config, pod),
            security_context: Some(cri::LinuxSandboxSecurityContext {
                namespace_options: Some(namespace_options(pod)),
                privileged,
                run_as_user: psc
                    .and_then(|s| s.run_as_user)
                    .map(|v| cri::Int64Value { value: v }),
                run_as_group: psc
                    .and_then(|s| s.run_as_group)
                    .map(|v| cri::Int64Value { value: v }),
                supplemental_groups: psc
                    .map(|s| s.supplemental_groups.clone().unwrap_or_default())
                    .unwrap_or_default(),
                seccomp: Some(cri::SecurityProfile {
                    profile_type: cri::security_profile::ProfileType::Unconfined as i32,
                    localhost_ref: String::new(),
                }),
                ..Default::default()
            }),
            sysctls: psc
                .and_then(|s| s.sysctls.clone())
                .unwrap_or_default()
                .into_iter()
                .map(|s| (s.name, s.value))
                .collect(),
            ..Default::default()
        }),
        windows: None,
    }
}

fn milli(q: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>) -> Option<i64> {
    q.and_then(|q| minik8s_api::quantity::Quantity::parse(&q.0))
        .map(|q| q.milli_value() as i64)
}

const CPU_PERIOD: i64 = 100_000;

/// CRI linux resources from requests and limits, as upstream's cgroupfs mapping.
pub fn linux_resources(c: &Container, qos: &str, node_memory: f64) -> cri::LinuxContainerResources {
    let r = c.resources.as_ref();
    let req = |k: &str| {
        r.and_then(|r| r.requests.as_ref())
            .and_then(|m| m.get(k).cloned())
    };
    let lim = |k: &str| {
        r.and_then(|r| r.limits.as_ref())
            .and_then(|m| m.get(k).cloned())
    };
    let cpu_request = milli(req("cpu").as_ref()).or(milli(lim("cpu").as_ref()));
    let cpu_shares = match cpu_request {
        Some(m) if m > 0 => (m * 1024 / 1000).max(2),
        _ => 2,
    };
    let cpu_quota = milli(lim("cpu").as_ref())
        .map(|m| (m * CPU_PERIOD / 1000).max(1000))
        .unwrap_or(0);
    let memory_limit = lim("memory")
        .and_then(|q| minik8s_api::quantity::Quantity::parse(&q.0))
        .map(|q| q.value() as i64)
        .unwrap_or(0);
    let memory_request = req("memory")
        .and_then(|q| minik8s_api::quantity::parse(&q.0))
        .unwrap_or(0.0);
    let oom_score_adj = match qos {
        "Guaranteed" => -997,
        "BestEffort" => 1000,
        _ => {
            let adj = 1000 - (1000.0 * memory_request / node_memory.max(1.0)) as i64;
            adj.clamp(2, 999)
        }
    };
    cri::LinuxContainerResources {
        cpu_period: if cpu_quota > 0 { CPU_PERIOD } else { 0 },
        cpu_quota,
        cpu_shares,
        memory_limit_in_bytes: memory_limit,
        oom_score_adj,
        ..Default::default()
    }
}

/// Paths a non-privileged container must not see or write (upstream's defaults).
const MASKED_PATHS: &[&str] = &[
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];
const READONLY_PATHS: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

fn security_context(pod: &Pod, c: &Container) -> cri::LinuxContainerSecurityContext {
    let psc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let csc: SecurityContext = c.security_context.clone().unwrap_or_default();
    let privileged = csc.privileged.unwrap_or(false);
    let caps = csc.capabilities.as_ref();
    cri::LinuxContainerSecurityContext {
        capabilities: Some(cri::Capability {
            add_capabilities: caps.and_then(|c| c.add.clone()).unwrap_or_default(),
            drop_capabilities: caps.and_then(|c| c.drop.clone()).unwrap_or_default(),
            add_ambient_capabilities: Vec::new(),
        }),
        privileged,
        namespace_options: Some(namespace_options(pod)),
        run_as_user: csc
            .run_as_user
            .or(psc.and_then(|s| s.run_as_user))
            .map(|v| cri::Int64Value { value: v }),
        run_as_group: csc
            .run_as_group
            .or(psc.and_then(|s| s.run_as_group))
            .map(|v| cri::Int64Value { value: v }),
        readonly_rootfs: csc.read_only_root_filesystem.unwrap_or(false),
        supplemental_groups: psc
            .map(|s| {
                let mut g = s.supplemental_groups.clone().unwrap_or_default();
                g.extend(s.fs_group);
                g
            })
            .unwrap_or_default(),
        no_new_privs: csc.allow_privilege_escalation == Some(false),
        masked_paths: if privileged {
            Vec::new()
        } else {
            MASKED_PATHS.iter().map(|s| s.to_string()).collect()
        },
        readonly_paths: if privileged {
            Vec::new()
        } else {
            READONLY_PATHS.iter().map(|s| s.to_string()).collect()
        },
        seccomp: Some(cri::SecurityProfile {
            profile_type: cri::security_profile::ProfileType::Unconfined as i32,
            localhost_ref: String::new(),
        }),
        ..Default::default()
    }
}

/// Everything a container config needs besides the spec.
pub struct ContainerInputs<'a> {
    pub image_ref: &'a str,
    pub attempt: u32,
    pub env: &'a [(String, String)],
    pub mounts: Vec<cri::Mount>,
    pub node_memory: f64,
    pub init: bool,
}

pub fn container_config(
    pod: &Pod,
    c: &Container,
    inp: ContainerInputs<'_>,
) -> cri::ContainerConfig {
    let vars: BTreeMap<String, String> = inp.env.iter().cloned().collect();
    let qos = pod
        .status
        .as_ref()
        .and_then(|s| s.qos_class.clone())
        .unwrap_or_else(|| {
            minik8s_api::kinds::pod::qos_class(pod.spec.as_ref().expect("pod spec")).to_string()
        });
    let mut labels = HashMap::new();
    labels.insert(keys::CONTAINER_NAME.to_string(), c.name.clone());
    labels.insert(
        keys::POD_NAME.to_string(),
        pod.metadata.name.clone().unwrap_or_default(),
    );
    labels.insert(
        keys::POD_NAMESPACE.to_string(),
        pod.metadata.namespace.clone().unwrap_or_default(),
    );
    labels.insert(keys::POD_UID.to_string(), uid(pod).to_string());
    if inp.init {
        labels.insert(keys::INIT_CONTAINER.to_string(), "true".into());
    }
    let mut annotations = HashMap::new();
    annotations.insert(keys::CONTAINER_HASH.to_string(), container_hash(c));
    annotations.insert(keys::RESTART_COUNT.to_string(), inp.attempt.to_string());
    annotations.insert(
        keys::TERMINATION_MESSAGE_PATH.to_string(),
        c.termination_message_path
            .clone()
            .unwrap_or_else(|| "/dev/termination-log".into()),
    );
    annotations.insert(
        keys::TERMINATION_GRACE.to_string(),
        pod.spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds)
            .unwrap_or(30)
            .to_string(),
    );
    cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata {
            name: c.name.clone(),
            attempt: inp.attempt,
        }),
        // The image as the pod names it beside the reference it resolved to, as upstream
        // passes it: what the runtime reports back (cAdvisor's `image` label).
        image: Some(cri::ImageSpec {
            image: inp.image_ref.to_string(),
            user_specified_image: c.image.clone().unwrap_or_default(),
            ..Default::default()
        }),
        command: c
            .command
            .iter()
            .flatten()
            .map(|s| super::super::env::expand(s, &vars))
            .collect(),
        args: c
            .args
            .iter()
            .flatten()
            .map(|s| super::super::env::expand(s, &vars))
            .collect(),
        working_dir: c.working_dir.clone().unwrap_or_default(),
        envs: inp
            .env
            .iter()
            .map(|(k, v)| cri::KeyValue {
                key: k.clone(),
                value: v.clone(),
            })
            .collect(),
        mounts: inp.mounts,
        labels,
        annotations,
        log_path: format!("{}/{}.log", c.name, inp.attempt),
        stdin: c.stdin.unwrap_or(false),
        stdin_once: c.stdin_once.unwrap_or(false),
        tty: c.tty.unwrap_or(false),
        linux: Some(cri::LinuxContainerConfig {
            resources: Some(linux_resources(c, &qos, inp.node_memory)),
            security_context: Some(security_context(pod, c)),
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(json: serde_json::Value) -> Pod {
        serde_json::from_value(json).unwrap()
    }

    fn config() -> KubeletConfig {
        let mut c = KubeletConfig::new(
            "n1",
            "192.168.1.10".parse().unwrap(),
            "/tmp/kl",
            "/tmp/kl/c.sock",
        );
        c.cluster_dns = vec!["10.96.0.10".parse().unwrap()];
        c
    }

    #[test]
    fn sandbox_dns_and_ports() {
        let p = pod(serde_json::json!({
            "metadata": {"name": "web", "namespace": "team", "uid": "1-2"},
            "spec": {"containers": [{"name": "c", "image": "busybox", "ports": [{"containerPort": 80, "hostPort": 8080}]}]}
        }));
        let s = sandbox_config(&config(), &p, 0);
        let dns = s.dns_config.unwrap();
        assert_eq!(dns.servers, vec!["10.96.0.10"]);
        assert_eq!(
            &dns.searches[..3],
            [
                "team.svc.cluster.local",
                "svc.cluster.local",
                "cluster.local"
            ]
        );
        assert_eq!(dns.options, vec!["ndots:5"]);
        assert_eq!(s.port_mappings[0].host_port, 8080);
        assert_eq!(s.labels[keys::POD_UID], "1-2");
        assert_eq!(
            s.linux.unwrap().cgroup_parent,
            "/kubepods/besteffort/pod1_2"
        );
    }

    #[test]
    fn only_pods_with_a_network_of_their_own_have_a_hostname() {
        let p = pod(serde_json::json!({
            "metadata": {"name": "web", "namespace": "team", "uid": "1-2"},
            "spec": {"hostname": "front", "containers": [{"name": "c", "image": "busybox"}]}
        }));
        assert_eq!(sandbox_config(&config(), &p, 0).hostname, "front");
        let mut host = p.clone();
        host.spec.as_mut().unwrap().host_network = Some(true);
        let s = sandbox_config(&config(), &host, 0);
        assert_eq!(s.hostname, "");
        let ns = s
            .linux
            .unwrap()
            .security_context
            .unwrap()
            .namespace_options
            .unwrap();
        assert_eq!(ns.network, cri::NamespaceMode::Node as i32);
    }

    #[test]
    fn pods_share_a_few_shims_chosen_by_uid() {
        // Stable: a restarted kubelet puts a pod's new containers under the same shim.
        assert_eq!(shim_group("1-2"), shim_group("1-2"));
        let groups: std::collections::BTreeSet<String> = (0..64)
            .map(|i| shim_group(&format!("00000000-0000-4000-8000-{i:012}")))
            .collect();
        let want: std::collections::BTreeSet<String> =
            (0..SHIM_GROUPS).map(|g| format!("minik8s-{g}")).collect();
        assert_eq!(groups, want);
        // A pod cannot pick its shim: the kubelet's value wins over the pod's annotation.
        let p = pod(serde_json::json!({
            "metadata": {"name": "web", "namespace": "team", "uid": "1-2",
                         "annotations": {keys::SHIM_GROUP: "mine", "a": "b"}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}
        }));
        let s = sandbox_config(&config(), &p, 0);
        assert_eq!(s.annotations[keys::SHIM_GROUP], shim_group("1-2"));
        assert_eq!(s.annotations["a"], "b");
    }

    /// A config whose resolv.conf is `text`, in a directory of its own.
    fn config_with_resolv_conf(name: &str, text: &str) -> KubeletConfig {
        let dir = std::env::temp_dir().join(format!("minik8s-dns-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("resolv.conf");
        std::fs::write(&path, text).unwrap();
        let mut c = config();
        c.resolv_conf = path;
        c
    }

    const HOST_RESOLV_CONF: &str = "# generated\nnameserver 192.0.2.53\nsearch old.example\n\
        search corp.example. cluster.local\noptions rotate\noptions timeout:2 attempts:3\n\
        nameserver 192.0.2.54\n";

    #[test]
    fn cluster_first_as_upstream() {
        let c = config_with_resolv_conf("cluster-first", HOST_RESOLV_CONF);
        let p = pod(serde_json::json!({
            "metadata": {"name": "web", "namespace": "team"},
            "spec": {"containers": [{"name": "c"}]}
        }));
        let dns = dns_config(&c, &p);
        assert_eq!(dns.servers, vec!["10.96.0.10"]);
        // The last search line wins, its trailing dot goes, repeats are dropped.
        assert_eq!(
            dns.searches,
            [
                "team.svc.cluster.local",
                "svc.cluster.local",
                "cluster.local",
                "corp.example"
            ]
        );
        assert_eq!(dns.options, vec!["ndots:5"]);

        // hostNetwork pods fall back to the host's settings unless they ask for the cluster's.
        let host = pod(serde_json::json!({
            "metadata": {"name": "h", "namespace": "team"},
            "spec": {"hostNetwork": true, "containers": [{"name": "c"}]}
        }));
        let dns = dns_config(&c, &host);
        assert_eq!(dns.servers, vec!["192.0.2.53", "192.0.2.54"]);
        assert_eq!(dns.searches, ["corp.example", "cluster.local"]);
        assert_eq!(dns.options, ["timeout:2", "attempts:3"]);
        let mut with_net = host.clone();
        with_net.spec.as_mut().unwrap().dns_policy = Some("ClusterFirstWithHostNet".into());
        assert_eq!(dns_config(&c, &with_net).servers, vec!["10.96.0.10"]);

        // Without a cluster DNS address ClusterFirst is Default.
        let mut no_dns = c.clone();
        no_dns.cluster_dns.clear();
        assert_eq!(
            dns_config(&no_dns, &p).servers,
            vec!["192.0.2.53", "192.0.2.54"]
        );
    }

    #[test]
    fn dns_config_is_appended_and_limited() {
        let c = config_with_resolv_conf("append", HOST_RESOLV_CONF);
        let p = pod(serde_json::json!({
            "metadata": {"name": "web", "namespace": "team"},
            "spec": {
                "dnsPolicy": "ClusterFirst",
                "dnsConfig": {
                    "nameservers": ["10.96.0.10", "1.1.1.1", "8.8.8.8", "9.9.9.9"],
                    "searches": ["svc.cluster.local", "extra.example"],
                    "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}]
                },
                "containers": [{"name": "c"}]
            }
        }));
        let dns = dns_config(&c, &p);
        assert_eq!(dns.servers, vec!["10.96.0.10", "1.1.1.1", "8.8.8.8"]);
        assert_eq!(
            dns.searches,
            [
                "team.svc.cluster.local",
                "svc.cluster.local",
                "cluster.local",
                "corp.example",
                "extra.example"
            ]
        );
        assert_eq!(dns.options, vec!["ndots:2", "edns0"]);

        let none = pod(serde_json::json!({
            "metadata": {"name": "n", "namespace": "team"},
            "spec": {
                "dnsPolicy": "None",
                "dnsConfig": {
                    "nameservers": ["192.0.2.1"],
                    "searches": (0..40).map(|i| format!("d{i}.example")).collect::<Vec<_>>()
                },
                "containers": [{"name": "c"}]
            }
        }));
        let dns = dns_config(&c, &none);
        assert_eq!(dns.servers, vec!["192.0.2.1"]);
        assert_eq!(dns.searches.len(), 32);
        assert_eq!(dns.searches[31], "d31.example");
        assert!(dns.options.is_empty());
    }

    #[test]
    fn resources_map_to_cgroups() {
        let c: Container = serde_json::from_value(serde_json::json!({
            "name": "c", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}, "limits": {"cpu": "500m", "memory": "128Mi"}}
        }))
        .unwrap();
        let r = linux_resources(&c, "Burstable", 8.0 * 1024.0 * 1024.0 * 1024.0);
        assert_eq!(
            (r.cpu_shares, r.cpu_quota, r.cpu_period),
            (256, 50_000, 100_000)
        );
        assert_eq!(r.memory_limit_in_bytes, 128 * 1024 * 1024);
        assert!(r.oom_score_adj > 900 && r.oom_score_adj < 1000);
        let none: Container = serde_json::from_value(serde_json::json!({"name": "c"})).unwrap();
        let r = linux_resources(&none, "BestEffort", 1e9);
        assert_eq!(
            (
                r.cpu_shares,
                r.cpu_quota,
                r.memory_limit_in_bytes,
                r.oom_score_adj
            ),
            (2, 0, 0, 1000)
        );
    }

    #[test]
    fn container_command_expansion_and_identity() {
        let p = pod(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "u"},
            "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c"], "args": ["echo $(GREETING) $$(NOT)"]}]}
        }));
        let c = &p.spec.as_ref().unwrap().containers[0];
        let env = vec![("GREETING".to_string(), "hi".to_string())];
        let cfg = container_config(
            &p,
            c,
            ContainerInputs {
                image_ref: "sha256:x",
                attempt: 2,
                env: &env,
                mounts: vec![],
                node_memory: 1e9,
                init: false,
            },
        );
        assert_eq!(cfg.args, vec!["echo hi $(NOT)"]);
        assert_eq!(cfg.metadata.unwrap().attempt, 2);
        assert_eq!(cfg.log_path, "c/2.log");
        assert_eq!(cfg.annotations[keys::CONTAINER_HASH], container_hash(c));
        assert_eq!(cfg.labels[keys::CONTAINER_NAME], "c");
    }
}
