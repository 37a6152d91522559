//! The Deployment controller (upstream's `pkg/controller/deployment`): rolls a pod template
//! out through ReplicaSets, one per template, named `<deployment>-<pod-template-hash>`.
//!
//! It never touches pods. It only sets `spec.replicas` of the ReplicaSets it owns and reads
//! their status, so every decision rests on what the ReplicaSet controller reported; writes
//! carry the resourceVersion the decision was made on, and a stale cache costs a conflict and
//! a requeue, never a wrong scale. The split follows upstream's files: [`sync`] (scaling,
//! revisions, new ReplicaSets, cleanup, status), [`rolling`], [`recreate`] and [`progress`]
//! (the Progressing condition and the deadline). Rollbacks need nothing here: `kubectl rollout
//! undo` copies an old ReplicaSet's template into the Deployment, which then finds that
//! ReplicaSet again as its new one and gives it the next revision.

mod progress;
mod recreate;
mod rolling;
mod sync;
pub mod util;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::util::events::Recorder;
use futures::{StreamExt, future};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::events::{EventType, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, ResourceExt};
use minik8s_api::selector::{Selector, SelectorError};

use crate::informers::Cache;
use crate::informers::{ByController, Change, Informers};
use crate::util::controller_ref::{claim, controller_of, owners_of};
use crate::util::events::record;
pub(crate) use crate::util::reconciler::Error;
use crate::util::runtime::Controller;

const REPORTER: &str = "deployment-controller";

struct Ctx {
    client: Client,
    sets: Cache<ReplicaSet>,
    pods: ByController<Pod>,
    recorder: Recorder,
}

/// Runs the controller until dropped.
pub async fn run(informers: Arc<Informers>) {
    let client = informers.client();
    let deployments_informer = informers.of::<Deployment>();
    let sets = informers.of::<ReplicaSet>();
    let pods = informers.of::<Pod>();
    // Only pod deletions matter: a Recreate rollout waits for the old pods to be gone.
    let pod_deletions = pods.changes().filter_map(|c| {
        future::ready(match c {
            Change::Deleted(p) => Some(p),
            _ => None,
        })
    });
    let controller = Controller::for_shared_stream(
        deployments_informer.touched(),
        deployments_informer.store().kube_store(),
    );
    let deployments = deployments_informer.store();
    let sets_for_pods = sets.store();
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        sets: sets.store(),
        pods: pods.by_controller(),
        recorder: Recorder::new(
            client,
            Reporter {
                controller: REPORTER.into(),
                instance: None,
            },
        ),
    });
    controller
        .watches_shared_stream(sets.touched(), move |rs: Arc<ReplicaSet>| {
            owners_of(&deployments, rs.as_ref(), |d: &Deployment| {
                d.spec.as_ref().map(|s| &s.selector)
            })
        })
        .watches_shared_stream(pod_deletions, move |pod: Arc<Pod>| {
            deployment_of_pod(&sets_for_pods, &pod)
        })
        .run("deployment", sync_deployment, ctx)
        .await;
}

fn selector(d: &Deployment) -> Result<Selector, SelectorError> {
    Selector::from_label_selector(d.spec.as_ref().map(|s| &s.selector))
}

fn deployment_of_pod(sets: &Cache<ReplicaSet>, pod: &Pod) -> Option<ObjectRef<Deployment>> {
    let ns = pod.namespace().unwrap_or_default();
    let owner = controller_of(pod).filter(|o| o.kind == "ReplicaSet")?;
    let rs = sets.get(&ObjectRef::new(&owner.name).within(&ns))?;
    let d = controller_of(rs.as_ref()).filter(|o| o.kind == "Deployment")?;
    Some(ObjectRef::new(&d.name).within(&ns))
}

/// One sync of one Deployment: the working copy of the Deployment (its status and revision
/// annotation change as the sync goes) and the APIs it writes through.
struct Syncer {
    ctx: Arc<Ctx>,
    d: Deployment,
    deployments: Api<Deployment>,
    sets: Api<ReplicaSet>,
    /// When to look again even if nothing changes (the progress deadline).
    requeue: Option<Duration>,
}

/// Upstream's `syncDeployment`.
async fn sync_deployment(d: Arc<Deployment>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    ctx.sets
        .wait_until_ready()
        .await
        .map_err(|_| Error::failed("cache closed"))?;
    ctx.pods
        .wait_until_ready()
        .await
        .map_err(|_| Error::failed("cache closed"))?;
    let ns = d.namespace().unwrap_or_default();
    let mut s = Syncer {
        deployments: Api::namespaced(ctx.client.clone(), &ns),
        sets: Api::namespaced(ctx.client.clone(), &ns),
        ctx,
        d: (*d).clone(),
        requeue: None,
    };
    let selector = selector(&d)?;
    if selector.is_empty() {
        s.event(
            EventType::Warning,
            "SelectingAll",
            "This deployment is selecting all pods. A non-empty selector is required.".into(),
        )
        .await;
        let status = s.d.status.clone().unwrap_or_default();
        if status.observed_generation.unwrap_or(0) < s.d.metadata.generation.unwrap_or(0) {
            let mut status = status;
            status.observed_generation = s.d.metadata.generation;
            s.write_status(status).await?;
        }
        return Ok(Action::await_change());
    }

    let candidates = s
        .ctx
        .sets
        .state()
        .into_iter()
        .filter(|rs| rs.metadata.namespace.as_deref() == Some(ns.as_str()));
    let rs_list: Vec<ReplicaSet> = claim(&*d, &s.deployments, &s.sets, &selector, candidates)
        .await?
        .into_iter()
        .map(|rs| (*rs).clone())
        .collect();

    if s.d.metadata.deletion_timestamp.is_some() {
        s.sync_status_only(&rs_list).await?;
        return Ok(Action::await_change());
    }
    s.check_paused_conditions().await?;
    let paused = s.d.spec.as_ref().and_then(|sp| sp.paused).unwrap_or(false);
    if paused || s.is_scaling_event(&rs_list) {
        s.sync(rs_list).await?;
    } else if util::strategy_type(&s.d) == "Recreate" {
        let pods = pods_by_rs(&s.ctx.pods, &rs_list);
        s.rollout_recreate(rs_list, &pods).await?;
    } else {
        s.rollout_rolling(rs_list).await?;
    }
    Ok(match s.requeue {
        Some(after) => Action::requeue(after),
        None => Action::await_change(),
    })
}

/// The pods of each ReplicaSet, by the ReplicaSet's UID (upstream's `getPodMapForDeployment`).
fn pods_by_rs(pods: &ByController<Pod>, sets: &[ReplicaSet]) -> HashMap<String, Vec<Arc<Pod>>> {
    sets.iter()
        .filter_map(|rs| rs.uid())
        .map(|uid| {
            let owned = pods.controlled_by(&uid, None);
            (uid, owned)
        })
        .collect()
}

impl Syncer {
    async fn event(&self, type_: EventType, reason: &str, note: String) {
        record(&self.ctx.recorder, &self.d, type_, reason, note, None).await;
    }
}
