//! The bind protocol's object changes, as upstream's `GetBindVolumeToClaim`,
//! `bindClaimToVolume`, `updateClaimStatus` and `updateVolumePhase` make them: each returns
//! the changed object, or `None` when it is already so (nothing to write). The order of the
//! writes (volume, its phase, claim, its status) lets a crash at any point be finished by the
//! next sync: the volume points at the claim before the claim points at the volume.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use minik8s_api::volume::{self, ANN_BIND_COMPLETED, ANN_BOUND_BY_CONTROLLER};

use super::super::matching::is_bound_to;

fn set_annotation(meta: &mut ObjectMeta, key: &str, value: &str) {
    meta.annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(key.to_string(), value.to_string());
}

/// The reference a volume keeps to its claim (`reference.GetReference`).
pub fn claim_ref(claim: &PersistentVolumeClaim) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("PersistentVolumeClaim".into()),
        namespace: claim.metadata.namespace.clone(),
        name: claim.metadata.name.clone(),
        uid: claim.metadata.uid.clone(),
        resource_version: claim.metadata.resource_version.clone(),
        ..Default::default()
    }
}

/// The volume bound to `claim`: its claimRef set (with the claim's UID), and
/// `bound-by-controller` when the binding was not the volume author's.
pub fn bind_volume_to_claim(
    volume: &PersistentVolume,
    claim: &PersistentVolumeClaim,
) -> Option<PersistentVolume> {
    let by_controller = !is_bound_to(volume, claim);
    let mut next = volume.clone();
    let mut dirty = false;
    let current = volume.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
    let same = current.is_some_and(|r| {
        r.name == claim.metadata.name
            && r.namespace == claim.metadata.namespace
            && r.uid == claim.metadata.uid
    });
    if !same {
        next.spec.get_or_insert_with(Default::default).claim_ref = Some(claim_ref(claim));
        dirty = true;
    }
    if by_controller && !volume::has_annotation(&next.metadata, ANN_BOUND_BY_CONTROLLER) {
        set_annotation(&mut next.metadata, ANN_BOUND_BY_CONTROLLER, "yes");
        dirty = true;
    }
    dirty.then_some(next)
}

/// The claim bound to `volume`: `spec.volumeName`, `bind-completed`, and
/// `bound-by-controller` when the claim did not name the volume itself.
pub fn bind_claim_to_volume(
    claim: &PersistentVolumeClaim,
    volume: &PersistentVolume,
) -> Option<PersistentVolumeClaim> {
    let mut next = claim.clone();
    let mut dirty = false;
    let spec = next.spec.get_or_insert_with(Default::default);
    if spec.volume_name != volume.metadata.name {
        spec.volume_name = volume.metadata.name.clone();
        dirty = true;
        if !volume::has_annotation(&next.metadata, ANN_BOUND_BY_CONTROLLER) {
            set_annotation(&mut next.metadata, ANN_BOUND_BY_CONTROLLER, "yes");
        }
    }
    if !volume::has_annotation(&next.metadata, ANN_BIND_COMPLETED) {
        set_annotation(&mut next.metadata, ANN_BIND_COMPLETED, "yes");
        dirty = true;
    }
    dirty.then_some(next)
}

/// The claim's status in `phase`: with a volume, its access modes, and its capacity when the
/// claim becomes bound (a later difference may be intended and is kept); without one, both
/// cleared. `Err` when the volume has no capacity.
pub fn claim_status(
    claim: &PersistentVolumeClaim,
    phase: &str,
    volume: Option<&PersistentVolume>,
) -> Result<Option<PersistentVolumeClaim>, String> {
    let mut next = claim.clone();
    let status = next.status.get_or_insert_with(Default::default);
    let mut dirty = false;
    let old_phase = claim.status.as_ref().and_then(|s| s.phase.as_deref());
    if old_phase != Some(phase) {
        status.phase = Some(phase.to_string());
        dirty = true;
    }
    match volume {
        None => {
            if status.access_modes.take().is_some() {
                dirty = true;
            }
            if status.capacity.take().is_some() {
                dirty = true;
            }
        }
        Some(v) => {
            let modes = v.spec.as_ref().and_then(|s| s.access_modes.clone());
            if status.access_modes != modes {
                status.access_modes = modes;
                dirty = true;
            }
            if old_phase != Some(phase) {
                let name = v.metadata.name.as_deref().unwrap_or_default();
                let capacity = v
                    .spec
                    .as_ref()
                    .and_then(|s| s.capacity.as_ref())
                    .and_then(|c| c.get("storage"))
                    .ok_or_else(|| {
                        format!("PersistentVolume {name:?} is without a storage capacity")
                    })?;
                let have = volume::storage_of(status.capacity.as_ref());
                let want = volume::storage_of(v.spec.as_ref().and_then(|s| s.capacity.as_ref()));
                let same =
                    matches!((&have, &want), (Some(h), Some(w)) if volume::cmp_size(h, w).is_eq());
                if !same {
                    status.capacity =
                        Some(BTreeMap::from([("storage".to_string(), capacity.clone())]));
                    dirty = true;
                }
            }
        }
    }
    Ok(dirty.then_some(next))
}

/// The volume in `phase` with `message`, stamped with the transition time; `None` when it
/// is in that phase already (its message is then left as it is, as upstream).
pub fn volume_phase(
    volume: &PersistentVolume,
    phase: &str,
    message: &str,
    now: Timestamp,
) -> Option<PersistentVolume> {
    if volume.status.as_ref().and_then(|s| s.phase.as_deref()) == Some(phase) {
        return None;
    }
    let mut next = volume.clone();
    let status = next.status.get_or_insert_with(Default::default);
    status.phase = Some(phase.to_string());
    status.message = (!message.is_empty()).then(|| message.to_string());
    status.last_phase_transition_time = Some(Time(now));
    Some(next)
}

/// The volume released by the binder after the claim went to another volume: a volume the
/// binder bound is free again; one its author pre-bound keeps its claimRef without a UID.
pub fn unbind_volume(volume: &PersistentVolume) -> PersistentVolume {
    let mut next = volume.clone();
    if volume::has_annotation(&volume.metadata, ANN_BOUND_BY_CONTROLLER) {
        if let Some(spec) = next.spec.as_mut() {
            spec.claim_ref = None;
        }
        if let Some(a) = next.metadata.annotations.as_mut() {
            a.remove(ANN_BOUND_BY_CONTROLLER);
            if a.is_empty() {
                next.metadata.annotations = None;
            }
        }
    } else if let Some(r) = next.spec.as_mut().and_then(|s| s.claim_ref.as_mut()) {
        r.uid = None;
    }
    next
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pv(claim_ref: serde_json::Value) -> PersistentVolume {
        serde_json::from_value(json!({"metadata": {"name": "pv1"},
            "spec": {"capacity": {"storage": "2Gi"}, "accessModes": ["ReadWriteOnce"],
                     "claimRef": claim_ref},
            "status": {"phase": "Available"}}))
        .unwrap()
    }

    fn pvc() -> PersistentVolumeClaim {
        serde_json::from_value(json!({"metadata": {"name": "data", "namespace": "ns", "uid": "u1",
                "resourceVersion": "7"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
            "status": {"phase": "Pending"}}))
        .unwrap()
    }

    fn annotations(meta: &ObjectMeta) -> serde_json::Value {
        serde_json::to_value(&meta.annotations).unwrap()
    }

    #[test]
    fn binding_a_free_volume_marks_both_as_bound_by_the_controller() {
        let (volume, claim) = (pv(serde_json::Value::Null), pvc());
        let bound = bind_volume_to_claim(&volume, &claim).unwrap();
        let r = bound.spec.as_ref().unwrap().claim_ref.as_ref().unwrap();
        assert_eq!(
            (r.name.as_deref(), r.uid.as_deref(), r.kind.as_deref()),
            (Some("data"), Some("u1"), Some("PersistentVolumeClaim"))
        );
        assert_eq!(
            annotations(&bound.metadata),
            json!({ANN_BOUND_BY_CONTROLLER: "yes"})
        );
        assert!(bind_volume_to_claim(&bound, &claim).is_none());

        let claim_bound = bind_claim_to_volume(&claim, &bound).unwrap();
        assert_eq!(
            claim_bound.spec.as_ref().unwrap().volume_name.as_deref(),
            Some("pv1")
        );
        assert_eq!(
            annotations(&claim_bound.metadata),
            json!({ANN_BIND_COMPLETED: "yes", ANN_BOUND_BY_CONTROLLER: "yes"})
        );
        assert!(bind_claim_to_volume(&claim_bound, &bound).is_none());
    }

    #[test]
    fn pre_bound_objects_are_not_marked_bound_by_the_controller() {
        // The volume names the claim (no UID yet): the binder only adds the UID.
        let volume = pv(json!({"namespace": "ns", "name": "data"}));
        let bound = bind_volume_to_claim(&volume, &pvc()).unwrap();
        assert_eq!(annotations(&bound.metadata), serde_json::Value::Null);
        // The claim names the volume: only bind-completed is added.
        let mut claim = pvc();
        claim.spec.as_mut().unwrap().volume_name = Some("pv1".into());
        let claim_bound = bind_claim_to_volume(&claim, &bound).unwrap();
        assert_eq!(
            annotations(&claim_bound.metadata),
            json!({ANN_BIND_COMPLETED: "yes"})
        );
    }

    #[test]
    fn claim_status_takes_the_volume_capacity_once_bound() {
        let volume = pv(serde_json::Value::Null);
        let bound = claim_status(&pvc(), "Bound", Some(&volume))
            .unwrap()
            .unwrap();
        let status = bound.status.as_ref().unwrap();
        assert_eq!(status.phase.as_deref(), Some("Bound"));
        assert_eq!(status.capacity.as_ref().unwrap()["storage"].0, "2Gi");
        assert_eq!(
            status.access_modes.as_deref(),
            Some(&["ReadWriteOnce".to_string()][..])
        );
        assert!(
            claim_status(&bound, "Bound", Some(&volume))
                .unwrap()
                .is_none()
        );
        // Lost: the volume's modes and capacity go.
        let lost = claim_status(&bound, "Lost", None).unwrap().unwrap();
        let status = lost.status.as_ref().unwrap();
        assert!(status.capacity.is_none() && status.access_modes.is_none());
    }

    #[test]
    fn phases_change_once_and_unbinding_follows_who_bound() {
        let volume = pv(serde_json::Value::Null);
        let now = Timestamp::now();
        let failed = volume_phase(&volume, "Failed", "no", now).unwrap();
        assert_eq!(
            failed.status.as_ref().unwrap().message.as_deref(),
            Some("no")
        );
        assert!(volume_phase(&failed, "Failed", "again", now).is_none());

        let by_controller = bind_volume_to_claim(&volume, &pvc()).unwrap();
        let free = unbind_volume(&by_controller);
        assert!(free.spec.as_ref().unwrap().claim_ref.is_none());
        assert!(free.metadata.annotations.is_none());
        let pre_bound =
            bind_volume_to_claim(&pv(json!({"namespace": "ns", "name": "data"})), &pvc()).unwrap();
        let kept = unbind_volume(&pre_bound);
        let r = kept.spec.as_ref().unwrap().claim_ref.as_ref().unwrap();
        assert_eq!((r.name.as_deref(), r.uid.as_deref()), (Some("data"), None));
    }
}
