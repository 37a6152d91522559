//! The node agent: registers the node, runs this node's pods on containerd through the CRI,
//! and reports their status. Everything it knows comes from the API server and the runtime;
//! it keeps no files of its own as the source of truth. It can run its own containerd
//! (`containerd`), and images are built on the machine and imported into containerd without a
//! registry (`images`).

pub mod cgroups;
pub mod cni;
pub mod config;
pub mod containerd;
pub mod env;
pub mod images;
pub mod node;
pub mod pod;
pub mod probe;
pub mod runtime;
pub mod server;
pub mod volumes;

use std::sync::{Arc, Mutex};

use kube::runtime::events::{Recorder, Reporter};

pub use config::KubeletConfig;
use node::NodeAgent;
use pod::worker::{Memory, Shared};
use runtime::{CriRuntime, Runtime};

#[derive(Debug, thiserror::Error)]
pub enum KubeletError {
    #[error("container runtime: {0}")]
    Runtime(#[from] runtime::RuntimeError),
    #[error("registering the node: {0}")]
    Register(kube::Error),
    #[error("pod network: {0}")]
    Network(#[from] cni::NetError),
    #[error("kubelet API: {0}")]
    Serve(#[from] server::ServeError),
}

/// Runs the kubelet until the process ends: node registration and heartbeats, pod workers.
pub async fn run(
    config: KubeletConfig,
    client: kube::Client,
    cluster_ranges: Vec<String>,
) -> Result<(), KubeletError> {
    let runtime: Arc<dyn Runtime> =
        Arc::new(CriRuntime::connect(&config.container_runtime_endpoint).await?);
    // The API listens before the node registers: its port is what the node advertises.
    let api = match &config.tls {
        Some(tls) => {
            let addr = std::net::SocketAddr::new(config.address, config.port);
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|source| server::ServeError::Bind { addr, source })?;
            Some((listener, server::tls_config(tls)?))
        }
        None => None,
    };
    let version = runtime.version().await?;
    tracing::info!(runtime = %version.runtime_name, version = %version.runtime_version, node = %config.node_name, "kubelet starting");
    let capacity = node::host_capacity(&config.root_dir);
    let agent = Arc::new(NodeAgent {
        config: config.clone(),
        client: client.clone(),
        runtime: runtime.clone(),
        capacity: capacity.clone(),
    });
    let node = agent.register().await.map_err(KubeletError::Register)?;
    let pod_cidr = match node
        .spec
        .as_ref()
        .and_then(|s| s.pod_cidr.clone())
        .or(config.pod_cidr.clone())
    {
        Some(cidr) => Some(cidr),
        None => wait_for_pod_cidr(&client, &config.node_name).await,
    };
    if let Some(cidr) = &pod_cidr {
        cni::ensure_bridge(&config.bridge, cidr, &cluster_ranges)?;
        cni::write_conflist(
            &config.cni_conf_dir,
            &config.bridge,
            cidr,
            &config.root_dir.join("cni-ipam"),
        )?;
        runtime.update_pod_cidr(cidr).await?;
    } else {
        tracing::warn!("no pod CIDR yet: pods other than hostNetwork ones will wait for one");
    }
    let reporter = Reporter {
        controller: "kubelet".into(),
        instance: Some(config.node_name.clone()),
    };
    let (wake, wakes) = tokio::sync::mpsc::unbounded_channel();
    let volumes = volumes::VolumeManager::new(config.pods_dir(), client.clone());
    if let Err(e) = volumes.make_shared() {
        tracing::warn!(error = %e, "making the pods directory a shared mount failed");
    }
    let shared = Arc::new(Shared {
        volumes,
        prober: probe::Prober::default(),
        wake,
        config: config.clone(),
        client: client.clone(),
        runtime,
        recorder: Recorder::new(client, reporter),
        node_cpu: capacity.cpus as f64,
        node_memory: capacity.memory_bytes as f64,
        memory: Mutex::new(Memory::default()),
    });
    if let Some((listener, tls)) = api {
        tracing::info!(addr = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(), "kubelet API serving");
        let app = server::router(server::KubeletServer::new(shared.clone()));
        tokio::spawn(server::serve(listener, tls, app));
    }
    tokio::join!(agent.run(node), pod::manager::run(shared, wakes));
    Ok(())
}

/// A node registered without `--pod-cidr` gets its range from node IPAM right after: wait for
/// it (through a watch, bounded) before writing the pod network config.
async fn wait_for_pod_cidr(client: &kube::Client, node: &str) -> Option<String> {
    let api: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client.clone());
    let has_cidr = |n: Option<&k8s_openapi::api::core::v1::Node>| {
        n.and_then(|n| n.spec.as_ref())
            .is_some_and(|s| s.pod_cidr.is_some())
    };
    let wait = kube::runtime::wait::await_condition(api, node, has_cidr);
    match tokio::time::timeout(std::time::Duration::from_secs(60), wait).await {
        Ok(Ok(Some(n))) => n.spec.and_then(|s| s.pod_cidr),
        Ok(Ok(None)) => None,
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "waiting for the node's pod CIDR");
            None
        }
        Err(_) => None,
    }
}
