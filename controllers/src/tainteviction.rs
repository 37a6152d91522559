//! The taint eviction controller (upstream pkg/controller/tainteviction, once the node lifecycle
//! controller's "taint manager"): a NoExecute taint means pods must leave the node. Pods that do
//! not tolerate every NoExecute taint are deleted at once; pods that tolerate them for a while
//! (`tolerationSeconds`, 300 s by default through the DefaultTolerationSeconds admission) are
//! deleted when the shortest of those runs out, unless the taints go first.
//!
//! The clock of a scheduled eviction starts when this controller first sees the pod under
//! the taints, as upstream's; it is kept in memory, so a restarted controller starts it again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::informers::pod_node;
use crate::util::events::Recorder;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod, PodCondition, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, Resource, ResourceExt};
use tracing::Instrument;

use crate::informers::Informers;
use crate::util::taints::{self, NO_EXECUTE};

use crate::informers::Cache;
use crate::util::reconciler::Error;
use crate::util::runtime::Controller;

pub const REPORTER: &str = "taint-eviction-controller";

struct Ctx {
    client: Client,
    nodes: Cache<Node>,
    recorder: Recorder,
    /// Pods whose eviction is scheduled, by namespace/name: when it was first scheduled.
    scheduled: Mutex<HashMap<String, Instant>>,
}

/// Runs the controller until dropped.
pub async fn run(informers: Arc<Informers>) {
    let client = informers.client();
    let (node_informer, pod_informer) = (informers.of::<Node>(), informers.of::<Pod>());
    let nodes = node_informer.store();
    // Only bound pods can be evicted from a node.
    let bound = pod_informer
        .touched()
        .filter(|p| futures::future::ready(pod_node(p).is_some()));
    let controller = Controller::for_shared_stream(bound, pod_informer.store().kube_store());
    let pods = pod_informer.by_node();
    // A change of a node's NoExecute taints reaches the pods bound to it; other node updates
    // (status every few seconds from each kubelet) change nothing here, as upstream's
    // taint manager returns early when the old and new taints are equal. The informer's
    // cache has the node before its change goes out, so a reconcile never sees an older node
    // than its trigger.
    let node_changes =
        node_informer.touched_when(|old, new| no_execute_taints(old) != no_execute_taints(new));
    let controller = controller.watches_shared_stream(node_changes, move |node: Arc<Node>| {
        pods.get(&node.name_any())
            .iter()
            .map(|p| ObjectRef::from_obj(&**p))
            .collect::<Vec<_>>()
    });
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        nodes: nodes.clone(),
        recorder: Recorder::new(
            client,
            Reporter {
                controller: REPORTER.into(),
                instance: None,
            },
        ),
        scheduled: Mutex::default(),
    });
    // Upstream's pod queue of the taint eviction controller.
    controller.run("noexec_taint_pod", reconcile, ctx).await;
}

/// The NoExecute taints of the pod's node.
fn no_execute_taints(node: &Node) -> Vec<&Taint> {
    taints::node_taints(node)
        .iter()
        .filter(|t| t.effect == NO_EXECUTE)
        .collect()
}

/// What to do with a pod under `taints`: None when it tolerates them forever; Some(ZERO)
/// when it must go now; otherwise how long it may stay (upstream's getMinTolerationTime over
/// the tolerations used).
fn toleration_time(pod: &Pod, taints: &[&Taint]) -> Option<Duration> {
    let tolerations = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or(&[]);
    let mut min: Option<Duration> = None;
    let mut forever = true;
    for taint in taints {
        let used: Vec<_> = tolerations
            .iter()
            .filter(|t| taints::tolerates(t, taint))
            .collect();
        if used.is_empty() {
            return Some(Duration::ZERO);
        }
        for t in used {
            if let Some(seconds) = t.toleration_seconds {
                forever = false;
                let d = Duration::from_secs(seconds.max(0) as u64);
                min = Some(min.map_or(d, |m| m.min(d)));
            }
        }
    }
    if forever { None } else { min }
}

async fn publish(ctx: &Ctx, pod: &Pod, note: String) {
    let event = Event {
        type_: EventType::Normal,
        reason: "TaintManagerEviction".into(),
        note: Some(note),
        action: "Evict".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &pod.object_ref(&())).await {
        tracing::debug!(error = %e, "publishing event");
    }
}

fn key(pod: &Pod) -> String {
    format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any())
}

async fn cancel(ctx: &Ctx, pod: &Pod) {
    let key = key(pod);
    if ctx
        .scheduled
        .lock()
        .expect("scheduled")
        .remove(&key)
        .is_some()
    {
        publish(ctx, pod, format!("Cancelling deletion of Pod {key}")).await;
    }
}

/// Upstream's addConditionAndDeletePod: the DisruptionTarget condition says why, then the pod
/// is deleted gracefully (the UID precondition spares a new pod of the same name).
async fn evict(ctx: &Ctx, pod: &Pod) -> Result<(), kube::Error> {
    let key = key(pod);
    ctx.scheduled.lock().expect("scheduled").remove(&key);
    publish(ctx, pod, format!("Marking for deletion Pod {key}")).await;
    let condition = PodCondition {
        type_: "DisruptionTarget".into(),
        status: "True".into(),
        reason: Some("DeletionByTaintManager".into()),
        message: Some("Taint manager: deleting due to NoExecute taint".into()),
        last_transition_time: Some(Time(Timestamp::now())),
        ..Default::default()
    };
    crate::util::pods::add_condition_and_delete(&ctx.client, pod, condition).await
}

async fn reconcile(pod: Arc<Pod>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let span = tracing::info_span!("reconcile", controller = "taint-eviction", pod = %key(&pod));
    reconcile_pod(pod, ctx).instrument(span).await
}

async fn reconcile_pod(pod: Arc<Pod>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    if pod.metadata.deletion_timestamp.is_some() {
        ctx.scheduled.lock().expect("scheduled").remove(&key(&pod));
        return Ok(Action::await_change());
    }
    let node = pod_node(&pod).and_then(|n| ctx.nodes.get(&ObjectRef::new(n)));
    let taints = node.as_deref().map(no_execute_taints).unwrap_or_default();
    if taints.is_empty() {
        cancel(&ctx, &pod).await;
        return Ok(Action::await_change());
    }
    let Some(allowed) = toleration_time(&pod, &taints) else {
        cancel(&ctx, &pod).await;
        return Ok(Action::await_change());
    };
    if allowed.is_zero() {
        tracing::info!("pod does not tolerate the node's NoExecute taints");
        evict(&ctx, &pod).await?;
        return Ok(Action::await_change());
    }
    let now = Instant::now();
    let since = *ctx
        .scheduled
        .lock()
        .expect("scheduled")
        .entry(key(&pod))
        .or_insert(now);
    let due = since + allowed;
    if now >= due {
        tracing::info!(tolerated_for = ?allowed, "toleration of the node's NoExecute taints ran out");
        evict(&ctx, &pod).await?;
        return Ok(Action::await_change());
    }
    Ok(Action::requeue(due - now))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(tolerations: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": [], "tolerations": tolerations},
        }))
        .unwrap()
    }

    #[test]
    fn toleration_time_as_upstream() {
        let unreachable = Taint {
            key: taints::UNREACHABLE.into(),
            effect: NO_EXECUTE.into(),
            ..Default::default()
        };
        let other = Taint {
            key: "dedicated".into(),
            effect: NO_EXECUTE.into(),
            ..Default::default()
        };
        let t = |key: &str, seconds: Option<i64>| serde_json::json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds});
        assert_eq!(
            toleration_time(&pod(serde_json::json!([])), &[&unreachable]),
            Some(Duration::ZERO)
        );
        assert_eq!(
            toleration_time(
                &pod(serde_json::json!([t(taints::UNREACHABLE, Some(30))])),
                &[&unreachable]
            ),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            toleration_time(
                &pod(serde_json::json!([t(taints::UNREACHABLE, None)])),
                &[&unreachable]
            ),
            None
        );
        // One untolerated taint is enough to go now.
        assert_eq!(
            toleration_time(
                &pod(serde_json::json!([t(taints::UNREACHABLE, None)])),
                &[&unreachable, &other]
            ),
            Some(Duration::ZERO)
        );
        // The shortest of the tolerations used; a forever one does not lengthen it.
        assert_eq!(
            toleration_time(
                &pod(serde_json::json!([
                    t(taints::UNREACHABLE, None),
                    t("dedicated", Some(7))
                ])),
                &[&unreachable, &other]
            ),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            toleration_time(
                &pod(serde_json::json!([t(taints::UNREACHABLE, Some(-5))])),
                &[&unreachable]
            ),
            Some(Duration::ZERO)
        );
    }
}
