//! The root-CA publisher (upstream's pkg/controller/certificates/rootcacertpublisher): every
//! namespace holds a `kube-root-ca.crt` ConfigMap with the CA that signed the API server's
//! certificate, so pods can verify `https://kubernetes.default.svc` with what the
//! ServiceAccount admission mounts. It is created with the namespace and put back whenever
//! someone deletes or edits it.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};

use crate::informers::Cache;
use crate::informers::Informers;
use crate::util::reconciler::Error;
use crate::util::runtime::Controller;

pub const CONFIG_MAP: &str = "kube-root-ca.crt";
pub const DATA_KEY: &str = "ca.crt";
pub const DESCRIPTION_ANNOTATION: &str = "kubernetes.io/description";
pub const DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters.";

struct Ctx {
    client: Client,
    config_maps: Cache<ConfigMap>,
    root_ca: String,
}

/// Runs the publisher until dropped; `root_ca` is the PEM bundle to publish.
pub async fn run(informers: Arc<Informers>, root_ca: String) {
    let client = informers.client();
    let selection = format!("metadata.name={CONFIG_MAP}");
    let cm_informer =
        informers.selected::<ConfigMap>(watcher::Config::default().fields(&selection), &selection);
    let config_maps = cm_informer.store();
    // A change to any of the ConfigMaps is a change of its namespace. The cache holds the
    // change before it goes out, so the reconcile sees it.
    let changes = cm_informer
        .touched()
        .filter_map(|cm| async move { Some(ObjectRef::<Namespace>::new(&cm.namespace()?)) });
    let namespaces = informers.of::<Namespace>();
    Controller::for_shared_stream(namespaces.touched(), namespaces.store().kube_store())
        .reconcile_on(changes)
        .run(
            "root_ca_cert_publisher",
            reconcile,
            Arc::new(Ctx {
                client,
                config_maps,
                root_ca,
            }),
        )
        .await
}

/// What the ConfigMap must hold.
fn wanted_data(root_ca: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(DATA_KEY.to_string(), root_ca.to_string())])
}

/// The ConfigMap as it should be, from what is there (`None`: nothing to change).
fn desired(current: &ConfigMap, root_ca: &str) -> Option<ConfigMap> {
    let data = wanted_data(root_ca);
    let described = current
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(DESCRIPTION_ANNOTATION))
        .is_some_and(|d| !d.is_empty());
    if current.data.as_ref() == Some(&data) && described {
        return None;
    }
    let mut cm = current.clone();
    cm.data = Some(data);
    cm.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(DESCRIPTION_ANNOTATION.into(), DESCRIPTION.into());
    Some(cm)
}

async fn reconcile(ns: Arc<Namespace>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let name = ns.name_any();
    let active = ns.metadata.deletion_timestamp.is_none()
        && ns.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Terminating");
    if !active {
        return Ok(Action::await_change());
    }
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &name);
    match ctx
        .config_maps
        .get(&ObjectRef::new(CONFIG_MAP).within(&name))
    {
        None => {
            let cm = ConfigMap {
                metadata: ObjectMeta {
                    name: Some(CONFIG_MAP.into()),
                    namespace: Some(name.clone()),
                    annotations: Some(BTreeMap::from([(
                        DESCRIPTION_ANNOTATION.to_string(),
                        DESCRIPTION.to_string(),
                    )])),
                    ..ObjectMeta::default()
                },
                data: Some(wanted_data(&ctx.root_ca)),
                ..ConfigMap::default()
            };
            match api.create(&PostParams::default(), &cm).await {
                Ok(_) => tracing::info!("published the root CA"),
                // Not in the cache yet (the watch brings it), the namespace is gone, or it
                // started terminating meanwhile.
                Err(kube::Error::Api(s))
                    if s.is_already_exists() || s.is_not_found() || s.is_forbidden() => {}
                Err(e) => return Err(e.into()),
            }
        }
        Some(current) => {
            if let Some(cm) = desired(&current, &ctx.root_ca) {
                // Replaced at the version read: a conflict retries from the newer object.
                api.replace(CONFIG_MAP, &PostParams::default(), &cm).await?;
                tracing::info!("put the root CA back");
            }
        }
    }
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_edited_or_undescribed_config_map_is_put_back() {
        let ca = "-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n";
        let mut cm = ConfigMap {
            data: Some(wanted_data(ca)),
            ..Default::default()
        };
        cm.metadata.resource_version = Some("7".into());
        let fixed = desired(&cm, ca).expect("no description yet");
        assert_eq!(
            fixed.metadata.annotations.as_ref().unwrap()[DESCRIPTION_ANNOTATION],
            DESCRIPTION
        );
        assert_eq!(fixed.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(desired(&fixed, ca), None);
        let mut edited = fixed.clone();
        edited
            .data
            .as_mut()
            .unwrap()
            .insert("extra".into(), "y".into());
        assert_eq!(desired(&edited, ca).unwrap().data, Some(wanted_data(ca)));
        assert_eq!(
            desired(&fixed, "other").unwrap().data,
            Some(wanted_data("other"))
        );
    }
}
