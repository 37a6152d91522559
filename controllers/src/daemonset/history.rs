//! A DaemonSet's ControllerRevisions, as upstream's pkg/controller/daemon/update.go: the
//! current template's revision is found by its data (or created, named `<ds>-<hash>` after
//! the template hash with the collision count), renumbered past the old ones when an old
//! template comes back, and the pods' `controller-revision-hash` label is the revision's own
//! label, so a rollback makes the pods of that revision current again without restarting them.

use std::collections::HashSet;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use minik8s_api::selector::Selector;

use super::{Ctx, REVISION_HASH};
use crate::util::controller_ref::controller_ref;
use crate::util::hash::compute_hash;
use crate::util::history::{
    data_of, delete_revision, max_revision, owned_revisions, renumber, sort_revisions,
    template_patch,
};
use crate::util::reconciler::Error;

/// Whether `revision` holds the DaemonSet's current template (upstream's `Match`).
fn matches(ds: &DaemonSet, revision: &ControllerRevision) -> bool {
    let template = ds
        .spec
        .as_ref()
        .map(|s| s.template.clone())
        .unwrap_or_default();
    *data_of(revision) == template_patch(&template)
}

/// The current revision and the old ones (upstream's `constructHistory`).
pub(super) async fn construct(
    ds: &DaemonSet,
    ctx: &Ctx,
    selector: &Selector,
) -> Result<(ControllerRevision, Vec<Arc<ControllerRevision>>), Error> {
    let ns = ds.namespace().unwrap_or_default();
    let sets: Api<DaemonSet> = Api::namespaced(ctx.client.clone(), &ns);
    let api: Api<ControllerRevision> = Api::namespaced(ctx.client.clone(), &ns);
    let owned = owned_revisions(ds, &sets, &ctx.revisions, selector).await?;
    let mut current = Vec::new();
    let mut old = Vec::new();
    for mut revision in owned {
        // Revisions from before the label was written get their name as the hash.
        if !revision.labels().contains_key(REVISION_HASH) {
            let mut labelled = (*revision).clone();
            labelled
                .labels_mut()
                .insert(REVISION_HASH.into(), revision.name_any());
            revision = Arc::new(
                api.replace(&revision.name_any(), &PostParams::default(), &labelled)
                    .await?,
            );
        }
        if matches(ds, &revision) {
            current.push(revision);
        } else {
            old.push(revision);
        }
    }
    let next = max_revision(&old) + 1;
    let cur = if current.is_empty() {
        snapshot(ds, ctx, next).await?
    } else {
        let cur = dedup(ds, ctx, current).await?;
        if cur.revision < next {
            renumber(&api, &cur, next).await?
        } else {
            cur
        }
    };
    Ok((cur, old))
}

/// Writes the revision of the current template (upstream's `snapshot`). A revision of that
/// name with other data is a hash collision: `status.collisionCount` goes up (unless the
/// count read was stale) and the reconcile is retried with the new name.
async fn snapshot(ds: &DaemonSet, ctx: &Ctx, number: i64) -> Result<ControllerRevision, Error> {
    let ns = ds.namespace().unwrap_or_default();
    let api: Api<ControllerRevision> = Api::namespaced(ctx.client.clone(), &ns);
    let spec = ds.spec.clone().unwrap_or_default();
    let collision_count = ds.status.as_ref().and_then(|s| s.collision_count);
    let hash = compute_hash(&spec.template, collision_count);
    let mut labels = spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    labels.insert(REVISION_HASH.into(), hash.clone());
    let mut revision = ControllerRevision {
        data: Some(RawExtension(template_patch(&spec.template))),
        revision: number,
        ..Default::default()
    };
    revision.metadata.name = Some(format!("{}-{hash}", ds.name_any()));
    revision.metadata.namespace = Some(ns.clone());
    revision.metadata.labels = Some(labels);
    revision.metadata.annotations = ds.metadata.annotations.clone();
    revision.metadata.owner_references = Some(vec![controller_ref(ds)]);
    match api.create(&PostParams::default(), &revision).await {
        Ok(created) => Ok(created),
        Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "AlreadyExists" => {
            let existing = api.get(&revision.name_any()).await?;
            if matches(ds, &existing) {
                return Ok(existing);
            }
            let sets: Api<DaemonSet> = Api::namespaced(ctx.client.clone(), &ns);
            let mut fresh = sets.get(&ds.name_any()).await?;
            let fresh_count = fresh.status.as_ref().and_then(|s| s.collision_count);
            if fresh_count != collision_count {
                return Err(Error::Stale(format!(
                    "found a stale collision count ({}, expected {}) of DaemonSet {:?} while processing; will retry until it is updated",
                    collision_count.unwrap_or(0),
                    fresh_count.unwrap_or(0),
                    ds.name_any()
                )));
            }
            let status = fresh.status.get_or_insert_with(Default::default);
            let bumped = status.collision_count.unwrap_or(0) + 1;
            status.collision_count = Some(bumped);
            sets.replace_status(&ds.name_any(), &PostParams::default(), &fresh)
                .await?;
            tracing::info!(
                daemonset = %ds.name_any(),
                collision_count = bumped,
                "found a hash collision for DaemonSet - bumping collisionCount to resolve it"
            );
            Err(Error::Kube(kube::Error::Api(s)))
        }
        Err(e) => Err(e.into()),
    }
}

/// Keeps one of several revisions holding the current template, the newest, moving the
/// pods of the others onto its hash (upstream's `dedupCurHistories`).
async fn dedup(
    ds: &DaemonSet,
    ctx: &Ctx,
    mut current: Vec<Arc<ControllerRevision>>,
) -> Result<ControllerRevision, Error> {
    if current.len() == 1 {
        return Ok((*current[0]).clone());
    }
    sort_revisions(&mut current);
    let keep = current.pop().expect("at least two");
    let keep_hash = keep
        .labels()
        .get(REVISION_HASH)
        .cloned()
        .unwrap_or_default();
    let ns = ds.namespace().unwrap_or_default();
    let api: Api<ControllerRevision> = Api::namespaced(ctx.client.clone(), &ns);
    let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let pods = ctx
        .pods_by_controller
        .controlled_by(&ds.uid().unwrap_or_default(), None);
    for dup in &current {
        let dup_hash = dup.labels().get(REVISION_HASH).cloned().unwrap_or_default();
        for pod in pods
            .iter()
            .filter(|p| p.labels().get(REVISION_HASH) == Some(&dup_hash))
        {
            let patch = serde_json::json!({"metadata": {"labels": {REVISION_HASH: keep_hash}}});
            pods_api
                .patch(
                    &pod.name_any(),
                    &PatchParams::default(),
                    &Patch::Strategic(&patch),
                )
                .await?;
        }
        delete_revision(&api, dup).await?;
    }
    Ok((*keep).clone())
}

/// Deletes the oldest old revisions past `revisionHistoryLimit`, keeping those a pod still
/// runs (upstream's `cleanupHistory`).
pub(super) async fn cleanup(
    ds: &DaemonSet,
    ctx: &Ctx,
    old: &[Arc<ControllerRevision>],
    pods: &[Arc<Pod>],
) -> Result<(), Error> {
    let limit = ds
        .spec
        .as_ref()
        .and_then(|s| s.revision_history_limit)
        .unwrap_or(10)
        .max(0) as usize;
    if old.len() <= limit {
        return Ok(());
    }
    let mut to_kill = old.len() - limit;
    let live: HashSet<&String> = pods
        .iter()
        .filter_map(|p| p.labels().get(REVISION_HASH))
        .filter(|h| !h.is_empty())
        .collect();
    let mut old = old.to_vec();
    sort_revisions(&mut old);
    let api: Api<ControllerRevision> =
        Api::namespaced(ctx.client.clone(), &ds.namespace().unwrap_or_default());
    for revision in &old {
        if to_kill == 0 {
            break;
        }
        if revision
            .labels()
            .get(REVISION_HASH)
            .is_some_and(|h| live.contains(h))
        {
            continue;
        }
        delete_revision(&api, revision).await?;
        to_kill -= 1;
    }
    Ok(())
}
