//! The HorizontalPodAutoscaler, in two parts.
//!
//! On the running cluster (hack/up.sh's, real kubelet and metrics): a Deployment whose pods
//! idle until a start time and then burn CPU (every pod, old or new, on the same clock) under
//! an HPA on CPU utilization; from that load step, the time to the first rescale and to the
//! final replica count, seen through a watch of the Deployment; then from the end of the
//! load, the time back to minReplicas (scale-down window 0, so the figure is the mechanism's;
//! the default window adds its 300 s).
//!
//! Controller cost: a server of its own with hollow nodes and its HPA controller off, N
//! Deployments of one pod each under N HPAs, and the HPA controller run in this process on
//! its own informers: its CPU time over whole sync periods divided by the syncs it made
//! (`horizontal_pod_autoscaler_controller_reconciliations_total`), and the server's CPU over
//! the same time. Hollow nodes report no usage, so every sync there reads the scale, asks
//! the metrics API, finds nothing and records that: the whole path but the arithmetic.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::runtime::watcher;
use minik8s_controllers::informers::Informers;
use minik8s_controllers::podautoscaler::{self, HpaOptions};
use serde_json::{Value, json};

use crate::proc::{Server, cpu_time};

#[derive(clap::Args, Clone, Debug)]
pub struct HpaArgs {
    /// Admin kubeconfig of the running cluster, for the load step.
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// The `minik8s` binary, for the controller-cost server.
    #[arg(long)]
    server_bin: PathBuf,
    /// HPAs (and Deployments) of the controller-cost part.
    #[arg(long, default_value_t = 1_000)]
    hpas: usize,
    /// Hollow nodes their pods run on.
    #[arg(long, default_value_t = 20)]
    nodes: usize,
    /// Sync periods measured.
    #[arg(long, default_value_t = 3)]
    periods: u32,
    /// maxReplicas of the load step's HPA.
    #[arg(long, default_value_t = 4)]
    max_replicas: i32,
    /// Seconds of load.
    #[arg(long, default_value_t = 90)]
    load_seconds: i64,
    /// Only the controller-cost part.
    #[arg(long)]
    skip_load: bool,
}

pub async fn run(args: HpaArgs) -> anyhow::Result<()> {
    if !args.skip_load {
        let Some(kubeconfig) = &args.kubeconfig else {
            bail!("--kubeconfig is required for the load step (or --skip-load)");
        };
        let client = testkit::kube_client(kubeconfig).await?;
        load_step(&client, &args).await?;
    }
    controller_cost(&args).await
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Busybox pods that idle until `start`, burn CPU until `end`, then idle.
fn burner(name: &str, start: i64, end: i64) -> Value {
    let script = format!(
        "while [ $(date +%s) -lt {start} ]; do sleep 1; done; \
         while [ $(date +%s) -lt {end} ]; do i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; done; \
         exec sleep 1000000"
    );
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{
                        "name": "main", "image": "busybox:1.36",
                        "command": ["sh", "-c", script],
                        "resources": {"requests": {"cpu": "20m"}, "limits": {"cpu": "100m"}}
                    }]
                }
            }
        }
    })
}

fn hpa(name: &str, max: i32, scale_down_window: Option<i32>) -> Value {
    let mut spec = json!({
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
        "minReplicas": 1,
        "maxReplicas": max,
        "metrics": [{"type": "Resource", "resource": {"name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": 50}}}],
    });
    if let Some(w) = scale_down_window {
        spec["behavior"] = json!({"scaleDown": {"stabilizationWindowSeconds": w}});
    }
    json!({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name},
        "spec": spec,
    })
}

async fn create_namespace(client: &kube::Client, name: &str) -> anyhow::Result<()> {
    let nss: Api<Namespace> = Api::all(client.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": name}}))?,
    )
    .await?;
    Ok(())
}

/// `spec.replicas` of Deployment `name` as it changes, with when.
async fn watch_replicas(api: Api<Deployment>, name: &str, seen: Arc<Mutex<Vec<(Instant, i32)>>>) {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = watcher::watcher(api, config).boxed();
    while let Some(ev) = events.next().await {
        let d = match ev {
            Ok(watcher::Event::Apply(d)) | Ok(watcher::Event::InitApply(d)) => d,
            _ => continue,
        };
        let r = d.spec.and_then(|s| s.replicas).unwrap_or(1);
        let mut v = seen.lock().unwrap_or_else(|e| e.into_inner());
        if v.last().map(|(_, last)| *last) != Some(r) {
            v.push((Instant::now(), r));
        }
    }
}

async fn load_step(client: &kube::Client, args: &HpaArgs) -> anyhow::Result<()> {
    let ns = format!("bench-hpa-{}", std::process::id());
    create_namespace(client, &ns).await?;
    let result = load_step_in(client, &ns, args).await;
    let nss: Api<Namespace> = Api::all(client.clone());
    let _ = nss.delete(&ns, &DeleteParams::default()).await;
    result
}

async fn load_step_in(client: &kube::Client, ns: &str, args: &HpaArgs) -> anyhow::Result<()> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let hpas: Api<HorizontalPodAutoscaler> = Api::namespaced(client.clone(), ns);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let watch = tokio::spawn(watch_replicas(deployments.clone(), "burn", seen.clone()));
    // The pod starts and the HPA's first syncs (with no load) come before the step.
    let lead = 45;
    let start = unix_now() + lead;
    let end = start + args.load_seconds;
    deployments
        .create(
            &PostParams::default(),
            &serde_json::from_value(burner("burn", start, end))?,
        )
        .await?;
    hpas.create(
        &PostParams::default(),
        &serde_json::from_value(hpa("burn", args.max_replicas, Some(0)))?,
    )
    .await?;
    println!(
        "== load step: 1 pod burning from +{lead} s for {} s, HPA cpu 50 %, max {} ==",
        args.load_seconds, args.max_replicas
    );
    let step_at = Instant::now() + Duration::from_secs(lead as u64);
    tokio::time::sleep_until(step_at.into()).await;
    let deadline = step_at + Duration::from_secs(args.load_seconds as u64);
    let at_max = wait_for(&seen, step_at, |r| r >= args.max_replicas, deadline).await;
    let first = seen
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .find(|(at, r)| *at >= step_at && *r > 1)
        .copied();
    match first {
        Some((at, r)) => println!(
            "first rescale: {:.1} s after the step (to {r})",
            at.duration_since(step_at).as_secs_f64()
        ),
        None => println!("first rescale: none during the load"),
    }
    match at_max {
        Some(at) => println!(
            "final count ({}): {:.1} s after the step",
            args.max_replicas,
            at.duration_since(step_at).as_secs_f64()
        ),
        None => println!("final count: not reached during the load"),
    }
    let idle_at = step_at + Duration::from_secs(args.load_seconds as u64);
    tokio::time::sleep_until(idle_at.into()).await;
    let back = wait_for(
        &seen,
        idle_at,
        |r| r == 1,
        idle_at + Duration::from_secs(180),
    )
    .await;
    match back {
        Some(at) => println!(
            "back to minReplicas: {:.1} s after the load ended (scale-down window 0 s)",
            at.saturating_duration_since(idle_at).as_secs_f64()
        ),
        None => println!("back to minReplicas: not within 180 s"),
    }
    let steps: Vec<String> = seen
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .map(|(_, r)| r.to_string())
        .collect();
    println!("replicas seen: {}", steps.join(" -> "));
    watch.abort();
    let _ = end;
    Ok(())
}

/// When the replicas first met `ok` at or after `since`, waiting until `deadline`.
async fn wait_for(
    seen: &Mutex<Vec<(Instant, i32)>>,
    since: Instant,
    ok: impl Fn(i32) -> bool,
    deadline: Instant,
) -> Option<Instant> {
    loop {
        let hit = seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|(at, r)| *at >= since && ok(*r))
            .map(|(at, _)| *at);
        if hit.is_some() {
            return hit;
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

struct Hollow(Child);

impl Drop for Hollow {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn controller_cost(args: &HpaArgs) -> anyhow::Result<()> {
    let n = args.hpas;
    println!(
        "== controller cost: {n} HPAs on {} hollow nodes ==",
        args.nodes
    );
    let mut server = Server::start_with(
        &args.server_bin,
        false,
        &["--controllers=*,-horizontal-pod-autoscaler-controller"],
    )?;
    server.wait_for_kubeconfig(Duration::from_secs(30)).await?;
    let client = loop {
        server.check_alive()?;
        if let Ok(c) = testkit::kube_client(&server.kubeconfig).await
            && c.apiserver_version().await.is_ok()
        {
            break c;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let log = std::fs::File::create(server.dir.path().join("hollow.log"))?;
    let _hollow = Hollow(
        Command::new(&args.server_bin)
            .args([
                "hollow-nodes",
                "--count",
                &args.nodes.to_string(),
                "--kubeconfig",
            ])
            .arg(&server.kubeconfig)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting hollow-nodes")?,
    );
    let nodes: Api<Node> = Api::all(client.clone());
    let started = Instant::now();
    while nodes.list(&ListParams::default()).await?.items.len() < args.nodes {
        server.check_alive()?;
        if started.elapsed() > Duration::from_secs(120) {
            bail!("hollow nodes did not register");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    create_namespace(&client, "bench").await?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "bench");
    let hpas: Api<HorizontalPodAutoscaler> = Api::namespaced(client.clone(), "bench");
    for i in 0..n {
        let name = format!("d{i}");
        deployments
            .create(
                &PostParams::default(),
                &serde_json::from_value(burner(&name, 0, 0))?,
            )
            .await?;
        hpas.create(
            &PostParams::default(),
            &serde_json::from_value(hpa(&name, 3, None))?,
        )
        .await?;
    }
    println!(
        "created {n} Deployments and HPAs in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let options = HpaOptions::default();
    let period = options.sync_period;
    let informers = Informers::new(client.clone());
    let controller = tokio::spawn(podautoscaler::run(informers, options));
    // Every HPA synced once (its status written) before measuring.
    let first = Instant::now();
    loop {
        let list = hpas.list(&ListParams::default()).await?;
        // A status comes with every HPA (desiredReplicas is always written); its conditions
        // only from the controller.
        let synced = list
            .items
            .iter()
            .filter(|h| h.status.as_ref().is_some_and(|s| s.conditions.is_some()))
            .count();
        if synced >= n {
            break;
        }
        if first.elapsed() > Duration::from_secs(300) {
            bail!("only {synced} of {n} HPAs synced in 300 s");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    println!(
        "first sync of all {n}: {:.1} s",
        first.elapsed().as_secs_f64()
    );
    let server_pid = server.pid().to_string();
    let (cpu0, server0, syncs0, t0) = (
        cpu_time("self"),
        cpu_time(&server_pid),
        podautoscaler::reconciliations(),
        Instant::now(),
    );
    tokio::time::sleep(period * args.periods).await;
    let (cpu1, server1, syncs1, t1) = (
        cpu_time("self"),
        cpu_time(&server_pid),
        podautoscaler::reconciliations(),
        Instant::now(),
    );
    controller.abort();
    let syncs = syncs1.saturating_sub(syncs0).max(1);
    let wall = t1.duration_since(t0).as_secs_f64();
    let ours = cpu1.saturating_sub(cpu0).as_secs_f64();
    let theirs = server1.saturating_sub(server0).as_secs_f64();
    println!(
        "{syncs} syncs in {wall:.1} s ({:.0}/s; {} HPAs every {} s would be {:.0}/s)",
        syncs as f64 / wall,
        n,
        period.as_secs(),
        n as f64 / period.as_secs_f64()
    );
    println!(
        "controller CPU: {:.3} ms per sync ({:.1} % of a core); API server CPU: {:.3} ms per sync",
        ours * 1000.0 / syncs as f64,
        ours / wall * 100.0,
        theirs * 1000.0 / syncs as f64
    );
    Ok(())
}
