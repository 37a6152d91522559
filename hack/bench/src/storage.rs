//! Storage on the running cluster (hack/up.sh's: real kubelet, the built-in local-path
//! provisioner, the StatefulSet controller).
//!
//! Claim to Bound: claims of the default class (`local-path`, WaitForFirstConsumer) created
//! with the `volume.kubernetes.io/selected-node` annotation the scheduler would write, so the
//! figure is the PV binder's and the provisioner's work (a directory and a PV per claim), not
//! the scheduling of a pod; first one at a time (latency), then all at once. The baseline in
//! the same run: as many claims bound to static PersistentVolumes made beforehand, which is
//! the binder alone, with no provisioner.
//!
//! StatefulSet to all Ready: N busybox replicas under OrderedReady (each pod waits for the one
//! before it to be Ready) and under Parallel; the baseline is a Deployment of the same pods.
//! All times are seen through watches.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::stats::Samples;

#[derive(clap::Args, Clone, Debug)]
pub struct StorageArgs {
    /// Admin kubeconfig of the running cluster.
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// Claims per phase.
    #[arg(long, default_value_t = 100)]
    claims: usize,
    /// Replicas of the StatefulSets (and of the baseline Deployment).
    #[arg(long, default_value_t = 20)]
    replicas: i32,
}

const STATIC_CLASS: &str = "bench-static";
const DEADLINE: Duration = Duration::from_secs(600);

pub async fn run(args: StorageArgs) -> anyhow::Result<()> {
    let Some(kubeconfig) = &args.kubeconfig else {
        bail!("--kubeconfig is required");
    };
    let client = testkit::kube_client(kubeconfig).await?;
    let ns = format!("bench-storage-{}", std::process::id());
    let nss: Api<Namespace> = Api::all(client.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": ns}}))?,
    )
    .await?;
    let result = run_in(&client, &ns, &args).await;
    let _ = nss.delete(&ns, &DeleteParams::default()).await;
    let _ = Api::<StorageClass>::all(client.clone())
        .delete(STATIC_CLASS, &DeleteParams::default())
        .await;
    result
}

async fn run_in(client: &kube::Client, ns: &str, args: &StorageArgs) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let node = nodes
        .list(&ListParams::default())
        .await?
        .items
        .first()
        .map(|n| n.name_any())
        .context("the cluster has no node")?;
    println!("== claim to Bound, {} claims per phase ==", args.claims);
    let dynamic_one = claims_phase(client, ns, "dyn1", &node, args.claims, true, false).await?;
    let dynamic_all = claims_phase(client, ns, "dynall", &node, args.claims, true, true).await?;
    make_static_volumes(client, "one", args.claims).await?;
    let static_one = claims_phase(client, ns, "st1", &node, args.claims, false, false).await?;
    make_static_volumes(client, "all", args.claims).await?;
    let static_all = claims_phase(client, ns, "stall", &node, args.claims, false, true).await?;
    for (what, s) in [
        ("dynamic (local-path), one at a time", &dynamic_one),
        ("static PVs (baseline), one at a time", &static_one),
        ("dynamic (local-path), all at once", &dynamic_all),
        ("static PVs (baseline), all at once", &static_all),
    ] {
        println!(
            "{what:40} p50 {:7.1} ms  p99 {:7.1} ms  max {:7.1} ms",
            s.p50(),
            s.p99(),
            s.max_ms()
        );
    }
    println!(
        "dynamic / static p50: one at a time {:.2}x, all at once {:.2}x",
        dynamic_one.p50() / static_one.p50(),
        dynamic_all.p50() / static_all.p50()
    );
    cleanup_claims(client, ns).await?;

    println!("== {} replicas to all Ready ==", args.replicas);
    let ordered = workload_phase::<StatefulSet>(
        client,
        ns,
        statefulset("ordered", args.replicas, "OrderedReady"),
    )
    .await?;
    let parallel = workload_phase::<StatefulSet>(
        client,
        ns,
        statefulset("parallel", args.replicas, "Parallel"),
    )
    .await?;
    let deployment =
        workload_phase::<Deployment>(client, ns, deployment("baseline", args.replicas)).await?;
    println!(
        "StatefulSet OrderedReady: {:.1} s\nStatefulSet Parallel:     {:.1} s\nDeployment (baseline):    {:.1} s",
        ordered.as_secs_f64(),
        parallel.as_secs_f64(),
        deployment.as_secs_f64()
    );
    println!(
        "Parallel / Deployment: {:.2}x; OrderedReady per pod: {:.2} s",
        parallel.as_secs_f64() / deployment.as_secs_f64(),
        ordered.as_secs_f64() / f64::from(args.replicas)
    );
    Ok(())
}

fn claim(name: &str, node: &str, dynamic: bool) -> Value {
    let mut c = json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Mi"}},
        }
    });
    if dynamic {
        // What the scheduler writes once it has picked the node of the claim's first pod.
        c["metadata"]["annotations"] = json!({"volume.kubernetes.io/selected-node": node});
    } else {
        c["spec"]["storageClassName"] = json!(STATIC_CLASS);
    }
    c
}

/// Static volumes `bench-<tag>-N` of the baseline's class, Available before the claims come.
async fn make_static_volumes(client: &kube::Client, tag: &str, n: usize) -> anyhow::Result<()> {
    let classes: Api<StorageClass> = Api::all(client.clone());
    if classes.get_opt(STATIC_CLASS).await?.is_none() {
        classes
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "metadata": {"name": STATIC_CLASS},
                    "provisioner": "kubernetes.io/no-provisioner",
                    "volumeBindingMode": "Immediate",
                }))?,
            )
            .await?;
    }
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    for i in 0..n {
        let pv = json!({
            "metadata": {"name": format!("bench-{tag}-{i}")},
            "spec": {
                "capacity": {"storage": "1Mi"},
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": STATIC_CLASS,
                "persistentVolumeReclaimPolicy": "Retain",
                "hostPath": {"path": format!("/tmp/minik8s-bench-storage/{tag}-{i}")},
            }
        });
        pvs.create(&PostParams::default(), &serde_json::from_value(pv)?)
            .await?;
    }
    Ok(())
}

/// Creates `n` claims `<prefix>-N`, one at a time (each waiting for the one before to be
/// Bound) or all at once, and returns each one's time from create to Bound.
async fn claims_phase(
    client: &kube::Client,
    ns: &str,
    prefix: &str,
    node: &str,
    n: usize,
    dynamic: bool,
    all_at_once: bool,
) -> anyhow::Result<Samples> {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let (bound_tx, mut bound_rx) = tokio::sync::mpsc::unbounded_channel();
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let watch = tokio::spawn(watch_bound(api.clone(), bound_tx, ready_tx));
    ready_rx.await.context("the claims watch ended")?;
    let mut created = HashMap::new();
    let mut bound = HashMap::new();
    let deadline = tokio::time::Instant::now() + DEADLINE;
    for i in 0..n {
        let name = format!("{prefix}-{i}");
        created.insert(name.clone(), Instant::now());
        api.create(
            &PostParams::default(),
            &serde_json::from_value(claim(&name, node, dynamic))?,
        )
        .await?;
        while !all_at_once && !bound.contains_key(&name) {
            let (seen, at) = next_bound(&mut bound_rx, deadline).await?;
            bound.insert(seen, at);
        }
    }
    while created.keys().any(|k| !bound.contains_key(k)) {
        let (seen, at) = next_bound(&mut bound_rx, deadline).await?;
        bound.insert(seen, at);
    }
    watch.abort();
    let mut samples = Samples::with_capacity(n);
    for (name, at) in &created {
        samples.push(bound[name].duration_since(*at));
    }
    Ok(samples)
}

async fn next_bound(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<(String, Instant)>,
    deadline: tokio::time::Instant,
) -> anyhow::Result<(String, Instant)> {
    tokio::time::timeout_at(deadline, rx.recv())
        .await
        .context("claims not Bound within the deadline")?
        .context("the claims watch ended")
}

/// Sends each claim's name once, when it is first seen Bound; `ready` once the watch runs.
async fn watch_bound(
    api: Api<PersistentVolumeClaim>,
    bound: tokio::sync::mpsc::UnboundedSender<(String, Instant)>,
    ready: tokio::sync::oneshot::Sender<()>,
) {
    let mut ready = Some(ready);
    let mut sent = std::collections::HashSet::new();
    let mut events = watcher::watcher(api, watcher::Config::default()).boxed();
    while let Some(ev) = events.next().await {
        let claim = match ev {
            Ok(watcher::Event::InitDone) => {
                if let Some(r) = ready.take() {
                    let _ = r.send(());
                }
                continue;
            }
            Ok(watcher::Event::Apply(c)) | Ok(watcher::Event::InitApply(c)) => c,
            _ => continue,
        };
        let phase = claim.status.as_ref().and_then(|s| s.phase.as_deref());
        if phase == Some("Bound") && sent.insert(claim.name_any()) {
            let _ = bound.send((claim.name_any(), Instant::now()));
        }
    }
}

/// Deletes the claims and waits until the provisioner has removed its volumes; the static
/// volumes (Retain) are deleted here.
async fn cleanup_claims(client: &kube::Client, ns: &str) -> anyhow::Result<()> {
    let started = Instant::now();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    claims
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await?;
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let deadline = Instant::now() + DEADLINE;
    loop {
        let left: Vec<PersistentVolume> = pvs
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|pv| {
                pv.spec
                    .as_ref()
                    .and_then(|s| s.claim_ref.as_ref())
                    .and_then(|r| r.namespace.as_deref())
                    == Some(ns)
            })
            .collect();
        let mut provisioned = 0;
        for pv in &left {
            if pv.name_any().starts_with("bench-") {
                let _ = pvs.delete(&pv.name_any(), &DeleteParams::default()).await;
            } else {
                provisioned += 1;
            }
        }
        if left.is_empty() {
            break;
        }
        if Instant::now() >= deadline {
            bail!("{provisioned} provisioned volumes not deleted within the deadline");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!(
        "claims deleted to their volumes gone: {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn pod_template(app: &str) -> Value {
    json!({
        "metadata": {"labels": {"app": app}},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": "busybox:1.36",
                "imagePullPolicy": "Never", "command": ["sleep", "1000000"]}]
        }
    })
}

fn statefulset(name: &str, replicas: i32, policy: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "podManagementPolicy": policy,
            "selector": {"matchLabels": {"app": name}},
            "template": pod_template(name),
        }
    })
}

fn deployment(name: &str, replicas: i32) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": pod_template(name),
        }
    })
}

/// What the workload says of its ready pods.
trait Workload:
    Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
    + Clone
    + DeserializeOwned
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
    fn ready(&self) -> i32;
    fn wanted(&self) -> i32;
}

impl Workload for StatefulSet {
    fn ready(&self) -> i32 {
        self.status
            .as_ref()
            .and_then(|s| s.ready_replicas)
            .unwrap_or(0)
    }
    fn wanted(&self) -> i32 {
        self.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
    }
}

impl Workload for Deployment {
    fn ready(&self) -> i32 {
        self.status
            .as_ref()
            .and_then(|s| s.ready_replicas)
            .unwrap_or(0)
    }
    fn wanted(&self) -> i32 {
        self.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
    }
}

/// Creates `object`, returns the time until its status counts every replica Ready, and
/// deletes it (waiting for its pods to go, so the next phase starts on an empty node).
async fn workload_phase<K>(
    client: &kube::Client,
    ns: &str,
    object: Value,
) -> anyhow::Result<Duration>
where
    K: Workload + serde::Serialize,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let object: K = serde_json::from_value(object)?;
    let name = object.meta().name.clone().unwrap_or_default();
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = watcher::watcher(api.clone(), config).boxed();
    // The watch is established before the create, so no status is missed.
    while let Some(ev) = events.next().await {
        if matches!(ev, Ok(watcher::Event::InitDone)) {
            break;
        }
    }
    let started = Instant::now();
    api.create(&PostParams::default(), &object).await?;
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let took = loop {
        let ev = tokio::time::timeout_at(deadline, events.next())
            .await
            .with_context(|| format!("{name} not all Ready within the deadline"))?
            .context("the watch ended")?;
        if let Ok(watcher::Event::Apply(o)) = ev
            && o.ready() >= o.wanted()
        {
            break started.elapsed();
        }
    };
    api.delete(&name, &DeleteParams::foreground()).await?;
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), ns);
    let gone = tokio::time::Instant::now() + DEADLINE;
    while !pods.list(&ListParams::default()).await?.items.is_empty() {
        if tokio::time::Instant::now() >= gone {
            bail!("the pods of {name} did not go");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(took)
}
