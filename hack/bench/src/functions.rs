//! knative-lite on a running cluster (hack/up.sh's): cold starts of a Function from source
//! (a warm pool pod loads it) and of a Knative Service (a pod starts), from scaled to zero to
//! the first response; the router's added latency and its throughput against the same
//! requests sent straight to the pod; a step from 0 to 200 clients with errors counted; and
//! the time back to zero. The autoscaler's windows are shortened for the run (6 s stable
//! window, 2 s grace, as Knative's own tests do) and restored after.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use knative_lite::function::{Function, FunctionSpec, Scaling};
use knative_lite::serving::{RevisionSpec, RevisionTemplateSpec, Service, ServiceSpec};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::stats::Samples;

#[derive(clap::Args, Clone, Debug)]
pub struct FunctionsArgs {
    /// Admin kubeconfig of the cluster.
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: PathBuf,
    /// Cold starts measured per kind.
    #[arg(long, default_value_t = 20)]
    cold_samples: usize,
    /// Sequential requests per path for the warm latency.
    #[arg(long, default_value_t = 2_000)]
    warm_requests: usize,
    /// Seconds of each throughput run.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Clients of the step load.
    #[arg(long, default_value_t = 200)]
    step_clients: usize,
    /// Seconds of the step load.
    #[arg(long, default_value_t = 20)]
    step_seconds: u64,
}

const SYSTEM_NAMESPACE: &str = "knative-serving";
const CONFIG_AUTOSCALER: &str = "config-autoscaler";
const GATEWAY: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 8080);
const INGRESS: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 80);
/// Functions (or Services) cycled through the cold-start rounds.
const COLD_TARGETS: usize = 4;

const ECHO: &str = "def handle(body):\n    return {\"echo\": body}\n";

type Http = Client<HttpConnector, Full<Bytes>>;

fn http_client() -> Http {
    let mut c = HttpConnector::new();
    c.set_nodelay(true);
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(512)
        .build(c)
}

/// One request: its status, or an error. A POST with `body`, or a GET without one.
async fn request(
    http: &Http,
    addr: SocketAddr,
    host: &str,
    path: &str,
    body: &'static str,
) -> anyhow::Result<u16> {
    let method = if body.is_empty() {
        http::Method::GET
    } else {
        http::Method::POST
    };
    let req = http::Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"))
        .header(http::header::HOST, host)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from_static(body.as_bytes())))?;
    let resp = http
        .request(req)
        .await
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let status = resp.status().as_u16();
    resp.into_body().collect().await?;
    Ok(status)
}

struct Bench {
    client: kube::Client,
    ns: String,
    http: Http,
}

impl Bench {
    fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    async fn function(&self, name: &str, scaling: Option<Scaling>) -> anyhow::Result<()> {
        let mut f = Function::new(
            name,
            FunctionSpec {
                source: Some(ECHO.into()),
                scaling,
                ..Default::default()
            },
        );
        f.metadata.namespace = Some(self.ns.clone());
        self.api::<Function>()
            .create(&PostParams::default(), &f)
            .await?;
        Ok(())
    }

    async fn ksvc(&self, name: &str) -> anyhow::Result<()> {
        let container =
            serde_json::from_value(json!({"image": "busybox:1.36", "command": ["sh", "-c",
            "echo hello > /tmp/index.html && exec httpd -f -p $PORT -h /tmp"]}))?;
        let mut svc = Service::new(
            name,
            ServiceSpec {
                template: RevisionTemplateSpec {
                    metadata: None,
                    spec: RevisionSpec {
                        pod: k8s_openapi::api::core::v1::PodSpec {
                            containers: vec![container],
                            ..Default::default()
                        },
                        ..Default::default()
                    },
                },
                traffic: Vec::new(),
            },
        );
        svc.metadata.namespace = Some(self.ns.clone());
        self.api::<Service>()
            .create(&PostParams::default(), &svc)
            .await?;
        Ok(())
    }

    /// Polls until `check` holds, within `limit`.
    async fn until<F, Fut>(&self, limit: Duration, what: &str, mut check: F) -> anyhow::Result<()>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = anyhow::Result<bool>>,
    {
        let deadline = Instant::now() + limit;
        loop {
            if check().await? {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("{what}: not within {limit:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn ready<K>(&self, name: &str) -> anyhow::Result<()>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug
            + serde::Serialize,
    {
        self.until(
            Duration::from_secs(120),
            &format!("{name} Ready"),
            || async {
                let obj = self.api::<K>().get(name).await?;
                let v = serde_json::to_value(&obj)?;
                Ok(v["status"]["conditions"].as_array().is_some_and(|c| {
                    c.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                }))
            },
        )
        .await
    }

    /// Pods of `revision` that are not stopping.
    async fn live_pods(&self, revision: &str) -> anyhow::Result<Vec<Pod>> {
        let lp = ListParams::default().labels(&format!("serving.knative.dev/revision={revision}"));
        let mut pods = self.api::<Pod>().list(&lp).await?.items;
        pods.retain(|p| p.metadata.deletion_timestamp.is_none());
        Ok(pods)
    }

    async fn at_zero(&self, revisions: &[String]) -> anyhow::Result<()> {
        self.until(Duration::from_secs(120), "scaled to zero", || async {
            for r in revisions {
                if !self.live_pods(r).await?.is_empty() {
                    return Ok(false);
                }
                let d = self
                    .api::<Deployment>()
                    .get(&format!("{r}-deployment"))
                    .await?;
                if d.spec.and_then(|s| s.replicas).unwrap_or(0) > 0 {
                    return Ok(false);
                }
            }
            Ok(true)
        })
        .await
    }

    /// The address of a ready pod of `revision`, once there is one.
    async fn ready_pod_ip(&self, revision: &str) -> anyhow::Result<String> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let pods = self.live_pods(revision).await?;
            let ip = pods.iter().find_map(|p| {
                let s = p.status.as_ref()?;
                let ready = s
                    .conditions
                    .as_ref()?
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True");
                ready.then(|| s.pod_ip.clone()).flatten()
            });
            if let Some(ip) = ip {
                return Ok(ip);
            }
            if Instant::now() > deadline {
                bail!("no ready pod of {revision} within a minute");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the namespace's pool has all its pods ready.
    async fn pool_full(&self) -> anyhow::Result<()> {
        self.until(Duration::from_secs(60), "the pool refilled", || async {
            let Some(d) = self.api::<Deployment>().get_opt("python3-pool").await? else {
                return Ok(false);
            };
            let want = d.spec.and_then(|s| s.replicas).unwrap_or(0);
            let ready = d.status.and_then(|s| s.ready_replicas).unwrap_or(0);
            Ok(want > 0 && ready >= want)
        })
        .await
    }

    /// Cold starts of `names`, round after round: each from zero to its first answer.
    async fn cold(
        &self,
        names: &[String],
        samples: usize,
        function: bool,
    ) -> anyhow::Result<Samples> {
        let revisions: Vec<String> = names.iter().map(|n| format!("{n}-00001")).collect();
        let mut out = Samples::with_capacity(samples);
        while out.len() < samples {
            self.at_zero(&revisions).await?;
            for name in names.iter().take(samples - out.len()) {
                // A Function gets JSON; busybox's httpd behind a Service serves GETs.
                let (addr, host, path, body) = if function {
                    self.pool_full().await?;
                    (
                        GATEWAY,
                        "gateway".to_string(),
                        format!("/function/{name}.{}", self.ns),
                        "{}",
                    )
                } else {
                    (
                        INGRESS,
                        format!("{name}.{}.example.com", self.ns),
                        "/".to_string(),
                        "",
                    )
                };
                let http = http_client();
                let t0 = Instant::now();
                let status = request(&http, addr, &host, &path, body)
                    .await
                    .with_context(|| format!("calling {name} at {addr} (Host {host})"))?;
                let took = t0.elapsed();
                if status != 200 {
                    bail!("cold start of {name}: HTTP {status}");
                }
                out.push(took);
            }
        }
        Ok(out)
    }

    /// `n` sequential requests on one kept-alive connection.
    async fn sequential(
        &self,
        addr: SocketAddr,
        host: &str,
        path: &str,
        n: usize,
    ) -> anyhow::Result<Samples> {
        let mut s = Samples::with_capacity(n);
        for _ in 0..n {
            let t0 = Instant::now();
            let status = request(&self.http, addr, host, path, "{\"x\": 1}").await?;
            if status != 200 {
                bail!("warm request: HTTP {status}");
            }
            s.push(t0.elapsed());
        }
        Ok(s)
    }

    /// Requests per second with `clients` concurrent clients for `seconds`, and the errors.
    async fn throughput(
        &self,
        addr: SocketAddr,
        host: &str,
        path: &str,
        clients: usize,
        seconds: u64,
    ) -> (f64, usize) {
        let stop = Arc::new(AtomicBool::new(false));
        let (ok, errors) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..clients {
            let (stop, ok, errors) = (stop.clone(), ok.clone(), errors.clone());
            let (http, host, path) = (self.http.clone(), host.to_string(), path.to_string());
            tasks.spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    match request(&http, addr, &host, &path, "{\"x\": 1}").await {
                        Ok(200) => ok.fetch_add(1, Ordering::Relaxed),
                        _ => errors.fetch_add(1, Ordering::Relaxed),
                    };
                }
            });
        }
        let t0 = Instant::now();
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        stop.store(true, Ordering::Relaxed);
        while tasks.join_next().await.is_some() {}
        let secs = t0.elapsed().as_secs_f64();
        (
            ok.load(Ordering::Relaxed) as f64 / secs,
            errors.load(Ordering::Relaxed),
        )
    }
}

async fn set_windows(client: &kube::Client) -> anyhow::Result<Option<ConfigMap>> {
    let nss: Api<Namespace> = Api::all(client.clone());
    if nss.get_opt(SYSTEM_NAMESPACE).await?.is_none() {
        let ns: Namespace =
            serde_json::from_value(json!({"metadata": {"name": SYSTEM_NAMESPACE}}))?;
        nss.create(&PostParams::default(), &ns).await?;
    }
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), SYSTEM_NAMESPACE);
    let before = cms.get_opt(CONFIG_AUTOSCALER).await?;
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": CONFIG_AUTOSCALER},
        "data": {"stable-window": "6s", "scale-to-zero-grace-period": "2s"}});
    cms.patch(
        CONFIG_AUTOSCALER,
        &PatchParams::apply("minik8s-bench").force(),
        &Patch::Apply(&cm),
    )
    .await?;
    Ok(before)
}

async fn restore_windows(client: &kube::Client, before: Option<ConfigMap>) {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), SYSTEM_NAMESPACE);
    let _ = cms
        .delete(CONFIG_AUTOSCALER, &DeleteParams::default())
        .await;
    if let Some(mut cm) = before {
        cm.metadata.resource_version = None;
        cm.metadata.uid = None;
        cm.metadata.managed_fields = None;
        let _ = cms.create(&PostParams::default(), &cm).await;
    }
}

fn line(what: &str, s: &Samples) {
    println!(
        "{what:<48} p50 {:>8.1} ms   p99 {:>8.1} ms   (n={})",
        s.p50(),
        s.p99(),
        s.len()
    );
}

pub async fn run(args: FunctionsArgs) -> anyhow::Result<()> {
    let kc = kube::config::Kubeconfig::read_from(&args.kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    let client = kube::Client::try_from(config)?;
    let ns = format!("bench-fn-{}", std::process::id());
    let nss: Api<Namespace> = Api::all(client.clone());
    let ns_obj: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}}))?;
    nss.create(&PostParams::default(), &ns_obj).await?;
    let before = set_windows(&client).await?;
    let bench = Bench {
        client: client.clone(),
        ns: ns.clone(),
        http: http_client(),
    };
    let result = phases(&bench, &args).await;
    restore_windows(&client, before).await;
    let _ = nss.delete(&ns, &DeleteParams::default()).await;
    result
}

async fn phases(b: &Bench, args: &FunctionsArgs) -> anyhow::Result<()> {
    // Cold starts: a Function from source (pool) and a Knative Service (a pod start).
    let fns: Vec<String> = (0..COLD_TARGETS).map(|i| format!("cold-fn-{i}")).collect();
    let svcs: Vec<String> = (0..COLD_TARGETS)
        .map(|i| format!("cold-ksvc-{i}"))
        .collect();
    for f in &fns {
        b.function(f, None).await?;
    }
    for s in &svcs {
        b.ksvc(s).await?;
    }
    for f in &fns {
        b.ready::<Function>(f).await?;
    }
    for s in &svcs {
        b.ready::<Service>(s).await?;
    }
    let fn_cold = b
        .cold(&fns, args.cold_samples, true)
        .await
        .context("function cold starts")?;
    line("cold start, Function from source (pool)", &fn_cold);
    let svc_cold = b
        .cold(&svcs, args.cold_samples, false)
        .await
        .context("ksvc cold starts")?;
    line("cold start, Knative Service (pod start)", &svc_cold);
    for f in &fns {
        b.api::<Function>()
            .delete(f, &DeleteParams::default())
            .await?;
    }
    for s in &svcs {
        b.api::<Service>()
            .delete(s, &DeleteParams::default())
            .await?;
    }

    // The cold phase's pods stop first: their draining would take CPU from what follows.
    b.until(
        Duration::from_secs(120),
        "the cold phase's pods gone",
        || async {
            let pods = b.api::<Pod>().list(&ListParams::default()).await?;
            Ok(pods
                .items
                .iter()
                .all(|p| p.metadata.deletion_timestamp.is_none()))
        },
    )
    .await?;

    // Warm: the router's added latency and throughput against the pod itself.
    let warm = Scaling {
        min_scale: Some(1),
        ..Default::default()
    };
    b.function("warm", Some(warm)).await?;
    b.ready::<Function>("warm").await?;
    let path = format!("/function/warm.{}", b.ns);
    request(&b.http, GATEWAY, "gateway", &path, "{}").await?;
    let pod_ip = b.ready_pod_ip("warm-00001").await?;
    let direct: SocketAddr = format!("{pod_ip}:8080").parse()?;
    b.sequential(GATEWAY, "gateway", &path, 200).await?;
    b.sequential(direct, "pod", "/", 200).await?;
    let via = b
        .sequential(GATEWAY, "gateway", &path, args.warm_requests)
        .await?;
    let straight = b.sequential(direct, "pod", "/", args.warm_requests).await?;
    line("warm request through the gateway", &via);
    line("warm request straight to the pod", &straight);
    println!(
        "{:<48} p50 {:>8.3} ms   p99 {:>8.3} ms",
        "added by the router",
        via.p50() - straight.p50(),
        via.p99() - straight.p99()
    );
    // Two rounds each, alternating, so that neither path gets the quieter moment.
    let (mut rps_direct, mut rps_router, mut e1, mut e2) = (0.0, 0.0, 0, 0);
    for _ in 0..2 {
        let (r, e) = b.throughput(direct, "pod", "/", 64, args.seconds).await;
        (rps_direct, e1) = (rps_direct + r / 2.0, e1 + e);
        let (r, e) = b
            .throughput(GATEWAY, "gateway", &path, 64, args.seconds)
            .await;
        (rps_router, e2) = (rps_router + r / 2.0, e2 + e);
    }
    println!(
        "{:<48} {rps_router:.0} req/s through the router, {rps_direct:.0} req/s direct ({:.0} %), errors {}",
        "throughput at 64 concurrent",
        100.0 * rps_router / rps_direct.max(1.0),
        e1 + e2
    );
    b.api::<Function>()
        .delete("warm", &DeleteParams::default())
        .await?;

    // A step from zero to many clients, then back to zero.
    b.function("step", None).await?;
    b.ready::<Function>("step").await?;
    let path = format!("/function/step.{}", b.ns);
    let max_pods = Arc::new(AtomicUsize::new(0));
    let watch = {
        let (client, ns, max_pods) = (b.client.clone(), b.ns.clone(), max_pods.clone());
        tokio::spawn(async move {
            let pods: Api<Pod> = Api::namespaced(client, &ns);
            let lp = ListParams::default().labels("serving.knative.dev/revision=step-00001");
            loop {
                if let Ok(list) = pods.list(&lp).await {
                    let ready = list
                        .items
                        .iter()
                        .filter(|p| {
                            p.status
                                .as_ref()
                                .and_then(|s| s.conditions.as_ref())
                                .is_some_and(|c| {
                                    c.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                                })
                        })
                        .count();
                    max_pods.fetch_max(ready, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
    };
    let (rps, errors) = b
        .throughput(
            GATEWAY,
            "gateway",
            &path,
            args.step_clients,
            args.step_seconds,
        )
        .await;
    let stopped = Instant::now();
    println!(
        "{:<48} {rps:.0} req/s, errors {errors}, up to {} ready pods",
        format!(
            "step 0 -> {} clients for {} s",
            args.step_clients, args.step_seconds
        ),
        max_pods.load(Ordering::Relaxed)
    );
    b.at_zero(&["step-00001".to_string()]).await?;
    watch.abort();
    println!(
        "{:<48} {:.1} s (stable window 6 s + grace 2 s)",
        "back to zero after the load stopped",
        stopped.elapsed().as_secs_f64()
    );
    let f = b.api::<Function>().get("step").await?;
    b.api::<Function>()
        .delete(&f.name_any(), &DeleteParams::default())
        .await?;
    Ok(())
}
