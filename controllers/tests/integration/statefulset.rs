//! The StatefulSet controller against the in-process API server, its pods run by hollow nodes
//! (bound by the test binder): order under OrderedReady watched from outside (never two pods
//! starting at once), Parallel, scale down from the highest ordinal, claims made and kept,
//! the retention policy carried out by the garbage collector, rolling updates with a partition,
//! OnDelete, rollback through a revision's patch, and the status and revisions throughout.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet, StatefulSetStatus};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use minik8s_controllers::hollow::{self, HollowConfig};
use minik8s_controllers::informers::Informers;
use minik8s_controllers::statefulset::{self, POD_INDEX_LABEL, POD_NAME_LABEL, REVISION_LABEL};
use testkit::{Backend, InProcess, eventually};

use crate::support::{WAIT, run_binder};

/// What a watch of the set's pods saw.
#[derive(Default)]
struct Seen {
    /// Pods by name: (uid, starting) for those that exist.
    live: BTreeMap<String, (String, bool)>,
    created: Vec<String>,
    deleted: Vec<String>,
    /// The most pods starting (created, not yet Running and Ready, not being deleted) at once.
    most_starting: usize,
}

fn starting(p: &Pod) -> bool {
    let status = p.status.clone().unwrap_or_default();
    let ready = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    p.metadata.deletion_timestamp.is_none()
        && !(status.phase.as_deref() == Some("Running") && ready)
}

/// Watches the pods labelled `app=<app>` until dropped.
fn watch_pods(client: &Client, app: &str) -> (Arc<Mutex<Seen>>, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let api: Api<Pod> = Api::namespaced(client.clone(), "default");
    let config = watcher::Config::default().labels(&format!("app={app}"));
    let task = tokio::spawn({
        let seen = seen.clone();
        async move {
            let mut events = watcher(api, config).boxed();
            while let Some(Ok(event)) = events.next().await {
                let mut s = seen.lock().unwrap();
                match event {
                    watcher::Event::Apply(p) | watcher::Event::InitApply(p) => {
                        let uid = p.uid().unwrap_or_default();
                        let known = s.live.get(&p.name_any()).is_some_and(|(u, _)| *u == uid);
                        if !known {
                            s.created.push(p.name_any());
                        }
                        s.live.insert(p.name_any(), (uid, starting(&p)));
                    }
                    watcher::Event::Delete(p) => {
                        s.live.remove(&p.name_any());
                        s.deleted.push(p.name_any());
                    }
                    watcher::Event::Init | watcher::Event::InitDone => {}
                }
                let now_starting = s.live.values().filter(|(_, st)| *st).count();
                s.most_starting = s.most_starting.max(now_starting);
            }
        }
    });
    (seen, task)
}

fn sts(name: &str, spec: serde_json::Value) -> StatefulSet {
    let mut base = serde_json::json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": 3,
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
            },
        },
    });
    for (k, v) in spec.as_object().unwrap() {
        base["spec"][k] = v.clone();
    }
    serde_json::from_value(base).unwrap()
}

async fn pods_of(client: &Client, app: &str) -> Vec<Pod> {
    let api: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut pods: Vec<Pod> = api
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    pods.sort_by_key(|p| p.name_any());
    pods
}

async fn claim_names(client: &Client) -> BTreeSet<String> {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        // A deleted claim waits for the pvc-protection controller, which does not run here.
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .map(|c| c.name_any())
        .collect()
}

async fn revisions_of(client: &Client, app: &str) -> Vec<ControllerRevision> {
    let api: Api<ControllerRevision> = Api::namespaced(client.clone(), "default");
    let mut revs = api
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .unwrap()
        .items;
    revs.sort_by_key(|r| r.revision);
    revs
}

/// Waits until the set's status says `done` of its current generation.
async fn settled(
    sets: &Api<StatefulSet>,
    name: &str,
    what: &str,
    done: impl Fn(&StatefulSetStatus) -> bool,
) -> StatefulSetStatus {
    eventually(WAIT, what, || async {
        let s = sets.get(name).await.ok()?;
        let status = s.status?;
        (status.observed_generation == s.metadata.generation && done(&status)).then_some(status)
    })
    .await
}

fn all_ready(n: i32) -> impl Fn(&StatefulSetStatus) -> bool {
    move |s| {
        s.replicas == n
            && s.ready_replicas == Some(n)
            && s.available_replicas == Some(n)
            && s.current_revision == s.update_revision
            && s.current_replicas == Some(n)
    }
}

struct Cluster {
    _api: InProcess,
    client: Client,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

async fn cluster(nodes: usize) -> anyhow::Result<Cluster> {
    testkit::init_tracing();
    let api = InProcess::start(Backend::Sqlite).await?;
    let client = api.client();
    let mut tasks = vec![
        tokio::spawn(statefulset::run(Informers::new(client.clone()))),
        tokio::spawn(minik8s_controllers::garbagecollector::run(client.clone())),
    ];
    if nodes > 0 {
        let config = HollowConfig {
            count: nodes,
            ..Default::default()
        };
        let names = config.node_names();
        tasks.push(tokio::spawn({
            let c = client.clone();
            async move {
                let _ = hollow::run(c, config).await;
            }
        }));
        tasks.push(tokio::spawn(run_binder(client.clone(), names)));
    }
    Ok(Cluster {
        _api: api,
        client,
        tasks,
    })
}

#[tokio::test]
async fn ordered_ready_creates_in_order_scales_down_in_reverse_and_rolls_with_a_partition()
-> anyhow::Result<()> {
    let c = cluster(2).await?;
    let client = c.client.clone();
    let (seen, watch) = watch_pods(&client, "web");
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), "default");
    let claim_template = serde_json::json!([{"metadata": {"name": "www"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]);
    sets.create(
        &PostParams::default(),
        &sts(
            "web",
            serde_json::json!({"volumeClaimTemplates": claim_template}),
        ),
    )
    .await?;
    let status = settled(&sets, "web", "three pods ready", all_ready(3)).await;
    assert_eq!(status.updated_replicas, Some(3));
    assert_eq!(status.collision_count, Some(0));
    {
        let s = seen.lock().unwrap();
        assert_eq!(s.created, ["web-0", "web-1", "web-2"]);
        assert_eq!(s.most_starting, 1, "OrderedReady started two pods at once");
    }
    let pods = pods_of(&client, "web").await;
    let revision = status.current_revision.clone().unwrap();
    for (i, p) in pods.iter().enumerate() {
        let name = format!("web-{i}");
        assert_eq!(p.name_any(), name);
        assert_eq!(p.labels()[POD_NAME_LABEL], name);
        assert_eq!(p.labels()[POD_INDEX_LABEL], i.to_string());
        assert_eq!(p.labels()[REVISION_LABEL], revision);
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(spec.hostname.as_deref(), Some(name.as_str()));
        assert_eq!(spec.subdomain.as_deref(), Some("web"));
        let volume = &spec.volumes.as_ref().unwrap()[0];
        assert_eq!(
            volume.persistent_volume_claim.as_ref().unwrap().claim_name,
            format!("www-web-{i}")
        );
    }
    let claims = claim_names(&client).await;
    assert_eq!(
        claims,
        BTreeSet::from(["www-web-0".into(), "www-web-1".into(), "www-web-2".into()])
    );
    let claim: PersistentVolumeClaim = Api::namespaced(client.clone(), "default")
        .get("www-web-1")
        .await?;
    assert_eq!(claim.labels()["app"], "web");
    let revisions = revisions_of(&client, "web").await;
    assert_eq!(revisions.len(), 1);
    assert_eq!(revisions[0].name_any(), revision);
    assert_eq!(revisions[0].revision, 1);
    assert_eq!(revisions[0].owner_references()[0].kind, "StatefulSet");

    // Scale down: the highest ordinal first, one at a time; the claims stay.
    seen.lock().unwrap().deleted.clear();
    sets.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"replicas": 1}})),
    )
    .await?;
    settled(&sets, "web", "scaled to one", all_ready(1)).await;
    assert_eq!(seen.lock().unwrap().deleted, ["web-2", "web-1"]);
    assert_eq!(claim_names(&client).await.len(), 3);
    // Back up: the same claims serve the same ordinals.
    sets.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"replicas": 3}})),
    )
    .await?;
    settled(&sets, "web", "scaled to three", all_ready(3)).await;
    assert_eq!(claim_names(&client).await.len(), 3);

    // A rolling update with partition 1: web-2 then web-1, web-0 kept.
    seen.lock().unwrap().deleted.clear();
    sets.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {
            "updateStrategy": {"rollingUpdate": {"partition": 1}},
            "template": {"metadata": {"annotations": {"v": "2"}}},
        }})),
    )
    .await?;
    let status = settled(&sets, "web", "the partitioned rollout", |s| {
        s.updated_replicas == Some(2) && s.ready_replicas == Some(3)
    })
    .await;
    let (old, new) = (
        status.current_revision.clone().unwrap(),
        status.update_revision.clone().unwrap(),
    );
    assert_eq!(old, revision);
    assert_ne!(old, new);
    assert_eq!(status.current_replicas, Some(1));
    assert_eq!(seen.lock().unwrap().deleted, ["web-2", "web-1"]);
    let by_revision: Vec<String> = pods_of(&client, "web")
        .await
        .iter()
        .map(|p| p.labels()[REVISION_LABEL].clone())
        .collect();
    assert_eq!(by_revision, [old.clone(), new.clone(), new.clone()]);
    assert_eq!(seen.lock().unwrap().most_starting, 1);

    // Partition 0 finishes it; the update revision becomes current.
    sets.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(
            serde_json::json!({"spec": {"updateStrategy": {"rollingUpdate": {"partition": 0}}}}),
        ),
    )
    .await?;
    let status = settled(&sets, "web", "the rollout", all_ready(3)).await;
    assert_eq!(status.current_revision.as_deref(), Some(new.as_str()));
    let revisions = revisions_of(&client, "web").await;
    let numbered: Vec<(String, i64)> = revisions
        .iter()
        .map(|r| (r.name_any(), r.revision))
        .collect();
    assert_eq!(numbered, [(old.clone(), 1), (new.clone(), 2)]);

    // Rollback as `kubectl rollout undo` does it: the old revision's patch. The old revision
    // is renumbered, not copied.
    let data = revisions[0].data.clone().unwrap().0;
    sets.patch("web", &PatchParams::default(), &Patch::Strategic(data))
        .await?;
    let status = settled(&sets, "web", "the rollback", |s| {
        all_ready(3)(s) && s.current_revision.as_deref() == Some(old.as_str())
    })
    .await;
    assert_eq!(status.update_revision.as_deref(), Some(old.as_str()));
    let numbered: Vec<(String, i64)> = revisions_of(&client, "web")
        .await
        .iter()
        .map(|r| (r.name_any(), r.revision))
        .collect();
    assert_eq!(numbered, [(new, 2), (old, 3)]);
    assert_eq!(seen.lock().unwrap().most_starting, 1);
    watch.abort();
    Ok(())
}

#[tokio::test]
async fn parallel_starts_all_while_ordered_ready_waits_for_each() -> anyhow::Result<()> {
    let c = cluster(1).await?;
    let client = c.client.clone();
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), "default");
    // Pods that run but never become Ready.
    let unready = serde_json::json!({
        "metadata": {"labels": {"app": "par"}, "annotations": {"hollow.minik8s.io/ready": "false"}},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
    });
    let mut par = sts(
        "par",
        serde_json::json!({"podManagementPolicy": "Parallel"}),
    );
    par.spec.as_mut().unwrap().template = serde_json::from_value(unready.clone())?;
    sets.create(&PostParams::default(), &par).await?;
    let mut ord = sts("ord", serde_json::json!({}));
    let mut ord_template = unready;
    ord_template["metadata"]["labels"]["app"] = "ord".into();
    ord.spec.as_mut().unwrap().template = serde_json::from_value(ord_template)?;
    sets.create(&PostParams::default(), &ord).await?;

    settled(&sets, "par", "three parallel pods running", |s| {
        s.replicas == 3 && s.ready_replicas.is_none()
    })
    .await;
    let running = eventually(WAIT, "ord-0 running", || async {
        let pods = pods_of(&client, "ord").await;
        let running = pods
            .iter()
            .any(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"));
        running.then_some(pods)
    })
    .await;
    let names: Vec<String> = running.iter().map(|p| p.name_any()).collect();
    assert_eq!(names, ["ord-0"]);
    let status = sets.get("ord").await?.status.unwrap();
    assert_eq!(status.replicas, 1);

    // Ready: the rest follow.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let ready =
        serde_json::json!({"metadata": {"annotations": {"hollow.minik8s.io/ready": "true"}}});
    pods.patch("ord-0", &PatchParams::default(), &Patch::Merge(&ready))
        .await?;
    eventually(WAIT, "ord-1 made", || async {
        let names: Vec<String> = pods_of(&client, "ord")
            .await
            .iter()
            .map(|p| p.name_any())
            .collect();
        (names.len() == 2).then_some(())
    })
    .await;

    // Parallel scale down takes both at once, without waiting for readiness.
    sets.patch(
        "par",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"replicas": 1}})),
    )
    .await?;
    settled(&sets, "par", "parallel scale down", |s| s.replicas == 1).await;
    Ok(())
}

#[tokio::test]
async fn on_delete_waits_for_pods_to_be_deleted_and_failed_pods_come_back() -> anyhow::Result<()> {
    let c = cluster(1).await?;
    let client = c.client.clone();
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), "default");
    sets.create(
        &PostParams::default(),
        &sts(
            "od",
            serde_json::json!({"replicas": 2, "updateStrategy": {"type": "OnDelete"}}),
        ),
    )
    .await?;
    let status = settled(&sets, "od", "two pods", all_ready(2)).await;
    let old = status.current_revision.unwrap();
    sets.patch(
        "od",
        &PatchParams::default(),
        &Patch::Merge(
            serde_json::json!({"spec": {"template": {"metadata": {"annotations": {"v": "2"}}}}}),
        ),
    )
    .await?;
    let status = settled(&sets, "od", "the new revision seen", |s| {
        s.update_revision.as_deref() != Some(old.as_str())
    })
    .await;
    let new = status.update_revision.unwrap();
    assert_eq!(status.current_replicas, Some(2));
    assert_eq!(status.updated_replicas, None);
    assert!(
        pods_of(&client, "od")
            .await
            .iter()
            .all(|p| p.labels()[REVISION_LABEL] == old)
    );
    // Deleted by hand, a pod comes back at the update revision.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.delete("od-1", &DeleteParams::default()).await?;
    eventually(WAIT, "od-1 back at the new revision", || async {
        let pods = pods_of(&client, "od").await;
        pods.iter()
            .any(|p| p.name_any() == "od-1" && p.labels()[REVISION_LABEL] == new)
            .then_some(())
    })
    .await;
    let status = settled(&sets, "od", "one updated", |s| {
        s.updated_replicas == Some(1) && s.ready_replicas == Some(2)
    })
    .await;
    assert_eq!(status.current_revision.as_deref(), Some(old.as_str()));

    // A failed pod is deleted and made again.
    let failed_uid = pods.get("od-0").await?.uid();
    let failed = serde_json::json!({"status": {"phase": "Failed"}});
    pods.patch_status("od-0", &PatchParams::default(), &Patch::Merge(&failed))
        .await?;
    eventually(WAIT, "od-0 made again", || async {
        let p = pods.get("od-0").await.ok()?;
        let running = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
        (p.uid() != failed_uid && running).then_some(())
    })
    .await;
    Ok(())
}

#[tokio::test]
async fn the_retention_policy_deletes_claims_through_owner_references() -> anyhow::Result<()> {
    let c = cluster(1).await?;
    let client = c.client.clone();
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), "default");
    let claim_template = serde_json::json!([{"metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]);
    sets.create(
        &PostParams::default(),
        &sts(
            "db",
            serde_json::json!({
                "volumeClaimTemplates": claim_template,
                "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete", "whenScaled": "Delete"},
            }),
        ),
    )
    .await?;
    settled(&sets, "db", "three pods", all_ready(3)).await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let set_uid = sets.get("db").await?.uid().unwrap();
    let claim = claims.get("data-db-2").await?;
    let owner = &claim.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("StatefulSet", set_uid.as_str())
    );
    assert_eq!(owner.controller, Some(true));

    // Scaled away: the claim moves to the pod, and goes with it.
    sets.patch(
        "db",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"replicas": 1}})),
    )
    .await?;
    settled(&sets, "db", "scaled to one", all_ready(1)).await;
    eventually(WAIT, "the scaled-away claims gone", || async {
        let names = claim_names(&client).await;
        (names == BTreeSet::from(["data-db-0".to_string()])).then_some(())
    })
    .await;

    // The set deleted: its claims go too.
    sets.delete("db", &DeleteParams::background()).await?;
    eventually(WAIT, "every claim gone", || async {
        claim_names(&client).await.is_empty().then_some(())
    })
    .await;
    Ok(())
}
