//! The scheduler placing pods by other pods, against the in-process API server and hollow
//! nodes: inter-pod affinity and anti-affinity, topology spread constraints and the default
//! spreading of a Service's pods, and the preemption of a pod of lower priority.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, ResourceExt};
use minik8s_controllers::hollow::HollowConfig;
use minik8s_controllers::scheduler::ScoringStrategy;
use serde_json::json;
use testkit::{Backend, InProcess, eventually};

use crate::scheduler::{
    WAIT, event_notes, expect_unschedulable, node_of, pod, start_nodes, start_scheduler, with_cpu,
};

fn labelled(name: &str, app: &str, spec: serde_json::Value) -> Pod {
    let mut p = pod(name, spec);
    p.metadata.labels = Some([("app".to_string(), app.to_string())].into());
    p
}

fn required(kind: &str, app: &str) -> serde_json::Value {
    json!({"affinity": {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [{
        "labelSelector": {"matchLabels": {"app": app}},
        "topologyKey": "kubernetes.io/hostname",
    }]}}})
}

async fn bound(pods: &Api<Pod>, name: &str) -> String {
    eventually(WAIT, &format!("{name} bound"), || async {
        node_of(&pods.get(name).await.ok()?)
    })
    .await
}

/// Pods per node among those labelled `app`, once `count` are bound.
async fn per_node(pods: &Api<Pod>, app: &str, count: usize) -> Vec<usize> {
    let placed = eventually(WAIT, &format!("{count} {app} pods bound"), || async {
        let list = pods
            .list(&ListParams::default().labels(&format!("app={app}")))
            .await
            .ok()?;
        let nodes: Vec<String> = list.items.iter().filter_map(node_of).collect();
        (nodes.len() == count).then_some(nodes)
    })
    .await;
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for n in placed {
        *counts.entry(n).or_default() += 1;
    }
    counts.into_values().collect()
}

async fn start(client: &Client, strategy: ScoringStrategy) -> Vec<tokio::task::JoinHandle<()>> {
    let nodes = start_nodes(client, HollowConfig::default()).await;
    vec![nodes, start_scheduler(client, strategy)]
}

#[tokio::test]
async fn affinity_and_anti_affinity_place_pods_by_other_pods() -> anyhow::Result<()> {
    let api = InProcess::start(Backend::Sqlite).await?;
    let client = api.client();
    let _tasks = start(&client, ScoringStrategy::LeastAllocated).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pp = PostParams::default();

    // Three replicas that may not share a node take one node each; a fourth waits.
    for i in 0..4 {
        let p = labelled(&format!("ha-{i}"), "ha", required("podAntiAffinity", "ha"));
        pods.create(&pp, &p).await?;
    }
    assert_eq!(per_node(&pods, "ha", 3).await, [1, 1, 1]);
    expect_unschedulable(
        &client,
        "ha-3",
        "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules. preemption: \
         0/3 nodes are available: 3 No preemption victims found for incoming pod..",
    )
    .await;

    // A pod that must sit with a leader waits for it, and follows it as soon as it is placed
    // (not at the five-minute flush).
    pods.create(
        &pp,
        &labelled("follower", "follower", required("podAffinity", "leader")),
    )
    .await?;
    expect_unschedulable(
        &client,
        "follower",
        "0/3 nodes are available: 3 node(s) didn't match pod affinity rules. preemption: 0/3 \
         nodes are available: 3 Preemption is not helpful for scheduling..",
    )
    .await;
    pods.create(&pp, &labelled("leader", "leader", json!({})))
        .await?;
    let leader = bound(&pods, "leader").await;
    assert_eq!(bound(&pods, "follower").await, leader);

    // A running pod's anti-affinity keeps matching pods off its node.
    pods.create(
        &pp,
        &labelled("loner", "loner", required("podAntiAffinity", "crowd")),
    )
    .await?;
    let loner = bound(&pods, "loner").await;
    for i in 0..4 {
        pods.create(&pp, &labelled(&format!("crowd-{i}"), "crowd", json!({})))
            .await?;
    }
    per_node(&pods, "crowd", 4).await;
    let crowd = pods
        .list(&ListParams::default().labels("app=crowd"))
        .await?;
    assert!(
        crowd
            .items
            .iter()
            .all(|p| node_of(p).as_ref() != Some(&loner))
    );
    Ok(())
}

#[tokio::test]
async fn spread_constraints_and_default_spreading_even_out_pods() -> anyhow::Result<()> {
    let api = InProcess::start(Backend::Sqlite).await?;
    let client = api.client();
    // A Service selecting `app=web` before the scheduler starts: its pods are spread by the
    // system default constraints.
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]},
    }))?;
    services.create(&PostParams::default(), &svc).await?;
    // MostAllocated alone would pack every pod onto one node.
    let _tasks = start(&client, ScoringStrategy::MostAllocated).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pp = PostParams::default();
    for i in 0..6 {
        pods.create(&pp, &labelled(&format!("web-{i}"), "web", json!({})))
            .await?;
    }
    assert_eq!(per_node(&pods, "web", 6).await, [2, 2, 2]);

    let spread = json!({"topologySpreadConstraints": [{
        "maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "spread"}},
    }]});
    for i in 0..6 {
        pods.create(
            &pp,
            &labelled(&format!("spread-{i}"), "spread", spread.clone()),
        )
        .await?;
    }
    assert_eq!(per_node(&pods, "spread", 6).await, [2, 2, 2]);

    // Without constraints or a Service, MostAllocated packs.
    for i in 0..3 {
        pods.create(&pp, &labelled(&format!("packed-{i}"), "packed", json!({})))
            .await?;
    }
    assert_eq!(per_node(&pods, "packed", 3).await, [3]);
    Ok(())
}

#[tokio::test]
async fn a_pod_of_higher_priority_preempts_on_a_full_node() -> anyhow::Result<()> {
    let api = InProcess::start(Backend::Sqlite).await?;
    let client = api.client();
    let classes: Api<PriorityClass> = Api::all(client.clone());
    for (name, value) in [("low", 10), ("high", 1000)] {
        let class: PriorityClass =
            serde_json::from_value(json!({"metadata": {"name": name}, "value": value}))?;
        classes.create(&PostParams::default(), &class).await?;
    }
    let config = HollowConfig {
        count: 1,
        prefix: "small-".into(),
        cpu: "2".into(),
        ..Default::default()
    };
    let _nodes = start_nodes(&client, config).await;
    let _scheduler = start_scheduler(&client, ScoringStrategy::LeastAllocated);
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pp = PostParams::default();
    let mut spec = with_cpu("1500m");
    spec["priorityClassName"] = json!("low");
    pods.create(&pp, &pod("victim", spec)).await?;
    assert_eq!(bound(&pods, "victim").await, "small-0");
    let victim_uid = pods.get("victim").await?.uid();

    let mut spec = with_cpu("1");
    spec["priorityClassName"] = json!("high");
    let high = pods.create(&pp, &pod("high", spec)).await?;
    let high_uid = high.uid().unwrap();
    // The victim is deleted; the preemptor is nominated, then bound where it was.
    eventually(WAIT, "victim gone", || async {
        match pods.get_opt("victim").await {
            Ok(None) => Some(()),
            Ok(Some(p)) => (p.uid() != victim_uid).then_some(()),
            Err(_) => None,
        }
    })
    .await;
    assert_eq!(bound(&pods, "high").await, "small-0");
    let high = pods.get("high").await?;
    assert_eq!(
        high.status.and_then(|s| s.nominated_node_name).as_deref(),
        Some("small-0")
    );
    let preempted = eventually(WAIT, "Preempted event", || async {
        let notes = event_notes(&client, "victim", "Preempted").await;
        notes.into_iter().next()
    })
    .await;
    assert_eq!(
        preempted,
        format!("Preempted by pod {high_uid} on node small-0")
    );
    // The preemptor's FailedScheduling says why it did not fit, without a preemption part.
    eventually(WAIT, "FailedScheduling of the preemptor", || async {
        let notes = event_notes(&client, "high", "FailedScheduling").await;
        notes
            .iter()
            .any(|n| n == "0/1 nodes are available: 1 Insufficient cpu.")
            .then_some(())
    })
    .await;

    // A pod of lower priority does not preempt a pod of higher priority.
    let mut spec = with_cpu("1500m");
    spec["priorityClassName"] = json!("low");
    pods.create(&pp, &pod("late", spec)).await?;
    expect_unschedulable(
        &client,
        "late",
        "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No \
         preemption victims found for incoming pod..",
    )
    .await;
    assert_eq!(
        node_of(&pods.get("high").await?).as_deref(),
        Some("small-0")
    );
    Ok(())
}
