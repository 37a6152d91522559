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

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt, future};
use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetCondition, ReplicaSetStatus};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use minik8s_api::selector::{Selector, SelectorError};
use tracing::Instrument;

use crate::util::controller_ref::{claim, controller_of, controller_ref};
use crate::util::events::record;
use crate::util::expectations::{Expectations, observe_pods};
use crate::util::pods::{is_active, is_available, is_ready, phase, pod_from_template};
use crate::util::sync::retry;

/// Upstream's `BurstReplicas`: at most this many creations or deletions per sync.
pub const BURST_REPLICAS: usize = 500;
const REPORTER: &str = "replicaset-controller";
const KIND: &str = "ReplicaSet";
const DELETION_COST_ANNOTATION: &str = "controller.kubernetes.io/pod-deletion-cost";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Kube(#[from] kube::Error),
    #[error("invalid selector: {0}")]
    Selector(#[from] SelectorError),
    #[error("pod cache closed")]
    CacheClosed,
}

struct Ctx {
    client: Client,
    sets: Store<ReplicaSet>,
    pods: Store<Pod>,
    expectations: Arc<Expectations>,
    recorder: Recorder,
}

/// Runs the controller until dropped.
pub async fn run(client: Client) {
    let expectations = Arc::new(Expectations::new());
    let (rs_reader, rs_writer) = reflector::store::<ReplicaSet>();
    let (pod_reader, pod_writer) = reflector::store::<Pod>();

    let forget = expectations.clone();
    let sets = watcher(Api::<ReplicaSet>::all(client.clone()), Default::default())
        .default_backoff()
        .map_ok(move |ev| {
            if let watcher::Event::Delete(rs) = &ev {
                forget.forget(&key(rs));
            }
            ev
        })
        .reflect(rs_writer)
        .applied_objects();

    let observed = expectations.clone();
    let cache = pod_reader.clone();
    let pods = watcher(Api::<Pod>::all(client.clone()), Default::default())
        .default_backoff()
        .map_ok(move |ev| {
            observe_pods(&observed, &cache, KIND, &ev);
            ev
        })
        .reflect(pod_writer)
        .touched_objects();

    let controller = Controller::for_stream(sets, rs_reader);
    let sets_cache = controller.store();
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        sets: controller.store(),
        pods: pod_reader,
        expectations,
        recorder: Recorder::new(
            client,
            Reporter {
                controller: REPORTER.into(),
                instance: None,
            },
        ),
    });
    controller
        .watches_stream(pods, move |pod: Pod| owners_of_pod(&sets_cache, &pod))
        .run(reconcile, error_policy, ctx)
        .for_each(|_| future::ready(()))
        .await;
}

fn key(rs: &ReplicaSet) -> String {
    format!("{}/{}", rs.namespace().unwrap_or_default(), rs.name_any())
}

/// The ReplicaSets a pod event concerns: its controller, or for an orphan every ReplicaSet
/// whose selector matches it (one of them may adopt it).
fn owners_of_pod(sets: &Store<ReplicaSet>, pod: &Pod) -> Vec<ObjectRef<ReplicaSet>> {
    let ns = pod.namespace().unwrap_or_default();
    if let Some(owner) = controller_of(pod) {
        if owner.kind != KIND {
            return Vec::new();
        }
        return vec![ObjectRef::new(&owner.name).within(&ns)];
    }
    if pod.metadata.deletion_timestamp.is_some() {
        return Vec::new();
    }
    sets.state()
        .iter()
        .filter(|rs| rs.namespace().as_deref() == Some(ns.as_str()))
        .filter(|rs| {
            rs_selector(rs).is_ok_and(|s| !s.is_empty() && s.matches(pod.metadata.labels.as_ref()))
        })
        .map(|rs| ObjectRef::from_obj(rs.as_ref()))
        .collect()
}

fn rs_selector(rs: &ReplicaSet) -> Result<Selector, SelectorError> {
    Selector::from_label_selector(rs.spec.as_ref().map(|s| &s.selector))
}

fn error_policy(rs: Arc<ReplicaSet>, error: &Error, _: Arc<Ctx>) -> Action {
    let kube_error = match error {
        Error::Kube(e) => Some(e),
        _ => None,
    };
    retry(&key(&rs), kube_error, error)
}

async fn reconcile(rs: Arc<ReplicaSet>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let span = tracing::info_span!("sync_replicaset", replicaset = %key(&rs));
    sync(rs, ctx).instrument(span).await
}

/// Upstream's `syncReplicaSet`.
async fn sync(rs: Arc<ReplicaSet>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    ctx.pods
        .wait_until_ready()
        .await
        .map_err(|_| Error::CacheClosed)?;
    let key = key(&rs);
    let ns = rs.namespace().unwrap_or_default();
    let selector = rs_selector(&rs)?;
    let needs_sync = ctx.expectations.satisfied(&key) && rs.metadata.deletion_timestamp.is_none();

    let candidates = ctx
        .pods
        .state()
        .into_iter()
        .filter(|p| p.namespace().as_deref() == Some(ns.as_str()) && is_active(p));
    let sets: Api<ReplicaSet> = Api::namespaced(ctx.client.clone(), &ns);
    let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let pods = if selector.is_empty() {
        // Upstream refuses selectors that select everything; validation rejects them too.
        Vec::new()
    } else {
        claim(rs.as_ref(), &sets, &pods_api, &selector, candidates).await?
    };

    let mut manage_error = None;
    if needs_sync {
        let related = related_pods(&rs, &ctx);
        if let Err(e) = manage_replicas(&rs, &pods, &related, &ctx).await {
            manage_error = Some(e);
        }
    }

    let now = Timestamp::now();
    let status = calculate_status(&rs, &pods, manage_error.as_ref(), now);
    let written = update_status(&sets, &rs, status).await?;
    if let Some(e) = manage_error {
        return Err(e);
    }
    let spec = rs.spec.clone().unwrap_or_default();
    let min_ready = spec.min_ready_seconds.unwrap_or(0);
    let want = spec.replicas.unwrap_or(1);
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
/// ReplicaSets): deleting a pod from a node crowded with its siblings is preferred.
fn related_pods(rs: &ReplicaSet, ctx: &Ctx) -> Vec<Arc<Pod>> {
    let Some(owner) = controller_of(rs) else {
        return Vec::new();
    };
    let ns = rs.namespace();
    let siblings: Vec<String> = ctx
        .sets
        .state()
        .iter()
        .filter(|s| s.namespace() == ns)
        .filter(|s| controller_of(s.as_ref()).is_some_and(|o| o.uid == owner.uid))
        .filter_map(|s| s.uid())
        .collect();
    ctx.pods
        .state()
        .into_iter()
        .filter(|p| p.namespace() == ns)
        .filter(|p| controller_of(p.as_ref()).is_some_and(|r| siblings.contains(&r.uid)))
        .collect()
}

/// Upstream's `manageReplicas`.
async fn manage_replicas(
    rs: &ReplicaSet,
    pods: &[Arc<Pod>],
    related: &[Arc<Pod>],
    ctx: &Ctx,
) -> Result<(), Error> {
    let key = key(rs);
    let ns = rs.namespace().unwrap_or_default();
    let want = rs
        .spec
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(1)
        .max(0) as usize;
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    match pods.len().cmp(&want) {
        Ordering::Equal => Ok(()),
        Ordering::Less => {
            let diff = (want - pods.len()).min(BURST_REPLICAS);
            let template = rs
                .spec
                .as_ref()
                .and_then(|s| s.template.clone())
                .unwrap_or_default();
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
            let victims = pods_to_delete(pods, related, diff, Timestamp::now());
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

/// The `diff` pods to delete, least valuable first (upstream's `getPodsToDelete`).
pub fn pods_to_delete(
    pods: &[Arc<Pod>],
    related: &[Arc<Pod>],
    diff: usize,
    now: Timestamp,
) -> Vec<Arc<Pod>> {
    if diff >= pods.len() {
        return pods.to_vec();
    }
    let mut on_node: HashMap<&str, i32> = HashMap::new();
    for p in related.iter().filter(|p| is_active(p)) {
        *on_node.entry(node_name(p)).or_default() += 1;
    }
    let mut ranked: Vec<(i32, &Arc<Pod>)> = pods
        .iter()
        .map(|p| (on_node.get(node_name(p)).copied().unwrap_or(0), p))
        .collect();
    ranked.sort_by(|a, b| compare_for_deletion((a.1, a.0), (b.1, b.0), now));
    ranked
        .into_iter()
        .take(diff)
        .map(|(_, p)| p.clone())
        .collect()
}

fn node_name(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("")
}

fn phase_ordinal(pod: &Pod) -> i32 {
    match phase(pod) {
        "Unknown" => 1,
        "Running" => 2,
        _ => 0,
    }
}

fn deletion_cost(pod: &Pod) -> i32 {
    pod.annotations()
        .get(DELETION_COST_ANNOTATION)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn ready_time(pod: &Pod) -> Option<Timestamp> {
    crate::util::pods::ready_condition(pod)
        .filter(|c| c.status == "True")
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0)
}

fn max_restarts(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .map(|c| c.restart_count)
        .max()
        .unwrap_or(0)
}

/// Upstream's `logarithmicRankDiff`: how many powers of two apart the ages are.
fn log_rank_diff(t1: Timestamp, t2: Timestamp, now: Timestamp) -> i64 {
    let rank = |t: Timestamp| {
        let d = now.duration_since(t).as_nanos();
        if d > 0 { (d as f64).log2() as i64 } else { -1 }
    };
    rank(t1) - rank(t2)
}

/// Newer first, a missing time before any; ages in the same power-of-two bucket are ordered
/// by UID so the choice is random but stable (upstream's LogarithmicScaleDown).
fn newer_first(
    a: (Option<Timestamp>, &Pod),
    b: (Option<Timestamp>, &Pod),
    now: Timestamp,
) -> Ordering {
    match (a.0, b.0) {
        (x, y) if x == y => Ordering::Equal,
        (None, _) => Ordering::Less,
        (_, None) => Ordering::Greater,
        (Some(x), Some(y)) => match log_rank_diff(x, y, now) {
            0 => a.1.uid().cmp(&b.1.uid()),
            d if d < 0 => Ordering::Less,
            _ => Ordering::Greater,
        },
    }
}

/// Upstream's `ActivePodsWithRanks.Less` as an ordering: the pod to delete first is least.
fn compare_for_deletion(a: (&Pod, i32), b: (&Pod, i32), now: Timestamp) -> Ordering {
    let (pa, ra) = a;
    let (pb, rb) = b;
    let (na, nb) = (node_name(pa), node_name(pb));
    if na != nb && (na.is_empty() || nb.is_empty()) {
        return if na.is_empty() {
            Ordering::Less
        } else {
            Ordering::Greater
        };
    }
    phase_ordinal(pa)
        .cmp(&phase_ordinal(pb))
        .then_with(|| is_ready(pa).cmp(&is_ready(pb)))
        .then_with(|| deletion_cost(pa).cmp(&deletion_cost(pb)))
        .then_with(|| rb.cmp(&ra))
        .then_with(|| {
            if is_ready(pa) && is_ready(pb) {
                newer_first((ready_time(pa), pa), (ready_time(pb), pb), now)
            } else {
                Ordering::Equal
            }
        })
        .then_with(|| max_restarts(pb).cmp(&max_restarts(pa)))
        .then_with(|| {
            let created = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
            newer_first((created(pa), pa), (created(pb), pb), now)
        })
}

/// Upstream's `calculateStatus`.
fn calculate_status(
    rs: &ReplicaSet,
    pods: &[Arc<Pod>],
    manage_error: Option<&Error>,
    now: Timestamp,
) -> ReplicaSetStatus {
    let spec = rs.spec.clone().unwrap_or_default();
    let template_labels = spec
        .template
        .as_ref()
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    let min_ready = spec.min_ready_seconds.unwrap_or(0);
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

    let old = rs.status.clone().unwrap_or_default();
    let mut conditions: Vec<ReplicaSetCondition> = old.conditions.clone().unwrap_or_default();
    let failure = conditions.iter().position(|c| c.type_ == "ReplicaFailure");
    let want = spec.replicas.unwrap_or(1) as usize;
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
async fn update_status(
    api: &Api<ReplicaSet>,
    rs: &ReplicaSet,
    mut status: ReplicaSetStatus,
) -> Result<ReplicaSetStatus, Error> {
    status.observed_generation = rs.metadata.generation;
    let old = rs.status.clone().unwrap_or_default();
    if old == status {
        return Ok(old);
    }
    let mut current = rs.clone();
    for attempt in 0..2 {
        current.status = Some(status.clone());
        match api
            .replace_status(&current.name_any(), &PostParams::default(), &current)
            .await
        {
            Ok(written) => return Ok(written.status.unwrap_or_default()),
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
    use k8s_openapi::api::core::v1::{PodCondition, PodSpec, PodStatus};
    use k8s_openapi::jiff::SignedDuration;

    fn pod(name: &str, node: &str, phase: &str, ready_secs_ago: Option<i64>) -> Arc<Pod> {
        let now = Timestamp::now();
        let conditions = ready_secs_ago.map(|s| {
            vec![PodCondition {
                type_: "Ready".into(),
                status: "True".into(),
                last_transition_time: Some(Time(now - SignedDuration::from_secs(s))),
                ..Default::default()
            }]
        });
        let mut p = Pod {
            spec: Some(PodSpec {
                node_name: (!node.is_empty()).then(|| node.to_string()),
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some(phase.into()),
                conditions,
                ..Default::default()
            }),
            ..Default::default()
        };
        p.metadata.name = Some(name.into());
        p.metadata.uid = Some(name.into());
        p.metadata.creation_timestamp = Some(Time(now - SignedDuration::from_secs(3600)));
        Arc::new(p)
    }

    fn names(pods: Vec<Arc<Pod>>) -> Vec<String> {
        pods.iter().map(|p| p.name_any()).collect()
    }

    #[test]
    fn deletion_prefers_unscheduled_pending_unready_then_newer() {
        let pods = vec![
            pod("old-ready", "n1", "Running", Some(3000)),
            pod("new-ready", "n1", "Running", Some(2)),
            pod("unready", "n1", "Running", None),
            pod("pending", "n1", "Pending", None),
            pod("unscheduled", "", "Pending", None),
        ];
        let order = names(pods_to_delete(&pods, &[], 4, Timestamp::now()));
        assert_eq!(order, ["unscheduled", "pending", "unready", "new-ready"]);
    }

    #[test]
    fn deletion_prefers_crowded_nodes_and_lower_cost() {
        let a = pod("a", "n1", "Running", Some(100));
        let b = pod("b", "n2", "Running", Some(100));
        let c = pod("c", "n2", "Running", Some(100));
        let related = vec![a.clone(), b.clone(), c.clone()];
        let order = names(pods_to_delete(
            &[a.clone(), b.clone()],
            &related,
            1,
            Timestamp::now(),
        ));
        assert_eq!(order, ["b"]);
        let mut cheap = (*a).clone();
        cheap
            .metadata
            .annotations
            .get_or_insert_default()
            .insert(DELETION_COST_ANNOTATION.into(), "-5".into());
        let order = names(pods_to_delete(
            &[b.clone(), Arc::new(cheap)],
            &related,
            1,
            Timestamp::now(),
        ));
        assert_eq!(order, ["a"]);
    }

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
