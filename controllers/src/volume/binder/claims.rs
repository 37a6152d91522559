//! The claim half of the binder (upstream's `syncClaim`): an unbound claim is matched to a
//! volume and bound, or its volume is asked of a provisioner, or it waits (for a volume, a
//! first consumer, or the volume it names); a bound claim whose volume is gone or taken is
//! Lost.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use minik8s_api::volume::{
    self, ANN_BETA_STORAGE_PROVISIONER, ANN_BOUND_BY_CONTROLLER, ANN_SELECTED_NODE,
    ANN_STORAGE_PROVISIONER,
};

use super::{Ctx, protocol};
use crate::util::reconciler::Error;
use crate::volume::matching;

pub(super) async fn reconcile(
    claim: Arc<PersistentVolumeClaim>,
    ctx: Arc<Ctx>,
) -> Result<Action, Error> {
    if volume::has_annotation(&claim.metadata, volume::ANN_BIND_COMPLETED) {
        sync_bound(&claim, &ctx).await?;
    } else {
        sync_unbound(&claim, &ctx).await?;
    }
    Ok(Action::await_change())
}

fn volume_name(claim: &PersistentVolumeClaim) -> &str {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .unwrap_or("")
}

fn cached_volume(ctx: &Ctx, name: &str) -> Option<Arc<PersistentVolume>> {
    ctx.volumes.get(&ObjectRef::new(name))
}

/// Upstream's `IsDelayBindingMode`: the claim's class binds at the first consumer. A class
/// that does not exist (yet) binds at once.
fn delay_binding(claim: &PersistentVolumeClaim, ctx: &Ctx) -> Result<bool, Error> {
    let name = volume::claim_class(claim);
    if name.is_empty() {
        return Ok(false);
    }
    let Some(class) = ctx.classes.get(&ObjectRef::new(name)) else {
        return Ok(false);
    };
    match class.volume_binding_mode.as_deref() {
        None => Err(Error::failed(format!(
            "VolumeBindingMode not set for StorageClass {name:?}"
        ))),
        Some(mode) => Ok(mode == "WaitForFirstConsumer"),
    }
}

async fn sync_unbound(claim: &PersistentVolumeClaim, ctx: &Ctx) -> Result<(), Error> {
    let wanted = volume_name(claim);
    if wanted.is_empty() {
        return sync_unbound_unnamed(claim, ctx).await;
    }
    // The claim names its volume.
    let Some(volume) = cached_volume(ctx, wanted) else {
        tracing::debug!(volume = wanted, "the requested volume does not exist yet");
        ctx.claim_status(claim, "Pending", None).await?;
        return Ok(());
    };
    let claim_ref = volume.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
    if claim_ref.is_none() {
        if let Err(why) = matching::satisfies(&volume, claim) {
            let note = format!("Cannot bind to requested volume {wanted:?}: {why}");
            ctx.event(claim, EventType::Warning, "VolumeMismatch", note)
                .await;
            ctx.claim_status(claim, "Pending", None).await?;
            return Ok(());
        }
        return bind(&volume, claim, ctx).await;
    }
    if matching::is_bound_to(&volume, claim) {
        return bind(&volume, claim, ctx).await;
    }
    let note = format!("volume {wanted:?} already bound to a different claim.");
    ctx.event(claim, EventType::Warning, "FailedBinding", note)
        .await;
    if volume::has_annotation(&claim.metadata, ANN_BOUND_BY_CONTROLLER) {
        return Err(Error::failed(format!(
            "invalid binding of claim {:?} to volume {wanted:?}: volume already claimed by another claim",
            claim.name_any()
        )));
    }
    ctx.claim_status(claim, "Pending", None).await?;
    Ok(())
}

async fn sync_unbound_unnamed(claim: &PersistentVolumeClaim, ctx: &Ctx) -> Result<(), Error> {
    let delay = delay_binding(claim, ctx)?;
    let volumes = ctx.volumes.state();
    let free = {
        let mut taken = ctx.taken.lock().expect("taken");
        let uid = claim.metadata.uid.as_deref().unwrap_or_default();
        volumes
            .iter()
            .filter(|v| {
                let name = v.name_any();
                let bound_in_cache = v.spec.as_ref().is_some_and(|s| s.claim_ref.is_some());
                if bound_in_cache {
                    taken.remove(&name);
                    return true;
                }
                taken.get(&name).is_none_or(|by| by == uid)
            })
            .map(|v| v.as_ref())
            .collect::<Vec<_>>()
    };
    let found = matching::best_match(claim, free, delay)?;
    if let Some(volume) = found {
        return bind(volume, claim, ctx).await;
    }
    // Upstream's retroactive default class (1.28+): a claim created before any class was the
    // default gets today's default.
    if !volume::claim_has_class(claim) {
        let classes = ctx.classes.state();
        if let Some(default) = volume::default_class(classes.iter().map(|c| c.as_ref())) {
            let mut next = claim.clone();
            next.spec
                .get_or_insert_with(Default::default)
                .storage_class_name = default.metadata.name.clone();
            ctx.replace_claim(&next).await?;
            return Ok(());
        }
    }
    let selected = volume::has_annotation(&claim.metadata, ANN_SELECTED_NODE);
    if delay && !selected {
        wait_for_first_consumer(claim, ctx).await;
    } else if !volume::claim_class(claim).is_empty() {
        // The claim's status is left as it is while its volume is being made.
        return provision(claim, ctx).await;
    } else {
        let note = "no persistent volumes available for this claim and no storage class is set";
        ctx.event(claim, EventType::Normal, "FailedBinding", note.into())
            .await;
    }
    ctx.claim_status(claim, "Pending", None).await?;
    Ok(())
}

/// Upstream's `emitEventForUnboundDelayBindingClaim`.
async fn wait_for_first_consumer(claim: &PersistentVolumeClaim, ctx: &Ctx) {
    let ns = claim.namespace().unwrap_or_default();
    let name = claim.name_any();
    let mut waiting: Vec<String> = ctx
        .pods
        .state()
        .iter()
        .filter(|p| p.namespace().as_deref() == Some(ns.as_str()))
        .filter(|p| {
            p.spec
                .as_ref()
                .is_some_and(|s| s.node_name.as_deref().unwrap_or("").is_empty())
        })
        .filter(|p| crate::volume::claims_of(p).any(|c| c == name))
        .map(|p| p.name_any())
        .collect();
    waiting.sort();
    let (reason, note) = match waiting.as_slice() {
        [] => (
            "WaitForFirstConsumer",
            "waiting for first consumer to be created before binding".to_string(),
        ),
        [one] => (
            "WaitForPodScheduled",
            format!("waiting for pod {one} to be scheduled"),
        ),
        many => (
            "WaitForPodScheduled",
            format!("waiting for pods {} to be scheduled", many.join(",")),
        ),
    };
    ctx.event(claim, EventType::Normal, reason, note).await;
}

/// Upstream's `provisionClaim`: this distribution has no in-tree volume plugins, so every
/// provisioner is external: the claim is annotated with the provisioner's name (which is what
/// a provisioner watches for) and an event says it waits.
async fn provision(claim: &PersistentVolumeClaim, ctx: &Ctx) -> Result<(), Error> {
    let class_name = volume::claim_class(claim);
    let Some(class) = ctx.classes.get(&ObjectRef::new(class_name)) else {
        let note = format!("storageclass.storage.k8s.io {class_name:?} not found");
        ctx.event(claim, EventType::Warning, "ProvisioningFailed", note)
            .await;
        return Ok(());
    };
    let provisioner = class.provisioner.clone();
    if provisioner.starts_with("kubernetes.io/") {
        // An in-tree plugin (kubernetes.io/no-provisioner for local volumes): none exists.
        let note = format!("no volume plugin matched name: {provisioner}");
        ctx.event(claim, EventType::Warning, "ProvisioningFailed", note)
            .await;
        return Ok(());
    }
    let annotated = [ANN_STORAGE_PROVISIONER, ANN_BETA_STORAGE_PROVISIONER]
        .iter()
        .all(|k| claim.metadata.annotations.as_ref().and_then(|a| a.get(*k)) == Some(&provisioner));
    let claim = if annotated {
        claim.clone()
    } else {
        let mut next = claim.clone();
        let annotations = next
            .metadata
            .annotations
            .get_or_insert_with(Default::default);
        for k in [ANN_STORAGE_PROVISIONER, ANN_BETA_STORAGE_PROVISIONER] {
            annotations.insert(k.to_string(), provisioner.clone());
        }
        match ctx.replace_claim(&next).await {
            Ok(saved) => saved,
            Err(e) => {
                let note = format!("Error saving claim: {e}");
                ctx.event(claim, EventType::Warning, "ProvisioningFailed", note)
                    .await;
                return Err(e);
            }
        }
    };
    let note = format!(
        "Waiting for a volume to be created either by the external provisioner '{provisioner}' or manually by the system administrator. If volume creation is delayed, please verify that the provisioner is running and correctly registered."
    );
    ctx.event(&claim, EventType::Normal, "ExternalProvisioning", note)
        .await;
    Ok(())
}

/// Upstream's `bind`: the volume points at the claim and is Bound, then the claim points at
/// the volume and is Bound.
pub(super) async fn bind(
    volume: &PersistentVolume,
    claim: &PersistentVolumeClaim,
    ctx: &Ctx,
) -> Result<(), Error> {
    tracing::info!(volume = %volume.name_any(), "binding");
    let volume = match protocol::bind_volume_to_claim(volume, claim) {
        Some(next) => {
            let written = ctx.replace_volume(&next).await?;
            ctx.taken.lock().expect("taken").insert(
                written.name_any(),
                claim.metadata.uid.clone().unwrap_or_default(),
            );
            written
        }
        None => volume.clone(),
    };
    let volume = ctx.volume_phase(&volume, "Bound", "").await?;
    let claim = match protocol::bind_claim_to_volume(claim, &volume) {
        Some(next) => ctx.replace_claim(&next).await?,
        None => claim.clone(),
    };
    ctx.claim_status(&claim, "Bound", Some(&volume)).await?;
    Ok(())
}

/// Upstream's `syncBoundClaim`.
async fn sync_bound(claim: &PersistentVolumeClaim, ctx: &Ctx) -> Result<(), Error> {
    let name = volume_name(claim);
    if name.is_empty() {
        return ctx
            .claim_status_with_event(
                claim,
                "Lost",
                "ClaimLost",
                "Bound claim has lost reference to PersistentVolume. Data on the volume is lost!",
            )
            .await;
    }
    let Some(volume) = cached_volume(ctx, name) else {
        return ctx
            .claim_status_with_event(
                claim,
                "Lost",
                "ClaimLost",
                "Bound claim has lost its PersistentVolume. Data on the volume is lost!",
            )
            .await;
    };
    let claim_ref = volume.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
    match claim_ref {
        // Unbound meanwhile, or our own binding not seen yet: bind again.
        None => bind(&volume, claim, ctx).await,
        Some(r) if r.uid == claim.metadata.uid => bind(&volume, claim, ctx).await,
        Some(_) => {
            ctx.claim_status_with_event(
                claim,
                "Lost",
                "ClaimMisbound",
                "Two claims are bound to the same volume, this one is bound incorrectly",
            )
            .await
        }
    }
}
