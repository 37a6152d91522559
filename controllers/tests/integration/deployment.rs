//! The Deployment controller (with the ReplicaSet controller under it) against the
//! in-process API server and hollow nodes.

use crate::common;
use minik8s_controllers::informers::Informers;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex};

use common::{Cluster, WAIT, event_reasons, live, ready};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use minik8s_controllers::deployment::util::{
    POD_TEMPLATE_HASH_LABEL, REVISION_ANNOTATION, REVISION_HISTORY_ANNOTATION,
};
use minik8s_controllers::{deployment, replicaset};
use testkit::eventually;

fn deploy(name: &str, replicas: i32, spec: serde_json::Value) -> Deployment {
    let mut d = serde_json::json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
            },
        },
    });
    merge(&mut d["spec"], spec);
    serde_json::from_value(d).unwrap()
}

fn merge(a: &mut serde_json::Value, b: serde_json::Value) {
    match (a, b) {
        (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(serde_json::Value::Null), v);
            }
        }
        (a, b) => *a = b,
    }
}

async fn start() -> anyhow::Result<(Cluster, Api<Deployment>, Api<ReplicaSet>, Api<Pod>)> {
    let mut cluster = Cluster::start().await?;
    cluster.spawn(replicaset::run(Informers::new(cluster.client.clone())));
    cluster.spawn(deployment::run(Informers::new(cluster.client.clone())));
    let c = cluster.client.clone();
    Ok((
        cluster,
        Api::namespaced(c.clone(), "default"),
        Api::namespaced(c.clone(), "default"),
        Api::namespaced(c, "default"),
    ))
}

async fn patch(api: &Api<Deployment>, name: &str, body: serde_json::Value) {
    api.patch(name, &PatchParams::default(), &Patch::Merge(body))
        .await
        .unwrap();
}

async fn set_image(api: &Api<Deployment>, name: &str, image: &str) {
    patch(
        api,
        name,
        serde_json::json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": image}]}}}}),
    )
    .await
}

fn condition_reason(d: &Deployment, ty: &str) -> Option<String> {
    d.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == ty)?
        .reason
        .clone()
}

/// What `kubectl rollout status` waits for, plus the Progressing reason of a finished rollout.
async fn complete(api: &Api<Deployment>, name: &str) -> Deployment {
    eventually(WAIT, &format!("rollout of {name} complete"), || async {
        let d = api.get(name).await.ok()?;
        let s = d.status.clone()?;
        let want = d.spec.as_ref()?.replicas?;
        let ok = s.observed_generation >= d.metadata.generation
            && s.updated_replicas.unwrap_or(0) == want
            && s.replicas.unwrap_or(0) == want
            && s.available_replicas.unwrap_or(0) == want
            && condition_reason(&d, "Progressing").as_deref() == Some("NewReplicaSetAvailable")
            && condition_reason(&d, "Available").as_deref() == Some("MinimumReplicasAvailable");
        ok.then_some(d)
    })
    .await
}

async fn sets_of(api: &Api<ReplicaSet>, d: &Deployment) -> Vec<ReplicaSet> {
    let mut list: Vec<ReplicaSet> = api
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|rs| {
            rs.owner_references()
                .iter()
                .any(|o| Some(&o.uid) == d.metadata.uid.as_ref())
        })
        .collect();
    list.sort_by_key(revision);
    list
}

fn revision(rs: &ReplicaSet) -> i64 {
    rs.annotations()
        .get(REVISION_ANNOTATION)
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

fn replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0)
}

/// Runs `f` on the pods of app `app` after every pod watch event, until dropped.
fn watch_pods(cluster: &mut Cluster, app: &str, f: impl Fn(&[Pod]) + Send + 'static) {
    let api: Api<Pod> = Api::namespaced(cluster.client.clone(), "default");
    let config = watcher::Config::default().labels(&format!("app={app}"));
    cluster.spawn(async move {
        let mut pods: HashMap<String, Pod> = HashMap::new();
        let mut listed = false;
        let stream = watcher(api, config);
        futures::pin_mut!(stream);
        while let Some(Ok(ev)) = stream.next().await {
            if matches!(ev, watcher::Event::InitDone) {
                listed = true;
            }
            match ev {
                watcher::Event::Apply(p) | watcher::Event::InitApply(p) => {
                    pods.insert(p.name_any(), p);
                }
                watcher::Event::Delete(p) => {
                    pods.remove(&p.name_any());
                }
                watcher::Event::Init => {
                    pods.clear();
                    listed = false;
                }
                watcher::Event::InitDone => {}
            }
            // A partial initial list would look like lost pods.
            if listed {
                let list: Vec<Pod> = pods.values().cloned().collect();
                f(&list);
            }
        }
    });
}

#[tokio::test]
async fn rolling_update_stays_within_surge_and_availability() -> anyhow::Result<()> {
    let (mut cluster, deploys, sets, pods) = start().await?;
    deploys
        .create(
            &PostParams::default(),
            &deploy("web", 4, serde_json::json!({})),
        )
        .await?;
    let d = complete(&deploys, "web").await;
    let first = sets_of(&sets, &d).await;
    assert_eq!(first.len(), 1);
    let hash = first[0].labels()[POD_TEMPLATE_HASH_LABEL].clone();
    assert_eq!(first[0].name_any(), format!("web-{hash}"));
    assert_eq!(d.annotations()[REVISION_ANNOTATION], "1");
    let owned = pods.list(&Default::default()).await?.items;
    assert!(
        owned
            .iter()
            .all(|p| p.labels()[POD_TEMPLATE_HASH_LABEL] == hash)
    );

    // 25% of 4: one extra pod at most, one unavailable at most.
    let min_available = Arc::new(AtomicI32::new(i32::MAX));
    let seen = min_available.clone();
    watch_pods(&mut cluster, "web", move |pods| {
        let available = live(pods).into_iter().filter(|p| ready(p)).count() as i32;
        seen.fetch_min(available, Ordering::SeqCst);
    });
    let max_total = Arc::new(AtomicI32::new(0));
    let seen = max_total.clone();
    let rs_api = sets.clone();
    // Every size the watch saw, to show how a limit was crossed.
    let history = Arc::new(Mutex::new(Vec::new()));
    let log = history.clone();
    cluster.spawn(async move {
        let mut all: HashMap<String, i32> = HashMap::new();
        let stream = watcher(rs_api, watcher::Config::default().labels("app=web"));
        futures::pin_mut!(stream);
        while let Some(Ok(ev)) = stream.next().await {
            match ev {
                watcher::Event::Apply(rs) | watcher::Event::InitApply(rs) => {
                    log.lock().unwrap().push(format!(
                        "{} replicas={} rv={}",
                        rs.name_any(),
                        replicas(&rs),
                        rs.resource_version().unwrap_or_default()
                    ));
                    all.insert(rs.name_any(), replicas(&rs));
                }
                watcher::Event::Delete(rs) => {
                    all.remove(&rs.name_any());
                }
                _ => {}
            }
            seen.fetch_max(all.values().sum(), Ordering::SeqCst);
        }
    });
    eventually(WAIT, "the watches have seen the pods", || async {
        (min_available.load(Ordering::SeqCst) == 4 && max_total.load(Ordering::SeqCst) == 4)
            .then_some(())
    })
    .await;

    set_image(&deploys, "web", "busybox:1.37").await;
    let d = complete(&deploys, "web").await;
    assert_eq!(d.annotations()[REVISION_ANNOTATION], "2");
    let list = sets_of(&sets, &d).await;
    assert_eq!(list.len(), 2);
    assert_eq!((revision(&list[0]), replicas(&list[0])), (1, 0));
    assert_eq!((revision(&list[1]), replicas(&list[1])), (2, 4));
    assert_ne!(list[1].labels()[POD_TEMPLATE_HASH_LABEL], hash);
    eventually(WAIT, "only new pods", || async {
        let all = pods.list(&Default::default()).await.ok()?.items;
        let new_hash = &list[1].labels()[POD_TEMPLATE_HASH_LABEL];
        (all.len() == 4
            && all
                .iter()
                .all(|p| &p.labels()[POD_TEMPLATE_HASH_LABEL] == new_hash))
        .then_some(())
    })
    .await;
    assert!(
        min_available.load(Ordering::SeqCst) >= 3,
        "availability fell below replicas - maxUnavailable"
    );
    assert!(
        max_total.load(Ordering::SeqCst) <= 5,
        "ReplicaSets were sized beyond replicas + maxSurge: {:#?}",
        history.lock().unwrap()
    );
    assert_eq!(max_total.load(Ordering::SeqCst), 5, "the surge was used");

    let client = cluster.client.clone();
    let reasons = event_reasons(&client, "default", "web", "deployment-controller").await;
    assert!(
        reasons.iter().any(|r| r == "ScalingReplicaSet"),
        "{reasons:?}"
    );
    Ok(())
}

#[tokio::test]
async fn recreate_stops_old_pods_before_starting_new_ones() -> anyhow::Result<()> {
    let (mut cluster, deploys, sets, _pods) = start().await?;
    deploys
        .create(
            &PostParams::default(),
            &deploy(
                "db",
                3,
                serde_json::json!({"strategy": {"type": "Recreate"}}),
            ),
        )
        .await?;
    let d = complete(&deploys, "db").await;
    let old_hash = sets_of(&sets, &d).await[0].labels()[POD_TEMPLATE_HASH_LABEL].clone();
    let overlap = Arc::new(AtomicBool::new(false));
    let seen = overlap.clone();
    watch_pods(&mut cluster, "db", move |pods| {
        let hashes: HashSet<&str> = pods
            .iter()
            .map(|p| p.labels()[POD_TEMPLATE_HASH_LABEL].as_str())
            .collect();
        if hashes.len() > 1 && hashes.contains(old_hash.as_str()) {
            seen.store(true, Ordering::SeqCst);
        }
    });
    set_image(&deploys, "db", "busybox:1.37").await;
    let d = complete(&deploys, "db").await;
    let list = sets_of(&sets, &d).await;
    assert_eq!(list.iter().map(replicas).collect::<Vec<_>>(), [0, 3]);
    assert!(
        !overlap.load(Ordering::SeqCst),
        "old and new pods existed at once"
    );
    Ok(())
}

#[tokio::test]
async fn rollback_reuses_the_old_replica_set_as_the_next_revision() -> anyhow::Result<()> {
    let (_cluster, deploys, sets, _pods) = start().await?;
    deploys
        .create(
            &PostParams::default(),
            &deploy("web", 3, serde_json::json!({})),
        )
        .await?;
    complete(&deploys, "web").await;
    set_image(&deploys, "web", "busybox:1.37").await;
    let d = complete(&deploys, "web").await;
    let list = sets_of(&sets, &d).await;
    let rev1 = list[0].clone();

    // What `kubectl rollout undo` does: the old template, without the hash label, patched in.
    let mut template = rev1.spec.clone().unwrap().template.unwrap();
    template
        .metadata
        .as_mut()
        .unwrap()
        .labels
        .as_mut()
        .unwrap()
        .remove(POD_TEMPLATE_HASH_LABEL);
    deploys
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Json::<()>(serde_json::from_value(serde_json::json!([
                {"op": "replace", "path": "/spec/template", "value": template}
            ]))?),
        )
        .await?;
    let d = complete(&deploys, "web").await;
    assert_eq!(d.annotations()[REVISION_ANNOTATION], "3");
    let list = sets_of(&sets, &d).await;
    assert_eq!(
        list.len(),
        2,
        "no new ReplicaSet for a template seen before"
    );
    let back = list.iter().find(|rs| rs.uid() == rev1.uid()).unwrap();
    assert_eq!(revision(back), 3);
    assert_eq!(back.annotations()[REVISION_HISTORY_ANNOTATION], "1");
    assert_eq!(replicas(back), 3);
    Ok(())
}

#[tokio::test]
async fn paused_deployments_scale_but_do_not_roll_out() -> anyhow::Result<()> {
    let (_cluster, deploys, sets, _pods) = start().await?;
    deploys
        .create(
            &PostParams::default(),
            &deploy("web", 2, serde_json::json!({})),
        )
        .await?;
    complete(&deploys, "web").await;
    patch(
        &deploys,
        "web",
        serde_json::json!({"spec": {"paused": true}}),
    )
    .await;
    set_image(&deploys, "web", "busybox:1.37").await;
    patch(
        &deploys,
        "web",
        serde_json::json!({"spec": {"replicas": 5}}),
    )
    .await;
    let d = eventually(
        WAIT,
        "the paused deployment observed and scaled",
        || async {
            let d = deploys.get("web").await.ok()?;
            let s = d.status.clone()?;
            (s.observed_generation == d.metadata.generation
                && s.available_replicas == Some(5)
                && condition_reason(&d, "Progressing").as_deref() == Some("DeploymentPaused"))
            .then_some(d)
        },
    )
    .await;
    let list = sets_of(&sets, &d).await;
    assert_eq!(list.len(), 1, "no rollout while paused");
    assert_eq!(replicas(&list[0]), 5);
    assert_eq!(
        list[0].annotations()["deployment.kubernetes.io/desired-replicas"],
        "5"
    );

    patch(
        &deploys,
        "web",
        serde_json::json!({"spec": {"paused": false}}),
    )
    .await;
    let d = complete(&deploys, "web").await;
    let list = sets_of(&sets, &d).await;
    assert_eq!(list.iter().map(replicas).collect::<Vec<_>>(), [0, 5]);
    Ok(())
}

#[tokio::test]
async fn old_replica_sets_beyond_the_history_limit_are_deleted() -> anyhow::Result<()> {
    let (_cluster, deploys, sets, _pods) = start().await?;
    deploys
        .create(
            &PostParams::default(),
            &deploy("web", 2, serde_json::json!({"revisionHistoryLimit": 1})),
        )
        .await?;
    complete(&deploys, "web").await;
    for image in ["busybox:1.35", "busybox:1.34", "busybox:1.33"] {
        set_image(&deploys, "web", image).await;
        complete(&deploys, "web").await;
    }
    let d = deploys.get("web").await?;
    let revisions = eventually(WAIT, "one old ReplicaSet kept", || async {
        let list = sets_of(&sets, &d).await;
        (list.len() == 2).then(|| list.iter().map(revision).collect::<Vec<_>>())
    })
    .await;
    assert_eq!(revisions, [3, 4]);
    Ok(())
}

#[tokio::test]
async fn a_stuck_rollout_exceeds_its_progress_deadline() -> anyhow::Result<()> {
    let (_cluster, deploys, _sets, _pods) = start().await?;
    let d = deploy(
        "stuck",
        2,
        serde_json::json!({
            "progressDeadlineSeconds": 2,
            "template": {"metadata": {"annotations": {"hollow.minik8s.io/ready": "false"}}},
        }),
    );
    deploys.create(&PostParams::default(), &d).await?;
    let d = eventually(WAIT, "ProgressDeadlineExceeded", || async {
        let d = deploys.get("stuck").await.ok()?;
        (condition_reason(&d, "Progressing").as_deref() == Some("ProgressDeadlineExceeded"))
            .then_some(d)
    })
    .await;
    let conditions: BTreeMap<String, String> = d
        .status
        .unwrap()
        .conditions
        .unwrap()
        .into_iter()
        .map(|c| (c.type_, c.status))
        .collect();
    assert_eq!(conditions["Progressing"], "False");
    assert_eq!(conditions["Available"], "False");
    Ok(())
}

#[tokio::test]
async fn controller_restarts_while_scaling_neither_duplicate_nor_lose_replicas()
-> anyhow::Result<()> {
    let mut cluster = Cluster::start().await?;
    let client = cluster.client.clone();
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let uids = Arc::new(Mutex::new(HashSet::new()));
    let record = uids.clone();
    watch_pods(&mut cluster, "web", move |pods| {
        let mut u = record.lock().unwrap();
        for p in pods {
            u.insert(p.uid().unwrap_or_default());
        }
    });
    deploys
        .create(
            &PostParams::default(),
            &deploy("web", 1, serde_json::json!({})),
        )
        .await?;
    let start = |c: &Client| {
        (
            tokio::spawn(replicaset::run(Informers::new(c.clone()))),
            tokio::spawn(deployment::run(Informers::new(c.clone()))),
        )
    };
    let mut running = start(&client);
    let mut before = 0;
    for n in [3, 7, 12, 20] {
        patch(
            &deploys,
            "web",
            serde_json::json!({"spec": {"replicas": n}}),
        )
        .await;
        before = eventually(WAIT, "creations under way", || async {
            let n = pods.list(&Default::default()).await.ok()?.items.len();
            (n > before).then_some(n)
        })
        .await;
        running.0.abort();
        running.1.abort();
        let _ = running.0.await;
        let _ = running.1.await;
        common::writes_settled(&client).await;
        running = start(&client);
    }
    let d = complete(&deploys, "web").await;
    assert_eq!(sets_of(&sets, &d).await.len(), 1);
    let all = pods.list(&Default::default()).await?.items;
    assert_eq!(live(&all).len(), 20);
    eventually(WAIT, "the watch has seen every pod", || async {
        (uids.lock().unwrap().len() >= 20).then_some(())
    })
    .await;
    assert_eq!(
        uids.lock().unwrap().len(),
        20,
        "pods were created beyond the replicas"
    );
    running.0.abort();
    running.1.abort();
    Ok(())
}

/// Many Deployments at once, and a rollout of all of them while their first pods are still
/// being created: no Deployment ever has more live pods than replicas + maxSurge (the
/// ReplicaSet expectations hold while the cache lags behind the writes), and every status
/// converges. Issue 13's storm at the size of a test.
#[tokio::test]
async fn a_storm_of_deployments_never_overshoots_and_every_status_converges() -> anyhow::Result<()>
{
    const DEPLOYMENTS: usize = 8;
    const REPLICAS: i32 = 25;
    // The default maxSurge, 25 % of 25 rounded up.
    const SURGE: i32 = 7;
    let (mut cluster, deploys, sets, pods) = start().await?;

    // The most live pods each Deployment (label `app`) ever had, event by event.
    let most: Arc<Mutex<HashMap<String, i32>>> = Arc::default();
    let seen = most.clone();
    let watched = pods.clone();
    cluster.spawn(async move {
        let mut live: HashMap<String, String> = HashMap::new();
        let stream = watcher(watched, watcher::Config::default().labels("storm"));
        futures::pin_mut!(stream);
        while let Some(Ok(ev)) = stream.next().await {
            let (watcher::Event::Apply(p)
            | watcher::Event::InitApply(p)
            | watcher::Event::Delete(p)) = &ev
            else {
                continue;
            };
            let app = p.labels()["app"].clone();
            if matches!(ev, watcher::Event::Delete(_)) || p.metadata.deletion_timestamp.is_some() {
                live.remove(&p.name_any());
            } else {
                live.insert(p.name_any(), app.clone());
            }
            let count = live.values().filter(|a| **a == app).count() as i32;
            let mut most = seen.lock().unwrap();
            let m = most.entry(app).or_default();
            *m = (*m).max(count);
        }
    });

    let names: Vec<String> = (0..DEPLOYMENTS).map(|i| format!("storm-{i}")).collect();
    futures::future::try_join_all(names.iter().map(|name| {
        let d = deploy(
            name,
            REPLICAS,
            serde_json::json!({"template": {"metadata": {"labels": {"storm": "yes"}}}}),
        );
        let deploys = deploys.clone();
        async move { deploys.create(&PostParams::default(), &d).await }
    }))
    .await?;
    // The rollout starts while the first ReplicaSets are still creating their pods.
    eventually(WAIT, "the storm under way", || async {
        let n = pods.list(&Default::default()).await.ok()?.items.len();
        (n >= DEPLOYMENTS * 5).then_some(())
    })
    .await;
    for name in &names {
        set_image(&deploys, name, "busybox:1.37").await;
    }

    for name in &names {
        let d = complete(&deploys, name).await;
        assert_eq!(d.annotations()[REVISION_ANNOTATION], "2", "{name}");
        let list = sets_of(&sets, &d).await;
        let new_hash = list
            .last()
            .map(|rs| rs.labels()[POD_TEMPLATE_HASH_LABEL].clone())
            .unwrap();
        eventually(WAIT, &format!("{name}: only its new pods"), || async {
            let all = pods
                .list(&kube::api::ListParams::default().labels(&format!("app={name}")))
                .await
                .ok()?
                .items;
            (all.len() == REPLICAS as usize
                && all
                    .iter()
                    .all(|p| p.labels()[POD_TEMPLATE_HASH_LABEL] == new_hash))
            .then_some(())
        })
        .await;
        eventually(WAIT, &format!("{name}: ReplicaSet statuses"), || async {
            let list = sets_of(&sets, &d).await;
            let settled = list.iter().all(|rs| {
                let s = rs.status.clone().unwrap_or_default();
                s.observed_generation == rs.metadata.generation
                    && s.replicas == replicas(rs)
                    && s.ready_replicas.unwrap_or(0) == replicas(rs)
                    && s.available_replicas.unwrap_or(0) == replicas(rs)
            });
            let sizes: Vec<i32> = list.iter().map(replicas).collect();
            (settled && sizes == [0, REPLICAS]).then_some(())
        })
        .await;
        // Scaled by updates from the controller's cache, which holds no managedFields: the
        // server kept them (an update sending an empty list would have reset them).
        for rs in sets_of(&sets, &d).await {
            let managers: Vec<String> = rs
                .managed_fields()
                .iter()
                .filter_map(|m| m.manager.clone())
                .collect();
            assert!(
                !managers.is_empty(),
                "{}: no managedFields left",
                rs.name_any()
            );
        }
    }
    let most = most.lock().unwrap().clone();
    assert_eq!(most.len(), DEPLOYMENTS, "{most:?}");
    for (app, n) in &most {
        assert!(
            *n <= REPLICAS + SURGE,
            "{app} had {n} live pods, more than {REPLICAS} replicas + {SURGE} surge: {most:?}"
        );
    }
    Ok(())
}
