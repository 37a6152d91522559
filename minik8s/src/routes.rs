//! The route agent: host-gw pod routing, the job of Flannel's host-gw backend. Every node owns
//! one pod range (`spec.podCIDR`, from node IPAM); a pod on another node is reached by routing
//! that node's range via its InternalIP, so nodes on one L2 segment need no overlay.
//!
//! The agent watches Nodes and keeps the kernel's main table equal to that wish list. It marks
//! its routes with a route protocol number of its own and only ever lists, replaces or deletes
//! routes carrying that number, so routes made by anyone else (the kubelet's bridge routes,
//! the machine's own) are never touched. Two clusters on one machine need distinct numbers.

pub mod vxlan;

use minik8s_kubelet::cni::{NetError, ip};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client};

/// The route protocol number (`ip route ... proto N`) the agent marks its routes with.
pub const DEFAULT_PROTOCOL: u8 = 211;

/// Flags of the route agent.
#[derive(Args, Clone, Debug)]
pub struct RouteArgs {
    /// Do not route other nodes' pod ranges via their InternalIPs.
    #[arg(long)]
    pub disable_route_agent: bool,
    /// The route protocol number marking the routes the agent owns (distinct per cluster).
    #[arg(long, default_value_t = DEFAULT_PROTOCOL)]
    pub route_protocol: u8,
    /// How pods reach other nodes: host-gw routes (every node on one L2 segment), a VXLAN
    /// overlay (Flannel's default backend), or auto: a direct route to each node whose address
    /// is on a directly connected subnet, VXLAN to the others (Flannel's DirectRouting).
    #[arg(long, value_enum, env = "MINIK8S_POD_NETWORK_MODE", default_value_t = PodNetworkMode::HostGw)]
    pub pod_network_mode: PodNetworkMode,
}

/// The pod network backends (Flannel's names).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodNetworkMode {
    HostGw,
    Vxlan,
    Auto,
}

impl RouteArgs {
    /// The MTU pods get on the node at `node_ip`: VXLAN's encapsulation takes 50 bytes of
    /// the link's (auto may encapsulate too); host-gw leaves the default.
    pub fn pod_mtu(&self, node_ip: IpAddr) -> Option<u32> {
        match (self.pod_network_mode, node_ip) {
            (PodNetworkMode::HostGw, _) => None,
            (_, IpAddr::V4(ip)) => {
                let kernel = vxlan::Kernel {
                    table: RouteTable {
                        protocol: self.route_protocol,
                        netns: None,
                    },
                };
                let link_mtu = kernel.underlay(ip).map(|(_, mtu)| mtu).unwrap_or_else(|e| {
                    tracing::warn!(error = %e, "no link MTU for the node address: assuming 1500");
                    1500
                });
                Some(link_mtu.saturating_sub(vxlan::OVERHEAD))
            }
            (_, IpAddr::V6(_)) => Some(1500 - vxlan::OVERHEAD),
        }
    }
}

/// Destination (a normalised IPv4 CIDR) → gateway.
pub type Routes = BTreeMap<String, Ipv4Addr>;

/// `a.b.c.d/n` with the host bits cleared, or None for anything but IPv4.
pub(crate) fn normalise(cidr: &str) -> Option<String> {
    let (ip, bits) = cidr.split_once('/')?;
    let ip: Ipv4Addr = ip.parse().ok()?;
    let bits: u32 = bits.parse().ok()?;
    if bits > 32 {
        return None;
    }
    let mask = u32::MAX.checked_shl(32 - bits).unwrap_or(0);
    Some(format!("{}/{bits}", Ipv4Addr::from(u32::from(ip) & mask)))
}

/// A node's IPv4 pod range, normalised.
pub(crate) fn pod_cidr(node: &Node) -> Option<String> {
    let spec = node.spec.as_ref()?;
    let cidrs = spec
        .pod_cidrs
        .clone()
        .filter(|c| !c.is_empty())
        .or_else(|| spec.pod_cidr.clone().map(|c| vec![c]))?;
    cidrs.iter().find_map(|c| normalise(c))
}

/// A node's first IPv4 InternalIP.
pub(crate) fn internal_ip(node: &Node) -> Option<Ipv4Addr> {
    node.status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .into_iter()
        .flatten()
        .filter(|a| a.type_ == "InternalIP")
        .find_map(|a| match a.address.parse::<IpAddr>() {
            Ok(IpAddr::V4(ip)) => Some(ip),
            _ => None,
        })
}

/// The routes this node wants: every other node's IPv4 pod range via its IPv4 InternalIP.
/// Nodes without either are left out until they have both.
/// A range that is this node's own is never routed away, even if another node claims it too.
pub fn desired_routes<'a>(
    nodes: impl IntoIterator<Item = &'a Node> + Clone,
    own_node: &str,
) -> Routes {
    let own_cidr = nodes
        .clone()
        .into_iter()
        .find(|n| n.metadata.name.as_deref() == Some(own_node))
        .and_then(pod_cidr);
    let mut routes = Routes::new();
    for node in nodes {
        if node.metadata.name.as_deref() == Some(own_node) {
            continue;
        }
        let Some(cidr) = pod_cidr(node) else {
            continue;
        };
        if own_cidr.as_ref() == Some(&cidr) {
            tracing::warn!(node = ?node.metadata.name, %cidr, "another node has this node's pod range");
            continue;
        }
        if let Some(gateway) = internal_ip(node) {
            routes.insert(cidr, gateway);
        }
    }
    routes
}

/// Parses `ip -4 -o route show proto N`: `10.244.1.0/24 via 172.30.0.2 dev eth0 ...`.
/// Routes without a gateway cannot be ours and are skipped.
pub fn parse_routes(text: &str) -> Routes {
    let mut routes = Routes::new();
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some(dst) = words.first() else { continue };
        let dst = if dst.contains('/') {
            dst.to_string()
        } else {
            format!("{dst}/32")
        };
        let via = words
            .windows(2)
            .find(|w| w[0] == "via")
            .and_then(|w| w[1].parse::<Ipv4Addr>().ok());
        if let (Some(dst), Some(via)) = (normalise(&dst), via) {
            routes.insert(dst, via);
        }
    }
    routes
}

/// The kernel routing table, through the `ip` command, optionally in a named network namespace
/// (`ip -n`), so tests can work on a namespace of their own.
#[derive(Clone, Debug)]
pub struct RouteTable {
    pub protocol: u8,
    pub netns: Option<String>,
}

impl RouteTable {
    fn ip(&self, args: &[&str]) -> Result<String, NetError> {
        let mut all: Vec<&str> = Vec::new();
        if let Some(ns) = &self.netns {
            all.extend(["-n", ns.as_str()]);
        }
        all.extend(args);
        ip(&all)
    }

    /// The routes carrying our protocol number.
    pub fn owned(&self) -> Result<Routes, NetError> {
        let proto = self.protocol.to_string();
        Ok(parse_routes(&self.ip(&[
            "-4", "-o", "route", "show", "table", "main", "proto", &proto,
        ])?))
    }

    /// Makes the owned routes equal `desired`, as far as the kernel lets it: a route it refuses
    /// (a gateway that is not on a local link, as a hollow node's) does not stop the others.
    /// Returns how many routes changed and the errors met.
    pub fn sync(&self, desired: &Routes) -> Result<(usize, Vec<NetError>), NetError> {
        let proto = self.protocol.to_string();
        let current = self.owned()?;
        let mut changed = 0;
        let mut errors = Vec::new();
        for (dst, via) in desired {
            if current.get(dst) != Some(via) {
                let via = via.to_string();
                match self.ip(&["route", "replace", dst, "via", &via, "proto", &proto]) {
                    Ok(_) => {
                        tracing::info!(%dst, %via, "route added");
                        changed += 1;
                    }
                    Err(e) => errors.push(e),
                }
            }
        }
        for (dst, via) in &current {
            if !desired.contains_key(dst) {
                let via = via.to_string();
                match self.ip(&["route", "del", dst, "via", &via, "proto", &proto]) {
                    Ok(_) => {
                        tracing::info!(%dst, %via, "route removed");
                        changed += 1;
                    }
                    Err(e) => errors.push(e),
                }
            }
        }
        Ok((changed, errors))
    }
}

/// What a node does with a Node list once the first full list is in: make the kernel match it.
/// [`watch_nodes`] calls it on every change and at every resync (`forced`), never before.
pub trait Reconciler {
    fn reconcile(
        &mut self,
        nodes: Vec<Arc<Node>>,
        forced: bool,
    ) -> impl std::future::Future<Output = ()> + Send;
}

/// Watches Nodes and hands the whole cache to `reconciler` until `shutdown` resolves; the
/// kernel is re-checked now and then as well (`forced`), in case someone removed an entry of
/// ours. Shared by every backend, so each keeps the same guarantees.
pub async fn watch_nodes(
    client: Client,
    reconciler: &mut impl Reconciler,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let (store, writer) = reflector::store::<Node>();
    let events = reflector(
        writer,
        watcher(Api::<Node>::all(client), watcher::Config::default()),
    )
    .default_backoff();
    let mut events = std::pin::pin!(events);
    let mut shutdown = std::pin::pin!(shutdown);
    let mut resync = tokio::time::interval(Duration::from_secs(30));
    // Until the first list is complete the cache is partial: syncing then would remove the
    // entries of nodes not seen yet.
    let mut ready = false;
    loop {
        let forced = tokio::select! {
            _ = &mut shutdown => return,
            _ = resync.tick() => true,
            event = events.next() => match event {
                Some(Ok(watcher::Event::InitDone)) => {
                    ready = true;
                    false
                }
                Some(Ok(watcher::Event::Init | watcher::Event::InitApply(_))) => continue,
                Some(Ok(_)) => false,
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "watching nodes");
                    continue;
                }
                None => return,
            },
        };
        if !ready {
            continue;
        }
        // Every wake-up compares the whole wish list with the cache: nothing depends on the event.
        reconciler.reconcile(store.state(), forced).await;
    }
}

/// The host-gw backend: [`desired_routes`] kept in a [`RouteTable`].
pub struct HostGw {
    pub table: RouteTable,
    pub own_node: String,
    /// What the last successful sync made: heartbeats change Nodes every few seconds without
    /// changing the routes, and those need no look at the kernel.
    synced: Option<Routes>,
}

impl HostGw {
    pub fn new(table: RouteTable, own_node: String) -> HostGw {
        HostGw {
            table,
            own_node,
            synced: None,
        }
    }
}

impl Reconciler for HostGw {
    async fn reconcile(&mut self, nodes: Vec<Arc<Node>>, forced: bool) {
        if forced {
            self.synced = None;
        }
        let desired = desired_routes(nodes.iter().map(|n| n.as_ref()), &self.own_node);
        if self.synced.as_ref() == Some(&desired) {
            return;
        }
        let table = self.table.clone();
        let span = tracing::info_span!("routes", node = %self.own_node, routes = desired.len());
        let wanted = desired.clone();
        let result = tokio::task::spawn_blocking(move || {
            let _enter = span.enter();
            table.sync(&wanted)
        })
        .await;
        match result {
            // Refused routes are tried again when the wish list changes or at the resync,
            // not at every heartbeat.
            Ok(Ok((_, errors))) => {
                for e in &errors {
                    tracing::warn!(error = %e, "a route was refused");
                }
                self.synced = Some(desired);
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "reading routes"),
            Err(e) => tracing::warn!(error = %e, "route sync task"),
        }
    }
}

/// Watches Nodes and keeps `table` equal to [`desired_routes`] until `shutdown` resolves.
pub async fn run(
    client: Client,
    own_node: String,
    table: RouteTable,
    shutdown: impl std::future::Future<Output = ()>,
) {
    watch_nodes(client, &mut HostGw::new(table, own_node), shutdown).await
}

/// Runs the route agent of the backend `args` pick, as the node `own_node`.
pub async fn agent(
    args: RouteArgs,
    client: Client,
    own_node: String,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let table = RouteTable {
        protocol: args.route_protocol,
        netns: None,
    };
    match args.pod_network_mode {
        PodNetworkMode::HostGw => run(client, own_node, table, shutdown).await,
        mode => {
            let mut backend = vxlan::Vxlan::new(client.clone(), own_node, table, mode);
            watch_nodes(client, &mut backend, shutdown).await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeAddress, NodeSpec, NodeStatus};
    use kube::api::ObjectMeta;
    use std::process::Command;

    fn node(name: &str, cidr: Option<&str>, ip: Option<&str>) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                pod_cidr: cidr.map(Into::into),
                pod_cidrs: cidr.map(|c| vec![c.into()]),
                ..Default::default()
            }),
            status: Some(NodeStatus {
                addresses: ip.map(|ip| {
                    vec![
                        NodeAddress {
                            type_: "Hostname".into(),
                            address: name.into(),
                        },
                        NodeAddress {
                            type_: "InternalIP".into(),
                            address: ip.into(),
                        },
                    ]
                }),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn desired_routes_skip_self_and_incomplete_nodes() {
        let nodes = [
            node("a", Some("10.244.0.0/24"), Some("172.30.0.1")),
            node("b", Some("10.244.1.0/24"), Some("172.30.0.2")),
            node("c", Some("10.244.2.0/24"), None),
            node("d", None, Some("172.30.0.4")),
            node("e", Some("10.244.4.7/24"), Some("172.30.0.5")),
            node("v6", Some("fd00::/64"), Some("fd00::1")),
        ];
        let routes = desired_routes(&nodes, "a");
        let want: Routes = [
            ("10.244.1.0/24".to_string(), "172.30.0.2".parse().unwrap()),
            ("10.244.4.0/24".to_string(), "172.30.0.5".parse().unwrap()),
        ]
        .into();
        assert_eq!(routes, want);
        // Seen from b, a's range is routed and b's own is not.
        let from_b = desired_routes(&nodes, "b");
        assert!(from_b.contains_key("10.244.0.0/24"));
        assert!(!from_b.contains_key("10.244.1.0/24"));
    }

    #[test]
    fn own_range_claimed_by_another_node_is_not_routed() {
        let nodes = [
            node("a", Some("10.244.0.0/24"), Some("172.30.0.1")),
            node("b", Some("10.244.0.0/24"), Some("172.30.0.2")),
            node("c", Some("10.244.1.0/24"), Some("172.30.0.3")),
        ];
        let routes = desired_routes(&nodes, "a");
        assert_eq!(routes.keys().collect::<Vec<_>>(), ["10.244.1.0/24"]);
    }

    #[test]
    fn dual_stack_nodes_route_their_ipv4_range() {
        let mut n = node("b", Some("fd00::/64"), Some("172.30.0.2"));
        n.spec.as_mut().unwrap().pod_cidrs = Some(vec!["fd00::/64".into(), "10.244.9.0/24".into()]);
        let routes = desired_routes(&[n], "a");
        assert_eq!(
            routes.get("10.244.9.0/24").unwrap().to_string(),
            "172.30.0.2"
        );
    }

    #[test]
    fn parses_ip_route_output() {
        let text = "10.244.1.0/24 via 172.30.0.2 dev mk8s0 proto 211 \n\
                    10.244.2.0/24 via 172.30.0.3 dev mk8s0 proto 211 onlink \n\
                    10.9.9.9 via 172.30.0.9 dev mk8s0 proto 211 \n\
                    10.244.3.0/24 dev cni0 proto 211 scope link \n";
        let routes = parse_routes(text);
        assert_eq!(routes.len(), 3);
        assert_eq!(routes["10.244.2.0/24"].to_string(), "172.30.0.3");
        assert_eq!(routes["10.9.9.9/32"].to_string(), "172.30.0.9");
    }

    /// A network namespace of the test's own, deleted on drop.
    struct Netns(String);

    impl Netns {
        fn new() -> Option<Netns> {
            let name = format!("mk8s-rt-{}", std::process::id());
            let ok = |args: &[&str]| {
                Command::new("ip")
                    .args(args)
                    .status()
                    .is_ok_and(|s| s.success())
            };
            if !ok(&["netns", "add", &name]) {
                return None;
            }
            let ns = Netns(name.clone());
            for args in [
                &[
                    "-n", &name, "link", "add", "rt0", "type", "veth", "peer", "name", "rt1",
                ][..],
                &["-n", &name, "addr", "add", "172.31.250.1/24", "dev", "rt0"],
                &["-n", &name, "link", "set", "rt0", "up"],
                &["-n", &name, "link", "set", "rt1", "up"],
            ] {
                assert!(ok(args), "ip {args:?}");
            }
            Some(ns)
        }
    }

    impl Drop for Netns {
        fn drop(&mut self) {
            let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
        }
    }

    fn is_root() -> bool {
        std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
    }

    /// The agent against the in-process API server, on a network namespace of the test's own:
    /// routes follow Nodes coming, changing and going, and foreign routes stay.
    #[tokio::test]
    async fn agent_follows_nodes_in_a_network_namespace() {
        if !is_root() {
            eprintln!("skipped: needs root to create a network namespace");
            return;
        }
        let ns = Netns::new().expect("ip netns add");
        let table = RouteTable {
            protocol: DEFAULT_PROTOCOL,
            netns: Some(ns.0.clone()),
        };
        // A route of someone else's in the same range: never touched.
        let foreign = [
            "-n",
            &ns.0,
            "route",
            "add",
            "10.244.7.0/24",
            "via",
            "172.31.250.7",
        ];
        assert!(Command::new("ip").args(foreign).status().unwrap().success());

        let server = testkit::InProcess::start(testkit::Backend::Sqlite)
            .await
            .unwrap();
        let client = server.client();
        let nodes: Api<Node> = Api::all(client.clone());
        let create = |n: Node| {
            let nodes = nodes.clone();
            async move {
                let name = n.metadata.name.clone().unwrap();
                let status = serde_json::json!({"status": n.status});
                nodes.create(&Default::default(), &n).await.unwrap();
                nodes
                    .patch_status(
                        &name,
                        &Default::default(),
                        &kube::api::Patch::Merge(&status),
                    )
                    .await
                    .unwrap();
            }
        };
        create(node("self", Some("10.244.0.0/24"), Some("172.31.250.1"))).await;
        create(node("b", Some("10.244.1.0/24"), Some("172.31.250.2"))).await;
        create(node("c", None, Some("172.31.250.3"))).await;
        // A gateway off every local link (as a hollow node's): the kernel refuses that route,
        // and the others are made all the same.
        create(node("far", Some("10.244.5.0/24"), Some("100.127.0.5"))).await;

        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let agent = tokio::spawn(run(client.clone(), "self".into(), table.clone(), async {
            let _ = stopped.await;
        }));
        let deadline = Duration::from_secs(20);
        let want = |pairs: &[(&str, &str)]| -> Routes {
            pairs
                .iter()
                .map(|(d, g)| (d.to_string(), g.parse().unwrap()))
                .collect()
        };
        let expect = want(&[("10.244.1.0/24", "172.31.250.2")]);
        testkit::eventually(deadline, "b's range routed", || async {
            (table.owned().unwrap() == expect).then_some(())
        })
        .await;

        // c gets its range from IPAM: routed then.
        let patch = serde_json::json!({"spec": {"podCIDR": "10.244.2.0/24", "podCIDRs": ["10.244.2.0/24"]}});
        nodes
            .patch("c", &Default::default(), &kube::api::Patch::Merge(&patch))
            .await
            .unwrap();
        let expect = want(&[
            ("10.244.1.0/24", "172.31.250.2"),
            ("10.244.2.0/24", "172.31.250.3"),
        ]);
        testkit::eventually(deadline, "c's range routed", || async {
            (table.owned().unwrap() == expect).then_some(())
        })
        .await;

        nodes.delete("b", &Default::default()).await.unwrap();
        let expect = want(&[("10.244.2.0/24", "172.31.250.3")]);
        testkit::eventually(deadline, "b's route removed", || async {
            (table.owned().unwrap() == expect).then_some(())
        })
        .await;

        let _ = stop.send(());
        agent.await.unwrap();
        let all = Command::new("ip")
            .args(["-n", &ns.0, "-4", "route", "show"])
            .output()
            .unwrap();
        let all = String::from_utf8_lossy(&all.stdout);
        assert!(all.contains("10.244.7.0/24 via 172.31.250.7"), "{all}");
        assert_eq!(table.sync(&Routes::new()).unwrap().0, 1);
        assert!(table.owned().unwrap().is_empty());
        let all = Command::new("ip")
            .args(["-n", &ns.0, "-4", "route", "show"])
            .output()
            .unwrap();
        assert!(String::from_utf8_lossy(&all.stdout).contains("10.244.7.0/24"));
    }
}
