//! The DaemonSet controller against the in-process API server: a pod per eligible hollow node,
//! placed by node affinity (bound by the test binder as the scheduler would), status, and a
//! rolling update.

use crate::support;
use minik8s_controllers::informers::Informers;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use minik8s_controllers::daemonset::{self, REVISION_HASH};
use minik8s_controllers::hollow::{self, HollowConfig};
use support::{WAIT, affinity_node, run_binder};
use testkit::{Backend, InProcess, eventually};

async fn daemon_pods(client: &Client) -> Vec<Pod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.list(&ListParams::default().labels("app=agent"))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

#[tokio::test]
async fn daemonsets_run_one_pod_per_eligible_node_and_roll() -> anyhow::Result<()> {
    testkit::init_tracing();
    let api = InProcess::start(Backend::Sqlite).await?;
    let client = api.client();
    let config = HollowConfig {
        count: 2,
        ..Default::default()
    };
    let hollow_nodes = config.node_names();
    // A node no daemon may run on: tainted NoSchedule.
    let nodes: Api<Node> = Api::all(client.clone());
    let tainted: Node = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "tainted"},
        "spec": {"taints": [{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]},
    }))?;
    nodes.create(&PostParams::default(), &tainted).await?;
    let tasks = [
        tokio::spawn({
            let c = client.clone();
            async move {
                let _ = hollow::run(c, config).await;
            }
        }),
        tokio::spawn(run_binder(client.clone(), hollow_nodes.clone())),
        tokio::spawn(daemonset::run(Informers::new(client.clone()))),
    ];

    let sets: Api<DaemonSet> = Api::namespaced(client.clone(), "default");
    let ds: DaemonSet = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "agent"},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {
                "metadata": {"labels": {"app": "agent"}},
                "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
            },
        },
    }))?;
    sets.create(&PostParams::default(), &ds).await?;
    let status = eventually(WAIT, "two daemons available", || async {
        let s = sets.get("agent").await.ok()?.status?;
        (s.number_available == Some(2) && s.desired_number_scheduled == 2).then_some(s)
    })
    .await;
    assert_eq!(status.current_number_scheduled, 2);
    assert_eq!(status.number_ready, 2);
    assert_eq!(status.updated_number_scheduled, Some(2));
    assert_eq!(status.number_misscheduled, 0);
    assert_eq!(status.observed_generation, Some(1));
    let pods = daemon_pods(&client).await;
    let mut placed: Vec<String> = pods.iter().filter_map(affinity_node).collect();
    placed.sort();
    assert_eq!(placed, hollow_nodes);
    for p in &pods {
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(spec.node_name.as_ref(), affinity_node(p).as_ref());
        let tolerations = spec.tolerations.as_ref().unwrap();
        assert!(
            tolerations
                .iter()
                .any(|t| t.key.as_deref() == Some("node.kubernetes.io/unreachable"))
        );
    }
    let old_hash = pods[0].labels()[REVISION_HASH].clone();

    // A template change rolls every pod, one node at a time.
    let change =
        serde_json::json!({"spec": {"template": {"metadata": {"annotations": {"v": "2"}}}}});
    sets.patch("agent", &PatchParams::default(), &Patch::Merge(change))
        .await?;
    let status = eventually(WAIT, "the rollout done", || async {
        let d = sets.get("agent").await.ok()?;
        let s = d.status?;
        let pods = daemon_pods(&client).await;
        let done = s.observed_generation == d.metadata.generation
            && s.updated_number_scheduled == Some(2)
            && s.number_available == Some(2)
            && pods.len() == 2
            && pods.iter().all(|p| p.labels()[REVISION_HASH] != old_hash);
        done.then_some(s)
    })
    .await;
    assert_eq!(status.observed_generation, Some(2));

    // A node taken out of the selector's reach loses its daemon.
    let select = serde_json::json!({"spec": {"template": {"spec": {"nodeSelector": {"kubernetes.io/hostname": hollow_nodes[0]}}}}});
    sets.patch("agent", &PatchParams::default(), &Patch::Merge(select))
        .await?;
    eventually(WAIT, "one daemon left", || async {
        let s = sets.get("agent").await.ok()?.status?;
        let pods = daemon_pods(&client).await;
        let on_first = pods
            .iter()
            .all(|p| affinity_node(p).as_deref() == Some(hollow_nodes[0].as_str()));
        (s.desired_number_scheduled == 1
            && s.number_available == Some(1)
            && pods.len() == 1
            && on_first)
            .then_some(())
    })
    .await;
    for t in tasks {
        t.abort();
    }
    Ok(())
}

#[tokio::test]
async fn daemonset_revisions_record_each_template_and_roll_back() -> anyhow::Result<()> {
    use k8s_openapi::api::apps::v1::ControllerRevision;
    testkit::init_tracing();
    let api = InProcess::start(Backend::Sqlite).await?;
    let client = api.client();
    let config = HollowConfig {
        count: 2,
        ..Default::default()
    };
    let hollow_nodes = config.node_names();
    let tasks = [
        tokio::spawn({
            let c = client.clone();
            async move {
                let _ = hollow::run(c, config).await;
            }
        }),
        tokio::spawn(run_binder(client.clone(), hollow_nodes)),
        tokio::spawn(daemonset::run(Informers::new(client.clone()))),
    ];
    let sets: Api<DaemonSet> = Api::namespaced(client.clone(), "default");
    let revisions: Api<ControllerRevision> = Api::namespaced(client.clone(), "default");
    let ds: DaemonSet = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "agent", "annotations": {"kubernetes.io/change-cause": "first"}},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {
                "metadata": {"labels": {"app": "agent"}},
                "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
            },
        },
    }))?;
    sets.create(&PostParams::default(), &ds).await?;
    // What `kubectl rollout history` lists: revisions by the selector, controlled by the set.
    let history = || async {
        let mut list = revisions
            .list(&ListParams::default().labels("app=agent"))
            .await
            .unwrap()
            .items;
        list.sort_by_key(|r| r.revision);
        list
    };
    let rolled_to = |hash: String| {
        let (sets, client) = (sets.clone(), client.clone());
        async move {
            eventually(WAIT, "pods at the revision", || async {
                let d = sets.get("agent").await.ok()?;
                let s = d.status?;
                let pods = daemon_pods(&client).await;
                let done = s.observed_generation == d.metadata.generation
                    && s.updated_number_scheduled == Some(2)
                    && s.number_available == Some(2)
                    && pods.len() == 2
                    && pods.iter().all(|p| p.labels()[REVISION_HASH] == hash);
                done.then_some(())
            })
            .await
        }
    };
    let first = eventually(WAIT, "the first revision", || async {
        history().await.first().cloned()
    })
    .await;
    assert_eq!(first.revision, 1);
    let first_hash = first.labels()[REVISION_HASH].clone();
    assert_eq!(first.name_any(), format!("agent-{first_hash}"));
    assert_eq!(first.annotations()["kubernetes.io/change-cause"], "first");
    let data = first.data.clone().unwrap().0;
    assert_eq!(data["spec"]["template"]["$patch"], "replace");
    assert_eq!(first.owner_references()[0].kind, "DaemonSet");
    rolled_to(first_hash.clone()).await;

    let change = serde_json::json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox:1.36", "env": [{"name": "V", "value": "2"}]}]}}}});
    sets.patch("agent", &PatchParams::default(), &Patch::Merge(change))
        .await?;
    let second = eventually(WAIT, "the second revision", || async {
        let h = history().await;
        (h.len() == 2).then(|| h[1].clone())
    })
    .await;
    assert_eq!(second.revision, 2);
    let second_hash = second.labels()[REVISION_HASH].clone();
    assert_ne!(second_hash, first_hash);
    rolled_to(second_hash).await;

    // `kubectl rollout undo`: the first revision's patch. Its revision moves to 3, no copy.
    sets.patch("agent", &PatchParams::default(), &Patch::Strategic(data))
        .await?;
    eventually(WAIT, "the first revision renumbered", || async {
        let numbers: Vec<(String, i64)> = history()
            .await
            .iter()
            .map(|r| (r.name_any(), r.revision))
            .collect();
        (numbers == [(second.name_any(), 2), (first.name_any(), 3)]).then_some(())
    })
    .await;
    rolled_to(first_hash).await;

    // History is trimmed to revisionHistoryLimit, keeping what pods run.
    sets.patch(
        "agent",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"revisionHistoryLimit": 0}})),
    )
    .await?;
    eventually(WAIT, "old revisions gone", || async {
        let names: Vec<String> = history().await.iter().map(|r| r.name_any()).collect();
        (names == [first.name_any()]).then_some(())
    })
    .await;
    for t in tasks {
        t.abort();
    }
    Ok(())
}
