//! The pod `eviction` subresource (policy/v1 Eviction): a delete that respects the pod's
//! PodDisruptionBudget, which is how `kubectl drain` empties a node without taking an
//! application below what its owner said it needs. The budget's `disruptionsAllowed` is spent
//! in the budget's status (at the resourceVersion read, retried on conflict) before the pod is
//! deleted, and the pod is recorded in `disruptedPods` so that the disruption controller does
//! not count it as healthy while it goes away. Upstream's pkg/registry/core/pod/storage/
//! eviction.go.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::{Eviction, PodDisruptionBudget};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    Condition, DeleteOptions, Preconditions, StatusCause, StatusDetails,
};
use minik8s_api::selector::Selector;
use minik8s_api::strategy::BuiltIn;
use minik8s_api::{ApiError, Target, meta};

use super::codec;
use crate::registry::external::Operation;
use crate::registry::generic::{DeleteOpts, GenericRegistry, ListQuery, Part};

/// The cause type upstream gives a refused eviction (`policyv1.DisruptionBudgetCause`).
const DISRUPTION_BUDGET_CAUSE: &str = "DisruptionBudget";
/// Upstream's `MaxDisruptedPodSize`: evictions the controller has not confirmed yet.
const MAX_DISRUPTED_PODS: usize = 2000;
/// How often a budget whose status moved under us is read again (upstream's EvictionsRetry).
const CONFLICT_RETRIES: usize = 5;

pub type Budgets = Arc<GenericRegistry<BuiltIn<PodDisruptionBudget>>>;

/// Handles `POST pods/{name}/eviction`.
pub async fn evict(
    pods: &GenericRegistry<BuiltIn<Pod>>,
    budgets: &Budgets,
    ns: &str,
    name: &str,
    content_type: Option<&str>,
    body: &bytes::Bytes,
    dry_run: bool,
) -> Result<(), ApiError> {
    let value = codec::parse_body(content_type, body, "Eviction")?;
    let mut eviction: Eviction = codec::decode_object(value, "Eviction", "policy/v1", false)?;
    if eviction.metadata.name.as_deref() != Some(name) {
        return Err(ApiError::bad_request(
            "name in URL does not match name in Eviction object",
        ));
    }
    pods.admit_removal(Some(ns), name, Some("eviction")).await?;
    let kind = ["policy", "v1", "Eviction"];
    pods.admit_subresource(
        Operation::Create,
        Some(ns),
        name,
        "eviction",
        kind,
        &mut eviction,
        None,
        dry_run,
    )
    .await?;
    let options = eviction.delete_options.unwrap_or_default();
    let dry_run = dry_run || options.dry_run.as_ref().is_some_and(|d| !d.is_empty());
    let pod = pods.get(Some(ns), name).await?;
    // A pod that is finished, not started or already going has caused its disruption.
    if can_ignore_budget(&pod) {
        return delete(pods, ns, name, &options, None, dry_run).await;
    }
    let matching = budgets_of(budgets, &pod).await?;
    let budget = match matching.as_slice() {
        [] => return delete(pods, ns, name, &options, None, dry_run).await,
        [one] => one.clone(),
        _ => {
            return Err(ApiError::internal(
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            ));
        }
    };
    let ready = is_ready(&pod);
    let always_allow = budget
        .spec
        .as_ref()
        .and_then(|s| s.unhealthy_pod_eviction_policy.as_deref())
        == Some("AlwaysAllow");
    if !ready && always_allow {
        return delete(pods, ns, name, &options, Some(&pod), dry_run).await;
    }
    let budget_name = budget.metadata.name.clone().unwrap_or_default();
    let mut current = budget;
    for attempt in 0..=CONFLICT_RETRIES {
        if attempt > 0 {
            current = budgets.get(Some(ns), &budget_name).await?;
        }
        let status = current.status.clone().unwrap_or_default();
        if !ready {
            // An unready pod does not count as healthy: evicting it spends nothing, as long
            // as the budget is met without it.
            if status.current_healthy >= status.desired_healthy && status.desired_healthy > 0 {
                return delete(pods, ns, name, &options, Some(&pod), dry_run).await;
            }
            return Err(too_many_requests(&format!(
                "The disruption budget {budget_name} is still being processed by the server."
            )));
        }
        match spend(&mut current, name, dry_run)? {
            None => return delete(pods, ns, name, &options, None, dry_run).await,
            Some(updated) => {
                match budgets
                    .update(Some(ns), &budget_name, updated, Part::Status, false)
                    .await
                {
                    Ok(_) => return delete(pods, ns, name, &options, None, dry_run).await,
                    Err(e) if e.code == 409 => continue,
                    Err(e) => return Err(e),
                }
            }
        }
    }
    Err(ApiError::conflict(
        Target {
            group: "policy",
            resource: "poddisruptionbudgets",
            name: &budget_name,
        },
        "the budget kept changing while the eviction was recorded",
    ))
}

/// Upstream's `canIgnorePDB`.
fn can_ignore_budget(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    matches!(phase, Some("Succeeded" | "Failed" | "Pending"))
        || pod.metadata.deletion_timestamp.is_some()
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The budgets whose selector matches the pod; in policy/v1 an empty selector matches every
/// pod of the namespace and a missing one none.
async fn budgets_of(budgets: &Budgets, pod: &Pod) -> Result<Vec<PodDisruptionBudget>, ApiError> {
    let ns = pod.metadata.namespace.as_deref();
    let all = budgets.list(ns, &ListQuery::default()).await?;
    Ok(all
        .items
        .into_iter()
        .filter(|b| {
            let selector = b.spec.as_ref().and_then(|s| s.selector.as_ref());
            Selector::from_label_selector(selector)
                .is_ok_and(|s| !s.nothing && s.matches(pod.metadata.labels.as_ref()))
        })
        .collect())
}

/// Upstream's `checkAndDecrement`: the budget with one disruption spent and the pod recorded,
/// to be written; `None` on a dry run, which spends nothing.
fn spend(
    budget: &mut PodDisruptionBudget,
    pod: &str,
    dry_run: bool,
) -> Result<Option<PodDisruptionBudget>, ApiError> {
    let name = budget.metadata.name.clone().unwrap_or_default();
    let generation = budget.metadata.generation.unwrap_or(0);
    let status = budget.status.get_or_insert_with(Default::default);
    if status.observed_generation.unwrap_or(0) < generation {
        return Err(too_many_requests(&format!(
            "The disruption budget {name} is still being processed by the server."
        )));
    }
    let forbidden = |why: &str| {
        ApiError::forbidden(
            Target {
                group: "policy",
                resource: "poddisruptionbudget",
                name: &name,
            },
            why,
        )
    };
    if status.disruptions_allowed < 0 {
        return Err(forbidden("pdb disruptions allowed is negative"));
    }
    if status.disrupted_pods.as_ref().map_or(0, |d| d.len()) > MAX_DISRUPTED_PODS {
        return Err(forbidden(
            "DisruptedPods map too big - too many evictions not confirmed by PDB controller",
        ));
    }
    if status.disruptions_allowed == 0 {
        return Err(too_many_requests(&format!(
            "The disruption budget {name} needs {} healthy pods and has {} currently",
            status.desired_healthy, status.current_healthy
        )));
    }
    status.disruptions_allowed -= 1;
    if status.disruptions_allowed == 0 {
        insufficient_pods(status.conditions.get_or_insert_with(Vec::new), generation);
    }
    if dry_run {
        return Ok(None);
    }
    status
        .disrupted_pods
        .get_or_insert_with(Default::default)
        .insert(pod.to_string(), meta::now());
    Ok(Some(budget.clone()))
}

/// Upstream's `UpdateDisruptionAllowedCondition` once no disruption is left.
fn insufficient_pods(conditions: &mut Vec<Condition>, generation: i64) {
    let changed = conditions
        .iter()
        .find(|c| c.type_ == "DisruptionAllowed")
        .is_none_or(|c| c.status != "False" || c.reason != "InsufficientPods");
    if !changed {
        return;
    }
    conditions.retain(|c| c.type_ != "DisruptionAllowed");
    conditions.push(Condition {
        type_: "DisruptionAllowed".into(),
        status: "False".into(),
        reason: "InsufficientPods".into(),
        message: String::new(),
        observed_generation: Some(generation),
        last_transition_time: meta::now(),
    });
}

fn too_many_requests(cause: &str) -> ApiError {
    ApiError {
        code: 429,
        reason: "TooManyRequests",
        message: "Cannot evict pod as it would violate the pod's disruption budget.".into(),
        details: Some(Box::new(StatusDetails {
            causes: Some(vec![StatusCause {
                reason: Some(DISRUPTION_BUDGET_CAUSE.into()),
                message: Some(cause.into()),
                field: None,
            }]),
            retry_after_seconds: Some(0),
            ..Default::default()
        })),
    }
}

/// Deletes the pod with the eviction's options. An unready pod let go because it does not
/// count against its budget goes only as it was checked (its uid and resourceVersion): not
/// if it has become ready since.
async fn delete(
    pods: &GenericRegistry<BuiltIn<Pod>>,
    ns: &str,
    name: &str,
    options: &DeleteOptions,
    checked: Option<&Pod>,
    dry_run: bool,
) -> Result<(), ApiError> {
    let preconditions = match (checked, &options.preconditions) {
        (_, Some(p)) => Some(p.clone()),
        (Some(pod), None) => Some(Preconditions {
            uid: pod.metadata.uid.clone(),
            resource_version: pod.metadata.resource_version.clone(),
        }),
        (None, None) => None,
    };
    let opts = DeleteOpts {
        grace_period_seconds: options.grace_period_seconds,
        propagation_policy: options.propagation_policy.clone(),
        preconditions,
        dry_run,
    };
    pods.delete(Some(ns), name, &opts).await.map(|_| ())
}
