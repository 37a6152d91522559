//! Storage: PersistentVolumes, PersistentVolumeClaims and StorageClasses, which share the
//! access modes and the storage-class annotations.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, PersistentVolumeStatus};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

use crate::spec_and_status;
use crate::strategy::Kind;
use crate::table::{AGE, Column, NAME, Row, age, canonical_quantity, name, or_empty, string, text};
use crate::validation::{Errors, FieldError, Path, dns1123_subdomain, immutable, qualified_name};
use crate::volume;

const ACCESS_MODES: &[&str] = &[
    "ReadOnlyMany",
    "ReadWriteMany",
    "ReadWriteOnce",
    "ReadWriteOncePod",
];

impl Kind for PersistentVolume {
    const COLUMNS: &'static [Column] = PV_COLUMNS;
    const RETURN_DELETED: bool = true;

    spec_and_status!();

    fn default_fields(&mut self) {
        if let Some(spec) = self.spec.as_mut() {
            spec.persistent_volume_reclaim_policy
                .get_or_insert_with(|| "Retain".into());
            spec.volume_mode.get_or_insert_with(|| "Filesystem".into());
        }
        self.status
            .get_or_insert_with(Default::default)
            .phase
            .get_or_insert_with(|| "Pending".into());
    }

    fn prepare_create(&mut self) {
        self.status = Some(PersistentVolumeStatus {
            phase: Some("Pending".into()),
            last_phase_transition_time: Some(crate::meta::now()),
            ..Default::default()
        });
    }

    fn validate(&self, errs: &mut Errors) {
        let path = Path::new("spec");
        let Some(spec) = &self.spec else {
            errs.push(FieldError::required(&path, ""));
            return;
        };
        match &spec.access_modes {
            Some(m) if !m.is_empty() => validate_access_modes(m, &path, errs),
            _ => errs.push(FieldError::required(
                &path.child("accessModes"),
                "must specify at least 1 access mode",
            )),
        }
        validate_volume_source(self, &path, errs);
        if let Some(capacity) = &spec.capacity
            && (!capacity.contains_key("storage") || capacity.len() > 1)
        {
            let keys: Vec<&String> = capacity.keys().collect();
            errs.push(FieldError::not_supported(
                &path.child("capacity"),
                keys,
                &["storage"],
            ));
        }
        if let Some(sc) = spec.storage_class_name.as_deref().filter(|s| !s.is_empty()) {
            for e in dns1123_subdomain(sc) {
                errs.push(FieldError::invalid(&path.child("storageClassName"), sc, e));
            }
        }
        if let Some(m) = &spec.volume_mode
            && !["Block", "Filesystem"].contains(&m.as_str())
        {
            errs.push(FieldError::not_supported(
                &path.child("volumeMode"),
                m,
                &["Block", "Filesystem"],
            ));
        }
        match spec.capacity.as_ref().and_then(|c| c.get("storage")) {
            None if spec.capacity.as_ref().is_some_and(|c| !c.is_empty()) => {}
            None => errs.push(FieldError::required(&path.child("capacity"), "")),
            Some(q) if crate::quantity::parse(&q.0).is_none_or(|v| v <= 0.0) => {
                errs.push(FieldError::invalid(
                    &path.child("capacity").key("storage"),
                    &q.0,
                    "must be greater than zero",
                ))
            }
            _ => {}
        }
        if let Some(p) = &spec.persistent_volume_reclaim_policy
            && !["Delete", "Recycle", "Retain"].contains(&p.as_str())
        {
            errs.push(FieldError::not_supported(
                &path.child("persistentVolumeReclaimPolicy"),
                p,
                &["Delete", "Recycle", "Retain"],
            ));
        }
        if let Some(h) = &spec.host_path
            && h.path.is_empty()
        {
            errs.push(FieldError::required(
                &path.child("hostPath").child("path"),
                "",
            ));
        }
    }

    fn validate_update(&self, old: &Self, errs: &mut Errors) {
        self.validate(errs);
        if let (Some(n), Some(o)) = (&self.spec, &old.spec) {
            if volume_source(self) != volume_source(old) {
                errs.push(FieldError::forbidden(
                    &Path::new("spec").child("persistentvolumesource"),
                    "spec.persistentvolumesource is immutable after creation",
                ));
            }
            immutable(
                &n.volume_mode,
                &o.volume_mode,
                &Path::new("volumeMode"),
                errs,
            );
            if o.node_affinity.is_some() {
                immutable(
                    &n.node_affinity,
                    &o.node_affinity,
                    &Path::new("nodeAffinity"),
                    errs,
                );
            }
        }
    }

    fn row(&self, now: Timestamp) -> Row {
        Row::new(pv_cells(self, now))
    }
}

/// Each mode known, and ReadWriteOncePod alone.
fn validate_access_modes(modes: &[String], spec: &Path, errs: &mut Errors) {
    let path = spec.child("accessModes");
    for mode in modes {
        if !ACCESS_MODES.contains(&mode.as_str()) {
            errs.push(FieldError::not_supported(&path, mode, ACCESS_MODES));
        }
    }
    if modes.len() > 1 && modes.iter().any(|m| m == "ReadWriteOncePod") {
        errs.push(FieldError::forbidden(
            &path,
            "may not use ReadWriteOncePod with other access modes",
        ));
    }
}

/// The volume sources of a PersistentVolumeSpec, in the order upstream checks them.
const VOLUME_SOURCES: &[&str] = &[
    "hostPath",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "glusterfs",
    "flocker",
    "nfs",
    "rbd",
    "quobyte",
    "cinder",
    "cephfs",
    "iscsi",
    "fc",
    "flexVolume",
    "azureFile",
    "vsphereVolume",
    "photonPersistentDisk",
    "portworxVolume",
    "azureDisk",
    "scaleIO",
    "local",
    "storageos",
    "csi",
];

/// The volume source fields of a volume's spec, as set.
fn volume_source(pv: &PersistentVolume) -> Vec<(&'static str, Value)> {
    let spec = serde_json::to_value(&pv.spec).unwrap_or_default();
    VOLUME_SOURCES
        .iter()
        .filter_map(|k| {
            spec.get(*k)
                .filter(|v| !v.is_null())
                .map(|v| (*k, v.clone()))
        })
        .collect()
}

/// Exactly one volume source; a `local` volume needs node affinity and a path.
fn validate_volume_source(pv: &PersistentVolume, path: &Path, errs: &mut Errors) {
    let Ok(spec) = serde_json::to_value(&pv.spec) else {
        return;
    };
    let mut found = 0;
    for source in VOLUME_SOURCES {
        if spec.get(*source).is_some_and(|v| !v.is_null()) {
            found += 1;
            if found > 1 {
                errs.push(FieldError::forbidden(
                    &path.child(source),
                    "may not specify more than 1 volume type",
                ));
            }
        }
    }
    if found == 0 {
        errs.push(FieldError::required(path, "must specify a volume type"));
    }
    let Some(spec) = &pv.spec else {
        return;
    };
    if let Some(local) = &spec.local {
        if local.path.is_empty() {
            errs.push(FieldError::required(&path.child("local").child("path"), ""));
        }
        if spec.node_affinity.is_none() {
            errs.push(FieldError::required(
                &path.child("nodeAffinity"),
                "Local volume requires node affinity",
            ));
        }
    }
}

impl Kind for PersistentVolumeClaim {
    const COLUMNS: &'static [Column] = PVC_COLUMNS;
    const RETURN_DELETED: bool = true;

    spec_and_status!();

    fn default_fields(&mut self) {
        if let Some(spec) = self.spec.as_mut() {
            spec.volume_mode.get_or_insert_with(|| "Filesystem".into());
        }
        self.status
            .get_or_insert_with(Default::default)
            .phase
            .get_or_insert_with(|| "Pending".into());
    }

    fn prepare_create(&mut self) {
        self.status = Some(Default::default());
        if let Some(spec) = self.spec.as_mut() {
            match (&spec.data_source, &spec.data_source_ref) {
                (Some(ds), None) => {
                    spec.data_source_ref = Some(k8s_openapi::api::core::v1::TypedObjectReference {
                        api_group: ds.api_group.clone(),
                        kind: ds.kind.clone(),
                        name: ds.name.clone(),
                        namespace: None,
                    })
                }
                (None, Some(r)) if r.namespace.is_none() => {
                    spec.data_source = Some(k8s_openapi::api::core::v1::TypedLocalObjectReference {
                        api_group: r.api_group.clone(),
                        kind: r.kind.clone(),
                        name: r.name.clone(),
                    })
                }
                _ => {}
            }
        }
    }

    fn validate(&self, errs: &mut Errors) {
        let path = Path::new("spec");
        let Some(spec) = &self.spec else {
            errs.push(FieldError::required(&path, ""));
            return;
        };
        match &spec.access_modes {
            Some(m) if !m.is_empty() => validate_access_modes(m, &path, errs),
            _ => errs.push(FieldError::required(
                &path.child("accessModes"),
                "at least 1 access mode is required",
            )),
        }
        match spec
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("storage"))
        {
            None => errs.push(FieldError::required(
                &path.child("resources").key("storage"),
                "",
            )),
            Some(q) if crate::quantity::parse(&q.0).is_none_or(|v| v <= 0.0) => {
                errs.push(FieldError::invalid(
                    &path.child("resources").key("storage"),
                    &q.0,
                    "must be greater than zero",
                ))
            }
            _ => {}
        }
        if let Some(sc) = spec.storage_class_name.as_deref().filter(|s| !s.is_empty()) {
            for e in dns1123_subdomain(sc) {
                errs.push(FieldError::invalid(&path.child("storageClassName"), sc, e));
            }
        }
        if let Some(m) = &spec.volume_mode
            && !["Block", "Filesystem"].contains(&m.as_str())
        {
            errs.push(FieldError::not_supported(
                &path.child("volumeMode"),
                m,
                &["Block", "Filesystem"],
            ));
        }
    }

    fn validate_update(&self, old: &Self, errs: &mut Errors) {
        self.validate(errs);
        let (Some(n), Some(o)) = (&self.spec, &old.spec) else {
            return;
        };
        let mut comparable = n.clone();
        comparable.resources = o.resources.clone();
        comparable.volume_attributes_class_name = o.volume_attributes_class_name.clone();
        if o.volume_name.as_deref().unwrap_or("").is_empty() {
            comparable.volume_name = o.volume_name.clone();
        }
        if o.storage_class_name.is_none() {
            comparable.storage_class_name = None;
        }
        if comparable != *o {
            errs.push(FieldError::forbidden(
                &Path::new("spec"),
                "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims",
            ));
        }
        let storage = |s: &k8s_openapi::api::core::v1::PersistentVolumeClaimSpec| {
            s.resources
                .as_ref()
                .and_then(|r| r.requests.as_ref())
                .and_then(|r| r.get("storage"))
                .and_then(|q| crate::quantity::parse(&q.0))
        };
        if let (Some(new), Some(old_size)) = (storage(n), storage(o))
            && new < old_size
        {
            errs.push(FieldError::forbidden(
                &Path::new("spec")
                    .child("resources")
                    .child("requests")
                    .child("storage"),
                "field can not be less than previous value",
            ));
        }
    }

    fn row(&self, now: Timestamp) -> Row {
        Row::new(pvc_cells(self, now))
    }
}

impl Kind for StorageClass {
    const COLUMNS: &'static [Column] = STORAGE_CLASS_COLUMNS;

    fn default_fields(&mut self) {
        self.reclaim_policy.get_or_insert_with(|| "Delete".into());
        self.volume_binding_mode
            .get_or_insert_with(|| "Immediate".into());
    }

    fn validate(&self, errs: &mut Errors) {
        if self.provisioner.is_empty() {
            errs.push(FieldError::required(&Path::new("provisioner"), ""));
        } else {
            for e in qualified_name(&self.provisioner.to_lowercase()) {
                errs.push(FieldError::invalid(
                    &Path::new("provisioner"),
                    &self.provisioner,
                    e,
                ));
            }
        }
        if let Some(p) = &self.reclaim_policy
            && !["Delete", "Retain"].contains(&p.as_str())
        {
            errs.push(FieldError::not_supported(
                &Path::new("reclaimPolicy"),
                p,
                &["Delete", "Retain"],
            ));
        }
        if let Some(m) = &self.volume_binding_mode
            && !["Immediate", "WaitForFirstConsumer"].contains(&m.as_str())
        {
            errs.push(FieldError::not_supported(
                &Path::new("volumeBindingMode"),
                m,
                &["Immediate", "WaitForFirstConsumer"],
            ));
        }
    }

    fn validate_update(&self, old: &Self, errs: &mut Errors) {
        self.validate(errs);
        if self.parameters != old.parameters {
            errs.push(FieldError::forbidden(
                &Path::new("parameters"),
                "updates to parameters are forbidden.",
            ));
        }
        if self.provisioner != old.provisioner {
            errs.push(FieldError::forbidden(
                &Path::new("provisioner"),
                "updates to provisioner are forbidden.",
            ));
        }
        if self.reclaim_policy != old.reclaim_policy {
            errs.push(FieldError::forbidden(
                &Path::new("reclaimPolicy"),
                "updates to reclaimPolicy are forbidden.",
            ));
        }
        immutable(
            &self.volume_binding_mode,
            &old.volume_binding_mode,
            &Path::new("volumeBindingMode"),
            errs,
        );
    }

    fn row(&self, now: Timestamp) -> Row {
        Row::new(storage_class_cells(self, now))
    }
}

/// The class the server creates at start (k3s's `local-path`): the default, provisioned by
/// the node agents' built-in local-path provisioner on the node that first uses the claim.
/// Created only when missing: an administrator's changes are kept (a deleted class comes
/// back at the next start, as k3s's manifests do).
pub fn local_path_class() -> StorageClass {
    StorageClass {
        metadata: ObjectMeta {
            name: Some(volume::LOCAL_PATH_CLASS.into()),
            annotations: Some(BTreeMap::from([(
                volume::ANN_IS_DEFAULT_CLASS.to_string(),
                "true".to_string(),
            )])),
            ..Default::default()
        },
        provisioner: volume::LOCAL_PATH_PROVISIONER.into(),
        reclaim_policy: Some("Delete".into()),
        volume_binding_mode: Some("WaitForFirstConsumer".into()),
        allow_volume_expansion: Some(true),
        ..Default::default()
    }
}

// ---------------------------------------------------------------------------------------------
// Table printing (upstream's printers, pkg/printers/internalversion).

const PV_COLUMNS: &[Column] = &[
    NAME,
    string("Capacity", doc::PV_CAPACITY),
    string("Access Modes", doc::PV_ACCESS_MODES),
    string("Reclaim Policy", doc::PV_RECLAIM_POLICY),
    string("Status", doc::PV_PHASE),
    string("Claim", doc::PV_CLAIM_REF),
    string("StorageClass", "StorageClass of the pv"),
    string("VolumeAttributesClass", "VolumeAttributesClass of the pv"),
    string("Reason", doc::PV_REASON),
    AGE,
    string("VolumeMode", doc::PV_VOLUME_MODE).wide(),
];

const PVC_COLUMNS: &[Column] = &[
    NAME,
    string("Status", doc::PVC_PHASE),
    string("Volume", doc::PVC_VOLUME_NAME),
    string("Capacity", doc::PVC_CAPACITY),
    string("Access Modes", doc::PVC_ACCESS_MODES),
    string("StorageClass", "StorageClass of the pvc"),
    string("VolumeAttributesClass", "VolumeAttributesClass of the pvc"),
    AGE,
    string("VolumeMode", doc::PVC_VOLUME_MODE).wide(),
];

const STORAGE_CLASS_COLUMNS: &[Column] = &[
    NAME,
    string("Provisioner", doc::STORAGE_CLASS_PROVISIONER),
    string("ReclaimPolicy", doc::STORAGE_CLASS_RECLAIM_POLICY),
    string("VolumeBindingMode", doc::STORAGE_CLASS_VOLUME_BINDING_MODE),
    string(
        "AllowVolumeExpansion",
        doc::STORAGE_CLASS_ALLOW_VOLUME_EXPANSION,
    ),
    AGE,
];

/// `helper.GetAccessModesAsString`: RWO, ROX, RWX, RWOP, in that order, once each.
fn access_modes(modes: Option<&Vec<String>>) -> String {
    let modes = modes.map_or(&[][..], Vec::as_slice);
    [
        ("ReadWriteOnce", "RWO"),
        ("ReadOnlyMany", "ROX"),
        ("ReadWriteMany", "RWX"),
        ("ReadWriteOncePod", "RWOP"),
    ]
    .iter()
    .filter(|(mode, _)| modes.iter().any(|m| m == mode))
    .map(|(_, short)| *short)
    .collect::<Vec<_>>()
    .join(",")
}

fn beta_storage_class(meta: &ObjectMeta) -> Option<&String> {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(volume::ANN_BETA_STORAGE_CLASS))
}

/// A storage quantity as `Quantity.String()` prints it; a missing one is zero.
fn storage(resources: Option<&BTreeMap<String, Quantity>>) -> String {
    resources
        .and_then(|r| r.get("storage"))
        .map_or_else(|| "0".to_string(), |q| canonical_quantity(&q.0))
}

fn pv_cells(pv: &PersistentVolume, now: Timestamp) -> Vec<Value> {
    let spec = pv.spec.clone().unwrap_or_default();
    let claim = spec.claim_ref.as_ref().map_or_else(String::new, |c| {
        format!(
            "{}/{}",
            or_empty(c.namespace.as_ref()),
            or_empty(c.name.as_ref())
        )
    });
    let phase = if pv.metadata.deletion_timestamp.is_some() {
        "Terminating"
    } else {
        or_empty(pv.status.as_ref().and_then(|s| s.phase.as_ref()))
    };
    let class = beta_storage_class(&pv.metadata)
        .or(spec.storage_class_name.as_ref())
        .map_or("", String::as_str);
    vec![
        name(&pv.metadata),
        text(storage(spec.capacity.as_ref())),
        text(access_modes(spec.access_modes.as_ref())),
        text(or_empty(spec.persistent_volume_reclaim_policy.as_ref())),
        text(phase),
        text(claim),
        text(class),
        text(
            spec.volume_attributes_class_name
                .as_deref()
                .unwrap_or("<unset>"),
        ),
        text(or_empty(pv.status.as_ref().and_then(|s| s.reason.as_ref()))),
        age(&pv.metadata, now),
        text(spec.volume_mode.as_deref().unwrap_or("<unset>")),
    ]
}

fn pvc_cells(pvc: &PersistentVolumeClaim, now: Timestamp) -> Vec<Value> {
    let spec = pvc.spec.clone().unwrap_or_default();
    let status = pvc.status.clone().unwrap_or_default();
    let phase = if pvc.metadata.deletion_timestamp.is_some() {
        "Terminating"
    } else {
        or_empty(status.phase.as_ref())
    };
    let volume_name = or_empty(spec.volume_name.as_ref());
    let (capacity, modes) = if volume_name.is_empty() {
        (String::new(), String::new())
    } else {
        (
            storage(status.capacity.as_ref()),
            access_modes(status.access_modes.as_ref()),
        )
    };
    let class = beta_storage_class(&pvc.metadata)
        .or(spec.storage_class_name.as_ref())
        .map_or("", String::as_str);
    vec![
        name(&pvc.metadata),
        text(phase),
        text(volume_name),
        text(capacity),
        text(modes),
        text(class),
        text(
            spec.volume_attributes_class_name
                .as_deref()
                .unwrap_or("<unset>"),
        ),
        age(&pvc.metadata, now),
        text(spec.volume_mode.as_deref().unwrap_or("<unset>")),
    ]
}

fn storage_class_cells(sc: &StorageClass, now: Timestamp) -> Vec<Value> {
    let is_default = volume::is_default_class(sc);
    let mut display_name = or_empty(sc.metadata.name.as_ref()).to_string();
    if is_default {
        display_name.push_str(" (default)");
    }
    vec![
        text(display_name),
        text(sc.provisioner.clone()),
        text(sc.reclaim_policy.as_deref().unwrap_or("Delete")),
        text(sc.volume_binding_mode.as_deref().unwrap_or("Immediate")),
        Value::Bool(sc.allow_volume_expansion.unwrap_or(false)),
        age(&sc.metadata, now),
    ]
}

mod doc {
    pub const PV_CAPACITY: &str = "capacity is the description of the persistent volume's resources and capacity. More info: https://kubernetes.io/docs/concepts/storage/persistent-volumes#capacity";
    pub const PV_ACCESS_MODES: &str = "accessModes contains all ways the volume can be mounted. More info: https://kubernetes.io/docs/concepts/storage/persistent-volumes#access-modes";
    pub const PV_RECLAIM_POLICY: &str = "persistentVolumeReclaimPolicy defines what happens to a persistent volume when released from its claim. Valid options are Retain (default for manually created PersistentVolumes), Delete (default for dynamically provisioned PersistentVolumes), and Recycle (deprecated). Recycle must be supported by the volume plugin underlying this PersistentVolume. More info: https://kubernetes.io/docs/concepts/storage/persistent-volumes#reclaiming";
    pub const PV_CLAIM_REF: &str = "claimRef is part of a bi-directional binding between PersistentVolume and PersistentVolumeClaim. Expected to be non-nil when bound. claim.VolumeName is the authoritative bind between PV and PVC. More info: https://kubernetes.io/docs/concepts/storage/persistent-volumes#binding";
    pub const PV_VOLUME_MODE: &str = "volumeMode defines if a volume is intended to be used with a formatted filesystem or to remain in raw block state. Value of Filesystem is implied when not included in spec.";
    pub const PV_PHASE: &str = "phase indicates if a volume is available, bound to a claim, or released by a claim. More info: https://kubernetes.io/docs/concepts/storage/persistent-volumes#phase";
    pub const PV_REASON: &str = "reason is a brief CamelCase string that describes any failure and is meant for machine parsing and tidy display in the CLI.";
    pub const PVC_PHASE: &str = "phase represents the current phase of PersistentVolumeClaim.";
    pub const PVC_CAPACITY: &str =
        "capacity represents the actual resources of the underlying volume.";
    pub const PVC_ACCESS_MODES: &str = "accessModes contains the actual access modes the volume backing the PVC has. More info: https://kubernetes.io/docs/concepts/storage/persistent-volumes#access-modes-1";
    pub const PVC_VOLUME_NAME: &str =
        "volumeName is the binding reference to the PersistentVolume backing this claim.";
    pub const PVC_VOLUME_MODE: &str = "volumeMode defines what type of volume is required by the claim. Value of Filesystem is implied when not included in claim spec.";
    pub const STORAGE_CLASS_PROVISIONER: &str =
        "provisioner indicates the type of the provisioner.";
    pub const STORAGE_CLASS_RECLAIM_POLICY: &str = "reclaimPolicy controls the reclaimPolicy for dynamically provisioned PersistentVolumes of this storage class. Defaults to Delete.";
    pub const STORAGE_CLASS_VOLUME_BINDING_MODE: &str = "volumeBindingMode indicates how PersistentVolumeClaims should be provisioned and bound.  When unset, VolumeBindingImmediate is used. This field is only honored by servers that enable the VolumeScheduling feature.";
    pub const STORAGE_CLASS_ALLOW_VOLUME_EXPANSION: &str =
        "allowVolumeExpansion shows whether the storage class allow volume expand.";
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::table::testing::*;

    #[test]
    fn storage_rows() {
        let pv = json!({"apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": "pv1", "creationTimestamp": ago(60)},
            "spec": {"capacity": {"storage": "1024Mi"}, "accessModes": ["ReadWriteMany", "ReadWriteOnce", "ReadWriteOnce"],
                     "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "standard",
                     "claimRef": {"namespace": "default", "name": "data"}, "volumeMode": "Filesystem"},
            "status": {"phase": "Bound"}});
        assert_eq!(
            row_of::<PersistentVolume>(pv),
            vec![
                json!("pv1"),
                json!("1Gi"),
                json!("RWO,RWX"),
                json!("Retain"),
                json!("Bound"),
                json!("default/data"),
                json!("standard"),
                json!("<unset>"),
                json!(""),
                json!("60s"),
                json!("Filesystem")
            ]
        );
        let pvc = |volume: Option<&str>| {
            let mut spec =
                json!({"resources": {"requests": {"storage": "5Gi"}}, "storageClassName": "fast"});
            if let Some(v) = volume {
                spec["volumeName"] = json!(v);
            }
            row_of::<PersistentVolumeClaim>(
                json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                       "metadata": {"name": "data", "annotations": {"volume.beta.kubernetes.io/storage-class": "beta"}},
                       "spec": spec,
                       "status": {"phase": if volume.is_some() { "Bound" } else { "Pending" },
                                  "capacity": {"storage": "5Gi"}, "accessModes": ["ReadWriteOncePod"]}}),
            )
        };
        assert_eq!(
            pvc(Some("pv1")),
            vec![
                json!("data"),
                json!("Bound"),
                json!("pv1"),
                json!("5Gi"),
                json!("RWOP"),
                json!("beta"),
                json!("<unset>"),
                json!("<unknown>"),
                json!("<unset>")
            ]
        );
        assert_eq!(
            pvc(None)[1..5],
            [json!("Pending"), json!(""), json!(""), json!("")]
        );

        let sc = json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": "standard", "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
            "provisioner": "rancher.io/local-path", "volumeBindingMode": "WaitForFirstConsumer"});
        assert_eq!(
            row_of::<StorageClass>(sc),
            vec![
                json!("standard (default)"),
                json!("rancher.io/local-path"),
                json!("Delete"),
                json!("WaitForFirstConsumer"),
                json!(false),
                json!("<unknown>")
            ]
        );
    }
    fn errors<K: Kind>(obj: &K) -> Vec<String> {
        let mut errs = Vec::new();
        obj.validate(&mut errs);
        errs.iter().map(ToString::to_string).collect()
    }

    fn update_errors<K: Kind>(new: &K, old: &K) -> Vec<String> {
        let mut errs = Vec::new();
        new.validate_update(old, &mut errs);
        errs.iter().map(ToString::to_string).collect()
    }

    fn pv(spec: Value) -> PersistentVolume {
        serde_json::from_value(json!({"metadata": {"name": "pv"}, "spec": spec})).unwrap()
    }

    #[test]
    fn volumes_need_one_source_storage_capacity_and_local_affinity() {
        let affinity = json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}]}]}});
        let ok = pv(
            json!({"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
            "local": {"path": "/mnt/a"}, "nodeAffinity": affinity}),
        );
        assert!(errors(&ok).is_empty(), "{:?}", errors(&ok));
        assert_eq!(
            errors(&pv(json!({"capacity": {"storage": "1Gi", "cpu": "1"},
                "accessModes": ["ReadWriteOncePod", "ReadOnlyMany"],
                "hostPath": {"path": "/a"}, "local": {"path": "/b"}}))),
            [
                "spec.accessModes: Forbidden: may not use ReadWriteOncePod with other access modes",
                "spec.local: Forbidden: may not specify more than 1 volume type",
                "spec.nodeAffinity: Required value: Local volume requires node affinity",
                "spec.capacity: Unsupported value: [\"cpu\", \"storage\"]: supported values: \"storage\"",
            ]
        );
        assert_eq!(
            errors(&pv(json!({"capacity": {"storage": "1Gi"}}))),
            [
                "spec.accessModes: Required value: must specify at least 1 access mode",
                "spec: Required value: must specify a volume type",
            ]
        );
        let mut moved = ok.clone();
        moved.spec.as_mut().unwrap().node_affinity = None;
        moved.spec.as_mut().unwrap().local = Some(Default::default());
        assert_eq!(
            update_errors(&moved, &ok),
            [
                "spec.local.path: Required value",
                "spec.nodeAffinity: Required value: Local volume requires node affinity",
                "spec.persistentvolumesource: Forbidden: spec.persistentvolumesource is immutable after creation",
                "nodeAffinity: Invalid value: None: field is immutable",
            ]
        );
    }
}
