//! Pod predicates and construction shared by the workload controllers, with upstream's
//! definitions (pkg/api/v1/pod and pkg/controller): what counts as active, ready and available
//! decides replica counts, so every controller must agree on it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;

pub fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
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
