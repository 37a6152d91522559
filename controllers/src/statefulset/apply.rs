//! Taking a sync's steps (upstream's `StatefulPodControl`), in order, stopping at the first
//! failure; the expectations are set for all the creations and deletions first and lowered
//! for those that will not happen. Each step records upstream's event.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};

use super::Ctx;
use super::claims::{Claims, claims_match_policy, create_claims, update_claims_for_policy};
use super::identity::{
    identity_matches, is_failed, storage_matches, update_identity, update_storage,
};
use super::plan::Step;
use crate::util::events::record;
use crate::util::pods::delete_exactly;
use crate::util::reconciler::Error;

pub(super) async fn apply(
    ctx: &Ctx,
    set: &StatefulSet,
    update_set: &StatefulSet,
    key: &str,
    steps: &[Step],
    claims: &Claims,
) -> Result<(), Error> {
    let creations = steps
        .iter()
        .filter(|s| matches!(s, Step::Create(_)))
        .count();
    let deletions: Vec<String> = steps.iter().filter_map(deleted_uid).collect();
    if creations > 0 || !deletions.is_empty() {
        ctx.expectations.expect(key, creations, deletions);
    }
    for (i, step) in steps.iter().enumerate() {
        if let Err(e) = take(ctx, set, update_set, step, claims).await {
            // This step and the ones after it will not show up in the cache.
            for left in &steps[i..] {
                match left {
                    Step::Create(_) => ctx.expectations.creation_observed(key),
                    other => {
                        if let Some(uid) = deleted_uid(other) {
                            ctx.expectations.deletion_observed(key, &uid);
                        }
                    }
                }
            }
            return Err(e);
        }
    }
    Ok(())
}

fn deleted_uid(step: &Step) -> Option<String> {
    match step {
        Step::DeleteFinished(p) | Step::ScaleDown(p) | Step::RollingDelete(p) => p.uid(),
        _ => None,
    }
}

async fn take(
    ctx: &Ctx,
    set: &StatefulSet,
    update_set: &StatefulSet,
    step: &Step,
    claims: &Claims,
) -> Result<(), Error> {
    match step {
        Step::Create(pod) => create_pod(ctx, set, pod, claims).await,
        Step::DeleteFinished(pod) => {
            let (type_, reason, what) = if is_failed(pod) {
                (EventType::Warning, "RecreatingFailedPod", "failed")
            } else {
                (EventType::Normal, "RecreatingTerminatedPod", "terminated")
            };
            let note = format!(
                "StatefulSet {}/{} is recreating {what} Pod {}",
                set.namespace().unwrap_or_default(),
                set.name_any(),
                pod.name_any()
            );
            record(&ctx.recorder, set, type_, reason, note, None).await;
            delete_pod(ctx, set, pod).await
        }
        Step::CreateMissingClaims(pod) => create_claims(ctx, set, pod, claims).await,
        Step::Update(pod) => update_pod(ctx, update_set, pod, claims).await,
        Step::FixClaims(pod) => update_claims_for_policy(ctx, update_set, pod, claims).await,
        Step::ScaleDown(pod) => {
            tracing::info!(pod = %pod.name_any(), "pod of StatefulSet is terminating for scale down");
            delete_pod(ctx, set, pod).await
        }
        Step::RollingDelete(pod) => {
            tracing::info!(pod = %pod.name_any(), "pod of StatefulSet is terminating for update");
            delete_pod(ctx, set, pod).await
        }
    }
}

/// `verb` Pod events as upstream's `recordPodEvent` writes them.
async fn pod_event(ctx: &Ctx, set: &StatefulSet, pod: &Pod, verb: &str, error: Option<&Error>) {
    let title = format!("{}{}", verb[..1].to_uppercase(), &verb[1..]);
    let (pod_name, set_name) = (pod.name_any(), set.name_any());
    let (type_, reason, note) = match error {
        None => (
            EventType::Normal,
            format!("Successful{title}"),
            format!("{verb} Pod {pod_name} in StatefulSet {set_name} successful"),
        ),
        Some(e) => (
            EventType::Warning,
            format!("Failed{title}"),
            format!("{verb} Pod {pod_name} in StatefulSet {set_name} failed error: {e}"),
        ),
    };
    let related = pod.meta().uid.is_some().then(|| pod.object_ref(&()));
    record(&ctx.recorder, set, type_, &reason, note, related).await;
}

/// Claims first, then the pod (upstream's `CreateStatefulPod`); a pod that exists already is
/// an error without an event (the cache is behind).
async fn create_pod(ctx: &Ctx, set: &StatefulSet, pod: &Pod, claims: &Claims) -> Result<(), Error> {
    if let Err(e) = create_claims(ctx, set, pod, claims).await {
        pod_event(ctx, set, pod, "create", Some(&e)).await;
        return Err(e);
    }
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &set.namespace().unwrap_or_default());
    let created = match api.create(&PostParams::default(), pod).await {
        Ok(created) => created,
        Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "AlreadyExists" => {
            return Err(Error::Stale(format!(
                "pod {} already exists",
                pod.name_any()
            )));
        }
        Err(e) => {
            let e = Error::from(e);
            pod_event(ctx, set, pod, "create", Some(&e)).await;
            return Err(e);
        }
    };
    if let Err(e) = update_claims_for_policy(ctx, set, &created, claims).await {
        pod_event(ctx, set, &created, "update", Some(&e)).await;
        return Err(e);
    }
    pod_event(ctx, set, &created, "create", None).await;
    Ok(())
}

/// Deletes this very pod (upstream's `DeleteStatefulPod`), never a newer one of its name.
async fn delete_pod(ctx: &Ctx, set: &StatefulSet, pod: &Arc<Pod>) -> Result<(), Error> {
    match delete_exactly(&ctx.client, pod, None).await {
        Ok(()) => {
            pod_event(ctx, set, pod, "delete", None).await;
            Ok(())
        }
        Err(e) => {
            let e = Error::from(e);
            pod_event(ctx, set, pod, "delete", Some(&e)).await;
            Err(e)
        }
    }
}

/// Brings the pod's identity, storage and claim references in line (upstream's
/// `UpdateStatefulPod`); the pod is written with the resourceVersion read.
async fn update_pod(ctx: &Ctx, set: &StatefulSet, pod: &Pod, claims: &Claims) -> Result<(), Error> {
    let mut updated = pod.clone();
    let mut consistent = true;
    if !identity_matches(set, &updated) {
        update_identity(set, &mut updated);
        consistent = false;
    }
    if !storage_matches(set, &updated) {
        update_storage(set, &mut updated);
        consistent = false;
        if let Err(e) = create_claims(ctx, set, &updated, claims).await {
            pod_event(ctx, set, pod, "update", Some(&e)).await;
            return Err(e);
        }
    }
    if !claims_match_policy(set, &updated, claims)
        && let Err(e) = update_claims_for_policy(ctx, set, &updated, claims).await
    {
        pod_event(ctx, set, pod, "update", Some(&e)).await;
        return Err(e);
    }
    if consistent {
        return Ok(());
    }
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &set.namespace().unwrap_or_default());
    let result = api
        .replace(&pod.name_any(), &PostParams::default(), &updated)
        .await
        .map(|_| ())
        .map_err(Error::from);
    pod_event(ctx, set, pod, "update", result.as_ref().err()).await;
    result
}
