//! The garbage collector against the in-process API server: background, foreground and orphan
//! propagation, custom-resource owners discovered after start, and dangling references.

use std::time::Duration;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams,
    PropagationPolicy,
};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use testkit::{Backend, InProcess, eventually};

const WAIT: Duration = Duration::from_secs(30);

fn owner_ref<K: Resource<DynamicType = ()>>(owner: &K, block: bool) -> OwnerReference {
    OwnerReference {
        api_version: K::api_version(&()).into(),
        kind: K::kind(&()).into(),
        name: owner.name_any(),
        uid: owner.uid().expect("created"),
        block_owner_deletion: Some(block),
        controller: Some(true),
    }
}

fn cm(name: &str, owners: Vec<OwnerReference>) -> ConfigMap {
    let mut c: ConfigMap = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    c.metadata.owner_references = Some(owners).filter(|o| !o.is_empty());
    c
}

fn pod(name: &str, owner: &ReplicaSet) -> Pod {
    let mut p: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
    }))
    .unwrap();
    p.metadata.owner_references = Some(vec![owner_ref(owner, true)]);
    p
}

fn replica_set(name: &str) -> ReplicaSet {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
            },
        },
    }))
    .unwrap()
}

async fn start() -> anyhow::Result<(InProcess, Client)> {
    let api = InProcess::start(Backend::Sqlite).await?;
    let client = api.client();
    tokio::spawn(minik8s_controllers::garbagecollector::run(client.clone()));
    Ok((api, client))
}

async fn gone<K>(api: &Api<K>, name: &str) -> Option<()>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.get_opt(name).await.unwrap().is_none().then_some(())
}

fn with_policy(policy: PropagationPolicy) -> DeleteParams {
    DeleteParams {
        propagation_policy: Some(policy),
        ..DeleteParams::default()
    }
}

#[tokio::test]
async fn background_deletion_removes_dependents_and_chains() -> anyhow::Result<()> {
    let (_api, client) = start().await?;
    let pp = PostParams::default();
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");

    let rs = sets.create(&pp, &replica_set("web")).await?;
    for name in ["web-1", "web-2"] {
        pods.create(&pp, &pod(name, &rs)).await?;
    }
    let a = cms.create(&pp, &cm("a", vec![])).await?;
    let b = cms
        .create(&pp, &cm("b", vec![owner_ref(&a, false)]))
        .await?;
    cms.create(&pp, &cm("c", vec![owner_ref(&b, false)]))
        .await?;
    let bystander = cms.create(&pp, &cm("bystander", vec![])).await?;

    sets.delete("web", &DeleteParams::default()).await?;
    cms.delete("a", &DeleteParams::default()).await?;
    eventually(WAIT, "the ReplicaSet's pods to be deleted", || async {
        gone(&pods, "web-1").await?;
        gone(&pods, "web-2").await
    })
    .await;
    eventually(WAIT, "the ConfigMap chain to be deleted", || async {
        gone(&cms, "b").await?;
        gone(&cms, "c").await
    })
    .await;
    assert_eq!(cms.get("bystander").await?.uid(), bystander.uid());
    Ok(())
}

#[tokio::test]
async fn foreground_deletion_waits_for_blocking_dependents() -> anyhow::Result<()> {
    let (_api, client) = start().await?;
    let pp = PostParams::default();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let parent = cms.create(&pp, &cm("parent", vec![])).await?;
    let child = cms
        .create(&pp, &cm("child", vec![owner_ref(&parent, true)]))
        .await?;
    let mut held = cm("grandchild", vec![owner_ref(&child, true)]);
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    cms.create(&pp, &held).await?;

    cms.delete("parent", &with_policy(PropagationPolicy::Foreground))
        .await?;
    // The grandchild is being deleted but held; the child waits for it in the foreground,
    // and the parent waits for the child.
    eventually(WAIT, "the grandchild to be deleted", || async {
        let g = cms.get("grandchild").await.ok()?;
        g.metadata.deletion_timestamp.map(|_| ())
    })
    .await;
    let child_now = cms.get("child").await?;
    assert!(
        child_now
            .finalizers()
            .iter()
            .any(|f| f == "foregroundDeletion"),
        "the child is deleted in the foreground: {:?}",
        child_now.metadata
    );
    let parent_now = cms.get("parent").await?;
    assert!(parent_now.metadata.deletion_timestamp.is_some());
    assert_eq!(parent_now.finalizers(), ["foregroundDeletion"]);

    cms.patch(
        "grandchild",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await?;
    eventually(WAIT, "the whole chain to be gone", || async {
        gone(&cms, "grandchild").await?;
        gone(&cms, "child").await?;
        gone(&cms, "parent").await
    })
    .await;
    let _ = child;
    Ok(())
}

#[tokio::test]
async fn orphan_deletion_strips_owner_references() -> anyhow::Result<()> {
    let (_api, client) = start().await?;
    let pp = PostParams::default();
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let rs = sets.create(&pp, &replica_set("web")).await?;
    let keep = pods.create(&pp, &pod("web-1", &rs)).await?;

    sets.delete("web", &with_policy(PropagationPolicy::Orphan))
        .await?;
    eventually(WAIT, "the orphaned ReplicaSet to be gone", || async {
        gone(&sets, "web").await
    })
    .await;
    let orphan = pods.get("web-1").await?;
    assert_eq!(orphan.uid(), keep.uid());
    assert!(orphan.owner_references().is_empty());
    Ok(())
}

#[tokio::test]
async fn custom_resource_owners_are_collected() -> anyhow::Result<()> {
    let (_api, client) = start().await?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
            }],
        },
    }))?;
    crds.create(&PostParams::default(), &crd).await?;
    let ar = ApiResource {
        group: "example.com".into(),
        version: "v1".into(),
        api_version: "example.com/v1".into(),
        kind: "Widget".into(),
        plural: "widgets".into(),
    };
    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    let widget = eventually(WAIT, "the Widget kind to be served", || async {
        let w = DynamicObject::new("w", &ar).data(json!({"spec": {}}));
        widgets.create(&PostParams::default(), &w).await.ok()
    })
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let owned_by_widget = OwnerReference {
        api_version: "example.com/v1".into(),
        kind: "Widget".into(),
        name: "w".into(),
        uid: widget.uid().expect("created"),
        block_owner_deletion: Some(true),
        controller: Some(true),
    };
    cms.create(
        &PostParams::default(),
        &cm("of-widget", vec![owned_by_widget]),
    )
    .await?;
    // A widget owned by a ConfigMap: custom resources are dependents too.
    let owner_cm = cms
        .create(&PostParams::default(), &cm("widget-owner", vec![]))
        .await?;
    let mut dependent = DynamicObject::new("dependent", &ar).data(json!({"spec": {}}));
    dependent.metadata.owner_references = Some(vec![owner_ref(&owner_cm, false)]);
    widgets.create(&PostParams::default(), &dependent).await?;

    widgets.delete("w", &DeleteParams::default()).await?;
    cms.delete("widget-owner", &DeleteParams::default()).await?;
    eventually(WAIT, "the widget's ConfigMap to be deleted", || async {
        gone(&cms, "of-widget").await
    })
    .await;
    eventually(WAIT, "the ConfigMap's widget to be deleted", || async {
        gone(&widgets, "dependent").await
    })
    .await;
    Ok(())
}

#[tokio::test]
async fn dangling_references_are_removed_or_collected() -> anyhow::Result<()> {
    let (_api, client) = start().await?;
    let pp = PostParams::default();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let alive = cms.create(&pp, &cm("alive", vec![])).await?;
    let ghost = OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: "ghost".into(),
        uid: "00000000-0000-0000-0000-000000000001".into(),
        ..OwnerReference::default()
    };
    // An owner of that name that exists, but is another object (another uid).
    let mut impostor = ghost.clone();
    impostor.name = "alive".into();
    impostor.uid = "00000000-0000-0000-0000-000000000002".into();

    cms.create(
        &pp,
        &cm("half-owned", vec![owner_ref(&alive, false), ghost.clone()]),
    )
    .await?;
    cms.create(&pp, &cm("ghost-owned", vec![ghost])).await?;
    cms.create(&pp, &cm("impostor-owned", vec![impostor]))
        .await?;

    eventually(WAIT, "the dangling reference to be removed", || async {
        let c = cms.get("half-owned").await.ok()?;
        (c.owner_references().len() == 1).then_some(c)
    })
    .await;
    assert_eq!(
        cms.get("half-owned").await?.owner_references()[0].uid,
        alive.uid().unwrap()
    );
    eventually(
        WAIT,
        "objects whose only owner never existed to go",
        || async {
            gone(&cms, "ghost-owned").await?;
            gone(&cms, "impostor-owned").await
        },
    )
    .await;
    assert!(cms.get_opt("alive").await?.is_some());
    Ok(())
}
