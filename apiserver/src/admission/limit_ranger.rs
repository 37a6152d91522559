//! Upstream's LimitRanger admission plugin (plugin/pkg/admission/limitranger): a namespace's
//! LimitRanges default what new pods leave unset and refuse pods and claims outside their
//! bounds. Defaults are applied while mutating and bounds checked in the final, validating
//! pass, so a later mutating plugin cannot slip a pod past them. Pod updates are not checked, as
//! upstream: a pod's resources cannot change after it is created; a claim's can (it grows),
//! so claims are bounded on updates too.

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{LimitRange, PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use minik8s_api::kinds::limit_range;
use minik8s_api::strategy::BuiltIn;
use minik8s_api::{ApiError, Target};

use crate::registry::generic::{
    CreateAdmission, GenericRegistry, ListQuery, Phase, UpdateAdmission,
};

pub const PLUGIN_NAME: &str = "LimitRanger";

pub struct LimitRanger {
    ranges: Arc<GenericRegistry<BuiltIn<LimitRange>>>,
    phase: Phase,
}

impl LimitRanger {
    /// The plugin's two halves: defaults (`Phase::Mutate`) and bounds (`Phase::Final`).
    pub fn new(ranges: Arc<GenericRegistry<BuiltIn<LimitRange>>>, phase: Phase) -> Self {
        LimitRanger { ranges, phase }
    }

    async fn ranges(&self, meta: &ObjectMeta) -> Result<Vec<LimitRange>, ApiError> {
        let ns = meta.namespace.as_deref().unwrap_or("default");
        Ok(self
            .ranges
            .list(Some(ns), &ListQuery::default())
            .await?
            .items)
    }
}

/// Upstream's `admission.NewForbidden` over the errors of one range, aggregated as Go's
/// `utilerrors.NewAggregate` prints them.
fn forbidden(resource: &'static str, meta: &ObjectMeta, errs: &[String]) -> ApiError {
    let mut seen: Vec<&str> = Vec::new();
    for e in errs {
        if !seen.contains(&e.as_str()) {
            seen.push(e);
        }
    }
    let why = match seen.as_slice() {
        [one] => one.to_string(),
        many => format!("[{}]", many.join(", ")),
    };
    ApiError::forbidden(
        Target {
            group: "",
            resource,
            name: super::name_in_errors(meta),
        },
        &why,
    )
}

#[async_trait]
impl CreateAdmission<Pod> for LimitRanger {
    fn phase(&self) -> Phase {
        self.phase
    }

    async fn admit(&self, pod: &mut Pod, _dry_run: bool) -> Result<(), ApiError> {
        for range in self.ranges(&pod.metadata).await? {
            match self.phase {
                Phase::Mutate => limit_range::default_pod(&range, pod),
                Phase::Final | Phase::Validate => {
                    let errs = limit_range::pod_violations(&range, pod);
                    if !errs.is_empty() {
                        return Err(forbidden("pods", &pod.metadata, &errs));
                    }
                }
            }
        }
        Ok(())
    }
}

#[async_trait]
impl CreateAdmission<PersistentVolumeClaim> for LimitRanger {
    fn phase(&self) -> Phase {
        Phase::Final
    }

    async fn admit(
        &self,
        claim: &mut PersistentVolumeClaim,
        _dry_run: bool,
    ) -> Result<(), ApiError> {
        self.bound_claim(claim).await
    }
}

#[async_trait]
impl UpdateAdmission<PersistentVolumeClaim> for LimitRanger {
    async fn admit_update(
        &self,
        claim: &mut PersistentVolumeClaim,
        _old: &PersistentVolumeClaim,
        _dry_run: bool,
    ) -> Result<(), ApiError> {
        self.bound_claim(claim).await
    }
}

impl LimitRanger {
    async fn bound_claim(&self, claim: &PersistentVolumeClaim) -> Result<(), ApiError> {
        for range in self.ranges(&claim.metadata).await? {
            let errs = limit_range::claim_violations(&range, claim);
            if !errs.is_empty() {
                return Err(forbidden("persistentvolumeclaims", &claim.metadata, &errs));
            }
        }
        Ok(())
    }
}
