//! Upstream's stale-disruption cleanup, the disruption controller's second loop: whoever is
//! about to delete a pod for a disruption (taint eviction, the pod GC, the eviction API) first
//! sets its `DisruptionTarget` condition. If the pod is still not deleting two minutes later,
//! the deletion failed or was abandoned, and a condition left True would make a Job's pod
//! failure policy treat the pod's eventual failure as a disruption; it is set back to False.
//! The kubelet's own condition (reason `TerminationByKubelet`) and finished pods are left as
//! they are.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, PostParams};
use kube::runtime::controller::Action;
use kube::{Client, ResourceExt};

use crate::informers::Informer;
use crate::util::pods::is_terminal;
use crate::util::reconciler::Error;
use crate::util::runtime::Controller;

/// Upstream's `stalePodDisruptionTimeout`.
pub const STALE_POD_DISRUPTION_TIMEOUT: SignedDuration = SignedDuration::from_secs(120);
const DISRUPTION_TARGET: &str = "DisruptionTarget";
const TERMINATION_BY_KUBELET: &str = "TerminationByKubelet";

/// Upstream's `nonTerminatingPodHasStaleDisruptionCondition`: `None` when the pod has no
/// condition that can go stale, else how long until it is stale (zero: it is).
pub fn stale_after(pod: &Pod, now: Timestamp) -> Option<Duration> {
    if pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let c = pod
        .status
        .as_ref()?
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == DISRUPTION_TARGET)?;
    if c.status != "True" || c.reason.as_deref() == Some(TERMINATION_BY_KUBELET) || is_terminal(pod)
    {
        return None;
    }
    // A condition without a time is as old as can be.
    let since = c
        .last_transition_time
        .as_ref()
        .map_or(Timestamp::MIN, |t| t.0);
    let left = STALE_POD_DISRUPTION_TIMEOUT.saturating_sub(now.duration_since(since));
    Some(Duration::try_from(left).unwrap_or(Duration::ZERO))
}

/// The pod's status with its DisruptionTarget condition False since `now` (upstream's
/// `UpdatePodCondition` with a bare condition: reason and message go).
fn cleared(pod: &Pod, now: Timestamp) -> Pod {
    let mut pod = pod.clone();
    if let Some(conditions) = pod.status.as_mut().and_then(|s| s.conditions.as_mut()) {
        for c in conditions
            .iter_mut()
            .filter(|c| c.type_ == DISRUPTION_TARGET)
        {
            *c = PodCondition {
                type_: DISRUPTION_TARGET.into(),
                status: "False".into(),
                last_transition_time: Some(Time(now)),
                ..Default::default()
            };
        }
    }
    pod
}

struct Ctx {
    client: Client,
}

/// Runs the cleanup until dropped, on the shared pod informer.
pub async fn run(client: Client, pods: &Informer<Pod>) {
    // Only pods with a condition that may go stale start a reconcile.
    let candidates = pods
        .touched()
        .filter(|p| futures::future::ready(stale_after(p, Timestamp::now()).is_some()));
    let controller = Controller::for_shared_stream(candidates, pods.store().kube_store());
    controller
        .run("stale_pod_disruption", reconcile, Arc::new(Ctx { client }))
        .await;
}

async fn reconcile(pod: Arc<Pod>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let now = Timestamp::now();
    match stale_after(&pod, now) {
        None => return Ok(Action::await_change()),
        Some(left) if !left.is_zero() => return Ok(Action::requeue(left)),
        Some(_) => {}
    }
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &pod.namespace().unwrap_or_default());
    // With the resourceVersion read: a pod changed since is looked at again (409).
    match api
        .replace_status(&pod.name_any(), &PostParams::default(), &cleared(&pod, now))
        .await
    {
        Ok(_) => {
            tracing::info!("reset stale DisruptionTarget condition to False");
            Ok(Action::await_change())
        }
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Action::await_change()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(status: &str, reason: &str, at: Timestamp, phase: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default"},
            "status": {"phase": phase, "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "DisruptionTarget", "status": status, "reason": reason,
                 "message": "evicting", "lastTransitionTime": Time(at)},
            ]},
        }))
        .unwrap()
    }

    #[test]
    fn only_a_true_condition_of_a_live_pod_goes_stale_after_two_minutes() {
        let t0 = Timestamp::from_second(1_700_000_000).unwrap();
        let after = |s: i64| t0 + SignedDuration::from_secs(s);
        let p = pod("True", "DeletionByTaintManager", t0, "Running");
        assert_eq!(stale_after(&p, after(20)), Some(Duration::from_secs(100)));
        assert_eq!(stale_after(&p, after(200)), Some(Duration::ZERO));
        assert_eq!(
            stale_after(&pod("False", "x", t0, "Running"), after(200)),
            None
        );
        assert_eq!(
            stale_after(
                &pod("True", TERMINATION_BY_KUBELET, t0, "Running"),
                after(200)
            ),
            None
        );
        assert_eq!(
            stale_after(&pod("True", "x", t0, "Failed"), after(200)),
            None
        );
        let mut deleting = p.clone();
        deleting.metadata.deletion_timestamp = Some(Time(t0));
        assert_eq!(stale_after(&deleting, after(200)), None);

        let c = cleared(&p, after(200));
        let conditions = c.status.unwrap().conditions.unwrap();
        assert_eq!(conditions[0].status, "True");
        assert_eq!(
            conditions[1],
            PodCondition {
                type_: DISRUPTION_TARGET.into(),
                status: "False".into(),
                last_transition_time: Some(Time(after(200))),
                ..Default::default()
            }
        );
    }
}
