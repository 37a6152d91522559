//! The node agent: registers the node, runs this node's pods on containerd through the CRI,
//! and reports their status. Everything it knows comes from the API server and the runtime;
//! it keeps no files of its own as the source of truth. It can run its own containerd
//! (`containerd`), and images are built on the machine and imported into containerd without a
//! registry (`images`).

pub mod cgroups;
pub mod cni;
pub mod config;
pub mod containerd;
pub mod devicemanager;
pub mod env;
pub mod hollow;
pub mod images;
pub mod metrics;
pub mod node;
pub mod pod;
pub mod probe;
pub mod runtime;
pub mod server;
pub mod volumes;

use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use minik8s_informers::{Informer, Informers};

pub use config::KubeletConfig;
pub use node::Capacity;
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

/// What a kubelet does besides running its node's pods through its runtime: the parts that
/// reach beyond the API server and the runtime. A hollow kubelet (kubemark's) runs with none.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Serve the kubelet API (logs, exec, stats) when the config has serving TLS.
    pub serve_api: bool,
    /// Make the bridge and write the CNI configuration once the node has a pod range, with the
    /// cluster's ranges (traffic to them is not masqueraded). `None`: the range only goes to
    /// the runtime.
    pub pod_network: Option<Vec<String>>,
    /// What the node offers; `None` measures the host.
    pub capacity: Option<Capacity>,
    /// Serve device plugins (`<root>/device-plugins/kubelet.sock`) and PodResources
    /// (`<root>/pod-resources/kubelet.sock`), whose devices become extended resources.
    pub device_plugins: bool,
}

/// Where a kubelet reads its pods and its Node: informers of a process's shared factory
/// (upstream's SharedInformerFactory), never watches of its own beside them.
#[derive(Clone)]
pub struct Sources {
    pub pods: Informer<Pod>,
    pub nodes: Informer<Node>,
    /// Claims and volumes, whose changes wake the pods waiting on them.
    pub claims: Informer<PersistentVolumeClaim>,
    pub volumes: Informer<PersistentVolume>,
}

impl Sources {
    /// This node's pods and its Node alone, as upstream's kubelet watches them: for a kubelet
    /// beside no controllers (`minik8s node`, hollow nodes). Several kubelets of one process
    /// share `informers` and each gets its own selection.
    pub fn own(informers: &Informers, node: &str) -> Sources {
        let pods = format!("spec.nodeName={node}");
        let nodes = format!("metadata.name={node}");
        Sources {
            pods: informers.selected(watcher::Config::default().fields(&pods), &pods),
            nodes: informers.selected(watcher::Config::default().fields(&nodes), &nodes),
            claims: informers.of(),
            volumes: informers.of(),
        }
    }

    /// The process's caches of every pod and Node: the all-in-one server's controllers and
    /// scheduler hold them anyway, so its kubelet adds no watch (it reads its pods from the
    /// by-node index).
    pub fn shared(informers: &Informers) -> Sources {
        Sources {
            pods: informers.of(),
            nodes: informers.of(),
            claims: informers.of(),
            volumes: informers.of(),
        }
    }
}

/// Runs the kubelet until the process ends: node registration and heartbeats, pod workers.
/// `shared`: the process's informers when controllers run beside it (else it watches its own
/// node's pods and Node).
pub async fn run(
    config: KubeletConfig,
    client: kube::Client,
    cluster_ranges: Vec<String>,
    shared: Option<Arc<Informers>>,
) -> Result<(), KubeletError> {
    let runtime: Arc<dyn Runtime> =
        Arc::new(CriRuntime::connect(&config.container_runtime_endpoint).await?);
    let options = RunOptions {
        serve_api: true,
        pod_network: Some(cluster_ranges),
        capacity: None,
        device_plugins: true,
    };
    let sources = match shared {
        Some(informers) => Sources::shared(&informers),
        None => Sources::own(&Informers::new(client.clone()), &config.node_name),
    };
    run_with(config, client, runtime, sources, options).await
}

/// [`run`] on a runtime already connected (a fake one for hollow nodes), doing only what
/// `options` allows beyond it.
pub async fn run_with(
    config: KubeletConfig,
    client: kube::Client,
    runtime: Arc<dyn Runtime>,
    sources: Sources,
    options: RunOptions,
) -> Result<(), KubeletError> {
    // The API listens before the node registers: its port is what the node advertises.
    let api = match &config.tls {
        Some(tls) if options.serve_api => {
            let addr = std::net::SocketAddr::new(config.address, config.port);
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|source| server::ServeError::Bind { addr, source })?;
            Some((listener, server::tls_config(tls)?))
        }
        _ => None,
    };
    // Every CRI call is counted from here on, whoever makes it.
    let metrics = Arc::new(metrics::KubeletMetrics::new(&config.node_name));
    let runtime: Arc<dyn Runtime> =
        Arc::new(runtime::Instrumented::new(runtime, metrics.runtime.clone()));
    let version = runtime.version().await?;
    tracing::info!(runtime = %version.runtime_name, version = %version.runtime_version, node = %config.node_name, "kubelet starting");
    let capacity = options
        .capacity
        .clone()
        .unwrap_or_else(|| node::host_capacity(&config.root_dir));
    // Plugins may register from here on; the node reports their devices from its first status.
    // A node without its device sockets (a root too deep for a socket path) still runs pods.
    let devices = if options.device_plugins {
        devicemanager::DeviceManager::start(&config.root_dir)
            .inspect_err(|e| tracing::error!(error = %e, "device plugins not served"))
            .ok()
    } else {
        None
    };
    let agent = Arc::new(NodeAgent {
        config: config.clone(),
        client: client.clone(),
        runtime: runtime.clone(),
        capacity: capacity.clone(),
        devices: devices.clone(),
    });
    let node = agent.register().await.map_err(KubeletError::Register)?;
    let network = pod_network(
        config.clone(),
        sources.nodes.clone(),
        runtime.clone(),
        options.pod_network,
    );
    let reporter = Reporter {
        controller: "kubelet".into(),
        instance: Some(config.node_name.clone()),
    };
    let (wake, wakes) = tokio::sync::mpsc::unbounded_channel();
    let mut volumes = volumes::VolumeManager::new(config.pods_dir(), client.clone());
    if options.capacity.is_some() {
        volumes = volumes.with_node_allocatable(volumes::NodeAllocatable {
            cpu_millis: i128::from(capacity.cpus) * 1000,
            memory: i128::from(capacity.memory_bytes),
            ephemeral_storage: i128::from(capacity.ephemeral_bytes),
        });
    }
    if !config.manage_host {
        volumes = volumes.without_host_mounts();
    } else if let Err(e) = volumes.make_shared() {
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
        metrics,
        devices: devices.clone(),
    });
    if let Some((listener, tls)) = api {
        tracing::info!(addr = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(), "kubelet API serving");
        let app = server::router(server::KubeletServer::new(shared.clone()));
        tokio::spawn(server::serve(listener, tls, app));
    }
    let claim_wakeups = wake_claim_waiters(
        sources.claims,
        sources.volumes,
        sources.pods.by_node(),
        config.node_name.clone(),
        shared.wake.clone(),
    );
    let devices = async move {
        if let Some(devices) = devices {
            devices.run().await;
        }
    };
    tokio::join!(
        agent.run(node, sources.nodes),
        pod::manager::run(shared, sources.pods, wakes),
        network,
        claim_wakeups,
        devices
    );
    Ok(())
}

/// Wakes the pods of this node that use a claim when the claim or its volume changes: a pod
/// waits in ContainerCreating until its claims are bound, and is tried again then.
async fn wake_claim_waiters(
    claims: Informer<PersistentVolumeClaim>,
    volumes: Informer<PersistentVolume>,
    pods: minik8s_informers::Index<Pod>,
    node: String,
    wake: tokio::sync::mpsc::UnboundedSender<String>,
) {
    use futures::StreamExt;
    use minik8s_informers::Change;
    // The claim a change concerns (`None`: any, after a relist).
    let claim_key = |meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        Some((meta.namespace.clone()?, meta.name.clone()?))
    };
    let from_claims = claims.changes().map(move |c| match &c {
        Change::Synced => Some(None),
        _ => c.object().map(|o| claim_key(&o.metadata)),
    });
    let from_volumes = volumes.changes().map(|c| match &c {
        Change::Synced => Some(None),
        _ => c
            .object()
            .and_then(|pv| {
                let r = pv.spec.as_ref()?.claim_ref.as_ref()?;
                Some((r.namespace.clone()?, r.name.clone()?))
            })
            .map(Some),
    });
    let mut changes = std::pin::pin!(futures::stream::select(from_claims, from_volumes));
    while let Some(change) = changes.next().await {
        let Some(claim) = change else { continue };
        let mine = pods.get(&node);
        let claim = claim.as_ref().map(|(ns, n)| (ns.as_str(), n.as_str()));
        for pod in volumes::waiting_pods(&mine, claim) {
            if let Some(uid) = pod.metadata.uid.clone() {
                let _ = wake.send(uid);
            }
        }
    }
}

/// Sets up the pod network once the node has a pod range: the one the node IPAM controller
/// writes into `spec.podCIDR` (watched, not polled), or `--pod-cidr` while the Node has none
/// (for clusters that run no node IPAM). Until then the runtime reports its network as not
/// ready, so the node stays NotReady and gets no pods, as upstream. With no `cluster_ranges`
/// the host is left alone: no bridge, no CNI files, the range only goes to the runtime.
async fn pod_network(
    config: KubeletConfig,
    nodes: Informer<Node>,
    runtime: Arc<dyn Runtime>,
    cluster_ranges: Option<Vec<String>>,
) {
    use futures::StreamExt;
    use minik8s_informers::Change;

    let apply = |cidr: &str| -> Result<(), cni::NetError> {
        let Some(cluster_ranges) = &cluster_ranges else {
            return Ok(());
        };
        cni::ensure_bridge(&config.bridge, cidr, cluster_ranges)?;
        cni::write_conflist(
            &config.cni_conf_dir,
            &config.bridge,
            cidr,
            &config.root_dir.join("cni-ipam"),
            config.minik8s_cni,
            config.pod_mtu,
        )
    };
    let mut applied: Option<String> = None;
    let mut waiting_logged = false;
    let me = ObjectRef::<Node>::new(&config.node_name);
    let cache = nodes.store();
    let mut changes = std::pin::pin!(nodes.changes());
    while let Some(change) = changes.next().await {
        // Only this Node's changes (and a full look after a relist) matter.
        let node = match change {
            Change::Applied { object, .. } if ObjectRef::from_obj(object.as_ref()) == me => object,
            Change::Synced => match cache.get(&me) {
                Some(node) => node,
                None => continue,
            },
            _ => continue,
        };
        let wanted = node
            .spec
            .as_ref()
            .and_then(|s| s.pod_cidr.clone())
            .or_else(|| config.pod_cidr.clone());
        let Some(cidr) = wanted else {
            if !waiting_logged {
                tracing::info!("waiting for the node IPAM controller to assign a pod CIDR");
                waiting_logged = true;
            }
            continue;
        };
        if applied.as_deref() == Some(cidr.as_str()) {
            continue;
        }
        if let Err(e) = apply(&cidr) {
            tracing::error!(%cidr, error = %e, "setting up the pod network failed");
            continue;
        }
        if let Err(e) = runtime.update_pod_cidr(&cidr).await {
            tracing::error!(%cidr, error = %e, "handing the pod CIDR to the runtime failed");
            continue;
        }
        tracing::info!(%cidr, "pod network ready");
        applied = Some(cidr);
    }
}
