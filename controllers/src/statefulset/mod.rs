//! The StatefulSet controller, as upstream's pkg/controller/statefulset: pods with stable
//! ordinal names and their own claims, created, deleted and updated in order. A sync adopts the
//! set's orphaned revisions and pods, finds (or writes) its current and update revisions,
//! plans the steps ([`plan`]), takes them, writes the status and trims the history.
//!
//! Pod names are fixed, so the API server refuses a second pod of an ordinal; expectations
//! keep a sync from acting on a cache that has not seen the previous sync's creations and
//! deletions (it would otherwise delete a pod it just replaced, or wait on one already gone).

mod apply;
mod claims;
pub mod identity;
pub mod plan;
mod revisions;
mod status;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, stream};
use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::events::Reporter;
use kube::runtime::reflector::ObjectRef;
use kube::{Client, ResourceExt};
use minik8s_api::selector::Selector;

use crate::informers::{ByController, Cache, Change, Informers};
use crate::util::controller_ref::{claim, owners_of};
use crate::util::events::Recorder;
use crate::util::expectations::{Expectations, observe_pods};
use crate::util::history::{delete_revision, owned_revisions, sort_revisions};
use crate::util::reconciler::Error;
use crate::util::runtime;

pub use identity::{POD_INDEX_LABEL, POD_NAME_LABEL, REVISION_LABEL};

const REPORTER: &str = "statefulset-controller";
const KIND: &str = "StatefulSet";

struct Ctx {
    client: Client,
    pods: Cache<Pod>,
    pods_by_controller: ByController<Pod>,
    revisions: ByController<ControllerRevision>,
    claims: Cache<PersistentVolumeClaim>,
    expectations: Expectations,
    recorder: Recorder,
}

pub async fn run(informers: Arc<Informers>) {
    let client = informers.client();
    let set_informer = informers.of::<StatefulSet>();
    let pod_informer = informers.of::<Pod>();
    let revision_informer = informers.of::<ControllerRevision>();
    let claim_informer = informers.of::<PersistentVolumeClaim>();
    let sets = set_informer.store();
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        pods: pod_informer.store(),
        pods_by_controller: pod_informer.by_controller(),
        revisions: revision_informer.by_controller(),
        claims: claim_informer.store(),
        expectations: Expectations::new(),
        recorder: Recorder::new(
            client,
            Reporter {
                controller: REPORTER.into(),
                instance: None,
            },
        ),
    });
    let pod_keys = {
        let (ctx, sets) = (ctx.clone(), sets.clone());
        pod_informer
            .touched_and_left_after(move |c| observe_pods(&ctx.expectations, KIND, c))
            .flat_map(move |pod| {
                stream::iter(owners_of(&sets, pod.as_ref(), |s: &StatefulSet| {
                    s.spec.as_ref().map(|s| &s.selector)
                }))
            })
    };
    // A claim going away may unblock a pod waiting on it (a stale claim under whenScaled:
    // Delete); claims carry the selector's labels.
    let claim_keys = {
        let sets = sets.clone();
        claim_informer.touched().flat_map(move |claim| {
            let ns = claim.namespace();
            let labels = claim.metadata.labels.clone();
            stream::iter(
                sets.state()
                    .iter()
                    .filter(|s| s.namespace() == ns)
                    .filter(|s| {
                        s.spec
                            .as_ref()
                            .and_then(|spec| {
                                Selector::from_label_selector(Some(&spec.selector)).ok()
                            })
                            .is_some_and(|sel| !sel.is_empty() && sel.matches(labels.as_ref()))
                    })
                    .map(|s| ObjectRef::from_obj(s.as_ref()))
                    .collect::<Vec<_>>(),
            )
        })
    };
    // A set gone takes its expectations with it (upstream's `deleteStatefulSet`).
    let set_keys = {
        let ctx = ctx.clone();
        set_informer.touched_after(move |c| {
            if let Change::Deleted(s) = c {
                let key = format!("{}/{}", s.namespace().unwrap_or_default(), s.name_any());
                ctx.expectations.forget(&key);
            }
        })
    };
    let queue = stream::select(
        set_keys.map(|s| ObjectRef::from_obj(s.as_ref())),
        stream::select(pod_keys, claim_keys),
    );
    runtime::run("statefulset", sets, queue, reconcile, ctx).await
}

async fn reconcile(set: Arc<StatefulSet>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let _ = ctx.pods.wait_until_ready().await;
    let _ = ctx.pods_by_controller.wait_until_ready().await;
    let _ = ctx.revisions.wait_until_ready().await;
    let _ = ctx.claims.wait_until_ready().await;
    let ns = set.namespace().unwrap_or_default();
    let key = format!("{ns}/{}", set.name_any());
    let Some(spec) = set.spec.as_ref() else {
        return Ok(Action::await_change());
    };
    let selector = match Selector::from_label_selector(Some(&spec.selector)) {
        Ok(s) => s,
        Err(e) => {
            // Not retried: only a new spec can mend it.
            tracing::warn!(error = %e, "invalid selector");
            return Ok(Action::await_change());
        }
    };
    let api: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), &ns);
    let revisions_api: Api<ControllerRevision> = Api::namespaced(ctx.client.clone(), &ns);
    let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);

    let mut revisions = owned_revisions(set.as_ref(), &api, &ctx.revisions, &selector).await?;
    sort_revisions(&mut revisions);
    let candidates = ctx
        .pods_by_controller
        .controlled_by(&set.uid().unwrap_or_default(), Some(&ns))
        .into_iter()
        .filter(|p| p.metadata.namespace.as_deref() == Some(ns.as_str()))
        .filter(|p| identity::is_member_of(&set, p));
    let pods = claim(set.as_ref(), &api, &pods_api, &selector, candidates).await?;

    let (current, update, collision_count) =
        revisions::current_and_update(&revisions_api, &set, &revisions).await?;
    let current_set = revisions::apply_revision(&set, &current);
    let update_set = revisions::apply_revision(&set, &update);
    let claims: claims::Claims = ctx
        .claims
        .state()
        .into_iter()
        .filter(|c| c.metadata.namespace.as_deref() == Some(ns.as_str()))
        .map(|c| (c.name_any(), c))
        .collect::<HashMap<_, _>>();
    let now = Timestamp::now();
    let planned = plan::plan(&plan::Input {
        set: &set,
        current_set: &current_set,
        update_set: &update_set,
        current_revision: &current.name_any(),
        update_revision: &update.name_any(),
        collision_count,
        pods: &pods,
        claims: &claims,
        now,
    });
    tracing::debug!(steps = ?planned.steps.iter().map(plan::Step::pod_name).collect::<Vec<_>>(), "planned");

    let applied = if ctx.expectations.satisfied(&key) {
        apply::apply(&ctx, &set, &update_set, &key, &planned.steps, &claims).await
    } else {
        Ok(())
    };
    let available = planned.status.available_replicas.unwrap_or(0);
    let written = status::write(&api, &set, planned.status).await;
    // The history is trimmed whatever happened above, as upstream does.
    let trimmed = truncate(&revisions_api, &set, &pods, &revisions, &current, &update).await;
    applied?;
    written?;
    trimmed?;

    let min_ready = spec.min_ready_seconds.unwrap_or(0);
    if min_ready > 0 && available != identity::replicas(&set) {
        return Ok(Action::requeue(Duration::from_secs(min_ready as u64)));
    }
    Ok(Action::await_change())
}

async fn truncate(
    api: &Api<ControllerRevision>,
    set: &StatefulSet,
    pods: &[Arc<Pod>],
    revisions: &[Arc<ControllerRevision>],
    current: &ControllerRevision,
    update: &ControllerRevision,
) -> Result<(), Error> {
    for revision in revisions::to_truncate(
        set,
        pods,
        revisions,
        &current.name_any(),
        &update.name_any(),
    ) {
        delete_revision(api, &revision).await?;
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod testing {
    use k8s_openapi::api::apps::v1::StatefulSet;

    /// A set `web` of 3 replicas in `ns` with a claim template `www`, `patch` merged in.
    pub fn set(patch: serde_json::Value) -> StatefulSet {
        let mut base = serde_json::json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "set-uid", "generation": 1},
            "spec": {
                "replicas": 3,
                "serviceName": "nginx",
                "podManagementPolicy": "OrderedReady",
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}],
                             "volumes": [{"name": "www", "emptyDir": {}}, {"name": "tmp", "emptyDir": {}}]},
                },
                "volumeClaimTemplates": [{"metadata": {"name": "www", "labels": {"tier": "data"}},
                                          "spec": {"accessModes": ["ReadWriteOnce"]}}],
            },
        });
        merge(&mut base, patch);
        serde_json::from_value(base).expect("a StatefulSet")
    }

    fn merge(base: &mut serde_json::Value, patch: serde_json::Value) {
        match (base, patch) {
            (serde_json::Value::Object(b), serde_json::Value::Object(p)) => {
                for (k, v) in p {
                    merge(b.entry(k).or_insert(serde_json::Value::Null), v);
                }
            }
            (b, p) => *b = p,
        }
    }
}
