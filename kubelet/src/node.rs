//! The node as the cluster sees it: registration with what the host has, a Lease renewed every
//! ten seconds as the heartbeat, and a status kept true to what the kubelet observes (runtime
//! readiness, images), written only when it changes or the last report grows old.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    ContainerImage, DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints,
    NodeSpec, NodeStatus, NodeSystemInfo,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference, Time};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use minik8s_informers::Informer;

use crate::config::KubeletConfig;
use crate::runtime::Runtime;

/// How long the node status may go unreported even when nothing changes.
const REPORT_FREQUENCY: Duration = Duration::from_secs(300);

pub const KUBELET_VERSION: &str = "v1.32.4+minik8s";

/// What the host offers.
#[derive(Clone, Debug, PartialEq)]
pub struct Capacity {
    pub cpus: u32,
    pub memory_bytes: u64,
    pub ephemeral_bytes: u64,
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

pub fn host_capacity(root: &Path) -> Capacity {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get() as u32)
        .unwrap_or(1);
    let memory_kib: u64 = read("/proc/meminfo")
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let ephemeral_bytes = statvfs_size(root).unwrap_or(0);
    Capacity {
        cpus,
        memory_bytes: memory_kib * 1024,
        ephemeral_bytes,
    }
}

fn statvfs_size(path: &Path) -> Option<u64> {
    // `df` of the filesystem holding the kubelet's root, without unsafe code: read /proc/mounts
    // for the mount and use std's metadata for nothing more than existence; size via `df -B1`.
    let out = std::process::Command::new("df")
        .arg("-B1")
        .arg("--output=size")
        .arg(path)
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .nth(1)?
        .trim()
        .parse()
        .ok()
}

fn os_image() -> String {
    read("/etc/os-release")
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim_matches('"').to_string())
        .unwrap_or_else(|| "Linux".into())
}

fn arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

fn now() -> Time {
    Time(jiff::Timestamp::from_second(jiff::Timestamp::now().as_second()).unwrap_or_default())
}

fn q(s: impl ToString) -> Quantity {
    Quantity(s.to_string())
}

fn condition(ty: &str, ok: bool, reason: &str, message: &str) -> NodeCondition {
    NodeCondition {
        type_: ty.into(),
        status: if ok { "True" } else { "False" }.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        ..Default::default()
    }
}

/// Keeps the Node object, its Lease and its status.
pub struct NodeAgent {
    pub config: KubeletConfig,
    pub client: kube::Client,
    pub runtime: Arc<dyn Runtime>,
    pub capacity: Capacity,
    /// Device plugins' resources, reported beside the host's (and a status written as soon
    /// as they change).
    pub devices: Option<Arc<crate::devicemanager::DeviceManager>>,
}

impl NodeAgent {
    fn labels(&self) -> BTreeMap<String, String> {
        let mut l: BTreeMap<String, String> = [
            ("kubernetes.io/hostname", self.config.node_name.as_str()),
            ("kubernetes.io/os", "linux"),
            ("kubernetes.io/arch", arch()),
            ("beta.kubernetes.io/os", "linux"),
            ("beta.kubernetes.io/arch", arch()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        l.extend(self.config.labels.iter().cloned());
        l
    }

    /// The status as observed now; heartbeat and transition times are filled in by `merge`.
    pub async fn observe(&self) -> NodeStatus {
        let c = &self.capacity;
        let mut resources: BTreeMap<String, Quantity> = [
            ("cpu", q(c.cpus)),
            ("memory", q(format!("{}Ki", c.memory_bytes / 1024))),
            ("ephemeral-storage", q(c.ephemeral_bytes)),
            ("pods", q(self.config.max_pods)),
            ("hugepages-2Mi", q(0)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let version = self.runtime.version().await.ok();
        let runtime_version = version
            .map(|v| format!("{}://{}", v.runtime_name, v.runtime_version))
            .unwrap_or_default();
        let (ready, message) = match self.runtime.status().await {
            Ok(s) => {
                let bad: Vec<String> = s
                    .status
                    .map(|st| st.conditions)
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|c| !c.status)
                    .map(|c| {
                        format!(
                            "{}=false reason:{} message:{}",
                            c.r#type, c.reason, c.message
                        )
                    })
                    .collect();
                if bad.is_empty() {
                    (true, "kubelet is posting ready status".to_string())
                } else {
                    (
                        false,
                        format!("container runtime not ready: {}", bad.join(", ")),
                    )
                }
            }
            Err(e) => (false, format!("container runtime is down: {}", e.message)),
        };
        let images = self
            .runtime
            .list_images()
            .await
            .unwrap_or_default()
            .into_iter()
            .map(|i| ContainerImage {
                names: Some(i.repo_tags.into_iter().chain(i.repo_digests).collect()),
                size_bytes: Some(i.size as i64),
            })
            .collect();
        let mut allocatable = resources.clone();
        if let Some(devices) = &self.devices {
            let (capacity, healthy) = devices.resources();
            resources.extend(capacity);
            allocatable.extend(healthy);
        }
        NodeStatus {
            capacity: Some(resources),
            allocatable: Some(allocatable),
            addresses: Some(vec![
                NodeAddress {
                    type_: "InternalIP".into(),
                    address: self.config.node_ip.to_string(),
                },
                NodeAddress {
                    type_: "Hostname".into(),
                    address: self.config.node_name.clone(),
                },
            ]),
            daemon_endpoints: Some(NodeDaemonEndpoints {
                kubelet_endpoint: Some(DaemonEndpoint {
                    port: self.config.port as i32,
                }),
            }),
            node_info: Some(NodeSystemInfo {
                machine_id: read("/etc/machine-id"),
                system_uuid: read("/sys/class/dmi/id/product_uuid"),
                boot_id: read("/proc/sys/kernel/random/boot_id"),
                kernel_version: read("/proc/sys/kernel/osrelease"),
                os_image: os_image(),
                container_runtime_version: runtime_version,
                kubelet_version: KUBELET_VERSION.into(),
                kube_proxy_version: String::new(),
                operating_system: "linux".into(),
                architecture: arch().into(),
                swap: None,
            }),
            conditions: Some(vec![
                condition(
                    "MemoryPressure",
                    false,
                    "KubeletHasSufficientMemory",
                    "kubelet has sufficient memory available",
                ),
                condition(
                    "DiskPressure",
                    false,
                    "KubeletHasNoDiskPressure",
                    "kubelet has no disk pressure",
                ),
                condition(
                    "PIDPressure",
                    false,
                    "KubeletHasSufficientPID",
                    "kubelet has sufficient PID available",
                ),
                if ready {
                    condition("Ready", true, "KubeletReady", &message)
                } else {
                    condition("Ready", false, "KubeletNotReady", &message)
                },
            ]),
            images: Some(images),
            ..Default::default()
        }
    }

    /// Registers the node if it is not there yet; returns it.
    pub async fn register(&self) -> Result<Node, kube::Error> {
        let api: Api<Node> = Api::all(self.client.clone());
        if let Some(node) = api.get_opt(&self.config.node_name).await? {
            return Ok(node);
        }
        let node = Node {
            metadata: ObjectMeta {
                name: Some(self.config.node_name.clone()),
                labels: Some(self.labels()),
                ..Default::default()
            },
            // spec.podCIDR is the node IPAM controller's to write, as upstream.
            spec: Some(NodeSpec::default()),
            status: Some(self.observe().await),
        };
        match api.create(&PostParams::default(), &node).await {
            Ok(n) => {
                tracing::info!(node = %self.config.node_name, "registered node");
                Ok(n)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => api.get(&self.config.node_name).await,
            Err(e) => Err(e),
        }
    }

    /// Writes `observed` if it differs from `current` (besides times) or the last report is old.
    pub async fn report(
        &self,
        current: &Node,
        observed: NodeStatus,
        force: bool,
    ) -> Result<Option<Node>, kube::Error> {
        let old = current.status.clone().unwrap_or_default();
        let now = now();
        let mut status = observed;
        for c in status.conditions.iter_mut().flatten() {
            let before = old.conditions.iter().flatten().find(|o| o.type_ == c.type_);
            c.last_heartbeat_time = Some(now.clone());
            c.last_transition_time = match before {
                Some(b) if b.status == c.status => b.last_transition_time.clone(),
                _ => Some(now.clone()),
            };
        }
        let strip = |s: &NodeStatus| {
            let mut s = s.clone();
            for c in s.conditions.iter_mut().flatten() {
                c.last_heartbeat_time = None;
                c.last_transition_time = None;
            }
            s
        };
        if !force && strip(&status) == strip(&old) {
            return Ok(None);
        }
        let api: Api<Node> = Api::all(self.client.clone());
        let mut patch = serde_json::json!({"status": status});
        // A merge patch keeps keys it does not name: resources gone (a device plugin's,
        // after its grace period) are removed by naming them null.
        for field in ["capacity", "allocatable"] {
            let was = match field {
                "capacity" => old.capacity.as_ref(),
                _ => old.allocatable.as_ref(),
            };
            for name in was.into_iter().flat_map(|m| m.keys()) {
                if patch["status"][field].get(name).is_none() {
                    patch["status"][field][name] = serde_json::Value::Null;
                }
            }
        }
        let node = api
            .patch_status(
                &self.config.node_name,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
        Ok(Some(node))
    }

    /// Renews (or creates) the node's Lease; every write carries the resourceVersion it read.
    pub async fn renew_lease(&self, node_uid: &str) -> Result<(), kube::Error> {
        let api: Api<Lease> = Api::namespaced(self.client.clone(), "kube-node-lease");
        let name = &self.config.node_name;
        let renew = MicroTime(jiff::Timestamp::now());
        match api.get_opt(name).await? {
            Some(mut lease) => {
                let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
                spec.holder_identity = Some(name.clone());
                spec.lease_duration_seconds = Some(self.config.node_lease_duration_seconds);
                spec.renew_time = Some(renew);
                api.replace(name, &PostParams::default(), &lease).await?;
            }
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        namespace: Some("kube-node-lease".into()),
                        owner_references: Some(vec![OwnerReference {
                            api_version: "v1".into(),
                            kind: "Node".into(),
                            name: name.clone(),
                            uid: node_uid.into(),
                            ..Default::default()
                        }]),
                        ..Default::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(name.clone()),
                        lease_duration_seconds: Some(self.config.node_lease_duration_seconds),
                        renew_time: Some(renew),
                        ..Default::default()
                    }),
                };
                match api.create(&PostParams::default(), &lease).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 409 => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }

    /// Heartbeats and status reports until the agent stops.
    pub async fn run(self: Arc<Self>, mut node: Node, nodes: Informer<Node>) {
        let uid = node.metadata.uid.clone().unwrap_or_default();
        let lease = {
            let this = self.clone();
            let uid = uid.clone();
            async move {
                let period = Duration::from_secs(
                    (this.config.node_lease_duration_seconds as u64 / 4).max(1),
                );
                let mut ticker = tokio::time::interval(period);
                loop {
                    ticker.tick().await;
                    if let Err(e) = this.renew_lease(&uid).await {
                        tracing::warn!(error = %e, "renewing the node lease failed");
                    }
                }
            }
        };
        // The node as the cluster has it: when the node lifecycle controller marked it Unknown
        // after a gap in heartbeats, the next report sees the difference and posts Ready again
        // rather than waiting out REPORT_FREQUENCY.
        let cluster_view = nodes.store();
        let status = async move {
            let mut ticker = tokio::time::interval(self.config.node_status_update_frequency);
            let mut last_report = tokio::time::Instant::now() - REPORT_FREQUENCY;
            let mut devices = self.devices.as_ref().map(|d| d.changes());
            loop {
                // Device changes are reported at once: allocatable is what the scheduler
                // places pods by.
                match devices.as_mut() {
                    Some(changes) => tokio::select! {
                        _ = ticker.tick() => {}
                        changed = changes.changed() => {
                            if changed.is_err() {
                                devices = None;
                            }
                        }
                    },
                    None => {
                        ticker.tick().await;
                    }
                }
                if let Some(n) = cluster_view.get(&kube::runtime::reflector::ObjectRef::new(
                    &self.config.node_name,
                )) {
                    // A view older than our own last write costs at most one extra report.
                    node = (*n).clone();
                }
                let observed = self.observe().await;
                let force = last_report.elapsed() >= REPORT_FREQUENCY;
                match self.report(&node, observed, force).await {
                    Ok(Some(n)) => {
                        node = n;
                        last_report = tokio::time::Instant::now();
                    }
                    Ok(None) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "updating node status failed");
                        if let Ok(n) = Api::<Node>::all(self.client.clone())
                            .get(&self.config.node_name)
                            .await
                        {
                            node = n;
                        }
                    }
                }
            }
        };
        tokio::join!(lease, status);
    }
}
