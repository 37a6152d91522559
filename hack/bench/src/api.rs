//! `minik8s-bench api`: per storage backend, a fresh server process (and etcd), then
//! idle memory, durable creates/s with 1 and many clients, GET and LIST latency, watch
//! delivery latency to many watchers, and memory after the load. Prints figures only.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use http::{Method, StatusCode};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ListParams, ObjectMeta, PostParams, WatchEvent, WatchParams};

use crate::h2::H2;
use crate::proc::{CpuMark, Server, established_connections, fs_type, fsync_probe, rss_mib};
use crate::stats::{Samples, Scrape, num};
use crate::{ApiArgs, BackendChoice};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backend {
    Sqlite,
    Etcd,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Etcd => "etcd",
        }
    }
}

/// Figures of one backend: table rows in order, and notes on where the time went.
struct Report {
    backend: Backend,
    rows: Vec<(String, String)>,
    notes: Vec<String>,
    /// Most CPU other processes used during a measured phase, in percent of one core.
    max_others: f64,
}

impl Report {
    fn row(&mut self, metric: impl Into<String>, value: impl Into<String>) {
        self.rows.push((metric.into(), value.into()));
    }

    fn note(&mut self, line: impl Into<String>) {
        let line = line.into();
        eprintln!("[{}]   {line}", self.backend.name());
        self.notes.push(line);
    }
}

/// ConfigMaps of about 400 bytes of JSON.
fn configmap(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(BTreeMap::from([(
                "app".to_string(),
                "minik8s-bench".to_string(),
            )])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([
            ("payload".to_string(), "0123456789abcdef".repeat(16)),
            ("owner".to_string(), "minik8s-bench".to_string()),
        ])),
        ..Default::default()
    }
}

pub(crate) fn configmap_json(name: &str) -> Bytes {
    Bytes::from(serde_json::to_vec(&configmap(name)).expect("a ConfigMap serializes"))
}

pub(crate) fn cm_path(ns: &str) -> String {
    format!("/api/v1/namespaces/{ns}/configmaps")
}

pub(crate) type Op = Arc<dyn Fn(usize) -> BoxFuture<'static, anyhow::Result<()>> + Send + Sync>;

/// Runs `op(0..total)` from `clients` concurrent tasks, each taking the next index when
/// its previous request is answered. Returns the wall time and every request's latency.
pub(crate) async fn drive(
    total: usize,
    clients: usize,
    op: Op,
) -> anyhow::Result<(Duration, Samples)> {
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients.max(1))
        .map(|_| {
            let op = op.clone();
            let next = next.clone();
            tokio::spawn(async move {
                let mut samples = Samples::with_capacity(total / clients.max(1) + 1);
                loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    if k >= total {
                        break;
                    }
                    let t = Instant::now();
                    op(k).await?;
                    samples.push(t.elapsed());
                }
                anyhow::Ok(samples)
            })
        })
        .collect();
    let mut all = Samples::with_capacity(total);
    for t in tasks {
        all.extend(t.await??);
    }
    Ok((started.elapsed(), all))
}

async fn scrape(h2: &H2) -> anyhow::Result<Scrape> {
    let body = h2
        .expect(Method::GET, "/metrics", Bytes::new(), StatusCode::OK)
        .await?;
    Ok(Scrape::parse(&String::from_utf8_lossy(&body)))
}

fn ms(seconds: f64) -> String {
    num(seconds * 1e3)
}

/// What the server's own histograms say about a phase (`d` is the delta of two scrapes).
fn server_side(d: &Scrape, verb: &str, resource: &str) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(h) = d.histogram(
        "apiserver_request_duration_seconds",
        &[("verb", verb), ("resource", resource)],
    ) {
        out.push(format!(
            "server {verb} {resource}: {} requests, mean {} ms, p99 <= {} ms (histogram bucket)",
            h.count,
            ms(h.mean),
            ms(h.p99_le)
        ));
    }
    let name = "apiserver_storage_request_duration_seconds";
    let mut store = Vec::new();
    for op in d.label_values(&format!("{name}_count"), "operation") {
        if let Some(h) = d.histogram(name, &[("operation", &op)]) {
            store.push(format!(
                "{op} x{} mean {} ms p99 <= {} ms",
                h.count,
                ms(h.mean),
                ms(h.p99_le)
            ));
        }
    }
    if !store.is_empty() {
        out.push(format!("store: {}", store.join("; ")));
    }
    if let Some(h) = d.histogram("apiserver_storage_commit_batch_size", &[]) {
        out.push(format!(
            "store commits: {} transactions, mean {} writes per commit, p99 <= {}",
            h.count,
            num(h.mean),
            h.p99_le
        ));
    }
    out
}

fn cpu_note(r: &mut Report, mark: &CpuMark, server: &Server) -> String {
    let (srv, etcd, client, others) = mark.since(server);
    r.max_others = r.max_others.max(others);
    let etcd = if server.etcd_pid.is_some() {
        format!(", etcd {etcd:.0}%")
    } else {
        String::new()
    };
    format!(
        "CPU (100% = one core, {} cores): server {srv:.0}%{etcd}, bench client {client:.0}%, other processes {others:.0}%",
        cores()
    )
}

fn cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// A kube-rs client from the server's admin kubeconfig, retried while the file is still
/// being written.
pub(crate) async fn admin_client(server: &Server) -> anyhow::Result<kube::Client> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match testkit::kube_client(&server.kubeconfig).await {
            Ok(c) => return Ok(c),
            Err(e) if Instant::now() > deadline => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

pub(crate) async fn wait_ready(client: &kube::Client, server: &mut Server) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        server.check_alive()?;
        let req = http::Request::get("/readyz").body(Vec::new())?;
        if let Ok(Ok(_)) =
            tokio::time::timeout(Duration::from_secs(2), client.request_text(req)).await
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the server was not ready within 60s");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub(crate) fn resolve_server_bin(arg: &Option<PathBuf>) -> anyhow::Result<PathBuf> {
    let bin = match arg {
        Some(p) => p.clone(),
        None => std::env::current_exe()?
            .parent()
            .context("bench binary without a directory")?
            .join("minik8s"),
    };
    if !bin.exists() {
        bail!(
            "no server binary at {} (build it, or pass --server-bin)",
            bin.display()
        );
    }
    Ok(bin)
}

pub async fn run(args: ApiArgs) -> anyhow::Result<()> {
    let bin = resolve_server_bin(&args.server_bin)?;
    let backends = match args.backend {
        BackendChoice::Sqlite => vec![Backend::Sqlite],
        BackendChoice::Etcd => vec![Backend::Etcd],
        BackendChoice::Both => vec![Backend::Sqlite, Backend::Etcd],
    };
    let tmp = std::env::temp_dir();
    let probe_dir = tempfile::Builder::new()
        .prefix("minik8s-bench-fsync.")
        .tempdir_in(&tmp)?;
    let fsync = fsync_probe(probe_dir.path(), 200)?;
    drop(probe_dir);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load: Vec<&str> = load.split_whitespace().take(3).collect();
    let disk = format!(
        "data dirs under {} on {}; 4 KiB append + fdatasync there: p50 {} p99 {} ms\nload average before the run: {}",
        tmp.display(),
        fs_type(&tmp),
        num(fsync.p50()),
        num(fsync.p99()),
        load.join(" ")
    );
    eprintln!("{disk}");
    let mut reports = Vec::new();
    for backend in backends {
        eprintln!("[{}] starting", backend.name());
        let report = run_backend(&args, &bin, backend)
            .await
            .with_context(|| format!("benchmark of the {} backend", backend.name()))?;
        reports.push(report);
    }
    print_results(&args, &bin, &disk, &reports);
    Ok(())
}

async fn run_backend(
    args: &ApiArgs,
    bin: &std::path::Path,
    backend: Backend,
) -> anyhow::Result<Report> {
    let mut r = Report {
        backend,
        rows: Vec::new(),
        notes: Vec::new(),
        max_others: 0.0,
    };
    let tag = backend.name();

    // --- Start and idle memory.
    let mut server = Server::start(bin, backend == Backend::Etcd)?;
    let spawned = server.spawned;
    server.wait_for_kubeconfig(Duration::from_secs(60)).await?;
    let client = admin_client(&server).await?;
    wait_ready(&client, &mut server).await?;
    let ready_after = spawned.elapsed();
    let pid = server.pid();
    let idle_rss = rss_mib(pid)?;
    let etcd_idle = server.etcd_pid.map(rss_mib).transpose()?;
    r.note(format!(
        "server pid {pid}, port {}, data dir {}",
        server.port,
        server.dir.path().display(),
    ));
    r.row("start to ready (ms)", num(ready_after.as_secs_f64() * 1e3));
    r.row("idle RSS after ready (MiB)", num(idle_rss));

    let h2 = H2::connect(&server.kubeconfig, args.h2_connections).await?;
    let half = args.creates_concurrent.div_ceil(2);
    let namespaces = [
        "seq-kube",
        "seq-h2",
        "conc-kube-0",
        "conc-kube-1",
        "conc-h2-0",
        "conc-h2-1",
        "watch",
    ];
    let ns_api: Api<Namespace> = Api::all(client.clone());
    for ns in namespaces {
        let obj = Namespace {
            metadata: ObjectMeta {
                name: Some(ns.to_string()),
                ..Default::default()
            },
            ..Default::default()
        };
        ns_api.create(&PostParams::default(), &obj).await?;
    }
    // Warm both clients' connections and the server's code paths.
    {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), "watch");
        for i in 0..20 {
            api.create(&PostParams::default(), &configmap(&format!("warm-{i}")))
                .await?;
            h2.expect(
                Method::POST,
                &cm_path("watch"),
                configmap_json(&format!("warm-h2-{i}")),
                StatusCode::CREATED,
            )
            .await?;
        }
    }

    // --- Creates, one client.
    let n = args.creates_single;
    let kube_seq: Api<ConfigMap> = Api::namespaced(client.clone(), "seq-kube");
    let op: Op = {
        let api = kube_seq.clone();
        Arc::new(move |k| {
            let api = api.clone();
            let cm = configmap(&format!("cm-{k}"));
            async move {
                api.create(&PostParams::default(), &cm).await?;
                Ok(())
            }
            .boxed()
        })
    };
    let (wall, lat) = drive(n, 1, op).await?;
    let rate = n as f64 / wall.as_secs_f64();
    r.note(format!(
        "creates, 1 client, kube-rs: {n} in {:.2}s = {rate:.0}/s, latency p50 {} p99 {} ms",
        wall.as_secs_f64(),
        num(lat.p50()),
        num(lat.p99())
    ));
    r.row("creates/s, 1 client, kube-rs HTTP/1.1", num(rate));

    let op: Op = {
        let h2 = h2.clone();
        Arc::new(move |k| {
            let h2 = h2.clone();
            async move {
                h2.expect(
                    Method::POST,
                    &cm_path("seq-h2"),
                    configmap_json(&format!("cm-{k}")),
                    StatusCode::CREATED,
                )
                .await?;
                Ok(())
            }
            .boxed()
        })
    };
    let before = scrape(&h2).await?;
    let (wall, lat) = drive(n, 1, op).await?;
    let after = scrape(&h2).await?;
    let rate = n as f64 / wall.as_secs_f64();
    r.note(format!(
        "creates, 1 client, raw HTTP/2: {n} in {:.2}s = {rate:.0}/s, latency p50 {} p99 {} ms",
        wall.as_secs_f64(),
        num(lat.p50()),
        num(lat.p99())
    ));
    for line in server_side(&after.delta(&before), "POST", "configmaps") {
        r.note(format!("  {line}"));
    }
    r.row("creates/s, 1 client, raw HTTP/2", num(rate));

    // --- Creates, many clients, kube-rs: clones of one kube::Client share a hyper pool of
    // HTTP/1.1 connections, which opens one connection per request in flight.
    let n = args.creates_concurrent;
    let clients = args.clients;
    let apis: Arc<Vec<Api<ConfigMap>>> = Arc::new(
        ["conc-kube-0", "conc-kube-1"]
            .iter()
            .map(|ns| Api::namespaced(client.clone(), ns))
            .collect(),
    );
    let op: Op = {
        let apis = apis.clone();
        Arc::new(move |k| {
            let api = apis[k % 2].clone();
            let cm = configmap(&format!("cm-{k}"));
            async move {
                api.create(&PostParams::default(), &cm).await?;
                Ok(())
            }
            .boxed()
        })
    };
    let conns_before = established_connections(server.port);
    let before = scrape(&h2).await?;
    let cpu = CpuMark::now(&server);
    let (wall, lat) = drive(n, clients, op).await?;
    let cpu_line = cpu_note(&mut r, &cpu, &server);
    let after = scrape(&h2).await?;
    let conns_after = established_connections(server.port);
    let rate = n as f64 / wall.as_secs_f64();
    r.note(format!(
        "creates, {clients} clients, kube-rs: {n} in {:.2}s = {rate:.0}/s, latency p50 {} p99 {} ms",
        wall.as_secs_f64(),
        num(lat.p50()),
        num(lat.p99())
    ));
    r.note(format!(
        "  kube-rs speaks HTTP/1.1 only: server-side connections {conns_before} before, {conns_after} after the phase"
    ));
    r.note(format!("  {cpu_line}"));
    for line in server_side(&after.delta(&before), "POST", "configmaps") {
        r.note(format!("  {line}"));
    }
    r.row(
        format!("creates/s, {clients} clients, kube-rs HTTP/1.1 pool"),
        num(rate),
    );

    // --- Creates, many clients, raw HTTP/2 streams.
    let op: Op = {
        let h2 = h2.clone();
        Arc::new(move |k| {
            let h2 = h2.clone();
            async move {
                h2.expect(
                    Method::POST,
                    &cm_path(&format!("conc-h2-{}", k % 2)),
                    configmap_json(&format!("cm-{k}")),
                    StatusCode::CREATED,
                )
                .await?;
                Ok(())
            }
            .boxed()
        })
    };
    let before = scrape(&h2).await?;
    let cpu = CpuMark::now(&server);
    let (wall, lat) = drive(n, clients, op).await?;
    let cpu_line = cpu_note(&mut r, &cpu, &server);
    let after = scrape(&h2).await?;
    let rate = n as f64 / wall.as_secs_f64();
    r.note(format!(
        "creates, {clients} clients, raw HTTP/2 over {} connection(s): {n} in {:.2}s = {rate:.0}/s, latency p50 {} p99 {} ms",
        args.h2_connections,
        wall.as_secs_f64(),
        num(lat.p50()),
        num(lat.p99())
    ));
    r.note(format!("  {cpu_line}"));
    for line in server_side(&after.delta(&before), "POST", "configmaps") {
        r.note(format!("  {line}"));
    }
    r.row(
        format!(
            "creates/s, {clients} clients, raw HTTP/2 ({} conn)",
            args.h2_connections
        ),
        num(rate),
    );
    r.row(
        format!("  create latency p50 / p99 at {clients} clients, raw HTTP/2 (ms)"),
        format!("{} / {}", num(lat.p50()), num(lat.p99())),
    );

    // --- GETs of existing objects, one client.
    let gets = args.gets;
    let existing = args.creates_single.max(1);
    let op: Op = {
        let api = kube_seq.clone();
        Arc::new(move |k| {
            let api = api.clone();
            async move {
                api.get(&format!("cm-{}", k % existing)).await?;
                Ok(())
            }
            .boxed()
        })
    };
    let (_, lat) = drive(gets, 1, op).await?;
    r.note(format!(
        "GET, 1 client, kube-rs: {gets} GETs, p50 {} p99 {} max {} ms",
        num(lat.p50()),
        num(lat.p99()),
        num(lat.max_ms())
    ));
    r.row(
        "GET p50 / p99, 1 client, kube-rs (ms)",
        format!("{} / {}", num(lat.p50()), num(lat.p99())),
    );
    let op: Op = {
        let h2 = h2.clone();
        Arc::new(move |k| {
            let h2 = h2.clone();
            async move {
                h2.expect(
                    Method::GET,
                    &format!("{}/cm-{}", cm_path("seq-h2"), k % existing),
                    Bytes::new(),
                    StatusCode::OK,
                )
                .await?;
                Ok(())
            }
            .boxed()
        })
    };
    let before = scrape(&h2).await?;
    let (_, lat) = drive(gets, 1, op).await?;
    let after = scrape(&h2).await?;
    r.note(format!(
        "GET, 1 client, raw HTTP/2: {gets} GETs, p50 {} p99 {} max {} ms",
        num(lat.p50()),
        num(lat.p99()),
        num(lat.max_ms())
    ));
    for line in server_side(&after.delta(&before), "GET", "configmaps") {
        r.note(format!("  {line}"));
    }
    r.row(
        "GET p50 / p99, 1 client, raw HTTP/2 (ms)",
        format!("{} / {}", num(lat.p50()), num(lat.p99())),
    );

    // --- LIST of one namespace holding `half` ConfigMaps, no limit.
    list_phase(args, &mut r, &server, &h2, &apis[0], half).await?;

    // --- Watch delivery latency.
    let (p50, p99, missing) = watch_phase(args, &client, &mut r, &server, &h2).await?;
    r.row(
        format!(
            "watch delivery p50 / p99, {} kube-rs watchers (ms)",
            args.watchers
        ),
        format!("{} / {}", num(p50), num(p99)),
    );
    if missing > 0 {
        r.note(format!("watch: {missing} events never arrived"));
    }

    // --- Memory after the load.
    server.check_alive()?;
    let rss = rss_mib(pid)?;
    let hwm = status_mib(pid, "VmHWM:")?;
    r.row("RSS after load (MiB)", num(rss));
    r.row("peak RSS, VmHWM (MiB)", num(hwm));
    match (server.etcd_pid, etcd_idle) {
        (Some(epid), Some(idle)) => {
            r.row(
                "etcd process RSS idle / after (MiB)",
                format!("{} / {}", num(idle), num(rss_mib(epid)?)),
            );
        }
        _ => r.row("etcd process RSS idle / after (MiB)", "-"),
    }
    let objects = scrape(&h2).await?;
    r.note(format!(
        "store revision at the end: {}",
        objects.sum("apiserver_storage_revision", &[])
    ));
    eprintln!("[{tag}] done in {:.1}s", spawned.elapsed().as_secs_f64());
    drop(server);
    Ok(r)
}

/// Full LISTs (no limit) of the namespace holding `expected` ConfigMaps: time to the last
/// byte with the raw client, and with kube-rs decoding into typed objects.
async fn list_phase(
    args: &ApiArgs,
    r: &mut Report,
    server: &Server,
    h2: &H2,
    api: &Api<ConfigMap>,
    expected: usize,
) -> anyhow::Result<()> {
    let raw_label = format!("LIST {expected} configmaps median / p99, raw HTTP/2 (ms)");
    let typed_label = format!("LIST {expected} configmaps median / p99, kube-rs typed (ms)");
    let list_path = cm_path("conc-kube-0");
    let (status, body) = h2.request(Method::GET, &list_path, Bytes::new()).await?;
    if status != StatusCode::OK {
        let text = String::from_utf8_lossy(&body);
        let message = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| {
                v["details"]["causes"][0]["message"]
                    .as_str()
                    .map(String::from)
            })
            .unwrap_or_else(|| text.chars().take(300).collect());
        r.note(format!(
            "LIST of {expected} ConfigMaps FAILED: {status}: {message}"
        ));
        let failed = format!("fails (HTTP {})", status.as_u16());
        r.row(raw_label, failed.clone());
        r.row(typed_label, failed);
        return Ok(());
    }
    let listed: serde_json::Value = serde_json::from_slice(&body)?;
    // The root-CA publisher puts kube-root-ca.crt in every namespace.
    let items = listed["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["metadata"]["name"] != "kube-root-ca.crt")
        .count();
    if items != expected {
        bail!("LIST returned {items} items, expected {expected}");
    }
    r.note(format!(
        "LIST: {items} ConfigMaps, {:.1} MiB of JSON per response",
        body.len() as f64 / 1048576.0
    ));
    let mut lat = Samples::default();
    let before = scrape(h2).await?;
    let cpu = CpuMark::now(server);
    for _ in 0..args.list_runs {
        let t = Instant::now();
        h2.expect(Method::GET, &list_path, Bytes::new(), StatusCode::OK)
            .await?;
        lat.push(t.elapsed());
    }
    let cpu_line = cpu_note(r, &cpu, server);
    let after = scrape(h2).await?;
    r.note(format!(
        "LIST, raw HTTP/2 (time to last byte, undecoded): {} runs, median {} p99 {} ms",
        lat.len(),
        num(lat.p50()),
        num(lat.p99())
    ));
    r.note(format!("  {cpu_line}"));
    for line in server_side(&after.delta(&before), "LIST", "configmaps") {
        r.note(format!("  {line}"));
    }
    r.row(
        raw_label,
        format!("{} / {}", num(lat.p50()), num(lat.p99())),
    );
    let mut lat = Samples::default();
    for _ in 0..args.list_runs {
        let t = Instant::now();
        let list = api.list(&ListParams::default()).await?;
        lat.push(t.elapsed());
        let listed = list
            .items
            .iter()
            .filter(|c| c.metadata.name.as_deref() != Some("kube-root-ca.crt"))
            .count();
        if listed != expected {
            bail!("kube-rs LIST returned {listed} items");
        }
    }
    r.note(format!(
        "LIST, kube-rs Api::list (decoded into typed objects): median {} p99 {} ms",
        num(lat.p50()),
        num(lat.p99())
    ));
    r.row(
        typed_label,
        format!("{} / {}", num(lat.p50()), num(lat.p99())),
    );
    Ok(())
}

fn status_mib(pid: u32, field: &str) -> anyhow::Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib: f64 = status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .with_context(|| format!("no {field}"))?
        .parse()?;
    Ok(kib / 1024.0)
}

/// `args.watchers` kube-rs watchers on one namespace; `args.watch_creates` creates, one
/// every `watch_interval_ms`; for every (create, watcher) the time from issuing the create
/// to that watcher decoding the ADDED event. Returns p50, p99 (ms) and missing events.
async fn watch_phase(
    args: &ApiArgs,
    client: &kube::Client,
    r: &mut Report,
    server: &Server,
    h2: &H2,
) -> anyhow::Result<(f64, f64, usize)> {
    let n = args.watch_creates;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "watch");
    let rv = api
        .list_metadata(&ListParams::default().limit(1))
        .await?
        .metadata
        .resource_version
        .context("list without resourceVersion")?;
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let mut tasks = Vec::new();
    for _ in 0..args.watchers {
        let api = api.clone();
        let rv = rv.clone();
        let ready_tx = ready_tx.clone();
        tasks.push(tokio::spawn(async move {
            let mut got: Vec<Option<Instant>> = vec![None; n];
            let mut seen = 0;
            let stream = api.watch(&WatchParams::default().timeout(290), &rv).await?;
            let mut stream = Box::pin(stream);
            while let Some(ev) = stream.next().await {
                match ev? {
                    WatchEvent::Added(cm) => {
                        let now = Instant::now();
                        let name = cm.metadata.name.unwrap_or_default();
                        if name == "ready" {
                            let _ = ready_tx.send(());
                        } else if let Some(i) = name
                            .strip_prefix("w-")
                            .and_then(|s| s.parse::<usize>().ok())
                            && i < n
                            && got[i].is_none()
                        {
                            got[i] = Some(now);
                            seen += 1;
                            if seen == n {
                                break;
                            }
                        }
                    }
                    WatchEvent::Error(e) => bail!("watch error: {e:?}"),
                    _ => {}
                }
            }
            anyhow::Ok(got)
        }));
    }
    drop(ready_tx);
    // Every watcher is receiving once each has seen this object.
    api.create(&PostParams::default(), &configmap("ready"))
        .await?;
    if !all_signalled(&mut ready_rx, args.watchers, Duration::from_secs(60)).await {
        bail!("not every watcher saw the first event within 60s");
    }
    r.note(format!(
        "watch: {} watchers (kube-rs, one HTTP/1.1 connection each; server has {} connections)",
        args.watchers,
        established_connections(server.port)
    ));
    let before = scrape(h2).await?;
    let cpu = CpuMark::now(server);
    let mut issued = Vec::with_capacity(n);
    let mut ticker = tokio::time::interval(Duration::from_millis(args.watch_interval_ms.max(1)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for i in 0..n {
        ticker.tick().await;
        issued.push(Instant::now());
        api.create(&PostParams::default(), &configmap(&format!("w-{i}")))
            .await?;
    }
    let mut lat = Samples::with_capacity(n * args.watchers);
    let mut missing = 0;
    for t in tasks {
        let got = tokio::time::timeout(Duration::from_secs(60), t)
            .await
            .context("a watcher did not get every event within 60s")???;
        for (i, at) in got.into_iter().enumerate() {
            match at {
                Some(at) => lat.push(at.saturating_duration_since(issued[i])),
                None => missing += 1,
            }
        }
    }
    let cpu_line = cpu_note(r, &cpu, server);
    let after = scrape(h2).await?;
    r.note(format!(
        "watch: {n} creates, one every {} ms, {} deliveries: p50 {} p99 {} max {} ms",
        args.watch_interval_ms,
        lat.len(),
        num(lat.p50()),
        num(lat.p99()),
        num(lat.max_ms())
    ));
    r.note(format!("  {cpu_line}"));
    for line in server_side(&after.delta(&before), "POST", "configmaps") {
        r.note(format!("  {line}"));
    }
    Ok((lat.p50(), lat.p99(), missing))
}

/// Whether `n` signals arrive on `rx` within `timeout` (every watcher saw its marker).
pub(crate) async fn all_signalled(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<()>,
    n: usize,
    timeout: Duration,
) -> bool {
    let all = async {
        for _ in 0..n {
            if rx.recv().await.is_none() {
                return false;
            }
        }
        true
    };
    tokio::time::timeout(timeout, all).await == Ok(true)
}

fn print_results(args: &ApiArgs, bin: &std::path::Path, disk: &str, reports: &[Report]) {
    let mut metrics: Vec<String> = Vec::new();
    for r in reports {
        for (m, _) in &r.rows {
            if !metrics.contains(m) {
                metrics.push(m.clone());
            }
        }
    }
    let target = |m: &str| -> &'static str {
        if m.starts_with("idle RSS") {
            "<= 50"
        } else if m.starts_with("creates/s") && m.contains(&format!("{} clients", args.clients)) {
            ">= 5000 (sqlite)"
        } else if m.starts_with("LIST") && m.contains("raw") {
            "<= 150"
        } else {
            ""
        }
    };
    let mut header = vec!["metric".to_string()];
    header.extend(reports.iter().map(|r| r.backend.name().to_string()));
    header.push("target".into());
    let mut table: Vec<Vec<String>> = vec![header];
    for m in &metrics {
        let mut row = vec![m.clone()];
        for r in reports {
            row.push(
                r.rows
                    .iter()
                    .find(|(k, _)| k == m)
                    .map(|(_, v)| v.clone())
                    .unwrap_or_else(|| "-".into()),
            );
        }
        row.push(target(m).into());
        table.push(row);
    }
    let widths: Vec<usize> = (0..table[0].len())
        .map(|c| table.iter().map(|row| row[c].len()).max().unwrap_or(0))
        .collect();

    println!();
    println!("minik8s API benchmark ({})", bin.display());
    println!(
        "client and server share this machine ({} cores); the bench client's own CPU competes with the server",
        cores()
    );
    println!(
        "clients: kube-rs 5 (kube::Api, HTTP/1.1, one pooled connection per request in flight) and a raw hyper/rustls HTTP/2 client (prepared JSON bodies, {} connection(s), one stream per request)",
        args.h2_connections
    );
    println!(
        "ConfigMaps of ~400 bytes; writes are durable (sqlite: WAL, synchronous=FULL; etcd: fsync per commit)"
    );
    println!("{disk}");
    for r in reports {
        println!();
        println!("{} details:", r.backend.name());
        for n in &r.notes {
            println!("  {n}");
        }
    }
    println!();
    for (i, row) in table.iter().enumerate() {
        let cells: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(c, cell)| {
                if c == 0 {
                    format!("{cell:<w$}", w = widths[c])
                } else {
                    format!("{cell:>w$}", w = widths[c])
                }
            })
            .collect();
        println!("| {} |", cells.join(" | "));
        if i == 0 {
            let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
            println!("|-{}-|", rule.join("-|-"));
        }
    }
    for r in reports {
        if r.max_others > 20.0 {
            println!(
                "note: during the {} run other processes on this machine used up to {:.0}% of a core in a measured phase; its figures are disturbed",
                r.backend.name(),
                r.max_others
            );
        }
    }
}
