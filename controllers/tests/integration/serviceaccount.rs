//! The ServiceAccount controller against the in-process API server.

use minik8s_controllers::informers::Informers;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use testkit::{Backend, InProcess, eventually};

const WAIT: Duration = Duration::from_secs(30);

#[tokio::test]
async fn every_namespace_gets_a_default_service_account_back() -> anyhow::Result<()> {
    let api = InProcess::start(Backend::Sqlite).await?;
    let client = api.client();
    tokio::spawn(minik8s_controllers::serviceaccount::run(Informers::new(
        client.clone(),
    )));
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "team"}}))?,
        )
        .await?;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "team");
    let first = eventually(WAIT, "a default service account", || async {
        accounts.get_opt("default").await.unwrap()
    })
    .await;
    // Namespaces that existed before the controller started have one too.
    let in_default: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
    eventually(WAIT, "the default namespace's account", || async {
        in_default.get_opt("default").await.unwrap()
    })
    .await;

    accounts.delete("default", &DeleteParams::default()).await?;
    let second = eventually(WAIT, "the default service account to come back", || async {
        accounts
            .get_opt("default")
            .await
            .unwrap()
            .filter(|sa| sa.uid() != first.uid())
    })
    .await;
    assert_eq!(second.name_any(), "default");
    Ok(())
}
