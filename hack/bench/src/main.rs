//! Benchmarks of minik8s. They print figures; they never pass or fail on them.
//!
//! `minik8s-bench api` starts a fresh server process per storage backend and measures idle
//! memory, durable create throughput, GET and LIST latency and watch delivery latency;
//! `watchers` puts many watches of pods on one server while the pods churn.

mod api;
mod authz;
mod functions;
mod h2;
mod hpa;
mod pods;
mod proc;
mod proxy;
mod scale;
mod scraping;
mod stats;
mod storage;
mod watchers;
mod workflows;

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(
    name = "minik8s-bench",
    about = "Benchmarks of minik8s (figures, never pass/fail)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// API server: memory, create throughput, GET/LIST latency, watch delivery latency.
    Api(ApiArgs),
    /// What authorization costs: creates and GETs by a ServiceAccount-token client with
    /// `--authorization-mode=AlwaysAllow` against `Node,RBAC`.
    Authz(authz::AuthzArgs),
    /// What monitoring costs the API: creates/s of a server left alone against one whose
    /// `/metrics` is scraped every 5 s.
    Metrics(scraping::MetricsArgs),
    /// Pod startup latency on one node (create to Running, through a watch).
    Pods(pods::PodsArgs),
    /// Control-plane scale with hollow nodes: scheduling rate, time to Running, API latency, RSS.
    Scale(scale::ScaleArgs),
    /// The iptables proxier at 1k and 10k Services in a network namespace: full sync, one change.
    Proxy(proxy::ProxyArgs),
    /// Many concurrent pod watches while pods churn: memory per watcher, delivery latency.
    Watchers(watchers::WatchersArgs),
    /// knative-lite on a running cluster: cold starts, the router's added latency and
    /// throughput, a step of load with errors counted, time back to zero.
    Functions(functions::FunctionsArgs),
    /// The HorizontalPodAutoscaler: a load step on the running cluster (first rescale, final
    /// count, back to minReplicas) and the controller's CPU per sync at 1,000 HPAs.
    Hpa(hpa::HpaArgs),
    /// Storage on the running cluster: claim to Bound with the local-path provisioner against
    /// static volumes, and a StatefulSet to all Ready (OrderedReady, Parallel) against a
    /// Deployment.
    Storage(storage::StorageArgs),
    /// Workflows on the running cluster: a 10-Task chain against the same calls made
    /// directly (per-transition overhead), and 100 runs at once (throughput, none lost or
    /// repeated).
    Workflows(workflows::WorkflowsArgs),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackendChoice {
    Sqlite,
    Etcd,
    Both,
}

#[derive(clap::Args, Clone, Debug)]
pub struct ApiArgs {
    /// The minik8s binary (default: `minik8s` next to this binary).
    #[arg(long)]
    server_bin: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "both")]
    backend: BackendChoice,
    /// Sequential creates with one client.
    #[arg(long, default_value_t = 2_000)]
    creates_single: usize,
    /// Creates in total with `--clients` concurrent clients (spread over two namespaces, so
    /// each of them ends up with half; the LIST phase reads one of them).
    #[arg(long, default_value_t = 20_000)]
    creates_concurrent: usize,
    /// Concurrent clients of the concurrent create phase.
    #[arg(long, default_value_t = 64)]
    clients: usize,
    /// HTTP/2 connections the raw client spreads its concurrent clients over.
    #[arg(long, default_value_t = 1)]
    h2_connections: usize,
    /// GETs of existing objects, one client.
    #[arg(long, default_value_t = 5_000)]
    gets: usize,
    /// Timed full LISTs of one namespace (after one untimed warm-up).
    #[arg(long, default_value_t = 10)]
    list_runs: usize,
    /// Concurrent watchers of one namespace.
    #[arg(long, default_value_t = 100)]
    watchers: usize,
    /// Creates whose delivery to every watcher is timed.
    #[arg(long, default_value_t = 200)]
    watch_creates: usize,
    /// Pause between the timed creates of the watch phase, in milliseconds.
    #[arg(long, default_value_t = 10)]
    watch_interval_ms: u64,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        match cli.command {
            Command::Api(args) => api::run(args).await,
            Command::Authz(args) => authz::run(args).await,
            Command::Metrics(args) => scraping::run(args).await,
            Command::Pods(args) => pods::run(args).await,
            Command::Scale(args) => scale::run(args).await,
            Command::Proxy(args) => proxy::run(args).await,
            Command::Watchers(args) => watchers::run(args).await,
            Command::Functions(args) => functions::run(args).await,
            Command::Hpa(args) => hpa::run(args).await,
            Command::Storage(args) => storage::run(args).await,
            Command::Workflows(args) => workflows::run(args).await,
        }
    })
}
