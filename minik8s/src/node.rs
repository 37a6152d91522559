//! `minik8s node`: one worker node joining a running cluster, the standalone form of what
//! `server` runs beside the control plane: the node agent (private containerd and kubelet),
//! the proxier, the Ingress proxy and the route agent, each with a client of the API server.
//! Stopping it leaves the pods and the proxier's iptables rules in place, so a restart (an
//! upgrade) does not cut the node's established Service connections.
//!
//! There is no TLS bootstrap: the node issues its own client and serving certificates from
//! the cluster CA, so it must be able to read the CA key (a node on the same machine).

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use minik8s_apiserver::pki::{Pki, ServingNames};
use minik8s_informers::Informers;

use crate::agent::{self, AgentArgs};
use crate::{net, routes};

#[derive(Args, Clone, Debug)]
pub struct NodeArgs {
    /// Where this node keeps containerd, the kubelet's files, its certificates and kubeconfigs.
    #[arg(long)]
    pub data_dir: PathBuf,
    /// The API server's URL as this node reaches it.
    #[arg(long)]
    pub server: String,
    /// The cluster's PKI directory (`<server data dir>/pki`, with ca.crt and ca.key).
    #[arg(long)]
    pub pki_dir: PathBuf,
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
    let ca_key = args.pki_dir.join("ca.key");
    anyhow::ensure!(
        ca_key.is_file(),
        "{} is missing: --pki-dir must name the cluster's PKI",
        ca_key.display()
    );
    let mut pki = Pki::ensure(&args.pki_dir, &ServingNames::default())
        .with_context(|| format!("loading the cluster PKI from {}", args.pki_dir.display()))?;
    // What this node issues stays in its own directory.
    pki.dir = args.data_dir.join("pki");
    std::fs::create_dir_all(&pki.dir).with_context(|| format!("creating {}", pki.dir.display()))?;
    let name = agent::node_name(&args.agent);
    let node = agent::start(
        &args.agent,
        &args.data_dir,
        &pki,
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
    } else {
        let cert = pki.client("kube-proxy", "system:kube-proxy", &[])?;
        let path = args.data_dir.join("proxy.kubeconfig");
        Some(agent::kubeconfig_client(&pki, &cert, &args.server, &path).await?)
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
        let client = crate::control::ClientArgs {
            kubeconfig: Some(args.data_dir.join("kubelet.kubeconfig")),
        }
        .client()
        .await?;
        let table = routes::RouteTable {
            protocol: args.routes.route_protocol,
            netns: None,
        };
        tasks.push(tokio::spawn(routes::run(
            client,
            name.clone(),
            table,
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
