//! `minik8s node`: one worker node joining a running cluster, the standalone form of what
//! `server` runs beside the control plane: the node agent (private containerd and kubelet),
//! the proxier, the Ingress proxy and the route agent, each with a client of the API server.
//! Stopping it leaves the pods and the proxier's iptables rules in place, so a restart (an
//! upgrade) does not cut the node's established Service connections.
//!
//! A node joins in one of two ways: with a bootstrap token and the cluster's CA certificate
//! (`--token`, `--certificate-authority`), asking for its certificates through the CSR API as
//! upstream's kubelet does (see [`crate::bootstrap`]), so it needs nothing else from the
//! server's machine; or with the cluster's PKI directory (`--pki-dir`), issuing its own
//! certificates with the CA key (a node on the server's machine). A joined node's network
//! services (proxier, Ingress proxy) act as the node; with the PKI they act as
//! `system:kube-proxy`.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use minik8s_apiserver::pki::{Pki, ServingNames};
use minik8s_informers::Informers;

use crate::agent::{self, AgentArgs};
use crate::{bootstrap, net, routes};

#[derive(Args, Clone, Debug)]
pub struct NodeArgs {
    /// Where this node keeps containerd, the kubelet's files, its certificates and kubeconfigs.
    #[arg(long)]
    pub data_dir: PathBuf,
    /// The API server's URL as this node reaches it.
    #[arg(long)]
    pub server: String,
    /// The cluster's PKI directory (`<server data dir>/pki`, with ca.crt and ca.key): the node
    /// issues its own certificates.
    #[arg(
        long,
        required_unless_present_any = ["token", "certificate_authority"],
        conflicts_with_all = ["token", "certificate_authority"]
    )]
    pub pki_dir: Option<PathBuf>,
    /// A bootstrap token (`minik8s token create`) to join with: the node asks for its
    /// certificates through CertificateSigningRequests (kubelet TLS bootstrap). Only needed
    /// until the first certificate is issued: a restart reuses it from `<data-dir>/pki`.
    #[arg(
        long,
        env = "MINIK8S_TOKEN",
        hide_env_values = true,
        requires = "certificate_authority"
    )]
    pub token: Option<String>,
    /// The cluster CA's certificate (`<server data dir>/pki/ca.crt`): how a node joining with
    /// `--token` (or restarting after it joined) trusts the API server.
    #[arg(long)]
    pub certificate_authority: Option<PathBuf>,
    #[arg(long, default_value = "10.96.0.0/12")]
    pub service_cluster_ip_range: String,
    #[command(flatten)]
    pub agent: AgentArgs,
    /// Do not program iptables for Services on this node.
    #[arg(long)]
    pub disable_proxy: bool,
    /// How the proxier programs Services (kube-proxy's flag).
    #[arg(
        long,
        value_enum,
        env = "MINIK8S_PROXY_MODE",
        default_value = "iptables"
    )]
    pub proxy_mode: crate::net::ProxyMode,
    #[command(flatten)]
    pub proxy_endpoints: crate::net::ProxyEndpointArgs,
    /// Do not serve Ingresses on this node.
    #[arg(long)]
    pub disable_ingress: bool,
    /// Where this node serves Ingresses of the `minik8s` class (HTTP), in its own network
    /// namespace.
    #[arg(long, default_value = "0.0.0.0:80")]
    pub ingress_bind_address: std::net::SocketAddr,
    #[command(flatten)]
    pub routes: routes::RouteArgs,
}

pub async fn run(args: NodeArgs) -> anyhow::Result<()> {
    let name = agent::node_name(&args.agent);
    let pki = match &args.pki_dir {
        Some(dir) => Some(issuing_pki(dir, &args.data_dir)?),
        None => None,
    };
    let identity = match &pki {
        Some(pki) => agent::Identity::Pki(pki),
        None => joined(&args, &name).await?,
    };
    let mut agent_args = args.agent.clone();
    agent_args.pod_mtu = args.routes.pod_mtu(agent::node_ip(&args.agent));
    let node = agent::start(
        &agent_args,
        &args.data_dir,
        &identity,
        &args.server,
        &args.service_cluster_ip_range,
        None,
    )
    .await
    .context("starting the node agent")?;

    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let mut tasks = Vec::new();
    let proxy_client = if args.disable_proxy && args.disable_ingress {
        None
    } else if let Some(pki) = &pki {
        let cert = pki.client("kube-proxy", "system:kube-proxy", &[])?;
        let path = args.data_dir.join("proxy.kubeconfig");
        Some(agent::kubeconfig_client(&pki.ca.cert_pem, &cert, &args.server, &path).await?)
    } else {
        // A joined node has one identity; `system:minik8s:node-services` lets nodes read
        // what the proxier and the Ingress proxy need.
        Some(node_client(&args.data_dir).await?)
    };
    // The proxier and the Ingress proxy share one cache of Services and EndpointSlices.
    let informers = proxy_client.clone().map(Informers::new);
    if let (false, Some(informers)) = (args.disable_proxy, &informers) {
        let config = minik8s_proxy::iptables::ProxyConfig {
            hostname: name.clone(),
            cluster_cidr: Some(args.agent.cluster_cidr.clone()),
            masquerade_all: false,
        };
        tasks.push(net::spawn_proxier(
            informers,
            config,
            Default::default(),
            args.proxy_mode,
            args.proxy_endpoints.endpoints(),
            stopped(stop_rx.clone()),
        ));
        tasks.push(net::spawn_network_policy(
            informers,
            name.clone(),
            args.proxy_mode,
            stopped(stop_rx.clone()),
        ));
    }
    if let (false, Some(client), Some(informers)) = (args.disable_ingress, proxy_client, informers)
    {
        // The proxier's identity, as the server's Ingress proxy has.
        tasks.push(net::spawn_ingress(
            client,
            informers,
            args.ingress_bind_address,
            agent::node_ip(&args.agent),
            stopped(stop_rx.clone()),
        ));
    }
    if !args.routes.disable_route_agent {
        // The route agent acts as the node, through the kubeconfig the agent wrote.
        let client = node_client(&args.data_dir).await?;
        tasks.push(tokio::spawn(routes::agent(
            args.routes.clone(),
            client,
            name.clone(),
            stopped(stop_rx.clone()),
        )));
    }
    tracing::info!(node = %name, server = %args.server, "node running");
    crate::shutdown_signal().await;
    let _ = stop.send(true);
    for task in tasks {
        let _ = task.await;
    }
    node.stop();
    Ok(())
}

/// The cluster's PKI read from `dir`, issuing into `<data-dir>/pki`.
fn issuing_pki(dir: &std::path::Path, data_dir: &std::path::Path) -> anyhow::Result<Pki> {
    let ca_key = dir.join("ca.key");
    anyhow::ensure!(
        ca_key.is_file(),
        "{} is missing: --pki-dir must name the cluster's PKI",
        ca_key.display()
    );
    let mut pki = Pki::ensure(dir, &ServingNames::default())
        .with_context(|| format!("loading the cluster PKI from {}", dir.display()))?;
    // What this node issues stays in its own directory.
    pki.dir = data_dir.join("pki");
    std::fs::create_dir_all(&pki.dir).with_context(|| format!("creating {}", pki.dir.display()))?;
    Ok(pki)
}

/// Joins with the bootstrap token: the node's client certificate, from an earlier join or a
/// new CSR.
async fn joined(args: &NodeArgs, name: &str) -> anyhow::Result<agent::Identity<'static>> {
    let ca_path = args
        .certificate_authority
        .as_ref()
        .context("--certificate-authority is required with --token")?;
    let ca_pem = std::fs::read_to_string(ca_path)
        .with_context(|| format!("--certificate-authority: reading {}", ca_path.display()))?;
    let join = bootstrap::Join {
        server: args.server.clone(),
        ca_pem: ca_pem.clone(),
        token: args.token.clone().unwrap_or_default(),
    };
    let pki_dir = args.data_dir.join("pki");
    let client = bootstrap::client_certificate(&join, name, &pki_dir).await?;
    Ok(agent::Identity::Joined {
        ca_pem,
        client,
        pki_dir,
    })
}

/// A client acting as the node, through the kubeconfig the agent wrote.
async fn node_client(data_dir: &std::path::Path) -> anyhow::Result<kube::Client> {
    crate::control::ClientArgs {
        kubeconfig: Some(data_dir.join("kubelet.kubeconfig")),
    }
    .client()
    .await
}
