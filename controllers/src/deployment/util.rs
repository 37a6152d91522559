//! The arithmetic and bookkeeping of upstream's `pkg/controller/deployment/util`: revision
//! annotations, the pod-template hash, surge and unavailability fenceposts, and conditions.
//! Kept free of I/O so every rule can be checked on its own.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

pub const REVISION_ANNOTATION: &str = "deployment.kubernetes.io/revision";
pub const REVISION_HISTORY_ANNOTATION: &str = "deployment.kubernetes.io/revision-history";
pub const DESIRED_REPLICAS_ANNOTATION: &str = "deployment.kubernetes.io/desired-replicas";
pub const MAX_REPLICAS_ANNOTATION: &str = "deployment.kubernetes.io/max-replicas";
const ROLLBACK_TO_ANNOTATION: &str = "deprecated.deployment.rollback.to";
const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";
/// The label that tells a Deployment's ReplicaSets (and their pods) apart.
pub const POD_TEMPLATE_HASH_LABEL: &str = "pod-template-hash";
/// Upstream's `maxRevHistoryLengthInChars`.
const MAX_REV_HISTORY_LENGTH: usize = 2000;

// Condition types and reasons, as upstream names them (kubectl matches on some).
pub const PROGRESSING: &str = "Progressing";
pub const AVAILABLE: &str = "Available";
pub const REPLICA_FAILURE: &str = "ReplicaFailure";
pub const NEW_RS_AVAILABLE_REASON: &str = "NewReplicaSetAvailable";
pub const REPLICA_SET_UPDATED_REASON: &str = "ReplicaSetUpdated";
pub const TIMED_OUT_REASON: &str = "ProgressDeadlineExceeded";
pub const NEW_RS_REASON: &str = "NewReplicaSetCreated";
pub const FOUND_NEW_RS_REASON: &str = "FoundNewReplicaSet";
pub const FAILED_RS_CREATE_REASON: &str = "ReplicaSetCreateError";
pub const PAUSED_REASON: &str = "DeploymentPaused";
pub const RESUMED_REASON: &str = "DeploymentResumed";
pub const MIN_AVAILABLE_REASON: &str = "MinimumReplicasAvailable";
pub const MIN_UNAVAILABLE_REASON: &str = "MinimumReplicasUnavailable";

pub fn spec_replicas(d: &Deployment) -> i32 {
    d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

pub fn rs_replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

pub fn set_rs_replicas(rs: &mut ReplicaSet, n: i32) {
    rs.spec.get_or_insert_with(Default::default).replicas = Some(n);
}

pub fn rs_available(rs: &ReplicaSet) -> i32 {
    rs.status
        .as_ref()
        .and_then(|s| s.available_replicas)
        .unwrap_or(0)
}

fn rs_actual(rs: &ReplicaSet) -> i32 {
    rs.status.as_ref().map(|s| s.replicas).unwrap_or(0)
}

fn rs_ready(rs: &ReplicaSet) -> i32 {
    rs.status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0)
}

/// Sum of `spec.replicas` (upstream's `GetReplicaCountForReplicaSets`).
pub fn replica_count<'a>(sets: impl IntoIterator<Item = &'a ReplicaSet>) -> i32 {
    sets.into_iter().map(rs_replicas).sum()
}

/// Sum of `status.replicas`.
pub fn actual_replica_count<'a>(sets: impl IntoIterator<Item = &'a ReplicaSet>) -> i32 {
    sets.into_iter().map(rs_actual).sum()
}

pub fn available_replica_count<'a>(sets: impl IntoIterator<Item = &'a ReplicaSet>) -> i32 {
    sets.into_iter().map(rs_available).sum()
}

fn ready_replica_count<'a>(sets: impl IntoIterator<Item = &'a ReplicaSet>) -> i32 {
    sets.into_iter().map(rs_ready).sum()
}

pub fn is_rolling_update(d: &Deployment) -> bool {
    strategy_type(d) == "RollingUpdate"
}

pub fn strategy_type(d: &Deployment) -> &str {
    d.spec
        .as_ref()
        .and_then(|s| s.strategy.as_ref())
        .and_then(|s| s.type_.as_deref())
        .unwrap_or("RollingUpdate")
}

/// `value` of `total`: an int as it is, `N%` rounded up or down (upstream's
/// `GetScaledValueFromIntOrPercent`). Malformed percentages count as 0.
pub fn scaled_value(value: Option<&IntOrString>, total: i32, round_up: bool) -> i32 {
    match value {
        None => 0,
        Some(IntOrString::Int(i)) => *i,
        Some(IntOrString::String(s)) => {
            let Some(p) = s.strip_suffix('%').and_then(|p| p.parse::<i64>().ok()) else {
                return s.parse().unwrap_or(0);
            };
            let v = p as f64 * total as f64 / 100.0;
            (if round_up { v.ceil() } else { v.floor() }) as i32
        }
    }
}

/// Upstream's `ResolveFenceposts`: surge rounds up, unavailability down, and both zero means
/// one unavailable so the rollout can move at all.
pub fn fenceposts(d: &Deployment) -> (i32, i32) {
    let ru = d
        .spec
        .as_ref()
        .and_then(|s| s.strategy.as_ref())
        .and_then(|s| s.rolling_update.as_ref());
    let desired = spec_replicas(d);
    let surge = scaled_value(ru.and_then(|r| r.max_surge.as_ref()), desired, true);
    let unavailable = scaled_value(ru.and_then(|r| r.max_unavailable.as_ref()), desired, false);
    if surge == 0 && unavailable == 0 {
        return (0, 1);
    }
    (surge, unavailable)
}

pub fn max_surge(d: &Deployment) -> i32 {
    if !is_rolling_update(d) {
        return 0;
    }
    fenceposts(d).0
}

pub fn max_unavailable(d: &Deployment) -> i32 {
    let replicas = spec_replicas(d);
    if !is_rolling_update(d) || replicas == 0 {
        return 0;
    }
    fenceposts(d).1.min(replicas)
}

pub use crate::util::hash::compute_hash;

/// JSON with empty maps, lists and nulls removed, as Go's semantic equality treats nil and
/// empty alike.
fn normalized(v: serde_json::Value) -> Option<serde_json::Value> {
    use serde_json::Value;
    match v {
        Value::Null => None,
        Value::Object(m) => {
            let m: serde_json::Map<String, Value> = m
                .into_iter()
                .filter_map(|(k, v)| normalized(v).map(|v| (k, v)))
                .collect();
            (!m.is_empty()).then_some(Value::Object(m))
        }
        Value::Array(a) => {
            let a: Vec<Value> = a
                .into_iter()
                .map(|v| normalized(v).unwrap_or(Value::Null))
                .collect();
            (!a.is_empty()).then_some(Value::Array(a))
        }
        v => Some(v),
    }
}

fn without_hash(t: &PodTemplateSpec) -> Option<serde_json::Value> {
    let mut t = t.clone();
    if let Some(labels) = t.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
        labels.remove(POD_TEMPLATE_HASH_LABEL);
    }
    normalized(serde_json::to_value(&t).unwrap_or_default())
}

/// Templates equal but for the hash label (upstream's `EqualIgnoreHash`).
pub fn equal_ignore_hash(a: &PodTemplateSpec, b: &PodTemplateSpec) -> bool {
    without_hash(a) == without_hash(b)
}

pub fn rs_template(rs: &ReplicaSet) -> PodTemplateSpec {
    rs.spec
        .as_ref()
        .and_then(|s| s.template.clone())
        .unwrap_or_default()
}

pub fn revision(rs: &ReplicaSet) -> i64 {
    rs.annotations()
        .get(REVISION_ANNOTATION)
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

pub fn max_revision<'a>(sets: impl IntoIterator<Item = &'a ReplicaSet>) -> i64 {
    sets.into_iter().map(revision).max().unwrap_or(0)
}

fn skip_copy(key: &str) -> bool {
    matches!(
        key,
        LAST_APPLIED_ANNOTATION
            | REVISION_ANNOTATION
            | REVISION_HISTORY_ANNOTATION
            | DESIRED_REPLICAS_ANNOTATION
            | MAX_REPLICAS_ANNOTATION
            | ROLLBACK_TO_ANNOTATION
    )
}

/// Sets the desired and max replicas annotations; whether anything changed.
pub fn set_replicas_annotations(rs: &mut ReplicaSet, desired: i32, max: i32) -> bool {
    let a = rs.metadata.annotations.get_or_insert_with(BTreeMap::new);
    let mut changed = false;
    for (k, v) in [
        (DESIRED_REPLICAS_ANNOTATION, desired),
        (MAX_REPLICAS_ANNOTATION, max),
    ] {
        let v = v.to_string();
        if a.get(k) != Some(&v) {
            a.insert(k.to_string(), v);
            changed = true;
        }
    }
    changed
}

/// Upstream's `SetNewReplicaSetAnnotations`: copies the Deployment's annotations, raises the
/// revision (keeping the replaced ones in the revision history, which is how a rollback to an
/// old ReplicaSet is recorded) and, for a new ReplicaSet, the replicas annotations.
pub fn set_new_rs_annotations(
    d: &Deployment,
    rs: &mut ReplicaSet,
    new_revision: i64,
    exists: bool,
) -> bool {
    let mut changed = false;
    let a = rs.metadata.annotations.get_or_insert_with(BTreeMap::new);
    for (k, v) in d.annotations() {
        if skip_copy(k) || a.get(k) == Some(v) {
            continue;
        }
        a.insert(k.clone(), v.clone());
        changed = true;
    }
    let old = a.get(REVISION_ANNOTATION).cloned();
    let old_int = match old.as_deref() {
        None | Some("") => 0,
        Some(s) => match s.parse::<i64>() {
            Ok(i) => i,
            Err(_) => return false,
        },
    };
    if old_int < new_revision {
        a.insert(REVISION_ANNOTATION.into(), new_revision.to_string());
        changed = true;
    }
    if let Some(old) = old.filter(|_| old_int < new_revision) {
        let history = a
            .get(REVISION_HISTORY_ANNOTATION)
            .cloned()
            .unwrap_or_default();
        if history.is_empty() {
            a.insert(REVISION_HISTORY_ANNOTATION.into(), old);
        } else {
            let mut revisions: Vec<&str> = history.split(',').collect();
            let mut total = history.len() + old.len() + 1;
            let mut start = 0;
            while total > MAX_REV_HISTORY_LENGTH && start < revisions.len() {
                total -= revisions[start].len() + 1;
                start += 1;
            }
            if total <= MAX_REV_HISTORY_LENGTH {
                revisions = revisions.split_off(start);
                revisions.push(&old);
                a.insert(REVISION_HISTORY_ANNOTATION.into(), revisions.join(","));
            }
        }
    }
    if !exists {
        let desired = spec_replicas(d);
        changed |= set_replicas_annotations(rs, desired, desired + max_surge(d));
    }
    changed
}

/// Whether a ReplicaSet has all the Deployment wants and all of it available.
pub fn is_saturated(d: &Deployment, rs: Option<&ReplicaSet>) -> bool {
    let Some(rs) = rs else {
        return false;
    };
    let Some(desired) = rs
        .annotations()
        .get(DESIRED_REPLICAS_ANNOTATION)
        .and_then(|v| v.parse::<i32>().ok())
    else {
        return false;
    };
    let want = spec_replicas(d);
    rs_replicas(rs) == want && desired == want && rs_available(rs) == want
}

pub fn has_progress_deadline(d: &Deployment) -> bool {
    d.spec
        .as_ref()
        .and_then(|s| s.progress_deadline_seconds)
        .is_some_and(|s| s != i32::MAX)
}

pub fn has_revision_history_limit(d: &Deployment) -> bool {
    d.spec
        .as_ref()
        .and_then(|s| s.revision_history_limit)
        .is_some_and(|l| l != i32::MAX)
}

pub fn condition<'a>(status: &'a DeploymentStatus, ty: &str) -> Option<&'a DeploymentCondition> {
    status.conditions.iter().flatten().find(|c| c.type_ == ty)
}

pub fn new_condition(ty: &str, status: &str, reason: &str, message: String) -> DeploymentCondition {
    let now = Some(Time(Timestamp::now()));
    DeploymentCondition {
        type_: ty.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message),
        last_update_time: now.clone(),
        last_transition_time: now,
    }
}

/// Upstream's `SetDeploymentCondition`: the same status and reason is no change; the same
/// status keeps its transition time.
pub fn set_condition(status: &mut DeploymentStatus, mut c: DeploymentCondition) {
    if let Some(current) = condition(status, &c.type_) {
        if current.status == c.status && current.reason == c.reason {
            return;
        }
        if current.status == c.status {
            c.last_transition_time = current.last_transition_time.clone();
        }
    }
    remove_condition(status, &c.type_);
    status.conditions.get_or_insert_with(Vec::new).push(c);
}

pub fn remove_condition(status: &mut DeploymentStatus, ty: &str) {
    if let Some(c) = status.conditions.as_mut() {
        c.retain(|c| c.type_ != ty);
    }
}

/// Everything the Deployment wants is there, updated and available, for its latest spec.
pub fn deployment_complete(d: &Deployment, status: &DeploymentStatus) -> bool {
    let want = spec_replicas(d);
    status.updated_replicas.unwrap_or(0) == want
        && status.replicas.unwrap_or(0) == want
        && status.available_replicas.unwrap_or(0) == want
        && status.observed_generation.unwrap_or(0) >= d.metadata.generation.unwrap_or(0)
}

/// More pods updated, fewer old ones, or more ready or available than last observed.
pub fn deployment_progressing(d: &Deployment, new: &DeploymentStatus) -> bool {
    let old = d.status.clone().unwrap_or_default();
    let old_old = old.replicas.unwrap_or(0) - old.updated_replicas.unwrap_or(0);
    let new_old = new.replicas.unwrap_or(0) - new.updated_replicas.unwrap_or(0);
    new.updated_replicas.unwrap_or(0) > old.updated_replicas.unwrap_or(0)
        || new_old < old_old
        || new.ready_replicas.unwrap_or(0) > old.ready_replicas.unwrap_or(0)
        || new.available_replicas.unwrap_or(0) > old.available_replicas.unwrap_or(0)
}

/// The last progress is older than `progressDeadlineSeconds`.
pub fn deployment_timed_out(d: &Deployment, status: &DeploymentStatus, now: Timestamp) -> bool {
    if !has_progress_deadline(d) {
        return false;
    }
    let Some(c) = condition(status, PROGRESSING) else {
        return false;
    };
    match c.reason.as_deref() {
        Some(NEW_RS_AVAILABLE_REASON) => return false,
        Some(TIMED_OUT_REASON) => return true,
        _ => {}
    }
    let Some(from) = c.last_update_time.as_ref() else {
        return false;
    };
    let deadline = d
        .spec
        .as_ref()
        .and_then(|s| s.progress_deadline_seconds)
        .unwrap_or(0);
    from.0 + k8s_openapi::jiff::SignedDuration::from_secs(i64::from(deadline)) < now
}

/// Upstream's `calculateStatus`: counts from the ReplicaSets and the Available condition.
pub fn calculate_status(
    all: &[&ReplicaSet],
    new_rs: Option<&ReplicaSet>,
    d: &Deployment,
) -> DeploymentStatus {
    let available = available_replica_count(all.iter().copied());
    let total = replica_count(all.iter().copied());
    let old = d.status.clone().unwrap_or_default();
    let mut status = DeploymentStatus {
        observed_generation: d.metadata.generation,
        replicas: Some(actual_replica_count(all.iter().copied())),
        updated_replicas: Some(actual_replica_count(new_rs)),
        ready_replicas: Some(ready_replica_count(all.iter().copied())),
        available_replicas: Some(available),
        unavailable_replicas: Some((total - available).max(0)),
        collision_count: old.collision_count,
        conditions: old.conditions.clone(),
        terminating_replicas: old.terminating_replicas,
    };
    if available >= spec_replicas(d) - max_unavailable(d) {
        set_condition(
            &mut status,
            new_condition(
                AVAILABLE,
                "True",
                MIN_AVAILABLE_REASON,
                "Deployment has minimum availability.".into(),
            ),
        );
    } else {
        set_condition(
            &mut status,
            new_condition(
                AVAILABLE,
                "False",
                MIN_UNAVAILABLE_REASON,
                "Deployment does not have minimum availability.".into(),
            ),
        );
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment};

    fn deployment(replicas: i32, surge: IntOrString, unavailable: IntOrString) -> Deployment {
        Deployment {
            spec: Some(DeploymentSpec {
                replicas: Some(replicas),
                strategy: Some(DeploymentStrategy {
                    type_: Some("RollingUpdate".into()),
                    rolling_update: Some(RollingUpdateDeployment {
                        max_surge: Some(surge),
                        max_unavailable: Some(unavailable),
                    }),
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn fenceposts_round_as_upstream() {
        let pct = |s: &str| IntOrString::String(s.into());
        // 25% of 10: surge rounds up to 3, unavailable down to 2.
        let d = deployment(10, pct("25%"), pct("25%"));
        assert_eq!(fenceposts(&d), (3, 2));
        assert_eq!((max_surge(&d), max_unavailable(&d)), (3, 2));
        // 25% of 1: surge 1, unavailable 0.
        let d = deployment(1, pct("25%"), pct("25%"));
        assert_eq!(fenceposts(&d), (1, 0));
        // Both zero: one may be unavailable.
        let d = deployment(3, IntOrString::Int(0), pct("10%"));
        assert_eq!(fenceposts(&d), (0, 1));
        // Unavailability is capped by the replicas.
        let d = deployment(2, IntOrString::Int(0), IntOrString::Int(5));
        assert_eq!(max_unavailable(&d), 2);
    }

    #[test]
    fn templates_equal_but_for_their_hash_label() {
        // The hash itself is tested where it lives (util::hash).
        let t: PodTemplateSpec = serde_json::from_value(serde_json::json!({
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
        }))
        .unwrap();
        let h = compute_hash(&t, None);
        let mut labelled = t.clone();
        labelled
            .metadata
            .as_mut()
            .unwrap()
            .labels
            .as_mut()
            .unwrap()
            .insert(POD_TEMPLATE_HASH_LABEL.into(), h);
        assert!(equal_ignore_hash(&t, &labelled));
        let mut other = t.clone();
        other.spec.as_mut().unwrap().containers[0].image = Some("busybox:1.37".into());
        assert!(!equal_ignore_hash(&t, &other));
    }

    #[test]
    fn revisions_move_to_history_when_an_old_set_comes_back() {
        let d = deployment(3, IntOrString::Int(1), IntOrString::Int(0));
        let mut rs = ReplicaSet::default();
        assert!(set_new_rs_annotations(&d, &mut rs, 1, false));
        assert_eq!(rs.annotations()[REVISION_ANNOTATION], "1");
        assert_eq!(rs.annotations()[DESIRED_REPLICAS_ANNOTATION], "3");
        assert_eq!(rs.annotations()[MAX_REPLICAS_ANNOTATION], "4");
        assert!(!set_new_rs_annotations(&d, &mut rs, 1, true));
        assert!(set_new_rs_annotations(&d, &mut rs, 3, true));
        assert!(set_new_rs_annotations(&d, &mut rs, 5, true));
        assert_eq!(rs.annotations()[REVISION_ANNOTATION], "5");
        assert_eq!(rs.annotations()[REVISION_HISTORY_ANNOTATION], "1,3");
    }
}
