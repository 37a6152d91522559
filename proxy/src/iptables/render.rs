//! The whole ruleset as one pure function of what the API says, in iptables-save format, so a
//! sync is a single `iptables-restore` and tests compare text. The chain layout, names, comments
//! and match order follow kube-proxy's iptables mode (`pkg/proxy/iptables/proxier.go`), so
//! anyone who knows `iptables-save` output of a Kubernetes node can read ours.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use sha2::{Digest, Sha256};

use crate::endpoints::{
    Endpoint, ServiceFacts, is_headless, port_endpoints, service_key, slices_by_service,
};

/// The mark bit kube-proxy uses for "masquerade this" (`--iptables-masquerade-bit` 14).
pub const MASQ_MARK: &str = "0x4000";

/// Static chains of the nat table, created and owned by the proxier.
pub const NAT_CHAINS: [&str; 4] = [
    "KUBE-SERVICES",
    "KUBE-NODEPORTS",
    "KUBE-POSTROUTING",
    "KUBE-MARK-MASQ",
];
/// Static chains of the filter table.
pub const FILTER_CHAINS: [&str; 6] = [
    "KUBE-NODEPORTS",
    "KUBE-SERVICES",
    "KUBE-EXTERNAL-SERVICES",
    "KUBE-FIREWALL",
    "KUBE-FORWARD",
    "KUBE-PROXY-FIREWALL",
];
/// Prefixes of the per-service chains, which come and go with services.
pub const SERVICE_CHAIN_PREFIXES: [&str; 5] = [
    "KUBE-SVC-",
    "KUBE-SEP-",
    "KUBE-EXT-",
    "KUBE-SVL-",
    "KUBE-FW-",
];

/// The node-specific settings of the proxier (kube-proxy's flags).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProxyConfig {
    /// This node's name: endpoints on it are "local" for externalTrafficPolicy Local.
    pub hostname: String,
    /// Pod traffic comes from here; traffic from elsewhere to a cluster IP is masqueraded.
    pub cluster_cidr: Option<String>,
    /// Masquerade all traffic to cluster IPs (`--masquerade-all`).
    pub masquerade_all: bool,
}

/// What the rules are rendered from: the proxier's view of the API.
#[derive(Clone, Debug, Default)]
pub struct ProxyState {
    pub config: ProxyConfig,
    pub services: Vec<Service>,
    pub slices: Vec<EndpointSlice>,
}

/// `KUBE-SVC-`/`KUBE-EXT-`/... + the first 16 base32 characters of sha256(name + protocol),
/// as upstream's `portProtoHash`: the name must fit iptables' 28 characters.
pub fn chain_name(prefix: &str, service_port: &str, protocol: &str) -> String {
    hashed(prefix, &format!("{service_port}{protocol}"))
}

/// `KUBE-SEP-` + hash of service port, protocol and `ip:port`.
pub fn endpoint_chain_name(service_port: &str, protocol: &str, endpoint: &str) -> String {
    hashed("KUBE-SEP-", &format!("{service_port}{protocol}{endpoint}"))
}

pub(crate) fn hashed(prefix: &str, input: &str) -> String {
    let digest = Sha256::digest(input.as_bytes());
    let encoded = data_encoding::BASE32.encode(&digest);
    format!("{prefix}{}", &encoded[..16])
}

/// One table being rendered: chains in the order declared, each with its rules in the order
/// written. The index keeps declaring and appending O(1) with tens of thousands of chains.
struct Table {
    name: &'static str,
    chains: Vec<(String, Vec<String>)>,
    index: HashMap<String, usize>,
}

impl Table {
    fn new(name: &'static str, chains: &[&str]) -> Table {
        let mut t = Table {
            name,
            chains: Vec::new(),
            index: HashMap::new(),
        };
        for c in chains {
            t.chain(c);
        }
        t
    }

    fn chain(&mut self, chain: &str) -> usize {
        if let Some(&i) = self.index.get(chain) {
            return i;
        }
        self.chains.push((chain.to_string(), Vec::new()));
        self.index.insert(chain.to_string(), self.chains.len() - 1);
        self.chains.len() - 1
    }

    fn rule(&mut self, chain: &str, args: &[&str]) {
        let index = self.chain(chain);
        let mut line = format!("-A {chain}");
        let mut iter = args.iter();
        while let Some(arg) = iter.next() {
            line.push(' ');
            line.push_str(arg);
            if *arg == "--comment"
                && let Some(comment) = iter.next()
            {
                line.push(' ');
                line.push_str(&quote(comment));
            }
        }
        self.chains[index].1.push(line);
    }

    fn finish(self) -> RenderedTable {
        RenderedTable {
            name: self.name,
            chains: self.chains,
        }
    }
}

/// The rendered rules of one table: every chain the proxier owns there, in declaration order,
/// with its complete list of `-A` lines.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RenderedTable {
    pub name: &'static str,
    pub chains: Vec<(String, Vec<String>)>,
}

impl RenderedTable {
    fn write(&self, out: &mut String) {
        let _ = writeln!(out, "*{}", self.name);
        for (c, _) in &self.chains {
            let _ = writeln!(out, ":{c} - [0:0]");
        }
        for (_, rules) in &self.chains {
            for line in rules {
                out.push_str(line);
                out.push('\n');
            }
        }
        out.push_str("COMMIT\n");
    }
}

/// The whole ruleset (filter, then nat), kept structured so a sync can compare it chain by
/// chain with what it applied last and rewrite only what changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ruleset {
    pub tables: Vec<RenderedTable>,
}

impl Ruleset {
    /// The complete ruleset in iptables-restore format.
    pub fn to_restore(&self) -> String {
        let mut out = String::with_capacity(self.tables.iter().map(table_size).sum());
        for t in &self.tables {
            t.write(&mut out);
        }
        out
    }

    /// Rules (`-A` lines) and chains in all tables.
    pub fn counts(&self) -> (usize, usize) {
        let chains = self.tables.iter().map(|t| t.chains.len()).sum();
        let rules = self
            .tables
            .iter()
            .flat_map(|t| &t.chains)
            .map(|(_, r)| r.len())
            .sum();
        (chains, rules)
    }
}

fn table_size(t: &RenderedTable) -> usize {
    t.chains
        .iter()
        .map(|(c, rules)| c.len() + 10 + rules.iter().map(|r| r.len() + 1).sum::<usize>())
        .sum::<usize>()
        + 32
}

/// What a partial sync must restore to get from `applied` (the ruleset the previous sync put in
/// the kernel) to `next`: only the chains whose rules changed or that are new are declared
/// (which flushes them) and rewritten, service chains that disappeared are flushed and deleted,
/// and every other chain is left alone (`--noflush`). Tables without changes are left out;
/// `None` when nothing changed at all. Upstream's partial sync is coarser (it always rewrites
/// the static chains such as KUBE-SERVICES and skips only unchanged services' chains) but rests
/// on the same premise: the kernel still holds what the previous sync wrote.
pub fn partial_restore(applied: &Ruleset, next: &Ruleset) -> Option<String> {
    let mut out = String::new();
    for table in &next.tables {
        let before: HashMap<&str, &Vec<String>> = applied
            .tables
            .iter()
            .filter(|t| t.name == table.name)
            .flat_map(|t| &t.chains)
            .map(|(c, r)| (c.as_str(), r))
            .collect();
        let changed: Vec<&(String, Vec<String>)> = table
            .chains
            .iter()
            .filter(|(c, rules)| before.get(c.as_str()) != Some(&rules))
            .collect();
        let kept: BTreeSet<&str> = table.chains.iter().map(|(c, _)| c.as_str()).collect();
        let stale: Vec<&str> = before
            .keys()
            .copied()
            .filter(|c| {
                !kept.contains(c) && SERVICE_CHAIN_PREFIXES.iter().any(|p| c.starts_with(p))
            })
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        if changed.is_empty() && stale.is_empty() {
            continue;
        }
        let _ = writeln!(out, "*{}", table.name);
        for (c, _) in &changed {
            let _ = writeln!(out, ":{c} - [0:0]");
        }
        for c in &stale {
            let _ = writeln!(out, ":{c} - [0:0]");
        }
        for (_, rules) in &changed {
            for line in rules {
                out.push_str(line);
                out.push('\n');
            }
        }
        for c in &stale {
            let _ = writeln!(out, "-X {c}");
        }
        out.push_str("COMMIT\n");
    }
    (!out.is_empty()).then_some(out)
}

/// iptables-save quotes a comment that has spaces.
fn quote(comment: &str) -> String {
    if comment.contains(' ') {
        format!("\"{comment}\"")
    } else {
        comment.to_string()
    }
}

/// Renders the filter and nat tables for `state` in iptables-restore format.
pub fn render(state: &ProxyState) -> String {
    render_rules(state).to_restore()
}

/// Renders the filter and nat tables for `state`, chain by chain.
pub fn render_rules(state: &ProxyState) -> Ruleset {
    let mut filter = Table::new("filter", &FILTER_CHAINS);
    let mut nat = Table::new("nat", &NAT_CHAINS);

    filter.rule(
        "KUBE-FIREWALL",
        &[
            "-m",
            "comment",
            "--comment",
            "block incoming localnet connections",
            "-d",
            "127.0.0.0/8",
            "!",
            "-s",
            "127.0.0.0/8",
            "-m",
            "conntrack",
            "!",
            "--ctstate",
            "RELATED,ESTABLISHED,DNAT",
            "-j",
            "DROP",
        ],
    );
    filter.rule(
        "KUBE-FORWARD",
        &["-m", "conntrack", "--ctstate", "INVALID", "-j", "DROP"],
    );
    let masq_match = format!("{MASQ_MARK}/{MASQ_MARK}");
    filter.rule(
        "KUBE-FORWARD",
        &[
            "-m",
            "comment",
            "--comment",
            "kubernetes forwarding rules",
            "-m",
            "mark",
            "--mark",
            &masq_match,
            "-j",
            "ACCEPT",
        ],
    );
    filter.rule(
        "KUBE-FORWARD",
        &[
            "-m",
            "comment",
            "--comment",
            "kubernetes forwarding conntrack rule",
            "-m",
            "conntrack",
            "--ctstate",
            "RELATED,ESTABLISHED",
            "-j",
            "ACCEPT",
        ],
    );

    nat.rule(
        "KUBE-POSTROUTING",
        &["-m", "mark", "!", "--mark", &masq_match, "-j", "RETURN"],
    );
    nat.rule("KUBE-POSTROUTING", &["-j", "MARK", "--xor-mark", MASQ_MARK]);
    nat.rule(
        "KUBE-POSTROUTING",
        &[
            "-m",
            "comment",
            "--comment",
            "kubernetes service traffic requiring SNAT",
            "-j",
            "MASQUERADE",
            "--random-fully",
        ],
    );
    nat.rule("KUBE-MARK-MASQ", &["-j", "MARK", "--or-mark", MASQ_MARK]);

    let slices = slices_by_service(&state.slices);
    let mut services: Vec<&Service> = state.services.iter().collect();
    services.sort_by_key(|s| service_key(s));
    for svc in services {
        if is_headless(svc) {
            continue;
        }
        let (ns, name) = service_key(svc);
        let own = slices
            .get(&(ns.as_str(), name.as_str()))
            .map(Vec::as_slice)
            .unwrap_or_default();
        service_rules(state, svc, own, &mut filter, &mut nat);
    }

    nat.rule(
        "KUBE-SERVICES",
        &[
            "-m",
            "comment",
            "--comment",
            "kubernetes service nodeports; NOTE: this must be the last rule in this chain",
            "-m",
            "addrtype",
            "--dst-type",
            "LOCAL",
            "-j",
            "KUBE-NODEPORTS",
        ],
    );

    Ruleset {
        tables: vec![filter.finish(), nat.finish()],
    }
}

fn service_rules(
    state: &ProxyState,
    svc: &Service,
    slices: &[&EndpointSlice],
    filter: &mut Table,
    nat: &mut Table,
) {
    let (ns, name) = service_key(svc);
    let Some(spec) = &svc.spec else { return };
    let Some(ServiceFacts {
        cluster_ip,
        external_ips,
        lb_ips,
        node_port_type,
        affinity_timeout,
        external_local,
    }) = ServiceFacts::of(svc)
    else {
        return;
    };

    for port in spec.ports.iter().flatten() {
        let protocol = port.protocol.as_deref().unwrap_or("TCP");
        let proto = protocol.to_lowercase();
        let port_name = port.name.as_deref().unwrap_or("");
        let spn = if port_name.is_empty() {
            format!("{ns}/{name}")
        } else {
            format!("{ns}/{name}:{port_name}")
        };
        let svc_port = port.port.to_string();
        let node_port = port
            .node_port
            .filter(|_| node_port_type)
            .map(|p| p.to_string());
        let endpoints = port_endpoints(slices, port_name, protocol);
        let has_external = node_port.is_some() || !external_ips.is_empty() || !lb_ips.is_empty();

        if endpoints.is_empty() {
            let comment = format!("{spn} has no endpoints");
            filter.rule(
                "KUBE-SERVICES",
                &[
                    "-m",
                    "comment",
                    "--comment",
                    &comment,
                    "-m",
                    &proto,
                    "-p",
                    &proto,
                    "-d",
                    cluster_ip,
                    "--dport",
                    &svc_port,
                    "-j",
                    "REJECT",
                ],
            );
            for ip in external_ips.iter().chain(&lb_ips) {
                filter.rule(
                    "KUBE-EXTERNAL-SERVICES",
                    &[
                        "-m",
                        "comment",
                        "--comment",
                        &comment,
                        "-m",
                        &proto,
                        "-p",
                        &proto,
                        "-d",
                        ip,
                        "--dport",
                        &svc_port,
                        "-j",
                        "REJECT",
                    ],
                );
            }
            if let Some(np) = &node_port {
                filter.rule(
                    "KUBE-EXTERNAL-SERVICES",
                    &[
                        "-m",
                        "comment",
                        "--comment",
                        &comment,
                        "-m",
                        "addrtype",
                        "--dst-type",
                        "LOCAL",
                        "-m",
                        &proto,
                        "-p",
                        &proto,
                        "--dport",
                        np,
                        "-j",
                        "REJECT",
                    ],
                );
            }
            continue;
        }

        let svc_chain = chain_name("KUBE-SVC-", &spn, &proto);
        let ext_chain = chain_name("KUBE-EXT-", &spn, &proto);
        let local_chain = chain_name("KUBE-SVL-", &spn, &proto);
        nat.chain(&svc_chain);

        let cluster_comment = format!("{spn} cluster IP");
        nat.rule(
            "KUBE-SERVICES",
            &[
                "-m",
                "comment",
                "--comment",
                &cluster_comment,
                "-m",
                &proto,
                "-p",
                &proto,
                "-d",
                cluster_ip,
                "--dport",
                &svc_port,
                "-j",
                &svc_chain,
            ],
        );
        // Traffic to the cluster IP from outside the pod network is masqueraded so the reply
        // comes back through this node.
        let mut masq: Vec<&str> = vec![
            "-m",
            "comment",
            "--comment",
            cluster_comment.as_str(),
            "-m",
            proto.as_str(),
            "-p",
            proto.as_str(),
            "-d",
            cluster_ip,
            "--dport",
            svc_port.as_str(),
        ];
        if state.config.masquerade_all {
            masq.extend(["-j", "KUBE-MARK-MASQ"]);
            nat.rule(&svc_chain, &masq);
        } else if let Some(cidr) = &state.config.cluster_cidr {
            masq.extend(["!", "-s", cidr.as_str(), "-j", "KUBE-MARK-MASQ"]);
            nat.rule(&svc_chain, &masq);
        }

        if has_external {
            nat.chain(&ext_chain);
            for ip in &external_ips {
                nat.rule(
                    "KUBE-SERVICES",
                    &[
                        "-m",
                        "comment",
                        "--comment",
                        &format!("{spn} external IP"),
                        "-m",
                        &proto,
                        "-p",
                        &proto,
                        "-d",
                        ip,
                        "--dport",
                        &svc_port,
                        "-j",
                        &ext_chain,
                    ],
                );
            }
            for ip in &lb_ips {
                nat.rule(
                    "KUBE-SERVICES",
                    &[
                        "-m",
                        "comment",
                        "--comment",
                        &format!("{spn} loadbalancer IP"),
                        "-m",
                        &proto,
                        "-p",
                        &proto,
                        "-d",
                        ip,
                        "--dport",
                        &svc_port,
                        "-j",
                        &ext_chain,
                    ],
                );
            }
            if let Some(np) = &node_port {
                nat.rule(
                    "KUBE-NODEPORTS",
                    &[
                        "-m",
                        "comment",
                        "--comment",
                        &spn,
                        "-m",
                        &proto,
                        "-p",
                        &proto,
                        "--dport",
                        np,
                        "-j",
                        &ext_chain,
                    ],
                );
            }
            if !external_local {
                nat.rule(
                    &ext_chain,
                    &[
                        "-m",
                        "comment",
                        "--comment",
                        &format!("masquerade traffic for {spn} external destinations"),
                        "-j",
                        "KUBE-MARK-MASQ",
                    ],
                );
                nat.rule(&ext_chain, &["-j", &svc_chain]);
            } else {
                // Local policy keeps the client's address: only endpoints on this node, except
                // that pods and the node itself may still use any endpoint.
                if let Some(cidr) = &state.config.cluster_cidr {
                    nat.rule(
                        &ext_chain,
                        &[
                            "-m",
                            "comment",
                            "--comment",
                            &format!("pod traffic for {spn} external destinations"),
                            "-s",
                            cidr,
                            "-j",
                            &svc_chain,
                        ],
                    );
                }
                nat.rule(
                    &ext_chain,
                    &[
                        "-m",
                        "comment",
                        "--comment",
                        &format!("masquerade LOCAL traffic for {spn} external destinations"),
                        "-m",
                        "addrtype",
                        "--src-type",
                        "LOCAL",
                        "-j",
                        "KUBE-MARK-MASQ",
                    ],
                );
                nat.rule(
                    &ext_chain,
                    &[
                        "-m",
                        "comment",
                        "--comment",
                        &format!("route LOCAL traffic for {spn} external destinations"),
                        "-m",
                        "addrtype",
                        "--src-type",
                        "LOCAL",
                        "-j",
                        &svc_chain,
                    ],
                );
                let local: Vec<Endpoint> = endpoints
                    .iter()
                    .filter(|e| e.node_name.as_deref() == Some(state.config.hostname.as_str()))
                    .cloned()
                    .collect();
                if local.is_empty() {
                    let comment = format!("{spn} has no local endpoints");
                    for ip in external_ips.iter().chain(&lb_ips) {
                        filter.rule(
                            "KUBE-EXTERNAL-SERVICES",
                            &[
                                "-m",
                                "comment",
                                "--comment",
                                &comment,
                                "-m",
                                &proto,
                                "-p",
                                &proto,
                                "-d",
                                ip,
                                "--dport",
                                &svc_port,
                                "-j",
                                "DROP",
                            ],
                        );
                    }
                    if let Some(np) = &node_port {
                        filter.rule(
                            "KUBE-EXTERNAL-SERVICES",
                            &[
                                "-m",
                                "comment",
                                "--comment",
                                &comment,
                                "-m",
                                "addrtype",
                                "--dst-type",
                                "LOCAL",
                                "-m",
                                &proto,
                                "-p",
                                &proto,
                                "--dport",
                                np,
                                "-j",
                                "DROP",
                            ],
                        );
                    }
                } else {
                    nat.rule(&ext_chain, &["-j", &local_chain]);
                    balance(nat, &local_chain, &spn, &proto, &local, affinity_timeout);
                }
            }
        }

        balance(nat, &svc_chain, &spn, &proto, &endpoints, affinity_timeout);

        for ep in &endpoints {
            let addr = ep.addr();
            let sep = endpoint_chain_name(&spn, &proto, &addr);
            // Hairpin: an endpoint reaching itself through the service must be masqueraded,
            // or it would answer itself directly.
            nat.rule(
                &sep,
                &[
                    "-m",
                    "comment",
                    "--comment",
                    &spn,
                    "-s",
                    &ep.ip,
                    "-j",
                    "KUBE-MARK-MASQ",
                ],
            );
            let mut dnat: Vec<&str> = vec!["-m", "comment", "--comment", spn.as_str()];
            if affinity_timeout.is_some() {
                dnat.extend(["-m", "recent", "--name", sep.as_str(), "--set"]);
            }
            dnat.extend([
                "-m",
                proto.as_str(),
                "-p",
                proto.as_str(),
                "-j",
                "DNAT",
                "--to-destination",
                addr.as_str(),
            ]);
            nat.rule(&sep, &dnat);
        }
    }
}

/// The jumps from a service chain to its endpoints: sticky ones first (`-m recent`), then a
/// random choice where the i-th of n endpoints is taken with probability 1/(n-i).
fn balance(
    nat: &mut Table,
    chain: &str,
    spn: &str,
    proto: &str,
    endpoints: &[Endpoint],
    affinity_timeout: Option<i32>,
) {
    let n = endpoints.len();
    if let Some(timeout) = affinity_timeout {
        let seconds = timeout.to_string();
        for ep in endpoints {
            let addr = ep.addr();
            let sep = endpoint_chain_name(spn, proto, &addr);
            nat.rule(
                chain,
                &[
                    "-m",
                    "comment",
                    "--comment",
                    &format!("{spn} -> {addr}"),
                    "-m",
                    "recent",
                    "--name",
                    &sep,
                    "--rcheck",
                    "--seconds",
                    &seconds,
                    "--reap",
                    "-j",
                    &sep,
                ],
            );
        }
    }
    for (i, ep) in endpoints.iter().enumerate() {
        let addr = ep.addr();
        let sep = endpoint_chain_name(spn, proto, &addr);
        let comment = format!("{spn} -> {addr}");
        if i + 1 < n {
            let probability = format!("{:.10}", 1.0 / (n - i) as f64);
            nat.rule(
                chain,
                &[
                    "-m",
                    "comment",
                    "--comment",
                    &comment,
                    "-m",
                    "statistic",
                    "--mode",
                    "random",
                    "--probability",
                    &probability,
                    "-j",
                    &sep,
                ],
            );
        } else {
            nat.rule(chain, &["-m", "comment", "--comment", &comment, "-j", &sep]);
        }
    }
}

/// Chains named in an iptables-save dump of one table.
pub fn saved_chains(save: &str, table: &str) -> BTreeSet<String> {
    let mut chains = BTreeSet::new();
    let mut inside = false;
    for line in save.lines() {
        let line = line.trim();
        if let Some(t) = line.strip_prefix('*') {
            inside = t == table;
        } else if inside
            && let Some(rest) = line.strip_prefix(':')
            && let Some(chain) = rest.split_whitespace().next()
        {
            chains.insert(chain.to_string());
        }
    }
    chains
}

/// Adds to `rendered` the deletion of per-service chains that exist in the kernel (`existing`,
/// an iptables-save dump) but are no longer rendered: with `--noflush` nothing else would
/// remove them. Declaring a chain flushes it, so its rules go before `-X` removes it.
pub fn with_stale_chains_deleted(rendered: &str, existing: &str) -> String {
    let mut out = String::with_capacity(rendered.len());
    let mut table = String::new();
    let mut declared = BTreeSet::new();
    let mut rules: Vec<&str> = Vec::new();
    for line in rendered.lines() {
        if let Some(t) = line.strip_prefix('*') {
            table = t.to_string();
            declared.clear();
            rules.clear();
            out.push_str(line);
            out.push('\n');
        } else if let Some(rest) = line.strip_prefix(':') {
            if let Some(c) = rest.split_whitespace().next() {
                declared.insert(c.to_string());
            }
            out.push_str(line);
            out.push('\n');
        } else if line == "COMMIT" {
            let stale: Vec<String> = saved_chains(existing, &table)
                .into_iter()
                .filter(|c| {
                    SERVICE_CHAIN_PREFIXES.iter().any(|p| c.starts_with(p)) && !declared.contains(c)
                })
                .collect();
            for c in &stale {
                let _ = writeln!(out, ":{c} - [0:0]");
            }
            for r in rules.drain(..) {
                out.push_str(r);
                out.push('\n');
            }
            for c in &stale {
                let _ = writeln!(out, "-X {c}");
            }
            out.push_str("COMMIT\n");
        } else {
            rules.push(line);
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn chain_names_match_upstream() {
        // Values from upstream's proxier tests.
        assert_eq!(
            chain_name("KUBE-SVC-", "ns1/svc1:p80", "tcp"),
            "KUBE-SVC-XPGD46QRK7WJZT7O"
        );
        assert_eq!(
            chain_name("KUBE-EXT-", "ns2/svc2:p80", "tcp"),
            "KUBE-EXT-GNZBNJ2PO5MGZ6GT"
        );
        assert_eq!(
            endpoint_chain_name("ns1/svc1:p80", "tcp", "10.180.0.1:80"),
            "KUBE-SEP-SXIVWICOYRO3J4NJ"
        );
    }

    /// Services `web` (endpoints `ips`) and `other` (one endpoint), port 80 to 8080.
    /// One Service `default/web` on port 80 at `cluster_ip`, without endpoints.
    pub(crate) fn one_service(cluster_ip: &str) -> ProxyState {
        let svc = serde_json::from_value(serde_json::json!({
            "metadata": {"namespace": "default", "name": "web"},
            "spec": {"clusterIP": cluster_ip, "ports": [{"port": 80}]}
        }))
        .unwrap();
        ProxyState {
            services: vec![svc],
            ..ProxyState::default()
        }
    }

    pub(crate) fn web(ips: &[&str]) -> ProxyState {
        let svc: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"namespace": "default", "name": "web"},
            "spec": {"clusterIP": "10.96.0.10", "ports": [{"port": 80}]}
        }))
        .unwrap();
        let other: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"namespace": "default", "name": "other"},
            "spec": {"clusterIP": "10.96.0.11", "ports": [{"port": 80}]}
        }))
        .unwrap();
        let endpoints: Vec<_> = ips
            .iter()
            .map(|ip| serde_json::json!({"addresses": [ip]}))
            .collect();
        let slice = |svc: &str, endpoints: serde_json::Value| -> EndpointSlice {
            serde_json::from_value(serde_json::json!({
                "metadata": {"namespace": "default", "name": format!("{svc}-1"),
                             "labels": {"kubernetes.io/service-name": svc}},
                "addressType": "IPv4",
                "ports": [{"port": 8080}],
                "endpoints": endpoints,
            }))
            .unwrap()
        };
        ProxyState {
            config: ProxyConfig::default(),
            services: vec![svc, other],
            slices: vec![
                slice("web", endpoints.into()),
                slice("other", serde_json::json!([{"addresses": ["10.244.9.9"]}])),
            ],
        }
    }

    /// The chains a restore declares (and so flushes), per table.
    fn declared(restore: &str) -> Vec<String> {
        restore
            .lines()
            .filter_map(|l| l.strip_prefix(':'))
            .filter_map(|l| l.split_whitespace().next())
            .map(String::from)
            .collect()
    }

    #[test]
    fn partial_restore_rewrites_only_changed_chains() {
        let one = render_rules(&web(&["10.244.0.2"]));
        assert_eq!(partial_restore(&one, &one.clone()), None);

        let two = render_rules(&web(&["10.244.0.2", "10.244.0.3"]));
        let data = partial_restore(&one, &two).expect("a change");
        let svc = chain_name("KUBE-SVC-", "default/web", "tcp");
        let new_sep = endpoint_chain_name("default/web", "tcp", "10.244.0.3:8080");
        // The filter table did not change; in nat only the Service's chain and the new
        // endpoint's chain are declared, the old endpoint chain and KUBE-SERVICES stay.
        assert!(!data.contains("*filter"), "{data}");
        assert_eq!(
            declared(&data),
            vec![svc.clone(), new_sep.clone()],
            "{data}"
        );
        assert!(
            data.contains(&format!(
                "-A {svc} -m comment --comment \"default/web -> 10.244.0.3:8080\" -j {new_sep}"
            )),
            "{data}"
        );
        assert!(!data.contains("-X"), "{data}");
        // What the kernel gets is what a full restore would have written for those chains.
        let full = two.to_restore();
        for line in data.lines().filter(|l| l.starts_with("-A")) {
            assert!(full.contains(line), "{line}");
        }

        // Back to one endpoint: the removed endpoint's chain is flushed and deleted.
        let data = partial_restore(&two, &one).expect("a change");
        let old_sep = new_sep;
        assert_eq!(
            declared(&data),
            vec![svc.clone(), old_sep.clone()],
            "{data}"
        );
        assert!(data.ends_with(&format!("-X {old_sep}\nCOMMIT\n")), "{data}");

        // No endpoints: KUBE-SERVICES loses its jump, filter gains the REJECT, and every
        // chain of the Service goes.
        let none = render_rules(&web(&[]));
        let data = partial_restore(&one, &none).expect("a change");
        assert!(data.contains("*filter\n:KUBE-SERVICES - [0:0]\n"), "{data}");
        assert!(data.contains("has no endpoints"), "{data}");
        let old_sep = endpoint_chain_name("default/web", "tcp", "10.244.0.2:8080");
        assert!(data.contains(&format!("-X {svc}\n")), "{data}");
        assert!(data.contains(&format!("-X {old_sep}\n")), "{data}");
        let other = chain_name("KUBE-SVC-", "default/other", "tcp");
        assert!(
            !declared(&data).contains(&other),
            "the other Service's chain is untouched: {data}"
        );
    }

    #[test]
    fn stale_chains_are_flushed_and_deleted() {
        let rendered = "*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-AAA - [0:0]\n-A KUBE-SERVICES -j KUBE-SVC-AAA\nCOMMIT\n";
        let existing = "*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-AAA - [0:0]\n:KUBE-SVC-OLD - [0:0]\n:KUBE-OTHER - [0:0]\nCOMMIT\n";
        let out = with_stale_chains_deleted(rendered, existing);
        assert!(out.contains(":KUBE-SVC-AAA - [0:0]\n:KUBE-SVC-OLD - [0:0]\n-A KUBE-SERVICES"));
        assert!(out.ends_with("-X KUBE-SVC-OLD\nCOMMIT\n"));
        assert!(!out.contains("-X KUBE-SVC-AAA"));
        assert!(!out.contains("KUBE-OTHER"));
    }
}
