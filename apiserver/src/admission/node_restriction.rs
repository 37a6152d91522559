//! Upstream's NodeRestriction admission plugin (plugin/pkg/admission/noderestriction): the
//! Node authorizer lets a kubelet write nodes, pods' status and leases at all; this plugin
//! narrows the writes to its own — its Node (without the labels reserved for
//! administrators), mirror pods bound to it, the status of pods bound to it, its own Lease —
//! so one compromised node cannot rewrite another.

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use minik8s_api::{ApiError, Target};

use crate::admission::webhook;
use crate::registry::generic::{CreateAdmission, Part, Phase, UpdateAdmission};

pub const PLUGIN_NAME: &str = "NodeRestriction";

/// The annotation that marks a mirror pod (a static pod's reflection).
const MIRROR: &str = "kubernetes.io/config.mirror";
/// Labels a node may not set on itself: they steer workloads to or away from it.
const RESTRICTED_PREFIX: &str = "node-restriction.kubernetes.io/";

/// The node the current request comes from, if its user is a kubelet.
fn requesting_node() -> Option<String> {
    let caller = webhook::current_caller()?;
    let name = caller.user.name.strip_prefix("system:node:")?;
    caller
        .user
        .groups
        .iter()
        .any(|g| g == crate::authz::node::NODES_GROUP)
        .then(|| name.to_string())
}

fn forbidden(group: &str, resource: &str, name: &str, why: String) -> ApiError {
    ApiError::forbidden(
        Target {
            group,
            resource,
            name,
        },
        &why,
    )
}

#[derive(Debug, Default)]
pub struct NodeRestriction;

impl NodeRestriction {
    pub fn new() -> Arc<NodeRestriction> {
        Arc::new(NodeRestriction)
    }
}

fn restricted_labels<'a>(labels: impl Iterator<Item = &'a String>) -> Vec<String> {
    let mut out: Vec<String> = labels
        .filter(|k| k.starts_with(RESTRICTED_PREFIX))
        .cloned()
        .collect();
    out.sort();
    out
}

#[async_trait]
impl CreateAdmission<Node> for NodeRestriction {
    fn phase(&self) -> Phase {
        Phase::Validate
    }
    async fn admit(&self, n: &mut Node, _: bool) -> Result<(), ApiError> {
        let Some(node) = requesting_node() else {
            return Ok(());
        };
        let name = n.metadata.name.clone().unwrap_or_default();
        if name != node {
            return Err(forbidden(
                "",
                "nodes",
                &name,
                format!("node {node:?} is not allowed to modify node {name:?}"),
            ));
        }
        let bad = restricted_labels(n.metadata.labels.iter().flatten().map(|(k, _)| k));
        if !bad.is_empty() {
            return Err(forbidden(
                "",
                "nodes",
                &name,
                format!(
                    "node {node:?} is not allowed to set the following labels: {}",
                    bad.join(", ")
                ),
            ));
        }
        Ok(())
    }
}

#[async_trait]
impl UpdateAdmission<Node> for NodeRestriction {
    fn admits(&self, part: Part) -> bool {
        matches!(part, Part::Main | Part::Status)
    }
    async fn admit_update(&self, n: &mut Node, old: &Node, _: bool) -> Result<(), ApiError> {
        let Some(node) = requesting_node() else {
            return Ok(());
        };
        let name = n.metadata.name.clone().unwrap_or_default();
        if name != node {
            return Err(forbidden(
                "",
                "nodes",
                &name,
                format!("node {node:?} is not allowed to modify node {name:?}"),
            ));
        }
        let (new_labels, old_labels) = (
            n.metadata.labels.clone().unwrap_or_default(),
            old.metadata.labels.clone().unwrap_or_default(),
        );
        let changed = new_labels
            .keys()
            .chain(old_labels.keys())
            .filter(|k| new_labels.get(*k) != old_labels.get(*k));
        let bad = restricted_labels(changed);
        if !bad.is_empty() {
            let mut bad = bad;
            bad.dedup();
            return Err(forbidden(
                "",
                "nodes",
                &name,
                format!(
                    "node {node:?} is not allowed to modify labels: {}",
                    bad.join(", ")
                ),
            ));
        }
        Ok(())
    }
}

#[async_trait]
impl CreateAdmission<Pod> for NodeRestriction {
    fn phase(&self) -> Phase {
        Phase::Validate
    }
    async fn admit(&self, p: &mut Pod, _: bool) -> Result<(), ApiError> {
        let Some(node) = requesting_node() else {
            return Ok(());
        };
        let name = crate::admission::name_in_errors(&p.metadata).to_string();
        let mirror = p
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(MIRROR));
        if !mirror {
            return Err(forbidden(
                "",
                "pods",
                &name,
                format!(
                    "pod does not have {MIRROR:?} annotation, node {node:?} can only create mirror pods"
                ),
            ));
        }
        if p.spec.as_ref().and_then(|s| s.node_name.as_deref()) != Some(node.as_str()) {
            return Err(forbidden(
                "",
                "pods",
                &name,
                format!("node {node:?} can only create pods with spec.nodeName set to itself"),
            ));
        }
        Ok(())
    }
}

#[async_trait]
impl UpdateAdmission<Pod> for NodeRestriction {
    fn admits(&self, part: Part) -> bool {
        matches!(part, Part::Main | Part::Status)
    }
    async fn admit_update(&self, p: &mut Pod, old: &Pod, _: bool) -> Result<(), ApiError> {
        let Some(node) = requesting_node() else {
            return Ok(());
        };
        if old.spec.as_ref().and_then(|s| s.node_name.as_deref()) != Some(node.as_str()) {
            let name = p.metadata.name.clone().unwrap_or_default();
            return Err(forbidden(
                "",
                "pods",
                &name,
                format!(
                    "node {node:?} can only update pod status for pods with spec.nodeName set to itself"
                ),
            ));
        }
        Ok(())
    }
}

fn check_lease(l: &Lease) -> Result<(), ApiError> {
    let Some(node) = requesting_node() else {
        return Ok(());
    };
    let name = l.metadata.name.clone().unwrap_or_default();
    let ns = l.metadata.namespace.as_deref().unwrap_or_default();
    if ns == "kube-node-lease" && name != node {
        return Err(forbidden(
            "coordination.k8s.io",
            "leases",
            &name,
            "can only access node lease with the same name as the requesting node".into(),
        ));
    }
    Ok(())
}

#[async_trait]
impl CreateAdmission<Lease> for NodeRestriction {
    fn phase(&self) -> Phase {
        Phase::Validate
    }
    async fn admit(&self, l: &mut Lease, _: bool) -> Result<(), ApiError> {
        check_lease(l)
    }
}

#[async_trait]
impl UpdateAdmission<Lease> for NodeRestriction {
    async fn admit_update(&self, l: &mut Lease, _: &Lease, _: bool) -> Result<(), ApiError> {
        check_lease(l)
    }
}
