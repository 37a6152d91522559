//! The HPA's status conditions as upstream keeps them: one per type, in the order they were
//! first set, the transition time moving only when the status flips, so `kubectl describe`
//! tells how long the autoscaler has been unable to scale.

use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscalerCondition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

pub const ABLE_TO_SCALE: &str = "AbleToScale";
pub const SCALING_ACTIVE: &str = "ScalingActive";
pub const SCALING_LIMITED: &str = "ScalingLimited";

/// Sets the condition of `type_`, as upstream's `setConditionInList`.
pub fn set(
    conditions: &mut Vec<HorizontalPodAutoscalerCondition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: impl Into<String>,
    now: Timestamp,
) {
    let status = if status { "True" } else { "False" };
    let existing = match conditions.iter().position(|c| c.type_ == type_) {
        Some(i) => &mut conditions[i],
        None => {
            conditions.push(HorizontalPodAutoscalerCondition {
                type_: type_.to_string(),
                ..Default::default()
            });
            conditions.last_mut().expect("just pushed")
        }
    };
    if existing.status != status {
        existing.last_transition_time = Some(Time(now));
    }
    existing.status = status.to_string();
    existing.reason = Some(reason.to_string());
    existing.message = Some(message.into());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_transition_time_moves_only_when_the_status_flips() {
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let t1: Timestamp = "2026-01-01T00:01:00Z".parse().unwrap();
        let t2: Timestamp = "2026-01-01T00:02:00Z".parse().unwrap();
        let mut c = Vec::new();
        set(&mut c, ABLE_TO_SCALE, true, "SucceededGetScale", "a", t0);
        set(&mut c, SCALING_ACTIVE, true, "ValidMetricFound", "b", t0);
        set(&mut c, ABLE_TO_SCALE, true, "SucceededRescale", "c", t1);
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].last_transition_time, Some(Time(t0)));
        assert_eq!(c[0].reason.as_deref(), Some("SucceededRescale"));
        set(&mut c, ABLE_TO_SCALE, false, "FailedGetScale", "d", t2);
        assert_eq!(c[0].last_transition_time, Some(Time(t2)));
        assert_eq!(c[0].status, "False");
        assert_eq!(c[1].type_, SCALING_ACTIVE);
    }
}
