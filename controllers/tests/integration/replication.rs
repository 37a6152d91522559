//! The ReplicationController controller against the in-process API server and hollow nodes.

use crate::common;

use std::collections::HashSet;

use common::{Cluster, WAIT, event_reasons, settled};
use k8s_openapi::api::core::v1::{Pod, ReplicationController};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use minik8s_controllers::informers::Informers;
use minik8s_controllers::replicaset::replication;
use minik8s_controllers::util::controller_ref::controller_of;
use testkit::eventually;

fn rc(name: &str, app: &str, replicas: i32) -> ReplicationController {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"app": app},
            "template": {
                "metadata": {"labels": {"app": app, "tier": "web"}},
                "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
            },
        },
    }))
    .unwrap()
}

#[tokio::test]
async fn keeps_its_pods_at_scale_and_replaces_lost_ones() -> anyhow::Result<()> {
    let mut cluster = Cluster::start().await?;
    let rcs: Api<ReplicationController> = Api::namespaced(cluster.client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), "default");
    // A pod of another app, which the selector must leave alone.
    let other: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "unrelated", "labels": {"app": "db", "tier": "web"}},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
    }))?;
    pods.create(&PostParams::default(), &other).await?;

    cluster.spawn(replication::run(Informers::new(cluster.client.clone())));
    let created = rcs
        .create(&PostParams::default(), &rc("web", "web", 2))
        .await?;
    let first = settled(&rcs, &pods, "web", 2).await;
    for p in &first {
        assert!(p.name_any().starts_with("web-"));
        let owner = controller_of(p).unwrap();
        assert_eq!(
            (
                owner.api_version.as_str(),
                owner.kind.as_str(),
                owner.name.as_str(),
                owner.block_owner_deletion
            ),
            ("v1", "ReplicationController", "web", Some(true))
        );
        assert_eq!(p.labels()["tier"], "web");
    }

    // Scaled through the scale subresource, as `kubectl scale rc` does.
    rcs.patch_scale(
        "web",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"replicas": 3}})),
    )
    .await?;
    let grown = settled(&rcs, &pods, "web", 3).await;
    let grown_names: HashSet<String> = grown.iter().map(|p| p.name_any()).collect();
    assert!(first.iter().all(|p| grown_names.contains(&p.name_any())));
    assert_eq!(rcs.get_scale("web").await?.spec.unwrap().replicas, Some(3));

    // A lost pod is replaced.
    let lost = grown[0].name_any();
    pods.delete(&lost, &DeleteParams::default()).await?;
    let replaced = settled(&rcs, &pods, "web", 3).await;
    assert!(replaced.iter().all(|p| p.name_any() != lost));

    let unrelated = pods.get("unrelated").await?;
    assert!(controller_of(&unrelated).is_none());
    assert!(unrelated.metadata.deletion_timestamp.is_none());
    assert!(
        !unrelated
            .owner_references()
            .iter()
            .any(|o| Some(&o.uid) == created.metadata.uid.as_ref())
    );

    let client = cluster.client.clone();
    eventually(WAIT, "SuccessfulCreate events on the RC", || async {
        let reasons = event_reasons(&client, "default", "web", "replication-controller").await;
        reasons
            .iter()
            .any(|r| r == "SuccessfulCreate")
            .then_some(())
    })
    .await;
    Ok(())
}
