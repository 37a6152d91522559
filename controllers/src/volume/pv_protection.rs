//! The PV protection controller (upstream's pkg/controller/volume/pvprotection): a deleted
//! volume keeps its `kubernetes.io/pv-protection` finalizer while it is Bound, so a volume
//! in use by a claim is not removed under it; once it is not Bound the finalizer goes and so
//! does the volume. Volumes created without the finalizer get it here.

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::PersistentVolume;
use kube::api::{Api, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Client, ResourceExt};
use minik8s_api::volume::PV_PROTECTION_FINALIZER;

use crate::informers::Informers;
use crate::util::reconciler::Error;
use crate::util::runtime;

pub const NAME: &str = "persistentvolume-protection";

struct Ctx {
    client: Client,
}

pub async fn run(informers: Arc<Informers>) {
    let volumes = informers.of::<PersistentVolume>();
    let ctx = Arc::new(Ctx {
        client: informers.client(),
    });
    let queue = volumes.touched().map(|v| ObjectRef::from_obj(v.as_ref()));
    runtime::run("pvprotection", volumes.store(), queue, reconcile, ctx).await
}

fn has_finalizer(volume: &PersistentVolume) -> bool {
    volume
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == PV_PROTECTION_FINALIZER)
}

/// Upstream's `isBeingUsed`: a volume is in use while its status says Bound.
pub fn in_use(volume: &PersistentVolume) -> bool {
    volume.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
}

async fn reconcile(volume: Arc<PersistentVolume>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let api: Api<PersistentVolume> = Api::all(ctx.client.clone());
    let deleting = volume.metadata.deletion_timestamp.is_some();
    let mut next = (*volume).clone();
    let finalizers = next.metadata.finalizers.get_or_insert_with(Vec::new);
    if deleting && has_finalizer(&volume) {
        if in_use(&volume) {
            tracing::debug!("keeping the volume: it is bound");
            return Ok(Action::await_change());
        }
        finalizers.retain(|f| f != PV_PROTECTION_FINALIZER);
        tracing::info!("removing the protection finalizer of an unbound deleted volume");
    } else if !deleting && !has_finalizer(&volume) {
        finalizers.push(PV_PROTECTION_FINALIZER.into());
    } else {
        return Ok(Action::await_change());
    }
    match api
        .replace(&volume.name_any(), &PostParams::default(), &next)
        .await
    {
        Ok(_) => Ok(Action::await_change()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Action::await_change()),
        Err(e) => Err(e.into()),
    }
}
