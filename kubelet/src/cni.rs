//! Single-node pod networking: a CNI conflist for containerd's CRI plugin (minik8s's own
//! plugin where the node runs its containerd; else bridge with host-local IPAM on the node's
//! pod CIDR, then portmap), and routes that keep every cluster address
//! on this machine: the cluster and service ranges go to the local bridge, never to the
//! default gateway.

use std::path::Path;
use std::process::Command;

#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error("writing {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
    #[error("{command}: {message}")]
    Command { command: String, message: String },
    #[error("pod CIDR {0:?} is not an IPv4 CIDR")]
    Cidr(String),
}

pub const BRIDGE: &str = "cni0";

/// The first address of an IPv4 CIDR, used as the bridge's (gateway) address: the same one
/// the CNI plugin gives the bridge.
pub fn gateway(cidr: &str) -> Result<(std::net::Ipv4Addr, u8), NetError> {
    let range = minik8s_cni::ipam::Range::parse(cidr).ok_or_else(|| NetError::Cidr(cidr.into()))?;
    Ok((range.gateway, range.prefix))
}

/// The conflist for `pod_cidr` with minik8s's own plugin (`minik8s_cni`), else with the
/// stock ones; `data_dir` keeps host-local's allocations (both use its layout); `mtu`, when
/// set, is the pods' interface MTU (both plugins read the bridge plugin's `mtu`).
pub fn conflist(
    bridge: &str,
    pod_cidr: &str,
    data_dir: &Path,
    minik8s_cni: bool,
    mtu: Option<u32>,
) -> serde_json::Value {
    let mut list = conflist_of(bridge, pod_cidr, data_dir, minik8s_cni);
    if let Some(mtu) = mtu {
        list["plugins"][0]["mtu"] = mtu.into();
    }
    list
}

fn conflist_of(
    bridge: &str,
    pod_cidr: &str,
    data_dir: &Path,
    minik8s_cni: bool,
) -> serde_json::Value {
    if minik8s_cni {
        return minik8s_cni::conflist("minik8s", bridge, pod_cidr, data_dir);
    }
    serde_json::json!({
        "cniVersion": "1.0.0",
        "name": "minik8s",
        "plugins": [
            {
                "type": "bridge",
                "bridge": bridge,
                "isGateway": true,
                "ipMasq": false,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": pod_cidr}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": data_dir.to_string_lossy(),
                }
            },
            {"type": "portmap", "capabilities": {"portMappings": true}, "snat": true}
        ]
    })
}

/// Writes the conflist where containerd's CRI plugin reads it (atomically).
pub fn write_conflist(
    conf_dir: &Path,
    bridge: &str,
    pod_cidr: &str,
    data_dir: &Path,
    minik8s_cni: bool,
    mtu: Option<u32>,
) -> Result<(), NetError> {
    let w = |e| NetError::Write {
        path: conf_dir.display().to_string(),
        source: e,
    };
    std::fs::create_dir_all(conf_dir).map_err(w)?;
    let path = conf_dir.join("10-minik8s.conflist");
    let tmp = conf_dir.join(".10-minik8s.conflist.tmp");
    let text =
        serde_json::to_string_pretty(&conflist(bridge, pod_cidr, data_dir, minik8s_cni, mtu))
            .expect("json");
    if std::fs::read_to_string(&path).ok().as_deref() == Some(text.as_str()) {
        return Ok(());
    }
    std::fs::write(&tmp, text).map_err(w)?;
    std::fs::rename(&tmp, &path).map_err(w)
}

/// Runs `ip` with `args`; its stdout, or its stderr as the error.
pub fn ip(args: &[&str]) -> Result<String, NetError> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| NetError::Command {
            command: format!("ip {}", args.join(" ")),
            message: e.to_string(),
        })?;
    if !out.status.success() {
        return Err(NetError::Command {
            command: format!("ip {}", args.join(" ")),
            message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Creates the bridge with the gateway address of `pod_cidr`, and routes `extra_ranges`
/// (the cluster and service CIDRs) to it so that unmatched cluster traffic dies here.
pub fn ensure_bridge(
    bridge: &str,
    pod_cidr: &str,
    extra_ranges: &[String],
) -> Result<(), NetError> {
    let (gw, bits) = gateway(pod_cidr)?;
    if ip(&["link", "show", bridge]).is_err() {
        ip(&["link", "add", bridge, "type", "bridge"])?;
    }
    let addr = format!("{gw}/{bits}");
    if !ip(&["-4", "addr", "show", "dev", bridge])?.contains(&format!("inet {addr}")) {
        ip(&["addr", "add", &addr, "dev", bridge])?;
    }
    ip(&["link", "set", bridge, "up"])?;
    for range in extra_ranges {
        if range == pod_cidr {
            continue;
        }
        ip(&["route", "replace", range, "dev", bridge])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gateways() {
        assert_eq!(
            gateway("10.244.3.0/24").unwrap(),
            ("10.244.3.1".parse().unwrap(), 24)
        );
        assert_eq!(
            gateway("10.244.3.77/24").unwrap().0.to_string(),
            "10.244.3.1"
        );
        assert!(gateway("nope").is_err());
    }

    #[test]
    fn conflist_shape() {
        let c = conflist("cni0", "10.244.0.0/24", Path::new("/tmp/ipam"), false, None);
        assert_eq!(
            c["plugins"][0]["ipam"]["ranges"][0][0]["subnet"],
            "10.244.0.0/24"
        );
        assert_eq!(c["plugins"][1]["type"], "portmap");
        assert_eq!(c["plugins"][0]["ipMasq"], false);
        let own = conflist("cni0", "10.244.0.0/24", Path::new("/tmp/ipam"), true, None);
        assert_eq!(own["plugins"][0]["type"], minik8s_cni::BRIDGE_TYPE);
        assert_eq!(own["plugins"][0]["subnet"], "10.244.0.0/24");
        // Both keep host-local's store under the same directory and network name.
        assert_eq!(
            own["plugins"][0]["dataDir"],
            c["plugins"][0]["ipam"]["dataDir"]
        );
        assert_eq!(own["name"], c["name"]);
        assert!(c["plugins"][0].get("mtu").is_none());
        for own_plugin in [true, false] {
            let c = conflist(
                "cni0",
                "10.244.0.0/24",
                Path::new("/x"),
                own_plugin,
                Some(1450),
            );
            assert_eq!(c["plugins"][0]["mtu"], 1450);
        }
    }
}
