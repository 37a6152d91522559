//! What the API server's storage admission and the volume controllers must agree on about
//! PersistentVolumes, claims and StorageClasses: the annotations of the bind and provisioning
//! protocols, a claim's class, the default class, and sizes compared by value. Upstream keeps
//! these in `storage/util` and `component-helpers/storage/volume`; one copy here keeps the
//! admission plugins, the binder, the provisioner and the expander from drifting apart.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::quantity::Quantity;

/// Set on a claim once the binder has bound it (`pv.kubernetes.io/bind-completed`).
pub const ANN_BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
/// Set on a volume or claim whose binding the binder made, not its author.
pub const ANN_BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
/// Set on a provisioned volume: the provisioner that made it, and that deletes it.
pub const ANN_PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
/// Set on a claim by the binder: the provisioner asked to make its volume.
pub const ANN_STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
pub const ANN_BETA_STORAGE_PROVISIONER: &str = "volume.beta.kubernetes.io/storage-provisioner";
/// Set on a claim by the scheduler: the node a WaitForFirstConsumer volume is made on.
pub const ANN_SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// The class annotation older than `storageClassName`, still honoured first.
pub const ANN_BETA_STORAGE_CLASS: &str = "volume.beta.kubernetes.io/storage-class";
pub const ANN_IS_DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";
pub const ANN_BETA_IS_DEFAULT_CLASS: &str = "storageclass.beta.kubernetes.io/is-default-class";

pub const PVC_PROTECTION_FINALIZER: &str = "kubernetes.io/pvc-protection";
pub const PV_PROTECTION_FINALIZER: &str = "kubernetes.io/pv-protection";

/// The provisioner of this distribution's default class, under k3s's name so that manifests
/// written for k3s (`storageClassName: local-path`) work unchanged.
pub const LOCAL_PATH_PROVISIONER: &str = "rancher.io/local-path";
pub const LOCAL_PATH_CLASS: &str = "local-path";

fn annotation<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

pub fn has_annotation(meta: &ObjectMeta, key: &str) -> bool {
    annotation(meta, key).is_some()
}

/// Upstream's `GetPersistentVolumeClaimClass`: the beta annotation, then
/// `storageClassName`; `""` for none.
pub fn claim_class(claim: &PersistentVolumeClaim) -> &str {
    annotation(&claim.metadata, ANN_BETA_STORAGE_CLASS)
        .or_else(|| {
            claim
                .spec
                .as_ref()
                .and_then(|s| s.storage_class_name.as_deref())
        })
        .unwrap_or("")
}

/// Upstream's `PersistentVolumeClaimHasClass`: whether the claim names a class at all
/// (`""` counts: it asks for no class).
pub fn claim_has_class(claim: &PersistentVolumeClaim) -> bool {
    has_annotation(&claim.metadata, ANN_BETA_STORAGE_CLASS)
        || claim
            .spec
            .as_ref()
            .is_some_and(|s| s.storage_class_name.is_some())
}

/// Upstream's `GetPersistentVolumeClass`.
pub fn volume_class(volume: &PersistentVolume) -> &str {
    annotation(&volume.metadata, ANN_BETA_STORAGE_CLASS)
        .or_else(|| {
            volume
                .spec
                .as_ref()
                .and_then(|s| s.storage_class_name.as_deref())
        })
        .unwrap_or("")
}

/// Whether `class` is marked as the default, by either annotation.
pub fn is_default_class(class: &StorageClass) -> bool {
    [ANN_IS_DEFAULT_CLASS, ANN_BETA_IS_DEFAULT_CLASS]
        .iter()
        .any(|k| annotation(&class.metadata, k) == Some("true"))
}

/// Upstream's `GetDefaultClass` (1.28+): of several default classes, the newest, then the
/// first by name.
pub fn default_class<'a>(
    classes: impl IntoIterator<Item = &'a StorageClass>,
) -> Option<&'a StorageClass> {
    classes
        .into_iter()
        .filter(|c| is_default_class(c))
        .min_by(|a, b| {
            let created = |c: &StorageClass| c.metadata.creation_timestamp.as_ref().map(|t| t.0);
            created(b)
                .cmp(&created(a))
                .then_with(|| a.metadata.name.cmp(&b.metadata.name))
        })
}

/// The `storage` entry of a resource list, parsed.
pub fn storage_of(resources: Option<&BTreeMap<String, K8sQuantity>>) -> Option<Quantity> {
    resources
        .and_then(|r| r.get("storage"))
        .and_then(|q| Quantity::parse(&q.0))
}

/// What a claim asks for (`spec.resources.requests.storage`).
pub fn claim_request(claim: &PersistentVolumeClaim) -> Option<Quantity> {
    storage_of(
        claim
            .spec
            .as_ref()
            .and_then(|s| s.resources.as_ref())
            .and_then(|r| r.requests.as_ref()),
    )
}

/// A volume's `spec.capacity.storage`.
pub fn volume_capacity(volume: &PersistentVolume) -> Option<Quantity> {
    storage_of(volume.spec.as_ref().and_then(|s| s.capacity.as_ref()))
}

/// Compares two sizes by value (`1Gi` equals `1024Mi`), as upstream's `Quantity.Cmp`.
pub fn cmp_size(a: &Quantity, b: &Quantity) -> std::cmp::Ordering {
    match a.sub(b) {
        Some(d) if d.is_positive() => std::cmp::Ordering::Greater,
        Some(d) if d.is_negative() => std::cmp::Ordering::Less,
        Some(_) => std::cmp::Ordering::Equal,
        None => a.milli_value().cmp(&b.milli_value()),
    }
}

/// Upstream's `ephemeral.VolumeIsForPod`: a generic ephemeral volume's claim must be the
/// pod's own, never one that happens to have its name.
pub fn ephemeral_claim_is_for_pod(pod: &Pod, claim: &PersistentVolumeClaim) -> Result<(), String> {
    let owned = claim
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && Some(&o.uid) == pod.metadata.uid.as_ref());
    if owned {
        return Ok(());
    }
    Err(format!(
        "PVC {}/{} was not created for pod {}/{} (pod is not owner)",
        claim.metadata.namespace.as_deref().unwrap_or_default(),
        claim.metadata.name.as_deref().unwrap_or_default(),
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn class(name: &str, created: &str, default: bool) -> StorageClass {
        let mut annotations = serde_json::Map::new();
        if default {
            annotations.insert(ANN_IS_DEFAULT_CLASS.into(), json!("true"));
        }
        serde_json::from_value(json!({
            "metadata": {"name": name, "creationTimestamp": created, "annotations": annotations},
            "provisioner": "p"}))
        .unwrap()
    }

    #[test]
    fn the_newest_default_class_wins_then_the_first_name() {
        let classes = [
            class("old", "2026-01-01T00:00:00Z", true),
            class("b", "2026-02-01T00:00:00Z", true),
            class("a", "2026-02-01T00:00:00Z", true),
            class("newest-not-default", "2026-03-01T00:00:00Z", false),
        ];
        let chosen = default_class(&classes).unwrap();
        assert_eq!(chosen.metadata.name.as_deref(), Some("a"));
        assert!(default_class(&classes[3..]).is_none());
    }

    #[test]
    fn the_beta_annotation_names_the_class_first() {
        let claim: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"annotations": {ANN_BETA_STORAGE_CLASS: "beta"}},
            "spec": {"storageClassName": "fast"}}))
        .unwrap();
        assert_eq!(claim_class(&claim), "beta");
        let bare = PersistentVolumeClaim::default();
        assert_eq!(claim_class(&bare), "");
        assert!(!claim_has_class(&bare));
        let empty: PersistentVolumeClaim =
            serde_json::from_value(json!({"spec": {"storageClassName": ""}})).unwrap();
        assert!(claim_has_class(&empty));
    }

    #[test]
    fn sizes_compare_by_value() {
        let q = |s: &str| Quantity::parse(s).unwrap();
        assert_eq!(cmp_size(&q("1Gi"), &q("1024Mi")), std::cmp::Ordering::Equal);
        assert_eq!(cmp_size(&q("1G"), &q("1Gi")), std::cmp::Ordering::Less);
        assert_eq!(
            cmp_size(&q("2Gi"), &q("1500Mi")),
            std::cmp::Ordering::Greater
        );
    }
}
