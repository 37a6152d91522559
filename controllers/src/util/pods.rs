//! Pod predicates and construction shared by the workload controllers, with upstream's
//! definitions (pkg/api/v1/pod and pkg/controller): what counts as active, ready and available
//! decides replica counts, so every controller must agree on it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, PodCondition, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;

pub fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// Patches the status of this very pod (a strategic merge patch, its UID as precondition);
/// `Ok(false)` when the pod is gone or another pod has its name now.
pub async fn patch_own_status(
    client: &kube::Client,
    pod: &Pod,
    status: serde_json::Value,
) -> Result<bool, kube::Error> {
    use kube::ResourceExt;
    use kube::api::{Api, Patch, PatchParams};
    let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace().unwrap_or_default());
    let patch = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"uid": pod.uid()},
        "status": status,
    });
    match api
        .patch_status(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Strategic(&patch),
        )
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Upstream's addConditionAndDeletePod: `condition` (a DisruptionTarget) says why, then the
/// pod is deleted gracefully; the UID precondition spares a new pod of the same name, and a
/// pod already gone is not an error.
pub async fn add_condition_and_delete(
    client: &kube::Client,
    pod: &Pod,
    condition: PodCondition,
) -> Result<(), kube::Error> {
    // A strategic merge patch merges the condition by type into the others.
    let status = serde_json::json!({"conditions": [condition]});
    if !patch_own_status(client, pod, status).await? {
        return Ok(());
    }
    delete_exactly(client, pod, None).await
}

/// Deletes this very pod (the UID precondition spares a new pod of the same name), with
/// `grace_period_seconds` or the pod's own; a pod already gone is no error.
pub async fn delete_exactly(
    client: &kube::Client,
    pod: &Pod,
    grace_period_seconds: Option<u32>,
) -> Result<(), kube::Error> {
    use kube::ResourceExt;
    use kube::api::{Api, DeleteParams, Preconditions};
    let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace().unwrap_or_default());
    let params = DeleteParams {
        grace_period_seconds,
        preconditions: Some(Preconditions {
            uid: pod.uid(),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(&pod.name_any(), &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Not finished and not being deleted (upstream's `IsPodActive`).
pub fn is_active(pod: &Pod) -> bool {
    let p = phase(pod);
    p != "Succeeded" && p != "Failed" && pod.metadata.deletion_timestamp.is_none()
}

pub fn is_terminal(pod: &Pod) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed")
}

/// The pod's Ready condition, if it has one.
pub fn ready_condition(pod: &Pod) -> Option<&k8s_openapi::api::core::v1::PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
}

pub fn is_ready(pod: &Pod) -> bool {
    ready_condition(pod).is_some_and(|c| c.status == "True")
}

/// Ready for at least `min_ready_seconds` at `now` (upstream's `IsPodAvailable`).
pub fn is_available(pod: &Pod, min_ready_seconds: i32, now: Timestamp) -> bool {
    let Some(c) = ready_condition(pod).filter(|c| c.status == "True") else {
        return false;
    };
    if min_ready_seconds <= 0 {
        return true;
    }
    match &c.last_transition_time {
        Some(t) => {
            let ready_for = now.duration_since(t.0);
            ready_for.as_secs() >= i64::from(min_ready_seconds)
        }
        None => false,
    }
}

/// A pod for a controller from its template (upstream's `GetPodFromTemplate`): name generated
/// from `<prefix>-`, the template's labels, annotations and finalizers, and the controller
/// reference.
pub fn pod_from_template(
    template: &PodTemplateSpec,
    namespace: &str,
    generate_name_prefix: &str,
    controller_ref: OwnerReference,
) -> Pod {
    let meta = template.metadata.clone().unwrap_or_default();
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("{generate_name_prefix}-")),
            namespace: Some(namespace.to_string()),
            labels: meta.labels.clone().or_else(|| Some(BTreeMap::new())),
            annotations: meta.annotations.clone(),
            finalizers: meta.finalizers.clone(),
            owner_references: Some(vec![controller_ref]),
            ..Default::default()
        },
        spec: template.spec.clone(),
        status: None,
    }
}

/// Pods being deleted whose phase is not terminal yet (upstream's `CountTerminatingPods`).
pub fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some() && !is_terminal(pod)
}

fn phase_ordinal(pod: &Pod) -> u8 {
    match phase(pod) {
        "Pending" => 0,
        "Unknown" => 1,
        "Running" => 2,
        _ => 0,
    }
}

fn max_restarts(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.iter().map(|c| c.restart_count).max())
        .unwrap_or(0)
}

/// `Less` for "later time first, missing time before any": upstream's `afterOrZero`.
fn after_or_zero(a: Option<Timestamp>, b: Option<Timestamp>) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    match (a, b) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (Some(a), Some(b)) => b.cmp(&a),
    }
}

/// The order in which controllers delete surplus active pods, first the least valuable
/// (upstream's `controller.ActivePods`): unscheduled before scheduled, Pending before Unknown
/// before Running, not ready before ready, ready for less time before more, more restarts
/// before fewer, newer before older.
pub fn deletion_order(a: &Pod, b: &Pod) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    let node = |p: &Pod| {
        p.spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default()
    };
    let (na, nb) = (node(a), node(b));
    if na != nb && (na.is_empty() || nb.is_empty()) {
        return if na.is_empty() {
            Ordering::Less
        } else {
            Ordering::Greater
        };
    }
    let by_phase = phase_ordinal(a).cmp(&phase_ordinal(b));
    if by_phase != Ordering::Equal {
        return by_phase;
    }
    let by_ready = is_ready(a).cmp(&is_ready(b));
    if by_ready != Ordering::Equal {
        return by_ready;
    }
    if is_ready(a) {
        let since = |p: &Pod| {
            ready_condition(p)
                .and_then(|c| c.last_transition_time.as_ref())
                .map(|t| t.0)
        };
        let by_time = after_or_zero(since(a), since(b));
        if by_time != Ordering::Equal {
            return by_time;
        }
    }
    let by_restarts = max_restarts(b).cmp(&max_restarts(a));
    if by_restarts != Ordering::Equal {
        return by_restarts;
    }
    let created = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
    after_or_zero(created(a), created(b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn ready_since(secs_ago: i64) -> Pod {
        let now = Timestamp::now();
        Pod {
            status: Some(PodStatus {
                phase: Some("Running".into()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    last_transition_time: Some(Time(
                        now - k8s_openapi::jiff::SignedDuration::from_secs(secs_ago),
                    )),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn availability_waits_min_ready_seconds() {
        let pod = ready_since(5);
        assert!(is_ready(&pod));
        assert!(is_available(&pod, 0, Timestamp::now()));
        assert!(is_available(&pod, 5, Timestamp::now()));
        assert!(!is_available(&pod, 10, Timestamp::now()));
    }

    #[test]
    fn surplus_pods_are_deleted_least_valuable_first() {
        let mut unscheduled = ready_since(0);
        unscheduled.status.as_mut().unwrap().phase = Some("Pending".into());
        unscheduled.status.as_mut().unwrap().conditions = None;
        let with_node = |mut p: Pod| {
            p.spec = Some(Default::default());
            p.spec.as_mut().unwrap().node_name = Some("n".into());
            p
        };
        let mut pending = with_node(unscheduled.clone());
        pending.metadata.name = Some("pending".into());
        let old_ready = with_node(ready_since(100));
        let new_ready = with_node(ready_since(10));
        let mut pods = [
            old_ready.clone(),
            pending.clone(),
            new_ready.clone(),
            unscheduled.clone(),
        ];
        pods.sort_by(deletion_order);
        assert_eq!(pods, [unscheduled, pending, new_ready, old_ready]);
    }

    #[test]
    fn finished_or_deleted_pods_are_not_active() {
        let mut pod = ready_since(0);
        assert!(is_active(&pod));
        pod.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
        assert!(!is_active(&pod));
        let mut done = ready_since(0);
        done.status.as_mut().unwrap().phase = Some("Succeeded".into());
        assert!(!is_active(&done));
        assert!(is_terminal(&done));
    }
}
