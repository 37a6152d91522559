//! What travels over stdin and stdout: the bridge network's configuration (which the kubelet
//! writes as a conflist and the runtime hands back with its runtime arguments added) and the
//! result, shaped as the configuration's CNI version wants it.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::{BRIDGE_TYPE, CNI_VERSION};

/// The network configuration on stdin: the bridge network's fields, and what the runtime adds.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetConf {
    pub cni_version: String,
    pub name: String,
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub bridge: String,
    #[serde(default)]
    pub subnet: String,
    #[serde(default)]
    pub data_dir: Option<PathBuf>,
    #[serde(default)]
    pub hairpin_mode: bool,
    /// The pods' interface MTU (the stock bridge plugin's `mtu`): less than the node's link
    /// when an overlay encapsulates; the link's default when absent.
    #[serde(default)]
    pub mtu: Option<u32>,
    /// Extra fields for the delegated portmap plugin (e.g. `snat`).
    #[serde(default)]
    pub portmap: serde_json::Map<String, Value>,
    #[serde(default)]
    pub runtime_config: RuntimeConfig,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeConfig {
    #[serde(default)]
    pub port_mappings: Vec<Value>,
}

/// host-local's default data directory.
pub const DEFAULT_DATA_DIR: &str = "/var/lib/cni/networks";

/// The configuration list the kubelet writes for containerd: one network, this plugin, with
/// hostPort mappings passed to it.
pub fn conflist(name: &str, bridge: &str, subnet: &str, data_dir: &Path) -> Value {
    json!({
        "cniVersion": CNI_VERSION,
        "name": name,
        "plugins": [{
            "type": BRIDGE_TYPE,
            "bridge": bridge,
            "subnet": subnet,
            "dataDir": data_dir.to_string_lossy(),
            "hairpinMode": true,
            "portmap": {"snat": true},
            "capabilities": {"portMappings": true},
        }]
    })
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Interface {
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub mac: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub sandbox: String,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct IpConfig {
    /// "4" or "6": only in results before 1.0.0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    pub address: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,
    pub interface: usize,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Route {
    pub dst: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gw: Option<String>,
}

/// A CNI 1.0.0 result.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CniResult {
    pub cni_version: String,
    pub interfaces: Vec<Interface>,
    pub ips: Vec<IpConfig>,
    pub routes: Vec<Route>,
    pub dns: Value,
}

/// A result as `version` writes it: before 1.0.0 each address names its IP version.
pub fn in_version(mut r: CniResult, version: &str) -> CniResult {
    r.cni_version = version.to_string();
    if version != CNI_VERSION {
        for ip in &mut r.ips {
            let v6 = ip.address.contains(':');
            ip.version = Some(if v6 { "6" } else { "4" }.into());
        }
    }
    r
}
