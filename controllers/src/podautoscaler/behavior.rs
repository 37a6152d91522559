//! From the replica count the metrics ask for to the one the HPA sets, as kube-controller-manager
//! normalizes it: stabilization over recent recommendations keeps a noisy metric from flapping
//! the workload, and the scaling policies bound how fast it may grow or shrink. Time comes in as
//! an argument so that the windows are tested without a clock.

use std::time::Duration;

use k8s_openapi::api::autoscaling::v2::{HPAScalingRules, HorizontalPodAutoscalerBehavior};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// Upstream's `--horizontal-pod-autoscaler-downscale-stabilization` default.
pub const DEFAULT_DOWNSCALE_STABILIZATION: Duration = Duration::from_secs(5 * 60);

/// Without a behavior, one reconcile may at most double the replicas, or reach this many.
const SCALE_UP_LIMIT_MINIMUM: i64 = 4;
const SCALE_UP_LIMIT_FACTOR: i64 = 2;

/// A replica count the metrics asked for, kept for the stabilization windows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recommendation {
    pub at: Timestamp,
    pub replicas: i32,
}

/// A rescale the controller made, kept for the policies' periods: `change` is how many
/// replicas were added (scale up) or removed (scale down). An outdated event is past every
/// period and its slot may be reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScaleEvent {
    pub at: Timestamp,
    pub change: i32,
    pub outdated: bool,
}

/// What the controller remembers about one HPA between reconciles.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct History {
    pub recommendations: Vec<Recommendation>,
    pub scale_up_events: Vec<ScaleEvent>,
    pub scale_down_events: Vec<ScaleEvent>,
}

/// A condition's reason and message, as the HPA's status shows them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reason {
    pub reason: &'static str,
    pub message: &'static str,
}

pub const READY_FOR_NEW_SCALE: Reason = Reason {
    reason: "ReadyForNewScale",
    message: "recommended size matches current size",
};
pub const SCALE_DOWN_STABILIZED: Reason = Reason {
    reason: "ScaleDownStabilized",
    message: "recent recommendations were higher than current one, applying the highest recent recommendation",
};
pub const SCALE_UP_STABILIZED: Reason = Reason {
    reason: "ScaleUpStabilized",
    message: "recent recommendations were lower than current one, applying the lowest recent recommendation",
};
pub const TOO_FEW_REPLICAS: Reason = Reason {
    reason: "TooFewReplicas",
    message: "the desired replica count is less than the minimum replica count",
};
pub const TOO_MANY_REPLICAS: Reason = Reason {
    reason: "TooManyReplicas",
    message: "the desired replica count is more than the maximum replica count",
};
pub const DESIRED_WITHIN_RANGE: Reason = Reason {
    reason: "DesiredWithinRange",
    message: "the desired count is within the acceptable range",
};
pub const SCALE_UP_LIMIT: Reason = Reason {
    reason: "ScaleUpLimit",
    message: "the desired replica count is increasing faster than the maximum scale rate",
};
pub const SCALE_DOWN_LIMIT: Reason = Reason {
    reason: "ScaleDownLimit",
    message: "the desired replica count is decreasing faster than the maximum scale rate",
};

/// The replica counts one normalization works from (upstream's `NormalizationArg`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Proposal {
    pub current_replicas: i32,
    /// What the metrics ask for.
    pub desired_replicas: i32,
    pub min_replicas: i32,
    pub max_replicas: i32,
}

/// The outcome: the replicas to set, the AbleToScale condition's reason (status True), and the
/// ScalingLimited condition's status and reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Normalized {
    pub replicas: i32,
    pub able_to_scale: Reason,
    pub scaling_limited: bool,
    pub limit: Reason,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SelectPolicy {
    /// The policy that allows the largest change.
    Max,
    /// The policy that allows the smallest change.
    Min,
    /// No change in this direction.
    Disabled,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyType {
    Pods,
    Percent,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    pub kind: PolicyType,
    pub value: i32,
    pub period_seconds: i32,
}

/// One direction's rules with every default filled in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScalingRules {
    pub stabilization_window_seconds: i32,
    pub select_policy: SelectPolicy,
    pub policies: Vec<Policy>,
}

/// Both directions' rules with every default filled in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EffectiveBehavior {
    pub scale_up: ScalingRules,
    pub scale_down: ScalingRules,
}

impl ScalingRules {
    /// The API server's scale-up default: 4 pods or 100 % per 15 s, whichever is more, at once.
    pub fn default_scale_up() -> ScalingRules {
        ScalingRules {
            stabilization_window_seconds: 0,
            select_policy: SelectPolicy::Max,
            policies: vec![
                Policy {
                    kind: PolicyType::Pods,
                    value: 4,
                    period_seconds: 15,
                },
                Policy {
                    kind: PolicyType::Percent,
                    value: 100,
                    period_seconds: 15,
                },
            ],
        }
    }

    /// The API server's scale-down default: 100 % per 15 s, after the controller's
    /// stabilization window.
    pub fn default_scale_down(stabilization: Duration) -> ScalingRules {
        ScalingRules {
            stabilization_window_seconds: i32::try_from(stabilization.as_secs())
                .unwrap_or(i32::MAX),
            select_policy: SelectPolicy::Max,
            policies: vec![Policy {
                kind: PolicyType::Percent,
                value: 100,
                period_seconds: 15,
            }],
        }
    }

    /// `defaults` with whatever `rules` sets (upstream's `copyHPAScalingRules`).
    fn merged(rules: Option<&HPAScalingRules>, defaults: ScalingRules) -> ScalingRules {
        let Some(rules) = rules else {
            return defaults;
        };
        let select_policy = match rules.select_policy.as_deref() {
            None => defaults.select_policy,
            Some("Min") => SelectPolicy::Min,
            Some("Disabled") => SelectPolicy::Disabled,
            // Upstream treats anything else as Max.
            Some(_) => SelectPolicy::Max,
        };
        let policies = match &rules.policies {
            None => defaults.policies,
            Some(policies) => policies
                .iter()
                .filter_map(|p| {
                    let kind = match p.type_.as_str() {
                        "Pods" => PolicyType::Pods,
                        "Percent" => PolicyType::Percent,
                        _ => return None,
                    };
                    Some(Policy {
                        kind,
                        value: p.value,
                        period_seconds: p.period_seconds,
                    })
                })
                .collect(),
        };
        ScalingRules {
            stabilization_window_seconds: rules
                .stabilization_window_seconds
                .unwrap_or(defaults.stabilization_window_seconds),
            select_policy,
            policies,
        }
    }

    /// How far back scale events matter to these rules (upstream's `getLongestPolicyPeriod`).
    pub fn longest_policy_period(&self) -> i32 {
        self.policies
            .iter()
            .map(|p| p.period_seconds)
            .max()
            .unwrap_or(0)
            .max(0)
    }
}

/// The rules an HPA scales by: its behavior with the defaults filled in where it leaves a field
/// out, or all defaults when it has none (as an HPA written through autoscaling/v1).
/// `downscale_stabilization` is the controller's flag, the scale-down window's default.
pub fn effective_rules(
    behavior: Option<&HorizontalPodAutoscalerBehavior>,
    downscale_stabilization: Duration,
) -> EffectiveBehavior {
    EffectiveBehavior {
        scale_up: ScalingRules::merged(
            behavior.and_then(|b| b.scale_up.as_ref()),
            ScalingRules::default_scale_up(),
        ),
        scale_down: ScalingRules::merged(
            behavior.and_then(|b| b.scale_down.as_ref()),
            ScalingRules::default_scale_down(downscale_stabilization),
        ),
    }
}

/// Normalization for an HPA without a behavior (upstream's `normalizeDesiredReplicas`): the
/// highest recommendation of the downscale window, then the min/max bounds and the scale-up
/// cap. Records `proposal.desired_replicas` in `recommendations`.
pub fn normalize_without_behavior(
    recommendations: &mut Vec<Recommendation>,
    proposal: Proposal,
    downscale_stabilization: Duration,
    now: Timestamp,
) -> Normalized {
    let desired = proposal.desired_replicas;
    let stabilized =
        stabilize_recommendation(recommendations, desired, downscale_stabilization, now);
    let able_to_scale = if stabilized != desired {
        SCALE_DOWN_STABILIZED
    } else {
        READY_FOR_NEW_SCALE
    };
    let (replicas, limit) = convert_desired_replicas_with_rules(
        proposal.current_replicas,
        stabilized,
        proposal.min_replicas,
        proposal.max_replicas,
    );
    Normalized {
        replicas,
        able_to_scale,
        scaling_limited: replicas != stabilized,
        limit,
    }
}

/// The highest of `desired` and the recommendations younger than `window`; records `desired`,
/// reusing the slot of a recommendation older than the window (upstream's
/// `stabilizeRecommendation`).
pub fn stabilize_recommendation(
    recommendations: &mut Vec<Recommendation>,
    desired: i32,
    window: Duration,
    now: Timestamp,
) -> i32 {
    let cutoff = before(now, window);
    let mut highest = desired;
    let mut old_slot = None;
    for (i, rec) in recommendations.iter().enumerate() {
        if rec.at < cutoff {
            old_slot = Some(i);
        } else {
            highest = highest.max(rec.replicas);
        }
    }
    record(recommendations, old_slot, desired, now);
    highest
}

/// The min/max bounds and the scale-up cap for an HPA without a behavior (upstream's
/// `convertDesiredReplicasWithRules`).
pub fn convert_desired_replicas_with_rules(
    current_replicas: i32,
    desired_replicas: i32,
    min_replicas: i32,
    max_replicas: i32,
) -> (i32, Reason) {
    // A bogus usage report must not multiply the workload in one step.
    let scale_up_limit = calculate_scale_up_limit(current_replicas);
    let (maximum, limited_by) = if max_replicas > scale_up_limit {
        (scale_up_limit, SCALE_UP_LIMIT)
    } else {
        (max_replicas, TOO_MANY_REPLICAS)
    };
    if desired_replicas < min_replicas {
        (min_replicas, TOO_FEW_REPLICAS)
    } else if desired_replicas > maximum {
        (maximum, limited_by)
    } else {
        (desired_replicas, DESIRED_WITHIN_RANGE)
    }
}

/// The most replicas one reconcile may reach without a behavior: twice the current, at least 4.
pub fn calculate_scale_up_limit(current_replicas: i32) -> i32 {
    clamp_i32((SCALE_UP_LIMIT_FACTOR * i64::from(current_replicas)).max(SCALE_UP_LIMIT_MINIMUM))
}

/// Normalization for an HPA with a behavior (upstream's
/// `normalizeDesiredReplicasWithBehaviors`): stabilization over each direction's window, then
/// the bounds and the policies' rate given the recent scale events. Records
/// `proposal.desired_replicas` in `history`; the caller records the rescale it then makes with
/// [`store_scale_event`].
pub fn normalize_with_behaviors(
    behavior: &HorizontalPodAutoscalerBehavior,
    history: &mut History,
    proposal: Proposal,
    downscale_stabilization: Duration,
    now: Timestamp,
) -> Normalized {
    let rules = effective_rules(Some(behavior), downscale_stabilization);
    let (stabilized, stabilized_by) = stabilize_recommendation_with_behaviors(
        &mut history.recommendations,
        proposal,
        window(rules.scale_up.stabilization_window_seconds),
        window(rules.scale_down.stabilization_window_seconds),
        now,
    );
    let able_to_scale = if stabilized != proposal.desired_replicas {
        stabilized_by
    } else {
        READY_FOR_NEW_SCALE
    };
    let stabilized_proposal = Proposal {
        desired_replicas: stabilized,
        ..proposal
    };
    let (replicas, limit) = convert_desired_replicas_with_behavior_rate(
        stabilized_proposal,
        &rules,
        &history.scale_up_events,
        &history.scale_down_events,
        now,
    );
    Normalized {
        replicas,
        able_to_scale,
        scaling_limited: replicas != stabilized,
        limit,
    }
}

/// Keeps the replicas between the lowest recommendation of the scale-up window and the highest
/// of the scale-down window, moving from the current count only as far as both allow; records
/// `proposal.desired_replicas`, reusing a slot older than both windows (upstream's
/// `stabilizeRecommendationWithBehaviors`).
pub fn stabilize_recommendation_with_behaviors(
    recommendations: &mut Vec<Recommendation>,
    proposal: Proposal,
    scale_up_window: Duration,
    scale_down_window: Duration,
    now: Timestamp,
) -> (i32, Reason) {
    let desired = proposal.desired_replicas;
    let up_cutoff = before(now, scale_up_window);
    let down_cutoff = before(now, scale_down_window);
    let mut up_recommendation = desired;
    let mut down_recommendation = desired;
    let mut old_slot = None;
    for (i, rec) in recommendations.iter().enumerate() {
        if rec.at > up_cutoff {
            up_recommendation = up_recommendation.min(rec.replicas);
        }
        if rec.at > down_cutoff {
            down_recommendation = down_recommendation.max(rec.replicas);
        }
        if rec.at < up_cutoff && rec.at < down_cutoff {
            old_slot = Some(i);
        }
    }
    let recommendation = proposal
        .current_replicas
        .max(up_recommendation)
        .min(down_recommendation);
    record(recommendations, old_slot, desired, now);
    let reason = if desired >= proposal.current_replicas {
        SCALE_UP_STABILIZED
    } else {
        SCALE_DOWN_STABILIZED
    };
    (recommendation, reason)
}

/// The bounds and the policies' rate for an HPA with a behavior (upstream's
/// `convertDesiredReplicasWithBehaviorRate`); stabilization is applied before this.
pub fn convert_desired_replicas_with_behavior_rate(
    proposal: Proposal,
    rules: &EffectiveBehavior,
    scale_up_events: &[ScaleEvent],
    scale_down_events: &[ScaleEvent],
    now: Timestamp,
) -> (i32, Reason) {
    let Proposal {
        current_replicas: current,
        desired_replicas: desired,
        min_replicas,
        max_replicas,
    } = proposal;
    if desired > current {
        let limit = calculate_scale_up_limit_with_scaling_rules(
            current,
            scale_up_events,
            scale_down_events,
            &rules.scale_up,
            now,
        )
        // Recent scale-ups may have used up the allowance: hold, never shrink, until they age.
        .max(current);
        let (maximum, limited_by) = if max_replicas > limit {
            (limit, SCALE_UP_LIMIT)
        } else {
            (max_replicas, TOO_MANY_REPLICAS)
        };
        if desired > maximum {
            return (maximum, limited_by);
        }
    } else if desired < current {
        let limit = calculate_scale_down_limit_with_behaviors(
            current,
            scale_up_events,
            scale_down_events,
            &rules.scale_down,
            now,
        )
        .min(current);
        let (minimum, limited_by) = if min_replicas < limit {
            (limit, SCALE_DOWN_LIMIT)
        } else {
            (min_replicas, TOO_FEW_REPLICAS)
        };
        if desired < minimum {
            return (minimum, limited_by);
        }
    }
    (desired, DESIRED_WITHIN_RANGE)
}

/// The most replicas the scale-up policies allow now, counting from the replicas at the start
/// of each policy's period (upstream's `calculateScaleUpLimitWithScalingRules`).
pub fn calculate_scale_up_limit_with_scaling_rules(
    current_replicas: i32,
    scale_up_events: &[ScaleEvent],
    scale_down_events: &[ScaleEvent],
    rules: &ScalingRules,
    now: Timestamp,
) -> i32 {
    let (mut result, pick): (i32, fn(i32, i32) -> i32) = match rules.select_policy {
        SelectPolicy::Disabled => return current_replicas,
        // For scaling up the smallest change is the lowest limit.
        SelectPolicy::Min => (i32::MAX, std::cmp::min),
        SelectPolicy::Max => (i32::MIN, std::cmp::max),
    };
    for policy in &rules.policies {
        let start = period_start_replicas(
            current_replicas,
            policy.period_seconds,
            scale_up_events,
            scale_down_events,
            now,
        );
        let proposed = match policy.kind {
            PolicyType::Pods => clamp_i32(start + i64::from(policy.value)),
            // Rounded up, or a small percentage of a few pods would never add one.
            PolicyType::Percent => {
                (start as f64 * (1.0 + f64::from(policy.value) / 100.0)).ceil() as i32
            }
        };
        result = pick(result, proposed);
    }
    result
}

/// The fewest replicas the scale-down policies allow now, counting from the replicas at the
/// start of each policy's period (upstream's `calculateScaleDownLimitWithBehaviors`).
pub fn calculate_scale_down_limit_with_behaviors(
    current_replicas: i32,
    scale_up_events: &[ScaleEvent],
    scale_down_events: &[ScaleEvent],
    rules: &ScalingRules,
    now: Timestamp,
) -> i32 {
    let (mut result, pick): (i32, fn(i32, i32) -> i32) = match rules.select_policy {
        SelectPolicy::Disabled => return current_replicas,
        // For scaling down the smallest change is the highest limit.
        SelectPolicy::Min => (i32::MIN, std::cmp::max),
        SelectPolicy::Max => (i32::MAX, std::cmp::min),
    };
    for policy in &rules.policies {
        let start = period_start_replicas(
            current_replicas,
            policy.period_seconds,
            scale_up_events,
            scale_down_events,
            now,
        );
        let proposed = match policy.kind {
            PolicyType::Pods => clamp_i32(start - i64::from(policy.value)),
            PolicyType::Percent => (start as f64 * (1.0 - f64::from(policy.value) / 100.0)) as i32,
        };
        result = pick(result, proposed);
    }
    result
}

/// The replicas before the rescales of the last `period_seconds`.
fn period_start_replicas(
    current_replicas: i32,
    period_seconds: i32,
    scale_up_events: &[ScaleEvent],
    scale_down_events: &[ScaleEvent],
    now: Timestamp,
) -> i64 {
    let added = replicas_change_per_period(period_seconds, scale_up_events, now);
    let removed = replicas_change_per_period(period_seconds, scale_down_events, now);
    i64::from(current_replicas) - i64::from(added) + i64::from(removed)
}

/// The replicas the events of the last `period_seconds` changed (upstream's
/// `getReplicasChangePerPeriod`).
pub fn replicas_change_per_period(
    period_seconds: i32,
    events: &[ScaleEvent],
    now: Timestamp,
) -> i32 {
    let cutoff = seconds_before(now, period_seconds);
    let total: i64 = events
        .iter()
        .filter(|e| e.at > cutoff)
        .map(|e| i64::from(e.change))
        .sum();
    clamp_i32(total)
}

/// Records a rescale from `prev_replicas` to `new_replicas` in its direction's events, reusing
/// the slot of an event past every policy's period (upstream's `storeScaleEvent`). Without a
/// behavior nothing reads the events, so nothing is stored.
pub fn store_scale_event(
    behavior: Option<&HorizontalPodAutoscalerBehavior>,
    history: &mut History,
    prev_replicas: i32,
    new_replicas: i32,
    now: Timestamp,
) {
    let Some(behavior) = behavior else {
        return;
    };
    let rules = effective_rules(Some(behavior), DEFAULT_DOWNSCALE_STABILIZATION);
    let (events, longest_period, change) = if new_replicas > prev_replicas {
        (
            &mut history.scale_up_events,
            rules.scale_up.longest_policy_period(),
            new_replicas.saturating_sub(prev_replicas),
        )
    } else {
        (
            &mut history.scale_down_events,
            rules.scale_down.longest_policy_period(),
            prev_replicas.saturating_sub(new_replicas),
        )
    };
    mark_scale_events_outdated(events, longest_period, now);
    let event = ScaleEvent {
        at: now,
        change,
        outdated: false,
    };
    match events.iter().rposition(|e| e.outdated) {
        Some(slot) => events[slot] = event,
        None => events.push(event),
    }
}

/// Flags the events older than `longest_policy_period` seconds, whose slots may be reused
/// (upstream's `markScaleEventsOutdated`).
pub fn mark_scale_events_outdated(
    events: &mut [ScaleEvent],
    longest_policy_period: i32,
    now: Timestamp,
) {
    let cutoff = seconds_before(now, longest_policy_period);
    for event in events.iter_mut().filter(|e| e.at < cutoff) {
        event.outdated = true;
    }
}

impl History {
    /// Drops the recommendations older than both stabilization windows and the events older
    /// than their direction's longest policy period: they can no longer affect a decision, and
    /// dropping them bounds what an HPA whose rules shrank keeps.
    pub fn prune(&mut self, rules: &EffectiveBehavior, now: Timestamp) {
        let keep = rules
            .scale_up
            .stabilization_window_seconds
            .max(rules.scale_down.stabilization_window_seconds);
        let cutoff = seconds_before(now, keep);
        self.recommendations.retain(|r| r.at > cutoff);
        let up_cutoff = seconds_before(now, rules.scale_up.longest_policy_period());
        self.scale_up_events.retain(|e| e.at > up_cutoff);
        let down_cutoff = seconds_before(now, rules.scale_down.longest_policy_period());
        self.scale_down_events.retain(|e| e.at > down_cutoff);
    }
}

/// Records `replicas` as recommended `now`, in `slot` if there is one to reuse.
fn record(
    recommendations: &mut Vec<Recommendation>,
    slot: Option<usize>,
    replicas: i32,
    now: Timestamp,
) {
    let rec = Recommendation { at: now, replicas };
    match slot.and_then(|i| recommendations.get_mut(i)) {
        Some(old) => *old = rec,
        None => recommendations.push(rec),
    }
}

fn window(seconds: i32) -> Duration {
    Duration::from_secs(u64::try_from(seconds).unwrap_or(0))
}

fn before(now: Timestamp, d: Duration) -> Timestamp {
    now.saturating_sub(d).unwrap_or(Timestamp::MIN)
}

fn seconds_before(now: Timestamp, seconds: i32) -> Timestamp {
    now.saturating_sub(SignedDuration::from_secs(i64::from(seconds)))
        .unwrap_or(Timestamp::MIN)
}

fn clamp_i32(v: i64) -> i32 {
    i32::try_from(v).unwrap_or(if v < 0 { i32::MIN } else { i32::MAX })
}

#[cfg(test)]
mod tests {
    //! Upstream's horizontal_test.go cases for normalization, stabilization and scale events,
    //! with `time.Now()` replaced by one fixed `now`.

    use k8s_openapi::api::autoscaling::v2::HPAScalingPolicy;

    use super::*;

    fn now() -> Timestamp {
        "2024-05-01T12:00:00Z".parse().unwrap()
    }

    fn ago(secs: i64) -> Timestamp {
        now().checked_sub(SignedDuration::from_secs(secs)).unwrap()
    }

    fn rec(replicas: i32, at: Timestamp) -> Recommendation {
        Recommendation { at, replicas }
    }

    fn event(change: i32, at: Timestamp, outdated: bool) -> ScaleEvent {
        ScaleEvent {
            at,
            change,
            outdated,
        }
    }

    /// Upstream's `generateScalingRules`: a Max-select rule set with a Pods and/or a Percent
    /// policy (a zero value leaves that policy out).
    fn generate_scaling_rules(
        pods: i32,
        pods_period: i32,
        percent: i32,
        percent_period: i32,
        stabilization_window: i32,
    ) -> HPAScalingRules {
        let mut policies = Vec::new();
        if pods != 0 {
            policies.push(HPAScalingPolicy {
                type_: "Pods".to_string(),
                value: pods,
                period_seconds: pods_period,
            });
        }
        if percent != 0 {
            policies.push(HPAScalingPolicy {
                type_: "Percent".to_string(),
                value: percent,
                period_seconds: percent_period,
            });
        }
        HPAScalingRules {
            policies: Some(policies),
            select_policy: Some("Max".to_string()),
            stabilization_window_seconds: Some(stabilization_window),
            ..Default::default()
        }
    }

    /// Upstream's `generateEventsUniformDistribution`: the events spread over the last
    /// `period_seconds`, each in the middle of its share.
    fn events_uniform(raw: &[i32], period_seconds: i32) -> Vec<ScaleEvent> {
        let segment = f64::from(period_seconds) / raw.len() as f64;
        raw.iter()
            .enumerate()
            .map(|(idx, &change)| {
                let boundary =
                    f64::from(period_seconds) - segment * (idx + 1) as f64 + segment / 2.0;
                event(change, ago(boundary as i64), false)
            })
            .collect()
    }

    fn rules_of(rules: &HPAScalingRules) -> ScalingRules {
        let behavior = HorizontalPodAutoscalerBehavior {
            scale_up: Some(rules.clone()),
            scale_down: None,
        };
        effective_rules(Some(&behavior), DEFAULT_DOWNSCALE_STABILIZATION).scale_up
    }

    #[test]
    fn normalize_desired_replicas() {
        // name, recommendations, prenormalized, expected stabilized, expected log length
        let cases: Vec<(&str, Vec<Recommendation>, i32, i32, usize)> = vec![
            ("empty log", vec![], 5, 5, 1),
            (
                "stabilize",
                vec![rec(4, ago(120)), rec(5, ago(60))],
                3,
                5,
                3,
            ),
            (
                "no stabilize",
                vec![rec(1, ago(120)), rec(2, ago(60))],
                3,
                3,
                3,
            ),
            (
                "no stabilize - old recommendations",
                vec![rec(10, ago(600)), rec(9, ago(540))],
                3,
                3,
                2,
            ),
            (
                "stabilize - old recommendations",
                vec![
                    rec(10, ago(600)),
                    rec(4, ago(60)),
                    rec(5, ago(120)),
                    rec(9, ago(540)),
                ],
                3,
                5,
                4,
            ),
        ];
        for (name, mut recs, desired, expected, expected_len) in cases {
            let got = stabilize_recommendation(&mut recs, desired, Duration::from_secs(300), now());
            assert_eq!(got, expected, "{name}");
            assert_eq!(recs.len(), expected_len, "{name}");
        }
    }

    #[test]
    fn normalize_without_behavior_conditions() {
        let mut recs = vec![rec(4, ago(120)), rec(5, ago(60))];
        let proposal = Proposal {
            current_replicas: 5,
            desired_replicas: 3,
            min_replicas: 1,
            max_replicas: 10,
        };
        let got =
            normalize_without_behavior(&mut recs, proposal, DEFAULT_DOWNSCALE_STABILIZATION, now());
        assert_eq!(
            got,
            Normalized {
                replicas: 5,
                able_to_scale: SCALE_DOWN_STABILIZED,
                scaling_limited: false,
                limit: DESIRED_WITHIN_RANGE,
            }
        );
        assert_eq!(recs.len(), 3);

        let mut recs = Vec::new();
        let proposal = Proposal {
            current_replicas: 3,
            desired_replicas: 1000,
            min_replicas: 1,
            max_replicas: 2000,
        };
        let got =
            normalize_without_behavior(&mut recs, proposal, DEFAULT_DOWNSCALE_STABILIZATION, now());
        assert_eq!(
            got,
            Normalized {
                replicas: 6,
                able_to_scale: READY_FOR_NEW_SCALE,
                scaling_limited: true,
                limit: SCALE_UP_LIMIT,
            }
        );
        assert_eq!(
            got.limit.message,
            "the desired replica count is increasing faster than the maximum scale rate"
        );
    }

    #[test]
    fn convert_desired_replicas_with_rules_table() {
        // current, desired, min, max, expected, condition
        let cases = [
            (5, 7, 3, 8, 7, "DesiredWithinRange"),
            (3, 1, 2, 8, 2, "TooFewReplicas"),
            (1, 0, 0, 10, 0, "DesiredWithinRange"),
            (20, 1000, 1, 10, 10, "TooManyReplicas"),
            (
                3,
                1000,
                1,
                2000,
                calculate_scale_up_limit(3),
                "ScaleUpLimit",
            ),
        ];
        for (current, desired, min, max, expected, condition) in cases {
            let (got, reason) = convert_desired_replicas_with_rules(current, desired, min, max);
            assert_eq!(got, expected, "{current} -> {desired}");
            assert_eq!(reason.reason, condition, "{current} -> {desired}");
        }
        assert_eq!(calculate_scale_up_limit(3), 6);
        assert_eq!(calculate_scale_up_limit(1), 4);
    }

    #[test]
    fn calculate_scale_up_limit_with_min_select_policy() {
        let mut rules = generate_scaling_rules(2, 60, 50, 60, 300);
        rules.select_policy = Some("Min".to_string());
        let got =
            calculate_scale_up_limit_with_scaling_rules(1, &[], &[], &rules_of(&rules), now());
        assert_eq!(got, 2);
    }

    #[test]
    fn calculate_scale_down_limit_with_min_select_policy() {
        let mut rules = generate_scaling_rules(2, 60, 50, 60, 300);
        rules.select_policy = Some("Min".to_string());
        let got = calculate_scale_down_limit_with_behaviors(5, &[], &[], &rules_of(&rules), now());
        assert_eq!(got, 3);
    }

    #[test]
    fn disabled_select_policy_holds_that_direction() {
        let mut rules = generate_scaling_rules(4, 15, 100, 15, 0);
        rules.select_policy = Some("Disabled".to_string());
        let behavior = HorizontalPodAutoscalerBehavior {
            scale_up: Some(rules.clone()),
            scale_down: Some(rules),
        };
        let proposal = |desired| Proposal {
            current_replicas: 5,
            desired_replicas: desired,
            min_replicas: 1,
            max_replicas: 10,
        };
        let mut history = History::default();
        let up = normalize_with_behaviors(
            &behavior,
            &mut history,
            proposal(9),
            DEFAULT_DOWNSCALE_STABILIZATION,
            now(),
        );
        assert_eq!((up.replicas, up.limit), (5, SCALE_UP_LIMIT));
        let mut history = History::default();
        let down = normalize_with_behaviors(
            &behavior,
            &mut history,
            proposal(2),
            DEFAULT_DOWNSCALE_STABILIZATION,
            now(),
        );
        assert_eq!((down.replicas, down.limit), (5, SCALE_DOWN_LIMIT));
    }

    #[test]
    fn effective_rules_fill_defaults() {
        let all_defaults = effective_rules(None, DEFAULT_DOWNSCALE_STABILIZATION);
        assert_eq!(all_defaults.scale_up, ScalingRules::default_scale_up());
        assert_eq!(
            all_defaults.scale_down,
            ScalingRules::default_scale_down(Duration::from_secs(300))
        );
        assert_eq!(all_defaults.scale_down.stabilization_window_seconds, 300);

        // A behavior that sets only the scale-down window keeps the default policies.
        let behavior = HorizontalPodAutoscalerBehavior {
            scale_up: None,
            scale_down: Some(HPAScalingRules {
                stabilization_window_seconds: Some(60),
                ..Default::default()
            }),
        };
        let rules = effective_rules(Some(&behavior), DEFAULT_DOWNSCALE_STABILIZATION);
        assert_eq!(rules.scale_down.stabilization_window_seconds, 60);
        assert_eq!(rules.scale_down.select_policy, SelectPolicy::Max);
        assert_eq!(
            rules.scale_down.policies,
            vec![Policy {
                kind: PolicyType::Percent,
                value: 100,
                period_seconds: 15
            }]
        );
        assert_eq!(rules.scale_up, ScalingRules::default_scale_up());
    }

    /// Upstream's TestScalingWithRules table.
    #[test]
    fn scaling_with_rules() {
        struct Case {
            name: &'static str,
            scale_up_events: Vec<ScaleEvent>,
            scale_down_events: Vec<ScaleEvent>,
            min: i32,
            max: i32,
            scale_up_rules: Option<HPAScalingRules>,
            scale_down_rules: Option<HPAScalingRules>,
            current: i32,
            desired: i32,
            expected: i32,
            condition: &'static str,
        }
        let base = |name, min, max, current, desired, expected, condition| Case {
            name,
            scale_up_events: vec![],
            scale_down_events: vec![],
            min,
            max,
            scale_up_rules: None,
            scale_down_rules: None,
            current,
            desired,
            expected,
            condition,
        };
        let up = |case: Case, rules| Case {
            scale_up_rules: Some(rules),
            ..case
        };
        let down = |case: Case, rules| Case {
            scale_down_rules: Some(rules),
            ..case
        };
        let up_events = |case: Case, events| Case {
            scale_up_events: events,
            ..case
        };
        let down_events = |case: Case, events| Case {
            scale_down_events: events,
            ..case
        };
        let r = generate_scaling_rules;
        let u = events_uniform;
        let cases = vec![
            base(
                "prenormalized desired replicas within range",
                3,
                8,
                5,
                7,
                7,
                "DesiredWithinRange",
            ),
            base(
                "prenormalized desired replicas < minReplicas",
                2,
                8,
                3,
                1,
                2,
                "TooFewReplicas",
            ),
            base(
                "prenormalized desired replicas within range when minReplicas is 0",
                0,
                10,
                1,
                0,
                0,
                "DesiredWithinRange",
            ),
            base(
                "maxReplicas is the limit because maxReplicas < scaleUpLimit",
                1,
                10,
                20,
                1000,
                10,
                "TooManyReplicas",
            ),
            base(
                "desired replica count is more than the maximum replica count",
                100,
                150,
                100,
                1000,
                150,
                "TooManyReplicas",
            ),
            up(
                base(
                    "scaleUpLimit is the limit because scaleUpLimit < maxReplicas with user policies",
                    1,
                    2000,
                    3,
                    1000,
                    4,
                    "ScaleUpLimit",
                ),
                r(0, 0, 1, 60, 0),
            ),
            down(
                base(
                    "scaleDownLimit is the limit because scaleDownLimit > minReplicas with user defined policies",
                    3,
                    2000,
                    1000,
                    3,
                    980,
                    "ScaleDownLimit",
                ),
                r(20, 60, 0, 0, 0),
            ),
            base(
                "scaleUp with default behavior",
                1,
                1000,
                10,
                50,
                20,
                "ScaleUpLimit",
            ),
            up(
                base(
                    "scaleUp with pods policy larger than percent policy",
                    1,
                    1000,
                    10,
                    500,
                    110,
                    "ScaleUpLimit",
                ),
                r(100, 60, 100, 60, 0),
            ),
            up(
                base(
                    "scaleUp with percent policy larger than pods policy",
                    1,
                    1000,
                    10,
                    500,
                    20,
                    "ScaleUpLimit",
                ),
                r(2, 60, 100, 60, 0),
            ),
            up(
                base(
                    "scaleUp with spec MaxReplicas limitation with large pod policy",
                    1,
                    1000,
                    10,
                    50,
                    50,
                    "DesiredWithinRange",
                ),
                r(100, 60, 0, 0, 0),
            ),
            up(
                base(
                    "scaleUp with spec MaxReplicas limitation with large percent policy",
                    1,
                    1000,
                    10,
                    50,
                    50,
                    "DesiredWithinRange",
                ),
                r(10000, 60, 0, 0, 0),
            ),
            up(
                base(
                    "scaleUp with pod policy limitation",
                    1,
                    1000,
                    10,
                    50,
                    40,
                    "ScaleUpLimit",
                ),
                r(30, 60, 0, 0, 0),
            ),
            up(
                base(
                    "scaleUp with percent policy limitation",
                    1,
                    1000,
                    10,
                    50,
                    30,
                    "ScaleUpLimit",
                ),
                r(0, 0, 200, 60, 0),
            ),
            down(
                base(
                    "scaleDown with percent policy larger than pod policy",
                    1,
                    1000,
                    100,
                    2,
                    80,
                    "ScaleDownLimit",
                ),
                r(20, 60, 1, 60, 300),
            ),
            down(
                base(
                    "scaleDown with pod policy larger than percent policy",
                    1,
                    1000,
                    100,
                    2,
                    98,
                    "ScaleDownLimit",
                ),
                r(2, 60, 1, 60, 300),
            ),
            down(
                base(
                    "scaleDown with spec MinReplicas=nil limitation with large pod policy",
                    1,
                    1000,
                    10,
                    0,
                    1,
                    "TooFewReplicas",
                ),
                r(100, 60, 0, 0, 300),
            ),
            down(
                base(
                    "scaleDown with spec MinReplicas limitation with large pod policy",
                    1,
                    1000,
                    10,
                    0,
                    1,
                    "TooFewReplicas",
                ),
                r(100, 60, 0, 0, 300),
            ),
            down(
                base(
                    "scaleDown with spec MinReplicas limitation with large percent policy",
                    5,
                    1000,
                    10,
                    2,
                    5,
                    "TooFewReplicas",
                ),
                r(0, 0, 100, 60, 300),
            ),
            down(
                base(
                    "scaleDown with pod policy limitation",
                    1,
                    1000,
                    10,
                    2,
                    5,
                    "ScaleDownLimit",
                ),
                r(5, 60, 0, 0, 300),
            ),
            down(
                base(
                    "scaleDown with percent policy limitation",
                    1,
                    1000,
                    10,
                    5,
                    5,
                    "DesiredWithinRange",
                ),
                r(0, 0, 50, 60, 300),
            ),
            up_events(
                up(
                    base(
                        "scaleUp with spec MaxReplicas limitation with large pod policy and events",
                        1,
                        200,
                        100,
                        500,
                        200,
                        "TooManyReplicas",
                    ),
                    r(300, 60, 0, 0, 0),
                ),
                u(&[1, 5, 9], 120),
            ),
            up_events(
                up(
                    base(
                        "scaleUp with spec MaxReplicas limitation with large percent policy and events",
                        1,
                        200,
                        100,
                        500,
                        200,
                        "TooManyReplicas",
                    ),
                    r(0, 0, 10000, 60, 0),
                ),
                u(&[1, 5, 9], 120),
            ),
            up_events(
                up(
                    base(
                        "scaleUp with currentReplicas limitation with rate.PeriodSeconds with a lot of recent scale up events",
                        1,
                        1000,
                        100,
                        500,
                        100,
                        "ScaleUpLimit",
                    ),
                    r(5, 120, 0, 0, 0),
                ),
                u(&[1, 5, 9], 120),
            ),
            up_events(
                up(
                    base(
                        "scaleUp with pod policy and previous scale up events",
                        1,
                        1000,
                        100,
                        500,
                        235,
                        "ScaleUpLimit",
                    ),
                    r(150, 120, 0, 0, 0),
                ),
                u(&[1, 5, 9], 120),
            ),
            up_events(
                up(
                    base(
                        "scaleUp with percent policy and previous scale up events",
                        1,
                        1000,
                        100,
                        500,
                        255,
                        "ScaleUpLimit",
                    ),
                    r(0, 0, 200, 120, 0),
                ),
                u(&[1, 5, 9], 120),
            ),
            down_events(
                up_events(
                    up(
                        base(
                            "scaleUp with percent policy and previous scale up and down events",
                            1,
                            1000,
                            6,
                            24,
                            16,
                            "ScaleUpLimit",
                        ),
                        r(0, 0, 300, 300, 0),
                    ),
                    u(&[4], 120),
                ),
                u(&[2], 120),
            ),
            down_events(
                base(
                    "scaleDown with default policy and previous events",
                    1,
                    1000,
                    10,
                    5,
                    5,
                    "DesiredWithinRange",
                ),
                u(&[1, 5, 9], 120),
            ),
            down_events(
                down(
                    base(
                        "scaleDown with spec MinReplicas=nil limitation with large pod policy and previous events",
                        1,
                        1000,
                        100,
                        0,
                        1,
                        "TooFewReplicas",
                    ),
                    r(115, 120, 0, 0, 300),
                ),
                u(&[1, 5, 9], 120),
            ),
            down_events(
                down(
                    base(
                        "scaleDown with spec MinReplicas limitation with large pod policy and previous events",
                        5,
                        1000,
                        100,
                        0,
                        5,
                        "TooFewReplicas",
                    ),
                    r(130, 120, 0, 0, 300),
                ),
                u(&[1, 5, 9], 120),
            ),
            down_events(
                down(
                    base(
                        "scaleDown with spec MinReplicas limitation with large percent policy and previous events",
                        5,
                        1000,
                        100,
                        2,
                        5,
                        "TooFewReplicas",
                    ),
                    r(0, 0, 100, 120, 300),
                ),
                u(&[1, 5, 9], 120),
            ),
            down_events(
                down(
                    base(
                        "scaleDown with pod policy limitation and previous events",
                        1,
                        1000,
                        100,
                        2,
                        100,
                        "ScaleDownLimit",
                    ),
                    r(5, 120, 0, 0, 300),
                ),
                u(&[1, 5, 9], 120),
            ),
            down_events(
                down(
                    base(
                        "scaleDown with percent policy limitation and previous events",
                        1,
                        1000,
                        100,
                        0,
                        56,
                        "ScaleDownLimit",
                    ),
                    r(0, 0, 50, 120, 300),
                ),
                u(&[2, 4, 6], 120),
            ),
            down_events(
                up_events(
                    down(
                        base(
                            "scaleDown with percent policy and previous scale up and down events",
                            1,
                            1000,
                            10,
                            1,
                            6,
                            "ScaleDownLimit",
                        ),
                        r(0, 0, 50, 180, 0),
                    ),
                    u(&[2], 120),
                ),
                u(&[4], 120),
            ),
            down_events(
                down(
                    base(
                        "scaleDown with previous events preventing further scale down",
                        1,
                        1000,
                        100,
                        0,
                        100,
                        "ScaleDownLimit",
                    ),
                    r(0, 0, 10, 120, 300),
                ),
                u(&[10, 10, 10], 120),
            ),
            down_events(
                down(
                    base(
                        "scaleDown with with previous events still allowing more scale down",
                        1,
                        1000,
                        10,
                        5,
                        5,
                        "DesiredWithinRange",
                    ),
                    r(0, 0, 1000, 120, 300),
                ),
                u(&[10, 10, 10], 120),
            ),
            up_events(
                up(
                    base(
                        "check 'outdated' flag for events for one behavior for up",
                        1,
                        1000,
                        100,
                        200,
                        200,
                        "DesiredWithinRange",
                    ),
                    r(1000, 60, 0, 0, 0),
                ),
                u(&[8, 12, 9, 11], 120),
            ),
            up_events(
                up(
                    base(
                        "check that events were not marked 'outdated' for two different policies in the behavior for up",
                        1,
                        1000,
                        100,
                        200,
                        200,
                        "DesiredWithinRange",
                    ),
                    r(1000, 120, 100, 60, 0),
                ),
                u(&[8, 12, 9, 11], 120),
            ),
            up_events(
                up(
                    base(
                        "check that events were marked 'outdated' for two different policies in the behavior for up",
                        1,
                        1000,
                        100,
                        200,
                        200,
                        "DesiredWithinRange",
                    ),
                    r(1000, 30, 100, 60, 0),
                ),
                u(&[8, 12, 9, 11], 120),
            ),
            down_events(
                down(
                    base(
                        "check 'outdated' flag for events for one behavior for down",
                        1,
                        1000,
                        100,
                        5,
                        5,
                        "DesiredWithinRange",
                    ),
                    r(1000, 60, 0, 0, 300),
                ),
                u(&[8, 12, 9, 11], 120),
            ),
            down_events(
                down(
                    base(
                        "check that events were not marked 'outdated' for two different policies in the behavior for down",
                        1,
                        1000,
                        100,
                        5,
                        5,
                        "DesiredWithinRange",
                    ),
                    r(1000, 120, 100, 60, 300),
                ),
                u(&[8, 12, 9, 11], 120),
            ),
            down_events(
                down(
                    base(
                        "check that events were marked 'outdated' for two different policies in the behavior for down",
                        1,
                        1000,
                        100,
                        5,
                        5,
                        "DesiredWithinRange",
                    ),
                    r(1000, 30, 100, 60, 300),
                ),
                u(&[8, 12, 9, 11], 120),
            ),
        ];
        for case in cases {
            let behavior = HorizontalPodAutoscalerBehavior {
                scale_up: case.scale_up_rules.clone(),
                scale_down: case.scale_down_rules.clone(),
            };
            let rules = effective_rules(Some(&behavior), DEFAULT_DOWNSCALE_STABILIZATION);
            let proposal = Proposal {
                current_replicas: case.current,
                desired_replicas: case.desired,
                min_replicas: case.min,
                max_replicas: case.max,
            };
            let (replicas, reason) = convert_desired_replicas_with_behavior_rate(
                proposal,
                &rules,
                &case.scale_up_events,
                &case.scale_down_events,
                now(),
            );
            assert_eq!(replicas, case.expected, "{}", case.name);
            assert_eq!(reason.reason, case.condition, "{}", case.name);
        }
    }

    /// Upstream's TestStoreScaleEvents table, for both directions.
    #[test]
    fn store_scale_events() {
        // name, change, previous events, expected events, rules, expected change in 60 s
        type Row = (
            &'static str,
            i32,
            Vec<ScaleEvent>,
            Vec<(i32, bool)>,
            Option<HPAScalingRules>,
            i32,
        );
        let r = generate_scaling_rules;
        let rows: Vec<Row> = vec![
            (
                "empty entries with default behavior",
                5,
                vec![],
                vec![],
                None,
                0,
            ),
            (
                "empty entries with two-policy-behavior",
                5,
                vec![],
                vec![(5, false)],
                Some(r(10, 60, 100, 60, 0)),
                0,
            ),
            (
                "one outdated entry to be kept untouched without behavior",
                5,
                vec![event(7, ago(61), false)],
                vec![(7, false)],
                None,
                0,
            ),
            (
                "one outdated entry to be replaced with behavior",
                5,
                vec![event(7, ago(61), false)],
                vec![(5, false)],
                Some(r(10, 60, 100, 60, 0)),
                0,
            ),
            (
                "one actual entry to be not touched with behavior",
                5,
                vec![event(7, ago(58), false)],
                vec![(7, false), (5, false)],
                Some(r(10, 60, 100, 60, 0)),
                7,
            ),
            (
                "two entries, one of them to be replaced",
                5,
                vec![event(7, ago(61), false), event(6, ago(59), false)],
                vec![(5, false), (6, false)],
                Some(r(10, 60, 0, 0, 0)),
                6,
            ),
            (
                "replace one entry, use policies with different periods",
                5,
                vec![
                    event(8, ago(29), false),
                    event(6, ago(59), false),
                    event(7, ago(61), false),
                    event(9, ago(61), false),
                ],
                vec![(8, false), (6, false), (7, true), (5, false)],
                Some(r(10, 60, 100, 30, 0)),
                14,
            ),
            (
                "two entries, both actual",
                5,
                vec![event(7, ago(58), false), event(6, ago(59), false)],
                vec![(7, false), (6, false), (5, false)],
                Some(r(10, 120, 100, 30, 0)),
                13,
            ),
        ];
        for (name, change, prev, expected, rules, expected_change) in rows {
            let summary = |events: &[ScaleEvent]| {
                events
                    .iter()
                    .map(|e| (e.change, e.outdated))
                    .collect::<Vec<_>>()
            };

            let behavior_up = rules.clone().map(|rules| HorizontalPodAutoscalerBehavior {
                scale_up: Some(rules),
                scale_down: None,
            });
            let mut up = History {
                scale_up_events: prev.clone(),
                ..History::default()
            };
            assert_eq!(
                replicas_change_per_period(60, &up.scale_up_events, now()),
                expected_change,
                "up: {name}"
            );
            store_scale_event(behavior_up.as_ref(), &mut up, 10, 10 + change, now());
            assert_eq!(summary(&up.scale_up_events), expected, "up: {name}");
            assert!(up.scale_down_events.is_empty(), "up: {name}");

            let behavior_down = rules.map(|rules| HorizontalPodAutoscalerBehavior {
                scale_up: None,
                scale_down: Some(rules),
            });
            let mut down = History {
                scale_down_events: prev,
                ..History::default()
            };
            assert_eq!(
                replicas_change_per_period(60, &down.scale_down_events, now()),
                expected_change,
                "down: {name}"
            );
            store_scale_event(behavior_down.as_ref(), &mut down, 10, 10 - change, now());
            assert_eq!(summary(&down.scale_down_events), expected, "down: {name}");
            assert!(down.scale_up_events.is_empty(), "down: {name}");
        }
    }

    /// Upstream's TestNormalizeDesiredReplicasWithBehavior table.
    #[test]
    fn normalize_desired_replicas_with_behavior() {
        struct Case {
            name: &'static str,
            recommendations: Vec<Recommendation>,
            current: i32,
            desired: i32,
            expected: i32,
            expected_recommendations: Option<Vec<i32>>,
            up_window: u64,
            down_window: u64,
        }
        let cases = vec![
            Case {
                name: "empty recommendations for scaling down",
                recommendations: vec![],
                current: 100,
                desired: 5,
                expected: 5,
                expected_recommendations: Some(vec![5]),
                up_window: 0,
                down_window: 0,
            },
            Case {
                name: "simple scale down stabilization",
                recommendations: vec![rec(4, ago(120)), rec(5, ago(60))],
                current: 100,
                desired: 3,
                expected: 5,
                expected_recommendations: Some(vec![4, 5, 3]),
                up_window: 0,
                down_window: 180,
            },
            Case {
                name: "simple scale up stabilization",
                recommendations: vec![rec(4, ago(120)), rec(5, ago(60))],
                current: 1,
                desired: 7,
                expected: 4,
                expected_recommendations: Some(vec![4, 5, 7]),
                up_window: 300,
                down_window: 0,
            },
            Case {
                name: "no scale down stabilization",
                recommendations: vec![rec(1, ago(120)), rec(2, ago(60))],
                current: 100,
                desired: 3,
                expected: 3,
                expected_recommendations: Some(vec![1, 2, 3]),
                up_window: 300,
                down_window: 0,
            },
            Case {
                name: "no scale up stabilization",
                recommendations: vec![rec(4, ago(120)), rec(5, ago(60))],
                current: 1,
                desired: 3,
                expected: 3,
                expected_recommendations: Some(vec![4, 5, 3]),
                up_window: 0,
                down_window: 300,
            },
            Case {
                name: "no scale down stabilization, reuse recommendation element",
                recommendations: vec![rec(10, ago(600)), rec(9, ago(540))],
                current: 100,
                desired: 3,
                expected: 3,
                expected_recommendations: Some(vec![10, 3]),
                up_window: 0,
                down_window: 0,
            },
            Case {
                name: "no scale up stabilization, reuse recommendation element",
                recommendations: vec![rec(10, ago(600)), rec(9, ago(540))],
                current: 1,
                desired: 100,
                expected: 100,
                expected_recommendations: Some(vec![10, 100]),
                up_window: 0,
                down_window: 0,
            },
            Case {
                name: "scale down stabilization, reuse one of obsolete recommendation element",
                recommendations: vec![
                    rec(10, ago(600)),
                    rec(4, ago(60)),
                    rec(5, ago(120)),
                    rec(9, ago(540)),
                ],
                current: 100,
                desired: 3,
                expected: 5,
                expected_recommendations: Some(vec![10, 4, 5, 3]),
                up_window: 0,
                down_window: 180,
            },
            Case {
                name: "scale up stabilization, reuse one of obsolete recommendation element",
                recommendations: vec![
                    rec(10, ago(6000)),
                    rec(6, ago(60)),
                    rec(5, ago(120)),
                    rec(9, ago(180)),
                ],
                current: 1,
                desired: 100,
                expected: 5,
                expected_recommendations: Some(vec![100, 6, 5, 9]),
                up_window: 300,
                down_window: 0,
            },
            Case {
                name: "scale up and down stabilization, do not scale up when prenormalized rec goes down",
                recommendations: vec![rec(2, ago(6000)), rec(3, ago(180))],
                current: 2,
                desired: 1,
                expected: 2,
                expected_recommendations: None,
                up_window: 300,
                down_window: 300,
            },
            Case {
                name: "scale up and down stabilization, do not scale down when prenormalized rec goes up",
                recommendations: vec![rec(2, ago(6000)), rec(1, ago(180))],
                current: 2,
                desired: 3,
                expected: 2,
                expected_recommendations: None,
                up_window: 300,
                down_window: 300,
            },
        ];
        for mut case in cases {
            let proposal = Proposal {
                current_replicas: case.current,
                desired_replicas: case.desired,
                min_replicas: 0,
                max_replicas: 0,
            };
            let (got, _) = stabilize_recommendation_with_behaviors(
                &mut case.recommendations,
                proposal,
                Duration::from_secs(case.up_window),
                Duration::from_secs(case.down_window),
                now(),
            );
            assert_eq!(got, case.expected, "{}", case.name);
            if let Some(expected) = case.expected_recommendations {
                let stored: Vec<i32> = case.recommendations.iter().map(|r| r.replicas).collect();
                assert_eq!(stored, expected, "{}", case.name);
            }
        }
    }

    /// Upstream's TestUpscaleCap and TestUpscaleCapGreaterThanMaxReplicas, from the replicas
    /// their metrics ask for (60) through the whole normalization.
    #[test]
    fn upscale_cap() {
        let behavior = HorizontalPodAutoscalerBehavior {
            scale_up: Some(generate_scaling_rules(0, 0, 700, 60, 0)),
            scale_down: None,
        };
        let proposal = |max| Proposal {
            current_replicas: 3,
            desired_replicas: 60,
            min_replicas: 1,
            max_replicas: max,
        };
        let mut history = History::default();
        let got = normalize_with_behaviors(
            &behavior,
            &mut history,
            proposal(100),
            DEFAULT_DOWNSCALE_STABILIZATION,
            now(),
        );
        assert_eq!(
            got,
            Normalized {
                replicas: 24,
                able_to_scale: READY_FOR_NEW_SCALE,
                scaling_limited: true,
                limit: SCALE_UP_LIMIT,
            }
        );

        let mut history = History::default();
        let got = normalize_with_behaviors(
            &behavior,
            &mut history,
            proposal(20),
            DEFAULT_DOWNSCALE_STABILIZATION,
            now(),
        );
        assert_eq!((got.replicas, got.limit), (20, TOO_MANY_REPLICAS));
    }

    /// The default scale-down window holds a drop for five minutes, then lets it through at
    /// the default rate; the rescale recorded in between counts against that rate.
    #[test]
    fn scale_down_stabilization_window_then_rate() {
        let behavior = HorizontalPodAutoscalerBehavior {
            scale_up: None,
            scale_down: Some(HPAScalingRules {
                policies: Some(vec![HPAScalingPolicy {
                    type_: "Pods".to_string(),
                    value: 2,
                    period_seconds: 60,
                }]),
                ..Default::default()
            }),
        };
        let mut history = History::default();
        let proposal = |current, desired| Proposal {
            current_replicas: current,
            desired_replicas: desired,
            min_replicas: 1,
            max_replicas: 20,
        };
        let first = normalize_with_behaviors(
            &behavior,
            &mut history,
            proposal(10, 10),
            DEFAULT_DOWNSCALE_STABILIZATION,
            ago(400),
        );
        assert_eq!(first.replicas, 10);
        let held = normalize_with_behaviors(
            &behavior,
            &mut history,
            proposal(10, 4),
            DEFAULT_DOWNSCALE_STABILIZATION,
            ago(200),
        );
        assert_eq!(
            (held.replicas, held.able_to_scale),
            (10, SCALE_DOWN_STABILIZED)
        );
        let released = normalize_with_behaviors(
            &behavior,
            &mut history,
            proposal(10, 4),
            DEFAULT_DOWNSCALE_STABILIZATION,
            ago(30),
        );
        assert_eq!((released.replicas, released.limit), (8, SCALE_DOWN_LIMIT));
        store_scale_event(Some(&behavior), &mut history, 10, 8, ago(30));
        let next = normalize_with_behaviors(
            &behavior,
            &mut history,
            proposal(8, 4),
            DEFAULT_DOWNSCALE_STABILIZATION,
            now(),
        );
        assert_eq!((next.replicas, next.limit), (8, SCALE_DOWN_LIMIT));
    }

    #[test]
    fn prune_drops_only_what_cannot_matter() {
        let rules = effective_rules(None, DEFAULT_DOWNSCALE_STABILIZATION);
        let mut history = History {
            recommendations: vec![rec(3, ago(301)), rec(4, ago(299))],
            scale_up_events: vec![event(1, ago(16), true), event(2, ago(14), false)],
            scale_down_events: vec![event(1, ago(15), false), event(2, ago(1), false)],
        };
        history.prune(&rules, now());
        assert_eq!(history.recommendations, vec![rec(4, ago(299))]);
        assert_eq!(history.scale_up_events, vec![event(2, ago(14), false)]);
        assert_eq!(history.scale_down_events, vec![event(2, ago(1), false)]);
    }
}
