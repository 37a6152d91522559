//! Upstream's PersistentVolumeClaimResize admission plugin
//! (plugin/pkg/admission/storage/persistentvolume/resize): a claim may grow only once it is
//! bound, and only when its class allows expansion; otherwise the request for more storage
//! would sit unfulfilled with nothing to tell the user why. Shrinking is refused by
//! validation; other updates pass.

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;
use minik8s_api::strategy::BuiltIn;
use minik8s_api::volume;
use minik8s_api::{ApiError, Target};

use crate::registry::generic::{GenericRegistry, UpdateAdmission};

pub const PLUGIN_NAME: &str = "PersistentVolumeClaimResize";

pub struct ClaimResize {
    classes: Arc<GenericRegistry<BuiltIn<StorageClass>>>,
}

impl ClaimResize {
    pub fn new(classes: Arc<GenericRegistry<BuiltIn<StorageClass>>>) -> Self {
        ClaimResize { classes }
    }

    /// Whether both versions of the claim name the same class and it allows expansion.
    async fn allowed(&self, new: &PersistentVolumeClaim, old: &PersistentVolumeClaim) -> bool {
        let (class, old_class) = (volume::claim_class(new), volume::claim_class(old));
        if class.is_empty() || class != old_class {
            return false;
        }
        match self.classes.get(None, class).await {
            Ok(c) => c.allow_volume_expansion == Some(true),
            Err(_) => false,
        }
    }
}

#[async_trait]
impl UpdateAdmission<PersistentVolumeClaim> for ClaimResize {
    async fn admit_update(
        &self,
        new: &mut PersistentVolumeClaim,
        old: &PersistentVolumeClaim,
        _dry_run: bool,
    ) -> Result<(), ApiError> {
        let grows = match (volume::claim_request(new), volume::claim_request(old)) {
            (Some(n), Some(o)) => volume::cmp_size(&n, &o).is_gt(),
            (Some(n), None) => n.is_positive(),
            _ => false,
        };
        if !grows {
            return Ok(());
        }
        let forbidden = |why: &str| {
            ApiError::forbidden(
                Target {
                    group: "",
                    resource: "persistentvolumeclaims",
                    name: new.metadata.name.as_deref().unwrap_or_default(),
                },
                why,
            )
        };
        let phase = old.status.as_ref().and_then(|s| s.phase.as_deref());
        if phase != Some("Bound") {
            return Err(forbidden(
                "Only bound persistent volume claims can be expanded",
            ));
        }
        if !self.allowed(new, old).await {
            return Err(forbidden(
                "only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize",
            ));
        }
        Ok(())
    }
}
