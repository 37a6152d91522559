use std::sync::Arc;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::{Timestamp, ToSpan};
use kube::ResourceExt;

use super::*;
use crate::statefulset::claims::Claims;
use crate::statefulset::identity::set_revision;
use crate::statefulset::testing::set;

const OLD: &str = "web-old";
const NEW: &str = "web-new";

fn now() -> Timestamp {
    Timestamp::from_second(1_000_000).unwrap()
}

/// A pod of `s` as the cache holds it: created, in `phase`, Ready since an hour if `ready`.
fn pod(s: &StatefulSet, ordinal: i32, revision: &str, phase: &str, ready: bool) -> Arc<Pod> {
    let mut p = new_pod(s, ordinal);
    set_revision(&mut p, revision);
    p.metadata.uid = Some(format!("uid-{ordinal}"));
    p.status = Some(PodStatus {
        phase: Some(phase.into()),
        conditions: Some(vec![PodCondition {
            type_: "Ready".into(),
            status: if ready { "True" } else { "False" }.into(),
            last_transition_time: Some(Time(now() - 1.hours())),
            ..Default::default()
        }]),
        ..Default::default()
    });
    Arc::new(p)
}

fn ready(s: &StatefulSet, ordinal: i32, revision: &str) -> Arc<Pod> {
    pod(s, ordinal, revision, "Running", true)
}

fn terminating(p: Arc<Pod>) -> Arc<Pod> {
    let mut p = (*p).clone();
    p.metadata.deletion_timestamp = Some(Time(now()));
    Arc::new(p)
}

fn run(s: &StatefulSet, pods: &[Arc<Pod>]) -> Plan {
    run_with(s, pods, &Claims::new())
}

fn run_with(s: &StatefulSet, pods: &[Arc<Pod>], claims: &Claims) -> Plan {
    plan(&Input {
        set: s,
        current_set: s,
        update_set: s,
        current_revision: OLD,
        update_revision: NEW,
        collision_count: 0,
        pods,
        claims,
        now: now(),
    })
}

/// The steps as `verb pod`.
fn steps(p: &Plan) -> Vec<String> {
    p.steps
        .iter()
        .map(|s| {
            let verb = match s {
                Step::DeleteFinished(_) => "delete-finished",
                Step::Create(_) => "create",
                Step::CreateMissingClaims(_) => "claims",
                Step::Update(_) => "update",
                Step::FixClaims(_) => "fix-claims",
                Step::ScaleDown(_) => "scale-down",
                Step::RollingDelete(_) => "rolling-delete",
            };
            format!("{verb} {}", s.pod_name())
        })
        .collect()
}

fn parallel(patch: serde_json::Value) -> StatefulSet {
    let mut s = set(patch);
    s.spec.as_mut().unwrap().pod_management_policy = Some("Parallel".into());
    s
}

#[test]
fn ordered_ready_creates_one_pod_after_the_previous_is_ready() {
    let s = set(serde_json::json!({"spec": {"volumeClaimTemplates": null}}));
    assert_eq!(steps(&run(&s, &[])), ["create web-0"]);
    // web-0 starting: nothing more.
    let starting = pod(&s, 0, NEW, "Pending", false);
    assert!(steps(&run(&s, &[starting])).is_empty());
    let running_not_ready = pod(&s, 0, NEW, "Running", false);
    assert!(steps(&run(&s, &[running_not_ready])).is_empty());
    // web-0 ready: web-1, and only web-1.
    assert_eq!(steps(&run(&s, &[ready(&s, 0, NEW)])), ["create web-1"]);
    assert_eq!(
        steps(&run(&s, &[ready(&s, 0, NEW), ready(&s, 1, NEW)])),
        ["create web-2"]
    );
    // A hole is filled before anything after it moves.
    let p = run(&s, &[ready(&s, 0, NEW), ready(&s, 2, NEW)]);
    assert_eq!(steps(&p), ["create web-1"]);
    let Step::Create(created) = &p.steps[0] else {
        unreachable!()
    };
    assert_eq!(created.labels()[REVISION_LABEL_FOR_TEST], NEW);
    assert_eq!(
        created.spec.as_ref().unwrap().hostname.as_deref(),
        Some("web-1")
    );
}

const REVISION_LABEL_FOR_TEST: &str = crate::statefulset::identity::REVISION_LABEL;

#[test]
fn min_ready_seconds_hold_the_next_pod() {
    let s = set(serde_json::json!({"spec": {"minReadySeconds": 7200}}));
    assert!(steps(&run(&s, &[ready(&s, 0, NEW)])).is_empty());
    let p = run(&s, &[ready(&s, 0, NEW)]);
    assert_eq!(p.status.ready_replicas, Some(1));
    assert_eq!(p.status.available_replicas, Some(0));
    let s = set(serde_json::json!({"spec": {"minReadySeconds": 60}}));
    assert_eq!(steps(&run(&s, &[ready(&s, 0, NEW)])), ["create web-1"]);
}

#[test]
fn parallel_creates_and_deletes_at_once() {
    let s = parallel(serde_json::json!({"spec": {"volumeClaimTemplates": null}}));
    assert_eq!(
        steps(&run(&s, &[])),
        ["create web-0", "create web-1", "create web-2"]
    );
    let starting = pod(&s, 0, NEW, "Pending", false);
    assert_eq!(
        steps(&run(&s, &[starting])),
        ["create web-1", "create web-2"]
    );
    let s = parallel(serde_json::json!({"spec": {"replicas": 1, "volumeClaimTemplates": null}}));
    let pods: Vec<_> = (0..3).map(|o| pod(&s, o, NEW, "Pending", false)).collect();
    assert_eq!(
        steps(&run(&s, &pods)),
        ["scale-down web-2", "scale-down web-1"]
    );
}

#[test]
fn ordered_ready_scales_down_from_the_highest_ordinal_one_at_a_time() {
    let s = set(serde_json::json!({"spec": {"replicas": 2}}));
    let pods: Vec<_> = (0..4).map(|o| ready(&s, o, NEW)).collect();
    assert_eq!(steps(&run(&s, &pods)), ["scale-down web-3"]);
    // web-3 terminating: wait for it to go.
    let mut waiting = pods.clone();
    waiting[3] = terminating(waiting[3].clone());
    assert!(steps(&run(&s, &waiting)).is_empty());
    // An unhealthy kept pod blocks scale down.
    let mut blocked = pods.clone();
    blocked[1] = pod(&s, 1, NEW, "Running", false);
    assert!(steps(&run(&s, &blocked)).is_empty());
    // An unhealthy condemned pod that is not the first unhealthy waits; the first goes.
    let mut unhealthy = pods.clone();
    unhealthy[3] = pod(&s, 3, NEW, "Running", false);
    assert_eq!(steps(&run(&s, &unhealthy)), ["scale-down web-3"]);
    // Two unhealthy condemned pods: the lower one is first, so the higher one waits.
    let mut two_unhealthy = unhealthy;
    two_unhealthy[2] = pod(&s, 2, NEW, "Running", false);
    assert!(steps(&run(&s, &two_unhealthy)).is_empty());
}

#[test]
fn finished_pods_are_deleted_and_made_again_later() {
    let s = set(serde_json::json!({}));
    let failed = pod(&s, 0, NEW, "Failed", false);
    assert_eq!(
        steps(&run(&s, std::slice::from_ref(&failed))),
        ["delete-finished web-0"]
    );
    // Being deleted: wait until it is gone, then create it.
    assert!(steps(&run(&s, &[terminating(failed)])).is_empty());
    assert_eq!(steps(&run(&s, &[])), ["create web-0"]);
    // Under Parallel the others go on.
    let s = parallel(serde_json::json!({}));
    let succeeded = pod(&s, 1, NEW, "Succeeded", false);
    assert_eq!(
        steps(&run(&s, &[ready(&s, 0, NEW), succeeded])),
        ["delete-finished web-1", "create web-2"]
    );
}

#[test]
fn rolling_update_goes_from_the_highest_ordinal_waiting_for_each() {
    let s = set(serde_json::json!({}));
    let old: Vec<_> = (0..3).map(|o| ready(&s, o, OLD)).collect();
    let p = run(&s, &old);
    assert_eq!(steps(&p), ["rolling-delete web-2"]);
    assert_eq!(p.status.current_replicas, Some(2));
    assert_eq!(p.status.updated_replicas, None);
    // web-2 back at the new revision but not ready: wait (OrderedReady stops at it anyway).
    let mut pods = old.clone();
    pods[2] = pod(&s, 2, NEW, "Running", false);
    assert!(steps(&run(&s, &pods)).is_empty());
    pods[2] = ready(&s, 2, NEW);
    assert_eq!(steps(&run(&s, &pods)), ["rolling-delete web-1"]);
    // A missing pod is made at the update revision.
    let p = run(&s, &[old[0].clone(), old[1].clone()]);
    let Step::Create(created) = &p.steps[0] else {
        unreachable!()
    };
    assert_eq!(created.labels()[REVISION_LABEL_FOR_TEST], NEW);
    // Under Parallel, an unready updated pod still holds the next deletion.
    let s = parallel(serde_json::json!({}));
    let mut pods: Vec<_> = (0..3).map(|o| ready(&s, o, OLD)).collect();
    pods[2] = pod(&s, 2, NEW, "Running", false);
    assert!(steps(&run(&s, &pods)).is_empty());
}

#[test]
fn partition_keeps_lower_ordinals_at_the_current_revision() {
    let s =
        set(serde_json::json!({"spec": {"updateStrategy": {"rollingUpdate": {"partition": 2}}}}));
    let mut pods: Vec<_> = (0..3).map(|o| ready(&s, o, OLD)).collect();
    assert_eq!(steps(&run(&s, &pods)), ["rolling-delete web-2"]);
    pods[2] = ready(&s, 2, NEW);
    let p = run(&s, &pods);
    assert!(steps(&p).is_empty());
    assert_eq!(p.status.current_replicas, Some(2));
    assert_eq!(p.status.updated_replicas, Some(1));
    // A pod made below the partition is at the current revision.
    let p = run(&s, &[ready(&s, 0, OLD)]);
    let Step::Create(created) = &p.steps[0] else {
        unreachable!()
    };
    assert_eq!(created.labels()[REVISION_LABEL_FOR_TEST], OLD);
}

#[test]
fn max_unavailable_deletes_several_at_once() {
    let s = set(serde_json::json!({"spec": {"replicas": 4,
        "updateStrategy": {"rollingUpdate": {"maxUnavailable": 2}}}}));
    let mut pods: Vec<_> = (0..4).map(|o| ready(&s, o, OLD)).collect();
    assert_eq!(
        steps(&run(&s, &pods)),
        ["rolling-delete web-3", "rolling-delete web-2"]
    );
    // Under OrderedReady an unready pod stops the sync before any update.
    pods[3] = pod(&s, 3, NEW, "Running", false);
    assert!(steps(&run(&s, &pods)).is_empty());
    // Under Parallel, one already unavailable leaves room for one more.
    let mut s = s;
    s.spec.as_mut().unwrap().pod_management_policy = Some("Parallel".into());
    assert_eq!(steps(&run(&s, &pods)), ["rolling-delete web-2"]);
    assert_eq!(max_unavailable(&IntOrString::String("50%".into()), 5), 3);
    assert_eq!(max_unavailable(&IntOrString::Int(0), 5), 1);
}

#[test]
fn on_delete_leaves_old_pods_alone() {
    let s = set(
        serde_json::json!({"spec": {"updateStrategy": {"type": "OnDelete", "rollingUpdate": null}}}),
    );
    let pods: Vec<_> = (0..3).map(|o| ready(&s, o, OLD)).collect();
    let p = run(&s, &pods);
    assert!(steps(&p).is_empty());
    assert_eq!(p.status.current_replicas, Some(3));
    // A pod deleted by hand comes back at the update revision.
    let p = run(&s, &pods[..2]);
    let Step::Create(created) = &p.steps[0] else {
        unreachable!()
    };
    assert_eq!(created.labels()[REVISION_LABEL_FOR_TEST], NEW);
}

#[test]
fn status_counts_pods_by_readiness_and_revision() {
    let s = set(serde_json::json!({"metadata": {"generation": 4}, "spec": {"replicas": 3}}));
    let pods = vec![
        ready(&s, 0, OLD),
        ready(&s, 1, NEW),
        pod(&s, 2, NEW, "Pending", false),
        terminating(ready(&s, 3, OLD)),
    ];
    let p = run(&s, &pods);
    let st = &p.status;
    assert_eq!(st.replicas, 4);
    assert_eq!(st.ready_replicas, Some(3));
    assert_eq!(st.available_replicas, Some(3));
    assert_eq!(st.current_replicas, Some(1));
    assert_eq!(st.updated_replicas, Some(2));
    assert_eq!(st.observed_generation, Some(4));
    assert_eq!(st.current_revision.as_deref(), Some(OLD));
    assert_eq!(st.update_revision.as_deref(), Some(NEW));
    assert_eq!(st.collision_count, Some(0));
}

#[test]
fn a_deleted_set_only_reports() {
    let mut s = set(serde_json::json!({}));
    s.metadata.deletion_timestamp = Some(Time(now()));
    let p = run(&s, &[ready(&s, 0, NEW)]);
    assert!(p.steps.is_empty());
    assert_eq!(p.status.replicas, 1);
}

#[test]
fn identity_drift_is_repaired_and_stale_claims_wait() {
    let s = set(serde_json::json!({}));
    let mut drifted = (*ready(&s, 0, NEW)).clone();
    drifted
        .labels_mut()
        .remove(crate::statefulset::identity::POD_NAME_LABEL);
    assert_eq!(
        steps(&run(&s, &[Arc::new(drifted)])),
        ["update web-0", "create web-1"]
    );
    // Under whenScaled: Delete, a claim still owned by an earlier web-0 holds its creation.
    let s = set(
        serde_json::json!({"spec": {"persistentVolumeClaimRetentionPolicy": {"whenScaled": "Delete"}}}),
    );
    let mut claim: PersistentVolumeClaim = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "www-web-0", "namespace": "ns", "ownerReferences": [
            {"apiVersion": "v1", "kind": "Pod", "name": "web-0", "uid": "gone", "controller": true}]}
    }))
    .unwrap();
    let claims: Claims = [(claim.name_any(), Arc::new(claim.clone()))].into();
    assert!(steps(&run_with(&s, &[], &claims)).is_empty());
    claim.metadata.owner_references = None;
    let claims: Claims = [(claim.name_any(), Arc::new(claim))].into();
    assert_eq!(steps(&run_with(&s, &[], &claims)), ["create web-0"]);
}

#[test]
fn condemned_claims_get_their_references_before_the_pod_goes() {
    let s = set(serde_json::json!({"spec": {"replicas": 1,
        "persistentVolumeClaimRetentionPolicy": {"whenScaled": "Delete"}}}));
    let pods = vec![ready(&s, 0, NEW), ready(&s, 1, NEW)];
    let claim: PersistentVolumeClaim = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "www-web-1", "namespace": "ns"}
    }))
    .unwrap();
    let claims: Claims = [(claim.name_any(), Arc::new(claim))].into();
    assert_eq!(
        steps(&run_with(&s, &pods, &claims)),
        ["fix-claims web-1", "scale-down web-1"]
    );
}
