//! The Node authorizer, as upstream's: a kubelet (`system:node:<name>` in `system:nodes`)
//! may read a Secret, ConfigMap, PersistentVolumeClaim or PersistentVolume only when a pod
//! bound to its node uses it, and request a token only for a ServiceAccount such a pod runs
//! as; for everything else it has the `system:node` ClusterRole's rules (not bound through
//! RBAC: this authorizer applies them). Upstream walks a graph it keeps; here the pods bound
//! to the node are looked up in a cache of pods, which is the same relation.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use minik8s_api::kinds::pod::references;
use minik8s_api::rbac::{self, Attributes};

use super::Decision;
use super::cache::ObjectCache;
use super::rbac::Rbac;
use crate::storage::DynStore;

pub const NODES_GROUP: &str = "system:nodes";
const NODE_PREFIX: &str = "system:node:";
/// The ClusterRole whose rules a node has.
pub const NODE_ROLE: &str = "system:node";

#[derive(Debug)]
pub struct NodeAuthorizer {
    pods: Arc<ObjectCache<Pod>>,
    claims: Arc<ObjectCache<PersistentVolumeClaim>>,
}

/// The node a user is the kubelet of.
pub fn node_of(a: &Attributes) -> Option<&str> {
    let name = a.user.strip_prefix(NODE_PREFIX)?;
    (a.groups.iter().any(|g| g == NODES_GROUP) && !name.is_empty()).then_some(name)
}

/// What a pod's spec refers to by name in its namespace.
/// The claims a pod uses: its PersistentVolumeClaim volumes and the claims made for its
/// generic ephemeral volumes (`<pod>-<volume>`). Secrets and ConfigMaps come from the shared
/// walk in [`minik8s_api::kinds::pod::references`].
fn claims(pod: &Pod) -> Vec<String> {
    let Some(spec) = &pod.spec else {
        return Vec::new();
    };
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    spec.volumes
        .iter()
        .flatten()
        .filter_map(|v| {
            if let Some(c) = &v.persistent_volume_claim {
                Some(c.claim_name.clone())
            } else {
                v.ephemeral
                    .as_ref()
                    .map(|_| format!("{pod_name}-{}", v.name))
            }
        })
        .collect()
}

impl NodeAuthorizer {
    pub fn start(store: &DynStore) -> NodeAuthorizer {
        NodeAuthorizer {
            pods: ObjectCache::start(store.clone(), "/registry/pods/".into()),
            claims: ObjectCache::start(store.clone(), "/registry/persistentvolumeclaims/".into()),
        }
    }

    pub fn synced(&self) -> bool {
        self.pods.synced() && self.claims.synced()
    }

    /// The pods bound to `node` in `namespace` (`""`: every namespace).
    fn pods_on(&self, node: &str, namespace: &str) -> Vec<Arc<Pod>> {
        let under = if namespace.is_empty() {
            String::new()
        } else {
            format!("{namespace}/")
        };
        self.pods
            .under(&under)
            .into_iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
            .collect()
    }

    /// Whether a pod bound to `node` relates to the object the request names.
    fn related(&self, node: &str, a: &Attributes) -> bool {
        match a.resource.as_str() {
            "persistentvolumes" => self.pods_on(node, "").iter().any(|p| {
                let ns = p.metadata.namespace.clone().unwrap_or_default();
                claims(p).iter().any(|c| {
                    self.claims
                        .named(&format!("{ns}/{c}"))
                        .and_then(|claim| claim.spec.as_ref()?.volume_name.clone())
                        .as_deref()
                        == Some(a.name.as_str())
                })
            }),
            resource => self.pods_on(node, &a.namespace).iter().any(|p| {
                let Some(spec) = &p.spec else { return false };
                match resource {
                    "secrets" => references::secret_names(spec).contains(&a.name.as_str()),
                    "configmaps" => references::config_map_names(spec).contains(&a.name.as_str()),
                    "persistentvolumeclaims" => claims(p).contains(&a.name),
                    _ => false,
                }
            }),
        }
    }

    /// A kubelet's request: its graph decides for the objects pods use, the node rules for
    /// the rest; anyone else's is not this authorizer's.
    pub fn decide(&self, a: &Attributes, rbac: &Rbac) -> Decision {
        let Some(node) = node_of(a) else {
            return Decision::NoOpinion(String::new());
        };
        if a.resource_request && a.api_group.is_empty() {
            let graph = match (a.resource.as_str(), a.subresource.as_str()) {
                ("secrets" | "configmaps" | "persistentvolumeclaims" | "persistentvolumes", "") => {
                    Some(a.verb == "get")
                }
                ("serviceaccounts", "token") => Some(a.verb == "create"),
                _ => None,
            };
            if let Some(verb_ok) = graph {
                if !verb_ok || a.name.is_empty() {
                    return Decision::NoOpinion(format!(
                        "can only {} individual resources of this type",
                        if a.subresource == "token" {
                            "create"
                        } else {
                            "get"
                        }
                    ));
                }
                let related = if a.resource == "serviceaccounts" {
                    self.pods_on(node, &a.namespace).iter().any(|p| {
                        p.spec
                            .as_ref()
                            .and_then(|s| s.service_account_name.as_deref())
                            .unwrap_or("default")
                            == a.name
                    })
                } else {
                    self.related(node, a)
                };
                return if related {
                    Decision::Allow
                } else {
                    Decision::NoOpinion(format!(
                        "no relationship found between node '{node}' and this object"
                    ))
                };
            }
        }
        if rbac::rules_allow(&rbac.cluster_role_rules(NODE_ROLE), a) {
            Decision::Allow
        } else {
            Decision::NoOpinion(String::new())
        }
    }
}
