//! A StatefulSet pod's identity (upstream's stateful_set_utils.go): its ordinal is in its name
//! `<set>-<ordinal>`, which is also its hostname, with the set's Service as its subdomain so
//! cluster DNS gives it a stable name; its claims are `<template>-<set>-<ordinal>`, so a pod
//! recreated under the same ordinal finds the same volumes.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, Pod, Volume,
};
use kube::ResourceExt;

use crate::util::controller_ref::controller_ref;
use crate::util::pods::{is_available, pod_from_template};
use k8s_openapi::jiff::Timestamp;

/// The pod's name (upstream's `StatefulSetPodNameLabel`).
pub const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
/// The pod's ordinal (upstream's `PodIndexLabel`).
pub const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";
/// The name of the revision a pod was made from (upstream's `StatefulSetRevisionLabel`).
pub const REVISION_LABEL: &str = "controller-revision-hash";

/// The parent's name and the ordinal of a name `<parent>-<ordinal>` (upstream's
/// `getParentNameAndOrdinal`: `(.*)-([0-9]+)$`); the ordinal is -1 when there is none.
pub fn parent_and_ordinal(name: &str) -> (&str, i32) {
    let Some((parent, digits)) = name.rsplit_once('-') else {
        return ("", -1);
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return ("", -1);
    }
    (parent, digits.parse::<i32>().unwrap_or(-1))
}

pub fn ordinal(pod: &Pod) -> i32 {
    parent_and_ordinal(pod.metadata.name.as_deref().unwrap_or_default()).1
}

/// Whether `pod` is named as one of `set`'s pods (upstream's `isMemberOf`).
pub fn is_member_of(set: &StatefulSet, pod: &Pod) -> bool {
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let (parent, ordinal) = parent_and_ordinal(name);
    ordinal >= 0 && parent == set.name_any()
}

pub fn replicas(set: &StatefulSet) -> i32 {
    set.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

/// The first ordinal (`spec.ordinals.start`, else 0).
pub fn start_ordinal(set: &StatefulSet) -> i32 {
    set.spec
        .as_ref()
        .and_then(|s| s.ordinals.as_ref())
        .and_then(|o| o.start)
        .unwrap_or(0)
}

/// The last ordinal, inclusive.
pub fn end_ordinal(set: &StatefulSet) -> i32 {
    start_ordinal(set) + replicas(set) - 1
}

/// Whether the pod's ordinal is one the set runs now (not one being scaled away).
pub fn in_ordinal_range(pod: &Pod, set: &StatefulSet) -> bool {
    let o = ordinal(pod);
    o >= start_ordinal(set) && o <= end_ordinal(set)
}

pub fn pod_name(set: &StatefulSet, ordinal: i32) -> String {
    format!("{}-{ordinal}", set.name_any())
}

pub fn claim_name(set: &StatefulSet, template: &PersistentVolumeClaim, ordinal: i32) -> String {
    format!("{}-{}-{ordinal}", template.name_any(), set.name_any())
}

/// Whether the pod has its identity: name, namespace and pod-name label (upstream's
/// `identityMatches`).
pub fn identity_matches(set: &StatefulSet, pod: &Pod) -> bool {
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let (parent, ordinal) = parent_and_ordinal(name);
    ordinal >= 0
        && parent == set.name_any()
        && name == pod_name(set, ordinal)
        && pod.metadata.namespace == set.metadata.namespace
        && pod.labels().get(POD_NAME_LABEL).map(String::as_str) == Some(name)
}

/// Sets the name, namespace and identity labels (upstream's `updateIdentity`).
pub fn update_identity(set: &StatefulSet, pod: &mut Pod) {
    let ordinal = ordinal(pod);
    let name = pod_name(set, ordinal);
    pod.metadata.name = Some(name.clone());
    pod.metadata.namespace = set.metadata.namespace.clone();
    let labels = pod.labels_mut();
    labels.insert(POD_NAME_LABEL.into(), name);
    labels.insert(POD_INDEX_LABEL.into(), ordinal.to_string());
}

/// The set's claims for the pod's ordinal, by template name, in template order (upstream's
/// `getPersistentVolumeClaims`): the template's labels and the selector's `matchLabels`.
pub fn claims_for(set: &StatefulSet, pod: &Pod) -> Vec<(String, PersistentVolumeClaim)> {
    let ordinal = ordinal(pod);
    let spec = set.spec.clone().unwrap_or_default();
    let match_labels = spec.selector.match_labels.clone().unwrap_or_default();
    spec.volume_claim_templates
        .unwrap_or_default()
        .into_iter()
        .map(|template| {
            let mut claim = template.clone();
            claim.metadata.name = Some(claim_name(set, &template, ordinal));
            claim.metadata.namespace = set.metadata.namespace.clone();
            let labels = claim.metadata.labels.get_or_insert_with(BTreeMap::new);
            labels.extend(match_labels.clone());
            claim.status = None;
            (template.name_any(), claim)
        })
        .collect()
}

/// Whether the pod mounts each of its claims under the template's name (upstream's
/// `storageMatches`).
pub fn storage_matches(set: &StatefulSet, pod: &Pod) -> bool {
    if ordinal(pod) < 0 {
        return false;
    }
    let volumes: &[Volume] = pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_deref())
        .unwrap_or_default();
    claims_for(set, pod).iter().all(|(template, claim)| {
        volumes.iter().any(|v| {
            v.name == *template
                && v.persistent_volume_claim
                    .as_ref()
                    .is_some_and(|c| Some(&c.claim_name) == claim.metadata.name.as_ref())
        })
    })
}

/// Mounts the pod's claims, replacing template volumes of the same names (upstream's
/// `updateStorage`).
pub fn update_storage(set: &StatefulSet, pod: &mut Pod) {
    let claims = claims_for(set, pod);
    let spec = pod.spec.get_or_insert_with(Default::default);
    let current = spec.volumes.take().unwrap_or_default();
    let mut volumes: Vec<Volume> = claims
        .iter()
        .map(|(template, claim)| Volume {
            name: template.clone(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim.name_any(),
                read_only: Some(false),
            }),
            ..Default::default()
        })
        .collect();
    volumes.extend(
        current
            .into_iter()
            .filter(|v| !claims.iter().any(|(t, _)| *t == v.name)),
    );
    spec.volumes = (!volumes.is_empty()).then_some(volumes);
}

/// A new pod of `set` for `ordinal` (upstream's `newStatefulSetPod`): from the template, with
/// the controller reference, its identity, hostname and subdomain, and its claims mounted.
pub fn new_pod(set: &StatefulSet, ordinal: i32) -> Pod {
    let spec = set.spec.clone().unwrap_or_default();
    let mut pod = pod_from_template(
        &spec.template,
        &set.namespace().unwrap_or_default(),
        &set.name_any(),
        controller_ref(set),
    );
    pod.metadata.generate_name = None;
    pod.metadata.name = Some(pod_name(set, ordinal));
    update_identity(set, &mut pod);
    let pod_spec = pod.spec.get_or_insert_with(Default::default);
    pod_spec.hostname = Some(pod_name(set, ordinal));
    pod_spec.subdomain =
        Some(spec.service_name.clone().unwrap_or_default()).filter(|s| !s.is_empty());
    update_storage(set, &mut pod);
    pod
}

pub fn revision_of(pod: &Pod) -> &str {
    pod.labels().get(REVISION_LABEL).map_or("", String::as_str)
}

pub fn set_revision(pod: &mut Pod, revision: &str) {
    pod.labels_mut()
        .insert(REVISION_LABEL.into(), revision.to_string());
}

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default()
}

/// Created in the API (upstream's `isCreated`: the server set a phase).
pub fn is_created(pod: &Pod) -> bool {
    !phase(pod).is_empty()
}

pub fn is_pending(pod: &Pod) -> bool {
    phase(pod) == "Pending"
}

pub fn is_failed(pod: &Pod) -> bool {
    phase(pod) == "Failed"
}

pub fn is_succeeded(pod: &Pod) -> bool {
    phase(pod) == "Succeeded"
}

/// Being deleted (upstream's StatefulSet `isTerminating`: any deletion timestamp).
pub fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

pub fn is_running_and_ready(pod: &Pod) -> bool {
    phase(pod) == "Running" && crate::util::pods::is_ready(pod)
}

pub fn is_running_and_available(pod: &Pod, min_ready_seconds: i32, now: Timestamp) -> bool {
    phase(pod) == "Running" && is_available(pod, min_ready_seconds, now)
}

/// Running, ready and not being deleted.
pub fn is_healthy(pod: &Pod) -> bool {
    is_running_and_ready(pod) && !is_terminating(pod)
}

/// Not available for `minReadySeconds`, or being deleted (upstream's `isUnavailable`).
pub fn is_unavailable(pod: &Pod, min_ready_seconds: i32, now: Timestamp) -> bool {
    !is_running_and_available(pod, min_ready_seconds, now) || is_terminating(pod)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::statefulset::testing::set;

    #[test]
    fn ordinals_are_parsed_from_names() {
        assert_eq!(parent_and_ordinal("web-0"), ("web", 0));
        assert_eq!(parent_and_ordinal("my-web-12"), ("my-web", 12));
        assert_eq!(parent_and_ordinal("web"), ("", -1));
        assert_eq!(parent_and_ordinal("web-x"), ("", -1));
        assert_eq!(parent_and_ordinal("web-"), ("", -1));
        assert_eq!(parent_and_ordinal("web-99999999999").1, -1);
    }

    #[test]
    fn a_new_pod_has_its_identity_and_claims() {
        let s = set(serde_json::json!({}));
        let pod = new_pod(&s, 2);
        assert_eq!(pod.name_any(), "web-2");
        assert_eq!(pod.metadata.generate_name, None);
        assert_eq!(pod.labels()[POD_NAME_LABEL], "web-2");
        assert_eq!(pod.labels()[POD_INDEX_LABEL], "2");
        assert_eq!(pod.labels()["app"], "web");
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.hostname.as_deref(), Some("web-2"));
        assert_eq!(spec.subdomain.as_deref(), Some("nginx"));
        // The claim replaces the template's volume of the same name; others stay.
        let volumes = spec.volumes.as_ref().unwrap();
        assert_eq!(volumes.len(), 2);
        assert_eq!(volumes[0].name, "www");
        assert_eq!(
            volumes[0]
                .persistent_volume_claim
                .as_ref()
                .unwrap()
                .claim_name,
            "www-web-2"
        );
        assert_eq!(volumes[1].name, "tmp");
        assert_eq!(pod.owner_references()[0].kind, "StatefulSet");
        assert!(identity_matches(&s, &pod));
        assert!(storage_matches(&s, &pod));
        assert!(is_member_of(&s, &pod));

        let claims = claims_for(&s, &pod);
        assert_eq!(claims.len(), 1);
        let claim = &claims[0].1;
        assert_eq!(claim.name_any(), "www-web-2");
        assert_eq!(claim.namespace().as_deref(), Some("ns"));
        assert_eq!(claim.labels()["tier"], "data");
        assert_eq!(claim.labels()["app"], "web");
    }

    #[test]
    fn identity_and_storage_mismatches_are_seen() {
        let s = set(serde_json::json!({}));
        let mut pod = new_pod(&s, 1);
        pod.labels_mut().remove(POD_NAME_LABEL);
        assert!(!identity_matches(&s, &pod));
        update_identity(&s, &mut pod);
        assert!(identity_matches(&s, &pod));
        pod.spec.as_mut().unwrap().volumes = None;
        assert!(!storage_matches(&s, &pod));
        update_storage(&s, &mut pod);
        assert!(storage_matches(&s, &pod));
        let other: Pod =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "webx-1"}})).unwrap();
        assert!(!is_member_of(&s, &other));
    }

    #[test]
    fn ordinal_range_follows_start_and_replicas() {
        let s = set(serde_json::json!({"spec": {"ordinals": {"start": 5}, "replicas": 2}}));
        assert_eq!((start_ordinal(&s), end_ordinal(&s)), (5, 6));
        assert!(in_ordinal_range(&new_pod(&s, 6), &s));
        assert!(!in_ordinal_range(&new_pod(&s, 7), &s));
        assert!(!in_ordinal_range(&new_pod(&s, 4), &s));
    }
}
