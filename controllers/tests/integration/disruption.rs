//! The disruption controller against the in-process API server: a budget's status follows the
//! readiness of its pods and the scale of their controller. No ReplicaSet controller runs; the
//! test owns the pods and sets their readiness itself.

use std::time::Duration;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use minik8s_controllers::disruption;
use minik8s_controllers::informers::Informers;
use testkit::{Backend, InProcess, eventually};

use crate::common::event_reasons;

const WAIT: Duration = Duration::from_secs(30);

fn replica_set(name: &str, replicas: i32) -> ReplicaSet {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
            },
        },
    }))
    .unwrap()
}

fn owned_pod(name: &str, rs: &ReplicaSet) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": name,
            "labels": {"app": rs.name_any()},
            "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs.name_any(),
                "uid": rs.uid().unwrap(), "controller": true,
            }],
        },
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
    }))
    .unwrap()
}

fn budget(name: &str, app: &str, rule: serde_json::Value) -> PodDisruptionBudget {
    let mut spec = serde_json::json!({"selector": {"matchLabels": {"app": app}}});
    spec.as_object_mut()
        .unwrap()
        .extend(rule.as_object().unwrap().clone());
    serde_json::from_value(serde_json::json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

async fn set_ready(pods: &Api<Pod>, name: &str, ready: bool) -> anyhow::Result<()> {
    let status = if ready { "True" } else { "False" };
    pods.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": status}],
        }})),
    )
    .await?;
    Ok(())
}

/// `(disruptionsAllowed, expectedPods, currentHealthy, desiredHealthy, condition status,
/// condition reason)` once the status is of the budget's current generation.
type Summary = (i32, i32, i32, i32, String, String);

fn summary(pdb: &PodDisruptionBudget) -> Option<(Summary, PodDisruptionBudgetStatus)> {
    let s = pdb.status.clone()?;
    if s.observed_generation != pdb.metadata.generation {
        return None;
    }
    let c = s
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "DisruptionAllowed")?;
    let summary = (
        s.disruptions_allowed,
        s.expected_pods,
        s.current_healthy,
        s.desired_healthy,
        c.status.clone(),
        c.reason.clone(),
    );
    Some((summary, s))
}

async fn status_becomes(
    budgets: &Api<PodDisruptionBudget>,
    name: &str,
    want: (i32, i32, i32, i32, &str, &str),
) -> PodDisruptionBudgetStatus {
    let want: Summary = (
        want.0,
        want.1,
        want.2,
        want.3,
        want.4.to_string(),
        want.5.to_string(),
    );
    eventually(WAIT, &format!("{name} status {want:?}"), || async {
        let (got, status) = summary(&budgets.get(name).await.ok()?)?;
        (got == want).then_some(status)
    })
    .await
}

/// An API server with the ReplicaSet `web` owning `n` ready pods, and the disruption
/// controller running against it.
struct Setup {
    _api: InProcess,
    client: Client,
    pp: PostParams,
    sets: Api<ReplicaSet>,
    pods: Api<Pod>,
    budgets: Api<PodDisruptionBudget>,
    controller: tokio::task::JoinHandle<()>,
}

async fn web_of_ready_pods(n: i32) -> anyhow::Result<Setup> {
    testkit::init_tracing();
    let api = InProcess::start(Backend::Sqlite).await?;
    let client: Client = api.client();
    let pp = PostParams::default();
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let rs = sets.create(&pp, &replica_set("web", n)).await?;
    for i in 0..n {
        let name = format!("web-{i}");
        pods.create(&pp, &owned_pod(&name, &rs)).await?;
        set_ready(&pods, &name, true).await?;
    }
    let controller = tokio::spawn(disruption::run(Informers::new(client.clone())));
    Ok(Setup {
        _api: api,
        budgets: Api::namespaced(client.clone(), "default"),
        client,
        pp,
        sets,
        pods,
        controller,
    })
}

#[tokio::test]
async fn budgets_follow_pod_readiness_and_controller_scale() -> anyhow::Result<()> {
    let Setup {
        _api,
        client,
        pp,
        sets,
        pods,
        budgets,
        controller,
    } = web_of_ready_pods(3).await?;

    // minAvailable 2 of 3 ready pods: one disruption allowed.
    budgets
        .create(
            &pp,
            &budget("web-min", "web", serde_json::json!({"minAvailable": 2})),
        )
        .await?;
    let first = status_becomes(&budgets, "web-min", (1, 3, 3, 2, "True", "SufficientPods")).await;
    let since = first.conditions.unwrap()[0].last_transition_time.clone();

    // One pod turns unready: none allowed.
    set_ready(&pods, "web-0", false).await?;
    let short = status_becomes(
        &budgets,
        "web-min",
        (0, 3, 2, 2, "False", "InsufficientPods"),
    )
    .await;
    assert!(short.conditions.unwrap()[0].last_transition_time.0 >= since.0);

    // maxUnavailable 34% of the ReplicaSet's 3: ceil(1.02) = 2 may be unavailable, so 1 must
    // stay healthy; 2 are.
    budgets
        .create(
            &pp,
            &budget(
                "web-max",
                "web",
                serde_json::json!({"maxUnavailable": "34%"}),
            ),
        )
        .await?;
    status_becomes(&budgets, "web-max", (1, 3, 2, 1, "True", "SufficientPods")).await;

    // The ReplicaSet's scale is the denominator: 4 replicas, ceil(1.36) = 2 unavailable, so 2
    // must stay healthy, and with 2 healthy none may go. Its pods did not change.
    sets.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"replicas": 4}})),
    )
    .await?;
    status_becomes(
        &budgets,
        "web-max",
        (0, 4, 2, 2, "False", "InsufficientPods"),
    )
    .await;
    // The integer budget counts pods, not the scale.
    status_becomes(
        &budgets,
        "web-min",
        (0, 3, 2, 2, "False", "InsufficientPods"),
    )
    .await;

    // The pod is ready again: both budgets allow one more.
    set_ready(&pods, "web-0", true).await?;
    status_becomes(&budgets, "web-min", (1, 3, 3, 2, "True", "SufficientPods")).await;
    status_becomes(&budgets, "web-max", (1, 4, 3, 2, "True", "SufficientPods")).await;

    // A budget over no pods allows nothing and says so.
    budgets
        .create(
            &pp,
            &budget("none", "nothing", serde_json::json!({"minAvailable": 1})),
        )
        .await?;
    status_becomes(&budgets, "none", (0, 0, 0, 1, "False", "InsufficientPods")).await;
    eventually(WAIT, "a NoPods event", || async {
        let reasons = event_reasons(&client, "default", "none", "controllermanager").await;
        reasons.iter().any(|r| r == "NoPods").then_some(())
    })
    .await;
    controller.abort();
    Ok(())
}

#[tokio::test]
async fn evictions_in_flight_and_budgets_it_cannot_compute() -> anyhow::Result<()> {
    let Setup {
        _api,
        client,
        pp,
        sets: _,
        pods,
        budgets,
        controller,
    } = web_of_ready_pods(2).await?;
    budgets
        .create(
            &pp,
            &budget("web", "web", serde_json::json!({"minAvailable": 1})),
        )
        .await?;
    status_becomes(&budgets, "web", (1, 2, 2, 1, "True", "SufficientPods")).await;

    // An eviction just admitted (as the eviction API records it): web-0 no longer counts as
    // healthy while its deletion is due. One admitted three minutes ago that never led to a
    // deletion is dropped, with an event on the pod.
    let now = k8s_openapi::jiff::Timestamp::now();
    let long_ago = now - k8s_openapi::jiff::SignedDuration::from_secs(180);
    let time = |t| serde_json::to_value(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(t));
    budgets
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"status": {"disruptedPods": {
                "web-0": time(now)?, "web-1": time(long_ago)?,
            }}})),
        )
        .await?;
    let status = status_becomes(&budgets, "web", (0, 2, 1, 1, "False", "InsufficientPods")).await;
    let disrupted = status.disrupted_pods.unwrap_or_default();
    assert_eq!(disrupted.keys().collect::<Vec<_>>(), ["web-0"]);
    eventually(WAIT, "a NotDeleted event on web-1", || async {
        let reasons = event_reasons(&client, "default", "web-1", "controllermanager").await;
        reasons.iter().any(|r| r == "NotDeleted").then_some(())
    })
    .await;

    // A share of a DaemonSet's pods: DaemonSets have no scale, so the budget cannot be
    // computed and allows nothing.
    let ds_pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": "agent-0",
            "labels": {"app": "agent"},
            "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent",
                "uid": "0b6d6a39-0000-4000-8000-000000000000", "controller": true,
            }],
        },
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
    }))?;
    pods.create(&pp, &ds_pod).await?;
    set_ready(&pods, "agent-0", true).await?;
    budgets
        .create(
            &pp,
            &budget("agent", "agent", serde_json::json!({"maxUnavailable": 1})),
        )
        .await?;
    let failed = eventually(WAIT, "agent budget SyncFailed", || async {
        let s = budgets.get("agent").await.ok()?.status?;
        let c = s
            .conditions?
            .into_iter()
            .find(|c| c.type_ == "DisruptionAllowed")?;
        (c.reason == "SyncFailed" && c.status == "False" && s.disruptions_allowed == 0)
            .then_some(c.message)
    })
    .await;
    assert_eq!(
        failed,
        "daemonsets.apps does not implement the scale subresource"
    );
    eventually(WAIT, "a CalculateExpectedPodCountFailed event", || async {
        let reasons = event_reasons(&client, "default", "agent", "controllermanager").await;
        reasons
            .iter()
            .any(|r| r == "CalculateExpectedPodCountFailed")
            .then_some(())
    })
    .await;
    // As an integer minAvailable the budget counts pods and no scale is needed.
    budgets
        .patch(
            "agent",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"maxUnavailable": null, "minAvailable": 0}})),
        )
        .await?;
    let recovered = status_becomes(&budgets, "agent", (1, 1, 1, 0, "True", "SufficientPods")).await;
    assert_eq!(recovered.conditions.unwrap()[0].message, "");

    // A pod marked for a disruption three minutes ago and still not deleting was spared: its
    // DisruptionTarget condition goes back to False.
    pods.patch_status(
        "web-1",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"status": {"conditions": [
            {"type": "Ready", "status": "True"},
            {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
             "lastTransitionTime": time(long_ago)?},
        ]}})),
    )
    .await?;
    eventually(WAIT, "web-1's DisruptionTarget reset to False", || async {
        let p = pods.get("web-1").await.ok()?;
        let c = p
            .status?
            .conditions?
            .into_iter()
            .find(|c| c.type_ == "DisruptionTarget")?;
        (c.status == "False" && c.reason.is_none()).then_some(())
    })
    .await;
    controller.abort();
    Ok(())
}
