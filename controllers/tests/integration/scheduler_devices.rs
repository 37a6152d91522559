//! Extended resources in the scheduler: a device plugin's resource (here `example.com/dev`,
//! patched into a hollow node's status as the kubelet's device manager reports it) is counted
//! like cpu, so a pod that asks for one lands only on a node that still has one free, and
//! waits with upstream's `Insufficient <resource>` reason when none has.

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use minik8s_controllers::hollow::HollowConfig;
use minik8s_controllers::scheduler::ScoringStrategy;
use serde_json::json;
use testkit::{Backend, InProcess, eventually};

use crate::scheduler::{WAIT, expect_unschedulable, node_of, pod, start_nodes, start_scheduler};

const DEV: &str = "example.com/dev";

fn wants_devices(count: u32) -> serde_json::Value {
    json!({"containers": [{
        "name": "c",
        "image": "busybox:1.36",
        "resources": {"limits": {DEV: count.to_string()}},
    }]})
}

async fn advertise(nodes: &Api<Node>, node: &str, count: u32) -> anyhow::Result<()> {
    let devices = json!({DEV: count.to_string()});
    let patch = json!({"status": {"capacity": devices, "allocatable": devices}});
    nodes
        .patch_status(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

#[tokio::test]
async fn pods_needing_devices_go_where_the_devices_are() -> anyhow::Result<()> {
    let api = InProcess::start(Backend::Sqlite).await?;
    let client = api.client();
    let _nodes = start_nodes(&client, HollowConfig::default()).await;
    let nodes: Api<Node> = Api::all(client.clone());
    advertise(&nodes, "hollow-node-1", 1).await?;
    // Least-allocated scoring would spread; only the filter brings both device pods to
    // their nodes.
    let _scheduler = start_scheduler(&client, ScoringStrategy::LeastAllocated);
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pp = PostParams::default();

    pods.create(&pp, &pod("dev-a", wants_devices(1))).await?;
    let placed = eventually(WAIT, "dev-a bound", || async {
        node_of(&pods.get("dev-a").await.ok()?)
    })
    .await;
    assert_eq!(placed, "hollow-node-1");

    // The one device is taken, and nobody has two.
    pods.create(&pp, &pod("dev-b", wants_devices(1))).await?;
    pods.create(&pp, &pod("dev-pair", wants_devices(2))).await?;
    let message = "0/3 nodes are available: 3 Insufficient example.com/dev. preemption: 0/3 \
                   nodes are available: 3 No preemption victims found for incoming pod..";
    expect_unschedulable(&client, "dev-b", message).await;
    expect_unschedulable(&client, "dev-pair", message).await;

    // A node that gains devices takes the waiting pods that fit.
    advertise(&nodes, "hollow-node-2", 1).await?;
    let placed = eventually(WAIT, "dev-b bound", || async {
        node_of(&pods.get("dev-b").await.ok()?)
    })
    .await;
    assert_eq!(placed, "hollow-node-2");
    assert_eq!(node_of(&pods.get("dev-pair").await?), None);
    Ok(())
}
