//! The scheduler's view of what each node already runs, kept up to date incrementally from the
//! pod watch (as upstream's scheduler cache keeps `NodeInfo`s), so that a scheduling attempt
//! costs a pass over the nodes and never a pass over all pods.
//!
//! A pod the scheduler has just chosen a node for is *assumed* there at once, before the bind
//! reaches the API and the watch reports it: a burst of pods must see each other's claims, or
//! they would all pick the same least-loaded node. The watch confirms the assumption; a failed
//! bind forgets it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod, Taint};

use super::filters::effective_taints;
use super::pod_affinity::AffinityTerms;
use super::resources::{Resources, node_allocatable, pod_nonzero_requests, pod_requests};

/// A host port a container asks for; the protocol and address are defaulted as upstream.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HostPort {
    pub protocol: String,
    pub ip: String,
    pub port: i32,
}

/// Pods that every selector treats alike: one namespace, the same labels, all terminating or
/// none. A ReplicaSet's pods on a node form one group, so the affinity and spreading
/// selectors are matched once per group rather than once per pod.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct PodGroup {
    pub namespace: String,
    pub labels: Arc<BTreeMap<String, String>>,
    pub terminating: bool,
}

impl PodGroup {
    fn of(pod: &Pod) -> Self {
        PodGroup {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            labels: Arc::new(pod.metadata.labels.clone().unwrap_or_default()),
            terminating: pod.metadata.deletion_timestamp.is_some(),
        }
    }

    fn differs(&self, pod: &Pod) -> bool {
        let empty = BTreeMap::new();
        self.terminating != pod.metadata.deletion_timestamp.is_some()
            || Some(self.namespace.as_str()) != pod.metadata.namespace.as_deref()
            || self.labels.as_ref() != pod.metadata.labels.as_ref().unwrap_or(&empty)
    }
}

/// What the scheduler needs of a pod, computed once per pod version.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodInfo {
    pub requests: Resources,
    /// Cpu (millicores) and memory with defaults for containers without requests.
    pub nonzero: (i64, i64),
    pub ports: Vec<HostPort>,
    pub group: PodGroup,
    /// Its inter-pod affinity terms, when it has any.
    pub affinity: Option<Arc<AffinityTerms>>,
    /// Name and UID, to delete it if it is preempted.
    pub name: String,
    pub uid: String,
    pub priority: i32,
    /// When it started (its creation until the kubelet says), for choosing among victims.
    pub start: Option<k8s_openapi::jiff::Timestamp>,
}

impl PodInfo {
    pub fn new(pod: &Pod) -> Self {
        let Some(spec) = pod.spec.as_ref() else {
            return PodInfo::default();
        };
        let ports = spec
            .containers
            .iter()
            .flat_map(|c| c.ports.iter().flatten())
            .filter_map(|p| {
                let port = p.host_port.filter(|p| *p > 0)?;
                Some(HostPort {
                    protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                    ip: p.host_ip.clone().unwrap_or_else(|| "0.0.0.0".into()),
                    port,
                })
            })
            .collect();
        PodInfo {
            requests: pod_requests(spec),
            nonzero: pod_nonzero_requests(spec),
            ports,
            group: PodGroup::of(pod),
            affinity: AffinityTerms::of(pod).map(Arc::new),
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            priority: spec.priority.unwrap_or(0),
            start: pod
                .status
                .as_ref()
                .and_then(|s| s.start_time.as_ref())
                .or(pod.metadata.creation_timestamp.as_ref())
                .map(|t| t.0),
        }
    }
}

/// A node as the filters and scores see it.
#[derive(Clone, Debug)]
pub struct NodeState {
    pub node: Arc<Node>,
    pub allocatable: Resources,
    pub allowed_pods: i64,
    /// Its taints and the ones its conditions imply.
    pub taints: Vec<Taint>,
}

impl NodeState {
    pub fn new(node: Arc<Node>) -> Self {
        let (allocatable, allowed_pods) = node_allocatable(&node);
        let taints = effective_taints(&node);
        NodeState {
            node,
            allocatable,
            allowed_pods,
            taints,
        }
    }

    /// Whether a change to the node could let a waiting pod fit (upstream requeues on
    /// allocatable, labels, taints, conditions and unschedulable changes only).
    pub fn differs_for_scheduling(&self, other: &NodeState) -> bool {
        self.allocatable != other.allocatable
            || self.allowed_pods != other.allowed_pods
            || self.taints != other.taints
            || self.node.metadata.labels != other.node.metadata.labels
            || self.node.spec.as_ref().and_then(|s| s.unschedulable)
                != other.node.spec.as_ref().and_then(|s| s.unschedulable)
    }
}

/// What the pods bound or assumed on one node use.
#[derive(Clone, Debug, Default)]
pub struct NodeUsage {
    pub requested: Resources,
    /// Requests with scoring defaults, for the allocation strategies.
    pub nonzero_cpu: i64,
    pub nonzero_memory: i64,
    pub pods: i64,
    /// Host ports in use, with how many pods use each.
    pub ports: HashMap<HostPort, u32>,
    /// How many of its pods are in each group.
    pub groups: HashMap<PodGroup, u32>,
}

impl NodeUsage {
    /// Counts `pod` on the node.
    pub fn add(&mut self, pod: &PodInfo) {
        self.requested.add(&pod.requests);
        self.nonzero_cpu += pod.nonzero.0;
        self.nonzero_memory += pod.nonzero.1;
        self.pods += 1;
        for p in &pod.ports {
            *self.ports.entry(p.clone()).or_default() += 1;
        }
        *self.groups.entry(pod.group.clone()).or_default() += 1;
    }

    /// Stops counting `pod` on the node.
    pub fn sub(&mut self, pod: &PodInfo) {
        self.requested.sub(&pod.requests);
        self.nonzero_cpu -= pod.nonzero.0;
        self.nonzero_memory -= pod.nonzero.1;
        self.pods -= 1;
        for p in &pod.ports {
            if let Some(n) = self.ports.get_mut(p) {
                *n -= 1;
                if *n == 0 {
                    self.ports.remove(p);
                }
            }
        }
        if let Some(n) = self.groups.get_mut(&pod.group) {
            *n -= 1;
            if *n == 0 {
                self.groups.remove(&pod.group);
            }
        }
    }
}

#[derive(Clone, Debug)]
struct PodRecord {
    node: String,
    info: PodInfo,
    assumed: bool,
}

#[derive(Debug, Default)]
pub struct Cache {
    /// By pod UID.
    pods: HashMap<String, PodRecord>,
    usage: BTreeMap<String, NodeUsage>,
    /// Pods with inter-pod affinity terms (upstream's PodsWithAffinity), by UID.
    with_affinity: HashSet<String>,
}

impl Cache {
    pub fn usage(&self, node: &str) -> Option<&NodeUsage> {
        self.usage.get(node)
    }

    /// Every node with pods, and what they use.
    pub fn usages(&self) -> impl Iterator<Item = (&String, &NodeUsage)> {
        self.usage.iter()
    }

    /// The pods with inter-pod affinity terms, with their nodes.
    pub fn pods_with_affinity(&self) -> impl Iterator<Item = (&str, &PodInfo)> {
        self.with_affinity
            .iter()
            .filter_map(|uid| self.pods.get(uid))
            .map(|r| (r.node.as_str(), &r.info))
    }

    /// Whether the pod's namespace, labels or termination differ from what is counted (a
    /// pod not counted differs).
    pub fn group_differs(&self, uid: &str, pod: &Pod) -> bool {
        self.pods.get(uid).is_none_or(|r| r.info.group.differs(pod))
    }

    pub fn is_assumed(&self, uid: &str) -> bool {
        self.pods.get(uid).is_some_and(|r| r.assumed)
    }

    pub fn contains(&self, uid: &str) -> bool {
        self.pods.contains_key(uid)
    }

    /// The node the pod is counted on.
    pub fn node_of(&self, uid: &str) -> Option<&str> {
        self.pods.get(uid).map(|r| r.node.as_str())
    }

    fn insert(&mut self, uid: &str, record: PodRecord) {
        self.remove(uid);
        let u = self.usage.entry(record.node.clone()).or_default();
        u.add(&record.info);
        if record.info.affinity.is_some() {
            self.with_affinity.insert(uid.to_string());
        }
        self.pods.insert(uid.to_string(), record);
    }

    /// A pod the API reports bound to `node` and not finished.
    pub fn add_bound(&mut self, uid: &str, node: &str, info: PodInfo) {
        self.insert(
            uid,
            PodRecord {
                node: node.to_string(),
                info,
                assumed: false,
            },
        );
    }

    /// A pod the scheduler is binding to `node`.
    pub fn assume(&mut self, uid: &str, node: &str, info: PodInfo) {
        self.insert(
            uid,
            PodRecord {
                node: node.to_string(),
                info,
                assumed: true,
            },
        );
    }

    /// Drops an assumption whose bind failed; a confirmed pod stays.
    pub fn forget(&mut self, uid: &str) {
        if self.is_assumed(uid) {
            self.remove(uid);
        }
    }

    /// The pod is gone or finished; returns whether it was counted.
    pub fn remove(&mut self, uid: &str) -> bool {
        let Some(record) = self.pods.remove(uid) else {
            return false;
        };
        self.with_affinity.remove(uid);
        if let Some(u) = self.usage.get_mut(&record.node) {
            u.sub(&record.info);
            if u.pods == 0 {
                self.usage.remove(&record.node);
            }
        }
        true
    }

    /// The pods on each node of `nodes`, with what the scheduler knows of them.
    pub fn pods_on<'a>(
        &'a self,
        nodes: &std::collections::HashSet<&str>,
    ) -> HashMap<&'a str, Vec<&'a PodInfo>> {
        let mut on: HashMap<&str, Vec<&PodInfo>> = HashMap::new();
        for r in self.pods.values() {
            if nodes.contains(r.node.as_str()) {
                on.entry(r.node.as_str()).or_default().push(&r.info);
            }
        }
        on
    }

    /// The UIDs of confirmed (not assumed) pods, to drop the ones a relist no longer has.
    pub fn bound_uids(&self) -> Vec<String> {
        self.pods
            .iter()
            .filter(|(_, r)| !r.assumed)
            .map(|(uid, _)| uid.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(cpu: i64, port: Option<i32>) -> PodInfo {
        PodInfo {
            requests: Resources {
                milli_cpu: cpu,
                ..Default::default()
            },
            nonzero: (cpu.max(100), 1),
            ports: port
                .map(|port| HostPort {
                    protocol: "TCP".into(),
                    ip: "0.0.0.0".into(),
                    port,
                })
                .into_iter()
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn assume_confirm_forget_and_remove() {
        let mut c = Cache::default();
        c.assume("a", "n1", info(500, Some(80)));
        assert!(c.is_assumed("a"));
        let u = c.usage("n1").unwrap();
        assert_eq!((u.requested.milli_cpu, u.pods, u.ports.len()), (500, 1, 1));

        // The watch confirms: counted once, no longer assumed, not forgotten.
        c.add_bound("a", "n1", info(500, Some(80)));
        assert!(!c.is_assumed("a"));
        c.forget("a");
        assert_eq!(c.usage("n1").unwrap().pods, 1);

        // A failed bind forgets the assumption.
        c.assume("b", "n2", info(0, None));
        assert_eq!(c.usage("n2").unwrap().nonzero_cpu, 100);
        c.forget("b");
        assert!(c.usage("n2").is_none());

        // Moving a pod between nodes moves its usage.
        c.add_bound("a", "n2", info(500, Some(80)));
        assert!(c.usage("n1").is_none());
        assert_eq!(c.usage("n2").unwrap().requested.milli_cpu, 500);
        assert!(c.remove("a"));
        assert!(!c.remove("a"));
        assert!(c.usage("n2").is_none());
        assert_eq!(c.bound_uids(), Vec::<String>::new());
    }

    #[test]
    fn pod_info_reads_host_ports_with_defaults() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "i", "ports": [
                {"containerPort": 80, "hostPort": 8080},
                {"containerPort": 53, "hostPort": 53, "protocol": "UDP", "hostIP": "10.0.0.1"},
                {"containerPort": 90},
            ]}]},
        }))
        .unwrap();
        let i = PodInfo::new(&pod);
        assert_eq!(
            i.ports,
            vec![
                HostPort {
                    protocol: "TCP".into(),
                    ip: "0.0.0.0".into(),
                    port: 8080
                },
                HostPort {
                    protocol: "UDP".into(),
                    ip: "10.0.0.1".into(),
                    port: 53
                },
            ]
        );
    }
}
