//! Hollow nodes, as kubemark and kwok make them: one process registers many Nodes, keeps their
//! Leases fresh, and walks the pods bound to them through the phases a kubelet would report,
//! without running anything. Controller tests and scale benchmarks get real API traffic from
//! "nodes" at almost no cost.
//!
//! Behaviour is chosen per pod with annotations, so a test states what its pods do:
//! - `hollow.minik8s.io/exit-code`: pods whose restartPolicy is not Always end with this code
//!   (default 0: Succeeded; anything else: Failed);
//! - `hollow.minik8s.io/run-seconds`: how long such pods run first (default 0);
//! - `hollow.minik8s.io/ready: "false"`: the pod runs but is not Ready (flip it at any time).

use std::collections::{BTreeMap, HashMap};
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStatus, Node,
    NodeAddress, NodeCondition, NodeSpec, NodeStatus, NodeSystemInfo, Pod, PodCondition, PodIP,
    PodStatus,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};

pub use minik8s_api::hollow::{
    EXIT_CODE_ANNOTATION, HOLLOW_LABEL, READY_ANNOTATION, RUN_SECONDS_ANNOTATION,
};
use minik8s_api::hollow::{node_address, pod_subnet};

const KUBELET_VERSION: &str = "v1.32.4+minik8s-hollow";

#[derive(Clone, Debug)]
pub struct HollowConfig {
    /// How many nodes: named `<prefix><index>`.
    pub count: usize,
    pub prefix: String,
    pub cpu: String,
    pub memory: String,
    pub max_pods: u32,
    /// Extra labels on every node.
    pub labels: BTreeMap<String, String>,
    pub lease_duration_seconds: i32,
    pub lease_renew_interval: Duration,
    /// Pods reconciled at once.
    pub concurrency: u16,
}

impl Default for HollowConfig {
    fn default() -> Self {
        HollowConfig {
            count: 3,
            prefix: "hollow-node-".into(),
            cpu: "4".into(),
            memory: "16Gi".into(),
            max_pods: 110,
            labels: BTreeMap::new(),
            lease_duration_seconds: 40,
            lease_renew_interval: Duration::from_secs(10),
            concurrency: 32,
        }
    }
}

impl HollowConfig {
    pub fn node_names(&self) -> Vec<String> {
        (0..self.count)
            .map(|i| format!("{}{i}", self.prefix))
            .collect()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum HollowError {
    #[error("registering node {node}: {source}")]
    Register {
        node: String,
        #[source]
        source: kube::Error,
    },
    #[error("{0}")]
    Kube(#[from] kube::Error),
}

fn now_time() -> Time {
    Time(Timestamp::now())
}

fn node_condition(ty: &str, ok: bool, reason: &str, message: &str) -> NodeCondition {
    NodeCondition {
        type_: ty.into(),
        status: if ok { "True" } else { "False" }.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_heartbeat_time: Some(now_time()),
        last_transition_time: Some(now_time()),
    }
}

fn node_status(config: &HollowConfig, index: usize, name: &str) -> NodeStatus {
    let resources: BTreeMap<String, Quantity> = [
        ("cpu", config.cpu.clone()),
        ("memory", config.memory.clone()),
        ("pods", config.max_pods.to_string()),
        ("ephemeral-storage", "100Gi".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), Quantity(v)))
    .collect();
    NodeStatus {
        capacity: Some(resources.clone()),
        allocatable: Some(resources),
        addresses: Some(vec![
            NodeAddress {
                type_: "InternalIP".into(),
                address: node_address(index).to_string(),
            },
            NodeAddress {
                type_: "Hostname".into(),
                address: name.into(),
            },
        ]),
        conditions: Some(vec![
            node_condition(
                "MemoryPressure",
                false,
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
            ),
            node_condition(
                "DiskPressure",
                false,
                "KubeletHasNoDiskPressure",
                "kubelet has no disk pressure",
            ),
            node_condition(
                "PIDPressure",
                false,
                "KubeletHasSufficientPID",
                "kubelet has sufficient PID available",
            ),
            node_condition(
                "Ready",
                true,
                "KubeletReady",
                "kubelet is posting ready status",
            ),
        ]),
        node_info: Some(NodeSystemInfo {
            architecture: "amd64".into(),
            operating_system: "linux".into(),
            os_image: "hollow".into(),
            kernel_version: "hollow".into(),
            kubelet_version: KUBELET_VERSION.into(),
            container_runtime_version: "hollow://1".into(),
            machine_id: format!("hollow-{index}"),
            system_uuid: format!("hollow-{index}"),
            boot_id: format!("hollow-{index}"),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// What the pods reconciler shares.
struct Hollow {
    client: Client,
    /// Node name to index.
    nodes: HashMap<String, usize>,
    /// Per node: the pod addresses handed out, by pod UID.
    ips: Mutex<HashMap<usize, HashMap<u32, String>>>,
}

impl Hollow {
    /// The pod's address on `node`: the one it has, or a free one.
    fn allocate_ip(&self, index: usize, pod: &Pod) -> String {
        let uid = pod.uid().unwrap_or_default();
        let base = u32::from(pod_subnet(index));
        let mut ips = self.ips.lock().expect("ip table");
        let used = ips.entry(index).or_default();
        if let Some(existing) = pod.status.as_ref().and_then(|s| s.pod_ip.clone()) {
            if let Ok(ip) = existing.parse::<Ipv4Addr>() {
                used.insert(u32::from(ip), uid);
            }
            return existing;
        }
        if let Some((ip, _)) = used.iter().find(|(_, u)| **u == uid) {
            return Ipv4Addr::from(*ip).to_string();
        }
        let free = (2..255u32)
            .map(|host| base + host)
            .find(|ip| !used.contains_key(ip))
            // A full /24: share the last address rather than stall the pod.
            .unwrap_or(base + 254);
        used.insert(free, uid);
        Ipv4Addr::from(free).to_string()
    }

    fn release_ip(&self, index: usize, uid: &str) {
        if let Some(used) = self.ips.lock().expect("ip table").get_mut(&index) {
            used.retain(|_, u| u != uid);
        }
    }
}

/// Registers the nodes, keeps their leases and conditions, and runs their pods until dropped.
pub async fn run(client: Client, config: HollowConfig) -> Result<(), HollowError> {
    let names = config.node_names();
    let nodes: Api<Node> = Api::all(client.clone());
    let registered: Vec<Result<Node, HollowError>> =
        futures::stream::iter(names.clone().into_iter().enumerate())
            .map(|(i, name)| {
                let (nodes, config) = (nodes.clone(), config.clone());
                async move { register(&nodes, &config, i, &name).await }
            })
            .buffer_unordered(32)
            .collect()
            .await;
    let mut uids = HashMap::new();
    for node in registered {
        let node = node?;
        uids.insert(node.name_any(), node.uid().unwrap_or_default());
    }
    tracing::info!(count = names.len(), prefix = %config.prefix, "hollow nodes registered");

    let hollow = Arc::new(Hollow {
        client: client.clone(),
        nodes: names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), i))
            .collect(),
        ips: Mutex::default(),
    });
    let leases = keep_leases(client.clone(), config.clone(), uids);
    let conditions = Controller::new(
        nodes.clone(),
        watcher::Config::default().labels(&format!("{HOLLOW_LABEL}={}", label_value(&config))),
    )
    .run(
        reconcile_node,
        |_, e, _| {
            tracing::warn!(error = %e, "hollow node status");
            Action::requeue(Duration::from_secs(1))
        },
        Arc::new((client.clone(), config.clone())),
    )
    .for_each(|_| async {});
    let pods = Controller::new(
        Api::<Pod>::all(client.clone()),
        watcher::Config::default().fields("spec.nodeName!="),
    )
    .with_config(kube::runtime::controller::Config::default().concurrency(config.concurrency))
    .run(
        reconcile_pod,
        |_, e: &kube::Error, _| {
            tracing::warn!(error = %e, "hollow pod");
            Action::requeue(Duration::from_millis(500))
        },
        hollow,
    )
    .for_each(|_| async {});
    tokio::join!(leases, conditions, pods);
    Ok(())
}

/// The value of every node's [`HOLLOW_LABEL`]: label values allow fewer characters than
/// names, so the prefix without its trailing dash.
pub fn label_value(config: &HollowConfig) -> String {
    config.prefix.trim_end_matches(['-', '.', '_']).to_string()
}

async fn register(
    nodes: &Api<Node>,
    config: &HollowConfig,
    index: usize,
    name: &str,
) -> Result<Node, HollowError> {
    let wrap = |source| HollowError::Register {
        node: name.to_string(),
        source,
    };
    let status = node_status(config, index, name);
    if nodes.get_opt(name).await.map_err(wrap)?.is_some() {
        // A restart: report Ready again, as a kubelet coming back does.
        let patch = serde_json::json!({ "status": status });
        return nodes
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(wrap);
    }
    let mut labels: BTreeMap<String, String> = [
        ("kubernetes.io/hostname", name.to_string()),
        ("kubernetes.io/os", "linux".to_string()),
        ("kubernetes.io/arch", "amd64".to_string()),
        (HOLLOW_LABEL, label_value(config)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    labels.extend(config.labels.clone());
    let node = Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(labels),
            ..Default::default()
        },
        spec: Some(NodeSpec::default()),
        status: Some(status),
    };
    match nodes.create(&PostParams::default(), &node).await {
        Ok(n) => Ok(n),
        Err(kube::Error::Api(s)) if s.code == 409 => nodes.get(name).await.map_err(wrap),
        Err(e) => Err(wrap(e)),
    }
}

/// Renews every node's Lease each interval, as a fleet of kubelets would: each node on a
/// timer of its own, offset so the renewals spread evenly over the interval, with at most
/// one renewal of its own in flight. A shared cap on renewals in flight would starve them
/// when the server is slow: with 5,000 nodes and 32 at a time, a round took longer than the
/// lease lasts, the node lifecycle controller marked nodes and their pods not Ready, and
/// the pods' status went back and forth from then on. Each write carries the
/// resourceVersion of the lease it replaces.
async fn keep_leases(client: Client, config: HollowConfig, uids: HashMap<String, String>) {
    let api: Api<Lease> = Api::namespaced(client, "kube-node-lease");
    let step = config.lease_renew_interval / uids.len().max(1) as u32;
    let start = tokio::time::Instant::now();
    let renewers = uids.into_iter().enumerate().map(|(i, (name, uid))| {
        let api = api.clone();
        let (interval, duration) = (config.lease_renew_interval, config.lease_duration_seconds);
        async move {
            let mut ticker = tokio::time::interval_at(start + step * i as u32, interval);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut known: Option<Lease> = None;
            loop {
                ticker.tick().await;
                match renew_lease(&api, &name, &uid, duration, known.take()).await {
                    Ok(lease) => known = Some(lease),
                    Err(e) => tracing::debug!(node = %name, error = %e, "renewing hollow lease"),
                }
            }
        }
    });
    futures::future::join_all(renewers).await;
}

async fn renew_lease(
    api: &Api<Lease>,
    name: &str,
    node_uid: &str,
    duration: i32,
    previous: Option<Lease>,
) -> Result<Lease, kube::Error> {
    let renew = MicroTime(Timestamp::now());
    let current = match previous {
        Some(l) => Some(l),
        None => api.get_opt(name).await?,
    };
    match current {
        Some(mut lease) => {
            let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
            spec.holder_identity = Some(name.into());
            spec.lease_duration_seconds = Some(duration);
            spec.renew_time = Some(renew);
            api.replace(name, &PostParams::default(), &lease).await
        }
        None => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    namespace: Some("kube-node-lease".into()),
                    owner_references: Some(vec![OwnerReference {
                        api_version: "v1".into(),
                        kind: "Node".into(),
                        name: name.into(),
                        uid: node_uid.into(),
                        ..Default::default()
                    }]),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(name.into()),
                    lease_duration_seconds: Some(duration),
                    renew_time: Some(renew),
                    ..Default::default()
                }),
            };
            api.create(&PostParams::default(), &lease).await
        }
    }
}

/// A node another component marked not Ready (the node lifecycle controller does so when
/// leases stop) is reported Ready again, as a live kubelet would.
async fn reconcile_node(
    node: Arc<Node>,
    ctx: Arc<(Client, HollowConfig)>,
) -> Result<Action, kube::Error> {
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True");
    if ready {
        return Ok(Action::await_change());
    }
    let (client, config) = &*ctx;
    let name = node.name_any();
    let index = name
        .strip_prefix(&config.prefix)
        .and_then(|i| i.parse().ok())
        .unwrap_or(0);
    let patch = serde_json::json!({ "status": node_status(config, index, &name) });
    Api::<Node>::all(client.clone())
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(Action::await_change())
}

fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// Whether the pod's containers would exit, and with which code.
fn exit_code(pod: &Pod) -> Option<i32> {
    let policy = pod
        .spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always");
    if policy == "Always" {
        return None;
    }
    Some(
        annotation(pod, EXIT_CODE_ANNOTATION)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0),
    )
}

fn condition(ty: &str, ok: bool, reason: Option<&str>, since: &Time) -> PodCondition {
    PodCondition {
        type_: ty.into(),
        status: if ok { "True" } else { "False" }.into(),
        reason: reason.map(Into::into),
        last_transition_time: Some(since.clone()),
        ..Default::default()
    }
}

/// Keeps the transition time of conditions whose status did not change.
fn keep_transitions(old: &PodStatus, new: &mut PodStatus) {
    for c in new.conditions.iter_mut().flatten() {
        if let Some(before) = old
            .conditions
            .iter()
            .flatten()
            .find(|b| b.type_ == c.type_ && b.status == c.status)
        {
            c.last_transition_time = before.last_transition_time.clone();
        }
    }
}

fn running_status(pod: &Pod, host_ip: &str, pod_ip: &str, ready: bool) -> PodStatus {
    let old = pod.status.clone().unwrap_or_default();
    let now = now_time();
    let start = old.start_time.clone().unwrap_or_else(|| now.clone());
    let spec = pod.spec.clone().unwrap_or_default();
    let containers = spec
        .containers
        .iter()
        .map(|c| {
            let before = old
                .container_statuses
                .iter()
                .flatten()
                .find(|s| s.name == c.name);
            let started_at = before
                .and_then(|s| s.state.as_ref())
                .and_then(|s| s.running.as_ref())
                .and_then(|r| r.started_at.clone())
                .unwrap_or_else(|| start.clone());
            ContainerStatus {
                name: c.name.clone(),
                image: c.image.clone().unwrap_or_default(),
                image_id: format!("hollow://{}", c.image.clone().unwrap_or_default()),
                container_id: Some(format!(
                    "hollow://{}-{}",
                    pod.uid().unwrap_or_default(),
                    c.name
                )),
                ready,
                started: Some(true),
                restart_count: 0,
                state: Some(ContainerState {
                    running: Some(ContainerStateRunning {
                        started_at: Some(started_at),
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }
        })
        .collect();
    let mut status = PodStatus {
        phase: Some("Running".into()),
        host_ip: Some(host_ip.into()),
        host_ips: Some(vec![k8s_openapi::api::core::v1::HostIP {
            ip: host_ip.into(),
        }]),
        pod_ip: Some(pod_ip.into()),
        pod_ips: Some(vec![PodIP { ip: pod_ip.into() }]),
        start_time: Some(start),
        qos_class: old.qos_class.clone(),
        conditions: Some(vec![
            condition("PodReadyToStartContainers", true, None, &now),
            condition("Initialized", true, None, &now),
            condition(
                "Ready",
                ready,
                (!ready).then_some("ContainersNotReady"),
                &now,
            ),
            condition(
                "ContainersReady",
                ready,
                (!ready).then_some("ContainersNotReady"),
                &now,
            ),
            condition("PodScheduled", true, None, &now),
        ]),
        container_statuses: Some(containers),
        ..Default::default()
    };
    keep_transitions(&old, &mut status);
    status
}

fn terminal_status(pod: &Pod, code: i32) -> PodStatus {
    let mut status = pod.status.clone().unwrap_or_default();
    let now = now_time();
    status.phase = Some(if code == 0 { "Succeeded" } else { "Failed" }.into());
    for s in status.container_statuses.iter_mut().flatten() {
        let started_at = s
            .state
            .as_ref()
            .and_then(|st| st.running.as_ref())
            .and_then(|r| r.started_at.clone());
        s.ready = false;
        s.started = Some(false);
        s.state = Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: code,
                reason: Some(if code == 0 { "Completed" } else { "Error" }.into()),
                started_at,
                finished_at: Some(now.clone()),
                container_id: s.container_id.clone(),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    let old = status.clone();
    for c in status.conditions.iter_mut().flatten() {
        if c.type_ == "Ready" || c.type_ == "ContainersReady" {
            c.status = "False".into();
            c.reason = Some("PodCompleted".into());
        }
        if c.type_ == "PodReadyToStartContainers" {
            c.status = "False".into();
        }
    }
    for c in status.conditions.iter_mut().flatten() {
        if old
            .conditions
            .iter()
            .flatten()
            .any(|b| b.type_ == c.type_ && b.status != c.status)
        {
            c.last_transition_time = Some(now.clone());
        }
    }
    status
}

async fn patch_status(api: &Api<Pod>, pod: &Pod, status: PodStatus) -> Result<(), kube::Error> {
    // The UID precondition keeps a status for an old pod off a new one of the same name.
    let patch = serde_json::json!({
        "metadata": { "uid": pod.uid() },
        "status": status,
    });
    api.patch_status(
        &pod.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}

async fn reconcile_pod(pod: Arc<Pod>, hollow: Arc<Hollow>) -> Result<Action, kube::Error> {
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("");
    let Some(&index) = hollow.nodes.get(node) else {
        return Ok(Action::await_change());
    };
    let uid = pod.uid().unwrap_or_default();
    let api: Api<Pod> =
        Api::namespaced(hollow.client.clone(), &pod.namespace().unwrap_or_default());
    if pod.metadata.deletion_timestamp.is_some() {
        hollow.release_ip(index, &uid);
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..Default::default()
        };
        return match api.delete(&pod.name_any(), &params).await {
            Ok(_) => Ok(Action::await_change()),
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {
                Ok(Action::await_change())
            }
            Err(e) => Err(e),
        };
    }
    let status = pod.status.clone().unwrap_or_default();
    let phase = status.phase.as_deref().unwrap_or("Pending");
    if phase == "Succeeded" || phase == "Failed" {
        hollow.release_ip(index, &uid);
        return Ok(Action::await_change());
    }
    if let Some(code) = exit_code(&pod)
        && phase == "Running"
    {
        let run = Duration::from_secs(
            annotation(&pod, RUN_SECONDS_ANNOTATION)
                .and_then(|s| s.parse().ok())
                .unwrap_or(0),
        );
        let started = status
            .start_time
            .as_ref()
            .map(|t| t.0)
            .unwrap_or_else(Timestamp::now);
        let elapsed = Timestamp::now().duration_since(started);
        let remaining = jiff::SignedDuration::try_from(run)
            .unwrap_or_default()
            .checked_sub(elapsed)
            .unwrap_or_default();
        if remaining.is_positive() {
            return Ok(Action::requeue(
                Duration::try_from(remaining).unwrap_or_default(),
            ));
        }
        patch_status(&api, &pod, terminal_status(&pod, code)).await?;
        hollow.release_ip(index, &uid);
        return Ok(Action::await_change());
    }
    let ready = annotation(&pod, READY_ANNOTATION) != Some("false");
    let ip = hollow.allocate_ip(index, &pod);
    let desired = running_status(&pod, &node_address(index).to_string(), &ip, ready);
    let unchanged = phase == "Running"
        && status.pod_ip.as_deref() == Some(ip.as_str())
        && desired.conditions == status.conditions
        && desired.container_statuses == status.container_statuses;
    if !unchanged {
        patch_status(&api, &pod, desired).await?;
    }
    // Pods that exit are looked at again when their run time is over.
    Ok(match exit_code(&pod) {
        Some(_) => Action::requeue(Duration::from_millis(10)),
        None => Action::await_change(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_pods_that_do_not_restart_exit() {
        let mut pod = Pod::default();
        assert_eq!(exit_code(&pod), None);
        pod.spec = Some(k8s_openapi::api::core::v1::PodSpec {
            restart_policy: Some("Never".into()),
            ..Default::default()
        });
        assert_eq!(exit_code(&pod), Some(0));
        pod.metadata.annotations = Some(BTreeMap::from([(
            EXIT_CODE_ANNOTATION.to_string(),
            "3".to_string(),
        )]));
        assert_eq!(exit_code(&pod), Some(3));
    }
}
