//! Service networking as commands: `proxy` (kube-proxy, iptables or nftables mode), `dns` (cluster DNS) and
//! `ingress` (the Ingress proxy), each an ordinary API client; `server` runs the proxier and
//! DNS beside the node agent, through in-process clients. Each reads its Services and
//! EndpointSlices from the process's shared informers: its own when it runs alone, the one of
//! the whole process in `server` and `node`.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use minik8s_apiserver::auth::UserInfo;
use minik8s_informers::Informers;
use minik8s_proxy::iptables::{CommandIptables, Periods, ProxyConfig};
use minik8s_proxy::metrics::{self, ProxyMetrics};

use crate::control::ClientArgs;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ProxyMode {
    Iptables,
    Nftables,
}

/// Flags named as kube-proxy's.
#[derive(Args, Clone, Debug)]
pub struct ProxyArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    /// This node's name [default: the hostname].
    #[arg(long)]
    pub hostname_override: Option<String>,
    /// The pod range: traffic to cluster IPs from outside it is masqueraded.
    #[arg(long, default_value = "10.244.0.0/16")]
    pub cluster_cidr: String,
    /// Masquerade all traffic sent to cluster IPs.
    #[arg(long)]
    pub masquerade_all: bool,
    #[arg(long, default_value = "1s", value_parser = crate::parse_duration)]
    pub iptables_min_sync_period: Duration,
    #[arg(long, default_value = "30s", value_parser = crate::parse_duration)]
    pub iptables_sync_period: Duration,
    #[arg(
        long,
        value_enum,
        env = "MINIK8S_PROXY_MODE",
        default_value = "iptables"
    )]
    pub proxy_mode: ProxyMode,
    /// Remove every rule, chain and table the proxier and the network policy enforcement made
    /// (both modes), then exit.
    #[arg(long)]
    pub cleanup: bool,
    /// Where `/metrics` is served, plain HTTP; empty: nowhere.
    #[arg(long, default_value = DEFAULT_PROXY_METRICS)]
    pub metrics_bind_address: Bind,
    /// Where `/healthz` and `/livez` are served, plain HTTP; empty: nowhere.
    #[arg(long, default_value = DEFAULT_PROXY_HEALTHZ)]
    pub healthz_bind_address: Bind,
}

/// kube-proxy's default `--metrics-bind-address`: loopback only (in a worker node's network
/// namespace, that namespace's loopback).
pub const DEFAULT_PROXY_METRICS: &str = "127.0.0.1:10249";
/// kube-proxy's default `--healthz-bind-address`.
pub const DEFAULT_PROXY_HEALTHZ: &str = "0.0.0.0:10256";
/// CoreDNS's metrics port (`prometheus :9153`), on loopback: cluster DNS answers on the
/// node's address, its metrics need not.
pub const DEFAULT_DNS_METRICS: &str = "127.0.0.1:9153";

/// An `ip:port` to listen on, or empty for nowhere (kube-proxy's "set empty to disable").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bind(pub Option<SocketAddr>);

impl std::str::FromStr for Bind {
    type Err = std::net::AddrParseError;

    fn from_str(s: &str) -> Result<Bind, Self::Err> {
        match s.trim() {
            "" => Ok(Bind(None)),
            addr => addr.parse().map(|a| Bind(Some(a))),
        }
    }
}

/// Where the proxier beside the node agent serves its metrics and health (`server`, `node`).
#[derive(Args, Clone, Debug)]
pub struct ProxyEndpointArgs {
    /// Where the proxier serves `/metrics`, plain HTTP (kube-proxy's `--metrics-bind-address`);
    /// empty: nowhere.
    #[arg(long, env = "MINIK8S_PROXY_METRICS_BIND_ADDRESS", default_value = DEFAULT_PROXY_METRICS)]
    pub proxy_metrics_bind_address: Bind,
    /// Where the proxier serves `/healthz` and `/livez` (kube-proxy's
    /// `--healthz-bind-address`); empty: nowhere.
    #[arg(long, env = "MINIK8S_PROXY_HEALTHZ_BIND_ADDRESS", default_value = DEFAULT_PROXY_HEALTHZ)]
    pub proxy_healthz_bind_address: Bind,
}

impl ProxyEndpointArgs {
    pub fn endpoints(&self) -> ProxyEndpoints {
        ProxyEndpoints {
            metrics: self.proxy_metrics_bind_address.0,
            healthz: self.proxy_healthz_bind_address.0,
        }
    }
}

/// Where a proxier's plain-HTTP endpoints listen.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProxyEndpoints {
    pub metrics: Option<SocketAddr>,
    pub healthz: Option<SocketAddr>,
}

/// Flags of the cluster DNS server.
#[derive(Args, Clone, Debug)]
pub struct DnsArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    /// UDP and TCP address to answer on.
    #[arg(long, default_value = "0.0.0.0:53")]
    pub bind: SocketAddr,
    #[arg(long, default_value = "cluster.local")]
    pub cluster_domain: String,
    /// Other names are forwarded to this file's nameservers.
    #[arg(long, default_value = "/etc/resolv.conf")]
    pub resolv_conf: PathBuf,
    /// Where `/metrics` is served, plain HTTP, as CoreDNS's `prometheus` plugin; empty:
    /// nowhere.
    #[arg(long, default_value = DEFAULT_DNS_METRICS)]
    pub metrics_bind_address: Bind,
}

/// Flags of the Ingress proxy.
#[derive(Args, Clone, Debug)]
pub struct IngressArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    #[arg(long, default_value = "0.0.0.0:80")]
    pub bind: SocketAddr,
    /// Addresses published in the Ingresses' status [default: this machine's addresses].
    #[arg(long, value_delimiter = ',')]
    pub publish_address: Vec<IpAddr>,
}

fn hostname(name: &Option<String>) -> String {
    name.clone()
        .unwrap_or_else(|| minik8s_apiserver::server::hostname().to_lowercase())
}

/// kube-proxy sets this so NodePorts answer on 127.0.0.1.
fn enable_route_localnet() {
    if let Err(e) = std::fs::write("/proc/sys/net/ipv4/conf/all/route_localnet", "1") {
        tracing::warn!(error = %e, "cannot set net.ipv4.conf.all.route_localnet: no NodePorts on localhost");
    }
}

/// Starts the proxier in the background (the all-in-one server's node half), reading the
/// caches of `informers`.
pub fn spawn_proxier(
    informers: &Informers,
    config: ProxyConfig,
    periods: Periods,
    mode: ProxyMode,
    endpoints: ProxyEndpoints,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    enable_route_localnet();
    let caches = minik8s_proxy::cache::Caches::from_informers(informers);
    let metrics = serve_proxy_endpoints(mode, periods, endpoints);
    tokio::spawn(async move {
        if let Err(e) = run_proxier(caches, config, periods, mode, metrics, shutdown).await {
            tracing::error!(error = %e, "proxier stopped");
        }
    })
}

/// The proxier's metrics, served (with its health) where `endpoints` say, in the background.
/// As kube-proxy's, the proxier is unhealthy once a change waited twice its sync period.
fn serve_proxy_endpoints(
    mode: ProxyMode,
    periods: Periods,
    endpoints: ProxyEndpoints,
) -> Arc<ProxyMetrics> {
    let mode = match mode {
        ProxyMode::Iptables => metrics::Mode::Iptables,
        ProxyMode::Nftables => metrics::Mode::Nftables,
    };
    let proxy_metrics = Arc::new(ProxyMetrics::new(mode, 2 * periods.max));
    for (addr, which) in [
        (endpoints.metrics, metrics::Endpoints::Metrics),
        (endpoints.healthz, metrics::Endpoints::Health),
    ] {
        if let Some(addr) = addr {
            metrics::spawn_server(proxy_metrics.clone(), which, addr, std::future::pending());
        }
    }
    proxy_metrics
}

/// Starts NetworkPolicy enforcement for the pods of `node` in the background, in the kernel
/// language of the proxier's `mode`, reading the caches of `informers`.
pub fn spawn_network_policy(
    informers: &Arc<Informers>,
    node: String,
    mode: ProxyMode,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    use minik8s_proxy::netpol::{self, Backend};
    use minik8s_proxy::nftables::CommandNft;
    let informers = informers.clone();
    tokio::spawn(async move {
        let ipt = Arc::new(CommandIptables::default());
        let nft = Arc::new(CommandNft::default());
        // The other mode's rules go first: a node that switched modes must not keep them.
        type Cleanup = Box<dyn FnOnce() -> Result<(), minik8s_proxy::iptables::Error> + Send>;
        let (backend, other): (Backend, Cleanup) = match mode {
            ProxyMode::Iptables => (
                Backend::Iptables(ipt),
                Box::new(move || netpol::cleanup_nftables(nft.as_ref())),
            ),
            ProxyMode::Nftables => (
                Backend::Nftables(nft),
                Box::new(move || netpol::cleanup_iptables(ipt.as_ref())),
            ),
        };
        let periods = Periods::default();
        if let Err(e) = netpol::run(&informers, node, backend, other, periods, shutdown).await {
            tracing::error!(error = %e, "network policy enforcement stopped");
        }
    })
}

/// The proxier of `mode` until `shutdown`.
async fn run_proxier(
    caches: minik8s_proxy::cache::Caches,
    config: ProxyConfig,
    periods: Periods,
    mode: ProxyMode,
    metrics: Arc<ProxyMetrics>,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), minik8s_proxy::iptables::Error> {
    match mode {
        ProxyMode::Iptables => {
            let ipt = Arc::new(CommandIptables::default());
            minik8s_proxy::iptables::run(caches, config, ipt, periods, metrics, shutdown).await
        }
        ProxyMode::Nftables => {
            let nft = Arc::new(minik8s_proxy::nftables::CommandNft::default());
            minik8s_proxy::nftables::run(caches, config, nft, periods, metrics, shutdown).await
        }
    }
}

pub async fn run_proxy(args: ProxyArgs) -> anyhow::Result<()> {
    if args.cleanup {
        let ipt = CommandIptables::default();
        let nft = minik8s_proxy::nftables::CommandNft::default();
        let iptables =
            minik8s_proxy::iptables::apply::cleanup(&ipt).context("cleaning up iptables");
        minik8s_proxy::nftables::apply::cleanup(&nft).context("cleaning up nftables")?;
        minik8s_proxy::netpol::cleanup(&ipt, &nft).context("cleaning up network policies")?;
        return iptables;
    }
    let client = args.client.client().await?;
    let config = ProxyConfig {
        hostname: hostname(&args.hostname_override),
        cluster_cidr: Some(args.cluster_cidr.clone()),
        masquerade_all: args.masquerade_all,
    };
    let periods = Periods {
        min: args.iptables_min_sync_period,
        max: args.iptables_sync_period,
    };
    enable_route_localnet();
    let informers = Informers::new(client);
    let caches = minik8s_proxy::cache::Caches::from_informers(&informers);
    let endpoints = ProxyEndpoints {
        metrics: args.metrics_bind_address.0,
        healthz: args.healthz_bind_address.0,
    };
    let metrics = serve_proxy_endpoints(args.proxy_mode, periods, endpoints);
    run_proxier(
        caches,
        config,
        periods,
        args.proxy_mode,
        metrics,
        crate::shutdown_signal(),
    )
    .await?;
    Ok(())
}

/// Cluster DNS's configuration; `metrics` is where its `/metrics` is served.
pub fn dns_config(
    bind: SocketAddr,
    domain: &str,
    resolv_conf: &std::path::Path,
    metrics: Bind,
) -> minik8s_proxy::dns::DnsConfig {
    let upstreams = std::fs::read_to_string(resolv_conf)
        .map(|t| minik8s_proxy::dns::upstreams_from_resolv_conf(&t))
        .unwrap_or_default();
    minik8s_proxy::dns::DnsConfig {
        bind,
        domain: domain.to_string(),
        upstreams,
        metrics_bind: metrics.0,
    }
}

pub async fn run_dns(args: DnsArgs) -> anyhow::Result<()> {
    let client = args.client.client().await?;
    let config = dns_config(
        args.bind,
        &args.cluster_domain,
        &args.resolv_conf,
        args.metrics_bind_address,
    );
    let informers = Informers::new(client);
    minik8s_proxy::dns::run(&informers, config, crate::shutdown_signal()).await?;
    Ok(())
}

pub async fn run_ingress(args: IngressArgs) -> anyhow::Result<()> {
    let client = args.client.client().await?;
    let addresses = if args.publish_address.is_empty() {
        minik8s_apiserver::server::local_addresses()
            .into_iter()
            .filter(|ip| !ip.is_loopback())
            .collect()
    } else {
        args.publish_address.clone()
    };
    let informers = Informers::new(client.clone());
    let config = minik8s_proxy::ingress::IngressConfig {
        bind: args.bind,
        addresses,
        publish_node_addresses: false,
        hosts: Some(knative_hosts(&informers, args.bind, None)),
    };
    minik8s_proxy::ingress::run(client, &informers, config, crate::shutdown_signal()).await?;
    Ok(())
}

/// Where the server's cluster DNS listens: an unspecified address means the node's address
/// only, so that UDP answers leave from the address pods' queries were sent (and DNATed) to;
/// a socket on 0.0.0.0 would answer from the bridge's address and the pods would drop it.
pub fn dns_listen_address(agent: &crate::agent::AgentArgs, bind: SocketAddr) -> SocketAddr {
    if bind.ip().is_unspecified() {
        SocketAddr::new(crate::agent::node_ip(agent), bind.port())
    } else {
        bind
    }
}

/// The `kube-dns` Service for the first `--cluster-dns` address, its endpoints at the address
/// DNS listens on.
pub fn kube_dns(
    agent: &crate::agent::AgentArgs,
    listen: SocketAddr,
) -> Option<minik8s_proxy::dns::service::KubeDns> {
    Some(minik8s_proxy::dns::service::KubeDns {
        cluster_ip: *agent.cluster_dns.first()?,
        endpoint: listen,
    })
}

/// Knative Routes' hosts for the Ingress proxy, their table kept current in the background,
/// and the function gateway on the same address's port 8080 (with `ingress` on `bind`).
fn knative_hosts(
    informers: &Arc<Informers>,
    bind: SocketAddr,
    node_ip: Option<IpAddr>,
) -> Arc<dyn minik8s_proxy::ingress::HostRoutes> {
    let router = knative_lite::router::start(informers, node_ip);
    let gateway = knative_lite::gateway::Gateway::new(router.clone(), informers.client());
    let addr = SocketAddr::new(bind.ip(), knative_lite::function::GATEWAY_PORT);
    tokio::spawn(async move {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(listener) => {
                tracing::info!(bind = %addr, "serving the function gateway");
                knative_lite::gateway::serve(gateway, listener, std::future::pending()).await
            }
            Err(e) => tracing::warn!(bind = %addr, error = %e, "no function gateway"),
        }
    });
    router
}

/// Starts the Ingress proxy in the background (the node half of `server` and `node`), after
/// making sure the `minik8s` IngressClass exists. Every node serves every Ingress, so the
/// Ingresses' status lists the InternalIPs of all nodes (this node's address until a node
/// has one). Statuses are written through `client`; everything else is read from `informers`.
pub fn spawn_ingress(
    client: kube::Client,
    informers: Arc<Informers>,
    bind: SocketAddr,
    node_ip: IpAddr,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut backoff = Duration::from_millis(200);
        while let Err(e) = minik8s_proxy::ingress::ensure_class(&client).await {
            tracing::warn!(error = %e, "creating the minik8s IngressClass failed; retrying");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(10));
        }
        let config = minik8s_proxy::ingress::IngressConfig {
            bind,
            addresses: vec![node_ip],
            publish_node_addresses: true,
            hosts: Some(knative_hosts(&informers, bind, Some(node_ip))),
        };
        if let Err(e) = minik8s_proxy::ingress::run(client, &informers, config, shutdown).await {
            tracing::warn!(error = %e, "the Ingress proxy is not running");
        }
    })
}

/// The identity upstream gives kube-proxy.
pub fn proxy_user() -> UserInfo {
    UserInfo {
        name: "system:kube-proxy".into(),
        uid: String::new(),
        groups: vec!["system:authenticated".into()],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bind_addresses_parse_and_empty_is_nowhere() {
        assert_eq!(
            DEFAULT_PROXY_METRICS.parse::<Bind>().unwrap(),
            Bind(Some("127.0.0.1:10249".parse().unwrap()))
        );
        assert_eq!("".parse::<Bind>().unwrap(), Bind(None));
        assert_eq!(" ".parse::<Bind>().unwrap(), Bind(None));
        assert!("10249".parse::<Bind>().is_err());
        let args = <ProxyEndpointArgs as clap::FromArgMatches>::from_arg_matches(
            &<ProxyEndpointArgs as clap::Args>::augment_args(clap::Command::new("t"))
                .get_matches_from(["t", "--proxy-metrics-bind-address", "0.0.0.0:10249"]),
        )
        .unwrap();
        let e = args.endpoints();
        assert_eq!(e.metrics, Some("0.0.0.0:10249".parse().unwrap()));
        assert_eq!(e.healthz, Some("0.0.0.0:10256".parse().unwrap()));
    }
}
