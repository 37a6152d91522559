//! The volume half of the binder (upstream's `syncVolume`): a volume's phase follows its
//! claim (Available, Bound, Released), a volume left by its claim is reclaimed by its policy
//! (Retain keeps it Released; Delete deletes it, or leaves it to the provisioner that made
//! it; Recycle has no recycler here and fails, as upstream without a recycler plugin), and a
//! volume the binder reserved for a claim that went elsewhere is freed.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::ResourceExt;
use kube::api::{DeleteParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use minik8s_api::volume::{self, ANN_BOUND_BY_CONTROLLER, ANN_PROVISIONED_BY};

use super::{Ctx, protocol};
use crate::util::reconciler::Error;
use crate::volume::matching;

pub(super) async fn reconcile(
    volume: Arc<PersistentVolume>,
    ctx: Arc<Ctx>,
) -> Result<Action, Error> {
    sync(&volume, &ctx).await?;
    Ok(Action::await_change())
}

fn phase(volume: &PersistentVolume) -> &str {
    volume
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn released_or_failed(volume: &PersistentVolume) -> bool {
    matches!(phase(volume), "Released" | "Failed")
}

fn reclaim_policy(volume: &PersistentVolume) -> &str {
    volume
        .spec
        .as_ref()
        .and_then(|s| s.persistent_volume_reclaim_policy.as_deref())
        .unwrap_or("Retain")
}

/// The claim the volume's claimRef names, from the cache or, when the cache does not have
/// it, from the API: a volume made by a provisioner may be seen before its claim, and must
/// not be released for that.
async fn claim_for(
    volume: &PersistentVolume,
    ctx: &Ctx,
) -> Result<Option<PersistentVolumeClaim>, Error> {
    let Some(r) = volume.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
        return Ok(None);
    };
    let (ns, name) = (
        r.namespace.clone().unwrap_or_default(),
        r.name.clone().unwrap_or_default(),
    );
    let cached = ctx
        .claims
        .get(&ObjectRef::new(&name).within(&ns))
        .map(|c| (*c).clone());
    let claim = match cached {
        Some(c) if c.metadata.uid == r.uid => Some(c),
        // Not cached, or cached with another UID: the API has the last word.
        cached if cached.is_some() || !released_or_failed(volume) => {
            ctx.claims_api(&ns).get_opt(&name).await?
        }
        _ => None,
    };
    Ok(claim.filter(|c| c.metadata.uid == r.uid))
}

async fn sync(volume: &PersistentVolume, ctx: &Ctx) -> Result<(), Error> {
    let claim_ref = volume.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
    let Some(claim_ref) = claim_ref else {
        ctx.volume_phase(volume, "Available", "").await?;
        return Ok(());
    };
    if claim_ref.uid.as_deref().unwrap_or("").is_empty() {
        // Reserved for a claim that has not been bound to it yet: the claim's sync binds it.
        ctx.volume_phase(volume, "Available", "").await?;
        return Ok(());
    }
    let Some(claim) = claim_for(volume, ctx).await? else {
        // The claim is gone: released, then reclaimed.
        let volume = if released_or_failed(volume) {
            volume.clone()
        } else {
            tracing::info!(policy = reclaim_policy(volume), "volume is released");
            ctx.volume_phase(volume, "Released", "").await?
        };
        return reclaim(&volume, ctx).await;
    };
    let bound_name = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .unwrap_or("");
    if bound_name.is_empty() {
        if matching::volume_mode_mismatch(&claim, volume) {
            let note = format!(
                "Cannot bind PersistentVolume to requested PersistentVolumeClaim {:?} due to incompatible volumeMode.",
                claim.name_any()
            );
            ctx.event(volume, EventType::Warning, "VolumeMismatch", note)
                .await;
            let note = format!(
                "Cannot bind PersistentVolume {:?} to requested PersistentVolumeClaim due to incompatible volumeMode.",
                volume.name_any()
            );
            ctx.event(&claim, EventType::Warning, "VolumeMismatch", note)
                .await;
        }
        // The claim's sync finishes the binding; its loop hears of this volume already.
        return Ok(());
    }
    if Some(bound_name) == volume.metadata.name.as_deref() {
        ctx.volume_phase(volume, "Bound", "").await?;
        return Ok(());
    }
    // The claim went to another volume.
    let provisioned = volume::has_annotation(&volume.metadata, ANN_PROVISIONED_BY);
    if provisioned && reclaim_policy(volume) == "Delete" {
        let volume = if released_or_failed(volume) {
            volume.clone()
        } else {
            ctx.volume_phase(volume, "Released", "").await?
        };
        return reclaim(&volume, ctx).await;
    }
    let by_controller = volume::has_annotation(&volume.metadata, ANN_BOUND_BY_CONTROLLER);
    tracing::info!(
        by_controller,
        "the volume's claim is bound to another volume: unbinding"
    );
    let next = ctx.replace_volume(&protocol::unbind_volume(volume)).await?;
    ctx.volume_phase(&next, "Available", "").await?;
    Ok(())
}

/// Upstream's `reclaimVolume`.
async fn reclaim(volume: &PersistentVolume, ctx: &Ctx) -> Result<(), Error> {
    match reclaim_policy(volume) {
        "Retain" => Ok(()),
        "Recycle" => {
            let Some(volume) = still_released(volume, ctx).await? else {
                return Ok(());
            };
            ctx.volume_phase_with_event(
                &volume,
                "Failed",
                "VolumeFailedRecycle",
                "No recycler plugin found for the volume!",
            )
            .await?;
            Ok(())
        }
        "Delete" => delete(volume, ctx).await,
        _ => {
            ctx.volume_phase_with_event(
                volume,
                "Failed",
                "VolumeUnknownReclaimPolicy",
                "Volume has unrecognized PersistentVolumeReclaimPolicy",
            )
            .await?;
            Ok(())
        }
    }
}

/// The volume as the API has it now, if it still waits to be reclaimed (upstream's
/// `isVolumeReleased` on a fresh read): an earlier reclaim may have finished meanwhile.
async fn still_released(
    volume: &PersistentVolume,
    ctx: &Ctx,
) -> Result<Option<PersistentVolume>, Error> {
    let Some(fresh) = ctx.volumes_api().get_opt(&volume.name_any()).await? else {
        return Ok(None);
    };
    if fresh.metadata.deletion_timestamp.is_some() {
        return Ok(None);
    }
    let Some(r) = fresh.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
        return Ok(None);
    };
    if r.uid.as_deref().unwrap_or("").is_empty() {
        return Ok(None);
    }
    let ns = r.namespace.clone().unwrap_or_default();
    let name = r.name.clone().unwrap_or_default();
    match ctx.claims_api(&ns).get_opt(&name).await? {
        Some(c)
            if c.metadata.uid == r.uid
                && c.spec.as_ref().and_then(|s| s.volume_name.as_deref())
                    == fresh.metadata.name.as_deref() =>
        {
            Ok(None)
        }
        _ => Ok(Some(fresh)),
    }
}

/// What deletes a released volume's storage.
enum Deleter<'a> {
    /// Its provisioner, outside this controller: nothing to do here.
    External,
    /// Upstream's hostPath deleter, which removes only paths under `/tmp/`.
    HostPath(&'a str),
}

fn deleter(volume: &PersistentVolume) -> Result<Deleter<'_>, String> {
    let provisioned_by = volume
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANN_PROVISIONED_BY))
        .filter(|p| !p.is_empty());
    if let Some(p) = provisioned_by {
        if !p.starts_with("kubernetes.io/") {
            return Ok(Deleter::External);
        }
        if p != "kubernetes.io/host-path" {
            return Err(format!("no volume plugin matched name: {p}"));
        }
    }
    match volume.spec.as_ref().and_then(|s| s.host_path.as_ref()) {
        Some(h) => Ok(Deleter::HostPath(&h.path)),
        None => Err(format!(
            "error getting deleter volume plugin for volume {:?}: no deletable volume plugin matched",
            volume.name_any()
        )),
    }
}

/// Upstream's hostPath deleter: only `/tmp/.+` (anywhere in the path, as its unanchored
/// pattern) is removed, so a static volume on real data is never erased by a policy typo.
fn delete_host_path(path: &str) -> Result<(), String> {
    let under_tmp = path
        .match_indices("/tmp/")
        .any(|(i, m)| path.len() > i + m.len());
    if !under_tmp {
        return Err(format!(
            "host_path deleter only supports /tmp/.+ but received provided {path}"
        ));
    }
    match std::fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

/// Upstream's `deleteVolumeOperation`.
async fn delete(volume: &PersistentVolume, ctx: &Ctx) -> Result<(), Error> {
    let Some(volume) = still_released(volume, ctx).await? else {
        return Ok(());
    };
    let result = match deleter(&volume) {
        Ok(Deleter::External) => {
            tracing::debug!("the volume's provisioner deletes it");
            return Ok(());
        }
        Ok(Deleter::HostPath(path)) => delete_host_path(path),
        Err(e) => Err(e),
    };
    if let Err(why) = result {
        ctx.volume_phase_with_event(&volume, "Failed", "VolumeFailedDelete", &why)
            .await?;
        // Retried with backoff, as upstream retries at every sync.
        return Err(Error::Failed(why));
    }
    tracing::info!("deleting the reclaimed volume");
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: volume.uid(),
            resource_version: None,
        }),
        ..Default::default()
    };
    match ctx.volumes_api().delete(&volume.name_any(), &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_tmp_host_paths_are_deleted() {
        assert_eq!(
            delete_host_path("/data/vol"),
            Err("host_path deleter only supports /tmp/.+ but received provided /data/vol".into())
        );
        assert!(delete_host_path("/tmp/").is_err());
        let dir = tempfile_dir();
        std::fs::write(format!("{dir}/f"), "x").unwrap();
        assert_eq!(delete_host_path(&dir), Ok(()));
        assert!(!std::path::Path::new(&dir).exists());
        // Already gone is fine.
        assert_eq!(delete_host_path(&dir), Ok(()));
    }

    fn tempfile_dir() -> String {
        let dir = std::env::temp_dir().join(format!(
            "minik8s-hostpath-{}-{}",
            std::process::id(),
            k8s_openapi::jiff::Timestamp::now().as_nanosecond()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let s = dir.display().to_string();
        assert!(s.starts_with("/tmp/"), "{s}");
        s
    }

    #[test]
    fn volumes_go_to_their_deleter() {
        let pv = |v: serde_json::Value| -> PersistentVolume { serde_json::from_value(v).unwrap() };
        let local = pv(serde_json::json!({"metadata": {"name": "l",
            "annotations": {ANN_PROVISIONED_BY: "rancher.io/local-path"}},
            "spec": {"local": {"path": "/x"}}}));
        assert!(matches!(deleter(&local), Ok(Deleter::External)));
        let static_local = pv(serde_json::json!({"metadata": {"name": "l"},
            "spec": {"local": {"path": "/x"}}}));
        assert_eq!(
            deleter(&static_local).err().as_deref(),
            Some(
                "error getting deleter volume plugin for volume \"l\": no deletable volume plugin matched"
            )
        );
        let host = pv(serde_json::json!({"metadata": {"name": "h"},
            "spec": {"hostPath": {"path": "/tmp/h"}}}));
        assert!(matches!(deleter(&host), Ok(Deleter::HostPath("/tmp/h"))));
    }
}
