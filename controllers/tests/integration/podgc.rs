//! The pod garbage collector against the in-process API server: pods of nodes that are gone
//! and finished pods over the threshold are force-deleted; everything else stays.

use minik8s_controllers::informers::Informers;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use minik8s_controllers::hollow::{self, HollowConfig};
use minik8s_controllers::podgc::{self, PodGcConfig};
use testkit::{Backend, InProcess, eventually};

const WAIT: Duration = Duration::from_secs(30);

fn pod(name: &str, node: &str, restart: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "restartPolicy": restart,
            "containers": [{"name": "c", "image": "busybox:1.36"}],
        },
    }))
    .unwrap()
}

fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

#[tokio::test]
async fn orphaned_and_surplus_terminated_pods_are_collected() -> anyhow::Result<()> {
    let api = InProcess::start(Backend::Sqlite).await?;
    let client = api.client();
    let live = tokio::spawn(hollow::run(
        client.clone(),
        HollowConfig {
            count: 1,
            prefix: "live-".into(),
            ..Default::default()
        },
    ));
    let gone = tokio::spawn(hollow::run(
        client.clone(),
        HollowConfig {
            count: 1,
            prefix: "gone-".into(),
            ..Default::default()
        },
    ));
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pp = PostParams::default();
    eventually(WAIT, "both nodes registered", || async {
        nodes.get_opt("live-0").await.ok()??;
        nodes.get_opt("gone-0").await.ok()?
    })
    .await;
    pods.create(&pp, &pod("stays", "live-0", "Always")).await?;
    pods.create(&pp, &pod("orphan", "gone-0", "Always")).await?;
    // Bound to a node that never existed.
    pods.create(&pp, &pod("ghost", "no-such-node", "Always"))
        .await?;
    for i in 0..4 {
        pods.create(&pp, &pod(&format!("done-{i}"), "live-0", "Never"))
            .await?;
    }
    eventually(WAIT, "the orphan Running", || async {
        (phase(&pods.get("orphan").await.ok()?) == "Running").then_some(())
    })
    .await;
    eventually(WAIT, "four pods Succeeded", || async {
        let list = pods.list(&ListParams::default()).await.ok()?;
        (list
            .items
            .iter()
            .filter(|p| phase(p) == "Succeeded")
            .count()
            == 4)
            .then_some(())
    })
    .await;

    gone.abort();
    let _ = gone.await;
    nodes.delete("gone-0", &DeleteParams::default()).await?;

    let gc = tokio::spawn(podgc::run(
        Informers::new(client.clone()),
        PodGcConfig {
            terminated_pod_gc_threshold: 2,
            orphan_quarantine: Duration::from_millis(500),
        },
    ));
    eventually(
        WAIT,
        "orphans and the oldest finished pods deleted",
        || async {
            let list = pods.list(&ListParams::default()).await.ok()?;
            let mut names: Vec<String> = list
                .items
                .iter()
                .filter_map(|p| p.metadata.name.clone())
                .collect();
            names.sort();
            (names == ["done-2", "done-3", "stays"]).then_some(())
        },
    )
    .await;
    gc.abort();
    live.abort();
    Ok(())
}
