//! The disruption controller (upstream's `pkg/controller/disruption`): keeps each
//! PodDisruptionBudget's status saying how many of its pods may be disrupted now. The eviction
//! API and every drain trust `disruptionsAllowed` without recounting, so the controller fails
//! safe: a budget it cannot compute is written with no disruption allowed and a `SyncFailed`
//! condition, never left with a permission it no longer stands behind.
//!
//! A budget is reconciled when it changes, when a pod it selects (or selected, before a label
//! change) comes, goes, or changes readiness, owner or deletion, and when the scale of a
//! workload owning such pods changes; upstream does not watch the workloads and waits for a
//! pod event instead. A pod matching several budgets wakes them all, where upstream wakes one
//! chosen arbitrarily. An eviction recorded in `disruptedPods` is looked at again when its
//! two minutes run out.

mod finders;
pub mod stale;
pub mod status;

use std::collections::HashSet;
use std::sync::Arc;

use futures::{StreamExt, stream};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, ReplicationController};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{EventType, Reporter};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};
use minik8s_api::selector::{Selector, SelectorError};

use crate::informers::{ByController, Cache, Change, Informer, Informers};
use crate::util::events::{Recorder, record};
use crate::util::pods::is_ready;
use crate::util::reconciler::Error;
use crate::util::runtime::Controller;
use finders::{ScaleReader, Workloads, expected_scale};
use status::Observed;

/// The name upstream's kube-controller-manager knows it by (`--controllers`).
pub const NAME: &str = "disruption-controller";
/// Upstream's event source for this controller.
const REPORTER: &str = "controllermanager";

struct Ctx {
    client: Client,
    caches: Caches,
    workloads: Workloads,
    scales: ScaleReader,
    recorder: Recorder,
}

/// Runs the controller until dropped.
pub async fn run(informers: Arc<Informers>) {
    let client = informers.client();
    let budgets = informers.of::<PodDisruptionBudget>();
    let pods = informers.of::<Pod>();
    let sets = informers.of::<ReplicaSet>();
    let deployments = informers.of::<Deployment>();
    let stateful_sets = informers.of::<StatefulSet>();
    let rcs = informers.of::<ReplicationController>();

    let store = budgets.store().kube_store();
    let controller = Controller::for_shared_stream(budgets.touched(), store.clone());
    let for_pod = store.clone();
    let controller = controller.watches_shared_stream(pod_changes(&pods), move |pod: Arc<Pod>| {
        budgets_for(&for_pod, &[pod])
    });
    // A workload's scale is the denominator of its pods' percentage budgets.
    let (owned, for_workload) = (pods.by_controller(), store.clone());
    let controller = controller.watches_shared_stream(
        scale_changes(&sets, |s| s.spec.as_ref().and_then(|s| s.replicas)),
        move |rs: Arc<ReplicaSet>| budgets_for(&for_workload, &controlled(&owned, rs.as_ref())),
    );
    let (owned, for_workload) = (pods.by_controller(), store.clone());
    let controller = controller.watches_shared_stream(
        scale_changes(&stateful_sets, |s| s.spec.as_ref().and_then(|s| s.replicas)),
        move |ss: Arc<StatefulSet>| budgets_for(&for_workload, &controlled(&owned, ss.as_ref())),
    );
    let (owned, for_workload) = (pods.by_controller(), store.clone());
    let controller = controller.watches_shared_stream(
        scale_changes(&rcs, |s| s.spec.as_ref().and_then(|s| s.replicas)),
        move |rc: Arc<ReplicationController>| {
            budgets_for(&for_workload, &controlled(&owned, rc.as_ref()))
        },
    );
    let (owned, owned_sets, for_workload) = (pods.by_controller(), sets.by_controller(), store);
    let controller = controller.watches_shared_stream(
        scale_changes(&deployments, |d| d.spec.as_ref().and_then(|s| s.replicas)),
        move |d: Arc<Deployment>| {
            let pods: Vec<Arc<Pod>> = controlled(&owned_sets, d.as_ref())
                .iter()
                .flat_map(|rs| controlled(&owned, rs.as_ref()))
                .collect();
            budgets_for(&for_workload, &pods)
        },
    );

    let ctx = Arc::new(Ctx {
        client: client.clone(),
        caches: Caches {
            budgets: budgets.store(),
            pods: pods.store(),
            sets: sets.store(),
            deployments: deployments.store(),
            stateful_sets: stateful_sets.store(),
            rcs: rcs.store(),
        },
        workloads: Workloads {
            replication_controllers: rcs.store().kube_store(),
            deployments: deployments.store().kube_store(),
            replica_sets: sets.store().kube_store(),
            stateful_sets: stateful_sets.store().kube_store(),
        },
        scales: ScaleReader::default(),
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: REPORTER.into(),
                instance: None,
            },
        ),
    });
    let budgets_loop = controller.run("disruption", sync, ctx);
    futures::join!(budgets_loop, stale::run(client, &pods));
}

/// The caches a sync reads; upstream waits for all of them before its first.
struct Caches {
    budgets: Cache<PodDisruptionBudget>,
    pods: Cache<Pod>,
    sets: Cache<ReplicaSet>,
    deployments: Cache<Deployment>,
    stateful_sets: Cache<StatefulSet>,
    rcs: Cache<ReplicationController>,
}

impl Caches {
    async fn wait_until_ready(&self) -> Result<(), Error> {
        let closed = |_| Error::failed("informer cache closed");
        self.budgets.wait_until_ready().await.map_err(closed)?;
        self.pods.wait_until_ready().await.map_err(closed)?;
        self.sets.wait_until_ready().await.map_err(closed)?;
        self.deployments.wait_until_ready().await.map_err(closed)?;
        self.stateful_sets
            .wait_until_ready()
            .await
            .map_err(closed)?;
        self.rcs.wait_until_ready().await.map_err(closed)
    }
}

/// Pod changes that can change a budget: new and deleted pods, and updates of labels (the
/// pod's previous state too, for the budgets it left), owner, deletion or readiness.
fn pod_changes(pods: &Informer<Pod>) -> impl futures::Stream<Item = Arc<Pod>> + Send + use<> {
    pods.changes().flat_map(|change| {
        let pods = match change {
            Change::Applied {
                object,
                previous: Some(previous),
            } => {
                let (old, new) = (&previous.metadata, &object.metadata);
                if old.labels != new.labels {
                    vec![object, previous]
                } else if old.owner_references != new.owner_references
                    || old.deletion_timestamp != new.deletion_timestamp
                    || is_ready(&previous) != is_ready(&object)
                {
                    vec![object]
                } else {
                    Vec::new()
                }
            }
            Change::Applied { object, .. } | Change::Deleted(object) => vec![object],
            // The budgets' own sync reconciles every budget; a relist's changes came before.
            Change::Synced => Vec::new(),
        };
        stream::iter(pods)
    })
}

/// New and deleted workloads, and updates of their replicas or of their own controller.
fn scale_changes<K>(
    informer: &Informer<K>,
    replicas: fn(&K) -> Option<i32>,
) -> impl futures::Stream<Item = Arc<K>> + Send + use<K>
where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    informer.touched_when(move |old, new| {
        replicas(old) != replicas(new) || old.meta().owner_references != new.meta().owner_references
    })
}

/// The cached objects `owner` controls.
fn controlled<K, O>(index: &ByController<K>, owner: &O) -> Vec<Arc<K>>
where
    K: Resource<DynamicType = ()>,
    O: Resource,
{
    owner
        .meta()
        .uid
        .as_deref()
        .map(|uid| index.controlled_by(uid, None))
        .unwrap_or_default()
}

/// The selector of a budget: nil selects nothing, `{}` every pod of its namespace (policy/v1).
fn selector(pdb: &PodDisruptionBudget) -> Result<Selector, SelectorError> {
    Selector::from_label_selector(pdb.spec.as_ref().and_then(|s| s.selector.as_ref()))
}

/// The budgets that select any of `pods`.
fn budgets_for(
    budgets: &Store<PodDisruptionBudget>,
    pods: &[Arc<Pod>],
) -> Vec<ObjectRef<PodDisruptionBudget>> {
    if pods.is_empty() {
        return Vec::new();
    }
    let namespaces: HashSet<Option<&str>> = pods
        .iter()
        .map(|p| p.metadata.namespace.as_deref())
        .collect();
    budgets
        .state()
        .iter()
        .filter(|b| namespaces.contains(&b.metadata.namespace.as_deref()))
        .filter(|b| {
            selector(b).is_ok_and(|s| {
                pods.iter().any(|p| {
                    p.metadata.namespace == b.metadata.namespace
                        && s.matches(p.metadata.labels.as_ref())
                })
            })
        })
        .map(|b| ObjectRef::from_obj(b.as_ref()))
        .collect()
}

/// Upstream's `sync`: a budget that cannot be computed fails safe, except on a conflict,
/// which is only retried.
async fn sync(pdb: Arc<PodDisruptionBudget>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    ctx.caches.wait_until_ready().await?;
    let now = Timestamp::now();
    match try_sync(&pdb, &ctx, now).await {
        Err(Error::Kube(kube::Error::Api(s))) if s.code == 409 => {
            Err(Error::Kube(kube::Error::Api(s)))
        }
        Err(e) => {
            if let Some(status) = status::fail_safe_status(&pdb, &e.to_string(), now) {
                write_status(&ctx.client, &pdb, status).await?;
            }
            Err(e)
        }
        ok => ok,
    }
}

/// Upstream's `trySync`.
async fn try_sync(
    pdb: &Arc<PodDisruptionBudget>,
    ctx: &Ctx,
    now: Timestamp,
) -> Result<Action, Error> {
    let event = |type_, reason: &'static str, note: String| {
        record(&ctx.recorder, pdb.as_ref(), type_, reason, note, None)
    };
    let pods = match selector(pdb) {
        Ok(s) => {
            let ns = pdb.metadata.namespace.as_deref();
            ctx.caches.pods.state_filter(|p| {
                p.metadata.namespace.as_deref() == ns && s.matches(p.metadata.labels.as_ref())
            })
        }
        Err(e) => {
            event(
                EventType::Warning,
                "NoPods",
                format!("Failed to get pods: {e}"),
            )
            .await;
            return Err(e.into());
        }
    };
    if pods.is_empty() {
        event(EventType::Normal, "NoPods", "No matching pods found".into()).await;
    }

    let spec = pdb.spec.clone().unwrap_or_default();
    let counted = async {
        let (scale, unmanaged) = if status::needs_scale(&spec) {
            expected_scale(&ctx.workloads, &ctx.scales, &ctx.client, &pods).await?
        } else {
            (0, Vec::new())
        };
        Ok::<_, String>((
            status::expected_pod_count(&spec, pods.len(), scale)?,
            unmanaged,
        ))
    };
    let (counts, unmanaged) = match counted.await {
        Ok(c) => c,
        Err(message) => {
            event(
                EventType::Warning,
                "CalculateExpectedPodCountFailed",
                format!("Failed to calculate the number of expected pods: {message}"),
            )
            .await;
            return Err(Error::Failed(message));
        }
    };
    // Not an error, as upstream: a hot loop on them would only hammer the API.
    if !unmanaged.is_empty() {
        tracing::debug!(pods = ?unmanaged, "found unmanaged pods associated with this PDB");
        let selector = selector(pdb).map(|s| s.to_string()).unwrap_or_default();
        event(
            EventType::Warning,
            "UnmanagedPods",
            format!(
                "Pods selected by this PodDisruptionBudget (selector: {selector}) were found to be \
                 unmanaged. As a result, the status of the PDB cannot be calculated correctly, \
                 which may result in undefined behavior. To account for these pods please set \
                 \".spec.minAvailable\" field of the PDB to an integer value."
            ),
        )
        .await;
    }

    let recorded = pdb.status.as_ref().and_then(|s| s.disrupted_pods.as_ref());
    let disruptions = status::pending_disruptions(&pods, recorded, now);
    for pod in &disruptions.expired {
        tracing::info!(pod = %pod.name_any(), "pod was expected to be deleted but it wasn't");
        let note = format!(
            "Pod was expected by PDB {}/{} to be deleted but it wasn't",
            pdb.namespace().unwrap_or_default(),
            pdb.name_any()
        );
        record(
            &ctx.recorder,
            *pod,
            EventType::Warning,
            "NotDeleted",
            note,
            None,
        )
        .await;
    }
    let current_healthy = status::count_healthy(&pods, &disruptions.pending, now);
    let observed = Observed {
        counts,
        current_healthy,
        disrupted_pods: disruptions.pending,
    };
    if let Some(status) = status::updated_status(pdb, observed, now) {
        write_status(&ctx.client, pdb, status).await?;
    }
    Ok(match disruptions.recheck {
        Some(at) => Action::requeue(status::until(now, at)),
        None => Action::await_change(),
    })
}

/// Writes `status` through the status subresource, with the resourceVersion the budget was
/// read at: a budget changed since answers 409 and is synced again.
async fn write_status(
    client: &Client,
    pdb: &PodDisruptionBudget,
    status: PodDisruptionBudgetStatus,
) -> Result<(), Error> {
    let api: Api<PodDisruptionBudget> =
        Api::namespaced(client.clone(), &pdb.namespace().unwrap_or_default());
    let mut updated = pdb.clone();
    updated.status = Some(status);
    api.replace_status(&pdb.name_any(), &PostParams::default(), &updated)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector::store;
    use kube::runtime::watcher::Event;

    fn budget(name: &str, ns: &str, selector: serde_json::Value) -> PodDisruptionBudget {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": ns},
            "spec": {"minAvailable": 1, "selector": selector},
        }))
        .unwrap()
    }

    fn pod(ns: &str, labels: serde_json::Value) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "p", "namespace": ns, "labels": labels},
            }))
            .unwrap(),
        )
    }

    #[test]
    fn a_pod_wakes_every_budget_of_its_namespace_that_selects_it() {
        let (reader, mut writer) = store::<PodDisruptionBudget>();
        let mut nil = budget("nil", "a", serde_json::json!({}));
        nil.spec.as_mut().unwrap().selector = None;
        for b in [
            budget(
                "web",
                "a",
                serde_json::json!({"matchLabels": {"app": "web"}}),
            ),
            budget("all", "a", serde_json::json!({})),
            budget("db", "a", serde_json::json!({"matchLabels": {"app": "db"}})),
            budget("elsewhere", "b", serde_json::json!({})),
            nil,
        ] {
            writer.apply_watcher_event(&Event::Apply(b));
        }
        let mut names: Vec<String> =
            budgets_for(&reader, &[pod("a", serde_json::json!({"app": "web"}))])
                .into_iter()
                .map(|r| r.name)
                .collect();
        names.sort();
        assert_eq!(names, ["all", "web"]);
        // An unlabelled pod is still selected by an empty selector.
        let names: Vec<String> = budgets_for(&reader, &[pod("b", serde_json::json!({}))])
            .into_iter()
            .map(|r| r.name)
            .collect();
        assert_eq!(names, ["elsewhere"]);
        assert!(budgets_for(&reader, &[]).is_empty());
    }
}
