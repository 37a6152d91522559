//! StatefulSets and DaemonSets through kubectl's rollout commands on the real kubelet.
//!
//! A StatefulSet behind a headless Service: its pods come up one at a time in ordinal order
//! (a watch of the case's own sees at most one pod starting at any moment), each resolves as
//! `<pod>.<service>` in cluster DNS, an env change rolls out from the highest ordinal down to
//! the partition, `rollout history` lists the revisions, `rollout undo` restores the old
//! template, and a scale down removes the highest ordinals first. A DaemonSet's revisions
//! go through `rollout status|history|undo` the same way.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, ensure};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{DaemonSet, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::ResourceExt;
use kube::api::ListParams;
use kube::runtime::watcher;
use serde_json::json;

use super::{Ctx, WORKLOAD, cleanup, rows, yaml};
use crate::support::{contains, eventually};

/// What the case's watch of a workload's pods saw.
#[derive(Default)]
struct Seen {
    /// Live pods by name: (uid, starting).
    live: std::collections::BTreeMap<String, (String, bool)>,
    created: Vec<String>,
    deleted: Vec<String>,
    most_starting: usize,
}

/// Created, not being deleted, and not yet Running and Ready.
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

/// Watches the pods labelled `app=<app>` until the returned task is aborted.
fn watch_pods(c: &Ctx, app: &str) -> (Arc<Mutex<Seen>>, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let config = watcher::Config::default().labels(&format!("app={app}"));
    let events = watcher(c.api::<Pod>(), config);
    let task = tokio::spawn({
        let seen = seen.clone();
        async move {
            let mut events = events.boxed();
            while let Some(event) = events.next().await {
                let Ok(event) = event else { continue };
                let mut s = seen.lock().expect("seen");
                match event {
                    watcher::Event::Apply(p) | watcher::Event::InitApply(p) => {
                        let uid = p.uid().unwrap_or_default();
                        if s.live.get(&p.name_any()).is_none_or(|(u, _)| *u != uid) {
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
                let now = s.live.values().filter(|(_, st)| *st).count();
                s.most_starting = s.most_starting.max(now);
            }
        }
    });
    (seen, task)
}

/// The revision numbers `kubectl rollout history <what>` lists.
async fn history(c: &Ctx, what: &str) -> anyhow::Result<Vec<String>> {
    let out = c.ok(&["rollout", "history", what]).await?;
    contains(&out, "REVISION")?;
    Ok(rows(&out)
        .iter()
        .map(|r| r[0].to_string())
        .filter(|r| r.parse::<u32>().is_ok())
        .collect())
}

/// The env of the first container of a pod template.
fn env_of(template: &k8s_openapi::api::core::v1::PodTemplateSpec) -> Vec<(String, String)> {
    template
        .spec
        .as_ref()
        .and_then(|s| s.containers[0].env.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|e| (e.name, e.value.unwrap_or_default()))
        .collect()
}

/// The pods of `app` by name, with their revision label.
async fn pods_by_revision(c: &Ctx, app: &str) -> anyhow::Result<Vec<(String, String)>> {
    let mut pods: Vec<(String, String)> = c
        .api::<Pod>()
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await?
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            let rev = p
                .labels()
                .get("controller-revision-hash")
                .cloned()
                .unwrap_or_default();
            (p.name_any(), rev)
        })
        .collect();
    pods.sort();
    Ok(pods)
}

async fn sts_rolled_out(c: &Ctx, name: &str) -> anyhow::Result<String> {
    c.ok(&[
        "rollout",
        "status",
        &format!("statefulset/{name}"),
        "--timeout=150s",
    ])
    .await
}

/// Creates the headless Service and StatefulSet `name` (3 replicas, OrderedReady) and checks
/// that its pods came up one at a time in ordinal order; the watch goes on for the caller.
async fn create_set(
    c: &Ctx,
    name: &str,
) -> anyhow::Result<(Arc<Mutex<Seen>>, tokio::task::JoinHandle<()>)> {
    let sets = c.api::<StatefulSet>();
    cleanup(&sets, &[name]).await;
    cleanup(&c.api::<Service>(), &[name]).await;
    let node = c.ready_node().await?;
    let (seen, watch) = watch_pods(c, name);
    let manifest = format!(
        "{}---\n{}",
        yaml(&json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name},
            "spec": {"clusterIP": "None", "selector": {"app": name}, "ports": [{"port": 80}]},
        })),
        yaml(&json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": name},
            "spec": {
                "serviceName": name,
                "replicas": 3,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {
                        "nodeSelector": {"kubernetes.io/hostname": node},
                        "terminationGracePeriodSeconds": 1,
                        "containers": [{"name": "c", "image": "busybox:1.36",
                            "imagePullPolicy": "Never", "command": ["sleep", "3600"]}],
                    },
                },
            },
        })),
    );
    let file = c.write(&format!("{name}.yaml"), &manifest)?;
    let out = c.ok(&["apply", "-f", &file]).await?;
    contains(&out, &format!("statefulset.apps/{name} created"))?;
    let out = sts_rolled_out(c, name).await?;
    contains(
        &out,
        "partitioned roll out complete: 3 new pods have been updated...",
    )?;
    {
        let s = seen.lock().expect("seen");
        ensure!(
            s.created == [0, 1, 2].map(|i| format!("{name}-{i}")),
            "creation order: {:?}",
            s.created
        );
        ensure!(
            s.most_starting == 1,
            "{} pods started at once",
            s.most_starting
        );
    }
    let out = c.ok(&["get", "statefulset", name]).await?;
    let row = super::row(&out, name)?;
    ensure!(row[1] == "3/3", "READY column: {out:?}");
    Ok((seen, watch))
}

pub async fn statefulset(c: &Ctx) -> anyhow::Result<()> {
    let name = "sts-web";
    let (seen, watch) = create_set(c, name).await?;
    let what = format!("statefulset/{name}");
    // Each pod has a name in cluster DNS under the headless Service.
    c.workload().await?;
    let pod0 = c.api::<Pod>().get("sts-web-0").await?;
    let ip = pod0
        .status
        .and_then(|s| s.pod_ip)
        .context("sts-web-0 has no IP")?;
    let fqdn = format!("sts-web-0.{name}.{}.svc.cluster.local", c.ns);
    eventually(
        Duration::from_secs(30),
        "nslookup of the pod's name",
        || async {
            let out = c
                .ok(&["exec", WORKLOAD, "-c", "main", "--", "nslookup", &fqdn])
                .await?;
            contains(&out, &format!("Address: {ip}"))
        },
    )
    .await?;
    let short = format!("sts-web-0.{name}");
    eventually(
        Duration::from_secs(30),
        "the short name resolved",
        || async {
            let script = format!("ping -c1 -W1 {short} | head -n1");
            let r = c
                .run(&["exec", WORKLOAD, "-c", "main", "--", "sh", "-c", &script])
                .await?;
            contains(&r.stdout, &format!("({ip})"))
        },
    )
    .await?;

    // Scale down: the highest ordinals go first.
    seen.lock().expect("seen").deleted.clear();
    let out = c.ok(&["scale", &what, "--replicas=1"]).await?;
    ensure!(
        out == format!("statefulset.apps/{name} scaled\n"),
        "{out:?}"
    );
    eventually(Duration::from_secs(60), "one pod left", || async {
        let pods = pods_by_revision(c, name).await?;
        let s = seen.lock().expect("seen");
        ensure!(
            pods.len() == 1 && s.deleted.len() == 2,
            "pods {pods:?}, deleted {:?}",
            s.deleted
        );
        Ok(())
    })
    .await?;
    let deleted = seen.lock().expect("seen").deleted.clone();
    ensure!(
        deleted == ["sts-web-2", "sts-web-1"],
        "scale down order: {deleted:?}"
    );
    watch.abort();
    c.ok(&["delete", "statefulset", name, "--wait=false"])
        .await?;
    c.ok(&["delete", "service", name]).await?;
    Ok(())
}

pub async fn statefulset_rollout(c: &Ctx) -> anyhow::Result<()> {
    let name = "sts-roll";
    let sets = c.api::<StatefulSet>();
    let (seen, watch) = create_set(c, name).await?;
    // An env change with partition 1: sts-roll-2, then sts-roll-1; sts-roll-0 stays.
    let old = pods_by_revision(c, name).await?[0].1.clone();
    c.ok(&[
        "patch",
        "statefulset",
        name,
        "-p",
        r#"{"spec":{"updateStrategy":{"rollingUpdate":{"partition":1}}}}"#,
    ])
    .await?;
    seen.lock().expect("seen").deleted.clear();
    let out = c
        .ok(&["set", "env", &format!("statefulset/{name}"), "V=2"])
        .await?;
    ensure!(
        out == format!("statefulset.apps/{name} env updated\n"),
        "{out:?}"
    );
    let out = sts_rolled_out(c, name).await?;
    contains(
        &out,
        "partitioned roll out complete: 2 new pods have been updated...",
    )?;
    let pods = pods_by_revision(c, name).await?;
    let new = pods[2].1.clone();
    ensure!(
        new != old && pods[1].1 == new && pods[0].1 == old,
        "revisions after the partitioned rollout: {pods:?}"
    );
    {
        let s = seen.lock().expect("seen");
        ensure!(
            s.deleted == ["sts-roll-2", "sts-roll-1"],
            "update order: {:?}",
            s.deleted
        );
        ensure!(
            s.most_starting == 1,
            "{} pods started at once",
            s.most_starting
        );
    }
    c.ok(&[
        "patch",
        "statefulset",
        name,
        "-p",
        r#"{"spec":{"updateStrategy":{"rollingUpdate":{"partition":0}}}}"#,
    ])
    .await?;
    let out = sts_rolled_out(c, name).await?;
    contains(
        &out,
        "partitioned roll out complete: 3 new pods have been updated...",
    )?;
    eventually(
        Duration::from_secs(30),
        "the update revision current",
        || async {
            let s = sets.get(name).await?.status.unwrap_or_default();
            ensure!(
                s.current_revision.as_deref() == Some(new.as_str())
                    && s.update_revision.as_deref() == Some(new.as_str())
                    && s.updated_replicas == Some(3),
                "status: {s:?}"
            );
            Ok(())
        },
    )
    .await?;

    let what = format!("statefulset/{name}");
    ensure!(
        history(c, &what).await? == ["1", "2"],
        "history before undo"
    );
    let out = c.ok(&["rollout", "history", &what, "--revision=2"]).await?;
    contains(&out, "revision #2")?;
    contains(&out, "V:")?;
    let out = c.ok(&["rollout", "history", &what, "--revision=1"]).await?;
    ensure!(!out.contains("V:"), "revision 1 has the new env: {out:?}");

    let out = c.ok(&["rollout", "undo", &what]).await?;
    ensure!(
        out == format!("statefulset.apps/{name} rolled back\n"),
        "{out:?}"
    );
    sts_rolled_out(c, name).await?;
    let set = sets.get(name).await?;
    let template = set.spec.context("no spec")?.template;
    ensure!(
        env_of(&template).is_empty(),
        "env after undo: {:?}",
        env_of(&template)
    );
    eventually(
        Duration::from_secs(60),
        "pods back at the old revision",
        || async {
            let pods = pods_by_revision(c, name).await?;
            ensure!(
                pods.len() == 3 && pods.iter().all(|(_, r)| *r == old),
                "pods: {pods:?}"
            );
            Ok(())
        },
    )
    .await?;
    ensure!(history(c, &what).await? == ["2", "3"], "history after undo");

    watch.abort();
    c.ok(&["delete", "statefulset", name, "--wait=false"])
        .await?;
    c.ok(&["delete", "service", name]).await?;
    Ok(())
}

async fn ds_rolled_out(c: &Ctx, name: &str) -> anyhow::Result<()> {
    let out = c
        .ok(&[
            "rollout",
            "status",
            &format!("daemonset/{name}"),
            "--timeout=120s",
        ])
        .await?;
    contains(
        &out,
        &format!("daemon set \"{name}\" successfully rolled out"),
    )
}

async fn ds_env(c: &Ctx, name: &str) -> anyhow::Result<Vec<(String, String)>> {
    let ds = c.api::<DaemonSet>().get(name).await?;
    Ok(env_of(&ds.spec.context("no spec")?.template))
}

pub async fn daemonset_rollout(c: &Ctx) -> anyhow::Result<()> {
    let name = "ds-agent";
    cleanup(&c.api::<DaemonSet>(), &[name]).await;
    let node = c.ready_node().await?;
    let file = c.write(
        "daemonset.yaml",
        &yaml(&json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": name},
            "spec": {
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {
                        "nodeSelector": {"kubernetes.io/hostname": node},
                        "terminationGracePeriodSeconds": 1,
                        "containers": [{"name": "c", "image": "busybox:1.36",
                            "imagePullPolicy": "Never", "command": ["sleep", "3600"]}],
                    },
                },
            },
        })),
    )?;
    c.ok(&["apply", "-f", &file]).await?;
    ds_rolled_out(c, name).await?;
    let what = format!("daemonset/{name}");
    let out = c.ok(&["set", "env", &what, "V=2"]).await?;
    ensure!(
        out == format!("daemonset.apps/{name} env updated\n"),
        "{out:?}"
    );
    ds_rolled_out(c, name).await?;
    ensure!(history(c, &what).await? == ["1", "2"], "history");
    let out = c.ok(&["rollout", "history", &what, "--revision=2"]).await?;
    contains(&out, "V:")?;

    let out = c.ok(&["rollout", "undo", &what]).await?;
    ensure!(
        out == format!("daemonset.apps/{name} rolled back\n"),
        "{out:?}"
    );
    ds_rolled_out(c, name).await?;
    ensure!(ds_env(c, name).await?.is_empty(), "env after undo");
    ensure!(history(c, &what).await? == ["2", "3"], "history after undo");

    let out = c.ok(&["rollout", "undo", &what, "--to-revision=2"]).await?;
    ensure!(
        out == format!("daemonset.apps/{name} rolled back\n"),
        "{out:?}"
    );
    ds_rolled_out(c, name).await?;
    ensure!(
        ds_env(c, name).await? == [("V".to_string(), "2".to_string())],
        "env after undo to revision 2"
    );
    ensure!(
        history(c, &what).await? == ["3", "4"],
        "history after the second undo"
    );
    // The pods run the template rolled back to.
    eventually(
        Duration::from_secs(60),
        "the daemon pod at revision 4",
        || async {
            let pods = c
                .api::<Pod>()
                .list(&ListParams::default().labels(&format!("app={name}")))
                .await?
                .items;
            let live: Vec<&Pod> = pods
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .collect();
            ensure!(live.len() == 1, "{} live pods", live.len());
            let env = live[0]
                .spec
                .as_ref()
                .and_then(|s| s.containers[0].env.clone())
                .unwrap_or_default();
            ensure!(env.iter().any(|e| e.name == "V"), "pod env: {env:?}");
            Ok(())
        },
    )
    .await?;
    c.ok(&["delete", "daemonset", name, "--wait=false"]).await?;
    Ok(())
}
