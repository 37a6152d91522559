//! storage.k8s.io objects of the Container Storage Interface: CSIDrivers (how kubelet and the
//! attach/detach controller treat a driver), CSINodes (the drivers a node runs), VolumeAttachments
//! (a volume's attachment to a node, driven by the external attacher through `status`) and
//! CSIStorageCapacities (what a driver reports it can provision, for the scheduler). Drivers
//! write these objects and read back what the API server defaulted, so defaults and the fields
//! that may not change follow upstream.

use std::collections::BTreeSet;

use jiff::Timestamp;
use k8s_openapi::api::storage::v1::{
    CSIDriver, CSINode, CSINodeDriver, CSIStorageCapacity, VolumeAttachment, VolumeError,
};
use serde_json::Value;

use crate::spec_and_status;
use crate::strategy::Kind;
use crate::table::{
    AGE, Column, NAME, Row, age, canonical_quantity, column, integer, name, num, or_empty, string,
    text,
};
use crate::validation::{
    ErrorKind, Errors, FieldError, Path, dns1123_subdomain, qualified_name, validate_label_selector,
};

const FS_GROUP_POLICIES: &[&str] = &["File", "None", "ReadWriteOnceWithFSType"];
const LIFECYCLE_MODES: &[&str] = &["Persistent", "Ephemeral"];
const CSI_NODE_ID_MAX: usize = 192;
const CSI_NODE_ID_LONG_MAX: usize = 256;
const MAX_ATTACHMENT_METADATA: usize = 256 * 1024;
const MAX_VOLUME_ERROR_MESSAGE: usize = 1024;

impl Kind for CSIDriver {
    const COLUMNS: &'static [Column] = CSI_DRIVER_COLUMNS;
    const UNCONDITIONAL_UPDATE: bool = false;

    fn spec_changed(&self, old: &Self) -> Option<bool> {
        Some(self.spec != old.spec)
    }

    fn default_fields(&mut self) {
        let spec = &mut self.spec;
        spec.attach_required.get_or_insert(true);
        spec.pod_info_on_mount.get_or_insert(false);
        spec.storage_capacity.get_or_insert(false);
        spec.fs_group_policy
            .get_or_insert_with(|| "ReadWriteOnceWithFSType".into());
        if spec
            .volume_lifecycle_modes
            .as_ref()
            .is_none_or(Vec::is_empty)
        {
            spec.volume_lifecycle_modes = Some(vec!["Persistent".into()]);
        }
        spec.requires_republish.get_or_insert(false);
        // SELinuxMountReadWriteOncePod is on by default upstream.
        spec.se_linux_mount.get_or_insert(false);
    }

    fn prepare_create(&mut self) {
        // MutableCSINodeAllocatableCount is an alpha feature upstream, off by default.
        self.spec.node_allocatable_update_period_seconds = None;
    }

    fn prepare_update(&mut self, old: &Self) {
        if old.spec.node_allocatable_update_period_seconds.is_none() {
            self.spec.node_allocatable_update_period_seconds = None;
        }
    }

    fn validate(&self, errs: &mut Errors) {
        let sp = Path::new("spec");
        let spec = &self.spec;
        // Upstream's path really says "attachedRequired".
        for (value, field) in [
            (spec.attach_required, "attachedRequired"),
            (spec.pod_info_on_mount, "podInfoOnMount"),
            (spec.storage_capacity, "storageCapacity"),
        ] {
            if value.is_none() {
                errs.push(FieldError::required(&sp.child(field), ""));
            }
        }
        if let Some(p) = &spec.fs_group_policy
            && !FS_GROUP_POLICIES.contains(&p.as_str())
        {
            errs.push(FieldError::not_supported(
                &sp.child("fsGroupPolicy"),
                p,
                FS_GROUP_POLICIES,
            ));
        }
        let mut audiences = BTreeSet::new();
        for (i, t) in spec.token_requests.iter().flatten().enumerate() {
            let p = sp.child("tokenRequests").index(i);
            if !audiences.insert(t.audience.as_str()) {
                errs.push(FieldError::duplicate(&p.child("audience"), &t.audience));
                continue;
            }
            let Some(secs) = t.expiration_seconds else {
                continue;
            };
            if secs < 600 {
                errs.push(FieldError::invalid(
                    &p.child("expirationSeconds"),
                    secs,
                    "may not specify a duration less than 10 minutes",
                ));
            }
            if secs > 1 << 32 {
                errs.push(FieldError::invalid(
                    &p.child("expirationSeconds"),
                    secs,
                    "may not specify a duration larger than 2^32 seconds",
                ));
            }
        }
        for mode in spec.volume_lifecycle_modes.iter().flatten() {
            if !LIFECYCLE_MODES.contains(&mode.as_str()) {
                errs.push(FieldError::not_supported(
                    &sp.child("volumeLifecycleModes"),
                    mode,
                    LIFECYCLE_MODES,
                ));
            }
        }
        if spec.se_linux_mount.is_none() {
            errs.push(FieldError::required(&sp.child("seLinuxMount"), ""));
        }
        if let Some(period) = spec.node_allocatable_update_period_seconds
            && period < 10
        {
            errs.push(FieldError::invalid(
                &sp.child("nodeAllocatableUpdatePeriodSeconds"),
                period,
                "must be greater than or equal to 10 seconds",
            ));
        }
    }

    fn validate_update(&self, old: &Self, errs: &mut Errors) {
        self.validate(errs);
        let sp = Path::new("spec");
        if self.spec.attach_required != old.spec.attach_required {
            errs.push(FieldError::invalid(
                &sp.child("attachedRequired"),
                self.spec.attach_required.unwrap_or(false),
                "field is immutable",
            ));
        }
        let modes = |d: &Self| d.spec.volume_lifecycle_modes.clone().unwrap_or_default();
        if modes(self) != modes(old) {
            let quoted: Vec<String> = modes(self).iter().map(|m| format!("{m:?}")).collect();
            errs.push(FieldError::new(
                ErrorKind::Invalid,
                &sp.child("volumeLifecycleModes"),
                Some(format!(
                    "[]storage.VolumeLifecycleMode{{{}}}",
                    quoted.join(", ")
                )),
                "field is immutable",
            ));
        }
    }

    fn row(&self, now: Timestamp) -> Row {
        Row::new(csi_driver_cells(self, now))
    }
}

impl Kind for CSINode {
    const COLUMNS: &'static [Column] = CSI_NODE_COLUMNS;
    const UNCONDITIONAL_UPDATE: bool = false;

    fn validate(&self, errs: &mut Errors) {
        validate_csi_node(self, CSI_NODE_ID_MAX, errs);
    }

    fn validate_update(&self, old: &Self, errs: &mut Errors) {
        // Node IDs stored before the limit was lowered stay acceptable.
        let long_ids = old
            .spec
            .drivers
            .iter()
            .any(|d| d.node_id.len() > CSI_NODE_ID_MAX);
        let max = if long_ids {
            CSI_NODE_ID_LONG_MAX
        } else {
            CSI_NODE_ID_MAX
        };
        validate_csi_node(self, max, errs);
        for old_driver in &old.spec.drivers {
            for new_driver in self
                .spec
                .drivers
                .iter()
                .filter(|d| d.name == old_driver.name)
            {
                if new_driver != old_driver {
                    errs.push(FieldError::new(
                        ErrorKind::Invalid,
                        &Path::new("spec").child("drivers"),
                        None,
                        "field is immutable",
                    ));
                }
            }
        }
    }

    fn row(&self, now: Timestamp) -> Row {
        Row::new(vec![
            name(&self.metadata),
            num(self.spec.drivers.len() as i64),
            age(&self.metadata, now),
        ])
    }
}

fn validate_csi_node(node: &CSINode, max_node_id: usize, errs: &mut Errors) {
    let dp = Path::new("spec").child("drivers");
    let mut names = BTreeSet::new();
    for (i, driver) in node.spec.drivers.iter().enumerate() {
        let p = dp.index(i);
        validate_driver_name(&driver.name, &p.child("name"), errs);
        validate_node_driver(driver, max_node_id, &p, errs);
        if !names.insert(driver.name.as_str()) {
            errs.push(FieldError::duplicate(&p.child("name"), &driver.name));
        }
        let mut keys = BTreeSet::new();
        for key in driver.topology_keys.iter().flatten() {
            if key.is_empty() {
                errs.push(FieldError::required(&p, ""));
            }
            if !keys.insert(key.as_str()) {
                errs.push(FieldError::duplicate(&p, key));
            }
            for e in qualified_name(key) {
                errs.push(FieldError::invalid(&p, key, e));
            }
        }
    }
}

fn validate_node_driver(driver: &CSINodeDriver, max_node_id: usize, p: &Path, errs: &mut Errors) {
    let np = p.child("nodeID");
    if driver.node_id.is_empty() {
        errs.push(FieldError::required(&np, ""));
    }
    if driver.node_id.len() > max_node_id {
        errs.push(FieldError::invalid(
            &np,
            &driver.node_id,
            format!("must be {max_node_id} characters or less"),
        ));
    }
    if let Some(count) = driver.allocatable.as_ref().and_then(|a| a.count)
        && count < 0
    {
        errs.push(FieldError::invalid(
            &p.child("allocatable").child("count"),
            count,
            "must be greater than or equal to 0",
        ));
    }
}

/// Upstream's `ValidateCSIDriverName`: a DNS subdomain of at most 63 characters (upper case
/// allowed).
fn validate_driver_name(driver: &str, p: &Path, errs: &mut Errors) {
    if driver.is_empty() {
        errs.push(FieldError::required(p, ""));
    }
    if driver.len() > 63 {
        errs.push(FieldError::too_long(p, 63));
    }
    for e in dns1123_subdomain(&driver.to_lowercase()) {
        errs.push(FieldError::invalid(p, driver, e));
    }
}

impl Kind for VolumeAttachment {
    const COLUMNS: &'static [Column] = VOLUME_ATTACHMENT_COLUMNS;
    const UNCONDITIONAL_UPDATE: bool = false;

    spec_and_status!();

    fn prepare_create(&mut self) {
        self.status = Some(Default::default());
    }

    fn validate(&self, errs: &mut Errors) {
        let sp = Path::new("spec");
        let spec = &self.spec;
        // ValidateVolumeAttachment, then the v1 additions (ValidateVolumeAttachmentV1).
        let ap = sp.child("attacher");
        if spec.attacher.is_empty() {
            errs.push(FieldError::required(&ap, ""));
        }
        let src = sp.child("source");
        let source = &spec.source;
        match (&source.persistent_volume_name, &source.inline_volume_spec) {
            (None, None) => errs.push(FieldError::required(
                &src,
                "must specify exactly one of inlineVolumeSpec and persistentVolumeName",
            )),
            (Some(_), Some(_)) => errs.push(FieldError::forbidden(
                &src,
                "must specify exactly one of inlineVolumeSpec and persistentVolumeName",
            )),
            (Some(pv), None) if pv.is_empty() => errs.push(FieldError::required(
                &src.child("persistentVolumeName"),
                "must specify non empty persistentVolumeName",
            )),
            _ => {}
        }
        for e in dns1123_subdomain(&spec.node_name) {
            errs.push(FieldError::invalid(
                &sp.child("nodeName"),
                &spec.node_name,
                e,
            ));
        }
        let status = self.status.clone().unwrap_or_default();
        let stp = Path::new("status");
        let metadata_size: usize = status
            .attachment_metadata
            .iter()
            .flatten()
            .map(|(k, v)| k.len() + v.len())
            .sum();
        if metadata_size > MAX_ATTACHMENT_METADATA {
            errs.push(FieldError::too_long(
                &stp.child("attachmentMetadata"),
                MAX_ATTACHMENT_METADATA,
            ));
        }
        validate_volume_error(
            status.attach_error.as_ref(),
            &stp.child("attachError"),
            errs,
        );
        validate_volume_error(
            status.detach_error.as_ref(),
            &stp.child("detachError"),
            errs,
        );
        // The v1 additions: the attacher is a CSI driver name, the volume a PV name.
        if !spec.attacher.is_empty() {
            if spec.attacher.len() > 63 {
                errs.push(FieldError::too_long(&ap, 63));
            }
            for e in dns1123_subdomain(&spec.attacher.to_lowercase()) {
                errs.push(FieldError::invalid(&ap, &spec.attacher, e));
            }
        }
        if let Some(pv) = &source.persistent_volume_name {
            for e in dns1123_subdomain(pv) {
                errs.push(FieldError::invalid(
                    &src.child("persistentVolumeName"),
                    pv,
                    e,
                ));
            }
        }
    }

    fn validate_update(&self, old: &Self, errs: &mut Errors) {
        self.validate(errs);
        if self.spec != old.spec {
            errs.push(FieldError::new(
                ErrorKind::Invalid,
                &Path::new("spec"),
                None,
                "field is immutable",
            ));
        }
    }

    fn row(&self, now: Timestamp) -> Row {
        Row::new(volume_attachment_cells(self, now))
    }
}

fn validate_volume_error(e: Option<&VolumeError>, p: &Path, errs: &mut Errors) {
    let Some(e) = e else { return };
    if e.message
        .as_ref()
        .is_some_and(|m| m.len() > MAX_VOLUME_ERROR_MESSAGE)
    {
        // Upstream states the metadata limit here.
        errs.push(FieldError::too_long(
            &p.child("message"),
            MAX_ATTACHMENT_METADATA,
        ));
    }
    if let Some(code) = e.error_code
        && code < 0
    {
        errs.push(FieldError::invalid(
            &p.child("errorCode"),
            code,
            format!("must be between 0 and {}, inclusive", i32::MAX),
        ));
    }
}

impl Kind for CSIStorageCapacity {
    const COLUMNS: &'static [Column] = CSI_STORAGE_CAPACITY_COLUMNS;
    const UNCONDITIONAL_UPDATE: bool = false;

    fn validate(&self, errs: &mut Errors) {
        if let Some(sel) = &self.node_topology {
            validate_label_selector(sel, &Path::new("nodeTopology"), errs);
        }
        for e in dns1123_subdomain(&self.storage_class_name) {
            errs.push(FieldError::invalid(
                &Path::new("storageClassName"),
                &self.storage_class_name,
                e,
            ));
        }
        if let Some(q) = &self.capacity
            && crate::quantity::parse(&q.0).is_some_and(|v| v < 0.0)
        {
            errs.push(FieldError::invalid(
                &Path::new("capacity"),
                canonical_quantity(&q.0),
                "must be greater than or equal to 0",
            ));
        }
    }

    fn validate_update(&self, old: &Self, errs: &mut Errors) {
        self.validate(errs);
        if self.node_topology != old.node_topology {
            errs.push(FieldError::new(
                ErrorKind::Invalid,
                &Path::new("nodeTopology"),
                None,
                "field is immutable",
            ));
        }
        if self.storage_class_name != old.storage_class_name {
            errs.push(FieldError::invalid(
                &Path::new("storageClassName"),
                &self.storage_class_name,
                "field is immutable",
            ));
        }
    }

    fn row(&self, _now: Timestamp) -> Row {
        let capacity = self
            .capacity
            .as_ref()
            .map_or_else(|| "<unset>".to_string(), |q| canonical_quantity(&q.0));
        Row::new(vec![
            name(&self.metadata),
            text(self.storage_class_name.clone()),
            text(capacity),
        ])
    }
}

// ---------------------------------------------------------------------------------------------
// Table printing (upstream's printers, pkg/printers/internalversion).

const CSI_DRIVER_COLUMNS: &[Column] = &[
    NAME,
    column("AttachRequired", "boolean", doc::ATTACH_REQUIRED),
    column("PodInfoOnMount", "boolean", doc::POD_INFO_ON_MOUNT),
    column("StorageCapacity", "boolean", doc::STORAGE_CAPACITY),
    string("TokenRequests", doc::TOKEN_REQUESTS),
    column("RequiresRepublish", "boolean", doc::REQUIRES_REPUBLISH),
    string("Modes", doc::VOLUME_LIFECYCLE_MODES),
    AGE,
];

const CSI_NODE_COLUMNS: &[Column] = &[
    NAME,
    integer(
        "Drivers",
        "Drivers indicates the number of CSI drivers registered on the node",
    ),
    AGE,
];

const VOLUME_ATTACHMENT_COLUMNS: &[Column] = &[
    NAME,
    // Upstream marks the attacher column as a name too.
    string("Attacher", doc::ATTACHER).format("name"),
    string("PV", doc::PERSISTENT_VOLUME_NAME),
    string("Node", doc::NODE_NAME),
    column("Attached", "boolean", doc::ATTACHED),
    AGE,
];

const CSI_STORAGE_CAPACITY_COLUMNS: &[Column] = &[
    NAME,
    string("StorageClassName", doc::STORAGE_CLASS_NAME),
    string("Capacity", doc::CAPACITY),
];

fn csi_driver_cells(d: &CSIDriver, now: Timestamp) -> Vec<Value> {
    let spec = &d.spec;
    let modes = spec
        .volume_lifecycle_modes
        .clone()
        .unwrap_or_default()
        .join(",");
    let modes = if modes.is_empty() {
        "<none>".into()
    } else {
        modes
    };
    let token_requests = spec.token_requests.as_ref().map_or_else(
        || "<unset>".to_string(),
        |t| {
            t.iter()
                .map(|r| r.audience.as_str())
                .collect::<Vec<_>>()
                .join(",")
        },
    );
    vec![
        name(&d.metadata),
        Value::Bool(spec.attach_required.unwrap_or(true)),
        Value::Bool(spec.pod_info_on_mount.unwrap_or(false)),
        Value::Bool(spec.storage_capacity.unwrap_or(false)),
        text(token_requests),
        Value::Bool(spec.requires_republish.unwrap_or(false)),
        text(modes),
        age(&d.metadata, now),
    ]
}

fn volume_attachment_cells(va: &VolumeAttachment, now: Timestamp) -> Vec<Value> {
    let spec = &va.spec;
    vec![
        name(&va.metadata),
        text(spec.attacher.clone()),
        text(or_empty(spec.source.persistent_volume_name.as_ref())),
        text(spec.node_name.clone()),
        Value::Bool(va.status.as_ref().is_some_and(|s| s.attached)),
        age(&va.metadata, now),
    ]
}

mod doc {
    pub const ATTACH_REQUIRED: &str = "attachRequired indicates this CSI volume driver requires an attach operation (because it implements the CSI ControllerPublishVolume() method), and that the Kubernetes attach detach controller should call the attach volume interface which checks the volumeattachment status and waits until the volume is attached before proceeding to mounting. The CSI external-attacher coordinates with CSI volume driver and updates the volumeattachment status when the attach operation is complete. If the CSIDriverRegistry feature gate is enabled and the value is specified to false, the attach operation will be skipped. Otherwise the attach operation will be called.\n\nThis field is immutable.";
    pub const POD_INFO_ON_MOUNT: &str = "podInfoOnMount indicates this CSI volume driver requires additional pod information (like podName, podUID, etc.) during mount operations, if set to true. If set to false, pod information will not be passed on mount. Default is false.\n\nThe CSI driver specifies podInfoOnMount as part of driver deployment. If true, Kubelet will pass pod information as VolumeContext in the CSI NodePublishVolume() calls. The CSI driver is responsible for parsing and validating the information passed in as VolumeContext.\n\nThe following VolumeContext will be passed if podInfoOnMount is set to true. This list might grow, but the prefix will be used. \"csi.storage.k8s.io/pod.name\": pod.Name \"csi.storage.k8s.io/pod.namespace\": pod.Namespace \"csi.storage.k8s.io/pod.uid\": string(pod.UID) \"csi.storage.k8s.io/ephemeral\": \"true\" if the volume is an ephemeral inline volume\n                                defined by a CSIVolumeSource, otherwise \"false\"\n\n\"csi.storage.k8s.io/ephemeral\" is a new feature in Kubernetes 1.16. It is only required for drivers which support both the \"Persistent\" and \"Ephemeral\" VolumeLifecycleMode. Other drivers can leave pod info disabled and/or ignore this field. As Kubernetes 1.15 doesn't support this field, drivers can only support one mode when deployed on such a cluster and the deployment determines which mode that is, for example via a command line parameter of the driver.\n\nThis field was immutable in Kubernetes < 1.29 and now is mutable.";
    pub const STORAGE_CAPACITY: &str = "storageCapacity indicates that the CSI volume driver wants pod scheduling to consider the storage capacity that the driver deployment will report by creating CSIStorageCapacity objects with capacity information, if set to true.\n\nThe check can be enabled immediately when deploying a driver. In that case, provisioning new volumes with late binding will pause until the driver deployment has published some suitable CSIStorageCapacity object.\n\nAlternatively, the driver can be deployed with the field unset or false and it can be flipped later when storage capacity information has been published.\n\nThis field was immutable in Kubernetes <= 1.22 and now is mutable.";
    pub const TOKEN_REQUESTS: &str = "tokenRequests indicates the CSI driver needs pods' service account tokens it is mounting volume for to do necessary authentication. Kubelet will pass the tokens in VolumeContext in the CSI NodePublishVolume calls. The CSI driver should parse and validate the following VolumeContext: \"csi.storage.k8s.io/serviceAccount.tokens\": {\n  \"<audience>\": {\n    \"token\": <token>,\n    \"expirationTimestamp\": <expiration timestamp in RFC3339>,\n  },\n  ...\n}\n\nNote: Audience in each TokenRequest should be different and at most one token is empty string. To receive a new token after expiry, RequiresRepublish can be used to trigger NodePublishVolume periodically.";
    pub const REQUIRES_REPUBLISH: &str = "requiresRepublish indicates the CSI driver wants `NodePublishVolume` being periodically called to reflect any possible change in the mounted volume. This field defaults to false.\n\nNote: After a successful initial NodePublishVolume call, subsequent calls to NodePublishVolume should only update the contents of the volume. New mount points will not be seen by a running container.";
    pub const VOLUME_LIFECYCLE_MODES: &str = "volumeLifecycleModes defines what kind of volumes this CSI volume driver supports. The default if the list is empty is \"Persistent\", which is the usage defined by the CSI specification and implemented in Kubernetes via the usual PV/PVC mechanism.\n\nThe other mode is \"Ephemeral\". In this mode, volumes are defined inline inside the pod spec with CSIVolumeSource and their lifecycle is tied to the lifecycle of that pod. A driver has to be aware of this because it is only going to get a NodePublishVolume call for such a volume.\n\nFor more information about implementing this mode, see https://kubernetes-csi.github.io/docs/ephemeral-local-volumes.html A driver can support one or more of these modes and more modes may be added in the future.\n\nThis field is beta. This field is immutable.";
    pub const ATTACHER: &str = "attacher indicates the name of the volume driver that MUST handle this request. This is the name returned by GetPluginName().";
    pub const PERSISTENT_VOLUME_NAME: &str =
        "persistentVolumeName represents the name of the persistent volume to attach.";
    pub const NODE_NAME: &str =
        "nodeName represents the node that the volume should be attached to.";
    pub const ATTACHED: &str = "attached indicates the volume is successfully attached. This field must only be set by the entity completing the attach operation, i.e. the external-attacher.";
    pub const STORAGE_CLASS_NAME: &str = "storageClassName represents the name of the StorageClass that the reported capacity applies to. It must meet the same requirements as the name of a StorageClass object (non-empty, DNS subdomain). If that object no longer exists, the CSIStorageCapacity object is obsolete and should be removed by its creator. This field is immutable.";
    pub const CAPACITY: &str = "capacity is the value reported by the CSI driver in its GetCapacityResponse for a GetCapacityRequest with topology and parameters that match the previous fields.\n\nThe semantic is currently (CSI spec 1.2) defined as: The available capacity, in bytes, of the storage that can be used to provision volumes. If not set, that information is currently unavailable.";
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::table::columns;
    use crate::table::testing::*;

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

    fn driver(spec: Value) -> CSIDriver {
        let mut d: CSIDriver = serde_json::from_value(
            json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
            "metadata": {"name": "hostpath.csi.k8s.io"}, "spec": spec}),
        )
        .unwrap();
        d.default_fields();
        d
    }

    #[test]
    fn csi_driver_defaults_and_validation() {
        let d = driver(json!({}));
        assert_eq!(
            serde_json::to_value(&d.spec).unwrap(),
            json!({"attachRequired": true, "podInfoOnMount": false, "storageCapacity": false,
                   "fsGroupPolicy": "ReadWriteOnceWithFSType", "volumeLifecycleModes": ["Persistent"],
                   "requiresRepublish": false, "seLinuxMount": false})
        );
        assert!(errors(&d).is_empty());
        let bad = driver(
            json!({"fsGroupPolicy": "Always", "volumeLifecycleModes": ["Persistent", "Forever"],
            "tokenRequests": [{"audience": "a", "expirationSeconds": 60}, {"audience": "a"}]}),
        );
        assert_eq!(
            errors(&bad),
            [
                "spec.fsGroupPolicy: Unsupported value: \"Always\": supported values: \"File\", \"None\", \"ReadWriteOnceWithFSType\"",
                "spec.tokenRequests[0].expirationSeconds: Invalid value: 60: may not specify a duration less than 10 minutes",
                "spec.tokenRequests[1].audience: Duplicate value: \"a\"",
                "spec.volumeLifecycleModes: Unsupported value: \"Forever\": supported values: \"Persistent\", \"Ephemeral\"",
            ]
        );
        let changed = driver(
            json!({"attachRequired": false, "volumeLifecycleModes": ["Ephemeral"], "podInfoOnMount": true}),
        );
        assert_eq!(
            update_errors(&changed, &d),
            [
                "spec.attachedRequired: Invalid value: false: field is immutable",
                "spec.volumeLifecycleModes: Invalid value: []storage.VolumeLifecycleMode{\"Ephemeral\"}: field is immutable",
            ]
        );
        assert_eq!(changed.spec_changed(&d), Some(true));
    }

    #[test]
    fn csi_node_validation() {
        let node = |drivers: Value| -> CSINode {
            serde_json::from_value(
                json!({"metadata": {"name": "n1"}, "spec": {"drivers": drivers}}),
            )
            .unwrap()
        };
        let ok = node(
            json!([{"name": "a.csi.io", "nodeID": "n1", "topologyKeys": ["topology.kubernetes.io/zone"]}]),
        );
        assert!(errors(&ok).is_empty());
        assert_eq!(
            errors(&node(
                json!([{"name": "a.csi.io", "nodeID": ""}, {"name": "a.csi.io", "nodeID": "x".repeat(193),
                                 "topologyKeys": ["k", "k"]}])
            )),
            [
                "spec.drivers[0].nodeID: Required value",
                format!(
                    "spec.drivers[1].nodeID: Invalid value: {:?}: must be 192 characters or less",
                    "x".repeat(193)
                )
                .as_str(),
                "spec.drivers[1].name: Duplicate value: \"a.csi.io\"",
                "spec.drivers[1]: Duplicate value: \"k\"",
            ]
        );
        let moved = node(
            json!([{"name": "a.csi.io", "nodeID": "n2", "topologyKeys": ["topology.kubernetes.io/zone"]}]),
        );
        assert_eq!(
            update_errors(&moved, &ok),
            ["spec.drivers: Invalid value: field is immutable"]
        );
    }

    #[test]
    fn volume_attachment_validation() {
        let va = |spec: Value| -> VolumeAttachment {
            serde_json::from_value(json!({"metadata": {"name": "va"}, "spec": spec})).unwrap()
        };
        let ok = va(
            json!({"attacher": "a.csi.io", "nodeName": "n1", "source": {"persistentVolumeName": "pv1"}}),
        );
        assert!(errors(&ok).is_empty());
        assert_eq!(
            errors(&va(json!({"attacher": "", "nodeName": "n1", "source": {}}))),
            [
                "spec.attacher: Required value",
                "spec.source: Required value: must specify exactly one of inlineVolumeSpec and persistentVolumeName",
            ]
        );
        assert_eq!(
            errors(&va(json!({"attacher": "a.csi.io", "nodeName": "n1",
                              "source": {"persistentVolumeName": "pv1", "inlineVolumeSpec": {}}}))),
            [
                "spec.source: Forbidden: must specify exactly one of inlineVolumeSpec and persistentVolumeName"
            ]
        );
        let mut moved = ok.clone();
        moved.spec.node_name = "n2".into();
        assert_eq!(
            update_errors(&moved, &ok),
            ["spec: Invalid value: field is immutable"]
        );
        // The attacher reports through status; the spec stays.
        let mut status = moved.clone();
        status.status = Some(serde_json::from_value(json!({"attached": true})).unwrap());
        status.keep_spec(&ok);
        assert_eq!(status.spec, ok.spec);
        assert!(update_errors(&status, &ok).is_empty());
    }

    #[test]
    fn csi_storage_capacity_validation() {
        let cap = |name: &str, capacity: &str| -> CSIStorageCapacity {
            serde_json::from_value(
                json!({"metadata": {"name": "c", "namespace": "kube-system"},
                "storageClassName": name, "capacity": capacity}),
            )
            .unwrap()
        };
        assert!(errors(&cap("standard", "10Gi")).is_empty());
        assert_eq!(
            errors(&cap("standard", "-1Gi")),
            ["capacity: Invalid value: \"-1Gi\": must be greater than or equal to 0"]
        );
        assert_eq!(errors(&cap("", "1")).len(), 1);
        assert_eq!(
            update_errors(&cap("fast", "1"), &cap("standard", "1")),
            ["storageClassName: Invalid value: \"fast\": field is immutable"]
        );
    }

    #[test]
    fn csi_rows() {
        let d = json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
            "metadata": {"name": "hostpath.csi.k8s.io", "creationTimestamp": ago(30)},
            "spec": {"attachRequired": false, "podInfoOnMount": true, "volumeLifecycleModes": ["Persistent", "Ephemeral"],
                     "tokenRequests": [{"audience": "vault"}, {"audience": ""}]}});
        assert_eq!(
            row_of::<CSIDriver>(d),
            vec![
                json!("hostpath.csi.k8s.io"),
                json!(false),
                json!(true),
                json!(false),
                json!("vault,"),
                json!(false),
                json!("Persistent,Ephemeral"),
                json!("30s")
            ]
        );
        let bare = json!({"metadata": {"name": "d"}, "spec": {}});
        assert_eq!(
            row_of::<CSIDriver>(bare)[1..7],
            [
                json!(true),
                json!(false),
                json!(false),
                json!("<unset>"),
                json!(false),
                json!("<none>")
            ]
        );

        let node = json!({"metadata": {"name": "n1"}, "spec": {"drivers": [{"name": "a", "nodeID": "n1"}, {"name": "b", "nodeID": "n1"}]}});
        assert_eq!(
            row_of::<CSINode>(node),
            vec![json!("n1"), json!(2), json!("<unknown>")]
        );

        let va = json!({"metadata": {"name": "csi-123"}, "spec": {"attacher": "a.csi.io", "nodeName": "n1",
            "source": {"persistentVolumeName": "pv1"}}, "status": {"attached": true}});
        assert_eq!(
            row_of::<VolumeAttachment>(va),
            vec![
                json!("csi-123"),
                json!("a.csi.io"),
                json!("pv1"),
                json!("n1"),
                json!(true),
                json!("<unknown>")
            ]
        );
        assert_eq!(columns::<VolumeAttachment>()[1].format, "name");

        let cap = json!({"metadata": {"name": "c", "namespace": "kube-system"}, "storageClassName": "standard", "capacity": "1024Mi"});
        assert_eq!(
            row_of::<CSIStorageCapacity>(cap),
            vec![json!("c"), json!("standard"), json!("1Gi")]
        );
        let unset = json!({"metadata": {"name": "c"}, "storageClassName": "standard"});
        assert_eq!(row_of::<CSIStorageCapacity>(unset)[2], "<unset>");
    }
}
