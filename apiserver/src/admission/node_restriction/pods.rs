//! Pods: a node creates only mirror pods of its own that name nothing it could not read
//! otherwise, updates only the status of pods bound to it, and deletes or evicts only pods
//! bound to it (upstream's admitPod, admitPodStatus and admitPodEviction).

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Pod, PodResourceClaimStatus};
use minik8s_api::kinds::pod::references::{config_map_names, secret_names};
use minik8s_api::{ApiError, Target};

use super::{NodeRestriction, Refusal, Verdict, for_node, refuse, requester, to_error};
use crate::registry::generic::DeleteAdmission;
use crate::registry::generic::{CreateAdmission, Part, Phase, Removal, UpdateAdmission};

/// The annotation that marks a mirror pod (a static pod's reflection).
const MIRROR: &str = "kubernetes.io/config.mirror";

fn target(name: &str) -> Target<'_> {
    Target {
        group: "",
        resource: "pods",
        name,
    }
}

fn node_name(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or_default()
}

/// A mirror pod's first checks, up to its owner: the UID its one owner reference, to `node`'s
/// Node, must carry.
pub(super) fn create(node: &str, pod: &Pod) -> Result<String, Refusal> {
    let mirror = pod
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(MIRROR));
    if !mirror {
        return refuse(format!(
            "pod does not have {MIRROR:?} annotation, node {node:?} can only create mirror pods"
        ));
    }
    if node_name(pod) != node {
        return refuse(format!(
            "node {node:?} can only create pods with spec.nodeName set to itself"
        ));
    }
    let owners = pod.metadata.owner_references.as_deref().unwrap_or_default();
    let owner = match owners {
        [] => {
            return refuse(format!(
                "node {node:?} can only create pods with an owner reference set to itself"
            ));
        }
        [one] => one,
        _ => {
            return refuse(format!(
                "node {node:?} can only create pods with a single owner reference set to itself"
            ));
        }
    };
    if owner.api_version != "v1" || owner.kind != "Node" || owner.name != node {
        return refuse(format!(
            "node {node:?} can only create pods with an owner reference set to itself"
        ));
    }
    if owner.controller != Some(true) {
        return refuse(format!(
            "node {node:?} can only create pods with a controller owner reference set to itself"
        ));
    }
    if owner.block_owner_deletion == Some(true) {
        return refuse(format!(
            "node {node:?} must not set blockOwnerDeletion on an owner reference"
        ));
    }
    Ok(owner.uid.clone())
}

/// The owner reference's UID against the Node's (`None`: the Node is not found).
pub(super) fn owner_uid(node: &str, claimed: &str, actual: Option<&str>) -> Verdict {
    match actual {
        None => Err(Refusal::NotFound {
            resource: "node",
            name: node.to_string(),
        }),
        Some(actual) if actual != claimed => refuse(format!(
            "node {node} UID mismatch: expected {claimed} got {actual}"
        )),
        Some(_) => Ok(()),
    }
}

/// A mirror pod may not name other API objects: the node could read them through it.
pub(super) fn references(node: &str, pod: &Pod) -> Verdict {
    let Some(spec) = &pod.spec else {
        return Ok(());
    };
    if spec
        .service_account_name
        .as_deref()
        .is_some_and(|s| !s.is_empty())
    {
        return refuse(format!(
            "node {node:?} can not create pods that reference a service account"
        ));
    }
    if !secret_names(spec).is_empty() {
        return refuse(format!(
            "node {node:?} can not create pods that reference secrets"
        ));
    }
    if !config_map_names(spec).is_empty() {
        return refuse(format!(
            "node {node:?} can not create pods that reference configmaps"
        ));
    }
    let volumes = spec.volumes.as_deref().unwrap_or_default();
    let trust_bundles = volumes
        .iter()
        .filter_map(|v| v.projected.as_ref())
        .flat_map(|p| p.sources.iter().flatten())
        .any(|s| s.cluster_trust_bundle.is_some());
    if trust_bundles {
        return refuse(format!(
            "node {node:?} can not create pods that reference clustertrustbundles"
        ));
    }
    if volumes.iter().any(|v| v.persistent_volume_claim.is_some()) {
        return refuse(format!(
            "node {node:?} can not create pods that reference persistentvolumeclaims"
        ));
    }
    Ok(())
}

/// Upstream's `resourceClaimStatusesEqual`: the same claims, by name and claim name, in order.
fn claim_statuses_equal(a: &[PodResourceClaimStatus], b: &[PodResourceClaimStatus]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(a, b)| a.name == b.name && a.resource_claim_name == b.resource_claim_name)
}

/// An update of `part` of a pod: only its status, only of a pod bound to the node, and
/// without the labels or the resource claims it was given.
pub(super) fn update(node: &str, part: Part, new: &Pod, old: &Pod) -> Verdict {
    match part {
        Part::Main => refuse(format!(
            "unexpected operation \"UPDATE\", node {node:?} can only create and delete mirror pods"
        )),
        Part::EphemeralContainers => refuse(
            "unexpected pod subresource \"ephemeralcontainers\", only 'status' and 'eviction' are allowed",
        ),
        Part::Status => {
            if node_name(old) != node {
                return refuse(format!(
                    "node {node:?} can only update pod status for pods with spec.nodeName set to itself"
                ));
            }
            let labels = |p: &Pod| p.metadata.labels.clone().unwrap_or_default();
            if labels(old) != labels(new) {
                return refuse(format!(
                    "node {node:?} cannot update labels through pod status"
                ));
            }
            let claims = |p: &Pod| {
                p.status
                    .as_ref()
                    .and_then(|s| s.resource_claim_statuses.clone())
                    .unwrap_or_default()
            };
            if !claim_statuses_equal(&claims(old), &claims(new)) {
                return refuse(format!(
                    "node {node:?} cannot update resource claim statues"
                ));
            }
            Ok(())
        }
    }
}

/// A delete (`subresource: None`) or an eviction of pod `name`: only of a pod bound to the
/// node.
pub(super) fn remove(
    node: &str,
    name: &str,
    current: Option<&Pod>,
    subresource: Option<&str>,
) -> Verdict {
    let Some(pod) = current else {
        return Err(Refusal::NotFound {
            resource: "pod",
            name: name.to_string(),
        });
    };
    if node_name(pod) == node {
        return Ok(());
    }
    match subresource {
        Some("eviction") => refuse(format!(
            "node {node} can only evict pods with spec.nodeName set to itself"
        )),
        Some(other) => refuse(format!(
            "unexpected pod subresource {other:?}, only 'status' and 'eviction' are allowed"
        )),
        None => refuse(format!(
            "node {node:?} can only delete pods with spec.nodeName set to itself"
        )),
    }
}

#[async_trait]
impl CreateAdmission<Pod> for NodeRestriction {
    fn phase(&self) -> Phase {
        Phase::Validate
    }
    async fn admit(&self, p: &mut Pod, _: bool) -> Result<(), ApiError> {
        let name = crate::admission::name_in_errors(&p.metadata).to_string();
        let Some(node) = requester(target(&name))? else {
            return Ok(());
        };
        let refused = |r| to_error(target(&name), r);
        let claimed = create(&node, p).map_err(refused)?;
        let actual = match self.nodes() {
            Some(nodes) => match nodes.get(None, &node).await {
                Ok(n) => Some(n.metadata.uid.unwrap_or_default()),
                Err(e) if e.code == 404 => None,
                Err(e) => {
                    return Err(refused(Refusal::Forbidden(format!(
                        "error looking up node {node} to verify uid: {}",
                        e.message
                    ))));
                }
            },
            None => None,
        };
        owner_uid(&node, &claimed, actual.as_deref()).map_err(refused)?;
        references(&node, p).map_err(refused)
    }
}

#[async_trait]
impl UpdateAdmission<Pod> for NodeRestriction {
    fn admits(&self, part: Part) -> bool {
        part == self.part
    }
    async fn admit_update(&self, p: &mut Pod, old: &Pod, _: bool) -> Result<(), ApiError> {
        let name = p.metadata.name.clone().unwrap_or_default();
        for_node(target(&name), |node| update(node, self.part, p, old))
    }
}

#[async_trait]
impl DeleteAdmission<Pod> for NodeRestriction {
    async fn admit_delete(&self, r: &Removal<'_, Pod>) -> Result<(), ApiError> {
        for_node(target(r.name), |node| {
            remove(node, r.name, r.current, r.subresource)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn pod(v: Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    fn forbidden(why: &str) -> Verdict {
        Err(Refusal::Forbidden(why.into()))
    }

    /// A mirror pod of n1 that passes every check, changed by `f`.
    fn mirror(f: impl FnOnce(&mut Value)) -> Pod {
        let mut v = json!({
            "metadata": {"name": "static-web-n1", "namespace": "default",
                "annotations": {MIRROR: "hash"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n1",
                    "uid": "uid-n1", "controller": true}]},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox"}]}
        });
        f(&mut v);
        pod(v)
    }

    #[test]
    fn mirror_pods_as_upstream_admits_them() {
        let owner = |f: Value| move |v: &mut Value| v["metadata"]["ownerReferences"][0] = f.clone();
        let cases: Vec<(&str, Pod, Result<String, Refusal>)> = vec![
            ("a mirror pod of its own", mirror(|_| {}), Ok("uid-n1".into())),
            (
                "not a mirror pod",
                mirror(|v| v["metadata"]["annotations"] = json!({})),
                Err(Refusal::Forbidden(
                    "pod does not have \"kubernetes.io/config.mirror\" annotation, node \"n1\" can only create mirror pods".into(),
                )),
            ),
            (
                "bound to another node",
                mirror(|v| v["spec"]["nodeName"] = json!("n2")),
                Err(Refusal::Forbidden(
                    "node \"n1\" can only create pods with spec.nodeName set to itself".into(),
                )),
            ),
            (
                "no owner",
                mirror(|v| v["metadata"]["ownerReferences"] = json!([])),
                Err(Refusal::Forbidden(
                    "node \"n1\" can only create pods with an owner reference set to itself".into(),
                )),
            ),
            (
                "two owners",
                mirror(|v| {
                    let o = v["metadata"]["ownerReferences"][0].clone();
                    v["metadata"]["ownerReferences"] = json!([o.clone(), o]);
                }),
                Err(Refusal::Forbidden(
                    "node \"n1\" can only create pods with a single owner reference set to itself".into(),
                )),
            ),
            (
                "owned by another node",
                mirror(owner(json!({"apiVersion": "v1", "kind": "Node", "name": "n2", "uid": "u", "controller": true}))),
                Err(Refusal::Forbidden(
                    "node \"n1\" can only create pods with an owner reference set to itself".into(),
                )),
            ),
            (
                "owned by something else",
                mirror(owner(json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "n1", "uid": "u", "controller": true}))),
                Err(Refusal::Forbidden(
                    "node \"n1\" can only create pods with an owner reference set to itself".into(),
                )),
            ),
            (
                "not the controller",
                mirror(owner(json!({"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "u"}))),
                Err(Refusal::Forbidden(
                    "node \"n1\" can only create pods with a controller owner reference set to itself".into(),
                )),
            ),
            (
                "blocking its owner's deletion",
                mirror(owner(json!({"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "u",
                    "controller": true, "blockOwnerDeletion": true}))),
                Err(Refusal::Forbidden(
                    "node \"n1\" must not set blockOwnerDeletion on an owner reference".into(),
                )),
            ),
        ];
        for (what, p, want) in cases {
            assert_eq!(create("n1", &p), want, "{what}");
        }
    }

    #[test]
    fn the_owner_uid_is_the_nodes() {
        assert_eq!(owner_uid("n1", "u1", Some("u1")), Ok(()));
        assert_eq!(
            owner_uid("n1", "u1", Some("u2")),
            forbidden("node n1 UID mismatch: expected u1 got u2")
        );
        assert_eq!(
            owner_uid("n1", "u1", None),
            Err(Refusal::NotFound {
                resource: "node",
                name: "n1".into()
            })
        );
    }

    #[test]
    fn mirror_pods_name_no_other_objects() {
        let with_spec = |key: &str, value: Value| {
            let key = key.to_string();
            mirror(move |v| v["spec"][key] = value)
        };
        let volume = |source: Value| with_spec("volumes", json!([source]));
        let cases = [
            ("nothing", mirror(|_| {}), Ok(())),
            (
                "a service account",
                with_spec("serviceAccountName", json!("default")),
                forbidden("node \"n1\" can not create pods that reference a service account"),
            ),
            (
                "an image pull secret",
                with_spec("imagePullSecrets", json!([{"name": "pull"}])),
                forbidden("node \"n1\" can not create pods that reference secrets"),
            ),
            (
                "a secret volume",
                volume(json!({"name": "s", "secret": {"secretName": "s"}})),
                forbidden("node \"n1\" can not create pods that reference secrets"),
            ),
            (
                "a config map volume",
                volume(json!({"name": "c", "configMap": {"name": "c"}})),
                forbidden("node \"n1\" can not create pods that reference configmaps"),
            ),
            (
                "a cluster trust bundle",
                volume(json!({"name": "b", "projected": {"sources": [
                    {"clusterTrustBundle": {"name": "b", "path": "ca.crt"}}]}})),
                forbidden("node \"n1\" can not create pods that reference clustertrustbundles"),
            ),
            (
                "a claim",
                volume(json!({"name": "d", "persistentVolumeClaim": {"claimName": "d"}})),
                forbidden("node \"n1\" can not create pods that reference persistentvolumeclaims"),
            ),
            (
                "an empty dir",
                volume(json!({"name": "e", "emptyDir": {}})),
                Ok(()),
            ),
        ];
        for (what, p, want) in cases {
            assert_eq!(references("n1", &p), want, "{what}");
        }
    }

    #[test]
    fn only_the_status_of_its_own_pods() {
        let bound = |node: &str| {
            pod(json!({"metadata": {"name": "p", "labels": {"app": "a"}},
            "spec": {"nodeName": node, "containers": []}}))
        };
        let relabeled = pod(json!({"metadata": {"name": "p", "labels": {"app": "b"}},
            "spec": {"nodeName": "n1", "containers": []}}));
        let claimed = pod(json!({"metadata": {"name": "p", "labels": {"app": "a"}},
            "spec": {"nodeName": "n1", "containers": []},
            "status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-gpu"}]}}));
        let cases = [
            (
                "its own pod's status",
                Part::Status,
                bound("n1"),
                bound("n1"),
                Ok(()),
            ),
            (
                "another node's pod",
                Part::Status,
                bound("n1"),
                bound("n2"),
                forbidden(
                    "node \"n1\" can only update pod status for pods with spec.nodeName set to itself",
                ),
            ),
            (
                "labels through status",
                Part::Status,
                relabeled,
                bound("n1"),
                forbidden("node \"n1\" cannot update labels through pod status"),
            ),
            (
                "resource claims through status",
                Part::Status,
                claimed,
                bound("n1"),
                forbidden("node \"n1\" cannot update resource claim statues"),
            ),
            (
                "the pod itself",
                Part::Main,
                bound("n1"),
                bound("n1"),
                forbidden(
                    "unexpected operation \"UPDATE\", node \"n1\" can only create and delete mirror pods",
                ),
            ),
            (
                "its ephemeral containers",
                Part::EphemeralContainers,
                bound("n1"),
                bound("n1"),
                forbidden(
                    "unexpected pod subresource \"ephemeralcontainers\", only 'status' and 'eviction' are allowed",
                ),
            ),
        ];
        for (what, part, new, old, want) in cases {
            assert_eq!(update("n1", part, &new, &old), want, "{what}");
        }
    }

    #[test]
    fn deletes_and_evictions_only_of_its_own_pods() {
        let bound = |node: &str| {
            pod(json!({"metadata": {"name": "p"},
            "spec": {"nodeName": node, "containers": []}}))
        };
        let (own, other) = (bound("n1"), bound("n2"));
        let not_found = Err(Refusal::NotFound {
            resource: "pod",
            name: "p".into(),
        });
        let cases = [
            ("delete its own", Some(&own), None, Ok(())),
            ("evict its own", Some(&own), Some("eviction"), Ok(())),
            (
                "delete another's",
                Some(&other),
                None,
                forbidden("node \"n1\" can only delete pods with spec.nodeName set to itself"),
            ),
            (
                "evict another's",
                Some(&other),
                Some("eviction"),
                forbidden("node n1 can only evict pods with spec.nodeName set to itself"),
            ),
            ("delete a missing pod", None, None, not_found.clone()),
            ("evict a missing pod", None, Some("eviction"), not_found),
        ];
        for (what, current, subresource, want) in cases {
            assert_eq!(remove("n1", "p", current, subresource), want, "{what}");
        }
    }
}
