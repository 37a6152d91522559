//! The node IPAM controller against the in-process API server: distinct pod ranges for every
//! node, the table rebuilt from the nodes after a restart, ranges freed by deleted nodes, and
//! CIDRNotAvailable when the cluster range is used up.

use minik8s_controllers::informers::Informers;
use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use minik8s_controllers::nodeipam::{self, NodeIpamConfig};
use testkit::{Backend, InProcess, eventually};

const WAIT: Duration = Duration::from_secs(30);

fn node(name: &str) -> Node {
    serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap()
}

fn cidr(n: &Node) -> Option<String> {
    let spec = n.spec.as_ref()?;
    let one = spec.pod_cidr.clone()?;
    (spec.pod_cidrs.as_deref() == Some(std::slice::from_ref(&one))).then_some(one)
}

fn config() -> NodeIpamConfig {
    NodeIpamConfig {
        cluster_cidr: "10.10.0.0/22".into(),
        node_cidr_mask_size: 24,
    }
}

#[tokio::test]
async fn ranges_allocated_rebuilt_released_and_exhausted() -> anyhow::Result<()> {
    let api = InProcess::start(Backend::Sqlite).await?;
    let client = api.client();
    let nodes: Api<Node> = Api::all(client.clone());
    let pp = PostParams::default();
    let all = [
        "10.10.0.0/24",
        "10.10.1.0/24",
        "10.10.2.0/24",
        "10.10.3.0/24",
    ]
    .map(String::from)
    .into_iter()
    .collect::<BTreeSet<_>>();

    let ipam = tokio::spawn(nodeipam::run(Informers::new(client.clone()), config()));
    for name in ["n0", "n1", "n2"] {
        nodes.create(&pp, &node(name)).await?;
    }
    let first: BTreeSet<String> = eventually(WAIT, "three nodes with ranges", || async {
        let mut got = BTreeSet::new();
        for name in ["n0", "n1", "n2"] {
            got.insert(cidr(&nodes.get(name).await.ok()?)?);
        }
        (got.len() == 3).then_some(got)
    })
    .await;
    assert!(first.is_subset(&all), "{first:?}");

    // A restart: the table comes back from the nodes, so the new node gets the one free range.
    ipam.abort();
    let _ = ipam.await;
    nodes.create(&pp, &node("n3")).await?;
    nodes.create(&pp, &node("n4")).await?;
    let ipam = tokio::spawn(nodeipam::run(Informers::new(client.clone()), config()));
    let got = eventually(WAIT, "one of n3 and n4 with the last range", || async {
        let a = cidr(&nodes.get("n3").await.ok()?);
        let b = cidr(&nodes.get("n4").await.ok()?);
        match (a, b) {
            (Some(c), None) => Some(("n4", c)),
            (None, Some(c)) => Some(("n3", c)),
            _ => None,
        }
    })
    .await;
    let (waiting, last) = got;
    assert_eq!(
        all.difference(&first).cloned().collect::<Vec<_>>(),
        vec![last.clone()]
    );
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let note = format!("Node {waiting} status is now: CIDRNotAvailable");
    eventually(WAIT, "a CIDRNotAvailable event", || async {
        events
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| e.note.as_deref() == Some(note.as_str()))
    })
    .await;

    // Deleting a node frees its range for the one waiting.
    let freed = cidr(&nodes.get("n0").await?).unwrap();
    nodes.delete("n0", &DeleteParams::default()).await?;
    let reused = eventually(WAIT, "the waiting node gets the freed range", || async {
        cidr(&nodes.get(waiting).await.ok()?)
    })
    .await;
    assert_eq!(reused, freed);
    ipam.abort();
    Ok(())
}
