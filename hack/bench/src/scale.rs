//! Control-plane scale with hollow nodes: N fake nodes (a separate `minik8s hollow-nodes`
//! process), Deployments totalling `pods-per-node` pods per node, and what it takes the
//! controller-manager and scheduler inside `minik8s server` to get them all Running. A probe
//! client measures API latency while the storm runs; the server's own request histogram
//! covers every request it served.

use std::collections::HashMap;
use std::fs::File;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod};
use kube::Api;
use kube::api::{ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

use crate::proc::Server;
use crate::stats::{Samples, Scrape, num};

#[derive(clap::Args, Clone, Debug)]
pub struct ScaleArgs {
    /// The minik8s binary (default: `minik8s` next to this binary).
    #[arg(long)]
    pub server_bin: Option<PathBuf>,
    /// Cluster sizes to run, one fresh server each.
    #[arg(long, value_delimiter = ',', default_value = "100,1000")]
    pub nodes: Vec<usize>,
    #[arg(long, default_value_t = 30)]
    pub pods_per_node: usize,
    /// Replicas of each Deployment (the last one takes the remainder).
    #[arg(long, default_value_t = 300)]
    pub replicas_per_deployment: usize,
    /// Give up on one size after this many seconds.
    #[arg(long, default_value_t = 1800)]
    pub timeout_secs: u64,
    /// Run the hollow nodes as real kubelets on a fake runtime (`hollow-nodes --morph
    /// kubelet`, as kubemark) instead of the light loop that plays them all.
    #[arg(long)]
    pub hollow_kubelet: bool,
}

/// The hollow-nodes process, killed on drop.
struct Hollow(Child);

impl Drop for Hollow {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn vm_kib(pid: u32, field: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(f64::NAN)
}

fn ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// When each pod was first seen bound and first seen Running.
#[derive(Default)]
struct Progress {
    scheduled: HashMap<String, Instant>,
    running: HashMap<String, Instant>,
}

/// Notes when `pod` was first seen bound and first seen Running.
fn observe(pod: &Pod, now: Instant, progress: &std::sync::Mutex<Progress>) {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let mut p = progress.lock().expect("progress");
    if pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_ref())
        .is_some()
    {
        p.scheduled.entry(name.clone()).or_insert(now);
    }
    if pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") {
        p.running.entry(name).or_insert(now);
    }
}

/// Follows the pods as they are bound and start. A watch that falls behind the server's
/// window (410 Expired) lists again, as every client does; pods found bound or Running by
/// that list count from the list's time, a little later than they changed.
async fn track_pods(
    pods: Api<Pod>,
    from_rv: String,
    progress: Arc<std::sync::Mutex<Progress>>,
) -> anyhow::Result<()> {
    let mut rv = from_rv;
    loop {
        let params = WatchParams::default().timeout(290);
        let mut stream = pods.watch(&params, &rv).await?.boxed();
        while let Some(event) = stream.try_next().await? {
            let pod = match event {
                WatchEvent::Added(p) | WatchEvent::Modified(p) => p,
                WatchEvent::Bookmark(b) => {
                    rv = b.metadata.resource_version;
                    continue;
                }
                WatchEvent::Deleted(_) => continue,
                WatchEvent::Error(e) if e.code == 410 => {
                    let list = pods.list(&ListParams::default()).await?;
                    let now = Instant::now();
                    for pod in &list.items {
                        observe(pod, now, &progress);
                    }
                    eprintln!("pod watch expired; listed {} pods again", list.items.len());
                    rv = list.metadata.resource_version.unwrap_or_default();
                    break;
                }
                WatchEvent::Error(e) => bail!("pod watch: {e:?}"),
            };
            if let Some(v) = &pod.metadata.resource_version {
                rv = v.clone();
            }
            observe(&pod, Instant::now(), &progress);
        }
    }
}

/// GETs and small writes every 100 ms while the storm runs.
async fn probe(client: kube::Client, stop: Arc<AtomicBool>) -> (Samples, Samples) {
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let (mut reads, mut writes) = (
        Samples::with_capacity(10_000),
        Samples::with_capacity(10_000),
    );
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let name = format!("probe-{i}");
        let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        let t = Instant::now();
        if cms.create(&PostParams::default(), &cm).await.is_ok() {
            writes.push(t.elapsed());
        }
        let t = Instant::now();
        if cms.get(&name).await.is_ok() {
            reads.push(t.elapsed());
        }
        i += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (reads, writes)
}

async fn scrape(client: &kube::Client) -> anyhow::Result<Scrape> {
    let req = http::Request::get("/metrics").body(Vec::new())?;
    let text = client.request_text(req).await?;
    Ok(Scrape::parse(&text))
}

async fn run_size(bin: &std::path::Path, nodes: usize, args: &ScaleArgs) -> anyhow::Result<()> {
    let total = nodes * args.pods_per_node;
    let morph = if args.hollow_kubelet {
        "kubelet"
    } else {
        "light"
    };
    println!("== {nodes} hollow nodes ({morph}), {total} pods ==");
    let mut server = Server::start(bin, false)?;
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
    let log = File::create(server.dir.path().join("hollow.log"))?;
    let hollow = Hollow(
        Command::new(bin)
            .args([
                "hollow-nodes",
                "--count",
                &nodes.to_string(),
                "--kubeconfig",
            ])
            .arg(&server.kubeconfig)
            .args(["--morph", morph])
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting hollow-nodes")?,
    );
    let started = Instant::now();
    let node_api: Api<Node> = Api::all(client.clone());
    loop {
        server.check_alive()?;
        let list = node_api.list(&ListParams::default()).await?;
        if list.items.iter().filter(|n| ready(n)).count() >= nodes {
            break;
        }
        if started.elapsed() > Duration::from_secs(args.timeout_secs) {
            bail!("nodes not Ready after {:?}", started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    println!(
        "nodes Ready: {nodes} in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let ns: Api<Namespace> = Api::all(client.clone());
    ns.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "bench"}}))?,
    )
    .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "bench");
    let rv = pods
        .list_metadata(&ListParams::default().limit(1))
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let progress = Arc::new(std::sync::Mutex::new(Progress::default()));
    let tracker = tokio::spawn(track_pods(pods.clone(), rv, progress.clone()));
    let stop = Arc::new(AtomicBool::new(false));
    let prober = tokio::spawn(probe(client.clone(), stop.clone()));
    let before = scrape(&client).await?;
    let cpu_before = crate::proc::cpu_time(&server.pid().to_string());

    let deploys: Api<Deployment> = Api::namespaced(client.clone(), "bench");
    let t0 = Instant::now();
    let mut left = total;
    let mut i = 0;
    while left > 0 {
        let replicas = left.min(args.replicas_per_deployment);
        let d: Deployment = serde_json::from_value(json!({
            "metadata": {"name": format!("d{i}")},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": format!("d{i}")}},
                "template": {
                    "metadata": {"labels": {"app": format!("d{i}")}},
                    "spec": {"containers": [{
                        "name": "c",
                        "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                    }]},
                },
            },
        }))?;
        deploys.create(&PostParams::default(), &d).await?;
        left -= replicas;
        i += 1;
    }
    println!(
        "created {i} Deployments in {:.2} s",
        t0.elapsed().as_secs_f64()
    );

    let deadline = t0 + Duration::from_secs(args.timeout_secs);
    let mut last_report = Instant::now();
    let (all_scheduled, all_running) = loop {
        server.check_alive()?;
        if tracker.is_finished() {
            bail!("the pod watch ended: {:?}", tracker.await);
        }
        let (s, r, first_sched, last_sched, last_run) = {
            let p = progress.lock().expect("progress");
            (
                p.scheduled.len(),
                p.running.len(),
                p.scheduled.values().min().copied(),
                p.scheduled.values().max().copied(),
                p.running.values().max().copied(),
            )
        };
        if last_report.elapsed() > Duration::from_secs(10) {
            println!(
                "  t={:.0} s: {s} scheduled, {r} running",
                t0.elapsed().as_secs_f64()
            );
            last_report = Instant::now();
        }
        if s >= total && r >= total {
            break ((first_sched, last_sched), last_run);
        }
        if Instant::now() > deadline {
            bail!(
                "after {:?}: {s} of {total} scheduled, {r} running",
                t0.elapsed()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    stop.store(true, Ordering::Relaxed);
    let (reads, writes) = prober.await?;
    let after = scrape(&client).await?;
    let cpu = crate::proc::cpu_time(&server.pid().to_string()) - cpu_before;
    tracker.abort();

    let (first, last) = all_scheduled;
    let first = first.context("no pod scheduled")?;
    let last = last.context("no pod scheduled")?;
    let sched_window = last.duration_since(first).as_secs_f64().max(1e-3);
    println!(
        "scheduled: {total} pods, all bound {:.1} s after the first create; {} pods/s between the first and last binding",
        last.duration_since(t0).as_secs_f64(),
        num(total as f64 / sched_window)
    );
    if let Some(run) = all_running {
        println!(
            "running: all {total} pods Running {:.1} s after the first create",
            run.duration_since(t0).as_secs_f64()
        );
    }
    println!(
        "probe (client, during the storm): GET p50 {} ms p99 {} ms ({} samples); create p50 {} ms p99 {} ms",
        num(reads.p50()),
        num(reads.p99()),
        reads.len(),
        num(writes.p50()),
        num(writes.p99())
    );
    let d = after.delta(&before);
    for verb in ["GET", "LIST", "POST", "PUT", "PATCH", "DELETE"] {
        if let Some(h) = d.histogram("apiserver_request_duration_seconds", &[("verb", verb)]) {
            println!(
                "server {verb}: {} requests, mean {} ms, p99 <= {} ms (histogram bucket)",
                h.count as u64,
                num(h.mean * 1000.0),
                num(h.p99_le * 1000.0)
            );
        }
    }
    println!(
        "server: RSS {} MiB (peak {} MiB), CPU {:.1} s during the storm; hollow-nodes RSS {} MiB (peak {} MiB)",
        num(vm_kib(server.pid(), "VmRSS:") / 1024.0),
        num(vm_kib(server.pid(), "VmHWM:") / 1024.0),
        cpu.as_secs_f64(),
        num(vm_kib(hollow.0.id(), "VmRSS:") / 1024.0),
        num(vm_kib(hollow.0.id(), "VmHWM:") / 1024.0)
    );
    drop(hollow);
    Ok(())
}

pub async fn run(args: ScaleArgs) -> anyhow::Result<()> {
    let bin = match &args.server_bin {
        Some(b) => b.clone(),
        None => std::env::current_exe()?.with_file_name("minik8s"),
    };
    for &n in &args.nodes {
        run_size(&bin, n, &args).await?;
    }
    Ok(())
}
