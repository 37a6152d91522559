//! Pod startup latency on one node with a warm image: from sending the create to seeing the
//! pod Running through a watch, for one pod at a time and for 30 pods created at once.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

use crate::stats::Samples;

const NODE: &str = "bench-node";
const BRIDGE: &str = "m8sbench0";
const POD_CIDR: &str = "10.244.254.0/24";
const CGROUP_ROOT: &str = "/minik8s-bench";

#[derive(clap::Args, Clone, Debug)]
pub struct PodsArgs {
    /// The minik8s binary to run.
    #[arg(long, default_value = "target/release/minik8s")]
    pub server_bin: PathBuf,
    /// Single-pod samples.
    #[arg(long, default_value_t = 10)]
    pub single: usize,
    /// Pods created at once.
    #[arg(long, default_value_t = 30)]
    pub burst: usize,
    /// Bursts to measure.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
}

struct NodeProcess {
    child: Child,
    bin: PathBuf,
    dir: tempfile::TempDir,
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = Command::new(&self.bin)
            .args([
                "teardown",
                "--data-dir",
                &self.dir.path().to_string_lossy(),
                "--bridge",
                BRIDGE,
                "--cgroup-root",
                CGROUP_ROOT,
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

fn start(bin: &Path) -> anyhow::Result<NodeProcess> {
    let dir = tempfile::Builder::new()
        .prefix("minik8s-bench-pods.")
        .tempdir()?;
    let images = dir.path().join("images");
    for kind in [
        minik8s_kubelet::images::ImageKind::Pause,
        minik8s_kubelet::images::ImageKind::Busybox,
    ] {
        minik8s_kubelet::images::build::build(
            kind,
            &minik8s_kubelet::images::BuildOptions::new(&images),
        )
        .with_context(|| format!("building the {kind} image"))?;
    }
    let port = testkit::free_port();
    let log = std::fs::File::create(dir.path().join("server.log"))?;
    let child = Command::new(bin)
        .args([
            "server",
            "--data-dir",
            &dir.path().to_string_lossy(),
            "--secure-port",
            &port.to_string(),
            "--bind-address",
            "127.0.0.1",
            "--disable-ingress",
        ])
        .args([
            "--node-name",
            NODE,
            "--node-ip",
            "127.0.0.1",
            "--bridge",
            BRIDGE,
            "--pod-cidr",
            POD_CIDR,
            "--cluster-cidr",
            POD_CIDR,
        ])
        .args(["--cgroup-root", CGROUP_ROOT])
        .env_remove("RUST_LOG")
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    Ok(NodeProcess {
        child,
        bin: bin.to_path_buf(),
        dir,
    })
}

fn pod(name: &str, group: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"bench": group}},
        "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "main", "image": "busybox:1.36", "command": ["sleep", "3600"]}]}
    }))
    .expect("pod")
}

fn running(p: &Pod) -> bool {
    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

/// Creates `names` at once and returns each one's time from create to Running (via a watch).
async fn measure(pods: &Api<Pod>, names: &[String], group: &str) -> anyhow::Result<Samples> {
    let rv = pods
        .list(&ListParams::default().labels(&format!("bench={group}")))
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let mut stream = pods
        .watch(
            &WatchParams::default()
                .labels(&format!("bench={group}"))
                .timeout(120),
            &rv,
        )
        .await?
        .boxed();
    let mut sent: HashMap<String, Instant> = HashMap::new();
    let creates = names.iter().map(|n| {
        let pods = pods.clone();
        let p = pod(n, group);
        async move {
            (
                n.clone(),
                Instant::now(),
                pods.create(&PostParams::default(), &p).await,
            )
        }
    });
    for (name, at, result) in futures::future::join_all(creates).await {
        result.with_context(|| format!("creating {name}"))?;
        sent.insert(name, at);
    }
    let mut samples = Samples::with_capacity(names.len());
    let mut seen = std::collections::HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while seen.len() < names.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        let Some(event) = tokio::time::timeout(left, stream.try_next())
            .await
            .context("pods did not all start in 120 s")??
        else {
            bail!("the watch ended");
        };
        if let WatchEvent::Added(p) | WatchEvent::Modified(p) = event
            && running(&p)
        {
            let name = p.metadata.name.clone().unwrap_or_default();
            if let Some(at) = sent.get(&name)
                && seen.insert(name)
            {
                samples.push(at.elapsed());
            }
        }
    }
    Ok(samples)
}

async fn delete_all(pods: &Api<Pod>, group: &str) -> anyhow::Result<()> {
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    pods.delete_collection(
        &dp,
        &ListParams::default().labels(&format!("bench={group}")),
    )
    .await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !pods
        .list(&ListParams::default().labels(&format!("bench={group}")))
        .await?
        .items
        .is_empty()
    {
        if Instant::now() > deadline {
            bail!("pods of {group} were not deleted in 60 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

pub async fn run(args: PodsArgs) -> anyhow::Result<()> {
    let node = start(&args.server_bin)?;
    let kubeconfig = node.dir.path().join("admin.kubeconfig");
    let deadline = Instant::now() + Duration::from_secs(60);
    let client = loop {
        if let Ok(c) = testkit::kube_client(&kubeconfig).await
            && c.apiserver_version().await.is_ok()
        {
            break c;
        }
        if Instant::now() > deadline {
            bail!(
                "the server did not come up; see {}",
                node.dir.path().join("server.log").display()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let nodes: Api<Node> = Api::all(client.clone());
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let ready = nodes
            .get_opt(NODE)
            .await?
            .and_then(|n| n.status?.conditions)
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        if ready {
            break;
        }
        if Instant::now() > deadline {
            bail!("the node did not become Ready");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    // Warm up: the image is imported; one pod makes containerd load everything it needs.
    measure(&pods, &["warm".to_string()], "warm").await?;
    delete_all(&pods, "warm").await?;

    let mut single = Samples::with_capacity(args.single);
    for i in 0..args.single {
        single.extend(measure(&pods, &[format!("single-{i}")], "single").await?);
        delete_all(&pods, "single").await?;
    }
    let mut burst = Samples::with_capacity(args.burst * args.rounds);
    for r in 0..args.rounds {
        let names: Vec<String> = (0..args.burst).map(|i| format!("burst-{r}-{i}")).collect();
        let started = Instant::now();
        let s = measure(&pods, &names, "burst").await?;
        println!(
            "burst {r}: {} pods Running in {:.0} ms (p50 {:.0} ms, p99 {:.0} ms)",
            names.len(),
            started.elapsed().as_secs_f64() * 1000.0,
            s.p50(),
            s.p99()
        );
        burst.extend(s);
        delete_all(&pods, "burst").await?;
    }
    println!();
    println!(
        "| pod startup, create to Running via watch (warm image) | p50 (ms) | p99 (ms) | max (ms) | samples |"
    );
    println!("|---|---|---|---|---|");
    println!(
        "| 1 pod at a time | {:.0} | {:.0} | {:.0} | {} |",
        single.p50(),
        single.p99(),
        single.max_ms(),
        single.len()
    );
    println!(
        "| {} pods at once | {:.0} | {:.0} | {:.0} | {} |",
        args.burst,
        burst.p50(),
        burst.p99(),
        burst.max_ms(),
        burst.len()
    );
    println!(
        "target: p99 within 1000 ms for 30 pods at once (upstream's SLO: 5 s); client and node share this 2-core machine"
    );
    Ok(())
}
