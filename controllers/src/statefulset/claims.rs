//! A StatefulSet's claims and their retention policy, as upstream: claims are created before
//! their pod and never deleted by this controller. `persistentVolumeClaimRetentionPolicy`
//! works through owner references that the garbage collector follows: a controller reference
//! to the set when `whenDeleted` is Delete (the claim goes with the set), and to the pod when
//! `whenScaled` is Delete and the pod's ordinal is being scaled away (the claim goes with the
//! pod). Claims owned by another controller, or by an earlier set or pod of the same name, are
//! left alone.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, PostParams};
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};

use super::Ctx;
use super::identity::{claim_name, claims_for, in_ordinal_range, ordinal};
use crate::util::controller_ref::controller_ref;
use crate::util::events::record;
use crate::util::reconciler::Error;

/// Claims of the set's namespace by name, as the cache holds them.
pub type Claims = HashMap<String, Arc<PersistentVolumeClaim>>;

const RETAIN: &str = "Retain";
const DELETE: &str = "Delete";

/// `(whenDeleted, whenScaled)`, Retain where unset.
fn policy(set: &StatefulSet) -> (&str, &str) {
    let p = set
        .spec
        .as_ref()
        .and_then(|s| s.persistent_volume_claim_retention_policy.as_ref());
    (
        p.and_then(|p| p.when_deleted.as_deref()).unwrap_or(RETAIN),
        p.and_then(|p| p.when_scaled.as_deref()).unwrap_or(RETAIN),
    )
}

/// Whether `whenScaled` is Delete.
pub fn deletes_when_scaled(set: &StatefulSet) -> bool {
    policy(set).1 == DELETE
}

/// Whether `r` names `obj` by kind, apiVersion and name (upstream's `matchesRef`).
fn matches_ref<K: Resource<DynamicType = ()>>(r: &OwnerReference, obj: &K) -> bool {
    r.api_version == K::api_version(&()) && r.kind == K::kind(&()) && r.name == obj.name_any()
}

fn has_owner_ref(claim: &PersistentVolumeClaim, uid: Option<String>) -> bool {
    let Some(uid) = uid else { return false };
    claim.owner_references().iter().any(|r| r.uid == uid)
}

/// A reference to `obj` by name whose UID is another's: a set or pod of the same name from
/// before (upstream's `hasStaleOwnerRef`).
fn has_stale_owner_ref<K: Resource<DynamicType = ()>>(
    claim: &PersistentVolumeClaim,
    obj: &K,
) -> bool {
    claim
        .owner_references()
        .iter()
        .find(|r| matches_ref(r, obj))
        .is_some_and(|r| Some(&r.uid) != obj.meta().uid.as_ref())
}

/// A controller of the claim other than the set and the pod (upstream's
/// `hasUnexpectedController`); under Retain/Retain any controller is fine.
fn has_unexpected_controller(claim: &PersistentVolumeClaim, set: &StatefulSet, pod: &Pod) -> bool {
    if policy(set) == (RETAIN, RETAIN) {
        return false;
    }
    for r in claim.owner_references() {
        if matches_ref(r, set) {
            if Some(&r.uid) != set.metadata.uid.as_ref() {
                return true;
            }
            continue;
        }
        if matches_ref(r, pod) {
            if Some(&r.uid) != pod.metadata.uid.as_ref() {
                return true;
            }
            continue;
        }
        if r.controller == Some(true) {
            return true;
        }
    }
    false
}

/// The set or pod owns the claim without being its controller.
fn has_non_controller_owner(claim: &PersistentVolumeClaim, set: &StatefulSet, pod: &Pod) -> bool {
    claim.owner_references().iter().any(|r| {
        (Some(&r.uid) == set.metadata.uid.as_ref() || Some(&r.uid) == pod.metadata.uid.as_ref())
            && r.controller != Some(true)
    })
}

/// Whether the claim's owner references already say what the policy wants (upstream's
/// `isClaimOwnerUpToDate`).
pub fn claim_owner_up_to_date(claim: &PersistentVolumeClaim, set: &StatefulSet, pod: &Pod) -> bool {
    if has_stale_owner_ref(claim, set) || has_stale_owner_ref(claim, pod) {
        return true;
    }
    let set_ref = has_owner_ref(claim, set.uid());
    let pod_ref = has_owner_ref(claim, pod.uid());
    if has_unexpected_controller(claim, set, pod) {
        return !(set_ref || pod_ref);
    }
    if has_non_controller_owner(claim, set, pod) {
        return false;
    }
    let scaled_down = !in_ordinal_range(pod, set);
    match policy(set) {
        (DELETE, RETAIN) => set_ref && !pod_ref,
        (RETAIN, DELETE) => !set_ref && scaled_down == pod_ref,
        (DELETE, DELETE) => scaled_down != set_ref && scaled_down == pod_ref,
        _ => !set_ref && !pod_ref,
    }
}

/// Rewrites the claim's references to the set and pod as the policy wants (upstream's
/// `updateClaimOwnerRefForSetAndPod`).
pub fn update_claim_owner_refs(claim: &mut PersistentVolumeClaim, set: &StatefulSet, pod: &Pod) {
    let unexpected = has_unexpected_controller(claim, set, pod);
    let mut refs: Vec<OwnerReference> = claim
        .owner_references()
        .iter()
        .filter(|r| !matches_ref(r, set) && !matches_ref(r, pod))
        .cloned()
        .collect();
    if !unexpected {
        let scaled_down = !in_ordinal_range(pod, set);
        let (set_ref, pod_ref) = match policy(set) {
            (DELETE, RETAIN) => (true, false),
            (RETAIN, DELETE) => (false, scaled_down),
            (DELETE, DELETE) => (!scaled_down, scaled_down),
            _ => (false, false),
        };
        if set_ref {
            refs.push(controller_ref(set));
        }
        if pod_ref {
            refs.push(controller_ref(pod));
        }
    }
    claim.metadata.owner_references = (!refs.is_empty()).then_some(refs);
}

/// Whether every existing claim of the pod's ordinal has the references the policy wants
/// (upstream's `ClaimsMatchRetentionPolicy`); missing claims are picked up later.
pub fn claims_match_policy(set: &StatefulSet, pod: &Pod, claims: &Claims) -> bool {
    let ordinal = ordinal(pod);
    templates(set).iter().all(|t| {
        claims
            .get(&claim_name(set, t, ordinal))
            .is_none_or(|c| claim_owner_up_to_date(c, set, pod))
    })
}

/// Under `whenScaled: Delete`, a claim owned by an earlier pod of this name is stale: the
/// garbage collector is about to delete it, so the new pod must wait (upstream's
/// `PodClaimIsStale`).
pub fn pod_claim_is_stale(set: &StatefulSet, pod: &Pod, claims: &Claims) -> bool {
    if !deletes_when_scaled(set) {
        return false;
    }
    claims_for(set, pod).iter().any(|(_, claim)| {
        claims.get(&claim.name_any()).is_some_and(|c| {
            c.owner_references()
                .iter()
                .any(|r| r.name == pod.name_any() && Some(&r.uid) != pod.metadata.uid.as_ref())
        })
    })
}

/// Whether a claim of the pod's ordinal is missing from the cache.
pub fn claims_missing(set: &StatefulSet, pod: &Pod, claims: &Claims) -> bool {
    claims_for(set, pod)
        .iter()
        .any(|(_, c)| !claims.contains_key(&c.name_any()))
}

fn templates(set: &StatefulSet) -> Vec<PersistentVolumeClaim> {
    set.spec
        .as_ref()
        .and_then(|s| s.volume_claim_templates.clone())
        .unwrap_or_default()
}

/// Creates the pod's claims that do not exist yet (upstream's `createPersistentVolumeClaims`);
/// a claim being deleted is an error, as it cannot serve the new pod.
pub async fn create_claims(
    ctx: &Ctx,
    set: &StatefulSet,
    pod: &Pod,
    claims: &Claims,
) -> Result<(), Error> {
    let api: Api<PersistentVolumeClaim> =
        Api::namespaced(ctx.client.clone(), &set.namespace().unwrap_or_default());
    let mut errors = Vec::new();
    for (_, claim) in claims_for(set, pod) {
        let name = claim.name_any();
        match claims.get(&name) {
            Some(existing) => {
                if existing.metadata.deletion_timestamp.is_some() {
                    errors.push(format!("pvc {name} is being deleted"));
                }
            }
            None => match api.create(&PostParams::default(), &claim).await {
                Ok(_) => {
                    claim_event(ctx, set, pod, &name, None).await;
                }
                Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "AlreadyExists" => {}
                Err(e) => {
                    claim_event(ctx, set, pod, &name, Some(&e.to_string())).await;
                    errors.push(format!("failed to create PVC {name}: {e}"));
                }
            },
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(Error::failed(errors.join(", ")))
    }
}

async fn claim_event(ctx: &Ctx, set: &StatefulSet, pod: &Pod, claim: &str, error: Option<&str>) {
    let (set_name, pod_name) = (set.name_any(), pod.name_any());
    let (type_, reason, note) = match error {
        None => (
            EventType::Normal,
            "SuccessfulCreate",
            format!("create Claim {claim} Pod {pod_name} in StatefulSet {set_name} success"),
        ),
        Some(e) => (
            EventType::Warning,
            "FailedCreate",
            format!(
                "create Claim {claim} for Pod {pod_name} in StatefulSet {set_name} failed error: {e}"
            ),
        ),
    };
    record(&ctx.recorder, set, type_, reason, note, None).await;
}

/// Writes the owner references the policy wants on each existing claim of the pod's ordinal
/// (upstream's `UpdatePodClaimForRetentionPolicy`); the write carries the claim's
/// resourceVersion.
pub async fn update_claims_for_policy(
    ctx: &Ctx,
    set: &StatefulSet,
    pod: &Pod,
    claims: &Claims,
) -> Result<(), Error> {
    let api: Api<PersistentVolumeClaim> =
        Api::namespaced(ctx.client.clone(), &set.namespace().unwrap_or_default());
    let ordinal = ordinal(pod);
    for template in templates(set) {
        let name = claim_name(set, &template, ordinal);
        let Some(claim) = claims.get(&name) else {
            tracing::debug!(claim = %name, "expected claim missing, continuing to pick up in next iteration");
            continue;
        };
        if claim_owner_up_to_date(claim, set, pod) {
            continue;
        }
        let mut updated = (**claim).clone();
        update_claim_owner_refs(&mut updated, set, pod);
        if updated.metadata.owner_references != claim.metadata.owner_references {
            api.replace(&name, &PostParams::default(), &updated)
                .await
                .map_err(|e| match e {
                    kube::Error::Api(s) if s.code == 409 => kube::Error::Api(s).into(),
                    e => Error::failed(format!(
                        "could not update claim {name} for delete policy ownerRefs: {e}"
                    )),
                })?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::statefulset::identity::new_pod;
    use crate::statefulset::testing::set;

    fn with_policy(deleted: &str, scaled: &str, replicas: i32) -> StatefulSet {
        set(serde_json::json!({"spec": {"replicas": replicas,
            "persistentVolumeClaimRetentionPolicy": {"whenDeleted": deleted, "whenScaled": scaled}}}))
    }

    fn created_pod(s: &StatefulSet, ordinal: i32) -> Pod {
        let mut p = new_pod(s, ordinal);
        p.metadata.uid = Some(format!("pod-uid-{ordinal}"));
        p
    }

    fn claim(s: &StatefulSet, pod: &Pod) -> PersistentVolumeClaim {
        claims_for(s, pod).remove(0).1
    }

    fn owners(c: &PersistentVolumeClaim) -> Vec<(String, bool)> {
        c.owner_references()
            .iter()
            .map(|r| (r.kind.clone(), r.controller == Some(true)))
            .collect()
    }

    #[test]
    fn retain_retain_wants_no_references() {
        let s = with_policy("Retain", "Retain", 3);
        let pod = created_pod(&s, 1);
        let mut c = claim(&s, &pod);
        assert!(claim_owner_up_to_date(&c, &s, &pod));
        c.metadata.owner_references = Some(vec![controller_ref(&s)]);
        assert!(!claim_owner_up_to_date(&c, &s, &pod));
        update_claim_owner_refs(&mut c, &s, &pod);
        assert!(owners(&c).is_empty());
    }

    #[test]
    fn when_deleted_delete_refers_to_the_set() {
        let s = with_policy("Delete", "Retain", 3);
        let pod = created_pod(&s, 1);
        let mut c = claim(&s, &pod);
        assert!(!claim_owner_up_to_date(&c, &s, &pod));
        update_claim_owner_refs(&mut c, &s, &pod);
        assert_eq!(owners(&c), [("StatefulSet".to_string(), true)]);
        assert!(claim_owner_up_to_date(&c, &s, &pod));
    }

    #[test]
    fn when_scaled_delete_refers_to_the_pod_only_once_it_is_scaled_away() {
        let s = with_policy("Retain", "Delete", 3);
        let kept = created_pod(&s, 2);
        let mut c = claim(&s, &kept);
        assert!(claim_owner_up_to_date(&c, &s, &kept));
        let scaled = with_policy("Retain", "Delete", 2);
        assert!(!claim_owner_up_to_date(&c, &scaled, &kept));
        update_claim_owner_refs(&mut c, &scaled, &kept);
        assert_eq!(owners(&c), [("Pod".to_string(), true)]);
        // Scaled up again: the pod reference goes.
        assert!(!claim_owner_up_to_date(&c, &s, &kept));
        update_claim_owner_refs(&mut c, &s, &kept);
        assert!(owners(&c).is_empty());
    }

    #[test]
    fn delete_delete_moves_the_reference_from_set_to_pod() {
        let s = with_policy("Delete", "Delete", 3);
        let pod = created_pod(&s, 2);
        let mut c = claim(&s, &pod);
        update_claim_owner_refs(&mut c, &s, &pod);
        assert_eq!(owners(&c), [("StatefulSet".to_string(), true)]);
        let scaled = with_policy("Delete", "Delete", 2);
        assert!(!claim_owner_up_to_date(&c, &scaled, &pod));
        update_claim_owner_refs(&mut c, &scaled, &pod);
        assert_eq!(owners(&c), [("Pod".to_string(), true)]);
        assert!(claim_owner_up_to_date(&c, &scaled, &pod));
    }

    #[test]
    fn claims_of_other_controllers_or_earlier_owners_are_left_alone() {
        let s = with_policy("Delete", "Retain", 3);
        let pod = created_pod(&s, 0);
        let mut c = claim(&s, &pod);
        c.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "example.com/v1".into(),
            kind: "Database".into(),
            name: "db".into(),
            uid: "other".into(),
            controller: Some(true),
            ..Default::default()
        }]);
        assert!(claim_owner_up_to_date(&c, &s, &pod));
        let mut stale = claim(&s, &pod);
        let mut old = controller_ref(&s);
        old.uid = "old-set".into();
        stale.metadata.owner_references = Some(vec![old]);
        assert!(claim_owner_up_to_date(&stale, &s, &pod));
    }

    #[test]
    fn a_claim_of_an_earlier_pod_is_stale_under_when_scaled_delete() {
        let s = with_policy("Retain", "Delete", 3);
        let pod = new_pod(&s, 1);
        let mut c = claim(&s, &pod);
        let mut old = controller_ref(&created_pod(&s, 1));
        old.uid = "earlier".into();
        c.metadata.owner_references = Some(vec![old]);
        let claims: Claims = [(c.name_any(), Arc::new(c))].into();
        assert!(pod_claim_is_stale(&s, &pod, &claims));
        assert!(!pod_claim_is_stale(
            &with_policy("Retain", "Retain", 3),
            &pod,
            &claims
        ));
        assert!(!claims_missing(&s, &pod, &claims));
        assert!(claims_missing(&s, &new_pod(&s, 2), &claims));
    }
}
