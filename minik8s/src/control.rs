//! The control loops as commands: `controller-manager`, `scheduler` and `hollow-nodes` run
//! against any API server through a kubeconfig; `server` runs the controller-manager and the
//! scheduler in its own process through in-process clients that need no socket.
//!
//! `hollow-nodes` comes in two morphs, named after kubemark's `--morph`: `light` (one loop
//! plays every node and pod, cheapest) and `kubelet` (one real kubelet per node on a fake
//! runtime, as kubemark: the requests and the code paths of real nodes).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use minik8s_apiserver::auth::{ClientCertIdentity, UserInfo};
use minik8s_controllers::clientbuilder::{DynamicClientBuilder, TokenOptions};
use minik8s_controllers::csrsigning::SigningOptions;
use minik8s_controllers::hollow::HollowConfig;
use minik8s_controllers::manager::ControllerManagerOptions;
use minik8s_controllers::podautoscaler::{CalculatorConfig, HpaOptions};
use minik8s_controllers::scheduler::{SchedulerOptions, ScoringStrategy};
use minik8s_controllers::serving::{self, Component};
use tower::ServiceExt;

/// Flags of the controller-manager, named after kube-controller-manager's.
#[derive(Args, Clone, Debug)]
pub struct ControllerManagerArgs {
    /// Controllers to run: `*` for all, `-name` to leave one out.
    #[arg(long, value_delimiter = ',', default_value = "*")]
    pub controllers: Vec<String>,
    /// Take the `kube-controller-manager` Lease before acting.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// Each controller writes as its own ServiceAccount in kube-system (upstream's
    /// `system:controller:<name>` roles say what each may do); false: all as the manager.
    /// `controller-manager` creates the accounts it lacks and authenticates each controller
    /// with TokenRequest tokens renewed before they expire, keeping only the kubeconfig's
    /// server and CA for them; `server` gives its in-process controllers their identities.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub use_service_account_credentials: bool,
    /// The CA bundle published in every namespace as the `kube-root-ca.crt` ConfigMap
    /// (`server` publishes its own CA without it).
    #[arg(long)]
    pub root_ca_file: Option<PathBuf>,
    /// The PEM CA certificate that signs the certificates of approved CSRs for the built-in
    /// signers (`server` signs with its own CA without it).
    #[arg(long)]
    pub cluster_signing_cert_file: Option<PathBuf>,
    /// The PEM private key of `--cluster-signing-cert-file`.
    #[arg(long)]
    pub cluster_signing_key_file: Option<PathBuf>,
    /// The longest a signed certificate lasts (a CSR's expirationSeconds may ask for less).
    #[arg(long, default_value = "8760h0m0s", value_parser = parse_duration)]
    pub cluster_signing_duration: Duration,
    /// How often each HorizontalPodAutoscaler is synced.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    pub horizontal_pod_autoscaler_sync_period: Duration,
    /// The ratio of usage to target within which the HPA does not scale.
    #[arg(long, default_value_t = 0.1)]
    pub horizontal_pod_autoscaler_tolerance: f64,
    /// How far back the HPA looks for a higher recommendation before scaling down (HPAs
    /// without a behavior).
    #[arg(long, default_value = "5m0s", value_parser = parse_duration)]
    pub horizontal_pod_autoscaler_downscale_stabilization: Duration,
    /// How long after a pod starts its CPU samples may be skipped.
    #[arg(long, default_value = "5m0s", value_parser = parse_duration)]
    pub horizontal_pod_autoscaler_cpu_initialization_period: Duration,
    /// How long after a pod starts its readiness changes count as initial readiness.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub horizontal_pod_autoscaler_initial_readiness_delay: Duration,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    minik8s_controllers::util::duration::parse_flag(s)
}

impl ControllerManagerArgs {
    pub fn options(&self) -> anyhow::Result<ControllerManagerOptions> {
        let root_ca = match &self.root_ca_file {
            Some(path) => Some(
                std::fs::read_to_string(path)
                    .with_context(|| format!("--root-ca-file: reading {}", path.display()))?,
            ),
            None => None,
        };
        let read = |path: &PathBuf, flag: &str| {
            std::fs::read_to_string(path)
                .with_context(|| format!("--{flag}: reading {}", path.display()))
        };
        let signing = match (
            &self.cluster_signing_cert_file,
            &self.cluster_signing_key_file,
        ) {
            (Some(cert), Some(key)) => Some(SigningOptions {
                ca_cert_pem: read(cert, "cluster-signing-cert-file")?,
                ca_key_pem: read(key, "cluster-signing-key-file")?,
                duration: self.cluster_signing_duration,
            }),
            (None, None) => None,
            _ => anyhow::bail!(
                "--cluster-signing-cert-file and --cluster-signing-key-file go together"
            ),
        };
        Ok(ControllerManagerOptions {
            signing,
            controllers: self.controllers.clone(),
            leader_elect: self.leader_elect,
            root_ca,
            hpa: HpaOptions {
                sync_period: self.horizontal_pod_autoscaler_sync_period,
                calculator: CalculatorConfig {
                    tolerance: self.horizontal_pod_autoscaler_tolerance,
                    cpu_initialization_period: self
                        .horizontal_pod_autoscaler_cpu_initialization_period,
                    delay_of_initial_readiness_status: self
                        .horizontal_pod_autoscaler_initial_readiness_delay,
                },
                downscale_stabilization: self.horizontal_pod_autoscaler_downscale_stabilization,
            },
            ..Default::default()
        })
    }
}

/// Flags of a standalone component's secure port (`/metrics`, `/healthz`), named after
/// upstream's.
#[derive(Args, Clone, Debug)]
pub struct SecureServingArgs {
    /// The HTTPS port of `/metrics` and the health paths (0: not served) [default: 10257
    /// for the controller-manager, 10259 for the scheduler].
    #[arg(long)]
    pub secure_port: Option<u16>,
    /// The address the secure port listens on.
    #[arg(long, default_value = "0.0.0.0")]
    pub bind_address: std::net::IpAddr,
    /// The PEM serving certificate [default: a self-signed one made at start].
    #[arg(long, requires = "tls_private_key_file")]
    pub tls_cert_file: Option<PathBuf>,
    /// The PEM key of `--tls-cert-file`.
    #[arg(long, requires = "tls_cert_file")]
    pub tls_private_key_file: Option<PathBuf>,
    /// The CA whose client certificates authenticate [default: the `client-ca-file` of
    /// kube-system/extension-apiserver-authentication].
    #[arg(long)]
    pub client_ca_file: Option<PathBuf>,
    /// Paths served without asking the API server (a trailing `*` matches the rest).
    #[arg(long, value_delimiter = ',', default_value = "/healthz,/readyz,/livez")]
    pub authorization_always_allow_paths: Vec<String>,
}

impl SecureServingArgs {
    /// Serves `component`'s secure port until the process ends, judging requests through
    /// `client` (the component's own); nothing when the port is 0.
    pub async fn start(&self, component: Component, client: &kube::Client) -> anyhow::Result<()> {
        let port = self.secure_port.unwrap_or(match component {
            Component::ControllerManager => serving::CONTROLLER_MANAGER_PORT,
            Component::Scheduler => serving::SCHEDULER_PORT,
        });
        if port == 0 {
            return Ok(());
        }
        let cert = match (&self.tls_cert_file, &self.tls_private_key_file) {
            (Some(cert), Some(key)) => serving::CertKey {
                cert_pem: std::fs::read_to_string(cert)
                    .with_context(|| format!("--tls-cert-file: reading {}", cert.display()))?,
                key_pem: std::fs::read_to_string(key).with_context(|| {
                    format!("--tls-private-key-file: reading {}", key.display())
                })?,
            },
            _ => serving::self_signed(self.bind_address)?,
        };
        let client_ca = match &self.client_ca_file {
            Some(path) => Some(
                std::fs::read_to_string(path)
                    .with_context(|| format!("--client-ca-file: reading {}", path.display()))?,
            ),
            None => serving::cluster_client_ca(client).await,
        };
        let tls = serving::tls_config(&cert, client_ca.as_deref())?;
        let options = serving::AuthOptions {
            always_allow_paths: self.authorization_always_allow_paths.clone(),
            ..Default::default()
        };
        let address = std::net::SocketAddr::new(self.bind_address, port);
        serving::start(
            component,
            address,
            tls,
            client.clone(),
            options,
            std::future::pending(),
        )
        .await
        .with_context(|| format!("binding the secure port {address}"))?;
        Ok(())
    }
}

/// Serves the secure port of `component` in an all-in-one server: a certificate of the
/// cluster CA, client certificates of the cluster CA, requests judged through `client`. A
/// port already taken (another server on this machine) is left out with an error logged.
pub async fn serve_in_process(
    component: Component,
    address: std::net::SocketAddr,
    pki: &minik8s_apiserver::pki::Pki,
    client: kube::Client,
) -> anyhow::Result<()> {
    if address.port() == 0 {
        return Ok(());
    }
    let mut names = minik8s_apiserver::pki::ServingNames {
        dns: vec!["localhost".into()],
        ips: vec![std::net::IpAddr::from([127, 0, 0, 1])],
    };
    let host = minik8s_apiserver::server::hostname();
    if !host.is_empty() && host != "localhost" {
        names.dns.push(host);
    }
    for ip in minik8s_apiserver::server::local_addresses()
        .into_iter()
        .chain((!address.ip().is_unspecified()).then_some(address.ip()))
    {
        if !names.ips.contains(&ip) {
            names.ips.push(ip);
        }
    }
    let issued = pki.issue(component.name(), &[], &names, true)?;
    let cert = serving::CertKey {
        cert_pem: issued.cert_pem,
        key_pem: issued.key_pem,
    };
    let tls = serving::tls_config(&cert, Some(&pki.ca.cert_pem))?;
    if let Err(e) = serving::start(
        component,
        address,
        tls,
        client,
        serving::AuthOptions::default(),
        std::future::pending(),
    )
    .await
    {
        tracing::error!(component = component.name(), %address, error = %e, "the secure port is not served");
    }
    Ok(())
}

/// Flags of the scheduler that `server` shares.
#[derive(Args, Clone, Debug)]
pub struct SchedulerArgs {
    /// How feasible nodes are ranked: LeastAllocated, MostAllocated, BalancedAllocation,
    /// RoundRobin, Random, LeastPods, or by the nodes' measured use (metrics.k8s.io):
    /// LeastCpu or LeastMem.
    #[arg(long, default_value = "LeastAllocated")]
    pub scoring_strategy: ScoringStrategy,
    /// How long a pod's binding waits for its PersistentVolumeClaims to be bound or
    /// provisioned (kube-scheduler's VolumeBinding `bindTimeoutSeconds`).
    #[arg(long, default_value_t = 600)]
    pub bind_timeout_seconds: u64,
}

impl SchedulerArgs {
    pub fn options(&self, leader_elect: bool) -> SchedulerOptions {
        SchedulerOptions {
            scoring_strategy: self.scoring_strategy,
            leader_elect,
            bind_timeout: std::time::Duration::from_secs(self.bind_timeout_seconds),
        }
    }
}

/// Where a standalone component finds the API server.
#[derive(Args, Clone, Debug)]
pub struct ClientArgs {
    /// Path to a kubeconfig [default: $KUBECONFIG, ~/.kube/config, or in-cluster].
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
}

impl ClientArgs {
    pub async fn config(&self) -> anyhow::Result<kube::Config> {
        Ok(match &self.kubeconfig {
            Some(path) => {
                let kubeconfig = kube::config::Kubeconfig::read_from(path)
                    .with_context(|| format!("reading {}", path.display()))?;
                kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?
            }
            None => kube::Config::infer().await?,
        })
    }

    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        Ok(kube::Client::try_from(self.config().await?)?)
    }
}

#[derive(Args, Clone, Debug)]
pub struct HollowArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    /// How many nodes to register.
    #[arg(long, default_value_t = 3)]
    pub count: usize,
    /// Node names are `<prefix><index>`.
    #[arg(long, default_value = "hollow-node-")]
    pub prefix: String,
    #[arg(long, default_value = "4")]
    pub cpu: String,
    #[arg(long, default_value = "16Gi")]
    pub memory: String,
    #[arg(long, default_value_t = 110)]
    pub max_pods: u32,
    /// Extra node labels, `key=value,...`.
    #[arg(long, value_delimiter = ',')]
    pub node_labels: Vec<String>,
    /// What plays each node: `light` (one loop writes every node's lease and pods' status) or
    /// `kubelet` (the real kubelet per node on a fake runtime, as kubemark's `--morph=kubelet`).
    #[arg(long, value_enum, default_value_t = HollowMorph::Light)]
    pub morph: HollowMorph,
    /// With `--morph kubelet`: where each kubelet keeps its pods' volumes,
    /// `<root-dir>/<node>` [default: a temporary directory, removed at exit].
    #[arg(long)]
    pub root_dir: Option<PathBuf>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum HollowMorph {
    Light,
    Kubelet,
}

impl HollowArgs {
    pub fn config(&self) -> anyhow::Result<HollowConfig> {
        let mut labels = BTreeMap::new();
        for l in &self.node_labels {
            let (k, v) = l
                .split_once('=')
                .with_context(|| format!("--node-labels: {l:?} is not key=value"))?;
            labels.insert(k.to_string(), v.to_string());
        }
        Ok(HollowConfig {
            count: self.count,
            prefix: self.prefix.clone(),
            cpu: self.cpu.clone(),
            memory: self.memory.clone(),
            max_pods: self.max_pods,
            labels,
            ..Default::default()
        })
    }
}

/// A client that hands requests straight to the router as `user`: the all-in-one process's
/// own components skip TLS and sockets but still pass authentication, admission and
/// validation like any other client.
pub fn local_client(router: axum::Router, user: UserInfo) -> kube::Client {
    let service = tower::service_fn(move |mut req: http::Request<kube::client::Body>| {
        req.extensions_mut()
            .insert(ClientCertIdentity(user.clone()));
        router.clone().oneshot(req.map(axum::body::Body::new))
    });
    kube::Client::new(service, "default")
}

/// The identity upstream gives kube-controller-manager.
pub fn controller_manager_user() -> UserInfo {
    UserInfo {
        name: "system:kube-controller-manager".into(),
        uid: String::new(),
        groups: vec!["system:authenticated".into()],
    }
}

/// The identity upstream gives kube-scheduler.
/// A ServiceAccount's identity, as its token authenticates it.
pub fn service_account_user(namespace: &str, name: &str) -> UserInfo {
    UserInfo {
        name: format!("system:serviceaccount:{namespace}:{name}"),
        uid: String::new(),
        groups: vec![
            "system:serviceaccounts".into(),
            format!("system:serviceaccounts:{namespace}"),
            "system:authenticated".into(),
        ],
    }
}

pub fn scheduler_user() -> UserInfo {
    UserInfo {
        name: "system:kube-scheduler".into(),
        uid: String::new(),
        groups: vec!["system:authenticated".into()],
    }
}

pub async fn run_hollow(args: HollowArgs) -> anyhow::Result<()> {
    let client = args.client.client().await?;
    let config = args.config()?;
    if args.morph == HollowMorph::Kubelet {
        return run_hollow_kubelets(client, &args, config).await;
    }
    tokio::select! {
        r = minik8s_controllers::hollow::run(client, config) => r.context("hollow nodes")?,
        _ = crate::shutdown_signal() => {}
    }
    Ok(())
}

/// `hollow-nodes --morph kubelet`: the nodes the light morph would register (same names,
/// labels, capacity and addresses), each run by a real kubelet on a fake runtime.
async fn run_hollow_kubelets(
    client: kube::Client,
    args: &HollowArgs,
    config: HollowConfig,
) -> anyhow::Result<()> {
    use minik8s_kubelet::hollow::{self, HollowKubelets};
    let capacity = hollow::capacity(&config.cpu, &config.memory)
        .with_context(|| format!("--cpu {:?} / --memory {:?}", config.cpu, config.memory))?;
    // The temporary directory lives as long as the kubelets that use it.
    let (root_dir, _temporary) = match &args.root_dir {
        Some(dir) => (dir.clone(), None),
        None => {
            let dir = tempfile::Builder::new()
                .prefix("minik8s-hollow.")
                .tempdir()?;
            (dir.path().to_path_buf(), Some(dir))
        }
    };
    let mut labels = vec![(
        minik8s_controllers::hollow::HOLLOW_LABEL.to_string(),
        minik8s_controllers::hollow::label_value(&config),
    )];
    labels.extend(config.labels.clone());
    let kubelets = HollowKubelets {
        count: config.count,
        prefix: config.prefix.clone(),
        capacity,
        max_pods: config.max_pods,
        labels,
        root_dir,
        lease_duration_seconds: config.lease_duration_seconds,
        status_update_frequency: std::time::Duration::from_secs(10),
    };
    tokio::select! {
        r = hollow::run(client, kubelets) => r.context("hollow kubelets")?,
        _ = crate::shutdown_signal() => {}
    }
    Ok(())
}

pub async fn run_controller_manager(
    client: ClientArgs,
    args: ControllerManagerArgs,
    serving: SecureServingArgs,
) -> anyhow::Result<()> {
    let config = client.config().await?;
    let manager = kube::Client::try_from(config.clone())?;
    serving
        .start(Component::ControllerManager, &manager)
        .await?;
    let mut options = args.options()?;
    if args.use_service_account_credentials {
        let builder = DynamicClientBuilder::new(
            manager.clone(),
            &config,
            "kube-system",
            TokenOptions::default(),
        )?;
        options.credentials = Some(std::sync::Arc::new(builder).credentials());
    }
    // The shared informers and leader election use the manager's own identity.
    let informers = minik8s_controllers::informers::Informers::new(manager);
    minik8s_controllers::manager::run(informers, options, crate::shutdown_signal()).await;
    Ok(())
}

pub async fn run_knative(client: ClientArgs, leader_elect: bool) -> anyhow::Result<()> {
    let informers = minik8s_controllers::informers::Informers::new(client.client().await?);
    knative_lite::run_elected(informers, leader_elect, crate::shutdown_signal()).await;
    Ok(())
}

pub async fn run_scheduler(
    client: ClientArgs,
    leader_elect: bool,
    args: SchedulerArgs,
    serving: SecureServingArgs,
) -> anyhow::Result<()> {
    let client = client.client().await?;
    serving.start(Component::Scheduler, &client).await?;
    minik8s_controllers::scheduler::run(
        minik8s_controllers::informers::Informers::new(client.clone()),
        client,
        args.options(leader_elect),
        crate::shutdown_signal(),
    )
    .await;
    Ok(())
}
