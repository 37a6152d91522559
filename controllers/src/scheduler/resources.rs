//! What a pod asks of a node and what a node offers, as integers (millicores, bytes), computed
//! the way upstream's `resourcehelper.PodRequests` does: containers run together so their
//! requests add up, init containers run one at a time so only the largest counts, sidecars
//! (init containers with `restartPolicy: Always`) keep running beside everything after them,
//! and the pod's overhead comes on top.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Node, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Upstream's defaults for containers that request no cpu or memory, used only for scoring
/// (so that pods without requests still spread).
pub const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
pub const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

/// Amounts of the resources the scheduler accounts for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resources {
    pub milli_cpu: i64,
    pub memory: i64,
    pub ephemeral_storage: i64,
    /// Extended resources (`example.com/gpu`), hugepages and attachable volumes, in units.
    pub scalar: BTreeMap<String, i64>,
}

/// Whether `name` is one of the countable resources besides cpu, memory and storage
/// (upstream's `IsScalarResourceName`).
fn is_scalar(name: &str) -> bool {
    name.starts_with("hugepages-")
        || name.starts_with("attachable-volumes-")
        || (name.contains('/') && !name.starts_with("kubernetes.io/"))
}

fn value(q: &Quantity) -> i64 {
    minik8s_api::quantity::Quantity::parse(&q.0).map_or(0, |q| q.value() as i64)
}

fn milli_value(q: &Quantity) -> i64 {
    minik8s_api::quantity::Quantity::parse(&q.0).map_or(0, |q| q.milli_value() as i64)
}

impl Resources {
    pub fn from_list(list: Option<&BTreeMap<String, Quantity>>) -> Self {
        let mut r = Resources::default();
        for (name, q) in list.into_iter().flatten() {
            match name.as_str() {
                "cpu" => r.milli_cpu = milli_value(q),
                "memory" => r.memory = value(q),
                "ephemeral-storage" => r.ephemeral_storage = value(q),
                n if is_scalar(n) => {
                    r.scalar.insert(n.to_string(), value(q));
                }
                _ => {}
            }
        }
        r
    }

    pub fn add(&mut self, other: &Resources) {
        self.milli_cpu += other.milli_cpu;
        self.memory += other.memory;
        self.ephemeral_storage += other.ephemeral_storage;
        for (k, v) in &other.scalar {
            *self.scalar.entry(k.clone()).or_default() += v;
        }
    }

    pub fn sub(&mut self, other: &Resources) {
        self.milli_cpu -= other.milli_cpu;
        self.memory -= other.memory;
        self.ephemeral_storage -= other.ephemeral_storage;
        for (k, v) in &other.scalar {
            *self.scalar.entry(k.clone()).or_default() -= v;
        }
        self.scalar.retain(|_, v| *v != 0);
    }

    fn set_max(&mut self, other: &Resources) {
        self.milli_cpu = self.milli_cpu.max(other.milli_cpu);
        self.memory = self.memory.max(other.memory);
        self.ephemeral_storage = self.ephemeral_storage.max(other.ephemeral_storage);
        for (k, v) in &other.scalar {
            let e = self.scalar.entry(k.clone()).or_default();
            *e = (*e).max(*v);
        }
    }

    pub fn is_zero(&self) -> bool {
        self.milli_cpu == 0
            && self.memory == 0
            && self.ephemeral_storage == 0
            && self.scalar.values().all(|v| *v == 0)
    }
}

/// Combines per-container amounts as the kubelet will run the containers.
fn aggregate(spec: &PodSpec, per_container: impl Fn(&Container) -> Resources) -> Resources {
    let mut total = Resources::default();
    for c in &spec.containers {
        total.add(&per_container(c));
    }
    let mut sidecars = Resources::default();
    let mut init_peak = Resources::default();
    for c in spec.init_containers.iter().flatten() {
        let own = per_container(c);
        let during = if c.restart_policy.as_deref() == Some("Always") {
            total.add(&own);
            sidecars.add(&own);
            sidecars.clone()
        } else {
            let mut d = own;
            d.add(&sidecars);
            d
        };
        init_peak.set_max(&during);
    }
    total.set_max(&init_peak);
    total.add(&Resources::from_list(spec.overhead.as_ref()));
    total
}

/// What the pod requests, for fitting it on a node.
pub fn pod_requests(spec: &PodSpec) -> Resources {
    aggregate(spec, |c| {
        Resources::from_list(c.resources.as_ref().and_then(|r| r.requests.as_ref()))
    })
}

/// Cpu and memory requests with upstream's defaults for containers that set none, for scoring.
pub fn pod_nonzero_requests(spec: &PodSpec) -> (i64, i64) {
    let r = aggregate(spec, |c| {
        let requests = c.resources.as_ref().and_then(|r| r.requests.as_ref());
        let get = |name: &str| requests.and_then(|r| r.get(name));
        Resources {
            milli_cpu: get("cpu").map_or(DEFAULT_MILLI_CPU_REQUEST, milli_value),
            memory: get("memory").map_or(DEFAULT_MEMORY_REQUEST, value),
            ..Default::default()
        }
    });
    (r.milli_cpu, r.memory)
}

/// What a node offers: its allocatable resources and how many pods it may run.
pub fn node_allocatable(node: &Node) -> (Resources, i64) {
    let list = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
    let pods = list.and_then(|l| l.get("pods")).map_or(0, value);
    (Resources::from_list(list), pods)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(cpu: Option<&str>, mem: Option<&str>, restart: Option<&str>) -> Container {
        let mut requests = BTreeMap::new();
        if let Some(c) = cpu {
            requests.insert("cpu".to_string(), Quantity(c.into()));
        }
        if let Some(m) = mem {
            requests.insert("memory".to_string(), Quantity(m.into()));
        }
        Container {
            name: "c".into(),
            restart_policy: restart.map(String::from),
            resources: Some(k8s_openapi::api::core::v1::ResourceRequirements {
                requests: Some(requests),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn containers_add_and_init_containers_take_the_max() {
        // Upstream's example: init 2/1G and 2/3G, containers 2/1G and 1/1G: 3 cpu, 3G.
        let spec = PodSpec {
            init_containers: Some(vec![
                container(Some("2"), Some("1G"), None),
                container(Some("2"), Some("3G"), None),
            ]),
            containers: vec![
                container(Some("2"), Some("1G"), None),
                container(Some("1"), Some("1G"), None),
            ],
            ..Default::default()
        };
        let r = pod_requests(&spec);
        assert_eq!(r.milli_cpu, 3000);
        assert_eq!(r.memory, 3_000_000_000);
    }

    #[test]
    fn sidecars_run_beside_later_init_containers_and_the_app() {
        let spec = PodSpec {
            init_containers: Some(vec![
                container(Some("1"), None, Some("Always")),
                container(Some("3"), None, None),
            ]),
            containers: vec![container(Some("1"), None, None)],
            overhead: Some([("cpu".to_string(), Quantity("250m".into()))].into()),
            ..Default::default()
        };
        // max(1 + 1 sidecar, 3 + 1 sidecar) + 0.25 overhead
        assert_eq!(pod_requests(&spec).milli_cpu, 4250);
    }

    #[test]
    fn scoring_defaults_apply_to_containers_without_requests() {
        let spec = PodSpec {
            containers: vec![
                container(None, None, None),
                container(Some("500m"), Some("1Gi"), None),
            ],
            ..Default::default()
        };
        assert_eq!(
            pod_nonzero_requests(&spec),
            (600, DEFAULT_MEMORY_REQUEST + 1024 * 1024 * 1024)
        );
        assert!(pod_requests(&PodSpec::default()).is_zero());
    }

    #[test]
    fn extended_resources_are_counted_and_unknown_ones_ignored() {
        let list: BTreeMap<String, Quantity> = [
            ("example.com/gpu", "2"),
            ("hugepages-2Mi", "4Mi"),
            ("pods", "110"),
            ("storage", "1Gi"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), Quantity(v.into())))
        .collect();
        let r = Resources::from_list(Some(&list));
        assert_eq!(r.scalar.get("example.com/gpu"), Some(&2));
        assert_eq!(r.scalar.get("hugepages-2Mi"), Some(&(4 * 1024 * 1024)));
        assert_eq!(r.scalar.len(), 2);
        let mut sum = r.clone();
        sum.add(&r);
        sum.sub(&r);
        assert_eq!(sum, r);
    }
}
