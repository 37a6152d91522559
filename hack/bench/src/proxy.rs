//! The proxier (iptables mode, or nftables mode with `--mode nftables`) at 1,000 and 10,000 Services, inside a network namespace made for the
//! run (the host's tables are never touched): how long rendering and restoring the whole ruleset
//! takes, how big it is, and how long one Service change takes to reach the kernel, both for
//! the proxier's sync alone and end to end from an API write through watches to the kernel.
//!
//! The process re-executes itself under `ip netns exec`, so every iptables command runs as the
//! proxier on a node would run it (no prefix), and the namespace is deleted afterwards by the
//! outer process whatever happens inside. The end-to-end part watches the kernel with
//! `nft monitor` (iptables here is the nf_tables flavour): it prints each rule as its
//! transaction commits, so nothing polls and the time is when the rule really is in the kernel.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use minik8s_proxy::cache::Caches;
use minik8s_proxy::iptables::apply::{self, CommandIptables, Iptables};
use minik8s_proxy::iptables::{Periods, ProxyConfig, ProxyState, SyncKind, Syncer, render_rules};
use minik8s_proxy::nftables::{self, CommandNft, Nft};
use serde_json::json;
use tokio::sync::mpsc;

use crate::stats::Samples;

#[derive(clap::Args, Clone, Debug)]
pub struct ProxyArgs {
    /// Service counts of the full-sync figures.
    #[arg(long, value_delimiter = ',', default_value = "1000,10000")]
    pub services: Vec<usize>,
    /// Ready endpoints per Service (one EndpointSlice each).
    #[arg(long, default_value_t = 2)]
    pub endpoints: usize,
    /// Services loaded into the API server for the end-to-end change latency (0 skips it).
    #[arg(long, default_value_t = 10_000)]
    pub change_services: usize,
    /// Timed changes of each kind.
    #[arg(long, default_value_t = 20)]
    pub changes: usize,
    /// Which proxier: kube-proxy's `--proxy-mode`.
    #[arg(long, value_enum, default_value = "iptables")]
    pub mode: Mode,
    /// Internal: already inside the namespace.
    #[arg(long, hide = true)]
    pub inside: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    Iptables,
    Nftables,
}

const NAMESPACE: &str = "proxybench";
const CLUSTER_CIDR: &str = "10.64.0.0/10";

/// The network namespace of the run, deleted on drop.
struct Netns(String);

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

pub async fn run(args: ProxyArgs) -> anyhow::Result<()> {
    if args.inside {
        return inside(args).await;
    }
    let uid = Command::new("id").arg("-u").output()?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        bail!("the proxy benchmark needs root (it creates a network namespace)");
    }
    let name = format!("m8s-proxybench-{}", std::process::id());
    let _ = Command::new("ip").args(["netns", "del", &name]).status();
    let status = Command::new("ip").args(["netns", "add", &name]).status()?;
    anyhow::ensure!(status.success(), "ip netns add {name} failed");
    let ns = Netns(name);
    println!("network namespace {} (deleted at the end)", ns.0);
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &ns.0])
        .arg(std::env::current_exe()?)
        .args([
            "proxy",
            "--inside",
            "--endpoints",
            &args.endpoints.to_string(),
        ])
        .args(["--change-services", &args.change_services.to_string()])
        .args(["--changes", &args.changes.to_string()]);
    if args.mode == Mode::Nftables {
        cmd.args(["--mode", "nftables"]);
    }
    let services: Vec<String> = args.services.iter().map(|n| n.to_string()).collect();
    cmd.args(["--services", &services.join(",")]);
    let status = tokio::task::spawn_blocking(move || cmd.status()).await??;
    drop(ns);
    anyhow::ensure!(
        status.success(),
        "the benchmark inside the namespace failed"
    );
    Ok(())
}

async fn inside(args: ProxyArgs) -> anyhow::Result<()> {
    run_cmd(Command::new("ip").args(["link", "set", "lo", "up"]))?;
    println!("load: {}", load());
    if args.mode == Mode::Nftables {
        return inside_nftables(args).await;
    }
    let ipt: Arc<dyn Iptables> = Arc::new(CommandIptables::default());
    println!();
    println!(
        "| Services | rules | restore input | render | iptables-restore (empty tables) | full sync (loaded) | iptables-save nat | one endpoint added (partial sync) |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for &n in &args.services {
        full_sync_figures(ipt.clone(), n, args.endpoints)?;
    }
    println!(
        "render: render + serialise (median of 3); full sync: what the proxier does first and hourly (iptables-save of both tables, restore of everything, jump checks); partial sync: diff + restore of the changed chains (median of 5)"
    );
    println!("load: {}", load());
    if args.change_services > 0 {
        println!();
        end_to_end(Backend::Iptables(ipt), args).await?;
        println!("load: {}", load());
    }
    Ok(())
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn run_cmd(cmd: &mut Command) -> anyhow::Result<String> {
    let out = cmd.output().with_context(|| format!("{cmd:?}"))?;
    anyhow::ensure!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1e3)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

/// Address of endpoint `e` of Service `i` (the Service's own /16 per endpoint index keeps all
/// of them distinct and inside the cluster CIDR).
fn endpoint_ip(i: usize, e: usize) -> String {
    format!("10.{}.{}.{}", 64 + e, (i >> 8) & 255, i & 255)
}

fn service(i: usize, cluster_ip: Option<String>) -> Service {
    serde_json::from_value(json!({
        "metadata": {"namespace": NAMESPACE, "name": format!("svc-{i}")},
        "spec": {"clusterIP": cluster_ip, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}
    }))
    .expect("a valid Service")
}

fn slice(i: usize, ips: &[String]) -> EndpointSlice {
    let endpoints: Vec<_> = ips
        .iter()
        .map(|ip| json!({"addresses": [ip], "conditions": {"ready": true}, "nodeName": "node"}))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"namespace": NAMESPACE, "name": format!("svc-{i}-1"),
                     "labels": {"kubernetes.io/service-name": format!("svc-{i}")}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": endpoints,
    }))
    .expect("a valid EndpointSlice")
}

fn config() -> ProxyConfig {
    ProxyConfig {
        hostname: "node".into(),
        cluster_cidr: Some(CLUSTER_CIDR.into()),
        masquerade_all: false,
    }
}

fn synthetic_state(n: usize, endpoints: usize) -> ProxyState {
    let mut state = ProxyState {
        config: config(),
        ..ProxyState::default()
    };
    for i in 0..n {
        let ip = format!("10.96.{}.{}", 1 + (i >> 8), i & 255);
        state.services.push(service(i, Some(ip)));
        let ips: Vec<String> = (0..endpoints).map(|e| endpoint_ip(i, e)).collect();
        state.slices.push(slice(i, &ips));
    }
    state
}

/// Render, restore and resync figures for `n` Services, then removes everything again.
fn full_sync_figures(ipt: Arc<dyn Iptables>, n: usize, endpoints: usize) -> anyhow::Result<()> {
    let mut state = synthetic_state(n, endpoints);
    let mut renders = Vec::new();
    let mut text = String::new();
    for _ in 0..3 {
        let started = Instant::now();
        text = render_rules(&state).to_restore();
        renders.push(started.elapsed());
    }
    let rules = render_rules(&state);
    let (_, rule_count) = rules.counts();

    let started = Instant::now();
    ipt.restore(&text)?;
    let restore = started.elapsed();

    // The proxier's full sync over the loaded tables, as first and hourly.
    let mut syncer = Syncer::new(ipt.clone(), Duration::from_secs(3600));
    let started = Instant::now();
    let kind = syncer.sync(rules)?;
    let full = started.elapsed();
    anyhow::ensure!(kind == SyncKind::Full, "first sync was {kind:?}");

    let started = Instant::now();
    let saved = ipt.save("nat")?;
    let save = started.elapsed();
    let dnat = format!("--to-destination {}:8080", endpoint_ip(n - 1, 0));
    anyhow::ensure!(
        saved.contains(&dnat),
        "the last Service's rules are missing"
    );

    // One endpoint more for one Service, five times: render + diff + restore of two chains.
    let mut partials = Vec::new();
    for k in 0..5 {
        let i = (k * 7919) % n;
        let mut ips: Vec<String> = (0..endpoints).map(|e| endpoint_ip(i, e)).collect();
        ips.push(format!("10.100.{}.{}", k >> 8, k & 255));
        state.slices[i] = slice(i, &ips);
        let started = Instant::now();
        let kind = syncer.sync(render_rules(&state))?;
        partials.push(started.elapsed());
        anyhow::ensure!(kind == SyncKind::Partial, "change sync was {kind:?}");
    }
    println!(
        "| {n} | {rule_count} | {} lines, {:.1} MiB | {} | {} | {} | {} | {} |",
        text.lines().count(),
        text.len() as f64 / (1024.0 * 1024.0),
        ms(median(renders)),
        ms(restore),
        ms(full),
        ms(save),
        ms(median(partials)),
    );
    apply::cleanup(ipt.as_ref())?;
    Ok(())
}

/// The nftables mode's figures: the same as the iptables mode's, for its table.
async fn inside_nftables(args: ProxyArgs) -> anyhow::Result<()> {
    let nft: Arc<dyn Nft> = Arc::new(CommandNft::default());
    println!();
    println!(
        "| Services | chains / rules / map elements | nft script | render | nft -f (no table yet) | full sync (loaded) | nft list table | one endpoint added (partial sync) | of which render + diff | of which nft -f |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for &n in &args.services {
        nft_full_sync_figures(nft.clone(), n, args.endpoints)?;
    }
    println!(
        "render: render + serialise (median of 3); full sync: the proxier's full sync over the loaded table (one transaction replacing the table); partial sync: re-render of the changed Service, diff and nft -f of the changes (median of 5)"
    );
    println!("load: {}", load());
    if args.change_services > 0 {
        println!();
        end_to_end(Backend::Nftables(nft), args).await?;
        println!("load: {}", load());
    }
    Ok(())
}

/// Render, apply and resync figures of the nftables mode for `n` Services, then removes the
/// table again.
fn nft_full_sync_figures(nft: Arc<dyn Nft>, n: usize, endpoints: usize) -> anyhow::Result<()> {
    let state = synthetic_state(n, endpoints);
    let mut renders = Vec::new();
    let mut text = String::new();
    for _ in 0..3 {
        let started = Instant::now();
        text = nftables::render_ruleset(&state).to_script();
        renders.push(started.elapsed());
    }
    let rules = nftables::render_ruleset(&state);
    let (chains, rule_count, elements) = rules.counts();

    let started = Instant::now();
    nft.run(&text)?;
    let apply = started.elapsed();

    // The proxier's objects as the reflector shares them: a change replaces one `Arc`.
    let services: Vec<Arc<Service>> = state.services.iter().cloned().map(Arc::new).collect();
    let mut slices: Vec<Arc<EndpointSlice>> = state.slices.iter().cloned().map(Arc::new).collect();
    let timed = Arc::new(TimedNft {
        inner: nft.clone(),
        spent: Default::default(),
    });
    let mut syncer = nftables::Syncer::new(timed.clone(), Duration::from_secs(3600));
    let started = Instant::now();
    let kind = syncer.sync(&state.config, &services, &slices)?;
    let full = started.elapsed();
    anyhow::ensure!(kind == nftables::SyncKind::Full, "first sync was {kind:?}");

    let started = Instant::now();
    let listed = nft.list(&["list", "table", "ip", nftables::render::TABLE])?;
    let list = started.elapsed();
    let dnat = format!("dnat to {}:8080", endpoint_ip(n - 1, 0));
    anyhow::ensure!(
        listed.contains(&dnat),
        "the last Service's rules are missing"
    );

    let (mut partials, mut partial_renders, mut partial_applies) =
        (Vec::new(), Vec::new(), Vec::new());
    for k in 0..5 {
        let i = (k * 7919) % n;
        let mut ips: Vec<String> = (0..endpoints).map(|e| endpoint_ip(i, e)).collect();
        ips.push(format!("10.100.{}.{}", k >> 8, k & 255));
        slices[i] = Arc::new(slice(i, &ips));
        *timed.spent.lock().unwrap() = Duration::ZERO;
        let started = Instant::now();
        let kind = syncer.sync(&state.config, &services, &slices)?;
        let total = started.elapsed();
        let applied = *timed.spent.lock().unwrap();
        partials.push(total);
        partial_renders.push(total - applied);
        partial_applies.push(applied);
        anyhow::ensure!(
            kind == nftables::SyncKind::Partial,
            "change sync was {kind:?}"
        );
    }
    println!(
        "| {n} | {chains} / {rule_count} / {elements} | {} lines, {:.1} MiB | {} | {} | {} | {} | {} | {} | {} |",
        text.lines().count(),
        text.len() as f64 / (1024.0 * 1024.0),
        ms(median(renders)),
        ms(apply),
        ms(full),
        ms(list),
        ms(median(partials)),
        ms(median(partial_renders)),
        ms(median(partial_applies)),
    );
    nftables::apply::cleanup(nft.as_ref())?;
    Ok(())
}

/// Adds up the time spent in `nft`.
struct TimedNft {
    inner: Arc<dyn Nft>,
    spent: std::sync::Mutex<Duration>,
}

impl Nft for TimedNft {
    fn run(&self, script: &str) -> Result<(), minik8s_proxy::iptables::Error> {
        let started = Instant::now();
        let result = self.inner.run(script);
        *self.spent.lock().unwrap() += started.elapsed();
        result
    }
    fn list(&self, args: &[&str]) -> Result<String, minik8s_proxy::iptables::Error> {
        self.inner.list(args)
    }
}

/// The proxier under test in the end-to-end part.
enum Backend {
    Iptables(Arc<dyn Iptables>),
    Nftables(Arc<dyn Nft>),
}

/// Rules added to the kernel as `nft monitor` reports them, stamped on arrival.
struct Monitor {
    child: std::process::Child,
    lines: mpsc::UnboundedReceiver<(Instant, String)>,
}

impl Monitor {
    /// `what`: `["monitor", "rules"]`, or `["monitor"]` to see map elements too.
    fn start(what: &[&str]) -> anyhow::Result<Monitor> {
        let mut child = Command::new("nft")
            .args(what)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting nft monitor")?;
        let stdout = child.stdout.take().context("nft monitor stdout")?;
        let (tx, lines) = mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let wanted = line.starts_with("add rule") || line.starts_with("add element");
                if wanted && tx.send((Instant::now(), line)).is_err() {
                    break;
                }
            }
        });
        Ok(Monitor { child, lines })
    }

    /// When a rule with all of `needles` was added (waits at most 120 s).
    async fn added(&mut self, needles: &[&str]) -> anyhow::Result<Instant> {
        let limit = Duration::from_secs(120);
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let next = tokio::time::timeout_at(deadline, self.lines.recv()).await;
            match next {
                Ok(Some((at, line))) if needles.iter().all(|n| line.contains(n)) => return Ok(at),
                Ok(Some(_)) => {}
                Ok(None) => bail!("nft monitor stopped"),
                Err(_) => bail!("no rule with {needles:?} within {limit:?}"),
            }
        }
    }

    /// Drops what arrived so far.
    fn drain(&mut self) {
        while self.lines.try_recv().is_ok() {}
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// API server in process, the proxier watching it with its default periods, and timed changes.
async fn end_to_end(backend: Backend, args: ProxyArgs) -> anyhow::Result<()> {
    let n = args.change_services;
    let server = testkit::InProcess::start(testkit::Backend::Sqlite).await?;
    let client = server.client();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))?,
        )
        .await?;
    let services: Api<Service> = Api::namespaced(client.clone(), NAMESPACE);
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), NAMESPACE);

    let started = Instant::now();
    futures::stream::iter(0..n)
        .map(|i| {
            let (services, slices) = (services.clone(), slices.clone());
            async move {
                services
                    .create(&PostParams::default(), &service(i, None))
                    .await?;
                let ips: Vec<String> = (0..args.endpoints).map(|e| endpoint_ip(i, e)).collect();
                slices
                    .create(&PostParams::default(), &slice(i, &ips))
                    .await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await?;
    println!(
        "end to end: {n} Services with {} endpoints each created in the in-process API server in {:.1} s",
        args.endpoints,
        started.elapsed().as_secs_f64()
    );

    // Started while the tables are empty: `nft monitor` first lists everything there is.
    let mut monitor = match backend {
        Backend::Iptables(_) => Monitor::start(&["monitor", "rules"])?,
        Backend::Nftables(_) => Monitor::start(&["monitor"])?,
    };
    let periods = Periods::default();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let caches = Caches::from_informers(&minik8s_informers::Informers::new(client.clone()));
    let stopped = async {
        let _ = stopped.await;
    };
    use minik8s_proxy::metrics::{Mode, ProxyMetrics};
    let metrics = |mode| std::sync::Arc::new(ProxyMetrics::new(mode, 2 * periods.max));
    let proxier = match &backend {
        Backend::Iptables(ipt) => tokio::spawn(minik8s_proxy::iptables::run(
            caches,
            config(),
            ipt.clone(),
            periods,
            metrics(Mode::Iptables),
            stopped,
        )),
        Backend::Nftables(nft) => tokio::spawn(nftables::run(
            caches,
            config(),
            nft.clone(),
            periods,
            metrics(Mode::Nftables),
            stopped,
        )),
    };
    let started = Instant::now();
    let last = endpoint_ip(n - 1, args.endpoints - 1);
    // The first sync is a full one (some 40 s with iptables-nft at 10,000 Services), too big a
    // batch for `nft monitor` to report every rule of: its last rule is looked for in a listing.
    let listed = || -> anyhow::Result<String> {
        Ok(match &backend {
            Backend::Iptables(ipt) => ipt.save("nat")?,
            Backend::Nftables(nft) => {
                nft.list(&["list", "table", "ip", nftables::render::TABLE])?
            }
        })
    };
    let (first_rule, deadline) = (
        [
            format!("--to-destination {last}:8080"),
            format!("dnat to {last}:8080"),
        ],
        Instant::now() + Duration::from_secs(300),
    );
    while !first_rule
        .iter()
        .any(|r| listed().is_ok_and(|l| l.contains(r.as_str())))
    {
        if Instant::now() > deadline {
            bail!("the first sync did not put {last}'s rule in the kernel within 300 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!(
        "end to end: proxier started, caches filled and first full sync in the kernel after {:.1} s",
        started.elapsed().as_secs_f64()
    );
    // Let the first sync finish its jump checks and the runner reach its idle state.
    tokio::time::sleep(periods.min + Duration::from_millis(200)).await;
    monitor.drain();

    let pace = periods.min + Duration::from_millis(200);
    let mut added = Samples::with_capacity(args.changes);
    let mut created = Samples::with_capacity(args.changes);
    let mut first = Samples::with_capacity(args.changes);
    for k in 0..args.changes {
        // One more endpoint for an existing Service: its KUBE-SVC chain and a new KUBE-SEP.
        let i = (k * 7919) % n;
        let mut ips: Vec<String> = (0..args.endpoints).map(|e| endpoint_ip(i, e)).collect();
        let new = format!("10.100.{}.{}", k >> 8, k & 255);
        ips.push(new.clone());
        let patch = json!({"endpoints": slice(i, &ips).endpoints});
        let t0 = Instant::now();
        slices
            .patch(
                &format!("svc-{i}-1"),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
        added.push(monitor.added(&[&format!("dnat to {new}:8080")]).await? - t0);
        tokio::time::sleep(pace).await;
        monitor.drain();

        // A new Service without endpoints: its REJECT rule in filter/KUBE-SERVICES.
        let j = n + k;
        let t0 = Instant::now();
        let svc = services
            .create(&PostParams::default(), &service(j, None))
            .await?;
        let ip = svc
            .spec
            .and_then(|s| s.cluster_ip)
            .context("no cluster IP allocated")?;
        let needles = match backend {
            Backend::Iptables(_) => [format!("ip daddr {ip} "), "reject".to_string()],
            Backend::Nftables(_) => [format!("{ip} . tcp . 80 "), "reject-chain".to_string()],
        };
        let needles: Vec<&str> = needles.iter().map(String::as_str).collect();
        created.push(monitor.added(&needles).await? - t0);
        tokio::time::sleep(pace).await;
        monitor.drain();

        // Its first endpoints: nat/KUBE-SERVICES (10,000 rules) is rewritten with its jump.
        let ips: Vec<String> = (0..args.endpoints).map(|e| endpoint_ip(j, e)).collect();
        let t0 = Instant::now();
        slices
            .create(&PostParams::default(), &slice(j, &ips))
            .await?;
        first.push(
            monitor
                .added(&[&format!("dnat to {}:8080", ips[0])])
                .await?
                - t0,
        );
        tokio::time::sleep(pace).await;
        monitor.drain();
    }
    let _ = stop.send(());
    proxier.await??;
    match &backend {
        Backend::Iptables(ipt) => apply::cleanup(ipt.as_ref())?,
        Backend::Nftables(nft) => nftables::apply::cleanup(nft.as_ref())?,
    }

    println!();
    println!(
        "| one change with {n} Services, API write to rule in the kernel (nft monitor) | p50 (ms) | p99 (ms) | max (ms) | samples |"
    );
    println!("|---|---|---|---|---|");
    let kinds = match backend {
        Backend::Iptables(_) => [
            "endpoint added to a Service (2 chains rewritten)",
            "Service created, no endpoints yet (filter KUBE-SERVICES rewritten)",
            "first endpoints of a new Service (nat KUBE-SERVICES rewritten)",
        ],
        Backend::Nftables(_) => [
            "endpoint added to a Service (1 chain refilled, 1 hairpin element)",
            "Service created, no endpoints yet (1 no-endpoint-services element)",
            "first endpoints of a new Service (chains added, map elements swapped)",
        ],
    };
    for (what, s) in kinds.into_iter().zip([&added, &created, &first]) {
        println!(
            "| {what} | {:.0} | {:.0} | {:.0} | {} |",
            s.p50(),
            s.p99(),
            s.max_ms(),
            s.len()
        );
    }
    println!(
        "changes {} ms apart (the proxier's min sync period is {} ms, burst {}); sync period {} s (only changes; a full sync once per hour); targets: full sync of 10k Services <= 1500 ms, one change <= 100 ms",
        pace.as_millis(),
        periods.min.as_millis(),
        minik8s_proxy::iptables::runner::BURST_SYNCS,
        periods.max.as_secs()
    );
    Ok(())
}
