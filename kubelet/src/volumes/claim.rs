//! persistentVolumeClaim (and generic ephemeral) volumes: the claim in the pod's namespace, the
//! volume it is bound to, and what of that volume this kubelet can mount, as upstream's
//! desired-state populator finds them (`createVolumeSpec`, `getPVCExtractPV`, `getPVSpec`).
//! While a claim is missing or not bound the pod waits, with upstream's `FailedMount` words;
//! the kubelet watches claims and volumes (see [`waiting_pods`]) to try again as soon as one
//! changes.
//!
//! Of the volume sources a PersistentVolume may have, this kubelet mounts `hostPath` (checked
//! as the hostPath plugin checks it) and `local` (a directory of the node, bind-mounted into
//! the pod's directory and given the pod's fsGroup, as upstream's local plugin); block volumes
//! are refused.

use std::fs;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod, Volume};
use kube::Api;

/// The local volume plugin's directory under `<pod>/volumes/` (upstream's
/// `kubernetes.io/local-volume`, escaped).
pub(crate) const LOCAL_PLUGIN: &str = "kubernetes.io~local-volume";

/// The claim a pod volume uses, and whether it is a generic ephemeral volume's
/// (`<pod>-<volume>`, upstream's `ephemeral.VolumeClaimName`).
pub fn claim_of(pod: &Pod, volume: &Volume) -> Option<(String, bool)> {
    if let Some(source) = &volume.persistent_volume_claim {
        return Some((source.claim_name.clone(), false));
    }
    volume.ephemeral.as_ref().map(|_| {
        (
            format!(
                "{}-{}",
                pod.metadata.name.as_deref().unwrap_or_default(),
                volume.name
            ),
            true,
        )
    })
}

/// Whether `pod` uses claim `namespace/name`.
pub fn uses_claim(pod: &Pod, namespace: &str, name: &str) -> bool {
    pod.metadata.namespace.as_deref() == Some(namespace)
        && pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.as_ref())
            .is_some_and(|vs| {
                vs.iter()
                    .filter_map(|v| claim_of(pod, v))
                    .any(|(c, _)| c == name)
            })
}

/// How the pod's containers use a volume: in volumeMounts, volumeDevices, or both.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Usage {
    pub mounts: bool,
    pub devices: bool,
}

impl Usage {
    /// Upstream's `GetPodVolumeNames` for one volume: every kind of container counts.
    pub(crate) fn of(pod: &Pod, volume: &str) -> Usage {
        let mut usage = Usage::default();
        let Some(spec) = pod.spec.as_ref() else {
            return usage;
        };
        let containers = spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten());
        let ephemeral = spec.ephemeral_containers.iter().flatten();
        let lists = containers
            .map(|c| (c.volume_mounts.as_deref(), c.volume_devices.as_deref()))
            .chain(ephemeral.map(|c| (c.volume_mounts.as_deref(), c.volume_devices.as_deref())));
        for (mounts, devices) in lists {
            usage.mounts |= mounts.unwrap_or_default().iter().any(|m| m.name == volume);
            usage.devices |= devices.unwrap_or_default().iter().any(|d| d.name == volume);
        }
        usage
    }
}

/// What the kubelet mounts for a bound claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    HostPath {
        path: PathBuf,
        type_: String,
    },
    Local {
        path: PathBuf,
    },
    /// A source this kubelet has no plugin for (its field name).
    Unsupported(&'static str),
}

/// A claim's volume, ready to be set up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ClaimVolume {
    /// The PersistentVolume's name: what upstream's messages call the volume.
    pub pv_name: String,
    pub source: Source,
    /// The pod's `persistentVolumeClaim.readOnly`.
    pub read_only: bool,
}

/// The claim or the volume is not (yet) what a pod can use: upstream's populator errors,
/// which keep the pod's containers from starting.
pub(crate) type ProcessError = String;

/// Upstream's `getPVCExtractPV` past the fetch: a claim a pod can use now.
pub(crate) fn check_claim(claim: &PersistentVolumeClaim) -> Result<&str, ProcessError> {
    if claim.metadata.deletion_timestamp.is_some() {
        return Err("PVC is being deleted".into());
    }
    if claim.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Bound") {
        return Err("PVC is not bound".into());
    }
    claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .filter(|n| !n.is_empty())
        .ok_or_else(|| "PVC has empty pvc.Spec.VolumeName".into())
}

/// Upstream's `getPVSpec` and the volume mode checks of `createVolumeSpec`, then the source
/// this kubelet would mount.
pub(crate) fn plan(
    volume: &str,
    claim: &PersistentVolumeClaim,
    pv: &PersistentVolume,
    read_only: bool,
    usage: Usage,
) -> Result<ClaimVolume, ProcessError> {
    let pv_name = pv.metadata.name.clone().unwrap_or_default();
    let spec = pv.spec.clone().unwrap_or_default();
    let Some(claim_ref) = spec.claim_ref.as_ref() else {
        return Err(format!(
            "found PV object {pv_name} but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim"
        ));
    };
    if claim_ref.uid != claim.metadata.uid {
        return Err(format!(
            "found PV object {pv_name} but its pv.Spec.ClaimRef.UID {} does not point to claim.UID {}",
            claim_ref.uid.as_deref().unwrap_or_default(),
            claim.metadata.uid.as_deref().unwrap_or_default()
        ));
    }
    let mode = spec.volume_mode.as_deref().unwrap_or("Filesystem");
    if usage.mounts && mode != "Filesystem" {
        return Err(format!(
            "volume {volume} has volumeMode {mode}, but is specified in volumeMounts"
        ));
    }
    if usage.devices && mode != "Block" {
        return Err(format!(
            "volume {volume} has volumeMode {mode}, but is specified in volumeDevices"
        ));
    }
    if mode == "Block" {
        return Err(format!(
            "volume {volume} has volumeMode Block: block volumes are not supported by this kubelet"
        ));
    }
    let source = if let Some(h) = &spec.host_path {
        Source::HostPath {
            path: PathBuf::from(&h.path),
            type_: h.type_.clone().unwrap_or_default(),
        }
    } else if let Some(l) = &spec.local {
        Source::Local {
            path: PathBuf::from(&l.path),
        }
    } else {
        Source::Unsupported(unsupported_source(&spec))
    };
    Ok(ClaimVolume {
        pv_name,
        source,
        read_only,
    })
}

fn unsupported_source(spec: &k8s_openapi::api::core::v1::PersistentVolumeSpec) -> &'static str {
    let sources: [(&str, bool); 10] = [
        ("csi", spec.csi.is_some()),
        ("nfs", spec.nfs.is_some()),
        ("iscsi", spec.iscsi.is_some()),
        ("fc", spec.fc.is_some()),
        ("rbd", spec.rbd.is_some()),
        ("cephfs", spec.cephfs.is_some()),
        ("glusterfs", spec.glusterfs.is_some()),
        ("flexVolume", spec.flex_volume.is_some()),
        (
            "awsElasticBlockStore",
            spec.aws_elastic_block_store.is_some(),
        ),
        ("gcePersistentDisk", spec.gce_persistent_disk.is_some()),
    ];
    sources
        .iter()
        .find(|(_, set)| *set)
        .map(|(name, _)| *name)
        .unwrap_or("this")
}

/// Reads the claim of pod volume `volume` and its PersistentVolume from the API server (as
/// upstream's populator does: the freshest word on a bind) and plans its setup.
pub(crate) async fn resolve(
    client: &kube::Client,
    pod: &Pod,
    volume: &Volume,
) -> Result<ClaimVolume, ProcessError> {
    let Some((name, ephemeral)) = claim_of(pod, volume) else {
        return Err(format!("volume {} is not a claim", volume.name));
    };
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let processing = |e: String| format!("error processing PVC {namespace}/{name}: {e}");
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    let claim = match claims.get_opt(&name).await {
        Ok(Some(c)) => c,
        Ok(None) => {
            return Err(processing(format!(
                "failed to fetch PVC from API server: persistentvolumeclaims {name:?} not found"
            )));
        }
        Err(e) => {
            return Err(processing(format!(
                "failed to fetch PVC from API server: {}",
                super::api_error("persistentvolumeclaims", &name, e)
            )));
        }
    };
    let pv_name = check_claim(&claim).map_err(processing)?.to_string();
    if ephemeral {
        minik8s_api::volume::ephemeral_claim_is_for_pod(pod, &claim)?;
    }
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let pv = match pvs.get_opt(&pv_name).await {
        Ok(Some(pv)) => pv,
        Ok(None) => {
            return Err(processing(format!(
                "failed to fetch PV {pv_name} from API server: persistentvolumes {pv_name:?} not found"
            )));
        }
        Err(e) => {
            return Err(processing(format!(
                "failed to fetch PV {pv_name} from API server: {}",
                super::api_error("persistentvolumes", &pv_name, e)
            )));
        }
    };
    let read_only = volume
        .persistent_volume_claim
        .as_ref()
        .and_then(|s| s.read_only)
        .unwrap_or(false);
    plan(
        &volume.name,
        &claim,
        &pv,
        read_only,
        Usage::of(pod, &volume.name),
    )
    .map_err(processing)
}

/// Upstream's `GetFileType` check of the local plugin: a local volume is a directory of the
/// node (block devices are a block volume's, which this kubelet does not support).
pub(crate) fn check_local(path: &Path) -> Result<(), String> {
    let meta = match fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(format!(
                "path {:?} does not exist",
                path.display().to_string()
            ));
        }
        Err(e) => return Err(super::util::path_error("stat", path, &e)),
    };
    if meta.is_dir() {
        return Ok(());
    }
    use std::os::unix::fs::FileTypeExt;
    if meta.file_type().is_block_device() {
        return Err("local volumes on block devices are not supported by this kubelet".into());
    }
    Err("only directory and block device are supported".into())
}

/// The pods of this node waiting on claim `namespace/name` (or on any claim, when a relist
/// leaves nothing specific).
pub fn waiting_pods<'a>(
    pods: &'a [std::sync::Arc<Pod>],
    claim: Option<(&'a str, &'a str)>,
) -> impl Iterator<Item = &'a std::sync::Arc<Pod>> + 'a {
    pods.iter().filter(move |p| match claim {
        Some((namespace, name)) => uses_claim(p, namespace, name),
        None => p
            .spec
            .as_ref()
            .and_then(|s| s.volumes.as_ref())
            .is_some_and(|vs| vs.iter().any(|v| claim_of(p, v).is_some())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(extra: serde_json::Value) -> PersistentVolumeClaim {
        let mut v = serde_json::json!({
            "metadata": {"name": "data", "namespace": "default", "uid": "claim-uid"},
            "spec": {"volumeName": "pv1"},
            "status": {"phase": "Bound"},
        });
        merge(&mut v, extra);
        serde_json::from_value(v).unwrap()
    }

    fn pv(extra: serde_json::Value) -> PersistentVolume {
        let mut v = serde_json::json!({
            "metadata": {"name": "pv1"},
            "spec": {"claimRef": {"name": "data", "namespace": "default", "uid": "claim-uid"},
                     "local": {"path": "/mnt/disk"}},
        });
        merge(&mut v, extra);
        serde_json::from_value(v).unwrap()
    }

    fn merge(base: &mut serde_json::Value, extra: serde_json::Value) {
        match (base, extra) {
            (serde_json::Value::Object(b), serde_json::Value::Object(e)) => {
                for (k, v) in e {
                    merge(b.entry(k).or_insert(serde_json::Value::Null), v);
                }
            }
            (b, e) => *b = e,
        }
    }

    const MOUNTED: Usage = Usage {
        mounts: true,
        devices: false,
    };

    #[test]
    fn only_bound_claims_are_used() {
        assert_eq!(check_claim(&claim(serde_json::json!({}))), Ok("pv1"));
        assert_eq!(
            check_claim(&claim(serde_json::json!({"status": {"phase": "Pending"}}))),
            Err("PVC is not bound".into())
        );
        assert_eq!(
            check_claim(&claim(
                serde_json::json!({"metadata": {"deletionTimestamp": "2024-01-01T00:00:00Z"}})
            )),
            Err("PVC is being deleted".into())
        );
        assert_eq!(
            check_claim(&claim(serde_json::json!({"spec": {"volumeName": ""}}))),
            Err("PVC has empty pvc.Spec.VolumeName".into())
        );
    }

    #[test]
    fn local_and_host_path_volumes_are_planned_with_the_pods_read_only() {
        let c = claim(serde_json::json!({}));
        assert_eq!(
            plan("data", &c, &pv(serde_json::json!({})), true, MOUNTED),
            Ok(ClaimVolume {
                pv_name: "pv1".into(),
                source: Source::Local {
                    path: "/mnt/disk".into()
                },
                read_only: true,
            })
        );
        let host = pv(serde_json::json!({"spec": {"local": null,
            "hostPath": {"path": "/srv", "type": "Directory"}}}));
        assert_eq!(
            plan("data", &c, &host, false, MOUNTED).unwrap().source,
            Source::HostPath {
                path: "/srv".into(),
                type_: "Directory".into()
            }
        );
        let nfs = pv(serde_json::json!({"spec": {"local": null,
            "nfs": {"server": "nfs.example", "path": "/export"}}}));
        assert_eq!(
            plan("data", &c, &nfs, false, MOUNTED).unwrap().source,
            Source::Unsupported("nfs")
        );
    }

    #[test]
    fn a_volume_bound_elsewhere_or_of_the_wrong_mode_is_refused() {
        let c = claim(serde_json::json!({}));
        assert_eq!(
            plan(
                "data",
                &c,
                &pv(serde_json::json!({"spec": {"claimRef": null}})),
                false,
                MOUNTED
            ),
            Err("found PV object pv1 but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim".into())
        );
        assert_eq!(
            plan(
                "data",
                &c,
                &pv(serde_json::json!({"spec": {"claimRef": {"uid": "other"}}})),
                false,
                MOUNTED
            ),
            Err("found PV object pv1 but its pv.Spec.ClaimRef.UID other does not point to claim.UID claim-uid".into())
        );
        let block = pv(serde_json::json!({"spec": {"volumeMode": "Block"}}));
        assert_eq!(
            plan("data", &c, &block, false, MOUNTED),
            Err("volume data has volumeMode Block, but is specified in volumeMounts".into())
        );
        let devices = Usage {
            mounts: false,
            devices: true,
        };
        assert_eq!(
            plan("data", &c, &block, false, devices),
            Err(
                "volume data has volumeMode Block: block volumes are not supported by this kubelet"
                    .into()
            )
        );
        assert_eq!(
            plan("data", &c, &pv(serde_json::json!({})), false, devices),
            Err("volume data has volumeMode Filesystem, but is specified in volumeDevices".into())
        );
    }

    #[test]
    fn ephemeral_claims_are_named_after_the_pod_and_must_be_its_own() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "pod-uid"},
            "spec": {"containers": [{"name": "c", "volumeMounts": [{"name": "scratch", "mountPath": "/s"}]}],
                     "volumes": [{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]},
        }))
        .unwrap();
        let v = &pod.spec.as_ref().unwrap().volumes.as_ref().unwrap()[0];
        assert_eq!(claim_of(&pod, v), Some(("web-scratch".into(), true)));
        assert!(uses_claim(&pod, "default", "web-scratch"));
        assert!(!uses_claim(&pod, "other", "web-scratch"));
        assert_eq!(Usage::of(&pod, "scratch"), MOUNTED);
        let foreign = claim(serde_json::json!({"metadata": {"name": "web-scratch"}}));
        assert_eq!(
            minik8s_api::volume::ephemeral_claim_is_for_pod(&pod, &foreign),
            Err(
                "PVC default/web-scratch was not created for pod default/web (pod is not owner)"
                    .into()
            )
        );
        let own = claim(
            serde_json::json!({"metadata": {"ownerReferences": [{"apiVersion": "v1",
            "kind": "Pod", "name": "web", "uid": "pod-uid", "controller": true}]}}),
        );
        assert_eq!(
            minik8s_api::volume::ephemeral_claim_is_for_pod(&pod, &own),
            Ok(())
        );
    }

    #[test]
    fn local_paths_must_be_directories() {
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(check_local(tmp.path()), Ok(()));
        let missing = tmp.path().join("missing");
        assert_eq!(
            check_local(&missing),
            Err(format!(
                "path {:?} does not exist",
                missing.display().to_string()
            ))
        );
        let file = tmp.path().join("f");
        fs::write(&file, "x").unwrap();
        assert_eq!(
            check_local(&file),
            Err("only directory and block device are supported".into())
        );
    }
}
