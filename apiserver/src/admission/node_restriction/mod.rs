//! Upstream's NodeRestriction admission plugin (plugin/pkg/admission/noderestriction): the
//! Node authorizer and the `system:node` rules let a kubelet write nodes, pods, leases,
//! claims' status and CSINodes at all; this plugin narrows the writes to its own — its Node
//! (without the labels and taints that steer workloads), mirror pods bound to it that name
//! nothing else, the status, deletion and eviction of pods bound to it, the resize status of
//! claims, its own Lease and CSINode — so that one compromised node cannot rewrite another.
//!
//! Each kind's rules are pure functions of the requesting node and the objects (unit-tested
//! beside them); the admission traits read the caller and the stored objects around them.

mod claims;
mod nodes;
mod own;
mod pods;

use std::sync::{Arc, OnceLock, Weak};

use k8s_openapi::api::core::v1::Node;
use minik8s_api::strategy::BuiltIn;
use minik8s_api::{ApiError, Target};

use crate::admission::webhook;
use crate::registry::generic::{GenericRegistry, Part};

pub const PLUGIN_NAME: &str = "NodeRestriction";

const NODE_PREFIX: &str = "system:node:";

type Nodes = GenericRegistry<BuiltIn<Node>>;

/// The plugin for one kind's writes; updates of each part have an instance of their own
/// (upstream tells the status subresource from the main resource).
#[derive(Debug)]
pub struct NodeRestriction {
    /// The part of the object the updates this instance admits change.
    part: Part,
    /// Where mirror pods' owner Nodes are looked up: bound once nodes are served.
    nodes: Arc<OnceLock<Weak<Nodes>>>,
}

impl NodeRestriction {
    pub fn new() -> Arc<NodeRestriction> {
        Arc::new(NodeRestriction {
            part: Part::Main,
            nodes: Default::default(),
        })
    }

    /// The instance admitting updates of `part`, sharing this one's node lookup.
    pub fn updating(&self, part: Part) -> Arc<NodeRestriction> {
        Arc::new(NodeRestriction {
            part,
            nodes: self.nodes.clone(),
        })
    }

    /// Gives every instance made from this one the served Nodes to verify owners against.
    pub fn bind_nodes(&self, nodes: &Arc<Nodes>) {
        let _ = self.nodes.set(Arc::downgrade(nodes));
    }

    fn nodes(&self) -> Option<Arc<Nodes>> {
        self.nodes.get().and_then(Weak::upgrade)
    }
}

/// What a plugin refuses and why: the reason goes into upstream's Forbidden message about
/// the object, `NotFound` is the answer for an object the plugin cannot find (upstream's
/// listers name the resource in the singular: `pod "p" not found`).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Refusal {
    Forbidden(String),
    NotFound {
        resource: &'static str,
        name: String,
    },
}

type Verdict = Result<(), Refusal>;

fn refuse<T>(why: impl Into<String>) -> Result<T, Refusal> {
    Err(Refusal::Forbidden(why.into()))
}

/// Turns a refusal into upstream's error about `target` (`admission.NewForbidden`: the
/// request's name, else the object's, else `Unknown`).
fn to_error(target: Target<'_>, refusal: Refusal) -> ApiError {
    match refusal {
        Refusal::Forbidden(why) => {
            let name = if target.name.is_empty() {
                "Unknown"
            } else {
                target.name
            };
            ApiError::forbidden(Target { name, ..target }, &why)
        }
        Refusal::NotFound { resource, name } => ApiError::not_found(Target {
            group: "",
            resource,
            name: &name,
        }),
    }
}

/// The node the current request comes from (upstream's NodeIdentifier: a user named
/// `system:node:<name>` in `system:nodes`); `None` for every other user and for writes the
/// server makes itself.
fn requesting_node() -> Option<String> {
    let caller = webhook::current_caller()?;
    let name = caller.user.name.strip_prefix(NODE_PREFIX)?;
    caller
        .user
        .groups
        .iter()
        .any(|g| g == crate::authz::node::NODES_GROUP)
        .then(|| name.to_string())
}

/// The node of a kubelet's request, `None` for other users; a kubelet whose node has no
/// name is refused everything, as upstream.
fn requester(target: Target<'_>) -> Result<Option<String>, ApiError> {
    match requesting_node() {
        Some(node) if node.is_empty() => Err(to_error(
            target,
            Refusal::Forbidden(format!(
                "could not determine node from user {:?}",
                format!("{NODE_PREFIX}{node}")
            )),
        )),
        node => Ok(node),
    }
}

/// Runs `check` for a kubelet's request; other users pass.
fn for_node(target: Target<'_>, check: impl FnOnce(&str) -> Verdict) -> Result<(), ApiError> {
    match requester(target)? {
        Some(node) => check(&node).map_err(|r| to_error(target, r)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests;
