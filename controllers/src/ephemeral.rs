//! The ephemeral volume controller, as upstream's pkg/controller/volume/ephemeral
//! (`ephemeral-volume` in kube-controller-manager): a pod's generic ephemeral volume is a
//! PersistentVolumeClaim made from the volume's template, named `<pod>-<volume>` and owned by
//! the pod, so that the claim goes with the pod (the garbage collector) and the scheduler and
//! the kubelet treat it as any other claim. A claim of that name the pod does not own is never
//! used: the pod waits, with a `FailedBinding` event saying why.
//!
//! Pods with such volumes are synced when they change, and again when one of their claims is
//! deleted (a pod still there gets it back).

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Volume};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{EventType, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, ResourceExt};

use crate::informers::{Cache, Change, Informers};
use crate::scheduler::volume_binding::claim_name;
use crate::util::events::{Recorder, record};
use crate::util::reconciler::Error;
use crate::util::runtime;
use minik8s_api::volume::ephemeral_claim_is_for_pod;

pub const NAME: &str = "ephemeral-volume";

struct Ctx {
    client: Client,
    claims: Cache<PersistentVolumeClaim>,
    recorder: Recorder,
}

fn has_ephemeral_volumes(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.as_ref())
            .is_some_and(|v| v.iter().any(|v| v.ephemeral.is_some()))
}

pub async fn run(informers: Arc<Informers>) {
    let client = informers.client();
    let pods = informers.of::<Pod>();
    let claims = informers.of::<PersistentVolumeClaim>();
    let pod_store = pods.store();
    let changed = pods
        .touched()
        .filter(|p| futures::future::ready(has_ephemeral_volumes(p)))
        .map(|p| ObjectRef::from_obj(p.as_ref()));
    // A deleted claim is made again for the pods still using it.
    let deleted = claims.changes().flat_map(move |change| {
        let refs: Vec<ObjectRef<Pod>> = match change {
            Change::Deleted(claim) => {
                let ns = claim.namespace().unwrap_or_default();
                let name = claim.name_any();
                pod_store
                    .state()
                    .into_iter()
                    .filter(|p| has_ephemeral_volumes(p))
                    .filter(|p| crate::scheduler::volume_binding::uses_claim(p, &ns, &name))
                    .map(|p| ObjectRef::from_obj(p.as_ref()))
                    .collect()
            }
            _ => Vec::new(),
        };
        futures::stream::iter(refs)
    });
    let reporter = Reporter {
        controller: "ephemeral_volume".into(),
        instance: None,
    };
    let ctx = Arc::new(Ctx {
        recorder: Recorder::new(client.clone(), reporter),
        client,
        claims: claims.store(),
    });
    let queue = futures::stream::select(changed, deleted);
    runtime::run("ephemeral_volume", pods.store(), queue, reconcile, ctx).await
}

/// The claim upstream makes for a generic ephemeral volume of `pod`.
pub fn claim_for(pod: &Pod, volume: &Volume) -> Option<PersistentVolumeClaim> {
    let template = &volume.ephemeral.as_ref()?.volume_claim_template.as_ref()?;
    let (name, _) = claim_name(pod, volume)?;
    Some(PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: pod.metadata.namespace.clone(),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Pod".into(),
                name: pod.name_any(),
                uid: pod.metadata.uid.clone().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            annotations: template
                .metadata
                .as_ref()
                .and_then(|m| m.annotations.clone()),
            labels: template.metadata.as_ref().and_then(|m| m.labels.clone()),
            ..Default::default()
        },
        spec: Some(template.spec.clone()),
        status: None,
    })
}

async fn reconcile(pod: Arc<Pod>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    if !has_ephemeral_volumes(&pod) {
        return Ok(Action::await_change());
    }
    let namespace = pod.namespace().unwrap_or_default();
    for volume in pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
    {
        if let Err(e) = handle_volume(&pod, volume, &namespace, &ctx).await {
            record(
                &ctx.recorder,
                pod.as_ref(),
                EventType::Warning,
                "FailedBinding",
                format!("ephemeral volume {}: {e}", volume.name),
                None,
            )
            .await;
            return Err(Error::failed(format!(
                "pod {namespace}/{}, ephemeral volume {}: {e}",
                pod.name_any(),
                volume.name
            )));
        }
    }
    Ok(Action::await_change())
}

async fn handle_volume(
    pod: &Pod,
    volume: &Volume,
    namespace: &str,
    ctx: &Ctx,
) -> Result<(), String> {
    let Some(claim) = claim_for(pod, volume) else {
        return Ok(());
    };
    let name = claim.name_any();
    if let Some(existing) = ctx.claims.get(&ObjectRef::new(&name).within(namespace)) {
        return ephemeral_claim_is_for_pod(pod, &existing);
    }
    let api: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), namespace);
    match api.create(&PostParams::default(), &claim).await {
        Ok(_) => {
            tracing::info!(pod = %pod.name_any(), claim = %name, "created the ephemeral volume's claim");
            Ok(())
        }
        // Made since the cache was read: the next sync checks whose it is.
        Err(kube::Error::Api(s)) if s.code == 409 => {
            Err(format!("create PVC {name}: {}", s.message))
        }
        Err(e) => Err(format!(
            "create PVC {name}: {}",
            match e {
                kube::Error::Api(s) => s.message,
                e => e.to_string(),
            }
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_claim_is_the_template_owned_by_the_pod() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "u1"},
            "spec": {"containers": [{"name": "c"}], "volumes": [
                {"name": "cache", "emptyDir": {}},
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {
                    "metadata": {"labels": {"type": "scratch"}, "annotations": {"a": "b"}},
                    "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "local-path",
                             "resources": {"requests": {"storage": "1Gi"}}},
                }}},
            ]},
        }))
        .unwrap();
        let volumes = pod.spec.as_ref().unwrap().volumes.as_ref().unwrap();
        assert!(claim_for(&pod, &volumes[0]).is_none());
        let claim = claim_for(&pod, &volumes[1]).unwrap();
        assert_eq!(claim.metadata.name.as_deref(), Some("web-scratch"));
        assert_eq!(claim.metadata.namespace.as_deref(), Some("ns"));
        let owner = &claim.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
            ("Pod", "web", "u1")
        );
        assert_eq!(owner.controller, Some(true));
        assert_eq!(owner.block_owner_deletion, Some(true));
        assert_eq!(
            claim
                .metadata
                .labels
                .unwrap()
                .get("type")
                .map(String::as_str),
            Some("scratch")
        );
        let spec = claim.spec.unwrap();
        assert_eq!(spec.storage_class_name.as_deref(), Some("local-path"));
        assert!(ephemeral_claim_is_for_pod(&pod, &claim_for(&pod, &volumes[1]).unwrap()).is_ok());
        assert!(has_ephemeral_volumes(&pod));
    }
}
