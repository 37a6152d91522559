//! Upstream's StorageObjectInUseProtection admission plugin
//! (plugin/pkg/admission/storage/storageobjectinuseprotection): every new claim carries the
//! `kubernetes.io/pvc-protection` finalizer and every new volume `kubernetes.io/pv-protection`,
//! so deleting one that a pod still uses (or that is still bound) only marks it; the
//! protection controllers remove the finalizer once nothing needs the object.

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use minik8s_api::ApiError;
use minik8s_api::volume::{PV_PROTECTION_FINALIZER, PVC_PROTECTION_FINALIZER};

use crate::registry::generic::CreateAdmission;

pub const PLUGIN_NAME: &str = "StorageObjectInUseProtection";

pub struct StorageProtection;

fn protect(meta: &mut ObjectMeta, finalizer: &str) {
    let finalizers = meta.finalizers.get_or_insert_with(Vec::new);
    if !finalizers.iter().any(|f| f == finalizer) {
        finalizers.push(finalizer.to_string());
    }
}

#[async_trait]
impl CreateAdmission<PersistentVolumeClaim> for StorageProtection {
    async fn admit(
        &self,
        claim: &mut PersistentVolumeClaim,
        _dry_run: bool,
    ) -> Result<(), ApiError> {
        protect(&mut claim.metadata, PVC_PROTECTION_FINALIZER);
        Ok(())
    }
}

#[async_trait]
impl CreateAdmission<PersistentVolume> for StorageProtection {
    async fn admit(&self, volume: &mut PersistentVolume, _dry_run: bool) -> Result<(), ApiError> {
        protect(&mut volume.metadata, PV_PROTECTION_FINALIZER);
        Ok(())
    }
}
