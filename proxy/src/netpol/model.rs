//! What the NetworkPolicies mean for this node's pods, as upstream's API documents it, worked
//! out once so both kernel backends render the same decisions: a pod selected by a policy
//! with `Ingress` (or `Egress`) among its types is isolated in that direction, and then only
//! the union of those policies' rules lets traffic through. Everything is flattened to
//! (peer CIDR, port) pairs the kernel matches directly: pod and namespace selectors become the
//! selected pods' addresses, an ipBlock's `except` is cut out of its CIDR, and a named port
//! becomes the number the serving pod gives it.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyPeer, NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use minik8s_api::selector::Selector;

/// An IPv4 prefix; a pod's address is a /32.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cidr {
    pub addr: Ipv4Addr,
    pub prefix: u8,
}

impl Cidr {
    pub fn host(addr: Ipv4Addr) -> Cidr {
        Cidr { addr, prefix: 32 }
    }

    /// `a.b.c.d/n` (host bits cleared), or `None` for IPv6 and anything malformed: pods here
    /// have IPv4 addresses only.
    pub fn parse(s: &str) -> Option<Cidr> {
        let (addr, prefix) = s.split_once('/')?;
        let addr: Ipv4Addr = addr.parse().ok()?;
        let prefix: u8 = prefix.parse().ok().filter(|p| *p <= 32)?;
        Some(Cidr {
            addr: Ipv4Addr::from(u32::from(addr) & mask(prefix)),
            prefix,
        })
    }

    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        u32::from(ip) & mask(self.prefix) == u32::from(self.addr)
    }

    fn covers(&self, other: &Cidr) -> bool {
        other.prefix >= self.prefix && self.contains(other.addr)
    }

    /// This prefix without `hole`: the halves that miss it, level by level (at most one
    /// prefix per bit between the two lengths).
    fn minus(self, hole: &Cidr) -> Vec<Cidr> {
        if hole.covers(&self) {
            return Vec::new();
        }
        if !self.covers(hole) {
            return vec![self];
        }
        let prefix = self.prefix + 1;
        let low = Cidr {
            addr: self.addr,
            prefix,
        };
        let high = Cidr {
            addr: Ipv4Addr::from(u32::from(self.addr) | (1u32 << (32 - prefix))),
            prefix,
        };
        let mut out = low.minus(hole);
        out.extend(high.minus(hole));
        out
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

fn mask(prefix: u8) -> u32 {
    if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    /// The API's name (`TCP` when unset, as upstream defaults it); `None` for anything else.
    fn parse(s: Option<&str>) -> Option<Protocol> {
        match s.unwrap_or("TCP") {
            "TCP" => Some(Protocol::Tcp),
            "UDP" => Some(Protocol::Udp),
            "SCTP" => Some(Protocol::Sctp),
            _ => None,
        }
    }

    /// As iptables and nft spell it.
    pub fn as_str(&self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }
}

/// A protocol and, when the rule names one, a port range (`port` to `endPort`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PortMatch {
    pub protocol: Protocol,
    pub ports: Option<(u16, u16)>,
}

/// One thing a rule lets through: traffic from (ingress) or to (egress) `peer` on `port`;
/// `None` is any.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Allow {
    pub peer: Option<Cidr>,
    pub port: Option<PortMatch>,
}

/// A pod of this node and what may reach it and what it may reach; `None` where no policy
/// isolates it in that direction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodRules {
    /// `namespace/name`.
    pub key: String,
    pub ip: Ipv4Addr,
    pub ingress: Option<Vec<Allow>>,
    pub egress: Option<Vec<Allow>>,
}

/// A pod as policies see it: on the pod network, with an address.
struct PodView<'a> {
    namespace: &'a str,
    name: &'a str,
    node: Option<&'a str>,
    labels: Option<&'a BTreeMap<String, String>>,
    ip: Ipv4Addr,
    pod: &'a Pod,
}

impl<'a> PodView<'a> {
    /// `None` for host-network pods (policies do not apply to them), finished pods and pods
    /// with no IPv4 address yet.
    fn of(pod: &'a Pod) -> Option<PodView<'a>> {
        let spec = pod.spec.as_ref()?;
        if spec.host_network == Some(true) {
            return None;
        }
        let status = pod.status.as_ref()?;
        if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
            return None;
        }
        let ip = status
            .pod_ips
            .iter()
            .flatten()
            .map(|p| p.ip.as_str())
            .chain(status.pod_ip.as_deref())
            .find_map(|ip| ip.parse::<Ipv4Addr>().ok())?;
        Some(PodView {
            namespace: pod.metadata.namespace.as_deref()?,
            name: pod.metadata.name.as_deref()?,
            node: spec.node_name.as_deref(),
            labels: pod.metadata.labels.as_ref(),
            ip,
            pod,
        })
    }

    /// The number of the container port named `name` for `protocol`.
    fn named_port(&self, name: &str, protocol: Protocol) -> Option<u16> {
        let spec = self.pod.spec.as_ref()?;
        spec.containers
            .iter()
            .flat_map(|c| c.ports.iter().flatten())
            .find(|p| {
                p.name.as_deref() == Some(name)
                    && Protocol::parse(p.protocol.as_deref()) == Some(protocol)
            })
            .and_then(|p| u16::try_from(p.container_port).ok())
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    Ingress,
    Egress,
}

/// A policy with its selector parsed.
struct PolicyView<'a> {
    namespace: &'a str,
    selector: Selector,
    spec: &'a NetworkPolicySpec,
    ingress: bool,
    egress: bool,
}

impl<'a> PolicyView<'a> {
    fn of(policy: &'a NetworkPolicy) -> Option<PolicyView<'a>> {
        let spec = policy.spec.as_ref()?;
        // An absent podSelector is the empty one: every pod of the namespace.
        let all = Default::default();
        let pod_selector = spec.pod_selector.as_ref().unwrap_or(&all);
        let selector = match Selector::from_label_selector(Some(pod_selector)) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(policy = ?policy.metadata.name, error = %e, "ignoring a NetworkPolicy with a bad podSelector");
                return None;
            }
        };
        // Unset policyTypes: Ingress, and Egress when there are egress rules (the server
        // defaults it so; older stored objects may lack it).
        let (ingress, egress) = match spec.policy_types.as_deref() {
            Some(types) if !types.is_empty() => (
                types.iter().any(|t| t == "Ingress"),
                types.iter().any(|t| t == "Egress"),
            ),
            _ => (true, spec.egress.as_ref().is_some_and(|e| !e.is_empty())),
        };
        Some(PolicyView {
            namespace: policy.metadata.namespace.as_deref()?,
            selector,
            spec,
            ingress,
            egress,
        })
    }

    fn isolates(&self, pod: &PodView, direction: Direction) -> bool {
        let applies = match direction {
            Direction::Ingress => self.ingress,
            Direction::Egress => self.egress,
        };
        applies && self.namespace == pod.namespace && self.selector.matches(pod.labels)
    }
}

/// Who a rule's peers are.
enum Peers<'a> {
    Any,
    Cidrs(Vec<Cidr>),
    Pods(Vec<&'a PodView<'a>>),
}

struct World<'a> {
    pods: Vec<PodView<'a>>,
    namespace_labels: BTreeMap<&'a str, Option<&'a BTreeMap<String, String>>>,
}

impl<'a> World<'a> {
    /// The pods a pod or namespace selector peer of a policy in `namespace` selects.
    fn selected(&'a self, peer: &NetworkPolicyPeer, namespace: &str) -> Vec<&'a PodView<'a>> {
        let pods = peer
            .pod_selector
            .as_ref()
            .map(|s| Selector::from_label_selector(Some(s)));
        let namespaces = peer
            .namespace_selector
            .as_ref()
            .map(|s| Selector::from_label_selector(Some(s)));
        let (Ok(pods), Ok(namespaces)) = (pods.transpose(), namespaces.transpose()) else {
            return Vec::new();
        };
        self.pods
            .iter()
            .filter(|p| match &namespaces {
                None => p.namespace == namespace,
                Some(s) => s.matches(self.namespace_labels.get(p.namespace).copied().flatten()),
            })
            .filter(|p| pods.as_ref().is_none_or(|s| s.matches(p.labels)))
            .collect()
    }

    fn peers(&'a self, peer: &NetworkPolicyPeer, namespace: &str) -> Peers<'a> {
        match &peer.ip_block {
            Some(block) => {
                let Some(cidr) = Cidr::parse(&block.cidr) else {
                    return Peers::Cidrs(Vec::new());
                };
                let mut cidrs = vec![cidr];
                for hole in block.except.iter().flatten().filter_map(|e| Cidr::parse(e)) {
                    cidrs = cidrs.into_iter().flat_map(|c| c.minus(&hole)).collect();
                }
                Peers::Cidrs(cidrs)
            }
            None => Peers::Pods(self.selected(peer, namespace)),
        }
    }

    /// What one rule (its peers and ports) lets through for `pod`.
    fn rule(
        &'a self,
        pod: &PodView,
        direction: Direction,
        namespace: &str,
        peers: Option<&Vec<NetworkPolicyPeer>>,
        ports: Option<&Vec<NetworkPolicyPort>>,
        out: &mut Vec<Allow>,
    ) {
        let peers: Vec<Peers> = match peers {
            Some(peers) if !peers.is_empty() => {
                peers.iter().map(|p| self.peers(p, namespace)).collect()
            }
            _ => vec![Peers::Any],
        };
        let ports: Vec<Option<&NetworkPolicyPort>> = match ports {
            Some(ports) if !ports.is_empty() => ports.iter().map(Some).collect(),
            _ => vec![None],
        };
        for port in ports {
            for peers in &peers {
                self.allow(pod, direction, peers, port, out);
            }
        }
    }

    fn allow(
        &'a self,
        pod: &PodView,
        direction: Direction,
        peers: &Peers<'a>,
        port: Option<&NetworkPolicyPort>,
        out: &mut Vec<Allow>,
    ) {
        let Some(port) = port else {
            push_peers(peers, None, out);
            return;
        };
        let Some(protocol) = Protocol::parse(port.protocol.as_deref()) else {
            return;
        };
        let name = match &port.port {
            None => {
                let m = PortMatch {
                    protocol,
                    ports: None,
                };
                return push_peers(peers, Some(m), out);
            }
            Some(IntOrString::Int(n)) => {
                let (Ok(from), Ok(to)) = (
                    u16::try_from(*n),
                    u16::try_from(port.end_port.unwrap_or(*n)),
                ) else {
                    return;
                };
                let m = PortMatch {
                    protocol,
                    ports: Some((from, to.max(from))),
                };
                return push_peers(peers, Some(m), out);
            }
            Some(IntOrString::String(name)) => name,
        };
        // A named port is the number the receiving pod gives that name: this pod's for
        // ingress, each peer pod's for egress (peers given as CIDRs or as "anyone" stand for
        // the pods inside them).
        let named = |p: &PodView| {
            p.named_port(name, protocol).map(|n| PortMatch {
                protocol,
                ports: Some((n, n)),
            })
        };
        if direction == Direction::Ingress {
            if let Some(m) = named(pod) {
                push_peers(peers, Some(m), out);
            }
            return;
        }
        let receivers: Vec<&PodView> = match peers {
            Peers::Any => self.pods.iter().collect(),
            Peers::Cidrs(cidrs) => self
                .pods
                .iter()
                .filter(|p| cidrs.iter().any(|c| c.contains(p.ip)))
                .collect(),
            Peers::Pods(pods) => pods.clone(),
        };
        for p in receivers {
            if let Some(m) = named(p) {
                out.push(Allow {
                    peer: Some(Cidr::host(p.ip)),
                    port: Some(m),
                });
            }
        }
    }
}

fn push_peers(peers: &Peers, port: Option<PortMatch>, out: &mut Vec<Allow>) {
    match peers {
        Peers::Any => out.push(Allow { peer: None, port }),
        Peers::Cidrs(cidrs) => out.extend(cidrs.iter().map(|c| Allow {
            peer: Some(*c),
            port,
        })),
        Peers::Pods(pods) => out.extend(pods.iter().map(|p| Allow {
            peer: Some(Cidr::host(p.ip)),
            port,
        })),
    }
}

/// The rules of every pod on `node` that some policy isolates, ordered by pod key; the
/// allows of each are sorted and without duplicates.
pub fn pod_rules(
    node: &str,
    pods: &[Arc<Pod>],
    namespaces: &[Arc<Namespace>],
    policies: &[Arc<NetworkPolicy>],
) -> Vec<PodRules> {
    let policies: Vec<PolicyView> = policies.iter().filter_map(|p| PolicyView::of(p)).collect();
    if policies.is_empty() {
        return Vec::new();
    }
    let world = World {
        pods: pods.iter().filter_map(|p| PodView::of(p)).collect(),
        namespace_labels: namespaces
            .iter()
            .filter_map(|n| Some((n.metadata.name.as_deref()?, n.metadata.labels.as_ref())))
            .collect(),
    };
    let mut out: Vec<PodRules> = world
        .pods
        .iter()
        .filter(|p| p.node == Some(node))
        .filter_map(|pod| {
            let ingress = world.direction(pod, &policies, Direction::Ingress);
            let egress = world.direction(pod, &policies, Direction::Egress);
            (ingress.is_some() || egress.is_some()).then(|| PodRules {
                key: format!("{}/{}", pod.namespace, pod.name),
                ip: pod.ip,
                ingress,
                egress,
            })
        })
        .collect();
    out.sort_by(|a, b| a.key.cmp(&b.key));
    out
}

impl<'a> World<'a> {
    /// The union of the rules of every policy isolating `pod` in `direction`; `None` when none
    /// does.
    fn direction(
        &'a self,
        pod: &PodView,
        policies: &[PolicyView],
        direction: Direction,
    ) -> Option<Vec<Allow>> {
        let mut isolated = false;
        let mut allows = Vec::new();
        for policy in policies.iter().filter(|p| p.isolates(pod, direction)) {
            isolated = true;
            match direction {
                Direction::Ingress => {
                    for rule in policy.spec.ingress.iter().flatten() {
                        self.rule(
                            pod,
                            direction,
                            policy.namespace,
                            rule.from.as_ref(),
                            rule.ports.as_ref(),
                            &mut allows,
                        );
                    }
                }
                Direction::Egress => {
                    for rule in policy.spec.egress.iter().flatten() {
                        self.rule(
                            pod,
                            direction,
                            policy.namespace,
                            rule.to.as_ref(),
                            rule.ports.as_ref(),
                            &mut allows,
                        );
                    }
                }
            }
        }
        allows.sort();
        allows.dedup();
        isolated.then_some(allows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(ns: &str, name: &str, node: &str, ip: &str, labels: serde_json::Value) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"namespace": ns, "name": name, "labels": labels},
                "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i",
                    "ports": [{"name": "http", "containerPort": 8080}]}]},
                "status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]},
            }))
            .unwrap(),
        )
    }

    fn namespace(name: &str, labels: serde_json::Value) -> Arc<Namespace> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap(),
        )
    }

    fn policy(ns: &str, name: &str, spec: serde_json::Value) -> Arc<NetworkPolicy> {
        Arc::new(
            serde_json::from_value(
                json!({"metadata": {"namespace": ns, "name": name}, "spec": spec}),
            )
            .unwrap(),
        )
    }

    fn cidr(s: &str) -> Option<Cidr> {
        Some(Cidr::parse(s).unwrap())
    }

    fn tcp(from: u16, to: u16) -> Option<PortMatch> {
        Some(PortMatch {
            protocol: Protocol::Tcp,
            ports: Some((from, to)),
        })
    }

    fn world() -> (Vec<Arc<Pod>>, Vec<Arc<Namespace>>) {
        let pods = vec![
            pod("a", "web", "n1", "10.244.0.2", json!({"app": "web"})),
            pod("a", "client", "n2", "10.244.1.2", json!({"role": "client"})),
            pod("a", "other", "n2", "10.244.1.3", json!({})),
            pod("b", "client", "n2", "10.244.1.4", json!({"role": "client"})),
        ];
        let namespaces = vec![
            namespace("a", json!({"kubernetes.io/metadata.name": "a"})),
            namespace(
                "b",
                json!({"kubernetes.io/metadata.name": "b", "team": "x"}),
            ),
        ];
        (pods, namespaces)
    }

    #[test]
    fn pods_no_policy_selects_are_not_isolated() {
        let (pods, namespaces) = world();
        let p = policy(
            "a",
            "p",
            json!({"podSelector": {"matchLabels": {"app": "db"}}}),
        );
        assert!(pod_rules("n1", &pods, &namespaces, &[p]).is_empty());
    }

    #[test]
    fn an_empty_ingress_policy_denies_all_ingress_but_not_egress() {
        let (pods, namespaces) = world();
        let p = policy(
            "a",
            "deny",
            json!({"podSelector": {}, "policyTypes": ["Ingress"]}),
        );
        let rules = pod_rules("n1", &pods, &namespaces, &[p]);
        assert_eq!(
            rules,
            [PodRules {
                key: "a/web".into(),
                ip: "10.244.0.2".parse().unwrap(),
                ingress: Some(vec![]),
                egress: None,
            }]
        );
    }

    #[test]
    fn pod_selector_peers_are_pods_of_the_policys_namespace() {
        let (pods, namespaces) = world();
        let p = policy(
            "a",
            "p",
            json!({"podSelector": {"matchLabels": {"app": "web"}},
                   "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "client"}}}],
                                "ports": [{"port": 80}]}]}),
        );
        let rules = pod_rules("n1", &pods, &namespaces, &[p]);
        assert_eq!(
            rules[0].ingress.as_deref().unwrap(),
            [Allow {
                peer: cidr("10.244.1.2/32"),
                port: tcp(80, 80),
            }]
        );
        assert_eq!(rules[0].egress, None);
    }

    #[test]
    fn namespace_selectors_alone_and_with_pod_selectors() {
        let (pods, namespaces) = world();
        let alone = policy(
            "a",
            "p",
            json!({"podSelector": {},
                   "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "x"}}}]}]}),
        );
        let rules = pod_rules("n1", &pods, &namespaces, &[alone]);
        assert_eq!(
            rules[0].ingress.as_deref().unwrap(),
            [Allow {
                peer: cidr("10.244.1.4/32"),
                port: None,
            }]
        );
        // Both in one peer: clients in every namespace; in two peers: either.
        let both = policy(
            "a",
            "p",
            json!({"podSelector": {},
                   "ingress": [{"from": [{"namespaceSelector": {},
                                          "podSelector": {"matchLabels": {"role": "client"}}}]}]}),
        );
        let peers: Vec<_> = pod_rules("n1", &pods, &namespaces, &[both])[0]
            .ingress
            .clone()
            .unwrap()
            .into_iter()
            .map(|a| a.peer.unwrap().to_string())
            .collect();
        assert_eq!(peers, ["10.244.1.2/32", "10.244.1.4/32"]);
    }

    #[test]
    fn ip_blocks_lose_their_exceptions() {
        let (pods, namespaces) = world();
        let p = policy(
            "a",
            "p",
            json!({"podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Egress"],
                   "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/8",
                                                   "except": ["10.244.0.0/16", "10.128.0.0/9"]}}],
                               "ports": [{"protocol": "UDP", "port": 53}]}]}),
        );
        let rules = pod_rules("n1", &pods, &namespaces, &[p]);
        assert_eq!(rules[0].ingress, None);
        let allowed: Vec<String> = rules[0]
            .egress
            .iter()
            .flatten()
            .map(|a| a.peer.unwrap().to_string())
            .collect();
        // The first hole splits the CIDR into eight; the second removes the upper seven.
        assert_eq!(allowed, ["10.0.0.0/9"]);
        let only_pods = policy(
            "a",
            "q",
            json!({"podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Egress"],
                   "egress": [{"to": [{"ipBlock": {"cidr": "10.240.0.0/12",
                                                   "except": ["10.244.0.0/16"]}}]}]}),
        );
        let allowed: Vec<String> = pod_rules("n1", &pods, &namespaces, &[only_pods])[0]
            .egress
            .iter()
            .flatten()
            .map(|a| a.peer.unwrap().to_string())
            .collect();
        assert_eq!(
            allowed,
            [
                "10.240.0.0/14",
                "10.245.0.0/16",
                "10.246.0.0/15",
                "10.248.0.0/13"
            ]
        );
    }

    #[test]
    fn named_ports_are_the_receivers_numbers_and_ranges_reach_end_port() {
        let (pods, namespaces) = world();
        let p = policy(
            "a",
            "p",
            json!({"podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Ingress", "Egress"],
                   "ingress": [{"ports": [{"port": "http"}, {"port": "nope"}, {"port": 9000, "endPort": 9010}]}],
                   "egress": [{"to": [{"podSelector": {"matchLabels": {"role": "client"}}}],
                               "ports": [{"port": "http"}]}]}),
        );
        let rules = &pod_rules("n1", &pods, &namespaces, &[p])[0];
        assert_eq!(
            rules.ingress.as_deref().unwrap(),
            [
                Allow {
                    peer: None,
                    port: tcp(8080, 8080)
                },
                Allow {
                    peer: None,
                    port: tcp(9000, 9010)
                },
            ]
        );
        assert_eq!(
            rules.egress.as_deref().unwrap(),
            [Allow {
                peer: cidr("10.244.1.2/32"),
                port: tcp(8080, 8080),
            }]
        );
    }

    #[test]
    fn rules_of_several_policies_add_up_and_only_local_pods_get_rules() {
        let (pods, namespaces) = world();
        let deny = policy(
            "a",
            "deny",
            json!({"podSelector": {}, "policyTypes": ["Ingress"]}),
        );
        let allow = policy(
            "a",
            "allow",
            json!({"podSelector": {"matchLabels": {"app": "web"}},
                   "ingress": [{"from": [{"podSelector": {}}]}]}),
        );
        let on_n2 = pod_rules("n2", &pods, &namespaces, &[deny.clone(), allow.clone()]);
        let keys: Vec<&str> = on_n2.iter().map(|r| r.key.as_str()).collect();
        assert_eq!(keys, ["a/client", "a/other"]);
        assert!(on_n2.iter().all(|r| r.ingress.as_deref() == Some(&[][..])));
        let on_n1 = pod_rules("n1", &pods, &namespaces, &[deny, allow]);
        assert_eq!(on_n1[0].ingress.as_ref().unwrap().len(), 3, "{on_n1:?}");
    }

    #[test]
    fn host_network_and_finished_pods_are_left_alone() {
        let (mut pods, namespaces) = world();
        let mut host = (*pods[0]).clone();
        host.spec.as_mut().unwrap().host_network = Some(true);
        pods[0] = Arc::new(host);
        let deny = policy("a", "deny", json!({"podSelector": {}}));
        assert!(pod_rules("n1", &pods, &namespaces, &[deny]).is_empty());
    }
}
