//! projected: configMap, secret and downwardAPI sources merged into one directory (later
//! sources win on a shared path), on a tmpfs as upstream does. serviceAccountToken and
//! clusterTrustBundle sources are refused with a clear error for now: this cluster has no
//! TokenRequest API yet.

use k8s_openapi::api::core::v1::{Pod, ProjectedVolumeSource};

use super::atomic_writer::Payload;
use super::util::aggregate;
use super::{NodeAllocatable, configmap, downward_api, secret};

pub(crate) const PLUGIN: &str = "kubernetes.io~projected";

/// Upstream's projected collectData: every source is read; all their errors are reported.
pub(crate) async fn collect(
    client: &kube::Client,
    pod: &Pod,
    source: &ProjectedVolumeSource,
    allocatable: &NodeAllocatable,
) -> Result<Payload, String> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let default_mode = source.default_mode.unwrap_or(0o644);
    let mut payload = Payload::new();
    let mut errors = Vec::new();
    for s in source.sources.iter().flatten() {
        let part = if let Some(src) = &s.secret {
            let optional = src.optional.unwrap_or(false);
            match secret::get(client, namespace, &src.name, optional).await {
                Ok(obj) => {
                    secret::make_payload(src.items.as_deref(), obj.as_ref(), default_mode, optional)
                }
                Err(e) => Err(e),
            }
        } else if let Some(src) = &s.config_map {
            let optional = src.optional.unwrap_or(false);
            match configmap::get(client, namespace, &src.name, optional).await {
                Ok(obj) => configmap::make_payload(
                    src.items.as_deref(),
                    obj.as_ref(),
                    default_mode,
                    optional,
                ),
                Err(e) => Err(e),
            }
        } else if let Some(src) = &s.downward_api {
            downward_api::collect(
                src.items.as_deref().unwrap_or_default(),
                pod,
                allocatable,
                default_mode,
            )
        } else if let Some(t) = &s.service_account_token {
            Err(format!(
                "serviceAccountToken projection (path {:?}) is not supported by this kubelet yet",
                t.path
            ))
        } else if s.cluster_trust_bundle.is_some() {
            Err("clusterTrustBundle projection is not supported by this kubelet".into())
        } else {
            Ok(Payload::new())
        };
        match part {
            Ok(p) => payload.extend(p),
            Err(e) => errors.push(e),
        }
    }
    aggregate(errors).map(|()| payload)
}
