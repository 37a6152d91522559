//! The node half of the binary: a private containerd, the images found on disk, and the
//! kubelet with an identity issued by the cluster CA. `server` runs it beside the control
//! plane; `teardown` undoes what it left on the machine.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use minik8s_informers::Informers;
use minik8s_kubelet::containerd::{Containerd, ContainerdConfig};
use minik8s_kubelet::runtime::{CriRuntime, Runtime};
use minik8s_kubelet::server::serving_cert::ServingCert;

/// Flags of the node agent, named after the kubelet's.
#[derive(Args, Clone, Debug)]
pub struct AgentArgs {
    /// Run the control plane only.
    #[arg(long)]
    pub disable_agent: bool,
    /// This node's name [default: the hostname].
    #[arg(long)]
    pub node_name: Option<String>,
    /// The address reported for this node [default: its first non-loopback address].
    #[arg(long)]
    pub node_ip: Option<IpAddr>,
    /// The range every pod address comes from.
    #[arg(long, default_value = "10.244.0.0/16")]
    pub cluster_cidr: String,
    /// This node's pod range when no node IPAM controller assigns one (`server` runs one unless
    /// the controller-manager or its `node-ipam-controller` is disabled; then the default is
    /// 10.244.0.0/24).
    #[arg(long)]
    pub pod_cidr: Option<String>,
    /// Cluster DNS servers given to pods with dnsPolicy ClusterFirst; `server` serves the
    /// first as the `kube-dns` Service.
    #[arg(long, value_delimiter = ',', default_value = "10.96.0.10")]
    pub cluster_dns: Vec<IpAddr>,
    /// The cluster's DNS domain: pods search it, cluster DNS answers for it.
    #[arg(long, default_value = "cluster.local")]
    pub cluster_domain: String,
    /// Use this CRI socket instead of starting a private containerd.
    #[arg(long)]
    pub container_runtime_endpoint: Option<PathBuf>,
    /// The port of the kubelet's HTTPS API (logs, exec, port-forward, stats).
    #[arg(long, default_value_t = 10250)]
    pub kubelet_port: u16,
    /// The address the kubelet's HTTPS API listens on.
    #[arg(long, default_value = "0.0.0.0")]
    pub kubelet_address: IpAddr,
    /// The bridge pods attach to.
    #[arg(long, default_value = "cni0")]
    pub bridge: String,
    /// Parent cgroup of every pod.
    #[arg(long, default_value = "/kubepods")]
    pub cgroup_root: String,
    /// Do not run the local-path provisioner beside the kubelet; `server` also does not
    /// create the default `local-path` StorageClass (k3s's `--disable local-storage`).
    #[arg(long)]
    pub disable_local_storage: bool,
    /// Run the NVIDIA device plugin (`nvidia.com/gpu`) beside the kubelet: `auto` does when
    /// the machine has NVIDIA GPU device nodes (`/dev/nvidia0`).
    #[arg(long, value_enum, default_value_t = crate::device_plugin::NvidiaMode::Auto)]
    pub enable_nvidia_device_plugin: crate::device_plugin::NvidiaMode,
    /// The pods' MTU: set from `--pod-network-mode` (see `routes::RouteArgs::pod_mtu`).
    #[arg(skip)]
    pub pod_mtu: Option<u32>,
}

/// The running node: keep it alive as long as the node runs.
pub struct Agent {
    containerd: Option<Containerd>,
}

impl Agent {
    /// Stops containerd but leaves containers running, so the next start adopts them.
    pub fn stop(mut self) {
        if let Some(mut c) = self.containerd.take() {
            c.stop_keeping_containers();
        }
    }
}

pub fn node_ip(args: &AgentArgs) -> IpAddr {
    args.node_ip
        .or_else(|| {
            minik8s_apiserver::server::local_addresses()
                .into_iter()
                .find(|ip| !ip.is_loopback())
        })
        .unwrap_or(IpAddr::from([127, 0, 0, 1]))
}

/// The kubelet's own pod range: upstream's kubelet uses `--pod-cidr` only when nothing assigns
/// ranges, so it is ignored while the node IPAM controller runs in this process.
pub fn standalone_pod_cidr(args: &AgentArgs, node_ipam_here: bool) -> Option<String> {
    if node_ipam_here {
        if let Some(cidr) = &args.pod_cidr {
            tracing::warn!(%cidr, "--pod-cidr is ignored: the node IPAM controller assigns the node's range");
        }
        return None;
    }
    Some(
        args.pod_cidr
            .clone()
            .unwrap_or_else(|| "10.244.0.0/24".into()),
    )
}

pub fn node_name(args: &AgentArgs) -> String {
    args.node_name
        .clone()
        .unwrap_or_else(|| minik8s_apiserver::server::hostname().to_lowercase())
}

/// Waits (bounded) until the CRI sees the pause image: imports reach its cache through events.
async fn wait_for_image(runtime: &CriRuntime, image: &str) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        if runtime.image_status(image).await?.is_some() {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            anyhow::bail!("the runtime does not see {image} after importing it");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Where the node's certificates come from.
pub enum Identity<'a> {
    /// Issued here with the cluster CA's key: the server's own node, or a node given the
    /// cluster's PKI directory.
    Pki(&'a minik8s_apiserver::pki::Pki),
    /// A node that joined through TLS bootstrap ([`bootstrap`]): its client certificate, the CA
    /// it trusts, and where its serving certificate is kept once its CSR is signed.
    Joined {
        ca_pem: String,
        client: minik8s_apiserver::pki::CertPair,
        pki_dir: PathBuf,
    },
}

impl Identity<'_> {
    fn ca_pem(&self) -> &str {
        match self {
            Identity::Pki(pki) => &pki.ca.cert_pem,
            Identity::Joined { ca_pem, .. } => ca_pem,
        }
    }
}

/// Starts containerd (unless an endpoint is given), imports `<data-dir>/images/*.tar`, sets up
/// the kubelet's certificates and runs the kubelet in the background, reading its pods and
/// Node from `shared` when the process has informers of every pod and Node.
pub async fn start(
    args: &AgentArgs,
    data_dir: &Path,
    identity: &Identity<'_>,
    api_url: &str,
    service_range: &str,
    shared: Option<Arc<Informers>>,
) -> anyhow::Result<Agent> {
    let name = node_name(args);
    let (socket, cni_dir, containerd) = match &args.container_runtime_endpoint {
        Some(endpoint) => (endpoint.clone(), data_dir.join("kubelet").join("cni"), None),
        None => {
            let config = ContainerdConfig::new(data_dir.join("containerd"));
            let c = Containerd::start(config, Duration::from_secs(30))
                .await
                .context("starting containerd")?;
            (c.socket(), c.config().cni_conf_dir(), Some(c))
        }
    };
    let images = data_dir.join("images");
    if images.is_dir() {
        let started = std::time::Instant::now();
        let imported = minik8s_kubelet::images::import_dir(&socket, &images, &Default::default())
            .await
            .with_context(|| format!("importing images from {}", images.display()))?;
        tracing::info!(
            count = imported.len(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "imported images"
        );
        let runtime = CriRuntime::connect(&socket).await?;
        if imported
            .iter()
            .any(|i| i.name == minik8s_kubelet::containerd::SANDBOX_IMAGE)
        {
            wait_for_image(&runtime, minik8s_kubelet::containerd::SANDBOX_IMAGE).await?;
        }
    }
    let cert = match identity {
        Identity::Pki(pki) => {
            pki.client("kubelet", &format!("system:node:{name}"), &["system:nodes"])?
        }
        Identity::Joined { client, .. } => client.clone(),
    };
    let path = data_dir.join("kubelet.kubeconfig");
    let client = kubeconfig_client(identity.ca_pem(), &cert, api_url, &path).await?;
    let ip = node_ip(args);
    // The kubelet's serving certificate, for the names the API server and clients use.
    let serving = match identity {
        Identity::Pki(pki) => {
            let hostname = minik8s_apiserver::server::hostname().to_lowercase();
            let mut dns = vec![name.clone()];
            if !hostname.is_empty() && hostname != name {
                dns.push(hostname);
            }
            let mut ips = vec![ip, IpAddr::from([127, 0, 0, 1])];
            ips.dedup();
            let names = minik8s_apiserver::pki::ServingNames { dns, ips };
            let pair = pki.issue(
                &format!("system:node:{name}"),
                &["system:nodes"],
                &names,
                true,
            )?;
            ServingCert::new(&pair.cert_pem, &pair.key_pem)?
        }
        // Asked for as the node, for the names its Node lists (the approver checks them).
        Identity::Joined {
            pki_dir, ca_pem, ..
        } => crate::bootstrap::serving_certificate(
            client.clone(),
            &name,
            vec![name.clone()],
            vec![ip],
            ca_pem,
            pki_dir,
        )?,
    };
    let mut config =
        minik8s_kubelet::KubeletConfig::new(&name, ip, data_dir.join("kubelet"), &socket);
    config.port = args.kubelet_port;
    config.address = args.kubelet_address;
    config.tls = Some(minik8s_kubelet::config::ServingTls {
        cert: serving,
        client_ca_pem: identity.ca_pem().to_string(),
    });
    config.cni_conf_dir = cni_dir;
    config.minik8s_cni = containerd
        .as_ref()
        .is_some_and(|c| c.config().cni_plugin.is_some());
    config.pod_cidr = args.pod_cidr.clone();
    config.cluster_dns = args.cluster_dns.clone();
    config.cluster_domain = args.cluster_domain.clone();
    config.bridge = args.bridge.clone();
    config.pod_mtu = args.pod_mtu;
    config.cgroup_root = args.cgroup_root.clone();
    let ranges = vec![args.cluster_cidr.clone(), service_range.to_string()];
    if !args.disable_local_storage {
        // Node-local volumes are made on the node that uses them: one provisioner per node,
        // writing as the node.
        let informers = shared
            .clone()
            .unwrap_or_else(|| Informers::new(client.clone()));
        let options = minik8s_controllers::volume::local_path::LocalPathOptions {
            node_name: name.clone(),
            data_dir: data_dir.to_path_buf(),
        };
        tokio::spawn(minik8s_controllers::volume::local_path::run(
            client.clone(),
            informers,
            options,
        ));
    }
    tokio::spawn(async move {
        if let Err(e) = minik8s_kubelet::run(config, client, ranges, shared).await {
            tracing::error!(error = %e, "kubelet stopped");
        }
    });
    crate::device_plugin::start_nvidia(args.enable_nvidia_device_plugin, data_dir);
    Ok(Agent { containerd })
}

/// Writes a kubeconfig for `cert` at `path` and returns a client built from it.
pub async fn kubeconfig_client(
    ca_pem: &str,
    cert: &minik8s_apiserver::pki::CertPair,
    api_url: &str,
    path: &Path,
) -> anyhow::Result<kube::Client> {
    let kubeconfig =
        minik8s_apiserver::server::admin_kubeconfig(api_url, ca_pem, &cert.cert_pem, &cert.key_pem);
    std::fs::write(path, kubeconfig).with_context(|| format!("writing {}", path.display()))?;
    crate::control::ClientArgs {
        kubeconfig: Some(path.to_path_buf()),
    }
    .client()
    .await
}

/// Stops every pod of the node and containerd, and removes what they left: containers, the
/// bridge and its routes, pod cgroups.
pub async fn teardown(data_dir: &Path, bridge: &str, cgroup_root: &str) -> anyhow::Result<()> {
    // What containerd could not stop is reported, after the rest is cleaned up anyway.
    let stopped = stop_pods(&data_dir.join("containerd")).await;
    // The pods directory is a shared bind mount of itself; volumes mount inside it.
    minik8s_kubelet::containerd::unmount_under(&data_dir.join("kubelet"));
    let _ = std::process::Command::new("ip")
        .args(["link", "del", bridge])
        .status();
    if let Err(e) = minik8s_kubelet::cgroups::remove(Path::new("/sys/fs/cgroup"), cgroup_root) {
        tracing::warn!(error = %e, "removing pod cgroups failed");
    }
    stopped
}

/// Stops and removes every pod sandbox through a containerd started on `dir`.
async fn stop_pods(dir: &Path) -> anyhow::Result<()> {
    if !dir.is_dir() {
        return Ok(());
    }
    let c = Containerd::start(ContainerdConfig::new(dir), Duration::from_secs(30))
        .await
        .context("starting containerd")?;
    let result = async {
        let runtime = CriRuntime::connect(&c.socket()).await?;
        for s in runtime.list_pod_sandboxes().await? {
            let _ = runtime.stop_pod_sandbox(&s.id).await;
            let _ = runtime.remove_pod_sandbox(&s.id).await;
        }
        anyhow::Ok(())
    }
    .await;
    c.shutdown().await;
    result
}
