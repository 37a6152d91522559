//! projected: configMap, secret, downwardAPI and serviceAccountToken sources merged into one
//! directory (later sources win on a shared path), on a tmpfs as upstream does.
//! clusterTrustBundle sources are refused with a clear error: this cluster does not serve
//! ClusterTrustBundles.

use k8s_openapi::api::core::v1::{Pod, ProjectedVolumeSource};

use super::atomic_writer::FileProjection;
use super::atomic_writer::Payload;
use super::token::TokenManager;
use super::util::aggregate;
use super::{NodeAllocatable, configmap, downward_api, secret};

pub(crate) const PLUGIN: &str = "kubernetes.io~projected";

/// Upstream's projected collectData: every source is read; all their errors are reported.
pub(crate) async fn collect(
    client: &kube::Client,
    pod: &Pod,
    source: &ProjectedVolumeSource,
    allocatable: &NodeAllocatable,
    tokens: &TokenManager,
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
            // Only the owner may read a token that an fsGroup makes group-owned.
            let fs_group = pod
                .spec
                .as_ref()
                .and_then(|s| s.security_context.as_ref())
                .and_then(|c| c.fs_group)
                .is_some();
            let mode = if fs_group { 0o600 } else { default_mode as u32 };
            tokens.token(client, pod, t).await.map(|token| {
                Payload::from([(
                    t.path.clone(),
                    FileProjection {
                        data: token.into_bytes(),
                        mode,
                    },
                )])
            })
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
