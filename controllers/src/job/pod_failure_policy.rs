//! `spec.podFailurePolicy`, as upstream's pod_failure_policy.go: the first rule matching a
//! failed pod decides whether it fails the Job at once, is ignored (not counted against
//! `backoffLimit`), or counts as usual.

use k8s_openapi::api::batch::v1::{PodFailurePolicy, PodFailurePolicyOnExitCodesRequirement};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::ResourceExt;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    FailJob,
    Ignore,
    Count,
}

/// The first non-zero exit code of a terminated container the requirement selects.
fn matching_container<'a>(
    statuses: &'a [ContainerStatus],
    r: &PodFailurePolicyOnExitCodesRequirement,
) -> Option<(&'a str, i32)> {
    statuses.iter().find_map(|c| {
        let code = c.state.as_ref()?.terminated.as_ref()?.exit_code;
        if code == 0 || r.container_name.as_ref().is_some_and(|n| *n != c.name) {
            return None;
        }
        let listed = r.values.contains(&code);
        let hit = match r.operator.as_str() {
            "In" => listed,
            "NotIn" => !listed,
            _ => false,
        };
        hit.then_some((c.name.as_str(), code))
    })
}

/// The verdict of the first rule matching a failed `pod`, with upstream's message for a
/// FailJob rule; `None` when no rule matches (the failure counts).
pub fn matching(policy: &PodFailurePolicy, pod: &Pod) -> Option<(Verdict, String)> {
    let status = pod.status.as_ref()?;
    let pod_ref = format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any());
    for (i, rule) in policy.rules.iter().enumerate() {
        let verdict = match rule.action.as_str() {
            "FailJob" => Verdict::FailJob,
            "Ignore" => Verdict::Ignore,
            "Count" => Verdict::Count,
            // FailIndex needs backoffLimitPerIndex, which is not implemented.
            _ => continue,
        };
        if let Some(r) = &rule.on_exit_codes {
            let statuses: Vec<ContainerStatus> = status
                .init_container_statuses
                .iter()
                .flatten()
                .chain(status.container_statuses.iter().flatten())
                .cloned()
                .collect();
            if let Some((name, code)) = matching_container(&statuses, r) {
                let message = format!(
                    "Container {name} for pod {pod_ref} failed with exit code {code} matching {} rule at index {i}",
                    rule.action
                );
                return Some((verdict, message));
            }
        }
        for p in rule.on_pod_conditions.iter().flatten() {
            let wanted = if p.status.is_empty() {
                "True"
            } else {
                p.status.as_str()
            };
            let has = status
                .conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == p.type_ && c.status == wanted);
            if has {
                let message = format!(
                    "Pod {pod_ref} has condition {} matching {} rule at index {i}",
                    p.type_, rule.action
                );
                return Some((verdict, message));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_matching_rule_decides() {
        let policy: PodFailurePolicy = serde_json::from_value(serde_json::json!({"rules": [
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
            {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}},
            {"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [1]}},
        ]}))
        .unwrap();
        let pod = |name: &str, code: i32, condition: Option<&str>| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "p", "namespace": "ns"},
                "status": {
                    "phase": "Failed",
                    "conditions": condition.map(|c| vec![serde_json::json!({"type": c, "status": "True"})]),
                    "containerStatuses": [{
                        "name": name, "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                        "state": {"terminated": {"exitCode": code}},
                    }],
                },
            }))
            .unwrap()
        };
        let (v, message) = matching(&policy, &pod("main", 42, None)).unwrap();
        assert_eq!(v, Verdict::FailJob);
        assert_eq!(
            message,
            "Container main for pod ns/p failed with exit code 42 matching FailJob rule at index 1"
        );
        assert_eq!(
            matching(&policy, &pod("main", 42, Some("DisruptionTarget")))
                .unwrap()
                .0,
            Verdict::Ignore
        );
        assert_eq!(
            matching(&policy, &pod("side", 42, None)).unwrap().0,
            Verdict::Count
        );
        assert_eq!(matching(&policy, &pod("main", 1, None)), None);
    }
}
