//! The root-CA publisher against the in-process API server: every namespace has the
//! `kube-root-ca.crt` ConfigMap, and it comes back after an edit or a delete.

use minik8s_controllers::informers::Informers;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use minik8s_controllers::rootcacertpublisher::{CONFIG_MAP, DESCRIPTION, DESCRIPTION_ANNOTATION};
use serde_json::json;
use testkit::{Backend, InProcess, eventually};

const WAIT: Duration = Duration::from_secs(30);
const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n";

fn published(cm: &ConfigMap) -> bool {
    cm.data
        .as_ref()
        .and_then(|d| d.get("ca.crt"))
        .map(String::as_str)
        == Some(CA)
        && cm.data.as_ref().is_some_and(|d| d.len() == 1)
        && cm
            .annotations()
            .get(DESCRIPTION_ANNOTATION)
            .map(String::as_str)
            == Some(DESCRIPTION)
}

#[tokio::test]
async fn every_namespace_holds_the_root_ca() -> anyhow::Result<()> {
    let api = InProcess::start(Backend::Sqlite).await?;
    let client = api.client();
    tokio::spawn(minik8s_controllers::rootcacertpublisher::run(
        Informers::new(client.clone()),
        CA.to_string(),
    ));
    // Namespaces from before the controller started, and new ones.
    let in_default: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    eventually(WAIT, "the default namespace's CA", || async {
        in_default
            .get_opt(CONFIG_MAP)
            .await
            .unwrap()
            .filter(published)
    })
    .await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "team"}}))?,
        )
        .await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "team");
    let first = eventually(WAIT, "the new namespace's CA", || async {
        cms.get_opt(CONFIG_MAP).await.unwrap().filter(published)
    })
    .await;

    // An edit is put back: the data replaced whole, the description restored; labels stay.
    cms.patch(
        CONFIG_MAP,
        &PatchParams::default(),
        &Patch::Merge(json!({
            "metadata": {"labels": {"mine": "yes"}, "annotations": {DESCRIPTION_ANNOTATION: null}},
            "data": {"ca.crt": "tampered", "extra": "x"}
        })),
    )
    .await?;
    let fixed = eventually(WAIT, "the CA to be put back", || async {
        cms.get_opt(CONFIG_MAP).await.unwrap().filter(published)
    })
    .await;
    assert_eq!(fixed.labels().get("mine").map(String::as_str), Some("yes"));
    assert_eq!(fixed.uid(), first.uid());

    cms.delete(CONFIG_MAP, &DeleteParams::default()).await?;
    let again = eventually(WAIT, "the CA to come back", || async {
        cms.get_opt(CONFIG_MAP)
            .await
            .unwrap()
            .filter(|cm| cm.uid() != first.uid() && published(cm))
    })
    .await;
    assert_eq!(again.name_any(), CONFIG_MAP);
    Ok(())
}
