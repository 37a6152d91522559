//! The ReplicaSet controller (upstream's `pkg/controller/replicaset`): keeps the number of
//! active pods a ReplicaSet owns equal to `spec.replicas`.
//!
//! Two things make it safe rather than merely convergent. Ownership is decided by controller
//! references only (orphans are adopted and non-matching pods released through
//! [`claim`]), so overlapping selectors never make two controllers fight over pods. And
//! expectations stop a sync from acting on a cache that has not yet seen the pods the last
//! sync created or deleted, which would otherwise double every scale-up while the watch lags.
//!
//! Creations go out in slow-start batches (1, 2, 4, ...) so a template the API rejects costs
//! one failed request, not `replicas` of them. Deletions pick the pods whose loss hurts least
//! first, ranked as upstream's `ActivePodsWithRanks` does.
//!
//! The sync is generic over [`Replicated`] because core/v1 ReplicationControllers must behave
//! exactly as ReplicaSets do: upstream runs them through this same sync behind a conversion
//! layer ([`replication`]), and a second copy of it would drift.

use std::cmp::Ordering;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use crate::util::events::Recorder;
use futures::future;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetCondition, ReplicaSetStatus};
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::events::{EventType, Reporter};
use kube::{Client, Resource, ResourceExt};
use minik8s_api::selector::{Selector, SelectorError};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::informers::Cache;
use crate::informers::{ByController, Change, Informers};
use crate::util::controller_ref::{claim, controller_of, controller_ref, owners_selecting};
use crate::util::events::record;
use crate::util::expectations::{Expectations, observe_pods};
use crate::util::pods::{is_active, is_available, is_ready, pod_from_template};
use crate::util::reconciler::Error;
use crate::util::runtime::Controller;

mod deletion;
pub mod replication;

pub use deletion::pods_to_delete;

/// Upstream's `BurstReplicas`: at most this many creations or deletions per sync.
pub const BURST_REPLICAS: usize = 500;

/// What the sync needs of the object whose pods it counts: upstream's conversion of a
/// ReplicationController into a ReplicaSet, reduced to the fields the sync reads and the
/// status it writes. The owner references and the API handle come from [`Resource`].
pub trait Replicated:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + Debug
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
    /// The controller's name (upstream's `--controllers` name).
    const NAME: &'static str;
    /// The name of its work queue, as upstream names it.
    const QUEUE: &'static str;
    /// The component its events are reported by.
    const REPORTER: &'static str;

    fn selector(&self) -> Result<Selector, SelectorError>;
    fn template(&self) -> Option<&PodTemplateSpec>;
    /// `spec.replicas`, 1 when unset.
    fn replicas(&self) -> i32;
    fn min_ready_seconds(&self) -> i32;
    /// The status, as a ReplicaSet's.
    fn replica_status(&self) -> ReplicaSetStatus;
    /// Replaces the status with `status`, converted back.
    fn set_replica_status(&mut self, status: ReplicaSetStatus);
}

impl Replicated for ReplicaSet {
    const NAME: &'static str = "replicaset";
    const QUEUE: &'static str = "replicaset";
    const REPORTER: &'static str = "replicaset-controller";

    fn selector(&self) -> Result<Selector, SelectorError> {
        Selector::from_label_selector(self.spec.as_ref().map(|s| &s.selector))
    }

    fn template(&self) -> Option<&PodTemplateSpec> {
        self.spec.as_ref().and_then(|s| s.template.as_ref())
    }

    fn replicas(&self) -> i32 {
        self.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
    }

    fn min_ready_seconds(&self) -> i32 {
        self.spec
            .as_ref()
            .and_then(|s| s.min_ready_seconds)
            .unwrap_or(0)
    }

    fn replica_status(&self) -> ReplicaSetStatus {
        self.status.clone().unwrap_or_default()
    }

    fn set_replica_status(&mut self, status: ReplicaSetStatus) {
        self.status = Some(status);
    }
}

struct Ctx<K: Replicated> {
    client: Client,
    sets: Cache<K>,
    pods: ByController<Pod>,
    expectations: Arc<Expectations>,
    recorder: Recorder,
}

/// Runs the ReplicaSet controller until dropped.
pub async fn run(informers: Arc<Informers>) {
    run_for::<ReplicaSet>(informers).await
}

/// Runs the controller of `K`s until dropped.
pub async fn run_for<K: Replicated>(informers: Arc<Informers>) {
    let client = informers.client();
    let expectations = Arc::new(Expectations::new());
    let sets = informers.of::<K>();
    let pods = informers.of::<Pod>();
    let forget = expectations.clone();
    let set_changes = sets.touched_after(move |c| {
        if let Change::Deleted(rs) = c {
            forget.forget(&key(rs.as_ref()));
        }
    });
    let observed = expectations.clone();
    let kind = K::kind(&()).into_owned();
    let pod_changes = pods.touched_and_left_after(move |c| observe_pods(&observed, &kind, c));
    let controller = Controller::for_shared_stream(set_changes, sets.store().kube_store());
    let sets_cache = sets.store();
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        sets: sets.store(),
        pods: pods.by_controller(),
        expectations,
        recorder: Recorder::new(
            client,
            Reporter {
                controller: K::REPORTER.into(),
                instance: None,
            },
        ),
    });
    controller
        .watches_shared_stream(pod_changes, move |pod: Arc<Pod>| {
            owners_selecting(&sets_cache, pod.as_ref(), |rs: &K| rs.selector().ok())
        })
        .run(K::QUEUE, sync::<K>, ctx)
        .await;
}

fn key(rs: &impl Resource) -> String {
    format!("{}/{}", rs.namespace().unwrap_or_default(), rs.name_any())
}

/// Upstream's `syncReplicaSet`.
async fn sync<K: Replicated>(rs: Arc<K>, ctx: Arc<Ctx<K>>) -> Result<Action, Error> {
    ctx.pods
        .wait_until_ready()
        .await
        .map_err(|_| Error::failed("pod cache closed"))?;
    let key = key(rs.as_ref());
    let ns = rs.namespace().unwrap_or_default();
    let selector = rs.selector()?;
    let needs_sync = ctx.expectations.satisfied(&key) && rs.meta().deletion_timestamp.is_none();

    // Its own pods and the orphans it may adopt; pods of other controllers are never claimed.
    let candidates = ctx
        .pods
        .controlled_by(&rs.uid().unwrap_or_default(), Some(&ns))
        .into_iter()
        .filter(|p| p.metadata.namespace.as_deref() == Some(ns.as_str()) && is_active(p));
    let sets: Api<K> = Api::namespaced(ctx.client.clone(), &ns);
    let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let pods = if selector.is_empty() {
        // Upstream refuses selectors that select everything; validation rejects them too.
        Vec::new()
    } else {
        claim(rs.as_ref(), &sets, &pods_api, &selector, candidates).await?
    };

    let mut manage_error = None;
    if needs_sync && let Err(e) = manage_replicas(rs.as_ref(), &pods, ctx.as_ref()).await {
        manage_error = Some(e);
    }

    let now = Timestamp::now();
    let status = calculate_status(rs.as_ref(), &pods, manage_error.as_ref(), now);
    let written = update_status(&sets, rs.as_ref(), status).await?;
    if let Some(e) = manage_error {
        return Err(e);
    }
    let min_ready = rs.min_ready_seconds();
    let want = rs.replicas();
    if min_ready > 0
        && written.ready_replicas.unwrap_or(0) == want
        && written.available_replicas.unwrap_or(0) != want
    {
        return Ok(Action::requeue(Duration::from_secs(min_ready as u64)));
    }
    if !ctx.expectations.satisfied(&key) {
        // Woken by the watch once the pods show up; this only bounds a lost event.
        return Ok(Action::requeue(
            crate::util::expectations::EXPECTATIONS_TIMEOUT,
        ));
    }
    Ok(Action::await_change())
}

/// Pods of every ReplicaSet that shares this one's controller (a Deployment's old and new
/// ReplicaSets): deleting a pod from a node crowded with its siblings is preferred. Only a
/// scale-down needs them (upstream's `getIndirectlyRelatedPods`).
fn related_pods<K: Replicated>(rs: &K, ctx: &Ctx<K>) -> Vec<Arc<Pod>> {
    let Some(owner) = controller_of(rs) else {
        return Vec::new();
    };
    let ns = rs.meta().namespace.as_deref();
    ctx.sets
        .state()
        .iter()
        .filter(|s| s.meta().namespace.as_deref() == ns)
        .filter(|s| controller_of(s.as_ref()).is_some_and(|o| o.uid == owner.uid))
        .filter_map(|s| s.uid())
        .flat_map(|uid| ctx.pods.controlled_by(&uid, None))
        .filter(|p| p.metadata.namespace.as_deref() == ns)
        .collect()
}

/// Upstream's `manageReplicas`.
async fn manage_replicas<K: Replicated>(
    rs: &K,
    pods: &[Arc<Pod>],
    ctx: &Ctx<K>,
) -> Result<(), Error> {
    let key = key(rs);
    let ns = rs.namespace().unwrap_or_default();
    let want = rs.replicas().max(0) as usize;
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    match pods.len().cmp(&want) {
        Ordering::Equal => Ok(()),
        Ordering::Less => {
            let diff = (want - pods.len()).min(BURST_REPLICAS);
            let template = rs.template().cloned().unwrap_or_default();
            let pod = pod_from_template(&template, &ns, &rs.name_any(), controller_ref(rs));
            ctx.expectations.expect_creations(&key, diff);
            let (created, error) = slow_start_batch(diff, || {
                let (api, pod) = (api.clone(), pod.clone());
                async move {
                    match api.create(&PostParams::default(), &pod).await {
                        Ok(p) => {
                            record(
                                &ctx.recorder,
                                rs,
                                EventType::Normal,
                                "SuccessfulCreate",
                                format!("Created pod: {}", p.name_any()),
                                None,
                            )
                            .await;
                            Ok(())
                        }
                        Err(e) => {
                            record(
                                &ctx.recorder,
                                rs,
                                EventType::Warning,
                                "FailedCreate",
                                format!("Error creating: {e}"),
                                None,
                            )
                            .await;
                            Err(e)
                        }
                    }
                }
            })
            .await;
            // Pods never created will never be observed.
            for _ in created..diff {
                ctx.expectations.creation_observed(&key);
            }
            match error {
                Some(e) => Err(e.into()),
                None => Ok(()),
            }
        }
        Ordering::Greater => {
            let diff = (pods.len() - want).min(BURST_REPLICAS);
            let related = related_pods(rs, ctx);
            let victims = pods_to_delete(pods, &related, diff, Timestamp::now());
            ctx.expectations
                .expect_deletions(&key, victims.iter().map(|p| p.uid().unwrap_or_default()));
            let results = future::join_all(victims.iter().map(|pod| {
                let (api, key) = (api.clone(), &key);
                async move {
                    let uid = pod.uid().unwrap_or_default();
                    let params = DeleteParams {
                        preconditions: Some(Preconditions {
                            uid: Some(uid.clone()),
                            resource_version: None,
                        }),
                        ..Default::default()
                    };
                    match api.delete(&pod.name_any(), &params).await {
                        Ok(_) => {
                            record(
                                &ctx.recorder,
                                rs,
                                EventType::Normal,
                                "SuccessfulDelete",
                                format!("Deleted pod: {}", pod.name_any()),
                                None,
                            )
                            .await;
                            Ok(())
                        }
                        Err(e) => {
                            // It will never be observed going away because of us.
                            ctx.expectations.deletion_observed(key, &uid);
                            if matches!(&e, kube::Error::Api(s) if s.code == 404) {
                                return Ok(());
                            }
                            record(
                                &ctx.recorder,
                                rs,
                                EventType::Warning,
                                "FailedDelete",
                                format!("Error deleting: {e}"),
                                None,
                            )
                            .await;
                            Err(e)
                        }
                    }
                }
            }))
            .await;
            match results.into_iter().find_map(Result::err) {
                Some(e) => Err(e.into()),
                None => Ok(()),
            }
        }
    }
}

/// Upstream's `slowStartBatch`: calls `op` `count` times in batches of 1, 2, 4, ... and stops
/// after the first batch with a failure. Returns the successes and the first error.
pub async fn slow_start_batch<F, Fut, E>(count: usize, op: F) -> (usize, Option<E>)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<(), E>>,
{
    let mut done = 0;
    let mut batch = count.min(1);
    let mut remaining = count;
    while batch > 0 {
        let results = future::join_all((0..batch).map(|_| op())).await;
        let mut error = None;
        for r in results {
            match r {
                Ok(()) => done += 1,
                Err(e) => error = error.or(Some(e)),
            }
        }
        if error.is_some() {
            return (done, error);
        }
        remaining -= batch;
        batch = remaining.min(batch * 2);
    }
    (done, None)
}

/// Upstream's `calculateStatus`.
fn calculate_status(
    rs: &impl Replicated,
    pods: &[Arc<Pod>],
    manage_error: Option<&Error>,
    now: Timestamp,
) -> ReplicaSetStatus {
    let template_labels = rs
        .template()
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    let min_ready = rs.min_ready_seconds();
    let fully_labeled = pods
        .iter()
        .filter(|p| {
            let labels = p.labels();
            template_labels
                .iter()
                .all(|(k, v)| labels.get(k) == Some(v))
        })
        .count() as i32;
    let ready = pods.iter().filter(|p| is_ready(p)).count() as i32;
    let available = pods
        .iter()
        .filter(|p| is_available(p, min_ready, now))
        .count() as i32;

    let old = rs.replica_status();
    let mut conditions: Vec<ReplicaSetCondition> = old.conditions.clone().unwrap_or_default();
    let failure = conditions.iter().position(|c| c.type_ == "ReplicaFailure");
    let want = rs.replicas().max(0) as usize;
    match manage_error {
        Some(e) if failure.is_none() => {
            let reason = if pods.len() < want {
                "FailedCreate"
            } else {
                "FailedDelete"
            };
            conditions.push(ReplicaSetCondition {
                type_: "ReplicaFailure".into(),
                status: "True".into(),
                reason: Some(reason.into()),
                message: Some(e.to_string()),
                last_transition_time: Some(Time(now)),
            });
        }
        None => {
            if let Some(i) = failure {
                conditions.remove(i);
            }
        }
        _ => {}
    }
    ReplicaSetStatus {
        replicas: pods.len() as i32,
        fully_labeled_replicas: Some(fully_labeled),
        ready_replicas: Some(ready),
        available_replicas: Some(available),
        observed_generation: old.observed_generation,
        conditions: (!conditions.is_empty()).then_some(conditions),
        terminating_replicas: old.terminating_replicas,
    }
}

/// Upstream's `updateReplicaSetStatus`: writes only changes, with one retry on a fresh read
/// after a conflict. The generation recorded is the one this sync acted on.
async fn update_status<K: Replicated>(
    api: &Api<K>,
    rs: &K,
    mut status: ReplicaSetStatus,
) -> Result<ReplicaSetStatus, Error> {
    status.observed_generation = rs.meta().generation;
    let old = rs.replica_status();
    if old == status {
        return Ok(old);
    }
    let mut current = rs.clone();
    for attempt in 0..2 {
        current.set_replica_status(status.clone());
        match api
            .replace_status(&current.name_any(), &PostParams::default(), &current)
            .await
        {
            Ok(written) => return Ok(written.replica_status()),
            Err(kube::Error::Api(s)) if s.code == 409 && attempt == 0 => {
                current = api.get(&rs.name_any()).await?;
                if current.uid() != rs.uid() {
                    return Ok(status);
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn slow_start_doubles_and_stops_at_the_first_failing_batch() {
        let calls = std::sync::atomic::AtomicUsize::new(0);
        let (done, err) = slow_start_batch(10, || async {
            calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok::<(), ()>(())
        })
        .await;
        assert_eq!((done, err), (10, None));
        calls.store(0, std::sync::atomic::Ordering::SeqCst);
        // The 4th call fails: batches 1, 2, then 4 (which fails) and nothing after.
        let (done, err) = slow_start_batch(10, || async {
            let n = calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if n == 3 { Err(()) } else { Ok(()) }
        })
        .await;
        assert_eq!((done, err), (6, Some(())));
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 7);
    }
}
