//! The PVC protection controller (upstream's pkg/controller/volume/pvcprotection): a deleted
//! claim keeps its `kubernetes.io/pvc-protection` finalizer, and so stays Terminating, while
//! a scheduled pod that has not finished uses it, so a running pod never loses its volume.
//! Once no such pod is left the finalizer is removed and the claim goes. Claims created
//! without the finalizer (before the admission plugin was on) get it here.

use std::sync::Arc;

use futures::StreamExt;
use futures::stream;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Client, ResourceExt};
use minik8s_api::volume::PVC_PROTECTION_FINALIZER;

use crate::informers::{Cache, Informers};
use crate::util::reconciler::Error;
use crate::util::runtime;

pub const NAME: &str = "persistentvolumeclaim-protection";

struct Ctx {
    client: Client,
    pods: Cache<Pod>,
}

pub async fn run(informers: Arc<Informers>) {
    let claims = informers.of::<PersistentVolumeClaim>();
    let pods = informers.of::<Pod>();
    let ctx = Arc::new(Ctx {
        client: informers.client(),
        pods: pods.store(),
    });
    // A pod's change may free the claims it uses (finished, deleted).
    let from_pods = pods.touched().flat_map(|pod| {
        let ns = pod.namespace().unwrap_or_default();
        let keys: Vec<_> = super::claims_of(&pod)
            .map(|c| ObjectRef::<PersistentVolumeClaim>::new(&c).within(&ns))
            .collect();
        stream::iter(keys)
    });
    let queue = stream::select(
        claims.touched().map(|c| ObjectRef::from_obj(c.as_ref())),
        from_pods,
    );
    runtime::run("pvcprotection", claims.store(), queue, reconcile, ctx).await
}

fn has_finalizer(claim: &PersistentVolumeClaim) -> bool {
    claim
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == PVC_PROTECTION_FINALIZER)
}

fn terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// Upstream's `podUsesPVC`, for pods that have not finished: only scheduled pods count (a
/// kubelet refuses to start a pod whose claim is being deleted), and an ephemeral volume's
/// claim only when the pod owns it.
pub fn pod_uses(pod: &Pod, claim: &PersistentVolumeClaim) -> bool {
    if terminal(pod) || pod.namespace() != claim.namespace() {
        return false;
    }
    let scheduled = pod
        .spec
        .as_ref()
        .is_some_and(|s| !s.node_name.as_deref().unwrap_or("").is_empty());
    if !scheduled {
        return false;
    }
    let name = claim.name_any();
    let pod_name = pod.name_any();
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .any(|v| {
            if let Some(c) = &v.persistent_volume_claim {
                return c.claim_name == name;
            }
            v.ephemeral.is_some()
                && format!("{pod_name}-{}", v.name) == name
                && claim.owner_references().iter().any(|o| {
                    o.controller == Some(true) && Some(&o.uid) == pod.metadata.uid.as_ref()
                })
        })
}

async fn reconcile(claim: Arc<PersistentVolumeClaim>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let api: Api<PersistentVolumeClaim> =
        Api::namespaced(ctx.client.clone(), &claim.namespace().unwrap_or_default());
    let deleting = claim.metadata.deletion_timestamp.is_some();
    if deleting && has_finalizer(&claim) {
        if in_use(&claim, &ctx).await? {
            tracing::debug!("keeping the claim: a pod uses it");
            return Ok(Action::await_change());
        }
        let mut next = (*claim).clone();
        next.metadata
            .finalizers
            .get_or_insert_with(Vec::new)
            .retain(|f| f != PVC_PROTECTION_FINALIZER);
        match api
            .replace(&claim.name_any(), &PostParams::default(), &next)
            .await
        {
            Ok(_) => tracing::info!("removed the protection finalizer of an unused deleted claim"),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    } else if !deleting && !has_finalizer(&claim) {
        let mut next = (*claim).clone();
        next.metadata
            .finalizers
            .get_or_insert_with(Vec::new)
            .push(PVC_PROTECTION_FINALIZER.into());
        api.replace(&claim.name_any(), &PostParams::default(), &next)
            .await?;
    }
    Ok(Action::await_change())
}

/// Whether a pod uses the claim: the cache first, then (when the cache sees none) a live
/// list of the namespace's pods, as upstream, since a pod created a moment ago may not be
/// cached yet.
async fn in_use(claim: &PersistentVolumeClaim, ctx: &Ctx) -> Result<bool, Error> {
    if ctx.pods.state().iter().any(|p| pod_uses(p, claim)) {
        return Ok(true);
    }
    let pods: Api<Pod> =
        Api::namespaced(ctx.client.clone(), &claim.namespace().unwrap_or_default());
    let live = pods.list(&ListParams::default()).await?;
    Ok(live.items.iter().any(|p| pod_uses(p, claim)))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(node: &str, phase: &str, volumes: serde_json::Value) -> Pod {
        serde_json::from_value(
            json!({"metadata": {"name": "p", "namespace": "ns", "uid": "pod-uid"},
            "spec": {"nodeName": node, "containers": [], "volumes": volumes},
            "status": {"phase": phase}}),
        )
        .unwrap()
    }

    fn claim(name: &str, owner: Option<&str>) -> PersistentVolumeClaim {
        let owners = owner.map(|uid| {
            json!([{"apiVersion": "v1", "kind": "Pod", "name": "p",
            "uid": uid, "controller": true}])
        });
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": "ns",
            "ownerReferences": owners}}))
        .unwrap()
    }

    #[test]
    fn only_scheduled_unfinished_pods_use_a_claim() {
        let by_name = json!([{"name": "v", "persistentVolumeClaim": {"claimName": "data"}}]);
        let c = claim("data", None);
        assert!(pod_uses(&pod("n1", "Running", by_name.clone()), &c));
        assert!(pod_uses(&pod("n1", "Pending", by_name.clone()), &c));
        assert!(!pod_uses(&pod("", "Pending", by_name.clone()), &c));
        assert!(!pod_uses(&pod("n1", "Succeeded", by_name.clone()), &c));
        assert!(!pod_uses(&pod("n1", "Failed", by_name), &c));
        assert!(!pod_uses(
            &pod("n1", "Running", json!([{"name": "v", "emptyDir": {}}])),
            &c
        ));
    }

    #[test]
    fn an_ephemeral_claim_is_used_by_the_pod_that_owns_it() {
        let eph = json!([{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]);
        let p = pod("n1", "Running", eph);
        assert!(pod_uses(&p, &claim("p-scratch", Some("pod-uid"))));
        assert!(!pod_uses(&p, &claim("p-scratch", Some("other"))));
        assert_eq!(
            super::super::claims_of(&p).collect::<Vec<_>>(),
            ["p-scratch"]
        );
    }
}
