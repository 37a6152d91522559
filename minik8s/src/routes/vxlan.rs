//! The VXLAN backend, Flannel's default: for nodes that share no L2 segment (host-gw's routes
//! need the next hop on a local link). Every node owns one `flannel.1` vxlan device (VNI 1,
//! UDP 8472, no learning) bound to its InternalIP, and publishes that device's MAC and its
//! public IP as annotations on its own Node, as Flannel's kube subnet manager does, so Flannel
//! tooling reads them as its own. From the Node objects each node keeps, per other node:
//! - a route `<podCIDR> via <podCIDR's first address> dev flannel.1 onlink`,
//! - a permanent neighbour entry for that address → the remote VTEP MAC,
//! - a permanent FDB entry for that MAC → the remote public IP,
//!
//! so the kernel encapsulates without ever asking anyone (no L2/L3 miss handling). The device
//! itself carries its own range's first address as a /32: the source of host-to-pod traffic.
//!
//! In `auto` mode a node whose public IP is on a directly connected subnet gets a plain
//! host-gw route instead (Flannel's DirectRouting), so a flat network never encapsulates.
//!
//! Ownership: routes carry the agent's protocol number, as host-gw's; neighbour and FDB
//! entries live on the agent's own device, which nobody else writes.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use minik8s_kubelet::cni::NetError;

use super::{PodNetworkMode, Reconciler, RouteTable, internal_ip, pod_cidr};

/// Flannel's device name for VNI 1.
pub const DEVICE: &str = "flannel.1";
/// Flannel's default VNI.
pub const VNI: u32 = 1;
/// The Linux kernel's (and Flannel's) VXLAN port.
pub const PORT: u16 = 8472;
/// Outer IPv4 (20) + UDP (8) + VXLAN (8) + inner Ethernet (14) headers.
pub const OVERHEAD: u32 = 50;

/// Flannel's annotations (prefix `flannel.alpha.coreos.com/`).
pub const BACKEND_TYPE: &str = "flannel.alpha.coreos.com/backend-type";
pub const BACKEND_DATA: &str = "flannel.alpha.coreos.com/backend-data";
pub const PUBLIC_IP: &str = "flannel.alpha.coreos.com/public-ip";
pub const KUBE_SUBNET_MANAGER: &str = "flannel.alpha.coreos.com/kube-subnet-manager";

/// The backend-data of a vxlan lease, as Flannel marshals it: `{"VNI":1,"VtepMAC":"..."}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendData {
    pub vni: u32,
    pub vtep_mac: String,
}

impl BackendData {
    pub fn to_json(&self) -> String {
        serde_json::json!({"VNI": self.vni, "VtepMAC": self.vtep_mac}).to_string()
    }

    pub fn parse(text: &str) -> Option<BackendData> {
        let v: serde_json::Value = serde_json::from_str(text).ok()?;
        Some(BackendData {
            vni: u32::try_from(v.get("VNI")?.as_u64()?).ok()?,
            vtep_mac: v.get("VtepMAC")?.as_str()?.to_string(),
        })
    }
}

/// A next hop: `via` on any link (a direct route), or onlink through the vxlan device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hop {
    pub via: Ipv4Addr,
    pub vxlan: bool,
}

/// Everything the agent keeps in the kernel.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Wish {
    /// Destination (normalised CIDR) → next hop.
    pub routes: BTreeMap<String, Hop>,
    /// Remote range's first address → VTEP MAC.
    pub neighbours: BTreeMap<Ipv4Addr, String>,
    /// VTEP MAC → public IP.
    pub fdb: BTreeMap<String, Ipv4Addr>,
}

/// The first address of a normalised CIDR: Flannel's per-node VTEP address.
fn network_address(cidr: &str) -> Option<Ipv4Addr> {
    cidr.split_once('/')?.0.parse().ok()
}

/// A MAC in the lower-case colon form the kernel prints, or None.
fn normalise_mac(mac: &str) -> Option<String> {
    let parts: Vec<&str> = mac.split([':', '-']).collect();
    if parts.len() != 6 {
        return None;
    }
    let mut out = Vec::with_capacity(6);
    for p in parts {
        out.push(format!("{:02x}", u8::from_str_radix(p, 16).ok()?));
    }
    Some(out.join(":"))
}

/// A node's public IP: Flannel's annotation, else its InternalIP.
pub fn public_ip(node: &Node) -> Option<Ipv4Addr> {
    node.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(PUBLIC_IP))
        .and_then(|ip| ip.parse().ok())
        .or_else(|| internal_ip(node))
}

/// A node's vxlan lease: its VTEP MAC, when it runs the vxlan backend with our VNI.
fn vtep_mac(node: &Node) -> Option<String> {
    let annotations = node.metadata.annotations.as_ref()?;
    if annotations.get(BACKEND_TYPE).map(String::as_str) != Some("vxlan") {
        return None;
    }
    let data = BackendData::parse(annotations.get(BACKEND_DATA)?)?;
    if data.vni != VNI {
        return None;
    }
    normalise_mac(&data.vtep_mac)
}

/// The annotations a node running the vxlan backend carries, as Flannel writes them.
pub fn annotations(vtep_mac: &str, public_ip: Ipv4Addr) -> BTreeMap<String, String> {
    let data = BackendData {
        vni: VNI,
        vtep_mac: vtep_mac.to_string(),
    };
    [
        (BACKEND_TYPE, "vxlan".to_string()),
        (BACKEND_DATA, data.to_json()),
        (PUBLIC_IP, public_ip.to_string()),
        (KUBE_SUBNET_MANAGER, "true".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// What this node wants: for every other node with a pod range, a direct route when
/// `direct(public IP)` says its address is on a local link, else the vxlan route, neighbour
/// and FDB entry from its annotations. Nodes lacking what their kind of route needs are left
/// out until they have it; a range that is this node's own is never routed away.
pub fn desired<'a>(
    nodes: impl IntoIterator<Item = &'a Node> + Clone,
    own_node: &str,
    direct: impl Fn(Ipv4Addr) -> bool,
) -> Wish {
    let own_cidr = nodes
        .clone()
        .into_iter()
        .find(|n| n.metadata.name.as_deref() == Some(own_node))
        .and_then(pod_cidr);
    let mut wish = Wish::default();
    for node in nodes {
        if node.metadata.name.as_deref() == Some(own_node) {
            continue;
        }
        let (Some(cidr), Some(public)) = (pod_cidr(node), public_ip(node)) else {
            continue;
        };
        if own_cidr.as_ref() == Some(&cidr) {
            tracing::warn!(node = ?node.metadata.name, %cidr, "another node has this node's pod range");
            continue;
        }
        if direct(public) {
            wish.routes.insert(
                cidr,
                Hop {
                    via: public,
                    vxlan: false,
                },
            );
            continue;
        }
        let (Some(mac), Some(gateway)) = (vtep_mac(node), network_address(&cidr)) else {
            continue;
        };
        wish.routes.insert(
            cidr,
            Hop {
                via: gateway,
                vxlan: true,
            },
        );
        wish.neighbours.insert(gateway, mac.clone());
        wish.fdb.insert(mac, public);
    }
    wish
}

/// Parses `ip -4 -o route show proto N`: vxlan hops are those on [`DEVICE`].
pub fn parse_routes(text: &str) -> BTreeMap<String, Hop> {
    let mut routes = BTreeMap::new();
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let after = |key: &str| words.windows(2).find(|w| w[0] == key).map(|w| w[1]);
        let Some(dst) = words.first() else { continue };
        let dst = if dst.contains('/') {
            dst.to_string()
        } else {
            format!("{dst}/32")
        };
        let via = after("via").and_then(|v| v.parse::<Ipv4Addr>().ok());
        if let (Some(dst), Some(via)) = (super::normalise(&dst), via) {
            let vxlan = after("dev") == Some(DEVICE);
            routes.insert(dst, Hop { via, vxlan });
        }
    }
    routes
}

/// Parses `ip -4 neigh show dev D nud permanent`: `10.244.1.0 lladdr aa:bb:.. PERMANENT`.
pub fn parse_neighbours(text: &str) -> BTreeMap<Ipv4Addr, String> {
    text.lines()
        .filter_map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            let ip = words.first()?.parse().ok()?;
            let mac = words.windows(2).find(|w| w[0] == "lladdr")?[1];
            Some((ip, normalise_mac(mac)?))
        })
        .collect()
}

/// Parses `bridge fdb show dev D`: `aa:bb:.. dst 172.30.1.2 self permanent`; entries without
/// a destination or not permanent are the kernel's, not ours.
pub fn parse_fdb(text: &str) -> BTreeMap<String, Ipv4Addr> {
    text.lines()
        .filter_map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            if !words.contains(&"permanent") {
                return None;
            }
            let mac = normalise_mac(words.first()?)?;
            let dst = words.windows(2).find(|w| w[0] == "dst")?[1].parse().ok()?;
            Some((mac, dst))
        })
        .collect()
}

/// The kernel side: the vxlan device, and the agent's routes, neighbours and FDB entries,
/// through `ip` and `bridge`, optionally in a named network namespace (for tests).
#[derive(Clone, Debug)]
pub struct Kernel {
    pub table: RouteTable,
}

/// The device as made: what the Node's annotations publish.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Device {
    pub mac: String,
    pub mtu: u32,
}

impl Kernel {
    fn cmd(&self, program: &str, args: &[&str]) -> Result<String, NetError> {
        let mut all: Vec<&str> = Vec::new();
        if let Some(ns) = &self.table.netns {
            all.extend(["-n", ns.as_str()]);
        }
        all.extend(args);
        let out = std::process::Command::new(program)
            .args(&all)
            .output()
            .map_err(|e| NetError::Command {
                command: format!("{program} {}", all.join(" ")),
                message: e.to_string(),
            })?;
        if !out.status.success() {
            return Err(NetError::Command {
                command: format!("{program} {}", all.join(" ")),
                message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn ip(&self, args: &[&str]) -> Result<String, NetError> {
        self.cmd("ip", args)
    }

    /// The link holding `addr`, and its MTU.
    pub fn underlay(&self, addr: Ipv4Addr) -> Result<(String, u32), NetError> {
        let text = self.ip(&["-4", "-o", "addr", "show"])?;
        let dev = text
            .lines()
            .find_map(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                let inet = w.windows(2).find(|p| p[0] == "inet")?[1];
                (inet.split('/').next()? == addr.to_string())
                    .then(|| w.get(1).map(|d| d.to_string()))?
            })
            .ok_or_else(|| NetError::Command {
                command: "ip -4 -o addr show".into(),
                message: format!("no link has the node address {addr}"),
            })?;
        let dev = dev.split('@').next().unwrap_or(&dev).to_string();
        let mtu = self.mtu(&dev)?;
        Ok((dev, mtu))
    }

    fn mtu(&self, dev: &str) -> Result<u32, NetError> {
        let text = self.ip(&["-o", "link", "show", "dev", dev])?;
        let w: Vec<&str> = text.split_whitespace().collect();
        w.windows(2)
            .find(|p| p[0] == "mtu")
            .and_then(|p| p[1].parse().ok())
            .ok_or_else(|| NetError::Command {
                command: format!("ip link show dev {dev}"),
                message: "no MTU".into(),
            })
    }

    /// Creates (or re-creates, when it is not as wanted) the vxlan device bound to `local`,
    /// with `cidr`'s first address as its only address; returns its MAC and MTU.
    pub fn ensure_device(&self, local: Ipv4Addr, cidr: &str) -> Result<Device, NetError> {
        let (dev, link_mtu) = self.underlay(local)?;
        let mtu = link_mtu.saturating_sub(OVERHEAD);
        let local_s = local.to_string();
        let vni = VNI.to_string();
        let port = PORT.to_string();
        let wanted = |details: &str| {
            let w: Vec<&str> = details.split_whitespace().collect();
            let after = |key: &str| w.windows(2).find(|p| p[0] == key).map(|p| p[1]);
            w.contains(&"vxlan")
                && after("id") == Some(vni.as_str())
                && after("local") == Some(local_s.as_str())
                && after("dstport") == Some(port.as_str())
                && w.contains(&"nolearning")
        };
        match self.ip(&["-d", "-o", "link", "show", "dev", DEVICE]) {
            Ok(details) if wanted(&details) => {}
            Ok(_) => {
                tracing::info!(device = DEVICE, "re-creating the vxlan device");
                self.ip(&["link", "del", DEVICE])?;
                self.add_device(&vni, &local_s, &dev, &port)?;
            }
            Err(_) => self.add_device(&vni, &local_s, &dev, &port)?,
        }
        if self.mtu(DEVICE)? != mtu {
            self.ip(&["link", "set", DEVICE, "mtu", &mtu.to_string()])?;
        }
        let gateway = network_address(cidr).ok_or_else(|| NetError::Cidr(cidr.into()))?;
        let addr = format!("{gateway}/32");
        let current = self.ip(&["-4", "-o", "addr", "show", "dev", DEVICE])?;
        for line in current.lines() {
            let w: Vec<&str> = line.split_whitespace().collect();
            if let Some(p) = w.windows(2).find(|p| p[0] == "inet")
                && p[1] != addr
            {
                self.ip(&["addr", "del", p[1], "dev", DEVICE])?;
            }
        }
        if !current.contains(&format!("inet {addr} ")) {
            self.ip(&["addr", "replace", &addr, "dev", DEVICE])?;
        }
        self.ip(&["link", "set", DEVICE, "up"])?;
        let link = self.ip(&["-o", "link", "show", "dev", DEVICE])?;
        let w: Vec<&str> = link.split_whitespace().collect();
        let mac = w
            .windows(2)
            .find(|p| p[0] == "link/ether")
            .and_then(|p| normalise_mac(p[1]))
            .ok_or_else(|| NetError::Command {
                command: format!("ip link show dev {DEVICE}"),
                message: "no MAC address".into(),
            })?;
        Ok(Device { mac, mtu })
    }

    fn add_device(&self, vni: &str, local: &str, dev: &str, port: &str) -> Result<(), NetError> {
        self.ip(&[
            "link",
            "add",
            DEVICE,
            "type",
            "vxlan",
            "id",
            vni,
            "local",
            local,
            "dev",
            dev,
            "dstport",
            port,
            "nolearning",
        ])?;
        tracing::info!(device = DEVICE, %local, underlay = %dev, "vxlan device created");
        Ok(())
    }

    /// Whether `ip` is reached without a gateway (Flannel's DirectRouting test).
    pub fn directly_connected(&self, ip: Ipv4Addr) -> bool {
        let Ok(text) = self.ip(&["-4", "-o", "route", "get", &ip.to_string()]) else {
            return false;
        };
        let w: Vec<&str> = text.split_whitespace().collect();
        !w.contains(&"via")
            && !w.contains(&"local")
            && w.windows(2).find(|p| p[0] == "dev").map(|p| p[1]) != Some(DEVICE)
    }

    /// What the agent owns now.
    pub fn owned(&self) -> Result<Wish, NetError> {
        let proto = self.table.protocol.to_string();
        let routes = parse_routes(&self.ip(&[
            "-4", "-o", "route", "show", "table", "main", "proto", &proto,
        ])?);
        let (neighbours, fdb) = if self.ip(&["link", "show", "dev", DEVICE]).is_ok() {
            (
                parse_neighbours(&self.ip(&[
                    "-4",
                    "neigh",
                    "show",
                    "dev",
                    DEVICE,
                    "nud",
                    "permanent",
                ])?),
                parse_fdb(&self.cmd("bridge", &["fdb", "show", "dev", DEVICE])?),
            )
        } else {
            Default::default()
        };
        Ok(Wish {
            routes,
            neighbours,
            fdb,
        })
    }

    /// Makes the kernel equal `desired` as far as it lets it: neighbours and FDB entries
    /// before the routes that need them, routes removed before their entries. Returns how
    /// many entries changed and the errors met (one refused entry does not stop the others).
    pub fn sync(&self, desired: &Wish) -> Result<(usize, Vec<NetError>), NetError> {
        let proto = self.table.protocol.to_string();
        let current = self.owned()?;
        let mut changed = 0;
        let mut errors = Vec::new();
        let mut run = |result: Result<String, NetError>, what: &str| match result {
            Ok(_) => {
                tracing::info!("{what}");
                changed += 1;
            }
            Err(e) => errors.push(e),
        };
        for (ip, mac) in &desired.neighbours {
            if current.neighbours.get(ip) != Some(mac) {
                let ip_s = ip.to_string();
                let r = self.ip(&[
                    "neigh",
                    "replace",
                    &ip_s,
                    "lladdr",
                    mac,
                    "dev",
                    DEVICE,
                    "nud",
                    "permanent",
                ]);
                run(r, &format!("neighbour {ip} → {mac} added"));
            }
        }
        for (mac, dst) in &desired.fdb {
            if current.fdb.get(mac) != Some(dst) {
                let dst_s = dst.to_string();
                let r = self.cmd(
                    "bridge",
                    &[
                        "fdb",
                        "replace",
                        mac,
                        "dev",
                        DEVICE,
                        "dst",
                        &dst_s,
                        "self",
                        "permanent",
                    ],
                );
                run(r, &format!("fdb {mac} → {dst} added"));
            }
        }
        for (dst, hop) in &desired.routes {
            if current.routes.get(dst) != Some(hop) {
                let via = hop.via.to_string();
                let mut args = vec!["route", "replace", dst.as_str(), "via", &via];
                if hop.vxlan {
                    args.extend(["dev", DEVICE, "onlink"]);
                }
                args.extend(["proto", &proto]);
                run(self.ip(&args), &format!("route {dst} via {via} added"));
            }
        }
        for (dst, hop) in &current.routes {
            if !desired.routes.contains_key(dst) {
                let via = hop.via.to_string();
                let r = self.ip(&["route", "del", dst, "via", &via, "proto", &proto]);
                run(r, &format!("route {dst} via {via} removed"));
            }
        }
        for ip in current.neighbours.keys() {
            if !desired.neighbours.contains_key(ip) {
                let ip_s = ip.to_string();
                let r = self.ip(&["neigh", "del", &ip_s, "dev", DEVICE]);
                run(r, &format!("neighbour {ip} removed"));
            }
        }
        for mac in current.fdb.keys() {
            if !desired.fdb.contains_key(mac) {
                let r = self.cmd("bridge", &["fdb", "del", mac, "dev", DEVICE, "self"]);
                run(r, &format!("fdb {mac} removed"));
            }
        }
        Ok((changed, errors))
    }
}

/// The vxlan (or auto) backend as a [`Reconciler`] of the shared Node watch.
pub struct Vxlan {
    client: Client,
    own_node: String,
    kernel: Kernel,
    mode: PodNetworkMode,
    /// The device as last made, for the local address and range it was made for.
    device: Option<(Ipv4Addr, String, Device)>,
    /// What the last successful sync made (skipped at heartbeats that change nothing).
    synced: Option<Wish>,
}

impl Vxlan {
    pub fn new(client: Client, own_node: String, table: RouteTable, mode: PodNetworkMode) -> Vxlan {
        Vxlan {
            client,
            own_node,
            kernel: Kernel { table },
            mode,
            device: None,
            synced: None,
        }
    }

    /// The device for this node's address and range; made once, and again when either
    /// changes or at a resync (someone may have removed it).
    async fn device(&mut self, local: Ipv4Addr, cidr: &str, forced: bool) -> Option<Device> {
        if let Some((l, c, d)) = &self.device
            && *l == local
            && c == cidr
            && !forced
        {
            return Some(d.clone());
        }
        let kernel = self.kernel.clone();
        let range = cidr.to_string();
        match tokio::task::spawn_blocking(move || kernel.ensure_device(local, &range)).await {
            Ok(Ok(device)) => {
                self.device = Some((local, cidr.to_string(), device.clone()));
                Some(device)
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "setting up the vxlan device");
                None
            }
            Err(e) => {
                tracing::warn!(error = %e, "vxlan device task");
                None
            }
        }
    }

    /// Publishes this node's lease on its Node, when its annotations differ.
    async fn publish(&self, own: &Node, device: &Device, public: Ipv4Addr) {
        let wanted = annotations(&device.mac, public);
        let current = own.metadata.annotations.clone().unwrap_or_default();
        if wanted.iter().all(|(k, v)| current.get(k) == Some(v)) {
            return;
        }
        let patch = serde_json::json!({"metadata": {"annotations": wanted}});
        let nodes: Api<Node> = Api::all(self.client.clone());
        match nodes
            .patch(
                &self.own_node,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => {
                tracing::info!(node = %self.own_node, mac = %device.mac, %public, "vxlan lease published")
            }
            Err(e) => tracing::warn!(error = %e, "publishing the vxlan lease"),
        }
    }
}

impl Reconciler for Vxlan {
    async fn reconcile(&mut self, nodes: Vec<Arc<Node>>, forced: bool) {
        if forced {
            self.synced = None;
        }
        let Some(own) = nodes
            .iter()
            .find(|n| n.metadata.name.as_deref() == Some(self.own_node.as_str()))
            .cloned()
        else {
            return;
        };
        // The device needs this node's address and range: nothing until both are known.
        let (Some(local), Some(cidr)) = (internal_ip(&own), pod_cidr(&own)) else {
            return;
        };
        let Some(device) = self.device(local, &cidr, forced).await else {
            return;
        };
        self.publish(&own, &device, public_ip(&own).unwrap_or(local))
            .await;
        let kernel = self.kernel.clone();
        let own_node = self.own_node.clone();
        let mode = self.mode;
        let synced = self.synced.clone();
        let span = tracing::info_span!("vxlan", node = %own_node);
        let result = tokio::task::spawn_blocking(move || {
            let _enter = span.enter();
            let wish = desired(nodes.iter().map(|n| n.as_ref()), &own_node, |ip| {
                mode == PodNetworkMode::Auto && kernel.directly_connected(ip)
            });
            if synced.as_ref() == Some(&wish) {
                return Ok((wish, Vec::new()));
            }
            kernel.sync(&wish).map(|(_, errors)| (wish, errors))
        })
        .await;
        match result {
            Ok(Ok((wish, errors))) => {
                for e in &errors {
                    tracing::warn!(error = %e, "a vxlan entry was refused");
                }
                self.synced = Some(wish);
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "reading vxlan entries"),
            Err(e) => tracing::warn!(error = %e, "vxlan sync task"),
        }
    }
}

#[cfg(test)]
mod tests;
