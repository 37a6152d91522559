//! The scale target, reached only through its `/scale` subresource, as upstream's scale client:
//! any kind that serves one (Deployments, ReplicaSets, StatefulSets, custom resources) works
//! without this controller knowing it. The kind's resource is found by discovery once and
//! remembered; a failed read forgets it, so a CRD installed later is found on the next sync.

use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::api::autoscaling::v1::Scale;
use k8s_openapi::api::autoscaling::v2::CrossVersionObjectReference;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, discovery};

/// Why the scale of a target could not be read or written; the message is what upstream
/// puts in the `FailedGetScale` condition and event.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("unable to determine resource for scale target reference: {0}")]
    Mapping(String),
    #[error("{0}")]
    Scale(#[from] kube::Error),
}

/// Resolved resources by group/version/kind.
#[derive(Default)]
pub struct Targets {
    resources: Mutex<HashMap<(String, String, String), ApiResource>>,
}

impl Targets {
    async fn resource(
        &self,
        client: &Client,
        target: &CrossVersionObjectReference,
    ) -> Result<ApiResource, TargetError> {
        let (group, version) = split_api_version(target.api_version.as_deref().unwrap_or(""));
        let key = (group.clone(), version.clone(), target.kind.clone());
        if let Some(ar) = self.lock().get(&key) {
            return Ok(ar.clone());
        }
        let gvk = GroupVersionKind::gvk(&group, &version, &target.kind);
        let (ar, caps) = discovery::pinned_kind(client, &gvk)
            .await
            .map_err(|e| TargetError::Mapping(mapping_message(&gvk, &e)))?;
        if caps.subresources.iter().all(|(s, _)| s.plural != "scale") {
            return Err(TargetError::Mapping(format!(
                "{} has no scale subresource",
                gvk_text(&gvk)
            )));
        }
        self.lock().insert(key, ar.clone());
        Ok(ar)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String, String), ApiResource>> {
        self.resources.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn forget(&self, target: &CrossVersionObjectReference) {
        let (group, version) = split_api_version(target.api_version.as_deref().unwrap_or(""));
        self.lock().remove(&(group, version, target.kind.clone()));
    }

    /// The target's current Scale, read through `/scale`.
    pub async fn get(
        &self,
        client: &Client,
        namespace: &str,
        target: &CrossVersionObjectReference,
    ) -> Result<Scale, TargetError> {
        let ar = self.resource(client, target).await?;
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &ar);
        api.get_scale(&target.name).await.map_err(|e| {
            self.forget(target);
            TargetError::Scale(e)
        })
    }

    /// Writes `scale` back with `replicas`; it carries the resourceVersion it was read at, so
    /// a target changed since answers 409 and the next sync reads it again.
    pub async fn update(
        &self,
        client: &Client,
        namespace: &str,
        target: &CrossVersionObjectReference,
        mut scale: Scale,
        replicas: i32,
    ) -> Result<Scale, TargetError> {
        let ar = self.resource(client, target).await?;
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &ar);
        scale.spec.get_or_insert_with(Default::default).replicas = Some(replicas);
        Ok(api
            .replace_scale(&target.name, &PostParams::default(), &scale)
            .await?)
    }
}

/// `apps/v1` → (`apps`, `v1`); `v1` → (``, `v1`).
fn split_api_version(api_version: &str) -> (String, String) {
    match api_version.split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (String::new(), api_version.to_string()),
    }
}

fn gvk_text(gvk: &GroupVersionKind) -> String {
    if gvk.group.is_empty() {
        format!("{}, Kind={}", gvk.version, gvk.kind)
    } else {
        format!("{}/{}, Kind={}", gvk.group, gvk.version, gvk.kind)
    }
}

/// Upstream's RESTMapper message for a kind nobody serves.
fn mapping_message(gvk: &GroupVersionKind, e: &kube::Error) -> String {
    match e {
        kube::Error::Discovery(_) | kube::Error::Api(_) => {
            format!(
                "no matches for kind \"{}\" in group \"{}\"",
                gvk.kind, gvk.group
            )
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_versions_split_into_group_and_version() {
        assert_eq!(split_api_version("apps/v1"), ("apps".into(), "v1".into()));
        assert_eq!(split_api_version("v1"), (String::new(), "v1".into()));
    }
}
