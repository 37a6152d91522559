//! Clients inside the cluster: a pod that finds the API the way in-cluster clients do (the
//! token, CA and namespace ServiceAccount admission mounts, `kubernetes.default.svc`), lists
//! pods and watches a ConfigMap until it says `state: go`. The kube-rs program is this binary
//! (`conformance in-cluster`), mounted into a `python:3` pod, whose image has the C library
//! it links; the Python one is the official client, from the suite's venv.

use std::time::Duration;

use anyhow::{Context, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Api;
use kube::api::{ListParams, LogParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::{Value, json};

use crate::support::eventually;

/// What the probe prints once it watches, so the test knows when to change the ConfigMap.
pub const WATCHING: &str = "watching";
/// What it prints when the ConfigMap says go.
pub const SAW_GO: &str = "saw state=go";

/// `conformance in-cluster`: run inside a pod.
pub async fn probe(namespace: &str, config_map: &str) -> anyhow::Result<()> {
    let config = kube::Config::incluster_dns().context("in-cluster configuration")?;
    println!("server {}", config.cluster_url);
    let client = kube::Client::try_from(config)?;
    let own = std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
        .context("reading the mounted namespace")?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let names: Vec<String> = pods
        .list(&ListParams::default())
        .await
        .context("listing pods")?
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    println!("namespace {own}: pods {}", names.join(","));
    let cms: Api<ConfigMap> = Api::namespaced(client, namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={config_map}"));
    let mut events = watcher::watcher(cms, config).boxed();
    println!("{WATCHING}");
    while let Some(event) = events.try_next().await.context("watching")? {
        let seen = match event {
            watcher::Event::Apply(cm) | watcher::Event::InitApply(cm) => cm,
            _ => continue,
        };
        let state = seen.data.and_then(|d| d.get("state").cloned());
        if state.as_deref() == Some("go") {
            println!("{SAW_GO}");
            return Ok(());
        }
    }
    bail!("the watch ended")
}

/// A pod that runs `command` in `python:3`, with `mounts` (host path, pod path) read-only.
pub fn pod(name: &str, command: &[&str], env: &[(&str, &str)], mounts: &[(&str, &str)]) -> Pod {
    let volumes: Vec<Value> = mounts
        .iter()
        .enumerate()
        .map(|(i, (host, _))| json!({"name": format!("host{i}"), "hostPath": {"path": host}}))
        .collect();
    let volume_mounts: Vec<Value> = mounts
        .iter()
        .enumerate()
        .map(|(i, (_, at))| json!({"name": format!("host{i}"), "mountPath": at, "readOnly": true}))
        .collect();
    let env: Vec<Value> = env
        .iter()
        .map(|(k, v)| json!({"name": k, "value": v}))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "client", "image": "python:3", "command": command,
                "env": env, "volumeMounts": volume_mounts,
            }],
            "volumes": volumes,
        }
    }))
    .expect("a valid pod")
}

async fn log(pods: &Api<Pod>, name: &str) -> String {
    pods.logs(name, &LogParams::default())
        .await
        .unwrap_or_else(|e| format!("(no log: {e})"))
}

/// Runs `pod` next to a ConfigMap `config_map` in state `wait`; once the pod prints
/// [`WATCHING`], the ConfigMap says go; the pod must then succeed, having printed
/// [`SAW_GO`]. Returns its log.
pub async fn run(
    client: &kube::Client,
    ns: &str,
    pod: Pod,
    config_map: &str,
) -> anyhow::Result<String> {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let cm: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": config_map}, "data": {"state": "wait"}}),
    )?;
    cms.create(&PostParams::default(), &cm).await?;
    // The pod's ServiceAccount may read the namespace, as one grants it on any RBAC cluster
    // (`kubectl create rolebinding --clusterrole=view --serviceaccount=<ns>:default`).
    let bindings: Api<k8s_openapi::api::rbac::v1::RoleBinding> =
        Api::namespaced(client.clone(), ns);
    let view: k8s_openapi::api::rbac::v1::RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": format!("{name}-view")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": ns}],
    }))?;
    match bindings.create(&PostParams::default(), &view).await {
        Ok(_) | Err(kube::Error::Api(_)) => {}
        Err(e) => return Err(e.into()),
    }
    let created = pods.create(&PostParams::default(), &pod).await?;
    let mounted = created
        .spec
        .iter()
        .flat_map(|s| &s.containers)
        .flat_map(|c| c.volume_mounts.iter().flatten())
        .any(|m| m.mount_path == "/var/run/secrets/kubernetes.io/serviceaccount");
    if !mounted {
        bail!("the pod was admitted without the service account mount");
    }
    let watching = eventually(Duration::from_secs(60), "the client to watch", || async {
        let log = log(&pods, &name).await;
        if log.contains(WATCHING) {
            return Ok(log);
        }
        let phase = pods.get(&name).await?.status.and_then(|s| s.phase);
        if matches!(phase.as_deref(), Some("Failed" | "Succeeded")) {
            // Not worth waiting for: fail now with what it printed.
            return Ok(log);
        }
        bail!("log so far: {log:?}")
    })
    .await?;
    if !watching.contains(WATCHING) {
        bail!("the client ended before watching: {watching:?}");
    }
    cms.patch(
        config_map,
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"state": "go"}})),
    )
    .await?;
    eventually(Duration::from_secs(30), "the client to succeed", || async {
        let phase = pods.get(&name).await?.status.and_then(|s| s.phase);
        match phase.as_deref() {
            Some("Succeeded") => Ok(()),
            Some("Failed") => Err(anyhow::anyhow!("failed: {}", log(&pods, &name).await)),
            other => bail!("phase {other:?}, log {:?}", log(&pods, &name).await),
        }
    })
    .await?;
    let log = log(&pods, &name).await;
    if !log.contains(SAW_GO) {
        bail!("the client succeeded without seeing the change: {log:?}");
    }
    let _ = pods.delete(&name, &Default::default()).await;
    let _ = cms.delete(config_map, &Default::default()).await;
    Ok(log)
}

/// The pod list the probe printed, for checking it saw itself.
pub fn listed_pods(log: &str) -> Vec<&str> {
    log.lines()
        .find_map(|l| l.split_once(": pods "))
        .map(|(_, pods)| pods.split(',').filter(|p| !p.is_empty()).collect())
        .unwrap_or_default()
}
