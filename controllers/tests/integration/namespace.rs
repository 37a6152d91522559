//! The namespace controller against the in-process API server: a deleted namespace is
//! emptied of every kind (custom resources too), reports what holds it up in its conditions,
//! and disappears once its content is gone.

use minik8s_controllers::informers::Informers;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, NamespaceCondition, Pod, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;
use testkit::{Backend, InProcess, eventually};

const WAIT: Duration = Duration::from_secs(40);

fn condition<'a>(ns: &'a Namespace, type_: &str) -> Option<&'a NamespaceCondition> {
    ns.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

#[tokio::test]
async fn deleting_a_namespace_deletes_its_content_then_the_namespace() -> anyhow::Result<()> {
    let api = InProcess::start(Backend::Sqlite).await?;
    let client = api.client();
    tokio::spawn(minik8s_controllers::namespace::run(Informers::new(
        client.clone(),
    )));
    let pp = PostParams::default();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": "doomed"}}))?,
        )
        .await?;

    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(
        &pp,
        &serde_json::from_value(json!({
            "metadata": {"name": "gadgets.example.com"},
            "spec": {
                "group": "example.com",
                "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"},
                "scope": "Namespaced",
                "versions": [{
                    "name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                }],
            },
        }))?,
    )
    .await?;
    let ar = ApiResource {
        group: "example.com".into(),
        version: "v1".into(),
        api_version: "example.com/v1".into(),
        kind: "Gadget".into(),
        plural: "gadgets".into(),
    };
    let gadgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), "doomed", &ar);
    eventually(WAIT, "a Gadget to be created", || async {
        let g = DynamicObject::new("g", &ar).data(json!({"spec": {}}));
        gadgets.create(&PostParams::default(), &g).await.ok()
    })
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "doomed");
    cms.create(
        &pp,
        &serde_json::from_value(json!({"metadata": {"name": "plain"}}))?,
    )
    .await?;
    cms.create(
        &pp,
        &serde_json::from_value(
            json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}}),
        )?,
    )
    .await?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "doomed");
    secrets
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": "s"}}))?,
        )
        .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "doomed");
    pods.create(
        &pp,
        &serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
        }))?,
    )
    .await?;

    namespaces
        .delete("doomed", &DeleteParams::default())
        .await?;
    let ns = eventually(WAIT, "the held ConfigMap to be reported", || async {
        let ns = namespaces.get("doomed").await.ok()?;
        let c = condition(&ns, "NamespaceFinalizersRemaining")?;
        (c.status == "True").then_some(ns)
    })
    .await;
    assert_eq!(
        ns.status.as_ref().unwrap().phase.as_deref(),
        Some("Terminating")
    );
    let finalizers = condition(&ns, "NamespaceFinalizersRemaining").unwrap();
    assert_eq!(finalizers.reason.as_deref(), Some("SomeFinalizersRemain"));
    assert_eq!(
        finalizers.message.as_deref(),
        Some(
            "Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances"
        )
    );
    let remaining = condition(&ns, "NamespaceContentRemaining").unwrap();
    assert_eq!(remaining.status, "True");
    assert_eq!(
        remaining.message.as_deref(),
        Some("Some resources are remaining: configmaps. has 1 resource instances")
    );
    let content = condition(&ns, "NamespaceDeletionContentFailure").unwrap();
    assert_eq!(content.status, "False");
    assert_eq!(content.reason.as_deref(), Some("ContentDeleted"));
    // Everything else is gone already.
    assert!(gadgets.get_opt("g").await?.is_none());
    assert!(cms.get_opt("plain").await?.is_none());
    assert!(secrets.get_opt("s").await?.is_none());
    assert!(pods.get_opt("p").await?.is_none());
    assert!(cms.get("held").await?.metadata.deletion_timestamp.is_some());

    cms.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await?;
    eventually(WAIT, "the namespace to be gone", || async {
        namespaces
            .get_opt("doomed")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    // Other namespaces are untouched.
    let default = namespaces.get("default").await?;
    assert!(default.metadata.deletion_timestamp.is_none());
    assert_eq!(default.name_any(), "default");
    Ok(())
}
