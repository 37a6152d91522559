//! Hollow kubelets, as kubemark makes them: the real kubelet (node registration, lease, status,
//! pod workers, volumes, probes, the status path) runs once per hollow node on a fake runtime
//! ([`FakeRuntime::hollow`]), hundreds in one process over one shared client. Scale tests then
//! load the API server with the requests real kubelets make, and exercise the kubelet itself,
//! which the light hollow nodes of the controllers crate (one writer for every node) do not.
//!
//! A hollow kubelet leaves the host alone: no kubelet API listener, no bridge or CNI files, no
//! cgroups, no mounts (volumes are plain directories under its own root). Its addresses exist
//! only as strings, the same as the light hollow nodes': nothing is ever sent to them.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::config::KubeletConfig;
use crate::node::Capacity;
use crate::runtime::fake::FakeRuntime;
use minik8s_informers::Informers;

use crate::{KubeletError, RunOptions, Sources, run_with};

/// Where the "runtime socket" of a hollow kubelet is: nowhere, nothing connects to it.
const NO_RUNTIME_SOCKET: &str = "/dev/null";

#[derive(Clone, Debug)]
pub struct HollowKubelets {
    /// How many nodes: named `<prefix><index>`.
    pub count: usize,
    pub prefix: String,
    /// What each node offers.
    pub capacity: Capacity,
    pub max_pods: u32,
    /// Labels of every node, besides the kubelet's own.
    pub labels: Vec<(String, String)>,
    /// Each kubelet's root (pods, volumes, logs) is `<root_dir>/<node name>`.
    pub root_dir: PathBuf,
    /// The node Leases' duration; they are renewed every quarter of it.
    pub lease_duration_seconds: i32,
    /// How often each kubelet looks at its node's status (and writes it when it changed).
    pub status_update_frequency: Duration,
}

pub use minik8s_api::hollow::node_address;

/// Node `index`'s pod range when the cluster assigns none, as the light hollow nodes'.
pub fn pod_subnet(index: usize) -> String {
    format!("{}/24", minik8s_api::hollow::pod_subnet(index))
}

/// A node's capacity from quantities (`4`, `16Gi`), as the light hollow nodes take them: CPUs
/// are whole (rounded up), ephemeral storage is 100Gi. `None` when one does not parse.
pub fn capacity(cpu: &str, memory: &str) -> Option<Capacity> {
    let cpus = minik8s_api::quantity::parse(cpu)?;
    let memory = minik8s_api::quantity::parse(memory)?;
    if !(cpus >= 0.0 && memory >= 0.0) {
        return None;
    }
    Some(Capacity {
        cpus: cpus.ceil() as u32,
        memory_bytes: memory as u64,
        ephemeral_bytes: 100 << 30,
    })
}

impl HollowKubelets {
    pub fn node_name(&self, index: usize) -> String {
        format!("{}{index}", self.prefix)
    }

    /// The kubelet configuration of node `index`.
    pub fn config(&self, index: usize) -> KubeletConfig {
        let name = self.node_name(index);
        let mut config = KubeletConfig::new(
            &name,
            node_address(index).into(),
            self.root_dir.join(&name),
            NO_RUNTIME_SOCKET,
        );
        config.pod_cidr = Some(pod_subnet(index));
        config.max_pods = self.max_pods;
        config.labels = self.labels.clone();
        config.manage_host = false;
        config.node_lease_duration_seconds = self.lease_duration_seconds;
        config.node_status_update_frequency = self.status_update_frequency;
        config
    }

    fn options(&self) -> RunOptions {
        RunOptions {
            device_plugins: false,
            serve_api: false,
            pod_network: None,
            capacity: Some(self.capacity.clone()),
        }
    }
}

/// Runs the kubelets, each in its own task, until one fails (to register its node).
pub async fn run(client: kube::Client, kubelets: HollowKubelets) -> Result<(), KubeletError> {
    let mut tasks = tokio::task::JoinSet::new();
    // One factory, one selection of pods and one of the Node per kubelet (each kubelet
    // subscribing to a cache of every pod would wake every kubelet for every pod change).
    let informers = Informers::new(client.clone());
    for index in 0..kubelets.count {
        let config = kubelets.config(index);
        let runtime = Arc::new(FakeRuntime::hollow());
        let sources = Sources::own(&informers, &config.node_name);
        tasks.spawn(run_with(
            config,
            client.clone(),
            runtime,
            sources,
            kubelets.options(),
        ));
    }
    tracing::info!(count = kubelets.count, prefix = %kubelets.prefix, "hollow kubelets started");
    while let Some(done) = tasks.join_next().await {
        match done {
            Ok(Err(e)) => return Err(e),
            Ok(Ok(())) => {}
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_as_the_light_hollow_nodes() {
        assert_eq!(pod_subnet(0), "100.64.0.0/24");
        assert_eq!(pod_subnet(258), "100.65.2.0/24");
    }

    #[test]
    fn capacity_from_quantities() {
        let c = capacity("4", "16Gi").unwrap();
        assert_eq!((c.cpus, c.memory_bytes), (4, 16 << 30));
        assert_eq!(capacity("500m", "1G").unwrap().cpus, 1);
        assert!(capacity("four", "1G").is_none());
    }
}
