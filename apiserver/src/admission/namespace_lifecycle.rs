//! Upstream's NamespaceLifecycle admission: nothing is created in a namespace that does not
//! exist or is being deleted. The namespace cache answers without a storage read; what it has
//! not seen yet (a namespace created a moment ago) is read from the store.

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::StatusCause;
use minik8s_api::strategy::Strategy;
use minik8s_api::{ApiError, Target};

use crate::registry::generic::{CreateAdmission, Phase};
use crate::registry::namespaces::NamespaceCache;
use crate::storage::DynStore;

pub const PLUGIN_NAME: &str = "NamespaceLifecycle";

/// The plugin for one namespaced resource.
pub struct NamespaceLifecycle<S> {
    strategy: Arc<S>,
    store: DynStore,
    cache: Arc<NamespaceCache>,
}

impl<S> NamespaceLifecycle<S> {
    pub fn new(strategy: Arc<S>, store: DynStore, cache: Arc<NamespaceCache>) -> Self {
        NamespaceLifecycle {
            strategy,
            store,
            cache,
        }
    }
}

#[async_trait]
impl<S: Strategy> CreateAdmission<S::Object> for NamespaceLifecycle<S> {
    fn phase(&self) -> Phase {
        Phase::Validate
    }

    async fn admit(&self, obj: &mut S::Object, _dry_run: bool) -> Result<(), ApiError> {
        let meta = self.strategy.meta(obj);
        let ns = meta.namespace.clone().unwrap_or_default();
        let name = meta.name.clone().unwrap_or_default();
        if let Some(false) = self.cache.get(&ns) {
            return Ok(());
        }
        let kv = self
            .store
            .get(&format!("/registry/namespaces/{ns}"))
            .await
            .map_err(ApiError::internal)?;
        let Some(kv) = kv else {
            return Err(ApiError::not_found(Target {
                group: "",
                resource: "namespaces",
                name: &ns,
            }));
        };
        let namespace: Namespace = serde_json::from_slice(&kv.value).map_err(ApiError::internal)?;
        let terminating = namespace.metadata.deletion_timestamp.is_some()
            || namespace.status.and_then(|s| s.phase).as_deref() == Some("Terminating");
        if !terminating {
            return Ok(());
        }
        let info = self.strategy.info();
        let mut e = ApiError::forbidden(
            Target {
                group: &info.group,
                resource: &info.plural,
                name: &name,
            },
            &format!(
                "unable to create new content in namespace {ns} because it is being terminated"
            ),
        );
        if let Some(d) = e.details.as_mut() {
            d.causes = Some(vec![StatusCause {
                reason: Some("NamespaceTerminating".into()),
                message: Some(format!("namespace {ns} is being terminated")),
                field: Some("metadata.namespace".into()),
            }]);
        }
        Err(e)
    }
}
