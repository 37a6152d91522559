//! The ReplicaSet controller against the in-process API server and hollow nodes.

use crate::common;
use minik8s_controllers::informers::Informers;

use std::collections::HashSet;

use common::{Cluster, WAIT, event_reasons, settled};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use minik8s_controllers::replicaset;
use minik8s_controllers::util::controller_ref::controller_of;
use testkit::eventually;

fn rs(name: &str, app: &str, replicas: i32) -> ReplicaSet {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": app}},
            "template": {
                "metadata": {"labels": {"app": app, "tier": "web"}},
                "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
            },
        },
    }))
    .unwrap()
}

async fn scale(sets: &Api<ReplicaSet>, name: &str, replicas: i32) {
    sets.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"replicas": replicas}})),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn scales_up_and_down_with_status_and_events() -> anyhow::Result<()> {
    let mut cluster = Cluster::start().await?;
    cluster.spawn(replicaset::run(Informers::new(cluster.client.clone())));
    let sets: Api<ReplicaSet> = Api::namespaced(cluster.client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), "default");
    sets.create(&PostParams::default(), &rs("web", "web", 3))
        .await?;
    let first = settled(&sets, &pods, "web", 3).await;
    for p in &first {
        assert!(p.name_any().starts_with("web-"));
        let owner = controller_of(p).unwrap();
        assert_eq!(
            (owner.kind.as_str(), owner.block_owner_deletion),
            ("ReplicaSet", Some(true))
        );
        assert_eq!(p.labels()["tier"], "web");
    }
    scale(&sets, "web", 5).await;
    let grown = settled(&sets, &pods, "web", 5).await;
    // Scaling up keeps the pods it had.
    let grown_names: HashSet<String> = grown.iter().map(|p| p.name_any()).collect();
    assert!(first.iter().all(|p| grown_names.contains(&p.name_any())));
    scale(&sets, "web", 1).await;
    settled(&sets, &pods, "web", 1).await;
    scale(&sets, "web", 0).await;
    settled(&sets, &pods, "web", 0).await;

    let client = cluster.client.clone();
    eventually(
        WAIT,
        "SuccessfulCreate and SuccessfulDelete events",
        || async {
            let reasons = event_reasons(&client, "default", "web", "replicaset-controller").await;
            (reasons.iter().any(|r| r == "SuccessfulCreate")
                && reasons.iter().any(|r| r == "SuccessfulDelete"))
            .then_some(())
        },
    )
    .await;
    Ok(())
}

#[tokio::test]
async fn adopts_matching_orphans_and_releases_relabelled_pods() -> anyhow::Result<()> {
    let mut cluster = Cluster::start().await?;
    let sets: Api<ReplicaSet> = Api::namespaced(cluster.client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), "default");
    let orphan: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "orphan", "labels": {"app": "web", "tier": "web"}},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
    }))?;
    pods.create(&PostParams::default(), &orphan).await?;
    let other: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "unrelated", "labels": {"app": "db"}},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
    }))?;
    pods.create(&PostParams::default(), &other).await?;

    cluster.spawn(replicaset::run(Informers::new(cluster.client.clone())));
    let created = sets
        .create(&PostParams::default(), &rs("web", "web", 2))
        .await?;
    let owned = settled(&sets, &pods, "web", 2).await;
    assert!(
        owned.iter().any(|p| p.name_any() == "orphan"),
        "the orphan was adopted"
    );
    assert!(controller_of(&pods.get("unrelated").await?).is_none());

    // A pod whose labels stop matching is released and replaced.
    let keep = owned
        .iter()
        .find(|p| p.name_any() != "orphan")
        .unwrap()
        .name_any();
    pods.patch(
        "orphan",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"labels": {"app": "debug"}}})),
    )
    .await?;
    eventually(WAIT, "the relabelled pod released", || async {
        let p = pods.get("orphan").await.ok()?;
        controller_of(&p).is_none().then_some(())
    })
    .await;
    let owned = settled(&sets, &pods, "web", 2).await;
    let names: HashSet<String> = owned.iter().map(|p| p.name_any()).collect();
    assert!(names.contains(&keep) && !names.contains("orphan"));
    let released = pods.get("orphan").await?;
    assert!(released.metadata.deletion_timestamp.is_none());
    assert!(
        !released
            .owner_references()
            .iter()
            .any(|o| Some(&o.uid) == created.metadata.uid.as_ref())
    );
    Ok(())
}

#[tokio::test]
async fn scale_down_deletes_unready_pods_first() -> anyhow::Result<()> {
    let mut cluster = Cluster::start().await?;
    cluster.spawn(replicaset::run(Informers::new(cluster.client.clone())));
    let sets: Api<ReplicaSet> = Api::namespaced(cluster.client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), "default");
    sets.create(&PostParams::default(), &rs("web", "web", 3))
        .await?;
    let owned = settled(&sets, &pods, "web", 3).await;
    let sick = owned[1].name_any();
    pods.patch(
        &sick,
        &PatchParams::default(),
        &Patch::Merge(
            serde_json::json!({"metadata": {"annotations": {"hollow.minik8s.io/ready": "false"}}}),
        ),
    )
    .await?;
    eventually(
        WAIT,
        "the pod turns unready and the status counts it",
        || async {
            let rs = sets.get("web").await.ok()?;
            (rs.status?.ready_replicas == Some(2)).then_some(())
        },
    )
    .await;
    scale(&sets, "web", 2).await;
    let remaining = settled(&sets, &pods, "web", 2).await;
    assert!(remaining.iter().all(|p| p.name_any() != sick));
    Ok(())
}

#[tokio::test]
async fn restarts_neither_duplicate_nor_lose_replicas() -> anyhow::Result<()> {
    let mut cluster = Cluster::start().await?;
    let client = cluster.client.clone();
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    // Every pod ever created, by UID, from a watch of its own.
    let seen = std::sync::Arc::new(std::sync::Mutex::new(HashSet::new()));
    let record = seen.clone();
    let watch_client = client.clone();
    cluster.spawn(async move {
        use futures::StreamExt;
        let stream = kube::runtime::watcher(Api::<Pod>::all(watch_client), Default::default());
        futures::pin_mut!(stream);
        while let Some(Ok(ev)) = stream.next().await {
            if let kube::runtime::watcher::Event::Apply(p)
            | kube::runtime::watcher::Event::InitApply(p) = ev
            {
                record.lock().unwrap().insert(p.uid().unwrap_or_default());
            }
        }
    });
    sets.create(&PostParams::default(), &rs("web", "web", 1))
        .await?;
    let mut controller = tokio::spawn(replicaset::run(Informers::new(client.clone())));
    let mut before = 0;
    for replicas in [4, 9, 15, 24] {
        scale(&sets, "web", replicas).await;
        // Restart once some, usually not all, of the creations are done.
        before = eventually(WAIT, "creations under way", || async {
            let n = pods.list(&Default::default()).await.ok()?.items.len();
            (n > before).then_some(n)
        })
        .await;
        controller.abort();
        let _ = controller.await;
        common::writes_settled(&client).await;
        controller = tokio::spawn(replicaset::run(Informers::new(client.clone())));
    }
    settled(&sets, &pods, "web", 24).await;
    controller.abort();
    // Only ever scaled up: any pod beyond 24 was a duplicate that had to be deleted again.
    eventually(WAIT, "the watch has seen all pods", || async {
        (seen.lock().unwrap().len() >= 24).then_some(())
    })
    .await;
    assert_eq!(seen.lock().unwrap().len(), 24);
    Ok(())
}
