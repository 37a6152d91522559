//! PersistentVolumes in the control plane, as kube-controller-manager runs them: the binder
//! (`persistentvolume-binder`), the two protection controllers that hold deleted claims and
//! volumes while they are in use, and the expander; and the local-path provisioner that
//! every node agent runs beside its kubelet (k3s's `rancher.io/local-path`, built in).
//! One module per controller; `matching` holds the binder's pure matching rules.

pub mod binder;
pub mod expander;
pub mod local_path;
pub mod matching;
pub mod pv_protection;
pub mod pvc_protection;

use k8s_openapi::api::core::v1::Pod;

/// The names of the claims `pod` uses: `persistentVolumeClaim` volumes, and the claims of its
/// generic ephemeral volumes (`<pod>-<volume>`, upstream's `ephemeral.VolumeClaimName`).
pub fn claims_of(pod: &Pod) -> impl Iterator<Item = String> + '_ {
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(move |v| {
            if let Some(c) = &v.persistent_volume_claim {
                Some(c.claim_name.clone())
            } else {
                v.ephemeral
                    .as_ref()
                    .map(|_| format!("{pod_name}-{}", v.name))
            }
        })
}
