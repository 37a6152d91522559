//! The pod garbage collector (upstream pkg/controller/podgc): pods nobody else will ever
//! finish. A pod bound to a node that no longer exists has no kubelet to stop it; a
//! terminating pod that was never scheduled has none to confirm its end; a terminating pod on
//! a node an operator declared out of service (`node.kubernetes.io/out-of-service`) will not
//! hear back from its kubelet either; and finished pods pile up past
//! `--terminated-pod-gc-threshold`. All of them are force-deleted.
//!
//! Upstream sweeps every 20 s; here each pod is reconciled when it or its node changes, and a
//! pod whose node is missing is looked at again when its quarantine ends.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Client, ResourceExt};
use tracing::Instrument;

use crate::informers::Informers;
use crate::informers::pod_node;
use crate::util::pods::is_terminal;
use crate::util::taints::{self, OUT_OF_SERVICE};

use crate::informers::Cache;
use crate::util::reconciler::Error;
use crate::util::runtime::Controller;

/// Flags named after kube-controller-manager's.
#[derive(Clone, Debug)]
pub struct PodGcConfig {
    /// `--terminated-pod-gc-threshold`: finished pods kept; 0 keeps them all.
    pub terminated_pod_gc_threshold: usize,
    /// How long a node must be missing before its pods count as orphans (upstream's fixed
    /// quarantine, which covers a node being re-registered and informer lag).
    pub orphan_quarantine: Duration,
}

impl Default for PodGcConfig {
    fn default() -> Self {
        PodGcConfig {
            terminated_pod_gc_threshold: 12500,
            orphan_quarantine: Duration::from_secs(40),
        }
    }
}

struct Ctx {
    client: Client,
    config: PodGcConfig,
    pods: Cache<Pod>,
    nodes: Cache<Node>,
    /// Nodes seen missing, and since when.
    missing_since: Mutex<HashMap<String, Instant>>,
}

/// Runs the collector until dropped.
pub async fn run(informers: Arc<Informers>, config: PodGcConfig) {
    let client = informers.client();
    let (node_informer, pod_informer) = (informers.of::<Node>(), informers.of::<Pod>());
    let nodes = node_informer.store();
    let controller =
        Controller::for_shared_stream(pod_informer.touched(), pod_informer.store().kube_store());
    let pods = pod_informer.store();
    let (mapped, cached_nodes) = (pod_informer.by_node(), nodes.clone());
    // A node's deletion, readiness or taints reach the pods bound to it. A node that is
    // still cached, Ready and not out of service changes nothing for its pods: its status
    // updates (thousands a minute at 5,000 nodes) map to nothing instead of a scan of every
    // pod, which was two fifths of the server's CPU at that size.
    let controller =
        controller.watches_shared_stream(node_informer.touched(), move |node: Arc<Node>| {
            let healthy = cached_nodes
                .get(&ObjectRef::from_obj(&*node))
                .is_some_and(|n| node_ready(&n) && !out_of_service(&n));
            if healthy {
                return Vec::new();
            }
            mapped
                .get(&node.name_any())
                .iter()
                .map(|p| ObjectRef::from_obj(&**p))
                .collect::<Vec<_>>()
        });
    let ctx = Arc::new(Ctx {
        client,
        config,
        pods,
        nodes,
        missing_since: Mutex::default(),
    });
    // Upstream's pod GC has no queue of pods (only one of nodes): this one is named after
    // the controller.
    controller
        .run("pod_garbage_collector", reconcile, ctx)
        .await;
}

/// Deletes the pod at once (grace period 0); the UID precondition spares a new pod of the same
/// name. A pod already gone is no error.
async fn force_delete(client: &Client, pod: &Pod) -> Result<(), kube::Error> {
    crate::util::pods::delete_exactly(client, pod, Some(0)).await
}

/// Upstream's markFailedAndDeletePodWithCondition: a pod that had not finished is recorded as
/// Failed (with why, when `condition` is given) before it is deleted.
async fn fail_and_delete(
    client: &Client,
    pod: &Pod,
    condition: Option<PodCondition>,
) -> Result<(), kube::Error> {
    if !is_terminal(pod) {
        let mut status = serde_json::json!({"phase": "Failed"});
        if let Some(c) = condition {
            status["conditions"] = serde_json::json!([c]);
        }
        if !crate::util::pods::patch_own_status(client, pod, status).await? {
            return Ok(());
        }
    }
    force_delete(client, pod).await
}

fn out_of_service(node: &Node) -> bool {
    taints::node_taints(node)
        .iter()
        .any(|t| t.key == OUT_OF_SERVICE)
}

fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True")
}

/// Upstream's order for terminated pods: evicted ones first, then the oldest.
fn gc_order(a: &Pod, b: &Pod) -> std::cmp::Ordering {
    let evicted = |p: &Pod| {
        p.status.as_ref().is_some_and(|s| {
            s.phase.as_deref() == Some("Failed") && s.reason.as_deref() == Some("Evicted")
        })
    };
    let created = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
    evicted(b)
        .cmp(&evicted(a))
        .then_with(|| created(a).cmp(&created(b)))
        .then_with(|| a.name_any().cmp(&b.name_any()))
}

async fn reconcile(pod: Arc<Pod>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let span = tracing::info_span!(
        "reconcile",
        controller = "pod-garbage-collector",
        pod = %format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any()),
    );
    reconcile_pod(pod, ctx).instrument(span).await
}

async fn reconcile_pod(pod: Arc<Pod>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let _ = ctx.nodes.wait_until_ready().await;
    let terminating = pod.metadata.deletion_timestamp.is_some();
    let Some(node) = pod_node(&pod) else {
        if terminating {
            tracing::info!("force-deleting a terminating pod that was never scheduled");
            fail_and_delete(&ctx.client, &pod, None).await?;
        }
        return Ok(Action::await_change());
    };

    match ctx.nodes.get(&ObjectRef::new(node)) {
        None => {
            let since = *ctx
                .missing_since
                .lock()
                .expect("missing")
                .entry(node.to_string())
                .or_insert_with(Instant::now);
            let end = since + ctx.config.orphan_quarantine;
            let now = Instant::now();
            if now < end {
                return Ok(Action::requeue(end - now));
            }
            // The cache may lag; the API says whether the node is really gone.
            if Api::<Node>::all(ctx.client.clone())
                .get_opt(node)
                .await?
                .is_some()
            {
                ctx.missing_since.lock().expect("missing").remove(node);
                return Ok(Action::await_change());
            }
            tracing::info!(node, "force-deleting a pod whose node no longer exists");
            let condition = PodCondition {
                type_: "DisruptionTarget".into(),
                status: "True".into(),
                reason: Some("DeletionByPodGC".into()),
                message: Some("PodGC: node no longer exists".into()),
                last_transition_time: Some(Time(Timestamp::now())),
                ..Default::default()
            };
            fail_and_delete(&ctx.client, &pod, Some(condition)).await?;
            return Ok(Action::await_change());
        }
        Some(n) => {
            ctx.missing_since.lock().expect("missing").remove(node);
            if terminating && out_of_service(&n) && !node_ready(&n) {
                tracing::info!(
                    node,
                    "force-deleting a terminating pod on an out-of-service node"
                );
                fail_and_delete(&ctx.client, &pod, None).await?;
                return Ok(Action::await_change());
            }
        }
    }

    let threshold = ctx.config.terminated_pod_gc_threshold;
    if threshold > 0 && is_terminal(&pod) {
        let mut terminated: Vec<Arc<Pod>> = ctx.pods.state_filter(is_terminal);
        if terminated.len() > threshold {
            let excess = terminated.len() - threshold;
            terminated.sort_by(|a, b| gc_order(a, b));
            tracing::info!(
                count = excess,
                threshold,
                "deleting terminated pods over the threshold"
            );
            for old in terminated.iter().take(excess) {
                force_delete(&ctx.client, old).await?;
            }
        }
    }
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, created: &str, reason: Option<&str>) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "default", "creationTimestamp": created},
            "status": {"phase": if reason.is_some() { "Failed" } else { "Succeeded" }, "reason": reason},
        }))
        .unwrap()
    }

    #[test]
    fn evicted_then_oldest_first() {
        let mut pods = [
            pod("new", "2024-01-03T00:00:00Z", None),
            pod("old", "2024-01-01T00:00:00Z", None),
            pod("evicted", "2024-01-04T00:00:00Z", Some("Evicted")),
        ];
        pods.sort_by(gc_order);
        let names: Vec<_> = pods.iter().map(|p| p.name_any()).collect();
        assert_eq!(names, ["evicted", "old", "new"]);
    }
}
