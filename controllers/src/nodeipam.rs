//! The node IPAM controller (upstream pkg/controller/nodeipam, the range allocator): every node
//! gets its own slice of `--cluster-cidr` in `spec.podCIDR`/`spec.podCIDRs`, from which its
//! kubelet hands out pod addresses, so pod addresses never collide across nodes.
//!
//! The allocation table is the node cache itself: a range is taken while some node holds it
//! (or this process has just given it out and not yet seen the write), so a restart rebuilds
//! it from the nodes and a deleted node's range is free again once the node is gone. As in
//! upstream's cidrset, the search for a free range goes on from the last one given out, so a
//! released range is not reused at once.

use std::collections::{BTreeSet, HashMap};
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};

use crate::util::events::Recorder;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Reporter};
use kube::{Client, Resource, ResourceExt};

use crate::informers::{Cache, Change, Informers};
use crate::util::reconciler::Error;
use crate::util::runtime::Controller;

/// Upstream records the IPAM events as the node controller.
pub const REPORTER: &str = "node-controller";

/// Flags named after kube-controller-manager's.
#[derive(Clone, Debug)]
pub struct NodeIpamConfig {
    /// `--cluster-cidr`: the range all pod addresses come from (IPv4).
    pub cluster_cidr: String,
    /// `--node-cidr-mask-size`: the prefix length of each node's range.
    pub node_cidr_mask_size: u8,
}

impl Default for NodeIpamConfig {
    fn default() -> Self {
        NodeIpamConfig {
            cluster_cidr: "10.244.0.0/16".into(),
            node_cidr_mask_size: 24,
        }
    }
}

/// Why the cluster CIDR cannot be split into node ranges.
#[derive(Debug, thiserror::Error)]
pub enum CidrError {
    #[error("invalid CIDR {0:?}")]
    Cidr(String),
    #[error("node mask /{mask} does not fit in cluster CIDR {cluster}")]
    Mask { cluster: String, mask: u8 },
}

/// An IPv4 range split into equal node ranges.
#[derive(Clone, Debug, PartialEq)]
pub struct CidrSet {
    base: u32,
    cluster_bits: u8,
    node_bits: u8,
}

fn parse_cidr(cidr: &str) -> Option<(u32, u8)> {
    let (ip, bits) = cidr.split_once('/')?;
    let ip: Ipv4Addr = ip.parse().ok()?;
    let bits: u8 = bits.parse().ok()?;
    (bits <= 32).then_some((u32::from(ip), bits))
}

fn mask(bits: u8) -> u32 {
    if bits == 0 {
        0
    } else {
        u32::MAX << (32 - bits)
    }
}

impl CidrSet {
    pub fn new(cluster: &str, node_bits: u8) -> Result<CidrSet, CidrError> {
        let (ip, cluster_bits) =
            parse_cidr(cluster).ok_or_else(|| CidrError::Cidr(cluster.into()))?;
        // Upstream caps the number of node ranges at 2^16.
        if node_bits < cluster_bits || node_bits > 32 || node_bits - cluster_bits > 16 {
            return Err(CidrError::Mask {
                cluster: cluster.into(),
                mask: node_bits,
            });
        }
        Ok(CidrSet {
            base: ip & mask(cluster_bits),
            cluster_bits,
            node_bits,
        })
    }

    pub fn len(&self) -> usize {
        1 << (self.node_bits - self.cluster_bits)
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    pub fn cidr(&self, index: usize) -> String {
        let step = 1u64 << (32 - self.node_bits);
        let ip = Ipv4Addr::from(self.base + (step * index as u64) as u32);
        format!("{ip}/{}", self.node_bits)
    }

    /// The index of `cidr` when it is exactly one of this set's node ranges.
    pub fn index(&self, cidr: &str) -> Option<usize> {
        let (ip, bits) = parse_cidr(cidr)?;
        if bits != self.node_bits || ip & mask(self.cluster_bits) != self.base {
            return None;
        }
        if ip & mask(self.node_bits) != ip {
            return None;
        }
        Some((u64::from(ip - self.base) >> (32 - self.node_bits)) as usize)
    }
}

struct Allocator {
    /// Given out but not yet seen on the node, by node name.
    pending: HashMap<String, usize>,
    /// Where the next search starts.
    next: usize,
}

struct Ctx {
    client: Client,
    set: CidrSet,
    nodes: Cache<Node>,
    allocator: Mutex<Allocator>,
    recorder: Recorder,
}

fn pod_cidrs(node: &Node) -> Vec<String> {
    let Some(spec) = node.spec.as_ref() else {
        return Vec::new();
    };
    match (&spec.pod_cidrs, &spec.pod_cidr) {
        (Some(list), _) if !list.is_empty() => list.clone(),
        (_, Some(one)) if !one.is_empty() => vec![one.clone()],
        _ => Vec::new(),
    }
}

impl Ctx {
    /// Picks a free range for `node` and records it as pending; None when all are taken.
    fn allocate(&self, node: &str) -> Option<usize> {
        let mut used: BTreeSet<usize> = self
            .nodes
            .state()
            .iter()
            .flat_map(|n| pod_cidrs(n))
            .filter_map(|c| self.set.index(&c))
            .collect();
        let mut alloc = self.allocator.lock().expect("allocator");
        // Pending entries the cache has caught up with, or of nodes now gone, are done.
        alloc.pending.retain(|name, index| {
            let seen = self
                .nodes
                .get(&kube::runtime::reflector::ObjectRef::new(name));
            match seen {
                Some(n) => {
                    pod_cidrs(&n).is_empty() && {
                        used.insert(*index);
                        true
                    }
                }
                None => false,
            }
        });
        if let Some(index) = alloc.pending.get(node) {
            return Some(*index);
        }
        let total = self.set.len();
        let start = alloc.next % total;
        let free = (0..total)
            .map(|i| (start + i) % total)
            .find(|i| !used.contains(i))?;
        alloc.next = free + 1;
        alloc.pending.insert(node.to_string(), free);
        Some(free)
    }

    fn release_pending(&self, node: &str) {
        self.allocator
            .lock()
            .expect("allocator")
            .pending
            .remove(node);
    }

    async fn node_event(&self, node: &Node, reason: &str) {
        let event = Event {
            type_: EventType::Normal,
            reason: reason.into(),
            note: Some(format!("Node {} status is now: {reason}", node.name_any())),
            action: "AllocateCIDR".into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &node.object_ref(&())).await {
            tracing::debug!(error = %e, "publishing event");
        }
    }
}

/// Runs the controller until dropped.
pub async fn run(informers: Arc<Informers>, config: NodeIpamConfig) -> Result<(), CidrError> {
    let client = informers.client();
    let set = CidrSet::new(&config.cluster_cidr, config.node_cidr_mask_size)?;
    let nodes = informers.of::<Node>();
    // Nodes waiting for a range back off; one that goes away with a range frees it for them.
    let freed = nodes.changes().filter_map(|change| async move {
        matches!(&change, Change::Deleted(n) if !pod_cidrs(n).is_empty()).then_some(())
    });
    let controller = Controller::for_shared_stream(nodes.touched(), nodes.store().kube_store())
        .reconcile_all_on(freed);
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        set,
        nodes: nodes.store(),
        allocator: Mutex::new(Allocator {
            pending: HashMap::new(),
            next: 0,
        }),
        recorder: Recorder::new(
            client,
            Reporter {
                controller: REPORTER.into(),
                instance: None,
            },
        ),
    });
    // Upstream's range allocator's queue.
    controller
        .run("cidrallocator_node", reconcile_node, ctx)
        .await;
    Ok(())
}

async fn reconcile_node(node: Arc<Node>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    if !pod_cidrs(&node).is_empty() || node.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    // Every node must be known before a range can be known free.
    let _ = ctx.nodes.wait_until_ready().await;
    let name = node.name_any();
    let Some(index) = ctx.allocate(&name) else {
        ctx.node_event(&node, "CIDRNotAvailable").await;
        // An error, not a fixed requeue: the retries back off per node, as upstream's
        // rate-limited queue does, instead of every node trying again every few seconds.
        return Err(Error::failed(format!(
            "failed to allocate cidr from cluster cidr {}/{}: CIDR allocation failed; there are no remaining CIDRs left to allocate in the accepted range",
            Ipv4Addr::from(ctx.set.base),
            ctx.set.cluster_bits
        )));
    };
    let cidr = ctx.set.cidr(index);
    let patch = serde_json::json!({
        "metadata": {"resourceVersion": node.resource_version()},
        "spec": {"podCIDR": cidr, "podCIDRs": [cidr]},
    });
    let api: Api<Node> = Api::all(ctx.client.clone());
    match api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => {
            tracing::info!(%cidr, "allocated the node's pod range");
            Ok(Action::await_change())
        }
        Err(e) => {
            ctx.release_pending(&name);
            if !matches!(&e, kube::Error::Api(s) if s.code == 409 || s.code == 404) {
                ctx.node_event(&node, "CIDRAssignmentFailed").await;
            }
            Err(e.into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_ranges_of_a_cluster_range() {
        let set = CidrSet::new("10.244.0.0/16", 24).unwrap();
        assert_eq!(set.len(), 256);
        assert_eq!(set.cidr(0), "10.244.0.0/24");
        assert_eq!(set.cidr(255), "10.244.255.0/24");
        assert_eq!(set.index("10.244.7.0/24"), Some(7));
        assert_eq!(set.index("10.245.7.0/24"), None);
        assert_eq!(set.index("10.244.7.0/25"), None);
        assert_eq!(set.index("10.244.7.1/24"), None);
        let small = CidrSet::new("10.0.0.0/30", 32).unwrap();
        assert_eq!(small.len(), 4);
        assert_eq!(small.cidr(3), "10.0.0.3/32");
        assert_eq!(small.index("10.0.0.3/32"), Some(3));
        assert!(CidrSet::new("10.0.0.0/8", 26).is_err());
        assert!(CidrSet::new("10.0.0.0/24", 16).is_err());
    }
}
