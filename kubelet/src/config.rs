//! The kubelet's settings, named after upstream's flags and KubeletConfiguration fields.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Clone, Debug)]
pub struct KubeletConfig {
    pub node_name: String,
    /// The address reported as InternalIP and used as hostIP.
    pub node_ip: IpAddr,
    /// Root of the kubelet's directories (`pods/`, `logs/`, `images/`).
    pub root_dir: PathBuf,
    pub cluster_dns: Vec<IpAddr>,
    pub cluster_domain: String,
    /// Used when the Node has no `spec.podCIDR`.
    pub pod_cidr: Option<String>,
    /// Parent cgroup of every pod (cgroupfs driver, cgroup v1).
    pub cgroup_root: String,
    pub cgroups_path: PathBuf,
    pub container_runtime_endpoint: PathBuf,
    /// Directory the CNI configuration is written to (containerd's CRI `conf_dir`).
    pub cni_conf_dir: PathBuf,
    /// The bridge pods attach to.
    pub bridge: String,
    /// Whether the runtime's CNI plugin directory holds minik8s's own plugin (true for the
    /// containerd the node starts itself); else the conflist names the stock plugins.
    pub minik8s_cni: bool,
    /// The pods' interface MTU, when an overlay takes part of the link's (VXLAN: 50 bytes).
    pub pod_mtu: Option<u32>,
    /// The port of the kubelet's HTTPS API (logs, exec, port-forward, stats).
    pub port: u16,
    /// The address the kubelet's HTTPS API listens on.
    pub address: IpAddr,
    /// The kubelet's serving certificate and the CA its clients' certificates must chain to;
    /// without it the kubelet serves no API.
    pub tls: Option<ServingTls>,
    pub max_pods: u32,
    pub resolv_conf: PathBuf,
    pub node_status_update_frequency: Duration,
    pub node_lease_duration_seconds: i32,
    /// How often the runtime is listed to notice changes made behind the kubelet's back.
    pub relist_period: Duration,
    pub labels: Vec<(String, String)>,
    /// Whether the kubelet changes the host it runs on: pod cgroups, tmpfs and subPath bind
    /// mounts for volumes, the pods directory made a shared mount. Hollow kubelets (hundreds
    /// in one process, on a runtime that runs nothing) leave the host alone: their volumes are
    /// plain directories under their own root.
    pub manage_host: bool,
}

/// The TLS material of the kubelet's API: its serving certificate (signed by the cluster CA
/// for the node's names; it may be replaced while the API listens), and the CA, PEM encoded,
/// that client certificates must chain to.
#[derive(Clone)]
pub struct ServingTls {
    pub cert: std::sync::Arc<crate::server::serving_cert::ServingCert>,
    pub client_ca_pem: String,
}

impl std::fmt::Debug for ServingTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServingTls").finish_non_exhaustive()
    }
}

impl KubeletConfig {
    pub fn new(
        node_name: &str,
        node_ip: IpAddr,
        root_dir: impl Into<PathBuf>,
        runtime: impl Into<PathBuf>,
    ) -> Self {
        let root_dir = root_dir.into();
        KubeletConfig {
            node_name: node_name.to_string(),
            node_ip,
            cni_conf_dir: root_dir.join("cni"),
            bridge: crate::cni::BRIDGE.into(),
            minik8s_cni: false,
            pod_mtu: None,
            root_dir,
            cluster_dns: Vec::new(),
            cluster_domain: "cluster.local".into(),
            pod_cidr: None,
            cgroup_root: "/kubepods".into(),
            cgroups_path: "/sys/fs/cgroup".into(),
            container_runtime_endpoint: runtime.into(),
            port: 10250,
            address: IpAddr::from([0, 0, 0, 0]),
            tls: None,
            max_pods: 110,
            resolv_conf: "/etc/resolv.conf".into(),
            node_status_update_frequency: Duration::from_secs(10),
            node_lease_duration_seconds: 40,
            relist_period: Duration::from_secs(2),
            labels: Vec::new(),
            manage_host: true,
        }
    }

    pub fn pods_dir(&self) -> PathBuf {
        self.root_dir.join("pods")
    }

    pub fn logs_dir(&self) -> PathBuf {
        self.root_dir.join("logs")
    }
}
