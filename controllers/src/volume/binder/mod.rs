//! The PersistentVolume binder, as kube-controller-manager's `persistentvolume-binder`
//! (pkg/controller/volume/persistentvolume): it binds claims to volumes, asks provisioners for
//! volumes that do not exist yet, and reclaims volumes whose claim is gone.
//!
//! Two loops, as upstream's claim and volume workers: claims are synced by `claims.rs`
//! (match, bind, provision, or mark Lost), volumes by `volumes.rs` (phase, release and
//! reclaim). Each trigger is keyed: a volume's change enqueues its claim, a claim's change its
//! volume. Upstream also resyncs every claim every 15 s so that a claim waiting for a
//! volume notices one that appears; here a volume that is free (new, or unbound) enqueues
//! every unbound claim instead, and a StorageClass the unbound claims of its name, so nothing
//! is polled. Every write carries the resourceVersion it was computed from; a conflict is
//! retried from the newer object.

mod claims;
pub mod protocol;
mod volumes;

use std::sync::Arc;

use futures::stream::{self, StreamExt};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, PostParams};
use kube::runtime::events::{EventType, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, Resource, ResourceExt};
use minik8s_api::volume::ANN_BIND_COMPLETED;

use crate::informers::{Cache, Change, Informers};
use crate::util::events::{Recorder, record};
use crate::util::reconciler::Error;
use crate::util::runtime;

pub const NAME: &str = "persistentvolume-binder";
/// The component upstream's binder reports events as.
pub const REPORTER: &str = "persistentvolume-controller";

struct Ctx {
    client: Client,
    claims: Cache<PersistentVolumeClaim>,
    volumes: Cache<PersistentVolume>,
    classes: Cache<StorageClass>,
    pods: Cache<Pod>,
    recorder: Recorder,
    /// Volumes this binder has just given a claimRef, by name, to the claim's UID, until the
    /// cache shows it (upstream's binder writes its own cache after each bind for the same
    /// reason): claims synced meanwhile would otherwise all pick the same volume and retry on
    /// the conflict.
    taken: std::sync::Mutex<std::collections::HashMap<String, String>>,
}

impl Ctx {
    async fn event<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        record(&self.recorder, obj, type_, reason, note, None).await
    }

    fn claims_api(&self, ns: &str) -> Api<PersistentVolumeClaim> {
        Api::namespaced(self.client.clone(), ns)
    }

    fn volumes_api(&self) -> Api<PersistentVolume> {
        Api::all(self.client.clone())
    }

    /// Writes a changed claim (spec or metadata) at the version it was read.
    async fn replace_claim(
        &self,
        claim: &PersistentVolumeClaim,
    ) -> Result<PersistentVolumeClaim, Error> {
        let ns = claim.namespace().unwrap_or_default();
        Ok(self
            .claims_api(&ns)
            .replace(&claim.name_any(), &PostParams::default(), claim)
            .await?)
    }

    async fn replace_claim_status(
        &self,
        claim: &PersistentVolumeClaim,
    ) -> Result<PersistentVolumeClaim, Error> {
        let ns = claim.namespace().unwrap_or_default();
        Ok(self
            .claims_api(&ns)
            .replace_status(&claim.name_any(), &PostParams::default(), claim)
            .await?)
    }

    async fn replace_volume(&self, volume: &PersistentVolume) -> Result<PersistentVolume, Error> {
        Ok(self
            .volumes_api()
            .replace(&volume.name_any(), &PostParams::default(), volume)
            .await?)
    }

    async fn replace_volume_status(
        &self,
        volume: &PersistentVolume,
    ) -> Result<PersistentVolume, Error> {
        Ok(self
            .volumes_api()
            .replace_status(&volume.name_any(), &PostParams::default(), volume)
            .await?)
    }

    /// Upstream's `updateVolumePhase`: the volume in `phase`, written only when it changes.
    async fn volume_phase(
        &self,
        volume: &PersistentVolume,
        phase: &str,
        message: &str,
    ) -> Result<PersistentVolume, Error> {
        match protocol::volume_phase(volume, phase, message, k8s_openapi::jiff::Timestamp::now()) {
            Some(next) => self.replace_volume_status(&next).await,
            None => Ok(volume.clone()),
        }
    }

    /// Upstream's `updateVolumePhaseWithEvent`: the event goes with the change only.
    async fn volume_phase_with_event(
        &self,
        volume: &PersistentVolume,
        phase: &str,
        reason: &str,
        message: &str,
    ) -> Result<PersistentVolume, Error> {
        if volume.status.as_ref().and_then(|s| s.phase.as_deref()) == Some(phase) {
            return Ok(volume.clone());
        }
        let next = self.volume_phase(volume, phase, message).await?;
        self.event(&next, EventType::Warning, reason, message.to_string())
            .await;
        Ok(next)
    }

    /// Upstream's `updateClaimStatus`.
    async fn claim_status(
        &self,
        claim: &PersistentVolumeClaim,
        phase: &str,
        volume: Option<&PersistentVolume>,
    ) -> Result<PersistentVolumeClaim, Error> {
        match protocol::claim_status(claim, phase, volume).map_err(Error::Failed)? {
            Some(next) => self.replace_claim_status(&next).await,
            None => Ok(claim.clone()),
        }
    }

    /// Upstream's `updateClaimStatusWithEvent`: nothing when the claim is in `phase` already.
    async fn claim_status_with_event(
        &self,
        claim: &PersistentVolumeClaim,
        phase: &str,
        reason: &str,
        message: &str,
    ) -> Result<(), Error> {
        if claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some(phase) {
            return Ok(());
        }
        let next = self.claim_status(claim, phase, None).await?;
        self.event(&next, EventType::Warning, reason, message.to_string())
            .await;
        Ok(())
    }
}

fn claim_key(ns: Option<&str>, name: Option<&str>) -> Option<ObjectRef<PersistentVolumeClaim>> {
    Some(ObjectRef::new(name?).within(ns?))
}

/// The claim a volume's claimRef names.
fn claim_of(volume: &PersistentVolume) -> Option<ObjectRef<PersistentVolumeClaim>> {
    let r = volume.spec.as_ref()?.claim_ref.as_ref()?;
    claim_key(r.namespace.as_deref(), r.name.as_deref())
}

fn unbound(claim: &PersistentVolumeClaim) -> bool {
    !minik8s_api::volume::has_annotation(&claim.metadata, ANN_BIND_COMPLETED)
}

/// Whether a volume can be taken by a claim that does not name it.
fn free(volume: &PersistentVolume) -> bool {
    volume
        .spec
        .as_ref()
        .and_then(|s| s.claim_ref.as_ref())
        .is_none_or(|r| r.uid.as_deref().unwrap_or("").is_empty())
}

pub async fn run(informers: Arc<Informers>) {
    let client = informers.client();
    let claims = informers.of::<PersistentVolumeClaim>();
    let volumes = informers.of::<PersistentVolume>();
    let classes = informers.of::<StorageClass>();
    let pods = informers.of::<Pod>();
    // As upstream, nothing is synced before every cache holds a complete list: a volume
    // whose claim is not cached yet must not be released.
    for ready in [
        claims.store().wait_until_ready().await,
        volumes.store().wait_until_ready().await,
        classes.store().wait_until_ready().await,
        pods.store().wait_until_ready().await,
    ] {
        if ready.is_err() {
            return;
        }
    }
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        claims: claims.store(),
        volumes: volumes.store(),
        classes: classes.store(),
        pods: pods.store(),
        taken: Default::default(),
        recorder: Recorder::new(
            client,
            Reporter {
                controller: REPORTER.into(),
                instance: None,
            },
        ),
    });

    // Claims: their own changes, their volume's, and free volumes or classes for the claims
    // still waiting.
    let claim_store = claims.store();
    let from_volumes = volumes.changes().flat_map({
        let claim_store = claim_store.clone();
        move |change| {
            let keys: Vec<_> = match &change {
                Change::Applied { object, .. } | Change::Deleted(object) => {
                    let mut keys: Vec<_> = claim_of(object).into_iter().collect();
                    if matches!(change, Change::Applied { .. }) && free(object) {
                        keys.extend(
                            claim_store
                                .state()
                                .iter()
                                .filter(|c| unbound(c))
                                .map(|c| ObjectRef::from_obj(c.as_ref())),
                        );
                    }
                    keys
                }
                Change::Synced => Vec::new(),
            };
            stream::iter(keys)
        }
    });
    let from_classes = classes.touched().flat_map({
        let claim_store = claim_store.clone();
        move |class| {
            let name = class.name_any();
            let keys: Vec<_> = claim_store
                .state()
                .iter()
                .filter(|c| unbound(c) && minik8s_api::volume::claim_class(c) == name)
                .map(|c| ObjectRef::from_obj(c.as_ref()))
                .collect();
            stream::iter(keys)
        }
    });
    let claim_queue = stream::select(
        claims.touched().map(|c| ObjectRef::from_obj(c.as_ref())),
        stream::select(from_volumes, from_classes),
    );

    // Volumes: their own changes, and their claim's (a deleted claim releases its volume).
    let volume_store = volumes.store();
    let from_claims = claims.changes().flat_map(move |change| {
        let keys: Vec<ObjectRef<PersistentVolume>> = match &change {
            Change::Applied { object, .. } | Change::Deleted(object) => {
                let mut keys: Vec<_> = object
                    .spec
                    .as_ref()
                    .and_then(|s| s.volume_name.as_deref())
                    .filter(|n| !n.is_empty())
                    .map(ObjectRef::new)
                    .into_iter()
                    .collect();
                let me = ObjectRef::from_obj(object.as_ref());
                keys.extend(
                    volume_store
                        .state()
                        .iter()
                        .filter(|v| claim_of(v).as_ref() == Some(&me))
                        .map(|v| ObjectRef::from_obj(v.as_ref())),
                );
                keys
            }
            Change::Synced => Vec::new(),
        };
        stream::iter(keys)
    });
    let volume_queue = stream::select(
        volumes.touched().map(|v| ObjectRef::from_obj(v.as_ref())),
        from_claims,
    );

    tokio::join!(
        runtime::run(
            "claims",
            claims.store(),
            claim_queue,
            claims::reconcile,
            ctx.clone()
        ),
        runtime::run(
            "volumes",
            volumes.store(),
            volume_queue,
            volumes::reconcile,
            ctx
        ),
    );
}
