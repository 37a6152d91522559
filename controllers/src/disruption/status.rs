//! A budget's arithmetic, apart from any API so it is tested as plain functions: upstream's
//! `getExpectedPodCount`, `countHealthyPods`, `buildDisruptedPodMap`, `updatePdbStatus` and
//! `failSafe`, with `pdbhelper`'s condition rules. The eviction API admits a disruption only
//! while `disruptionsAllowed` is positive, so every rounding and every "nothing to compare
//! against" case decides in favour of fewer disruptions.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::{
    PodDisruptionBudget, PodDisruptionBudgetSpec, PodDisruptionBudgetStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::util::pods::is_ready;

/// How long after its eviction a pod is expected to be seen deleting (upstream's
/// `DeletionTimeout`); until then it does not count as healthy.
pub const DELETION_TIMEOUT: SignedDuration = SignedDuration::from_secs(120);
/// The condition type and its reasons (upstream's policy/v1 constants).
pub const DISRUPTION_ALLOWED: &str = "DisruptionAllowed";
pub const SUFFICIENT_PODS: &str = "SufficientPods";
pub const INSUFFICIENT_PODS: &str = "InsufficientPods";
pub const SYNC_FAILED: &str = "SyncFailed";

/// Whether the budget is a share of its pods' controllers' scale (`maxUnavailable`, or
/// `minAvailable` as a percentage) rather than a count of the pods themselves.
pub fn needs_scale(spec: &PodDisruptionBudgetSpec) -> bool {
    spec.max_unavailable.is_some() || matches!(spec.min_available, Some(IntOrString::String(_)))
}

/// `value` of `total`: an int as it is, `N%` of `total` rounded up or down, anything else an
/// error (upstream's `intstr.GetScaledValueFromIntOrPercent`, messages included).
pub fn scaled_value(value: &IntOrString, total: i32, round_up: bool) -> Result<i32, String> {
    match value {
        IntOrString::Int(i) => Ok(*i),
        IntOrString::String(s) => {
            let Some(number) = s.strip_suffix('%') else {
                return Err(
                    "invalid value for IntOrString: invalid type: string is not a percentage"
                        .into(),
                );
            };
            let percent: i64 = number.parse().map_err(|_| {
                format!(
                    "invalid value for IntOrString: invalid value {s:?}: strconv.Atoi: parsing {number:?}: invalid syntax"
                )
            })?;
            // The same operations in the same order as upstream's float64 arithmetic.
            let scaled = percent as f64 * f64::from(total) / 100.0;
            Ok(if round_up {
                scaled.ceil()
            } else {
                scaled.floor()
            } as i32)
        }
    }
}

/// What the budget expects: `expected` pods, of which `desired_healthy` must stay healthy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub expected: i32,
    pub desired_healthy: i32,
}

/// Upstream's `getExpectedPodCount`: an integer `minAvailable` counts the `matching` pods; any
/// other budget is a share of `scale`, the summed scale of the pods' controllers (read only
/// when [`needs_scale`] says so). Percentages round up: a larger `maxUnavailable` for the
/// arithmetic, but upstream rounds `minAvailable` up too, which protects more pods.
pub fn expected_pod_count(
    spec: &PodDisruptionBudgetSpec,
    matching: usize,
    scale: i32,
) -> Result<Counts, String> {
    if let Some(max_unavailable) = &spec.max_unavailable {
        let unavailable = scaled_value(max_unavailable, scale, true)?;
        return Ok(Counts {
            expected: scale,
            desired_healthy: scale.saturating_sub(unavailable).max(0),
        });
    }
    match &spec.min_available {
        Some(IntOrString::Int(min)) => Ok(Counts {
            expected: i32::try_from(matching).unwrap_or(i32::MAX),
            desired_healthy: *min,
        }),
        Some(percent @ IntOrString::String(_)) => Ok(Counts {
            expected: scale,
            desired_healthy: scaled_value(percent, scale, true)?,
        }),
        None => Ok(Counts::default()),
    }
}

/// The recorded disruptions still pending, per upstream's `buildDisruptedPodMap`.
#[derive(Debug, Default)]
pub struct Disruptions<'a> {
    /// Evicted pods not yet seen deleting, within [`DELETION_TIMEOUT`] of their eviction.
    pub pending: BTreeMap<String, Time>,
    /// Evicted pods still not deleting after it: the eviction did not take.
    pub expired: Vec<&'a Pod>,
    /// When the first pending entry expires: the budget must be looked at again then.
    pub recheck: Option<Timestamp>,
}

/// Keeps the `recorded` disruptions whose pod is still there, not yet deleting, and evicted
/// less than [`DELETION_TIMEOUT`] ago; entries for pods gone or deleting are done with.
pub fn pending_disruptions<'a>(
    pods: &'a [Arc<Pod>],
    recorded: Option<&BTreeMap<String, Time>>,
    now: Timestamp,
) -> Disruptions<'a> {
    let mut result = Disruptions::default();
    let Some(recorded) = recorded else {
        return result;
    };
    for pod in pods {
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Some(evicted) = pod.metadata.name.as_ref().and_then(|n| recorded.get(n)) else {
            continue;
        };
        let expected_deletion = deletion_due(evicted);
        if expected_deletion < now {
            result.expired.push(pod);
        } else {
            if result.recheck.is_none_or(|r| expected_deletion < r) {
                result.recheck = Some(expected_deletion);
            }
            let name = pod.metadata.name.clone().unwrap_or_default();
            result.pending.insert(name, evicted.clone());
        }
    }
    result
}

/// When a pod evicted at `evicted` is expected to be deleting.
fn deletion_due(evicted: &Time) -> Timestamp {
    evicted
        .0
        .saturating_add(DELETION_TIMEOUT)
        .unwrap_or(Timestamp::MAX)
}

/// The time from `now` to `at`, none if it has passed.
pub fn until(now: Timestamp, at: Timestamp) -> Duration {
    Duration::try_from(at.duration_since(now)).unwrap_or(Duration::ZERO)
}

/// Upstream's `countHealthyPods`: Ready pods that are neither deleting nor about to be (an
/// eviction pending within [`DELETION_TIMEOUT`]).
pub fn count_healthy(pods: &[Arc<Pod>], pending: &BTreeMap<String, Time>, now: Timestamp) -> i32 {
    let healthy = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            p.metadata
                .name
                .as_ref()
                .and_then(|n| pending.get(n))
                .is_none_or(|t| deletion_due(t) <= now)
        })
        .filter(|p| is_ready(p))
        .count();
    i32::try_from(healthy).unwrap_or(i32::MAX)
}

/// apimachinery's `meta.SetStatusCondition`: the time of the last transition moves only when
/// the status does. Returns whether anything changed.
pub fn set_condition(conditions: &mut Vec<Condition>, new: Condition, now: Timestamp) -> bool {
    let Some(existing) = conditions.iter_mut().find(|c| c.type_ == new.type_) else {
        let mut new = new;
        if new.last_transition_time.0 == Timestamp::UNIX_EPOCH {
            new.last_transition_time = Time(now);
        }
        conditions.push(new);
        return true;
    };
    let mut changed = false;
    if existing.status != new.status {
        existing.status = new.status;
        existing.last_transition_time = if new.last_transition_time.0 == Timestamp::UNIX_EPOCH {
            Time(now)
        } else {
            new.last_transition_time
        };
        changed = true;
    }
    if existing.reason != new.reason {
        existing.reason = new.reason;
        changed = true;
    }
    if existing.message != new.message {
        existing.message = new.message;
        changed = true;
    }
    if existing.observed_generation.unwrap_or(0) != new.observed_generation.unwrap_or(0) {
        existing.observed_generation = new.observed_generation;
        changed = true;
    }
    changed
}

fn condition(status: &str, reason: &str, message: String, generation: Option<i64>) -> Condition {
    Condition {
        type_: DISRUPTION_ALLOWED.into(),
        status: status.into(),
        reason: reason.into(),
        message,
        observed_generation: generation,
        last_transition_time: Time(Timestamp::UNIX_EPOCH),
    }
}

/// pdbhelper's `ConditionsAreUpToDate`.
fn conditions_up_to_date(status: &PodDisruptionBudgetStatus, generation: i64) -> bool {
    let Some(c) = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == DISRUPTION_ALLOWED)
    else {
        return false;
    };
    if status.observed_generation.unwrap_or(0) != generation {
        return false;
    }
    if status.disruptions_allowed > 0 {
        c.status == "True" && c.reason == SUFFICIENT_PODS
    } else {
        c.status == "False" && c.reason == INSUFFICIENT_PODS
    }
}

/// What a sync observed.
#[derive(Debug, Default)]
pub struct Observed {
    pub counts: Counts,
    pub current_healthy: i32,
    pub disrupted_pods: BTreeMap<String, Time>,
}

/// Upstream's `updatePdbStatus`: the status to write, or `None` when the one there says it
/// all. A budget matching no pods allows no disruption, so the first pods of a new budget are
/// safe before the controller has counted them.
pub fn updated_status(
    pdb: &PodDisruptionBudget,
    observed: Observed,
    now: Timestamp,
) -> Option<PodDisruptionBudgetStatus> {
    let Observed {
        counts,
        current_healthy,
        disrupted_pods,
    } = observed;
    let mut allowed = current_healthy.saturating_sub(counts.desired_healthy);
    if counts.expected <= 0 || allowed <= 0 {
        allowed = 0;
    }
    let generation = pdb.metadata.generation.unwrap_or(0);
    let old = pdb.status.clone().unwrap_or_default();
    let empty = BTreeMap::new();
    if old.current_healthy == current_healthy
        && old.desired_healthy == counts.desired_healthy
        && old.expected_pods == counts.expected
        && old.disruptions_allowed == allowed
        && old.disrupted_pods.as_ref().unwrap_or(&empty) == &disrupted_pods
        && old.observed_generation.unwrap_or(0) == generation
        && conditions_up_to_date(&old, generation)
    {
        return None;
    }
    let mut status = PodDisruptionBudgetStatus {
        current_healthy,
        desired_healthy: counts.desired_healthy,
        expected_pods: counts.expected,
        disruptions_allowed: allowed,
        disrupted_pods: (!disrupted_pods.is_empty()).then_some(disrupted_pods),
        observed_generation: Some(generation),
        conditions: old.conditions,
    };
    // pdbhelper's `UpdateDisruptionAllowedCondition`.
    let c = if allowed > 0 {
        condition("True", SUFFICIENT_PODS, String::new(), Some(generation))
    } else {
        condition("False", INSUFFICIENT_PODS, String::new(), Some(generation))
    };
    set_condition(status.conditions.get_or_insert_with(Vec::new), c, now);
    Some(status)
}

/// Upstream's `failSafe`: when the budget cannot be computed, no disruption is allowed and the
/// condition says why. `None` when the status says so already.
pub fn fail_safe_status(
    pdb: &PodDisruptionBudget,
    message: &str,
    now: Timestamp,
) -> Option<PodDisruptionBudgetStatus> {
    let mut status = pdb.status.clone().unwrap_or_default();
    status.disruptions_allowed = 0;
    let c = condition(
        "False",
        SYNC_FAILED,
        message.to_string(),
        status.observed_generation,
    );
    set_condition(status.conditions.get_or_insert_with(Vec::new), c, now);
    (pdb.status.as_ref() != Some(&status)).then_some(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: serde_json::Value) -> PodDisruptionBudgetSpec {
        serde_json::from_value(json).unwrap()
    }

    fn pod(name: &str, ready: bool) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "default"},
                "status": {"conditions": [
                    {"type": "Ready", "status": if ready { "True" } else { "False" }},
                ]},
            }))
            .unwrap(),
        )
    }

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).unwrap()
    }

    fn pdb(generation: i64, status: Option<PodDisruptionBudgetStatus>) -> PodDisruptionBudget {
        let mut pdb: PodDisruptionBudget = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "b", "namespace": "default", "generation": generation},
            "spec": {"minAvailable": 2, "selector": {}},
        }))
        .unwrap();
        pdb.status = status;
        pdb
    }

    #[test]
    fn percentages_round_up_and_malformed_values_fail() {
        let pct = |s: &str| IntOrString::String(s.into());
        assert_eq!(scaled_value(&pct("34%"), 3, true), Ok(2));
        assert_eq!(scaled_value(&pct("34%"), 3, false), Ok(1));
        assert_eq!(scaled_value(&pct("50%"), 5, true), Ok(3));
        assert_eq!(scaled_value(&pct("0%"), 7, true), Ok(0));
        assert_eq!(scaled_value(&pct("100%"), 0, true), Ok(0));
        assert_eq!(scaled_value(&IntOrString::Int(4), 10, true), Ok(4));
        assert!(
            scaled_value(&pct("5"), 10, true)
                .unwrap_err()
                .contains("string is not a percentage")
        );
        assert!(
            scaled_value(&pct("x%"), 10, true)
                .unwrap_err()
                .contains("invalid value \"x%\"")
        );
    }

    #[test]
    fn expected_count_follows_the_kind_of_budget() {
        // An integer minAvailable counts the matching pods; the controllers' scale is unused.
        let min_int = spec(serde_json::json!({"minAvailable": 2}));
        assert!(!needs_scale(&min_int));
        assert_eq!(
            expected_pod_count(&min_int, 3, 99),
            Ok(Counts {
                expected: 3,
                desired_healthy: 2
            })
        );
        // A percentage minAvailable is a share of the scale, rounded up.
        let min_pct = spec(serde_json::json!({"minAvailable": "50%"}));
        assert!(needs_scale(&min_pct));
        assert_eq!(
            expected_pod_count(&min_pct, 2, 5),
            Ok(Counts {
                expected: 5,
                desired_healthy: 3
            })
        );
        // maxUnavailable: expected is the scale, desired what is left after the (rounded up)
        // allowance, never below zero.
        let max_pct = spec(serde_json::json!({"maxUnavailable": "34%"}));
        assert!(needs_scale(&max_pct));
        assert_eq!(
            expected_pod_count(&max_pct, 3, 3),
            Ok(Counts {
                expected: 3,
                desired_healthy: 1
            })
        );
        let max_int = spec(serde_json::json!({"maxUnavailable": 5}));
        assert_eq!(
            expected_pod_count(&max_int, 3, 3),
            Ok(Counts {
                expected: 3,
                desired_healthy: 0
            })
        );
        // maxUnavailable wins when both are set (validation forbids it).
        let both = spec(serde_json::json!({"maxUnavailable": 1, "minAvailable": 3}));
        assert_eq!(expected_pod_count(&both, 2, 4).unwrap().desired_healthy, 3);
        let neither = spec(serde_json::json!({}));
        assert_eq!(expected_pod_count(&neither, 3, 0), Ok(Counts::default()));
        assert!(
            expected_pod_count(&spec(serde_json::json!({"maxUnavailable": "1"})), 1, 1).is_err()
        );
    }

    #[test]
    fn disruptions_allowed_and_its_condition() {
        let observed = |current, expected, desired| Observed {
            counts: Counts {
                expected,
                desired_healthy: desired,
            },
            current_healthy: current,
            disrupted_pods: BTreeMap::new(),
        };
        let s = updated_status(&pdb(1, None), observed(3, 3, 2), at(0)).unwrap();
        assert_eq!(
            (
                s.current_healthy,
                s.desired_healthy,
                s.expected_pods,
                s.disruptions_allowed
            ),
            (3, 2, 3, 1)
        );
        assert_eq!(s.observed_generation, Some(1));
        let c = &s.conditions.as_ref().unwrap()[0];
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("True", SUFFICIENT_PODS)
        );
        assert_eq!(c.last_transition_time, Time(at(0)));
        // Unchanged: nothing to write.
        assert!(updated_status(&pdb(1, Some(s.clone())), observed(3, 3, 2), at(5)).is_none());
        // A new generation is written even when the numbers stay.
        let bumped = updated_status(&pdb(2, Some(s.clone())), observed(3, 3, 2), at(5)).unwrap();
        assert_eq!(bumped.observed_generation, Some(2));
        assert_eq!(
            bumped.conditions.as_ref().unwrap()[0].last_transition_time,
            Time(at(0))
        );
        // Too few healthy: none allowed, the condition flips and its time moves.
        let short = updated_status(&pdb(1, Some(s.clone())), observed(2, 3, 2), at(9)).unwrap();
        assert_eq!(short.disruptions_allowed, 0);
        let c = &short.conditions.as_ref().unwrap()[0];
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", INSUFFICIENT_PODS)
        );
        assert_eq!(c.last_transition_time, Time(at(9)));
        // No expected pods: none allowed, whatever the healthy count.
        assert_eq!(
            updated_status(&pdb(1, None), observed(3, 0, 0), at(0))
                .unwrap()
                .disruptions_allowed,
            0
        );
    }

    #[test]
    fn fail_safe_allows_nothing_and_says_why_once() {
        let s = updated_status(
            &pdb(1, None),
            Observed {
                counts: Counts {
                    expected: 3,
                    desired_healthy: 1,
                },
                current_healthy: 3,
                disrupted_pods: BTreeMap::new(),
            },
            at(0),
        )
        .unwrap();
        let failed = fail_safe_status(&pdb(1, Some(s)), "found no controllers", at(3)).unwrap();
        assert_eq!(failed.disruptions_allowed, 0);
        assert_eq!(failed.current_healthy, 3);
        let c = &failed.conditions.as_ref().unwrap()[0];
        assert_eq!(
            (c.status.as_str(), c.reason.as_str(), c.message.as_str()),
            ("False", SYNC_FAILED, "found no controllers")
        );
        assert_eq!(c.last_transition_time, Time(at(3)));
        assert!(
            fail_safe_status(&pdb(1, Some(failed.clone())), "found no controllers", at(4))
                .is_none()
        );
        // Recovered: the condition is rewritten though the numbers did not change.
        let recovered = updated_status(
            &pdb(1, Some(failed)),
            Observed {
                counts: Counts {
                    expected: 3,
                    desired_healthy: 3,
                },
                current_healthy: 3,
                disrupted_pods: BTreeMap::new(),
            },
            at(5),
        )
        .unwrap();
        let c = &recovered.conditions.as_ref().unwrap()[0];
        assert_eq!(
            (c.reason.as_str(), c.message.as_str()),
            (INSUFFICIENT_PODS, "")
        );
        // False before and after: the transition time stays.
        assert_eq!(c.last_transition_time, Time(at(3)));
    }

    #[test]
    fn evicted_pods_are_unhealthy_until_their_deletion_is_overdue() {
        let pods = vec![pod("a", true), pod("b", true), pod("c", false)];
        let mut deleting = (*pod("d", true)).clone();
        deleting.metadata.deletion_timestamp = Some(Time(at(0)));
        let pods = [pods, vec![Arc::new(deleting)]].concat();
        let recorded: BTreeMap<String, Time> = [
            ("a".to_string(), Time(at(0))),
            ("b".to_string(), Time(at(-200))),
            ("d".to_string(), Time(at(0))),
            ("gone".to_string(), Time(at(0))),
        ]
        .into();
        let d = pending_disruptions(&pods, Some(&recorded), at(30));
        // `a` is pending until 120 s after its eviction; `b` is overdue; `d` is deleting and
        // `gone` is gone: both done with.
        assert_eq!(d.pending.keys().collect::<Vec<_>>(), ["a"]);
        assert_eq!(
            d.expired
                .iter()
                .map(|p| p.metadata.name.as_deref().unwrap())
                .collect::<Vec<_>>(),
            ["b"]
        );
        assert_eq!(d.recheck, Some(at(120)));
        assert_eq!(until(at(30), at(120)), Duration::from_secs(90));
        assert_eq!(until(at(130), at(120)), Duration::ZERO);
        // Healthy: `b` only (`a` is being evicted, `c` is not ready, `d` is deleting).
        assert_eq!(count_healthy(&pods, &d.pending, at(30)), 1);
        assert_eq!(count_healthy(&pods, &BTreeMap::new(), at(30)), 2);
        // Past the timeout the entry is dropped and `a` counts again.
        let later = pending_disruptions(&pods, Some(&recorded), at(121));
        assert!(later.pending.is_empty() && later.recheck.is_none());
        assert_eq!(later.expired.len(), 2);
        assert!(pending_disruptions(&pods, None, at(0)).pending.is_empty());
    }
}
