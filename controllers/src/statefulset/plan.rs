//! What one sync of a StatefulSet does, decided without I/O (upstream's `updateStatefulSet` in
//! stateful_set_control.go): the steps to take, in order, and the status they lead to. The
//! applier in `mod.rs` takes the steps one by one and stops at the first failure.
//!
//! Under OrderedReady ("monotonic") a sync takes at most one step that changes which pods
//! exist: it creates the lowest missing ordinal only once every lower one is Running, Ready
//! and available, deletes the highest condemned ordinal only once every kept pod is, and stops
//! at the first pod that is not. Parallel creates and deletes all at once. A rolling update
//! then deletes the highest ordinal not at the update revision (down to `partition`), one at a
//! time waiting for it to come back available, or up to `maxUnavailable` at a time when that
//! is set (upstream's MaxUnavailableStatefulSet); the next sync recreates it from the update
//! revision.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetStatus};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use super::claims::{Claims, claims_match_policy, claims_missing, pod_claim_is_stale};
use super::identity::{
    identity_matches, in_ordinal_range, is_created, is_failed, is_healthy, is_pending,
    is_running_and_available, is_running_and_ready, is_succeeded, is_terminating, is_unavailable,
    new_pod, ordinal, replicas, revision_of, set_revision, start_ordinal, storage_matches,
};

/// What a sync reads.
pub struct Input<'a> {
    pub set: &'a StatefulSet,
    /// The set with the current revision's template.
    pub current_set: &'a StatefulSet,
    /// The set with the update revision's template.
    pub update_set: &'a StatefulSet,
    pub current_revision: &'a str,
    pub update_revision: &'a str,
    pub collision_count: i32,
    /// The set's pods (claimed).
    pub pods: &'a [Arc<Pod>],
    /// The claims of the set's namespace.
    pub claims: &'a Claims,
    pub now: Timestamp,
}

/// One action on the cluster.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// A pod whose containers finished (Failed or Succeeded), deleted so that a later sync
    /// makes it again.
    DeleteFinished(Arc<Pod>),
    /// The pod's missing claims, then the pod, then the claims' references for the policy.
    Create(Box<Pod>),
    /// The missing claims of a pending pod.
    CreateMissingClaims(Arc<Pod>),
    /// The pod's identity, storage or claim references brought back in line.
    Update(Arc<Pod>),
    /// The claim references of a condemned pod, before it goes.
    FixClaims(Arc<Pod>),
    /// A pod past the end of the ordinal range.
    ScaleDown(Arc<Pod>),
    /// A pod at an old revision, deleted to be made again at the update revision.
    RollingDelete(Arc<Pod>),
}

impl Step {
    /// The pod the step is about.
    pub fn pod_name(&self) -> String {
        match self {
            Step::Create(p) => p.name_any(),
            Step::DeleteFinished(p)
            | Step::CreateMissingClaims(p)
            | Step::Update(p)
            | Step::FixClaims(p)
            | Step::ScaleDown(p)
            | Step::RollingDelete(p) => p.name_any(),
        }
    }
}

#[derive(Debug, Default)]
pub struct Plan {
    pub steps: Vec<Step>,
    pub status: StatefulSetStatus,
}

/// OrderedReady: one pod at a time, in order.
pub fn monotonic(set: &StatefulSet) -> bool {
    set.spec
        .as_ref()
        .and_then(|s| s.pod_management_policy.as_deref())
        != Some("Parallel")
}

fn min_ready_seconds(set: &StatefulSet) -> i32 {
    set.spec
        .as_ref()
        .and_then(|s| s.min_ready_seconds)
        .unwrap_or(0)
}

/// A new pod for `ordinal` at the revision it belongs to (upstream's
/// `newVersionedStatefulSetPod`): below the partition (or, without rolling update settings,
/// among the current replicas) the current revision, else the update revision.
pub fn new_versioned_pod(
    current_set: &StatefulSet,
    update_set: &StatefulSet,
    current_revision: &str,
    update_revision: &str,
    ordinal: i32,
) -> Pod {
    let strategy = current_set
        .spec
        .as_ref()
        .and_then(|s| s.update_strategy.clone())
        .unwrap_or_default();
    let rolling = strategy.type_.as_deref().unwrap_or("RollingUpdate") == "RollingUpdate";
    let start = start_ordinal(current_set);
    let current_replicas = current_set
        .status
        .as_ref()
        .and_then(|s| s.current_replicas)
        .unwrap_or(0);
    // Upstream's condition as written: `rolling && no-settings && below current || settings && below partition`.
    let at_current =
        (rolling && strategy.rolling_update.is_none() && ordinal < start + current_replicas)
            || strategy
                .rolling_update
                .as_ref()
                .is_some_and(|ru| ordinal < start + ru.partition.unwrap_or(0));
    let (set, revision) = if at_current {
        (current_set, current_revision)
    } else {
        (update_set, update_revision)
    };
    let mut pod = new_pod(set, ordinal);
    set_revision(&mut pod, revision);
    pod
}

/// The counts of upstream's `computeReplicaStatus` over `pods`, added to `status`.
fn count(status: &mut StatefulSetStatus, pods: &[Arc<Pod>], input: &Input<'_>) {
    let min_ready = min_ready_seconds(input.set);
    for pod in pods {
        if is_created(pod) {
            status.replicas += 1;
        }
        if is_running_and_ready(pod) {
            *status.ready_replicas.get_or_insert(0) += 1;
            if is_running_and_available(pod, min_ready, input.now) {
                *status.available_replicas.get_or_insert(0) += 1;
            }
        }
        if is_created(pod) && !is_terminating(pod) {
            if revision_of(pod) == input.current_revision {
                *status.current_replicas.get_or_insert(0) += 1;
            }
            if revision_of(pod) == input.update_revision {
                *status.updated_replicas.get_or_insert(0) += 1;
            }
        }
    }
}

/// Decides one sync.
pub fn plan(input: &Input<'_>) -> Plan {
    let set = input.set;
    let monotonic = monotonic(set);
    let min_ready = min_ready_seconds(set);
    let now = input.now;
    let start = start_ordinal(set);
    let count_wanted = replicas(set).max(0) as usize;

    // The pods in the ordinal range by index, and the condemned ones past it.
    let mut slots: Vec<Option<Arc<Pod>>> = vec![None; count_wanted];
    let mut condemned: Vec<Arc<Pod>> = Vec::new();
    for pod in input.pods {
        let o = ordinal(pod);
        if in_ordinal_range(pod, set) {
            slots[(o - start) as usize] = Some(pod.clone());
        } else if o >= 0 {
            condemned.push(pod.clone());
        }
    }
    let replicas: Vec<Arc<Pod>> = slots
        .into_iter()
        .enumerate()
        .map(|(i, slot)| {
            slot.unwrap_or_else(|| {
                Arc::new(new_versioned_pod(
                    input.current_set,
                    input.update_set,
                    input.current_revision,
                    input.update_revision,
                    start + i as i32,
                ))
            })
        })
        .collect();
    condemned.sort_by_key(|p| std::cmp::Reverse(ordinal(p)));
    // The unhealthy pod of lowest ordinal: the only unhealthy one a scale down may remove.
    let first_unhealthy = replicas
        .iter()
        .chain(condemned.iter().rev())
        .find(|p| !is_healthy(p))
        .map(|p| p.name_any());

    let mut plan = Plan {
        status: StatefulSetStatus {
            observed_generation: set.metadata.generation,
            current_revision: Some(input.current_revision.to_string()),
            update_revision: Some(input.update_revision.to_string()),
            collision_count: Some(input.collision_count),
            // Written even when 0, as upstream's field has no omitempty.
            available_replicas: Some(0),
            ..Default::default()
        },
        ..Default::default()
    };
    let finish = |mut plan: Plan, replicas: &[Arc<Pod>], condemned: &[Arc<Pod>]| {
        count(&mut plan.status, replicas, input);
        count(&mut plan.status, condemned, input);
        plan
    };
    if set.metadata.deletion_timestamp.is_some() {
        return finish(plan, &replicas, &condemned);
    }

    // Each replica in ordinal order.
    for pod in &replicas {
        if process_replica(input, pod, monotonic, &mut plan.steps) && monotonic {
            return finish(plan, &replicas, &condemned);
        }
    }
    // The claims of condemned pods get the references the policy wants before they go.
    for pod in &condemned {
        if !claims_match_policy(input.update_set, pod, input.claims) {
            plan.steps.push(Step::FixClaims(pod.clone()));
        }
    }
    // Scale down from the highest ordinal.
    for pod in &condemned {
        if is_terminating(pod) {
            if monotonic {
                return finish(plan, &replicas, &condemned);
            }
            continue;
        }
        let is_first_unhealthy = first_unhealthy.as_deref() == Some(pod.name_any().as_str());
        if monotonic
            && !is_first_unhealthy
            && (!is_running_and_ready(pod) || !is_running_and_available(pod, min_ready, now))
        {
            return finish(plan, &replicas, &condemned);
        }
        plan.steps.push(Step::ScaleDown(pod.clone()));
        if monotonic {
            return finish(plan, &replicas, &condemned);
        }
    }
    let mut plan = finish(plan, &replicas, &condemned);

    let strategy = set
        .spec
        .as_ref()
        .and_then(|s| s.update_strategy.clone())
        .unwrap_or_default();
    if strategy.type_.as_deref() == Some("OnDelete") {
        return plan;
    }
    let rolling = strategy.rolling_update.unwrap_or_default();
    let update_min = rolling.partition.unwrap_or(0).max(0) as usize;
    let deletes = match &rolling.max_unavailable {
        Some(max) => rolling_deletes_max_unavailable(input, &replicas, update_min, max),
        None => rolling_deletes(input, &replicas, update_min),
    };
    for pod in deletes {
        plan.steps.push(Step::RollingDelete(pod));
        if let Some(c) = plan.status.current_replicas.as_mut() {
            *c -= 1;
        }
    }
    plan
}

/// Upstream's `processReplica`; true when the sync must stop here (under OrderedReady).
fn process_replica(
    input: &Input<'_>,
    pod: &Arc<Pod>,
    monotonic: bool,
    steps: &mut Vec<Step>,
) -> bool {
    let min_ready = min_ready_seconds(input.set);
    if is_failed(pod) || is_succeeded(pod) {
        if !is_terminating(pod) {
            steps.push(Step::DeleteFinished(pod.clone()));
        }
        // Made again on a later sync, once the old pod is gone from the store.
        return true;
    }
    if !is_created(pod) {
        if pod_claim_is_stale(input.set, pod, input.claims) {
            return true;
        }
        steps.push(Step::Create(Box::new((**pod).clone())));
        return monotonic;
    }
    if is_pending(pod) && claims_missing(input.set, pod, input.claims) {
        steps.push(Step::CreateMissingClaims(pod.clone()));
    }
    if monotonic
        && (is_terminating(pod)
            || !is_running_and_ready(pod)
            || !is_running_and_available(pod, min_ready, input.now))
    {
        return true;
    }
    let consistent = identity_matches(input.set, pod)
        && storage_matches(input.set, pod)
        && claims_match_policy(input.update_set, pod, input.claims);
    if !consistent {
        steps.push(Step::Update(pod.clone()));
    }
    false
}

/// One pod at a time, highest ordinal first, each waiting for the one before to be available.
fn rolling_deletes(input: &Input<'_>, replicas: &[Arc<Pod>], update_min: usize) -> Vec<Arc<Pod>> {
    let min_ready = min_ready_seconds(input.set);
    for pod in replicas.iter().skip(update_min).rev() {
        if revision_of(pod) != input.update_revision && !is_terminating(pod) {
            return vec![pod.clone()];
        }
        if is_unavailable(pod, min_ready, input.now) {
            break;
        }
    }
    Vec::new()
}

/// Up to `maxUnavailable` pods unavailable at once, highest ordinals first (upstream's
/// `updateStatefulSetAfterInvariantEstablished`).
fn rolling_deletes_max_unavailable(
    input: &Input<'_>,
    replicas: &[Arc<Pod>],
    update_min: usize,
    max: &IntOrString,
) -> Vec<Arc<Pod>> {
    let min_ready = min_ready_seconds(input.set);
    let max = max_unavailable(max, replicas.len() as i32);
    let unavailable = replicas
        .iter()
        .filter(|p| is_unavailable(p, min_ready, input.now))
        .count() as i32;
    if unavailable >= max {
        return Vec::new();
    }
    replicas
        .iter()
        .skip(update_min)
        .rev()
        .filter(|p| revision_of(p) != input.update_revision && !is_terminating(p))
        .take((max - unavailable) as usize)
        .cloned()
        .collect()
}

/// `maxUnavailable` against `replicas`, percentages rounded up, at least 1 (upstream's
/// `getStatefulSetMaxUnavailable`).
pub fn max_unavailable(v: &IntOrString, replicas: i32) -> i32 {
    let n = match v {
        IntOrString::Int(n) => *n,
        IntOrString::String(s) => {
            let pct: i64 = s.trim_end_matches('%').parse().unwrap_or(0);
            ((pct * i64::from(replicas) + 99) / 100) as i32
        }
    };
    n.max(1)
}

#[cfg(test)]
mod tests;
