//! The Node authorizer, as upstream's: a kubelet (`system:node:<name>` in `system:nodes`)
//! may read a Secret, ConfigMap, PersistentVolumeClaim or PersistentVolume only when a pod
//! bound to its node uses it, and request a token only for a ServiceAccount such a pod runs
//! as; for everything else it has the `system:node` ClusterRole's rules (not bound through
//! RBAC: this authorizer applies them). Upstream walks a graph it keeps; here the pods bound
//! to the node are looked up in a cache of pods, which is the same relation.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, PodSpec};
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
#[derive(Default)]
struct Refs {
    secrets: Vec<String>,
    config_maps: Vec<String>,
    claims: Vec<String>,
}

fn refs(pod: &Pod) -> Refs {
    let mut r = Refs::default();
    let Some(spec) = &pod.spec else { return r };
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    for s in spec.image_pull_secrets.iter().flatten() {
        r.secrets.push(s.name.clone());
    }
    for v in spec.volumes.iter().flatten() {
        if let Some(s) = v.secret.as_ref().and_then(|s| s.secret_name.clone()) {
            r.secrets.push(s);
        }
        if let Some(c) = &v.config_map {
            r.config_maps.push(c.name.clone());
        }
        if let Some(c) = &v.persistent_volume_claim {
            r.claims.push(c.claim_name.clone());
        }
        if v.ephemeral.is_some() {
            r.claims.push(format!("{pod_name}-{}", v.name));
        }
        for source in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
            if let Some(s) = &source.secret {
                r.secrets.push(s.name.clone());
            }
            if let Some(c) = &source.config_map {
                r.config_maps.push(c.name.clone());
            }
        }
        if let Some(s) = v
            .csi
            .as_ref()
            .and_then(|c| c.node_publish_secret_ref.as_ref())
        {
            r.secrets.push(s.name.clone());
        }
    }
    containers_refs(spec, &mut r);
    r
}

fn containers_refs(spec: &PodSpec, r: &mut Refs) {
    let envs = spec
        .containers
        .iter()
        .map(|c| (&c.env, &c.env_from))
        .chain(
            spec.init_containers
                .iter()
                .flatten()
                .map(|c| (&c.env, &c.env_from)),
        )
        .chain(
            spec.ephemeral_containers
                .iter()
                .flatten()
                .map(|c| (&c.env, &c.env_from)),
        );
    for (env, env_from) in envs {
        for e in env.iter().flatten() {
            let Some(from) = &e.value_from else { continue };
            if let Some(s) = &from.secret_key_ref {
                r.secrets.push(s.name.clone());
            }
            if let Some(c) = &from.config_map_key_ref {
                r.config_maps.push(c.name.clone());
            }
        }
        for f in env_from.iter().flatten() {
            if let Some(s) = &f.secret_ref {
                r.secrets.push(s.name.clone());
            }
            if let Some(c) = &f.config_map_ref {
                r.config_maps.push(c.name.clone());
            }
        }
    }
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
                refs(p).claims.iter().any(|c| {
                    self.claims
                        .named(&format!("{ns}/{c}"))
                        .and_then(|claim| claim.spec.as_ref()?.volume_name.clone())
                        .as_deref()
                        == Some(a.name.as_str())
                })
            }),
            resource => self.pods_on(node, &a.namespace).iter().any(|p| {
                let r = refs(p);
                let names = match resource {
                    "secrets" => &r.secrets,
                    "configmaps" => &r.config_maps,
                    "persistentvolumeclaims" => &r.claims,
                    _ => return false,
                };
                names.contains(&a.name)
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
