//! One binary for every minik8s component. `server` runs the control plane on this machine
//! (the API server, the controller-manager, the scheduler and the node agent). `image`
//! builds and imports container images without a registry.

mod agent;
mod bootstrap;
mod control;
mod device_plugin;
mod net;
mod node;
mod prometheus_sd;
mod routes;
mod token;

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use minik8s_apiserver::handlers::resource::ServeOptions;

/// jemalloc instead of glibc's malloc: the API server allocates and frees a great deal per
/// request (JSON, managed fields), and under a storm of writes glibc's allocator was about a
/// fifth of the server's CPU.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser)]
#[command(
    name = "minik8s",
    version,
    about = "A small Kubernetes-compatible cluster"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the control plane of an all-in-one cluster.
    Server(ServerArgs),
    /// Run the API server alone.
    Apiserver(ServerArgs),
    /// Run the controllers against an API server.
    ControllerManager {
        #[command(flatten)]
        client: control::ClientArgs,
        #[command(flatten)]
        args: control::ControllerManagerArgs,
        #[command(flatten)]
        serving: control::SecureServingArgs,
    },
    /// Run knative-lite's controllers (Knative Serving's API) against an API server.
    Knative {
        #[command(flatten)]
        client: control::ClientArgs,
        /// Take the `knative-serving-controller` Lease before acting.
        #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
        leader_elect: bool,
    },
    /// Assign pending pods to nodes.
    Scheduler {
        #[command(flatten)]
        client: control::ClientArgs,
        /// Take the `kube-scheduler` Lease before acting.
        #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
        leader_elect: bool,
        #[command(flatten)]
        args: control::SchedulerArgs,
        #[command(flatten)]
        serving: control::SecureServingArgs,
    },
    /// Program this node's iptables for Services (kube-proxy, iptables mode).
    Proxy(net::ProxyArgs),
    /// Answer cluster DNS names (`<service>.<namespace>.svc.cluster.local`).
    Dns(net::DnsArgs),
    /// Serve Ingresses of the `minik8s` class as an HTTP reverse proxy.
    Ingress(net::IngressArgs),
    /// Run one worker node (containerd, kubelet, proxier, route agent) against a cluster.
    Node(node::NodeArgs),
    /// Register fake nodes that run their pods without containers (like kubemark or kwok).
    HollowNodes(control::HollowArgs),
    /// Stop every pod this machine runs and remove what the node left behind.
    Teardown(TeardownArgs),
    /// Build and import container images without a registry.
    #[command(subcommand)]
    Image(ImageCommand),
    /// Manage bootstrap tokens, with which nodes join (as `kubeadm token`).
    #[command(subcommand)]
    Token(token::TokenCommand),
    /// Run a device plugin that registers with this machine's kubelet.
    #[command(subcommand)]
    DevicePlugin(device_plugin::DevicePluginCommand),
    /// Serve Prometheus's Kubernetes service discovery over HTTP SD (for a Prometheus built
    /// without `kubernetes_sd_configs`, as Debian's is).
    PrometheusSd(prometheus_sd::Args),
}

#[derive(Args)]
struct TeardownArgs {
    #[arg(long, env = "MINIK8S_DATA_DIR", default_value = "/var/lib/minik8s")]
    data_dir: PathBuf,
    #[arg(long, default_value = "cni0")]
    bridge: String,
    #[arg(long, default_value = "/kubepods")]
    cgroup_root: String,
}

#[derive(Subcommand)]
enum ImageCommand {
    /// Build OCI image layout tarballs (`<name>.tar`) from files on this machine.
    Build(ImageBuildArgs),
    /// Import every `*.tar` OCI layout in a directory into containerd (as `ctr images import`).
    Import(ImageImportArgs),
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ImageName {
    Pause,
    Busybox,
    Python,
    Prometheus,
    All,
}

#[derive(Args)]
struct ImageBuildArgs {
    /// Directory the archives are written to.
    #[arg(long, short = 'o')]
    out: PathBuf,
    /// Where downloaded Debian packages are cached [default: <out>/cache].
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// A static busybox to build the busybox image from [default: Debian 13's busybox-static,
    /// fetched with apt into the cache directory].
    #[arg(long)]
    busybox: Option<PathBuf>,
    /// The Debian mirror Debian 13's packages come from.
    #[arg(long, default_value = minik8s_kubelet::images::apt::DEFAULT_MIRROR)]
    debian_mirror: String,
    /// The Prometheus the prometheus image carries, with the libraries it loads.
    #[arg(long, default_value = minik8s_kubelet::images::prometheus::PROMETHEUS_BINARY)]
    prometheus: PathBuf,
    /// The images to build.
    #[arg(value_enum, default_value = "all")]
    images: Vec<ImageName>,
}

#[derive(Args)]
struct ImageImportArgs {
    /// containerd's gRPC socket.
    #[arg(long, short = 'a', default_value = "/run/containerd/containerd.sock")]
    address: PathBuf,
    /// containerd namespace.
    #[arg(long, short = 'n', default_value = minik8s_kubelet::images::import::CRI_NAMESPACE)]
    namespace: String,
    /// Snapshotter to unpack the layers into.
    #[arg(long, default_value = "overlayfs")]
    snapshotter: String,
    /// Directory of `*.tar` OCI layouts (or one archive).
    path: PathBuf,
}

/// Flags named as kube-apiserver names them.
#[derive(Args, Clone)]
struct ServerArgs {
    /// Where the store, certificates and admin kubeconfig live.
    #[arg(long, env = "MINIK8S_DATA_DIR", default_value = "/var/lib/minik8s")]
    data_dir: PathBuf,
    #[arg(long, default_value = "0.0.0.0")]
    bind_address: IpAddr,
    #[arg(long, default_value_t = 6443)]
    secure_port: u16,
    #[arg(long)]
    advertise_address: Option<IpAddr>,
    /// Which addresses the `kubernetes` Service's endpoints list: `lease` (every live API
    /// server, each keeping a lease in storage), `master-count` (`--apiserver-count` of them)
    /// or `none`.
    #[arg(long, default_value = "lease")]
    endpoint_reconciler_type:
        minik8s_apiserver::registry::services::endpoint_reconciler::ReconcilerType,
    /// How many API servers run, for `--endpoint-reconciler-type=master-count`.
    #[arg(long, default_value_t = 1)]
    apiserver_count: usize,
    /// etcd endpoints (comma separated); without them the embedded store is used.
    #[arg(long, value_delimiter = ',')]
    etcd_servers: Vec<String>,
    /// CSV of `token,user,uid,"group1,group2"` for bearer-token authentication.
    #[arg(long)]
    token_auth_file: Option<PathBuf>,
    /// Bearer tokens `<id>.<secret>` of `bootstrap.kubernetes.io/token` Secrets in kube-system
    /// authenticate as `system:bootstrap:<id>` (how `minik8s node --token` joins). On by
    /// default here; kube-apiserver's default is off.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    enable_bootstrap_token_auth: bool,
    /// An `audit.k8s.io/v1` Policy: which requests are written to the audit log, and how much
    /// of each. Without it nothing is audited.
    #[arg(long)]
    audit_policy_file: Option<PathBuf>,
    /// Where audit events go, one JSON line each; `-` is standard output.
    #[arg(long)]
    audit_log_path: Option<String>,
    /// Days to keep rotated audit logs (0: no limit).
    #[arg(long, default_value_t = 0)]
    audit_log_maxage: u64,
    /// Rotated audit logs to keep (0: no limit).
    #[arg(long, default_value_t = 0)]
    audit_log_maxbackup: usize,
    /// Megabytes an audit log grows to before it is rotated (0: 100).
    #[arg(long, default_value_t = 0)]
    audit_log_maxsize: u64,
    /// An `apiserver.config.k8s.io/v1` EncryptionConfiguration: the resources encrypted at
    /// rest and their keys (see docs/security.md for key rotation).
    #[arg(long)]
    encryption_provider_config: Option<PathBuf>,
    /// Pod-bound tokens asked for 3607 s (the ServiceAccount admission's projection) live a
    /// year, with a `warnafter` claim at the hour.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    service_account_extend_token_expiration: bool,
    /// The `iss` of ServiceAccount tokens and the issuer discovery names (an https URL for
    /// discovery to be served). Repeatable: the first issues, all are accepted.
    #[arg(long = "service-account-issuer", default_value = minik8s_apiserver::serviceaccount::ISSUER)]
    service_account_issuer: Vec<String>,
    /// The `jwks_uri` issuer discovery announces, when relying parties read the key set
    /// somewhere other than this server's `/openid/v1/jwks`.
    #[arg(long)]
    service_account_jwks_uri: Option<String>,
    /// TokenRequests asking for longer lifetimes get this one (between 1h and 2^32 s).
    #[arg(long, value_parser = parse_duration)]
    service_account_max_token_expiration: Option<Duration>,
    #[arg(long, default_value = "10.96.0.0/12")]
    service_cluster_ip_range: String,
    /// Node ports of NodePort and LoadBalancer Services: `first-last`, both included.
    #[arg(long, default_value = "30000-32767")]
    service_node_port_range: String,
    /// How often history older than one interval is compacted away.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    etcd_compaction_interval: Duration,
    /// The authorizers, in order: Node, RBAC, AlwaysAllow, AlwaysDeny.
    #[arg(long, value_delimiter = ',', default_value = "Node,RBAC", value_parser = authorization_mode)]
    authorization_mode: Vec<minik8s_apiserver::authz::Mode>,
    /// Requests without credentials are `system:anonymous`'s (in `system:unauthenticated`),
    /// judged by the authorizers; false answers them 401.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    anonymous_auth: bool,
    /// Admission plugins to turn off (kube-apiserver's flag): ServiceAccount.
    #[arg(long, value_delimiter = ',', value_parser = admission_plugin)]
    disable_admission_plugins: Vec<String>,
    /// An AdmissionConfiguration file (kube-apiserver's flag); its PodSecurity entry sets
    /// that plugin's defaults and exemptions.
    #[arg(long)]
    admission_control_config_file: Option<PathBuf>,
    /// Watches without timeoutSeconds last between this and twice this.
    #[arg(long, default_value = "30m", value_parser = parse_duration)]
    min_request_timeout: Duration,
    /// How often idle watches get a BOOKMARK when they asked for bookmarks.
    #[arg(long, default_value = "1m", value_parser = parse_duration)]
    watch_bookmark_interval: Duration,
    #[command(flatten)]
    agent: agent::AgentArgs,
    #[command(flatten)]
    routes: routes::RouteArgs,
    /// `server` only: do not run the controller-manager in this process.
    #[arg(long)]
    disable_controller_manager: bool,
    /// `server` only: the controller-manager's HTTPS port of `/metrics` and the health
    /// paths, on `--bind-address` (0: not served).
    #[arg(long, default_value_t = minik8s_controllers::serving::CONTROLLER_MANAGER_PORT)]
    controller_manager_secure_port: u16,
    /// `server` only: the scheduler's HTTPS port of `/metrics` and the health paths, on
    /// `--bind-address` (0: not served).
    #[arg(long, default_value_t = minik8s_controllers::serving::SCHEDULER_PORT)]
    scheduler_secure_port: u16,
    #[command(flatten)]
    controller_manager: control::ControllerManagerArgs,
    /// `server` only: do not run the scheduler in this process.
    #[arg(long)]
    disable_scheduler: bool,
    /// `server` only: do not run knative-lite's controllers in this process (its CRDs are
    /// installed all the same).
    #[arg(long)]
    disable_knative: bool,
    #[command(flatten)]
    scheduler: control::SchedulerArgs,
    /// `server` only: do not program iptables for Services beside the node agent.
    #[arg(long)]
    disable_proxy: bool,
    /// `server` only: how the proxier beside the node agent programs Services (kube-proxy's
    /// flag).
    #[arg(
        long,
        value_enum,
        env = "MINIK8S_PROXY_MODE",
        default_value = "iptables"
    )]
    proxy_mode: net::ProxyMode,
    /// `server` only: where the proxier beside the node agent serves its metrics and health.
    #[command(flatten)]
    proxy_endpoints: net::ProxyEndpointArgs,
    /// `server` only: do not serve cluster DNS beside the node agent.
    #[arg(long)]
    disable_dns: bool,
    /// `server` only: where cluster DNS answers (UDP and TCP); an unspecified address means
    /// the node's address. The `kube-dns` Service's endpoints point here.
    #[arg(long, env = "MINIK8S_DNS_BIND_ADDRESS", default_value = "0.0.0.0:53")]
    dns_bind_address: std::net::SocketAddr,
    /// `server` only: cluster DNS relays other names to this file's nameservers; a file
    /// without any (e.g. /dev/null) keeps every query on the machine.
    #[arg(
        long,
        env = "MINIK8S_DNS_RESOLV_CONF",
        default_value = "/etc/resolv.conf"
    )]
    dns_resolv_conf: PathBuf,
    /// `server` only: where cluster DNS serves `/metrics`, plain HTTP, as CoreDNS's
    /// `prometheus` plugin; empty: nowhere.
    #[arg(
        long,
        env = "MINIK8S_DNS_METRICS_BIND_ADDRESS",
        default_value = net::DEFAULT_DNS_METRICS
    )]
    dns_metrics_bind_address: net::Bind,
    /// `server` only: do not serve Ingresses beside the node agent.
    #[arg(long)]
    disable_ingress: bool,
    /// `server` only: where Ingresses of the `minik8s` class are served (HTTP).
    #[arg(
        long,
        env = "MINIK8S_INGRESS_BIND_ADDRESS",
        default_value = "0.0.0.0:80"
    )]
    ingress_bind_address: std::net::SocketAddr,
}

/// A name from the server's admission plugins.
fn admission_plugin(s: &str) -> Result<String, String> {
    use minik8s_apiserver::admission::AdmissionOptions;
    if AdmissionOptions::PLUGINS.contains(&s) {
        Ok(s.to_string())
    } else {
        Err(format!(
            "admission plugin {s:?} is unknown (known: {})",
            AdmissionOptions::PLUGINS.join(", ")
        ))
    }
}

/// `300ms`, `10s`, `1m30s`, `1h`, or plain seconds.
fn authorization_mode(s: &str) -> Result<minik8s_apiserver::authz::Mode, String> {
    minik8s_apiserver::authz::Mode::parse(s)
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    minik8s_controllers::util::duration::parse_flag(s)
}

impl ServerArgs {
    fn config(&self) -> minik8s_apiserver::Config {
        let mut c = minik8s_apiserver::Config::new(&self.data_dir);
        c.bind_address = self.bind_address;
        c.secure_port = self.secure_port;
        c.advertise_address = self.advertise_address;
        c.endpoint_reconciler.kind = self.endpoint_reconciler_type;
        c.endpoint_reconciler.apiserver_count = self.apiserver_count;
        c.etcd_servers = self.etcd_servers.clone();
        c.token_auth_file = self.token_auth_file.clone();
        c.enable_bootstrap_token_auth = self.enable_bootstrap_token_auth;
        c.audit = minik8s_apiserver::audit::AuditOptions {
            policy_file: self.audit_policy_file.clone(),
            log_path: self.audit_log_path.clone(),
            log_max_age: self.audit_log_maxage,
            log_max_backup: self.audit_log_maxbackup,
            log_max_size: self.audit_log_maxsize,
        };
        c.encryption_provider_config = self.encryption_provider_config.clone();
        c.service_account_extend_token_expiration = self.service_account_extend_token_expiration;
        c.service_accounts = minik8s_apiserver::serviceaccount::Options {
            issuers: self.service_account_issuer.clone(),
            jwks_uri: self.service_account_jwks_uri.clone(),
            max_token_expiration: self.service_account_max_token_expiration,
        };
        c.service_cluster_ip_range = self.service_cluster_ip_range.clone();
        c.service_node_port_range = self.service_node_port_range.clone();
        c.compaction_interval = self.etcd_compaction_interval;
        c.crds = knative_lite::crds();
        c.local_storage = !self.agent.disable_local_storage;
        c.serve = ServeOptions {
            bookmark_interval: self.watch_bookmark_interval,
            min_request_timeout: self.min_request_timeout,
            authorization_modes: self.authorization_mode.clone(),
            anonymous_auth: Some(self.anonymous_auth),
            admission: minik8s_apiserver::admission::AdmissionOptions {
                disabled: self.disable_admission_plugins.clone(),
                ..Default::default()
            },
            ..Default::default()
        };
        c
    }
}

async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("shutting down");
}

async fn run_apiserver(args: ServerArgs, with_agent: bool) -> anyhow::Result<()> {
    let mut config = args.config();
    if let Some(path) = &args.admission_control_config_file {
        config.serve.admission.pod_security =
            minik8s_apiserver::admission::pod_security::config::load(path)
                .with_context(|| format!("admission configuration {}", path.display()))?;
    }
    let addr = std::net::SocketAddr::new(config.bind_address, config.secure_port);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    let prepared = minik8s_apiserver::prepare(config)
        .await
        .context("starting the API server")?;
    let tls = minik8s_apiserver::serve::tls_config(&prepared.pki)?;
    tokio::spawn(minik8s_apiserver::server::run_compactor(
        prepared.server.store.clone(),
        prepared.server.metrics.clone(),
        prepared.config.compaction_interval,
    ));
    tracing::info!(%addr, data_dir = %prepared.config.data_dir.display(), "serving");
    let app = minik8s_apiserver::router(prepared.server.clone());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(minik8s_apiserver::serve::serve_tls(
        listener,
        tls,
        app,
        async {
            let _ = stopped.await;
        },
    ));
    // One watch and one cache per kind for the whole process: the scheduler, the controllers,
    // the kubelet, the proxier, DNS and the Ingress proxy. Through the controller-manager's identity (every
    // authenticated user may read everything; the components write through their own).
    let informers = minik8s_informers::Informers::new(control::local_client(
        minik8s_apiserver::router(prepared.server.clone()),
        control::controller_manager_user(),
    ));
    let node = if with_agent && !args.agent.disable_agent {
        let url = format!("https://127.0.0.1:{}", prepared.config.secure_port);
        let node_ipam_here = !args.disable_controller_manager
            && args
                .controller_manager
                .options()?
                .enabled("node-ipam-controller");
        let mut agent_args = args.agent.clone();
        agent_args.pod_cidr = agent::standalone_pod_cidr(&args.agent, node_ipam_here);
        agent_args.pod_mtu = args.routes.pod_mtu(agent::node_ip(&args.agent));
        Some(
            agent::start(
                &agent_args,
                &prepared.config.data_dir,
                &agent::Identity::Pki(&prepared.pki),
                &url,
                &prepared.config.service_cluster_ip_range,
                Some(informers.clone()),
            )
            .await
            .context("starting the node agent")?,
        )
    } else {
        None
    };
    let (stop_net, net_stopped) = tokio::sync::watch::channel(false);
    let mut net_tasks = Vec::new();
    if node.is_some() {
        let client = || {
            control::local_client(
                minik8s_apiserver::router(prepared.server.clone()),
                net::proxy_user(),
            )
        };
        let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|s| *s).await;
        };
        if !args.disable_proxy {
            let config = minik8s_proxy::iptables::ProxyConfig {
                hostname: agent::node_name(&args.agent),
                cluster_cidr: Some(args.agent.cluster_cidr.clone()),
                masquerade_all: false,
            };
            net_tasks.push(net::spawn_proxier(
                &informers,
                config,
                Default::default(),
                args.proxy_mode,
                args.proxy_endpoints.endpoints(),
                stopped(net_stopped.clone()),
            ));
            net_tasks.push(net::spawn_network_policy(
                &informers,
                agent::node_name(&args.agent),
                args.proxy_mode,
                stopped(net_stopped.clone()),
            ));
        }
        if !args.routes.disable_route_agent {
            let name = agent::node_name(&args.agent);
            let client = control::local_client(
                minik8s_apiserver::router(prepared.server.clone()),
                minik8s_apiserver::auth::UserInfo {
                    name: format!("system:node:{name}"),
                    uid: String::new(),
                    groups: vec!["system:nodes".into(), "system:authenticated".into()],
                },
            );
            net_tasks.push(tokio::spawn(routes::agent(
                args.routes.clone(),
                client,
                name,
                stopped(net_stopped.clone()),
            )));
        }
        if !args.disable_dns {
            let listen = net::dns_listen_address(&args.agent, args.dns_bind_address);
            let config = net::dns_config(
                listen,
                &args.agent.cluster_domain,
                &args.dns_resolv_conf,
                args.dns_metrics_bind_address,
            );
            if let Some(want) = net::kube_dns(&args.agent, listen) {
                net_tasks.push(tokio::spawn(minik8s_proxy::dns::service::keep(
                    client(),
                    want,
                    stopped(net_stopped.clone()),
                )));
            }
            let (informers, stop) = (informers.clone(), stopped(net_stopped.clone()));
            net_tasks.push(tokio::spawn(async move {
                if let Err(e) = minik8s_proxy::dns::run(&informers, config, stop).await {
                    tracing::warn!(error = %e, "cluster DNS is not running");
                }
            }));
        }
        if !args.disable_ingress {
            // The Ingress proxy, Knative's router and the function gateway write as the
            // node's network services.
            net_tasks.push(net::spawn_ingress(
                client(),
                informers.with_client(client()),
                args.ingress_bind_address,
                agent::node_ip(&args.agent),
                stopped(net_stopped.clone()),
            ));
        }
    }
    let (stop_controllers, controllers_stopped) = tokio::sync::oneshot::channel::<()>();
    let mut options = args.controller_manager.options()?;
    if options.root_ca.is_none() {
        options.root_ca = Some(prepared.pki.ca.cert_pem.clone());
    }
    if options.signing.is_none() {
        options.signing = Some(minik8s_controllers::csrsigning::SigningOptions {
            ca_cert_pem: prepared.pki.ca.cert_pem.clone(),
            ca_key_pem: prepared.pki.ca.key_pem.clone(),
            duration: args.controller_manager.cluster_signing_duration,
        });
    }
    if args.controller_manager.use_service_account_credentials {
        let router = minik8s_apiserver::router(prepared.server.clone());
        options.credentials = Some(minik8s_controllers::manager::Credentials(
            std::sync::Arc::new(move |sa: &str| {
                control::local_client(
                    router.clone(),
                    control::service_account_user("kube-system", sa),
                )
            }),
        ));
    }
    // The node agent's --cluster-cidr is the range the node IPAM controller splits.
    options.node_ipam.cluster_cidr = args.agent.cluster_cidr.clone();
    if with_agent && !args.disable_controller_manager {
        control::serve_in_process(
            minik8s_controllers::serving::Component::ControllerManager,
            std::net::SocketAddr::new(args.bind_address, args.controller_manager_secure_port),
            &prepared.pki,
            control::local_client(
                minik8s_apiserver::router(prepared.server.clone()),
                control::controller_manager_user(),
            ),
        )
        .await?;
    }
    if with_agent && !args.disable_scheduler {
        control::serve_in_process(
            minik8s_controllers::serving::Component::Scheduler,
            std::net::SocketAddr::new(args.bind_address, args.scheduler_secure_port),
            &prepared.pki,
            control::local_client(
                minik8s_apiserver::router(prepared.server.clone()),
                control::scheduler_user(),
            ),
        )
        .await?;
    }
    let controllers = (with_agent && !args.disable_controller_manager).then(|| {
        tokio::spawn(minik8s_controllers::manager::run(
            informers.clone(),
            options,
            async {
                let _ = controllers_stopped.await;
            },
        ))
    });
    let (stop_scheduler, scheduler_stopped) = tokio::sync::oneshot::channel::<()>();
    let scheduler = (with_agent && !args.disable_scheduler).then(|| {
        let client = control::local_client(
            minik8s_apiserver::router(prepared.server.clone()),
            control::scheduler_user(),
        );
        tokio::spawn(minik8s_controllers::scheduler::run(
            informers.clone(),
            client,
            args.scheduler.options(args.controller_manager.leader_elect),
            async {
                let _ = scheduler_stopped.await;
            },
        ))
    });
    let (stop_knative, knative_stopped) = tokio::sync::oneshot::channel::<()>();
    let knative = (with_agent && !args.disable_knative).then(|| {
        // knative-lite's controllers write as their own ServiceAccount.
        let knative = informers.with_client(control::local_client(
            minik8s_apiserver::router(prepared.server.clone()),
            control::service_account_user(
                minik8s_apiserver::rbac_bootstrap::minik8s::KNATIVE_NAMESPACE,
                minik8s_apiserver::rbac_bootstrap::minik8s::KNATIVE_ACCOUNT,
            ),
        ));
        tokio::spawn(knative_lite::run_elected(
            knative,
            args.controller_manager.leader_elect,
            async {
                let _ = knative_stopped.await;
            },
        ))
    });
    shutdown_signal().await;
    prepared.server.begin_shutdown();
    // Out of the `kubernetes` endpoints first, so clients move to the other API servers.
    prepared.server.stop_endpoint_reconciler().await;
    let _ = stop_controllers.send(());
    let _ = stop_scheduler.send(());
    let _ = stop_knative.send(());
    if let Some(k) = knative {
        let _ = k.await;
    }
    if let Some(c) = controllers {
        let _ = c.await;
    }
    if let Some(s) = scheduler {
        let _ = s.await;
    }
    let _ = stop_net.send(true);
    for task in net_tasks {
        let _ = task.await;
    }
    if let Some(node) = node {
        node.stop();
    }
    let _ = stop.send(());
    serving.await??;
    Ok(())
}

fn build_images(args: ImageBuildArgs) -> anyhow::Result<()> {
    use minik8s_kubelet::images::{BuildOptions, ImageKind, build::build};
    let mut opts = BuildOptions::new(&args.out);
    if let Some(cache) = args.cache_dir {
        opts.cache_dir = cache;
    }
    opts.busybox = args.busybox;
    opts.debian_mirror = args.debian_mirror;
    opts.prometheus = args.prometheus;
    let mut kinds: Vec<ImageKind> = Vec::new();
    for name in args.images {
        let add: &[ImageKind] = match name {
            ImageName::Pause => &[ImageKind::Pause],
            ImageName::Busybox => &[ImageKind::Busybox],
            ImageName::Python => &[ImageKind::Python],
            ImageName::Prometheus => &[ImageKind::Prometheus],
            ImageName::All => &ImageKind::ALL,
        };
        for &kind in add {
            if !kinds.contains(&kind) {
                kinds.push(kind);
            }
        }
    }
    for kind in kinds {
        let built = build(kind, &opts).with_context(|| format!("building the {kind} image"))?;
        println!(
            "{}\t{}\t{}\t{} bytes\t{:.2}s",
            built.image.path.display(),
            built.image.reference,
            built.image.manifest.digest,
            built.image.archive_size,
            built.duration.as_secs_f64()
        );
    }
    Ok(())
}

async fn import_images(args: ImageImportArgs) -> anyhow::Result<()> {
    use minik8s_kubelet::images::{ImportOptions, import_archive, import_dir};
    let opts = ImportOptions {
        namespace: args.namespace,
        snapshotter: args.snapshotter,
        ..Default::default()
    };
    let imported = if args.path.is_dir() {
        import_dir(&args.address, &args.path, &opts).await?
    } else {
        import_archive(&args.address, &args.path, &opts).await?
    };
    for image in imported {
        println!(
            "{}\t{}\t{} blobs written, {} present, {} layers unpacked\t{:.3}s (write {:.3}s, unpack {:.3}s)",
            image.name,
            image.target.digest,
            image.blobs_written,
            image.blobs_present,
            image.layers_unpacked,
            image.duration.as_secs_f64(),
            image.write_time.as_secs_f64(),
            image.unpack_time.as_secs_f64()
        );
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let logs = tracing_subscriber::fmt().with_env_filter(
        tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
    );
    if matches!(cli.command, Command::Image(_) | Command::Token(_)) {
        // `image` and `token` commands print their results on stdout; logs go to stderr.
        logs.with_writer(std::io::stderr).init();
    } else {
        logs.init();
    }
    if let Command::Image(ImageCommand::Build(args)) = cli.command {
        return build_images(args);
    }
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(async {
        match cli.command {
            Command::Server(args) => run_apiserver(args, true).await,
            Command::Apiserver(args) => run_apiserver(args, false).await,
            Command::ControllerManager {
                client,
                args,
                serving,
            } => control::run_controller_manager(client, args, serving).await,
            Command::Scheduler {
                client,
                leader_elect,
                args,
                serving,
            } => control::run_scheduler(client, leader_elect, args, serving).await,
            Command::Knative {
                client,
                leader_elect,
            } => control::run_knative(client, leader_elect).await,
            Command::HollowNodes(args) => control::run_hollow(args).await,
            Command::Node(args) => node::run(args).await,
            Command::Proxy(args) => net::run_proxy(args).await,
            Command::Dns(args) => net::run_dns(args).await,
            Command::Ingress(args) => net::run_ingress(args).await,
            Command::Teardown(args) => {
                agent::teardown(&args.data_dir, &args.bridge, &args.cgroup_root).await
            }
            Command::Image(ImageCommand::Import(args)) => import_images(args).await,
            Command::Image(ImageCommand::Build(_)) => unreachable!("handled above"),
            Command::Token(command) => token::run(command).await,
            Command::PrometheusSd(args) => prometheus_sd::run(args).await,
            Command::DevicePlugin(command) => device_plugin::run(command).await,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secure_ports_of_the_controller_manager_and_the_scheduler() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
        let parse = |args: &[&str]| Cli::try_parse_from(args).expect("flags parse").command;
        match parse(&["minik8s", "scheduler", "--secure-port", "0"]) {
            Command::Scheduler { serving, .. } => {
                assert_eq!(serving.secure_port, Some(0));
                assert!(serving.bind_address.is_unspecified());
                assert_eq!(
                    serving.authorization_always_allow_paths,
                    ["/healthz", "/readyz", "/livez"]
                );
            }
            _ => unreachable!("a scheduler command"),
        }
        match parse(&[
            "minik8s",
            "controller-manager",
            "--bind-address=127.0.0.1",
            "--tls-cert-file=c.pem",
            "--tls-private-key-file=k.pem",
        ]) {
            Command::ControllerManager { serving, .. } => {
                assert_eq!(serving.secure_port, None);
                assert_eq!(serving.tls_cert_file, Some(PathBuf::from("c.pem")));
            }
            _ => unreachable!("a controller-manager command"),
        }
        // A certificate needs its key.
        assert!(Cli::try_parse_from(["minik8s", "scheduler", "--tls-cert-file=c.pem"]).is_err());
        match parse(&["minik8s", "server", "--scheduler-secure-port=0"]) {
            Command::Server(args) => {
                assert_eq!(args.scheduler_secure_port, 0);
                assert_eq!(args.controller_manager_secure_port, 10257);
            }
            _ => unreachable!("a server command"),
        }
    }

    fn server(args: &[&str]) -> minik8s_apiserver::Config {
        let argv = ["minik8s", "server"].iter().chain(args);
        match Cli::try_parse_from(argv).expect("flags parse").command {
            Command::Server(args) => args.config(),
            _ => unreachable!("a server command"),
        }
    }

    #[test]
    fn bootstrap_tokens_are_accepted_unless_turned_off() {
        assert!(server(&[]).enable_bootstrap_token_auth);
        assert!(!server(&["--enable-bootstrap-token-auth=false"]).enable_bootstrap_token_auth);
    }

    #[test]
    fn service_account_flags_as_kube_apiservers() {
        let c = server(&[]);
        assert_eq!(
            c.service_accounts,
            minik8s_apiserver::serviceaccount::Options::default()
        );
        let c = server(&[
            "--service-account-issuer=https://new.example",
            "--service-account-issuer",
            "https://kubernetes.default.svc.cluster.local",
            "--service-account-jwks-uri=https://keys.example/jwks",
            "--service-account-max-token-expiration=48h",
        ]);
        assert_eq!(
            c.service_accounts.issuers,
            [
                "https://new.example",
                "https://kubernetes.default.svc.cluster.local"
            ]
        );
        assert_eq!(
            c.service_accounts.jwks_uri.as_deref(),
            Some("https://keys.example/jwks")
        );
        assert_eq!(
            c.service_accounts.max_token_expiration,
            Some(Duration::from_secs(48 * 3600))
        );
    }
}
