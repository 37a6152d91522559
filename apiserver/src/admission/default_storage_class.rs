//! Upstream's DefaultStorageClass admission plugin
//! (plugin/pkg/admission/storage/storageclass/setdefault): a new claim that names no class
//! gets the cluster's default one, so `kubectl apply` of a bare claim is provisioned. Claims
//! that ask for `storageClassName: ""` (no class: static volumes only) are left alone. Of
//! several defaults the newest is taken, as upstream since 1.28.

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;
use minik8s_api::ApiError;
use minik8s_api::strategy::BuiltIn;
use minik8s_api::volume;

use crate::registry::generic::{CreateAdmission, GenericRegistry, ListQuery};

pub const PLUGIN_NAME: &str = "DefaultStorageClass";

pub struct DefaultStorageClass {
    classes: Arc<GenericRegistry<BuiltIn<StorageClass>>>,
}

impl DefaultStorageClass {
    pub fn new(classes: Arc<GenericRegistry<BuiltIn<StorageClass>>>) -> Self {
        DefaultStorageClass { classes }
    }
}

#[async_trait]
impl CreateAdmission<PersistentVolumeClaim> for DefaultStorageClass {
    async fn admit(
        &self,
        claim: &mut PersistentVolumeClaim,
        _dry_run: bool,
    ) -> Result<(), ApiError> {
        if volume::claim_has_class(claim) {
            return Ok(());
        }
        let classes = self.classes.list(None, &ListQuery::default()).await?;
        let Some(default) = volume::default_class(&classes.items) else {
            return Ok(());
        };
        tracing::debug!(class = ?default.metadata.name, "defaulting the claim's storage class");
        claim
            .spec
            .get_or_insert_with(Default::default)
            .storage_class_name = default.metadata.name.clone();
        Ok(())
    }
}
