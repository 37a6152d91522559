//! Upstream's Priority admission plugin (plugin/pkg/admission/priority): a pod's priority is
//! its PriorityClass's value, never one the pod states itself, so the scheduler's ordering
//! and preemption cannot be claimed by writing a number. Pods without a class get the
//! cluster's default class, or 0 when there is none. PriorityClasses themselves: at most one
//! may be the global default.

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use minik8s_api::strategy::BuiltIn;
use minik8s_api::{ApiError, Target};

use crate::registry::generic::{CreateAdmission, GenericRegistry, ListQuery, Phase};

pub const PLUGIN_NAME: &str = "Priority";
/// The priority of pods when no class is the global default
/// (`scheduling.DefaultPriorityWhenNoDefaultClassExists`).
const DEFAULT_PRIORITY: i32 = 0;
const PREEMPT_LOWER_PRIORITY: &str = "PreemptLowerPriority";

pub struct PriorityAdmission {
    classes: Arc<GenericRegistry<BuiltIn<PriorityClass>>>,
}

impl PriorityAdmission {
    pub fn new(classes: Arc<GenericRegistry<BuiltIn<PriorityClass>>>) -> Self {
        PriorityAdmission { classes }
    }

    /// The global default class: of several, the one with the lowest value, as upstream.
    async fn default_class(&self) -> Result<Option<PriorityClass>, ApiError> {
        let all = self.classes.list(None, &ListQuery::default()).await?;
        Ok(all
            .items
            .into_iter()
            .filter(|c| c.global_default == Some(true))
            .min_by_key(|c| c.value))
    }
}

#[async_trait]
impl CreateAdmission<Pod> for PriorityAdmission {
    async fn admit(&self, pod: &mut Pod, _dry_run: bool) -> Result<(), ApiError> {
        let name = super::name_in_errors(&pod.metadata).to_string();
        let forbidden = |why: String| {
            ApiError::forbidden(
                Target {
                    group: "",
                    resource: "pods",
                    name: &name,
                },
                &why,
            )
        };
        let spec = pod.spec.get_or_insert_with(Default::default);
        let class_name = spec.priority_class_name.clone().unwrap_or_default();
        let class = match class_name.as_str() {
            "" => self.default_class().await?,
            wanted => match self.classes.get(None, wanted).await {
                Ok(class) => Some(class),
                Err(e) if e.code == 404 => {
                    return Err(forbidden(format!(
                        "no PriorityClass with name {wanted} was found"
                    )));
                }
                Err(e) => return Err(e),
            },
        };
        let (priority, policy) = match &class {
            Some(c) => (
                c.value,
                c.preemption_policy
                    .clone()
                    .unwrap_or_else(|| PREEMPT_LOWER_PRIORITY.to_string()),
            ),
            None => (DEFAULT_PRIORITY, PREEMPT_LOWER_PRIORITY.to_string()),
        };
        if let Some(c) = &class {
            spec.priority_class_name = c.metadata.name.clone();
        }
        if let Some(given) = spec.priority
            && given != priority
        {
            return Err(forbidden(format!(
                "the integer value of priority ({given}) must not be provided in pod spec; priority admission controller computed {priority} from the given PriorityClass name"
            )));
        }
        spec.priority = Some(priority);
        if let Some(given) = spec.preemption_policy.as_deref()
            && given != policy
        {
            return Err(forbidden(format!(
                "the string value of PreemptionPolicy ({given}) must not be provided in pod spec; priority admission controller computed {policy} from the given PriorityClass name"
            )));
        }
        spec.preemption_policy = Some(policy);
        Ok(())
    }
}

/// Only one PriorityClass may be the global default.
pub struct OneGlobalDefault {
    classes: Arc<GenericRegistry<BuiltIn<PriorityClass>>>,
}

impl OneGlobalDefault {
    pub fn new(classes: Arc<GenericRegistry<BuiltIn<PriorityClass>>>) -> Self {
        OneGlobalDefault { classes }
    }
}

#[async_trait]
impl CreateAdmission<PriorityClass> for OneGlobalDefault {
    fn phase(&self) -> Phase {
        Phase::Validate
    }

    async fn admit(&self, class: &mut PriorityClass, _dry_run: bool) -> Result<(), ApiError> {
        if class.global_default != Some(true) {
            return Ok(());
        }
        let all = self.classes.list(None, &ListQuery::default()).await?;
        match all.items.iter().find(|c| c.global_default == Some(true)) {
            Some(existing) => Err(ApiError::forbidden(
                Target {
                    group: "scheduling.k8s.io",
                    resource: "priorityclasses",
                    name: class.metadata.name.as_deref().unwrap_or_default(),
                },
                &format!(
                    "PriorityClass {} is already marked as default. Only one default can exist",
                    existing.metadata.name.as_deref().unwrap_or_default()
                ),
            )),
            None => Ok(()),
        }
    }
}
