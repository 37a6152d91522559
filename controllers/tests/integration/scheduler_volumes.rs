//! The scheduler's VolumeBinding against the in-process API server and hollow nodes: claims
//! that keep a pod out, PV node affinity, and WaitForFirstConsumer claims bound (or
//! provisioned) on the chosen node before the pod is bound. The test plays the PV controller.

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use minik8s_controllers::hollow::HollowConfig;
use minik8s_controllers::scheduler::volume_binding::{ANN_BIND_COMPLETED, ANN_SELECTED_NODE};
use minik8s_controllers::scheduler::{SchedulerOptions, ScoringStrategy};
use testkit::{Backend, InProcess, eventually};

use crate::scheduler::{WAIT, expect_unschedulable, node_of, pod, start_nodes, start_scheduler};

fn with_claim(claim: &str) -> serde_json::Value {
    serde_json::json!({"volumes": [
        {"name": "data", "persistentVolumeClaim": {"claimName": claim}}
    ]})
}

async fn create_claim(client: &Client, name: &str, class: Option<&str>) -> anyhow::Result<()> {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    claims
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({
                "metadata": {"name": name},
                "spec": {
                    "storageClassName": class.unwrap_or(""),
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "1Gi"}},
                },
            }))?,
        )
        .await?;
    Ok(())
}

async fn create_class(client: &Client, name: &str, provisioner: &str) -> anyhow::Result<()> {
    let classes: Api<StorageClass> = Api::all(client.clone());
    classes
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({
                "metadata": {"name": name},
                "provisioner": provisioner,
                "volumeBindingMode": "WaitForFirstConsumer",
            }))?,
        )
        .await?;
    Ok(())
}

async fn create_volume(
    client: &Client,
    name: &str,
    class: &str,
    node: &str,
    claim_ref: Option<&str>,
) -> anyhow::Result<()> {
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let mut spec = serde_json::json!({
        "storageClassName": class,
        "accessModes": ["ReadWriteOnce"],
        "capacity": {"storage": "1Gi"},
        "local": {"path": "/mnt/data"},
        "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
        ]}]}},
    });
    if let Some(claim) = claim_ref {
        spec["claimRef"] = serde_json::json!({"namespace": "default", "name": claim});
    }
    volumes
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": name}, "spec": spec}))?,
        )
        .await?;
    volumes
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"status": {"phase": "Available"}})),
        )
        .await?;
    Ok(())
}

/// What the PV controller does to finish a bind: the claim names the volume, is marked bound
/// by the controller, and both are Bound.
async fn complete_bind(client: &Client, claim: &str, volume: &str) -> anyhow::Result<()> {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let uid = claims.get(claim).await?.metadata.uid;
    volumes
        .patch(
            volume,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"claimRef": {
                "namespace": "default", "name": claim, "uid": uid,
                "kind": "PersistentVolumeClaim", "apiVersion": "v1"}}})),
        )
        .await?;
    volumes
        .patch_status(
            volume,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"status": {"phase": "Bound"}})),
        )
        .await?;
    claims
        .patch(
            claim,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({
                "metadata": {"annotations": {ANN_BIND_COMPLETED: "yes"}},
                "spec": {"volumeName": volume},
            })),
        )
        .await?;
    claims
        .patch_status(
            claim,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"status": {"phase": "Bound"}})),
        )
        .await?;
    Ok(())
}

#[tokio::test]
async fn claims_that_keep_a_pod_out_are_explained_like_upstream() -> anyhow::Result<()> {
    let api = InProcess::start(Backend::Sqlite).await?;
    let client = api.client();
    let _nodes = start_nodes(&client, HollowConfig::default()).await;
    let _scheduler = start_scheduler(&client, ScoringStrategy::LeastAllocated);
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pp = PostParams::default();

    pods.create(&pp, &pod("missing", with_claim("nowhere")))
        .await?;
    expect_unschedulable(
        &client,
        "missing",
        "0/3 nodes are available: persistentvolumeclaim \"nowhere\" not found. preemption: 0/3 \
         nodes are available: 3 Preemption is not helpful for scheduling..",
    )
    .await;

    // An unbound claim with no class binds immediately: the PV controller's to bind.
    create_claim(&client, "immediate", None).await?;
    pods.create(&pp, &pod("waiting", with_claim("immediate")))
        .await?;
    expect_unschedulable(
        &client,
        "waiting",
        "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: \
         0/3 nodes are available: 3 Preemption is not helpful for scheduling..",
    )
    .await;

    // Once bound to a volume of hollow-node-1, the pod goes there (the claim's change wakes
    // it up).
    create_volume(&client, "pv-node-1", "", "hollow-node-1", Some("immediate")).await?;
    complete_bind(&client, "immediate", "pv-node-1").await?;
    eventually(WAIT, "pod bound next to its volume", || async {
        node_of(&pods.get("waiting").await.ok()?).filter(|n| n == "hollow-node-1")
    })
    .await;

    // A WaitForFirstConsumer claim with no volume and no provisioner fits nowhere.
    create_class(&client, "manual", "kubernetes.io/no-provisioner").await?;
    create_claim(&client, "no-volume", Some("manual")).await?;
    pods.create(&pp, &pod("stuck", with_claim("no-volume")))
        .await?;
    expect_unschedulable(
        &client,
        "stuck",
        "0/3 nodes are available: 3 node(s) didn't find available persistent volumes to bind. \
         preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling..",
    )
    .await;
    Ok(())
}

#[tokio::test]
async fn a_bound_volume_of_a_node_that_cannot_take_the_pod_is_a_conflict() -> anyhow::Result<()> {
    let api = InProcess::start(Backend::Sqlite).await?;
    let client = api.client();
    let _nodes = start_nodes(&client, HollowConfig::default()).await;
    create_claim(&client, "data", None).await?;
    create_volume(&client, "pv-node-2", "", "hollow-node-2", Some("data")).await?;
    complete_bind(&client, "data", "pv-node-2").await?;
    let _scheduler = start_scheduler(&client, ScoringStrategy::LeastAllocated);
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut spec = with_claim("data");
    spec["nodeSelector"] = serde_json::json!({"kubernetes.io/hostname": "hollow-node-0"});
    pods.create(&PostParams::default(), &pod("elsewhere", spec))
        .await?;
    expect_unschedulable(
        &client,
        "elsewhere",
        "0/3 nodes are available: 1 node(s) had volume node affinity conflict, 2 node(s) didn't \
         match Pod's node affinity/selector. preemption: 0/3 nodes are available: 3 Preemption \
         is not helpful for scheduling..",
    )
    .await;
    Ok(())
}

#[tokio::test]
async fn first_consumer_claims_are_bound_on_the_chosen_node_before_the_pod() -> anyhow::Result<()> {
    let api = InProcess::start(Backend::Sqlite).await?;
    let client = api.client();
    let _nodes = start_nodes(&client, HollowConfig::default()).await;
    let _scheduler = start_scheduler(&client, ScoringStrategy::LeastAllocated);
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let pp = PostParams::default();

    // Dynamic provisioning: the claim gets the selected node; the pod waits until bound.
    create_class(&client, "wffc-local", "rancher.io/local-path").await?;
    create_claim(&client, "dynamic", Some("wffc-local")).await?;
    pods.create(&pp, &pod("provisioned", with_claim("dynamic")))
        .await?;
    let selected = eventually(WAIT, "selected-node on the claim", || async {
        claims
            .get("dynamic")
            .await
            .ok()?
            .metadata
            .annotations?
            .get(ANN_SELECTED_NODE)
            .cloned()
    })
    .await;
    assert_eq!(node_of(&pods.get("provisioned").await?), None);
    // The provisioner makes the volume on that node and the PV controller binds it.
    create_volume(
        &client,
        "pvc-dynamic",
        "wffc-local",
        &selected,
        Some("dynamic"),
    )
    .await?;
    complete_bind(&client, "dynamic", "pvc-dynamic").await?;
    let bound = eventually(WAIT, "provisioned pod bound", || async {
        node_of(&pods.get("provisioned").await.ok()?)
    })
    .await;
    assert_eq!(bound, selected);

    // Static binding: the scheduler sets the claimRef of the volume on the chosen node.
    create_class(&client, "manual", "kubernetes.io/no-provisioner").await?;
    create_volume(&client, "static-2", "manual", "hollow-node-2", None).await?;
    create_claim(&client, "static", Some("manual")).await?;
    pods.create(&pp, &pod("static", with_claim("static")))
        .await?;
    let claim_ref = eventually(WAIT, "claimRef set by the scheduler", || async {
        volumes.get("static-2").await.ok()?.spec?.claim_ref
    })
    .await;
    assert_eq!(claim_ref.name.as_deref(), Some("static"));
    assert!(claim_ref.uid.is_some());
    assert_eq!(node_of(&pods.get("static").await?), None);
    complete_bind(&client, "static", "static-2").await?;
    eventually(WAIT, "static pod bound to the volume's node", || async {
        node_of(&pods.get("static").await.ok()?).filter(|n| n == "hollow-node-2")
    })
    .await;
    Ok(())
}

#[tokio::test]
async fn a_claim_not_bound_in_time_fails_the_binding_and_is_retried() -> anyhow::Result<()> {
    let api = InProcess::start(Backend::Sqlite).await?;
    let client = api.client();
    let _nodes = start_nodes(&client, HollowConfig::default()).await;
    let _scheduler = tokio::spawn(minik8s_controllers::scheduler::run(
        minik8s_controllers::informers::Informers::new(client.clone()),
        client.clone(),
        SchedulerOptions {
            leader_elect: false,
            bind_timeout: std::time::Duration::from_secs(1),
            ..Default::default()
        },
        std::future::pending(),
    ));
    create_class(&client, "wffc-local", "rancher.io/local-path").await?;
    create_claim(&client, "slow", Some("wffc-local")).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(
        &PostParams::default(),
        &pod("impatient", with_claim("slow")),
    )
    .await?;
    eventually(WAIT, "the PreBind timeout reported", || async {
        crate::scheduler::event_notes(&client, "impatient", "FailedScheduling")
            .await
            .into_iter()
            .find(|n| {
                n == "running PreBind plugin \"VolumeBinding\": binding volumes: context deadline exceeded"
            })
    })
    .await;
    assert_eq!(node_of(&pods.get("impatient").await?), None);
    Ok(())
}
