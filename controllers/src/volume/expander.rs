//! Volume expansion, as kube-controller-manager's `persistentvolume-expander`
//! (pkg/controller/volume/expand) and, for the built-in local-path volumes, the external
//! resizer that a CSI driver would run (kubernetes-csi/external-resizer).
//!
//! When a bound claim asks for more than its status holds, upstream's expander finds no
//! in-tree plugin for the volume and says so (`ExternalExpanding`); an external resizer then
//! marks the claim `Resizing`, grows the volume, and records the new capacity
//! (`VolumeResizeSuccessful`). A local-path volume is a directory with no size of its own,
//! so its growth is bookkeeping only and is done here, with the resizer's status fields
//! (`allocatedResources`, `allocatedResourceStatuses`, the `Resizing` condition) and events.
//! Volumes of other provisioners wait for theirs.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use futures::stream;
use k8s_openapi::api::core::v1::{
    PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimCondition,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{EventType, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, ResourceExt};
use minik8s_api::volume::{self, ANN_PROVISIONED_BY, LOCAL_PATH_PROVISIONER};

use crate::informers::{Cache, Informers};
use crate::util::events::{Recorder, record};
use crate::util::reconciler::Error;
use crate::util::runtime;

pub const NAME: &str = "persistentvolume-expander";
/// The component upstream's expander reports events as.
const EXPANDER: &str = "volume_expand";

struct Ctx {
    client: Client,
    volumes: Cache<PersistentVolume>,
    expander: Recorder,
    resizer: Recorder,
}

pub async fn run(informers: Arc<Informers>) {
    let client = informers.client();
    let claims = informers.of::<PersistentVolumeClaim>();
    let volumes = informers.of::<PersistentVolume>();
    let recorder = |controller: String| {
        Recorder::new(
            client.clone(),
            Reporter {
                controller,
                instance: None,
            },
        )
    };
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        volumes: volumes.store(),
        expander: recorder(EXPANDER.into()),
        resizer: recorder(format!("external-resizer {LOCAL_PATH_PROVISIONER}")),
    });
    // A volume that appears or changes may be what a waiting claim needs.
    let from_volumes = volumes.touched().flat_map(|v| {
        let key = v
            .spec
            .as_ref()
            .and_then(|s| s.claim_ref.as_ref())
            .and_then(|r| {
                Some(
                    ObjectRef::<PersistentVolumeClaim>::new(r.name.as_deref()?)
                        .within(r.namespace.as_deref()?),
                )
            });
        stream::iter(key)
    });
    let queue = stream::select(
        claims.touched().map(|c| ObjectRef::from_obj(c.as_ref())),
        from_volumes,
    );
    runtime::run("volume_expand", claims.store(), queue, reconcile, ctx).await
}

/// The size a bound claim asks to grow to, if it asks for more than it has.
pub fn wanted_size(claim: &PersistentVolumeClaim) -> Option<minik8s_api::quantity::Quantity> {
    let status = claim.status.as_ref()?;
    if status.phase.as_deref() != Some("Bound") {
        return None;
    }
    let request = volume::claim_request(claim)?;
    let have = volume::storage_of(status.capacity.as_ref())?;
    volume::cmp_size(&request, &have).is_gt().then_some(request)
}

fn condition(type_: &str) -> PersistentVolumeClaimCondition {
    PersistentVolumeClaimCondition {
        type_: type_.into(),
        status: "True".into(),
        last_transition_time: Some(Time(Timestamp::now())),
        ..Default::default()
    }
}

fn is_resize_condition(c: &PersistentVolumeClaimCondition) -> bool {
    matches!(c.type_.as_str(), "Resizing" | "FileSystemResizePending")
}

/// The claim marked as being resized to `size` (the resizer's
/// `markControllerResizeInProgress`).
pub fn resize_in_progress(claim: &PersistentVolumeClaim, size: &str) -> PersistentVolumeClaim {
    let mut next = claim.clone();
    let status = next.status.get_or_insert_with(Default::default);
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    conditions.retain(|c| !is_resize_condition(c));
    conditions.push(condition("Resizing"));
    let quantity = k8s_openapi::apimachinery::pkg::api::resource::Quantity(size.to_string());
    status
        .allocated_resources
        .get_or_insert_with(BTreeMap::new)
        .insert("storage".into(), quantity);
    status
        .allocated_resource_statuses
        .get_or_insert_with(BTreeMap::new)
        .insert("storage".into(), "ControllerResizeInProgress".into());
    next
}

/// The claim with its new capacity and the resize finished (the resizer's
/// `markOverallExpansionAsFinished`).
pub fn resize_finished(claim: &PersistentVolumeClaim, size: &str) -> PersistentVolumeClaim {
    let mut next = claim.clone();
    let status = next.status.get_or_insert_with(Default::default);
    let quantity = k8s_openapi::apimachinery::pkg::api::resource::Quantity(size.to_string());
    status
        .capacity
        .get_or_insert_with(BTreeMap::new)
        .insert("storage".into(), quantity);
    if let Some(conditions) = status.conditions.as_mut() {
        conditions.retain(|c| !is_resize_condition(c));
        if conditions.is_empty() {
            status.conditions = None;
        }
    }
    if let Some(statuses) = status.allocated_resource_statuses.as_mut() {
        statuses.remove("storage");
        if statuses.is_empty() {
            status.allocated_resource_statuses = None;
        }
    }
    next
}

async fn reconcile(claim: Arc<PersistentVolumeClaim>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let Some(size) = wanted_size(&claim) else {
        return Ok(Action::await_change());
    };
    let volume_name = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.clone())
        .unwrap_or_default();
    let Some(volume) = ctx.volumes.get(&ObjectRef::new(&volume_name)) else {
        return Err(Error::Stale(format!("volume {volume_name} not cached")));
    };
    let bound_here = volume
        .spec
        .as_ref()
        .and_then(|s| s.claim_ref.as_ref())
        .is_some_and(|r| r.namespace == claim.metadata.namespace && r.uid == claim.metadata.uid);
    if !bound_here {
        return Err(Error::failed(format!(
            "persistent Volume is not bound to PVC being updated : {}/{}",
            claim.namespace().unwrap_or_default(),
            claim.name_any()
        )));
    }
    // Upstream's expander: no in-tree plugin expands anything here.
    let note = "waiting for an external controller to expand this PVC";
    record(
        &ctx.expander,
        claim.as_ref(),
        EventType::Normal,
        "ExternalExpanding",
        note.into(),
        None,
    )
    .await;
    let provisioner = volume
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANN_PROVISIONED_BY));
    if provisioner.map(String::as_str) != Some(LOCAL_PATH_PROVISIONER) {
        return Ok(Action::await_change());
    }
    let size_text = size.canonical().unwrap_or_else(|| {
        volume::claim_request(&claim)
            .and_then(|q| q.canonical())
            .unwrap_or_default()
    });
    resize_local_path(&claim, &volume, &size, &size_text, &ctx).await?;
    Ok(Action::await_change())
}

/// The resizer's part for a local-path volume: claim marked, volume grown, claim finished.
async fn resize_local_path(
    claim: &PersistentVolumeClaim,
    volume: &PersistentVolume,
    size: &minik8s_api::quantity::Quantity,
    size_text: &str,
    ctx: &Ctx,
) -> Result<(), Error> {
    let claims: Api<PersistentVolumeClaim> =
        Api::namespaced(ctx.client.clone(), &claim.namespace().unwrap_or_default());
    let marked = claims
        .replace_status(
            &claim.name_any(),
            &PostParams::default(),
            &resize_in_progress(claim, size_text),
        )
        .await?;
    let note = format!("External resizer is resizing volume {}", volume.name_any());
    record(
        &ctx.resizer,
        &marked,
        EventType::Normal,
        "Resizing",
        note,
        None,
    )
    .await;
    let grown =
        volume::volume_capacity(volume).is_some_and(|have| volume::cmp_size(&have, size).is_ge());
    if !grown {
        let mut next = volume.clone();
        next.spec
            .get_or_insert_with(Default::default)
            .capacity
            .get_or_insert_with(BTreeMap::new)
            .insert(
                "storage".into(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity(size_text.to_string()),
            );
        let volumes: Api<PersistentVolume> = Api::all(ctx.client.clone());
        volumes
            .replace(&volume.name_any(), &PostParams::default(), &next)
            .await?;
    }
    let done = claims
        .replace_status(
            &claim.name_any(),
            &PostParams::default(),
            &resize_finished(&marked, size_text),
        )
        .await?;
    tracing::info!(size = size_text, "expanded the claim's local-path volume");
    record(
        &ctx.resizer,
        &done,
        EventType::Normal,
        "VolumeResizeSuccessful",
        "Resize volume succeeded".into(),
        None,
    )
    .await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn claim(request: &str, capacity: &str, phase: &str) -> PersistentVolumeClaim {
        serde_json::from_value(json!({"metadata": {"name": "c"},
            "spec": {"resources": {"requests": {"storage": request}}},
            "status": {"phase": phase, "capacity": {"storage": capacity},
                       "conditions": [{"type": "Other", "status": "True"}]}}))
        .unwrap()
    }

    #[test]
    fn only_bound_claims_that_ask_for_more_grow() {
        assert!(wanted_size(&claim("2Gi", "1Gi", "Bound")).is_some());
        assert!(wanted_size(&claim("1024Mi", "1Gi", "Bound")).is_none());
        assert!(wanted_size(&claim("2Gi", "1Gi", "Pending")).is_none());
    }

    #[test]
    fn the_resize_is_recorded_as_the_external_resizer_records_it() {
        let c = claim("2Gi", "1Gi", "Bound");
        let marked = resize_in_progress(&c, "2Gi");
        let v = serde_json::to_value(&marked.status).unwrap();
        assert_eq!(v["allocatedResources"], json!({"storage": "2Gi"}));
        assert_eq!(
            v["allocatedResourceStatuses"],
            json!({"storage": "ControllerResizeInProgress"})
        );
        let types: Vec<_> = v["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].clone())
            .collect();
        assert_eq!(types, [json!("Other"), json!("Resizing")]);
        let done = serde_json::to_value(&resize_finished(&marked, "2Gi").status).unwrap();
        assert_eq!(done["capacity"], json!({"storage": "2Gi"}));
        assert_eq!(done["allocatedResources"], json!({"storage": "2Gi"}));
        assert!(done.get("allocatedResourceStatuses").is_none());
        assert_eq!(done["conditions"][0]["type"], "Other");
        assert_eq!(done["conditions"].as_array().unwrap().len(), 1);
    }
}
